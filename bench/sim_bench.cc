// Simulator throughput:
//  - BM_CostModel: simulated requests per CPU-second of SimServer in virtual time (the engine
//    under replay): Poisson arrivals, prompts sharing prefixes, one server per run.
//  - BM_HttpServe: requests per second one SimHttpServer serves over loopback, driven by the
//    curl-multi client with `concurrency` requests in flight; the simulated time is scaled to
//    almost nothing so the HTTP front itself is measured.
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "epp/runtime/http.h"
#include "epp/prefix_cache.h"
#include "epp/tools/sim.h"

namespace {

struct Workload {
  std::vector<epp::SimRequest> requests;
  std::vector<int64_t> arrivals_us;
};

// `n` requests at `qps`: 64 groups share a 1,024-token system prompt, each request adds a
// 256-token question; 128 output tokens. Block hashes as the HTTP front would compute them.
Workload MakeWorkload(int n, double qps, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(qps);
  Workload w;
  const uint64_t model_seed = epp::PrefixSeed("m");
  std::vector<std::vector<uint64_t>> systems(64);
  for (size_t g = 0; g < systems.size(); ++g) {
    std::string text(1024 * epp::kCharsPerToken, static_cast<char>('a' + g % 26));
    text += std::to_string(g);
    text.resize(1024 * epp::kCharsPerToken);
    systems[g] = epp::ChainedBlockHashes(text, 16 * epp::kCharsPerToken, model_seed);
  }
  double t = 0;
  for (int i = 0; i < n; ++i) {
    t += gap(rng);
    epp::SimRequest r;
    r.id = static_cast<uint64_t>(i + 1);
    const auto& sys = systems[rng() % systems.size()];
    r.block_hashes = sys;
    uint64_t h = sys.back();
    for (int b = 0; b < 16; ++b) {  // the question's own blocks continue the chain
      h = h * 0x9E3779B97F4A7C15ull + rng();
      r.block_hashes.push_back(h);
    }
    r.prompt_tokens = 1024 + 256;
    r.output_tokens = 128;
    w.requests.push_back(std::move(r));
    w.arrivals_us.push_back(static_cast<int64_t>(t * 1e6));
  }
  return w;
}

void BM_CostModel(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const Workload w = MakeWorkload(n, /*qps=*/static_cast<double>(state.range(1)), 42);
  epp::SimParams p;
  for (auto _ : state) {
    auto sim = *epp::SimServer::Create(p);
    for (int i = 0; i < n; ++i) {
      (void)sim->Submit(w.requests[i], w.arrivals_us[i]);
      (void)sim->TakeResult(w.requests[i].id > 64 ? w.requests[i].id - 64 : 0);
    }
    sim->AdvanceTo(std::numeric_limits<int64_t>::max() / 2);
    benchmark::DoNotOptimize(sim->Snapshot().requests_finished);
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_CostModel)->Args({100000, 20})->Args({100000, 60})->Unit(benchmark::kMillisecond);

void BM_HttpServe(benchmark::State& state) {
  epp::SimHttpOptions o;
  o.time_scale = 1e-6;  // a simulated second takes a microsecond: measure the HTTP front
  o.max_tokens_default = 4;
  o.threads = 64;
  auto server = *epp::SimHttpServer::Start(o);
  epp::HttpClient client;  // keep-alive connections, as a load generator would
  const int concurrency = static_cast<int>(state.range(0));
  std::string prompt(4096, 'x');
  const std::string body = "{\"model\":\"meta-llama/Llama-3.1-8B-Instruct\",\"max_tokens\":4,\"prompt\":\"" + prompt + "\"}";
  std::vector<epp::HttpRequest> batch(concurrency);
  for (auto& r : batch) {
    r.url = server->url() + "/v1/completions";
    r.method = "POST";
    r.body = body;
    r.headers = {"Content-Type: application/json"};
    r.timeout = std::chrono::seconds(10);
    r.accept_gzip = false;  // a load generator measures serving, not compression
  }
  int64_t ok = 0;
  for (auto _ : state) {
    for (const auto& r : client.FetchAll(batch)) ok += r.ok() && r->status == 200;
  }
  state.SetItemsProcessed(state.iterations() * concurrency);
  state.counters["ok"] = static_cast<double>(ok);
  server->Stop();
}
BENCHMARK(BM_HttpServe)->Arg(16)->Arg(64)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
