// StaggeredScraper against a real HTTP server on 127.0.0.1: every endpoint is read at its own
// phase and never before it falls due, a scrape is never doubled while its endpoint is slow (the
// slot is an overrun), answers are applied as they arrive, files and "none" follow the same
// schedule, a refused endpoint is marked unreachable, and Wakeup() ends a run early.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "epp/runtime/endpoints.h"
#include "epp/runtime/http.h"
#include "testing/test_server.h"

namespace epp {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string Page(int waiting) {
  return "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} " +
         std::to_string(waiting) +
         "\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 1\n"
         "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.25\n";
}

// Serves /e/<i>/metrics with num_requests_waiting = how many times endpoint i was served so far
// (1 on the first read); records every arrival and the most requests of one endpoint at once.
// Endpoint `slow` waits `slow_for` before answering.
class Farm {
 public:
  explicit Farm(int slow = -1, milliseconds slow_for = milliseconds(0)) {
    srv_.server().Get(R"(/e/(\d+)/metrics)", [this, slow, slow_for](const httplib::Request& req, httplib::Response& res) {
      const int i = std::stoi(req.matches[1]);
      int served;
      {
        std::lock_guard<std::mutex> lock(mu_);
        arrivals_[i].push_back(Clock::now());
        accept_encoding_ = req.get_header_value("Accept-Encoding");
        served = static_cast<int>(arrivals_[i].size());
        max_open_[i] = std::max(max_open_[i], ++open_[i]);
      }
      if (i == slow) std::this_thread::sleep_for(slow_for);
      res.set_content(Page(served), "text/plain; version=0.0.4");
      std::lock_guard<std::mutex> lock(mu_);
      --open_[i];
    });
    base_ = srv_.Start();
  }
  std::string Url(int i) const { return base_ + "/e/" + std::to_string(i) + "/metrics"; }
  std::vector<Clock::time_point> Arrivals(int i) {
    std::lock_guard<std::mutex> lock(mu_);
    return arrivals_[i];
  }
  std::string AcceptEncoding() {
    std::lock_guard<std::mutex> lock(mu_);
    return accept_encoding_;
  }
  int MaxOpen(int i) {
    std::lock_guard<std::mutex> lock(mu_);
    return max_open_[i];
  }

