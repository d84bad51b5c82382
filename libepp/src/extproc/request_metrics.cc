// ExtProcStats' per-model request figures (GIE's inference_objective_* metrics) and the request
// policies from the cluster (RequestPolicies, RequestPolicyHandle): what sessions record and read
// besides the pick itself.
#include <algorithm>

#include "epp/runtime/extproc.h"

namespace epp {
namespace {

// GIE's bucket bounds (pkg/epp/metrics), so that dashboards' histogram_quantile over epp's
// series reads the same resolution as over the reference's.
const std::vector<double> kLatency = {0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6,
                                      8, 10, 15, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200,
                                      1800, 2700, 3600};
const std::vector<double> kTpot = {0.0005, 0.00205, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.125, 0.15, 0.2,
                                   0.3, 0.4, 0.5, 0.6, 0.8, 1, 1.5, 2, 3, 4.5, 6, 12, 18, 24, 30, 36, 48, 60,
                                   90, 120, 180, 270, 360};
const std::vector<double> kNtpot = {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0};
const std::vector<double> kRequestBytes = {64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536,
                                           131072, 262144, 524288, 1048576, 2097152, 4194304, 8388608,
                                           16777216, 33554432, 67108864, 134217728, 268435456, 536870912,
                                           1073741824};
const std::vector<double> kResponseBytes = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32778, 65536};
const std::vector<double> kInputTokens = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32778,
                                          65536, 131072, 262144, 524288, 1048576};
const std::vector<double> kOutputTokens = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};

ExtProcStats::ModelFigures NewFigures() {
  ExtProcStats::ModelFigures f;
  const std::pair<ExtProcStats::Histogram*, const std::vector<double>*> all[] = {
      {&f.duration, &kLatency},        {&f.request_bytes, &kRequestBytes}, {&f.response_bytes, &kResponseBytes},
      {&f.input_tokens, &kInputTokens}, {&f.output_tokens, &kOutputTokens}, {&f.cached_tokens, &kInputTokens},
      {&f.ttft, &kLatency},            {&f.tpot, &kTpot},                   {&f.ntpot, &kNtpot}};
  for (const auto& [h, bounds] : all) {
    h->bounds = bounds;
    h->counts.assign(bounds->size() + 1, 0);
  }
  return f;
}

}  // namespace

void ExtProcStats::Histogram::Observe(double v) {
  const auto it = std::lower_bound(bounds->begin(), bounds->end(), v);  // le: v <= bound
  counts[static_cast<size_t>(it - bounds->begin())]++;
  sum += v;
  count++;
}

const std::vector<double>& ExtProcStats::LatencyBucketsSeconds() { return kLatency; }

std::string_view ExtProcStats::ErrorCode(int status) {
  switch (status) {
    case 400:
    case 413: return "BadRequest";
    case 429: return "InferencePoolResourceExhausted";
    case 503: return "ServiceUnavailable";
    default: return "Internal";
  }
}

void ExtProcStats::RecordModelRequest(const std::string& model, const std::string& target, int priority, size_t bytes) {
  std::lock_guard<std::mutex> lock(models_mu_);
  auto it = models_.find({model, target});
  if (it == models_.end()) it = models_.emplace(std::make_pair(model, target), NewFigures()).first;
  it->second.requests[priority]++;
  it->second.running++;
  it->second.request_bytes.Observe(static_cast<double>(bytes));
}

void ExtProcStats::RecordModelError(const std::string& model, const std::string& target, int status) {
  std::lock_guard<std::mutex> lock(models_mu_);
  auto it = models_.find({model, target});
  if (it == models_.end()) it = models_.emplace(std::make_pair(model, target), NewFigures()).first;
  it->second.errors[std::string(ErrorCode(status))]++;
  it->second.running = std::max<int64_t>(0, it->second.running - 1);  // the request ended here
}

void ExtProcStats::RecordModelResponse(const std::string& model, const std::string& target, const ModelResponse& r) {
  std::lock_guard<std::mutex> lock(models_mu_);
  auto it = models_.find({model, target});
  if (it == models_.end()) it = models_.emplace(std::make_pair(model, target), NewFigures()).first;
  ModelFigures& f = it->second;
  f.running = std::max<int64_t>(0, f.running - 1);
  f.duration.Observe(r.duration_s);
  f.response_bytes.Observe(static_cast<double>(r.response_bytes));
  if (r.input_tokens) f.input_tokens.Observe(static_cast<double>(*r.input_tokens));
  if (r.cached_tokens) f.cached_tokens.Observe(static_cast<double>(*r.cached_tokens));
  if (r.output_tokens) {
    f.output_tokens.Observe(static_cast<double>(*r.output_tokens));
    if (*r.output_tokens > 0) f.ntpot.Observe(r.duration_s / static_cast<double>(*r.output_tokens));
  }
  if (r.ttft_s) {
    f.ttft.Observe(*r.ttft_s);
    // Time per output token after the first, as GIE measures it on streamed responses.
    if (r.output_tokens && *r.output_tokens > 1)
      f.tpot.Observe(std::max(0.0, r.duration_s - *r.ttft_s) / static_cast<double>(*r.output_tokens - 1));
  }
}

std::map<std::pair<std::string, std::string>, ExtProcStats::ModelFigures> ExtProcStats::ModelFiguresByModel() const {
  std::lock_guard<std::mutex> lock(models_mu_);
  return models_;
}

void ExtProcStats::RecordRewrite(const std::string& rule, const std::string& model, const std::string& target) {
  std::lock_guard<std::mutex> lock(models_mu_);
  rewrites_[{rule, model, target}]++;
}

std::map<std::tuple<std::string, std::string, std::string>, int64_t> ExtProcStats::Rewrites() const {
  std::lock_guard<std::mutex> lock(models_mu_);
  return rewrites_;
}

// ---- Request policies ------------------------------------------------------------------------------

const ModelRewriteRule* RequestPolicies::RuleFor(std::string_view model) const {
  // `rewrites` is in precedence order within each kind; an exact match anywhere beats a generic
  // rule anywhere.
  for (const ModelRewriteRule& r : rewrites)
    if (std::find(r.models.begin(), r.models.end(), model) != r.models.end()) return &r;
  for (const ModelRewriteRule& r : rewrites)
    if (r.models.empty()) return &r;
  return nullptr;
}

const std::string& PickRewriteTarget(const ModelRewriteRule& rule, double u) {
  static const std::string kNone;
  if (rule.targets.empty()) return kNone;
  int64_t total = 0;
  for (const ModelRewriteTarget& t : rule.targets) total += std::max(0, t.weight);
  if (total == 0) {
    size_t i = static_cast<size_t>(u * static_cast<double>(rule.targets.size()));
    return rule.targets[std::min(i, rule.targets.size() - 1)].model;
  }
  const double point = u * static_cast<double>(total);
  double acc = 0;
  for (const ModelRewriteTarget& t : rule.targets) {
    acc += std::max(0, t.weight);
    if (point < acc) return t.model;
  }
  for (auto it = rule.targets.rbegin(); it != rule.targets.rend(); ++it)
    if (it->weight > 0) return it->model;
  return rule.targets.back().model;
}

void RequestPolicyHandle::Set(std::shared_ptr<const RequestPolicies> policies) {
  if (!policies) policies = std::make_shared<const RequestPolicies>();
  std::lock_guard<std::mutex> lock(mu_);
  current_ = std::move(policies);
}

std::shared_ptr<const RequestPolicies> RequestPolicyHandle::Get() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

}  // namespace epp
