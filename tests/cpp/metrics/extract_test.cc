#include <gtest/gtest.h>

#include "epp/metrics.h"

namespace epp {
namespace {

struct Extracted {
  MetricsExtraction ex;
  const CheckResult* Find(std::string_view id) const {
    for (const CheckResult& c : ex.checks) {
      if (c.id == id) return &c;
    }
    return nullptr;
  }
};

Extracted Extract(std::string_view text, std::string_view engine = "vllm") {
  auto fams = ParsePrometheusText(text);
  EXPECT_TRUE(fams.ok()) << fams.status();
  auto mapping = MetricMapping::BuiltIn(engine);
  EXPECT_TRUE(mapping.ok());
  return Extracted{ExtractMetrics(*fams, *mapping)};
}

constexpr const char* kHealthyVllm =
    "# TYPE vllm:num_requests_waiting gauge\n"
    "vllm:num_requests_waiting{model_name=\"a\"} 2\n"
    "vllm:num_requests_waiting{model_name=\"b\"} 3\n"
    "# TYPE vllm:num_requests_running gauge\n"
    "vllm:num_requests_running{model_name=\"a\"} 4\n"
    "# TYPE vllm:kv_cache_usage_perc gauge\n"
    "vllm:kv_cache_usage_perc{model_name=\"a\"} 0.25\n"
    "vllm:kv_cache_usage_perc{model_name=\"b\"} 0.5\n"
    "# TYPE vllm:lora_requests_info gauge\n"
    "vllm:lora_requests_info{max_lora=\"3\",running_lora_adapters=\"old\",waiting_lora_adapters=\"\"} 100\n"
    "vllm:lora_requests_info{max_lora=\"3\",running_lora_adapters=\" a , ,b \",waiting_lora_adapters=\"c\"} 200\n"
    "vllm:lora_requests_info{max_lora=\"3\",running_lora_adapters=\"older\",waiting_lora_adapters=\"\"} 150\n"
    "# TYPE vllm:cache_config_info gauge\n"
    "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"2048\"} 1\n";

TEST(ExtractMetricsTest, SumsCountsTakesMaxKvAndNewestLora) {
  Extracted r = Extract(kHealthyVllm);
  EXPECT_EQ(r.ex.metrics.waiting_queue_size, 5);
  EXPECT_EQ(r.ex.metrics.running_requests, 4);
  EXPECT_EQ(r.ex.metrics.kv_cache_usage, 0.5);
  ASSERT_TRUE(r.ex.metrics.lora.has_value());
  EXPECT_EQ(r.ex.metrics.lora->max_lora, 3);
  EXPECT_EQ(r.ex.metrics.lora->running, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.ex.metrics.lora->waiting, (std::vector<std::string>{"c"}));
  EXPECT_EQ(r.ex.metrics.cache_block_size, 16);
  EXPECT_EQ(r.ex.metrics.cache_num_blocks, 2048);
  for (const CheckResult& c : r.ex.checks) EXPECT_EQ(c.status, CheckStatus::kPass) << c.id << ": " << c.message;
  EXPECT_NE(r.Find("metrics.queue")->message.find("sum of 2 series"), std::string::npos);
  EXPECT_NE(r.Find("metrics.kv_cache")->message.find("max of 2 series"), std::string::npos);
}

TEST(ExtractMetricsTest, LoraResidencyFromLoraAdapterLoaded) {
  const std::string residency =
      "# TYPE vllm:lora_adapter_loaded gauge\n"
      "vllm:lora_adapter_loaded{adapter_name=\"g1\",level=\"gpu\",pinned=\"false\"} 1\n"
      "vllm:lora_adapter_loaded{adapter_name=\"g2\",level=\"gpu\",pinned=\"true\"} 1\n"
      "vllm:lora_adapter_loaded{adapter_name=\"gone\",level=\"gpu\",pinned=\"false\"} 0\n"
      "vllm:lora_adapter_loaded{adapter_name=\"c1\",level=\"cpu\",pinned=\"false\"} 1\n";
  Extracted r = Extract(std::string(kHealthyVllm) + residency);
  ASSERT_TRUE(r.ex.metrics.lora.has_value());
  EXPECT_EQ(r.ex.metrics.lora->max_lora, 3);
  EXPECT_EQ(r.ex.metrics.lora->loaded, (std::vector<std::string>{"g1", "g2"}));
  EXPECT_EQ(r.ex.metrics.lora->loaded_cpu, (std::vector<std::string>{"c1"}));
  // running a,b + waiting c + resident g1,g2: five distinct adapters.
  EXPECT_EQ(r.ex.metrics.lora->SlotsInUse(), 5);
  EXPECT_NE(r.Find("metrics.lora")->message.find("loaded [g1,g2]"), std::string::npos) << r.Find("metrics.lora")->message;
  EXPECT_TRUE(r.ex.metrics.lora->Active("g2"));
  EXPECT_FALSE(r.ex.metrics.lora->Active("c1"));

  // Residency without lora_requests_info (vLLM hides the deprecated metric later): which adapters
  // are loaded is known, how many fit is not.
  Extracted alone = Extract("vllm:num_requests_waiting 0\n" + residency);
  ASSERT_TRUE(alone.ex.metrics.lora.has_value());
  EXPECT_EQ(alone.ex.metrics.lora->max_lora, 0);
  EXPECT_EQ(alone.ex.metrics.lora->loaded, (std::vector<std::string>{"g1", "g2"}));
  EXPECT_EQ(alone.Find("metrics.lora")->status, CheckStatus::kPass);
  EXPECT_NE(alone.Find("metrics.lora")->message.find("max_lora unknown"), std::string::npos);
}

TEST(ExtractMetricsTest, CacheGeometryGaugesNearInt64AreRejectedNotCast) {
  // trtllm-serve and Triton report block size and count as gauge values: a value near or above
  // 2^63 was cast to int64 (undefined behaviour) and later multiplied.
  for (const char* big : {"9.3e18", "1e300", "+Inf", "1125899906842625"}) {
    SCOPED_TRACE(big);
    Extracted r = Extract(std::string("trtllm_kv_cache_tokens_per_block 32\ntrtllm_kv_cache_max_blocks ") + big + "\n",
                          "trtllm-serve");
    EXPECT_FALSE(r.ex.metrics.cache_num_blocks.has_value());
    const CheckResult* c = r.Find("metrics.cache_info");
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->status, CheckStatus::kFail);
    EXPECT_NE(c->message.find("must be positive integers up to 2^50"), std::string::npos) << c->message;
  }
  Extracted ok = Extract("trtllm_kv_cache_tokens_per_block 32\ntrtllm_kv_cache_max_blocks 1125899906842624\n", "trtllm-serve");
  EXPECT_EQ(ok.ex.metrics.cache_num_blocks, int64_t{1} << 50);
}

TEST(ExtractMetricsTest, CounterWhereGaugeRequiredNamesBothTypes) {
  Extracted r = Extract(
      "# TYPE vllm:num_requests_waiting counter\n"
      "vllm:num_requests_waiting 2\n");
  const CheckResult* c = r.Find("metrics.queue");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, CheckStatus::kFail);
  EXPECT_NE(c->message.find("is a counter"), std::string::npos) << c->message;
  EXPECT_NE(c->message.find("requires a gauge"), std::string::npos) << c->message;
  EXPECT_FALSE(r.ex.metrics.waiting_queue_size.has_value());
}

