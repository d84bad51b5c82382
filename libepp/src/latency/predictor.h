// Private: the in-process latency predictor behind SLO-aware routing (issue #38, docs/latency.md).
//
// Per-endpoint models of TTFT (time to first token) and TPOT (time per output token), trained
// online from the timing the response path observes, and asked at pick time for every candidate.
// llm-d Router gets the same from its llm-d-latency-predictor sidecar (XGBoost / LightGBM over
// HTTP, or a Bayesian Ridge whose coefficients the router caches and evaluates itself); here the
// model lives in libepp, with no sidecar and no HTTP hop.
//
// The model, and why (docs/latency.md has the measurements):
//  - One linear model per target over a small derived design (kColumns, Design()): the
//    uncached prompt tokens, the cached ones, an attention term (uncached x prompt / 1000), the
//    queue, the running batch, KV use, the EPP's in-flight requests and prefill tokens, the
//    multimodal encoder work. The physics of a continuous-batching server is close to additive in
//    these: prefill time grows with the uncached tokens (plus attention over the whole prompt),
//    waiting grows with the work queued ahead, a decode step with the batch. A linear model
//    extrapolates along those lines; a tree ensemble (the reference's XGBoost) answers a load it
//    never saw with its last leaf, which is wrong exactly when an SLO decision matters (overload).
//  - Ridge regression by closed-form normal equations on standardized columns: no learning rate,
//    no iterations, no randomness in the fit, O(n d^2) to train and O(d) to predict (d = 10), and
//    stable on small windows. The reference's in-process model is also a (Bayesian) ridge.
//  - Squared *relative* error (each sample weighted 1/y^2): SLO headroom is a ratio question
//    (100 ms off matters at a 200 ms TTFT, not at 10 s), and one 30 s stall cannot pull the fit
//    for 100 ms requests (the robustness a Huber loss would buy, without its iterations).
//  - A pool-wide model fitted on every endpoint's samples is the prior: an endpoint with fewer
//    than min_endpoint_samples is predicted by it scaled to the endpoint's speed (from_prior: the
//    geometric mean of observed/predicted over its samples, shrunk toward 1), one without samples
//    by the pool model itself, and an endpoint's own fit is
//    shrunk toward it scaled to the endpoint's speed (the one factor s with y ~ s * pool(x) that
//    fits the endpoint's samples best; then a Gaussian prior worth prior_strength samples on the
//    standardized slopes around s times the pool's; the intercept is free). A slower GPU is
//    mostly a scale factor, learnt from a few samples; its own slopes correct the shape as
//    evidence arrives.
//  - An upper estimate for SLO checks (the reference defaults to a 0.9-quantile objective): the
//    `quantile` of observed/predicted over the model's training window, times the prediction
//    (a split-conformal style band, no iterative quantile regression).
//
// Bounds: at most max_endpoints endpoints (a new one evicts the least recently observed), at
// most samples_per_endpoint samples each (a ring; the oldest goes), endpoints with no sample for
// idle_evict_us are dropped at the next training round; the pool model trains on at most
// max_pool_samples of them (a seeded sample). Memory: max_endpoints x (samples_per_endpoint +
// kLightSamplesPerEndpoint) x sizeof(Sample) (44 bytes) plus one snapshot (~260 bytes and the name
// per endpoint).
//
// Threads: every method is thread-safe. Predict reads the published immutable LatencySnapshot
// through a per-thread cached reference: one atomic load of the published version, no lock and
// no reference count; a thread takes the predictor's mutex once per new snapshot to refresh its
// cache (std::atomic<std::shared_ptr> would do, but libstdc++ 12 builds it on a lock bit TSan
// does not understand). A thread's cache keeps the last snapshot it read alive until its next
// Predict. snapshot() hands out a shared_ptr to hold across a cycle. Observe takes two short
// mutexes (the endpoint table, then the endpoint's ring) and does no fitting. TrainNow fits off
// the request path (one training round at a time) and publishes a new snapshot; Start() runs it
// on a background thread every train_interval_ms. Deterministic: the same samples, observed in
// the same order, with the same seed and clock, give the same models.
#pragma once

#include <array>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "epp/plugin.h"

