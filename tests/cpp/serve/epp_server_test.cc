// EppServer on loopback: start (ports 0, plaintext), /metrics, configuration reloads (a bad config
// keeps the running scheduler; unchanged plugins keep their state; in-flight load is shared), and
// RebuildScheduler's carry-over rule itself.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "epp/config.h"
#include "epp/registry.h"
#include "epp/runtime/serve.h"
#include "epp/runtime/http.h"
#include "epp/metrics.h"
#include "testing/epp_testing.h"
#include "testing/redis_server.h"

namespace epp {
namespace {

namespace fs = std::filesystem;

constexpr char kHeader[] = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n";

std::string Config(double prefix_weight, int block_size) {
  return std::string(kHeader) + "plugins:\n- type: queue-scorer\n- type: approx-prefix-cache-producer\n  parameters:\n" +
         "    blockSizeTokens: " + std::to_string(block_size) + "\n- type: prefix-cache-scorer\n" +
         "schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n  - pluginRef: prefix-cache-scorer\n" +
         "    weight: " + std::to_string(prefix_weight) + "\n";
}

InferenceRequest Chat(std::string text) {
  InferenceRequest r;
  r.model = "m";
  r.api = ApiKind::kChatCompletions;
  r.prompt = std::move(text);
  r.prompt_tokens = static_cast<int64_t>(r.prompt.size() / 4);
  return r;
}

using testing::Ep;

TEST(RebuildSchedulerTest, UnchangedPluginsCarryTheirStateAndLoadIsShared) {
  ManualClock clock(1'000'000);
  SeededRng rng(1);
  const PluginContext ctx{&clock, &rng};
  auto first = BuildScheduler(*ParseConfig(Config(3, 16), "a.yaml"), BuiltinRegistry(), ctx);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::vector<Endpoint> pool = {Ep("10.0.0.1:8000"), Ep("10.0.0.2:8000")};
  PickResult picked = (*first)->Pick(Chat(std::string(4000, 'p')), pool);
  ASSERT_EQ(picked.status, 200);
  const size_t entries = (*first)->PrefixIndexEntries();
  ASSERT_GT(entries, 0u);

  // A scorer weight changed, the producer did not: the index carries over, and so does the load.
  auto second = RebuildScheduler(*ParseConfig(Config(5, 16), "a.yaml"), BuiltinRegistry(), ctx, **first);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)->PrefixIndexEntries(), entries);
  EXPECT_EQ((*second)->Inflight(picked.endpoints.front()).first, 1);
  const PickResult later = (*second)->Pick(Chat(std::string(4000, 'q')), pool);
  EXPECT_GT((*first)->PrefixIndexEntries(), entries) << "the producer is one instance in both";
  (*first)->Release(picked);  // a stream that started before the reload ends after it
  EXPECT_EQ((*second)->Inflight(picked.endpoints.front()).first, later.endpoints.front() == picked.endpoints.front() ? 1 : 0);
  (*second)->Release(later);
  EXPECT_EQ((*first)->Inflight(later.endpoints.front()).first, 0);
  EXPECT_NE((*second)->EffectiveConfigYaml().find("weight: 5"), std::string::npos);

  // The producer's parameters changed: a fresh index.
  auto third = RebuildScheduler(*ParseConfig(Config(5, 32), "a.yaml"), BuiltinRegistry(), ctx, **second);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ((*third)->PrefixIndexEntries(), 0u);
  second->reset();
  first->reset();  // the previous schedulers may go away
  EXPECT_EQ((*third)->Pick(Chat(std::string(4000, 'p')), pool).status, 200);
}

class EppServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("srv-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    config_ = (dir_ / "config.yaml").string();
    Write(config_, Config(3, 16));
  }
  static void Write(const std::string& path, const std::string& text) {
    const std::string tmp = path + ".tmp";
    std::ofstream(tmp, std::ios::trunc) << text;
    fs::rename(tmp, path);
  }
  ServeConfig Base() {
    ServeConfig c;
    c.config_file = config_;
    c.watch_config = false;  // reloads are driven by ReloadConfig() here
    c.listen_address = "127.0.0.1";
    c.grpc_port = c.health_port = c.metrics_port = 0;
    c.tls = false;
    for (const char* a : {"10.0.0.1:8000", "10.0.0.2:8000"}) {
      EndpointSpec s;
      s.address = a;
      s.metrics = std::string(kNoMetrics);
      s.origin = "--endpoint";
      c.endpoints.push_back(s);
    }
    return c;
  }
  std::string Metrics(const EppServer& server) {
    HttpRequest r;
    r.url = "http://127.0.0.1:" + std::to_string(server.metrics_port()) + "/metrics";
    auto got = HttpFetch(r);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? got->body : "";
  }
  fs::path dir_;
  std::string config_;
};

// Every shared-state round reads the pool's addresses while the scrape loop installs a new
// snapshot after each read; the round must hold the snapshot it walks. It did not (a range-for
// over `*Snapshot()` frees the vector under the loop): a data race and a use after free that the
// pytest suites found under TSan. This test fails under `scripts/test --sanitize thread` (and ASan)
// without the fix; in a plain build it checks that both loops ran together.
TEST_F(EppServerTest, SharedStateRoundsReadThePoolWhileScrapesReplaceIt) {
  if (!testing::RedisServerProcess::Available()) GTEST_SKIP() << "redis-server is not installed (scripts/setup installs it)";
  testing::RedisServerProcess redis;
  const std::string prom = (dir_ / "m.prom").string();
  Write(prom, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 1\n"
              "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 2\n"
              "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.5\n");
  ServeConfig c = Base();
  for (EndpointSpec& e : c.endpoints) e.metrics = prom;
  c.refresh_interval = std::chrono::milliseconds(5);
  SharedStateOptions shared;
  shared.address = redis.url();
  shared.interval = std::chrono::milliseconds(5);
  c.shared_state = shared;
  auto server = EppServer::Start(std::move(c));
  ASSERT_TRUE(server.ok()) << server.status();
  auto counter = [&](const char* name) {
    absl::StatusOr<MetricFamilies> m = ParsePrometheusText(Metrics(**server));
    if (!m.ok()) return 0.0;
    for (const MetricFamily* f : m->FindBySampleName(name))
      for (const Sample& sample : f->samples)
        if (sample.name == name) return sample.value;
    return 0.0;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20) * testing::TimeScale();
  double rounds = 0, scrapes = 0;
  while ((rounds < 40 || scrapes < 40) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    rounds = counter("epp_shared_state_rounds_total");
    scrapes = counter("epp_scrape_cycles_total");
  }
  EXPECT_GE(rounds, 40) << "shared-state rounds";
  EXPECT_GE(scrapes, 40) << "scrape cycles";
  (*server)->Shutdown(std::chrono::milliseconds(0));
}

