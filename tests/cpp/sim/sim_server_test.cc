// Virtual-time tests of the simulator's cost model: every time below is computed by hand from
// the formulas in docs/sim.md, in integer microseconds.
#include "epp/tools/sim.h"

#include <gtest/gtest.h>

#include "epp/metrics.h"

namespace epp {
namespace {

SimParams Tiny() {
  SimParams p;
  p.decode_step_ms = 10;        // 10,000 us per decode step
  p.decode_ms_per_seq = 0;
  p.prefill_tokens_per_s = 1000;  // 1,000 us per prefill token
  p.block_size = 4;
  p.kv_blocks = 100;
  p.max_running = 2;
  p.lora_load_ms = 5;
  return p;
}

SimRequest Req(uint64_t id, std::vector<uint64_t> blocks, int64_t prompt, int64_t out, std::string adapter = "") {
  SimRequest r;
  r.id = id;
  r.block_hashes = std::move(blocks);
  r.prompt_tokens = prompt;
  r.output_tokens = out;
  r.adapter = std::move(adapter);
  return r;
}

std::unique_ptr<SimServer> Make(const SimParams& p) {
  auto s = SimServer::Create(p);
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

SimRequestResult RunToEnd(SimServer& s, uint64_t id) {
  s.AdvanceTo(10'000'000);
  auto r = s.TakeResult(id);
  EXPECT_TRUE(r.has_value());
  return r.value_or(SimRequestResult{});
}

TEST(SimServerTest, SingleRequestPrefillThenDecode) {
  auto s = Make(Tiny());
  std::vector<SimEvent> ev;
  ASSERT_TRUE(s->Submit(Req(1, {11, 12}, 8, 3), 0, &ev).ok());
  s->AdvanceTo(100'000, &ev);
  // Step 1: 8 prefill tokens (8,000) + one decode step (10,000) -> first token at 18,000.
  // Two more decode steps -> finished at 38,000.
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, SimEvent::Kind::kFirstToken);
  EXPECT_EQ(ev[0].time_us, 18'000);
  EXPECT_EQ(ev[1].kind, SimEvent::Kind::kFinished);
  EXPECT_EQ(ev[1].time_us, 38'000);
  auto r = s->TakeResult(1);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->cached_tokens, 0);
  EXPECT_EQ(r->output_tokens, 3);
  EXPECT_EQ(s->NextEventTime(), std::numeric_limits<int64_t>::max());
}

TEST(SimServerTest, RemotePrefilledTokensCostNoPrefillCompute) {
  // Disaggregated P/D: 6 of the 8 prompt tokens arrived as KV from a prefill server, so the
  // admission step computes 2: 2,000 + 10,000 -> first token at 12,000.
  auto s = Make(Tiny());
  SimRequest r = Req(1, {11, 12}, 8, 1);
  r.remote_prefilled_tokens = 6;
  std::vector<SimEvent> ev;
  ASSERT_TRUE(s->Submit(r, 0, &ev).ok());
  s->AdvanceTo(100'000, &ev);
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev[0].time_us, 12'000);
  r.id = 2;
  r.remote_prefilled_tokens = 9;
  EXPECT_EQ(s->Submit(r, 100'000).code(), absl::StatusCode::kInvalidArgument) << "more than the prompt";
}

TEST(SimServerTest, RepeatedPrefixIsCachedAndSkipsPrefill) {
  auto s = Make(Tiny());
  ASSERT_TRUE(s->Submit(Req(1, {11, 12}, 8, 3), 0).ok());
  s->AdvanceTo(50'000);
  ASSERT_TRUE(s->TakeResult(1));
  EXPECT_EQ(s->CachedPrefixBlocks(std::vector<uint64_t>{11, 12, 13}), 2);
  ASSERT_TRUE(s->Submit(Req(2, {11, 12}, 8, 3), 50'000).ok());
  SimRequestResult r = RunToEnd(*s, 2);
  // Both blocks hit, but one token is always recomputed: cached 7, prefill 1 (1,000 us).
  EXPECT_EQ(r.cached_tokens, 7);
  EXPECT_EQ(r.first_token_us, 50'000 + 1'000 + 10'000);
  EXPECT_EQ(r.finish_us, 61'000 + 20'000);
  SimSnapshot snap = s->Snapshot();
  EXPECT_EQ(snap.prefix_query_tokens_total, 16u);
  EXPECT_EQ(snap.prefix_hit_tokens_total, 7u);
}

TEST(SimServerTest, PartialPrefixMatchStopsAtFirstMiss) {
  auto s = Make(Tiny());
  ASSERT_TRUE(s->Submit(Req(1, {11, 12, 13}, 12, 1), 0).ok());
  s->AdvanceTo(100'000);
  ASSERT_TRUE(s->Submit(Req(2, {11, 99, 13}, 12, 1), 100'000).ok());
  SimRequestResult r = RunToEnd(*s, 2);
  EXPECT_EQ(r.cached_tokens, 4);
  EXPECT_EQ(r.first_token_us, 100'000 + 8'000 + 10'000);
}

TEST(SimServerTest, QueueBeyondMaxRunningWaits) {
  auto s = Make(Tiny());
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(s->Submit(Req(id, {id * 100}, 4, 2), 0).ok());
  s->AdvanceTo(20'000);
  SimSnapshot snap = s->Snapshot();
  EXPECT_EQ(snap.running, 2);
  EXPECT_EQ(snap.waiting, 1);
  s->AdvanceTo(1'000'000);
  auto r1 = s->TakeResult(1), r3 = s->TakeResult(3);
  ASSERT_TRUE(r1 && r3);
  // Step 1: 8 prefill tokens + decode = 18,000 (first tokens of 1 and 2); step 2: 10,000 -> both
  // finish at 28,000; request 3 is admitted then: 4,000 + 10,000 -> 42,000, finishes at 52,000.
  EXPECT_EQ(r1->first_token_us, 18'000);
  EXPECT_EQ(r1->finish_us, 28'000);
  EXPECT_EQ(r3->admitted_us, 28'000);
  EXPECT_EQ(r3->first_token_us, 42'000);
  EXPECT_EQ(r3->finish_us, 52'000);
}

TEST(SimServerTest, ArrivalDuringMultiStepRunJoinsAtTheNextStep) {
  auto s = Make(Tiny());
  ASSERT_TRUE(s->Submit(Req(1, {1}, 4, 10), 0).ok());
  // A: first token at 14,000, then 9 decode steps would end at 104,000.
  EXPECT_EQ(s->NextEventTime(), 14'000);
  s->AdvanceTo(14'000);
  EXPECT_EQ(s->NextEventTime(), 104'000);
  ASSERT_TRUE(s->Submit(Req(2, {2}, 4, 2), 30'000).ok());
  EXPECT_EQ(s->Progress(1), 2);  // 1 + one full decode step since 14,000
  // The run is cut at the end of the step in progress (34,000); B's admission step takes
  // 4,000 + 10,000 -> 48,000; B's last token at 58,000; A's remaining 5 tokens end at 108,000.
  s->AdvanceTo(1'000'000);
  auto a = s->TakeResult(1), b = s->TakeResult(2);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(b->admitted_us, 34'000);
  EXPECT_EQ(b->first_token_us, 48'000);
  EXPECT_EQ(b->finish_us, 58'000);
  EXPECT_EQ(a->finish_us, 108'000);
}

TEST(SimServerTest, DecodeStepGrowsWithBatchSize) {
  SimParams p = Tiny();
  p.decode_ms_per_seq = 1;  // step = 10 ms + 1 ms x running
  auto s = Make(p);
  ASSERT_TRUE(s->Submit(Req(1, {1}, 4, 2), 0).ok());
  ASSERT_TRUE(s->Submit(Req(2, {2}, 4, 2), 0).ok());
  s->AdvanceTo(1'000'000);
  auto r = s->TakeResult(2);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->first_token_us, 8'000 + 12'000);
  EXPECT_EQ(r->finish_us, 20'000 + 12'000);
}

TEST(SimServerTest, KvUsageCountsPinnedAndPrivateBlocksAndEvictsLru) {
  SimParams p = Tiny();
  p.kv_blocks = 10;
  auto s = Make(p);
  // 16 prompt tokens (4 cached blocks) + 4 output tokens (1 private block) = 5 blocks each.
  ASSERT_TRUE(s->Submit(Req(1, {1, 2, 3, 4}, 16, 4), 0).ok());
  ASSERT_TRUE(s->Submit(Req(2, {5, 6, 7, 8}, 16, 4), 0).ok());
  s->AdvanceTo(1);
  EXPECT_DOUBLE_EQ(s->Snapshot().kv_usage, 1.0);
  ASSERT_TRUE(s->Submit(Req(3, {9, 10, 11, 12}, 16, 4), 1).ok());
  s->AdvanceTo(2);
  EXPECT_EQ(s->Snapshot().waiting, 1);  // no room until a request finishes
  s->AdvanceTo(1'000'000);
  auto r3 = s->TakeResult(3);
  ASSERT_TRUE(r3);
  // Both are admitted together: 32 prefill tokens + a decode step = 42,000, then 3 more steps:
  // both finish at 72,000. Request 3 then needs 5 blocks; 2 are free, so 3 are evicted from the LRU.
  EXPECT_EQ(r3->admitted_us, 72'000);
  SimSnapshot snap = s->Snapshot();
  EXPECT_DOUBLE_EQ(snap.kv_usage, 0.0);
  EXPECT_EQ(snap.cached_blocks, 9);  // 8 cached before, 3 evicted, 4 new
  // Tail blocks are freed first, so request 1 loses blocks 4, 3, 2 and keeps its first block.
  EXPECT_EQ(s->CachedPrefixBlocks(std::vector<uint64_t>{1, 2, 3, 4}), 1);
  EXPECT_EQ(s->CachedPrefixBlocks(std::vector<uint64_t>{5, 6, 7, 8}), 4);
  EXPECT_EQ(s->CachedPrefixBlocks(std::vector<uint64_t>{9, 10, 11, 12}), 4);
}

TEST(SimServerTest, LoraAdaptersLoadWithDelayAndSwapWhenIdle) {
  SimParams p = Tiny();
  p.loras = {"a", "b"};
  p.max_loras = 1;
  auto s = Make(p);
  ASSERT_TRUE(s->Submit(Req(1, {1}, 4, 2, "a"), 0).ok());
  ASSERT_TRUE(s->Submit(Req(2, {2}, 4, 2, "b"), 0).ok());
  ASSERT_TRUE(s->Submit(Req(3, {3}, 4, 2), 0).ok());  // base model: not held up by adapters
  s->AdvanceTo(1);
  SimSnapshot snap = s->Snapshot();
  EXPECT_EQ(snap.running, 1);
  EXPECT_EQ(snap.waiting_adapters, (std::vector<std::string>{"a", "b"}));
  s->AdvanceTo(1'000'000);
  auto r1 = s->TakeResult(1), r2 = s->TakeResult(2), r3 = s->TakeResult(3);
  ASSERT_TRUE(r1 && r2 && r3);
  EXPECT_EQ(r3->admitted_us, 0);
  // "a" loads in 5,000 us; its admission step starts when the base request's step ends (14,000).
  EXPECT_EQ(r1->admitted_us, 14'000);
  // "b" can only load once "a" is idle: "a" finishes at 14,000 + 14,000 + 10,000 = 38,000,
  // then "b" loads until 43,000 and runs 14,000 + 10,000.
  EXPECT_EQ(r1->finish_us, 38'000);
  EXPECT_EQ(r2->admitted_us, 43'000);
  EXPECT_EQ(r2->finish_us, 67'000);
  EXPECT_EQ(s->Snapshot().resident_adapters, (std::vector<std::string>{"b"}));
}

TEST(SimServerTest, PromptLargerThanTheCacheIsRejected) {
  SimParams p = Tiny();
  p.kv_blocks = 2;
  auto s = Make(p);
  std::vector<SimEvent> ev;
  ASSERT_TRUE(s->Submit(Req(1, {1, 2}, 8, 4), 0, &ev).ok());
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, SimEvent::Kind::kRejected);
  EXPECT_TRUE(s->TakeResult(1)->rejected);
}

TEST(SimServerTest, InvalidInputsAreErrors) {
  SimParams p = Tiny();
  p.max_running = 0;
  EXPECT_EQ(SimServer::Create(p).status().code(), absl::StatusCode::kInvalidArgument);
  p = Tiny();
  p.engine = "tgi";
  EXPECT_EQ(SimServer::Create(p).status().code(), absl::StatusCode::kInvalidArgument);
  auto s = Make(Tiny());
  EXPECT_FALSE(s->Submit(Req(1, {}, 0, 1), 0).ok());
  EXPECT_FALSE(s->Submit(Req(1, {1, 2}, 4, 1), 0).ok());  // more full blocks than tokens
  EXPECT_FALSE(s->Submit(Req(1, {}, 4, 1, "nope"), 0).ok());
  ASSERT_TRUE(s->Submit(Req(1, {}, 4, 1), 0).ok());
  EXPECT_FALSE(s->Submit(Req(1, {}, 4, 1), 0).ok());  // duplicate id
}

TEST(SimServerTest, SameInputsSameTimeline) {
  auto run = [] {
    auto s = Make(Tiny());
    std::vector<SimEvent> ev;
    for (uint64_t i = 1; i <= 20; ++i) {
      EXPECT_TRUE(s->Submit(Req(i, {i % 3, i % 3 + 10}, 8 + static_cast<int64_t>(i % 5), 1 + static_cast<int64_t>(i % 7)),
                            static_cast<int64_t>(i) * 3'000, &ev).ok());
    }
    s->AdvanceTo(10'000'000, &ev);
    std::vector<int64_t> times;
    for (const SimEvent& e : ev) times.push_back(e.time_us * 1000 + static_cast<int64_t>(e.id));
    return times;
  };
  EXPECT_EQ(run(), run());
}

TEST(SimMetricsTest, EachDialectPassesItsOwnExtraction) {
  for (const char* engine : {"vllm", "sglang", "trtllm-serve"}) {
    SimParams p = Tiny();
    p.engine = engine;
    auto s = Make(p);
    ASSERT_TRUE(s->Submit(Req(1, {1}, 4, 3), 0).ok());
    s->AdvanceTo(1);
    std::string text = RenderSimMetrics(p, s->Snapshot(), 1.7e9);
    auto fams = ParsePrometheusText(text);
    ASSERT_TRUE(fams.ok()) << engine << ": " << fams.status();
    EXPECT_EQ(DetectEngine(*fams), engine);
    MetricsExtraction ex = ExtractMetrics(*fams, *MetricMapping::BuiltIn(engine));
    EXPECT_EQ(ex.metrics.running_requests, 1) << engine;
    EXPECT_EQ(ex.metrics.waiting_queue_size, 0) << engine;
    EXPECT_DOUBLE_EQ(*ex.metrics.kv_cache_usage, 2.0 / 100) << engine;  // 1 prompt block + 1 private
    EXPECT_EQ(ex.metrics.cache_block_size, 4) << engine;
    EXPECT_EQ(ex.metrics.cache_num_blocks, 100) << engine;
  }
}

}  // namespace
}  // namespace epp
