// The request path of the scheduler, piece by piece (docs/benchmarks.md, "Scheduling"):
//
//  - BM_Pick / BM_ParsePick: one scheduling cycle with GIE's default profile (queue-scorer 2,
//    kv-cache-utilization-scorer 2, prefix-cache-scorer 3, max-score picker, utilization
//    detector, approx-prefix-cache-producer), recorded (prefix index update, in-flight load) and
//    then released, so the index stays warm and the load does not grow. BM_ParsePick starts from
//    the raw JSON body (ParseOpenAIRequest, then Pick) and splits its time (parse_us, pick_us).
//    Chat prompts of 1, 32 and 220 KiB against 8, 64 and 512 endpoints (and 220 KiB against
//    1,000) with varied metrics that move as the benchmark runs (see PickFixture::Churn and Feedback), so prefix affinity and
//    load balance compete and the picks spread over the pool as in a real one.
//  - BM_ChainedBlockHashes next to BM_XXH3_64bits: prefix hashing (64-character blocks, chained)
//    against one XXH3 call over the same bytes.
//  - BM_ParseOpenAIRequest next to BM_NlohmannParse: request parsing (simdjson, canonical prompt
//    rendering) against nlohmann::json::parse plus extracting the same fields and rendering the
//    same prompt text (checked equal before timing).
//
// Workload (the same bodies for every benchmark): 16 system prompts; a request is one system
// prompt (half of the prompt, at most 8 KiB = 128 blocks of 64 characters) followed by its own
// conversation (user / assistant turns of up to 4 KiB, English-like text with newlines, quotes
// and some non-ASCII). The conversation starts with "[conversation NNNNNNNNN]", a counter that is
// rewritten in place before every pick, so every request's tail is new to the prefix index. The
// index is warmed by routing 32,768 such requests before timing.
//
//   epp_bench_scheduler [--default_heap] [--warmup_requests=N] [--kv_blocks=N] [benchmark flags...]
//
// --warmup_requests=N  requests routed before timing each (prompt size, endpoints) pair
//                      (default 32768).
// --kv_blocks=N        every endpoint's cache_num_blocks, hence (autoTune) its prefix-index LRU
//                      capacity in 16-token blocks (default 31250, GIE's default capacity).
// --default_heap  leave glibc's malloc thresholds alone (by default they are raised first so
//                 freed memory stays in the process, as in a long-running picker; see main()).
#include <benchmark/benchmark.h>
#include <xxhash.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "epp/config.h"
#include "epp/endpoint.h"
#include "epp/plugin.h"
#include "epp/prefix_cache.h"
#include "epp/registry.h"
#include "epp/request.h"
#include "request/fast_parse.h"  // internal: the DOM path alone, for the fast path's A/B
#include "epp/runtime/tracing.h"
#include "epp/scheduler.h"

