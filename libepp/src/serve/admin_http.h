// Private to libepp's serve runtime: the minimal HTTP/1.1 server behind serve's metrics/debug port
// (MetricsHttpServer in serve_metrics.h). GET and HEAD only, never a request body, every request
// and connection bounded in size and time.
//
// Threads: one event loop (epoll, non-blocking sockets) does all socket I/O, so a slow or stalled
// client holds only its own connection; handlers that may block (rendering /metrics, the
// --metrics-endpoint-auth TokenReview) run on a small worker pool and hand the serialized answer
// back to the loop (eventfd), which writes it without blocking.
//
// Per connection: a request's line and headers must arrive whole within `header_timeout` of the
// connection's accept (first request) or of the request's first byte (later ones), a deadline that
// does not restart per byte (408, then close); at most `max_head_bytes` (431; 414 for a request
// line over `max_request_line_bytes`) and `max_header_lines` header lines (431); a method other
// than GET/HEAD is answered 405 and one declaring a body (Content-Length > 0, any
// Transfer-Encoding) 413, both with `Connection: close` and without reading the body. Keep-alive
// connections are closed after `idle_timeout` without a request; a response not written within
// `write_timeout` closes the connection. Pipelined requests are answered in order.
//
// After an error answer the server stops sending, reads (and drops) what the client still sends
// for at most `linger_timeout` / kAdminLingerMaxBytes so that the answer reaches a client still
// sending, then closes.
//
// At `max_connections`, a new connection first makes room by dropping the connection that has been
// waiting longest without a request in progress on the server (lingering ones first, then idle
// keep-alive ones, then ones still sending their headers); when every connection has a request
// being answered, the new one is closed at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace epp::internal {

