// Redis addresses and RESP2 framing (see epp/runtime/redis.h). The URL forms follow what go-redis
// accepts, since llm-d's `redisConfig.address` is handed to it; RESP2 as the Redis protocol
// specification defines it: '+' simple string, '-' error, ':' integer, '$' bulk string ($-1:
// null), '*' array (*-1: null), each header line ending in CRLF.
#include "epp/runtime/redis.h"

#include <fcntl.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/un.h>

#include <algorithm>
#include <cctype>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/os_error.h"
#include "common/strings.h"

namespace epp {

namespace {

absl::StatusOr<std::string> PercentDecode(std::string_view s, std::string_view what) {
  std::optional<std::string> d = internal::PercentDecode(s);
  if (!d) return absl::InvalidArgumentError(absl::StrCat("redis address: bad percent escape in the ", std::string(what)));
  return *std::move(d);
}

absl::Status Bad(std::string_view url, std::string_view why) {
  // The password is never echoed: only the scheme and what follows the last '@'.
  std::string shown(url);
  if (const size_t at = shown.rfind('@'); at != std::string::npos) {
    const size_t scheme = shown.find("://");
    shown = (scheme != std::string::npos ? shown.substr(0, scheme + 3) : std::string()) + "***@" + shown.substr(at + 1);
  }
  return absl::InvalidArgumentError(absl::StrCat("redis address '", shown, "': ", std::string(why)));
}

absl::StatusOr<int> ParseDb(std::string_view url, std::string_view text) {
  int db = 0;
  if (!absl::SimpleAtoi(absl::string_view(text.data(), text.size()), &db) || db < 0)
    return Bad(url, absl::StrCat("database '", std::string(text), "' is not a non-negative number"));
  return db;
}

}  // namespace

absl::StatusOr<RedisAddress> ParseRedisAddress(std::string_view url) {
  RedisAddress a;
  std::string_view rest = url;
  const size_t scheme_end = rest.find("://");
  std::string scheme = "redis";
  if (scheme_end != std::string_view::npos) {
    scheme = std::string(rest.substr(0, scheme_end));
    for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    rest.remove_prefix(scheme_end + 3);
  }
  if (scheme == "redis" || scheme == "valkey") {
    a.transport = RedisAddress::Transport::kTcp;
  } else if (scheme == "rediss" || scheme == "valkeys") {
    a.transport = RedisAddress::Transport::kTls;
  } else if (scheme == "unix") {
    a.transport = RedisAddress::Transport::kUnix;
  } else {
    return Bad(url, absl::StrCat("scheme '", scheme, "' is not redis, rediss, unix, valkey or valkeys"));
  }
  // Query options.
  std::string_view query;
  if (const size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  // Credentials.
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view creds = rest.substr(0, at);
    rest.remove_prefix(at + 1);
    const size_t colon = creds.find(':');
    absl::StatusOr<std::string> user = PercentDecode(creds.substr(0, colon), "user name");
    if (!user.ok()) return user.status();
    a.username = *std::move(user);
    if (colon != std::string_view::npos) {
      absl::StatusOr<std::string> pass = PercentDecode(creds.substr(colon + 1), "password");
      if (!pass.ok()) return pass.status();
      a.password = *std::move(pass);
    } else if (scheme_end != std::string_view::npos) {
      // go-redis: "redis://secret@host" carries a password and no user.
      a.password = std::move(a.username);
      a.username.clear();
    }
  }
  if (a.transport == RedisAddress::Transport::kUnix) {
    if (rest.empty() || rest.front() != '/') return Bad(url, "a unix socket needs an absolute path (unix:///run/redis.sock)");
    a.socket_path = std::string(rest);
    a.port = 0;
  } else {
    // HOST[:PORT][/DB]
    std::string_view hostport = rest;
    if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
      hostport = rest.substr(0, slash);
      const std::string_view db = rest.substr(slash + 1);
      if (!db.empty()) {
        absl::StatusOr<int> n = ParseDb(url, db);
        if (!n.ok()) return n.status();
        a.db = *n;
      }
    }
    std::string_view port;
    if (!hostport.empty() && hostport.front() == '[') {
      const size_t close = hostport.find(']');
      if (close == std::string_view::npos) return Bad(url, "an IPv6 host opens '[' and never closes it");
      a.host = std::string(hostport.substr(1, close - 1));
      const std::string_view after = hostport.substr(close + 1);
      if (!after.empty()) {
        if (after.front() != ':') return Bad(url, "expected ':PORT' after the IPv6 host");
        port = after.substr(1);
      }
    } else {
      const size_t colon = hostport.rfind(':');
      if (colon != std::string_view::npos && hostport.find(':') != colon)
        return Bad(url, "an IPv6 host must be written in brackets ([::1]:6379)");
      a.host = std::string(hostport.substr(0, colon));
      if (colon != std::string_view::npos) port = hostport.substr(colon + 1);
    }
    if (a.host.empty()) return Bad(url, "no host");
    if (port.data() != nullptr && (port.empty() || !absl::SimpleAtoi(absl::string_view(port.data(), port.size()), &a.port) || a.port < 1 || a.port > 65535))
      return Bad(url, absl::StrCat("port '", std::string(port), "' is not a number in 1..65535"));
  }
  // Options: db, skip_verify (and the connection tuning go-redis knows, accepted and unused).
  size_t start = 0;
  while (start < query.size()) {
    size_t end = query.find('&', start);
    if (end == std::string_view::npos) end = query.size();
    const std::string_view item = query.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string_view key = item.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1);
    if (key == "db") {
      absl::StatusOr<int> n = ParseDb(url, value);
      if (!n.ok()) return n.status();
      a.db = *n;
    } else if (key == "skip_verify") {
      if (value != "true" && value != "false") return Bad(url, "skip_verify is true or false");
      a.skip_verify = value == "true";
    } else if (key == "protocol" || key == "client_name" || key == "dial_timeout" || key == "read_timeout" ||
               key == "write_timeout" || key == "pool_size" || key == "max_retries" || key == "pool_timeout") {
      // go-redis connection tuning: meaningful to its pool, not to ours.
    } else {
      return Bad(url, absl::StrCat("unknown option '", std::string(key), "' (known: db, skip_verify)"));
    }
  }
  if (a.skip_verify && a.transport != RedisAddress::Transport::kTls) return Bad(url, "skip_verify needs rediss://");
  return a;
}

