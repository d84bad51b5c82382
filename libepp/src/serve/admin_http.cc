#include "serve/admin_http.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/os_error.h"
#include "http/gzip_stream.h"

namespace epp::internal {
namespace {

using Clock = std::chrono::steady_clock;

// Bodies smaller than this go uncompressed (gzip's header and trailer alone are 18 bytes).
constexpr size_t kMinGzipBytes = 1024;
// Accepting stops this long after the process ran out of descriptors or memory (the listening
// socket stays readable, so a level-triggered loop would spin on it).
constexpr std::chrono::milliseconds kAcceptPause{100};

// RFC 9110 tchar: the characters of a method or header name.
bool IsTchar(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+': case '-': case '.':
    case '^': case '_': case '`': case '|': case '~':
      return true;
    default:
      return false;
  }
}

char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (Lower(a[i]) != Lower(b[i])) return false;
  return true;
}

std::string_view TrimOws(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

// Calls f on each trimmed, non-empty element of a comma-separated header value.
template <class F>
void ForEachElement(std::string_view v, F f) {
  while (!v.empty()) {
    const size_t comma = v.find(',');
    const std::string_view e = TrimOws(v.substr(0, comma));
    if (!e.empty()) f(e);
    if (comma == std::string_view::npos) break;
    v.remove_prefix(comma + 1);
  }
}

// An Accept-Encoding element ("gzip", "gzip;q=0.5", "x-gzip") that allows gzip.
bool AllowsGzip(std::string_view element) {
  const size_t semi = element.find(';');
  const std::string_view coding = TrimOws(element.substr(0, semi));
  if (!IEquals(coding, "gzip") && !IEquals(coding, "x-gzip")) return false;
  if (semi == std::string_view::npos) return true;
  std::string_view param = TrimOws(element.substr(semi + 1));
  if (param.size() < 2 || Lower(param[0]) != 'q' || param[1] != '=') return true;
  param.remove_prefix(2);
  // q=0, q=0., q=0.0, q=0.00, q=0.000: refused; any other weight allows it.
  if (param.empty() || param[0] != '0') return true;
  for (char c : param.substr(1))
    if (c != '.' && c != '0') return true;
  return false;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string DecodeComponent(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '+') {
      out.push_back(' ');
    } else if (c == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 && HexValue(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2])));
      i += 2;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

AdminResponse TextResponse(int status, std::string body) {
  AdminResponse r;
  r.status = status;
  r.content_type = "text/plain";
  r.body = std::move(body);
  return r;
}

// The answer to a refused request; the connection closes after it.
std::string RefusalBytes(int status) {
  AdminResponse r = TextResponse(status, absl::StrCat(AdminStatusText(status), "\n"));
  if (status == 405) r.headers.emplace_back("Allow", "GET, HEAD");
  return SerializeAdminResponse(r, /*head_only=*/false, /*keep_alive=*/false, /*accept_gzip=*/false);
}

enum class ConnState { kReading, kProcessing, kWriting, kLingering, kClosed };

struct Conn {
  uint64_t id = 0;
  int fd = -1;
  ConnState state = ConnState::kReading;
  uint32_t interest = EPOLLIN;
  std::string in;  // received, not yet consumed: the current request's head (and pipelined ones)
  AdminHeadScanner scan;
  std::string out;  // the answer being written
  size_t out_off = 0;
  size_t out_budget = 0;     // bytes of `out` counted in Impl::pending_out
  bool served = false;       // answered a request: later waits are keep-alive idle waits
  bool head_only = false;    // the request in progress is a HEAD
  bool close_after = false;  // close once `out` is written
  bool linger_after = false;  // ... after lingering (an error answer: the client may still send)
  size_t lingered = 0;
  Clock::time_point deadline = Clock::time_point::max();  // of the current state
  Clock::time_point since;  // when the current wait began (eviction picks the oldest)
};

struct Job {
  uint64_t conn;
  AdminRequest req;
};

struct Done {
  uint64_t conn;
  std::string bytes;
  bool close;
};