namespace {

constexpr std::string_view kModel = "meta-llama/Llama-3.1-8B-Instruct";
constexpr std::string_view kChatPath = "/v1/chat/completions";
constexpr std::string_view kCompletionsPath = "/v1/completions";
constexpr std::string_view kResponsesPath = "/v1/responses";
constexpr std::string_view kMarker = "[conversation ";
constexpr int kCounterDigits = 9;
constexpr int kSystemPrompts = 16;
// Requests routed before timing (--warmup_requests=N). With 32 or 220 KiB prompts (128 new
// blocks each) they insert 4.2 million blocks, twice what fills the LRUs (31,250 blocks) of 64
// endpoints, so with 8 or 64 endpoints the index is in its steady state (every new block evicts
// an old one, the hash tables have stopped growing) when timing starts; with 512 it is not full.
int64_t g_warmup_requests = 32768;
// Every endpoint's cache_num_blocks (--kv_blocks=N), i.e. its prefix-index LRU capacity through
// autoTune: 31,250 (GIE's default for an H100 80GB with an 8B model).
int64_t g_kv_blocks = 31250;

// SplitMix64: fast, seeded, reproducible.
struct Rand {
  uint64_t s;
  uint64_t Next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t Below(uint64_t n) { return Next() % n; }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
};

constexpr const char* kWords[] = {
    "the", "model", "server", "request", "token", "cache", "prefix", "endpoint", "latency", "batch",
    "queue", "gateway", "inference", "prompt", "answer", "question", "context", "window", "memory",
    "system", "user", "assistant", "please", "explain", "how", "why", "what", "when", "which", "should",
    "could", "would", "kubernetes", "pod", "cluster", "routing", "throughput", "GPU", "a", "an", "of",
    "to", "in", "for", "with", "on", "and", "or", "not", "is", "are", "was", "be", "this", "that",
    "it", "we", "you", "they", "function", "return", "value", "config", "deploy", "scale", "café",
    "naïve", "résumé", "–", "“quoted”", "\"quoted\"", "path\\to\\file", "x=1;", "{json}", "[list]",
};

// `n` bytes of English-like text: words, sentences, newlines, some quotes, backslashes and
// multi-byte UTF-8 (never cut inside a character).
std::string Text(Rand& rng, size_t n) {
  std::string out;
  out.reserve(n + 32);
  int words_in_sentence = 0;
  while (out.size() < n) {
    out += kWords[rng.Below(std::size(kWords))];
    if (++words_in_sentence > 8 && rng.Below(6) == 0) {
      out += rng.Below(8) == 0 ? ".\n" : ". ";
      words_in_sentence = 0;
    } else {
      out += ' ';
    }
  }
  size_t cut = n;
  while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;  // UTF-8 boundary
  out.resize(cut);
  out.resize(n, ' ');
  return out;
}

void AppendJsonString(std::string_view s, std::string& out) { out += nlohmann::json(s).dump(); }

struct Message {
  std::string role;
  std::string content;
};

// messages[first...] as a JSON array of {<item_head>"role":...,"content":...} objects.
void AppendMessageArray(const std::vector<Message>& messages, size_t first, std::string_view item_head, std::string& b) {
  b += '[';
  for (size_t i = first; i < messages.size(); ++i) {
    if (i > first) b += ',';
    b += '{';
    b += item_head;
    b += "\"role\":";
    AppendJsonString(messages[i].role, b);
    b += ",\"content\":";
    AppendJsonString(messages[i].content, b);
    b += '}';
  }
  b += ']';
}

std::string ChatBody(const std::vector<Message>& messages) {
  std::string b = "{\"model\":";
  AppendJsonString(kModel, b);
  b += ",\"messages\":";
  AppendMessageArray(messages, 0, "", b);
  b += ",\"stream\":true,\"max_tokens\":1024,\"temperature\":0.7,\"stream_options\":{\"include_usage\":true}}";
  return b;
}

std::string CompletionsBody(std::string_view prompt) {
  std::string b = "{\"model\":";
  AppendJsonString(kModel, b);
  b += ",\"prompt\":";
  AppendJsonString(prompt, b);
  b += ",\"max_tokens\":256,\"temperature\":0,\"stream\":false}";
  return b;
}

// The same conversation as a Responses request: the system prompt as `instructions`, the turns
// as input message items.
std::string ResponsesBody(const std::vector<Message>& messages) {
  std::string b = "{\"model\":";
  AppendJsonString(kModel, b);
  b += ",\"input\":";
  AppendMessageArray(messages, 1, "\"type\":\"message\",", b);
  b += ",\"instructions\":";
  AppendJsonString(messages[0].content, b);
  b += ",\"stream\":true,\"max_output_tokens\":1024}";
  return b;
}

// The 16 shared system prompts for a given prompt size, and the conversation of variant v.
std::string SystemPrompt(size_t prompt_bytes, int k) {
  Rand rng{static_cast<uint64_t>(k) * 7919 + 1};
  const size_t n = std::min<size_t>(prompt_bytes / 2, 8192);
  std::string s = "You are assistant number " + std::to_string(k) + " of the support team. ";
  s += Text(rng, n > s.size() ? n - s.size() : 0);
  return s;
}

std::vector<Message> Conversation(size_t prompt_bytes, int variant) {
  Rand rng{static_cast<uint64_t>(variant) * 104729 + 17};
  std::vector<Message> msgs;
  msgs.push_back({"system", SystemPrompt(prompt_bytes, variant % kSystemPrompts)});
  // The canonical prompt is role + "\n" + content + "\n" per message (docs/scheduling.md).
  size_t used = msgs[0].role.size() + msgs[0].content.size() + 2;
  bool user = true;
  while (used < prompt_bytes) {
    const std::string role = user ? "user" : "assistant";
    const size_t overhead = role.size() + 2;
    size_t len = std::min<size_t>(4096, prompt_bytes - used > overhead ? prompt_bytes - used - overhead : 1);
    std::string content;
    if (msgs.size() == 1) {
      content = std::string(kMarker) + std::string(kCounterDigits, '0') + "] ";
      len = len > content.size() ? len - content.size() : 0;
    }
    content += Text(rng, len);
    used += overhead + content.size();
    msgs.push_back({role, std::move(content)});
    user = !user;
  }
  return msgs;
}

// Overwrites the conversation counter in `s` (at `pos`, the first digit) with `n`.
void SetCounter(std::string& s, size_t pos, uint64_t n) {
  for (int i = kCounterDigits - 1; i >= 0; --i) {
    s[pos + static_cast<size_t>(i)] = static_cast<char>('0' + n % 10);
    n /= 10;
  }
}

size_t CounterPos(const std::string& s) {
  const size_t p = s.find(kMarker);
  if (p == std::string::npos) {
    std::fprintf(stderr, "marker not found\n");
    std::abort();
  }
  return p + kMarker.size();
}

uint64_t NextRequestId() {
  static uint64_t id = 0;
  return ++id;
}

// ---------------------------------------------------------------------------------------------
// Scheduling fixture: a scheduler with the default config, a pool of endpoints, 16 request
// variants (as bodies and as parsed requests) and the prefix index warmed.

constexpr int64_t kNowUs = int64_t{1} << 40;

struct MetricSample {
  double waiting, running, kv;
};

struct PickFixture {
  size_t prompt_bytes = 0;
  int endpoints_n = 0;
  epp::ManualClock clock{kNowUs};
  std::unique_ptr<epp::Scheduler> scheduler;
  std::vector<epp::Endpoint> endpoints;
  std::vector<std::string> bodies;
  std::vector<size_t> body_counter_pos;
  std::vector<epp::InferenceRequest> requests;
  std::vector<size_t> prompt_counter_pos;
  std::unordered_map<std::string, size_t> index_of;  // address -> position in `endpoints`
  std::vector<uint32_t> picked;                       // picks per endpoint since ResetPicked()
  std::array<MetricSample, 1024> samples{};
  uint64_t churn = 0;