TEST_F(EppServerTest, StartsOnFreePortsAndServesMetrics) {
  auto server = EppServer::Start(Base());
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_GT((*server)->grpc_port(), 0);
  EXPECT_GT((*server)->health_port(), 0);
  EXPECT_GT((*server)->metrics_port(), 0);
  ASSERT_NE((*server)->pool(), nullptr);
  EXPECT_EQ((*server)->pool()->size(), 2u);
  const std::string text = Metrics(**server);
  EXPECT_NE(text.find("epp_endpoints 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("epp_config_reloads_total{result=\"ok\"} 0\n"), std::string::npos);
  EXPECT_EQ(text.find("epp_config_reload_error{"), std::string::npos);
  EXPECT_NE((*server)->Describe().find("2 endpoints from 2 --endpoint flags"), std::string::npos) << (*server)->Describe();
  (*server)->Shutdown(std::chrono::milliseconds(0));
  (*server)->Shutdown(std::chrono::milliseconds(0));  // idempotent
}

TEST_F(EppServerTest, ReloadSwapsTheSchedulerAndABadConfigKeepsIt) {
  auto started = EppServer::Start(Base());
  ASSERT_TRUE(started.ok()) << started.status();
  EppServer& server = **started;
  const std::shared_ptr<const Scheduler> first = server.scheduler();
  const std::vector<Endpoint> pool = {Ep("10.0.0.1:8000"), Ep("10.0.0.2:8000")};
  first->Pick(Chat(std::string(4000, 'p')), pool);
  const size_t entries = first->PrefixIndexEntries();

  Write(config_, Config(5, 16));
  ASSERT_TRUE(server.ReloadConfig().ok());
  const std::shared_ptr<const Scheduler> second = server.scheduler();
  EXPECT_NE(second.get(), first.get());
  EXPECT_EQ(second->PrefixIndexEntries(), entries);
  EXPECT_EQ(server.config_reloads().ok, 1);

  Write(config_, std::string(kHeader) + "plugins:\n- type: no-such-scorer\n");
  absl::Status bad = server.ReloadConfig();
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(server.scheduler().get(), second.get()) << "the running scheduler stays";
  const ConfigReloadCounters c = server.config_reloads();
  EXPECT_EQ(c.failed, 1);
  EXPECT_NE(c.last_error.find("unsupported plugin types: no-such-scorer"), std::string::npos) << c.last_error;
  const std::string text = Metrics(server);
  EXPECT_NE(text.find("epp_config_reloads_total{result=\"error\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("epp_config_reload_error{error=\"" + config_), std::string::npos) << text;

  Write(config_, Config(5, 16));
  ASSERT_TRUE(server.ReloadConfig().ok());
  EXPECT_TRUE(server.config_reloads().last_error.empty());
  EXPECT_EQ(Metrics(server).find("epp_config_reload_error{"), std::string::npos);
}

// A core-metrics-extractor whose vllm mapping reads the queue from `queue_metric`.
std::string ExtractorConfig(const std::string& queue_metric) {
  return std::string(kHeader) + "plugins:\n- type: core-metrics-extractor\n  parameters:\n    engineConfigs:\n" +
         "    - name: vllm\n      queuedRequestsSpec: " + queue_metric + "\n- type: queue-scorer\n" +
         "schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n";
}

TEST_F(EppServerTest, AReloadChangesHowMetricsAreRead) {
  const std::string page = (dir_ / "a.prom").string();
  Write(page, "# TYPE queue_a gauge\nqueue_a 4\n# TYPE queue_b gauge\nqueue_b 9\n"
              "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 2\n");
  Write(config_, ExtractorConfig("queue_a"));
  ServeConfig c = Base();
  c.endpoints.resize(1);
  c.endpoints[0].metrics = page;
  c.engine = "vllm";
  c.refresh_interval = std::chrono::milliseconds(5);
  auto started = EppServer::Start(std::move(c));
  ASSERT_TRUE(started.ok()) << started.status();
  EppServer& server = **started;
  const auto queue = [&server] { return server.pool()->Snapshot()->front().metrics.waiting_queue_size; };
  EXPECT_EQ(queue(), 4) << "the extractor's mapping applies from the first read";

  Write(config_, ExtractorConfig("queue_b"));
  ASSERT_TRUE(server.ReloadConfig().ok());
  // The scrape loop takes the new settings up at its next interval (5 ms); bounded wait.
  for (int i = 0; i < 400 && queue() != 9; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(queue(), 9) << "the reloaded config's queuedRequestsSpec is read";
  EXPECT_GE(server.pool()->counters().scrape_settings_applied, 1);

  // Without an extractor the built-in vllm mapping (vllm:num_requests_waiting) is back.
  Write(config_, Config(3, 16));
  ASSERT_TRUE(server.ReloadConfig().ok());
  for (int i = 0; i < 400 && queue() != 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(queue(), 2);
  EXPECT_EQ(server.config_reloads().ok, 2);
  server.Shutdown(std::chrono::milliseconds(0));
}

TEST_F(EppServerTest, StartFailsOnABadConfigOrABusyPort) {
  Write(config_, "kind: [");
  auto bad = EppServer::Start(Base());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  Write(config_, Config(3, 16));
  auto first = EppServer::Start(Base());
  ASSERT_TRUE(first.ok()) << first.status();
  ServeConfig again = Base();
  again.grpc_port = (*first)->grpc_port();
  auto busy = EppServer::Start(again);
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace epp
