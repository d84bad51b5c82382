// The metrics port's HTTP server (serve/admin_http.h) and MetricsHttpServer over it, through real
// sockets on 127.0.0.1. Every wait is bounded; every socket and thread is closed and joined.
#include "serve/admin_http.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "http/gzip_stream.h"
#include "serve/serve_metrics.h"

namespace epp::internal {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A client socket (closed when it goes out of scope).
class Client {
 public:
  // rcvbuf > 0: a small receive buffer, set before connecting, so the server's writes fill up.
  explicit Client(int port, int rcvbuf = 0, bool v6 = false) {
    fd_ = ::socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    if (v6) {
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_port = htons(static_cast<uint16_t>(port));
      a.sin6_addr = in6addr_loopback;
      connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    }
  }
  ~Client() {
    if (fd_ >= 0) ::close(fd_);
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  bool connected() const { return connected_; }
  int fd() const { return fd_; }

  // False when the server closed or reset the connection.
  bool Send(std::string_view s) {
    while (!s.empty()) {
      const ssize_t n = ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      s.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Waits up to `within` for bytes; appends them to buf_. 0: closed (or reset), -1: timed out.
  int ReadSome(milliseconds within) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(within.count())) <= 0) return -1;
    char tmp[65536];
    const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return 0;
    buf_.append(tmp, static_cast<size_t>(n));
    return static_cast<int>(n);
  }

  struct Reply {
    int status = 0;
    std::map<std::string, std::string> headers;  // lower-case names
    std::string body;
    std::string header(const std::string& name) const {
      auto it = headers.find(name);
      return it == headers.end() ? std::string() : it->second;
    }
  };

  // One answer (head and Content-Length body), within `within`; nullopt on timeout or close.
  std::optional<Reply> Read(milliseconds within = milliseconds(5000), bool head_request = false) {
    const auto deadline = Clock::now() + within;
    size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (left.count() <= 0 || ReadSome(left) <= 0) return std::nullopt;
    }
    Reply r;
    const std::string head = buf_.substr(0, end);
    size_t line_end = head.find("\r\n");
    const std::string status_line = head.substr(0, line_end);
    if (status_line.rfind("HTTP/1.1 ", 0) != 0) return std::nullopt;
    r.status = std::stoi(status_line.substr(9, 3));
    while (line_end != std::string::npos && line_end < head.size()) {
      const size_t start = line_end + 2;
      line_end = head.find("\r\n", start);
      const std::string line = head.substr(start, line_end == std::string::npos ? std::string::npos : line_end - start);
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      r.headers[name] = line.substr(colon + 2);
    }
    const size_t length = head_request ? 0 : std::stoul(r.header("content-length"));
    while (buf_.size() < end + 4 + length) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (left.count() <= 0 || ReadSome(left) <= 0) return std::nullopt;
    }
    r.body = buf_.substr(end + 4, length);
    buf_.erase(0, end + 4 + length);
    return r;
  }

  // True when the server closes (or resets) the connection within `within` (bytes before that are kept).
  bool ClosedWithin(milliseconds within) {
    const auto deadline = Clock::now() + within;
    for (;;) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      const int n = ReadSome(left);
      if (n == 0) return true;
      if (n < 0) return false;
    }
  }

  std::optional<Reply> Get(const std::string& target, const std::string& extra = "") {
    if (!Send("GET " + target + " HTTP/1.1\r\nHost: test\r\n" + extra + "\r\n")) return std::nullopt;
    return Read();
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  std::string buf_;
};