  // The pool's metrics move as a real pool's do, so that prefix affinity and load balance
  // compete (with static metrics one endpoint would win every pick): before each pick one
  // endpoint, in turn, gets fresh figures (its scraper ran, its queue drained); after each pick
  // the picked endpoint's queue grows by one and its KV use by 1% (the request it just got).
  void Churn() {
    epp::Endpoint& e = endpoints[churn % endpoints.size()];
    const MetricSample& m = samples[(churn * 7) % samples.size()];
    e.metrics.waiting_queue_size = m.waiting;
    e.metrics.running_requests = m.running;
    e.metrics.kv_cache_usage = m.kv;
    ++churn;
  }
  void Feedback(const epp::PickResult& r) {
    if (r.endpoints.empty()) return;
    auto it = index_of.find(r.endpoints.front());
    if (it == index_of.end()) return;
    ++picked[it->second];
    epp::EndpointMetrics& m = endpoints[it->second].metrics;
    m.waiting_queue_size = *m.waiting_queue_size + 1;
    m.kv_cache_usage = std::min(0.99, *m.kv_cache_usage + 0.01);
  }
  void ResetPicked() { std::fill(picked.begin(), picked.end(), 0); }
  int PickedEndpoints() const {
    int n = 0;
    for (uint32_t c : picked) n += c != 0;
    return n;
  }