TEST(ExtractMetricsTest, HistogramWhereGaugeRequiredFails) {
  Extracted r = Extract(
      "# TYPE vllm:num_requests_running histogram\n"
      "vllm:num_requests_running_bucket{le=\"+Inf\"} 2\n"
      "vllm:num_requests_running_count 2\n");
  // The histogram's samples are not named like the spec, but the family is.
  const CheckResult* c = r.Find("metrics.running");
  EXPECT_EQ(c->status, CheckStatus::kFail);
  EXPECT_NE(c->message.find("histogram"), std::string::npos) << c->message;
}

TEST(ExtractMetricsTest, PercentWhereFractionBelongs) {
  Extracted r = Extract("# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 43.75\n");
  const CheckResult* c = r.Find("metrics.kv_cache");
  EXPECT_EQ(c->status, CheckStatus::kFail);
  EXPECT_NE(c->message.find("looks like a percent"), std::string::npos) << c->message;
  EXPECT_FALSE(r.ex.metrics.kv_cache_usage.has_value());
  r = Extract("# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 250\n");
  EXPECT_NE(r.Find("metrics.kv_cache")->message.find("outside [0,1]"), std::string::npos);
  r = Extract("# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 1\n");
  EXPECT_EQ(r.Find("metrics.kv_cache")->status, CheckStatus::kPass);
}

TEST(ExtractMetricsTest, NegativeNanAndInfCountsFail) {
  for (const char* v : {"-1", "NaN", "+Inf"}) {
    Extracted r = Extract(std::string("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running ") + v + "\n");
    EXPECT_EQ(r.Find("metrics.running")->status, CheckStatus::kFail) << v;
    EXPECT_NE(r.Find("metrics.running")->message.find("finite and >= 0"), std::string::npos);
  }
}

TEST(ExtractMetricsTest, MissingRequiredFailsOptionalWarns) {
  Extracted r = Extract("# TYPE unrelated gauge\nunrelated 1\n");
  EXPECT_EQ(r.Find("metrics.queue")->status, CheckStatus::kFail);
  EXPECT_EQ(r.Find("metrics.running")->status, CheckStatus::kFail);
  EXPECT_EQ(r.Find("metrics.kv_cache")->status, CheckStatus::kFail);
  EXPECT_NE(r.Find("metrics.kv_cache")->message.find("none of vllm:kv_cache_usage_perc, vllm:gpu_cache_usage_perc"),
            std::string::npos);
  EXPECT_EQ(r.Find("metrics.lora")->status, CheckStatus::kWarn);
  EXPECT_EQ(r.Find("metrics.cache_info")->status, CheckStatus::kWarn);
}

