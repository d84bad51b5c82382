#include "epp/runtime/http.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "http/gzip_stream.h"
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

// A server whose /slow waits for Release() (at most 10 s) and /fast answers at once; records the
// client port of every request.
class GatedServer {
 public:
  GatedServer() {
    srv_.server().Get("/slow", [this](const httplib::Request& req, httplib::Response& res) {
      Note(req);
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::seconds(10), [this] { return released_; });
      res.set_content("slow", "text/plain");
    });
    srv_.server().Get("/fast", [this](const httplib::Request& req, httplib::Response& res) {
      Note(req);
      res.set_content("fast", "text/plain");
    });
    base_ = srv_.Start();
  }
  ~GatedServer() { Release(); }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }
  std::string Url(const std::string& path) const { return base_ + path; }
  std::vector<int> Ports() {
    std::lock_guard<std::mutex> lock(mu_);
    return ports_;
  }

 private:
  void Note(const httplib::Request& req) {
    std::lock_guard<std::mutex> lock(mu_);
    ports_.push_back(req.remote_port);
  }
  epp::testing::TestServer srv_;
  std::string base_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
  std::vector<int> ports_;
};

std::chrono::steady_clock::time_point In(std::chrono::milliseconds d) { return std::chrono::steady_clock::now() + d; }

TEST(HttpClientAsyncTest, WaitHandsOutEachAnswerAsItArrives) {
  GatedServer srv;
  HttpClient client;
  const uint64_t slow = client.Start({.url = srv.Url("/slow"), .timeout = std::chrono::seconds(20)});
  const uint64_t fast = client.Start({.url = srv.Url("/fast")});
  EXPECT_NE(slow, 0u);
  EXPECT_NE(slow, fast);
  EXPECT_EQ(client.in_flight(), 2u);
  std::vector<HttpClient::Finished> first = client.Wait(In(std::chrono::seconds(20)));
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].id, fast);
  ASSERT_TRUE(first[0].response.ok()) << first[0].response.status();
  EXPECT_EQ(first[0].response->body, "fast");
  EXPECT_EQ(client.in_flight(), 1u);
  srv.Release();
  std::vector<HttpClient::Finished> second = client.Wait(In(std::chrono::seconds(20)));
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].id, slow);
  ASSERT_TRUE(second[0].response.ok()) << second[0].response.status();
  EXPECT_EQ(second[0].response->body, "slow");
  EXPECT_EQ(client.in_flight(), 0u);
}

TEST(HttpClientAsyncTest, WaitEndsAtTheDeadlineOrOnWakeup) {
  HttpClient client;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(client.Wait(t0 + std::chrono::milliseconds(30)).empty());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(30));
  std::thread waker([&client] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    client.Wakeup();
  });
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_TRUE(client.Wait(t1 + std::chrono::seconds(60)).empty());
  waker.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t1, std::chrono::seconds(30));
}

TEST(HttpClientAsyncTest, ACancelledRequestIsNeverHandedOut) {
  GatedServer srv;
  HttpClient client;
  const uint64_t slow = client.Start({.url = srv.Url("/slow"), .timeout = std::chrono::seconds(20)});
  const uint64_t fast = client.Start({.url = srv.Url("/fast")});
  client.Cancel(slow);
  EXPECT_EQ(client.in_flight(), 1u);
  std::vector<HttpClient::Finished> got = client.Wait(In(std::chrono::seconds(20)));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].id, fast);
  srv.Release();
  EXPECT_TRUE(client.Wait(In(std::chrono::milliseconds(100))).empty());
  client.Cancel(12345);  // unknown: nothing happens
  EXPECT_EQ(client.in_flight(), 0u);
}

TEST(HttpClientAsyncTest, FetchAllKeepsEarlierRequestsForTheNextWait) {
  GatedServer srv;
  HttpClient client;
  const uint64_t early = client.Start({.url = srv.Url("/fast")});
  std::vector<HttpRequest> reqs = {{.url = srv.Url("/fast")}, {.url = srv.Url("/fast")}};
  std::vector<absl::StatusOr<HttpResponse>> all = client.FetchAll(reqs);
  ASSERT_EQ(all.size(), 2u);
  for (const auto& r : all) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->body, "fast");
  }
  std::vector<HttpClient::Finished> got = client.Wait(In(std::chrono::seconds(20)));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].id, early);
}

TEST(HttpClientAsyncTest, ConnectionsAreReusedAcrossRequests) {
  GatedServer srv;
  HttpClient client;
  client.set_max_idle_connections(4);
  for (int k = 0; k < 5; ++k) {
    client.Start({.url = srv.Url("/fast")});
    std::vector<HttpClient::Finished> got = client.Wait(In(std::chrono::seconds(20)));
    ASSERT_EQ(got.size(), 1u);
    ASSERT_TRUE(got[0].response.ok()) << got[0].response.status();
  }
  const std::vector<int> ports = srv.Ports();
  ASSERT_EQ(ports.size(), 5u);
  EXPECT_EQ(std::set<int>(ports.begin(), ports.end()).size(), 1u) << "one connection for five sequential requests";
}

