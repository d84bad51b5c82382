// Authentication and authorization of the metrics port, as GIE's and llm-d's EPP do it with
// --metrics-endpoint-auth (controller-runtime's WithAuthenticationAndAuthorization filter): the
// scraper's bearer token is checked with a TokenReview, and the user it names must be allowed
// `get` on the non-resource URL (/metrics, /debug/decisions) by a SubjectAccessReview. A
// Prometheus scraping in cluster therefore needs a ClusterRole granting `get` on nonResourceURLs
// ["/metrics"] bound to its ServiceAccount, exactly as for the reference.
//
// Answers: no or malformed Authorization header -> 401; a token the API server does not
// authenticate -> 401; authenticated but not allowed -> 403; the API server unreachable -> 503
// (nothing is served unverified). Verdicts are cached per token and path for `cache_ttl` (the
// cache holds at most 1,024 entries), so a scrape every few seconds costs two API requests per
// TTL, not per scrape.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "epp/runtime/kube.h"
#include "epp/runtime/logger.h"
#include "epp/status.h"

namespace epp {

struct MetricsAuthOptions {
  KubeClientOptions kube;
  std::chrono::milliseconds cache_ttl{10000};
  const Logger* log = nullptr;
};

class MetricsAuthorizer {
 public:
  static absl::StatusOr<std::unique_ptr<MetricsAuthorizer>> Create(MetricsAuthOptions options);
  ~MetricsAuthorizer();

  struct Verdict {
    int status = 200;     // 200 allowed, 401, 403 or 503
    std::string reason;   // for the answer's body and the debug log
  };
  // `authorization` is the request's Authorization header value ("" when absent). Thread-safe.
  Verdict Check(std::string_view authorization, std::string_view path);

  struct Impl;

 private:
  explicit MetricsAuthorizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace epp
