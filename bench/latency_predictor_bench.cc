// The latency predictor's cost (docs/benchmarks.md, "Latency predictor"): a prediction for every
// candidate of a pick (the goal: under 20 us for 64 endpoints), a training round (the pool model
// and every endpoint's, off the request path), and Observe (on the response path). Each endpoint
// holds a full ring (512 samples) of linear data with noise, as after a few minutes of traffic.
#include <benchmark/benchmark.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "epp/config.h"
#include "epp/plugin.h"
#include "epp/registry.h"
#include "epp/request.h"
#include "epp/scheduler.h"
#include "latency/predictor.h"

namespace epp::latency {
namespace {

LatencyFeatures Features(SeededRng& rng) {
  LatencyFeatures f;
  f.input_tokens = std::floor(64 + rng.Uniform() * 4000);
  f.prefix_hit_tokens = std::floor(rng.Uniform() * f.input_tokens);
  f.waiting_requests = std::floor(rng.Uniform() * 10);
  f.running_requests = std::floor(rng.Uniform() * 64);
  f.kv_cache_usage = rng.Uniform();
  f.inflight_requests = f.running_requests + f.waiting_requests;
  f.inflight_prefill_tokens = std::floor(rng.Uniform() * 20000);
  return f;
}

struct Pool {
  std::unique_ptr<LatencyPredictor> predictor;
  std::vector<std::string> names;
  SeededRng rng{1};

  explicit Pool(int endpoints) {
    LatencyPredictorOptions o;
    predictor = *LatencyPredictor::Create(o);
    for (int e = 0; e < endpoints; ++e) {
      std::string name = "10.0.";
      name += std::to_string(e / 256);
      name += '.';
      name += std::to_string(e % 256);
      name += ":8000";
      names.push_back(std::move(name));
      const double slow = 0.5 + rng.Uniform();
      for (size_t i = 0; i < o.samples_per_endpoint; ++i) Observe(names.back(), slow);
    }
    predictor->TrainNow();
  }
  // Half the samples lightly loaded (nothing waiting, no prefill in flight), so every endpoint's
  // light ring fills and a round fits the light speeds over all of them too.
  void Observe(const std::string& name, double slow) {
    LatencyFeatures f = Features(rng);
    if (rng.Uniform() < 0.5) f.waiting_requests = f.inflight_prefill_tokens = 0;
    const double noise = 0.8 + 0.4 * rng.Uniform();
    const double ttft = slow * noise * (0.02 + 5e-5 * (f.input_tokens - f.prefix_hit_tokens) + 0.03 * f.waiting_requests +
                                        2e-6 * f.inflight_prefill_tokens);
    const double tpot = slow * noise * (0.008 + 1e-4 * f.running_requests);
    predictor->Observe(name, f, ttft, tpot);
  }
};

// A whole pick (no recording) over `endpoints` endpoints with llm-d's latency plugins
// (predicted-latency-producer with a trained model, the tier filter, the headroom scorer) against
// the same pick with a queue scorer only: what the plugins add to a scheduling cycle.
constexpr char kLatencyYaml[] = R"(apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: predicted-latency-producer
  parameters: {streamingMode: true}
- type: slo-headroom-tier-filter
- type: latency-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: slo-headroom-tier-filter
  - pluginRef: latency-scorer
  - pluginRef: max-score-picker
)";
constexpr char kQueueYaml[] = R"(apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: max-score-picker
)";

