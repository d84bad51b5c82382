// Replay: routing quality at cluster scale, in virtual time (`eppctl replay`, pyepp.replay).
//
// RunReplay() drives N simulated model servers (SimServer, the simulator's cost model) with a
// trace, routing every request through a real Scheduler built from a policy (any
// EndpointPickerConfig, or a named baseline). The scheduler sees metrics as a deployed EPP
// would: scraped every scrape_interval, stale in between, and keeps its own prefix index; the
// servers' true KV-cache state is separate, so the report can say how often the EPP's predicted
// prefix match was wrong. Everything runs in integer-microsecond virtual time and is
// deterministic for a seed.
//
// Requests are described compactly as segments (an id and a token count): equal segment
// sequences render to equal prompt text, so shared system prompts, multi-turn conversations and
// Mooncake's 512-token hash_ids all become real shared prefixes that both the scheduler and the
// simulator hash. A segment of T tokens renders as 4*T characters (kCharsPerToken).
//
// Thread-safety: functions are reentrant; RunReplay uses only its own state.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "epp/config.h"
#include "epp/tools/sim.h"
#include "epp/status.h"

namespace epp {

struct ReplaySegment {
  uint64_t id = 0;
  int32_t tokens = 0;
};

struct ReplayRequest {
  int64_t arrival_us = 0;
  std::string model = "model";
  std::vector<ReplaySegment> segments;  // the prompt, as segments (ignored when `text` is set)
  std::string text;                     // a literal prompt (captured requests)
  int64_t prompt_tokens = 0;            // sum of segment tokens, or ApproxTokens(text)
  int64_t output_tokens = 1;
  int priority = 0;                     // the request's InferenceObjective priority (its band)
  std::string tenant;                   // its fairness id (x-llm-d-inference-fairness-id); empty: none
  // Its SLOs in milliseconds (x-llm-d-slo-ttft-ms / x-llm-d-slo-tpot-ms); -1: none. The EPP sees
  // them as those headers; the report counts who met them (ReplayPolicyReport::slo_*).
  int64_t slo_ttft_ms = -1;
  int64_t slo_tpot_ms = -1;
  std::string region;                   // where it arrived, if the trace says (multi-region replay)
};

// The prompt text of a request: `text`, or its segments rendered deterministically.
std::string RenderReplayPrompt(const ReplayRequest& request);

// inference-perf's shared_prefix data (peers.md section 7.1) with Poisson or constant arrivals.
struct SharedPrefixWorkload {
  int groups = 10;                 // num_groups: distinct system prompts
  int prompts_per_group = 10;      // num_prompts_per_group: distinct questions per system prompt
  int64_t system_len = 100;        // tokens
  int64_t question_len = 50;       // tokens
  int64_t output_len = 50;         // tokens
  bool multi_turn = false;         // each group is one conversation whose turns accumulate
  // Every group starts with the same system prompt (one segment), so groups differ only from
  // their questions on: with multi_turn, many conversations behind one shared system prompt.
  bool shared_system_prompt = false;
  double rate = 10;                // requests per second
  bool poisson = true;             // else constant spacing
  double duration_s = 0;           // 0: every (group, prompt) once; else rate * duration requests
  uint64_t seed = 0;
  std::string model = "model";
};
// kInvalidArgument naming the bad field.
absl::StatusOr<std::vector<ReplayRequest>> GenerateSharedPrefix(const SharedPrefixWorkload& workload);
// Tenants and priorities for a trace that has none (`eppctl replay --tenants/--priority-mix`):
// each request gets a tenant drawn by weight and a priority drawn by share, from `seed`, so a
// trace without them can exercise flow control's bands and fairness.
struct TenantMix {
  std::vector<std::pair<std::string, double>> tenants;  // name, weight (> 0); empty: leave tenants
  std::vector<std::pair<int, double>> priorities;       // priority, share (> 0); empty: leave priorities
  uint64_t seed = 0;
};
// `tenants`: "N" (N equal tenants named t1..tN) or "NAME=WEIGHT,..." (a bare NAME weighs 1);
// `priorities`: "PRIORITY=SHARE,..." (shares are normalised), e.g. "1=0.1,0=0.9". Either may be
// empty. kInvalidArgument naming the bad item.
absl::StatusOr<TenantMix> ParseTenantMix(std::string_view tenants, std::string_view priorities, uint64_t seed = 0);
// Assigns every request of `trace` a tenant and a priority as `mix` says (each list only when set).
void MixTenants(std::vector<ReplayRequest>& trace, const TenantMix& mix);
// Gives every request without its own TTFT (TPOT) SLO `ttft_ms` (`tpot_ms`); -1 leaves them
// (`eppctl replay --slo-ttft-ms / --slo-tpot-ms`).
void AttachSlos(std::vector<ReplayRequest>& trace, int64_t ttft_ms, int64_t tpot_ms);

// The four GIE prefix-cache benchmark configurations (peers.md section 7.2), by file name:
// short-questions__many-system-prompts, long-questions__many-system-prompts,
// short-questions__few-system-prompts__multi-chat, long-questions__few-system-prompts__multi-chat.
// Rates and durations are left to the caller (the GIE files ramp through several stages).
absl::StatusOr<SharedPrefixWorkload> GieBenchmarkWorkload(std::string_view name);

// Mooncake FAST'25 trace lines: {"timestamp": ms, "input_length", "output_length", "hash_ids":
// [...]} where each hash id is one 512-token block (the last may be partial), and optionally
// "region" (the arrival region for a multi-region replay). `time_scale` multiplies timestamps
// (0.5 = twice as fast). Errors name file:line.
absl::StatusOr<std::vector<ReplayRequest>> LoadMooncakeTrace(const std::string& path, double time_scale = 1.0);
// Captured OpenAI requests, one per line as `eppctl pick` reads them, each with an arrival time
// in a top-level "timestamp" (ms) or "arrival_s" member and optionally "output_tokens" (default
// max_tokens of the body, else 128), "region" (as in Mooncake lines), "priority" (an integer),
// "tenant" (a fairness id; else the line's x-llm-d-inference-fairness-id header, if any) and
// "slo_ttft_ms" / "slo_tpot_ms" (else the line's x-llm-d-slo-ttft-ms / -tpot-ms headers).
absl::StatusOr<std::vector<ReplayRequest>> LoadOpenAITrace(const std::string& path, double time_scale = 1.0);

// Azure's LLM inference traces (AzurePublicDataset): CSV with the header
// TIMESTAMP,ContextTokens,GeneratedTokens and wall-clock timestamps (2023-11-16 18:15:46.6805900,
// UTC, up to 9 fractional digits). Arrivals start at 0 at the earliest row, times time_scale. No
// prefix information: each prompt is unique. Errors name file:line and the column.
absl::StatusOr<std::vector<ReplayRequest>> LoadAzureTrace(const std::string& path, double time_scale = 1.0);
// BurstGPT's CSV: columns by header name, Timestamp (seconds), Model (optional, becomes the
// request's model), Request tokens, Response tokens (0 for a failed request: one token is
// replayed); others ignored. Arrivals start at 0, times time_scale; each prompt is unique.
absl::StatusOr<std::vector<ReplayRequest>> LoadBurstGptTrace(const std::string& path, double time_scale = 1.0);

// A trace file's format, as `eppctl replay --trace-format` and pyepp.replay(trace_format=) name it.
enum class TraceFormat { kAuto, kMooncake, kOpenAI, kAzure, kBurstGpt };
// "auto", "mooncake", "openai", "azure" or "burstgpt"; kInvalidArgument otherwise.
absl::StatusOr<TraceFormat> ParseTraceFormat(std::string_view name);
// From the first non-blank line: a CSV header with ContextTokens (Azure) or "Request tokens"
// (BurstGPT); a JSON object with `hash_ids` (Mooncake); else OpenAI captures (a first line that
// is not JSON is left for the loader to report). kNotFound when unreadable.
absl::StatusOr<TraceFormat> DetectTraceFormat(const std::string& path);
// The loader of `format`, the format detected when kAuto.
absl::StatusOr<std::vector<ReplayRequest>> LoadReplayTrace(const std::string& path, TraceFormat format = TraceFormat::kAuto,
                                                           double time_scale = 1.0);

// Arrival times made for a trace (`eppctl replay --trace F --rate QPS [--arrivals constant]`):
// a trace of captured requests without timestamps (as `eppctl pick` reads them), or any trace at
// another rate. Poisson (exponential gaps, seeded) or constant spacing, from 0.
struct TraceArrivals {
  double rate = 0;  // requests per second, > 0
  bool poisson = true;
  uint64_t seed = 0;
};
// Replaces every request's arrival time, in the order given. kInvalidArgument for a bad rate.
absl::Status AssignArrivals(std::vector<ReplayRequest>& trace, const TraceArrivals& arrivals);
// LoadReplayTrace with `arrivals`' times (then time_scale): OpenAI lines may lack "timestamp" /
// "arrival_s" (their file order is kept; a time a line has is ignored); other formats are loaded
// as usual, then re-timed in their order.
absl::StatusOr<std::vector<ReplayRequest>> LoadReplayTrace(const std::string& path, TraceFormat format, double time_scale,
                                                           const TraceArrivals& arrivals);

// A routing policy: a name and a configuration.
struct ReplayPolicy {
  std::string name;
  EppConfig config;
};
// Named baselines: round-robin, random, least-queue, gie-default (queue 2, kv 2, prefix 3),
// gie-precise (the same weights, prefix from the servers' KV events), gie-precise-speculative
// (and llm-d's speculativeIndexing),
// sglang-cache-aware (SGLang's defaults), least-inflight (token-load). kNotFound listing them.
absl::StatusOr<ReplayPolicy> NamedReplayPolicy(std::string_view name);
std::vector<std::string> NamedReplayPolicies();

// One policy as `eppctl replay --policy` and pyepp.replay take it (`index` is its 0-based place
// in the list): a named baseline; EndpointPickerConfig YAML text (text with a line break, a
// leading '{' or ": "), named "policyN" and sourced "policies[i]"; else a config file (an
// existing file, or a name ending in .yaml, .yml or .json), named after its stem. Anything else
// is kNotFound listing the named baselines.
absl::StatusOr<ReplayPolicy> ResolveReplayPolicy(std::string_view spec, size_t index);
// Policies with one name would be indistinguishable in a report: repeats become NAME#2, NAME#3,
// ... in list order.
void MakePolicyNamesUnique(std::vector<ReplayPolicy>& policies);

struct ReplayOptions {
  int servers = 8;
  SimParams server;                     // one profile for every server
  std::vector<SimParams> per_server;    // optional: one per server (overrides `server`)
  int64_t scrape_interval_us = 50000;   // --refresh-metrics-interval
  uint64_t seed = 0;
  int timeline_buckets = 40;            // points of the hit-rate-over-time series
  std::function<void(double fraction)> progress;  // called now and then with work done in [0, 1]
  // A disaggregated pool (llm-d P/D): when either is > 0 the pool has prefill_servers +
  // decode_servers servers (overriding `servers`), the first ones labelled llm-d.ai/role=prefill,
  // the others decode. Policies with several profiles (a disagg-profile-handler) run on it; every
  // other policy runs on the same number of servers unlabelled (the aggregated pool), so both
  // use the same hardware. A request the policy disaggregates (x-prefiller-host-port) runs as a
  // prefill request (one output token) on the prefill server, then, after the KV transfer (the
  // tokens the decode server does not hold x kv_bytes_per_token over kv_link_gbytes_per_s), as a
  // decode request without prefill compute for those tokens on the decode server.
  int prefill_servers = 0;
  int decode_servers = 0;
  double kv_link_gbytes_per_s = 25;
  int64_t kv_bytes_per_token = 131072;
  // Independent EPP replicas behind the gateway, requests spread round robin: each learns only
  // the picks it made (approximate prefix) but every server's KV events (precise prefix).
  int epp_replicas = 1;
  // The replicas share state (eppctl serve --shared-state): each one's approximate-prefix updates
  // reach the others' indexes, and each one's in-flight counts are added to the others' picks,
  // shared_state_delay_us after they happened (serve's staleness: about twice its interval plus
  // a round trip). Without it each replica knows only its own picks.
  bool shared_state = false;
  int64_t shared_state_delay_us = 100000;
  // A policy with a precise-prefix-cache-producer: its servers publish KV events, which reach
  // the replicas' indexes this long after the cache changed.
  int64_t kv_event_delay_us = 0;
};

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;
};

