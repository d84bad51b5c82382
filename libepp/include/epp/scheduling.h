// The scheduling extension points and the per-request state they share.
//
// One scheduling cycle (see scheduler.h) runs, for one request: data producers (prefix hashing
// and matching), then for each profile its filters in order, its scorers (weighted sum), and its
// picker. Extensions receive a SchedulingContext: the request, every endpoint of the pool, the
// clock and RNG, and per-cycle data computed once (prefix match lengths, in-flight load), kept in
// arrays indexed by the endpoint's position in `endpoints` (IndexOf()).
//
// Contracts shared by all extension points:
//   - Filter, Score and Pick cannot fail: missing inputs degrade (score 0, keep all).
//   - They may be called concurrently from many threads; implementations must not mutate shared
//     state without synchronization.
//   - Randomness comes only from ctx.rng, time only from ctx.now_us, so a seeded cycle is
//     reproducible.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "epp/endpoint.h"
#include "epp/plugin.h"
#include "epp/request.h"
#include "epp/status.h"

namespace epp {

// Prefix-cache information for one cycle, filled by the approx-prefix-cache-producer.
struct PrefixState {
  bool computed = false;            // a producer ran for this cycle
  int block_size_tokens = 0;        // tokens per block (block_chars = tokens * kCharsPerToken)
  std::vector<uint64_t> hashes;     // the request's chained block hashes (capped)
  std::vector<int> match_blocks;    // per endpoint index: leading blocks the index says it holds
  std::string producer;             // name of the producer that filled this
};

// The request's token ids, when a token-producer ran (the precise prefix producer reads them;
// without one it estimates them itself).
struct TokenState {
  bool computed = false;
  std::vector<uint32_t> ids;
  // Where they came from: "estimate", "vllm" (the server rendered the request), "vllm-cache" (a
  // cached answer for the same request), "local" (epp's in-process tokenizer),
  // "estimate-fallback" (the server could not be asked or did not answer, or the local
  // tokenizer could not tokenize the request: estimated instead, see `note`).
  std::string source;
  std::string note;  // why a fallback happened ("POST http://...: timed out after 5000 ms")
};

// Values plugins publish about one request for the other plugins of its cycle (llm-d's request
// attribute store), keyed as llm-d serializes a data key: "<data type>/<producer name>", the
// producer part empty for keys any producer may fill ("agent-identity/",
// "SessionIDDataKey/session-id-producer"). Filled by request-header processors before the data
// producers run; few per request, so a vector.
struct RequestAttributes {
  std::vector<std::pair<std::string, std::string>> entries;
  // The value under `key`, or nullptr.
  const std::string* Find(std::string_view key) const {
    for (const auto& [k, v] : entries)
      if (k == key) return &v;
    return nullptr;
  }
  // Sets (or replaces) the value under `key`.
  void Set(std::string_view key, std::string value) {
    for (auto& [k, v] : entries)
      if (k == key) {
        v = std::move(value);
        return;
      }
    entries.emplace_back(std::string(key), std::move(value));
  }
};

// The key agent-identity publishes an agent's session under; the scheduler derives a request's
// fairness id from it when no header names one (llm-d's Director rule).
inline constexpr std::string_view kAgentIdentityAttribute = "agent-identity/";

// Encoder-cache matches for one cycle, filled by mm-embeddings-cache-producer: the request's
// distinct media items (InferenceRequest::media_items with repeats dropped) and, per endpoint
// index, how many of them the producer remembers that endpoint processing recently.
struct EncoderCacheState {
  bool computed = false;             // a producer ran and the request has media items
  std::vector<MediaItem> items;      // distinct by hash, first occurrence kept
  std::vector<int> matched;          // per endpoint index: items recently served there
  std::string producer;              // name of the producer that filled this
};

// Latency predictions for one cycle, filled by predicted-latency-producer (llm-d's
// LatencyPredictionInfo per endpoint): what latency-scorer, slo-headroom-tier-filter,
// latency-slo-admitter and prefix-cache-affinity-filter (ttftSource: latencyPredictor) read.
// Times in milliseconds, as llm-d keeps them. Headroom = SLO - predicted (negative: misses it);
// a request without a TTFT SLO has an SLO of 0, so every TTFT headroom is negative (llm-d's
// convention: the scorer then prefers the smallest predicted TTFT). TPOT is neutral (valid,
// headroom 0) outside streamingMode and on prefill endpoints.
struct LatencyInfo {
  bool has = false;  // the producer predicted for this endpoint
  double ttft_ms = 0;
  double tpot_ms = 0;
  double ttft_headroom_ms = 0;
  double tpot_headroom_ms = 0;
  bool ttft_valid = false;  // predicted TTFT < the TTFT SLO
  bool tpot_valid = false;  // predicted TPOT < the (buffered) TPOT SLO, or neutral
  bool from_prior = false;  // the pool-wide model answered (the endpoint has few samples)
  // The pool-wide model's predicted TTFT over this endpoint's, for the same request and load: > 1
  // for an endpoint faster than the pool's typical one (a mixed pool's faster GPU, or a less
  // loaded server), 1 without samples of its own. estimated-ttft-scorer scales its prefill rate by
  // it (speedSource: currentLoad).
  double relative_speed = 1;
  // The endpoint's GPU speed against the pool's, from its lightly loaded responses only (nothing
  // queued there when picked): their prefill cost per prompt token, so neither its backlog nor
  // the fixed part of a TTFT enters it (the latency predictor's light_speed). 1 until known.
  // estimated-ttft-scorer scales its prefill rate by it with speedSource: lightLoad.
  double light_speed = 1;
  // The endpoint's prefill rate in tokens per second from the same light responses (the
  // predictor's light_rate_tps); 0 until known. estimated-ttft-scorer's queues drain at it with
  // speedSource: lightLoad.
  double light_rate_tps = 0;
  // The rate the endpoint drained its prefill at on its recent responses, whatever their load
  // (the predictor's busy_rate_tps): the prefill work ahead of each and its own uncached tokens
  // over their TTFTs. 0 until known. estimated-ttft-scorer uses it for an endpoint that has not
  // been lightly loaded long enough to have a light_rate_tps.
  double busy_rate_tps = 0;
  // Requests the producer saw dispatched to this endpoint that have not ended (llm-d's
  // DispatchedRequestCount: 0 is an idle endpoint for the scorer and the admitter).
  int64_t dispatched = 0;
  // Uncached prompt tokens dispatched here that have not produced a first token (a feature).
  double prefill_tokens_in_flight = 0;
  bool valid() const { return ttft_valid && tpot_valid; }
};
struct LatencyState {
  bool computed = false;       // a producer ran for this cycle
  std::string producer;        // its name
  double ttft_slo_ms = 0;      // the request's SLOs (0: none), x-llm-d-slo-ttft-ms / x-slo-ttft-ms
  double tpot_slo_ms = 0;
  std::vector<LatencyInfo> info;  // per endpoint index; empty or has=false: no prediction
  const LatencyInfo* Find(size_t index) const {
    return index < info.size() && info[index].has ? &info[index] : nullptr;
  }
};

struct SchedulingContext {
  const InferenceRequest* request = nullptr;
  std::span<const Endpoint> endpoints;  // the whole pool; candidates point into it
  Rng* rng = nullptr;
  int64_t now_us = 0;
  // Per endpoint index: requests and estimated tokens the scheduler has in flight there.
  std::vector<int64_t> inflight_requests;
  std::vector<int64_t> inflight_tokens;
  PrefixState prefix;
  TokenState tokens;
  EncoderCacheState encoder_cache;
  LatencyState latency;
  // The endpoint an earlier profile of this cycle chose that the running profile's picks should be
  // close to (the decode pick while a disaggregated prefill profile runs; llm-d's "peer
  // endpoint"); nullptr when the profile handler names none. Topology affinity reads it.
  const Endpoint* peer = nullptr;
  // The recorded pick's id (PickResult::pick_id) while request observers run; 0 otherwise.
  uint64_t pick_id = 0;
  // What the request-header processors published about the request (session-id-producer,
  // agent-identity).
  RequestAttributes attributes;