constexpr uint64_t kListenId = 0;
constexpr uint64_t kWakeId = 1;

}  // namespace

// ---------------------------------------------------------------------------------------------
// Parsing

AdminHeadScanner::Step AdminHeadScanner::Fail(int status, AdminReject why) {
  status_ = status;
  reject_ = why;
  return Step::kError;
}

AdminHeadScanner::Step AdminHeadScanner::Feed(std::string_view in, const AdminHttpOptions& limits) {
  if (status_ != 0) return Step::kError;
  if (head_end_ != 0) return Step::kComplete;
  for (; pos_ < in.size(); ++pos_) {
    if (!have_request_line_ && pos_ - line_start_ > limits.max_request_line_bytes)
      return Fail(414, AdminReject::kHeaderTooLarge);
    if (pos_ >= limits.max_head_bytes) return Fail(431, AdminReject::kHeaderTooLarge);
    if (in[pos_] != '\n') continue;
    size_t end = pos_;
    if (end > line_start_ && in[end - 1] == '\r') --end;
    const size_t length = end - line_start_;
    if (!have_request_line_) {
      if (length == 0) {  // an empty line before the request line: skipped
        request_start_ = line_start_ = pos_ + 1;
        continue;
      }
      have_request_line_ = true;
    } else if (length == 0) {
      head_end_ = ++pos_;
      return Step::kComplete;
    } else if (++header_lines_ > limits.max_header_lines) {
      return Fail(431, AdminReject::kTooManyHeaders);
    }
    line_start_ = pos_ + 1;
  }
  if (!have_request_line_ && pos_ - line_start_ > limits.max_request_line_bytes)
    return Fail(414, AdminReject::kHeaderTooLarge);
  return Step::kMore;
}

AdminParseResult ParseAdminRequestHead(std::string_view head, AdminRequest* out) {
  const AdminParseResult bad{400, AdminReject::kBadRequest};
  *out = AdminRequest();
  auto next_line = [&head](std::string_view* line) {
    const size_t nl = head.find('\n');
    if (nl == std::string_view::npos) return false;
    *line = head.substr(0, nl);
    if (!line->empty() && line->back() == '\r') line->remove_suffix(1);
    head.remove_prefix(nl + 1);
    return true;
  };
  std::string_view line;
  if (!next_line(&line)) return bad;
  // request-line = method SP request-target SP HTTP-version
  const size_t sp1 = line.find(' ');
  if (sp1 == std::string_view::npos || sp1 == 0) return bad;
  const size_t sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || sp2 == sp1 + 1) return bad;
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  for (char c : method)
    if (!IsTchar(static_cast<unsigned char>(c))) return bad;
  // Origin form only ("/path?query"); no controls, spaces or bytes past ASCII.
  if (target.front() != '/') return bad;
  for (char c : target)
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f) return bad;
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[6] != '.' || version[5] < '0' ||
      version[5] > '9' || version[7] < '0' || version[7] > '9')
    return bad;
  if (version[5] != '1') return {505, AdminReject::kBadRequest};
  const bool http10 = version[7] == '0';

  bool ended = false, has_body = false, saw_authorization = false, conn_close = false, conn_keep_alive = false;
  while (next_line(&line)) {
    if (line.empty()) {
      ended = true;
      break;
    }
    if (line.front() == ' ' || line.front() == '\t') return bad;  // obsolete line folding
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) return bad;
    const std::string_view name = line.substr(0, colon);
    for (char c : name)
      if (!IsTchar(static_cast<unsigned char>(c))) return bad;
    const std::string_view value = TrimOws(line.substr(colon + 1));
    for (char c : value)
      if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f) return bad;
    if (IEquals(name, "content-length")) {
      if (value.empty()) return bad;
      for (char c : value) {
        if (c < '0' || c > '9') return bad;
        if (c != '0') has_body = true;
      }
    } else if (IEquals(name, "transfer-encoding")) {
      has_body = true;
    } else if (IEquals(name, "connection")) {
      ForEachElement(value, [&](std::string_view e) {
        if (IEquals(e, "close")) conn_close = true;
        if (IEquals(e, "keep-alive")) conn_keep_alive = true;
      });
    } else if (IEquals(name, "authorization")) {
      if (!saw_authorization) out->authorization = std::string(value);
      saw_authorization = true;
    } else if (IEquals(name, "accept-encoding")) {
      ForEachElement(value, [&](std::string_view e) {
        if (AllowsGzip(e)) out->accept_gzip = true;
      });
    }
  }
  if (!ended || !head.empty()) return bad;
  if (method != "GET" && method != "HEAD") return {405, AdminReject::kMethod};
  if (has_body) return {413, AdminReject::kBody};
  out->method = std::string(method);
  out->target = std::string(target);
  const size_t q = target.find('?');
  out->path = std::string(target.substr(0, q));
  if (q != std::string_view::npos) out->query = DecodeAdminQuery(target.substr(q + 1));
  out->keep_alive = !conn_close && (!http10 || conn_keep_alive);
  return {};
}

