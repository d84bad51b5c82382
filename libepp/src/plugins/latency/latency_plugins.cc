// llm-d Router's SLO-aware latency plugins (latency.h): their parameters, read and checked as
// llm-d reads them, and plugins that leave routing alone until the latency predictor exists.
//
// The filter and the scorer implement Filter and Scorer so that profiles may list them (llm-d's
// configs do): the filter keeps every candidate and the scorer writes 0 everywhere, which adds
// nothing to any endpoint's total, so neither changes a pick. The producer and the admitter have
// no request-path hook at all.
//
// Where epp checks more than llm-d (each marked below): llm-d decodes these parameters with a
// strict JSON decoder and validates only sloBufferFactor and epsilonExploreNeg; epp also holds
// the scorer to the ranges and choices llm-d's README documents, because outside them llm-d
// silently does something else (a mistyped strategy runs as "least", negative weights invert the
// blend), and rejects a negative contextTTL.
#include "plugins/latency/latency.h"

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "epp/scheduling.h"

namespace epp::plugins {
namespace {

// What every factory says once: the parameters are good, the behaviour is not there yet.
void WarnNotActive(const PluginContext& ctx, const std::string& name, std::string_view type, std::string_view effect,
                   std::string_view extra = {}) {
  if (!ctx.warnings) return;
  ctx.warnings->push_back(absl::StrCat("plugin '", name, "' (", std::string(type),
                                       "): parameters checked; SLO-aware latency prediction is not implemented yet "
                                       "in epp: this plugin does not affect routing (",
                                       std::string(effect), ")", std::string(extra)));
}

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
                   "multiplier applied to the SLOs when computing headroom (SLO - predicted)")
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

class LatencyScorer : public Plugin, public Scorer {
 public:
  LatencyScorer(TypedName tn, ScorerOptions o) : Plugin(std::move(tn)), o_(std::move(o)) {}
  const Scorer* AsScorer() const override { return this; }
  Params EffectiveParams() const override { return ScorerTable().Effective(o_); }
  ScorerCategory category() const override { return ScorerCategory::kBalance; }  // llm-d's category
  void Score(const SchedulingContext&, Candidates, std::span<double> scores) const override {
    for (double& s : scores) s = 0;
  }
  std::string Explain(const SchedulingContext&, const Endpoint&) const override {
    return "latency prediction not implemented yet: 0 for every endpoint";
  }

 private:
  ScorerOptions o_;
};

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

class SloHeadroomTierFilter : public Plugin, public Filter {
 public:
  SloHeadroomTierFilter(TypedName tn, TierOptions o) : Plugin(std::move(tn)), o_(std::move(o)) {}
  const Filter* AsFilter() const override { return this; }
  Params EffectiveParams() const override { return TierTable().Effective(o_); }
  std::vector<const Endpoint*> Apply(const SchedulingContext&, Candidates candidates) const override {
    return {candidates.begin(), candidates.end()};
  }
  std::string WhyRemoved(const SchedulingContext&, const Endpoint&) const override {
    return "never removed: latency prediction not implemented yet";
  }

 private:
  TierOptions o_;
};

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

}  // namespace

PluginOr CreatePredictedLatencyProducer(const std::string& name, const Params& params, const PluginContext& ctx) {
  EPP_ASSIGN_OR_RETURN(ProducerOptions o, ProducerTable().Read(params));
  const ProducerOptions defaults;
  // llm-d logs the same notice when either deprecated parameter differs from its default.
  const bool deprecated_set =
      o.sampling_mean != defaults.sampling_mean || o.max_decode_samples != defaults.max_decode_samples;
  WarnNotActive(ctx, name, kPredictedLatencyProducerType, "it predicts nothing",
                deprecated_set ? "; samplingMean and maxDecodeTokenSamplesForPrediction are ignored, as in llm-d"
                               : "");
  return std::make_unique<ParamsOnlyPlugin>(TN(kPredictedLatencyProducerType, name), ProducerTable().Effective(o));
}

PluginOr CreateLatencyScorer(const std::string& name, const Params& params, const PluginContext& ctx) {
  EPP_ASSIGN_OR_RETURN(ScorerOptions o, ScorerTable().Read(params));
  WarnNotActive(ctx, name, kLatencyScorerType, "it scores every endpoint 0");
  return std::make_unique<LatencyScorer>(TN(kLatencyScorerType, name), std::move(o));
}

PluginOr CreateSloHeadroomTierFilter(const std::string& name, const Params& params, const PluginContext& ctx) {
  EPP_ASSIGN_OR_RETURN(TierOptions o, TierTable().Read(params));
  WarnNotActive(ctx, name, kSloHeadroomTierFilterType, "it keeps every endpoint");
  return std::make_unique<SloHeadroomTierFilter>(TN(kSloHeadroomTierFilterType, name), std::move(o));
}

PluginOr CreateLatencySloAdmitter(const std::string& name, const Params& params, const PluginContext& ctx) {
  EPP_ASSIGN_OR_RETURN(AdmitterOptions o, AdmitterTable().Read(params));
  WarnNotActive(ctx, name, kLatencySloAdmitterType, "it admits every request");
  return std::make_unique<ParamsOnlyPlugin>(TN(kLatencySloAdmitterType, name), AdmitterTable().Effective(o));
}

PluginSchema PredictedLatencyProducerSchema() { return ProducerTable().Schema(); }
PluginSchema LatencyScorerSchema() { return ScorerTable().Schema(); }
PluginSchema SloHeadroomTierFilterSchema() { return TierTable().Schema(); }
PluginSchema LatencySloAdmitterSchema() { return AdmitterTable().Schema(); }

}  // namespace epp::plugins