  // e's predictions, or nullptr (no producer ran, or none for e).
  const LatencyInfo* Latency(const Endpoint* e) const { return latency.Find(IndexOf(e)); }
  // Position of `e` in `endpoints`. REQUIRES: e points into endpoints.
  size_t IndexOf(const Endpoint* e) const { return static_cast<size_t>(e - endpoints.data()); }
  int PrefixMatchBlocks(const Endpoint* e) const {
    const size_t i = IndexOf(e);
    return i < prefix.match_blocks.size() ? prefix.match_blocks[i] : 0;
  }
  int64_t InflightRequests(const Endpoint* e) const {
    const size_t i = IndexOf(e);
    return i < inflight_requests.size() ? inflight_requests[i] : 0;
  }
  int64_t InflightTokens(const Endpoint* e) const {
    const size_t i = IndexOf(e);
    return i < inflight_tokens.size() ? inflight_tokens[i] : 0;
  }
  // True when e's metrics were never scraped or are older than `staleness_us`.
  bool MetricsStale(const Endpoint& e, int64_t staleness_us) const {
    return epp::MetricsStale(e, now_us, staleness_us);
  }
};

using Candidates = std::span<const Endpoint* const>;

// Removes endpoints. Returns the kept ones in their original order (never reorders, never adds).
class Filter {
 public:
  virtual ~Filter() = default;
  virtual std::vector<const Endpoint*> Apply(const SchedulingContext& ctx, Candidates candidates) const = 0;
  // Why `e` would be removed (explain output); called only for removed endpoints.
  virtual std::string WhyRemoved(const SchedulingContext& ctx, const Endpoint& e) const = 0;
  // True for a filter that removes endpoints because they are busy (utilization, concurrency,
  // capacity), not because they cannot serve the request. When such a filter removes the last
  // candidate of the primary profile the pool is saturated rather than empty, and the cycle
  // answers 429 "rejected-saturated" (llm-d's answer whenever filters drain the candidates)
  // instead of epp's 503 "rejected-no-endpoints" for filters that rule endpoints out.
  virtual bool RemovesBusyEndpoints() const { return false; }
};

enum class ScorerCategory { kAffinity, kDistribution, kBalance };
std::string_view ScorerCategoryName(ScorerCategory category);

// Writes one score per candidate, index-aligned, nominally in [0, 1]; the profile clamps to
// [0, 1], multiplies by the configured weight and sums over scorers.
class Scorer {
 public:
  virtual ~Scorer() = default;
  virtual ScorerCategory category() const = 0;
  virtual void Score(const SchedulingContext& ctx, Candidates candidates, std::span<double> scores) const = 0;
  // A short human explanation of e's score (explain output), e.g. "12 of 40 blocks cached".
  virtual std::string Explain(const SchedulingContext& /*ctx*/, const Endpoint& /*e*/) const { return {}; }
};

struct ScoredEndpoint {
  const Endpoint* endpoint = nullptr;
  double score = 0;
};

// Chooses the target endpoints, primary first. Ties are broken with ctx.rng, never by order.
class Picker {
 public:
  virtual ~Picker() = default;
  virtual std::vector<const Endpoint*> Pick(const SchedulingContext& ctx, std::span<const ScoredEndpoint> scored) const = 0;
};

// One profile of a cycle as its handler sees it: run (with what it picked, or why it picked
// nothing) or skipped by the handler's decision.
struct ProfileRun {
  std::string profile;
  bool ran = false;                     // false: the handler decided not to run it
  std::vector<const Endpoint*> picked;  // primary first; empty when it failed or was skipped
  std::string error;                    // why it picked nothing (ran only)
  std::string reason;                   // the handler's reason for running or skipping it
  // The profile failed because a Filter::RemovesBusyEndpoints() filter removed the last candidate.
  bool saturated = false;
};

// One decision of a profile handler: profiles to run now, and profiles it decided not to run,
// each with its reason ("decode-first: decode runs first", "prefill: 24 uncached tokens >= 16").
struct ProfileStep {
  struct Entry {
    std::string profile;
    std::string reason;
    const Endpoint* peer = nullptr;  // SchedulingContext::peer while this profile runs
  };
  std::vector<Entry> run;
  std::vector<Entry> skip;
  bool empty() const { return run.empty() && skip.empty(); }
};

// What the handler makes of a cycle: the primary profile (its endpoints answer the request) and
// request headers for the upstream (x-prefiller-host-port for a disaggregated prefill).
struct ProfilesOutcome {
  std::string primary;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string reason;  // one line for explain ("prefill-decode"), may be empty
  // Non-zero: the answer names the primary endpoints' hosts at this port instead of their own
  // (llm-d's data-parallel sidecar listens there and forwards to the rank that
  // x-data-parallel-host-port names).
  int destination_port = 0;
};

// Decides which profiles run, in what order, and what the cycle's answer is (GIE / llm-d
// semantics: PickProfiles is called until it returns an empty step, then ProcessResults).
class ProfileHandler {
 public:
  virtual ~ProfileHandler() = default;
  // ProcessResults' errors: kInvalidArgument when the request is at fault (answered 400, e.g. a
  // header naming no profile), anything else when no endpoint could serve it (503).
  // The next profiles given every profile run or skipped so far (`results`, in order); a profile
  // already in `results` is not run again. An empty step ends the cycle.
  virtual ProfileStep PickProfiles(const SchedulingContext& ctx, std::span<const std::string> profiles,
                                   std::span<const ProfileRun> results) const = 0;
  virtual absl::StatusOr<ProfilesOutcome> ProcessResults(const SchedulingContext& ctx,
                                                         std::span<const ProfileRun> results) const = 0;
  // Request headers this handler sets. The gateway's copies are always removed from the upstream
  // request (a client cannot name its own prefill server); ProcessResults' headers are set.
  virtual std::vector<std::string> OwnedHeaders() const { return {}; }
};

// Pool saturation in [0, +inf): >= 1.0 means saturated (sheddable requests are rejected with 429).
class SaturationDetector {
 public:
  virtual ~SaturationDetector() = default;
  virtual double Saturation(const SchedulingContext& ctx, Candidates candidates) const = 0;
  // A one-line account of the figure (explain output).
  virtual std::string ExplainSaturation(const SchedulingContext& ctx, Candidates candidates) const = 0;
};

// Computes per-cycle data before the profiles run (prefix hashing and matching).
class DataProducer {
 public:
  virtual ~DataProducer() = default;
  virtual void Prepare(SchedulingContext& ctx, Candidates candidates) const = 0;
  // True for a producer that fills SchedulingContext::prefix (approx-, precise- and
  // burst-prefix-cache-producer): a scheduler holds at most one, and runs it before the producers
  // that answer false (those fill other per-cycle data, e.g. encoder_cache, and may read prefix).
  virtual bool FillsPrefix() const { return true; }
};

// Narrows the candidates once per request, after the gateway's subset hint and before the data
// producers, admission and every profile (llm-d's Screener). What a screener removes no profile
// sees, so a constraint the whole cycle must keep (one rollout revision for both the prefill and
// the decode pick) cannot be undone by a later filter, scorer or picker. Every screener gets the
// same candidates; the cycle keeps those that all of them keep, in candidate order. None kept:
// 503 "rejected-no-endpoints". Returns a subset of `candidates` (never adds).
class Screener {
 public:
  virtual ~Screener() = default;
  virtual std::vector<const Endpoint*> Screen(const SchedulingContext& ctx, Candidates candidates) const = 0;
};

// Headers for the upstream request, set after a successful pick (llm-d's PreRequest plugins that
// write request headers, e.g. p2p-source-producer's x-kv-cache-source-host-port). Called in config
// order with what each profile chose. The gateway's copies of OwnedHeaders() are always removed
// from the upstream request, whether or not the source sets them (a client cannot set its own).
class RequestHeaderSource {
 public:
  virtual ~RequestHeaderSource() = default;
  virtual void RequestHeaders(const SchedulingContext& ctx, std::span<const ProfileRun> runs,
                              std::string_view primary_profile,
                              std::vector<std::pair<std::string, std::string>>& out) const = 0;
  virtual std::vector<std::string> OwnedHeaders() const { return {}; }
};

// One sample of a metric a plugin exports on eppctl serve's /metrics (llm-d's plugin metrics,
// e.g. llm_d_epp_encoder_cache_hits_total). Samples of one name from several plugins form one
// family (the first sample's type and help are used).
struct PluginMetric {
  std::string name;  // the full exposition name, e.g. "llm_d_epp_encoder_cache_queries_total"
  std::string type;  // "counter", "gauge" or "histogram"
  std::string help;
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;  // counter and gauge
  // histogram: upper bounds (`le`; +Inf implicit), cumulative counts aligned with them, the
  // number of observations (+Inf) and their sum.
  std::vector<double> bounds;
  std::vector<uint64_t> cumulative;
  uint64_t count = 0;
  double sum = 0;
};

// Implemented by plugins with metrics of their own; called at every /metrics scrape.
class MetricsSource {
 public:
  virtual ~MetricsSource() = default;
  virtual void CollectMetrics(std::vector<PluginMetric>& out) const = 0;
};

// Learns from decisions: called after a successful, recorded pick with the primary endpoint (the
// prefix index records the request's blocks there, the cache-aware scorer its prompt).
class RequestObserver {
 public:
  virtual ~RequestObserver() = default;
  virtual void PreRequest(const SchedulingContext& ctx, const Endpoint& picked) const = 0;
};

// Learns from the response path (Scheduler::ObserveFirstToken): called when the first token of
// a recorded pick reached the gateway (a streamed response's first body chunk; a replay's
// first-token event), with the pick's id, the endpoint that answered and the time on the
// scheduler's clock. At most once per pick; never for picks whose first token was not seen.
class FirstTokenObserver {
 public:
  virtual ~FirstTokenObserver() = default;
  virtual void FirstToken(uint64_t pick_id, std::string_view endpoint, int64_t at_us) const = 0;
};

// Learns from the end of a response (Scheduler::ObserveCompletion): called once when the response
// of a recorded pick ended (its last body chunk, or an end of stream), with the pick's id, the
// endpoint, the time on the scheduler's clock, the usage the server reported (zeros when none)
// and the number of response body chunks seen (a streamed response's token count when it sent
// no usage). Never for picks that were not recorded.
struct ResponseCompletion {
  int64_t at_us = 0;
  ResponseUsage usage;
  int64_t chunks = 0;
  bool streamed = false;  // the response was a stream (text/event-stream or stream: true)
};
class CompletionObserver {
 public:
  virtual ~CompletionObserver() = default;
  virtual void Completed(uint64_t pick_id, std::string_view endpoint, const ResponseCompletion& completion) const = 0;
};

// Headers for the client's response (the ext_proc response-headers phase), e.g. llm-d's session
// token. Called at the end of every successful pick with what each profile chose.
class ResponseHeaderSource {
 public:
  virtual ~ResponseHeaderSource() = default;
  virtual void ResponseHeaders(const SchedulingContext& ctx, std::span<const ProfileRun> runs,
                               std::string_view primary_profile,
                               std::vector<std::pair<std::string, std::string>>& out) const = 0;
};

// Dynamic metadata for the end of the response (llm-d's request-attribute-reporter): called once
// per response with its token usage (zeros when it had none).
struct ResponseMetadataEntry {
  std::string ns;   // dynamic-metadata namespace ("envoy.lb")
  std::string key;  // "x-gateway-inference-request-cost"
  double value = 0;
};
class ResponseMetadataSource {
 public:
  virtual ~ResponseMetadataSource() = default;
  virtual void ResponseMetadata(const ResponseUsage& usage, std::vector<ResponseMetadataEntry>& out) const = 0;
};

// Reads the request as it arrives, before anything else of the cycle (llm-d's
// RequestHeaderProcessor, run after the request is assembled and before admission): publishes
// request attributes from its headers. Pure: Scheduler::PrepareRequest (before flow control) and
// Pick both run it on the same request and must get the same attributes.
class RequestHeaderProcessor {
 public:
  virtual ~RequestHeaderProcessor() = default;
  virtual void RequestHeader(const InferenceRequest& request, RequestAttributes& attributes) const = 0;
};

// Admission before scheduling (llm-d's Admitter, e.g. probabilistic-admitter): runs after the
// data producers and the saturation check, in config order; a rejection answers 429 with `why`.
class Admitter {
 public:
  virtual ~Admitter() = default;
  virtual bool Admit(const SchedulingContext& ctx, Candidates candidates, std::string& why) const = 0;
};

}  // namespace epp