std::string RedisAddress::Redacted() const {
  std::string s;
  switch (transport) {
    case Transport::kTcp:
      s = "redis://";
      break;
    case Transport::kTls:
      s = "rediss://";
      break;
    case Transport::kUnix:
      s = "unix://";
      break;
  }
  if (!username.empty() || !password.empty()) absl::StrAppend(&s, username, password.empty() ? "" : ":***", "@");
  if (transport == Transport::kUnix) {
    absl::StrAppend(&s, socket_path);
    if (db != 0) absl::StrAppend(&s, "?db=", db);
    return s;
  }
  const bool v6 = host.find(':') != std::string::npos;
  absl::StrAppend(&s, v6 ? "[" : "", host, v6 ? "]" : "", ":", port);
  if (db != 0) absl::StrAppend(&s, "/", db);
  if (skip_verify) absl::StrAppend(&s, "?skip_verify=true");
  return s;
}

std::string EncodeRespCommand(std::span<const std::string_view> args) {
  std::string out = absl::StrCat("*", args.size(), "\r\n");
  for (std::string_view a : args) absl::StrAppend(&out, "$", a.size(), "\r\n", std::string(a), "\r\n");
  return out;
}

void RespReader::Feed(std::string_view bytes) {
  if (!failed_.ok()) return;
  // Drop what complete values consumed before growing the buffer.
  if (pos_ > 0 && pos_ >= buffer_.size() / 2) {
    buffer_.erase(0, pos_);
    offset_ += pos_;
    pos_ = 0;
  }
  buffer_.append(bytes);
}