 private:
  epp::testing::TestServer srv_;
  std::string base_;
  std::mutex mu_;
  std::map<int, std::vector<Clock::time_point>> arrivals_;
  std::map<int, int> open_, max_open_;
  std::string accept_encoding_;
};

EndpointSpec UrlSpec(const Farm& farm, int i) {
  EndpointSpec s;
  s.address = "10.0.0." + std::to_string(i + 1) + ":8000";
  s.metrics = farm.Url(i);
  s.engine = "vllm";
  return s;
}

ResolveOptions Options() {
  ResolveOptions o;
  o.scrape.timeout = milliseconds(5000);
  return o;
}

TEST(StaggeredScraperTest, EveryEndpointIsReadAtItsOwnPhaseAndNeverEarly) {
  Farm farm;
  constexpr int kEndpoints = 8;
  std::vector<EndpointSpec> specs;
  for (int i = 0; i < kEndpoints; ++i) specs.push_back(UrlSpec(farm, i));
  auto endpoints = ResolveEndpoints(specs, Options());
  ASSERT_TRUE(endpoints.ok()) << endpoints.status();
  HttpClient client;
  const milliseconds interval(200);
  const Clock::time_point created = Clock::now();
  auto scraper = StaggeredScraper::Create(specs, Options(), interval, client);
  ASSERT_TRUE(scraper.ok()) << scraper.status();
  std::vector<StaggeredScraper::Applied> applied;
  (*scraper)->RunUntil(*endpoints, created + 5 * interval, applied);

  // The phases come from the addresses: distinct, inside the interval, spread over most of it.
  std::set<int64_t> phases;
  for (int i = 0; i < kEndpoints; ++i) {
    const auto p = (*scraper)->Phase(static_cast<size_t>(i));
    EXPECT_GE(p.count(), 0);
    EXPECT_LT(p, interval);
    phases.insert(p.count());
  }
  EXPECT_EQ(phases.size(), static_cast<size_t>(kEndpoints));
  EXPECT_GE(*phases.rbegin() - *phases.begin(), 200000 / 2) << "8 hashed phases should span half the interval";

  for (int i = 0; i < kEndpoints; ++i) {
    const std::vector<Clock::time_point> arrivals = farm.Arrivals(i);
    // Arrival 0 is ResolveEndpoints' read; then one per round, never before the slot is due.
    ASSERT_GE(arrivals.size(), 2u) << "endpoint " << i;
    EXPECT_LE(arrivals.size(), 6u) << "endpoint " << i;
    const auto phase = (*scraper)->Phase(static_cast<size_t>(i));
    for (size_t k = 1; k < arrivals.size(); ++k)
      EXPECT_GE(arrivals[k], created + phase + (k - 1) * interval) << "endpoint " << i << " read " << k;
    EXPECT_EQ(farm.MaxOpen(i), 1);
  }
  // Each applied read replaced the endpoint's metrics with what the server served then.
  std::map<size_t, int> reads;
  for (const auto& a : applied) {
    EXPECT_TRUE(a.read);
    reads[a.index]++;
  }
  for (const auto& [i, n] : reads) {
    ASSERT_TRUE((*endpoints)[i].metrics.waiting_queue_size.has_value());
    EXPECT_EQ(*(*endpoints)[i].metrics.waiting_queue_size, n + 1) << "endpoint " << i;
    EXPECT_EQ((*endpoints)[i].metrics_error, "");
  }
  const StaggeredScraper::Stats& stats = (*scraper)->stats();
  EXPECT_EQ(stats.reads, static_cast<int64_t>(applied.size()));
  EXPECT_GE(stats.rounds, 4);
  EXPECT_LE(stats.rounds, 5);
}

TEST(StaggeredScraperTest, ASlowEndpointIsNotScrapedTwiceAtOnce) {
  // Endpoint 0 answers after 250 ms with a 100 ms interval: the slots that fall due while its
  // scrape runs are overruns; endpoint 1 is read every round meanwhile.
  Farm farm(0, milliseconds(250));
  std::vector<EndpointSpec> specs = {UrlSpec(farm, 0), UrlSpec(farm, 1)};
  specs[0].metrics = "none";  // the first resolve would wait for the slow one
  auto endpoints = ResolveEndpoints(specs, Options());
  ASSERT_TRUE(endpoints.ok()) << endpoints.status();
  specs[0] = UrlSpec(farm, 0);
  HttpClient client;
  const milliseconds interval(100);
  const Clock::time_point created = Clock::now();
  auto scraper = StaggeredScraper::Create(specs, Options(), interval, client);
  ASSERT_TRUE(scraper.ok()) << scraper.status();
  std::vector<StaggeredScraper::Applied> applied;
  (*scraper)->RunUntil(*endpoints, created + 8 * interval, applied);
  EXPECT_EQ(farm.MaxOpen(0), 1);
  EXPECT_GE((*scraper)->stats().overruns, 3);
  const size_t slow_reads = std::count_if(applied.begin(), applied.end(), [](const auto& a) { return a.index == 0; });
  const size_t fast_reads = std::count_if(applied.begin(), applied.end(), [](const auto& a) { return a.index == 1; });
  EXPECT_GE(slow_reads, 1u);
  EXPECT_LE(slow_reads, 3u);
  EXPECT_GT(fast_reads, slow_reads);
}

TEST(StaggeredScraperTest, FilesNoneAndRefusedEndpointsFollowTheSchedule) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("epp-staggered-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "m.prom").string();
  std::ofstream(file) << Page(3);
  std::vector<EndpointSpec> specs(3);
  specs[0].address = "10.0.0.1:8000";
  specs[0].metrics = file;
  specs[0].engine = "vllm";
  specs[1].address = "10.0.0.2:8000";
  specs[1].metrics = "none";
  specs[2].address = "127.0.0.1:" + std::to_string(epp::testing::ClosedPort());  // nothing listens
  auto endpoints = ResolveEndpoints(specs, Options());
  ASSERT_TRUE(endpoints.ok()) << endpoints.status();
  EXPECT_TRUE((*endpoints)[2].unreachable);
  (*endpoints)[2].unreachable = false;  // the scraper must find it again
  std::ofstream(file) << Page(7);
  HttpClient client;
  auto scraper = StaggeredScraper::Create(specs, Options(), milliseconds(50), client);
  ASSERT_TRUE(scraper.ok()) << scraper.status();
  std::vector<StaggeredScraper::Applied> applied;
  (*scraper)->RunUntil(*endpoints, Clock::now() + milliseconds(160), applied);
  std::set<size_t> seen;
  for (const auto& a : applied) seen.insert(a.index);
  EXPECT_EQ(seen, (std::set<size_t>{0, 1, 2}));
  EXPECT_EQ((*endpoints)[0].metrics.waiting_queue_size, 7);
  EXPECT_FALSE((*endpoints)[1].metrics_time_us.has_value());
  EXPECT_EQ((*endpoints)[1].metrics_error, "");
  EXPECT_TRUE((*endpoints)[2].unreachable);
  EXPECT_NE((*endpoints)[2].metrics_error.find("connection refused"), std::string::npos) << (*endpoints)[2].metrics_error;
  std::filesystem::remove_all(dir);
}

TEST(StaggeredScraperTest, WakeupEndsARunEarly) {
  std::vector<EndpointSpec> specs(1);
  specs[0].address = "10.0.0.1:8000";
  specs[0].metrics = "none";
  auto endpoints = ResolveEndpoints(specs, Options());
  ASSERT_TRUE(endpoints.ok());
  HttpClient client;
  auto scraper = StaggeredScraper::Create(specs, Options(), std::chrono::seconds(100), client);
  ASSERT_TRUE(scraper.ok());
  std::thread waker([&client] {
    std::this_thread::sleep_for(milliseconds(50));
    client.Wakeup();
  });
  const Clock::time_point start = Clock::now();
  std::vector<StaggeredScraper::Applied> applied;
  (*scraper)->RunUntil(*endpoints, start + std::chrono::seconds(60), applied);
  waker.join();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));
}

