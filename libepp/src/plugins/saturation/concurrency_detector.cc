// concurrency-detector: llm-d Router's saturation detector from in-flight accounting (requests,
// tokens, or both), also a filter that drops endpoints at their concurrency limit. It reads the
// scheduler's own in-flight counters (SchedulingContext::InflightRequests / InflightTokens), so it
// reacts to a burst before any metrics scrape sees it, and is blind to what the engine reports.
#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "epp/param_table.h"
#include "epp/scheduling.h"
#include "plugins/saturation/saturation.h"

namespace epp::plugins {
namespace {

using internal::Num;

struct ConcurrencyOptions {
  std::string mode = "requests";
  int64_t max_concurrency = 100;
  int64_t max_token_concurrency = 1000000;
  double headroom = 0;
  std::string producer;  // accepted for llm-d configs; see the parameter's doc
};

// llm-d-router's names and defaults (flowcontrol/saturationdetector/concurrency).
const ParamTable<ConcurrencyOptions>& Table() {
  static const auto* t =
      &(*new ParamTable<ConcurrencyOptions>())
           .String("concurrencyMode", &ConcurrencyOptions::mode,
                   "requests: in-flight requests; tokens: in-flight tokens; hybrid: the larger ratio per endpoint",
                   {"requests", "tokens", "hybrid"})
           .Int("maxConcurrency", &ConcurrencyOptions::max_concurrency, Range::Above(0),
                "in-flight requests an endpoint is sized for")
           .Int("maxTokenConcurrency", &ConcurrencyOptions::max_token_concurrency, Range::Above(0),
                "in-flight tokens an endpoint is sized for")
           .Number("headroom", &ConcurrencyOptions::headroom, Range::AtLeast(0),
                   "fraction over capacity the filter still admits (saturation uses capacity itself)")
           .String("inFlightLoadProducerName", &ConcurrencyOptions::producer,
                   "llm-d's in-flight load producer to read; epp's scheduler keeps the counts itself, so the "
                   "name is accepted and the counts are the same")
           .OmitEmpty();
  return *t;
}

double Ratio(int64_t inflight, int64_t capacity) {
  // Fails closed, as the reference does (unreachable with capacities > 0).
  return capacity == 0 ? 1.0 : static_cast<double>(inflight) / static_cast<double>(capacity);
}

class ConcurrencyDetector : public Plugin, public SaturationDetector, public Filter {
 public:
  ConcurrencyDetector(TypedName tn, ConcurrencyOptions o)
      : Plugin(std::move(tn)),
        o_(std::move(o)),
        requests_(o_.mode != "tokens"),
        tokens_(o_.mode != "requests"),
        request_limit_(static_cast<int64_t>(static_cast<double>(o_.max_concurrency) * (1.0 + o_.headroom))),
        token_limit_(static_cast<int64_t>(static_cast<double>(o_.max_token_concurrency) * (1.0 + o_.headroom))) {}

  const SaturationDetector* AsSaturationDetector() const override { return this; }
  const Filter* AsFilter() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kInflightLoad}; }
  Params EffectiveParams() const override { return Table().Effective(o_); }

  // requests / tokens: everything in flight over the pool's capacity (an aggregate: large
  // endpoints weigh more). hybrid: the mean over endpoints of the larger of their two ratios, so
  // endpoints full on different dimensions are not averaged away. No candidates: 1.
  double Saturation(const SchedulingContext& ctx, Candidates candidates) const override {
    if (candidates.empty()) return 1.0;
    const Totals t = Sum(ctx, candidates);
    if (o_.mode == "tokens") return Ratio(t.tokens, t.n * o_.max_token_concurrency);
    if (o_.mode == "hybrid") return t.hybrid_sum / static_cast<double>(t.n);
    return Ratio(t.requests, t.n * o_.max_concurrency);
  }

