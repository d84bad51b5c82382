// Signature adapters between libepp's API and what pybind11 can bind directly, and the one place
// where an absl::Status becomes a Python exception.
//
// Errors: shims call ThrowIfError() / Unwrap(), which throw StatusError, a plain C++ exception.
// That works with the GIL released. A translator registered by RegisterStatusTranslator() turns
// it into the pyepp.errors class for its code once pybind11 holds the GIL again.
#pragma once

#include <cstdint>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <pybind11/pybind11.h>

#include "epp/tools/check.h"
#include "epp/config.h"
#include "epp/endpoint.h"
#include "epp/runtime/endpoints.h"
#include "epp/runtime/extproc.h"
#include "epp/metrics.h"
#include "epp/plugin.h"
#include "epp/prefix_cache.h"
#include "epp/registry.h"
#include "epp/tools/replay.h"
#include "epp/request.h"
#include "epp/scheduler.h"
#include "epp/runtime/serve.h"
#include "epp/runtime/serve_args.h"
#include "epp/tools/sim.h"
#include "epp/status.h"

namespace pyepp {

namespace py = pybind11;

// A failed absl::Status in flight from a shim to the exception translator.
class StatusError : public std::exception {
 public:
  explicit StatusError(absl::Status status);
  const char* what() const noexcept override { return what_.c_str(); }
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
  std::string what_;
};

// Throws StatusError when `status` is not OK. Safe without the GIL.
void ThrowIfError(const absl::Status& status);

template <typename T>
T Unwrap(absl::StatusOr<T> result) {
  ThrowIfError(result.status());
  return *std::move(result);
}

// The name of the pyepp.errors class for `code`: ConfigError, NotFoundError, UnavailableError
// or EppError.
std::string_view ErrorClassName(absl::StatusCode code);

// Registers the pybind11 translator for StatusError. Call once from PYBIND11_MODULE.
void RegisterStatusTranslator();

// ParsePrometheusText() as Python values: (families, skipped) where families is a list of
// (name, type, help, samples), type as MetricTypeName() spells it, samples a list of
// (name, labels dict, value, timestamp_ms or None), and skipped a list of (line, reason).
// Parsing runs with the GIL released.
py::tuple MetricFamilies_ParseShim(const std::string& text, bool lenient);

// Parse, pick the engine ("auto": detection over the built-in mappings with the overrides
// applied, as RunChecks() does), extract. Returns (engine, metrics, checks). No engine detected
// is kNotFound. Call without the GIL.
std::tuple<std::string, epp::EndpointMetrics, std::vector<epp::CheckResult>> EndpointMetrics_ExtractShim(
    const std::string& text, const std::string& engine, bool lenient,
    const std::vector<std::pair<std::string, std::string>>& metric_overrides);

// LoadMetricMappingsYaml(), errors as exceptions.
std::vector<epp::MetricMapping> MetricMapping_LoadYamlShim(const std::string& yaml, const std::string& source_name);

// CheckStatusName() of the result's status: "pass", "warn", "fail" or "skip".
std::string CheckResult_StatusShim(const epp::CheckResult& result);

// RunChecks() rendered by CheckReportToJson() (compact). Call without the GIL.
std::string CheckReport_RunToJsonShim(const std::vector<std::string>& targets, const epp::CheckOptions& options);

// PrefixSeed() and ChainedBlockHashes() with Python strings (bytes of the UTF-8 text).
uint64_t PrefixSeedShim(const std::string& model, const std::string& cache_salt);
std::vector<uint64_t> ChainedBlockHashesShim(const std::string& text, size_t block_chars, uint64_t seed,
                                             size_t max_blocks);

// SimServer adapters: construction and Submit raise on a bad Status; events come back as
// (kind, id, time_us) tuples with kind "first_token", "finished" or "rejected"; times in
// integer microseconds; next_event_time is None when the server is idle.
std::shared_ptr<epp::SimServer> SimServer_CreateShim(const epp::SimParams& params);
py::list SimServer_SubmitShim(epp::SimServer& server, uint64_t id, int64_t prompt_tokens, int64_t output_tokens,
                              std::vector<uint64_t> block_hashes, const std::string& adapter, int64_t t_us);
py::list SimServer_AdvanceToShim(epp::SimServer& server, int64_t t_us);
py::object SimServer_NextEventTimeShim(const epp::SimServer& server);
int64_t SimServer_CachedPrefixBlocksShim(const epp::SimServer& server, const std::vector<uint64_t>& hashes);
py::dict SimServer_SnapshotShim(const epp::SimServer& server);
std::string SimServer_MetricsTextShim(const epp::SimServer& server, double wall_time_s);

// SimHttpServer::Start() with every option spelled out; raises on failure.
std::shared_ptr<epp::SimHttpServer> SimHttpServer_StartShim(const epp::SimParams& params, const std::string& host,
                                                            int port, double time_scale, double fail_rate,
                                                            int metrics_delay_ms, bool metrics_malformed,
                                                            double drop_rate, int max_tokens_default, int threads,
                                                            const std::string& role, double kv_link_gbytes_per_s,
                                                            int64_t kv_bytes_per_token, const std::string& kv_events,
                                                            const std::string& kv_events_replay,
                                                            const std::string& tokenizer, bool render_endpoints);

// --- Scheduling ------------------------------------------------------------------------------
//
// Time: pyepp endpoints carry metrics_time_us *relative to the pick*, libepp's relative form
// (epp/endpoint.h, ShiftMetricsTimes: 0 = scraped at the moment of the pick, -1000000 = a second
// before; nullopt = no metrics). Scheduler_PickShim adds the
// scheduler clock's now to every copy it schedules over, so a Python Endpoint's metrics are as old
// as its metrics_age_s says at every pick, however long ago the object was built. Python plugins
// receive copies converted back to that relative form.

// ParseOpenAIRequest() / ParseCaptureEnvelope(), errors as exceptions.
epp::InferenceRequest InferenceRequest_ParseOpenAIShim(const std::string& path, const std::string& body);
epp::InferenceRequest InferenceRequest_ParseCaptureShim(const std::string& text, const std::string& path_override);
// The same, with the request body as JSON text (for Scheduler.pick's body).
std::pair<epp::InferenceRequest, std::string> InferenceRequest_ParseCaptureWithBodyShim(const std::string& text,
                                                                                       const std::string& path_override);
// ApiKindName() of the request's API.
std::string InferenceRequest_ApiShim(const epp::InferenceRequest& request);
// ParseRequest() through the parsers named by type (llm-d's default list when `parsers` is
// empty), errors as exceptions; the body is bytes (a gRPC frame for vertexai and vllmgrpc).
epp::InferenceRequest InferenceRequest_ParseShim(const std::string& path, const std::string& body,
                                                 const std::vector<std::string>& parsers);
// RequestParserType() of the parser that read the request.
std::string InferenceRequest_ParserShim(const epp::InferenceRequest& request);
// AnthropicToChatCompletions(), errors as exceptions.
std::string AnthropicToChatShim(const std::string& body);
// ParseResponseUsage() for a response to `request`: (prompt, completion, total, cached or None).
std::optional<std::tuple<double, double, double, std::optional<double>>> ResponseUsage_ParseShim(
    const epp::InferenceRequest& request, const std::string& body, bool event_stream);

// ValidateEndpointAddress(), errors as exceptions.
void Endpoint_ValidateAddressShim(const std::string& address);
// ValidateEndpointMetrics(), errors as exceptions.
void EndpointMetrics_ValidateShim(const epp::EndpointMetrics& metrics);

struct SchedulerHolder;
// LoadEndpointsFile() + ResolveEndpoints() with `check` as the scrape options, then what
// `scheduler`'s core-metrics-extractor sets (Scheduler::ConfigureScrape, as eppctl pick and serve
// apply it); scheduler may be null. Metrics that were read get metrics_time_us 0 (fresh at every
// pick, see above). Call without the GIL.
std::vector<epp::Endpoint> Endpoints_LoadShim(const std::string& path, const epp::CheckOptions& check,
                                              bool fail_on_metrics_error, const SchedulerHolder* scheduler);

// ParseConfig() / LoadConfigFile(), errors as exceptions.
epp::EppConfig EppConfig_ParseShim(const std::string& yaml, const std::string& source);
epp::EppConfig EppConfig_LoadFileShim(const std::string& path);

// A registry holding the built-in plugins.
std::shared_ptr<epp::PluginRegistry> PluginRegistry_CreateShim();

// The type's declared parameters, PluginSchema::ToParams() as JSON; kNotFound for an unknown type.
std::string PluginRegistry_SchemaJsonShim(const epp::PluginRegistry& registry, const std::string& type);

// Registers `type` for a plugin written in Python. `kind` is "scorer" or "filter". `factory` is
// called (with the GIL) as factory(name, params_json) and returns an adapter object with, for a
// scorer, score(request, endpoints) -> sequence of floats and explain(request, endpoint) -> str,
// for a filter, filter(request, endpoints) -> sequence of bools and why_removed(request, endpoint)
// -> str; request and endpoints are native copies. A factory that raises fails BuildScheduler
// with kInvalidArgument. Per request, a Python error never escapes: a scorer then scores 0 for
// every candidate and its Explain() says "python error: ..."; a filter keeps every candidate. The
// first error of each plugin is also logged to the "pyepp" logger.
void PluginRegistry_RegisterPythonShim(epp::PluginRegistry& registry, const std::string& type, const std::string& kind,
                                       py::object factory);

// A Scheduler with the RNG it was built with (the RNG must outlive it: declared first).
struct SchedulerHolder {
  std::unique_ptr<epp::SeededRng> rng;
  std::unique_ptr<epp::Scheduler> scheduler;
  epp::Clock* clock = nullptr;
};

// BuildScheduler() on a steady clock and SeededRng(seed), errors as exceptions. Runs with the GIL
// (Python plugin factories are called).
std::shared_ptr<SchedulerHolder> Scheduler_BuildShim(const epp::EppConfig& config, const epp::PluginRegistry& registry,
                                                     uint64_t seed, const std::string& region, const std::string& zone);

// One decision and the request it was made for (a copy, for the explain output).
struct PickOutcome {
  epp::PickResult result;
  epp::InferenceRequest request;
  bool has_request = true;  // false: a decision made without a parsed request (ext_proc 400, no body)
};

// Scheduler::Pick() over `endpoints` (metrics times relative, see above). Call without the GIL.
PickOutcome Scheduler_PickShim(const SchedulerHolder& holder, epp::InferenceRequest request,
                               std::vector<epp::Endpoint> endpoints, std::optional<std::vector<std::string>> subset,
                               bool record, bool trace, const std::string& body);
void Scheduler_ReleaseShim(const SchedulerHolder& holder, const PickOutcome& outcome);
// Scheduler::ObserveFirstToken for the pick's primary endpoint, now; nothing for an unrecorded pick.
void Scheduler_ObserveFirstTokenShim(const SchedulerHolder& holder, const PickOutcome& outcome);
void Scheduler_ObserveCompletionShim(const SchedulerHolder& holder, const PickOutcome& outcome, double prompt_tokens,
                                     double completion_tokens, int64_t chunks, bool streamed);
std::string Scheduler_EffectiveConfigShim(const SchedulerHolder& holder);
std::vector<std::string> Scheduler_WarningsShim(const SchedulerHolder& holder);
std::vector<std::string> Scheduler_ProfileNamesShim(const SchedulerHolder& holder);
size_t Scheduler_PrefixIndexEntriesShim(const SchedulerHolder& holder);
std::pair<int64_t, int64_t> Scheduler_InflightShim(const SchedulerHolder& holder, const std::string& endpoint);
std::vector<epp::PluginTiming> Scheduler_PluginTimingsShim(const SchedulerHolder& holder);
// Scheduler::MissingInputs over an engine's mapping (a name, resolved as eppctl check does) or
// over endpoints, as {"plugin", "type", "input", "why", "message"} dicts.
py::list Scheduler_MissingInputsEngineShim(const SchedulerHolder& holder, const std::string& engine);
py::list Scheduler_MissingInputsEndpointsShim(const SchedulerHolder& holder, const std::vector<epp::Endpoint>& endpoints);
epp::DurationHistogram Scheduler_CycleTimingShim(const SchedulerHolder& holder);

// PickResultToJson() / PickResultToText() of an outcome (indent < 0: compact JSON).
std::string PickOutcome_ToJsonShim(const PickOutcome& outcome, int indent);
std::string PickOutcome_ToTextShim(const PickOutcome& outcome, bool color);

// --- ext_proc --------------------------------------------------------------------------------
//
// A Python server or session schedules over endpoints given in pyepp's relative time (see Time
// above): PythonEndpointSource keeps them so and stamps a copy with the scheduler clock's now at
// every Snapshot(), i.e. at every pick, so static endpoints never go stale while a server runs.

class PythonEndpointSource final : public epp::EndpointSource {
 public:
  PythonEndpointSource(std::vector<epp::Endpoint> endpoints, const epp::Clock* clock);
  std::shared_ptr<const std::vector<epp::Endpoint>> Snapshot() const override;
  void Set(std::vector<epp::Endpoint> endpoints) { relative_.Set(std::move(endpoints)); }

