// Scheduler: one scheduling cycle per request, the same code for `eppctl explain`, `eppctl pick`,
// `eppctl serve`, replay and pyepp.
//
// Pick(request, endpoints) runs, in GIE's order:
//   1. candidates: the endpoints, narrowed by the gateway's subset hint when one is given
//      (entries "ip:port" match exactly, a bare "ip" matches every port); none left -> 503;
//   1b. screeners (Screener, e.g. disaggregatedset-rollout-screener) narrow the candidates for the
//      whole cycle; none left -> 503;
//   2. data producers (prefix hashing and index lookup);
//   3. admission: a sheddable request (priority < 0) is rejected with 429 when the saturation
//      detector reports saturation >= 1.0 over the candidates;
//   4. profiles chosen by the profile handler; per profile: filters in order (all removed ->
//      the profile fails), score = sum over scorers of weight * clamp(score, 0, 1), picker;
//   5. the primary profile's endpoints are the answer (primary first, then fallbacks); a failed
//      primary profile -> 503 "no eligible endpoint";
//   6. when `record` is set: request observers learn the decision (prefix index update) and the
//      request's load estimate is added to the primary endpoint's in-flight counters until
//      Release().
// With `trace` set the result carries every filter's kept/removed lists with reasons and every
// scorer's raw, weighted and explained score per endpoint: the data behind `eppctl explain`.
//
// Every plugin call in Pick is timed (steady clock read at each call boundary, adjacent calls
// sharing a reading; about 0.4 us per pick, docs/benchmarks.md) into per plugin and extension
// point histograms, read with PluginTimings(); the whole Pick into CycleTiming(). This is
// what `eppctl serve` exports as GIE's inference_extension_plugin_duration_seconds and
// inference_extension_scheduler_e2e_duration_seconds.
//
// Thread-safety: Pick and Release may be called concurrently. The endpoints span must stay
// valid and unchanged during a Pick. PluginTimings() and CycleTiming() may be called at any time,
// concurrently with picks.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "epp/endpoint.h"
#include "epp/metrics.h"
#include "epp/plugin.h"
#include "epp/request.h"
#include "epp/scheduling.h"
#include "epp/status.h"

