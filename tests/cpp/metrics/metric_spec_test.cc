#include <gtest/gtest.h>

#include "epp/metrics.h"

namespace epp {
namespace {

TEST(MetricSpecTest, ParsesNameOnly) {
  auto s = MetricSpec::Parse("vllm:num_requests_waiting");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->name, "vllm:num_requests_waiting");
  EXPECT_TRUE(s->labels.empty());
  EXPECT_EQ(s->ToString(), "vllm:num_requests_waiting");
}

TEST(MetricSpecTest, QuotedAndUnquotedLabels) {
  auto s = MetricSpec::Parse(" m{request_type=waiting, model=\"a,b\"} ");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->labels.size(), 2u);
  EXPECT_EQ(s->labels[0], (std::pair<std::string, std::string>{"request_type", "waiting"}));
  EXPECT_EQ(s->labels[1], (std::pair<std::string, std::string>{"model", "a,b"}));
  EXPECT_EQ(s->ToString(), "m{request_type=\"waiting\",model=\"a,b\"}");
}

TEST(MetricSpecTest, DropsPseudoLabels) {
  auto s = MetricSpec::Parse("m{__name__=\"m\",a=\"1\"}");
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->labels.size(), 1u);
  EXPECT_EQ(s->labels[0].first, "a");
}

TEST(MetricSpecTest, RejectsBadSpecs) {
  for (const char* bad : {"", "  ", "9abc", "m{a!=\"b\"}", "m{a=~\"b\"}", "m{a=\"b\"", "m{a=\"b}", "m{1a=b}",
                          "m{a}"}) {
    auto s = MetricSpec::Parse(bad);
    EXPECT_FALSE(s.ok()) << "accepted: " << bad;
    if (!s.ok()) {
      EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST(MetricSpecTest, MatchesOnNameAndEveryLabel) {
  auto fams = ParsePrometheusText(
      "# TYPE m gauge\n"
      "m{request_type=\"waiting\",model=\"x\"} 1\n"
      "m{request_type=\"scheduled\",model=\"x\"} 2\n");
  ASSERT_TRUE(fams.ok());
  auto spec = *MetricSpec::Parse("m{request_type=scheduled}");
  auto samples = fams->families()[0].samples;
  EXPECT_FALSE(spec.Matches(samples[0]));
  EXPECT_TRUE(spec.Matches(samples[1]));
  EXPECT_FALSE(MetricSpec::Parse("m{request_type=scheduled,model=y}")->Matches(samples[1]));
}

TEST(MetricMappingTest, BuiltInsAndUnknown) {
  for (const std::string& e : MetricMapping::BuiltInEngines()) {
    auto m = MetricMapping::BuiltIn(e);
    ASSERT_TRUE(m.ok());
    EXPECT_FALSE(m->queue.empty()) << e;
    EXPECT_FALSE(m->running.empty()) << e;
    EXPECT_FALSE(m->kv_usage.empty()) << e;
  }
  auto bad = MetricMapping::BuiltIn("tgi");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(bad.status().message()).find("vllm, sglang, trtllm-serve, triton-tensorrt-llm"),
            std::string::npos);
}

TEST(MetricMappingTest, OverridesReplaceTheCandidateList) {
  auto m = *MetricMapping::BuiltIn("vllm");
  ASSERT_TRUE(ApplyMetricOverride(m, "kv", "my_kv{pool=\"a\"}").ok());
  ASSERT_EQ(m.kv_usage.size(), 1u);
  EXPECT_EQ(m.kv_usage[0].ToString(), "my_kv{pool=\"a\"}");
  auto st = ApplyMetricOverride(m, "latency", "x");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ApplyMetricOverride(m, "queue", "{bad").code(), absl::StatusCode::kInvalidArgument);
}

TEST(MetricMappingTest, YamlEngineConfigs) {
  const char* yaml =
      "engineConfigs:\n"
      "- name: myengine\n"
      "  queuedRequestsSpec: my_queue\n"
      "  runningRequestsSpec: my_running{kind=\"active\"}\n"
      "  kvUsageSpec: my_kv\n"
      "  cacheInfoSpec: my_cache_info\n"
      "  cacheBlockSizeLabelName: bs\n"
      "  cacheNumBlocksLabelName: nb\n";
  auto r = LoadMetricMappingsYaml(yaml, "m.yaml");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].engine, "myengine");
  EXPECT_EQ((*r)[0].running[0].ToString(), "my_running{kind=\"active\"}");
  EXPECT_EQ((*r)[0].cache_block_size_label, "bs");
  EXPECT_TRUE((*r)[0].lora.empty());
}

TEST(MetricMappingTest, YamlErrorsNameFileLineAndKey) {
  auto r = LoadMetricMappingsYaml("- name: e\n  queuedRequestSpec: q\n", "m.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("m.yaml:2:3: [0].queuedRequestSpec: unknown key"),
            std::string::npos)
      << r.status();
  r = LoadMetricMappingsYaml("- queuedRequestsSpec: q\n", "m.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("missing 'name'"), std::string::npos);
  r = LoadMetricMappingsYaml("- name: e\n  kvUsageSpec: \"bad{\"\n", "m.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("m.yaml:2:"), std::string::npos) << r.status();
  r = LoadMetricMappingsYaml("engineConfigs: [\n", "m.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("m.yaml:"), std::string::npos);
}

}  // namespace
}  // namespace epp
