// llm-d Router's SLO-aware latency plugins (latency.h), on epp's in-process latency predictor
// (latency/predictor.h): their parameters, read and checked as llm-d reads them, and what each
// does, with llm-d's semantics (its plugin READMEs and code); where epp differs it says so below.
//
// predicted-latency-producer (a DataProducer, and the response path's observer): per cycle, the
// features of every candidate (KV use, queue, running, prompt tokens, prefix-hit tokens, the
// requests and prefill tokens it has in flight there, encoder-cache sizes) go to the predictor;
// the predictions, the request's SLOs (x-llm-d-slo-ttft-ms / x-llm-d-slo-tpot-ms, else the old
// x-slo-*) and the headroom (SLO - predicted) land in SchedulingContext::latency. At the pick it
// remembers the features the pick saw; at the first token it releases the request's prefill
// tokens from the endpoint's in-flight count and, with streamingMode, trains TTFT; at the end of
// the response it trains TPOT over the tokens after the first (without streamingMode: the
// end-to-end latency as the TTFT target, as llm-d does); it records llm-d's metrics.
//
// Where epp differs from llm-d, and why:
//  - The model runs in process (no sidecar, no HTTP hop, no coalescing) and its "TTFT" is the
//    predictor's upper estimate (the 0.9 quantile of observed/predicted times the fit), the
//    counterpart of llm-d's default 0.9-quantile objective.
//  - TPOT is neutral (valid, headroom 0) for a request without a TPOT SLO when no request
//    running on the endpoint carries one. llm-d's streamingMode compares the prediction with an
//    SLO of 0 then, so every endpoint misses: the tier filter keeps everything, the admitter sheds
//    every sheddable request that carries only a TTFT SLO, and the scorer's idle bucket prefers
//    the endpoint closest to the TTFT SLO from either side, i.e. one predicted to miss it.
//  - The minimum TPOT SLO of the requests running on an endpoint counts only requests that
//    carry one: llm-d's queue holds 0 for the others, and one request without a TPOT SLO then
//    hides every other request's SLO on that endpoint.
//  - llm-d keys a request's context by x-request-id (a request without one is not tracked);
//    epp keys it by the pick, so every recorded pick is tracked.
//  - latency-slo-admitter's refusal is a 429 with x-llm-d-request-dropped-reason
//    rejected-saturated (the scheduler's answer for every admitter): llm-d answers an admission
//    plugin's refusal 500 "Internal" without a drop reason, which tells a client the gateway
//    failed rather than that a sheddable request was shed.
//
// The scorer also checks what llm-d's README documents and llm-d does not enforce (a mistyped
// strategy runs as "least" there, negative weights invert the blend); contextTTL must be >= 0.
#include "plugins/latency/latency.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "epp/scheduling.h"
#include "latency/predictor.h"

