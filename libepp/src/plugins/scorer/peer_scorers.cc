// Two peers' routing costs as scorers, written from their public descriptions
// (../shared/reference/peers.md sections 3 and 4), for `eppctl replay`'s named baselines:
//
// vllm-loadaware-scorer (vLLM production-stack's `loadaware` routing logic):
//   value_e = matched_e / prompt - beta x (load_e - mean load) / max(1, mean load)
//   matched_e: prompt tokens the prefix producer places on e; load_e: the EPP's in-flight requests
//   on e; mean over the candidates. Scores are the values min-max normalised over the candidates
//   (the argmax is production-stack's pick; all equal: 1).
//
// dynamo-kv-cost-scorer (NVIDIA Dynamo's KV router cost, router-concepts.md):
//   prefill_e = max(active prefill blocks_e + request blocks - overlap blocks_e, 0)
//   decode_e  = active decode blocks_e + request blocks
//   cost_e    = prefillLoadScale x prefill_e + decode_e
//   active prefill blocks: the prompt blocks this scorer placed on e. prefillLoadModel `drain`
//   (default): drained at prefillTokensPerSecond. `firstToken` (Dynamo's default): kept until the
//   response path reports the pick's first token (FirstTokenObserver), or dropped after
//   firstTokenTimeoutMs for picks whose first token is never seen (non-streamed answers);
//   active decode blocks: the EPP's in-flight token estimate on e / block size; overlap: the prefix
//   producer's matched blocks. Scores: (max cost - cost) / (max - min) (Dynamo's temperature-0
//   argmin; all equal: 1).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "plugins/scorer/prefill_queue.h"
#include "plugins/scorer/scorer.h"

namespace epp::plugins {
namespace {

using internal::Num;

// Min-max normalised, higher is better; all equal (or one) -> 1.
void Normalise(std::span<double> v) {
  if (v.empty()) return;
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  const double a = *lo, b = *hi;
  for (double& x : v) x = b - a > 1e-12 ? (x - a) / (b - a) : 1.0;
}

int64_t MatchedTokens(const SchedulingContext& ctx, const Endpoint& e, int64_t prompt) {
  if (!ctx.prefix.computed) return 0;
  return std::min<int64_t>(prompt, static_cast<int64_t>(ctx.PrefixMatchBlocks(&e)) * ctx.prefix.block_size_tokens);
}

struct VllmLoadAwareOptions {
  double beta = 1.0;
};

const ParamTable<VllmLoadAwareOptions>& VllmLoadAwareTable() {
  static const auto* t = &(*new ParamTable<VllmLoadAwareOptions>())
                              .Number("beta", &VllmLoadAwareOptions::beta, Range::AtLeast(0),
                                      "weight of the load term against the matched share of the prompt");
  return *t;
}

class VllmLoadAwareScorer : public Plugin, public Scorer {
 public:
  VllmLoadAwareScorer(TypedName tn, VllmLoadAwareOptions o) : Plugin(std::move(tn)), beta_(o.beta) {}
  const Scorer* AsScorer() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kPrefixMatch, PluginInput::kInflightLoad}; }
  ScorerCategory category() const override { return ScorerCategory::kAffinity; }
  Params EffectiveParams() const override { return VllmLoadAwareTable().Effective(VllmLoadAwareOptions{beta_}); }
  void Score(const SchedulingContext& ctx, Candidates candidates, std::span<double> scores) const override {
    const double mean = MeanLoad(ctx, candidates);
    for (size_t i = 0; i < candidates.size(); ++i) scores[i] = Value(ctx, *candidates[i], mean);
    Normalise(scores.subspan(0, candidates.size()));
  }
  std::string Explain(const SchedulingContext& ctx, const Endpoint& e) const override {
    const int64_t prompt = std::max<int64_t>(1, ctx.request ? ctx.request->prompt_tokens : 1);
    return absl::StrCat("matched ", MatchedTokens(ctx, e, prompt), "/", prompt, " - ", Num(beta_), " x relative load (",
                        ctx.InflightRequests(&e), " in flight) = ", Num(Value(ctx, e, last_mean_.load(std::memory_order_relaxed))), " before normalising");
  }

