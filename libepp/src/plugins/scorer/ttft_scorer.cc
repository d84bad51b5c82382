// estimated-ttft-scorer (epp's own): scores each candidate by the time to first token the request
// would see there, from the prefill work queued on it and this request's uncached tokens.
//
//   backlog_e  = fluid_e (and, with useWaitingQueue, at least waiting_e x mean_uncached): tokens of
//                prefill ahead of the request
//     fluid_e  : uncached tokens of the requests this scorer placed on e, drained at the prefill
//                rate since (a fluid queue: updated at each pick, read at each score)
//     waiting_e: e's scraped waiting queue (fresh metrics only), for work this replica did not
//                place (other EPP replicas, a restart); mean_uncached: the running mean of the
//                uncached tokens of the requests placed so far
//   uncached_e = prompt tokens - min(matched blocks x block tokens, prompt - 1)   (the prefix
//                producer's match on e; a server always computes at least one token)
//   ttft_e     = stepOverheadMs + (backlog_e + uncached_e) / prefillTokensPerSecond
//   decode_e   = decodeMsPerSequence x expectedOutputTokens x in-flight requests on e: how much
//                longer this request's decode steps take beside the sequences already there (and
//                theirs beside it), in the cost model's per-sequence step cost
//   cost_e     = ttft_e + decode_e + missPenalty x (uncached_e - min over candidates of uncached) / rate
//   score_e    = min over candidates of cost / cost_e          (1 for the cheapest, in (0, 1])
//
// The miss penalty charges a pick for the prefill work it adds beyond the best-cached candidate's:
// that work delays every request queued behind it on that server, and the recomputed prefix takes
// KV blocks a second time, so a greedy "lowest TTFT for this request" alone moves work off a
// cached server too early (docs/routing.md measures 0, 1, 2 and 3; 3 is the default).
//
// With calibratePrefillRate, each endpoint's rate is learned from the response path. A pick
// that this scorer saw nothing queued ahead of (backlog 0) and that prefills at least
// calibrationMinTokens records its uncached tokens; when its first token is seen
// (FirstTokenObserver) t seconds later, uncached / (t - stepOverheadMs) is one sample of the
// endpoint's prefill rate. Anything the model does not see (other replicas' work, a queue for a
// batch slot, decode steps interleaved) only adds time, so every sample is at most the true rate:
// rate_e is the 90th percentile of the last calibrationSamples samples, used once
// calibrationMinSamples arrived, clamped to [rate / 20, rate x 20]. It replaces the configured
// rate for that endpoint's TTFT, miss penalty and queue drain. (A mean of such samples, or a ratio
// of sums over all picks, learns queueing as slowness: measured worse in docs/routing.md.)
//
// A pick adds the request's uncached tokens to the picked endpoint's fluid queue at once, so
// requests arriving in the same instant see each other and do not herd onto one endpoint; and an
// idle endpoint wins as soon as the queue ahead of a cached prefix costs more than recomputing
// the prefix there, so no endpoint is starved while work waits elsewhere.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <vector>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/strings.h"
#include "plugins/scorer/prefill_queue.h"
#include "plugins/scorer/scorer.h"

