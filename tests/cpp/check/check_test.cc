#include "epp/tools/check.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "testing/test_server.h"

namespace epp {
namespace {

using epp::testing::TestServer;

constexpr const char* kVllmMetrics =
    "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 1\n"
    "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 2\n"
    "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.5\n"
    "# TYPE vllm:lora_requests_info gauge\n"
    "vllm:lora_requests_info{max_lora=\"1\",running_lora_adapters=\"x\",waiting_lora_adapters=\"\"} 5\n"
    "# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"100\"} 1\n";

// A minimal OpenAI-compatible model server whose answers a test can spoil.
class FakeModelServer {
 public:
  std::string metrics = kVllmMetrics;
  int metrics_status = 200;
  std::string chat_object = "chat.completion";
  bool stream_done = true;

  std::string Start() {
    auto& s = srv_.server();
    s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.status = metrics_status;
      res.set_content(metrics, "text/plain");
    });
    s.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"m","object":"model"}]})", "application/json");
    });
    s.Post("/v1/completions", [](const httplib::Request& req, httplib::Response& res) {
      auto body = nlohmann::json::parse(req.body);
      res.set_content(nlohmann::json{{"object", "text_completion"},
                                     {"model", body["model"]},
                                     {"choices", {{{"index", 0}, {"text", "OK"}}}},
                                     {"usage", {{"prompt_tokens", 3}}}}
                          .dump(),
                      "application/json");
    });
    s.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      auto body = nlohmann::json::parse(req.body);
      if (body.value("stream", false)) {
        std::string sse = "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"delta\":{\"content\":\"O\"}}]}\n\n";
        sse += "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"delta\":{\"content\":\"K\"}}]}\n\n";
        if (stream_done) sse += "data: [DONE]\n\n";
        res.set_content(sse, "text/event-stream");
        return;
      }
      res.set_content(nlohmann::json{{"object", chat_object},
                                     {"choices", {{{"index", 0}, {"message", {{"role", "assistant"}, {"content", "OK"}}}}}}}
                          .dump(),
                      "application/json");
    });
    return srv_.Start();
  }

 private:
  TestServer srv_;
};

const CheckResult* Find(const TargetReport& t, std::string_view id) {
  for (const CheckResult& c : t.checks) {
    if (c.id == id) return &c;
  }
  return nullptr;
}

TEST(RunChecksTest, HealthyServerPassesEveryCheck) {
  FakeModelServer fake;
  const std::string url = fake.Start();
  auto report = RunChecks(std::vector<std::string>{url}, CheckOptions{});
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->targets.size(), 1u);
  const TargetReport& t = report->targets[0];
  EXPECT_EQ(t.engine, "vllm");
  EXPECT_EQ(t.checks.size(), 12u);
  for (const CheckResult& c : t.checks) EXPECT_EQ(c.status, CheckStatus::kPass) << c.id << ": " << c.message;
  EXPECT_EQ(report->status, CheckStatus::kPass);
  EXPECT_EQ(t.metrics.running_requests, 2);

  auto json = nlohmann::json::parse(CheckReportToJson(*report));
  EXPECT_EQ(json["status"], "pass");
  EXPECT_EQ(json["targets"][0]["metrics"]["kv_cache_usage"], 0.5);
  EXPECT_EQ(json["targets"][0]["metrics"]["lora"]["running"][0], "x");
  EXPECT_EQ(json["targets"][0]["metrics"]["cache_num_blocks"], 100);
  EXPECT_EQ(json["targets"][0]["checks"].size(), 12u);
  EXPECT_TRUE(json["targets"][0]["elapsed_ms"].is_number());
}