namespace epp {

struct FilterTrace {
  std::string plugin;  // plugin name
  std::string type;
  std::vector<std::string> kept;
  struct Removed {
    std::string endpoint;
    std::string reason;
  };
  std::vector<Removed> removed;
};

struct ScorerTrace {
  std::string plugin;
  std::string type;
  double raw = 0;       // clamped to [0, 1]
  double weight = 0;
  double weighted = 0;  // raw * weight
  std::string detail;   // the scorer's own explanation, may be empty
};

struct EndpointScoreTrace {
  std::string endpoint;
  double total = 0;
  std::vector<ScorerTrace> scorers;  // in profile order
};

struct ProfileTrace {
  std::string name;
  bool ran = true;     // false: the handler skipped it (only `reason` is set then)
  std::string reason;  // the handler's reason for running or skipping it
  std::vector<FilterTrace> filters;
  std::vector<EndpointScoreTrace> scores;  // sorted by total, highest first
  std::string picker;                      // picker plugin name
  std::vector<std::string> picked;
  std::string error;  // non-empty when the profile produced no endpoint
};

// What one profile of the cycle did (always filled, unlike the trace).
struct ProfilePick {
  std::string profile;
  bool ran = false;                    // false: skipped by the profile handler
  std::vector<std::string> endpoints;  // what it picked, primary first
  std::string reason;                  // the handler's reason for running or skipping it
  std::string error;                   // why it picked nothing
};

// Why a request was answered before reaching a model server: llm-d's values of the response
// header x-llm-d-request-dropped-reason (PickResult::dropped_reason).
inline constexpr std::string_view kDroppedSaturated = "rejected-saturated";      // 429: shed, or busy filters left none
inline constexpr std::string_view kDroppedNoEndpoints = "rejected-no-endpoints";  // 503: nothing can serve it

struct PickResult {
  int status = 200;  // 200 picked, 400 bad request, 429 shed, 503 no eligible endpoint
  // With 429 and 503: kDroppedSaturated or kDroppedNoEndpoints (empty otherwise); ext_proc sends it
  // as x-llm-d-request-dropped-reason.
  std::string dropped_reason;
  std::vector<std::string> endpoints;  // primary first, then fallbacks; empty unless 200
  std::string reason;                  // why, in one line (always set)
  std::string primary_profile;
  // Every profile the handler ran or skipped, in order; with one profile, just that one.
  std::vector<ProfilePick> profile_picks;
  // Request headers for the upstream request besides x-gateway-destination-endpoint, e.g.
  // x-prefiller-host-port (ext_proc sets them in the request-headers response).
  std::vector<std::pair<std::string, std::string>> headers;
  // Headers for the client's response (ResponseHeaderSource: llm-d's x-session-token); ext_proc
  // sets them in the response-headers phase.
  std::vector<std::pair<std::string, std::string>> response_headers;
  std::string profiles_reason;         // the handler's account of the cycle ("prefill-decode"), may be empty
  // With PickOptions::scores: every candidate the primary profile scored (after its filters) with
  // its total, the weighted sum (not normalised, so it may exceed 1), in scoring order.
  std::vector<std::pair<std::string, double>> primary_scores;
  double saturation = 0;               // detector figure over the candidates
  std::string saturation_detail;
  int64_t load_tokens = 0;             // in-flight token estimate recorded for this request
  // Unique per recorded pick in this process (0 when not recorded): ObserveFirstToken's key.
  uint64_t pick_id = 0;
  // predicted-latency-producer's prediction for the primary endpoint, in milliseconds (-1: none),
  // and the request's SLOs it read (0: none).
  double predicted_ttft_ms = -1;
  double predicted_tpot_ms = -1;
  double slo_ttft_ms = 0;
  double slo_tpot_ms = 0;
  // The endpoint the load was recorded on, when it differs from endpoints.front() (a profile
  // handler's destination_port rewrite); Release() uses it.
  std::string load_endpoint;
  int candidates = 0;                  // endpoints after the subset hint (and the unreachable ones)
  // Endpoints passed over because their last scrape was refused (Endpoint::unreachable).
  std::vector<std::string> unreachable;
  // Prefix view of the request (from the producer): block size and blocks hashed.
  int prefix_block_size_tokens = 0;
  int prefix_blocks = 0;
  int prefix_match_blocks = 0;         // blocks the index said the primary endpoint held
  // The request's tokens as a token-producer made them (TokenState): count, source, fallback
  // note; tokens = -1 and the rest empty without a token-producer.
  int64_t tokens = -1;
  std::string tokens_source;
  std::string tokens_note;
  std::vector<ProfileTrace> profiles;  // only with PickOptions::trace
  // Set by ext_proc when an InferenceModelRewrite rule chose the model: "NS/NAME: asked -> sent".
  std::string model_rewrite;
  // The flow-control tenant the cycle saw: the request's fairness_id, else what agent-identity
  // published (kAgentIdentityAttribute); empty when neither names one (flow control's default).
  std::string fairness_id;