struct ReplayTraceInfo {
  int64_t requests = 0;
  int64_t blocks = 0;         // 16-token prompt blocks (the simulator's block size)
  int64_t prompt_tokens = 0;
  double duration_s = 0;      // last arrival - first arrival
  double upper_bound_block_hit_rate = 0;         // one infinite cache
  double pooled_cache_bound_block_hit_rate = 0;  // one LRU as large as all servers together
  // The zero-queue TTFT bound: each request alone on the fastest server with an infinite cache
  // (every block an earlier request of the trace sent is cached), i.e. the cost model's first
  // step for it: decode_step_ms + decode_ms_per_seq + uncached tokens / prefill_tokens_per_s.
  // No policy on these servers can beat it for any request. Zero without server parameters.
  Percentiles ttft_bound_s;
  std::vector<double> ttft_bound_samples_s;  // at most 2000, evenly subsampled, sorted
};

// Something in a policy's run that a table of averages hides.
struct ReplayFlag {
  std::string code;     // idle-servers, hot-servers, starvation, hit-rate-gap
  std::string message;  // one line, with the figures
};

// One priority band's or one tenant's share of a policy's run (ReplayPolicyReport::bands, tenants).
struct ReplayGroupReport {
  std::string name;        // the band's priority, or the tenant's fairness id ("" : no tenant)
  int64_t requests = 0;    // arrived
  int64_t completed = 0;
  int64_t dropped = 0;     // answered 429/503 before reaching a server (shed, or dropped by flow control)
  Percentiles ttft_s;      // from arrival at the EPP: includes the time queued in flow control
  Percentiles wait_s;      // time in the flow-control layer, of the requests it dispatched
  // Requests dispatched to a server while the trace was still arriving, per second of its arrival
  // span: the service the group got while everyone competed.
  double served_rps = 0;
  double demand_rps = 0;   // requests arrived per second of the arrival span
};