namespace epp::plugins {
namespace {

using internal::Num;

// ---- predicted-latency-producer

struct ProducerOptions {
  // llm-d removed mid-stream TPOT predictions and ignores these two; any value is accepted.
  double sampling_mean = 1000;
  int64_t max_decode_samples = 0;
  double slo_buffer_factor = 1;
  int64_t context_ttl_us = 5 * 60 * 1000000LL;
  bool streaming_mode = false;
  std::string endpoint_role_label;
  bool predict_in_produce = true;
  std::string prefix_producer;
  std::string inflight_producer;
  bool use_encoder_cache = false;
  std::string encoder_cache_producer;
};

// contextTTL is a Go time.Duration decoded from JSON, so llm-d reads a bare number as
// nanoseconds (an integer only). Its README writes the default as "5m", which plain JSON decoding
// does not accept; epp takes both spellings. Negative TTLs are rejected (llm-d's cache would never
// expire them, as it does for 0).
absl::Status ReadContextTtl(const Params& v, ProducerOptions& o) {
  if (v.kind() == Params::Kind::kScalar) {
    if (absl::StatusOr<double> number = v.AsDouble(); number.ok()) {
      absl::StatusOr<int64_t> nanos = v.AsInt();
      if (!nanos.ok())
        return absl::InvalidArgumentError(absl::StrCat(
            v.path(), ": expected a duration (\"5m\", \"30s\") or whole nanoseconds, got '", v.text(), "'"));
      if (*nanos < 0) return absl::InvalidArgumentError(absl::StrCat(v.path(), ": must be >= 0, got ", v.text()));
      o.context_ttl_us = *nanos / 1000;
      return absl::OkStatus();
    }
  }
  EPP_ASSIGN_OR_RETURN(o.context_ttl_us, v.AsDurationMicros());
  return absl::OkStatus();
}

const ParamTable<ProducerOptions>& ProducerTable() {
  static const auto* t =
      &(*new ParamTable<ProducerOptions>())
           .Custom(
               "samplingMean", ParamType::kNumber,
               "llm-d: mean interval of decode-token sampling; ignored since llm-d removed mid-stream TPOT "
               "predictions",
               [](const Params& v, ProducerOptions& o) -> absl::Status {
                 EPP_ASSIGN_OR_RETURN(o.sampling_mean, v.AsDouble());
                 return absl::OkStatus();
               },
               // Whole values as integers: the default reads "1000", not the shortest double "1e+03".
               [](const ProducerOptions& o) {
                 const double m = o.sampling_mean;
                 return std::floor(m) == m && std::fabs(m) < 1e15 ? Params::Int(static_cast<int64_t>(m))
                                                                  : Params::Number(m);
               })
           .Deprecated()
           .Int("maxDecodeTokenSamplesForPrediction", &ProducerOptions::max_decode_samples, Range::Any(),
                "llm-d: decode tokens sampled for TPOT prediction; ignored since llm-d removed mid-stream TPOT "
                "predictions")
           .Deprecated()
           .Number("sloBufferFactor", &ProducerOptions::slo_buffer_factor, Range::Above(0),
                   "multiplier applied to the TPOT SLO when computing TPOT headroom (SLO x factor - predicted), as in llm-d")
           .Custom(
               "contextTTL", ParamType::kDuration,
               "how long a request's prediction context is kept (>= 0; 0: kept until the request ends); "
               "a Go duration, or whole nanoseconds as llm-d decodes a number",
               ReadContextTtl,
               [](const ProducerOptions& o) {
                 return Params::String(param_table_internal::DurationText(o.context_ttl_us));
               })
           .Bool("streamingMode", &ProducerOptions::streaming_mode,
                 "train TTFT on the first streamed chunk and TPOT across tokens (true), or end-to-end latency at "
                 "the end of the response (false)")
           .String("endpointRoleLabel", &ProducerOptions::endpoint_role_label,
                   "endpoint label naming the disaggregated role; TPOT is neutral for prefill endpoints")
           .OmitEmpty()
           .Bool("predictInProduce", &ProducerOptions::predict_in_produce,
                 "predict for every candidate before scheduling; false: collect training data only")
           .String("prefixMatchInfoProducerName", &ProducerOptions::prefix_producer,
                   "the prefix producer whose matches become a prediction feature; empty: the default one")
           .OmitEmpty()
           .String("inFlightLoadProducerName", &ProducerOptions::inflight_producer,
                   "the in-flight load producer read for queued prefill tokens and active requests; empty: the "
                   "default one")
           .OmitEmpty()
           .Bool("useEncoderCacheFeatures", &ProducerOptions::use_encoder_cache,
                 "feed multimodal encoder-cache sizes to the predictor (needs an encoder-cache producer)")
           .String("encoderCacheMatchInfoProducerName", &ProducerOptions::encoder_cache_producer,
                   "the encoder-cache producer read when useEncoderCacheFeatures is on; empty: the default one")
           .OmitEmpty();
  return *t;
}

// The request's SLO in milliseconds from `name`, else `old_name` (llm-d parses a float; a value
// that does not parse, or is negative or not finite, counts as no SLO: 0).
double SloHeader(const InferenceRequest& r, std::string_view name, std::string_view old_name) {
  std::optional<std::string_view> v = r.header(name);
  if (!v || v->empty()) v = r.header(old_name);
  if (!v || v->empty()) return 0;
  double out = 0;
  const char* end = v->data() + v->size();
  auto [ptr, ec] = std::from_chars(v->data(), end, out);
  if (ec != std::errc() || ptr != end || !std::isfinite(out) || out < 0) return 0;
  return out;
}

// llm-d's histogram buckets (seconds) for the predicted TTFT, the predicted TPOT and the time
// the predictions of one cycle took.
constexpr double kLatencyBounds[] = {0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6,
                                     8, 10, 15, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200,
                                     1800, 2700, 3600};
constexpr double kTpotBounds[] = {0.0005, 0.00205, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.125, 0.15, 0.2,
                                  0.3, 0.4, 0.5, 0.6, 0.8, 1, 1.5, 2, 3, 4.5, 6, 12, 18, 24, 30, 36, 48, 60,
                                  90, 120, 180, 270, 360};
constexpr double kDurationBounds[] = {0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0};

struct Histogram {
  std::span<const double> bounds;
  std::vector<uint64_t> counts;  // per bucket, not cumulative; the last is +Inf
  uint64_t count = 0;
  double sum = 0;
  void Observe(double v) {
    if (counts.empty()) counts.assign(bounds.size() + 1, 0);
    const size_t i = static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin());
    counts[i]++;
    count++;
    sum += v;
  }
  void Fill(PluginMetric& m) const {
    m.type = "histogram";
    m.bounds.assign(bounds.begin(), bounds.end());
    uint64_t acc = 0;
    for (size_t i = 0; i < bounds.size(); ++i) {
      acc += i < counts.size() ? counts[i] : 0;
      m.cumulative.push_back(acc);
    }
    m.count = count;
    m.sum = sum;
  }
};

// Per (model, target model): what llm-d's predicted-latency metrics count. Label sets are capped
// (client-chosen model names must not grow /metrics without bound); past the cap they count
// under model "__other__".
struct ModelMetrics {
  Histogram predicted_ttft{kLatencyBounds};
  Histogram predicted_tpot{kTpotBounds};
  Histogram ttft_prediction_duration{kDurationBounds};
  uint64_t ttft_violations = 0;
  uint64_t tpot_violations = 0;
  double last_ttft_violation = -1;  // gauge: 1 the last request with an SLO missed it, 0 met; -1 none yet
  double last_tpot_violation = -1;
  // A response's observed value against the SLO it carried (both in ms; no SLO: nothing).
  void CountSlo(bool ttft, double observed_ms, double slo_ms) {
    if (!(slo_ms > 0)) return;
    const bool missed = observed_ms > slo_ms;
    (ttft ? ttft_violations : tpot_violations) += missed ? 1 : 0;
    (ttft ? last_ttft_violation : last_tpot_violation) = missed ? 1 : 0;
  }
};
constexpr size_t kMaxModelLabels = 64;

class PredictedLatencyProducer : public Plugin,
                                 public DataProducer,
                                 public RequestObserver,
                                 public FirstTokenObserver,
                                 public CompletionObserver,
                                 public MetricsSource,
                                 public EndpointState {
 public:
  PredictedLatencyProducer(TypedName tn, ProducerOptions o, std::unique_ptr<latency::LatencyPredictor> predictor,
                           bool background)
      : Plugin(std::move(tn)), o_(std::move(o)), predictor_(std::move(predictor)), background_(background) {
    if (background_) predictor_->Start();
  }
  ~PredictedLatencyProducer() override { predictor_->Stop(); }

  const DataProducer* AsDataProducer() const override { return this; }
  const RequestObserver* AsRequestObserver() const override { return this; }
  const MetricsSource* AsMetricsSource() const override { return this; }
  bool FillsPrefix() const override { return false; }
  PluginInputs Consumes() const override {
    return {PluginInput::kPrefixMatch, PluginInput::kInflightLoad, PluginInput::kKvCacheUsage,
            PluginInput::kWaitingQueue, PluginInput::kRunningRequests};
  }
  Params EffectiveParams() const override { return ProducerTable().Effective(o_); }

  void Prepare(SchedulingContext& ctx, Candidates candidates) const override {
    const InferenceRequest& r = *ctx.request;
    LatencyState& st = ctx.latency;
    st.computed = true;
    st.producer = name();
    st.ttft_slo_ms = SloHeader(r, "x-llm-d-slo-ttft-ms", "x-slo-ttft-ms");
    st.tpot_slo_ms = SloHeader(r, "x-llm-d-slo-tpot-ms", "x-slo-tpot-ms");
    st.info.assign(ctx.endpoints.size(), LatencyInfo{});
    const auto t0 = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(mu_);
    for (const Endpoint* e : candidates) {
      LatencyInfo& li = st.info[ctx.IndexOf(e)];
      const latency::LatencyFeatures f = FeaturesLocked(ctx, *e);
      li.prefill_tokens_in_flight = f.inflight_prefill_tokens;
      auto ep = endpoints_.find(e->address);
      li.dispatched = ep == endpoints_.end() ? 0 : ep->second.dispatched;
      if (!o_.predict_in_produce) continue;
      const latency::LatencyPrediction p = predictor_->Predict(e->address, f);
      if (!p.valid()) continue;
      li.has = true;
      li.from_prior = p.from_prior;
      if (p.samples > 0 && std::isfinite(p.pool_ttft_s) && p.ttft_s > 0)
        li.relative_speed = std::clamp(p.pool_ttft_s / p.ttft_s, 0.05, 20.0);
      if (std::isfinite(p.light_speed)) li.light_speed = std::clamp(p.light_speed, 0.05, 20.0);
      if (std::isfinite(p.light_rate_tps) && p.light_rate_tps > 0) li.light_rate_tps = p.light_rate_tps;
      if (std::isfinite(p.busy_rate_tps) && p.busy_rate_tps > 0) li.busy_rate_tps = p.busy_rate_tps;
      li.ttft_ms = 1000 * (std::isfinite(p.ttft_upper_s) ? p.ttft_upper_s : p.ttft_s);
      li.tpot_ms = std::isfinite(p.tpot_upper_s) ? 1000 * p.tpot_upper_s : (std::isfinite(p.tpot_s) ? 1000 * p.tpot_s : 0);
      // llm-d's validatePrediction.
      li.ttft_valid = li.ttft_ms < st.ttft_slo_ms;
      li.ttft_headroom_ms = st.ttft_slo_ms - li.ttft_ms;
      // With streamingMode the TPOT bound is the request's TPOT SLO and the smallest of the
      // requests running there (this one's decode slows theirs), times sloBufferFactor.
      const double running_min = ep == endpoints_.end() ? 0 : ep->second.MinTpotSlo();
      double buffered = st.tpot_slo_ms > 0 ? st.tpot_slo_ms * o_.slo_buffer_factor : INFINITY;
      if (running_min > 0) buffered = std::min(buffered, running_min * o_.slo_buffer_factor);
      if (o_.streaming_mode && !PrefillRole(*e) && std::isfinite(buffered)) {
        li.tpot_valid = li.tpot_ms < buffered;
        li.tpot_headroom_ms = buffered - li.tpot_ms;
      } else {
        // TPOT is neutral without streaming (never trained), on prefill endpoints, and when
        // neither this request nor one running there carries a TPOT SLO.
        li.tpot_valid = true;
        li.tpot_headroom_ms = 0;
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (o_.predict_in_produce) MetricsFor(r.model).ttft_prediction_duration.Observe(seconds);
  }

  void PreRequest(const SchedulingContext& ctx, const Endpoint& picked) const override {
    if (ctx.pick_id == 0 || !ctx.latency.computed) return;
    std::lock_guard<std::mutex> lock(mu_);
    // The primary target comes first: a later target of the same pick (a prefill server) is not
    // where the response is timed.
    if (pending_.contains(ctx.pick_id)) return;
    SweepLocked(ctx.now_us);
    Pending p;
    p.endpoint = picked.address;
    p.features = FeaturesLocked(ctx, picked);
    p.uncached = std::max(0.0, p.features.input_tokens - p.features.prefix_hit_tokens);
    p.dispatch_us = ctx.now_us;
    p.slo_ttft_ms = ctx.latency.ttft_slo_ms;
    p.slo_tpot_ms = ctx.latency.tpot_slo_ms;
    p.model = ctx.request->model;
    if (const LatencyInfo* li = ctx.Latency(&picked)) {
      p.predicted_ttft_ms = li->ttft_ms;
      p.predicted_tpot_ms = li->tpot_ms;
      ModelMetrics& m = MetricsFor(p.model);
      m.predicted_ttft.Observe(li->ttft_ms / 1000);
      if (o_.streaming_mode) m.predicted_tpot.Observe(li->tpot_ms / 1000);
    }
    EndpointLoad& load = endpoints_[p.endpoint];
    load.dispatched++;
    load.prefill_tokens += p.uncached;
    if (p.slo_tpot_ms > 0) load.tpot_slos.insert(p.slo_tpot_ms);
    pending_.emplace(ctx.pick_id, std::move(p));
    while (pending_.size() > kMaxPending) DropLocked(pending_.begin());  // the oldest picks first
  }

  // The first token: the request's prefill tokens leave the endpoint's in-flight count, and with
  // streamingMode its TTFT trains the model now (llm-d records TTFT at the first token; waiting
  // for the end would hold a slow server's samples back by its whole decode).
  void FirstToken(uint64_t pick_id, std::string_view, int64_t at_us) const override {
    std::string endpoint;
    latency::LatencyFeatures features;
    double ttft_s = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = pending_.find(pick_id);
      if (it == pending_.end() || it->second.first_token_us >= 0) return;
      Pending& p = it->second;
      p.first_token_us = at_us;
      ReleasePrefillLocked(p);
      if (!o_.streaming_mode) return;
      ttft_s = static_cast<double>(at_us - p.dispatch_us) / 1e6;
      if (!(ttft_s > 0)) return;
      endpoint = p.endpoint;
      features = p.features;
      MetricsFor(p.model).CountSlo(true, ttft_s * 1000, p.slo_ttft_ms);
    }
    predictor_->Observe(endpoint, features, ttft_s, std::nan(""));
    MaybeTrain(at_us);
  }

  void Completed(uint64_t pick_id, std::string_view, const ResponseCompletion& c) const override {
    Pending p;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = pending_.find(pick_id);
      if (it == pending_.end()) return;
      p = it->second;
      DropLocked(it);
    }
    if (o_.streaming_mode) {
      // TPOT over the tokens after the first (a response not streamed, or of one token, has none).
      if (p.first_token_us < 0) return;
      const double tokens = c.usage.completion_tokens > 0 ? c.usage.completion_tokens : static_cast<double>(c.chunks);
      if (!(tokens > 1)) return;
      const double tpot_s = static_cast<double>(c.at_us - p.first_token_us) / 1e6 / (tokens - 1);
      if (!(tpot_s > 0)) return;
      predictor_->ObserveTpot(p.endpoint, p.features, tpot_s);
      std::lock_guard<std::mutex> lock(mu_);
      MetricsFor(p.model).CountSlo(false, tpot_s * 1000, p.slo_tpot_ms);
    } else {
      // Without streamingMode llm-d trains its TTFT model on the end-to-end latency.
      const double e2e_s = static_cast<double>(c.at_us - p.dispatch_us) / 1e6;
      if (!(e2e_s > 0)) return;
      predictor_->Observe(p.endpoint, p.features, e2e_s, std::nan(""));
      std::lock_guard<std::mutex> lock(mu_);
      MetricsFor(p.model).CountSlo(true, e2e_s * 1000, p.slo_ttft_ms);
    }
    MaybeTrain(c.at_us);
  }

  // In a virtual-time run (replay) training follows that clock, so a seeded run is repeatable;
  // serving trains on the predictor's own thread, off the request path.
  void MaybeTrain(int64_t at_us) const {
    if (background_) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (at_us - last_train_us_ < predictor_->options().train_interval_ms * 1000) return;
      last_train_us_ = at_us;
    }
    predictor_->TrainNow();
  }

