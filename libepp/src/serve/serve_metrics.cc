#include "serve/serve_metrics.h"

#include <map>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "epp/version.h"
#include "common/os_error.h"
#include "metrics/exposition.h"

namespace epp::internal {
namespace {

// Serve's samples are integers where they count (exactly) and doubles otherwise.
std::string Num(double v) { return FormatNumber(v, NumberStyle::kShortest); }

// The steps of RenderServeMetrics, one per group of families, in the order they are exposed
// (docs/serve.md lists them; tests compare the text). Each only appends to `x`.

void WriteBuildInfo(Exposition& x) {
  x.Family("epp_info", "gauge", "Build information of this eppctl serve.");
  x.Sample("epp_info", {{"version", EPP_VERSION_STRING}}, int64_t{1});
}

// Requests decided, by the HTTP status the ext_proc answer carries.
void WriteRequestOutcomes(Exposition& x, const ExtProcStats& s) {
  x.Family("epp_requests_total", "counter",
           "Requests decided, by outcome: 200 picked, 400 bad request, 413 body too large, 429 shed, 503 no endpoint, "
           "500 internal.");
  const std::pair<const char*, int64_t> outcomes[] = {{"200", s.outcome_200.load()}, {"400", s.outcome_400.load()},
                                                      {"413", s.outcome_413.load()}, {"429", s.outcome_429.load()},
                                                      {"503", s.outcome_503.load()}, {"500", s.outcome_500.load()}};
  for (const auto& [name, value] : outcomes) x.Sample("epp_requests_total", {{"outcome", name}}, value);
}

// ExtProcStats keeps per-bucket counts; Prometheus wants them cumulative, +Inf last.
void WritePickLatency(Exposition& x, const ExtProcStats& s) {
  x.Family("epp_pick_duration_seconds", "histogram", "Time to decide a request: parse, schedule and encode.");
  int64_t cumulative = 0;
  for (size_t i = 0; i < ExtProcStats::kLatencyBuckets; ++i) {
    cumulative += s.latency_count[i].load();
    x.Sample("epp_pick_duration_seconds_bucket", {{"le", Num(ExtProcStats::kLatencyBucketsUs[i] / 1e6)}},
             cumulative);
  }
  cumulative += s.latency_count[ExtProcStats::kLatencyBuckets].load();
  x.Sample("epp_pick_duration_seconds_bucket", {{"le", "+Inf"}}, cumulative);
  x.Sample("epp_pick_duration_seconds_sum", {}, static_cast<double>(s.latency_sum_us.load()) / 1e6);
  x.Sample("epp_pick_duration_seconds_count", {}, cumulative);
}

// The ext_proc streams and what their responses told us (served endpoint, usage).
void WriteStreamCounters(Exposition& x, const ExtProcStats& s) {
  x.Single("epp_streams_active", "gauge", "ext_proc streams open now.", s.streams_active.load());
  x.Single("epp_streams_total", "counter", "ext_proc streams opened since start.", s.streams_total.load());
  x.Single("epp_requests_in_flight", "gauge", "Requests picked whose response has not finished.",
           s.requests_in_flight.load());
  x.Single("epp_served_mismatch_total", "counter",
           "Responses whose served endpoint (envoy.lb metadata) differed from the primary pick.",
           s.served_mismatch.load());
  x.Single("epp_capture_bytes_total", "counter", "Bytes written to --capture files.", s.capture_bytes.load());
  x.Single("epp_capture_truncated_total", "counter",
           "--capture files cut short because --capture-max-bytes was spent.", s.capture_truncated.load());
  x.Single("epp_stripped_control_headers_total", "counter",
           "Sidecar control headers (x-prefiller-host-port, x-encoder-hosts-ports, x-data-parallel-host-port) a client "
           "sent and the EPP removed before forwarding.",
           s.stripped_control_headers.load());
  x.Single("epp_untrusted_headers_ignored_total", "counter",
           "Objective and model-rewrite headers a request carried that the EPP ignored "
           "(--trust-objective-header=false, --trust-model-rewrite-header=false).",
           s.untrusted_headers_ignored.load());
  x.Family("epp_stream_timeouts_total", "counter",
           "ext_proc streams ended for a time limit: phase request (body not ended within "
           "--stream-request-timeout) or idle (no message within --stream-idle-timeout after the pick).");
  x.Sample("epp_stream_timeouts_total", {{"phase", "request"}}, s.timeouts_request.load());
  x.Sample("epp_stream_timeouts_total", {{"phase", "idle"}}, s.timeouts_idle.load());
  x.Family("epp_response_tokens_total", "counter", "Tokens reported by the usage of model-server responses.");
  x.Sample("epp_response_tokens_total", {{"kind", "prompt"}}, s.prompt_tokens.load());
  x.Sample("epp_response_tokens_total", {{"kind", "completion"}}, s.completion_tokens.load());
  x.Sample("epp_response_tokens_total", {{"kind", "cached"}}, s.cached_tokens.load());
}

// The ext_proc port's memory budgets (--max-buffered-request-bytes, --max-streams).
void WriteBudgets(Exposition& x, const ExtProcStats& s, const BufferBudget& b) {
  x.Single("epp_buffered_bytes", "gauge",
           "Bytes ext_proc streams hold buffered now (request bodies until their pick, kept response parts).",
           static_cast<int64_t>(b.used()));
  x.Single("epp_buffered_bytes_peak", "gauge", "The most bytes ext_proc streams held buffered at once since start.",
           static_cast<int64_t>(b.peak()));
  x.Single("epp_buffered_bytes_limit", "gauge", "--max-buffered-request-bytes (0: no limit).",
           static_cast<int64_t>(b.limit()));
  x.Family("epp_budget_rejections_total", "counter",
           "Requests answered 429 for a memory budget: reason buffer (their body did not fit "
           "--max-buffered-request-bytes) or streams (opened past --max-streams).");
  x.Sample("epp_budget_rejections_total", {{"reason", "buffer"}}, s.budget_rejected.load());
  x.Sample("epp_budget_rejections_total", {{"reason", "streams"}}, s.streams_refused.load());
  x.Single("epp_request_body_bytes_total", "counter", "Request body bytes received on ext_proc streams.",
           s.request_body_bytes.load());
  x.Single("epp_memory_trims_total", "counter",
           "Times the ext_proc server handed freed memory back to the system after large bodies (malloc_trim).",
           s.memory_trims.load());
  x.Single("epp_memory_trim_seconds_total", "counter", "Time those hand-backs took.",
           static_cast<double>(s.memory_trim_us.load()) / 1e6);
  x.Single("epp_budget_response_dropped_total", "counter",
           "Responses whose body the EPP stopped keeping (their usage uncounted) because the buffer budget was spent.",
           s.budget_response_dropped.load());
}

// KV events (precise prefix): the index's size and each endpoint's subscription health. Only
// called with a precise prefix producer configured (src.kv_index set).
void WriteKvEventMetrics(Exposition& x, const ServeMetricsSources& src) {
  x.Single("epp_kv_index_blocks", "gauge", "Block keys in the precise prefix index (from KV events).", src.kv_index->blocks);
  x.Single("epp_kv_index_holders", "gauge", "(block, endpoint, medium) entries in the precise prefix index.",
           src.kv_index->holders);
  x.Single("epp_kv_index_bytes", "gauge", "Estimated memory of the precise prefix index.", src.kv_index->approx_bytes);
  x.Single("epp_kv_index_evicted_total", "counter", "Blocks dropped from the index for its size bound.",
           src.kv_index->evicted);
  x.Single("epp_kv_index_speculative", "gauge", "Speculative entries (speculativeIndexing) not yet confirmed.",
           src.kv_index->speculative);
  x.Single("epp_kv_index_speculative_confirmed_total", "counter",
           "Speculative entries the engine's events confirmed.", src.kv_index->speculative_confirmed);
  x.Single("epp_kv_index_speculative_expired_total", "counter",
           "Speculative entries dropped at speculativeTTL unconfirmed.", src.kv_index->speculative_expired);
  x.Single("epp_kv_index_engine_hashes", "gauge",
           "Engine block hashes the precise prefix index keeps as names (one per holder, plus aliases).",
           src.kv_index->engine_hashes);
  x.Single("epp_kv_index_engine_hash_aliases", "gauge",
           "Of those, older names of blocks stored again under another hash (at most maxEngineHashAliases per endpoint).",
           src.kv_index->engine_hash_aliases);
  x.Single("epp_kv_index_engine_hash_aliases_dropped_total", "counter",
           "Aliases forgotten, oldest first, for maxEngineHashAliases.", src.kv_index->engine_hash_aliases_dropped);
  if (src.kv_central) {
    x.Family("epp_kv_central_dropped_total", "counter",
             "Messages on the central KV-event socket (zmqEndpoint) dropped before the index: reason unknown_endpoint "
             "(the topic names no pool endpoint), peer_mismatch (sent from another IP address than the endpoint's), "
             "peer_unverifiable (no sender address, or the endpoint's host did not resolve).");
    x.Sample("epp_kv_central_dropped_total", {{"reason", "unknown_endpoint"}}, src.kv_central->unknown_endpoint);
    x.Sample("epp_kv_central_dropped_total", {{"reason", "peer_mismatch"}}, src.kv_central->peer_mismatch);
    x.Sample("epp_kv_central_dropped_total", {{"reason", "peer_unverifiable"}}, src.kv_central->peer_unverifiable);
  }
  x.Family("epp_endpoint_kv_blocks", "gauge", "Blocks the endpoint holds according to its KV events.");
  for (const KvEndpointSummary& h : src.kv_holdings)
    x.Sample("epp_endpoint_kv_blocks", {{"endpoint", h.endpoint}}, h.blocks);
  struct Counter {
    const char* name;
    const char* help;
    int64_t KvEndpointStats::*field;
  };
  const Counter counters[] = {
      {"epp_endpoint_kv_batches_total", "KV-event batches applied.", &KvEndpointStats::batches},
      {"epp_endpoint_kv_events_total", "KV events in applied batches.", &KvEndpointStats::events},
      {"epp_endpoint_kv_malformed_total", "KV-event messages or payloads skipped as malformed.", &KvEndpointStats::malformed},
      {"epp_endpoint_kv_skipped_events_total", "KV events the index skipped (unknown parent, token count).",
       &KvEndpointStats::skipped_events},
      {"epp_endpoint_kv_gaps_total", "Sequence gaps in the endpoint's KV-event stream.", &KvEndpointStats::gaps},
      {"epp_endpoint_kv_replays_total", "Replays of missed KV-event batches completed.", &KvEndpointStats::replays},
      {"epp_endpoint_kv_replay_failures_total", "Replays that failed.", &KvEndpointStats::replay_failures},
      {"epp_endpoint_kv_resets_total", "Times the endpoint's index entries were dropped (gap, restart, clear).",
       &KvEndpointStats::resets},
      {"epp_endpoint_kv_peer_rejected_total",
       "Central-socket messages naming the endpoint that were dropped because their sender was not it.",
       &KvEndpointStats::peer_rejected},
      {"epp_endpoint_kv_sequence_rejected_total",
       "KV-event batches dropped because their sequence did not continue the engine's stream (not confirmed by its "
       "replay socket or by the batch after them).",
       &KvEndpointStats::seq_rejected},
      {"epp_endpoint_kv_removed_unknown_total", "BlockRemoved hashes the index did not know (never stored, evicted, "
       "or forgotten).", &KvEndpointStats::removed_unknown},
  };
  for (const Counter& c : counters) {
    x.Family(c.name, "counter", c.help);
    for (const KvEndpointStats& e : src.kv_endpoints) x.Sample(c.name, {{"endpoint", e.endpoint}}, e.*(c.field));
  }
  x.Family("epp_endpoint_kv_last_sequence", "gauge", "Last KV-event sequence number applied (-1: none).");
  for (const KvEndpointStats& e : src.kv_endpoints) x.Sample("epp_endpoint_kv_last_sequence", {{"endpoint", e.endpoint}}, e.last_seq);
  x.Family("epp_endpoint_kv_lag_seconds", "gauge",
           "Arrival time of the last KV-event batch minus its timestamp (clock skew included).");
  for (const KvEndpointStats& e : src.kv_endpoints)
    if (e.last_event_unix_us > 0) x.Sample("epp_endpoint_kv_lag_seconds", {{"endpoint", e.endpoint}}, e.last_lag_s);
}

// Token producers (a tokenizer plugin configured); nothing without one.
void WriteTokenizerMetrics(Exposition& x, const std::vector<TokenizerCounters>& tokenizers) {
  if (tokenizers.empty()) return;
  x.Family("epp_tokenizer_requests_total", "counter", "Requests a token-producer tokenized.");
  for (const TokenizerCounters& t : tokenizers)
    x.Sample("epp_tokenizer_requests_total", {{"plugin", t.plugin}, {"backend", t.backend}}, t.requests);
  x.Family("epp_tokenizer_calls_total", "counter", "Requests sent to the model server to render and tokenize.");
  for (const TokenizerCounters& t : tokenizers) x.Sample("epp_tokenizer_calls_total", {{"plugin", t.plugin}}, t.calls);
  x.Family("epp_tokenizer_cache_hits_total", "counter", "Requests answered from the cache of earlier answers.");
  for (const TokenizerCounters& t : tokenizers)
    x.Sample("epp_tokenizer_cache_hits_total", {{"plugin", t.plugin}}, t.cache_hits);
  x.Family("epp_tokenizer_fallbacks_total", "counter",
           "Requests whose tokens were estimated because the model server could not be asked or did not answer.");
  for (const TokenizerCounters& t : tokenizers)
    for (const auto& [reason, n] : t.fallbacks)
      x.Sample("epp_tokenizer_fallbacks_total", {{"plugin", t.plugin}, {"reason", reason}}, n);
  x.Family("epp_tokenizer_cache_tokens", "gauge", "Token ids held in the answer cache.");
  for (const TokenizerCounters& t : tokenizers)
    x.Sample("epp_tokenizer_cache_tokens", {{"plugin", t.plugin}}, t.cache_tokens);
}

// Metrics the plugins export themselves (MetricsSource): one family per name, in the order
// names first appear, each with the first sample's type and help.
void WritePluginMetrics(Exposition& x, const std::vector<PluginMetric>& samples) {
  std::vector<std::string_view> names;
  for (const PluginMetric& m : samples)
    if (std::find(names.begin(), names.end(), m.name) == names.end()) names.push_back(m.name);
  for (std::string_view name : names) {
    bool first = true;
    for (const PluginMetric& m : samples) {
      if (m.name != name) continue;
      if (first) x.Family(m.name, m.type, m.help);
      first = false;
      Labels labels(m.labels.begin(), m.labels.end());
      if (m.type == "histogram")
        x.Histogram(m.name, labels, m.bounds, m.cumulative, m.count, m.sum);
      else
        x.Sample(m.name, labels, m.value);
    }
  }
}

// The approximate prefix cache: the index's size and the pool-wide hit ratio of picked requests.
void WritePrefixCacheMetrics(Exposition& x, const ExtProcStats& s, int64_t prefix_entries) {
  const int64_t blocks = s.prefix_blocks.load(), matched = s.prefix_match_blocks.load();
  x.Single("epp_prefix_index_entries", "gauge", "Entries in the prefix-cache index.", prefix_entries);
  x.Single("epp_prefix_blocks_total", "counter", "Prompt blocks hashed over picked requests.", blocks);
  x.Single("epp_prefix_match_blocks_total", "counter", "Of those, blocks the index placed on the picked endpoint.",
           matched);
  x.Single("epp_prefix_hit_ratio", "gauge",
           "epp_prefix_match_blocks_total / epp_prefix_blocks_total (0 before any block).",
           blocks > 0 ? static_cast<double>(matched) / static_cast<double>(blocks) : 0.0);
}

// The pool as a whole: its size, the scrape loop, and the reloads of endpoints and configuration.
void WritePoolCounters(Exposition& x, const ServeMetricsSources& src, const std::vector<Endpoint>& pool,
                       const EndpointPoolCounters& counters) {
  x.Single("epp_endpoints", "gauge", "Endpoints in the pool.", static_cast<int64_t>(pool.size()));
  x.Single("epp_scrape_cycles_total", "counter",
           "Scrape intervals completed (every endpoint is scraped once per interval, at its own phase).",
           counters.scrape_cycles);
  x.Single("epp_scrape_duration_seconds", "gauge",
           "Longest time from a scrape falling due to its metrics being applied, over the last completed interval.",
           counters.last_scrape_seconds);
  x.Single("epp_scrape_reads_total", "counter", "Endpoint scrapes finished (read or failed).", counters.scrape_reads);
  x.Single("epp_scrape_overruns_total", "counter",
           "Scrape slots skipped because the endpoint's previous scrape was still running.", counters.scrape_overruns);
  x.Family("epp_endpoints_reloads_total", "counter",
           "Endpoint set changes installed (endpoints file re-read or pool discovery changed), by result.");
  x.Sample("epp_endpoints_reloads_total", {{"result", "ok"}}, counters.reloads_ok);
  x.Sample("epp_endpoints_reloads_total", {{"result", "error"}}, counters.reloads_failed);
  x.Family("epp_pool_discovery_total", "counter",
           "Reads of the InferencePool and its Pods (--pool-name), by result; an error keeps the set in use.");
  x.Sample("epp_pool_discovery_total", {{"result", "ok"}}, counters.discovery_ok);
  x.Sample("epp_pool_discovery_total", {{"result", "error"}}, counters.discovery_errors);
  if (counters.watch) {
    // Discovery by watch: how much it asks of the API server (lists should stay at one per
    // collection while watches work) and how it fares.
    const KubeWatchStats& w = *counters.watch;
    x.Single("epp_kube_watch_synced", "gauge", "1 once every watched collection has been listed.", int64_t{w.synced});
    x.Single("epp_kube_lists_total", "counter", "LIST requests answered (InferencePool and Pods).", w.lists);
    x.Single("epp_kube_watches_total", "counter", "WATCH requests started.", w.watches);
    x.Single("epp_kube_watch_events_total", "counter", "ADDED, MODIFIED and DELETED events handled.", w.events);
    x.Single("epp_kube_watch_bookmarks_total", "counter", "BOOKMARK events received.", w.bookmarks);
    x.Single("epp_kube_watch_relists_total", "counter",
             "Lists made because a watch's resourceVersion had expired (410 Gone).", w.relists_gone);
    x.Single("epp_kube_watch_errors_total", "counter",
             "Failed list or watch requests and broken watch streams (each retried with backoff).", w.errors);
  }
  x.Family("epp_config_reloads_total", "counter",
           "Configuration file changes acted on, by result (error: the running scheduler was kept).");
  x.Sample("epp_config_reloads_total", {{"result", "ok"}}, src.config_reloads.ok);
  x.Sample("epp_config_reloads_total", {{"result", "error"}}, src.config_reloads.failed);
  x.Family("epp_config_reload_error", "gauge",
           "1 with the error of the last configuration reload while it failed; absent after a success.");
  if (!src.config_reloads.last_error.empty())
    x.Sample("epp_config_reload_error", {{"error", src.config_reloads.last_error}}, int64_t{1});
}

// What the EPP last read from each endpoint and how fresh that is; a value never read is left out.
void WriteEndpointGauges(Exposition& x, const ServeMetricsSources& src, const std::vector<Endpoint>& pool,
                         const EndpointPoolCounters& counters, int64_t now_us) {
  auto per_endpoint = [&](const char* name, const char* type, const char* help, auto value_of) {
    x.Family(name, type, help);
    for (const Endpoint& e : pool) {
      std::optional<double> v = value_of(e);
      if (v) x.Sample(name, {{"endpoint", e.address}}, *v);
    }
  };
  per_endpoint("epp_endpoint_waiting_queue_size", "gauge", "Requests queued on the endpoint, as last read.",
               [](const Endpoint& e) { return e.metrics.waiting_queue_size; });
  per_endpoint("epp_endpoint_running_requests", "gauge", "Requests in the endpoint's running batch, as last read.",
               [](const Endpoint& e) { return e.metrics.running_requests; });
  per_endpoint("epp_endpoint_kv_cache_usage", "gauge", "Fraction of the endpoint's KV cache in use, as last read.",
               [](const Endpoint& e) { return e.metrics.kv_cache_usage; });
  per_endpoint("epp_endpoint_metrics_age_seconds", "gauge", "Age of the endpoint's last metrics (absent: never read).",
               [&](const Endpoint& e) -> std::optional<double> {
                 const std::optional<int64_t> age = MetricsAgeMicros(e, now_us);
                 if (!age) return std::nullopt;
                 return static_cast<double>(*age) / 1e6;
               });
  per_endpoint("epp_endpoint_metrics_fresh", "gauge",
               "1 when the endpoint's metrics are younger than --metrics-staleness-threshold.",
               [&](const Endpoint& e) -> std::optional<double> {
                 return MetricsStale(e, now_us, src.staleness_us) ? 0.0 : 1.0;
               });
  per_endpoint("epp_endpoint_unreachable", "gauge",
               "1 when the endpoint's last scrape was refused (the server is gone): picks pass it over.",
               [&](const Endpoint& e) -> std::optional<double> { return e.unreachable ? 1.0 : 0.0; });
  x.Family("epp_endpoint_scrape_errors_total", "counter", "Metrics reads of the endpoint that failed.");
  for (const Endpoint& e : pool) {
    auto it = counters.scrape_errors.find(e.address);
    x.Sample("epp_endpoint_scrape_errors_total", {{"endpoint", e.address}},
             it == counters.scrape_errors.end() ? 0 : it->second);
  }
}

// Picks per endpoint and their prefix blocks (a per-endpoint hit rate); every endpoint of the
// pool has a sample, 0 before its first pick.
void WriteEndpointPickCounters(Exposition& x, const ServeMetricsSources& src, const std::vector<Endpoint>& pool) {
  const std::map<std::string, ExtProcStats::EndpointPicks> picks =
      src.stats ? src.stats->PicksByEndpoint() : std::map<std::string, ExtProcStats::EndpointPicks>{};
  const struct {
    const char* name;
    const char* help;
    int64_t ExtProcStats::EndpointPicks::*field;
  } pick_counters[] = {
      {"epp_endpoint_picks_total", "Requests picked with the endpoint as the primary destination.",
       &ExtProcStats::EndpointPicks::picks},
      {"epp_endpoint_prefix_blocks_total", "Prompt blocks hashed for the requests picked for the endpoint.",
       &ExtProcStats::EndpointPicks::prefix_blocks},
      {"epp_endpoint_prefix_match_blocks_total", "Of those, blocks the prefix index placed on the endpoint.",
       &ExtProcStats::EndpointPicks::prefix_match_blocks},
      {"epp_endpoint_unreachable_skips_total", "Picks that passed the endpoint over because its last scrape was refused.",
       &ExtProcStats::EndpointPicks::unreachable_skips},
  };
  for (const auto& c : pick_counters) {
    x.Family(c.name, "counter", c.help);
    for (const Endpoint& e : pool) {
      auto it = picks.find(e.address);
      x.Sample(c.name, {{"endpoint", e.address}}, it == picks.end() ? int64_t{0} : it->second.*(c.field));
    }
  }
}

// The scheduler's own in-flight load per endpoint (what its load-aware scorers read), read once
// per endpoint so the requests and tokens families agree.
void WriteSharedState(Exposition& x, const SharedStateStats& s) {
  x.Single("epp_shared_state_up", "gauge",
           "1 while the last round with the shared-state Redis succeeded; 0: this replica routes on its own state.",
           int64_t{s.up});
  x.Single("epp_shared_state_rounds_total", "counter", "Successful round trips with the shared-state Redis.", s.rounds);
  x.Single("epp_shared_state_errors_total", "counter",
           "Failed connects or round trips with the shared-state Redis (each one falls back to local state).", s.errors);
  x.Single("epp_shared_state_reconnects_total", "counter", "Connections to the shared-state Redis made again after a failure.",
           s.reconnects);
  x.Single("epp_shared_state_prefix_published_total", "counter", "Prefix-index updates this replica sent.", s.published);
  x.Single("epp_shared_state_prefix_applied_total", "counter",
           "Other replicas' prefix-index updates added to this replica's index.", s.applied);
  x.Single("epp_shared_state_prefix_dropped_total", "counter",
           "Prefix-index updates lost: the queue was full while Redis was slow or down, or Redis refused them.", s.dropped);
  x.Single("epp_shared_state_replicas", "gauge", "Replicas whose in-flight counts are live in Redis, this one included.",
           s.replicas);
  x.Single("epp_shared_state_remote_inflight_requests", "gauge",
           "In-flight requests of the other replicas that this replica's picks count.", s.remote_requests);
  x.Single("epp_shared_state_round_seconds", "gauge", "Duration of the last successful round trip.",
           s.last_round_seconds);
}

void WriteEndpointInflight(Exposition& x, const Scheduler& scheduler, const std::vector<Endpoint>& pool) {
  x.Family("epp_endpoint_inflight_requests", "gauge", "Requests picked for the endpoint and not finished.");
  std::vector<std::pair<int64_t, int64_t>> inflight;
  for (const Endpoint& e : pool) inflight.push_back(scheduler.Inflight(e.address));
  for (size_t i = 0; i < pool.size(); ++i)
    x.Sample("epp_endpoint_inflight_requests", {{"endpoint", pool[i].address}}, inflight[i].first);
  x.Family("epp_endpoint_inflight_tokens", "gauge", "Estimated tokens of those requests (input + expected output).");
  for (size_t i = 0; i < pool.size(); ++i)
    x.Sample("epp_endpoint_inflight_tokens", {{"endpoint", pool[i].address}}, inflight[i].second);
}

// GIE-compatible names (gie-epp.md section 6.3), for existing dashboards, and llm-d Router's
// names for the same pool averages.
void WriteGiePoolGauges(Exposition& x, const ServeMetricsSources& src, const std::vector<Endpoint>& pool,
                        int64_t prefix_entries, int64_t now_us) {
  const Labels name{{"name", src.pool_name}};
  x.Single("inference_extension_prefix_indexer_size", "gauge", "Entries in the prefix-cache index (GIE name).",
           prefix_entries);
  // Averages over endpoints with fresh metrics, as GIE computes them; ready = those endpoints
  // (GIE counts the pods whose metrics are fresh). A region-level EPP reads these (engine epp).
  double q = 0, r = 0, kv = 0;
  int nq = 0, nr = 0, nkv = 0;
  int64_t ready = 0;
  for (const Endpoint& e : pool) {
    if (MetricsStale(e, now_us, src.staleness_us) || e.unreachable) continue;
    ++ready;
    if (e.metrics.waiting_queue_size) q += *e.metrics.waiting_queue_size, ++nq;
    if (e.metrics.running_requests) r += *e.metrics.running_requests, ++nr;
    if (e.metrics.kv_cache_usage) kv += *e.metrics.kv_cache_usage, ++nkv;
  }
  const struct {
    const char* name;
    const char* help;
    double value;
  } pool_gauges[] = {
      {"inference_pool_ready_pods", "Endpoints with fresh metrics (GIE name).", static_cast<double>(ready)},
      {"inference_pool_average_queue_size", "Mean waiting queue over endpoints with fresh metrics (GIE name).",
       nq ? q / nq : 0.0},
      {"inference_pool_average_running_requests", "Mean running requests over endpoints with fresh metrics (GIE name).",
       nr ? r / nr : 0.0},
      {"inference_pool_average_kv_cache_utilization", "Mean KV-cache use over endpoints with fresh metrics (GIE name).",
       nkv ? kv / nkv : 0.0},
      {"llm_d_epp_ready_endpoints", "Endpoints with fresh metrics (llm-d name).", static_cast<double>(ready)},
      {"llm_d_epp_average_queue_size", "Mean waiting queue over endpoints with fresh metrics (llm-d name).",
       nq ? q / nq : 0.0},
      {"llm_d_epp_average_kv_cache_utilization", "Mean KV-cache use over endpoints with fresh metrics (llm-d name).",
       nkv ? kv / nkv : 0.0},
  };
  for (const auto& g : pool_gauges) {
    x.Family(g.name, "gauge", g.help);
    x.Sample(g.name, name, g.value);
  }
  x.Family("inference_pool_per_pod_queue_size", "gauge", "Waiting queue per endpoint with fresh metrics (GIE name).");
  for (const Endpoint& e : pool) {
    if (MetricsStale(e, now_us, src.staleness_us) || !e.metrics.waiting_queue_size) continue;
    x.Sample("inference_pool_per_pod_queue_size", {{"name", src.pool_name}, {"model_server_pod", e.address}},
             *e.metrics.waiting_queue_size);
  }
}

// Scheduler timings (GIE names): the whole cycle, and every plugin call per extension point.
void WriteSchedulerTimings(Exposition& x, const Scheduler& scheduler) {
  const DurationHistogram cycle = scheduler.CycleTiming();
  x.Family("inference_extension_scheduler_e2e_duration_seconds", "histogram",
           "End-to-end scheduling latency distribution in seconds (one scheduling cycle, without parsing).");
  x.Histogram("inference_extension_scheduler_e2e_duration_seconds", {}, kTimingBucketBoundsSeconds, cycle.bucket_counts,
              cycle.count, cycle.sum_seconds);
  x.Family("inference_extension_plugin_duration_seconds", "histogram",
           "Plugin processing latency distribution in seconds for each extension point, plugin type and plugin name.");
  for (const PluginTiming& t : scheduler.PluginTimings())
    x.Histogram("inference_extension_plugin_duration_seconds",
                {{"extension_point", t.extension_point}, {"plugin_type", t.plugin_type}, {"plugin_name", t.plugin_name}},
                kTimingBucketBoundsSeconds, t.bucket_counts, t.count, t.sum_seconds);
}

}  // namespace

// The pool and its counters are read once up front, so every endpoint family of one scrape
// describes the same endpoint set.
// GIE's request metrics under their names and labels (pkg/epp/metrics: inference_objective_*,
// model_name = the model asked for, target_model_name = the one sent after a rewrite), so GIE's
// Grafana dashboard and the KEDA guides read epp unchanged; and the rewrite decisions.
void WriteGieRequestMetrics(Exposition& x, const ExtProcStats& s) {
  const auto models = s.ModelFiguresByModel();
  auto labels = [](const std::pair<std::string, std::string>& k) {
    return Labels{{"model_name", k.first}, {"target_model_name", k.second}};
  };
  x.Family("inference_objective_request_total", "counter",
           "Counter of inference objective requests broken out for each model and target model.");
  for (const auto& [k, f] : models)
    for (const auto& [priority, n] : f.requests) {
      Labels l = labels(k);
      l.emplace_back("priority", std::to_string(priority));
      x.Sample("inference_objective_request_total", l, n);
    }
  x.Family("inference_objective_request_error_total", "counter",
           "Counter of inference objective requests errors broken out for each model and target model.");
  for (const auto& [k, f] : models)
    for (const auto& [code, n] : f.errors) {
      Labels l = labels(k);
      l.emplace_back("error_code", code);
      x.Sample("inference_objective_request_error_total", l, n);
    }
  x.Family("inference_objective_running_requests", "gauge",
           "Inference objective number of running requests in each model.");
  std::map<std::string, int64_t> running;
  for (const auto& [k, f] : models) running[k.first] += f.running;
  for (const auto& [model, n] : running) x.Sample("inference_objective_running_requests", {{"model_name", model}}, n);
  const struct {
    const char* name;
    const char* help;
    ExtProcStats::Histogram ExtProcStats::ModelFigures::*field;
  } histograms[] = {
      {"inference_objective_request_duration_seconds", "Inference objective response latency distribution in seconds.",
       &ExtProcStats::ModelFigures::duration},
      {"inference_objective_request_sizes", "Inference objective requests size distribution in bytes.",
       &ExtProcStats::ModelFigures::request_bytes},
      {"inference_objective_response_sizes", "Inference objective responses size distribution in bytes.",
       &ExtProcStats::ModelFigures::response_bytes},
      {"inference_objective_input_tokens", "Inference objective input token count distribution.",
       &ExtProcStats::ModelFigures::input_tokens},
      {"inference_objective_output_tokens", "Inference objective output token count distribution.",
       &ExtProcStats::ModelFigures::output_tokens},
      {"inference_objective_prompt_cached_tokens", "Inference objective prompt cached token count distribution.",
       &ExtProcStats::ModelFigures::cached_tokens},
      {"inference_objective_request_ttft_seconds", "Inference objective time to first token distribution in seconds.",
       &ExtProcStats::ModelFigures::ttft},
      {"inference_objective_request_tpot_seconds", "Inference objective time per output token distribution in seconds.",
       &ExtProcStats::ModelFigures::tpot},
      {"inference_objective_normalized_time_per_output_token_seconds",
       "Inference objective latency divided by number of output tokens in seconds.",
       &ExtProcStats::ModelFigures::ntpot},
  };
  for (const auto& h : histograms) {
    x.Family(h.name, "histogram", h.help);
    for (const auto& [k, f] : models) {
      const ExtProcStats::Histogram& hist = f.*(h.field);
      if (hist.count == 0) continue;
      std::vector<uint64_t> cumulative;
      uint64_t acc = 0;
      for (size_t i = 0; i + 1 < hist.counts.size(); ++i) cumulative.push_back(acc += static_cast<uint64_t>(hist.counts[i]));
      x.Histogram(h.name, labels(k), *hist.bounds, cumulative, static_cast<uint64_t>(hist.count), hist.sum);
    }
  }
  x.Family("inference_extension_model_rewrite_decisions_total", "counter",
           "Model rewrites made, by InferenceModelRewrite, asked model and chosen target.");
  for (const auto& [k, n] : s.Rewrites())
    x.Sample("inference_extension_model_rewrite_decisions_total",
             {{"model_rewrite_name", std::get<0>(k)}, {"model_name", std::get<1>(k)}, {"target_model", std::get<2>(k)}}, n);
}

// Leader election: controller-runtime's gauge (what dashboards built for the reference query) and
// epp's counters of how leadership moved.
void WriteLeaderElection(Exposition& x, const ServeMetricsSources& src) {
  const LeaderElectionStats& l = *src.leader;
  x.Family("leader_election_master_status", "gauge",
           "1 while this replica holds the leader Lease `name`, else 0 (controller-runtime's name).");
  x.Sample("leader_election_master_status", {{"name", src.lease_name}}, int64_t{l.leading});
  x.Single("epp_leader_acquired_total", "counter", "Times this replica became the leader.", l.acquired);
  x.Single("epp_leader_lost_total", "counter",
           "Times this replica stopped leading because it could not renew within the renew deadline.", l.lost);
  x.Single("epp_leader_lease_failures_total", "counter",
           "Lease reads and writes that failed (409 conflicts with another candidate included).", l.attempts_failed);
}

namespace {

// llm-d Router's flow-control metrics (pkg/epp/metrics, llm_d_epp_flow_control_*), from the
// layer's snapshot. The reference also labels the queue gauges and the queue-duration histogram
// by model_name / target_model_name, and the histogram by fairness_id and priority; the layer
// keeps these figures per flow and band (gauges) and per outcome (histogram) only, so those
// labels are absent (the sums a dashboard takes over them are the same).
void WriteFlowControl(Exposition& x, const ServeMetricsSources& src) {
  const flowcontrol::ControllerStats& fc = *src.flow_control;
  const std::string& pool = src.pool_name;
  x.Family("llm_d_epp_flow_control_queue_size", "gauge", "Requests held in the flow-control queues.");
  for (const flowcontrol::FlowStats& f : fc.flows)
    x.Sample("llm_d_epp_flow_control_queue_size",
             {{"fairness_id", f.flow_id}, {"priority", std::to_string(f.priority)}, {"inference_pool", pool}},
             static_cast<int64_t>(f.queued));
  x.Family("llm_d_epp_flow_control_queue_bytes", "gauge", "Bytes of the requests held in the flow-control queues.");
  for (const flowcontrol::FlowStats& f : fc.flows)
    x.Sample("llm_d_epp_flow_control_queue_bytes",
             {{"fairness_id", f.flow_id}, {"priority", std::to_string(f.priority)}, {"inference_pool", pool}},
             static_cast<int64_t>(f.bytes));
  x.Family("llm_d_epp_flow_control_pool_saturation", "gauge",
           "Pool saturation gating dispatch (effective: the worse of the prefill and decode stages; 1 is the set point).");
  x.Sample("llm_d_epp_flow_control_pool_saturation", {{"inference_pool", pool}, {"stage", "effective"}},
           fc.pool.saturation);
  if (fc.pool.prefill >= 0)
    x.Sample("llm_d_epp_flow_control_pool_saturation", {{"inference_pool", pool}, {"stage", "prefill"}}, fc.pool.prefill);
  if (fc.pool.decode >= 0)
    x.Sample("llm_d_epp_flow_control_pool_saturation", {{"inference_pool", pool}, {"stage", "decode"}}, fc.pool.decode);
  auto ratio = [](uint64_t used, uint64_t cap) { return cap == 0 ? 0.0 : static_cast<double>(used) / static_cast<double>(cap); };
  x.Family("llm_d_epp_flow_control_capacity_utilization_requests", "gauge",
           "Fraction of a priority band's request capacity occupied.");
  for (const flowcontrol::BandStats& b : fc.bands)
    x.Sample("llm_d_epp_flow_control_capacity_utilization_requests",
             {{"priority", std::to_string(b.priority)}, {"inference_pool", pool}}, ratio(b.queued, b.max_requests));
  x.Family("llm_d_epp_flow_control_capacity_utilization_bytes", "gauge",
           "Fraction of a priority band's byte capacity occupied.");
  for (const flowcontrol::BandStats& b : fc.bands)
    x.Sample("llm_d_epp_flow_control_capacity_utilization_bytes",
             {{"priority", std::to_string(b.priority)}, {"inference_pool", pool}}, ratio(b.bytes, b.max_bytes));
  if (fc.max_requests > 0) {
    x.Family("llm_d_epp_flow_control_global_capacity_utilization_requests", "gauge",
             "Fraction of the global request capacity occupied.");
    x.Sample("llm_d_epp_flow_control_global_capacity_utilization_requests", {{"inference_pool", pool}},
             ratio(fc.queued, fc.max_requests));
  }
  if (fc.max_bytes > 0) {
    x.Family("llm_d_epp_flow_control_global_capacity_utilization_bytes", "gauge",
             "Fraction of the global byte capacity occupied.");
    x.Sample("llm_d_epp_flow_control_global_capacity_utilization_bytes", {{"inference_pool", pool}},
             ratio(fc.bytes, fc.max_bytes));
  }
  x.Family("llm_d_epp_flow_control_requests_total", "counter",
           "Requests the flow-control layer finished, by outcome (Dispatched, RejectedCapacity, EvictedTTL, ...).");
  for (const flowcontrol::BandStats& b : fc.bands)
    for (size_t i = 0; i < flowcontrol::kNumOutcomes; ++i)
      if (b.outcomes[i] > 0)
        x.Sample("llm_d_epp_flow_control_requests_total",
                 {{"outcome", std::string(flowcontrol::OutcomeName(static_cast<flowcontrol::Outcome>(i)))},
                  {"priority", std::to_string(b.priority)},
                  {"inference_pool", pool}},
                 static_cast<int64_t>(b.outcomes[i]));
  x.Family("llm_d_epp_flow_control_request_queue_duration_seconds", "histogram",
           "Time requests spend in the flow-control layer, from enqueue to outcome.");
  for (size_t i = 0; i < flowcontrol::kNumOutcomes; ++i) {
    const flowcontrol::WaitHistogram& h = fc.waits[i];
    if (h.count == 0) continue;
    std::vector<uint64_t> cumulative;
    uint64_t acc = 0;
    for (size_t b = 0; b < fc.wait_bounds_s.size() && b < h.buckets.size(); ++b) cumulative.push_back(acc += h.buckets[b]);
    x.Histogram("llm_d_epp_flow_control_request_queue_duration_seconds",
                {{"outcome", std::string(flowcontrol::OutcomeName(static_cast<flowcontrol::Outcome>(i)))},
                 {"inference_pool", pool}},
                fc.wait_bounds_s, cumulative, h.count, h.sum_s);
  }
  if (!fc.eviction) return;
  // In-flight eviction (enableEviction), llm-d's revocation metrics.
  const flowcontrol::EvictionStats& e = *fc.eviction;
  x.Family("llm_d_epp_flow_control_revocations_issued_total", "counter",
           "In-flight eviction revocations issued, by the demand band's priority.");
  for (const auto& [priority, n] : e.issued)
    x.Sample("llm_d_epp_flow_control_revocations_issued_total",
             {{"priority", std::to_string(priority)}, {"inference_pool", pool}}, static_cast<int64_t>(n));
  x.Family("llm_d_epp_flow_control_revocations_total", "counter",
           "In-flight eviction revocations that ended, by outcome (confirmed, timed_out).");
  x.Sample("llm_d_epp_flow_control_revocations_total", {{"outcome", "confirmed"}, {"inference_pool", pool}},
           static_cast<int64_t>(e.confirmed));
  x.Sample("llm_d_epp_flow_control_revocations_total", {{"outcome", "timed_out"}, {"inference_pool", pool}},
           static_cast<int64_t>(e.timed_out));
  x.Family("llm_d_epp_flow_control_reclaim_target", "gauge", "The last reclamation decision's deficit (saturation units).");
  x.Sample("llm_d_epp_flow_control_reclaim_target", {{"inference_pool", pool}}, e.reclaim_target);
  x.Family("llm_d_epp_flow_control_pending_reclaim", "gauge", "Capacity debited for revocations not yet reclaimed.");
  x.Sample("llm_d_epp_flow_control_pending_reclaim", {{"inference_pool", pool}}, e.pending_reclaim);
  if (e.confirmation_count > 0) {
    x.Family("llm_d_epp_flow_control_revocation_confirmation_seconds", "histogram",
             "Time from a revocation to the end of the evicted request's stream.");
    std::vector<uint64_t> cumulative;
    uint64_t acc = 0;
    for (size_t b = 0; b < e.confirmation_bounds_s.size(); ++b) cumulative.push_back(acc += e.confirmation_buckets[b]);
    x.Histogram("llm_d_epp_flow_control_revocation_confirmation_seconds", {{"inference_pool", pool}}, e.confirmation_bounds_s,
                cumulative, e.confirmation_count, e.confirmation_sum_s);
  }
}

// The metrics port's own HTTP server (serve/admin_http.h): its connections and what it refused.
void WriteMetricsHttp(Exposition& x, const AdminHttpStats& h) {
  x.Single("epp_metrics_http_connections_total", "counter", "Connections accepted on the metrics port.",
           h.connections.load());
  x.Single("epp_metrics_http_connections_open", "gauge", "Connections open on the metrics port.",
           h.connections_open.load());
  x.Single("epp_metrics_http_requests_total", "counter", "Answers the metrics port sent or began (every status).",
           h.requests.load());
  x.Family("epp_metrics_http_rejected_total", "counter",
           "Requests the metrics port refused and connections it closed for a limit, by reason.");
  const std::pair<const char*, int64_t> reasons[] = {
      {"bad_request", h.bad_request.load()},       {"method", h.method.load()},
      {"body", h.body.load()},                     {"header_too_large", h.header_too_large.load()},
      {"too_many_headers", h.too_many_headers.load()}, {"header_timeout", h.header_timeout.load()},
      {"write_timeout", h.write_timeout.load()},   {"connection_cap", h.connection_cap.load()},
      {"evicted", h.evicted.load()},               {"response_budget", h.response_budget.load()}};
  for (const auto& [reason, n] : reasons) x.Sample("epp_metrics_http_rejected_total", {{"reason", reason}}, n);
  x.Single("epp_metrics_http_idle_closed_total", "counter",
           "Keep-alive connections the metrics port closed after its idle timeout.", h.idle_closed.load());
}

}  // namespace

std::string RenderServeMetrics(const ServeMetricsSources& src, int64_t now_us) {
  Exposition x;
  const ExtProcStats& s = *src.stats;
  std::shared_ptr<const std::vector<Endpoint>> pool = src.endpoints->Snapshot();
  const EndpointPoolCounters pc = src.pool ? src.pool->counters() : EndpointPoolCounters{};

  WriteBuildInfo(x);
  WriteRequestOutcomes(x, s);
  WritePickLatency(x, s);
  WriteStreamCounters(x, s);
  if (src.buffer_budget) WriteBudgets(x, s, *src.buffer_budget);
  if (src.tls_reloads) {
    x.Family("epp_tls_reloads_total", "counter",
             "Changed ext_proc certificate or client-CA files: result applied (in use for new connections) or "
             "failed (unreadable or invalid; the previous material stays).");
    x.Sample("epp_tls_reloads_total", {{"result", "applied"}}, src.tls_reloads->first);
    x.Sample("epp_tls_reloads_total", {{"result", "failed"}}, src.tls_reloads->second);
  }
  if (src.kv_index) WriteKvEventMetrics(x, src);
  WriteTokenizerMetrics(x, src.scheduler->Tokenizers());
  WritePluginMetrics(x, src.scheduler->PluginMetrics());
  const int64_t prefix_entries = static_cast<int64_t>(src.scheduler->PrefixIndexEntries());
  WritePrefixCacheMetrics(x, s, prefix_entries);
  WritePoolCounters(x, src, *pool, pc);
  WriteEndpointGauges(x, src, *pool, pc, now_us);
  WriteEndpointPickCounters(x, src, *pool);
  WriteEndpointInflight(x, *src.scheduler, *pool);
  WriteGiePoolGauges(x, src, *pool, prefix_entries, now_us);
  WriteSchedulerTimings(x, *src.scheduler);
  WriteGieRequestMetrics(x, s);
  if (src.leader) WriteLeaderElection(x, src);
  if (src.flow_control) WriteFlowControl(x, src);
  if (src.tracing) {
    const TracerStats& t = *src.tracing;
    x.Single("epp_tracing_traces_sampled_total", "counter", "Requests whose spans were recorded (sampled).",
             static_cast<int64_t>(t.traces_sampled));
    x.Single("epp_tracing_spans_exported_total", "counter", "Spans the OTLP receiver accepted.",
             static_cast<int64_t>(t.spans_exported));
    x.Single("epp_tracing_spans_dropped_total", "counter",
             "Spans lost: the export queue was full, or their export failed.", static_cast<int64_t>(t.spans_dropped));
    x.Single("epp_tracing_export_failures_total", "counter", "OTLP export calls that failed.",
             static_cast<int64_t>(t.export_failures));
  }
  if (src.shared_state) WriteSharedState(x, *src.shared_state);
  if (src.kv_redis) {
    const KvRedisStats& k = *src.kv_redis;
    x.Single("epp_kv_redis_up", "gauge", "1 while the precise index's copy in Redis (redisConfig) is written.", int64_t{k.up});
    x.Single("epp_kv_redis_loaded_holders", "gauge", "Holders the precise index restored from Redis at start.", k.loaded);
    x.Single("epp_kv_redis_written_total", "counter", "Index changes written to Redis (HSET or HDEL).", k.written);
    x.Single("epp_kv_redis_dropped_total", "counter", "Index changes dropped from a full queue while Redis was away.",
             k.dropped);
    x.Single("epp_kv_redis_errors_total", "counter", "Failed connects or rounds with the index's Redis.", k.errors);
  }
  if (src.metrics_http) WriteMetricsHttp(x, *src.metrics_http);
  if (src.policy_watch) {
    const KubeWatchStats& w = *src.policy_watch;
    x.Single("epp_kube_policy_watch_synced", "gauge",
             "1 once the InferenceObjective and InferenceModelRewrite collections of both groups have been listed.",
             int64_t{w.synced});
    x.Single("epp_kube_policy_watch_events_total", "counter",
             "InferenceObjective and InferenceModelRewrite events handled.", w.events);
    x.Single("epp_kube_policy_watch_errors_total", "counter",
             "Failed lists or watches of InferenceObjectives and InferenceModelRewrites (a group whose CRDs are "
             "missing counts here, retried with backoff).",
             w.errors);
  }
  return x.Take();
}

struct MetricsHttpServer::Impl {
  std::unique_ptr<AdminHttpServer> http;
};

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MetricsHttpServer::~MetricsHttpServer() { Stop(); }
int MetricsHttpServer::port() const { return impl_->http->port(); }
const AdminHttpStats& MetricsHttpServer::stats() const { return impl_->http->stats(); }

int ServeDecisions(const DecisionLog& log, const std::map<std::string, std::string>& query, std::string* body) {
  auto number = [&](const char* key, uint64_t fallback, uint64_t* out) -> bool {
    auto it = query.find(key);
    if (it == query.end() || it->second.empty()) {
      *out = fallback;
      return true;
    }
    const char* end = it->second.data() + it->second.size();
    auto [p, ec] = std::from_chars(it->second.data(), end, *out);
    return ec == std::errc() && p == end;
  };
  uint64_t id = 0, limit = 0, after = 0;
  for (const auto& [key, fallback, out] : {std::tuple{"id", uint64_t{0}, &id}, std::tuple{"limit", uint64_t{50}, &limit},
                                           std::tuple{"after", uint64_t{0}, &after}}) {
    if (!number(key, fallback, out)) {
      *body = std::string("{\"error\": \"") + key + ": expected a whole number\"}\n";
      return 400;
    }
  }
  if (id > 0) {
    std::optional<std::string> d = log.DecisionJson(id);
    if (!d) {
      *body = "{\"error\": \"decision " + std::to_string(id) + " is not (or no longer) in the log\"}\n";
      return 404;
    }
    *body = *d + "\n";
    return 200;
  }
  *body = log.ListJson(static_cast<size_t>(std::min<uint64_t>(limit, log.options().capacity)), after) + "\n";
  return 200;
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(const std::string& host, int port,
                                                                            std::function<std::string()> render,
                                                                            DebugHandler decisions,
                                                                            Authorize authorize,
                                                                            AdminHttpStats* stats) {
  AdminHttpServer::Handlers handlers;
  // On the loop: the probe's answer and unknown paths (no authorization asked, nothing rendered).
  handlers.on_loop = [](const AdminRequest& req, AdminResponse* res) {
    if (req.path == "/metrics" || req.path == "/debug/decisions") return false;
    if (req.path == "/healthz") {
      res->content_type = "text/plain";
      res->body = "ok";
    } else {
      res->status = 404;
    }
    return true;
  };
  // On a worker: --metrics-endpoint-auth (every path but /healthz answers only an authorized
  // scraper; a TokenReview may take a round trip to the API server), then the page.
  handlers.on_worker = [render = std::move(render), decisions = std::move(decisions),
                        authorize = std::move(authorize)](const AdminRequest& req) {
    AdminResponse res;
    if (authorize) {
      const auto [status, reason] = authorize(req.authorization, req.path);
      if (status != 200) {
        res.status = status;
        res.content_type = "text/plain";
        res.body = reason + "\n";
        return res;
      }
    }
    res.may_compress = true;
    if (req.path == "/metrics") {
      res.content_type = "text/plain; version=0.0.4; charset=utf-8";
      res.body = render();
      return res;
    }
    res.content_type = "application/json";
    if (!decisions) {
      res.status = 404;
      res.body = "{\"error\": \"the decision log is off: start eppctl serve with --decision-log N\"}\n";
      return res;
    }
    res.status = decisions(req.query, &res.body);
    return res;
  };
  AdminHttpOptions options;
  options.stats = stats;
  absl::StatusOr<std::unique_ptr<AdminHttpServer>> http = AdminHttpServer::Start(host, port, std::move(handlers), options);
  if (!http.ok()) {
    std::string why = internal::BindFailureSuffix(host, port);
    if (why.empty()) why = absl::StrCat(": ", http.status().message());
    return absl::UnavailableError(absl::StrCat("cannot listen for /metrics on ", host, ":", port, why));
  }
  auto impl = std::make_unique<Impl>();
  impl->http = *std::move(http);
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(std::move(impl)));
}

void MetricsHttpServer::Stop() {
  if (impl_ && impl_->http) impl_->http->Stop();
}

}  // namespace epp::internal
