// EndpointPool without threads or sleeps: the tests drive RunCycle() / RunDiscovery() by hand, on
// a ManualClock, with files written by rename (a new inode each time, as a ConfigMap swap) and a
// fake EndpointLister. Covered: the settle rule, reload failures (set kept, logged once per
// version), departures reported after the snapshot without them, discovery hand-over and
// rejection, flags merged after discovered endpoints, metrics refresh and scrape-error counters.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "epp/runtime/serve.h"

namespace epp {
namespace {

namespace fs = std::filesystem;

// Records every line (level, text).
class CapturingLogger final : public Logger {
 public:
  bool Enabled(LogLevel level) const override { return level <= LogLevel::kInfo; }
  void Write(LogLevel level, std::string_view message) const override {
    std::lock_guard<std::mutex> lock(mu_);
    lines_.emplace_back(level, std::string(message));
  }
  int Count(LogLevel level, std::string_view part) const {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (const auto& [l, m] : lines_) n += l == level && m.find(part) != std::string::npos;
    return n;
  }
  std::string All() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (const auto& l : lines_) out += l.second + "\n";
    return out;
  }

 private:
  mutable std::mutex mu_;
  mutable std::vector<std::pair<LogLevel, std::string>> lines_;
};

class FakeLister final : public EndpointLister {
 public:
  absl::StatusOr<std::vector<EndpointSpec>> List(const std::atomic<bool>&) override {
    ++calls;
    return next;
  }
  std::string Describe() const override { return "inferencepool ns/fake"; }
  absl::StatusOr<std::vector<EndpointSpec>> next = std::vector<EndpointSpec>{};
  int calls = 0;
};

// A discovered endpoint: Pod `pod` (default: named after the address) at `address`.
EndpointSpec Spec(std::string address, std::string pod = "") {
  EndpointSpec s;
  s.address = std::move(address);
  s.instance = pod.empty() ? "ns/" + s.address : std::move(pod);
  s.origin = "pod " + s.instance;
  s.metrics = std::string(kNoMetrics);
  return s;
}

EndpointSpec Flag(std::string address, int n) {
  EndpointSpec s;
  s.address = std::move(address);
  s.origin = "--endpoint #" + std::to_string(n);
  s.metrics = std::string(kNoMetrics);
  return s;
}

std::string VllmMetrics(int waiting) {
  return "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} " +
         std::to_string(waiting) +
         "\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 1\n"
         "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.5\n";
}

class EndpointPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("pool-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    file_ = (dir_ / "endpoints.yaml").string();
  }
  // Written beside and renamed over: the path resolves to a new inode, as a ConfigMap swap does.
  void WriteFile(const std::string& path, const std::string& text) {
    const std::string tmp = path + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << text;
    }
    fs::rename(tmp, path);
  }
  void WriteEndpoints(const std::vector<std::string>& addresses) {
    std::string text = "endpoints:\n";
    for (const std::string& a : addresses) text += "  - address: " + a + "\n    metrics: none\n";
    if (addresses.empty()) text = "endpoints: []\n";
    WriteFile(file_, text);
  }
  EndpointPoolOptions FileOptions() {
    EndpointPoolOptions o;
    o.endpoints_file = file_;
    o.resolve.clock = &clock_;
    o.log = &log_;
    o.on_departure = [this](const std::string& a) {
      departed_.push_back(a);
      // Reported only once the published snapshot no longer has it.
      if (pool_ != nullptr && !same_address_ok_) {
        for (const Endpoint& e : *pool_->Snapshot()) {
          EXPECT_NE(e.address, a) << "departed while still published";
        }
      }
    };
    return o;
  }
  std::vector<std::string> Addresses() const {
    std::vector<std::string> out;
    for (const Endpoint& e : *pool_->Snapshot()) out.push_back(e.address);
    return out;
  }

  fs::path dir_;
  std::string file_;
  ManualClock clock_{1'000'000};
  CapturingLogger log_;
  std::vector<std::string> departed_;
  bool same_address_ok_ = false;
  std::unique_ptr<EndpointPool> pool_;
};

