// The fairness policies: global-strict-fairness-policy (no fairness: the band's best head across
// flows), round-robin-fairness-policy (each non-empty flow in turn) and program-aware-fairness
// (least attained service over programs, llm-d Router's LAS strategy).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "epp/param_table.h"
#include "epp/shared_state.h"
#include "flowcontrol/policies.h"
#include "plugins/flowcontrol/flowcontrol.h"

namespace epp::plugins {
namespace {

using flowcontrol::FairnessPolicy;
using flowcontrol::FairnessState;
using flowcontrol::FlowQueue;
using flowcontrol::OrderingKey;
using flowcontrol::QueuedItem;

// The band's non-empty queues by flow id. Byte order of ids is the reference's order of flow
// keys within one band (FlowKey.Compare: priority, then strings.Compare on the id).
class ActiveQueues {
 public:
  void Update(const FlowQueue& q) {
    if (q.size() > 0) {
      auto it = queues_.find(q.flow_id());
      if (it == queues_.end()) queues_.emplace(std::string(q.flow_id()), &q);
      else it->second = &q;
    } else {
      auto it = queues_.find(q.flow_id());
      if (it != queues_.end() && it->second == &q) queues_.erase(it);
    }
  }
  const std::map<std::string, const FlowQueue*, std::less<>>& queues() const { return queues_; }

 private:
  std::map<std::string, const FlowQueue*, std::less<>> queues_;
};

// ---- global-strict-fairness-policy ----

// The head with the smallest ordering key over the band, kept in an ordered set: O(log n) per
// head change and pick, where the reference peeks every non-empty queue on each pick.
class GlobalStrictState : public FairnessState {
 public:
  void HeadChanged(const FlowQueue& q) override {
    auto it = keys_.find(&q);
    if (it != keys_.end()) {
      heads_.erase({it->second, &q});
      keys_.erase(it);
    }
    if (q.size() == 0) return;
    const OrderingKey k = q.head_key();
    keys_.emplace(&q, k);
    heads_.emplace(k, &q);
  }
  const FlowQueue* Pick(int64_t) override { return heads_.empty() ? nullptr : heads_.begin()->second; }

 private:
  std::set<std::pair<OrderingKey, const FlowQueue*>> heads_;
  absl::flat_hash_map<const FlowQueue*, OrderingKey> keys_;
};

class GlobalStrictFairness : public Plugin, public FairnessPolicy {
 public:
  explicit GlobalStrictFairness(TypedName tn) : Plugin(std::move(tn)) {}
  std::unique_ptr<FairnessState> NewBandState(int) const override { return std::make_unique<GlobalStrictState>(); }
};

// ---- round-robin-fairness-policy ----

// The cursor is the flow id served last; the next pick is the first non-empty flow after it in id
// order, wrapping. The reference restarts from the first flow when the last one was garbage
// collected in between; resuming after its id keeps the turn order instead (a flow that comes and
// goes cannot send the cursor back to the start).
class RoundRobinState : public FairnessState {
 public:
  void HeadChanged(const FlowQueue& q) override { active_.Update(q); }
  const FlowQueue* Pick(int64_t) override {
    const auto& queues = active_.queues();
    if (queues.empty()) {
      has_last_ = false;
      return nullptr;
    }
    auto it = has_last_ ? queues.upper_bound(last_) : queues.begin();
    if (it == queues.end()) it = queues.begin();
    last_ = it->first;
    has_last_ = true;
    return it->second;
  }