// /healthz on the loop; everything else through `work` on the workers.
std::unique_ptr<AdminHttpServer> StartServer(AdminHttpOptions options = {},
                                             std::function<AdminResponse(const AdminRequest&)> work = {}) {
  AdminHttpServer::Handlers h;
  h.on_loop = [](const AdminRequest& req, AdminResponse* res) {
    if (req.path != "/healthz") return false;
    res->content_type = "text/plain";
    res->body = "ok";
    return true;
  };
  h.on_worker = work ? std::move(work) : [](const AdminRequest& req) {
    AdminResponse res;
    res.content_type = "text/plain";
    res.body = "page " + req.path;
    return res;
  };
  absl::StatusOr<std::unique_ptr<AdminHttpServer>> s = AdminHttpServer::Start("127.0.0.1", 0, std::move(h), options);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// ---------------------------------------------------------------------------------------------
// The parser

AdminParseResult Parse(const std::string& head, AdminRequest* req) { return ParseAdminRequestHead(head, req); }

TEST(AdminHttpParse, RequestLineHeadersAndKeepAlive) {
  AdminRequest r;
  ASSERT_EQ(Parse("GET /debug/decisions?limit=5 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\r\n"
                  "authorization: Bearer b\r\nAccept-Encoding: br, gzip;q=0.8\r\n\r\n",
                  &r)
                .status,
            0);
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.path, "/debug/decisions");
  EXPECT_EQ(r.query.at("limit"), "5");
  EXPECT_EQ(r.authorization, "Bearer a");  // the first one
  EXPECT_TRUE(r.keep_alive);
  EXPECT_TRUE(r.accept_gzip);

  ASSERT_EQ(Parse("HEAD /metrics HTTP/1.0\n\n", &r).status, 0);  // bare LF line ends
  EXPECT_FALSE(r.keep_alive);
  ASSERT_EQ(Parse("GET /metrics HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &r).status, 0);
  EXPECT_TRUE(r.keep_alive);
  ASSERT_EQ(Parse("GET /metrics HTTP/1.1\r\nConnection: foo, close\r\nAccept-Encoding: gzip;q=0\r\n\r\n", &r).status, 0);
  EXPECT_FALSE(r.keep_alive);
  EXPECT_FALSE(r.accept_gzip);
  ASSERT_EQ(Parse("GET / HTTP/1.1\r\nContent-Length: 000\r\n\r\n", &r).status, 0);  // a zero length is no body
}

TEST(AdminHttpParse, RefusesMethodsBodiesAndMalformedHeads) {
  AdminRequest r;
  const std::pair<const char*, int> cases[] = {
      {"POST /metrics HTTP/1.1\r\nContent-Length: 209715200\r\n\r\n", 405},
      {"PUT /metrics HTTP/1.1\r\n\r\n", 405},
      {"OPTIONS /metrics HTTP/1.1\r\n\r\n", 405},
      {"GET /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\n", 413},
      {"GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 413},
      {"GET /metrics HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400},
      {"GET /metrics HTTP/2.0\r\n\r\n", 505},
      {"GET /metrics\r\n\r\n", 400},
      {"GET  /metrics HTTP/1.1\r\n\r\n", 400},
      {"GET http://x/metrics HTTP/1.1\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1\r\n folded: x\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1\r\nBad Name: x\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1\r\nNoColon\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1\r\nX: a\rb\r\n\r\n", 400},
      {"GET /met\x01rics HTTP/1.1\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1\r\n", 400},  // no empty line
  };
  for (const auto& [head, status] : cases) EXPECT_EQ(Parse(head, &r).status, status) << head;
}

TEST(AdminHttpParse, ScannerLimitsDoNotDependOnHowBytesArrive) {
  AdminHttpOptions o;
  o.max_head_bytes = 200;
  o.max_request_line_bytes = 50;
  o.max_header_lines = 3;
  auto scan = [&](const std::string& in, size_t chunk) {
    AdminHeadScanner s;
    AdminHeadScanner::Step step = AdminHeadScanner::Step::kMore;
    for (size_t n = chunk; step == AdminHeadScanner::Step::kMore && n < in.size() + chunk; n += chunk)
      step = s.Feed(std::string_view(in).substr(0, std::min(n, in.size())), o);
    return std::make_pair(step, step == AdminHeadScanner::Step::kError ? s.status() : static_cast<int>(s.head_end()));
  };
  const std::string ok = "\r\nGET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\nGET /next";
  const std::string four = "GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n";
  const std::string long_line = "GET /" + std::string(60, 'a') + " HTTP/1.1\r\n\r\n";
  const std::string big = "GET / HTTP/1.1\r\nA: " + std::string(250, 'a') + "\r\n\r\n";
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{1000}}) {
    EXPECT_EQ(scan(ok, chunk), std::make_pair(AdminHeadScanner::Step::kComplete, static_cast<int>(ok.size() - 9)));
    EXPECT_EQ(scan(four, chunk), std::make_pair(AdminHeadScanner::Step::kError, 431));
    EXPECT_EQ(scan(long_line, chunk), std::make_pair(AdminHeadScanner::Step::kError, 414));
    EXPECT_EQ(scan(big, chunk), std::make_pair(AdminHeadScanner::Step::kError, 431));
  }
}

TEST(AdminHttpParse, QueryDecoding) {
  const std::map<std::string, std::string> q = DecodeAdminQuery("a=1&b=x+y&c=%2F%41%e2%82%ac&&d&e=%zz&f=%4&a=2&=v");
  EXPECT_EQ(q.at("a"), "1");  // the first of repeated keys
  EXPECT_EQ(q.at("b"), "x y");
  EXPECT_EQ(q.at("c"), "/A\xe2\x82\xac");
  EXPECT_EQ(q.at("d"), "");
  EXPECT_EQ(q.at("e"), "%zz");  // kept as sent
  EXPECT_EQ(q.at("f"), "%4");
  EXPECT_EQ(q.at(""), "v");
  EXPECT_EQ(q.size(), 7u);
}

// ---------------------------------------------------------------------------------------------
// The server

TEST(AdminHttpServer, KeepAliveServesTwoRequestsOnOneConnection) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  Client c(server->port());
  ASSERT_TRUE(c.connected());
  for (int i = 0; i < 2; ++i) {
    std::optional<Client::Reply> r = c.Get("/metrics");
    ASSERT_TRUE(r) << i;
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "page /metrics");
    EXPECT_EQ(r->header("connection"), "keep-alive");
    EXPECT_EQ(r->header("content-type"), "text/plain");
  }
  std::optional<Client::Reply> h = c.Get("/healthz");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->body, "ok");
  EXPECT_EQ(server->stats().connections.load(), 1);
  EXPECT_EQ(server->stats().requests.load(), 3);
}