namespace epp::plugins {
namespace {

using internal::Num;

struct Calibration {
  bool enabled = false;
  int samples = 32;         // the window the percentile is taken over
  int min_samples = 4;      // before the learned rate is used
  double min_tokens = 256;  // smaller prefills are mostly step overhead: not sampled
};

struct TtftOptions {
  double rate = 20000;  // prefillTokensPerSecond
  double overhead_ms = 6;
  double miss_penalty = 3;
  double decode_ms_per_seq = 0.05;
  double expected_output = 128;
  bool use_waiting = false;
  double staleness_ms = 200;
  bool slo_aware = false;
  bool learn_speeds = true;
  std::string speed_source = "lightLoad";  // or "currentLoad"
  Calibration cal;
};

// The calibration counts are whole numbers that configs may write as "32.0".
absl::Status WholeNumber(const Params& v, int& out) {
  EPP_ASSIGN_OR_RETURN(double x, v.AsDouble());
  if (!(x >= 1) || x > 100000 || x != std::floor(x))
    return absl::InvalidArgumentError(absl::StrCat(v.path(), ": must be a whole number in [1, 100000]"));
  out = static_cast<int>(x);
  return absl::OkStatus();
}

const ParamTable<TtftOptions>& Table() {
  static const auto* t =
      &(*new ParamTable<TtftOptions>())
           .Number("prefillTokensPerSecond", &TtftOptions::rate, Range::Above(0),
                   "prefill rate assumed for every endpoint (the start when calibrating)")
           .Number("stepOverheadMs", &TtftOptions::overhead_ms, Range::AtLeast(0), "fixed time per prefill step")
           .Number("missPenalty", &TtftOptions::miss_penalty, Range::Closed(0, 1000),
                   "weight of uncached tokens beyond the best candidate's, in prefill seconds")
           .Number("decodeMsPerSequence", &TtftOptions::decode_ms_per_seq, Range::Closed(0, 1000),
                   "decode time each running sequence adds per output token")
           .Number("expectedOutputTokens", &TtftOptions::expected_output, Range::Closed(0, 1e7),
                   "output tokens assumed per running sequence")
           .Bool("useWaitingQueue", &TtftOptions::use_waiting,
                 "add the server's waiting queue (fresh metrics only) to the placed prefill")
           .Number("metricsStalenessMs", &TtftOptions::staleness_ms, Range::OpenClosed(0, 1e9),
                   "metrics older than this are not used for the waiting queue")
           .Bool("learnSpeeds", &TtftOptions::learn_speeds,
                 "with predicted-latency-producer: each endpoint's prefill rate is the configured one times "
                 "its predicted speed relative to the pool (mixed GPUs); ignored with calibratePrefillRate")
           .String("speedSource", &TtftOptions::speed_source,
                   "learnSpeeds' source: lightLoad (the prefill rate measured on the endpoint's lightly loaded "
                   "responses) or currentLoad (prefillTokensPerSecond times the pool model's TTFT over the endpoint's "
                   "at the current load); docs/routing.md compares them",
                   {"currentLoad", "lightLoad"})
           .Bool("sloAware", &TtftOptions::slo_aware,
                 "with a request's SLO and predicted-latency-producer's predictions: while at least half of the "
                 "candidates are predicted to meet it, the cost of those predicted to miss it is multiplied by "
                 "predicted / SLO (off by default: docs/routing.md measures where it helps and where it hurts)")
           .Custom("calibratePrefillRate", ParamType::kBool, "learn each endpoint's prefill rate from its first tokens",
                   [](const Params& v, TtftOptions& o) -> absl::Status {
                     EPP_ASSIGN_OR_RETURN(o.cal.enabled, v.AsBool());
                     return absl::OkStatus();
                   },
                   [](const TtftOptions& o) { return Params::Bool(o.cal.enabled); })
           .Custom("calibrationSamples", ParamType::kInt, "responses the learned rate is a percentile of (1-100000)",
                   [](const Params& v, TtftOptions& o) { return WholeNumber(v, o.cal.samples); },
                   [](const TtftOptions& o) { return Params::Number(o.cal.samples); })
           .Custom("calibrationMinSamples", ParamType::kInt, "responses timed before the learned rate is used (1-100000)",
                   [](const Params& v, TtftOptions& o) { return WholeNumber(v, o.cal.min_samples); },
                   [](const TtftOptions& o) { return Params::Number(o.cal.min_samples); })
           .Custom("calibrationMinTokens", ParamType::kNumber, "uncached prompt tokens a response needs to be timed (>= 1)",
                   [](const Params& v, TtftOptions& o) -> absl::Status {
                     EPP_ASSIGN_OR_RETURN(double x, v.AsDouble());
                     if (!(x >= 1)) return absl::InvalidArgumentError(absl::StrCat(v.path(), ": must be >= 1"));
                     o.cal.min_tokens = x;
                     return absl::OkStatus();
                   },
                   [](const TtftOptions& o) { return Params::Number(o.cal.min_tokens); });
  return *t;
}

class EstimatedTtftScorer : public Plugin, public Scorer, public RequestObserver, public FirstTokenObserver, public EndpointState {
 public:
  EstimatedTtftScorer(TypedName tn, TtftOptions o)
      : Plugin(std::move(tn)),
        o_(o),
        light_rates_(o.speed_source == "lightLoad"),
        cal_(o.cal),
        rate_(o.rate),
        overhead_ms_(o.overhead_ms),
        miss_penalty_(o.miss_penalty),
        decode_ms_per_seq_(o.decode_ms_per_seq),
        expected_output_(o.expected_output),
        use_waiting_(o.use_waiting),
        staleness_us_(static_cast<int64_t>(o.staleness_ms * 1000)),
        queues_(o.rate) {}
  const Scorer* AsScorer() const override { return this; }
  const RequestObserver* AsRequestObserver() const override { return this; }
  PluginInputs Consumes() const override {
    return {PluginInput::kPrefixMatch, PluginInput::kWaitingQueue, PluginInput::kInflightLoad};
  }
  ScorerCategory category() const override { return ScorerCategory::kDistribution; }
  Params EffectiveParams() const override { return Table().Effective(o_); }

