// MetricsAuthorizer (epp/runtime/metrics_auth.h): TokenReview, then SubjectAccessReview, cached.
#include "epp/runtime/metrics_auth.h"

#include <map>
#include <mutex>

#include <nlohmann/json.hpp>

#include "common/json.h"

namespace epp {

struct MetricsAuthorizer::Impl {
  MetricsAuthOptions options;
  const Logger& log;
  std::mutex mu;                      // one API round trip at a time (KubeClient is single-threaded)
  std::unique_ptr<KubeClient> kube;   // under mu
  struct Cached {
    Verdict verdict;
    std::chrono::steady_clock::time_point until;
  };
  std::map<std::string, Cached> cache;  // token + "\n" + path -> verdict, under mu

  Impl(MetricsAuthOptions o, std::unique_ptr<KubeClient> k)
      : options(std::move(o)), log(options.log ? *options.log : NullLogger::Get()), kube(std::move(k)) {}

  // Under mu.
  Verdict Review(const std::string& token, std::string_view path) {
    using json = nlohmann::json;
    const json review = {{"apiVersion", "authentication.k8s.io/v1"}, {"kind", "TokenReview"}, {"spec", {{"token", token}}}};
    absl::StatusOr<std::string> got = kube->Send("POST", "/apis/authentication.k8s.io/v1/tokenreviews", review.dump());
    if (!got.ok()) return {503, "cannot review the token: " + std::string(got.status().message())};
    absl::StatusOr<json> doc = internal::ParseJson(*got);
    const json* status = doc.ok() && doc->is_object() && doc->contains("status") ? &(*doc)["status"] : nullptr;
    if (status == nullptr || !status->is_object()) return {503, "the TokenReview answer has no status"};
    if (!status->value("authenticated", false)) return {401, "the token is not authenticated"};
    const json user = status->value("user", json::object());
    json spec = {{"user", user.value("username", "")},
                 {"nonResourceAttributes", {{"path", std::string(path)}, {"verb", "get"}}}};
    if (user.contains("groups")) spec["groups"] = user["groups"];
    if (user.contains("uid")) spec["uid"] = user["uid"];
    if (user.contains("extra")) spec["extra"] = user["extra"];
    const json sar = {{"apiVersion", "authorization.k8s.io/v1"}, {"kind", "SubjectAccessReview"}, {"spec", spec}};
    got = kube->Send("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", sar.dump());
    if (!got.ok()) return {503, "cannot review access: " + std::string(got.status().message())};
    doc = internal::ParseJson(*got);
    status = doc.ok() && doc->is_object() && doc->contains("status") ? &(*doc)["status"] : nullptr;
    if (status == nullptr || !status->is_object()) return {503, "the SubjectAccessReview answer has no status"};
    if (!status->value("allowed", false))
      return {403, "user '" + user.value("username", std::string()) + "' may not get " + std::string(path)};
    return {200, ""};
  }
};

absl::StatusOr<std::unique_ptr<MetricsAuthorizer>> MetricsAuthorizer::Create(MetricsAuthOptions options) {
  EPP_ASSIGN_OR_RETURN(std::unique_ptr<KubeClient> kube, KubeClient::Create(options.kube));
  return std::unique_ptr<MetricsAuthorizer>(new MetricsAuthorizer(std::make_unique<Impl>(std::move(options), std::move(kube))));
}

MetricsAuthorizer::MetricsAuthorizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MetricsAuthorizer::~MetricsAuthorizer() = default;

MetricsAuthorizer::Verdict MetricsAuthorizer::Check(std::string_view authorization, std::string_view path) {
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.size() <= kBearer.size() || authorization.substr(0, kBearer.size()) != kBearer)
    return {401, "a bearer token is required (Authorization: Bearer TOKEN)"};
  const std::string token(authorization.substr(kBearer.size()));
  const std::string key = token + "\n" + std::string(path);
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  const auto now = std::chrono::steady_clock::now();
  if (auto it = m.cache.find(key); it != m.cache.end() && it->second.until > now) return it->second.verdict;
  Verdict v = m.Review(token, path);
  if (v.status == 503) {
    m.log.Warn("metrics endpoint auth: " + v.reason);
    return v;  // not cached: the next scrape tries again
  }
  if (m.cache.size() >= 1024) {
    // Drop the expired ones; if none, all (a flood of distinct tokens cannot grow the map).
    for (auto it = m.cache.begin(); it != m.cache.end();) it = it->second.until <= now ? m.cache.erase(it) : std::next(it);
    if (m.cache.size() >= 1024) m.cache.clear();
  }
  m.cache[key] = {v, now + m.options.cache_ttl};
  return v;
}

}  // namespace epp