TEST(AdminHttpServer, PipelinedRequestsAreAnsweredInOrderAndHeadHasNoBody) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  Client c(server->port());
  ASSERT_TRUE(c.Send("GET /a HTTP/1.1\r\n\r\nHEAD /b HTTP/1.1\r\n\r\nGET /healthz HTTP/1.1\r\n\r\n"
                     "GET /c HTTP/1.1\r\nConnection: close\r\n\r\n"));
  std::optional<Client::Reply> a = c.Read(), b = c.Read(milliseconds(5000), /*head_request=*/true), h = c.Read(),
                               d = c.Read();
  ASSERT_TRUE(a && b && h && d);
  EXPECT_EQ(a->body, "page /a");
  EXPECT_EQ(b->header("content-length"), "7");  // "page /b", not sent
  EXPECT_EQ(h->body, "ok");
  EXPECT_EQ(d->body, "page /c");
  EXPECT_EQ(d->header("connection"), "close");
  EXPECT_TRUE(c.ClosedWithin(milliseconds(2000)));
}

TEST(AdminHttpServer, HugeDeclaredPostIsRefusedWithoutReadingItsBody) {
  std::atomic<int> calls{0};
  auto server = StartServer({}, [&](const AdminRequest&) {
    ++calls;
    return AdminResponse();
  });
  ASSERT_TRUE(server);
  {
    Client c(server->port());
    const auto t0 = Clock::now();
    // Only the head: an answer now shows the server did not wait for the 200 MiB.
    ASSERT_TRUE(c.Send("POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 209715200\r\n\r\n"));
    std::optional<Client::Reply> r = c.Read(milliseconds(2000));
    ASSERT_TRUE(r);
    EXPECT_LT(SecondsSince(t0), 1.0);
    EXPECT_EQ(r->status, 405);
    EXPECT_EQ(r->header("allow"), "GET, HEAD");
    EXPECT_EQ(r->header("connection"), "close");
    EXPECT_TRUE(c.ClosedWithin(milliseconds(3000)));
  }
  {
    Client c(server->port());
    ASSERT_TRUE(c.Send("GET /metrics HTTP/1.1\r\nContent-Length: 209715200\r\n\r\n"));
    std::optional<Client::Reply> r = c.Read(milliseconds(2000));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413);
    EXPECT_EQ(r->header("connection"), "close");
  }
  {
    Client c(server->port());
    ASSERT_TRUE(c.Send("GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"));
    std::optional<Client::Reply> r = c.Read(milliseconds(2000));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413);
  }
  {
    // A client that keeps sending its body after the answer: the server reads (and drops) a
    // bounded amount, then closes; the client sees the answer or the close, never a hang.
    Client c(server->port());
    ASSERT_TRUE(c.Send("POST /metrics HTTP/1.1\r\nContent-Length: 209715200\r\n\r\n"));
    const std::string chunk(64 * 1024, 'x');
    const auto t0 = Clock::now();
    size_t sent = 0;
    while (sent < 200u * 1024 * 1024 && SecondsSince(t0) < 10 && c.Send(chunk)) sent += chunk.size();
    EXPECT_LT(sent, 32u * 1024 * 1024);
  }
  EXPECT_EQ(calls.load(), 0);
  EXPECT_EQ(server->stats().method.load(), 2);
  EXPECT_EQ(server->stats().body.load(), 2);
}