absl::StatusOr<bool> RespReader::Parse(size_t& at, int depth, RespValue& out) const {
  auto error = [&](size_t where, std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("RESP byte ", offset_ + where, ": ", std::string(what)));
  };
  if (at >= buffer_.size()) return false;
  const char type = buffer_[at];
  if (type != '+' && type != '-' && type != ':' && type != '$' && type != '*')
    return error(at, absl::StrCat("type byte 0x", absl::Hex(static_cast<unsigned char>(type)), " is not one of + - : $ *"));
  // The header line: type byte, text, CRLF.
  const size_t eol = buffer_.find("\r\n", at + 1);
  if (eol == std::string::npos) {
    // The line so far (without a CR that may start the CRLF): past the limit already?
    size_t partial = buffer_.size() - at - 1;
    if (partial > 0 && buffer_.back() == '\r') --partial;
    if (partial > limits_.max_line_bytes) return error(at, "a header line longer than the limit");
    return false;
  }
  const std::string_view line(buffer_.data() + at + 1, eol - at - 1);
  if (line.size() > limits_.max_line_bytes) return error(at, "a header line longer than the limit");
  size_t next = eol + 2;
  switch (type) {
    case '+':
    case '-':
      if (line.find('\r') != std::string_view::npos || line.find('\n') != std::string_view::npos)
        return error(at, "a line with a bare CR or LF");
      out.type = type == '+' ? RespValue::Type::kSimpleString : RespValue::Type::kError;
      out.text = std::string(line);
      at = next;
      return true;
    case ':': {
      int64_t v = 0;
      if (!absl::SimpleAtoi(absl::string_view(line.data(), line.size()), &v)) return error(at, "an integer that does not parse");
      out.type = RespValue::Type::kInteger;
      out.integer = v;
      at = next;
      return true;
    }
    case '$': {
      int64_t len = 0;
      if (!absl::SimpleAtoi(absl::string_view(line.data(), line.size()), &len) || len < -1) return error(at, "a bulk string length that is not -1 or more");
      if (len == -1) {
        out.type = RespValue::Type::kNull;
        at = next;
        return true;
      }
      if (static_cast<uint64_t>(len) > limits_.max_bulk_bytes) return error(at, "a bulk string longer than the limit");
      const size_t n = static_cast<size_t>(len);
      if (buffer_.size() - next < n + 2) return false;
      if (buffer_[next + n] != '\r' || buffer_[next + n + 1] != '\n') return error(next + n, "a bulk string not followed by CRLF");
      out.type = RespValue::Type::kBulkString;
      out.text.assign(buffer_, next, n);
      at = next + n + 2;
      return true;
    }
    case '*': {
      int64_t count = 0;
      if (!absl::SimpleAtoi(absl::string_view(line.data(), line.size()), &count) || count < -1) return error(at, "an array length that is not -1 or more");
      if (count == -1) {
        out.type = RespValue::Type::kNull;
        at = next;
        return true;
      }
      if (static_cast<uint64_t>(count) > limits_.max_array_elements) return error(at, "an array longer than the limit");
      if (depth + 1 > limits_.max_depth) return error(at, "arrays nested deeper than the limit");
      RespValue array;
      array.type = RespValue::Type::kArray;
      // Reserve no more than the bytes present can hold (4 bytes per element at least), so a
      // huge declared count cannot allocate before its elements arrive.
      array.elements.reserve(std::min<size_t>(static_cast<size_t>(count), (buffer_.size() - next) / 4 + 1));
      for (int64_t i = 0; i < count; ++i) {
        RespValue element;
        absl::StatusOr<bool> got = Parse(next, depth + 1, element);
        if (!got.ok() || !*got) return got;
        array.elements.push_back(std::move(element));
      }
      out = std::move(array);
      at = next;
      return true;
    }
    default:
      return error(at, absl::StrCat("type byte 0x", absl::Hex(static_cast<unsigned char>(type)),
                                    " is not one of + - : $ *"));
  }
}

absl::StatusOr<std::optional<RespValue>> RespReader::Next() {
  if (!failed_.ok()) return failed_;
  size_t at = pos_;
  RespValue v;
  absl::StatusOr<bool> got = Parse(at, 0, v);
  if (!got.ok()) {
    failed_ = got.status();
    return failed_;
  }
  const size_t value_bytes = *got ? at - pos_ : buffered();
  if (value_bytes > limits_.max_value_bytes) {
    failed_ = absl::ResourceExhaustedError(absl::StrCat("RESP byte ", offset_ + pos_, ": an answer longer than the limit (",
                                                        limits_.max_value_bytes, " bytes)"));
    return failed_;
  }
  if (!*got) return std::optional<RespValue>();
  pos_ = at;
  if (pos_ == buffer_.size()) {
    offset_ += pos_;
    buffer_.clear();
    pos_ = 0;
  }
  return std::optional<RespValue>(std::move(v));
}

// ---- the connection ----