  void Score(const SchedulingContext& ctx, Candidates candidates, std::span<double> scores) const override {
    std::lock_guard<std::mutex> lock(mu_);
    double best = INFINITY;
    int64_t min_uncached = INT64_MAX;
    if (o_.learn_speeds && !cal_.enabled && ctx.latency.computed) LearnSpeedsLocked(ctx, candidates);
    std::vector<Estimate> est(candidates.size());
    for (size_t i = 0; i < candidates.size(); ++i) {
      est[i] = EstimateLocked(ctx, *candidates[i]);
      min_uncached = std::min(min_uncached, est[i].uncached);
    }
    // sloAware: when at least half of the candidates are predicted to meet the request's SLO and
    // some are not, a candidate predicted to miss it has its cost multiplied by how far it misses
    // (predicted / SLO, > 1); with fewer meeting it the pool is overloaded and steering to the few
    // that seem to meet it would overload them next. Among the endpoints that meet it the usual cost decides (the pick that costs the
    // others least, not merely the fastest); a soft penalty rather than a filter, because the
    // prediction for an endpoint that meets the SLO now does not see the requests the next picks
    // would send it: excluding the others herds an overloaded pool onto its few idle servers.
    const std::vector<double> miss = o_.slo_aware ? SloMiss(ctx, candidates) : std::vector<double>{};
    for (size_t i = 0; i < candidates.size(); ++i) {
      scores[i] = est[i].ttft_s + est[i].decode_s + miss_penalty_ * static_cast<double>(est[i].uncached - min_uncached) / est[i].rate;
      if (!miss.empty()) scores[i] *= miss[i];
      best = std::min(best, scores[i]);
    }
    for (double& s : scores) s = s > 0 ? best / s : 1.0;
  }

  // learnSpeeds: an endpoint's rate follows what the latency predictor learnt of it, so the fluid
  // queues drain and the TTFT estimates run at each server's own pace without
  // calibratePrefillRate's idle-only samples. speedSource picks what: lightLoad (the default) the
  // prefill rate measured on its lightly loaded responses; currentLoad prefillTokensPerSecond times
  // the pool model's TTFT over the endpoint's at the current load (a ratio that also carries its
  // backlog, which the queues already count: docs/routing.md).
  void LearnSpeedsLocked(const SchedulingContext& ctx, Candidates candidates) const {
    if (light_rates_) return LearnLightRatesLocked(ctx, candidates);
    for (const Endpoint* e : candidates) {
      const LatencyInfo* li = ctx.Latency(e);
      if (!li) continue;
      const double speed = CurrentLoadSpeed(li);
      SetRateLocked(e->address, rate_ * speed, ctx.now_us, {RateOrigin::kConfigured, speed});
    }
  }