TEST(AdminHttpServer, TooManyHeaderLinesAre431) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto with_lines = [](int n) {
    std::string req = "GET /metrics HTTP/1.1\r\n";
    for (int i = 0; i < n; ++i) req += "X-H" + std::to_string(i) + ": v\r\n";
    return req + "\r\n";
  };
  {
    Client c(server->port());
    ASSERT_TRUE(c.Send(with_lines(kAdminMaxHeaderLines)));
    std::optional<Client::Reply> r = c.Read();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
  {
    Client c(server->port());
    c.Send(with_lines(kAdminMaxHeaderLines + 1));
    std::optional<Client::Reply> r = c.Read();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 431);
    EXPECT_EQ(r->header("connection"), "close");
  }
  {
    // 10,000 lines of 8 KB (the review's attack): refused at the first limit reached.
    Client c(server->port());
    const std::string line = "X-Big: " + std::string(8192, 'a') + "\r\n";
    c.Send("GET /metrics HTTP/1.1\r\n");
    for (int i = 0; i < 10000 && c.Send(line); ++i) {
    }
    std::optional<Client::Reply> r = c.Read();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 431);
  }
  EXPECT_EQ(server->stats().too_many_headers.load(), 1);
  EXPECT_EQ(server->stats().header_too_large.load(), 1);
}

TEST(AdminHttpServer, OversizedHeadsAre431And414) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  {
    Client c(server->port());
    c.Send("GET /metrics HTTP/1.1\r\nX-Big: " + std::string(kAdminMaxHeadBytes, 'a') + "\r\n\r\n");
    std::optional<Client::Reply> r = c.Read();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 431);
  }
  {
    Client c(server->port());
    c.Send("GET /metrics?" + std::string(kAdminMaxRequestLineBytes, 'a') + " HTTP/1.1\r\n\r\n");
    std::optional<Client::Reply> r = c.Read();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 414);
  }
  {
    // Just under the limits is served.
    Client c(server->port());
    std::optional<Client::Reply> r = c.Get("/metrics", "X-Big: " + std::string(kAdminMaxHeadBytes - 200, 'a') + "\r\n");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
  EXPECT_EQ(server->stats().header_too_large.load(), 2);
}

