// A small HTTP client for scraping model servers and probing their OpenAI APIs.
//
// HttpFetchAll() runs every request concurrently on the calling thread (libcurl's multi
// interface), so the wall time of N requests is about that of the slowest one. Each request has
// its own timeout and body-size cap. Thread-safe: independent calls share nothing.
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "epp/status.h"

namespace epp {

inline constexpr size_t kDefaultMaxBodyBytes = size_t{16} << 20;  // 16 MiB
inline constexpr std::chrono::milliseconds kDefaultHttpTimeout{2000};

struct HttpRequest {
  std::string url;                    // http:// or https://
  std::string method = "GET";         // GET or POST
  std::string body;                   // sent when method is POST
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

  // As HttpFetchAll(), reusing connections from earlier calls.
  std::vector<absl::StatusOr<HttpResponse>> FetchAll(std::span<const HttpRequest> requests);

 private:
  void* multi_;  // CURLM*, kept out of this header
};

// Performs `requests` concurrently; result i answers request i. A transport failure is a Status
// naming the method and URL: kUnavailable (refused, DNS, TLS), kDeadlineExceeded (timeout),
// kResourceExhausted (body larger than max_body_bytes). A non-2xx answer is not an error here.
std::vector<absl::StatusOr<HttpResponse>> HttpFetchAll(std::span<const HttpRequest> requests);

// One request, same semantics.
absl::StatusOr<HttpResponse> HttpFetch(const HttpRequest& request);

// True for a transport failure where the server's host answered but nothing listens on the port
// (TCP connection refused): the process is gone, not merely slow. Timeouts, dropped connections
// and TLS or DNS failures are not this.
bool IsConnectionRefused(const absl::Status& status);

}  // namespace epp