  void ForgetEndpoint(std::string_view endpoint) const override {
    predictor_->Forget(endpoint);
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = endpoints_.find(std::string(endpoint)); it != endpoints_.end()) endpoints_.erase(it);
  }

  void CollectMetrics(std::vector<PluginMetric>& out) const override {
    std::lock_guard<std::mutex> lock(mu_);
    const std::pair<std::string, std::string> type{"plugin_type", std::string(kPredictedLatencyProducerType)};
    const std::pair<std::string, std::string> plugin{"plugin_name", name()};
    for (const auto& [model, m] : metrics_) {
      const std::pair<std::string, std::string> mn{"model_name", model}, tm{"target_model_name", model};
      auto hist = [&](std::string_view metric, std::string_view help, const Histogram& h) {
        if (h.count == 0) return;
        // GIE's deprecated inference_objective_* name and llm-d's llm_d_epp_* one.
        for (bool llmd : {false, true}) {
          PluginMetric pm;
          pm.name = absl::StrCat(llmd ? "llm_d_epp_" : "inference_objective_", std::string(metric));
          pm.help = std::string(help);
          pm.labels = llmd ? std::vector<std::pair<std::string, std::string>>{plugin, type, mn, tm}
                           : std::vector<std::pair<std::string, std::string>>{mn, tm};
          h.Fill(pm);
          out.push_back(std::move(pm));
        }
      };
      hist("request_predicted_ttft_seconds", "Predicted TTFT of the endpoint picked, in seconds.", m.predicted_ttft);
      hist("request_predicted_tpot_seconds", "Predicted TPOT of the endpoint picked, in seconds.", m.predicted_tpot);
      hist("request_ttft_prediction_duration_seconds",
           "Time to predict TTFT and TPOT for every candidate of a request, in seconds.", m.ttft_prediction_duration);
      for (const auto& [kind, n] : {std::pair<std::string, uint64_t>{"ttft", m.ttft_violations},
                                    std::pair<std::string, uint64_t>{"tpot", m.tpot_violations}}) {
        for (bool llmd : {false, true}) {
          PluginMetric pm;
          pm.name = llmd ? "llm_d_epp_request_slo_violation_total" : "inference_objective_request_slo_violation_total";
          pm.type = "counter";
          pm.help = "Requests whose observed TTFT or TPOT exceeded the SLO they carried, by type.";
          pm.labels = llmd ? std::vector<std::pair<std::string, std::string>>{plugin, type, mn, tm, {"type", kind}}
                           : std::vector<std::pair<std::string, std::string>>{mn, tm, {"type", kind}};
          pm.value = static_cast<double>(n);
          out.push_back(std::move(pm));
        }
      }
      for (const auto& [kind, v] : {std::pair<std::string, double>{"ttft_slo_violation", m.last_ttft_violation},
                                    std::pair<std::string, double>{"tpot_slo_violation", m.last_tpot_violation}}) {
        if (v < 0) continue;
        PluginMetric pm;
        pm.name = "llm_d_epp_inference_request_metric";
        pm.type = "gauge";
        pm.help = "The last request's values by type (here: 1 when it missed its SLO, 0 when it met it).";
        pm.labels = {plugin, type, mn, tm, {"type", kind}};
        pm.value = v;
        out.push_back(std::move(pm));
      }
    }
    PluginMetric tracked;
    tracked.name = "llm_d_epp_predicted_latency_tracked_requests";
    tracked.type = "gauge";
    tracked.help = "Requests the predicted-latency producer is tracking (dispatched, response not ended).";
    tracked.labels = {plugin, type};
    tracked.value = static_cast<double>(pending_.size());
    out.push_back(std::move(tracked));
  }

  latency::LatencyPredictor& predictor() const { return *predictor_; }

 private:
  struct Pending {
    std::string endpoint;
    latency::LatencyFeatures features;
    double uncached = 0;
    bool prefill_released = false;
    int64_t dispatch_us = 0;
    int64_t first_token_us = -1;
    double predicted_ttft_ms = -1, predicted_tpot_ms = -1;
    double slo_ttft_ms = 0, slo_tpot_ms = 0;
    std::string model;
  };
  struct EndpointLoad {
    int64_t dispatched = 0;
    double prefill_tokens = 0;
    std::multiset<double> tpot_slos;  // TPOT SLOs of the requests running here that carry one
    double MinTpotSlo() const { return tpot_slos.empty() ? 0 : *tpot_slos.begin(); }
  };
  static constexpr size_t kMaxPending = 65536;

  bool PrefillRole(const Endpoint& e) const {
    if (o_.endpoint_role_label.empty()) return false;
    auto it = e.labels.find(o_.endpoint_role_label);
    return it != e.labels.end() && it->second == "prefill";
  }

  latency::LatencyFeatures FeaturesLocked(const SchedulingContext& ctx, const Endpoint& e) const {
    latency::LatencyFeatures f;
    f.kv_cache_usage = std::clamp(e.metrics.kv_cache_usage.value_or(0.0), 0.0, 1.0);
    f.waiting_requests = std::max(0.0, static_cast<double>(e.metrics.waiting_queue_size.value_or(0)));
    f.running_requests = std::max(0.0, static_cast<double>(e.metrics.running_requests.value_or(0)));
    const InferenceRequest& r = *ctx.request;
    f.input_tokens = static_cast<double>(ctx.tokens.computed ? static_cast<int64_t>(ctx.tokens.ids.size()) : r.prompt_tokens);
    if (f.input_tokens < 0) f.input_tokens = 0;
    if (ctx.prefix.computed)
      f.prefix_hit_tokens = std::min(f.input_tokens, static_cast<double>(ctx.PrefixMatchBlocks(&e)) *
                                                         static_cast<double>(std::max(ctx.prefix.block_size_tokens, 0)));
    f.inflight_requests = static_cast<double>(std::max<int64_t>(ctx.InflightRequests(&e), 0));
    if (auto it = endpoints_.find(e.address); it != endpoints_.end())
      f.inflight_prefill_tokens = std::max(0.0, it->second.prefill_tokens);
    if (o_.use_encoder_cache && ctx.encoder_cache.computed) {
      f.encoder_input_size = static_cast<double>(ctx.encoder_cache.items.size());
      const size_t i = ctx.IndexOf(&e);
      const double matched = i < ctx.encoder_cache.matched.size() ? ctx.encoder_cache.matched[i] : 0;
      f.encoder_matched_size = std::clamp(matched, 0.0, f.encoder_input_size);
    }
    return f;
  }

  ModelMetrics& MetricsFor(const std::string& model) const {
    auto it = metrics_.find(model);
    if (it != metrics_.end()) return it->second;
    if (metrics_.size() >= kMaxModelLabels) return metrics_["__other__"];
    return metrics_[model];
  }

  void ReleasePrefillLocked(Pending& p) const {
    if (p.prefill_released) return;
    p.prefill_released = true;
    if (auto it = endpoints_.find(p.endpoint); it != endpoints_.end())
      it->second.prefill_tokens = std::max(0.0, it->second.prefill_tokens - p.uncached);
  }

  // Ends a tracked request: its prefill tokens, dispatched count and TPOT SLO leave the
  // endpoint's load. Returns the next entry (btree iterators do not survive an erase).
  absl::btree_map<uint64_t, Pending>::iterator DropLocked(absl::btree_map<uint64_t, Pending>::iterator it) const {
    Pending& p = it->second;
    ReleasePrefillLocked(p);
    if (auto ep = endpoints_.find(p.endpoint); ep != endpoints_.end()) {
      EndpointLoad& load = ep->second;
      load.dispatched = std::max<int64_t>(0, load.dispatched - 1);
      if (p.slo_tpot_ms > 0)
        if (auto s = load.tpot_slos.find(p.slo_tpot_ms); s != load.tpot_slos.end()) load.tpot_slos.erase(s);
      if (load.dispatched == 0 && load.tpot_slos.empty() && load.prefill_tokens <= 0) endpoints_.erase(ep);
    }
    return pending_.erase(it);
  }

  // contextTTL: a request whose response never ended (a stream cut off) stops counting after it.
  void SweepLocked(int64_t now_us) const {
    if (o_.context_ttl_us <= 0 || now_us - last_sweep_us_ < 1'000'000) return;
    last_sweep_us_ = now_us;
    for (auto it = pending_.begin(); it != pending_.end();)
      it = now_us - it->second.dispatch_us > o_.context_ttl_us ? DropLocked(it) : std::next(it);
  }

  const ProducerOptions o_;
  const std::unique_ptr<latency::LatencyPredictor> predictor_;
  const bool background_;
  mutable std::mutex mu_;
  mutable absl::btree_map<uint64_t, Pending> pending_;  // by pick id: oldest first
  mutable absl::flat_hash_map<std::string, EndpointLoad> endpoints_;
  mutable std::map<std::string, ModelMetrics> metrics_;
  mutable int64_t last_sweep_us_ = 0;
  mutable int64_t last_train_us_ = std::numeric_limits<int64_t>::min() / 2;
};