  std::string ExplainSaturation(const SchedulingContext& ctx, Candidates candidates) const override {
    if (candidates.empty()) return "no candidates: saturation 1";
    const Totals t = Sum(ctx, candidates);
    const double s = Saturation(ctx, candidates);
    if (o_.mode == "tokens")
      return absl::StrCat(t.tokens, " tokens in flight / (", t.n, " endpoints x maxTokenConcurrency ",
                          o_.max_token_concurrency, ") = ", Num(s));
    if (o_.mode == "hybrid")
      return absl::StrCat("mean of max(requests/", o_.max_concurrency, ", tokens/", o_.max_token_concurrency, ") over ",
                          t.n, " endpoints = ", Num(s), " (", t.requests, " requests, ", t.tokens, " tokens in flight)");
    return absl::StrCat(t.requests, " requests in flight / (", t.n, " endpoints x maxConcurrency ", o_.max_concurrency,
                        ") = ", Num(s));
  }

  // Keeps endpoints below capacity x (1 + headroom) (in hybrid mode, below both limits). Unlike
  // utilization-detector it does not fail open: with every endpoint at its limit the profile has
  // none left, and the cycle answers 429, as llm-d does.
  std::vector<const Endpoint*> Apply(const SchedulingContext& ctx, Candidates candidates) const override {
    std::vector<const Endpoint*> out;
    out.reserve(candidates.size());
    for (const Endpoint* e : candidates)
      if (Admits(ctx, e)) out.push_back(e);
    return out;
  }

  bool RemovesBusyEndpoints() const override { return true; }
  std::string WhyRemoved(const SchedulingContext& ctx, const Endpoint& e) const override {
    const int64_t r = ctx.InflightRequests(&e), k = ctx.InflightTokens(&e);
    if (requests_ && r >= request_limit_)
      return absl::StrCat(r, " requests in flight >= limit ", request_limit_, " (maxConcurrency ", o_.max_concurrency,
                          " x (1 + headroom ", Num(o_.headroom), "))");
    if (tokens_ && k >= token_limit_)
      return absl::StrCat(k, " tokens in flight >= limit ", token_limit_, " (maxTokenConcurrency ",
                          o_.max_token_concurrency, " x (1 + headroom ", Num(o_.headroom), "))");
    return {};
  }

 private:
  struct Totals {
    int64_t n = 0, requests = 0, tokens = 0;
    double hybrid_sum = 0;
  };
  Totals Sum(const SchedulingContext& ctx, Candidates candidates) const {
    Totals t;
    for (const Endpoint* e : candidates) {
      const int64_t r = ctx.InflightRequests(e), k = ctx.InflightTokens(e);
      ++t.n;
      t.requests += r;
      t.tokens += k;
      t.hybrid_sum += std::max(Ratio(r, o_.max_concurrency), Ratio(k, o_.max_token_concurrency));
    }
    return t;
  }
  bool Admits(const SchedulingContext& ctx, const Endpoint* e) const {
    return (!requests_ || ctx.InflightRequests(e) < request_limit_) && (!tokens_ || ctx.InflightTokens(e) < token_limit_);
  }

  ConcurrencyOptions o_;
  bool requests_, tokens_;  // which limits the filter applies
  int64_t request_limit_, token_limit_;
};

}  // namespace

PluginSchema ConcurrencyDetectorSchema() { return Table().Schema(); }

PluginOr CreateConcurrencyDetector(const std::string& name, const Params& params, const PluginContext& ctx) {
  EPP_ASSIGN_OR_RETURN(ConcurrencyOptions o, Table().Read(params));
  if (o.headroom > 1.0 && ctx.warnings != nullptr) {
    // The reference logs the same doubt: a percentage written where a fraction belongs.
    ctx.warnings->push_back(absl::StrCat("plugin '", name, "' (", ToAbsl(kConcurrencyDetectorType), "): headroom ", Num(o.headroom),
                                         " allows ", Num(o.headroom * 100),
                                         "% over capacity; headroom is a fraction (0.2 = 20%)"));
  }
  return std::make_unique<ConcurrencyDetector>(TN(kConcurrencyDetectorType, name), std::move(o));
}

}  // namespace epp::plugins