  const std::string* primary() const { return endpoints.empty() ? nullptr : &endpoints.front(); }
  // The x-gateway-destination-endpoint value: endpoints joined with ','.
  std::string DestinationValue() const;
  // A result for a request that did not parse (status 400, reason = the parse error).
  static PickResult BadRequest(const absl::Status& parse_error);
};

// What a traced pick records (PickOptions::spans): the raw material of the OpenTelemetry spans
// epp/runtime/tracing.h exports.
// One attribute value: OTLP's AnyValue scalars and arrays of strings or doubles.
using SpanValue = std::variant<std::string, int64_t, double, bool, std::vector<std::string>, std::vector<double>>;
// Keys are string literals (static storage): a span outlives the pick, and the keys cost no
// allocation on the request path.
using SpanAttributes = std::vector<std::pair<std::string_view, SpanValue>>;

// One step of a cycle, on the steady clock; `parent` indexes the same vector (-1: the cycle's
// own parent, the caller's span).
struct CycleSpan {
  // A literal, or text the scheduler owns ("llm_d.epp.scorer.<type>", made once per plugin):
  // valid while the scheduler lives; Tracer::AppendCycleSpans copies it.
  std::string_view name;
  int parent = -1;
  int64_t start_ns = 0;  // std::chrono::steady_clock nanoseconds
  int64_t end_ns = 0;
  SpanAttributes attributes;
  bool error = false;
  std::string status_message;
};

struct PickOptions {
  // The gateway's subset hint; nullopt = no hint (every endpoint is a candidate).
  std::optional<std::vector<std::string>> subset;
  bool trace = false;   // fill PickResult::profiles
  bool record = true;   // update the prefix index and in-flight load (false: a pure what-if)
  bool scores = false;  // fill PickResult::primary_scores (llm-d's --emit-endpoint-scores)
  // When set (a sampled request under --tracing): the cycle appends a span for itself, each data
  // producer and admitter, each profile, its filter chain and every filter, its scorer chain and
  // every scorer (weight, max/avg score, the best few endpoints) and its picker. Costs a few
  // microseconds per traced pick; nothing when null.
  std::vector<CycleSpan>* spans = nullptr;
};

// Upper bounds (seconds, `le`) of the timing histograms' buckets, shared by every histogram of
// PluginTimings() and CycleTiming(); the implicit last bucket is +Inf. GIE's buckets (100 us to
// 100 ms) preceded by finer ones, since most plugin calls take 1-50 us.
inline constexpr std::array<double, 16> kTimingBucketBoundsSeconds = {
    1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 1e-1};

// A latency histogram since the scheduler was built, as Prometheus exposes one.
struct DurationHistogram {
  uint64_t count = 0;      // observations (= the +Inf bucket)
  double sum_seconds = 0;  // their total
  // Cumulative counts aligned with kTimingBucketBoundsSeconds: bucket_counts[i] observations took
  // at most kTimingBucketBoundsSeconds[i] seconds. Non-decreasing, each <= count.
  std::vector<uint64_t> bucket_counts;
};

// Time spent in one plugin instance at one extension point (a plugin that implements two, such as
// utilization-detector as filter and as saturation detector, has one entry per extension point).
struct PluginTiming {
  // GIE's names where GIE has the extension point: "ProfilePicker" (ProfileHandler::PickProfiles,
  // called until it returns no profile, so at least twice per pick), "Filter", "Scorer", "Picker",
  // "ProcessProfilesResults" (ProfileHandler::ProcessResults), "DataProducer" (Prepare),
  // "PreRequest" (RequestObserver, recorded picks only), "Admitter" (Admit), "Screener" (Screen); and
  // "SaturationDetector" (Saturation, plus ExplainSaturation when it runs).
  std::string extension_point;
  std::string plugin_type;
  std::string plugin_name;
  uint64_t count = 0;      // calls
  double sum_seconds = 0;  // their total time
  std::vector<uint64_t> bucket_counts;  // cumulative, as DurationHistogram::bucket_counts
};

// A plugin input the endpoints cannot provide: the plugin then degrades (scores 0, keeps every
// endpoint, counts the endpoint as saturated) without saying so per request.
struct MissingInput {
  std::string plugin;  // plugin name
  std::string type;
  PluginInput input;
  std::string why;  // "engine sglang has no metric for lora", "none of the 3 endpoints reported lora"
  // "plugin 'lora-affinity-scorer' (lora-affinity-scorer) reads lora, but engine sglang has no
  // metric for lora: it cannot use it".
  std::string ToString() const {
    return "plugin '" + plugin + "' (" + type + ") reads " + std::string(PluginInputName(input)) + ", but " + why +
           ": it cannot use it";
  }
};

// What a token-producer did since the scheduler was built (/metrics epp_tokenizer_*).
struct TokenizerCounters {
  std::string plugin;   // plugin name
  std::string backend;  // "estimate", "vllm" or "local"
  int64_t requests = 0;    // requests tokenized (Prepare with a prompt)
  int64_t calls = 0;       // requests sent to the model server (vllm)
  int64_t cache_hits = 0;  // answered from the cache of earlier answers (vllm)
  // Requests estimated instead (vllm), by reason: "timeout", "unavailable" (refused, DNS, TLS),
  // "status" (non-2xx answer), "answer" (not a token list), "no-body" (the caller had no body),
  // "api" (responses / embeddings: nothing to render); local: "model" (no tokenizer for the
  // request's model), "template" (a chat request whose model has no chat template, or that its
  // template refused), "answer" (the body's prompt could not be tokenized).
  std::map<std::string, int64_t> fallbacks;
  int64_t cache_entries = 0;
  int64_t cache_tokens = 0;
};

// What a scheduler's plugins ask of the runtime that serves it, found once when the scheduler
// is built (no plugin is inspected at pick time). EppServer applies it at start and after every
// config reload: it feeds `kv_events`' index from the engines' KV events, and re-reads metrics
// the way ConfigureScrape says when `scrape_settings` is set.
struct RuntimeNeeds {
  // The precise-prefix-cache-producer's binding (kv/subscriber.h): the index to feed and where
  // each endpoint publishes; nullptr without one.
  const struct KvEventsBinding* kv_events = nullptr;
  bool scrape_settings = false;   // a core-metrics-extractor changes how metrics are read
  bool first_token = false;       // ObserveFirstToken reaches at least one plugin
  bool completion = false;        // ObserveCompletion reaches at least one plugin
  bool response_metadata = false; // ResponseMetadata has sources (request-attribute-reporter)
  size_t endpoint_state = 0;      // plugins keeping per-endpoint state (ForgetEndpoint reaches them)
  size_t tokenizers = 0;          // token-producers (Tokenizers())
};

// Another EPP replica's in-flight counts on one endpoint (Scheduler::SetRemoteLoad).
struct RemoteLoad {
  std::string endpoint;
  int64_t requests = 0;
  int64_t tokens = 0;
};

class Scheduler {
 public:
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  PickResult Pick(const InferenceRequest& request, std::span<const Endpoint> endpoints,
                  const PickOptions& options = {}) const;
  // llm-d's request-header step, for a request about to enter flow control and Pick: runs the
  // configured request-header processors (agent-identity) and, when request.fairness_id is empty
  // (no x-llm-d-inference-fairness-id header named one), sets it to the agent identity they found.
  // Pick derives the same for PickResult::fairness_id on its own, so callers without flow control
  // may skip this; those that show or queue by the request's fairness_id call it first.
  void PrepareRequest(InferenceRequest& request) const;
  // Ends a recorded request: removes its load from the endpoint it was sent to. Releasing more
  // than was recorded clamps at zero.
  void Release(const PickResult& result) const;
  void Release(std::string_view endpoint, int64_t tokens) const;
  // The response path saw the first token of pick `pick_id` from `endpoint` at `at_us` (the
  // scheduler's clock; nullopt: now). Passed to every FirstTokenObserver plugin (the
  // estimated-ttft-scorer calibrates its prefill rate from it). Unknown ids are ignored.
  void ObserveFirstToken(uint64_t pick_id, std::string_view endpoint, std::optional<int64_t> at_us = std::nullopt) const;
  // The response of pick `pick_id` from `endpoint` ended (completion.at_us on the scheduler's
  // clock; 0: now). Passed to every CompletionObserver plugin (predicted-latency-producer trains
  // its TTFT and TPOT models from it). Unknown ids are ignored.
  void ObserveCompletion(uint64_t pick_id, std::string_view endpoint, ResponseCompletion completion) const;
  // Drops per-endpoint state (prefix index entries, in-flight counters) of an endpoint that left.
  void ForgetEndpoint(std::string_view endpoint) const;