std::map<std::string, std::string> DecodeAdminQuery(std::string_view query) {
  std::map<std::string, std::string> out;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view part = query.substr(0, amp);
    if (!part.empty()) {
      const size_t eq = part.find('=');
      std::string key = DecodeComponent(part.substr(0, eq));
      std::string value = eq == std::string_view::npos ? std::string() : DecodeComponent(part.substr(eq + 1));
      out.emplace(std::move(key), std::move(value));
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return out;
}

const char* AdminStatusText(int status) {
  switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

std::string SerializeAdminResponse(const AdminResponse& res, bool head_only, bool keep_alive, bool accept_gzip) {
  std::string gzipped;
  if (res.may_compress && accept_gzip && res.body.size() >= kMinGzipBytes) gzipped = GzipCompress(res.body);
  const std::string& body = gzipped.empty() ? res.body : gzipped;
  std::string out;
  out.reserve(160 + (head_only ? 0 : body.size()));
  absl::StrAppend(&out, "HTTP/1.1 ", res.status, " ", AdminStatusText(res.status), "\r\n");
  if (!res.content_type.empty()) absl::StrAppend(&out, "Content-Type: ", res.content_type, "\r\n");
  if (!gzipped.empty()) absl::StrAppend(&out, "Content-Encoding: gzip\r\n");
  if (res.may_compress) absl::StrAppend(&out, "Vary: Accept-Encoding\r\n");
  for (const auto& [name, value] : res.headers) absl::StrAppend(&out, name, ": ", value, "\r\n");
  absl::StrAppend(&out, "Content-Length: ", body.size(), "\r\n",
                  keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n", "\r\n");
  if (!head_only) out.append(body);
  return out;
}

// ---------------------------------------------------------------------------------------------
// The server

struct AdminHttpServer::Impl {
  AdminHttpOptions o;
  Handlers h;
  AdminHttpStats own_stats;
  AdminHttpStats* stats = &own_stats;
  int listen_fd = -1, epoll_fd = -1, wake_fd = -1;
  int port = 0;
  std::thread loop_thread;
  std::vector<std::thread> workers;
  std::atomic<bool> stopping{false};
  std::mutex stop_mu;
  bool stopped = false;  // under stop_mu

  // Between the loop and the workers.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> jobs;  // under mu
  std::deque<Done> done;  // under mu
  bool workers_stop = false;  // under mu

  // The loop thread's own.
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns;
  std::vector<uint64_t> dead;  // closed this round, erased from `conns` at its end
  int live = 0;
  uint64_t next_id = 2;
  size_t pending_out = 0;  // bytes of worker answers not yet written
  bool accept_paused = false;
  Clock::time_point accept_resume;
  std::vector<char> scratch;

  ~Impl() {
    for (int fd : {listen_fd, epoll_fd, wake_fd})
      if (fd >= 0) ::close(fd);
  }

  void Wake() {
    const uint64_t one = 1;
    // A full counter (never in practice) still leaves the eventfd readable: nothing is lost.
    [[maybe_unused]] const ssize_t n = ::write(wake_fd, &one, sizeof one);
  }

  void Loop() {
    scratch.resize(std::max<size_t>(o.max_head_bytes + 1, 16 * 1024));
    std::vector<epoll_event> events(64);
    while (!stopping.load()) {
      const int n = ::epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), TimeoutMs(Clock::now()));
      if (stopping.load()) break;
      if (n < 0 && errno != EINTR) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // cannot happen with valid descriptors
        continue;
      }
      const Clock::time_point now = Clock::now();
      for (int i = 0; i < n; ++i) {
        const uint64_t id = events[i].data.u64;
        if (id == kListenId) {
          AcceptAll(now);
        } else if (id == kWakeId) {
          uint64_t count;
          while (::read(wake_fd, &count, sizeof count) > 0) {
          }
        } else {
          OnEvent(id, events[i].events, now);
        }
      }
      TakeDone(now);
      Expire(Clock::now());
      Reap();
    }
    for (auto& [id, c] : conns) Close(*c);
    Reap();
    if (listen_fd >= 0) ::close(listen_fd);
    listen_fd = -1;
  }

  int TimeoutMs(Clock::time_point now) const {
    Clock::time_point next = Clock::time_point::max();
    if (accept_paused) next = accept_resume;
    for (const auto& [id, c] : conns)
      if (c->state != ConnState::kClosed) next = std::min(next, c->deadline);
    if (next == Clock::time_point::max()) return -1;
    if (next <= now) return 0;
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(next - now).count();
    return static_cast<int>(std::min<int64_t>(ms, 3'600'000));
  }

  void AcceptAll(Clock::time_point now) {
    for (;;) {
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
          accept_paused = true;
          accept_resume = now + kAcceptPause;
        }
        return;  // EAGAIN: all accepted
      }
      stats->connections.fetch_add(1, std::memory_order_relaxed);
      if (live >= std::max(1, o.max_connections) && !EvictOne()) {
        stats->connection_cap.fetch_add(1, std::memory_order_relaxed);
        ::close(fd);
        continue;
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto c = std::make_unique<Conn>();
      c->id = next_id++;
      c->fd = fd;
      c->since = now;
      c->deadline = now + o.header_timeout;  // the first request's head: from accept
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = c->id;
      if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        ::close(fd);
        continue;
      }
      ++live;
      stats->connections_open.fetch_add(1, std::memory_order_relaxed);
      conns.emplace(c->id, std::move(c));
    }
  }

  // Makes room for a new connection: closes the waiting connection that has waited longest
  // (lingering first, then idle keep-alive, then one still sending its head). False when every
  // connection has a request being answered.
  bool EvictOne() {
    Conn* best = nullptr;
    int best_rank = 0;
    for (auto& [id, c] : conns) {
      int rank;
      if (c->state == ConnState::kLingering) {
        rank = 0;
      } else if (c->state == ConnState::kReading) {
        rank = c->in.empty() && c->served ? 1 : 2;
      } else {
        continue;
      }
      if (!best || rank < best_rank || (rank == best_rank && c->since < best->since)) {
        best = c.get();
        best_rank = rank;
      }
    }
    if (!best) return false;
    if (best_rank > 0) stats->evicted.fetch_add(1, std::memory_order_relaxed);
    Close(*best);
    return true;
  }

  void Close(Conn& c) {
    if (c.state == ConnState::kClosed) return;
    ::close(c.fd);  // leaves the epoll set with it
    c.fd = -1;
    pending_out -= c.out_budget;
    c.out_budget = 0;
    std::string().swap(c.in);
    std::string().swap(c.out);
    c.state = ConnState::kClosed;
    --live;
    stats->connections_open.fetch_sub(1, std::memory_order_relaxed);
    dead.push_back(c.id);
  }

  void Reap() {
    for (uint64_t id : dead) conns.erase(id);
    dead.clear();
  }

  void SetInterest(Conn& c, uint32_t events) {
    if (c.interest == events) return;
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = c.id;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c.fd, &ev);
    c.interest = events;
  }

  void OnEvent(uint64_t id, uint32_t events, Clock::time_point now) {
    auto it = conns.find(id);
    if (it == conns.end()) return;
    Conn& c = *it->second;
    if (c.state == ConnState::kClosed) return;
    if (events & EPOLLERR) {
      Close(c);
      return;
    }
    switch (c.state) {
      case ConnState::kReading:
        Read(c, now);
        break;
      case ConnState::kWriting:
        Drive(c, now);
        break;
      case ConnState::kLingering:
        DrainLinger(c);
        break;
      case ConnState::kProcessing:
        if (events & EPOLLHUP) Close(c);  // the client is gone; its answer will be dropped
        break;
      case ConnState::kClosed:
        break;
    }
  }

  void Read(Conn& c, Clock::time_point now) {
    // Never more than one byte past the head limit: a head that long is refused anyway.
    const size_t room = o.max_head_bytes + 1 - std::min(c.in.size(), o.max_head_bytes);
    ssize_t n;
    do {
      n = ::recv(c.fd, scratch.data(), std::min(room, scratch.size()), 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {  // the client closed (or reset) the connection
      Close(c);
      return;
    }
    if (c.in.empty()) {
      c.since = now;
      // A later request's head has header_timeout from its first byte (the first one's runs from accept).
      if (c.served) c.deadline = now + o.header_timeout;
    }
    c.in.append(scratch.data(), static_cast<size_t>(n));
    Drive(c, now);
  }

  // Moves the connection on as far as it goes without blocking: parses complete heads, answers
  // or hands them to a worker, writes answers, and goes back to reading after keep-alive ones.
  void Drive(Conn& c, Clock::time_point now) {
    for (;;) {
      if (c.state == ConnState::kReading) {
        if (c.in.empty()) return;
        const AdminHeadScanner::Step step = c.scan.Feed(c.in, o);
        if (step == AdminHeadScanner::Step::kMore) return;
        if (step == AdminHeadScanner::Step::kError) {
          Refuse(c, c.scan.status(), c.scan.reject(), now);
          continue;
        }
        AdminRequest req;
        const std::string_view head =
            std::string_view(c.in).substr(c.scan.request_start(), c.scan.head_end() - c.scan.request_start());
        const AdminParseResult parsed = ParseAdminRequestHead(head, &req);
        c.in.erase(0, c.scan.head_end());
        c.scan.Reset();
        if (parsed.status != 0) {
          Refuse(c, parsed.status, parsed.reject, now);
          continue;
        }
        Dispatch(c, std::move(req), now);
        continue;
      }
      if (c.state != ConnState::kWriting || !Flush(c)) return;
      // The answer is out.
      pending_out -= c.out_budget;
      c.out_budget = 0;
      std::string().swap(c.out);
      c.out_off = 0;
      if (c.close_after) {
        if (c.linger_after) {
          StartLinger(c, now);
        } else {
          Close(c);
        }
        return;
      }
      c.state = ConnState::kReading;
      c.served = true;
      c.since = now;
      c.deadline = now + (c.in.empty() ? o.idle_timeout : o.header_timeout);
      SetInterest(c, EPOLLIN);
    }
  }

  void Count(AdminReject why) {
    std::atomic<int64_t>* counter = nullptr;
    switch (why) {
      case AdminReject::kBadRequest: counter = &stats->bad_request; break;
      case AdminReject::kMethod: counter = &stats->method; break;
      case AdminReject::kBody: counter = &stats->body; break;
      case AdminReject::kHeaderTooLarge: counter = &stats->header_too_large; break;
      case AdminReject::kTooManyHeaders: counter = &stats->too_many_headers; break;
      case AdminReject::kNone: break;
    }
    if (counter) counter->fetch_add(1, std::memory_order_relaxed);
  }

  // An error answer; the rest of the input is never read as requests, and the connection closes
  // after lingering.
  void Refuse(Conn& c, int status, AdminReject why, Clock::time_point now) {
    Count(why);
    std::string().swap(c.in);
    c.scan.Reset();
    StartWrite(c, RefusalBytes(status), /*close=*/true, /*linger=*/true, now);
  }

  void Dispatch(Conn& c, AdminRequest req, Clock::time_point now) {
    c.head_only = req.method == "HEAD";
    AdminResponse res;
    bool answered = h.on_loop && h.on_loop(req, &res);
    if (!answered && !h.on_worker) {
      res = TextResponse(404, "");
      answered = true;
    }
    if (answered) {
      const bool keep = req.keep_alive && !res.close;
      StartWrite(c, SerializeAdminResponse(res, c.head_only, keep, req.accept_gzip), !keep, false, now);
      return;
    }
    c.state = ConnState::kProcessing;
    c.deadline = Clock::time_point::max();
    SetInterest(c, 0);
    {
      std::lock_guard<std::mutex> lock(mu);
      jobs.push_back(Job{c.id, std::move(req)});
    }
    cv.notify_one();
  }

  void StartWrite(Conn& c, std::string bytes, bool close, bool linger, Clock::time_point now) {
    stats->requests.fetch_add(1, std::memory_order_relaxed);
    c.out = std::move(bytes);
    c.out_off = 0;
    c.close_after = close;
    c.linger_after = linger;
    c.state = ConnState::kWriting;
    c.since = now;
    c.deadline = now + o.write_timeout;
  }

  // True once `out` is written; false when the socket is full (waits for EPOLLOUT) or failed (closed).
  bool Flush(Conn& c) {
    while (c.out_off < c.out.size()) {
      const ssize_t n = ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
      if (n > 0) {
        c.out_off += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        SetInterest(c, EPOLLOUT);
        return false;
      }
      Close(c);
      return false;
    }
    return true;
  }

  void StartLinger(Conn& c, Clock::time_point now) {
    ::shutdown(c.fd, SHUT_WR);
    c.state = ConnState::kLingering;
    c.deadline = now + o.linger_timeout;
    c.lingered = 0;
    SetInterest(c, EPOLLIN);
    DrainLinger(c);
  }

  // Reads and drops what a refused client still sends, until it closes, kAdminLingerMaxBytes
  // or the linger deadline.
  void DrainLinger(Conn& c) {
    for (;;) {
      const ssize_t n = ::recv(c.fd, scratch.data(), scratch.size(), 0);
      if (n > 0) {
        c.lingered += static_cast<size_t>(n);
        if (c.lingered > kAdminLingerMaxBytes) break;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      break;
    }
    Close(c);
  }

  void TakeDone(Clock::time_point now) {
    std::deque<Done> batch;
    {
      std::lock_guard<std::mutex> lock(mu);
      batch.swap(done);
    }
    for (Done& d : batch) {
      auto it = conns.find(d.conn);
      if (it == conns.end() || it->second->state != ConnState::kProcessing) continue;  // closed meanwhile
      Conn& c = *it->second;
      if (pending_out > 0 && pending_out + d.bytes.size() > o.max_pending_response_bytes) {
        stats->response_budget.fetch_add(1, std::memory_order_relaxed);
        AdminResponse busy = TextResponse(503, "Service Unavailable: too many answers are waiting to be read\n");
        StartWrite(c, SerializeAdminResponse(busy, c.head_only, false, false), /*close=*/true, /*linger=*/false, now);
      } else {
        c.out_budget = d.bytes.size();
        pending_out += c.out_budget;
        StartWrite(c, std::move(d.bytes), d.close, /*linger=*/false, now);
      }
      Drive(c, now);
    }
  }

  void Expire(Clock::time_point now) {
    if (accept_paused && now >= accept_resume) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = kListenId;
      ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd, &ev);
      accept_paused = false;
    }
    for (auto& [id, cp] : conns) {
      Conn& c = *cp;
      if (c.state == ConnState::kClosed || now < c.deadline) continue;
      switch (c.state) {
        case ConnState::kReading:
          if (c.in.empty()) {  // nothing of a request: close without an answer
            (c.served ? stats->idle_closed : stats->header_timeout).fetch_add(1, std::memory_order_relaxed);
            Close(c);
          } else {
            stats->header_timeout.fetch_add(1, std::memory_order_relaxed);
            std::string().swap(c.in);
            c.scan.Reset();
            StartWrite(c, RefusalBytes(408), /*close=*/true, /*linger=*/true, now);
            Drive(c, now);
          }
          break;
        case ConnState::kWriting:
          stats->write_timeout.fetch_add(1, std::memory_order_relaxed);
          Close(c);
          break;
        case ConnState::kLingering:
          Close(c);
          break;
        case ConnState::kProcessing:
        case ConnState::kClosed:
          break;
      }
    }
  }

  void Worker() {
    for (;;) {
      Job job{};
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [this] { return workers_stop || !jobs.empty(); });
        if (workers_stop) return;
        job = std::move(jobs.front());
        jobs.pop_front();
      }
      AdminResponse res;
      try {
        res = h.on_worker(job.req);
      } catch (const std::exception& e) {
        res = TextResponse(500, absl::StrCat("internal error: ", e.what(), "\n"));
      } catch (...) {
        res = TextResponse(500, "internal error\n");
      }
      const bool keep = job.req.keep_alive && !res.close;
      Done d{job.conn, SerializeAdminResponse(res, job.req.method == "HEAD", keep, job.req.accept_gzip), !keep};
      {
        std::lock_guard<std::mutex> lock(mu);
        done.push_back(std::move(d));
      }
      Wake();
    }
  }
};