TEST(AdminHttpServer, SlowHeaderSendersDoNotDelayOtherClients) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  std::vector<std::unique_ptr<Client>> slow;
  for (int i = 0; i < 8; ++i) {
    slow.push_back(std::make_unique<Client>(server->port()));
    ASSERT_TRUE(slow.back()->Send("GET /metrics HTTP/1.1\r\n"));
  }
  std::atomic<bool> stop{false};
  std::thread trickle([&] {  // one header byte a second on each of the eight
    while (!stop.load()) {
      for (auto& s : slow) s->Send("X");
      for (int i = 0; i < 10 && !stop.load(); ++i) std::this_thread::sleep_for(milliseconds(100));
    }
  });
  std::this_thread::sleep_for(milliseconds(1500));
  for (int i = 0; i < 3; ++i) {
    Client c(server->port());
    const auto t0 = Clock::now();
    std::optional<Client::Reply> r = c.Get("/metrics");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_LT(SecondsSince(t0), 3.0);
    std::optional<Client::Reply> h = Client(server->port()).Get("/healthz");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
  }
  stop = true;
  trickle.join();
  EXPECT_EQ(server->stats().connections_open.load(), 8);
}

TEST(AdminHttpServer, HeadDeadlineIsAbsoluteNotPerByte) {
  AdminHttpOptions o;
  o.header_timeout = milliseconds(400);
  auto server = StartServer(o);
  ASSERT_TRUE(server);
  Client c(server->port());
  const auto t0 = Clock::now();
  ASSERT_TRUE(c.Send("GET /metrics HTTP/1.1\r\nX-Slow: "));
  // A byte every 50 ms: a timeout that restarted per byte would never fire.
  std::optional<Client::Reply> r;
  while (SecondsSince(t0) < 3) {
    if (!c.Send("a")) break;
    if (c.ReadSome(milliseconds(50)) != -1) break;
  }
  r = c.Read(milliseconds(1000));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 408);
  const double took = SecondsSince(t0);
  EXPECT_GE(took, 0.35);
  EXPECT_LT(took, 1.5);
  EXPECT_TRUE(c.ClosedWithin(milliseconds(3000)));
  EXPECT_EQ(server->stats().header_timeout.load(), 1);

  // A connection that sends nothing is closed at the same deadline, without an answer.
  Client silent(server->port());
  const auto t1 = Clock::now();
  EXPECT_TRUE(silent.ClosedWithin(milliseconds(3000)));
  EXPECT_GE(SecondsSince(t1), 0.3);
  EXPECT_EQ(server->stats().header_timeout.load(), 2);
}

TEST(AdminHttpServer, IdleKeepAliveConnectionsAreClosed) {
  AdminHttpOptions o;
  o.idle_timeout = milliseconds(300);
  o.header_timeout = milliseconds(5000);
  auto server = StartServer(o);
  ASSERT_TRUE(server);
  Client c(server->port());
  ASSERT_TRUE(c.Get("/healthz"));
  const auto t0 = Clock::now();
  EXPECT_TRUE(c.ClosedWithin(milliseconds(3000)));
  EXPECT_GE(SecondsSince(t0), 0.25);
  EXPECT_EQ(server->stats().idle_closed.load(), 1);
}

TEST(AdminHttpServer, ConnectionCapDropsTheOldestWaitingConnection) {
  AdminHttpOptions o;
  o.max_connections = 4;
  auto server = StartServer(o);
  ASSERT_TRUE(server);
  std::vector<std::unique_ptr<Client>> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(std::make_unique<Client>(server->port()));
    ASSERT_TRUE(idle.back()->Send(i == 0 ? "" : "GET /partial"));  // the first sends nothing at all
    std::this_thread::sleep_for(milliseconds(20));  // accepted in this order
  }
  std::this_thread::sleep_for(milliseconds(100));
  Client fifth(server->port());
  std::optional<Client::Reply> r = fifth.Get("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(idle[0]->ClosedWithin(milliseconds(2000)));   // the oldest
  EXPECT_FALSE(idle[3]->ClosedWithin(milliseconds(100)));  // the others stay
  EXPECT_EQ(server->stats().evicted.load(), 1);
}