// ---- latency-scorer

struct ScorerOptions {
  double ttft_weight = 0.8;
  double tpot_weight = 0.2;
  std::string strategy = "least";
  double kv_weight = 1;
  double queue_weight = 1;
  double prefix_weight = 1;
  std::string prediction_producer;
  std::string prefix_producer;
};

// The README's ranges and choices (see the top of the file: llm-d itself does not check them).
const ParamTable<ScorerOptions>& ScorerTable() {
  static const auto* t =
      &(*new ParamTable<ScorerOptions>())
           .Number("ttftWeight", &ScorerOptions::ttft_weight, Range::AtLeast(0),
                   "weight of TTFT headroom in the blended score")
           .Number("tpotWeight", &ScorerOptions::tpot_weight, Range::AtLeast(0),
                   "weight of TPOT headroom in the blended score; 0 for non-streaming traffic")
           .String("headroomSelectionStrategy", &ScorerOptions::strategy,
                   "least: prefer endpoints closest to the SLO (bin-packing); most: prefer the most headroom",
                   {"least", "most"})
           .Number("compositeKVWeight", &ScorerOptions::kv_weight, Range::AtLeast(0),
                   "weight of free KV cache in the fallback score used without predictions")
           .Number("compositeQueueWeight", &ScorerOptions::queue_weight, Range::AtLeast(0),
                   "weight of the relative queue depth in the fallback score")
           .Number("compositePrefixWeight", &ScorerOptions::prefix_weight, Range::AtLeast(0),
                   "weight of the prefix-cache match in the fallback score")
           .String("latencyPredictionInfoProducerName", &ScorerOptions::prediction_producer,
                   "the predicted-latency-producer whose predictions are read; empty: the default one")
           .OmitEmpty()
           .String("prefixMatchInfoProducerName", &ScorerOptions::prefix_producer,
                   "the prefix producer read by the fallback score; empty: the default one")
           .OmitEmpty();
  return *t;
}