 private:
  ActiveQueues active_;
  std::string last_;
  bool has_last_ = false;
};

class RoundRobinFairness : public Plugin, public FairnessPolicy {
 public:
  explicit RoundRobinFairness(TypedName tn) : Plugin(std::move(tn)) {}
  std::unique_ptr<FairnessState> NewBandState(int) const override { return std::make_unique<RoundRobinState>(); }
};

// ---- program-aware-fairness ----

struct ProgramAwareOptions {
  std::string strategy = "las";
  double weight_service = 0.8;
  double weight_head_wait = 0.2;
  double half_life_s = 60;
  double eviction_ttl_s = 3600;
  double eviction_sweep_s = 300;
};

// llm-d-router's names and defaults (fairness/program-aware).
const ParamTable<ProgramAwareOptions>& ProgramAwareTable() {
  static const auto* t =
      &(*new ParamTable<ProgramAwareOptions>())
           .Custom(
               "strategy", ParamType::kString, "scoring strategy; only las (least attained service)",
               [](const Params& v, ProgramAwareOptions& o) -> absl::Status {
                 EPP_ASSIGN_OR_RETURN(std::string s, v.AsString());
                 if (!s.empty() && s != "las")
                   return absl::InvalidArgumentError(absl::StrCat(v.path().empty() ? "strategy" : v.path(),
                                                                  ": unknown scoring strategy '", s,
                                                                  "': only \"las\" is supported"));
                 o.strategy = "las";
                 return absl::OkStatus();
               },
               [](const ProgramAwareOptions& o) { return Params::String(o.strategy); })
           .Number("lasWeightService", &ProgramAwareOptions::weight_service, Range::AtLeast(0),
                   "weight of the inverted attained service (favours underserved programs)")
           .Number("lasWeightHeadWait", &ProgramAwareOptions::weight_head_wait, Range::AtLeast(0),
                   "weight of the age of the queue's head request (the tie-break on a cold start)")
           .Number("lasHalfLifeSeconds", &ProgramAwareOptions::half_life_s, Range::AtLeast(0),
                   "wall-clock half-life of attained service; 0 disables decay")
           .Number("evictionTtlSeconds", &ProgramAwareOptions::eviction_ttl_s, Range::AtLeast(0),
                   "a program idle (nothing in flight, no completion) this long is forgotten; 0 never")
           .Number("evictionSweepSeconds", &ProgramAwareOptions::eviction_sweep_s, Range::Above(0),
                   "how often idle programs are looked for");
  return *t;
}

// Output tokens cost about twice as much as input tokens (llm-d's weights).
constexpr double kInputTokenWeight = 1;
constexpr double kOutputTokenWeight = 2;

struct Program {
  // Queue wait (milliseconds) of dispatched requests: running mean and count.
  double average_wait_ms = 0;
  int64_t wait_count = 0;
  int64_t dispatched = 0;
  int64_t in_flight = 0;
  int64_t last_completion_us = 0;
  // Attained service, decayed up to `anchor_us` (set on first use: nothing decays before it).
  double service = 0;
  int64_t anchor_us = 0;
  bool anchored = false;
};

// Go's Duration.Milliseconds(): whole milliseconds, truncated toward zero.
double WholeMs(int64_t us) { return static_cast<double>(us / 1000); }

class ProgramAwareFairness;

// The band's non-empty queues; the programs' service lives in the plugin (one program's service
// counts in every band it queues in, as in the reference).
class ProgramAwareState : public FairnessState {
 public:
  explicit ProgramAwareState(const ProgramAwareFairness& policy) : policy_(policy) {}
  void HeadChanged(const FlowQueue& q) override { active_.Update(q); }
  const FlowQueue* Pick(int64_t now_us) override;

 private:
  const ProgramAwareFairness& policy_;
  ActiveQueues active_;
};

class ProgramAwareFairness : public Plugin, public FairnessPolicy, public ProgramAwareStats {
 public:
  // With shared state (`serve --shared-state`), the other replicas' attained service per program
  // is added to this replica's when it picks, so least attained service is over the pool: a
  // program that got its service through another replica is not the least served here. What
  // arrives is one to two rounds old (50-100 ms at the default interval), against a half-life of
  // a minute; it is replaced every round, not decayed in between.
  ProgramAwareFairness(TypedName tn, ProgramAwareOptions o, SharedPrefixBus* bus, Clock* clock)
      : Plugin(std::move(tn)), o_(std::move(o)), bus_(bus), clock_(clock != nullptr ? clock : &SteadyClock::Get()) {
    if (bus_ != nullptr)
      share_id_ = bus_->ShareFlowService(
          name(), [this] { return LocalServices(); },
          [this](const SharedPrefixBus::FlowServices& others) {
            std::lock_guard<std::mutex> lock(mu_);
            remote_.clear();
            for (const auto& [flow, service] : others) remote_[flow] = service;
          });
  }
  ~ProgramAwareFairness() override {
    if (bus_ != nullptr) bus_->UnshareFlowService(share_id_);
  }
  Params EffectiveParams() const override { return ProgramAwareTable().Effective(o_); }

  std::unique_ptr<FairnessState> NewBandState(int) const override { return std::make_unique<ProgramAwareState>(*this); }

  void Dispatched(const QueuedItem& item, int64_t now_us) const override {
    std::lock_guard<std::mutex> lock(mu_);
    MaybeSweep(now_us);
    Program& p = GetLocked(item.flow_id, now_us);
    ++p.in_flight;
    ++p.dispatched;
    const double wait_ms = WholeMs(now_us - item.enqueue_us);
    ++p.wait_count;
    p.average_wait_ms += (wait_ms - p.average_wait_ms) / static_cast<double>(p.wait_count);
  }