struct ReplayPolicyReport {
  std::string name;
  int64_t completed = 0;
  int64_t failed = 0;         // never admitted (too large for a server's KV cache)
  int64_t shed = 0;           // 429 / 503 before a server: the scheduler's, or the flow-control layer's
  // Flow control (the policy's featureGates has flowControl and the replay runs its layer): requests
  // wait in the EPP while the pool is saturated and dispatch as capacity frees, in virtual time.
  bool flow_control = false;
  Percentiles flow_wait_s;                // time in the layer, of the requests it dispatched
  std::map<std::string, int64_t> drops;   // shed requests by x-llm-d-request-dropped-reason
  // Per priority band (highest first) when the trace has more than one priority or the policy runs
  // flow control; per tenant when the trace names tenants.
  std::vector<ReplayGroupReport> bands;
  std::vector<ReplayGroupReport> tenants;
  // Jain's fairness index over tenants of served_rps / (max-min fair share of the served total,
  // given each tenant's demand): 1 when every tenant got its fair share; NaN (JSON null) with
  // fewer than two tenants.
  double jain_fairness = 0;
  // SLOs (requests that carry one): the share of those with a TTFT SLO that met it (TTFT from the
  // arrival at the EPP), of those with a TPOT SLO that met it (TPOT: (finish - first token) /
  // (output tokens - 1); a one-token answer meets any), and of those with either that met every
  // SLO they carry; a request dropped or failed meets none. NaN (JSON null) when no request has
  // that kind. goodput_rps: requests meeting all their SLOs per second, over throughput_rps's span.
  int64_t slo_requests = 0;
  double slo_ttft_attainment = 0;
  double slo_tpot_attainment = 0;
  double slo_attainment = 0;
  double goodput_rps = 0;
  double block_hit_rate = 0;
  double token_hit_rate = 0;
  Percentiles ttft_s, e2e_s, queue_s;
  // ttft_s's p50, p90, p99 and mean each divided by the trace's TTFT bound's (0 without a bound).
  Percentiles ttft_over_bound;
  Percentiles itl_s;          // inter-token latency: (finish - first token) / (output tokens - 1)
  bool disaggregated_pool = false;  // ran on the P/D pool (ReplayOptions::prefill_servers > 0)
  bool precise = false;             // its prefix producer read the servers' KV events
  int64_t disaggregated = 0;        // requests whose prefill ran on a prefill server
  double kv_transfer_s_mean = 0;    // over those
  std::vector<std::string> server_roles;  // per server: "prefill", "decode" or "" (aggregated)
  double throughput_rps = 0;
  double load_max_over_mean = 0;   // requests per server, max / mean
  double prediction_error_rate = 0;  // NaN (JSON null) for a policy without a prefix producer
  std::vector<int64_t> requests_per_server;
  std::vector<double> kv_usage_mean_per_server;  // mean over scrapes
  std::vector<double> ttft_samples_s;            // at most 2000, evenly subsampled, sorted
  std::vector<double> hit_rate_timeline;         // block hit rate per arrival-time bucket
  // Pathologies found in this run (docs/routing.md): servers that got no request or more than
  // twice the mean, a server left without requests for two or more consecutive timeline buckets
  // while the pool averaged at least 4 requests per server in each, a block hit rate below half
  // of another policy's.
  std::vector<ReplayFlag> flags;
  double wall_s = 0;                             // real time this policy took to replay
};