// ---- slo-headroom-tier-filter

struct TierOptions {
  double epsilon = 0.01;
  std::string prediction_producer;
};

const ParamTable<TierOptions>& TierTable() {
  static const auto* t =
      &(*new ParamTable<TierOptions>())
           .Number("epsilonExploreNeg", &TierOptions::epsilon, Range::Closed(0, 1),
                   "probability of keeping the tier that misses the SLOs when both tiers have endpoints")
           .String("latencyPredictionInfoProducerName", &TierOptions::prediction_producer,
                   "the predicted-latency-producer whose predictions are read; empty: the default one")
           .OmitEmpty();
  return *t;
}

// ---- latency-slo-admitter

struct AdmitterOptions {
  std::string prediction_producer;
};

const ParamTable<AdmitterOptions>& AdmitterTable() {
  static const auto* t =
      &(*new ParamTable<AdmitterOptions>())
           .String("latencyPredictionInfoProducerName", &AdmitterOptions::prediction_producer,
                   "the predicted-latency-producer whose predictions are read; empty: the default one")
           .OmitEmpty();
  return *t;
}

// The predictions a consumer reads: the cycle's, when its producer ran and is the one the
// consumer names (latencyPredictionInfoProducerName; empty: any).
const LatencyState* Predictions(const SchedulingContext& ctx, const std::string& producer) {
  if (!ctx.latency.computed) return nullptr;
  if (!producer.empty() && producer != ctx.latency.producer) return nullptr;
  return &ctx.latency;
}
const LatencyInfo* PredictionFor(const SchedulingContext& ctx, const std::string& producer, const Endpoint& e) {
  const LatencyState* st = Predictions(ctx, producer);
  return st ? st->Find(ctx.IndexOf(&e)) : nullptr;
}