  // The configuration after defaults, as YAML (`eppctl config effective`): every plugin with its
  // effective parameters, profiles with explicit weights, the saturation detector.
  std::string EffectiveConfigYaml() const;
  const std::vector<std::string>& warnings() const;
  std::vector<std::string> ProfileNames() const;
  // Request headers the profile handler owns (ProfileHandler::OwnedHeaders): ext_proc removes the
  // gateway's copies and sets PickResult::headers.
  const std::vector<std::string>& OwnedHeaders() const;
  // What the plugins ask of the runtime (see RuntimeNeeds).
  const RuntimeNeeds& Needs() const;
  // Entries in the prefix index of the approx-prefix-cache-producer (0 without one).
  size_t PrefixIndexEntries() const;
  // The KV-event binding of the configured precise-prefix-cache-producer (kv/subscriber.h);
  // nullptr without one.
  const struct KvEventsBinding* KvEvents() const;
  // Applies the configured core-metrics-extractor's parameters to how metrics are read: its
  // engineConfigs (customMetrics included) replace same-named mappings, engineLabelKey names the
  // label an endpoint's engine is read from, defaultEngine replaces "auto". Unchanged without one.
  void ConfigureScrape(ScrapeOptions& options) const;
  // Which parser reads a request to a path (epp/request.h ParserSet): the configuration's
  // requestHandler.parsers (else its deprecated `parser`), else llm-d's default list (openai,
  // anthropic, vllmhttp, passthrough). ext_proc, explain and pick parse requests through it.
  const ParserSet& Parsers() const;
  // True when a request to `path` goes to passthrough-parser (routed without reading its body:
  // the caller picks with a request that has only its path and headers, and sends the body on
  // unchanged).
  bool RoutesUnparsed(std::string_view path) const;
  // Dynamic metadata for the end of a response with this usage (request-attribute-reporter), in
  // config order; empty without such plugins.
  std::vector<ResponseMetadataEntry> ResponseMetadata(const ResponseUsage& usage) const;
  bool WantsResponseMetadata() const;
  // Counters of every token-producer, in config order.
  std::vector<TokenizerCounters> Tokenizers() const;
  // In-flight counters of an endpoint: {requests, tokens}, this replica's own.
  std::pair<int64_t, int64_t> Inflight(std::string_view endpoint) const;
  // Shared state (epp/shared_state.h): the other replicas' in-flight counts, replacing the last
  // set given (entries for one endpoint are summed; empty: none). Picks see this replica's
  // counts plus these; Inflight() stays this replica's own.
  void SetRemoteLoad(std::span<const RemoteLoad> remote) const;
  std::pair<int64_t, int64_t> RemoteInflight(std::string_view endpoint) const;

