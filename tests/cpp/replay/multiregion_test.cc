// Multi-region replay: exact small cases in virtual time. One request of 1000 prompt tokens on an
// idle server has TTFT 56,050 us (docs/sim.md: one 6,050 us decode step + 1000 x 50 us prefill);
// network time adds RTTs on top. Servers with max_running 1 build queues on demand, so the
// saturation thresholds are crossed at known scrapes (every 50 ms).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "epp/tools/replay.h"

namespace epp {
namespace {

constexpr double kOneRequestTtft = 0.05605;

ReplayRequest Req(int64_t arrival_us, uint64_t segment, int64_t output_tokens, std::string region = "") {
  ReplayRequest r;
  r.arrival_us = arrival_us;
  r.segments = {{segment, 1000}};
  r.prompt_tokens = 1000;
  r.output_tokens = output_tokens;
  r.region = std::move(region);
  return r;
}

ReplayPolicy Policy(std::string_view name) {
  absl::StatusOr<ReplayPolicy> p = NamedReplayPolicy(name);
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

MultiRegionOptions Options(const std::string& regions, const std::string& rtt) {
  MultiRegionOptions o;
  absl::StatusOr<std::vector<ReplayRegion>> r = ParseReplayRegions(regions);
  EXPECT_TRUE(r.ok()) << r.status();
  if (r.ok()) o.regions = *r;
  absl::StatusOr<std::map<std::pair<std::string, std::string>, double>> m = ParseRttMatrix(rtt);
  EXPECT_TRUE(m.ok()) << m.status();
  if (m.ok()) o.rtt_ms = *m;
  return o;
}

MultiRegionReport RunRegions(const std::vector<ReplayRequest>& trace, const MultiRegionOptions& o, std::string_view policy = "least-queue") {
  absl::StatusOr<MultiRegionReport> r = RunMultiRegionReplay(trace, Policy(policy), o);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok() || r->modes.size() != 3) return {};
  EXPECT_EQ(r->modes[0].mode, "global");
  EXPECT_EQ(r->modes[1].mode, "hierarchical");
  EXPECT_EQ(r->modes[2].mode, "local");
  return *std::move(r);
}

TEST(MultiRegionReplayTest, NetworkTimeIsCalloutPlusCrossRegionRtt) {
  // Everything arrives in b; the global EPP runs in a, 100 ms away.
  MultiRegionOptions o = Options("a:1:0,b:1:1", "a/b=100");
  const MultiRegionReport r = RunRegions({Req(0, 1, 10)}, o, "round-robin");
  ASSERT_EQ(r.modes.size(), 3u);
  const MultiRegionModeReport &global = r.modes[0], &hier = r.modes[1], &local = r.modes[2];
  EXPECT_EQ(global.arrivals_per_region, (std::vector<int64_t>{0, 1}));
  ASSERT_EQ(global.completed, 1);
  // The callout from b to a, plus b -> a if the global EPP chose a's server.
  const bool crossed = global.served_per_region[0] == 1;
  EXPECT_NEAR(global.ttft_s.p50, kOneRequestTtft + 0.1 + (crossed ? 0.1 : 0), 1e-9);
  EXPECT_DOUBLE_EQ(global.cross_region_share, crossed ? 1.0 : 0.0);
  // The region-level EPP and the local EPP run in b: home, no network time.
  for (const MultiRegionModeReport* m : {&hier, &local}) {
    EXPECT_EQ(m->served_per_region, (std::vector<int64_t>{0, 1})) << m->mode;
    EXPECT_NEAR(m->ttft_s.p50, kOneRequestTtft, 1e-9) << m->mode;
    EXPECT_EQ(m->cross_region_share, 0) << m->mode;
    ASSERT_EQ(m->ttft_p90_per_origin_s.size(), 2u);
    EXPECT_NEAR(m->ttft_p90_per_origin_s[1], kOneRequestTtft, 1e-9) << m->mode;
  }
}

TEST(MultiRegionReplayTest, CapacityCapsTheRegionLevelPickAndShedsBeyondEveryCeiling) {
  // 10 requests at one instant in a: a's pool takes 2 per second, b's 3, the rest is shed (429).
  MultiRegionOptions o = Options("a:2:1:2,b:2:0:3", "a/b=30");
  std::vector<ReplayRequest> trace;
  for (int i = 0; i < 10; ++i) trace.push_back(Req(0, 100 + i, 5));
  // 1.5 s later the window has slid: a takes one more.
  trace.push_back(Req(1500000, 200, 5));
  const MultiRegionReport r = RunRegions(trace, o);
  const MultiRegionModeReport &hier = r.modes[1], &local = r.modes[2];
  EXPECT_EQ(hier.served_per_region, (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(hier.shed, 5);
  EXPECT_EQ(hier.completed, 6);
  EXPECT_DOUBLE_EQ(hier.cross_region_share, 3.0 / 6.0);
  // Capacities bind only the region-level EPPs: local keeps everything home, nothing shed.
  EXPECT_EQ(local.served_per_region, (std::vector<int64_t>{11, 0}));
  EXPECT_EQ(local.shed, 0);
  EXPECT_EQ(local.cross_region_share, 0);
}

TEST(MultiRegionReplayTest, SaturatedHomeOverflowsOnceAScrapeShowsIt) {
  // One server per region that runs one sequence at a time: the 5 requests at t=0 all go home
  // (the t=0 scrape shows an idle server), leaving 4 waiting; the t=100 ms scrape shows it, so
  // the 3 arrivals at 100 ms overflow to b (local: blindly, hierarchical: by the spill-over).
  MultiRegionOptions o = Options("a:1:1,b:1:0", "a/b=20");
  o.server.max_running = 1;
  o.saturation_queue = 2;
  std::vector<ReplayRequest> trace;
  for (int i = 0; i < 5; ++i) trace.push_back(Req(0, 10 + i, 1000));
  for (int i = 0; i < 3; ++i) trace.push_back(Req(100000, 20 + i, 1000));
  const MultiRegionReport r = RunRegions(trace, o);
  for (const MultiRegionModeReport* m : {&r.modes[1], &r.modes[2]}) {
    EXPECT_EQ(m->served_per_region, (std::vector<int64_t>{5, 3})) << m->mode;
    EXPECT_DOUBLE_EQ(m->cross_region_share, 3.0 / 8.0) << m->mode;
    EXPECT_EQ(m->completed, 8) << m->mode;
  }
  // Global serves everything too (its split is not asserted: it follows least-queue's ties).
  EXPECT_EQ(r.modes[0].completed, 8);
}

TEST(MultiRegionReplayTest, RemotePoolMetricsArriveOneRttLate) {
  // Both regions saturate at t=0 (5 long requests each, named by the trace). At 100 ms a request
  // arrives in a, whose pool is saturated. With an RTT of 10 ms a's region-level EPP has b's
  // t=50 ms scrape (received at 60 ms): b is saturated too, so every pool is a candidate and the
  // RTT scorer keeps the request home. With an RTT of 1 s nothing from b has arrived yet: b looks
  // idle and the request spills over to it.
  std::vector<ReplayRequest> trace;
  for (int i = 0; i < 5; ++i) trace.push_back(Req(0, 10 + i, 1000, "a"));
  for (int i = 0; i < 5; ++i) trace.push_back(Req(0, 30 + i, 1000, "b"));
  trace.push_back(Req(100000, 50, 1000, "a"));
  for (const auto& [rtt, expected_b] : {std::pair<std::string, int64_t>{"a/b=10", 5}, {"a/b=1000", 6}}) {
    MultiRegionOptions o = Options("a:1,b:1", rtt);
    o.server.max_running = 1;
    o.saturation_queue = 2;
    const MultiRegionReport r = RunRegions(trace, o);
    EXPECT_EQ(r.arrivals_from_trace, 11);
    const MultiRegionModeReport& hier = r.modes[1];
    EXPECT_EQ(hier.arrivals_per_region, (std::vector<int64_t>{6, 5})) << rtt;
    EXPECT_EQ(hier.served_per_region, (std::vector<int64_t>{11 - expected_b, expected_b})) << rtt;
  }
}

TEST(MultiRegionReplayTest, DeterministicForASeedAndReportsEveryKey) {
  absl::StatusOr<SharedPrefixWorkload> w = GieBenchmarkWorkload("short-questions__many-system-prompts");
  ASSERT_TRUE(w.ok());
  w->rate = 20, w->duration_s = 5, w->seed = 3;
  absl::StatusOr<std::vector<ReplayRequest>> trace = GenerateSharedPrefix(*w);
  ASSERT_TRUE(trace.ok());
  MultiRegionOptions o = Options("east:3:0.7:15,west:2:0.3", "east/west=60");
  o.seed = 9;
  const MultiRegionReport a = RunRegions(*trace, o, "gie-default");
  const MultiRegionReport b = RunRegions(*trace, o, "gie-default");
  ASSERT_EQ(a.modes.size(), 3u);
  nlohmann::json ja = nlohmann::json::parse(MultiRegionReportToJson(a)), jb = nlohmann::json::parse(MultiRegionReportToJson(b));
  for (auto* j : {&ja, &jb})
    for (auto& m : (*j)["modes"]) m.erase("wall_s");
  EXPECT_EQ(ja, jb);
  EXPECT_EQ(ja["policy"], "gie-default");
  EXPECT_EQ(ja["arrivals_from_trace"], 0);
  EXPECT_EQ(ja["regions"][0], (nlohmann::json{{"name", "east"}, {"servers", 3}, {"arrival_share", 0.7}, {"capacity_rps", 15.0}}));
  for (const MultiRegionModeReport& m : a.modes) {
    EXPECT_EQ(m.arrivals_per_region[0] + m.arrivals_per_region[1], static_cast<int64_t>(trace->size())) << m.mode;
    EXPECT_EQ(m.completed + m.shed + m.failed, static_cast<int64_t>(trace->size())) << m.mode;
    int64_t served = 0;
    for (int64_t s : m.served_per_region) served += s;
    EXPECT_EQ(served, m.completed + m.failed) << m.mode;
    EXPECT_GE(m.load_max_over_mean, 1.0) << m.mode;
  }
  // Arrivals are drawn once: the same split in every mode.
  EXPECT_EQ(a.modes[0].arrivals_per_region, a.modes[2].arrivals_per_region);
  const std::string text = MultiRegionReportToText(a);
  EXPECT_NE(text.find("hierarchical"), std::string::npos) << text;
  EXPECT_NE(text.find("capacity 15 req/s"), std::string::npos) << text;
}

TEST(MultiRegionReplayTest, BadOptionsNameTheProblem) {
  auto err = [](const std::vector<ReplayRequest>& trace, const MultiRegionOptions& o) {
    absl::StatusOr<MultiRegionReport> r = RunMultiRegionReplay(trace, Policy("round-robin"), o);
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : std::string(r.status().message());
  };
  EXPECT_EQ(err({}, Options("a:1", "")), "a multi-region replay needs at least two regions");
  EXPECT_EQ(err({}, Options("a:1,b:1,c:1", "a/b=1,b/c=2")), "no RTT between a and c (give a/c=MS)");
  EXPECT_EQ(err({Req(0, 1, 1, "mars")}, Options("a:1,b:1", "a/b=1")),
            "trace request 1 (by arrival) arrives in region 'mars', which is not one of the replay's regions");
  MultiRegionOptions o = Options("a:1:0,b:1:0", "a/b=1");
  EXPECT_EQ(err({}, o), "the regions' arrival shares add up to 0");
  MultiRegionOptions elsewhere = Options("a:1,b:1", "a/b=1");
  elsewhere.global_region = std::string("elsewhere");
  EXPECT_EQ(err({}, elsewhere), "global region 'elsewhere' is not a region");

  EXPECT_EQ(ParseReplayRegions("a:1,B:2").status().message(),
            "--regions 'B:2': names are lower-case letters, digits and '-' (NAME:SERVERS[:SHARE[:CAPACITY_RPS]])");
  EXPECT_EQ(ParseReplayRegions("a:0").status().message(),
            "--regions 'a:0': SERVERS must be a whole number >= 1 (NAME:SERVERS[:SHARE[:CAPACITY_RPS]])");
  EXPECT_EQ(ParseReplayRegions("a:1:x").status().message(),
            "--regions 'a:1:x': SHARE must be a number >= 0 (NAME:SERVERS[:SHARE[:CAPACITY_RPS]])");
  EXPECT_EQ(ParseRttMatrix("a/b=1,b/a=2").status().message(), "--rtt 'b/a=2': given twice (A/B=MS)");
  EXPECT_EQ(ParseRttMatrix("a-b=1").status().message(), "--rtt 'a-b=1': expected A/B=MS (A/B=MS)");
  EXPECT_EQ(ParseRttMatrix("a/b=-1").status().message(), "--rtt 'a/b=-1': MS must be a number >= 0 (A/B=MS)");
}

TEST(MultiRegionReplayTest, TraceLinesNameTheirArrivalRegion) {
  const std::string path = ::testing::TempDir() + "/regions.jsonl";
  std::ofstream(path) << R"({"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [1, 2], "region": "west"})" "\n"
                      << R"({"timestamp": 5, "input_length": 600, "output_length": 4, "hash_ids": [1, 3]})" "\n";
  absl::StatusOr<std::vector<ReplayRequest>> t = LoadMooncakeTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].region, "west");
  EXPECT_EQ((*t)[1].region, "");
  MultiRegionOptions o = Options("east:1:1,west:1:0", "east/west=5");
  const MultiRegionReport r = RunRegions(*t, o);
  EXPECT_EQ(r.arrivals_from_trace, 1);
  EXPECT_EQ(r.modes[2].arrivals_per_region, (std::vector<int64_t>{1, 1}));

  const std::string openai = ::testing::TempDir() + "/regions-openai.jsonl";
  std::ofstream(openai) << R"({"timestamp": 0, "region": "east", "body": {"model": "m", "prompt": "hello"}})" "\n"
                        << R"({"timestamp": 1, "region": 7, "body": {"model": "m", "prompt": "hello"}})" "\n";
  absl::StatusOr<std::vector<ReplayRequest>> bad = LoadOpenAITrace(openai);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), openai + ":2: region: expected a region name (a string of 1 to 63 characters)");
}

}  // namespace
}  // namespace epp
