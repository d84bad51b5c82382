// A small HTTP client for scraping model servers and probing their OpenAI APIs.
//
// HttpFetchAll() runs every request concurrently on the calling thread (libcurl's multi
// interface), so the wall time of N requests is about that of the slowest one. Each request has
// its own timeout and body-size cap. Thread-safe: independent calls share nothing.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "epp/status.h"

namespace epp {

inline constexpr size_t kDefaultMaxBodyBytes = size_t{16} << 20;  // 16 MiB
inline constexpr std::chrono::milliseconds kDefaultHttpTimeout{2000};

struct HttpRequest {
  std::string url;                    // http:// or https://
  std::string method = "GET";         // GET, POST, PUT, PATCH or DELETE
  std::string body;                   // sent with POST, PUT and PATCH
  std::vector<std::string> headers;   // "Name: value"
  std::chrono::milliseconds timeout = kDefaultHttpTimeout;
  bool insecure = false;              // skip TLS certificate and host verification
  size_t max_body_bytes = kDefaultMaxBodyBytes;
  // Ask for a gzip-compressed answer (Accept-Encoding: gzip), as Prometheus scrapers do. Not br:
  // brotli costs servers ~1 ms per small answer.
  bool accept_gzip = true;
  // PEM file of the CAs that verify the server (https); empty = the system's CA store.
  std::string ca_file;
};

struct HttpResponse {
  long status = 0;             // HTTP status code
  std::string body;
  std::string content_type;
  double elapsed_ms = 0;
};

// A client that keeps connections open between calls (libcurl's connection cache lives in its
// multi handle), for callers that hit the same servers again and again: a scraper, a load
// generator. Not thread-safe: one thread uses one client.
class HttpClient {
 public:
  HttpClient();
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // As HttpFetchAll(), reusing connections from earlier calls. Answers to requests Start()ed
  // before the call are kept for the next Wait().
  std::vector<absl::StatusOr<HttpResponse>> FetchAll(std::span<const HttpRequest> requests);

  // Asynchronous use, for one thread that keeps many requests in flight and handles each answer
  // as it arrives (the serve pool's staggered scrape loop). Start() begins a request and returns
  // its id (never 0). Wait() drives every transfer and returns as soon as at least one has
  // finished (all that have), when `deadline` passes (none, or what finished by then), or when
  // Wakeup() is called; with nothing in flight it sleeps until the deadline or the wakeup.
  struct Finished {
    uint64_t id;
    absl::StatusOr<HttpResponse> response;  // as HttpFetchAll() answers
  };
  uint64_t Start(HttpRequest request);
  std::vector<Finished> Wait(std::chrono::steady_clock::time_point deadline);
  // Abandons a request in flight (or finished and not handed out): Wait() never returns it.
  void Cancel(uint64_t id);
  size_t in_flight() const;
  // Ends the current or next Wait() early. The one method that may be called from any thread.
  void Wakeup();
  // Idle connections kept open for reuse (libcurl's CURLMOPT_MAXCONNECTS). libcurl's default
  // follows the requests in flight (4 per request), which a staggered loop with few requests in
  // flight at a time would undercut: size it to the number of servers the client talks to.
  void set_max_idle_connections(size_t n);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Performs `requests` concurrently; result i answers request i. A transport failure is a Status
// naming the method and URL: kUnavailable (refused, DNS, TLS), kDeadlineExceeded (timeout),
// kResourceExhausted (body larger than max_body_bytes). A non-2xx answer is not an error here.
std::vector<absl::StatusOr<HttpResponse>> HttpFetchAll(std::span<const HttpRequest> requests);

// One request, same semantics.
absl::StatusOr<HttpResponse> HttpFetch(const HttpRequest& request);

// A streaming request (a Kubernetes watch): the body is handed over as it arrives instead of
// being collected, and another thread may end the transfer at once. One transfer at a time; Run()
// on one thread, Cancel() from any.
class HttpStream {
 public:
  HttpStream();
  ~HttpStream();
  HttpStream(const HttpStream&) = delete;
  HttpStream& operator=(const HttpStream&) = delete;

  // Performs `request` (its timeout bounds the whole transfer; max_body_bytes is not applied to a
  // 2xx body, which may run for as long as the server streams). A 2xx body goes to `on_data` piece
  // by piece (return false to stop reading: Run then returns the status as if the body had ended);
  // any other answer's body is collected, up to 64 KiB, into `error_body`. Returns the HTTP
  // status; transport failures as HttpFetch() reports them, kCancelled after Cancel().
  absl::StatusOr<long> Run(const HttpRequest& request, const std::function<bool(std::string_view)>& on_data,
                           std::string* error_body);
  // Ends the transfer in progress now, and the next Run() before it starts (until Reset()).
  void Cancel();
  void Reset();  // forget an earlier Cancel()

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// True for a transport failure where the server's host answered but nothing listens on the port
// (TCP connection refused): the process is gone, not merely slow. Timeouts, dropped connections
// and TLS or DNS failures are not this.
bool IsConnectionRefused(const absl::Status& status);

}  // namespace epp