  // Warm-up and BM_Pick: the pre-parsed request of variant i % 16 with a fresh counter.
  epp::PickResult PickParsed(uint64_t i, const epp::PickOptions& options = {}) {
    epp::InferenceRequest& r = requests[i % requests.size()];
    SetCounter(r.prompt, prompt_counter_pos[i % requests.size()], NextRequestId());
    Churn();
    epp::PickResult res = scheduler->Pick(r, endpoints, options);
    scheduler->Release(res);
    Feedback(res);
    return res;
  }
};

std::unique_ptr<PickFixture> MakePickFixture(size_t prompt_bytes, int n) {
  auto f = std::make_unique<PickFixture>();
  f->prompt_bytes = prompt_bytes;
  f->endpoints_n = n;
  auto s = epp::BuildScheduler(epp::DefaultConfig(), epp::BuiltinRegistry(), epp::PluginContext{&f->clock, nullptr});
  if (!s.ok()) {
    std::fprintf(stderr, "BuildScheduler: %s\n", std::string(s.status().message()).c_str());
    std::abort();
  }
  f->scheduler = std::move(*s);
  Rand rng{static_cast<uint64_t>(n) * 31 + prompt_bytes};
  for (auto& m : f->samples) {
    m.waiting = static_cast<double>(rng.Below(12));
    m.running = static_cast<double>(rng.Below(64));
    m.kv = 0.05 + 0.85 * rng.Uniform();
  }
  for (int i = 0; i < n; ++i) {
    epp::Endpoint e;
    e.address = "10." + std::to_string(1 + i / 250) + "." + std::to_string(i % 250) + ".7:8000";
    e.engine = "vllm";
    e.labels = {{"app", "vllm-llama3-8b"}, {"pool", "default"}};
    const MetricSample& m = f->samples[rng.Below(f->samples.size())];
    e.metrics.waiting_queue_size = m.waiting;
    e.metrics.running_requests = m.running;
    e.metrics.kv_cache_usage = m.kv;
    e.metrics.cache_block_size = 16;
    e.metrics.cache_num_blocks = g_kv_blocks;
    e.metrics_time_us = kNowUs - 50000;  // scraped 50 ms ago
    f->index_of.emplace(e.address, f->endpoints.size());
    f->endpoints.push_back(std::move(e));
  }
  f->picked.assign(f->endpoints.size(), 0);
  for (int v = 0; v < kSystemPrompts; ++v) {
    std::string body = ChatBody(Conversation(prompt_bytes, v));
    auto req = epp::ParseOpenAIRequest(kChatPath, body);
    if (!req.ok()) {
      std::fprintf(stderr, "ParseOpenAIRequest: %s\n", std::string(req.status().message()).c_str());
      std::abort();
    }
    f->body_counter_pos.push_back(CounterPos(body));
    f->bodies.push_back(std::move(body));
    f->prompt_counter_pos.push_back(CounterPos(req->prompt));
    f->requests.push_back(std::move(*req));
  }
  for (uint64_t i = 0; i < static_cast<uint64_t>(g_warmup_requests); ++i) f->PickParsed(i);
  return f;
}

// Google Benchmark calls a benchmark function several times (iteration estimate, repetitions);
// the fixture of the latest (size, endpoints) is kept, one at a time.
PickFixture& GetPickFixture(size_t prompt_bytes, int n) {
  static std::unique_ptr<PickFixture> current;
  if (!current || current->prompt_bytes != prompt_bytes || current->endpoints_n != n) {
    current.reset();
    current = MakePickFixture(prompt_bytes, n);
  }
  return *current;
}

void SetPickCounters(benchmark::State& state, PickFixture& f, int64_t picks, int64_t matched, int64_t hashed,
                     int64_t ok, int64_t prompt_bytes_total) {
  state.SetItemsProcessed(picks);
  state.counters["match_blocks"] = benchmark::Counter(static_cast<double>(matched) / static_cast<double>(picks));
  state.counters["hashed_blocks"] = benchmark::Counter(static_cast<double>(hashed) / static_cast<double>(picks));
  state.counters["ok"] = benchmark::Counter(static_cast<double>(ok) / static_cast<double>(picks));
  state.counters["prompt_bytes"] = benchmark::Counter(static_cast<double>(prompt_bytes_total) / static_cast<double>(picks));
  state.counters["index_entries"] = benchmark::Counter(static_cast<double>(f.scheduler->PrefixIndexEntries()));
  state.counters["picked_endpoints"] = benchmark::Counter(static_cast<double>(f.PickedEndpoints()));
}

// The timed work of one iteration, kept out of line so that a profiler can select it
// (valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*TimedPick*').
[[gnu::noinline]] epp::PickResult TimedPick(PickFixture& f, uint64_t i) { return f.PickParsed(i); }

// Also splits the iteration's wall time between parsing (ParseOpenAIRequest) and the rest (Pick,
// Release, destroying the request): two steady_clock reads, ~20 ns each.
struct ParsePickSplit {
  int64_t parse_ns = 0;
  int64_t pick_ns = 0;
};

[[gnu::noinline]] epp::PickResult TimedParsePick(PickFixture& f, uint64_t i, size_t& prompt_bytes,
                                                 ParsePickSplit& split) {
  const size_t v = i % f.bodies.size();
  std::string& body = f.bodies[v];
  SetCounter(body, f.body_counter_pos[v], NextRequestId());
  f.Churn();
  const auto t0 = std::chrono::steady_clock::now();
  epp::PickResult r;
  {
    // As the ext_proc session parses it: in place, from a buffer it owns.
    absl::StatusOr<epp::InferenceRequest> req = epp::ParseOpenAIRequestInPlace(kChatPath, body);
    const auto t1 = std::chrono::steady_clock::now();
    split.parse_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
    r = req.ok() ? f.scheduler->Pick(*req, f.endpoints) : epp::PickResult::BadRequest(req.status());
    f.scheduler->Release(r);
    prompt_bytes = req.ok() ? req->prompt.size() : 0;
  }
  split.pick_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  f.Feedback(r);
  return r;
}

// The timed loop of BM_Pick and BM_PickTraced: `pick(f, i)` per iteration, the pick counters.
template <class PickFn>
void PickLoop(benchmark::State& state, PickFixture& f, PickFn pick) {
  f.ResetPicked();
  uint64_t i = 0;
  int64_t matched = 0, hashed = 0, ok = 0, bytes = 0;
  for (auto _ : state) {
    const epp::PickResult r = pick(f, i);
    benchmark::DoNotOptimize(r.endpoints.data());
    matched += r.prefix_match_blocks;
    hashed += r.prefix_blocks;
    ok += r.status == 200;
    bytes += static_cast<int64_t>(f.requests[i % f.requests.size()].prompt.size());
    ++i;
  }
  SetPickCounters(state, f, static_cast<int64_t>(state.iterations()), matched, hashed, ok, bytes);
}

void BM_Pick(benchmark::State& state) {
  PickFixture& f = GetPickFixture(static_cast<size_t>(state.range(0)) * 1024, static_cast<int>(state.range(1)));
  PickLoop(state, f, TimedPick);
}

void BM_ParsePick(benchmark::State& state) {
  PickFixture& f = GetPickFixture(static_cast<size_t>(state.range(0)) * 1024, static_cast<int>(state.range(1)));
  f.ResetPicked();
  uint64_t i = 0;
  int64_t matched = 0, hashed = 0, ok = 0, bytes = 0, body_bytes = 0;
  ParsePickSplit split;
  for (auto _ : state) {
    size_t prompt_bytes = 0;
    const epp::PickResult r = TimedParsePick(f, i, prompt_bytes, split);
    benchmark::DoNotOptimize(r.endpoints.data());
    matched += r.prefix_match_blocks;
    hashed += r.prefix_blocks;
    ok += r.status == 200;
    bytes += static_cast<int64_t>(prompt_bytes);
    body_bytes += static_cast<int64_t>(f.bodies[i % f.bodies.size()].size());
    ++i;
  }
  SetPickCounters(state, f, static_cast<int64_t>(state.iterations()), matched, hashed, ok, bytes);
  state.SetBytesProcessed(body_bytes);
  const double n = static_cast<double>(state.iterations());
  state.counters["parse_us"] = static_cast<double>(split.parse_ns) / n / 1e3;
  state.counters["pick_us"] = static_cast<double>(split.pick_ns - split.parse_ns) / n / 1e3;
}

void PickArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"prompt_kib", "endpoints"});
  for (int64_t kib : {1, 32, 220})
    for (int64_t n : {8, 64, 512}) b->Args({kib, n});
  b->Args({220, 1000});  // issue #19's big pool: 1,000 candidates with a 220 KiB prompt
  b->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_Pick)->Apply(PickArgs);