TEST(RunChecksTest, SpoiledAnswersFailTheRightChecks) {
  FakeModelServer fake;
  fake.chat_object = "text_completion";
  fake.stream_done = false;
  fake.metrics = "# TYPE vllm:num_requests_waiting counter\nvllm:num_requests_waiting 1\n";
  const std::string url = fake.Start();
  auto report = RunChecks(std::vector<std::string>{url}, CheckOptions{});
  ASSERT_TRUE(report.ok());
  const TargetReport& t = report->targets[0];
  EXPECT_EQ(report->status, CheckStatus::kFail);
  EXPECT_EQ(Find(t, "metrics.queue")->status, CheckStatus::kFail);
  EXPECT_EQ(Find(t, "api.chat")->status, CheckStatus::kFail);
  EXPECT_NE(Find(t, "api.chat")->message.find("expected \"chat.completion\""), std::string::npos);
  EXPECT_EQ(Find(t, "api.stream")->status, CheckStatus::kFail);
  EXPECT_NE(Find(t, "api.stream")->message.find("[DONE]"), std::string::npos);
  EXPECT_EQ(Find(t, "api.completions")->status, CheckStatus::kPass);
}

TEST(RunChecksTest, MetricsHttpErrorSkipsDependentChecks) {
  FakeModelServer fake;
  fake.metrics_status = 500;
  const std::string url = fake.Start();
  CheckOptions o;
  o.api = false;
  auto report = RunChecks(std::vector<std::string>{url}, o);
  ASSERT_TRUE(report.ok());
  const TargetReport& t = report->targets[0];
  EXPECT_EQ(Find(t, "metrics.reachable")->status, CheckStatus::kFail);
  EXPECT_NE(Find(t, "metrics.reachable")->message.find("HTTP 500"), std::string::npos);
  EXPECT_EQ(Find(t, "metrics.queue")->status, CheckStatus::kSkip);
  EXPECT_EQ(Find(t, "api.models"), nullptr);  // --no-api: not probed at all
}

TEST(RunChecksTest, ForcedEngineAndOverrides) {
  FakeModelServer fake;
  fake.metrics = "# TYPE my_q gauge\nmy_q 7\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"
                 "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.1\n";
  const std::string url = fake.Start();
  CheckOptions o;
  o.engine = "vllm";
  o.api = false;
  o.metric_overrides = {{"queue", "my_q"}};
  auto report = RunChecks(std::vector<std::string>{url}, o);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->targets[0].metrics.waiting_queue_size, 7);
  EXPECT_EQ(report->status, CheckStatus::kWarn);  // LoRA and cache info absent
}

TEST(RunChecksTest, OptionErrorsAreStatuses) {
  std::vector<std::string> targets{"x.prom"};
  CheckOptions o;
  o.engine = "nope";
  EXPECT_EQ(RunChecks(targets, o).status().code(), absl::StatusCode::kNotFound);
  o = CheckOptions{};
  o.metric_overrides = {{"qeue", "x"}};
  EXPECT_EQ(RunChecks(targets, o).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunChecks(std::vector<std::string>{"ftp://h/x"}, CheckOptions{}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunChecks(std::vector<std::string>{}, CheckOptions{}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RunChecksTest, MissingFileFailsReachable) {
  auto report = RunChecks(std::vector<std::string>{"/nonexistent/metrics.prom"}, CheckOptions{});
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(Find(report->targets[0], "metrics.reachable")->status, CheckStatus::kFail);
  EXPECT_EQ(report->status, CheckStatus::kFail);
}

TEST(RunChecksTest, ExampleFilesPassForEveryEngine) {
  for (const char* name : {"vllm", "sglang", "trtllm-serve", "triton-tensorrt-llm"}) {
    const std::string path = std::string(EPP_SOURCE_DIR) + "/examples/metrics/" + name + ".txt";
    auto report = RunChecks(std::vector<std::string>{path}, CheckOptions{});
    ASSERT_TRUE(report.ok());
    EXPECT_EQ(report->targets[0].engine, name);
    for (const CheckResult& c : report->targets[0].checks) {
      EXPECT_NE(c.status, CheckStatus::kFail) << name << " " << c.id << ": " << c.message;
    }
  }
}

}  // namespace
}  // namespace epp
