// The decision log (epp/runtime/decision_log.h) and eppctl top's model and frame (epp/tools/top.h).
#include "epp/runtime/decision_log.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "epp/tools/top.h"

namespace epp {
namespace {

DecisionRecord Record(const std::string& endpoint) {
  DecisionRecord r;
  r.status = 200;
  r.endpoints = {endpoint};
  r.model = "m";
  return r;
}

TEST(DecisionLog, KeepsTheNewestAndFindsThemById) {
  DecisionLog log({3, 1000, false});
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(log.Admit());
    log.Add(Record("10.0.0." + std::to_string(i) + ":8000"));
  }
  EXPECT_EQ(log.seen(), 5u);
  EXPECT_EQ(log.kept(), 5u);
  std::vector<DecisionRecord> all = log.Recent(10);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all.front().id, 3u);
  EXPECT_EQ(all.back().id, 5u);
  EXPECT_EQ(all.back().endpoints.front(), "10.0.0.4:8000");
  EXPECT_EQ(log.Recent(10, 4).size(), 1u);
  EXPECT_EQ(log.Recent(2).front().id, 4u);
  EXPECT_EQ(log.Recent(10, 9).size(), 0u);
  EXPECT_FALSE(log.Find(2).has_value());  // evicted
  ASSERT_TRUE(log.Find(4).has_value());
  EXPECT_EQ(log.Find(4)->endpoints.front(), "10.0.0.3:8000");
  nlohmann::json list = nlohmann::json::parse(log.ListJson(2, 0));
  EXPECT_EQ(list["decisions"].size(), 2u);
  EXPECT_EQ(list["decisions"][1]["endpoint"], "10.0.0.4:8000");
  EXPECT_EQ(list["seen"], 5);
  EXPECT_FALSE(log.DecisionJson(1).has_value());
  nlohmann::json one = nlohmann::json::parse(*log.DecisionJson(5));
  EXPECT_EQ(one["decision"]["id"], 5);
}

TEST(DecisionLog, AdmitsAtMostTheRatePerSecond) {
  DecisionLog log({100, 3, false});
  int admitted = 0;
  for (int i = 0; i < 20; ++i) admitted += log.Admit() ? 1 : 0;
  EXPECT_EQ(log.seen(), 20u);
  EXPECT_GE(admitted, 3);  // the loop may straddle one second boundary
  EXPECT_LE(admitted, 6);
}

const char* kMetrics1 =
    "# TYPE epp_info gauge\nepp_info{version=\"9.9\"} 1\n"
    "# TYPE epp_requests_total counter\nepp_requests_total{outcome=\"200\"} 10\nepp_requests_total{outcome=\"429\"} 2\n"
    "# TYPE epp_endpoint_waiting_queue_size gauge\n"
    "epp_endpoint_waiting_queue_size{endpoint=\"10.0.0.1:8000\"} 7\nepp_endpoint_waiting_queue_size{endpoint=\"10.0.0.2:8000\"} 1\n"
    "# TYPE epp_endpoint_kv_cache_usage gauge\nepp_endpoint_kv_cache_usage{endpoint=\"10.0.0.1:8000\"} 0.5\n"
    "# TYPE epp_endpoint_picks_total counter\n"
    "epp_endpoint_picks_total{endpoint=\"10.0.0.1:8000\"} 4\nepp_endpoint_picks_total{endpoint=\"10.0.0.2:8000\"} 6\n"
    "# TYPE epp_endpoint_prefix_blocks_total counter\nepp_endpoint_prefix_blocks_total{endpoint=\"10.0.0.1:8000\"} 10\n"
    "# TYPE epp_endpoint_prefix_match_blocks_total counter\n"
    "epp_endpoint_prefix_match_blocks_total{endpoint=\"10.0.0.1:8000\"} 5\n";

std::string Metrics2() {
  std::string m = kMetrics1;
  auto swap = [&](const std::string& a, const std::string& b) { m.replace(m.find(a), a.size(), b); };
  swap("outcome=\"200\"} 10", "outcome=\"200\"} 30");
  swap("endpoint=\"10.0.0.1:8000\"} 4\n", "endpoint=\"10.0.0.1:8000\"} 24\n");
  swap("prefix_blocks_total{endpoint=\"10.0.0.1:8000\"} 10", "prefix_blocks_total{endpoint=\"10.0.0.1:8000\"} 30");
  swap("match_blocks_total{endpoint=\"10.0.0.1:8000\"} 5", "match_blocks_total{endpoint=\"10.0.0.1:8000\"} 20");
  return m;
}