  // Inputs of the configured plugins (Plugin::Consumes) that an engine's mapping has no metric
  // for (`eppctl config validate --engine`), in plugin order.
  std::vector<MissingInput> MissingInputs(const MetricMapping& mapping) const;
  // Metric inputs that none of `endpoints` provides (as read): what `eppctl config validate
  // --endpoint`, `explain` and `pick` warn about. Nothing for an empty span.
  std::vector<MissingInput> MissingInputs(std::span<const Endpoint> endpoints) const;

  // Plugin time since the scheduler was built: one entry per (extension point, plugin instance)
  // the configuration uses, in the order a pick calls them (data producers, saturation detector,
  // profile handler, then per profile filters, scorers, picker; then ProcessProfilesResults and
  // request observers), entries with zero calls included. A plugin shared by several profiles
  // has one entry per extension point. Only the plugin calls are timed, not the scheduler's work
  // around them nor trace-only calls (WhyRemoved, Explain). Counters are read without a lock while
  // picks run: a snapshot may show a call in `count` whose time is not yet in `sum_seconds`.
  std::vector<PluginTiming> PluginTimings() const;
  // Duration of whole Pick() calls, every outcome included (GIE's scheduler e2e latency).
  DurationHistogram CycleTiming() const;
  // The metrics of the plugins that export their own (MetricsSource: llm-d's plugin metrics such
  // as llm_d_epp_encoder_cache_*), in plugin order; what `eppctl serve` adds to /metrics.
  std::vector<PluginMetric> PluginMetrics() const;

  // GIE's SimpleTokenEstimator: input tokens (request.prompt_tokens, at least 1) plus
  // round(1.5 * input) expected output tokens.
  static int64_t EstimateLoadTokens(const InferenceRequest& request);

  struct Impl;
  explicit Scheduler(std::unique_ptr<Impl> impl);
  const Impl& impl() const { return *impl_; }  // for libepp itself (RebuildScheduler)

 private:
  std::unique_ptr<Impl> impl_;
};

// True when `address` ("ip:port") is selected by a subset hint entry: "ip:port" exactly, or a
// bare "ip" (IPv6 in brackets or not) matching any port.
bool SubsetEntryMatches(std::string_view entry, std::string_view address);

// A decision in a few names, from the primary profile's trace: the winner (the primary endpoint)
// and its total, the best other scored candidate (runner-up), and the scorer whose weighted
// difference between the two was largest (what decided it). `kind`: "margin" (a scorer decided),
// "tie" (equal totals: the picker's tie-break), "picker" (a lower total won: not a max-score
// picker), "alone" (one candidate scored) or "" (no trace, or no pick).
struct DecisionSummary {
  std::string kind;
  std::string winner, runner_up;
  double winner_score = 0, runner_up_score = 0;
  std::string deciding_scorer;  // plugin name, with kind "margin"
  double deciding_winner = 0, deciding_runner_up = 0;  // its weighted scores on both
  double deciding_winner_raw = 0, deciding_runner_up_raw = 0, deciding_weight = 0;
};
DecisionSummary SummarizeDecision(const PickResult& result);

// The explain JSON of one decision (docs/cli.md): {"request": {...}, "profiles": [...],
// "result": {...}, "decision": {...}}. `request` may be null (a request that did not parse).
std::string PickResultToJson(const InferenceRequest* request, const PickResult& result, int indent = 2);
// The same as a human-readable report (filters, score table, winner vs runner-up and what decided
// the margin, outcome, the decision the gateway receives).
std::string PickResultToText(const InferenceRequest* request, const PickResult& result, bool color = false);

}  // namespace epp