TEST(ExtractMetricsTest, FallsBackToOlderKvName) {
  Extracted r = Extract("# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc 0.3\n");
  EXPECT_EQ(r.ex.metrics.kv_cache_usage, 0.3);
  EXPECT_NE(r.Find("metrics.kv_cache")->message.find("older name"), std::string::npos);
}

TEST(ExtractMetricsTest, UntypedGaugeWarns) {
  Extracted r = Extract("vllm:num_requests_waiting 1\n");
  EXPECT_EQ(r.ex.metrics.waiting_queue_size, 1);
  EXPECT_EQ(r.Find("metrics.queue")->status, CheckStatus::kWarn);
}

TEST(ExtractMetricsTest, LabelSelectorWithNoMatchingSeries) {
  Extracted r = Extract(
      "# TYPE nv_trt_llm_request_metrics gauge\n"
      "nv_trt_llm_request_metrics{request_type=\"max\"} 64\n",
      "triton-tensorrt-llm");
  const CheckResult* c = r.Find("metrics.queue");
  EXPECT_EQ(c->status, CheckStatus::kFail);
  EXPECT_NE(c->message.find("no series matches nv_trt_llm_request_metrics{request_type=\"waiting\"}"),
            std::string::npos)
      << c->message;
}

TEST(ExtractMetricsTest, BadLoraAndCacheLabelsFail) {
  Extracted r = Extract(
      "# TYPE vllm:lora_requests_info gauge\n"
      "vllm:lora_requests_info{max_lora=\"two\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"} 1\n"
      "# TYPE vllm:cache_config_info gauge\n"
      "vllm:cache_config_info{block_size=\"0\",num_gpu_blocks=\"10\"} 1\n");
  EXPECT_EQ(r.Find("metrics.lora")->status, CheckStatus::kFail);
  EXPECT_NE(r.Find("metrics.lora")->message.find("max_lora 'two'"), std::string::npos);
  EXPECT_EQ(r.Find("metrics.cache_info")->status, CheckStatus::kFail);
  EXPECT_FALSE(r.ex.metrics.cache_block_size.has_value());
}

TEST(ExtractMetricsTest, VllmInsideTritonUsesModelAndVersionLabels) {
  Extracted r = Extract(
      "# TYPE vllm:num_requests_waiting gauge\n"
      "vllm:num_requests_waiting{model=\"vllm_model\",version=\"1\"} 4\n"
      "# TYPE vllm:num_requests_running gauge\n"
      "vllm:num_requests_running{model=\"vllm_model\",version=\"1\"} 2\n"
      "# TYPE vllm:gpu_cache_usage_perc gauge\n"
      "vllm:gpu_cache_usage_perc{model=\"vllm_model\",version=\"1\"} 0.1\n");
  EXPECT_EQ(r.ex.metrics.waiting_queue_size, 4);
  EXPECT_EQ(r.ex.metrics.running_requests, 2);
  EXPECT_EQ(r.ex.metrics.kv_cache_usage, 0.1);
}

TEST(DetectEngineTest, PicksTheEngineWithMostCoreMetrics) {
  struct Case {
    const char* text;
    std::optional<std::string> engine;
  };
  const Case cases[] = {
      {"vllm:num_requests_running 1\n", "vllm"},
      {"sglang:num_queue_reqs 1\nsglang:token_usage 0.1\n", "sglang"},
      {"sglang:num_requests_waiting 1\n", "sglang"},
      {"trtllm_num_requests_waiting 1\n", "trtllm-serve"},
      {"nv_trt_llm_request_metrics{request_type=\"waiting\"} 1\n", "triton-tensorrt-llm"},
      {"process_cpu_seconds_total 1\n", std::nullopt},
      {"vllm:num_requests_running 1\nsglang:num_queue_reqs 1\nsglang:token_usage 1\n", "sglang"},
      {"vllm:num_requests_running 1\nsglang:num_queue_reqs 1\n", "vllm"},  // tie: earlier engine
  };
  for (const Case& c : cases) {
    auto fams = ParsePrometheusText(c.text);
    ASSERT_TRUE(fams.ok());
    EXPECT_EQ(DetectEngine(*fams), c.engine) << c.text;
  }
}

TEST(CheckStatusTest, WorseStatusOrdersFailWarnPassSkip) {
  EXPECT_EQ(WorseStatus(CheckStatus::kPass, CheckStatus::kWarn), CheckStatus::kWarn);
  EXPECT_EQ(WorseStatus(CheckStatus::kFail, CheckStatus::kWarn), CheckStatus::kFail);
  EXPECT_EQ(WorseStatus(CheckStatus::kSkip, CheckStatus::kPass), CheckStatus::kPass);
  EXPECT_EQ(CheckStatusName(CheckStatus::kWarn), "warn");
}

}  // namespace
}  // namespace epp
