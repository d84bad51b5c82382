// Replay: exact virtual-time results on tiny cases computed by hand from the cost model in
// docs/sim.md (default SimParams: step = 1000 x (6.0 + 0.05 x running) us + prefill tokens x 50 us),
// the trace bounds, determinism, the baselines, the workloads and loaders, and the report writers.
#include "epp/tools/replay.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "replay/render.h"
#include "testing/epp_testing.h"

namespace epp {
namespace {

ReplayRequest Req(int64_t arrival_us, std::vector<ReplaySegment> segments, int64_t output_tokens) {
  ReplayRequest r;
  r.arrival_us = arrival_us;
  r.segments = std::move(segments);
  for (const ReplaySegment& s : r.segments) r.prompt_tokens += s.tokens;
  r.output_tokens = output_tokens;
  return r;
}

ReplayPolicy Policy(std::string_view name) {
  absl::StatusOr<ReplayPolicy> p = NamedReplayPolicy(name);
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

ReplayReport Replay(const std::vector<ReplayRequest>& trace, const std::vector<std::string>& policies, int servers,
                 ReplayOptions options = {}) {
  options.servers = servers;
  std::vector<ReplayPolicy> ps;
  for (const std::string& n : policies) ps.push_back(Policy(n));
  absl::StatusOr<ReplayReport> r = RunReplay(trace, ps, options);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : ReplayReport{};
}

std::string WriteTemp(const std::string& name, const std::string& body) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << body;
  return path;
}

// --- Virtual time -------------------------------------------------------------------------------

TEST(RunReplayTest, OneRequestOnOneServerHasTheCostModelsTimes) {
  // 1000 prompt tokens, 10 output tokens. Admission step: 6,050 us decode (one sequence) + 1000 x
  // 50 us prefill = 56,050 us (TTFT); then 9 decode steps of 6,050 us: E2E = 110,500 us.
  const ReplayReport r = Replay({Req(0, {{7, 1000}}, 10)}, {"round-robin"}, 1);
  ASSERT_EQ(r.policies.size(), 1u);
  const ReplayPolicyReport& p = r.policies[0];
  EXPECT_EQ(p.completed, 1);
  EXPECT_EQ(p.failed, 0);
  EXPECT_DOUBLE_EQ(p.ttft_s.p50, 0.05605);
  EXPECT_DOUBLE_EQ(p.ttft_s.p99, 0.05605);
  EXPECT_DOUBLE_EQ(p.e2e_s.p50, 0.1105);
  EXPECT_DOUBLE_EQ(p.queue_s.p50, 0);
  EXPECT_DOUBLE_EQ(p.block_hit_rate, 0);
  EXPECT_EQ(p.requests_per_server, std::vector<int64_t>{1});
  ASSERT_EQ(p.ttft_samples_s.size(), 1u);
  EXPECT_DOUBLE_EQ(p.ttft_samples_s[0], 0.05605);
  EXPECT_TRUE(std::isnan(p.prediction_error_rate));  // round robin predicts nothing
  EXPECT_EQ(r.trace.requests, 1);
  EXPECT_EQ(r.trace.blocks, 62);  // 1000 / 16, full blocks only
  EXPECT_EQ(r.trace.prompt_tokens, 1000);
}

TEST(RunReplayTest, DisaggregatedPoolPrefillsRemotelyAndPaysTheKvTransfer) {
  // One 1000-token request, 10 output tokens, on 1 prefill + 1 decode server with llm-d's P/D
  // config (nonCachedTokens 16). Prefill stage on the prefill server: 6,050 + 1000 x 50 = 56,050
  // us, done (one output token). KV transfer: 1000 x 131072 bytes / 25 GB/s = 5,243 us. Decode
  // stage at 61,293 us with no prefill compute: first token after one step, 67,343 us (TTFT);
  // 9 more steps of 6,050 us: 121,793 us (E2E). Round robin runs on two unlabelled servers.
  absl::StatusOr<ReplayPolicy> pd = ResolveReplayPolicy(std::string(EPP_SOURCE_DIR) + "/examples/configs/pd-disagg.yaml", 1);
  ASSERT_TRUE(pd.ok()) << pd.status();
  ReplayOptions o;
  o.prefill_servers = 1;
  o.decode_servers = 1;
  absl::StatusOr<ReplayReport> r = RunReplay({Req(0, {{7, 1000}}, 10)}, {Policy("round-robin"), *pd}, o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->policies.size(), 2u);
  const ReplayPolicyReport& rr = r->policies[0];
  EXPECT_FALSE(rr.disaggregated_pool);
  EXPECT_EQ(rr.server_roles, (std::vector<std::string>{"", ""}));
  EXPECT_DOUBLE_EQ(rr.ttft_s.p50, 0.05605);
  const ReplayPolicyReport& p = r->policies[1];
  EXPECT_TRUE(p.disaggregated_pool);
  EXPECT_EQ(p.server_roles, (std::vector<std::string>{"prefill", "decode"}));
  EXPECT_EQ(p.completed, 1);
  EXPECT_EQ(p.disaggregated, 1);
  EXPECT_DOUBLE_EQ(p.kv_transfer_s_mean, 0.005243);
  EXPECT_DOUBLE_EQ(p.ttft_s.p50, 0.067343);
  EXPECT_DOUBLE_EQ(p.e2e_s.p50, 0.121793);
  EXPECT_DOUBLE_EQ(p.itl_s.p50, 0.00605);
  EXPECT_EQ(p.requests_per_server, (std::vector<int64_t>{1, 1})) << "one stage on each";
  const std::string text = ReplayReportToText(*r);
  EXPECT_NE(text.find("P/D pool (1 prefill + 1 decode servers): 1 of 1 requests prefilled remotely"), std::string::npos) << text;

  // A short prompt stays on the decode server (the decider says no): no transfer.
  absl::StatusOr<ReplayReport> short_prompt = RunReplay({Req(0, {{8, 8}}, 2)}, {*pd}, o);
  ASSERT_TRUE(short_prompt.ok()) << short_prompt.status();
  EXPECT_EQ(short_prompt->policies[0].disaggregated, 0);
  EXPECT_EQ(short_prompt->policies[0].requests_per_server, (std::vector<int64_t>{0, 1}));

  o.decode_servers = 0;
  EXPECT_EQ(RunReplay({Req(0, {{7, 10}}, 1)}, {*pd}, o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RunReplayTest, IdenticalRequestsOnOneServerHitTheCache) {
  // The second request finds 62 cached blocks = 992 tokens and prefills 8: 6,050 + 400 = 6,450 us.
  const ReplayReport r = Replay({Req(0, {{7, 1000}}, 10), Req(1'000'000, {{7, 1000}}, 10)}, {"round-robin", "gie-default"}, 1);
  for (const ReplayPolicyReport& p : r.policies) {
    SCOPED_TRACE(p.name);
    EXPECT_EQ(p.completed, 2);
    EXPECT_DOUBLE_EQ(p.block_hit_rate, 62.0 / 124.0);
    EXPECT_DOUBLE_EQ(p.token_hit_rate, 992.0 / 2000.0);
    ASSERT_EQ(p.ttft_samples_s.size(), 2u);
    EXPECT_DOUBLE_EQ(p.ttft_samples_s[0], 0.00645);
    EXPECT_DOUBLE_EQ(p.ttft_samples_s[1], 0.05605);
    EXPECT_DOUBLE_EQ(p.ttft_s.p50, (0.00645 + 0.05605) / 2);
    // Throughput: 2 completions between the first arrival and the last finish (1 s + 56,450 us).
    EXPECT_NEAR(p.throughput_rps, 2 / (1.0 + 0.00645 + 9 * 0.00605), 1e-12);
  }
  EXPECT_DOUBLE_EQ(r.policies[1].prediction_error_rate, 0);  // the EPP knew where the prefix was
  EXPECT_DOUBLE_EQ(r.trace.upper_bound_block_hit_rate, 0.5);
}

TEST(RunReplayTest, RoundRobinAlternatesAndLosesTheCacheThatAffinityKeeps) {
  std::vector<ReplayRequest> trace;
  for (int i = 0; i < 4; ++i) trace.push_back(Req(i * 1'000'000, {{7, 1000}}, 10));
  const ReplayReport r = Replay(trace, {"round-robin", "gie-default"}, 2);
  const ReplayPolicyReport& rr = r.policies[0];
  EXPECT_EQ(rr.requests_per_server, (std::vector<int64_t>{2, 2}));
  EXPECT_DOUBLE_EQ(rr.block_hit_rate, 0.5);  // miss, miss, hit, hit
  EXPECT_DOUBLE_EQ(rr.load_max_over_mean, 1.0);
  const ReplayPolicyReport& gie = r.policies[1];
  EXPECT_EQ(std::max(gie.requests_per_server[0], gie.requests_per_server[1]), 4);
  EXPECT_DOUBLE_EQ(gie.block_hit_rate, 0.75);  // miss, then hits
  EXPECT_DOUBLE_EQ(gie.load_max_over_mean, 2.0);
  EXPECT_DOUBLE_EQ(gie.prediction_error_rate, 0);
}

TEST(RunReplayTest, RequestTooLargeForTheKvCacheFails) {
  ReplayOptions o;
  o.server.kv_blocks = 10;  // 160 tokens
  const ReplayReport r = Replay({Req(0, {{7, 1000}}, 10), Req(10, {{8, 100}}, 10)}, {"round-robin"}, 1, o);
  EXPECT_EQ(r.policies[0].failed, 1);
  EXPECT_EQ(r.policies[0].completed, 1);
}

TEST(RunReplayTest, SameSeedGivesIdenticalJson) {
  SharedPrefixWorkload w;
  w.groups = 5;
  w.prompts_per_group = 8;
  w.rate = 50;
  w.duration_s = 4;
  w.seed = 3;
  auto trace = GenerateSharedPrefix(w);
  ASSERT_TRUE(trace.ok());
  ReplayOptions o;
  o.seed = 11;
  auto once = [&] {
    ReplayReport r = Replay(*trace, {"random", "gie-default"}, 3, o);
    for (ReplayPolicyReport& p : r.policies) p.wall_s = 0;  // real time is the one thing that varies
    return ReplayReportToJson(r);
  };
  const std::string a = once();
  EXPECT_EQ(a, once());
  o.seed = 12;
  EXPECT_NE(a, once());  // the random picker follows the seed
}

TEST(RunReplayTest, EveryNamedBaselineRuns) {
  SharedPrefixWorkload w;
  w.groups = 4;
  w.prompts_per_group = 10;
  w.rate = 20;
  auto trace = GenerateSharedPrefix(w);
  ASSERT_TRUE(trace.ok());
  const std::vector<std::string> names = NamedReplayPolicies();
  ASSERT_GE(names.size(), 6u);
  const ReplayReport r = Replay(*trace, names, 4);
  ASSERT_EQ(r.policies.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    SCOPED_TRACE(names[i]);
    const ReplayPolicyReport& p = r.policies[i];
    EXPECT_EQ(p.name, names[i]);
    EXPECT_EQ(p.completed, 40);
    EXPECT_EQ(p.failed + p.shed, 0);
    EXPECT_GT(p.ttft_s.p50, 0);
    EXPECT_EQ(p.requests_per_server.size(), 4u);
    EXPECT_EQ(p.hit_rate_timeline.size(), 40u);
  }
}

TEST(RunReplayTest, RejectsBadOptions) {
  const std::vector<ReplayRequest> trace = {Req(5, {{1, 10}}, 1), Req(0, {{1, 10}}, 1)};
  ReplayOptions o;
  EXPECT_EQ(RunReplay(trace, {Policy("round-robin")}, o).status().code(), absl::StatusCode::kInvalidArgument);  // unsorted
  o.servers = 0;
  EXPECT_EQ(RunReplay({}, {Policy("round-robin")}, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.servers = 1;
  EXPECT_EQ(RunReplay({}, {}, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.scrape_interval_us = 0;
  EXPECT_EQ(RunReplay({}, {Policy("round-robin")}, o).status().code(), absl::StatusCode::kInvalidArgument);
}

// --- Bounds -------------------------------------------------------------------------------------

TEST(AnalyzeTraceTest, BoundsOnAHandCountedTrace) {
  // A = S (2 blocks); B = S + Q1 (3); C = S + Q2 (3); D = T (1): 9 blocks. An infinite cache hits
  // S's 2 blocks in B and in C: 4 / 9.
  const std::vector<ReplayRequest> trace = {Req(0, {{1, 32}}, 1), Req(1, {{1, 32}, {2, 16}}, 1), Req(2, {{1, 32}, {3, 16}}, 1),
                                            Req(3, {{4, 16}}, 1)};
  ReplayTraceInfo big = AnalyzeTrace(trace, 100);
  EXPECT_EQ(big.requests, 4);
  EXPECT_EQ(big.blocks, 9);
  EXPECT_EQ(big.prompt_tokens, 144);
  EXPECT_DOUBLE_EQ(big.duration_s, 3e-6);
  EXPECT_DOUBLE_EQ(big.upper_bound_block_hit_rate, 4.0 / 9);
  EXPECT_DOUBLE_EQ(big.pooled_cache_bound_block_hit_rate, 4.0 / 9);
  // A one-block LRU keeps only S's first block (touched last): B and C hit 1 block each.
  ReplayTraceInfo one = AnalyzeTrace(trace, 1);
  EXPECT_DOUBLE_EQ(one.upper_bound_block_hit_rate, 4.0 / 9);
  EXPECT_DOUBLE_EQ(one.pooled_cache_bound_block_hit_rate, 2.0 / 9);
  // Two blocks hold S whole again.
  EXPECT_DOUBLE_EQ(AnalyzeTrace(trace, 2).pooled_cache_bound_block_hit_rate, 4.0 / 9);
  EXPECT_EQ(AnalyzeTrace({}, 10).blocks, 0);
}

TEST(AnalyzeTraceTest, RunReplayReportsTheBoundsForAllServersTogether) {
  // Two servers of 1 block: a pooled LRU of 2 blocks.
  const std::vector<ReplayRequest> trace = {Req(0, {{1, 32}}, 1), Req(1, {{1, 32}, {2, 16}}, 1), Req(2, {{1, 32}, {3, 16}}, 1),
                                            Req(3, {{4, 16}}, 1)};
  ReplayOptions o;
  o.server.kv_blocks = 4;
  const ReplayReport r = Replay(trace, {"round-robin"}, 2, o);
  EXPECT_EQ(r.trace.blocks, 9);
  EXPECT_DOUBLE_EQ(r.trace.pooled_cache_bound_block_hit_rate, AnalyzeTrace(trace, 8).pooled_cache_bound_block_hit_rate);
}

// --- Rendering ----------------------------------------------------------------------------------

TEST(RenderTest, SegmentsRenderDeterministicallyAndShareTheirPrefixes) {
  const ReplayRequest a = Req(0, {{1, 10}, {2, 5}}, 1);
  const ReplayRequest b = Req(0, {{1, 10}, {3, 5}}, 1);
  const std::string ta = RenderReplayPrompt(a), tb = RenderReplayPrompt(b);
  EXPECT_EQ(ta.size(), 60u);
  EXPECT_EQ(ta, RenderReplayPrompt(a));
  EXPECT_EQ(ta.substr(0, 40), tb.substr(0, 40));
  EXPECT_NE(ta.substr(40), tb.substr(40));
  // A shorter segment is a prefix of a longer one with the same id.
  EXPECT_EQ(RenderReplayPrompt(Req(0, {{1, 3}}, 1)), ta.substr(0, 12));
  ReplayRequest text;
  text.text = "literal";
  EXPECT_EQ(RenderReplayPrompt(text), "literal");
}

TEST(RenderTest, CachingRendererMatchesRenderReplayPrompt) {
  replay_internal::PromptRenderer renderer;
  const std::vector<ReplayRequest> requests = {Req(0, {{1, 3}}, 1),  Req(0, {{1, 100}, {2, 7}}, 1), Req(0, {{1, 5}, {9, 1}}, 1),
                                               Req(0, {{5, 0}}, 1), Req(0, {{2, 7}, {1, 101}}, 1)};
  for (const ReplayRequest& r : requests) EXPECT_EQ(std::string(renderer.Render(r)), RenderReplayPrompt(r));
}

// --- Workloads ----------------------------------------------------------------------------------

TEST(SharedPrefixTest, EveryPairOnceInArrivalOrder) {
  SharedPrefixWorkload w;
  w.groups = 3;
  w.prompts_per_group = 4;
  w.system_len = 20;
  w.question_len = 5;
  w.output_len = 7;
  w.rate = 2;
  w.poisson = false;
  auto trace = GenerateSharedPrefix(w);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->size(), 12u);
  std::set<std::pair<uint64_t, uint64_t>> pairs;
  std::set<uint64_t> systems;
  for (size_t i = 0; i < trace->size(); ++i) {
    const ReplayRequest& r = (*trace)[i];
    EXPECT_EQ(r.arrival_us, static_cast<int64_t>(i) * 500000);  // constant: 1 / rate apart
    ASSERT_EQ(r.segments.size(), 2u);
    EXPECT_EQ(r.segments[0].tokens, 20);
    EXPECT_EQ(r.segments[1].tokens, 5);
    EXPECT_EQ(r.prompt_tokens, 25);
    EXPECT_EQ(r.output_tokens, 7);
    pairs.insert({r.segments[0].id, r.segments[1].id});
    systems.insert(r.segments[0].id);
  }
  EXPECT_EQ(pairs.size(), 12u);
  EXPECT_EQ(systems.size(), 3u);
  // With a duration: rate x duration requests, Poisson arrivals in order.
  w.poisson = true;
  w.duration_s = 30;
  trace = GenerateSharedPrefix(w);
  ASSERT_TRUE(trace.ok());
  EXPECT_EQ(trace->size(), 60u);
  for (size_t i = 1; i < trace->size(); ++i) EXPECT_LE((*trace)[i - 1].arrival_us, (*trace)[i].arrival_us);
}

TEST(SharedPrefixTest, SharedSystemPromptStartsEveryConversationTheSame) {
  SharedPrefixWorkload w;
  w.groups = 5;
  w.prompts_per_group = 3;
  w.system_len = 32;
  w.question_len = 16;
  w.output_len = 16;
  w.multi_turn = true;
  w.shared_system_prompt = true;
  w.duration_s = 10;
  w.rate = 3;
  auto trace = GenerateSharedPrefix(w);
  ASSERT_TRUE(trace.ok()) << trace.status();
  std::set<uint64_t> systems, firsts;
  for (const ReplayRequest& r : *trace) {
    systems.insert(r.segments[0].id);
    firsts.insert(r.segments[1].id);
  }
  EXPECT_EQ(systems.size(), 1u);   // one system prompt for every conversation
  EXPECT_GT(firsts.size(), 1u);    // the conversations differ from their first question on
  // Every request shares the first 2 blocks (32 tokens): the upper bound counts them as hits.
  const ReplayTraceInfo info = AnalyzeTrace(*trace, 1 << 20);
  EXPECT_GT(info.upper_bound_block_hit_rate, 0.0);
  w.shared_system_prompt = false;
  auto distinct = GenerateSharedPrefix(w);
  std::set<uint64_t> distinct_systems;
  for (const ReplayRequest& r : *distinct) distinct_systems.insert(r.segments[0].id);
  EXPECT_EQ(distinct_systems.size(), 5u);
}

TEST(SharedPrefixTest, MultiTurnPromptsGrowByEachTurn) {
  SharedPrefixWorkload w;
  w.groups = 2;
  w.prompts_per_group = 3;
  w.system_len = 10;
  w.question_len = 4;
  w.output_len = 6;
  w.multi_turn = true;
  w.duration_s = 10;
  w.rate = 2;  // 20 requests: each group's conversations of 3 turns, then a new conversation
  auto trace = GenerateSharedPrefix(w);
  ASSERT_TRUE(trace.ok());
  ASSERT_EQ(trace->size(), 20u);
  std::map<uint64_t, std::vector<const ReplayRequest*>> by_group;
  for (const ReplayRequest& r : *trace) by_group[r.segments[0].id].push_back(&r);
  EXPECT_EQ(by_group.size(), 2u);
  for (const auto& [group, turns] : by_group) {
    for (size_t k = 0; k < turns.size(); ++k) {
      const size_t turn = k % 3;
      EXPECT_EQ(turns[k]->segments.size(), 2 + 2 * turn);
      EXPECT_EQ(turns[k]->prompt_tokens, static_cast<int64_t>(10 + turn * (4 + 6) + 4));
      if (turn > 0) {
        // This turn extends the previous one: its question, then the answer, then a new question.
        const std::string before = RenderReplayPrompt(*turns[k - 1]), now = RenderReplayPrompt(*turns[k]);
        EXPECT_EQ(now.substr(0, before.size()), before);
      } else if (k > 0) {
        EXPECT_NE(turns[k]->segments[1].id, turns[k - 3]->segments[1].id);  // a new conversation
      }
    }
  }
}

TEST(SharedPrefixTest, RejectsBadParameters) {
  SharedPrefixWorkload w;
  w.groups = 0;
  EXPECT_EQ(GenerateSharedPrefix(w).status().code(), absl::StatusCode::kInvalidArgument);
  w = {};
  w.rate = 0;
  EXPECT_EQ(GenerateSharedPrefix(w).status().code(), absl::StatusCode::kInvalidArgument);
  w = {};
  w.question_len = 0;
  EXPECT_EQ(GenerateSharedPrefix(w).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SharedPrefixTest, GieWorkloads) {
  auto w = GieBenchmarkWorkload("short-questions__many-system-prompts");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->groups, 150);
  EXPECT_EQ(w->prompts_per_group, 5);
  EXPECT_EQ(w->system_len, 6000);
  EXPECT_EQ(w->question_len, 1200);
  EXPECT_TRUE(GieBenchmarkWorkload("long-questions__few-system-prompts__multi-chat")->multi_turn);
  auto bad = GieBenchmarkWorkload("nope");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(bad.status().message().find("short-questions__many-system-prompts"), std::string::npos);
}

// --- Loaders ------------------------------------------------------------------------------------

TEST(MooncakeTraceTest, BlocksBecomeSharedSegments) {
  const std::string path = WriteTemp("mooncake_ok.jsonl",
                                     "{\"timestamp\": 10, \"input_length\": 1000, \"output_length\": 5, \"hash_ids\": [1, 2]}\n"
                                     "\n"
                                     "{\"timestamp\": 0, \"input_length\": 1200, \"output_length\": 3, \"hash_ids\": [1, 2]}\n");
  auto trace = LoadMooncakeTrace(path, 0.5);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->size(), 2u);
  const ReplayRequest& first = (*trace)[0];  // sorted by arrival
  EXPECT_EQ(first.arrival_us, 0);
  EXPECT_EQ(first.prompt_tokens, 1200);
  EXPECT_EQ(first.output_tokens, 3);
  ASSERT_EQ(first.segments.size(), 3u);  // 512 + 512 + 176 tokens beyond the listed blocks
  EXPECT_EQ(first.segments[2].tokens, 176);
  const ReplayRequest& second = (*trace)[1];
  EXPECT_EQ(second.arrival_us, 5000);  // 10 ms x 0.5
  ASSERT_EQ(second.segments.size(), 2u);
  EXPECT_EQ(second.segments[0].id, first.segments[0].id);
  EXPECT_EQ(second.segments[0].tokens, 512);
  EXPECT_EQ(second.segments[1].tokens, 488);
  // Equal hash ids are a shared prefix: both prompts agree on their first 1000 tokens.
  EXPECT_EQ(RenderReplayPrompt(first).substr(0, 1000 * 4), RenderReplayPrompt(second));
}

TEST(MooncakeTraceTest, ErrorsNameFileAndLine) {
  struct Case {
    std::string name, line3, expect;
  };
  const std::vector<Case> cases = {
      {"not_json", "{oops", "not JSON: byte 2: "},
      {"not_object", "[1]", "not a JSON object"},
      {"number_overflow", "{\"timestamp\": 1e407}", "not JSON: number overflow"},
      {"no_timestamp", "{\"input_length\": 1, \"output_length\": 1, \"hash_ids\": []}", "timestamp: missing or not a number"},
      {"bad_hash", "{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [\"x\"]}", "hash_ids[0]"},
      {"no_hashes", "{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1}", "hash_ids: missing"},
      {"negative", "{\"timestamp\": -1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": []}", "timestamp: out of range"},
  };
  const std::string good = "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [0]}\n";
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = WriteTemp("mooncake_" + c.name + ".jsonl", good + good + c.line3 + "\n");
    auto trace = LoadMooncakeTrace(path);
    ASSERT_FALSE(trace.ok());
    EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(trace.status().message().find(path + ":3: "), std::string::npos) << trace.status();
    EXPECT_NE(trace.status().message().find(c.expect), std::string::npos) << trace.status();
  }
  EXPECT_EQ(LoadMooncakeTrace(::testing::TempDir() + "/missing.jsonl").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(LoadMooncakeTrace(WriteTemp("mooncake_scale.jsonl", good), 0).status().code(), absl::StatusCode::kInvalidArgument);
  // A timestamp times a large scale beyond int64 microseconds is named (llround was unspecified).
  auto huge = LoadMooncakeTrace(WriteTemp("mooncake_huge.jsonl", "{\"timestamp\": 1e15, \"input_length\": 1, "
                                                                 "\"output_length\": 1, \"hash_ids\": []}\n"),
                                1e6);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find(":1: timestamp: arrival time out of range"), std::string::npos) << huge.status();
}

TEST(MooncakeTraceTest, SharedFixtureLoads) {
  EPP_REQUIRE_SHARED_FIXTURES("traces/mooncake-fast25-synthetic_trace.jsonl");
  const std::string path = testing::SharedFixtures("traces/mooncake-fast25-synthetic_trace.jsonl").string();
  auto trace = LoadMooncakeTrace(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->size(), 3993u);
  const ReplayTraceInfo info = AnalyzeTrace(*trace, int64_t{1} << 40);
  EXPECT_GT(info.upper_bound_block_hit_rate, 0.3);
  EXPECT_LT(info.upper_bound_block_hit_rate, 1.0);
}

TEST(OpenAITraceTest, ReadsCapturesWithArrivalTimes) {
  const std::string path = WriteTemp(
      "openai.jsonl",
      "{\"timestamp\": 1500, \"body\": {\"model\": \"m\", \"prompt\": \"hello there\", \"max_tokens\": 7}}\n"
      "{\"arrival_s\": 0.5, \"output_tokens\": 3, \"path\": \"/v1/chat/completions\", \"body\": {\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}}\n");
  auto trace = LoadOpenAITrace(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->size(), 2u);
  EXPECT_EQ((*trace)[0].arrival_us, 500000);
  EXPECT_EQ((*trace)[0].output_tokens, 3);
  EXPECT_EQ((*trace)[1].arrival_us, 1500000);
  EXPECT_EQ((*trace)[1].output_tokens, 7);
  EXPECT_EQ((*trace)[1].model, "m");
  EXPECT_EQ(RenderReplayPrompt((*trace)[1]), (*trace)[1].text);
  const std::string bad = WriteTemp("openai_bad.jsonl", "{\"body\": {\"model\": \"m\", \"prompt\": \"x\"}}\n");
  auto err = LoadOpenAITrace(bad);
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.status().message().find(bad + ":1: no arrival time"), std::string::npos) << err.status();
}

// --- Policies and reports -----------------------------------------------------------------------

TEST(NamedReplayPolicyTest, UnknownNameListsTheKnownOnes) {
  auto p = NamedReplayPolicy("fastest");
  ASSERT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  for (const std::string& n : NamedReplayPolicies()) EXPECT_NE(p.status().message().find(n), std::string::npos) << n;
}

TEST(ReplayInputsTest, PoliciesResolveFromNamesYamlTextAndFilesWithUniqueNames) {
  const std::string file = WriteTemp("my-policy.yaml", "apiVersion: inference.networking.x-k8s.io/v1alpha1\n"
                                                       "kind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n");
  const std::string yaml =
      "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
      "- type: kv-cache-utilization-scorer\n";
  std::vector<ReplayPolicy> policies;
  const std::vector<std::string> specs = {"gie-default", file, yaml, "gie-default", file, "gie-default"};
  for (size_t i = 0; i < specs.size(); ++i) {
    auto p = ResolveReplayPolicy(specs[i], i);
    ASSERT_TRUE(p.ok()) << specs[i] << ": " << p.status();
    policies.push_back(*std::move(p));
  }
  MakePolicyNamesUnique(policies);
  std::vector<std::string> names;
  for (const ReplayPolicy& p : policies) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"gie-default", "my-policy", "policy3", "gie-default#2", "my-policy#2",
                                             "gie-default#3"}));
  EXPECT_EQ(policies[2].config.plugins.at(0).type, "kv-cache-utilization-scorer");

