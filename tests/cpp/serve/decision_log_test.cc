// The decision log (epp/runtime/decision_log.h) and eppctl top's model and frame (epp/tools/top.h).
#include "epp/runtime/decision_log.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "epp/config.h"
#include "epp/registry.h"
#include "epp/scheduler.h"
#include "epp/tools/top.h"
#include "serve/serve_metrics.h"

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

// The flow-control layer as serve's writer exports it: a snapshot of the layer in, /metrics out.
struct FlowControlMetrics {
  ExtProcStats stats;
  EndpointSnapshot endpoints{{Endpoint{.address = "10.0.0.1:8000"}}};
  std::unique_ptr<Scheduler> scheduler;
  flowcontrol::ControllerStats fc;

  FlowControlMetrics() {
    auto s = BuildScheduler(DefaultConfig(), BuiltinRegistry());
    EXPECT_TRUE(s.ok()) << s.status();
    if (s.ok()) scheduler = std::move(*s);
    fc.max_requests = 10;  // a global request limit; no global byte limit
    flowcontrol::BandStats high, low;
    high.priority = 10;
    high.queued = 1;
    high.bytes = 100;
    high.max_requests = 5000;
    high.max_bytes = 1000;
    low.priority = 0;
    low.queued = 3;
    low.bytes = 900;
    low.max_requests = 4;
    low.max_bytes = 1000000;
    high.outcomes[static_cast<size_t>(flowcontrol::Outcome::kDispatched)] = 3;
    high.outcomes[static_cast<size_t>(flowcontrol::Outcome::kEvictedTTL)] = 1;
    low.outcomes[static_cast<size_t>(flowcontrol::Outcome::kDispatched)] = 5;
    low.outcomes[static_cast<size_t>(flowcontrol::Outcome::kRejectedCapacity)] = 2;
    fc.bands = {high, low};
    // Flow ids are the client's: this one carries an OSC title escape, a BEL and an 8-bit CSI.
    fc.flows = {{"tenant-b", 10, 1, 100}, {"\x1b]0;pwned\x07\x9b" "2J", 0, 1, 300}, {"tenant-a", 0, 2, 600}};
    fc.queued = 4;
    fc.bytes = 1000;
    fc.wait_bounds_s = {0.01, 0.1, 1};
    flowcontrol::WaitHistogram& w = fc.waits[static_cast<size_t>(flowcontrol::Outcome::kDispatched)];
    w.buckets = {4, 4, 0, 0};
    w.count = 8;
    w.sum_s = 0.3;
    fc.pool.saturation = 1.25;
    fc.pool.decode = 1.25;
  }

  std::string Render(bool with_flow_control) {
    internal::ServeMetricsSources src;
    src.stats = &stats;
    src.scheduler = scheduler.get();
    src.endpoints = &endpoints;
    src.pool_name = "pool";
    if (with_flow_control) src.flow_control = fc;
    return internal::RenderServeMetrics(src, 1'000'000);
  }
};

std::vector<std::string> Lines(const std::string& frame) {
  std::vector<std::string> lines;
  for (size_t a = 0, b; a <= frame.size(); a = b + 1) {
    b = frame.find('\n', a);
    if (b == std::string::npos) b = frame.size();
    lines.push_back(frame.substr(a, b - a));
  }
  return lines;
}