TEST(AdminHttpServer, ConnectionCapClosesANewConnectionWhenAllAreBusy) {
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<int> started{0};
  AdminHttpOptions o;
  o.max_connections = 2;
  o.workers = 1;
  auto server = StartServer(o, [&](const AdminRequest&) {
    ++started;
    gate.wait_for(std::chrono::seconds(10));
    AdminResponse res;
    res.body = "done";
    return res;
  });
  ASSERT_TRUE(server);
  Client a(server->port()), b(server->port());
  ASSERT_TRUE(a.Send("GET /slow HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(b.Send("GET /slow HTTP/1.1\r\n\r\n"));
  for (int i = 0; i < 200 && started.load() == 0; ++i) std::this_thread::sleep_for(milliseconds(10));
  std::this_thread::sleep_for(milliseconds(100));  // b's request is queued behind a's
  Client third(server->port());
  EXPECT_TRUE(third.ClosedWithin(milliseconds(2000)));
  EXPECT_EQ(server->stats().connection_cap.load(), 1);
  release.set_value();
  std::optional<Client::Reply> ra = a.Read(), rb = b.Read();
  ASSERT_TRUE(ra && rb);
  EXPECT_EQ(ra->body, "done");
  EXPECT_EQ(rb->body, "done");
}

TEST(AdminHttpServer, StopWithOpenConnectionsReturnsPromptly) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 20; ++i) {
    clients.push_back(std::make_unique<Client>(server->port()));
    if (i % 3 == 1) clients.back()->Send("GET /metrics HTTP/1.1\r\nX-Partial: ");
    if (i % 3 == 2) {
      ASSERT_TRUE(clients.back()->Get("/healthz"));  // idle keep-alive
    }
  }
  const auto t0 = Clock::now();
  server->Stop();
  EXPECT_LT(SecondsSince(t0), 1.0);
  for (auto& c : clients) EXPECT_TRUE(c->ClosedWithin(milliseconds(1000)));
  server->Stop();  // idempotent
  EXPECT_EQ(server->stats().connections_open.load(), 0);
}

TEST(AdminHttpServer, UnreadAnswersPastTheBudgetAre503) {
  AdminHttpOptions o;
  o.max_pending_response_bytes = 24u << 20;
  auto server = StartServer(o, [](const AdminRequest&) {
    AdminResponse res;
    res.body.assign(16u << 20, 'm');
    return res;
  });
  ASSERT_TRUE(server);
  Client a(server->port(), 4096), b(server->port(), 4096);
  ASSERT_TRUE(a.Send("GET /big HTTP/1.1\r\n\r\n"));  // never read
  std::this_thread::sleep_for(milliseconds(300));
  ASSERT_TRUE(b.Send("GET /big HTTP/1.1\r\n\r\n"));
  std::optional<Client::Reply> r = b.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(server->stats().response_budget.load(), 1);
}

TEST(AdminHttpServer, GzipWhenAccepted) {
  const std::string page(20000, 'a');
  auto server = StartServer({}, [&](const AdminRequest&) {
    AdminResponse res;
    res.body = page;
    res.may_compress = true;
    return res;
  });
  ASSERT_TRUE(server);
  Client c(server->port());
  std::optional<Client::Reply> r = c.Get("/metrics", "Accept-Encoding: gzip\r\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->header("content-encoding"), "gzip");
  GzipStream z;
  std::string plain;
  EXPECT_EQ(z.Feed(r->body, plain, 1 << 20), GzipStream::Result::kDone);
  EXPECT_EQ(plain, page);
  r = c.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->header("content-encoding"), "");
  EXPECT_EQ(r->body, page);
}