  // Identical servers differ by the predictor's error (a median 10% on the simulator): a speed
  // within 20% of 1 is noise, not a different GPU.
  static bool NearOne(double speed) { return speed > 0.8 && speed < 1.25; }
  // currentLoad's speed: the relative speed, 1 when near it or unknown.
  static double CurrentLoadSpeed(const LatencyInfo* li) {
    return !li || NearOne(li->relative_speed) ? 1.0 : li->relative_speed;
  }

  // speedSource: lightLoad. Each endpoint's queue drains at the prefill rate the predictor
  // measured on its lightly loaded responses (LatencyInfo::light_rate_tps), so neither its backlog
  // nor prefillTokensPerSecond's guess enters it. When every candidate's light speed is within 20%
  // of the pool's the pool is uniform and all run at the geometric mean of the measured rates (the
  // differences are the fit's noise); otherwise each at its own.
  //
  // An endpoint never lightly loaded long enough (saturated since it joined; in a pool in overload,
  // most of them) has no light rate. Its speed then comes from busy rates (LatencyInfo::
  // busy_rate_tps, the rate each got through its prefill queue at on its recent responses): its
  // own over the measured endpoints' geometric mean, snapped to 1 within 20%, times the measured
  // mean. Busy rates are below light ones (decode steps and batch-slot waits are in them), so only
  // their ratio is used, against the same figure of the others. Waits that are not prefill (no
  // free batch slot or KV block) pull a busy rate toward 0 and would starve the endpoint, so the
  // rate is floored at kBusyFloor of the slowest measured rate (of prefillTokensPerSecond with none
  // measured). With no TTFT sample at all: the mean times its currentLoad speed. (That speed was
  // the fallback before busy rates: on a pool in overload it read 0.3-10x and put a fast server's
  // rate at 10x the truth; docs/routing.md.)
  static constexpr double kBusyFloor = 0.25;
  void LearnLightRatesLocked(const SchedulingContext& ctx, Candidates candidates) const {
    bool mixed = false;
    double log_sum = 0, busy_log_sum = 0, min_light = std::numeric_limits<double>::infinity();
    int measured = 0, busy_measured = 0;
    for (const Endpoint* e : candidates) {
      const LatencyInfo* li = ctx.Latency(e);
      if (!li || !(li->light_rate_tps > 0)) continue;
      mixed = mixed || !NearOne(li->light_speed);
      min_light = std::min(min_light, li->light_rate_tps);
      log_sum += std::log(li->light_rate_tps);
      ++measured;
      if (li->busy_rate_tps > 0) {
        busy_log_sum += std::log(li->busy_rate_tps);
        ++busy_measured;
      }
    }
    // With fewer than half of the candidates measured, the measured ones say little of the
    // others (on a saturated pool only the odd server is ever lightly loaded): their mean is not
    // used (prefillTokensPerSecond stands in for it), and nothing is snapped.
    const bool most = 2 * measured >= static_cast<int>(candidates.size());
    const double mean = most ? std::exp(log_sum / measured) : rate_;
    for (const Endpoint* e : candidates) {
      const LatencyInfo* li = ctx.Latency(e);
      if (li && li->light_rate_tps > 0) {
        const bool own = mixed || !most;
        SetRateLocked(e->address, own ? li->light_rate_tps : mean, ctx.now_us,
                      {own ? RateOrigin::kMeasured : RateOrigin::kPoolMean, 1.0});
      } else if (li && li->busy_rate_tps > 0) {
        // Never lightly loaded long enough: its busy rate against the measured endpoints' is its
        // speed (with none of those, its busy rate itself), floored.
        const double floor = (measured > 0 ? min_light : rate_) * kBusyFloor;
        double speed = 1, want = li->busy_rate_tps;
        if (busy_measured > 0) {
          speed = li->busy_rate_tps / std::exp(busy_log_sum / busy_measured);
          if (NearOne(speed)) speed = 1;
          want = mean * speed;
        }
        const bool floored = want < floor;
        SetRateLocked(e->address, floored ? floor : want, ctx.now_us,
                      {floored ? RateOrigin::kBusyFloor : (busy_measured > 0 ? RateOrigin::kBusySpeed : RateOrigin::kBusy), speed, most});
      } else {
        // Not measured at all yet (no TTFT samples): currentLoad's speed until it is.
        const double speed = CurrentLoadSpeed(li);
        SetRateLocked(e->address, mean * speed, ctx.now_us,
                      {most ? RateOrigin::kUnmeasuredPoolMean : RateOrigin::kUnmeasuredConfigured, speed});
      }
    }
  }

