// The precise prefix index (kv/index.h) at llm-d-router issue 2390's scale: one request of 240K
// tokens (3,750 blocks of 64) looked up over 96 endpoints whose index holds all of its blocks,
// next to the same over 8 endpoints; heap bytes allocated per lookup (a counting operator new);
// the index's memory per held block; event ingestion: BlockStored batches decoded from msgpack
// and applied, events per second on one core; and a flood of re-hashed stores holding memory flat.
//
//   build/bench/epp_bench_kv_index [--benchmark_filter=...]
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <cstdlib>
#include <new>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "epp/config.h"
#include "epp/kv/events.h"
#include "epp/kv/index.h"
#include "epp/kv/subscriber.h"
#include "epp/registry.h"
#include "epp/request.h"
#include "epp/scheduler.h"

namespace {
std::atomic<int64_t> g_alloc_bytes{0}, g_allocs{0};
}  // namespace

// The replacement pair allocates with malloc and frees with free; GCC cannot see that they pair.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t n) {
  g_alloc_bytes.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace {

constexpr int kBlock = 64;
constexpr size_t kTokens = 240000;  // 3,750 blocks of 64

std::vector<uint32_t> Prompt(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> t(n);
  for (auto& x : t) x = static_cast<uint32_t>(rng() % 128000);
  return t;
}

epp::KvEventBatch StoreAll(const std::vector<uint32_t>& tokens, uint64_t hash_base, size_t per_event) {
  epp::KvEventBatch b;
  const size_t blocks = tokens.size() / kBlock;
  for (size_t first = 0; first < blocks; first += per_event) {
    epp::KvBlockStored s;
    const size_t last = std::min(blocks, first + per_event);
    for (size_t i = first; i < last; ++i) s.block_hashes.push_back(hash_base + i);
    if (first > 0) s.parent_block_hash = hash_base + first - 1;
    s.token_ids.assign(tokens.begin() + static_cast<long>(first * kBlock), tokens.begin() + static_cast<long>(last * kBlock));
    s.block_size = kBlock;
    s.medium = "GPU";
    b.events.emplace_back(std::move(s));
  }
  return b;
}

struct Pool {
  std::unique_ptr<epp::KvBlockIndex> index;
  std::vector<std::string> endpoints;
  std::vector<uint32_t> prompt;
};

// N endpoints that all hold the 240K-token prompt. Stored in order, every block lists its
// holders in the same order (each endpoint stored the whole prompt in turn, as happens when one
// prompt reaches them one after another). `shuffled`: the endpoints store it block by block in a
// new random order each block, so no two consecutive blocks list their holders alike (the worst
// case for Lookup, which counts repeated holder lists instead of scanning them).
Pool& PoolOf(int n, bool shuffled = false) {
  static std::map<std::pair<int, bool>, Pool> pools;
  Pool& p = pools[{n, shuffled}];
  if (p.index) return p;
  epp::KvIndexOptions o;
  o.max_blocks = size_t{1} << 24;
  p.index = std::make_unique<epp::KvBlockIndex>(o);
  p.prompt = Prompt(42, kTokens);
  for (int i = 0; i < n; ++i)
    p.endpoints.push_back("10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250) + ":8000");
  if (!shuffled) {
    const epp::KvEventBatch all = StoreAll(p.prompt, 1ull << 40, 64);
    for (const std::string& e : p.endpoints) p.index->Apply(e, "m", all);
    return p;
  }
  std::mt19937_64 rng(9);
  std::vector<int> order(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  const uint64_t base = 1ull << 40;
  for (size_t b = 0; b < kTokens / kBlock; ++b) {
    std::shuffle(order.begin(), order.end(), rng);
    for (const int i : order) {
      epp::KvEventBatch one;
      epp::KvBlockStored s;
      s.block_hashes = {base + b};
      if (b > 0) s.parent_block_hash = base + b - 1;
      s.token_ids.assign(p.prompt.begin() + static_cast<long>(b * kBlock), p.prompt.begin() + static_cast<long>((b + 1) * kBlock));
      s.block_size = kBlock;
      s.medium = "GPU";
      one.events.emplace_back(std::move(s));
      p.index->Apply(p.endpoints[static_cast<size_t>(i)], "m", one);
    }
  }
  return p;
}

// Lookup of the 240K-token request over N endpoints that all hold it: the precise producer's
// per-request work after tokenization.
void BM_Lookup240K(benchmark::State& state) {
  Pool& p = PoolOf(static_cast<int>(state.range(0)), state.range(1) != 0);
  std::vector<epp::KvPrefixMatch> out;
  p.index->Lookup(p.prompt, "m", p.endpoints, out);  // warm the thread-local buffers
  int64_t bytes = 0, allocs = 0, lookups = 0;
  for (auto _ : state) {
    const int64_t b0 = g_alloc_bytes.load(), a0 = g_allocs.load();
    p.index->Lookup(p.prompt, "m", p.endpoints, out);
    bytes += g_alloc_bytes.load() - b0;
    allocs += g_allocs.load() - a0;
    ++lookups;
    benchmark::DoNotOptimize(out.data());
  }
  if (out.front().blocks != static_cast<int64_t>(kTokens / kBlock)) state.SkipWithError("lookup did not match every block");
  state.counters["endpoints"] = static_cast<double>(state.range(0));
  state.counters["blocks"] = static_cast<double>(kTokens / kBlock);
  state.counters["alloc_bytes_per_lookup"] = static_cast<double>(bytes) / static_cast<double>(lookups);
  state.counters["allocs_per_lookup"] = static_cast<double>(allocs) / static_cast<double>(lookups);
}
// Second argument 1: holder lists shuffled per block (PoolOf).
BENCHMARK(BM_Lookup240K)->ArgNames({"endpoints", "shuffled"})->Args({8, 0})->Args({96, 0})->Args({96, 1})->Unit(benchmark::kMicrosecond);

// The request's block keys alone (XXH3 over 240K tokens): the floor of any lookup.
void BM_BlockKeys240K(benchmark::State& state) {
  Pool& p = PoolOf(8);
  for (auto _ : state) benchmark::DoNotOptimize(p.index->BlockKeys(p.prompt, kBlock));
}
BENCHMARK(BM_BlockKeys240K)->Unit(benchmark::kMicrosecond);

// A busy vLLM's batch: 64 BlockStored events of 4 blocks of 16 tokens each, random hashes.
epp::KvEventBatch BusyBatch(std::mt19937_64& rng) {
  epp::KvEventBatch batch;
  batch.ts = 1.0;
  for (int e = 0; e < 64; ++e) {
    epp::KvBlockStored s;
    for (int k = 0; k < 4; ++k) s.block_hashes.push_back(rng() | (1ull << 63));
    for (int t = 0; t < 64; ++t) s.token_ids.push_back(static_cast<uint32_t>(rng() % 128000));
    s.block_size = 16;
    s.medium = "GPU";
    batch.events.emplace_back(std::move(s));
  }
  return batch;
}

// One whole pick through the scheduler (precise-prefix-cache-producer + prefix-cache-scorer +
// max-score-picker) of a request whose prompt is 960,000 characters, i.e. 240,000 estimated
// tokens, over 96 endpoints that all hold it (blocks of 64): tokenizing, block keys, the lookup
// and the scoring, without the HTTP or gRPC around it.
void BM_PrecisePick240K(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  auto cfg = epp::ParseConfig(
      "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"
      "plugins:\n- type: precise-prefix-cache-producer\n  parameters:\n    tokenProcessorConfig: {blockSize: 64}\n"
      "    maxPrefixTokensToMatch: 262144\n- type: prefix-cache-scorer\n- type: max-score-picker\n"
      "schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: prefix-cache-scorer\n  - pluginRef: max-score-picker\n",
      "bench.yaml");
  if (!cfg.ok()) return state.SkipWithError(std::string(cfg.status().message()).c_str());
  auto sched = epp::BuildScheduler(*cfg, epp::BuiltinRegistry());
  if (!sched.ok()) return state.SkipWithError(std::string(sched.status().message()).c_str());
  std::string prompt(kTokens * 4, 'a');
  std::mt19937_64 rng(11);
  for (char& c : prompt) c = static_cast<char>('a' + rng() % 26);
  const std::string body = R"({"model":"m","prompt":")" + prompt + R"("})";
  auto req = epp::ParseOpenAIRequest("/v1/completions", body);
  if (!req.ok()) return state.SkipWithError("request");
  const epp::KvEventBatch all = StoreAll(epp::EstimateTokenIds(req->prompt), 1ull << 42, 64);
  std::vector<epp::Endpoint> pool;
  for (int i = 0; i < n; ++i) {
    epp::Endpoint e;
    e.address = "10.3.0." + std::to_string(i) + ":8000";
    pool.push_back(e);
    (*sched)->KvEvents()->index->Apply(e.address, "m", all);
  }
  epp::PickOptions po;
  po.record = false;
  int matched = 0;
  for (auto _ : state) {
    epp::PickResult r = (*sched)->Pick(*req, pool, po);
    matched = r.prefix_match_blocks;
    benchmark::DoNotOptimize(r.endpoints.data());
  }
  if (matched != static_cast<int>(kTokens / kBlock)) state.SkipWithError("the pick did not match every block");
  state.counters["endpoints"] = n;
}
BENCHMARK(BM_PrecisePick240K)->Arg(8)->Arg(96)->Unit(benchmark::kMicrosecond);

// Ingestion: msgpack payloads (vLLM 0.26 map events) decoded and applied, one BlockStored of 4
// blocks of 16 tokens per event (a busy vLLM's shape), 64 events per batch, over 100 endpoints.
void BM_IngestBlockStored(benchmark::State& state) {
  epp::KvIndexOptions o;
  o.max_blocks = size_t{1} << 20;
  epp::KvBlockIndex index(o);
  std::vector<std::string> payloads;
  std::mt19937_64 rng(7);
  for (int b = 0; b < 256; ++b) payloads.push_back(epp::EncodeKvEventBatch(BusyBatch(rng), epp::KvEventEncoding::kMap));
  std::vector<std::string> endpoints;
  for (int i = 0; i < 100; ++i) endpoints.push_back("10.1.0." + std::to_string(i) + ":8000");
  size_t i = 0;
  int64_t events = 0;
  for (auto _ : state) {
    auto batch = epp::DecodeKvEventBatch(payloads[i % payloads.size()]);
    if (!batch.ok()) {
      state.SkipWithError("decode failed");
      break;
    }
    index.Apply(endpoints[i % endpoints.size()], "m", *batch);
    events += static_cast<int64_t>(batch->events.size());
    ++i;
  }
  state.counters["events_per_s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_IngestBlockStored)->Unit(benchmark::kMicrosecond);

// Decoding alone, for the share of ingestion spent in msgpack.
void BM_DecodeBatch(benchmark::State& state) {
  std::mt19937_64 rng(9);
  const std::string payload = epp::EncodeKvEventBatch(BusyBatch(rng), epp::KvEventEncoding::kMap);
  for (auto _ : state) benchmark::DoNotOptimize(epp::DecodeKvEventBatch(payload));
  state.counters["events_per_s"] = benchmark::Counter(64.0 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["payload_bytes"] = static_cast<double>(payload.size());
}
BENCHMARK(BM_DecodeBatch)->Unit(benchmark::kMicrosecond);

// Memory per held block: the 96-endpoint pool's index, by mallinfo2 around building it.
void BM_MemoryPerHeldBlock(benchmark::State& state) {
  for (auto _ : state) {
    const size_t before = mallinfo2().uordblks;
    {
      epp::KvIndexOptions o;
      o.max_blocks = size_t{1} << 24;
      epp::KvBlockIndex index(o);
      const auto prompt = Prompt(5, kTokens);
      const epp::KvEventBatch all = StoreAll(prompt, 1ull << 41, 64);
      const int n = static_cast<int>(state.range(0));
      for (int i = 0; i < n; ++i) index.Apply("10.2.0." + std::to_string(i) + ":8000", "m", all);
      const size_t after = mallinfo2().uordblks;
      const double held = static_cast<double>(n) * static_cast<double>(kTokens / kBlock);
      state.counters["bytes_per_held_block"] = static_cast<double>(after - before) / held;
      state.counters["index_mib"] = static_cast<double>(after - before) / (1 << 20);
      state.counters["estimate_bytes"] = static_cast<double>(index.Stats().approx_bytes);
    }
  }
}
BENCHMARK(BM_MemoryPerHeldBlock)->Arg(1)->Arg(96)->Iterations(1)->Unit(benchmark::kMillisecond);

// A flood of re-hashed stores (issue #41): the same 9 blocks of 16 tokens stored again and again
// under new engine hashes, one BlockStored per batch, `events` of them (the security review's
// case: 2M events took serve from 30 to 224 MiB RSS while it held 9 blocks). The index keeps one name
// per holder plus at most max_engine_hash_aliases (16384) older names per endpoint, so the heap
// stays flat however many arrive. heap_mib: mallinfo2 growth; estimate_bytes: Stats().approx_bytes.
void BM_ReHashedStoreFlood(benchmark::State& state) {
  const int64_t events = state.range(0);
  for (auto _ : state) {
    const size_t before = mallinfo2().uordblks;
    {
      epp::KvBlockIndex index;  // default bounds
      const auto tokens = Prompt(3, 9 * 16);
      epp::KvEventBatch b;
      epp::KvBlockStored s;
      s.block_hashes.resize(9);
      s.token_ids = tokens;
      s.block_size = 16;
      s.medium = "GPU";
      b.events.emplace_back(std::move(s));
      auto& stored = std::get<epp::KvBlockStored>(b.events[0]);
      for (int64_t i = 0; i < events; ++i) {
        for (uint64_t k = 0; k < 9; ++k) stored.block_hashes[k] = (static_cast<uint64_t>(i) << 4) + k;
        index.Apply("10.3.0.1:8000", "m", b);
      }
      const size_t after = mallinfo2().uordblks;
      const epp::KvIndexStats st = index.Stats();
      state.counters["heap_mib"] = static_cast<double>(after - std::min(after, before)) / (1 << 20);
      state.counters["estimate_bytes"] = static_cast<double>(st.approx_bytes);
      state.counters["blocks"] = static_cast<double>(st.blocks);
      state.counters["engine_hashes"] = static_cast<double>(st.engine_hashes);
      if (st.blocks != 9) state.SkipWithError("the flood changed the block count");
    }
  }
  state.counters["events_per_s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ReHashedStoreFlood)->Arg(20000)->Arg(200000)->Arg(2000000)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
