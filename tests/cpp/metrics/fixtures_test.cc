// Every real capture in ../shared/fixtures/metrics parses and extracts as that folder's README says.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "epp/metrics.h"

namespace epp {
namespace {

std::string FixturePath(const std::string& name) { return std::string(EPP_SHARED_FIXTURES) + "/metrics/" + name; }

std::string ReadFixture(const std::string& name) {
  std::ifstream in(FixturePath(name), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class FixturesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::is_directory(std::string(EPP_SHARED_FIXTURES) + "/metrics")) {
      GTEST_SKIP() << "shared fixtures not found at " << EPP_SHARED_FIXTURES;
    }
  }
};

struct Expected {
  const char* file;
  std::optional<std::string> engine;
  std::optional<double> waiting, running, kv;
  std::optional<LoraInfo> lora;
  std::optional<int64_t> block_size, blocks;
};

TEST_F(FixturesTest, EachCaptureYieldsWhatItsReadmeSays) {
  const Expected cases[] = {
      {"llm-d-inference-sim-v0.7.1-idle-maxlora2.prom", "vllm", 0, 0, 0, LoraInfo{2, {}, {}}, 16, 1024},
      {"sglang-2025-docs-production-metrics-loaded.prom", "sglang", 2826, 162, 0.28, std::nullopt, std::nullopt,
       std::nullopt},
      {"sglang-2024q4-docs-production-metrics-name-label.prom", "sglang", 0, 0, 0.01, std::nullopt, std::nullopt,
       std::nullopt},
      {"triton-trtllm-backend-2026-readme-inflight.prom", "triton-tensorrt-llm", 1, 1, 0.4875, std::nullopt, 64, 6239},
      {"vllm-0.7-v0engine-aibrix-runtime-doc-truncated.prom", "vllm", 0, 0, 0.0, LoraInfo{0, {}, {}}, 16, 81767},
  };
  for (const Expected& c : cases) {
    SCOPED_TRACE(c.file);
    auto fams = ParsePrometheusText(ReadFixture(c.file));
    ASSERT_TRUE(fams.ok()) << fams.status();
    auto engine = DetectEngine(*fams);
    ASSERT_EQ(engine, c.engine);
    MetricsExtraction ex = ExtractMetrics(*fams, *MetricMapping::BuiltIn(*engine));
    EXPECT_EQ(ex.metrics.waiting_queue_size, c.waiting);
    EXPECT_EQ(ex.metrics.running_requests, c.running);
    EXPECT_EQ(ex.metrics.kv_cache_usage, c.kv);
    EXPECT_EQ(ex.metrics.lora, c.lora);
    EXPECT_EQ(ex.metrics.cache_block_size, c.block_size);
    EXPECT_EQ(ex.metrics.cache_num_blocks, c.blocks);
    for (const CheckResult& r : ex.checks) EXPECT_NE(r.status, CheckStatus::kFail) << r.id << ": " << r.message;
  }
}

TEST_F(FixturesTest, ElidedVllmDocFailsStrictAndSkipsThreeLinesLeniently) {
  const std::string text = ReadFixture("vllm-v1-design-doc-example-elided.prom");
  auto strict = ParsePrometheusText(text);
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(std::string(strict.status().message()).find("line 4, column 1"), std::string::npos) << strict.status();
  auto lenient = ParsePrometheusText(text, {.lenient = true});
  ASSERT_TRUE(lenient.ok());
  EXPECT_EQ(lenient->skipped_lines(), 3);
  MetricsExtraction ex = ExtractMetrics(*lenient, *MetricMapping::BuiltIn("vllm"));
  EXPECT_EQ(ex.metrics.running_requests, 8);
  EXPECT_FALSE(ex.metrics.waiting_queue_size.has_value());
  EXPECT_FALSE(ex.metrics.kv_cache_usage.has_value());
}

TEST_F(FixturesTest, GieEppOwnMetricsParseButNameNoEngine) {
  auto fams = ParsePrometheusText(ReadFixture("gie-epp-testdata-request_ttft_seconds.prom"));
  ASSERT_TRUE(fams.ok()) << fams.status();
  EXPECT_EQ(fams->families().size(), 1u);
  EXPECT_EQ(fams->sample_count(), 114u);
  EXPECT_EQ(fams->families()[0].samples[0].label("target_model_name"), "t10");
  EXPECT_FALSE(DetectEngine(*fams).has_value());
}

TEST_F(FixturesTest, EveryFixtureParsesStrictlyOrLeniently) {
  for (const auto& entry : std::filesystem::directory_iterator(std::string(EPP_SHARED_FIXTURES) + "/metrics")) {
    SCOPED_TRACE(entry.path().string());
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    auto lenient = ParsePrometheusText(ss.str(), {.lenient = true});
    ASSERT_TRUE(lenient.ok());
    EXPECT_GT(lenient->families().size(), 0u);
  }
}

}  // namespace
}  // namespace epp