AdminHttpServer::AdminHttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
AdminHttpServer::~AdminHttpServer() { Stop(); }
int AdminHttpServer::port() const { return impl_->port; }
const AdminHttpStats& AdminHttpServer::stats() const { return *impl_->stats; }

absl::StatusOr<std::unique_ptr<AdminHttpServer>> AdminHttpServer::Start(const std::string& host, int port,
                                                                        Handlers handlers, AdminHttpOptions options) {
  if (port < 0 || port > 65535) return absl::InvalidArgumentError(absl::StrCat("port ", port, " is out of range"));
  addrinfo* addrs = nullptr;
  if (std::string unresolved = ResolveListenAddresses(host, port, &addrs); !unresolved.empty())
    return absl::UnavailableError(unresolved);
  int fd = -1;
  int err = 0;
  for (addrinfo* a = addrs; a != nullptr; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) break;
    err = errno;
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(addrs);
  if (fd < 0) return absl::UnavailableError(OsReason(err));

  auto impl = std::make_unique<Impl>();
  impl->listen_fd = fd;
  impl->o = options;
  impl->h = std::move(handlers);
  if (options.stats) impl->stats = options.stats;
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) return absl::UnavailableError(OsReason());
  impl->port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port)
                                           : ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  impl->epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (impl->epoll_fd < 0) return absl::UnavailableError(absl::StrCat("epoll_create1: ", OsReason()));
  impl->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl->wake_fd < 0) return absl::UnavailableError(absl::StrCat("eventfd: ", OsReason()));
  for (const auto& [watched, id] : {std::pair{impl->listen_fd, kListenId}, std::pair{impl->wake_fd, kWakeId}}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = id;
    if (::epoll_ctl(impl->epoll_fd, EPOLL_CTL_ADD, watched, &ev) != 0)
      return absl::UnavailableError(absl::StrCat("epoll_ctl: ", OsReason()));
  }
  Impl* raw = impl.get();
  if (raw->h.on_worker)
    for (int i = 0; i < std::max(1, options.workers); ++i) raw->workers.emplace_back([raw] { raw->Worker(); });
  raw->loop_thread = std::thread([raw] { raw->Loop(); });
  return std::unique_ptr<AdminHttpServer>(new AdminHttpServer(std::move(impl)));
}

void AdminHttpServer::Stop() {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> guard(m.stop_mu);
  if (m.stopped) return;
  m.stopped = true;
  m.stopping.store(true);
  m.Wake();
  if (m.loop_thread.joinable()) m.loop_thread.join();
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.workers_stop = true;
  }
  m.cv.notify_all();
  for (std::thread& t : m.workers) t.join();
}

}  // namespace epp::internal