  void Completed(std::string_view flow_id, const ResponseUsage& usage, int64_t now_us) const override {
    std::lock_guard<std::mutex> lock(mu_);
    MaybeSweep(now_us);
    Program& p = GetLocked(flow_id, now_us);
    Decay(p, now_us);
    // The reference truncates token counts to integers before weighting.
    p.service += kInputTokenWeight * std::trunc(usage.prompt_tokens) + kOutputTokenWeight * std::trunc(usage.completion_tokens);
    // Never below zero (the reference lets a completion without a dispatch record go negative,
    // which would keep the program from ever being evicted).
    if (p.in_flight > 0) --p.in_flight;
    p.last_completion_us = now_us;
  }

  // One pick over a band's non-empty queues: score = wS * (1 - norm(service)) + wW * norm(head
  // wait), each normalised to [0, 1] by the candidates' min and max (0.5 when they are all
  // equal); the highest score wins, the first in flow-id order on a tie (the reference's tie
  // goes to Go's map order, which is random).
  const FlowQueue* PickFrom(const std::map<std::string, const FlowQueue*, std::less<>>& queues, int64_t now_us) const {
    if (queues.empty()) return nullptr;
    struct Entry {
      const FlowQueue* q;
      double service;
      double wait_ms;
    };
    std::vector<Entry> entries;
    entries.reserve(queues.size());
    double min_s = 0, max_s = 0, min_w = 0, max_w = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      MaybeSweep(now_us);
      for (const auto& [id, q] : queues) {
        if (q->size() == 0) continue;
        Program& p = GetLocked(id, now_us);
        Decay(p, now_us);
        const Entry e{q, p.service + RemoteLocked(id), WholeMs(now_us - q->head().enqueue_us)};
        if (entries.empty()) {
          min_s = max_s = e.service;
          min_w = max_w = e.wait_ms;
        } else {
          min_s = std::min(min_s, e.service);
          max_s = std::max(max_s, e.service);
          min_w = std::min(min_w, e.wait_ms);
          max_w = std::max(max_w, e.wait_ms);
        }
        entries.push_back(e);
      }
    }
    const FlowQueue* best = nullptr;
    double best_score = -std::numeric_limits<double>::infinity();
    for (const Entry& e : entries) {
      const double score = o_.weight_service * (1 - RangeNormalize(e.service, min_s, max_s)) +
                           o_.weight_head_wait * RangeNormalize(e.wait_ms, min_w, max_w);
      if (score > best_score) {
        best_score = score;
        best = e.q;
      }
    }
    return best;
  }

