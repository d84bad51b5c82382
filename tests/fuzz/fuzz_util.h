// Helpers shared by the fuzz targets (tests/fuzz/fuzz_<name>.cc): input splitting, invariant
// checks that crash (so libFuzzer reports them and the replay test fails), and the small fixed
// pool and scheduler the config and ext_proc targets schedule over.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "epp/config.h"
#include "epp/endpoint.h"
#include "epp/metrics.h"
#include "epp/plugin.h"
#include "epp/registry.h"
#include "epp/scheduler.h"

// An invariant of the code under test: a failure aborts (libFuzzer saves the input as a crash).
#define EPP_FUZZ_CHECK(cond, what)                                                                    \
  do {                                                                                                \
    if (!(cond)) {                                                                                    \
      std::fprintf(stderr, "fuzz invariant failed at %s:%d: %s: %s\n", __FILE__, __LINE__, #cond,     \
                   std::string(what).c_str());                                                        \
      std::abort();                                                                                   \
    }                                                                                                 \
  } while (0)

namespace epp::fuzz {

inline std::string_view Text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// `text` split at the first `separator`: the part before, and the part after (nullopt when the
// separator does not occur).
inline std::pair<std::string_view, std::optional<std::string_view>> SplitOnce(std::string_view text,
                                                                             std::string_view separator) {
  const size_t at = text.find(separator);
  if (at == std::string_view::npos) return {text, std::nullopt};
  return {text.substr(0, at), text.substr(at + separator.size())};
}

// Every part of `text` between occurrences of `separator`.
inline std::vector<std::string_view> SplitAll(std::string_view text, std::string_view separator) {
  std::vector<std::string_view> out;
  while (true) {
    auto [head, tail] = SplitOnce(text, separator);
    out.push_back(head);
    if (!tail) return out;
    text = *tail;
  }
}

// The first line of `text` (without its '\n') and the rest after it.
inline std::pair<std::string_view, std::string_view> FirstLine(std::string_view text) {
  auto [line, rest] = SplitOnce(text, "\n");
  return {line, rest.value_or(std::string_view())};
}

// The ranges metrics.h promises for extracted values (`what` names the mapping in a failure).
inline void CheckExtraction(const MetricsExtraction& x, const std::string& what) {
  const EndpointMetrics& m = x.metrics;
  if (m.waiting_queue_size)
    EPP_FUZZ_CHECK(std::isfinite(*m.waiting_queue_size) && *m.waiting_queue_size >= 0, what + ": queue");
  if (m.running_requests)
    EPP_FUZZ_CHECK(std::isfinite(*m.running_requests) && *m.running_requests >= 0, what + ": running");
  if (m.kv_cache_usage) EPP_FUZZ_CHECK(*m.kv_cache_usage >= 0 && *m.kv_cache_usage <= 1, what + ": kv");
  if (m.cache_block_size) EPP_FUZZ_CHECK(*m.cache_block_size > 0, what + ": block size");
  if (m.cache_num_blocks) EPP_FUZZ_CHECK(*m.cache_num_blocks > 0, what + ": blocks");
  if (m.lora) EPP_FUZZ_CHECK(m.lora->max_lora >= 0, what + ": max_lora");
  for (const CheckResult& c : x.checks) EPP_FUZZ_CHECK(!c.id.empty(), what + ": a check without an id");
}

inline constexpr int64_t kNowUs = 10'000'000;

// Four endpoints with everything a plugin may read: queue, running, KV, LoRA, cache geometry,
// llm-d role and other labels; one without metrics (stale), one saturated.
inline std::vector<Endpoint> Pool() {
  auto ep = [](std::string address, double queue, double running, double kv) {
    Endpoint e;
    e.address = std::move(address);
    e.engine = "vllm";
    e.metrics.waiting_queue_size = queue;
    e.metrics.running_requests = running;
    e.metrics.kv_cache_usage = kv;
    e.metrics.cache_block_size = 16;
    e.metrics.cache_num_blocks = 4096;
    e.metrics_time_us = kNowUs;
    return e;
  };
  std::vector<Endpoint> pool;
  pool.push_back(ep("10.0.0.1:8000", 0, 4, 0.2));
  pool.back().labels = {{"app", "llama"}, {"llm-d.ai/role", "decode"}, {"zone", "a"}};
  pool.back().metrics.lora = LoraInfo{2, {"sql-lora"}, {"chat-lora"}};
  pool.push_back(ep("10.0.0.2:8000", 3, 12, 0.75));
  pool.back().labels = {{"app", "llama"}, {"llm-d.ai/role", "prefill"}, {"zone", "b"}};
  pool.push_back(ep("10.0.0.3:8000", 40, 64, 0.99));  // saturated
  pool.back().labels = {{"app", "llama"}, {"llm-d.ai/role", "both"}};
  pool.back().metrics.lora = LoraInfo{1, {}, {}};
  Endpoint stale;
  stale.address = "[fd00::4]:8000";
  stale.metrics_error = "metrics.queue: no sample";
  pool.push_back(std::move(stale));
  return pool;
}

// A scheduler with the time and randomness the fuzz targets control (fresh per input, so an
// input's outcome does not depend on the inputs before it).
struct SchedulerEnv {
  ManualClock clock{kNowUs};
  SeededRng rng{1};
  std::unique_ptr<Scheduler> scheduler;

  // The scheduler of `config`, or the error BuildScheduler returns.
  absl::Status Build(const EppConfig& config) {
    static const PluginRegistry* const kRegistry = new PluginRegistry(BuiltinRegistry());
    absl::StatusOr<std::unique_ptr<Scheduler>> built = BuildScheduler(config, *kRegistry, PluginContext{&clock, &rng});
    if (!built.ok()) return built.status();
    scheduler = *std::move(built);
    return absl::OkStatus();
  }
};

}  // namespace epp::fuzz