TEST(Top, FlowControlQueuesFromServeMetrics) {
  FlowControlMetrics m;
  ASSERT_NE(m.scheduler, nullptr);
  TopModel model;
  ASSERT_TRUE(model.Update(m.Render(true), "", "decision log off", 100.0).ok());
  ASSERT_TRUE(model.state().flow_control.has_value());
  for (const TopFlowOutcome& o : model.state().flow_control->outcomes) EXPECT_EQ(o.per_s, 0) << o.outcome;  // one poll
  m.fc.bands[1].outcomes[static_cast<size_t>(flowcontrol::Outcome::kDispatched)] = 9;
  m.fc.bands[1].outcomes[static_cast<size_t>(flowcontrol::Outcome::kRejectedCapacity)] = 6;
  const std::string decisions = R"({"seen": 1, "kept": 1, "decisions": [
      {"id": 1, "status": 200, "endpoint": "10.0.0.1:8000", "model": "m\u001b[2J\u009b1m", "summary": {"kind": "alone"}}]})";
  ASSERT_TRUE(model.Update(m.Render(true), decisions, "", 102.0).ok());
  const TopFlowControl& fc = *model.state().flow_control;
  ASSERT_EQ(fc.bands.size(), 2u);
  EXPECT_EQ(fc.bands[0].priority, 10);  // highest first
  EXPECT_EQ(fc.bands[0].queued, 1);
  EXPECT_EQ(fc.bands[1].priority, 0);
  EXPECT_EQ(fc.bands[1].queued, 3);  // the sum of its flows
  EXPECT_EQ(fc.bands[1].bytes, 900);
  EXPECT_DOUBLE_EQ(fc.bands[1].requests_used.value_or(-1), 0.75);
  EXPECT_DOUBLE_EQ(fc.bands[0].bytes_used.value_or(-1), 0.1);
  EXPECT_EQ(fc.queued, 4);
  EXPECT_EQ(fc.bytes, 1000);
  EXPECT_DOUBLE_EQ(fc.requests_used.value_or(-1), 0.4);
  EXPECT_FALSE(fc.bytes_used.has_value());  // no global byte limit: not exported
  EXPECT_DOUBLE_EQ(fc.saturation.value_or(-1), 1.25);
  EXPECT_DOUBLE_EQ(fc.decode_saturation.value_or(-1), 1.25);
  EXPECT_FALSE(fc.prefill_saturation.has_value());
  ASSERT_EQ(fc.flows.size(), 3u);
  EXPECT_EQ(fc.flows[0].id, "tenant-a");  // the longest queue first, then the most bytes
  EXPECT_EQ(fc.flows[1].id, "?]0;pwned??2J");
  EXPECT_EQ(fc.flows[1].bytes, 300);
  EXPECT_EQ(fc.flows[2].id, "tenant-b");
  EXPECT_EQ(fc.flows[2].priority, 10);
  std::map<std::string, std::pair<int64_t, double>> outcomes;
  for (const TopFlowOutcome& o : fc.outcomes) outcomes[o.outcome] = {o.total, o.per_s};
  EXPECT_EQ(outcomes["Dispatched"], (std::pair<int64_t, double>{12, 2.0}));  // (12 - 8) / 2 s, both bands
  EXPECT_EQ(outcomes["RejectedCapacity"], (std::pair<int64_t, double>{6, 2.0}));
  EXPECT_EQ(outcomes["EvictedTTL"], (std::pair<int64_t, double>{1, 0.0}));
  EXPECT_DOUBLE_EQ(fc.wait_p50_s.value_or(-1), 0.01);
  EXPECT_NEAR(fc.wait_p99_s.value_or(-1), 0.0982, 1e-9);

  TopView v;
  v.target = "127.0.0.1:9090";
  const std::string frame = RenderTop(model.state(), v, 100, 24);
  const std::vector<std::string> lines = Lines(frame);
  ASSERT_EQ(lines.size(), 24u);
  for (const std::string& l : lines) EXPECT_LE(l.size(), 100u) << l;
  for (char c : frame) {
    const auto b = static_cast<unsigned char>(c);
    EXPECT_TRUE(c == '\n' || (b >= 0x20 && b != 0x7f && b != 0x9b)) << "byte " << int{b} << " in\n" << frame;
  }
  const size_t section = frame.find("FLOW CONTROL   saturation 1.25 (prefill -, decode 1.25)   wait p50 10 ms p99 98 ms (dispatched)");
  ASSERT_NE(section, std::string::npos) << frame;
  EXPECT_LT(frame.find("10.0.0.1:8000"), section) << frame;  // after the endpoints
  EXPECT_LT(section, frame.find("DECISIONS")) << frame;     // before the decisions
  EXPECT_NE(frame.find("dropped/s (total):  EvictedTTL 0.0 (1)  RejectedCapacity 2.0 (6)    dispatched/s 2.0 (12)"),
            std::string::npos)
      << frame;
  const std::string wide = RenderTop(model.state(), v, 160, 24);
  EXPECT_NE(wide.find("m?[2J??1m"), std::string::npos) << wide;  // decision text (the MODEL column) too
  EXPECT_EQ(wide.find('\x1b'), std::string::npos) << wide;
  // The bands and the layer's totals against its global limits, beside the longest flows.
  size_t row = 0;
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i].find("tenant-a") != std::string::npos) row = i;
  ASSERT_GT(row, 0u) << frame;
  EXPECT_EQ(lines[row], "  10             1      100 B     0%     10%    tenant-a                     0       2      600 B") << frame;
  EXPECT_EQ(lines[row + 1], "  0              3      900 B    75%      0%    ?]0;pwned??2J                0       1      300 B") << frame;
  EXPECT_EQ(lines[row + 2], "  all            4     1000 B    40%       -    tenant-b                    10       1      100 B") << frame;
  EXPECT_EQ(lines[row - 1].substr(0, 44), "  BAND      QUEUED      BYTES   REQ%  BYTES%") << frame;

  // Without the layer: no series, no section.
  TopModel plain;
  ASSERT_TRUE(plain.Update(m.Render(false), "", "", 1).ok());
  EXPECT_FALSE(plain.state().flow_control.has_value());
  EXPECT_EQ(RenderTop(plain.state(), v, 100, 24).find("FLOW CONTROL"), std::string::npos);
  ASSERT_TRUE(plain.Update(kMetrics1, "", "", 2).ok());
  EXPECT_FALSE(plain.state().flow_control.has_value());
}

TEST(Top, FlowControlSectionFitsSmallFramesAndManyFlows) {
  FlowControlMetrics m;
  ASSERT_NE(m.scheduler, nullptr);
  m.fc.flows.clear();
  for (int i = 0; i < 12; ++i) m.fc.flows.push_back({"flow-" + std::to_string(i), 0, static_cast<size_t>(i + 1), 10});
  TopModel model;
  ASSERT_TRUE(model.Update(m.Render(true), "", "", 1).ok());
  ASSERT_EQ(model.state().flow_control->flows.size(), 12u);
  EXPECT_EQ(model.state().flow_control->flows[0].id, "flow-11");
  const std::string frame = RenderTop(model.state(), TopView{}, 100, 24);
  ASSERT_EQ(Lines(frame).size(), 24u);
  EXPECT_NE(frame.find("flow-11"), std::string::npos) << frame;
  EXPECT_NE(frame.find("flow-10"), std::string::npos) << frame;
  EXPECT_NE(frame.find("... 10 more flows"), std::string::npos) << frame;  // three rows: two flows, then the rest
  EXPECT_NE(frame.find("dropped/s (total):  EvictedTTL 0.0 (1)  RejectedCapacity 0.0 (2)"), std::string::npos) << frame;
  EXPECT_NE(frame.find("DECISIONS"), std::string::npos) << frame;
  const std::string tiny = RenderTop(model.state(), TopView{}, 40, 5);
  EXPECT_EQ(Lines(tiny).size(), 5u);
}

}  // namespace
}  // namespace epp