 private:
  double MeanLoad(const SchedulingContext& ctx, Candidates candidates) const {
    double sum = 0;
    for (const Endpoint* e : candidates) sum += static_cast<double>(ctx.InflightRequests(e));
    const double mean = candidates.empty() ? 0 : sum / static_cast<double>(candidates.size());
    last_mean_.store(mean, std::memory_order_relaxed);
    return mean;
  }
  double Value(const SchedulingContext& ctx, const Endpoint& e, double mean) const {
    const int64_t prompt = std::max<int64_t>(1, ctx.request ? ctx.request->prompt_tokens : 1);
    const double ratio = static_cast<double>(MatchedTokens(ctx, e, prompt)) / static_cast<double>(prompt);
    return ratio - beta_ * (static_cast<double>(ctx.InflightRequests(&e)) - mean) / std::max(1.0, mean);
  }
  const double beta_;
  mutable std::atomic<double> last_mean_{0};  // the last cycle's mean, for Explain (which sees no candidates)
};

struct DynamoKvCostOptions {
  double scale = 1.0;
  double rate = 20000;
  int block = 16;
  std::string model = "drain";  // prefillLoadModel
  double timeout_ms = 30000;
};

const ParamTable<DynamoKvCostOptions>& DynamoKvCostTable() {
  static const auto* t =
      &(*new ParamTable<DynamoKvCostOptions>())
           .Number("prefillLoadScale", &DynamoKvCostOptions::scale, Range::AtLeast(0),
                   "weight of the prefill blocks against the decode blocks")
           .Number("prefillTokensPerSecond", &DynamoKvCostOptions::rate, Range::Above(0),
                   "rate at which placed prefill drains (prefillLoadModel drain)")
           .Int("blockSize", &DynamoKvCostOptions::block, Range::Closed(1, 4096), "tokens per KV block")
           .String("prefillLoadModel", &DynamoKvCostOptions::model,
                   "drain: prefill drains at prefillTokensPerSecond; firstToken: held until the first token",
                   {"drain", "firstToken"})
           .Number("firstTokenTimeoutMs", &DynamoKvCostOptions::timeout_ms, Range::OpenClosed(0, 3.6e6),
                   "with firstToken: prefill dropped after this long without a first token");
  return *t;
}