  auto unknown = ResolveReplayPolicy("fastest", 0);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  auto missing = ResolveReplayPolicy(::testing::TempDir() + "/nope.yaml", 0);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  auto bad_text = ResolveReplayPolicy("kind: EndpointPickerConfig\nplugins: [", 4);
  ASSERT_FALSE(bad_text.ok());
  EXPECT_EQ(std::string(bad_text.status().message()).rfind("policies[4]", 0), 0u) << bad_text.status();
}

TEST(ReplayInputsTest, TraceFormatIsDetectedFromTheFirstLine) {
  const std::string mooncake =
      WriteTemp("detect_mooncake.jsonl", "\n{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]}\n");
  const std::string openai = WriteTemp(
      "detect_openai.jsonl", "{\"timestamp\": 5, \"path\": \"/v1/completions\", \"body\": {\"model\": \"m\", \"prompt\": \"hi\"}}\n");
  EXPECT_EQ(*DetectTraceFormat(mooncake), TraceFormat::kMooncake);
  EXPECT_EQ(*DetectTraceFormat(openai), TraceFormat::kOpenAI);
  EXPECT_EQ(*DetectTraceFormat(WriteTemp("detect_garbage.jsonl", "not json\n")), TraceFormat::kOpenAI);
  EXPECT_EQ(DetectTraceFormat(::testing::TempDir() + "/none.jsonl").status().code(), absl::StatusCode::kNotFound);
  auto a = LoadReplayTrace(mooncake);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->size(), 1u);
  auto b = LoadReplayTrace(openai, TraceFormat::kAuto, 2.0);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->front().arrival_us, 10000);
  EXPECT_FALSE(LoadReplayTrace(openai, TraceFormat::kMooncake).ok());  // forced: the loader says why
  EXPECT_EQ(*ParseTraceFormat("auto"), TraceFormat::kAuto);
  EXPECT_FALSE(ParseTraceFormat("csv").ok());
}