// ---------------------------------------------------------------------------------------------
// MetricsHttpServer over it

TEST(MetricsHttpServer, PathsStatusesAndAuthorization) {
  std::atomic<int> authorized{0};
  std::vector<std::string> asked;
  std::mutex asked_mu;
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> s = MetricsHttpServer::Start(
      "127.0.0.1", 0, [] { return std::string("epp_info 1\n"); },
      [](const std::map<std::string, std::string>& q, std::string* body) {
        *body = "{\"limit\": \"" + (q.count("limit") ? q.at("limit") : std::string()) + "\"}\n";
        return 200;
      },
      [&](std::string_view authorization, std::string_view path) {
        std::lock_guard<std::mutex> lock(asked_mu);
        asked.emplace_back(path);
        if (authorization == "Bearer good") return std::make_pair(200, std::string());
        return std::make_pair(401, std::string("Unauthorized"));
      });
  ASSERT_TRUE(s.ok()) << s.status();
  MetricsHttpServer& server = **s;
  Client c(server.port());
  std::optional<Client::Reply> r = c.Get("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "ok");
  EXPECT_EQ(r->header("content-type"), "text/plain");
  r = c.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->body, "Unauthorized\n");
  r = c.Get("/metrics", "Authorization: Bearer good\r\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "epp_info 1\n");
  EXPECT_EQ(r->header("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  r = c.Get("/debug/decisions?limit=a+b%21", "Authorization: Bearer good\r\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "{\"limit\": \"a b!\"}\n");
  EXPECT_EQ(r->header("content-type"), "application/json");
  r = c.Get("/metrics/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  r = c.Get("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  ASSERT_TRUE(c.Send("DELETE /healthz HTTP/1.1\r\n\r\n"));
  r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->header("allow"), "GET, HEAD");
  std::lock_guard<std::mutex> lock(asked_mu);
  EXPECT_EQ(asked, (std::vector<std::string>{"/metrics", "/metrics", "/debug/decisions"}));  // never /healthz
}

TEST(MetricsHttpServer, DecisionsOffAndBindFailure) {
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> s =
      MetricsHttpServer::Start("127.0.0.1", 0, [] { return std::string(); });
  ASSERT_TRUE(s.ok()) << s.status();
  Client c((*s)->port());
  std::optional<Client::Reply> r = c.Get("/debug/decisions");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_NE(r->body.find("--decision-log"), std::string::npos);
  EXPECT_EQ(r->header("content-type"), "application/json");
  // The port is taken: today's message, with the reason.
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> again =
      MetricsHttpServer::Start("127.0.0.1", (*s)->port(), [] { return std::string(); });
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("cannot listen for /metrics on 127.0.0.1:"), std::string::npos);
  EXPECT_NE(again.status().message().find("Address already in use"), std::string::npos) << again.status();
}

TEST(MetricsHttpServer, ListensOnNamesAndIpv6Literals) {
  for (const char* host : {"localhost", "", "0.0.0.0", "[::]", "::", "[::1]"}) {
    const bool v6 = std::string_view(host).find(':') != std::string_view::npos;
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> s = MetricsHttpServer::Start(host, 0, [] { return std::string(); });
    if (!s.ok() && v6) continue;  // no IPv6 on this machine
    ASSERT_TRUE(s.ok()) << host << ": " << s.status();
    EXPECT_GT((*s)->port(), 0);
    if (std::string_view(host) == "localhost") continue;  // ::1 or 127.0.0.1, whichever resolves first
    Client c((*s)->port(), 0, v6);
    ASSERT_TRUE(c.connected()) << host;
    std::optional<Client::Reply> r = c.Get("/healthz");
    ASSERT_TRUE(r) << host;
    EXPECT_EQ(r->body, "ok");
  }
}

}  // namespace
}  // namespace epp::internal
