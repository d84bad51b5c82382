// llm-d Router's single-profile scorers (pkg/epp/framework/plugins/scheduling/scorer/):
// no-hit-lru-scorer, load-aware-scorer, active-request-scorer. Formulas as llm-d computes them;
// docs/scheduling.md states each.
#include <algorithm>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "epp/scheduling.h"
#include "plugins/scorer/scorer.h"

namespace epp::plugins {
namespace {

using internal::Num;

// A request is cold when no candidate holds any of its prefix blocks.
bool Cold(const SchedulingContext& ctx, Candidates candidates) {
  for (const Endpoint* e : candidates)
    if (ctx.PrefixMatchBlocks(e) > 0) return false;
  return true;
}

// no-hit-lru-scorer: spreads cold requests (no prefix hit anywhere) over the endpoints that served
// a cold request least recently, so new conversations do not pile onto one server. Warm requests
// score 0.5 everywhere (the prefix scorer decides them). Cold, N candidates: endpoints that never
// took a cold request score 1 - i/(N-1) in candidate order i; an endpoint at position p of the LRU
// (0 = least recent, over every endpoint in it) scores max(0, 1 - (never + p)/(N-1)), never = the
// number of candidates not in the LRU. The LRU learns the primary (and prefill) target of each
// cold request.
struct NoHitLruOptions {
  int64_t size = 1024;
  std::string producer;
};

const ParamTable<NoHitLruOptions>& NoHitLruTable() {
  static const auto* t =
      &(*new ParamTable<NoHitLruOptions>())
           .Int("lruSize", &NoHitLruOptions::size, Range::Any(), "endpoints remembered; non-positive means 1024")
           .String("prefixMatchInfoProducerName", &NoHitLruOptions::producer, "the prefix producer whose matches are read")
           .OmitEmpty()
           .Ignored("prefixPluginType", ParamType::kString, "llm-d's older reference to the prefix plugin; ignored")
           .Ignored("prefixPluginName", ParamType::kString, "llm-d's older reference to the prefix plugin; ignored");
  return *t;
}

class NoHitLruScorer : public Plugin, public Scorer, public RequestObserver, public EndpointState {
 public:
  NoHitLruScorer(TypedName tn, NoHitLruOptions o) : Plugin(std::move(tn)), o_(std::move(o)) {}
  const Scorer* AsScorer() const override { return this; }
  const RequestObserver* AsRequestObserver() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kPrefixMatch}; }
  ScorerCategory category() const override { return ScorerCategory::kDistribution; }
  Params EffectiveParams() const override { return NoHitLruTable().Effective(o_); }

  void Score(const SchedulingContext& ctx, Candidates candidates, std::span<double> scores) const override {
    const size_t n = candidates.size();
    if (!Cold(ctx, candidates)) {
      std::fill(scores.begin(), scores.end(), 0.5);
      return;
    }
    if (n == 1) {
      scores[0] = 1.0;
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    size_t never = 0;
    for (const Endpoint* e : candidates) never += pos_.count(e->address) == 0;
    size_t i_never = 0;
    const double span = static_cast<double>(n - 1);
    for (size_t i = 0; i < n; ++i) {
      auto it = pos_.find(candidates[i]->address);
      if (it == pos_.end()) {
        scores[i] = 1.0 - static_cast<double>(i_never++) / span;
      } else {
        const size_t p = static_cast<size_t>(std::distance(lru_.begin(), it->second));
        scores[i] = std::max(0.0, 1.0 - static_cast<double>(never + p) / span);
      }
    }
  }
  std::string Explain(const SchedulingContext& ctx, const Endpoint& e) const override {
    if (ctx.PrefixMatchBlocks(&e) > 0) return "warm request (a prefix hit somewhere): 0.5 everywhere";
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pos_.find(e.address);
    if (it == pos_.end()) return "never served a cold request";
    return absl::StrCat("cold requests: position ", std::distance(lru_.begin(), it->second), " of ", lru_.size(),
                        " (0 = least recent)");
  }

  void PreRequest(const SchedulingContext& ctx, const Endpoint& picked) const override {
    // Cold over the whole pool: no endpoint holds a block (the match counts are per endpoint).
    for (int m : ctx.prefix.match_blocks)
      if (m > 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pos_.find(picked.address);
    if (it != pos_.end()) lru_.erase(it->second);
    lru_.push_back(picked.address);
    pos_[picked.address] = std::prev(lru_.end());
    while (static_cast<int64_t>(lru_.size()) > o_.size) {
      pos_.erase(lru_.front());
      lru_.pop_front();
    }
  }
  void ForgetEndpoint(std::string_view endpoint) const override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pos_.find(std::string(endpoint));
    if (it == pos_.end()) return;
    lru_.erase(it->second);
    pos_.erase(it);
  }

 private:
  NoHitLruOptions o_;
  mutable std::mutex mu_;
  mutable std::list<std::string> lru_;  // least recent first
  mutable std::unordered_map<std::string, std::list<std::string>::iterator> pos_;
};

// load-aware-scorer: 0.5 for an empty queue, else 0.5 x (1 - min(queue, threshold) / threshold);
// 0 without the metric.
struct LoadAwareOptions {
  int64_t threshold = 128;
};

const ParamTable<LoadAwareOptions>& LoadAwareTable() {
  static const auto* t = &(*new ParamTable<LoadAwareOptions>())
                              .Int("threshold", &LoadAwareOptions::threshold, Range::Any(),
                                   "waiting requests at which an endpoint scores 0; non-positive means 128");
  return *t;
}

class LoadAwareScorer : public Plugin, public Scorer {
 public:
  LoadAwareScorer(TypedName tn, LoadAwareOptions o) : Plugin(std::move(tn)), threshold_(o.threshold) {}
  const Scorer* AsScorer() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kWaitingQueue}; }
  ScorerCategory category() const override { return ScorerCategory::kDistribution; }
  Params EffectiveParams() const override { return LoadAwareTable().Effective(LoadAwareOptions{threshold_}); }
  void Score(const SchedulingContext&, Candidates candidates, std::span<double> scores) const override {
    for (size_t i = 0; i < candidates.size(); ++i) scores[i] = Of(*candidates[i]);
  }
  std::string Explain(const SchedulingContext&, const Endpoint& e) const override {
    if (!e.metrics.waiting_queue_size) return "no waiting_queue_size metric";
    return absl::StrCat("queue ", Num(*e.metrics.waiting_queue_size), " of threshold ", threshold_);
  }

 private:
  double Of(const Endpoint& e) const {
    if (!e.metrics.waiting_queue_size) return 0;
    const double w = *e.metrics.waiting_queue_size;
    if (w <= 0) return 0.5;
    const double t = static_cast<double>(threshold_);
    return 0.5 * (1.0 - std::min(w, t) / t);
  }
  int64_t threshold_;
};