TEST(ReplayReportTest, JsonTextAndHtml) {
  SharedPrefixWorkload w;
  w.groups = 3;
  w.prompts_per_group = 5;
  auto trace = GenerateSharedPrefix(w);
  ASSERT_TRUE(trace.ok());
  ReplayReport r = Replay(*trace, {"round-robin", "gie-default"}, 2);
  r.policies[1].name = "<b>weird & \"quoted\"</b>";

  const nlohmann::json j = nlohmann::json::parse(ReplayReportToJson(r));
  for (const char* k : {"requests", "blocks", "upper_bound_block_hit_rate", "pooled_cache_bound_block_hit_rate"})
    EXPECT_TRUE(j["trace"].contains(k)) << k;
  ASSERT_EQ(j["policies"].size(), 2u);
  for (const auto& p : j["policies"]) {
    for (const char* k : {"name", "block_hit_rate", "token_hit_rate", "ttft_s", "e2e_s", "throughput_rps", "load_max_over_mean",
                          "prediction_error_rate", "failed"})
      EXPECT_TRUE(p.contains(k)) << k;
    for (const char* k : {"p50", "p90", "p99"}) EXPECT_TRUE(p["ttft_s"][k].is_number()) << k;
  }
  EXPECT_TRUE(j["policies"][0]["prediction_error_rate"].is_null());  // no prefix producer
  EXPECT_TRUE(j["policies"][1]["prediction_error_rate"].is_number());

  const std::string text = ReplayReportToText(r);
  EXPECT_NE(text.find("round-robin"), std::string::npos);
  EXPECT_NE(text.find("n/a"), std::string::npos);

  const std::string html = ReplayReportToHtml(r, "title <with> & marks");
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("<title>title &lt;with&gt; &amp; marks</title>"), std::string::npos);
  EXPECT_EQ(html.find("<with>"), std::string::npos);
  EXPECT_NE(html.find("&lt;b&gt;weird &amp; &quot;quoted&quot;&lt;/b&gt;"), std::string::npos);
  EXPECT_EQ(html.find("<b>weird"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  size_t svgs = 0;
  for (size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1)) ++svgs;
  EXPECT_EQ(svgs, 4u);  // TTFT, hit rate over time, requests per server, KV usage per server
  size_t closes = 0;
  for (size_t at = html.find("</svg>"); at != std::string::npos; at = html.find("</svg>", at + 1)) ++closes;
  EXPECT_EQ(closes, svgs);
  EXPECT_NE(html.find("upper bound"), std::string::npos);
  EXPECT_NE(html.find("</html>"), std::string::npos);
}

}  // namespace
}  // namespace epp

