// The flow-control layer's per-request cost (docs/benchmarks.md, "Flow control"): enqueue +
// dispatch with 10,000 requests queued over 1,000 flows, per fairness policy, and cancel at the
// same depth. The queue stays at its depth: each iteration enqueues one request and dispatches
// (or cancels) one. The pool is never saturated and the clock is manual, so the figures are the
// layer's own work (locking, heaps, the fairness index, the TTL list, the callback).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "epp/plugin.h"
#include "epp/registry.h"
#include "flowcontrol/controller.h"
#include "plugins/capabilities.h"

namespace epp::flowcontrol {
namespace {

struct Setup {
  std::vector<std::unique_ptr<Plugin>> plugins;
  ManualClock clock;
  std::unique_ptr<FlowController> fc;
  std::vector<std::string> flow_ids;

  Setup(const std::string& fairness, int queued, int flows) {
    plugins.push_back(*BuiltinRegistry().Create(fairness, fairness, Params(), PluginContext{}));
    plugins.push_back(*BuiltinRegistry().Create("fcfs-ordering-policy", "fcfs", Params(), PluginContext{}));
    ControllerConfig c;
    c.default_band.fairness = plugins::FlowControlPoliciesOf(*plugins[0]).fairness;
    c.default_band.ordering = plugins::FlowControlPoliciesOf(*plugins[1]).ordering;
    c.default_band.max_requests = 1'000'000;
    fc = std::make_unique<FlowController>(std::move(c), [] { return PoolSample{}; }, clock);
    for (int i = 0; i < flows; ++i) flow_ids.push_back("tenant-" + std::to_string(i));
    for (int i = 0; i < queued; ++i) Enqueue(i);
  }
  Handle Enqueue(int i) {
    EnqueueRequest r;
    r.fairness_id = flow_ids[static_cast<size_t>(i) % flow_ids.size()];
    r.bytes = 1000;
    clock.Advance(1);
    return fc->Enqueue(std::move(r), [](const Completion& c) { benchmark::DoNotOptimize(c.waited_us); });
  }
};

const char* Fairness(int64_t i) {
  static const char* kTypes[] = {"global-strict-fairness-policy", "round-robin-fairness-policy",
                                 "program-aware-fairness"};
  return kTypes[i];
}

// Arg 0: fairness policy (0 global-strict, 1 round-robin, 2 program-aware); 1: queued; 2: flows.
void BM_EnqueueDispatch(benchmark::State& state) {
  Setup s(Fairness(state.range(0)), static_cast<int>(state.range(1)), static_cast<int>(state.range(2)));
  int i = static_cast<int>(state.range(1));
  for (auto _ : state) {
    s.Enqueue(i++);
    benchmark::DoNotOptimize(s.fc->DispatchOnce());
  }
  state.SetLabel(Fairness(state.range(0)));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EnqueueDispatch)
    ->Args({0, 10'000, 1'000})
    ->Args({1, 10'000, 1'000})
    ->Args({2, 10'000, 1'000})
    ->Args({0, 10'000, 10})
    ->Args({1, 10'000, 10})
    ->Args({1, 100, 100});

// Enqueue one and cancel a random queued one (a client gone), at depth.
void BM_EnqueueCancel(benchmark::State& state) {
  Setup s(Fairness(state.range(0)), 0, static_cast<int>(state.range(2)));
  std::vector<Handle> handles;
  for (int i = 0; i < state.range(1); ++i) handles.push_back(s.Enqueue(i));
  uint64_t x = 88172645463325252ull;
  int i = static_cast<int>(state.range(1));
  for (auto _ : state) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const size_t k = x % handles.size();
    benchmark::DoNotOptimize(s.fc->Cancel(handles[k]));
    handles[k] = s.Enqueue(i++);
  }
  state.SetLabel(Fairness(state.range(0)));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EnqueueCancel)->Args({0, 10'000, 1'000})->Args({1, 10'000, 1'000});

// Fill to 10,000 then drain: the whole life of a burst, per request.
void BM_BurstFillDrain(benchmark::State& state) {
  for (auto _ : state) {
    state.PauseTiming();
    Setup s(Fairness(state.range(0)), 0, 1'000);
    state.ResumeTiming();
    for (int i = 0; i < 10'000; ++i) s.Enqueue(i);
    while (s.fc->DispatchOnce()) {
    }
  }
  state.SetLabel(Fairness(state.range(0)));
  state.SetItemsProcessed(state.iterations() * 10'000);
}
BENCHMARK(BM_BurstFillDrain)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// The goal's figure: what dispatch adds per request at its tail. Each iteration times one enqueue
// + dispatch pair on its own (steady_clock; the clock read costs ~20 ns, included) and the
// distribution is reported as counters p50_us / p99_us / max_us. Args as BM_EnqueueDispatch.
void BM_EnqueueDispatchTail(benchmark::State& state) {
  Setup s(Fairness(state.range(0)), static_cast<int>(state.range(1)), static_cast<int>(state.range(2)));
  int i = static_cast<int>(state.range(1));
  std::vector<double> us;
  us.reserve(1 << 20);
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    s.Enqueue(i++);
    benchmark::DoNotOptimize(s.fc->DispatchOnce());
    const auto t1 = std::chrono::steady_clock::now();
    if (us.size() < us.capacity()) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us.empty() ? 0.0 : us[static_cast<size_t>(q * static_cast<double>(us.size() - 1))]; };
  state.counters["p50_us"] = at(0.5);
  state.counters["p99_us"] = at(0.99);
  state.counters["max_us"] = at(1.0);
  state.SetLabel(Fairness(state.range(0)));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EnqueueDispatchTail)
    ->Args({0, 10'000, 1'000})
    ->Args({1, 10'000, 1'000})
    ->Args({2, 10'000, 1'000})
    ->Args({2, 10'000, 10});

}  // namespace
}  // namespace epp::flowcontrol

BENCHMARK_MAIN();