// Defaults of AdminHttpOptions (docs/serve.md, "The metrics port").
inline constexpr size_t kAdminMaxHeadBytes = 16 * 1024;        // request line + headers
inline constexpr size_t kAdminMaxRequestLineBytes = 8 * 1024;  // 414 past it
inline constexpr int kAdminMaxHeaderLines = 100;
inline constexpr std::chrono::milliseconds kAdminHeaderTimeout{10'000};
// Longer than Prometheus' scrape interval (its global default is 1 min; 15-30 s are usual), so a
// scraper keeps one connection.
inline constexpr std::chrono::milliseconds kAdminIdleTimeout{90'000};
inline constexpr std::chrono::milliseconds kAdminWriteTimeout{30'000};
inline constexpr std::chrono::milliseconds kAdminLingerTimeout{2'000};
inline constexpr size_t kAdminLingerMaxBytes = 256 * 1024;
inline constexpr int kAdminMaxConnections = 256;
inline constexpr int kAdminWorkers = 2;
// Answers waiting to be written (all connections): past it a finished answer is replaced by 503,
// so clients that ask for /metrics and never read cannot pin memory (one answer always fits).
inline constexpr size_t kAdminMaxPendingResponseBytes = 64 * 1024 * 1024;

// Counters, read by serve's /metrics (epp_metrics_http_*). Relaxed atomics: written by the loop.
struct AdminHttpStats {
  std::atomic<int64_t> connections{0};       // accepted
  std::atomic<int64_t> connections_open{0};  // now
  std::atomic<int64_t> requests{0};          // answers written or started (every status)
  // Refused requests and connections closed by a limit:
  std::atomic<int64_t> bad_request{0};       // 400, 505: a malformed request line or header
  std::atomic<int64_t> method{0};            // 405: not GET or HEAD
  std::atomic<int64_t> body{0};              // 413: a request declaring a body
  std::atomic<int64_t> header_too_large{0};  // 414, 431: request line or head over its size limit
  std::atomic<int64_t> too_many_headers{0};  // 431: over max_header_lines
  std::atomic<int64_t> header_timeout{0};    // request not complete within header_timeout (408 or close)
  std::atomic<int64_t> write_timeout{0};     // answer not written within write_timeout
  std::atomic<int64_t> connection_cap{0};    // new connection closed at once: every slot answering
  std::atomic<int64_t> evicted{0};           // a waiting connection dropped to make room for a new one
  std::atomic<int64_t> response_budget{0};   // 503: kAdminMaxPendingResponseBytes of answers unread
  // Not refusals: keep-alive connections closed after idle_timeout.
  std::atomic<int64_t> idle_closed{0};
};

struct AdminHttpOptions {
  size_t max_head_bytes = kAdminMaxHeadBytes;
  size_t max_request_line_bytes = kAdminMaxRequestLineBytes;
  int max_header_lines = kAdminMaxHeaderLines;
  std::chrono::milliseconds header_timeout = kAdminHeaderTimeout;
  std::chrono::milliseconds idle_timeout = kAdminIdleTimeout;
  std::chrono::milliseconds write_timeout = kAdminWriteTimeout;
  std::chrono::milliseconds linger_timeout = kAdminLingerTimeout;
  int max_connections = kAdminMaxConnections;
  int workers = kAdminWorkers;
  size_t max_pending_response_bytes = kAdminMaxPendingResponseBytes;
  AdminHttpStats* stats = nullptr;  // where to count; nullptr: the server's own (stats())
};

// One well-formed GET or HEAD request.
struct AdminRequest {
  std::string method;  // "GET" or "HEAD"
  std::string target;  // as sent: path and query
  std::string path;    // the target before '?', not decoded
  std::map<std::string, std::string> query;  // decoded ('+' is a space); the first of repeated keys
  std::string authorization;  // the first Authorization header's value
  bool keep_alive = true;     // HTTP/1.1 without `Connection: close`, HTTP/1.0 with `keep-alive`
  bool accept_gzip = false;   // Accept-Encoding names gzip (not with q=0)
};

struct AdminResponse {
  int status = 200;
  std::string content_type;  // none when empty
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // more headers (e.g. Allow)
  bool close = false;         // close the connection after this answer
  bool may_compress = false;  // gzip the body when the client accepts it
};

// Why a request or connection was refused (the label of epp_metrics_http_rejected_total).
enum class AdminReject { kNone, kBadRequest, kMethod, kBody, kHeaderTooLarge, kTooManyHeaders };

// Finds the end of a request head as its bytes arrive, checking the size limits on the way: each
// byte is looked at once, however the head is split across reads.
class AdminHeadScanner {
 public:
  enum class Step { kMore, kComplete, kError };
  // `in` is everything received for this request so far (the previous call's bytes as its prefix).
  Step Feed(std::string_view in, const AdminHttpOptions& limits);
  // kComplete: the head is in[request_start(), head_end()) (empty lines before the request line
  // are skipped, as RFC 9112 allows); head_end() bytes belong to this request.
  size_t request_start() const { return request_start_; }
  size_t head_end() const { return head_end_; }
  // kError: 414 or 431, and why.
  int status() const { return status_; }
  AdminReject reject() const { return reject_; }
  void Reset() { *this = AdminHeadScanner(); }

 private:
  Step Fail(int status, AdminReject why);
  size_t pos_ = 0, line_start_ = 0, request_start_ = 0, head_end_ = 0;
  bool have_request_line_ = false;
  int header_lines_ = 0;
  int status_ = 0;
  AdminReject reject_ = AdminReject::kNone;
};

struct AdminParseResult {
  int status = 0;  // 0: a GET/HEAD request; else 400, 405, 413 or 505
  AdminReject reject = AdminReject::kNone;
};
// Parses a complete head (request line, header lines, the empty line; CRLF or LF line ends) into
// `out`. Syntax is checked first (400/505), then the method (405), then a declared body (413).
AdminParseResult ParseAdminRequestHead(std::string_view head, AdminRequest* out);

// "a=1&b=x+y&c=%2F" -> {a: 1, b: "x y", c: "/"}; a malformed %-escape is kept as sent; the first
// of repeated keys wins; empty parts are skipped.
std::map<std::string, std::string> DecodeAdminQuery(std::string_view query);

// The whole answer: status line, headers (Content-Length always; Connection: keep-alive or close),
// and the body unless `head_only`. Gzips the body when `res.may_compress`, the request accepts it
// and the body is worth it.
std::string SerializeAdminResponse(const AdminResponse& res, bool head_only, bool keep_alive, bool accept_gzip);
const char* AdminStatusText(int status);

class AdminHttpServer {
 public:
  struct Handlers {
    // On the event loop, for every well-formed request: fill `res` and return true to answer at
    // once (must not block: /healthz, 404), or false to have `on_worker` answer it.
    std::function<bool(const AdminRequest& req, AdminResponse* res)> on_loop;
    // On a worker thread; may block (it delays the requests queued behind it, never the loop).
    std::function<AdminResponse(const AdminRequest& req)> on_worker;
  };

  // Listens on host:port (an IPv4 or IPv6 literal, brackets allowed, a name, or empty for
  // 0.0.0.0; port 0 picks a free one) with SO_REUSEADDR and a SOMAXCONN backlog. Returns once the
  // socket listens (connections queue until the loop accepts them). kUnavailable with the OS's
  // reason when the address cannot be resolved or bound.
  static absl::StatusOr<std::unique_ptr<AdminHttpServer>> Start(const std::string& host, int port, Handlers handlers,
                                                               AdminHttpOptions options = {});
  ~AdminHttpServer();
  AdminHttpServer(const AdminHttpServer&) = delete;
  AdminHttpServer& operator=(const AdminHttpServer&) = delete;

  int port() const;
  const AdminHttpStats& stats() const;
  // Wakes the loop, closes the listening socket and every connection, and joins the loop and the
  // workers (a handler still running is waited for). Idempotent.
  void Stop();

  struct Impl;

 private:
  explicit AdminHttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace epp::internal