BENCHMARK(BM_ParsePick)->Apply(PickArgs);

// BM_Pick for a sampled request under --tracing: the cycle records its spans (PickOptions::spans),
// they become OTLP spans with ids (Tracer::AppendCycleSpans) and go to the tracer's queue; the
// tracer's thread encodes each batch as OTLP protobuf (what the default gRPC exporter sends) off
// the request path and posts it to a loopback port nothing listens on (refused at once). On a
// 2-core machine that thread's CPU competes with the pick's, and is counted here.
// Every request asks the sampler (a trace id drawn, the ratio checked), as serve does; llm-d's
// default samples a tenth of them (parentbased_traceidratio 0.1), and only those record spans.
// Compare with BM_Pick at the same arguments: the difference is what tracing at the default
// sampler adds to the average pick.
[[gnu::noinline]] epp::PickResult TimedTracedPick(PickFixture& f, uint64_t i, epp::Tracer& tracer) {
  const epp::TraceContext ctx = tracer.StartRequest(std::nullopt);
  if (!ctx.sampled) return f.PickParsed(i);
  std::vector<epp::CycleSpan> spans;
  epp::PickOptions po;
  po.spans = &spans;
  epp::PickResult r = f.PickParsed(i, po);
  std::vector<epp::Span> out;
  epp::Tracer::AppendCycleSpans(spans, ctx.trace_id, ctx.span_id, ctx.trace_state, epp::Tracer::SteadyToUnixOffsetNs(), out);
  tracer.Export(std::move(out));
  return r;
}