struct ReplayReport {
  ReplayTraceInfo trace;
  std::vector<ReplayPolicyReport> policies;
};

// A pool of mixed speeds (different GPUs): `servers` copies of `base`, server i at
// speeds[i % speeds.size()], i.e. prefill_tokens_per_s x speed and decode_step_ms,
// decode_ms_per_seq / speed (ReplayOptions::per_server). kInvalidArgument for an empty list or a
// speed that is not in (0, 100].
absl::StatusOr<std::vector<SimParams>> MixedSpeedServers(const SimParams& base, int servers, const std::vector<double>& speeds);
// "1,1,0.5" (`eppctl replay --server-speed`); kInvalidArgument naming the bad item.
absl::StatusOr<std::vector<double>> ParseServerSpeeds(std::string_view text);

// Replays `trace` (sorted by arrival) once per policy. kInvalidArgument for bad options or
// server parameters, or a policy whose config does not build.
absl::StatusOr<ReplayReport> RunReplay(const std::vector<ReplayRequest>& trace, const std::vector<ReplayPolicy>& policies,
                                       const ReplayOptions& options);
// The bounds alone (also part of RunReplay's report): the block hit-rate bounds, and with
// `servers` (their parameters; the fastest counts for each request) the TTFT bound.
ReplayTraceInfo AnalyzeTrace(const std::vector<ReplayRequest>& trace, int64_t pooled_capacity_blocks, int block_size_tokens = 16,
                             const std::vector<SimParams>& servers = {});