std::string DescribePrediction(const LatencyState& st, const LatencyInfo& li) {
  std::string out = absl::StrCat("predicted TTFT ", Num(li.ttft_ms), " ms");
  if (st.ttft_slo_ms > 0) absl::StrAppend(&out, " (SLO ", Num(st.ttft_slo_ms), ", headroom ", Num(li.ttft_headroom_ms), ")");
  if (li.tpot_ms > 0 || li.tpot_headroom_ms != 0)
    absl::StrAppend(&out, ", TPOT ", Num(li.tpot_ms), " ms (headroom ", Num(li.tpot_headroom_ms), ")");
  absl::StrAppend(&out, ", ", li.dispatched, " dispatched");
  if (li.from_prior) absl::StrAppend(&out, ", pool model");
  return out;
}

class LatencyScorer : public Plugin, public Scorer {
 public:
  LatencyScorer(TypedName tn, ScorerOptions o) : Plugin(std::move(tn)), o_(std::move(o)) {}
  const Scorer* AsScorer() const override { return this; }
  Params EffectiveParams() const override { return ScorerTable().Effective(o_); }
  ScorerCategory category() const override { return ScorerCategory::kBalance; }  // llm-d's category
  PluginInputs Consumes() const override {
    return {PluginInput::kLatencyPrediction, PluginInput::kPrefixMatch, PluginInput::kKvCacheUsage,
            PluginInput::kWaitingQueue};
  }

  // llm-d's Score: only the endpoints that meet both SLOs are scored when there are any; else
  // the idle ones (nothing dispatched); else the first non-empty deficit bucket (missing TPOT
  // only, then TTFT only, then both), always "least" there. Without any prediction, the
  // composite of free KV, relative queue and prefix match.
  void Score(const SchedulingContext& ctx, Candidates candidates, std::span<double> scores) const override {
    std::fill(scores.begin(), scores.end(), 0.0);
    std::vector<const LatencyInfo*> info(candidates.size());
    bool any = false;
    for (size_t i = 0; i < candidates.size(); ++i) {
      info[i] = PredictionFor(ctx, o_.prediction_producer, *candidates[i]);
      any |= info[i] != nullptr;
    }
    if (!any) {
      Composite(ctx, candidates, scores);
      return;
    }
    std::vector<size_t> positive, negative;
    for (size_t i = 0; i < candidates.size(); ++i) {
      const bool neg = info[i] && (info[i]->ttft_headroom_ms < 0 || info[i]->tpot_headroom_ms < 0);
      (neg ? negative : positive).push_back(i);
    }
    if (!positive.empty()) return ScoreBucket(info, positive, scores, false);
    std::vector<size_t> idle, tpot_only, ttft_only, both;
    for (size_t i : negative)
      if (info[i]->dispatched == 0) idle.push_back(i);
    if (!idle.empty()) return ScoreBucket(info, idle, scores, true);
    for (size_t i : negative) {
      const bool ttft_neg = info[i]->ttft_headroom_ms < 0, tpot_neg = info[i]->tpot_headroom_ms < 0;
      if (ttft_neg && tpot_neg) both.push_back(i);
      else if (ttft_neg) ttft_only.push_back(i);
      else if (tpot_neg) tpot_only.push_back(i);
      else both.push_back(i);
    }
    for (const std::vector<size_t>* bucket : {&tpot_only, &ttft_only, &both})
      if (!bucket->empty()) return ScoreBucket(info, *bucket, scores, true);
  }

