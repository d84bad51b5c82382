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
#include <string>
#include <vector>

namespace epp {

// LoRA adapter state from a `vllm:lora_requests_info`-style metric.
struct LoraInfo {
  int64_t max_lora = 0;               // adapters that fit in one batch (label max_lora)
  std::vector<std::string> running;   // adapters loaded and serving (running_lora_adapters)
  std::vector<std::string> waiting;   // adapters requested but not loaded (waiting_lora_adapters)
  bool operator==(const LoraInfo&) const = default;
};

struct EndpointMetrics {
  std::optional<double> waiting_queue_size;  // requests queued, >= 0
  std::optional<double> running_requests;    // requests in the running batch, >= 0
  std::optional<double> kv_cache_usage;      // fraction of KV cache in use, in [0, 1]
  std::optional<LoraInfo> lora;
  std::optional<int64_t> cache_block_size;   // tokens per KV block
  std::optional<int64_t> cache_num_blocks;   // KV blocks on the accelerator
  bool operator==(const EndpointMetrics&) const = default;
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
};

}  // namespace epp