class DynamoKvCostScorer : public Plugin, public Scorer, public RequestObserver, public FirstTokenObserver, public EndpointState {
 public:
  DynamoKvCostScorer(TypedName tn, DynamoKvCostOptions o)
      : Plugin(std::move(tn)),
        o_(o),
        scale_(o.scale),
        rate_(o.rate),
        block_(o.block),
        until_first_token_(o.model == "firstToken"),
        timeout_us_(static_cast<int64_t>(o.timeout_ms * 1000)),
        queues_(o.rate) {}
  const Scorer* AsScorer() const override { return this; }
  const RequestObserver* AsRequestObserver() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kPrefixMatch, PluginInput::kInflightLoad}; }
  ScorerCategory category() const override { return ScorerCategory::kDistribution; }
  Params EffectiveParams() const override { return DynamoKvCostTable().Effective(o_); }
  void Score(const SchedulingContext& ctx, Candidates candidates, std::span<double> scores) const override {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < candidates.size(); ++i) scores[i] = -CostLocked(ctx, *candidates[i]).cost;
    Normalise(scores.subspan(0, candidates.size()));
  }
  std::string Explain(const SchedulingContext& ctx, const Endpoint& e) const override {
    std::lock_guard<std::mutex> lock(mu_);
    const Cost c = CostLocked(ctx, e);
    return absl::StrCat("cost ", Num(c.cost), " = ", Num(scale_), " x prefill ", Num(c.prefill), " blocks + decode ",
                        Num(c.decode), " blocks");
  }
  void PreRequest(const SchedulingContext& ctx, const Endpoint& picked) const override {
    std::lock_guard<std::mutex> lock(mu_);
    const double tokens = CostLocked(ctx, picked).uncached_tokens;
    if (!until_first_token_) {
      queues_.Add(picked.address, tokens, ctx.now_us);
    } else if (ctx.pick_id != 0 && !active_.contains(ctx.pick_id)) {  // the primary target only
      active_[ctx.pick_id] = Active{picked.address, ctx.now_us, tokens};
      held_[picked.address] += tokens;
    }
  }
  void FirstToken(uint64_t pick_id, std::string_view, int64_t) const override {
    if (!until_first_token_) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = active_.find(pick_id); it != active_.end()) DropLocked(it);
  }
  void ForgetEndpoint(std::string_view endpoint) const override {
    std::lock_guard<std::mutex> lock(mu_);
    queues_.Forget(endpoint);
    for (auto it = active_.begin(); it != active_.end();) {
      if (it->second.endpoint == endpoint) it = active_.erase(it);
      else ++it;
    }
    if (auto it = held_.find(endpoint); it != held_.end()) held_.erase(it);
  }

 private:
  struct Cost {
    double cost = 0, prefill = 0, decode = 0, uncached_tokens = 0;
  };
  struct Active {
    std::string endpoint;
    int64_t at_us = 0;
    double tokens = 0;
  };
  void DropLocked(std::map<uint64_t, Active>::iterator it) const {
    auto h = held_.find(it->second.endpoint);
    if (h != held_.end() && (h->second -= it->second.tokens) <= 0.5) held_.erase(h);
    active_.erase(it);
  }
  // Prefill tokens held on e until their first tokens (firstToken), expired ones dropped first:
  // pick ids grow with time, so the oldest are at the front.
  double HeldLocked(const std::string& endpoint, int64_t now_us) const {
    while (!active_.empty() && active_.begin()->second.at_us < now_us - timeout_us_) DropLocked(active_.begin());
    auto it = held_.find(endpoint);
    return it == held_.end() ? 0.0 : std::max(0.0, it->second);
  }
  Cost CostLocked(const SchedulingContext& ctx, const Endpoint& e) const {
    Cost c;
    const int64_t prompt = std::max<int64_t>(1, ctx.request ? ctx.request->prompt_tokens : 1);
    const double bs = static_cast<double>(block_);
    const double request_blocks = std::ceil(static_cast<double>(prompt) / bs);
    const double overlap = std::floor(static_cast<double>(MatchedTokens(ctx, e, prompt)) / bs);
    const double active_prefill = (until_first_token_ ? HeldLocked(e.address, ctx.now_us) : queues_.Backlog(e.address, ctx.now_us)) / bs;
    c.prefill = std::max(0.0, active_prefill + request_blocks - overlap);
    c.decode = static_cast<double>(ctx.InflightTokens(&e)) / bs + request_blocks;
    c.cost = scale_ * c.prefill + c.decode;
    c.uncached_tokens = std::max(0.0, static_cast<double>(prompt) - overlap * bs);
    return c;
  }
  const DynamoKvCostOptions o_;  // as configured, for EffectiveParams
  const double scale_, rate_;
  const int block_;
  const bool until_first_token_;
  const int64_t timeout_us_;
  mutable std::mutex mu_;
  mutable PrefillQueues queues_;
  mutable std::map<uint64_t, Active> active_;  // firstToken: picks whose first token is pending
  mutable std::map<std::string, double, std::less<>> held_;
};

}  // namespace

PluginOr CreateVllmLoadAwareScorer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(VllmLoadAwareOptions o, VllmLoadAwareTable().Read(params));
  return std::make_unique<VllmLoadAwareScorer>(TN(kVllmLoadAwareScorerType, name), o);
}

PluginOr CreateDynamoKvCostScorer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(DynamoKvCostOptions o, DynamoKvCostTable().Read(params));
  return std::make_unique<DynamoKvCostScorer>(TN(kDynamoKvCostScorerType, name), std::move(o));
}

PluginSchema VllmLoadAwareScorerSchema() { return VllmLoadAwareTable().Schema(); }
PluginSchema DynamoKvCostScorerSchema() { return DynamoKvCostTable().Schema(); }

}  // namespace epp::plugins