void PickWith(benchmark::State& state, const char* yaml, bool train) {
  const int n = static_cast<int>(state.range(0));
  ManualClock clock(1'000'000);
  SeededRng rng(7);
  std::unique_ptr<Scheduler> s = *BuildScheduler(*ParseConfig(yaml, "bench.yaml"), BuiltinRegistry(), {&clock, &rng});
  std::vector<Endpoint> pool(static_cast<size_t>(n));
  for (int e = 0; e < n; ++e) {
    Endpoint& ep = pool[static_cast<size_t>(e)];
    ep.address = "10.0." + std::to_string(e / 256) + "." + std::to_string(e % 256) + ":8000";
    ep.metrics.waiting_queue_size = e % 5;
    ep.metrics.running_requests = 1 + e % 7;
    ep.metrics.kv_cache_usage = 0.1 + 0.01 * (e % 50);
    ep.metrics_time_us = 1'000'000;
  }
  InferenceRequest req = *ParseOpenAIRequest("/v1/completions", R"({"model":"m","prompt":"a question for the bench"})");
  req.headers.emplace_back("x-llm-d-slo-ttft-ms", "500");
  if (train) {
    // 40 timed responses per endpoint, each endpoint through the subset hint.
    for (int round = 0; round < 40; ++round) {
      for (const Endpoint& ep : pool) {
        PickResult r = s->Pick(req, pool, {.subset = std::vector<std::string>{ep.address}});
        const int64_t t = clock.NowMicros();
        s->ObserveFirstToken(r.pick_id, ep.address, t + 50'000 + 1000 * (round % 7));
        s->ObserveCompletion(r.pick_id, ep.address, ResponseCompletion{t + 250'000, ResponseUsage{8, 11, 19, {}}, 11, true});
        s->Release(r);
        clock.Advance(20'000);
      }
    }
  }
  for (auto _ : state) {
    PickResult r = s->Pick(req, pool, {.record = false});
    benchmark::DoNotOptimize(r);
  }
}
void BM_PickLatencyPlugins(benchmark::State& state) { PickWith(state, kLatencyYaml, true); }
BENCHMARK(BM_PickLatencyPlugins)->Arg(8)->Arg(64);
void BM_PickQueueOnly(benchmark::State& state) { PickWith(state, kQueueYaml, false); }
BENCHMARK(BM_PickQueueOnly)->Arg(8)->Arg(64);

// Every candidate of one pick, through Predict (the per-thread snapshot cache).
void BM_PredictAll(benchmark::State& state) {
  Pool pool(static_cast<int>(state.range(0)));
  std::vector<LatencyFeatures> features;
  for (size_t i = 0; i < pool.names.size(); ++i) features.push_back(Features(pool.rng));
  for (auto _ : state) {
    double sum = 0;
    for (size_t i = 0; i < pool.names.size(); ++i) sum += pool.predictor->Predict(pool.names[i], features[i]).ttft_s;
    benchmark::DoNotOptimize(sum);
  }
  state.counters["endpoints"] = static_cast<double>(pool.names.size());
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(pool.names.size()));
}
BENCHMARK(BM_PredictAll)->Arg(8)->Arg(64)->Arg(256);

// The same with the snapshot taken once per pick (what a plugin holding it for a cycle does).
void BM_PredictAllSnapshot(benchmark::State& state) {
  Pool pool(static_cast<int>(state.range(0)));
  std::vector<LatencyFeatures> features;
  for (size_t i = 0; i < pool.names.size(); ++i) features.push_back(Features(pool.rng));
  for (auto _ : state) {
    const auto snapshot = pool.predictor->snapshot();
    double sum = 0;
    for (size_t i = 0; i < pool.names.size(); ++i) sum += snapshot->Predict(pool.names[i], features[i]).ttft_s;
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(pool.names.size()));
}
BENCHMARK(BM_PredictAllSnapshot)->Arg(64);

// One training round: one new sample (so the round is not skipped), then the pool model and
// every endpoint's refitted and published.
void BM_TrainRound(benchmark::State& state) {
  Pool pool(static_cast<int>(state.range(0)));
  size_t i = 0;
  for (auto _ : state) {
    state.PauseTiming();
    pool.Observe(pool.names[i++ % pool.names.size()], 1.0);
    state.ResumeTiming();
    benchmark::DoNotOptimize(pool.predictor->TrainNow());
  }
  state.counters["samples"] = static_cast<double>(pool.names.size() * pool.predictor->options().samples_per_endpoint);
}
BENCHMARK(BM_TrainRound)->Arg(8)->Arg(64)->Arg(256)->Unit(benchmark::kMillisecond);

// Observe on the response path: two short mutexes and a ring write.
void BM_Observe(benchmark::State& state) {
  Pool pool(64);
  const LatencyFeatures f = Features(pool.rng);
  size_t i = 0;
  for (auto _ : state) pool.predictor->Observe(pool.names[i++ % pool.names.size()], f, 0.1, 0.01);
}
BENCHMARK(BM_Observe);

}  // namespace
}  // namespace epp::latency

BENCHMARK_MAIN();