TEST_F(EndpointPoolTest, FileChangeIsInstalledOnlyOnceItSettled) {
  WriteEndpoints({"10.0.0.1:8000", "10.0.0.2:8000"});
  auto pool = EndpointPool::Create(FileOptions());
  ASSERT_TRUE(pool.ok()) << pool.status();
  pool_ = *std::move(pool);
  EXPECT_EQ(Addresses(), (std::vector<std::string>{"10.0.0.1:8000", "10.0.0.2:8000"}));
  pool_->RunCycle();  // unchanged
  EXPECT_EQ(pool_->counters().reloads_ok, 0);

  WriteEndpoints({"10.0.0.2:8000", "10.0.0.3:8000"});
  pool_->RunCycle();  // first sight of the new version: it may still be being written
  EXPECT_EQ(Addresses(), (std::vector<std::string>{"10.0.0.1:8000", "10.0.0.2:8000"}));
  EXPECT_TRUE(departed_.empty());
  pool_->RunCycle();  // the same version twice: installed
  EXPECT_EQ(Addresses(), (std::vector<std::string>{"10.0.0.2:8000", "10.0.0.3:8000"}));
  EXPECT_EQ(departed_, (std::vector<std::string>{"10.0.0.1:8000"}));
  EXPECT_EQ(pool_->counters().reloads_ok, 1);
  EXPECT_EQ(log_.Count(LogLevel::kInfo, "reloaded: 2 endpoints; added: 10.0.0.3:8000; removed: 10.0.0.1:8000"), 1)
      << log_.All();
  pool_->RunCycle();
  EXPECT_EQ(pool_->counters().reloads_ok, 1);
}

TEST_F(EndpointPoolTest, MovingAnEntryInTheFileKeepsItsState) {
  // File entries are identified by address: a reordered file is not a set of new servers (their
  // origin "endpoints.yaml:N" changes, their prefix state must not be forgotten).
  WriteEndpoints({"10.0.0.1:8000", "10.0.0.2:8000"});
  pool_ = *EndpointPool::Create(FileOptions());
  WriteEndpoints({"10.0.0.2:8000", "10.0.0.1:8000"});
  pool_->RunCycle();
  pool_->RunCycle();
  EXPECT_EQ(Addresses(), (std::vector<std::string>{"10.0.0.2:8000", "10.0.0.1:8000"}));
  EXPECT_TRUE(departed_.empty());
}

TEST_F(EndpointPoolTest, AFileStillChangingWaitsForTheLastVersion) {
  WriteEndpoints({"10.0.0.1:8000"});
  pool_ = *EndpointPool::Create(FileOptions());
  WriteEndpoints({"10.0.0.2:8000"});
  pool_->RunCycle();
  WriteEndpoints({"10.0.0.3:8000"});  // changed again before it settled
  pool_->RunCycle();
  EXPECT_EQ(Addresses(), (std::vector<std::string>{"10.0.0.1:8000"}));
  pool_->RunCycle();
  EXPECT_EQ(Addresses(), (std::vector<std::string>{"10.0.0.3:8000"}));
  EXPECT_EQ(pool_->counters().reloads_ok, 1);  // 10.0.0.2 was never installed
}

TEST_F(EndpointPoolTest, ABadFileKeepsTheSetAndIsLoggedOncePerVersion) {
  WriteEndpoints({"10.0.0.1:8000"});
  pool_ = *EndpointPool::Create(FileOptions());
  WriteFile(file_, "endpoints:\n  - address: 10.0.0.9\n");  // no port
  for (int i = 0; i < 4; ++i) pool_->RunCycle();
  EXPECT_EQ(Addresses(), (std::vector<std::string>{"10.0.0.1:8000"}));
  EXPECT_EQ(pool_->counters().reloads_failed, 1);
  EXPECT_EQ(log_.Count(LogLevel::kError, "'10.0.0.9' has no port; keeping the 1 endpoints in use"), 1) << log_.All();
  // Removing the file keeps the set too, with one warning.
  fs::remove(file_);
  for (int i = 0; i < 3; ++i) pool_->RunCycle();
  EXPECT_EQ(Addresses(), (std::vector<std::string>{"10.0.0.1:8000"}));
  EXPECT_EQ(log_.Count(LogLevel::kWarn, "cannot be read; keeping the 1 endpoints in use"), 1) << log_.All();
  // A good version after both is installed.
  WriteEndpoints({"10.0.0.4:8000"});
  pool_->RunCycle();
  pool_->RunCycle();
  EXPECT_EQ(Addresses(), (std::vector<std::string>{"10.0.0.4:8000"}));
  EXPECT_EQ(departed_, (std::vector<std::string>{"10.0.0.1:8000"}));
}