namespace epp::latency {

// What is known about one (request, endpoint) pair when the request is picked: the reference's
// feature set (llm-d's latencypredictorclient PredictionRequest / TrainingEntry). Observe must be
// given the features the pick saw (captured at dispatch), Predict the current ones. Counts are
// >= 0; a feature that is unknown is 0 (its column then carries no information).
struct LatencyFeatures {
  // EndpointMetrics::kv_cache_usage, a fraction in [0, 1] (reference kv_cache_percentage).
  double kv_cache_usage = 0;
  // EndpointMetrics::waiting_queue_size (reference num_request_waiting).
  double waiting_requests = 0;
  // EndpointMetrics::running_requests (reference num_request_running, which the reference
  // replaces with its in-flight count when it tracks one; both are columns here).
  double running_requests = 0;
  // The request's prompt tokens, InferenceRequest::prompt_tokens (reference input_token_length).
  double input_tokens = 0;
  // Prompt tokens this endpoint holds in its prefix cache: SchedulingContext::PrefixMatchBlocks
  // x the block size (reference prefix_cache_score, the same as a fraction of the prompt).
  // Clamped to input_tokens.
  double prefix_hit_tokens = 0;
  // Requests the EPP dispatched to this endpoint that have not finished:
  // SchedulingContext::InflightRequests (the reference's inflight-load-producer Requests).
  double inflight_requests = 0;
  // Uncached prompt tokens of requests dispatched to this endpoint that have not produced a
  // first token (reference prefill_tokens_in_flight, the inflight-load-producer's Tokens). Not
  // SchedulingContext::InflightTokens, which counts prompt plus estimated output until the end.
  double inflight_prefill_tokens = 0;
  // Multimodal requests (reference encoder_input_size / encoder_matched_size, with
  // useEncoderCacheFeatures): the request's encoder input size and the part this endpoint's
  // encoder cache likely holds (EncoderCacheState). 0 for text.
  double encoder_input_size = 0;
  double encoder_matched_size = 0;
};

// The model's columns, derived from the features (LinearFit::weights order): uncached prompt
// tokens (input - hit), cached ones, attention (uncached x input / 1000: each new token attends
// to the whole prompt), then the load features as given, then the encoder input split into the
// part not in the encoder cache and the part in it.
inline constexpr size_t kColumns = 10;
inline constexpr std::array<std::string_view, kColumns> kColumnNames = {
    "uncached_tokens", "prefix_hit_tokens", "attention_ktokens", "waiting_requests",
    "running_requests", "kv_cache_usage", "inflight_requests", "inflight_prefill_tokens",
    "encoder_uncached", "encoder_matched"};
using DesignRow = std::array<double, kColumns>;
DesignRow Design(const LatencyFeatures& features);

// A prediction for one endpoint. Times in seconds; NaN when there is no model for the target
// yet (no TTFT sample anywhere; no TPOT sample for tpot, e.g. non-streaming traffic).
struct LatencyPrediction {
  double ttft_s = std::numeric_limits<double>::quiet_NaN();
  double tpot_s = std::numeric_limits<double>::quiet_NaN();
  // Upper estimates: the prediction times the options' quantile of observed/predicted.
  double ttft_upper_s = std::numeric_limits<double>::quiet_NaN();
  double tpot_upper_s = std::numeric_limits<double>::quiet_NaN();
  // The pool-wide model's TTFT for the same features (NaN without one): ttft_s / pool_ttft_s is
  // how much slower than the pool's typical endpoint this one is predicted to be.
  double pool_ttft_s = std::numeric_limits<double>::quiet_NaN();
  // The endpoint's speed relative to the pool from its lightly loaded samples (see
  // EndpointModel::light_speed); NaN when not known.
  double light_speed = std::numeric_limits<double>::quiet_NaN();
  // Its prefill rate in tokens per second from the same samples (EndpointModel::light_rate_tps).
  double light_rate_tps = std::numeric_limits<double>::quiet_NaN();
  // The rate it drained prefill at on its recent responses (EndpointModel::busy_rate_tps).
  double busy_rate_tps = std::numeric_limits<double>::quiet_NaN();
  int64_t samples = 0;      // TTFT samples behind the model that answered
  bool from_prior = false;  // the pool-wide model answered (the endpoint has too few samples)
  bool valid() const { return std::isfinite(ttft_s); }
};

// One fitted linear model, in raw units: y = intercept + sum(weights[j] * column j), floored.
struct LinearFit {
  double intercept = 0;
  DesignRow weights{};
  double floor_s = 0;       // predictions below are raised to it (half the fastest sample)
  double upper_scale = 1;   // quantile of observed/predicted in the training window
  int64_t samples = 0;      // 0: no model
  double Eval(const DesignRow& x) const;
};

struct EndpointModel {
  LinearFit ttft, tpot;
  bool from_prior = false;
  // How fast this endpoint is against the pool's typical one (> 1: faster), from its lightly
  // loaded TTFT samples only: those taken with no request waiting in its queue and no prefill the
  // EPP had dispatched there still pending (IsLightlyLoaded). Their time is the server's own
  // work, not queueing, so the ratio is the GPU's, where a whole-fit ratio at the current load
  // also carries each server's backlog (and reads a busy fast server as slow). The model
  // (FitLightSpeeds in predictor.cc): TTFT = b * (c + uncached tokens + g * running requests),
  // with c and g shared by the pool and b per endpoint; light_speed is the pool's geometric mean
  // b over the endpoint's, light_rate_tps is 1 / b. The last kLightSamplesPerEndpoint light
  // samples are kept apart from the training ring, so a saturated server (which adds none) keeps
  // what they said. NaN until an endpoint has kMinLightSamples of them.
  double light_speed = std::numeric_limits<double>::quiet_NaN();
  double light_rate_tps = std::numeric_limits<double>::quiet_NaN();
  // The prefill rate the endpoint drained at on its last kBusySamples TTFT samples, whatever their
  // load: the sum of each one's work (the prefill the EPP had dispatched there still pending at
  // its pick, plus its own uncached tokens) over the sum of their TTFTs (a ratio of sums, so a
  // few long waits weigh by their length). Under a FIFO prefill queue each TTFT is that work over
  // the rate plus a step, so this is the rate the server actually gets through the queue the EPP
  // sees, decode interference and batch-slot waits included: lower than light_rate_tps on a busy
  // server, and measurable on one that is never lightly loaded. NaN until kMinLightSamples.
  double busy_rate_tps = std::numeric_limits<double>::quiet_NaN();
};

// A light sample: nothing waiting in the endpoint's queue and no prefill the EPP dispatched there
// still pending when the request was picked.
bool IsLightlyLoaded(const LatencyFeatures& features);
// Light TTFT samples an endpoint needs for a light_speed, and how many it keeps.
inline constexpr size_t kMinLightSamples = 4;
inline constexpr size_t kLightSamplesPerEndpoint = 256;
// The recent TTFT samples EndpointModel::busy_rate_tps is taken over.
inline constexpr size_t kBusySamples = 64;

struct LatencyPredictorOptions {
  size_t max_endpoints = 256;
  size_t samples_per_endpoint = 512;
  size_t min_endpoint_samples = 32;   // fewer TTFT samples: the pool model answers
  size_t max_pool_samples = 8192;     // the pool model's training set, sampled across endpoints
  double prior_strength = 16;         // the pool model's weight in an endpoint fit, in samples
  double ridge_lambda = 1.0;          // the pool fit's penalty on standardized slopes
  double quantile = 0.9;              // of observed/predicted: the upper estimates, in (0, 1)
  int64_t idle_evict_us = 600'000'000;  // no Observe for this long: dropped at the next round
  int64_t train_interval_ms = 1000;   // Start()'s period
  uint64_t seed = 0;                  // the pool sample
  Clock* clock = &SteadyClock::Get();  // for idleness; not owned
  // kInvalidArgument naming the first bad field.
  absl::Status Validate() const;
};

// An immutable set of models: what Predict reads. Cheap to hold across a scheduling cycle (one
// snapshot for every candidate).
class LatencySnapshot {
 public:
  LatencyPrediction Predict(std::string_view endpoint, const LatencyFeatures& features) const;
  // The endpoint's model: its own, or (with fewer than min_endpoint_samples TTFT samples) the pool
  // model scaled to its speed (from_prior); nullptr for an endpoint without samples.
  const EndpointModel* Find(std::string_view endpoint) const;
  const EndpointModel& pool() const { return pool_; }
  size_t endpoints() const { return models_.size(); }
  uint64_t version() const { return version_; }