  std::string Explain(const SchedulingContext& ctx, const Endpoint& e) const override {
    const LatencyState* st = Predictions(ctx, o_.prediction_producer);
    const LatencyInfo* li = st ? st->Find(ctx.IndexOf(&e)) : nullptr;
    if (!li) {
      return absl::StrCat("no prediction: composite of free KV ", Num(1 - e.metrics.kv_cache_usage.value_or(0)),
                          ", queue ", e.metrics.waiting_queue_size.value_or(0), ", prefix ",
                          Num(PrefixShare(ctx, e)));
    }
    return DescribePrediction(*st, *li);
  }

 private:
  static double PrefixShare(const SchedulingContext& ctx, const Endpoint& e) {
    if (!ctx.prefix.computed || ctx.prefix.hashes.empty()) return 0;
    return static_cast<double>(ctx.PrefixMatchBlocks(&e)) / static_cast<double>(ctx.prefix.hashes.size());
  }

  // llm-d's scoreBucket: headroom magnitudes min-max normalised per target, blended by the
  // normalised weights (all weight on the target that varies when only one does); "least"
  // scores the smallest headroom highest (best fit), "most" the largest. Scores are llm-d's
  // integer steps w / 100 with w in [1, 101]; the profile clamps them to 1.
  void ScoreBucket(const std::vector<const LatencyInfo*>& info, const std::vector<size_t>& bucket,
                   std::span<double> scores, bool force_least) const {
    constexpr double kEps = 1e-9, kWMax = 100;
    double a = o_.ttft_weight, b = o_.tpot_weight;
    if (a + b <= 0) {
      a = 1;
      b = 0;
    } else {
      const double sum = a + b;
      a /= sum;
      b /= sum;
    }
    auto ttft = [&](size_t i) { return info[i] ? std::fabs(info[i]->ttft_headroom_ms) : 0.0; };
    auto tpot = [&](size_t i) { return info[i] ? std::fabs(info[i]->tpot_headroom_ms) : 0.0; };
    double min_ttft = INFINITY, max_ttft = -INFINITY, min_tpot = INFINITY, max_tpot = -INFINITY;
    for (size_t i : bucket) {
      min_ttft = std::min(min_ttft, ttft(i));
      max_ttft = std::max(max_ttft, ttft(i));
      min_tpot = std::min(min_tpot, tpot(i));
      max_tpot = std::max(max_tpot, tpot(i));
    }
    const double ttft_range = max_ttft - min_ttft, tpot_range = max_tpot - min_tpot;
    if (ttft_range <= kEps && tpot_range > kEps) {
      a = 0;
      b = 1;
    } else if (tpot_range <= kEps && ttft_range > kEps) {
      a = 1;
      b = 0;
    }
    const bool most = !force_least && o_.strategy == "most";
    for (size_t i : bucket) {
      const double n_ttft = ttft_range > kEps ? (ttft(i) - min_ttft) / ttft_range : 0.5;
      const double n_tpot = tpot_range > kEps ? (tpot(i) - min_tpot) / tpot_range : 0.5;
      const double combined = a * n_ttft + b * n_tpot;
      const double w = std::floor((most ? combined : 1.0 - combined) * kWMax) + 1;
      scores[i] = w / kWMax;
    }
  }

  // llm-d's compositeScores (no predictions): weights normalised; free KV, the queue relative
  // to the longest, the prefix share; rounded to llm-d's 1/100 steps.
  void Composite(const SchedulingContext& ctx, Candidates candidates, std::span<double> scores) const {
    double wkv = o_.kv_weight, wq = o_.queue_weight, wp = o_.prefix_weight;
    double sum = wkv + wq + wp;
    if (sum <= 0) {
      wkv = 1;
      wq = wp = 0;
      sum = 1;
    }
    wkv /= sum;
    wq /= sum;
    wp /= sum;
    int64_t max_q = 0;
    for (const Endpoint* e : candidates) max_q = std::max<int64_t>(max_q, e->metrics.waiting_queue_size.value_or(0));
    for (size_t i = 0; i < candidates.size(); ++i) {
      const Endpoint& e = *candidates[i];
      const int64_t q = e.metrics.waiting_queue_size.value_or(0);
      const double rel_queue = max_q > 0 ? static_cast<double>(max_q - q) / static_cast<double>(max_q) : 1.0;
      const double kv_free = 1.0 - e.metrics.kv_cache_usage.value_or(0);
      const double composite = wkv * kv_free + wq * rel_queue + wp * PrefixShare(ctx, e);
      scores[i] = std::round(100 * composite) / 100;
    }
  }

  ScorerOptions o_;
};

class SloHeadroomTierFilter : public Plugin, public Filter {
 public:
  SloHeadroomTierFilter(TypedName tn, TierOptions o, Rng* rng) : Plugin(std::move(tn)), o_(std::move(o)), rng_(rng) {}
  const Filter* AsFilter() const override { return this; }
  Params EffectiveParams() const override { return TierTable().Effective(o_); }
  PluginInputs Consumes() const override { return {PluginInput::kLatencyPrediction}; }