// ---- Multi-region replay (docs/routing.md, "Several regions") -----------------------------------
//
// Regions of simulated servers, a symmetric RTT matrix and one trace whose requests arrive in
// the region their `region` names, or when they name none, in a region drawn by share; replayed
// three ways with the same local policy (any ReplayPolicy):
//   global        one request-level EPP in `global_region` over every server: each request pays
//                 the callout RTT(origin, EPP), it sees a remote server's metrics as they were
//                 one RTT(EPP, server's region) earlier, and a pick outside the origin region adds
//                 RTT(origin, server's region) to the time to first token;
//   hierarchical  in every region a region-level EPP (capacity-filter, region-spillover-filter,
//                 region-rtt-scorer, queue and KV scorers over the regions' pools, remote pool
//                 averages one RTT late, each pool's capacity_rps) picks a region, then that
//                 region's own EPP (the local policy, fresh metrics) picks the server;
//   local         every region's own EPP; when all of its servers are saturated (queue >=
//                 saturation_queue or KV >= saturation_kv) a request overflows to the nearest
//                 region by RTT, blindly (no remote metrics).
// Network time is added to TTFT and E2E; the servers see each request at its arrival (their queue
// order ignores network delays, a documented simplification). Deterministic for a seed.
struct ReplayRegion {
  std::string name;            // lower-case letters, digits and '-' (a label value)
  int servers = 4;
  double arrival_share = 1;    // relative share of the trace's requests arriving here (> 0 total)
  double capacity_rps = 0;     // hierarchical: the pool's ceiling in each region-level EPP (0: none)
};
struct MultiRegionOptions {
  std::vector<ReplayRegion> regions;                  // at least 2
  std::map<std::pair<std::string, std::string>, double> rtt_ms;  // symmetric; same region 0
  SimParams server;                                   // every server
  int64_t scrape_interval_us = 50000;
  uint64_t seed = 0;
  std::string global_region;                          // empty: the first region
  double saturation_queue = 5;                        // region-spillover-filter's and local overflow's
  double saturation_kv = 0.8;
};
struct MultiRegionModeReport {
  std::string mode;  // global, hierarchical, local
  int64_t completed = 0, shed = 0, failed = 0;
  Percentiles ttft_s, e2e_s;                 // network time included
  double block_hit_rate = 0;
  double cross_region_share = 0;             // served outside the arrival region
  std::vector<int64_t> arrivals_per_region;  // regions' order
  std::vector<int64_t> served_per_region;
  std::vector<double> ttft_p90_per_origin_s;  // by arrival region
  double load_max_over_mean = 0;             // requests per server
  double wall_s = 0;
};
struct MultiRegionReport {
  std::string policy;                 // the local policy's name
  std::vector<ReplayRegion> regions;
  std::vector<MultiRegionModeReport> modes;  // global, hierarchical, local
  int64_t arrivals_from_trace = 0;    // requests whose region the trace named (the rest: by share)
};
// kInvalidArgument for fewer than two regions, a bad name or share, an unknown or negative RTT, a
// request naming a region that is not one of `regions`, or a policy that does not build.
absl::StatusOr<MultiRegionReport> RunMultiRegionReplay(const std::vector<ReplayRequest>& trace, const ReplayPolicy& policy,
                                                       const MultiRegionOptions& options);
// "us-east:4:0.5:120,us-west:4:0.5" (NAME:SERVERS[:SHARE[:CAPACITY_RPS]]) and
// "us-east/us-west=65,..." (A/B=MS); kInvalidArgument naming the bad item.
absl::StatusOr<std::vector<ReplayRegion>> ParseReplayRegions(std::string_view text);
absl::StatusOr<std::map<std::pair<std::string, std::string>, double>> ParseRttMatrix(std::string_view text);
std::string MultiRegionReportToJson(const MultiRegionReport& report, int indent = 2);
std::string MultiRegionReportToText(const MultiRegionReport& report);

// JSON as documented in docs/routing.md.
std::string ReplayReportToJson(const ReplayReport& report, int indent = 2);
// A table for terminals.
std::string ReplayReportToText(const ReplayReport& report);
// A self-contained HTML page (`eppctl replay --report`): the results table and inline SVG charts
// (TTFT distribution, block hit rate over time against the two bounds, requests and KV usage per
// server), drawn without scripts or external resources so it opens offline. Every text from the
// report (policy names, `title`) is HTML-escaped.
std::string ReplayReportToHtml(const ReplayReport& report, const std::string& title);

}  // namespace epp