 private:
  epp::EndpointSnapshot relative_;
  const epp::Clock* clock_;
};

// BuildResponseMessages() as a list of bytes.
// CaptureToHttpRequest() then BuildProcessingRequests() with the subset hint and chunking.
py::list CaptureRequests_BuildShim(const std::string& capture_json, const std::string& path_override,
                                   std::optional<std::vector<std::string>> subset, bool subset_as_string,
                                   size_t chunk_bytes);
py::list ResponseMessages_BuildShim(int status, const std::vector<std::pair<std::string, std::string>>& headers,
                                    const std::string& body, const std::string& served_endpoint);
// ProcessingRequestToJson() / ProcessingResponseToJson() / ProcessingRequestFromJson(), errors as
// exceptions; the last returns bytes.
std::string ProcessingRequest_ToJsonShim(const std::string& bytes);
std::string ProcessingResponse_ToJsonShim(const std::string& bytes);
py::bytes ProcessingRequest_FromJsonShim(const std::string& json);

// An ExtProcSession with everything it references (it keeps references to the scheduler, the
// endpoint source and the options: declared last, destroyed first). `mu` serializes send() calls
// from several Python threads (a session serves one stream at a time).
struct SessionHolder {
  std::shared_ptr<SchedulerHolder> scheduler;
  std::unique_ptr<PythonEndpointSource> endpoints;
  epp::ExtProcOptions options;
  std::mutex mu;
  std::unique_ptr<epp::ExtProcSession> session;
};
std::shared_ptr<SessionHolder> ExtProcSession_CreateShim(std::shared_ptr<SchedulerHolder> scheduler,
                                                         std::vector<epp::Endpoint> endpoints,
                                                         const epp::ExtProcOptions& options);
// OnMessage() without the GIL; the responses as a list of bytes. A message that is not a
// ProcessingRequest or breaks the protocol order raises ConfigError.
py::list ExtProcSession_SendShim(SessionHolder& holder, const std::string& message);
// These three release the GIL while they wait for `mu`.
bool ExtProcSession_FinishedShim(SessionHolder& holder);
// The decision once made, with the parsed request when there is one; None before.
std::optional<PickOutcome> ExtProcSession_ResultShim(SessionHolder& holder);
std::string ExtProcSession_ServedShim(SessionHolder& holder);

// A running epp::EppServer (the runtime `eppctl serve` runs) and what it references. Two modes:
//  - static: a Python Scheduler (Python plugins included) over endpoints set from Python
//    (set_endpoints); the scheduler and the source are held here and outlive the server;
//  - runtime: a configuration file, an endpoints file, --endpoint specs or InferencePool
//    discovery, with the scrape loop, reloads and /metrics of `eppctl serve`.
struct ServeHolder {
  std::shared_ptr<SchedulerHolder> scheduler;        // static mode
  std::shared_ptr<PythonEndpointSource> endpoints;   // static mode
  std::unique_ptr<epp::Logger> log;
  std::mutex mu;  // serializes Close() and SetReady()
  std::unique_ptr<epp::EppServer> server;
  ~ServeHolder();  // Close(0), without the GIL when the destroying thread holds it
  // Drains open streams for up to `drain`, then stops every server. Idempotent. Call without
  // the GIL: streams may be waiting for it in Python plugins.
  void Close(std::chrono::milliseconds drain);
};

// What pyepp.serve(...) passes for a runtime server (ServeConfig in Python's units).
// Both modes build their settings with epp::BuildServeConfig (the one builder eppctl serve uses
// too); its errors name pyepp.serve's keyword arguments. Ports: 0 picks a free one; a health or
// metrics port of -1 means no such server. The health server (when any) reports ready at once.
// Call without the GIL.
// Static mode: the caller's scheduler over a static pool (ExtProcServer_SetEndpointsShim); only
// the server and stream settings of `args` apply.
std::shared_ptr<ServeHolder> ExtProcServer_StartShim(std::shared_ptr<SchedulerHolder> scheduler,
                                                     std::vector<epp::Endpoint> endpoints, const epp::ServeArgs& args);
// Runtime mode: every setting of `args`; log lines from `log_level` up go to stderr.
std::shared_ptr<ServeHolder> EppServer_StartShim(const epp::ServeArgs& args, const std::string& log_level);
int ExtProcServer_PortShim(const ServeHolder& holder);
std::optional<int> ExtProcServer_HealthPortShim(const ServeHolder& holder);
std::optional<int> ExtProcServer_MetricsPortShim(const ServeHolder& holder);
// EppServer::leading(): true without leader election, else whether this replica holds the Lease.
bool ExtProcServer_LeadingShim(const ServeHolder& holder);
py::bytes ExtProcServer_CertPemShim(const ServeHolder& holder);  // b"" without TLS
// Static mode only (kFailedPrecondition otherwise).
void ExtProcServer_SetEndpointsShim(ServeHolder& holder, std::vector<epp::Endpoint> endpoints);
// kFailedPrecondition (EppError) without a health server. Releases the GIL.
void ExtProcServer_SetReadyShim(ServeHolder& holder, bool ready);
void ExtProcServer_CloseShim(ServeHolder& holder, double drain_s);
// The ExtProcStats counters: every counter by its field name, plus latency_bucket_bounds_us,
// latency_bucket_counts (per bucket, the last one above every bound) and latency_count.
py::dict ExtProcServer_StatsShim(ServeHolder& holder);
// The /metrics exposition now (also without a metrics server).
std::string ExtProcServer_MetricsTextShim(ServeHolder& holder);
// ReloadConfig() (errors raise); the reload counters as {"ok", "failed", "last_error"}.
void ExtProcServer_ReloadConfigShim(ServeHolder& holder);
py::dict ExtProcServer_ConfigReloadsShim(ServeHolder& holder);
// The pool as the server sees it now.
std::vector<epp::Endpoint> ExtProcServer_EndpointsShim(ServeHolder& holder);
std::string ExtProcServer_DescribeShim(ServeHolder& holder);
// /debug/decisions' JSON: the list (limit, after) or, with id > 0, one decision ("" when not held).
// kFailedPrecondition without a decision log.
std::string ExtProcServer_DecisionsShim(ServeHolder& holder, size_t limit, uint64_t after, uint64_t id);

// --- Replay ----------------------------------------------------------------------------------

// A trace as one opaque value, so large traces never become Python lists.
struct ReplayTrace {
  std::vector<epp::ReplayRequest> requests;
};
size_t ReplayTrace_LenShim(const ReplayTrace& trace);
std::shared_ptr<ReplayTrace> ReplayTrace_LoadShim(const std::string& format, const std::string& path, double time_scale);
// LoadReplayTrace with generated arrival times (TraceArrivals). Call without the GIL.
std::shared_ptr<ReplayTrace> ReplayTrace_LoadAtRateShim(const std::string& format, const std::string& path, double time_scale,
                                                        double rate, bool poisson, uint64_t seed);
std::shared_ptr<ReplayTrace> ReplayTrace_SharedPrefixShim(const epp::SharedPrefixWorkload& workload);
// ParseTenantMix() + MixTenants() on the trace in place; kInvalidArgument for a bad spec.
void ReplayTrace_MixTenantsShim(ReplayTrace& trace, const std::string& tenants, const std::string& priorities, uint64_t seed);
// AttachSlos() on the trace in place (-1 leaves a kind alone).
void ReplayTrace_AttachSlosShim(ReplayTrace& trace, int64_t ttft_ms, int64_t tpot_ms);
epp::SharedPrefixWorkload SharedPrefix_GieShim(const std::string& name);
epp::ReplayPolicy ReplayPolicy_NamedShim(const std::string& name);
// ResolveReplayPolicy() / MakePolicyNamesUnique(), errors as exceptions.
epp::ReplayPolicy ReplayPolicy_ResolveShim(const std::string& spec, size_t index);
std::vector<epp::ReplayPolicy> ReplayPolicy_UniqueNamesShim(std::vector<epp::ReplayPolicy> policies);
// RunReplay(); kInvalidArgument for bad options. Call without the GIL.
epp::ReplayReport ReplayReport_RunShim(const ReplayTrace& trace, const std::vector<epp::ReplayPolicy>& policies,
                                       const epp::ReplayOptions& options);
// RunMultiRegionReplay() and the --regions / --rtt parsers; errors as exceptions. Run without the GIL.
epp::MultiRegionReport MultiRegion_RunShim(const ReplayTrace& trace, const epp::ReplayPolicy& policy,
                                           const epp::MultiRegionOptions& options);
std::vector<epp::ReplayRegion> ReplayRegions_ParseShim(const std::string& text);
std::vector<epp::SimParams> MixedSpeedServers_Shim(const epp::SimParams& base, int servers, const std::vector<double>& speeds);
std::map<std::pair<std::string, std::string>, double> RttMatrix_ParseShim(const std::string& text);

}  // namespace pyepp