  // llm-d's Filter: endpoints meeting both SLOs (headroom >= 0) form the positive tier, the
  // others and those without a prediction the negative one; with both non-empty the positive
  // tier is kept, except with probability epsilonExploreNeg (so that an overloaded endpoint gets
  // the traffic that shows it recovered). No prediction at all: every endpoint is kept.
  std::vector<const Endpoint*> Apply(const SchedulingContext& ctx, Candidates candidates) const override {
    std::vector<const Endpoint*> all(candidates.begin(), candidates.end());
    if (candidates.size() <= 1) return all;
    std::vector<const Endpoint*> positive, negative;
    bool any = false;
    for (const Endpoint* e : candidates) {
      const LatencyInfo* li = PredictionFor(ctx, o_.prediction_producer, *e);
      any |= li != nullptr;
      (li && Positive(*li) ? positive : negative).push_back(e);
    }
    if (!any) return all;
    if (!positive.empty() && !negative.empty()) {
      Rng* rng = ctx.rng ? ctx.rng : rng_;
      if (o_.epsilon > 0 && rng && rng->Uniform() < o_.epsilon) return negative;
      return positive;
    }
    return positive.empty() ? negative : positive;
  }
  std::string WhyRemoved(const SchedulingContext& ctx, const Endpoint& e) const override {
    const LatencyState* st = Predictions(ctx, o_.prediction_producer);
    const LatencyInfo* li = st ? st->Find(ctx.IndexOf(&e)) : nullptr;
    if (!li) return "no latency prediction while other endpoints have one";
    if (Positive(*li)) return absl::StrCat("meets the SLOs, but the tier missing them was explored: ", DescribePrediction(*st, *li));
    return absl::StrCat("misses the SLOs while other endpoints meet them: ", DescribePrediction(*st, *li));
  }

 private:
  static bool Positive(const LatencyInfo& li) { return li.ttft_headroom_ms >= 0 && li.tpot_headroom_ms >= 0; }
  TierOptions o_;
  Rng* rng_;
};

class LatencySloAdmitter : public Plugin, public Admitter {
 public:
  LatencySloAdmitter(TypedName tn, AdmitterOptions o) : Plugin(std::move(tn)), o_(std::move(o)) {}
  const Admitter* AsAdmitter() const override { return this; }
  Params EffectiveParams() const override { return AdmitterTable().Effective(o_); }
  PluginInputs Consumes() const override {
    return {PluginInput::kLatencyPrediction, PluginInput::kKvCacheUsage, PluginInput::kRunningRequests};
  }

  // llm-d's Admit: only sheddable requests (priority < 0) with an SLO can be refused, and only
  // when some endpoint has a prediction, none meets both SLOs, none is idle (no running
  // request) and none is cold (KV cache under 2%: its predictions are not to be trusted).
  bool Admit(const SchedulingContext& ctx, Candidates candidates, std::string& why) const override {
    if (ctx.request->priority >= 0) return true;
    const LatencyState* st = Predictions(ctx, o_.prediction_producer);
    if (!st || (st->ttft_slo_ms <= 0 && st->tpot_slo_ms <= 0)) return true;
    bool predictions = false;
    for (const Endpoint* e : candidates) {
      if (e->metrics.kv_cache_usage.value_or(0) < 0.02) return true;   // cold
      if (e->metrics.running_requests.value_or(0) == 0) return true;  // idle
      if (const LatencyInfo* li = st->Find(ctx.IndexOf(e))) {
        predictions = true;
        if (li->valid()) return true;
      }
    }
    if (!predictions) return true;  // fail open
    why = absl::StrCat("request cannot be admitted: no valid endpoint available to serve the request (",
                       name(), ": sheddable, priority ", ctx.request->priority, "; none of ", candidates.size(),
                       " endpoints is predicted within");
    if (st->ttft_slo_ms > 0) absl::StrAppend(&why, " TTFT SLO ", Num(st->ttft_slo_ms), " ms");
    if (st->ttft_slo_ms > 0 && st->tpot_slo_ms > 0) absl::StrAppend(&why, " and");
    if (st->tpot_slo_ms > 0) absl::StrAppend(&why, " TPOT SLO ", Num(st->tpot_slo_ms), " ms");
    absl::StrAppend(&why, ", none idle, none cold)");
    return false;
  }

 private:
  AdmitterOptions o_;
};

}  // namespace

PluginOr CreatePredictedLatencyProducer(const std::string& name, const Params& params, const PluginContext& ctx) {
  EPP_ASSIGN_OR_RETURN(ProducerOptions o, ProducerTable().Read(params));
  const ProducerOptions defaults;
  // llm-d logs the same notice when either deprecated parameter differs from its default.
  if (ctx.warnings && (o.sampling_mean != defaults.sampling_mean || o.max_decode_samples != defaults.max_decode_samples))
    ctx.warnings->push_back(absl::StrCat("plugin '", name, "' (", std::string(kPredictedLatencyProducerType),
                                         "): samplingMean and maxDecodeTokenSamplesForPrediction are ignored, as in "
                                         "llm-d (mid-stream TPOT predictions were removed)"));
  latency::LatencyPredictorOptions po;
  po.clock = ctx.clock;
  EPP_ASSIGN_OR_RETURN(std::unique_ptr<latency::LatencyPredictor> predictor, latency::LatencyPredictor::Create(po));
  // Serving trains on the predictor's thread; a scheduler on another clock (replay's virtual
  // time, a test's manual clock) trains as that clock advances, so its runs repeat.
  const bool background = ctx.clock == &SteadyClock::Get();
  return std::make_unique<PredictedLatencyProducer>(TN(kPredictedLatencyProducerType, name), std::move(o),
                                                    std::move(predictor), background);
}

PluginOr CreateLatencyScorer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(ScorerOptions o, ScorerTable().Read(params));
  return std::make_unique<LatencyScorer>(TN(kLatencyScorerType, name), std::move(o));
}

PluginOr CreateSloHeadroomTierFilter(const std::string& name, const Params& params, const PluginContext& ctx) {
  EPP_ASSIGN_OR_RETURN(TierOptions o, TierTable().Read(params));
  return std::make_unique<SloHeadroomTierFilter>(TN(kSloHeadroomTierFilterType, name), std::move(o), ctx.rng);
}

PluginOr CreateLatencySloAdmitter(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(AdmitterOptions o, AdmitterTable().Read(params));
  return std::make_unique<LatencySloAdmitter>(TN(kLatencySloAdmitterType, name), std::move(o));
}

PluginSchema PredictedLatencyProducerSchema() { return ProducerTable().Schema(); }
PluginSchema LatencyScorerSchema() { return ScorerTable().Schema(); }
PluginSchema SloHeadroomTierFilterSchema() { return TierTable().Schema(); }
PluginSchema LatencySloAdmitterSchema() { return AdmitterTable().Schema(); }

}  // namespace epp::plugins