 private:
  friend class LatencyPredictor;
  absl::flat_hash_map<std::string, EndpointModel> models_;
  EndpointModel pool_;
  uint64_t version_ = 0;
};

struct TrainStats {
  size_t endpoints = 0;          // endpoints with samples after eviction
  size_t endpoint_models = 0;    // of which have their own model
  size_t evicted = 0;            // idle endpoints dropped this round
  size_t samples = 0;            // samples held (TTFT) across endpoints
  size_t pool_samples = 0;       // the pool model's training set
  bool published = false;        // a new snapshot was published (false: nothing new)
};

class LatencyPredictor {
 public:
  static absl::StatusOr<std::unique_ptr<LatencyPredictor>> Create(const LatencyPredictorOptions& options);
  ~LatencyPredictor();  // stops the training thread
  LatencyPredictor(const LatencyPredictor&) = delete;
  LatencyPredictor& operator=(const LatencyPredictor&) = delete;

  // Queues a training sample: the features the pick saw, the observed TTFT and TPOT in seconds
  // (tpot NaN, or <= 0, when unknown: a TTFT-only sample). False, and nothing queued, when the
  // TTFT is not a positive finite number or a feature is negative or not finite.
  bool Observe(std::string_view endpoint, const LatencyFeatures& features, double ttft_s, double tpot_s);
  // Queues a TPOT-only sample (the end of a response whose first token was observed on its own,
  // as the reference trains: TTFT at the first token, TPOT at the end). False, and nothing
  // queued, when the TPOT is not a positive finite number or a feature is unusable.
  bool ObserveTpot(std::string_view endpoint, const LatencyFeatures& features, double tpot_s);
  // Drops an endpoint's samples (it left the pool); its model goes at the next training round.
  void Forget(std::string_view endpoint);