std::string Gzip(const std::string& in) { return internal::GzipCompress(in); }

// Answers /gz/<name> with a body and Content-Encoding chosen per name; records Accept-Encoding.
class EncodingServer {
 public:
  EncodingServer() {
    srv_.server().Get(R"(/gz/(\w+))", [this](const httplib::Request& req, httplib::Response& res) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        accept_.push_back(req.get_header_value("Accept-Encoding"));
      }
      const std::string name = req.matches[1];
      std::string body, coding = "gzip";
      if (name == "page") {
        body = Gzip(Page());
      } else if (name == "bomb") {
        body = Gzip(std::string(8 << 20, 'a'));  // 8 MiB of 'a' in ~8 KB
      } else if (name == "corrupt") {
        body = Gzip(Page());
        for (size_t i = 20; i < body.size() - 8; i += 7) body[i] = static_cast<char>(body[i] ^ 0x5a);
      } else if (name == "truncated") {
        body = Gzip(Page());
        body.resize(body.size() / 2);
      } else if (name == "brotli") {
        body = "not brotli either";
        coding = "br";
      } else {
        body = Page();
        coding = "identity";
      }
      res.set_header("Content-Encoding", coding);
      // Not text/*: Debian's cpp-httplib would gzip that itself for a client that accepts gzip.
      res.set_content(body, "application/octet-stream");
    });
    base_ = srv_.Start();
  }
  static std::string Page() {
    std::string p;
    for (int i = 0; i < 400; ++i) p += "vllm:num_requests_waiting{model_name=\"m" + std::to_string(i) + "\"} " + std::to_string(i) + "\n";
    return p;
  }
  std::string Url(const std::string& name) const { return base_ + "/gz/" + name; }
  std::vector<std::string> Accepted() {
    std::lock_guard<std::mutex> lock(mu_);
    return accept_;
  }

 private:
  epp::testing::TestServer srv_;
  std::string base_;
  std::mutex mu_;
  std::vector<std::string> accept_;
};

TEST(HttpClientGzipTest, GzipAnswersAreDecodedWithDecodersKeptBetweenRequests) {
  EncodingServer srv;
  HttpClient client;
  // Sequential and concurrent requests: each decoder serves one transfer at a time.
  for (int round = 0; round < 3; ++round) {
    std::vector<HttpRequest> reqs(4, HttpRequest{.url = srv.Url("page")});
    reqs.push_back({.url = srv.Url("plain")});
    for (const auto& r : client.FetchAll(reqs)) {
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->body, EncodingServer::Page());
    }
  }
  for (const std::string& a : srv.Accepted()) EXPECT_EQ(a, "gzip");
  auto plain = client.FetchAll(std::vector<HttpRequest>{{.url = srv.Url("plain"), .accept_gzip = false}});
  ASSERT_TRUE(plain[0].ok());
  EXPECT_EQ(srv.Accepted().back(), "");
}

TEST(HttpClientGzipTest, BadGzipAnswersAreErrorsNamingTheUrl) {
  EncodingServer srv;
  HttpClient client;
  std::vector<HttpRequest> reqs = {{.url = srv.Url("bomb"), .max_body_bytes = 1 << 20},
                                   {.url = srv.Url("corrupt")},
                                   {.url = srv.Url("truncated")},
                                   {.url = srv.Url("brotli")},
                                   {.url = srv.Url("page")}};
  auto got = client.FetchAll(reqs);
  ASSERT_EQ(got.size(), 5u);
  ASSERT_FALSE(got[0].ok());
  EXPECT_EQ(got[0].status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(got[0].status().message()).find("exceeds the cap of 1 MiB"), std::string::npos) << got[0].status();
  for (int i : {1, 2}) {
    ASSERT_FALSE(got[i].ok()) << i;
    EXPECT_EQ(got[i].status().code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(std::string(got[i].status().message()).find(reqs[i].url), std::string::npos) << got[i].status();
    EXPECT_NE(std::string(got[i].status().message()).find("gzip"), std::string::npos) << got[i].status();
  }
  ASSERT_FALSE(got[3].ok());
  EXPECT_NE(std::string(got[3].status().message()).find("unsupported Content-Encoding 'br'"), std::string::npos)
      << got[3].status();
  // A decoder that saw a bad stream is reset before its next use.
  ASSERT_TRUE(got[4].ok()) << got[4].status();
  EXPECT_EQ(got[4]->body, EncodingServer::Page());
  auto again = client.FetchAll(std::vector<HttpRequest>(3, HttpRequest{.url = srv.Url("page")}));
  for (const auto& r : again) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->body, EncodingServer::Page());
  }
}

}  // namespace
}  // namespace epp