  // Where learnSpeeds took an endpoint's rate from at the last pick (Explain says it); kept as
  // what it was, and written out only when explained, not at every pick.
  struct RateOrigin {
    enum Kind { kConfigured, kMeasured, kPoolMean, kUnmeasuredPoolMean, kUnmeasuredConfigured, kBusy, kBusySpeed, kBusyFloor } kind;
    double speed;  // the current-load (or, kBusySpeed, busy-rate) speed the rate was multiplied by (1: none)
    bool measured_mean = false;  // kBusySpeed: the speed multiplied the pool's measured mean (else the configured rate)
    std::string Text() const {
      const std::string times =
          speed == 1.0 ? "" : absl::StrFormat(" x its speed at the current load, %.2f", speed);
      switch (kind) {
        case kConfigured:
          return speed == 1.0 ? "configured; its speed at the current load is within 20% of the pool's"
                              : "configured" + times;
        case kMeasured: return "measured on its lightly loaded responses";
        case kPoolMean: return "the pool's measured mean: every speed within 20% of the pool's";
        case kUnmeasuredPoolMean: return "not measured yet: the pool's measured mean" + times;
        case kUnmeasuredConfigured: return "not measured yet: configured" + times;
        case kBusy: return "not lightly loaded yet: the rate it got through its prefill queue at on its recent responses";
        case kBusySpeed:
          return absl::StrFormat(
              "not lightly loaded yet: %s x its speed from the rates it and the measured servers got through their "
              "prefill queues at, %.2f",
              measured_mean ? "the pool's measured mean" : "configured", speed);
        case kBusyFloor:
          return "not lightly loaded yet, and its recent responses waited for more than prefill: a quarter of the "
                 "slowest measured rate (or of the configured one)";
      }
      return "";
    }
  };

  // Changes under 5% are ignored so the queues are not re-based at every pick.
  void SetRateLocked(const std::string& address, double want, int64_t now_us, RateOrigin origin) const {
    const double now = queues_.Rate(address);
    if (std::fabs(want - now) > 0.05 * now) queues_.SetRate(address, want, now_us);
    if (auto it = rate_origin_.find(address); it != rate_origin_.end()) {
      it->second = origin;
    } else {
      rate_origin_.emplace(address, origin);
    }
  }

  // Per candidate, 1 when predicted-latency-producer predicts it meets the request's SLOs (TTFT,
  // and TPOT when the request carries one), else predicted / SLO of the worse one (> 1); empty
  // when that does not split the candidates (no SLO, no producer, all meet it, or fewer than half).
  static std::vector<double> SloMiss(const SchedulingContext& ctx, Candidates candidates) {
    const LatencyState& st = ctx.latency;
    if (!st.computed || (st.ttft_slo_ms <= 0 && st.tpot_slo_ms <= 0)) return {};
    std::vector<double> miss(candidates.size(), 1.0);
    size_t meets = 0;
    for (size_t i = 0; i < candidates.size(); ++i) {
      const LatencyInfo* li = ctx.Latency(candidates[i]);
      if (!li) continue;
      double f = 1.0;
      if (st.ttft_slo_ms > 0 && li->ttft_headroom_ms < 0) f = std::max(f, li->ttft_ms / st.ttft_slo_ms);
      if (st.tpot_slo_ms > 0 && li->tpot_headroom_ms < 0) f = std::max(f, li->tpot_ms / st.tpot_slo_ms);
      miss[i] = f;
      meets += f == 1.0 ? 1 : 0;
    }
    if (meets == 0 || meets == candidates.size() || 2 * meets < candidates.size()) return {};
    return miss;
  }

