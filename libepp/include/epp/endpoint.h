// Endpoints and their metrics snapshot.
//
// EndpointMetrics is what the Model Server Protocol gives an Endpoint Picker about one model
// server: queue length, running requests, KV-cache utilization, LoRA adapters and the KV cache
// geometry. A field is std::nullopt when the server did not expose it (or it failed validation);
// consumers must treat "unknown" differently from zero. Snapshots are plain values, safe to copy
// and to read from many threads.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace epp {

// LoRA adapter state from a `vllm:lora_requests_info`-style metric, and, where the server has it,
// vLLM's residency metric `vllm:lora_adapter_loaded{adapter_name,level,pinned}` (one series per
// loaded adapter, present even when the adapter has no request in flight).
struct LoraInfo {
  int64_t max_lora = 0;               // adapters that fit in one batch (label max_lora); 0: unknown
  std::vector<std::string> running;   // adapters with requests running (running_lora_adapters)
  std::vector<std::string> waiting;   // adapters with requests waiting (waiting_lora_adapters)
  std::vector<std::string> loaded;      // resident in GPU memory (lora_adapter_loaded level="gpu")
  std::vector<std::string> loaded_cpu;  // held in CPU memory (level="cpu"): quick to bring back
  bool operator==(const LoraInfo&) const = default;

  // Adapter slots in use: the distinct adapters of running, waiting and loaded. vLLM lists an
  // adapter with both running and waiting requests in both lists, so adding their sizes counts
  // it twice (llm-d #2605): with a1,a2 in both and max_lora 4 the sum says full, the union 2.
  int64_t SlotsInUse() const;
  // The adapter serves now: it has running requests or is resident on the GPU.
  bool Active(std::string_view adapter) const;
};

struct EndpointMetrics {
  std::optional<double> waiting_queue_size;  // requests queued, >= 0
  std::optional<double> running_requests;    // requests in the running batch, >= 0
  std::optional<double> kv_cache_usage;      // fraction of KV cache in use, in [0, 1]
  std::optional<LoraInfo> lora;
  std::optional<int64_t> cache_block_size;   // tokens per KV block
  std::optional<int64_t> cache_num_blocks;   // KV blocks on the accelerator
  // Scalar attributes an engine mapping's customMetrics read (llm-d's core-metrics-extractor),
  // (attribute key, value) in the mapping's order; endpoint-attribute-filter/-scorer use them.
  std::vector<std::pair<std::string, double>> custom;
  bool operator==(const EndpointMetrics&) const = default;

  // The value of custom attribute `key`, or nullopt.
  std::optional<double> Custom(std::string_view key) const {
    for (const auto& [k, v] : custom)
      if (k == key) return v;
    return std::nullopt;
  }
};

// A model the server lists at /v1/models (llm-d's models-data-extractor): a base model, or a LoRA
// adapter with the base model it runs on as `parent`.
struct ServedModel {
  std::string id;
  std::string parent;  // empty for a base model
  bool operator==(const ServedModel&) const = default;
};

// What the data layer's other sources read about an endpoint beside its Model Server Protocol
// metrics (llm-d's endpoint attributes): scalars such as dcgm-extractor's GPUUtilization, and the
// models /v1/models lists. A source's read replaces the values it produced before; a failed read
// keeps them (as llm-d's extractors leave an attribute in place when they fail) and records why.
struct EndpointAttributes {
  struct Value {
    std::string key;       // "GPUUtilization", "llm-d.ai/multicluster-queue-size"
    std::string producer;  // the extractor plugin's name
    std::string source;    // the data source plugin's name
    double value = 0;
    bool operator==(const Value&) const = default;
  };
  std::vector<Value> values;
  std::optional<std::vector<ServedModel>> models;  // nullopt: no models source has read it
  std::string models_source;                       // the data source that read `models`
  // (source name, its last error), for sources whose last read failed.
  std::vector<std::pair<std::string, std::string>> errors;
  bool operator==(const EndpointAttributes&) const = default;

  // The value of `key`, from `producer` when it is not empty; nullopt when absent.
  std::optional<double> Find(std::string_view key, std::string_view producer = {}) const {
    for (const Value& v : values)
      if (v.key == key && (producer.empty() || v.producer == producer)) return v.value;
    return std::nullopt;
  }
  // True when the endpoint serves `model` (a base model or an adapter); nullopt when unknown.
  std::optional<bool> Serves(std::string_view model) const {
    if (!models) return std::nullopt;
    for (const ServedModel& m : *models)
      if (m.id == model) return true;
    return false;
  }
};