TEST_F(EndpointPoolTest, AnEmptyFileIsAnEmptyPoolAndEndpointsCanArriveLater) {
  WriteEndpoints({});
  auto pool = EndpointPool::Create(FileOptions());
  ASSERT_TRUE(pool.ok()) << pool.status();
  pool_ = *std::move(pool);
  EXPECT_EQ(pool_->size(), 0u);
  EXPECT_EQ(log_.Count(LogLevel::kWarn, "lists no endpoints yet"), 1);
  WriteEndpoints({"10.0.0.1:8000"});
  pool_->RunCycle();
  pool_->RunCycle();
  EXPECT_EQ(pool_->size(), 1u);
}

TEST_F(EndpointPoolTest, NoSourceAtAllIsAnError) {
  EndpointPoolOptions o;
  auto pool = EndpointPool::Create(o);
  ASSERT_FALSE(pool.ok());
  EXPECT_NE(pool.status().message().find("no endpoints"), std::string::npos);
  FakeLister lister;
  o.endpoints_file = file_;
  o.lister = std::shared_ptr<EndpointLister>(&lister, [](EndpointLister*) {});
  EXPECT_FALSE(EndpointPool::Create(o).ok());  // discovery and a file
}

TEST_F(EndpointPoolTest, MetricsAreRefreshedEachCycleAndUnreadableOnesKeepTheLast) {
  const std::string metrics = (dir_ / "a.prom").string();
  WriteFile(metrics, VllmMetrics(3));
  WriteFile(file_, "endpoints:\n  - address: 10.0.0.1:8000\n    metrics: " + metrics + "\n");
  pool_ = *EndpointPool::Create(FileOptions());
  ASSERT_EQ(pool_->Snapshot()->front().metrics.waiting_queue_size, 3);
  EXPECT_EQ(pool_->Snapshot()->front().metrics_time_us, 1'000'000);
  WriteFile(metrics, VllmMetrics(7));
  clock_.Advance(50'000);
  pool_->RunCycle();
  EXPECT_EQ(pool_->Snapshot()->front().metrics.waiting_queue_size, 7);
  EXPECT_EQ(pool_->Snapshot()->front().metrics_time_us, 1'050'000);
  EXPECT_EQ(pool_->counters().scrape_cycles, 1);
  // Unreadable: the last metrics and their time stay (they age into staleness); counted, and
  // logged once on the transition.
  fs::remove(metrics);
  clock_.Advance(50'000);
  pool_->RunCycle();
  pool_->RunCycle();
  EXPECT_EQ(pool_->Snapshot()->front().metrics.waiting_queue_size, 7);
  EXPECT_EQ(pool_->Snapshot()->front().metrics_time_us, 1'050'000);
  EXPECT_EQ(pool_->counters().scrape_errors.at("10.0.0.1:8000"), 2);
  EXPECT_EQ(log_.Count(LogLevel::kWarn, "endpoint 10.0.0.1:8000: metrics cannot be read (last read 0.050s ago"), 1)
      << log_.All();
  WriteFile(metrics, VllmMetrics(1));
  pool_->RunCycle();
  EXPECT_EQ(pool_->Snapshot()->front().metrics.waiting_queue_size, 1);
  EXPECT_EQ(log_.Count(LogLevel::kInfo, "endpoint 10.0.0.1:8000: metrics read again"), 1);
}

TEST_F(EndpointPoolTest, NewScrapeSettingsAreTakenUpByTheNextCycle) {
  // The page has two queue gauges; the settings decide which one is the queue.
  const std::string metrics = (dir_ / "a.prom").string();
  WriteFile(metrics, VllmMetrics(3) + "# TYPE my_queue gauge\nmy_queue 11\n");
  WriteFile(file_, "endpoints:\n  - address: 10.0.0.1:8000\n    metrics: " + metrics + "\n");
  int installs = 0;
  size_t installed_size = 0;
  EndpointPoolOptions o = FileOptions();
  o.on_installed = [&](const std::vector<EndpointSpec>& specs) {
    ++installs;
    installed_size = specs.size();
  };
  pool_ = *EndpointPool::Create(std::move(o));
  EXPECT_EQ(installs, 1) << "the first set is an install too";
  EXPECT_EQ(installed_size, 1u);
  ASSERT_EQ(pool_->Snapshot()->front().metrics.waiting_queue_size, 3);

  ScrapeOptions scrape;
  scrape.engine = "vllm";
  scrape.metric_overrides = {{"queue", "my_queue"}};
  ASSERT_TRUE(pool_->SetScrapeOptions(scrape).ok());
  EXPECT_EQ(pool_->counters().scrape_settings_applied, 0) << "handed over, not yet taken up";
  EXPECT_EQ(pool_->Snapshot()->front().metrics.waiting_queue_size, 3);
  pool_->RunCycle();
  EXPECT_EQ(pool_->counters().scrape_settings_applied, 1);
  EXPECT_EQ(pool_->Snapshot()->front().metrics.waiting_queue_size, 11);
  pool_->RunCycle();
  EXPECT_EQ(pool_->counters().scrape_settings_applied, 1) << "taken up once";
  EXPECT_EQ(installs, 1) << "new settings are not a new endpoint set";

  // Bad settings are refused whole: the ones in use stay.
  ScrapeOptions bad = scrape;
  bad.metric_overrides = {{"queue", "my_queue{"}};
  const absl::Status refused = pool_->SetScrapeOptions(bad);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  bad = scrape;
  bad.timeout = std::chrono::milliseconds(0);
  EXPECT_EQ(pool_->SetScrapeOptions(bad).code(), absl::StatusCode::kInvalidArgument);
  WriteFile(metrics, VllmMetrics(3) + "# TYPE my_queue gauge\nmy_queue 12\n");
  pool_->RunCycle();
  EXPECT_EQ(pool_->counters().scrape_settings_applied, 1);
  EXPECT_EQ(pool_->Snapshot()->front().metrics.waiting_queue_size, 12);

  // Back to the built-in mapping.
  ASSERT_TRUE(pool_->SetScrapeOptions(ScrapeOptions{}).ok());
  pool_->RunCycle();
  EXPECT_EQ(pool_->Snapshot()->front().metrics.waiting_queue_size, 3);

  // A changed file is installed (after it settled) and reported to on_installed.
  WriteFile(file_, "endpoints:\n  - address: 10.0.0.1:8000\n    metrics: " + metrics +
                       "\n  - address: 10.0.0.2:8000\n    metrics: none\n");
  pool_->RunCycle();
  pool_->RunCycle();
  EXPECT_EQ(installs, 2);
  EXPECT_EQ(installed_size, 2u);
}

class DiscoveryTest : public EndpointPoolTest {
 protected:
  EndpointPoolOptions ListerOptions(std::vector<EndpointSpec> flags = {}) {
    EndpointPoolOptions o = FileOptions();
    o.endpoints_file.clear();
    o.flag_specs = std::move(flags);
    o.lister = std::shared_ptr<EndpointLister>(&lister_, [](EndpointLister*) {});
    return o;
  }
  FakeLister lister_;
};

TEST_F(DiscoveryTest, AChangedListIsHandedOverAndInstalledByTheNextCycle) {
  lister_.next = std::vector<EndpointSpec>{Spec("10.0.0.1:8000"), Spec("10.0.0.2:8000")};
  auto pool = EndpointPool::Create(ListerOptions());
  ASSERT_TRUE(pool.ok()) << pool.status();
  pool_ = *std::move(pool);
  EXPECT_EQ(pool_->size(), 2u);
  EXPECT_EQ(pool_->counters().discovery_ok, 1);

  pool_->RunDiscovery();  // the same list: nothing handed over
  pool_->RunCycle();
  EXPECT_EQ(pool_->counters().reloads_ok, 0);

  lister_.next = std::vector<EndpointSpec>{Spec("10.0.0.2:8000"), Spec("10.0.0.3:8000")};
  pool_->RunDiscovery();
  EXPECT_EQ(Addresses().size(), 2u);
  EXPECT_EQ(Addresses().front(), "10.0.0.1:8000") << "installed by the scrape cycle, not by discovery";
  pool_->RunCycle();
  EXPECT_EQ(Addresses(), (std::vector<std::string>{"10.0.0.2:8000", "10.0.0.3:8000"}));
  EXPECT_EQ(departed_, (std::vector<std::string>{"10.0.0.1:8000"}));
  EXPECT_EQ(pool_->counters().discovery_ok, 3);
  EXPECT_EQ(pool_->counters().reloads_ok, 1);
}

TEST_F(DiscoveryTest, ANewPodWithTheIpOfAGoneOneIsADeparture) {
  lister_.next = std::vector<EndpointSpec>{Spec("10.0.0.1:8000", "ns/a")};
  pool_ = *EndpointPool::Create(ListerOptions());
  same_address_ok_ = true;  // the address stays published, now for another Pod
  lister_.next = std::vector<EndpointSpec>{Spec("10.0.0.1:8000", "ns/b")};
  pool_->RunDiscovery();
  pool_->RunCycle();
  EXPECT_EQ(departed_, (std::vector<std::string>{"10.0.0.1:8000"}));  // its state must not carry over
  EXPECT_EQ(Addresses(), (std::vector<std::string>{"10.0.0.1:8000"}));
  EXPECT_EQ(log_.Count(LogLevel::kInfo, "replaced (state forgotten): 10.0.0.1:8000 (pod ns/a -> pod ns/b)"), 1)
      << log_.All();
}

TEST_F(DiscoveryTest, ErrorsKeepTheSetAndAreLoggedOncePerMessage) {
  lister_.next = std::vector<EndpointSpec>{Spec("10.0.0.1:8000")};
  pool_ = *EndpointPool::Create(ListerOptions());
  lister_.next = absl::UnavailableError("GET https://api/...: connection refused");
  for (int i = 0; i < 3; ++i) {
    pool_->RunDiscovery();
    pool_->RunCycle();
  }
  EXPECT_EQ(Addresses(), (std::vector<std::string>{"10.0.0.1:8000"}));
  EXPECT_EQ(pool_->counters().discovery_errors, 3);
  EXPECT_EQ(log_.Count(LogLevel::kError, "inferencepool ns/fake: discovery failed: GET https://api/...: connection refused"),
            1)
      << log_.All();
  lister_.next = std::vector<EndpointSpec>{Spec("10.0.0.1:8000")};
  pool_->RunDiscovery();
  EXPECT_EQ(log_.Count(LogLevel::kInfo, "discovery works again"), 1);
}

TEST_F(DiscoveryTest, ARejectedListIsHandedOverAgainEvenWhenUnchanged) {
  lister_.next = std::vector<EndpointSpec>{Spec("10.0.0.1:8000")};
  pool_ = *EndpointPool::Create(ListerOptions());
  lister_.next = std::vector<EndpointSpec>{Spec("10.0.0.1:8000"), Spec("10.0.0.1:8000", "ns/dup")};  // duplicate
  for (int i = 0; i < 3; ++i) {
    pool_->RunDiscovery();
    pool_->RunCycle();
  }
  EXPECT_EQ(pool_->counters().reloads_failed, 3) << "handed over every round";
  EXPECT_EQ(log_.Count(LogLevel::kError, "duplicate address"), 1) << log_.All();
  EXPECT_EQ(Addresses(), (std::vector<std::string>{"10.0.0.1:8000"}));
}

TEST_F(DiscoveryTest, FlagsFollowDiscoveredEndpointsAndReplaceTheSameAddress) {
  lister_.next = std::vector<EndpointSpec>{Spec("10.0.0.1:8000"), Spec("10.0.0.2:8000")};
  pool_ = *EndpointPool::Create(ListerOptions({Flag("10.0.0.2:8000", 1), Flag("10.0.0.9:8000", 2)}));
  EXPECT_EQ(Addresses(), (std::vector<std::string>{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.9:8000"}));
  // An empty pool (no Ready Pods) keeps only the flags.
  lister_.next = std::vector<EndpointSpec>{};
  pool_->RunDiscovery();
  pool_->RunCycle();
  EXPECT_EQ(Addresses(), (std::vector<std::string>{"10.0.0.2:8000", "10.0.0.9:8000"}));
}

TEST_F(DiscoveryTest, AFailingFirstListIsTheCreateError) {
  lister_.next = absl::NotFoundError("GET .../inferencepools/x: HTTP 404 (NotFound)");
  auto pool = EndpointPool::Create(ListerOptions());
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(std::string(pool.status().message()), "inferencepool ns/fake: GET .../inferencepools/x: HTTP 404 (NotFound)");
}

TEST_F(DiscoveryTest, StartAndStopRunTheThreads) {
  // The threads do what the tests above do by hand; this only checks they start and stop.
  lister_.next = std::vector<EndpointSpec>{Spec("10.0.0.1:8000")};
  EndpointPoolOptions o = ListerOptions();
  o.interval = std::chrono::milliseconds(1);
  o.discovery_interval = std::chrono::milliseconds(1);
  pool_ = *EndpointPool::Create(std::move(o));
  pool_->Start();
  pool_->Stop();
  pool_->Stop();  // idempotent
  EXPECT_GE(lister_.calls, 1);
}

}  // namespace
}  // namespace epp