  std::string Explain(const SchedulingContext& ctx, const Endpoint& e) const override {
    std::lock_guard<std::mutex> lock(mu_);
    const Estimate x = EstimateLocked(ctx, e);
    std::string slo;
    if (o_.slo_aware && ctx.latency.computed && (ctx.latency.ttft_slo_ms > 0 || ctx.latency.tpot_slo_ms > 0)) {
      if (const LatencyInfo* li = ctx.Latency(&e))
        slo = absl::StrCat("; predicted TTFT ", Num(li->ttft_ms), " ms vs SLO ", Num(ctx.latency.ttft_slo_ms), " ms");
    }
    return absl::StrCat("est. TTFT ", Num(x.ttft_s * 1000), " ms: ", Num(x.backlog), " tokens queued",
                        x.from_metrics ? " (from its waiting queue)" : "", " + ", x.uncached, " uncached of ", x.prompt,
                        " at ", std::llround(x.rate), " tokens/s", RateSourceLocked(e.address), "; decode slowdown ",
                        Num(x.decode_s * 1000), " ms (",
                        ctx.InflightRequests(&e), " in flight)", slo);
  }

  void PreRequest(const SchedulingContext& ctx, const Endpoint& picked) const override {
    std::lock_guard<std::mutex> lock(mu_);
    const Estimate x = EstimateLocked(ctx, picked);
    // The primary target comes first; a second target of the same pick (a prefill server) is not
    // where the first token is timed.
    if (cal_.enabled && ctx.pick_id != 0 && x.backlog <= 0 && static_cast<double>(x.uncached) >= cal_.min_tokens &&
        !pending_.contains(ctx.pick_id)) {
      pending_[ctx.pick_id] = Pending{picked.address, ctx.now_us, static_cast<double>(x.uncached)};
      while (pending_.size() > kMaxPending) pending_.erase(pending_.begin());  // oldest picks first
    }
    queues_.Add(picked.address, static_cast<double>(x.uncached), ctx.now_us);
    placed_++;
    mean_uncached_ += (static_cast<double>(x.uncached) - mean_uncached_) / static_cast<double>(std::min<int64_t>(placed_, 1000));
  }

  void FirstToken(uint64_t pick_id, std::string_view, int64_t at_us) const override {
    if (!cal_.enabled) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(pick_id);
    if (it == pending_.end()) return;
    const Pending p = std::move(it->second);
    pending_.erase(it);
    const double seconds = static_cast<double>(at_us - p.at_us) / 1e6 - overhead_ms_ / 1000.0;
    if (!(seconds > 0) || !(p.tokens > 0)) return;  // faster than a bare step: nothing to learn
    Learned& l = learned_[p.endpoint];
    l.n++;
    if (l.window.size() < static_cast<size_t>(cal_.samples)) {
      l.window.push_back(p.tokens / seconds);
    } else {
      l.window[l.next] = p.tokens / seconds;
      l.next = (l.next + 1) % l.window.size();
    }
    if (l.n < cal_.min_samples) return;
    std::vector<double> w = l.window;
    const size_t k = std::min(w.size() - 1, static_cast<size_t>(std::floor(0.9 * static_cast<double>(w.size()))));
    std::nth_element(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(k), w.end());
    queues_.SetRate(p.endpoint, std::clamp(w[k], rate_ / 20, rate_ * 20), at_us);
  }

