// Clock and Rng implementations.
#include <chrono>

#include "epp/plugin.h"

namespace epp {

int64_t SteadyClock::NowMicros() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

SteadyClock& SteadyClock::Get() {
  static SteadyClock clock;
  return clock;
}

uint64_t Rng::Below(uint64_t n) {
  // Lemire's multiply-shift with rejection: unbiased and one multiplication in the common case.
  uint64_t x = Next();
  __uint128_t m = static_cast<__uint128_t>(x) * n;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = -n % n;
    while (low < threshold) {
      x = Next();
      m = static_cast<__uint128_t>(x) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

uint64_t SeededRng::Next() {
  // SplitMix64 (Steele, Lea, Flood 2014): a full-period 64-bit stream, good enough for tie-breaks
  // and sampling, and trivially reproducible from the seed.
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::string_view PluginInputName(PluginInput input) {
  switch (input) {
    case PluginInput::kWaitingQueue: return "waiting_queue_size";
    case PluginInput::kRunningRequests: return "running_requests";
    case PluginInput::kKvCacheUsage: return "kv_cache_usage";
    case PluginInput::kLora: return "lora";
    case PluginInput::kCacheGeometry: return "cache_geometry";
    case PluginInput::kLabels: return "labels";
    case PluginInput::kInflightLoad: return "inflight_load";
    case PluginInput::kPrefixMatch: return "prefix_match";
    case PluginInput::kLatencyPrediction: return "latency_prediction";
  }
  return "?";
}

std::string PluginInputs::ToString() const {
  std::string out;
  for (PluginInput i : kAllPluginInputs)
    if (has(i)) out += (out.empty() ? "" : ", ") + std::string(PluginInputName(i));
  return out;
}

}  // namespace epp