namespace {

using SteadyTime = std::chrono::steady_clock::time_point;

int MillisLeft(SteadyTime deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, std::numeric_limits<int>::max()));
}

// A write to a peer that closed raises SIGPIPE; OpenSSL writes with write(2), which cannot be
// told MSG_NOSIGNAL. The signal is blocked for this thread during the write and a pending one
// is consumed, so an embedding process keeps its own SIGPIPE handling.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeGuard() {
    if (!was_pending_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        timespec zero{0, 0};
        sigtimedwait(&pipe_, nullptr, &zero);
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

std::string SslErrors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? std::string("TLS error") : out;
}

bool IsIpLiteral(const std::string& host) {
  in6_addr a6;
  in_addr a4;
  return inet_pton(AF_INET, host.c_str(), &a4) == 1 || inet_pton(AF_INET6, host.c_str(), &a6) == 1;
}

}  // namespace

struct RedisConnection::Io {
  int fd = -1;
  SSL_CTX* ctx = nullptr;
  SSL* ssl = nullptr;
  ~Io() {
    if (ssl != nullptr) SSL_free(ssl);
    if (ctx != nullptr) SSL_CTX_free(ctx);
    if (fd >= 0) ::close(fd);
  }
  // Polls for `events` until the deadline; false when it passed.
  bool Wait(short events, SteadyTime deadline) const {
    for (;;) {
      pollfd p{fd, events, 0};
      const int rc = ::poll(&p, 1, MillisLeft(deadline));
      if (rc > 0) return true;
      if (rc == 0) return false;
      if (errno != EINTR) return true;  // let the read or write report it
    }
  }
  // After an SSL call returned `rc` <= 0: waits for what it wants; a Status when it failed.
  absl::Status SslWait(int rc, SteadyTime deadline, const char* what) const {
    switch (SSL_get_error(ssl, rc)) {
      case SSL_ERROR_WANT_READ:
        if (!Wait(POLLIN, deadline)) return absl::DeadlineExceededError(absl::StrCat(what, " timed out"));
        return absl::OkStatus();
      case SSL_ERROR_WANT_WRITE:
        if (!Wait(POLLOUT, deadline)) return absl::DeadlineExceededError(absl::StrCat(what, " timed out"));
        return absl::OkStatus();
      case SSL_ERROR_ZERO_RETURN:
        return absl::UnavailableError("the server closed the connection");
      case SSL_ERROR_SYSCALL:
        return absl::UnavailableError(errno != 0 ? internal::OsReason() : std::string("the server closed the connection"));
      default:
        return absl::UnavailableError(SslErrors());
    }
  }
  absl::Status WriteAll(std::string_view data, SteadyTime deadline) {
    SigpipeGuard guard;
    while (!data.empty()) {
      if (ssl != nullptr) {
        ERR_clear_error();
        const int rc = SSL_write(ssl, data.data(), static_cast<int>(std::min<size_t>(data.size(), 1 << 30)));
        if (rc > 0) {
          data.remove_prefix(static_cast<size_t>(rc));
          continue;
        }
        EPP_RETURN_IF_ERROR(SslWait(rc, deadline, "write"));
        continue;
      }
      const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
      if (n > 0) {
        data.remove_prefix(static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!Wait(POLLOUT, deadline)) return absl::DeadlineExceededError("write timed out");
        continue;
      }
      return absl::UnavailableError(absl::StrCat("write failed: ", internal::OsReason()));
    }
    return absl::OkStatus();
  }
  // Some bytes (at least one) by the deadline.
  absl::StatusOr<size_t> ReadSome(char* buf, size_t n, SteadyTime deadline) {
    for (;;) {
      if (ssl != nullptr) {
        ERR_clear_error();
        const int rc = SSL_read(ssl, buf, static_cast<int>(std::min<size_t>(n, 1 << 30)));
        if (rc > 0) return static_cast<size_t>(rc);
        EPP_RETURN_IF_ERROR(SslWait(rc, deadline, "read"));
        continue;
      }
      const ssize_t got = ::recv(fd, buf, n, 0);
      if (got > 0) return static_cast<size_t>(got);
      if (got == 0) return absl::UnavailableError("the server closed the connection");
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!Wait(POLLIN, deadline)) return absl::DeadlineExceededError("no answer in time");
        continue;
      }
      return absl::UnavailableError(absl::StrCat("read failed: ", internal::OsReason()));
    }
  }
};