  double AttainedService(std::string_view flow_id, int64_t now_us) const override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = programs_.find(ToAbsl(flow_id));
    if (it == programs_.end()) return 0;
    Decay(it->second, now_us);
    return it->second.service;
  }
  double PoolAttainedService(std::string_view flow_id, int64_t now_us) const override {
    const double local = AttainedService(flow_id, now_us);
    std::lock_guard<std::mutex> lock(mu_);
    return local + RemoteLocked(flow_id);
  }
  double AverageWaitMs(std::string_view flow_id) const override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = programs_.find(ToAbsl(flow_id));
    return it == programs_.end() ? 0 : it->second.average_wait_ms;
  }
  int64_t InFlight(std::string_view flow_id) const override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = programs_.find(ToAbsl(flow_id));
    return it == programs_.end() ? 0 : it->second.in_flight;
  }
  double JainsFairnessIndex() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return JainsLocked();
  }
  size_t Programs() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return programs_.size();
  }

 private:
  static double RangeNormalize(double v, double lo, double hi) { return hi == lo ? 0.5 : (v - lo) / (hi - lo); }

  double RemoteLocked(std::string_view flow_id) const {
    if (remote_.empty()) return 0;
    auto it = remote_.find(ToAbsl(flow_id));
    return it == remote_.end() ? 0 : it->second;
  }

  // What this replica shares: every program's service, decayed to now.
  SharedPrefixBus::FlowServices LocalServices() const {
    const int64_t now_us = clock_->NowMicros();
    std::lock_guard<std::mutex> lock(mu_);
    SharedPrefixBus::FlowServices out;
    out.reserve(programs_.size());
    for (auto& [id, p] : programs_) {
      Decay(p, now_us);
      if (p.service > 0) out.emplace_back(id, p.service);
    }
    return out;
  }

  // A program seen for the first time counts as just completed, so one that never completes still
  // becomes evictable a TTL later.
  Program& GetLocked(std::string_view id, int64_t now_us) const {
    auto it = programs_.find(ToAbsl(id));
    if (it != programs_.end()) return it->second;
    Program& p = programs_[std::string(id)];
    p.last_completion_us = now_us;
    return p;
  }

  // Folds the decay since the anchor into the service (lazily, so an idle program's service ages
  // without its queue being visited).
  void Decay(Program& p, int64_t now_us) const {
    if (!p.anchored) {
      p.anchored = true;
      p.anchor_us = now_us;
      return;
    }
    const int64_t elapsed_us = now_us - p.anchor_us;
    if (elapsed_us <= 0) return;
    if (o_.half_life_s > 0) p.service *= std::exp2(-(static_cast<double>(elapsed_us) / 1e6) / o_.half_life_s);
    p.anchor_us = now_us;
  }

  double JainsLocked() const {
    double sum = 0, sum_sq = 0, n = 0;
    for (const auto& [id, p] : programs_) {
      if (p.wait_count == 0) continue;
      sum += p.average_wait_ms;
      sum_sq += p.average_wait_ms * p.average_wait_ms;
      ++n;
    }
    if (n <= 1 || sum_sq == 0) return 1.0;
    return sum * sum / (n * sum_sq);
  }

  // The reference sweeps from a goroutine every evictionSweepSeconds; plugins here own no threads,
  // so the sweep runs on the first call after each interval: the same programs go, at most one
  // interval later than a timer would have found them on an idle EPP.
  void MaybeSweep(int64_t now_us) const {
    if (o_.eviction_ttl_s <= 0) return;
    const int64_t interval_us = static_cast<int64_t>(o_.eviction_sweep_s * 1e6);
    if (!swept_) {
      swept_ = true;
      last_sweep_us_ = now_us;
      return;
    }
    if (now_us - last_sweep_us_ < interval_us) return;
    last_sweep_us_ = now_us;
    const int64_t ttl_us = static_cast<int64_t>(o_.eviction_ttl_s * 1e6);
    for (auto it = programs_.begin(); it != programs_.end();) {
      const Program& p = it->second;
      if (p.in_flight == 0 && now_us - p.last_completion_us > ttl_us) programs_.erase(it++);
      else ++it;
    }
  }

  ProgramAwareOptions o_;
  SharedPrefixBus* const bus_;
  Clock* const clock_;
  uint64_t share_id_ = 0;
  mutable std::mutex mu_;
  mutable absl::flat_hash_map<std::string, Program> programs_;
  mutable absl::flat_hash_map<std::string, double> remote_;  // the other replicas' service per program
  mutable bool swept_ = false;
  mutable int64_t last_sweep_us_ = 0;
};

const FlowQueue* ProgramAwareState::Pick(int64_t now_us) { return policy_.PickFrom(active_.queues(), now_us); }

}  // namespace

PluginOr CreateGlobalStrictFairness(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(ReadNoParams(params));
  return std::make_unique<GlobalStrictFairness>(TN(kGlobalStrictFairnessType, name));
}

PluginOr CreateRoundRobinFairness(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(ReadNoParams(params));
  return std::make_unique<RoundRobinFairness>(TN(kRoundRobinFairnessType, name));
}

PluginSchema ProgramAwareFairnessSchema() { return ProgramAwareTable().Schema(); }

PluginOr CreateProgramAwareFairness(const std::string& name, const Params& params, const PluginContext& ctx) {
  // Removed by llm-d-router #2120: the reference's strict decoding fails a config that still
  // sets it, and so does epp, saying what replaced it.
  if (params.is_map()) {
    if (const Params* removed = params.Find("lasDecayFactor")) {
      const std::string where = removed->path().empty() ? "lasDecayFactor" : removed->path();
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": removed; attained service now decays in wall-clock time with a half-life, set "
                              "lasHalfLifeSeconds instead (default 60, 0 disables decay)"));
    }
  }
  EPP_ASSIGN_OR_RETURN(ProgramAwareOptions o, ProgramAwareTable().Read(params));
  return std::make_unique<ProgramAwareFairness>(TN(kProgramAwareFairnessType, name), std::move(o), ctx.shared_prefix,
                                                ctx.clock);
}

}  // namespace epp::plugins