// active-request-scorer: requests epp has in flight per endpoint (the in-flight load llm-d's
// inflight-load-producer counts); max = the most among the candidates. At most idleThreshold ->
// 1, else (max - count) / max x maxBusyScore.
struct ActiveRequestOptions {
  int64_t idle = 0;
  double max_busy = 1.0;
  std::string producer;
};

const ParamTable<ActiveRequestOptions>& ActiveRequestTable() {
  static const auto* t =
      &(*new ParamTable<ActiveRequestOptions>())
           .Int("idleThreshold", &ActiveRequestOptions::idle, Range::AtLeast(0),
                "requests in flight at or below which an endpoint scores 1")
           .Number("maxBusyScore", &ActiveRequestOptions::max_busy, Range::Any(),
                   "the score of the least busy of the busy endpoints; values outside [0, 1] mean 1")
           .String("inFlightLoadProducerName", &ActiveRequestOptions::producer, "the in-flight load producer read")
           .OmitEmpty()
           .Ignored("requestTimeout", ParamType::kDuration,
                    "deprecated in llm-d and ignored: in-flight requests are released when their stream ends");
  return *t;
}

class ActiveRequestScorer : public Plugin, public Scorer {
 public:
  ActiveRequestScorer(TypedName tn, ActiveRequestOptions o)
      : Plugin(std::move(tn)), idle_(o.idle), max_busy_(o.max_busy), producer_(std::move(o.producer)) {}
  const Scorer* AsScorer() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kInflightLoad}; }
  ScorerCategory category() const override { return ScorerCategory::kDistribution; }
  Params EffectiveParams() const override {
    return ActiveRequestTable().Effective(ActiveRequestOptions{idle_, max_busy_, producer_});
  }
  void Score(const SchedulingContext& ctx, Candidates candidates, std::span<double> scores) const override {
    int64_t most = 0;
    for (const Endpoint* e : candidates) most = std::max(most, ctx.InflightRequests(e));
    for (size_t i = 0; i < candidates.size(); ++i) {
      const int64_t c = ctx.InflightRequests(candidates[i]);
      scores[i] = c <= idle_ || most == 0 ? 1.0 : static_cast<double>(most - c) / static_cast<double>(most) * max_busy_;
    }
  }
  std::string Explain(const SchedulingContext& ctx, const Endpoint& e) const override {
    return absl::StrCat(ctx.InflightRequests(&e), " requests in flight");
  }

 private:
  int64_t idle_;
  double max_busy_;
  std::string producer_;
};

}  // namespace

PluginOr CreateNoHitLruScorer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(NoHitLruOptions o, NoHitLruTable().Read(params));
  if (o.size <= 0) o.size = 1024;  // llm-d: a non-positive size means the default
  return std::make_unique<NoHitLruScorer>(TN(kNoHitLruScorerType, name), std::move(o));
}

PluginOr CreateLoadAwareScorer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(LoadAwareOptions o, LoadAwareTable().Read(params));
  if (o.threshold <= 0) o.threshold = 128;
  return std::make_unique<LoadAwareScorer>(TN(kLoadAwareScorerType, name), o);
}

PluginOr CreateActiveRequestScorer(const std::string& name, const Params& params, const PluginContext& ctx) {
  EPP_ASSIGN_OR_RETURN(ActiveRequestOptions o, ActiveRequestTable().Read(params));
  if (!(o.max_busy >= 0 && o.max_busy <= 1)) o.max_busy = 1.0;  // llm-d ignores values outside [0, 1]
  if (params.Has("requestTimeout") && ctx.warnings)
    ctx.warnings->push_back(absl::StrCat(params.path(), ".requestTimeout: deprecated in llm-d and ignored (in-flight "
                                         "requests are released when their stream ends)"));
  return std::make_unique<ActiveRequestScorer>(TN(kActiveRequestScorerType, name), std::move(o));
}

PluginSchema NoHitLruScorerSchema() { return NoHitLruTable().Schema(); }
PluginSchema LoadAwareScorerSchema() { return LoadAwareTable().Schema(); }
PluginSchema ActiveRequestScorerSchema() { return ActiveRequestTable().Schema(); }

}  // namespace epp::plugins
