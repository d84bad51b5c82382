// epp_testing: what the C++ tests, benchmarks and fuzz targets share (the `epp_testing` CMake
// target). Endpoints with metrics, the fixture clock, and the shared captures folder.
//
//   ManualClock clock{testing::kNowUs};
//   std::vector<Endpoint> pool = {testing::Ep("10.0.0.1:8000", /*queue=*/3, /*kv=*/0.5),
//                                 testing::EndpointBuilder("10.0.0.2:8000").Queue(0).Label("llm-d.ai/role", "decode")};
//   EPP_REQUIRE_SHARED_FIXTURES("configs");  // skips the test when ../shared is absent
//   testing::CycleFixture cycle{pool}; cycle.Finish();  // a SchedulingContext for a plugin call
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>

#include "epp/endpoint.h"
#include "epp/plugin.h"
#include "epp/request.h"
#include "epp/scheduling.h"

namespace epp::testing {

// The time fixtures' clocks start at (ManualClock{kNowUs}); endpoints built here were read then,
// so they are fresh for every staleness threshold until the clock moves.
inline constexpr int64_t kNowUs = 1'000'000;

// An endpoint field by field; converts to Endpoint. Metrics start absent (as from a server that
// exposes nothing) and the read time at kNowUs.
class EndpointBuilder {
 public:
  explicit EndpointBuilder(std::string address) { e_.address = std::move(address); e_.metrics_time_us = kNowUs; }
  EndpointBuilder& Queue(std::optional<double> v) { e_.metrics.waiting_queue_size = v; return *this; }
  EndpointBuilder& Running(std::optional<double> v) { e_.metrics.running_requests = v; return *this; }
  EndpointBuilder& Kv(std::optional<double> v) { e_.metrics.kv_cache_usage = v; return *this; }
  EndpointBuilder& Lora(int64_t max_lora, std::vector<std::string> running, std::vector<std::string> waiting = {}) {
    e_.metrics.lora = LoraInfo{max_lora, std::move(running), std::move(waiting)};
    return *this;
  }
  EndpointBuilder& Cache(int64_t block_size, int64_t num_blocks) {
    e_.metrics.cache_block_size = block_size;
    e_.metrics.cache_num_blocks = num_blocks;
    return *this;
  }
  EndpointBuilder& Label(std::string key, std::string value) { e_.labels[std::move(key)] = std::move(value); return *this; }
  EndpointBuilder& Engine(std::string engine) { e_.engine = std::move(engine); return *this; }
  // When the metrics were read (clock microseconds); nullopt = never read (stale everywhere).
  EndpointBuilder& ReadAt(std::optional<int64_t> time_us) { e_.metrics_time_us = time_us; return *this; }
  EndpointBuilder& Error(std::string message) { e_.metrics_error = std::move(message); return *this; }

  Endpoint Build() const { return e_; }
  operator Endpoint() const { return e_; }  // NOLINT: a builder reads best without .Build()

 private:
  Endpoint e_;
};

// The common case: queue and KV use as given, nothing running, read at `read_at_us`.
inline Endpoint Ep(std::string address, double queue = 0, double kv = 0.1, int64_t read_at_us = kNowUs) {
  return EndpointBuilder(std::move(address)).Queue(queue).Running(0).Kv(kv).ReadAt(read_at_us);
}

// One scheduling cycle's inputs for calling a plugin directly: fill `endpoints` (and `request`),
// then Finish() points the context and the candidates at them.
struct CycleFixture {
  std::vector<Endpoint> endpoints;
  InferenceRequest request;
  SeededRng rng{7};
  SchedulingContext ctx;
  std::vector<const Endpoint*> candidates;

  void Finish(int64_t now_us = kNowUs) {
    if (request.model.empty()) request.model = "m";
    ctx.request = &request;
    ctx.endpoints = endpoints;
    ctx.rng = &rng;
    ctx.now_us = now_us;
    ctx.inflight_requests.assign(endpoints.size(), 0);
    ctx.inflight_tokens.assign(endpoints.size(), 0);
    candidates.clear();
    for (const Endpoint& e : endpoints) candidates.push_back(&e);
  }
};

// ../shared/fixtures/<sub> (real captures, never copied into the project); may not exist.
// How much slower than a normal build this one runs: $EPP_TEST_TIME_SCALE (scripts/test
// --sanitize sets it: 10 under TSan, 3 under ASan), else 1. Deadlines that bound how long a
// correct answer may take, never how fast it must be, are multiplied by it.
inline int TimeScale() {
  const char* v = std::getenv("EPP_TEST_TIME_SCALE");
  const int n = v == nullptr ? 1 : std::atoi(v);
  return n >= 1 && n <= 100 ? n : 1;
}

inline std::filesystem::path SharedFixtures(const std::string& sub = "") {
  return sub.empty() ? std::filesystem::path(EPP_SHARED_FIXTURES) : std::filesystem::path(EPP_SHARED_FIXTURES) / sub;
}

}  // namespace epp::testing

// Skips the calling test (cleanly, with the path) when ../shared/fixtures/<sub> is absent.
#define EPP_REQUIRE_SHARED_FIXTURES(sub)                                                     \
  do {                                                                                       \
    const std::filesystem::path epp_fixtures_dir_ = ::epp::testing::SharedFixtures(sub);    \
    if (!std::filesystem::exists(epp_fixtures_dir_))                                         \
      GTEST_SKIP() << "shared fixtures not found at " << epp_fixtures_dir_.string();         \
  } while (0)