void BM_PickTraced(benchmark::State& state) {
  PickFixture& f = GetPickFixture(static_cast<size_t>(state.range(0)) * 1024, static_cast<int>(state.range(1)));
  epp::TracingOptions o;
  o.exporter = epp::TracingOptions::Exporter::kOtlp;
  o.protocol = epp::OtlpProtocol::kHttpProtobuf;
  o.endpoint = "http://127.0.0.1:9/v1/traces";  // discard: nothing listens, the connect is refused
  o.sampler = epp::TraceSampler::kParentBasedTraceIdRatio;  // llm-d's default, ratio 0.1
  o.sampler_ratio = 0.1;
  o.schedule_delay = std::chrono::milliseconds(200);
  auto tracer = epp::Tracer::Start(o);
  if (!tracer.ok()) std::abort();
  epp::Tracer& t = **tracer;
  PickLoop(state, f, [&t](PickFixture& fx, uint64_t i) { return TimedTracedPick(fx, i, t); });
  t.Flush(std::chrono::milliseconds(5000));
  state.counters["sampled"] = static_cast<double>(t.stats().traces_sampled) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_PickTraced)->ArgNames({"prompt_kib", "endpoints"})->Args({1, 8})->Args({32, 64})->Args({32, 512})->Unit(benchmark::kMicrosecond);

// One traced pick's own cost: every pick records its spans (PickOptions::spans), then drops them
// (no ids, no queue, no exporter).
void BM_PickSpansOnly(benchmark::State& state) {
  PickFixture& f = GetPickFixture(static_cast<size_t>(state.range(0)) * 1024, static_cast<int>(state.range(1)));
  f.ResetPicked();
  uint64_t i = 0;
  size_t spans_per_pick = 0;
  for (auto _ : state) {
    std::vector<epp::CycleSpan> spans;
    epp::PickOptions po;
    po.spans = &spans;
    const epp::PickResult r = f.PickParsed(i++, po);
    benchmark::DoNotOptimize(r.endpoints.data());
    spans_per_pick = spans.size();
  }
  state.counters["spans"] = static_cast<double>(spans_per_pick);
}
BENCHMARK(BM_PickSpansOnly)->ArgNames({"prompt_kib", "endpoints"})->Args({1, 8})->Args({32, 64})->Args({32, 512})->Unit(benchmark::kMicrosecond);

// ---------------------------------------------------------------------------------------------
// Prefix hashing and request parsing, on the bodies above (variant 0, counter 0).

struct Input {
  std::string name;
  std::string_view path;
  std::string body;
  std::string prompt;  // the canonical prompt epp renders from the body
};

const std::vector<Input>& Inputs() {
  static const std::vector<Input> inputs = [] {
    std::vector<Input> v;
    for (size_t kib : {1, 32, 220}) {
      v.push_back({"chat-" + std::to_string(kib) + "KiB", kChatPath, ChatBody(Conversation(kib * 1024, 0)), {}});
    }
    for (size_t kib : {1, 32, 220}) {
      Rand rng{kib};
      v.push_back({"completions-" + std::to_string(kib) + "KiB", kCompletionsPath,
                   CompletionsBody(SystemPrompt(kib * 1024, 0) + Text(rng, kib * 1024 - SystemPrompt(kib * 1024, 0).size())),
                   {}});
    }
    v.push_back({"responses-220KiB", kResponsesPath, ResponsesBody(Conversation(220 * 1024, 0)), {}});
    for (Input& in : v) {
      auto req = epp::ParseOpenAIRequest(in.path, in.body);
      if (!req.ok()) {
        std::fprintf(stderr, "%s: %s\n", in.name.c_str(), std::string(req.status().message()).c_str());
        std::abort();
      }
      in.prompt = std::move(req->prompt);
    }
    return v;
  }();
  return inputs;
}