TEST(Top, RatesFromTwoPollsAndDecisionsMergedById) {
  TopModel model;
  const std::string d1 = R"({"seen": 3, "kept": 2, "decisions": [
      {"id": 1, "status": 200, "endpoint": "10.0.0.1:8000", "model": "m",
       "summary": {"kind": "margin", "runner_up": "10.0.0.2:8000", "deciding_scorer": "queue-scorer"}},
      {"id": 2, "status": 429, "endpoint": null, "reason": "shed: pool saturated", "summary": {"kind": ""}}]})";
  ASSERT_TRUE(model.Update(kMetrics1, d1, "", 100.0).ok());
  EXPECT_EQ(model.state().endpoints.size(), 2u);
  EXPECT_EQ(model.state().endpoints[0].picks_per_s, 0);  // one poll: no rate yet
  ASSERT_TRUE(model.Update(Metrics2(), R"({"decisions": [{"id": 3, "status": 200, "endpoint": "10.0.0.2:8000"}]})", "", 102.0).ok());
  const TopState& s = model.state();
  EXPECT_DOUBLE_EQ(s.requests_per_s, 10.0);  // (32 - 12) / 2 s
  ASSERT_EQ(s.endpoints.size(), 2u);
  EXPECT_EQ(s.endpoints[0].address, "10.0.0.1:8000");
  EXPECT_DOUBLE_EQ(s.endpoints[0].picks_per_s, 10.0);
  ASSERT_TRUE(s.endpoints[0].prefix_hit.has_value());
  EXPECT_DOUBLE_EQ(*s.endpoints[0].prefix_hit, 0.75);  // 15 of the interval's 20 blocks
  EXPECT_DOUBLE_EQ(s.endpoints[1].picks_per_s, 0.0);
  ASSERT_EQ(s.decisions.size(), 3u);
  EXPECT_EQ(s.decisions[0].deciding_scorer, "queue-scorer");
  EXPECT_EQ(s.version, "9.9");

  TopView v;
  v.sort = TopSort::kQueue;
  v.descending = true;
  v.target = "127.0.0.1:9090";
  const std::string frame = RenderTop(s, v, 100, 24);
  std::vector<std::string> lines;
  for (size_t a = 0, b; a <= frame.size(); a = b + 1) {
    b = frame.find('\n', a);
    if (b == std::string::npos) b = frame.size();
    lines.push_back(frame.substr(a, b - a));
  }
  ASSERT_EQ(lines.size(), 24u);
  for (const std::string& l : lines) EXPECT_LE(l.size(), 100u) << l;
  EXPECT_LT(frame.find("10.0.0.1:8000"), frame.find("10.0.0.2:8000")) << frame;  // queue 7 before queue 1
  EXPECT_NE(frame.find("queue-scorer"), std::string::npos) << frame;
  EXPECT_NE(frame.find("shed: pool saturated"), std::string::npos) << frame;
  EXPECT_NE(frame.find("> 3"), std::string::npos) << frame;  // the newest is selected
  EXPECT_NE(frame.find("75%"), std::string::npos) << frame;
  v.detail = "winner 10.0.0.1:8000\nline two";
  EXPECT_NE(RenderTop(s, v, 100, 24).find("line two"), std::string::npos);
}

TEST(Top, RejectsWhatIsNotAnEppMetricsPort) {
  TopModel model;
  EXPECT_EQ(model.Update("vllm:num_requests_waiting 3\n", "", "", 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model.Update("not exposition {{{\n", "", "", 1).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(model.Update(kMetrics1, "", "decision log off", 1).ok());
  EXPECT_EQ(model.state().decisions_note, "decision log off");
  ASSERT_TRUE(model.Update(kMetrics1, "[1, 2]", "", 2).ok());
  EXPECT_NE(model.state().decisions_note.find("not a decision list"), std::string::npos);
}

}  // namespace
}  // namespace epp
