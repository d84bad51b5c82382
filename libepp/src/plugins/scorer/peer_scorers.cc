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
//   active prefill blocks: the prompt blocks this scorer placed on e, drained at
//   prefillTokensPerSecond (Dynamo keeps them until the first token, or decays them over a
//   predicted prefill time with its `aic` model; the EPP sees no first token, so it drains them);
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

class VllmLoadAwareScorer : public Plugin, public Scorer {
 public:
  VllmLoadAwareScorer(TypedName tn, double beta) : Plugin(std::move(tn)), beta_(beta) {}
  const Scorer* AsScorer() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kPrefixMatch, PluginInput::kInflightLoad}; }
  ScorerCategory category() const override { return ScorerCategory::kAffinity; }
  Params EffectiveParams() const override { return Params::Map().Set("beta", Params::Number(beta_)); }
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

class DynamoKvCostScorer : public Plugin, public Scorer, public RequestObserver, public EndpointState {
 public:
  DynamoKvCostScorer(TypedName tn, double scale, double rate, int block)
      : Plugin(std::move(tn)), scale_(scale), rate_(rate), block_(block), queues_(rate) {}
  const Scorer* AsScorer() const override { return this; }
  const RequestObserver* AsRequestObserver() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kPrefixMatch, PluginInput::kInflightLoad}; }
  ScorerCategory category() const override { return ScorerCategory::kDistribution; }
  Params EffectiveParams() const override {
    return Params::Map()
        .Set("prefillLoadScale", Params::Number(scale_))
        .Set("prefillTokensPerSecond", Params::Number(rate_))
        .Set("blockSize", Params::Int(block_));
  }
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
    queues_.Add(picked.address, CostLocked(ctx, picked).uncached_tokens, ctx.now_us);
  }
  void ForgetEndpoint(std::string_view endpoint) const override {
    std::lock_guard<std::mutex> lock(mu_);
    queues_.Forget(endpoint);
  }

 private:
  struct Cost {
    double cost = 0, prefill = 0, decode = 0, uncached_tokens = 0;
  };
  Cost CostLocked(const SchedulingContext& ctx, const Endpoint& e) const {
    Cost c;
    const int64_t prompt = std::max<int64_t>(1, ctx.request ? ctx.request->prompt_tokens : 1);
    const double bs = static_cast<double>(block_);
    const double request_blocks = std::ceil(static_cast<double>(prompt) / bs);
    const double overlap = std::floor(static_cast<double>(MatchedTokens(ctx, e, prompt)) / bs);
    const double active_prefill = queues_.Backlog(e.address, ctx.now_us) / bs;
    c.prefill = std::max(0.0, active_prefill + request_blocks - overlap);
    c.decode = static_cast<double>(ctx.InflightTokens(&e)) / bs + request_blocks;
    c.cost = scale_ * c.prefill + c.decode;
    c.uncached_tokens = std::max(0.0, static_cast<double>(prompt) - overlap * bs);
    return c;
  }
  const double scale_, rate_;
  const int block_;
  mutable std::mutex mu_;
  mutable PrefillQueues queues_;
};

}  // namespace

PluginOr CreateVllmLoadAwareScorer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(params.CheckKeys({"beta"}));
  EPP_ASSIGN_OR_RETURN(double beta, params.GetDouble("beta", 1.0));
  if (!(beta >= 0) || !std::isfinite(beta)) return absl::InvalidArgumentError(absl::StrCat(params.path(), ".beta: must be >= 0"));
  return std::make_unique<VllmLoadAwareScorer>(TN(kVllmLoadAwareScorerType, name), beta);
}

PluginOr CreateDynamoKvCostScorer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(params.CheckKeys({"prefillLoadScale", "prefillTokensPerSecond", "blockSize"}));
  EPP_ASSIGN_OR_RETURN(double scale, params.GetDouble("prefillLoadScale", 1.0));
  EPP_ASSIGN_OR_RETURN(double rate, params.GetDouble("prefillTokensPerSecond", 20000));
  EPP_ASSIGN_OR_RETURN(int64_t block, params.GetInt("blockSize", 16));
  if (!(scale >= 0) || !std::isfinite(scale))
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ".prefillLoadScale: must be >= 0"));
  if (!(rate > 0) || !std::isfinite(rate))
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ".prefillTokensPerSecond: must be > 0"));
  if (block < 1 || block > 4096) return absl::InvalidArgumentError(absl::StrCat(params.path(), ".blockSize: must be in [1, 4096]"));
  return std::make_unique<DynamoKvCostScorer>(TN(kDynamoKvCostScorerType, name), scale, rate, static_cast<int>(block));
}

}  // namespace epp::plugins
