#include "epp/http.h"

#include <atomic>
#include <condition_variable>
#include <mutex>

#include <gtest/gtest.h>

#include "testing/test_server.h"

namespace epp {
namespace {

using epp::testing::TestServer;

TEST(HttpFetcherTest, GetAndPost) {
  TestServer srv;
  srv.server().Get("/metrics", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("m 1\n", "text/plain; version=0.0.4");
  });
  srv.server().Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
    res.set_content(req.body + "|" + req.get_header_value("X-Test") + "|" + req.get_header_value("Authorization"),
                    "application/json");
  });
  const std::string base = srv.Start();
  auto r = HttpFetch({.url = base + "/metrics"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "m 1\n");
  EXPECT_EQ(r->content_type, "text/plain; version=0.0.4");
  HttpRequest post{.url = base + "/echo", .method = "POST", .body = "{\"a\":1}",
                   .headers = {"X-Test: yes", "Authorization: Bearer t0k"}};
  r = HttpFetch(post);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body, "{\"a\":1}|yes|Bearer t0k");
}

TEST(HttpFetcherTest, ConnectionRefusedIsUnavailable) {
  const std::string url = "http://127.0.0.1:" + std::to_string(epp::testing::ClosedPort()) + "/metrics";
  auto r = HttpFetch({.url = url});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(std::string(r.status().message()).find(url), std::string::npos);
  EXPECT_NE(std::string(r.status().message()).find("connection refused"), std::string::npos);
}

TEST(HttpFetcherTest, SlowServerTimesOut) {
  TestServer srv;
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  srv.server().Get("/slow", [&](const httplib::Request&, httplib::Response& res) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(5), [&] { return release; });
    res.set_content("late", "text/plain");
  });
  const std::string base = srv.Start();
  auto r = HttpFetch({.url = base + "/slow", .timeout = std::chrono::milliseconds(200)});
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(std::string(r.status().message()).find("timed out after 200 ms"), std::string::npos) << r.status();
}

TEST(HttpFetcherTest, BodyCapIsEnforced) {
  TestServer srv;
  const std::string big(3 << 20, 'x');
  srv.server().Get("/big", [&](const httplib::Request&, httplib::Response& res) { res.set_content(big, "text/plain"); });
  srv.server().Get("/chunked", [&](const httplib::Request&, httplib::Response& res) {
    res.set_chunked_content_provider("text/plain", [&](size_t offset, httplib::DataSink& sink) {
      if (offset >= big.size()) {
        sink.done();
        return true;
      }
      sink.write(big.data() + offset, 64 * 1024);
      return true;
    });
  });
  const std::string base = srv.Start();
  for (const char* path : {"/big", "/chunked"}) {
    auto r = HttpFetch({.url = base + path, .max_body_bytes = 1 << 20});
    ASSERT_FALSE(r.ok()) << path;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << path;
    EXPECT_NE(std::string(r.status().message()).find("exceeds the cap of 1 MiB"), std::string::npos) << r.status();
  }
  auto ok = HttpFetch({.url = base + "/big", .max_body_bytes = 4 << 20});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->body.size(), big.size());
}

TEST(HttpFetcherTest, RequestsRunConcurrentlyFromOneThread) {
  // Each handler waits until all kPeers requests have arrived; a sequential client would make
  // every handler give up, so "together" in every body proves the requests overlapped.
  constexpr int kPeers = 6;
  TestServer srv;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  srv.server().Get("/peer", [&](const httplib::Request&, httplib::Response& res) {
    std::unique_lock<std::mutex> lock(mu);
    ++arrived;
    cv.notify_all();
    bool all = cv.wait_for(lock, std::chrono::seconds(5), [&] { return arrived >= kPeers; });
    res.set_content(all ? "together" : "alone", "text/plain");
  });
  const std::string base = srv.Start();
  std::vector<HttpRequest> reqs(kPeers, HttpRequest{.url = base + "/peer", .timeout = std::chrono::seconds(10)});
  auto results = HttpFetchAll(reqs);
  ASSERT_EQ(results.size(), static_cast<size_t>(kPeers));
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->body, "together");
  }
}

TEST(HttpFetcherTest, BadUrlIsInvalidArgument) {
  auto r = HttpFetch({.url = "ftp://127.0.0.1/x"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
}

}  // namespace
}  // namespace epp