// --- TTFT bound, flags, CSV traces ----------------------------------------------------------------

namespace epp {
namespace {

std::vector<std::string> FlagCodes(const ReplayPolicyReport& p) {
  std::vector<std::string> out;
  for (const ReplayFlag& f : p.flags) out.push_back(f.code);
  return out;
}

TEST(TtftBoundTest, LoneRequestsMeetTheBoundExactly) {
  // Far apart on one server: no queueing, and the server keeps every block, so each request's TTFT
  // is the bound: 6,050 us + uncached tokens x 50 us. A: 400 uncached (26,050 us); B shares A's
  // 320-token system prompt (20 blocks): 80 uncached (10,050 us); C: 160 unique (14,050 us).
  const std::vector<ReplayRequest> trace = {Req(0, {{1, 320}, {2, 80}}, 1), Req(10'000'000, {{1, 320}, {3, 80}}, 1),
                                            Req(20'000'000, {{4, 160}}, 1)};
  const ReplayReport r = Replay(trace, {"round-robin"}, 1);
  ASSERT_EQ(r.trace.ttft_bound_samples_s.size(), 3u);
  EXPECT_DOUBLE_EQ(r.trace.ttft_bound_samples_s[0], 0.01005);
  EXPECT_DOUBLE_EQ(r.trace.ttft_bound_samples_s[1], 0.01405);
  EXPECT_DOUBLE_EQ(r.trace.ttft_bound_samples_s[2], 0.02605);
  EXPECT_DOUBLE_EQ(r.trace.ttft_bound_s.p50, 0.01405);
  const ReplayPolicyReport& p = r.policies[0];
  EXPECT_DOUBLE_EQ(p.ttft_s.p50, r.trace.ttft_bound_s.p50);
  EXPECT_DOUBLE_EQ(p.ttft_s.p90, r.trace.ttft_bound_s.p90);
  EXPECT_DOUBLE_EQ(p.ttft_over_bound.p50, 1.0);
  EXPECT_DOUBLE_EQ(p.ttft_over_bound.p99, 1.0);
  // The bound takes the fastest server: one twice as fast at prefill halves the prefill part.
  std::vector<SimParams> servers(2);
  servers[1].prefill_tokens_per_s = 40000;
  const ReplayTraceInfo info = AnalyzeTrace(trace, 1 << 20, 16, servers);
  EXPECT_DOUBLE_EQ(info.ttft_bound_samples_s[2], 0.01605);  // 6,050 + 400 x 25 us
  EXPECT_EQ(AnalyzeTrace(trace, 1 << 20).ttft_bound_samples_s.size(), 0u);  // no servers, no bound
  // In every output.
  const nlohmann::json j = nlohmann::json::parse(ReplayReportToJson(r));
  EXPECT_DOUBLE_EQ(j["trace"]["ttft_bound_s"]["p50"].get<double>(), 0.01405);
  EXPECT_DOUBLE_EQ(j["policies"][0]["ttft_over_bound"]["p90"].get<double>(), 1.0);
  EXPECT_NE(ReplayReportToText(r).find("TTFT bound (no queueing, infinite cache): p50 0.01405"), std::string::npos)
      << ReplayReportToText(r);
  const std::string html = ReplayReportToHtml(r, "t");
  EXPECT_NE(html.find("TTFT bound (no queueing, infinite cache)"), std::string::npos);
  EXPECT_NE(html.find("TTFT p50 / p90 / p99 over bound"), std::string::npos);
  EXPECT_NE(html.find("<td>1/1/1x</td>"), std::string::npos);
  EXPECT_NE(ReplayReportToText(r).find(" 1/1/1x "), std::string::npos) << ReplayReportToText(r);
  // The three ratios in percentile order (p50, p90, p99).
  ReplayReport slower = r;
  slower.policies[0].ttft_over_bound = {1.5, 2.0, 3.0, 2.0};
  EXPECT_NE(ReplayReportToText(slower).find(" 1.5/2/3x "), std::string::npos);
  EXPECT_NE(ReplayReportToHtml(slower, "t").find("<td>1.5/2/3x</td>"), std::string::npos);
}

TEST(ReplayFlagsTest, AffinityWithoutLoadPilesOntoOneServerAndRoundRobinLosesTheCache) {
  // 800 requests over 8 s sharing one 640-token system prompt, 4 servers. A prefix-only policy
  // sends every request after the first to the server that holds the prefix: three servers idle
  // and starved for the whole trace, one hot. Round robin spreads them evenly.
  std::vector<ReplayRequest> trace;
  for (int i = 0; i < 800; ++i) trace.push_back(Req(i * 10'000, {{1, 640}, {static_cast<uint64_t>(100 + i), 16}}, 1));
  std::vector<ReplayPolicy> ps = {Policy("round-robin")};
  ReplayPolicy prefix;
  prefix.name = "prefix-only";
  auto cfg = ParseConfig(
      "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
      "plugins:\n- type: prefix-cache-scorer\n- type: max-score-picker\n",
      "<test>");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  prefix.config = *cfg;
  ps.push_back(prefix);
  ReplayOptions o;
  o.servers = 4;
  auto r = RunReplay(trace, ps, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->policies[0].flags.empty()) << r->policies[0].flags.front().message;
  const ReplayPolicyReport& p = r->policies[1];
  EXPECT_EQ(FlagCodes(p), (std::vector<std::string>{"idle-servers", "hot-servers", "starvation"}));
  EXPECT_NE(p.flags[0].message.find("3 of 4 servers received no request"), std::string::npos) << p.flags[0].message;
  EXPECT_NE(p.flags[2].message.find("3 windows"), std::string::npos) << p.flags[2].message;  // one run per idle server
  const std::string text = ReplayReportToText(*r);
  EXPECT_NE(text.find("prefix-only: idle-servers: 3 of 4 servers"), std::string::npos) << text;
  const nlohmann::json j = nlohmann::json::parse(ReplayReportToJson(*r));
  EXPECT_EQ(j["policies"][1]["flags"][0]["code"], "idle-servers");
  EXPECT_NE(ReplayReportToHtml(*r, "t").find("<code>starvation</code>"), std::string::npos);
}

TEST(ReplayFlagsTest, HitRateFarBelowAnotherPolicysIsFlagged) {
  // 8 system prompts asked 8 times each, group after group, on 8 servers: round robin sends each
  // group's 8 requests to 8 different servers (no server ever sees a prefix twice: hit rate 0);
  // prefix affinity keeps each group on one server.
  std::vector<ReplayRequest> trace;
  for (int g = 0; g < 8; ++g)
    for (int q = 0; q < 8; ++q)
      trace.push_back(Req((g * 8 + q) * 100'000, {{static_cast<uint64_t>(10 + g), 640}, {static_cast<uint64_t>(1000 + g * 8 + q), 16}}, 1));
  const ReplayReport r = Replay(trace, {"round-robin", "gie-default"}, 8);
  EXPECT_DOUBLE_EQ(r.policies[0].block_hit_rate, 0);
  EXPECT_GT(r.policies[1].block_hit_rate, 0.5);
  const std::vector<std::string> codes = FlagCodes(r.policies[0]);
  ASSERT_EQ(std::count(codes.begin(), codes.end(), "hit-rate-gap"), 1);
  for (const ReplayFlag& f : r.policies[0].flags) {
    if (f.code == "hit-rate-gap") {
      EXPECT_NE(f.message.find("less than half of gie-default's"), std::string::npos) << f.message;
    }
  }
  const std::vector<std::string> gie = FlagCodes(r.policies[1]);
  EXPECT_EQ(std::count(gie.begin(), gie.end(), "hit-rate-gap"), 0);
}

TEST(CsvTraceTest, AzureWallClockTimesStartAtZeroAndScale) {
  const std::string path = WriteTemp("azure.csv",
                                     "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                     "2023-11-16 18:15:46.6805900,4808,10\n"
                                     "2023-11-16 18:15:46.1805900,3180,8\n"
                                     "\n"
                                     "2023-11-16 18:15:47.6805901,0,0\r\n");
  auto t = LoadAzureTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 3u);
  EXPECT_EQ((*t)[0].arrival_us, 0);
  EXPECT_EQ((*t)[0].prompt_tokens, 3180);
  EXPECT_EQ((*t)[0].output_tokens, 8);
  EXPECT_EQ((*t)[1].arrival_us, 500000);
  EXPECT_EQ((*t)[2].arrival_us, 1500000);  // the 100 ns digit is below a microsecond
  EXPECT_EQ((*t)[2].prompt_tokens, 1);      // at least one token each way
  EXPECT_EQ((*t)[2].output_tokens, 1);
  EXPECT_NE((*t)[0].segments.front().id, (*t)[1].segments.front().id);  // no prefix shared
  auto half = LoadReplayTrace(path, TraceFormat::kAuto, 0.5);
  ASSERT_TRUE(half.ok()) << half.status();
  EXPECT_EQ((*half)[2].arrival_us, 750000);
  EXPECT_EQ(*DetectTraceFormat(path), TraceFormat::kAzure);
  auto bad = LoadAzureTrace(WriteTemp("azure_bad.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-02-30 10:00:00,1,1\n"));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("azure_bad.csv:2: TIMESTAMP"), std::string_view::npos) << bad.status();
  bad = LoadAzureTrace(WriteTemp("azure_bad2.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,x,1\n"));
  EXPECT_NE(bad.status().message().find(":2: ContextTokens"), std::string_view::npos) << bad.status();
  bad = LoadAzureTrace(WriteTemp("azure_bad3.csv", "TIME,Tokens\n1,2\n"));
  EXPECT_NE(bad.status().message().find("no column 'timestamp'"), std::string_view::npos) << bad.status();
  EXPECT_EQ(LoadAzureTrace(path, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CsvTraceTest, BurstGptColumnsByNameWithModels) {
  const std::string path = WriteTemp("burst.csv",
                                     "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                                     "5,ChatGPT,472,18,490,Conversation log\n"
                                     "45.5,GPT-4,1087,0,1087,API log\n");
  auto t = LoadReplayTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].arrival_us, 0);
  EXPECT_EQ((*t)[1].arrival_us, 40500000);
  EXPECT_EQ((*t)[0].model, "ChatGPT");
  EXPECT_EQ((*t)[1].output_tokens, 1);  // a failed request (0 response tokens)
  EXPECT_EQ(*DetectTraceFormat(path), TraceFormat::kBurstGpt);
  EXPECT_EQ(*ParseTraceFormat("burstgpt"), TraceFormat::kBurstGpt);
  EXPECT_EQ(*ParseTraceFormat("azure"), TraceFormat::kAzure);
  auto bad = LoadBurstGptTrace(WriteTemp("burst_bad.csv", "Timestamp,Request tokens,Response tokens\n-1,3,3\n"));
  EXPECT_NE(bad.status().message().find("burst_bad.csv:2: Timestamp"), std::string_view::npos) << bad.status();
  // A trace of either kind replays (every request unique, so nothing to hit).
  const ReplayReport r = Replay(*t, {"round-robin"}, 2);
  EXPECT_EQ(r.policies[0].completed, 2);
  EXPECT_DOUBLE_EQ(r.policies[0].block_hit_rate, 0);
}

}  // namespace
}  // namespace epp

namespace epp {
namespace {

TEST(EppPolicyTest, NamedPolicyIsTheExampleConfigAndSpreadsSameInstantArrivals) {
  // examples/configs/epp.yaml and `--policy epp` are one configuration (identical runs), and so
  // are examples/configs/epp-static.yaml and `--policy epp-static`.
  SharedPrefixWorkload w;
  w.groups = 4;
  w.prompts_per_group = 6;
  w.system_len = 400;
  w.rate = 50;
  auto trace = GenerateSharedPrefix(w);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ReplayOptions o;
  o.servers = 4;
  for (const std::string name : {"epp", "epp-static"}) {
    SCOPED_TRACE(name);
    auto file = ResolveReplayPolicy(absl::StrCat(EPP_SOURCE_DIR, "/examples/configs/", name, ".yaml"), 0);
    ASSERT_TRUE(file.ok()) << file.status();
    auto r = RunReplay(*trace, {Policy(name), *file}, o);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->policies[0].ttft_samples_s, r->policies[1].ttft_samples_s);
    EXPECT_EQ(r->policies[0].requests_per_server, r->policies[1].requests_per_server);
  }
  // Eight identical-length cold requests in the same microsecond on four servers: each pick adds
  // its prefill to that server's queue at once, so they land two per server, not all on one.
  std::vector<ReplayRequest> burst;
  for (int i = 0; i < 8; ++i) burst.push_back(Req(0, {{static_cast<uint64_t>(500 + i), 800}}, 1));
  const ReplayReport b = Replay(burst, {"epp"}, 4);
  EXPECT_EQ(b.policies[0].requests_per_server, (std::vector<int64_t>{2, 2, 2, 2}));
}

TEST(RunReplayTest, MixedSpeedServersScalePrefillAndDecode) {
  SimParams base;
  absl::StatusOr<std::vector<SimParams>> mixed = MixedSpeedServers(base, 3, {2, 0.5});
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  ASSERT_EQ(mixed->size(), 3u);
  EXPECT_DOUBLE_EQ((*mixed)[0].prefill_tokens_per_s, 40000);
  EXPECT_DOUBLE_EQ((*mixed)[0].decode_step_ms, 3.0);
  EXPECT_DOUBLE_EQ((*mixed)[1].prefill_tokens_per_s, 10000);
  EXPECT_DOUBLE_EQ((*mixed)[1].decode_ms_per_seq, 0.1);
  EXPECT_DOUBLE_EQ((*mixed)[2].prefill_tokens_per_s, 40000);  // the list repeats
  // One request on a server twice as fast: a 3,025 us step + 1000 x 25 us of prefill.
  ReplayOptions o;
  o.per_server = {(*mixed)[0]};
  const ReplayReport r = Replay({Req(0, {{7, 1000}}, 10)}, {"round-robin"}, 1, o);
  ASSERT_EQ(r.policies.size(), 1u);
  EXPECT_DOUBLE_EQ(r.policies[0].ttft_s.p50, 0.028025);
  EXPECT_EQ(MixedSpeedServers(base, 2, {}).status().message(), "server speeds: give at least one");
  EXPECT_EQ(MixedSpeedServers(base, 2, {1, 0}).status().message(), "server speeds[1]: must be in (0, 100], got 0");
  EXPECT_EQ(ParseServerSpeeds("1,fast").status().message(), "--server-speed 'fast': expected a speed in (0, 100], such as 0.5");
  absl::StatusOr<std::vector<double>> speeds = ParseServerSpeeds("1, 0.5");
  ASSERT_TRUE(speeds.ok());
  EXPECT_EQ(*speeds, (std::vector<double>{1, 0.5}));
}

}  // namespace
}  // namespace epp