void BM_ChainedBlockHashes(benchmark::State& state, const Input* in) {
  const uint64_t seed = epp::PrefixSeed(kModel);
  const std::string& text = in->prompt;
  constexpr size_t kBlock = 16 * epp::kCharsPerToken;  // GIE's default: 16 tokens = 64 characters
  for (auto _ : state) {
    std::vector<uint64_t> h = epp::ChainedBlockHashes(text, kBlock, seed);
    benchmark::DoNotOptimize(h.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * (text.size() / kBlock) * kBlock));
  state.counters["blocks"] = static_cast<double>(text.size() / kBlock);
}

void BM_XXH3_64bits(benchmark::State& state, const Input* in) {
  const std::string& text = in->prompt;
  constexpr size_t kBlock = 16 * epp::kCharsPerToken;
  const size_t n = (text.size() / kBlock) * kBlock;  // the bytes ChainedBlockHashes hashes
  for (auto _ : state) {
    uint64_t h = XXH3_64bits(text.data(), n);
    benchmark::DoNotOptimize(h);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
}

// dom: the DOM path alone (epp::internal::ParseOpenAIRequestDom), the fast path's reference.
void BM_ParseOpenAIRequest(benchmark::State& state, const Input* in, bool dom) {
  for (auto _ : state) {
    absl::StatusOr<epp::InferenceRequest> r =
        dom ? epp::internal::ParseOpenAIRequestDom(in->path, in->body) : epp::ParseOpenAIRequest(in->path, in->body);
    benchmark::DoNotOptimize(r->prompt.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * in->body.size()));
  state.counters["body_bytes"] = static_cast<double>(in->body.size());
  state.counters["prompt_bytes"] = static_cast<double>(in->prompt.size());
}

// The same parse, cycling through the 16 chat bodies of BM_ParsePick (one per system prompt):
// 16 x 32 or 220 KiB do not stay in the core's caches between parses, as a body just received
// from the network would not either; the plain benchmark re-parses one cached body.
// in_place: ParseOpenAIRequestInPlace, as the ext_proc session parses the body it buffered.
// dom: the DOM path alone (epp::internal::ParseOpenAIRequestDom).
void BM_ParseOpenAIRequest16(benchmark::State& state, size_t prompt_bytes, bool in_place, bool dom) {
  std::vector<std::string> bodies;
  for (int v = 0; v < kSystemPrompts; ++v) bodies.push_back(ChatBody(Conversation(prompt_bytes, v)));
  size_t i = 0;
  int64_t bytes = 0;
  for (auto _ : state) {
    std::string& body = bodies[i++ % bodies.size()];
    absl::StatusOr<epp::InferenceRequest> r =
        dom        ? epp::internal::ParseOpenAIRequestDom(kChatPath, body)
        : in_place ? epp::ParseOpenAIRequestInPlace(kChatPath, body)
                   : epp::ParseOpenAIRequest(kChatPath, body);
    benchmark::DoNotOptimize(r->prompt.data());
    bytes += static_cast<int64_t>(body.size());
  }
  state.SetBytesProcessed(bytes);
}

// What a straightforward nlohmann-based parser does for the same result: parse the document,
// take model / stream / cache_salt, render the canonical prompt (docs/scheduling.md) for the
// shapes these bodies use (string contents and text parts; a string or array-of-strings prompt).
struct NlohmannRequest {
  std::string model;
  bool stream = false;
  std::string cache_salt;
  std::string prompt;
  int64_t prompt_tokens = 0;
};

NlohmannRequest NlohmannParse(std::string_view path, std::string_view body) {
  const nlohmann::json j = nlohmann::json::parse(body);
  NlohmannRequest r;
  r.model = j.at("model").get<std::string>();
  if (auto it = j.find("stream"); it != j.end() && !it->is_null()) r.stream = it->get<bool>();
  if (auto it = j.find("cache_salt"); it != j.end() && !it->is_null()) r.cache_salt = it->get<std::string>();
  if (epp::ApiKindForPath(path) == epp::ApiKind::kChatCompletions) {
    for (const nlohmann::json& m : j.at("messages")) {
      r.prompt += m.at("role").get_ref<const std::string&>();
      r.prompt += '\n';
      if (auto c = m.find("content"); c != m.end()) {
        if (c->is_string()) {
          r.prompt += c->get_ref<const std::string&>();
        } else if (c->is_array()) {
          for (const nlohmann::json& part : *c)
            if (part.value("type", "") == "text") r.prompt += part.at("text").get_ref<const std::string&>();
        }
      }
      r.prompt += '\n';
    }
  } else {
    const nlohmann::json& p = j.at("prompt");
    if (p.is_string()) {
      r.prompt = p.get<std::string>();
    } else {
      for (size_t i = 0; i < p.size(); ++i) {
        if (i) r.prompt += '\n';
        r.prompt += p[i].get_ref<const std::string&>();
      }
    }
  }
  r.prompt_tokens = epp::ApproxTokens(r.prompt.size());
  return r;
}

void BM_NlohmannParse(benchmark::State& state, const Input* in) {
  if (NlohmannParse(in->path, in->body).prompt != in->prompt) {
    state.SkipWithError("nlohmann rendering differs from epp's canonical prompt");
    return;
  }
  for (auto _ : state) {
    NlohmannRequest r = NlohmannParse(in->path, in->body);
    benchmark::DoNotOptimize(r.prompt.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * in->body.size()));
  state.counters["body_bytes"] = static_cast<double>(in->body.size());
}

void RegisterInputBenchmarks() {
  for (const Input& in : Inputs()) {
    if (in.path == kChatPath) {
      benchmark::RegisterBenchmark(("BM_ChainedBlockHashes/" + in.name).c_str(), BM_ChainedBlockHashes, &in);
      benchmark::RegisterBenchmark(("BM_XXH3_64bits/" + in.name).c_str(), BM_XXH3_64bits, &in);
    }
  }
  for (const Input& in : Inputs()) {
    benchmark::RegisterBenchmark(("BM_ParseOpenAIRequest/" + in.name).c_str(), BM_ParseOpenAIRequest, &in, false)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("BM_ParseOpenAIRequestDom/" + in.name).c_str(), BM_ParseOpenAIRequest, &in, true)
        ->Unit(benchmark::kMicrosecond);
    if (in.path == kResponsesPath) continue;  // the nlohmann comparison renders chat and completions only
    benchmark::RegisterBenchmark(("BM_NlohmannParse/" + in.name).c_str(), BM_NlohmannParse, &in)
        ->Unit(benchmark::kMicrosecond);
  }
  for (size_t kib : {32, 220}) {
    benchmark::RegisterBenchmark(("BM_ParseOpenAIRequest/chat-" + std::to_string(kib) + "KiB-16bodies").c_str(),
                                 BM_ParseOpenAIRequest16, kib * 1024, false, false)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("BM_ParseOpenAIRequest/chat-" + std::to_string(kib) + "KiB-16bodies-in-place").c_str(),
                                 BM_ParseOpenAIRequest16, kib * 1024, true, false)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("BM_ParseOpenAIRequestDom/chat-" + std::to_string(kib) + "KiB-16bodies").c_str(),
                                 BM_ParseOpenAIRequest16, kib * 1024, false, true)
        ->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Heap state: a 220 KiB body makes strings (the prompt, nlohmann's values) above glibc's
  // initial mmap threshold, and whether freed memory goes back to the kernel after each
  // iteration (a page fault per 4 KiB touched next time) depends on unrelated allocations. A
  // long-running picker keeps its heap; so, as the parse benchmark's /warm-heap rows do, freed
  // memory is kept in the process unless --default_heap is given.
  bool default_heap = false;
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--default_heap") {
      default_heap = true;
    } else if (arg.starts_with("--warmup_requests=")) {
      g_warmup_requests = std::atoll(argv[i] + std::string_view("--warmup_requests=").size());
    } else if (arg.starts_with("--kv_blocks=")) {
      g_kv_blocks = std::atoll(argv[i] + std::string_view("--kv_blocks=").size());
    } else {
      argv[out++] = argv[i];
    }
  }
  argc = out;
#if defined(__GLIBC__)
  if (!default_heap) {
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
  }
#endif
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RegisterInputBenchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