// A configured ceiling on what the scheduler sends to one endpoint (endpoints file `capacity:`),
// for endpoints that are whole pools behind a gateway (a region-level EPP, docs/multicluster.md).
// capacity-filter keeps picks within it over a sliding window; capacity-scorer prefers headroom.
// Absent fields are unlimited.
struct EndpointCapacity {
  std::optional<double> requests_per_second;  // picks per second, > 0
  std::optional<double> tokens_per_second;    // prompt tokens (the request's estimate) per second, > 0
  bool limited() const { return requests_per_second.has_value() || tokens_per_second.has_value(); }
  bool operator==(const EndpointCapacity&) const = default;
};

// One model server as the scheduler sees it: its address (the identity the gateway receives in
// x-gateway-destination-endpoint), its labels (label-selector-filter, P/D roles), the engine its
// metrics follow, and the latest metrics snapshot with the time it was taken.
struct Endpoint {
  std::string address;                        // "ip:port"
  std::map<std::string, std::string> labels;
  std::string engine;                         // "vllm", "sglang", ...; empty when unknown
  EndpointMetrics metrics;
  // Clock time (microseconds, see plugin.h) of the scrape that produced `metrics`; nullopt when
  // the endpoint has never been scraped successfully (its metrics count as stale).
  std::optional<int64_t> metrics_time_us;
  std::string metrics_error;                  // last scrape or extraction error; empty when fine
  // The last scrape of the endpoint's own address was refused (IsConnectionRefused): nothing
  // listens there, the server is gone. The scheduler passes such endpoints over while any other
  // candidate remains (a metrics port blocked for the whole pool must not make everything 503);
  // the next successful scrape clears it. A slow or timing-out server is not unreachable: its
  // metrics age into staleness instead.
  bool unreachable = false;
  EndpointCapacity capacity;  // from the endpoints file; unlimited by default
  // Read by the config's data-layer sources (dataLayer.sources: dcgm-data-source, models-data-source,
  // multicluster-metrics-data-source); empty without them.
  EndpointAttributes attributes;
  // Extra age its metrics may reach before they count as stale (endpoints file
  // `metricsStalenessAllowance`): a server scraped across regions (Endpoint Mode of a
  // multi-cluster pool) is read one RTT late and less often. Added to every staleness threshold.
  int64_t metrics_staleness_allowance_us = 0;
};

// Checks what a scrape cannot produce but a hand-written snapshot can (pyepp, tests): every
// count finite and >= 0, kv_cache_usage a fraction in [0, 1] (not a percentage), cache geometry
// and max_lora >= 0, adapter names non-empty. The error names the field:
//   "metrics.kv_cache_usage: must be in [0, 1], got 44"
absl::Status ValidateEndpointMetrics(const EndpointMetrics& metrics);

// Metrics age, the one convention. Endpoint::metrics_time_us is a time on the scheduler's clock:
// what Pick compares with its clock. Code that shares no clock with the scheduler (pyepp's
// Endpoint, a test's fixture) holds it *relative* instead: 0 = read at the moment of the pick,
// -5'000'000 = five seconds before it. ShiftMetricsTimes(endpoints, now) turns relative times into
// clock times, ShiftMetricsTimes(endpoints, -now) the reverse; absent times stay absent.
void ShiftMetricsTimes(std::span<Endpoint> endpoints, int64_t delta_us);

// Microseconds since the metrics were read; nullopt when never read. Negative when the time is
// ahead of `now_us` (a clock that moved back); callers treat that as fresh.
inline std::optional<int64_t> MetricsAgeMicros(const Endpoint& e, int64_t now_us) {
  if (!e.metrics_time_us) return std::nullopt;
  return now_us - *e.metrics_time_us;
}

// True when the metrics were never read or are older than `staleness_us` plus the endpoint's
// own allowance.
inline bool MetricsStale(const Endpoint& e, int64_t now_us, int64_t staleness_us) {
  return !e.metrics_time_us.has_value() || now_us - *e.metrics_time_us > staleness_us + e.metrics_staleness_allowance_us;
}

}  // namespace epp