  void ForgetEndpoint(std::string_view endpoint) const override {
    std::lock_guard<std::mutex> lock(mu_);
    queues_.Forget(endpoint);
    if (auto it = learned_.find(endpoint); it != learned_.end()) learned_.erase(it);
    if (auto it = rate_origin_.find(endpoint); it != rate_origin_.end()) rate_origin_.erase(it);
  }

 private:
  struct Pending {
    std::string endpoint;
    int64_t at_us = 0;
    double tokens = 0;  // uncached: nothing was queued ahead at the pick
  };
  struct Learned {
    int64_t n = 0;              // samples so far
    std::vector<double> window;  // the last samples (tokens/s), a ring
    size_t next = 0;
  };
  static constexpr size_t kMaxPending = 16384;

  std::string RateSourceLocked(const std::string& endpoint) const {
    if (!cal_.enabled) {
      auto it = rate_origin_.find(endpoint);
      return it == rate_origin_.end() ? "" : absl::StrCat(" (", it->second.Text(), ")");
    }
    auto it = learned_.find(endpoint);
    const int64_t n = it == learned_.end() ? 0 : it->second.n;
    if (n < cal_.min_samples) return absl::StrCat(" (configured; ", n, " of ", cal_.min_samples, " responses timed)");
    return absl::StrCat(" (calibrated from ", n, " responses)");
  }

  struct Estimate {
    double rate = 0;
    double ttft_s = 0;
    double decode_s = 0;
    double backlog = 0;
    bool from_metrics = false;
    int64_t uncached = 0, prompt = 0;
  };

  Estimate EstimateLocked(const SchedulingContext& ctx, const Endpoint& e) const {
    Estimate x;
    x.prompt = std::max<int64_t>(1, ctx.request ? ctx.request->prompt_tokens : 1);
    const int64_t matched = ctx.prefix.computed ? static_cast<int64_t>(ctx.PrefixMatchBlocks(&e)) * ctx.prefix.block_size_tokens : 0;
    x.uncached = x.prompt - std::min(matched, x.prompt - 1);
    x.backlog = queues_.Backlog(e.address, ctx.now_us);
    if (use_waiting_ && e.metrics.waiting_queue_size && !ctx.MetricsStale(e, staleness_us_)) {
      const double from_metrics = *e.metrics.waiting_queue_size * mean_uncached_;
      if (from_metrics > x.backlog) {
        x.backlog = from_metrics;
        x.from_metrics = true;
      }
    }
    x.rate = queues_.Rate(e.address);
    x.ttft_s = overhead_ms_ / 1000.0 + (x.backlog + static_cast<double>(x.uncached)) / x.rate;
    x.decode_s = decode_ms_per_seq_ / 1000.0 * expected_output_ * static_cast<double>(ctx.InflightRequests(&e));
    return x;
  }

  const TtftOptions o_;  // as configured, for EffectiveParams
  const bool light_rates_;  // speedSource: lightLoad
  const Calibration cal_;
  const double rate_;
  const double overhead_ms_;
  const double miss_penalty_;
  const double decode_ms_per_seq_;
  const double expected_output_;
  const bool use_waiting_;
  const int64_t staleness_us_;
  mutable std::mutex mu_;
  mutable PrefillQueues queues_;
  mutable int64_t placed_ = 0;
  mutable double mean_uncached_ = 0;
  mutable std::map<uint64_t, Pending> pending_;
  mutable std::map<std::string, Learned, std::less<>> learned_;
  // learnSpeeds: where each endpoint's rate came from at the last pick, for Explain.
  mutable std::map<std::string, RateOrigin, std::less<>> rate_origin_;
};

}  // namespace

PluginOr CreateEstimatedTtftScorer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(TtftOptions o, Table().Read(params));
  return std::make_unique<EstimatedTtftScorer>(TN(kEstimatedTtftScorerType, name), o);
}

PluginSchema EstimatedTtftScorerSchema() { return Table().Schema(); }

}  // namespace epp::plugins