  // One training round now, on the calling thread: evicts idle endpoints, refits the pool model
  // and every endpoint's, publishes a snapshot. Skipped (published false) when nothing was
  // observed or forgotten since the last round.
  TrainStats TrainNow();
  // Runs TrainNow every train_interval_ms on a background thread until Stop(). Idempotent.
  void Start();
  void Stop();

  // The published models (never null; empty before the first round), to hold across a
  // scheduling cycle.
  std::shared_ptr<const LatencySnapshot> snapshot() const;
  // Predict on the published models: no lock and no reference count (see Current()).
  LatencyPrediction Predict(std::string_view endpoint, const LatencyFeatures& features) const {
    return Current().Predict(endpoint, features);
  }

  const LatencyPredictorOptions& options() const { return options_; }
  // Endpoints holding samples now.
  size_t endpoint_count() const;
  // Samples held for one endpoint (0 when unknown).
  size_t sample_count(std::string_view endpoint) const;

  struct Store;  // one endpoint's ring

 private:
  explicit LatencyPredictor(const LatencyPredictorOptions& options);
  bool Add(std::string_view endpoint, const LatencyFeatures& features, double ttft_s, double tpot_s);
  void Loop();
  void Publish(std::shared_ptr<const LatencySnapshot> snapshot);
  // The published snapshot through this thread's cached reference to it: one atomic load of the
  // published version; the mutex only when a new snapshot was published since this thread last
  // looked (once per training round per thread). The reference stays valid until this thread's
  // next call.
  const LatencySnapshot& Current() const;

  const LatencyPredictorOptions options_;
  mutable std::mutex table_mu_;  // guards stores_
  absl::flat_hash_map<std::string, std::shared_ptr<Store>> stores_;
  std::atomic<uint64_t> changes_{0};  // Observe and Forget calls; a round with none is skipped
  std::mutex train_mu_;               // one training round at a time
  uint64_t trained_changes_ = 0;      // changes_ at the last round (under train_mu_)
  uint64_t rounds_ = 0;               // under train_mu_
  const uint64_t id_;                        // unique per predictor: the thread caches' key
  mutable std::mutex snapshot_mu_;           // guards snapshot_
  std::shared_ptr<const LatencySnapshot> snapshot_;
  std::atomic<uint64_t> published_{0};       // snapshot_'s version

  std::mutex thread_mu_;
  std::condition_variable thread_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace epp::latency