namespace {

// A non-blocking socket connected to the address by the deadline.
absl::StatusOr<int> ConnectSocket(const RedisAddress& a, SteadyTime deadline) {
  auto finish = [&](int fd, const sockaddr* sa, socklen_t len) -> absl::Status {
    if (::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK) != 0)
      return absl::InternalError(absl::StrCat("fcntl: ", internal::OsReason()));
    if (::connect(fd, sa, len) == 0) return absl::OkStatus();
    if (errno != EINPROGRESS) return absl::UnavailableError(absl::StrCat("connect: ", internal::OsReason()));
    pollfd p{fd, POLLOUT, 0};
    int rc;
    do rc = ::poll(&p, 1, MillisLeft(deadline));
    while (rc < 0 && errno == EINTR);
    if (rc == 0) return absl::DeadlineExceededError("connect timed out");
    int err = 0;
    socklen_t el = sizeof err;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
    if (err != 0) return absl::UnavailableError(absl::StrCat("connect: ", internal::OsReason(err)));
    return absl::OkStatus();
  };
  if (a.transport == RedisAddress::Transport::kUnix) {
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (a.socket_path.size() >= sizeof sa.sun_path)
      return absl::InvalidArgumentError(absl::StrCat("socket path longer than ", sizeof sa.sun_path - 1, " bytes"));
    std::copy(a.socket_path.begin(), a.socket_path.end(), sa.sun_path);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", internal::OsReason()));
    if (absl::Status st = finish(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa); !st.ok()) {
      ::close(fd);
      return st;
    }
    return fd;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(a.port);
  if (const int rc = ::getaddrinfo(a.host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return absl::UnavailableError(absl::StrCat("cannot resolve '", a.host, "': ", ::gai_strerror(rc)));
  absl::Status last = absl::UnavailableError("no address");
  int fd = -1;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last = absl::InternalError(absl::StrCat("socket: ", internal::OsReason()));
      continue;
    }
    last = finish(fd, ai->ai_addr, ai->ai_addrlen);
    if (last.ok()) break;
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  if (fd < 0) return last;
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

absl::Status Handshake(RedisConnection::Io& io, const RedisAddress& a, const RedisConnectOptions& o, SteadyTime deadline) {
  io.ctx = SSL_CTX_new(TLS_client_method());
  if (io.ctx == nullptr) return absl::InternalError(SslErrors());
  SSL_CTX_set_min_proto_version(io.ctx, TLS1_2_VERSION);
  if (a.skip_verify) {
    SSL_CTX_set_verify(io.ctx, SSL_VERIFY_NONE, nullptr);
  } else {
    SSL_CTX_set_verify(io.ctx, SSL_VERIFY_PEER, nullptr);
    const int loaded = o.ca_file.empty() ? SSL_CTX_set_default_verify_paths(io.ctx)
                                         : SSL_CTX_load_verify_locations(io.ctx, o.ca_file.c_str(), nullptr);
    if (loaded != 1)
      return absl::InvalidArgumentError(absl::StrCat("cannot load CA certificates",
                                                     o.ca_file.empty() ? "" : absl::StrCat(" from ", o.ca_file), ": ",
                                                     SslErrors()));
  }
  io.ssl = SSL_new(io.ctx);
  if (io.ssl == nullptr || SSL_set_fd(io.ssl, io.fd) != 1) return absl::InternalError(SslErrors());
  const bool ip = IsIpLiteral(a.host);
  if (!ip) SSL_set_tlsext_host_name(io.ssl, a.host.c_str());
  if (!a.skip_verify) {
    if (ip) {
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(io.ssl), a.host.c_str());
    } else {
      SSL_set1_host(io.ssl, a.host.c_str());
    }
  }
  for (;;) {
    ERR_clear_error();
    const int rc = SSL_connect(io.ssl);
    if (rc == 1) return absl::OkStatus();
    if (const long v = SSL_get_verify_result(io.ssl); v != X509_V_OK && SSL_get_error(io.ssl, rc) == SSL_ERROR_SSL)
      return absl::UnavailableError(absl::StrCat("TLS: the server's certificate is not trusted: ",
                                                 X509_verify_cert_error_string(v),
                                                 " (give its CA, or ?skip_verify=true to accept any)"));
    if (absl::Status st = io.SslWait(rc, deadline, "TLS handshake"); !st.ok())
      return absl::Status(st.code(), absl::StrCat("TLS: ", st.message()));
  }
}

}  // namespace

RedisConnection::~RedisConnection() = default;

absl::StatusOr<std::unique_ptr<RedisConnection>> RedisConnection::Connect(const RedisAddress& address,
                                                                          const RedisConnectOptions& options) {
  std::unique_ptr<RedisConnection> c(new RedisConnection());
  c->options_ = options;
  c->reader_ = RespReader(options.limits);
  c->where_ = address.Redacted();
  c->io_ = std::make_unique<Io>();
  const SteadyTime deadline = std::chrono::steady_clock::now() + options.connect_timeout;
  auto fail = [&](const absl::Status& st) {
    return absl::Status(st.code(), absl::StrCat("redis ", c->where_, ": ", st.message()));
  };
  absl::StatusOr<int> fd = ConnectSocket(address, deadline);
  if (!fd.ok()) return fail(fd.status());
  c->io_->fd = *fd;
  if (address.transport == RedisAddress::Transport::kTls)
    if (absl::Status st = Handshake(*c->io_, address, options, deadline); !st.ok()) return fail(st);
  std::vector<std::vector<std::string>> hello;
  if (!address.password.empty()) {
    if (address.username.empty()) {
      hello.push_back({"AUTH", address.password});
    } else {
      hello.push_back({"AUTH", address.username, address.password});
    }
  }
  if (address.db != 0) hello.push_back({"SELECT", std::to_string(address.db)});
  hello.push_back({"PING"});
  // The set-up shares the connect deadline.
  const auto saved = c->options_.io_timeout;
  c->options_.io_timeout = std::chrono::milliseconds(std::max(1, MillisLeft(deadline)));
  absl::StatusOr<std::vector<RespValue>> answers = c->Pipeline(hello);
  c->options_.io_timeout = saved;
  if (!answers.ok()) return answers.status();
  for (size_t i = 0; i < answers->size(); ++i) {
    const RespValue& v = (*answers)[i];
    if (v.type != RespValue::Type::kError) continue;
    // AUTH's answer names the problem (WRONGPASS, NOAUTH); the password is never in it.
    return absl::Status(hello[i][0] == "AUTH" ? absl::StatusCode::kPermissionDenied : absl::StatusCode::kFailedPrecondition,
                        absl::StrCat("redis ", c->where_, ": ", hello[i][0], " refused: ", v.text));
  }
  return c;
}

absl::StatusOr<std::vector<RespValue>> RedisConnection::Pipeline(std::span<const std::vector<std::string>> commands) {
  if (!broken_.ok()) return broken_;
  auto fail = [&](const absl::Status& st) {
    broken_ = absl::Status(st.code(), absl::StrCat("redis ", where_, ": ", st.message()));
    return broken_;
  };
  const SteadyTime deadline = std::chrono::steady_clock::now() + options_.io_timeout;
  std::string out;
  for (const std::vector<std::string>& cmd : commands) {
    std::vector<std::string_view> args(cmd.begin(), cmd.end());
    out += EncodeRespCommand(args);
  }
  if (absl::Status st = io_->WriteAll(out, deadline); !st.ok()) return fail(st);
  bytes_sent_ += out.size();
  std::vector<RespValue> answers;
  answers.reserve(commands.size());
  char buf[64 << 10];
  while (answers.size() < commands.size()) {
    absl::StatusOr<std::optional<RespValue>> next = reader_.Next();
    if (!next.ok()) return fail(next.status());
    if (next->has_value()) {
      answers.push_back(**std::move(next));
      continue;
    }
    absl::StatusOr<size_t> n = io_->ReadSome(buf, sizeof buf, deadline);
    if (!n.ok()) return fail(n.status());
    bytes_received_ += *n;
    reader_.Feed(std::string_view(buf, *n));
  }
  return answers;
}

absl::StatusOr<RespValue> RedisConnection::Command(std::vector<std::string> args) {
  std::vector<std::vector<std::string>> one{std::move(args)};
  EPP_ASSIGN_OR_RETURN(std::vector<RespValue> answers, Pipeline(one));
  return std::move(answers.front());
}

}  // namespace epp