TEST(StaggeredScraperTest, BadSpecsOrIntervalAreRefused) {
  HttpClient client;
  std::vector<EndpointSpec> specs(1);
  specs[0].address = "10.0.0.1:8000";
  specs[0].metrics = "none";
  auto zero = StaggeredScraper::Create(specs, Options(), milliseconds(0), client);
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  specs[0].address = "not an address";
  auto bad = StaggeredScraper::Create(specs, Options(), milliseconds(50), client);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(StaggeredScraperTest, GzipIsAskedForOnlyWhenConfigured) {
  // The test server (cpp-httplib built with zlib) compresses text answers for clients that accept
  // gzip, so the second read also checks the decoding.
  Farm farm;
  std::vector<EndpointSpec> specs = {UrlSpec(farm, 0)};
  auto plain = ResolveEndpoints(specs, Options());
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(farm.AcceptEncoding(), "");
  ResolveOptions gz = Options();
  gz.scrape.accept_gzip = true;
  auto zipped = ResolveEndpoints(specs, gz);
  ASSERT_TRUE(zipped.ok()) << zipped.status();
  EXPECT_EQ(farm.AcceptEncoding(), "gzip");
  EXPECT_EQ((*zipped)[0].metrics_error, "");
  EXPECT_EQ((*zipped)[0].metrics.waiting_queue_size, 2);
}

}  // namespace
}  // namespace epp
