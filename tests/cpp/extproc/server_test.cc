// ExtProcServer and HealthServer over real gRPC on 127.0.0.1: whole gateway streams through the
// generated ExternalProcessor stub (plaintext and TLS), outcomes, concurrency, draining shutdown,
// capture files, and grpc.health.v1 checks through a generic stub with hand-encoded messages.
#include <gtest/gtest.h>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

#include "envoy/service/ext_proc/v3/external_processor.grpc.pb.h"
#include "extproc/extproc_testutil.h"
#include "testing/epp_testing.h"

namespace epp {
namespace {

using namespace extproc_test;  // NOLINT
using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

constexpr seconds kRpcTimeout{10};

// A channel of its own (a distinct channel argument keeps gRPC from sharing the connection).
std::shared_ptr<grpc::Channel> Channel(int port, int unique = 0,
                                       std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials(),
                                       const std::string& name_override = "") {
  grpc::ChannelArguments args;
  args.SetInt("epp.test.channel", unique);
  if (!name_override.empty()) args.SetSslTargetNameOverride(name_override);
  return grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port), creds, args);
}

std::unique_ptr<pb::ExternalProcessor::Stub> Stub(int port, int unique = 0) {
  return pb::ExternalProcessor::NewStub(Channel(port, unique));
}

bool EndsRequestPath(const pb::ProcessingResponse& r, bool bodyless) {
  if (r.has_immediate_response()) return true;
  if (bodyless) return r.has_request_headers();
  return r.has_request_body() && r.request_body().response().body_mutation().streamed_response().end_of_stream();
}

// One ext_proc stream driven as a gateway drives it.
class GatewayStream {
 public:
  // `wait_for_ready`: the call waits for the channel to connect (within the deadline) instead of
  // failing at once while it is (re)connecting, as a gateway's connection pool retries.
  explicit GatewayStream(pb::ExternalProcessor::Stub& stub, std::chrono::seconds timeout = kRpcTimeout,
                         bool wait_for_ready = false) {
    ctx_.set_deadline(std::chrono::system_clock::now() + timeout);
    ctx_.set_wait_for_ready(wait_for_ready);
    stream_ = stub.Process(&ctx_);
  }
  // Writes serialized ProcessingRequests; false once the server stopped reading.
  bool Send(const std::vector<std::string>& messages) {
    for (const std::string& bytes : messages) {
      pb::ProcessingRequest m;
      EXPECT_TRUE(m.ParseFromString(bytes));
      if (m.has_request_headers() && m.request_headers().end_of_stream()) bodyless_ = true;
      if (!stream_->Write(m)) return false;
    }
    return true;
  }
  // Reads until the request path is answered (or the stream ends); true when answered.
  bool ReadRequestPath() {
    pb::ProcessingResponse r;
    while (stream_->Read(&r)) {
      responses.push_back(r);
      if (EndsRequestPath(r, bodyless_)) return true;
    }
    return false;
  }
  // Reads `n` more responses; false when the stream ended first.
  bool ReadN(size_t n) {
    pb::ProcessingResponse r;
    for (size_t i = 0; i < n; ++i) {
      if (!stream_->Read(&r)) return false;
      responses.push_back(r);
    }
    return true;
  }
  // Half-closes, reads what is left and returns the stream's status.
  grpc::Status Close() {
    stream_->WritesDone();
    pb::ProcessingResponse r;
    while (stream_->Read(&r)) responses.push_back(r);
    return stream_->Finish();
  }
  bool immediate() const { return !responses.empty() && responses.back().has_immediate_response(); }

  std::vector<pb::ProcessingResponse> responses;

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<pb::ProcessingRequest, pb::ProcessingResponse>> stream_;
  bool bodyless_ = false;
};

struct Outcome {
  grpc::Status status;
  std::vector<pb::ProcessingResponse> responses;
};

// A whole exchange: the request messages; once the request path is answered (and unless it was
// an immediate response) the response messages; then half-close and read the rest.
Outcome Exchange(pb::ExternalProcessor::Stub& stub, const std::vector<std::string>& request,
                 const std::vector<std::string>& response = {}) {
  GatewayStream s(stub);
  s.Send(request);
  if (s.ReadRequestPath() && !s.immediate()) s.Send(response);
  Outcome o;
  o.status = s.Close();
  o.responses = std::move(s.responses);
  return o;
}

std::string Destination(const pb::ProcessingResponse& r) {
  return SetHeader(r.request_headers().response().header_mutation(), kDestinationEndpointHeader).value_or("");
}

struct ServerEnv {
  explicit ServerEnv(std::vector<Endpoint> endpoints, ExtProcServerOptions options = {}, std::string_view yaml = "")
      : env(std::move(endpoints), yaml) {
    options.listen = "127.0.0.1:0";
    auto started = ExtProcServer::Start(*env.scheduler, env.pool, options);
    EXPECT_TRUE(started.ok()) << started.status();
    if (started.ok()) server = std::move(*started);
    if (server) stub = Stub(server->port());
  }
  SchedulerEnv env;
  std::unique_ptr<ExtProcServer> server;
  std::unique_ptr<pb::ExternalProcessor::Stub> stub;
};

const std::string kUsageBody =
    R"({"object":"chat.completion","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}})";

TEST(ExtProcServerTest, ChunkedChatStreamEndToEnd) {
  ServerEnv s({Ep("10.0.0.1:8000", 5, 0.5), Ep("10.0.0.2:8000", 0, 0.1)});
  ASSERT_NE(s.server, nullptr);
  EXPECT_GT(s.server->port(), 0);
  const std::string body = ChatBody("llama", std::string(200000, 'c'));
  const Outcome o = Exchange(*s.stub, BuildProcessingRequests(ChatCapture(body, (body.size() + 2) / 3)),
                             BuildResponseMessages(200, {{"content-type", "application/json"}}, kUsageBody, "10.0.0.2:8000"));
  ASSERT_TRUE(o.status.ok()) << o.status.error_message();
  ASSERT_EQ(o.responses.size(), 1u + 4u + 2u);
  ASSERT_TRUE(o.responses[0].has_request_headers());
  EXPECT_TRUE(o.responses[0].request_headers().response().clear_route_cache());
  EXPECT_EQ(Destination(o.responses[0]), "10.0.0.2:8000");
  EXPECT_EQ(MetadataDestination(o.responses[0]), "10.0.0.2:8000");
  std::string reassembled;
  for (size_t i = 1; i <= 4; ++i) {
    ASSERT_TRUE(o.responses[i].has_request_body()) << i;
    const auto& sr = o.responses[i].request_body().response().body_mutation().streamed_response();
    EXPECT_LE(sr.body().size(), kBodyChunkBytes);
    EXPECT_EQ(sr.end_of_stream(), i == 4);
    reassembled += sr.body();
  }
  EXPECT_EQ(reassembled, body);
  EXPECT_TRUE(o.responses[5].has_response_headers());
  ASSERT_TRUE(o.responses[6].has_response_body());
  EXPECT_EQ(o.responses[6].response_body().response().body_mutation().streamed_response().body(), kUsageBody);
  EXPECT_TRUE(o.responses[6].response_body().response().body_mutation().streamed_response().end_of_stream());

  ExtProcStats& st = s.server->stats();
  EXPECT_EQ(st.streams_total.load(), 1);
  EXPECT_EQ(st.outcome_200.load(), 1);
  EXPECT_EQ(st.prompt_tokens.load(), 10);
  EXPECT_EQ(st.completion_tokens.load(), 5);
  EXPECT_EQ(st.served_mismatch.load(), 0);
  EXPECT_EQ(st.requests_in_flight.load(), 0);
  EXPECT_EQ(s.env.scheduler->Inflight("10.0.0.2:8000").first, 0);
  s.server->Shutdown(milliseconds(1000));
  EXPECT_EQ(st.streams_active.load(), 0);
}

TEST(ExtProcServerTest, OutcomesOverGrpc) {
  ExtProcServerOptions options;
  options.session.max_request_bytes = 100000;
  options.session.objective_priorities = {{"batch", -1}};
  // A saturated pool: sheddable requests are dropped, others are picked.
  ServerEnv s({Ep("10.0.0.1:8000", 10, 0.9), Ep("10.0.0.2:8000", 6, 0.5)}, options);
  ASSERT_NE(s.server, nullptr);
  auto chat = [](std::optional<std::vector<std::string>> subset = std::nullopt, std::string objective = "") {
    HttpRequestCapture c = ChatCapture(ChatBody("m", "hello"));
    c.subset = std::move(subset);
    if (!objective.empty()) c.headers.emplace_back(std::string(kObjectiveHeader), objective);
    return BuildProcessingRequests(c);
  };
  HttpRequestCapture bodyless;
  bodyless.method = "GET";
  bodyless.path = "/v1/models";
  struct Case {
    const char* name;
    std::vector<std::string> request;
    int code;  // 200: picked
    std::set<std::string> allowed;
  };
  const Case cases[] = {
      {"subset", chat(std::vector<std::string>{"10.0.0.1:8000"}), 200, {"10.0.0.1:8000"}},
      {"bad json", BuildProcessingRequests(ChatCapture(R"({"model":"m","messages":{}})")), 400, {}},
      {"too large", BuildProcessingRequests(ChatCapture(ChatBody("m", std::string(150000, 'l')), 50000)), 413, {}},
      {"shed", chat(std::nullopt, "batch"), 429, {}},
      {"no match", chat(std::vector<std::string>{"10.9.9.9"}), 503, {}},
      {"empty subset", chat(std::vector<std::string>{}), 503, {}},
      {"body-less", BuildProcessingRequests(bodyless), 200, {"10.0.0.1:8000", "10.0.0.2:8000"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Outcome o = Exchange(*s.stub, c.request, BuildResponseMessages(200, {}, "ok"));
    EXPECT_TRUE(o.status.ok()) << o.status.error_message();
    if (c.code == 200) {
      ASSERT_FALSE(o.responses.empty());
      EXPECT_TRUE(c.allowed.count(Destination(o.responses[0]))) << Destination(o.responses[0]);
      EXPECT_TRUE(o.responses.back().has_response_body());
    } else {
      ASSERT_EQ(o.responses.size(), 1u);
      ASSERT_TRUE(o.responses[0].has_immediate_response());
      EXPECT_EQ(static_cast<int>(o.responses[0].immediate_response().status().code()), c.code);
    }
  }
  const ExtProcStats& st = s.server->stats();
  EXPECT_EQ(st.outcome_200.load(), 2);
  EXPECT_EQ(st.outcome_400.load(), 1);
  EXPECT_EQ(st.outcome_413.load(), 1);
  EXPECT_EQ(st.outcome_429.load(), 1);
  EXPECT_EQ(st.outcome_503.load(), 2);
  EXPECT_EQ(st.streams_total.load(), 7);
  EXPECT_EQ(st.requests_in_flight.load(), 0);
}

TEST(ExtProcServerTest, ProtocolErrorEndsTheStreamWithInvalidArgument) {
  ServerEnv s({Ep("10.0.0.1:8000")});
  ASSERT_NE(s.server, nullptr);
  const auto messages = BuildProcessingRequests(ChatCapture(ChatBody("m", "x")));
  {
    SCOPED_TRACE("body before headers");
    const Outcome o = Exchange(*s.stub, {messages[1]});
    EXPECT_EQ(o.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(o.status.error_message().find("before request_headers"), std::string::npos) << o.status.error_message();
    EXPECT_TRUE(o.responses.empty());
  }
  {
    SCOPED_TRACE("empty ProcessingRequest");
    const Outcome o = Exchange(*s.stub, {messages[0], ""});
    EXPECT_EQ(o.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    SCOPED_TRACE("the server still serves");
    const Outcome o = Exchange(*s.stub, messages, BuildResponseMessages(200, {}, "ok"));
    EXPECT_TRUE(o.status.ok()) << o.status.error_message();
    EXPECT_EQ(o.responses.size(), 4u);
  }
}

TEST(ExtProcServerTest, StreamClosedBeforeTheBodyEndsReleasesNothingAndFinishesOk) {
  ServerEnv s({Ep("10.0.0.1:8000")});
  ASSERT_NE(s.server, nullptr);
  const auto messages = BuildProcessingRequests(ChatCapture(ChatBody("m", std::string(1000, 'q')), 300));
  GatewayStream g(*s.stub);
  ASSERT_TRUE(g.Send({messages[0], messages[1]}));
  const grpc::Status st = g.Close();  // the client went away mid-body
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(g.responses.empty());
  s.server->Shutdown(milliseconds(1000));
  EXPECT_EQ(s.server->stats().outcome_200.load(), 0);
  EXPECT_EQ(s.server->stats().streams_active.load(), 0);
}

TEST(ExtProcServerTest, TlsStream) {
  auto pem = GenerateSelfSignedCertificate();
  ASSERT_TRUE(pem.ok()) << pem.status();
  EXPECT_NE(pem->cert_pem.find("BEGIN CERTIFICATE"), std::string::npos);
  EXPECT_NE(pem->key_pem.find("PRIVATE KEY"), std::string::npos);
  ExtProcServerOptions options;
  options.tls = true;
  options.cert_pem = pem->cert_pem;
  options.key_pem = pem->key_pem;
  ServerEnv s({Ep("10.0.0.1:8000")}, options);
  ASSERT_NE(s.server, nullptr);
  const auto request = BuildProcessingRequests(ChatCapture(ChatBody("m", "secret")));
  const auto response = BuildResponseMessages(200, {}, "ok", "10.0.0.1:8000");

  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pem->cert_pem;
  {
    SCOPED_TRACE("TLS client, name checked against the certificate (localhost)");
    auto stub = pb::ExternalProcessor::NewStub(Channel(s.server->port(), 1, grpc::SslCredentials(ssl), "localhost"));
    const Outcome o = Exchange(*stub, request, response);
    ASSERT_TRUE(o.status.ok()) << o.status.error_message();
    ASSERT_EQ(o.responses.size(), 4u);
    EXPECT_EQ(Destination(o.responses[0]), "10.0.0.1:8000");
  }
  {
    SCOPED_TRACE("TLS client on 127.0.0.1 (IP SAN)");
    auto stub = pb::ExternalProcessor::NewStub(Channel(s.server->port(), 2, grpc::SslCredentials(ssl)));
    const Outcome o = Exchange(*stub, request, response);
    EXPECT_TRUE(o.status.ok()) << o.status.error_message();
  }
  {
    SCOPED_TRACE("plaintext client");
    auto stub = Stub(s.server->port(), 3);
    const Outcome o = Exchange(*stub, request, response);
    EXPECT_FALSE(o.status.ok());
    EXPECT_TRUE(o.responses.empty());
  }
  {
    SCOPED_TRACE("untrusted certificate");
    auto other = GenerateSelfSignedCertificate();
    ASSERT_TRUE(other.ok());
    grpc::SslCredentialsOptions wrong;
    wrong.pem_root_certs = other->cert_pem;
    auto stub = pb::ExternalProcessor::NewStub(Channel(s.server->port(), 4, grpc::SslCredentials(wrong), "localhost"));
    const Outcome o = Exchange(*stub, request, response);
    EXPECT_EQ(o.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  }
  EXPECT_EQ(s.server->stats().outcome_200.load(), 2);
}

TEST(ExtProcServerTest, StartErrors) {
  SchedulerEnv env({Ep("10.0.0.1:8000")});
  ExtProcServerOptions tls;
  tls.listen = "127.0.0.1:0";
  tls.tls = true;
  auto no_cert = ExtProcServer::Start(*env.scheduler, env.pool, tls);
  EXPECT_EQ(no_cert.status().code(), absl::StatusCode::kInvalidArgument);

  // A taken port is an error (no SO_REUSEPORT sharing with another process or server).
  ServerEnv first({Ep("10.0.0.1:8000")});
  ASSERT_NE(first.server, nullptr);
  ExtProcServerOptions taken;
  taken.listen = "127.0.0.1:" + std::to_string(first.server->port());
  auto busy = ExtProcServer::Start(*env.scheduler, env.pool, taken);
  EXPECT_EQ(busy.status().code(), absl::StatusCode::kUnavailable) << busy.status();
  auto health_busy = HealthServer::Start(taken.listen);
  EXPECT_EQ(health_busy.status().code(), absl::StatusCode::kUnavailable) << health_busy.status();

  // Ports gRPC would wrap modulo 65536 are rejected.
  for (const char* bad : {"127.0.0.1:99999", "127.0.0.1:70000", "127.0.0.1", "127.0.0.1:x"}) {
    ExtProcServerOptions o;
    o.listen = bad;
    EXPECT_EQ(ExtProcServer::Start(*env.scheduler, env.pool, o).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ExtProcServerTest, ThousandConcurrentStreams) {
  std::vector<Endpoint> pool;
  for (int i = 0; i < 8; ++i) pool.push_back(Ep("10.0.1." + std::to_string(i) + ":8000", i % 3, 0.1 * (i % 4)));
  ServerEnv s(pool);
  ASSERT_NE(s.server, nullptr);
  constexpr int kThreads = 50, kStreamsPerThread = 20;
  std::atomic<int> answered{0}, failed{0};
  std::mutex first_failure_mu;
  std::string first_failure;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto stub = Stub(s.server->port(), 100 + t);
      // All 20 streams of a thread are open at once: 1000 streams in flight across the threads.
      std::vector<std::unique_ptr<GatewayStream>> streams;
      for (int i = 0; i < kStreamsPerThread; ++i) {
        // 50 channels connect at once on a loaded 2-core machine: a connect attempt may fail
        // and be retried, which this load test is not about (one channel's 20 streams failed
        // together once, in a ctest -j2 run).
        streams.push_back(
            std::make_unique<GatewayStream>(*stub, seconds(60 * epp::testing::TimeScale()), /*wait_for_ready=*/true));
        const std::string text = "thread " + std::to_string(t) + " stream " + std::to_string(i) + std::string(200, 'p');
        streams.back()->Send(BuildProcessingRequests(ChatCapture(ChatBody("m", text))));
      }
      for (auto& g : streams) {
        bool ok = g->ReadRequestPath() && !g->immediate() &&
                  g->Send(BuildResponseMessages(200, {{"content-type", "application/json"}}, kUsageBody, "")) &&
                  g->ReadN(2);
        const grpc::Status st = g->Close();
        ok = ok && st.ok() && g->responses.size() == 4 && !Destination(g->responses[0]).empty() &&
             g->responses[3].has_response_body();
        (ok ? answered : failed)++;
        if (!ok) {
          std::lock_guard<std::mutex> lock(first_failure_mu);
          if (first_failure.empty())
            first_failure = absl::StrCat("status ", st.error_code(), " '", st.error_message(), "', ", g->responses.size(), " responses");
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(answered.load(), kThreads * kStreamsPerThread);
  EXPECT_EQ(failed.load(), 0) << "first failure: " << first_failure;
  s.server->Shutdown(milliseconds(2000));
  const ExtProcStats& st = s.server->stats();
  EXPECT_EQ(st.streams_total.load(), kThreads * kStreamsPerThread);
  EXPECT_EQ(st.outcome_200.load(), kThreads * kStreamsPerThread);
  EXPECT_EQ(st.prompt_tokens.load(), 10 * kThreads * kStreamsPerThread);
  EXPECT_EQ(st.requests_in_flight.load(), 0);
  EXPECT_EQ(st.streams_active.load(), 0);
  for (const Endpoint& e : pool) EXPECT_EQ(s.env.scheduler->Inflight(e.address).first, 0) << e.address;
}

TEST(ExtProcServerTest, ShutdownDrainsOpenStreamsAndRefusesNewOnes) {
  ServerEnv s({Ep("10.0.0.1:8000")});
  ASSERT_NE(s.server, nullptr);
  const int port = s.server->port();
  GatewayStream open(*s.stub);
  ASSERT_TRUE(open.Send(BuildProcessingRequests(ChatCapture(ChatBody("m", "drain me")))));
  ASSERT_TRUE(open.ReadRequestPath());
  ASSERT_EQ(open.responses.size(), 2u);

  std::atomic<bool> shutdown_returned{false};
  const auto t0 = steady_clock::now();
  std::thread shutdown([&] {
    s.server->Shutdown(seconds(8));
    shutdown_returned = true;
  });
  // New streams are refused once the shutdown began (probe until one is).
  HttpRequestCapture bodyless;
  bodyless.path = "/v1/models";
  grpc::Status refused;
  for (int i = 0; i < 300 && refused.ok(); ++i) {
    auto stub = Stub(port, 1000 + i);
    const Outcome probe = Exchange(*stub, BuildProcessingRequests(bodyless));
    refused = probe.status;
    if (refused.ok()) std::this_thread::sleep_for(milliseconds(10));
  }
  // UNAVAILABLE once the listener is closed; a stream accepted in the instant the shutdown began
  // is CANCELLED by gRPC instead (seen once in ~400 runs). Either way it was refused.
  EXPECT_TRUE(refused.error_code() == grpc::StatusCode::UNAVAILABLE || refused.error_code() == grpc::StatusCode::CANCELLED)
      << refused.error_code() << ": " << refused.error_message();
  EXPECT_FALSE(shutdown_returned.load()) << "the open stream holds the drain";

  // The open stream finishes its response path within the drain window.
  ASSERT_TRUE(open.Send(BuildResponseMessages(200, {{"content-type", "application/json"}}, kUsageBody, "10.0.0.1:8000")));
  ASSERT_TRUE(open.ReadN(2));
  EXPECT_TRUE(open.responses[2].has_response_headers());
  EXPECT_TRUE(open.responses[3].has_response_body());
  const grpc::Status st = open.Close();
  EXPECT_TRUE(st.ok()) << st.error_message();
  shutdown.join();
  EXPECT_LT(steady_clock::now() - t0, seconds(8)) << "shutdown returned when the last stream ended";
  EXPECT_EQ(s.server->stats().prompt_tokens.load(), 10);
  EXPECT_EQ(s.server->stats().streams_active.load(), 0);
  EXPECT_EQ(s.env.scheduler->Inflight("10.0.0.1:8000").first, 0);
}

TEST(ExtProcServerTest, ShutdownCancelsStreamsLeftAfterTheDrainWindow) {
  ServerEnv s({Ep("10.0.0.1:8000")});
  ASSERT_NE(s.server, nullptr);
  GatewayStream open(*s.stub);
  ASSERT_TRUE(open.Send(BuildProcessingRequests(ChatCapture(ChatBody("m", "never finished")))));
  ASSERT_TRUE(open.ReadRequestPath());
  EXPECT_EQ(s.env.scheduler->Inflight("10.0.0.1:8000").first, 1);
  const auto t0 = steady_clock::now();
  s.server->Shutdown(milliseconds(300));
  const auto took = steady_clock::now() - t0;
  EXPECT_GE(took, milliseconds(250));
  EXPECT_LT(took, seconds(5));
  const grpc::Status st = open.Close();
  EXPECT_FALSE(st.ok());
  // The cancelled stream's session is gone and released its load.
  EXPECT_EQ(s.env.scheduler->Inflight("10.0.0.1:8000").first, 0);
  EXPECT_EQ(s.server->stats().requests_in_flight.load(), 0);
  EXPECT_EQ(s.server->stats().streams_active.load(), 0);
}

// Waits up to 5 s for `done`; false when it never held.
template <typename F>
bool Eventually(F done) {
  // 5 s, times the sanitizers' slowdown (tearing down a thousand streams under TSan takes longer).
  for (auto until = steady_clock::now() + seconds(5 * epp::testing::TimeScale()); steady_clock::now() < until;
       std::this_thread::sleep_for(milliseconds(5)))
    if (done()) return true;
  return done();
}

TEST(ExtProcServerTest, RequestTimeoutEndsStreamsWhoseBodyNeverEnds) {
  ExtProcServerOptions options;
  options.session.request_timeout = milliseconds(200);
  options.session.idle_timeout = milliseconds(0);
  ServerEnv s({Ep("10.0.0.1:8000")}, options);
  ASSERT_NE(s.server, nullptr);
  const auto messages = BuildProcessingRequests(ChatCapture(ChatBody("m", std::string(1000, 'q')), 300));
  ASSERT_GE(messages.size(), 3u);
  // Headers and never a body; headers and part of the body; both past the limit.
  GatewayStream headers_only(*s.stub), part_body(*s.stub);
  const auto t0 = steady_clock::now();
  ASSERT_TRUE(headers_only.Send({messages[0]}));
  ASSERT_TRUE(part_body.Send({messages[0], messages[1]}));
  for (GatewayStream* g : {&headers_only, &part_body}) {
    EXPECT_FALSE(g->ReadRequestPath());
    const grpc::Status st = g->Close();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
    EXPECT_NE(st.error_message().find("request timeout (200 ms)"), std::string::npos) << st.error_message();
  }
  const auto took = steady_clock::now() - t0;
  EXPECT_GE(took, milliseconds(190));
  EXPECT_LT(took, seconds(4));
  EXPECT_EQ(s.server->stats().timeouts_request.load(), 2);
  EXPECT_EQ(s.server->stats().timeouts_idle.load(), 0);
  EXPECT_TRUE(Eventually([&] { return s.server->stats().streams_active.load() == 0; }));
  // A request that completes in time is untouched, and so is its (idle-limit-free) response wait.
  GatewayStream ok(*s.stub);
  ASSERT_TRUE(ok.Send(messages));
  ASSERT_TRUE(ok.ReadRequestPath());
  std::this_thread::sleep_for(milliseconds(400));
  ASSERT_TRUE(ok.Send(BuildResponseMessages(200, {}, kUsageBody, "10.0.0.1:8000")));
  ASSERT_TRUE(ok.ReadN(2));
  EXPECT_TRUE(ok.Close().ok());
  EXPECT_EQ(s.server->stats().timeouts_request.load(), 2);
}

TEST(ExtProcServerTest, IdleTimeoutEndsPickedStreamsAndReleasesTheirLoad) {
  ExtProcServerOptions options;
  options.session.request_timeout = milliseconds(0);
  options.session.idle_timeout = milliseconds(250);
  ServerEnv s({Ep("10.0.0.1:8000")}, options);
  ASSERT_NE(s.server, nullptr);
  const auto messages = BuildProcessingRequests(ChatCapture(ChatBody("m", "picked, then silence")));
  GatewayStream g(*s.stub);
  ASSERT_TRUE(g.Send(messages));
  ASSERT_TRUE(g.ReadRequestPath());
  EXPECT_EQ(s.env.scheduler->Inflight("10.0.0.1:8000").first, 1);
  const auto t0 = steady_clock::now();
  EXPECT_FALSE(g.ReadN(1));  // nothing more is sent: only the idle limit ends the stream
  const grpc::Status st = g.Close();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  EXPECT_NE(st.error_message().find("idle timeout (250 ms)"), std::string::npos) << st.error_message();
  EXPECT_LT(steady_clock::now() - t0, seconds(4));
  EXPECT_EQ(s.server->stats().timeouts_idle.load(), 1);
  EXPECT_TRUE(Eventually([&] { return s.env.scheduler->Inflight("10.0.0.1:8000").first == 0; }));
  EXPECT_TRUE(Eventually([&] { return s.server->stats().requests_in_flight.load() == 0; }));
  // A stream whose gateway keeps talking within the limit is not ended: response chunks every
  // 100 ms for 600 ms, then the end.
  GatewayStream chatty(*s.stub);
  ASSERT_TRUE(chatty.Send(messages));
  ASSERT_TRUE(chatty.ReadRequestPath());
  const auto response = BuildResponseMessages(200, {}, kUsageBody, "10.0.0.1:8000");
  ASSERT_TRUE(chatty.Send({response[0]}));
  ASSERT_TRUE(chatty.ReadN(1));
  for (int i = 0; i < 6; ++i) {
    std::this_thread::sleep_for(milliseconds(100));
    pb::ProcessingRequest chunk;
    chunk.mutable_response_body()->set_body("data: {}\n\n");
    ASSERT_TRUE(chatty.Send({chunk.SerializeAsString()})) << i;
    ASSERT_TRUE(chatty.ReadN(1)) << i;
  }
  pb::ProcessingRequest last;
  last.mutable_response_body()->set_end_of_stream(true);
  ASSERT_TRUE(chatty.Send({last.SerializeAsString()}));
  ASSERT_TRUE(chatty.ReadN(1));
  const grpc::Status chatty_status = chatty.Close();
  EXPECT_TRUE(chatty_status.ok()) << chatty_status.error_message();
  EXPECT_EQ(s.server->stats().timeouts_idle.load(), 1);
}

TEST(ExtProcServerTest, ThousandSilentStreamsAreEndedByTheRequestTimeout) {
  ExtProcServerOptions options;
  options.session.request_timeout = milliseconds(300);
  ServerEnv s({Ep("10.0.0.1:8000")}, options);
  ASSERT_NE(s.server, nullptr);
  const auto messages = BuildProcessingRequests(ChatCapture(ChatBody("m", "x")));
  // Async client: 1000 streams that send headers and go silent, on one connection.
  grpc::CompletionQueue cq;
  struct Call {
    grpc::ClientContext ctx;
    pb::ProcessingRequest headers;
    pb::ProcessingResponse in;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncReaderWriter<pb::ProcessingRequest, pb::ProcessingResponse>> rw;
  };
  constexpr int kStreams = 1000;
  std::vector<std::unique_ptr<Call>> calls(kStreams);
  // Tags: 4*i + 0 started, + 1 written, + 2 read done, + 3 finished.
  for (int i = 0; i < kStreams; ++i) {
    calls[i] = std::make_unique<Call>();
    calls[i]->ctx.set_deadline(std::chrono::system_clock::now() + seconds(20));
    ASSERT_TRUE(calls[i]->headers.ParseFromString(messages[0]));
    calls[i]->rw = s.stub->AsyncProcess(&calls[i]->ctx, &cq, reinterpret_cast<void*>(intptr_t{4} * i));
  }
  int finished = 0, deadline_exceeded = 0;
  void* tag;
  bool ok;
  while (finished < kStreams && cq.Next(&tag, &ok)) {
    const intptr_t t = reinterpret_cast<intptr_t>(tag);
    Call& c = *calls[t / 4];
    switch (t % 4) {
      case 0: c.rw->Write(c.headers, reinterpret_cast<void*>(t + 1)); break;
      case 1: c.rw->Read(&c.in, reinterpret_cast<void*>(t + 1)); break;
      case 2: c.rw->Finish(&c.status, reinterpret_cast<void*>(t + 1)); break;
      case 3:
        ++finished;
        if (c.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
            c.status.error_message().find("request timeout") != std::string::npos)
          ++deadline_exceeded;
        break;
    }
  }
  EXPECT_EQ(finished, kStreams);
  EXPECT_EQ(deadline_exceeded, kStreams) << "every stream ended by the server's limit, none by the client's deadline";
  EXPECT_EQ(s.server->stats().timeouts_request.load(), kStreams);
  EXPECT_TRUE(Eventually([&] { return s.server->stats().streams_active.load() == 0; }));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

TEST(ExtProcServerTest, NegativeTimeoutsAreRefused) {
  SchedulerEnv env({Ep("10.0.0.1:8000")});
  ExtProcServerOptions options;
  options.listen = "127.0.0.1:0";
  options.session.idle_timeout = milliseconds(-1);
  auto started = ExtProcServer::Start(*env.scheduler, env.pool, options);
  EXPECT_EQ(started.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ExtProcServerTest, CaptureDirGetsJsonLinesOfBothDirections) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                    ("epp_capture_" + std::to_string(::getpid()) + "_" +
                                     std::to_string(steady_clock::now().time_since_epoch().count()));
  std::filesystem::create_directories(dir);
  ExtProcServerOptions options;
  options.capture_dir = dir.string();
  ServerEnv s({Ep("10.0.0.1:8000")}, options);
  ASSERT_NE(s.server, nullptr);
  const auto request = BuildProcessingRequests(ChatCapture(ChatBody("m", "capture me"), 20));
  const auto response = BuildResponseMessages(200, {}, "ok", "10.0.0.1:8000");
  ASSERT_TRUE(Exchange(*s.stub, request, response).status.ok());
  HttpRequestCapture bad = ChatCapture("{");
  ASSERT_TRUE(Exchange(*s.stub, BuildProcessingRequests(bad)).status.ok());
  s.server->Shutdown(milliseconds(1000));  // every stream done: files closed

  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 2u);
  size_t requests = 0, responses = 0;
  bool saw_pick = false, saw_immediate = false, saw_request_headers = false;
  for (const auto& f : files) {
    EXPECT_EQ(f.extension(), ".jsonl");
    std::ifstream in(f);
    std::string line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      ASSERT_TRUE(j.is_object()) << line;
      const std::string direction = j.value("direction", "");
      ASSERT_TRUE(j.contains("message")) << line;
      const auto& m = j["message"];
      if (direction == "request") {
        ++requests;
        if (m.contains("request_headers")) {
          saw_request_headers = true;
          // A captured request converts back to the same message.
          auto bytes = ProcessingRequestFromJson(m.dump());
          ASSERT_TRUE(bytes.ok()) << bytes.status();
          auto again = ProcessingRequestToJson(*bytes);
          ASSERT_TRUE(again.ok());
          EXPECT_EQ(nlohmann::json::parse(*again), m);
        }
      } else {
        EXPECT_EQ(direction, "response") << line;
        ++responses;
        if (m.contains("immediate_response")) saw_immediate = true;
        if (m.contains("request_headers") && m.contains("dynamic_metadata")) {
          saw_pick = true;
          EXPECT_EQ(m["dynamic_metadata"]["envoy.lb"]["x-gateway-destination-endpoint"], "10.0.0.1:8000") << line;
        }
      }
    }
  }
  // Stream 1: headers + chunks + response headers + body in; headers + body + 2 echoes out.
  // Stream 2: headers + body in; one immediate response out.
  EXPECT_EQ(requests, request.size() + response.size() + 2);
  EXPECT_EQ(responses, 4u + 1u);
  EXPECT_TRUE(saw_pick);
  EXPECT_TRUE(saw_immediate);
  EXPECT_TRUE(saw_request_headers);
  std::filesystem::remove_all(dir);
}

// grpc.health.v1.Health/Check through a generic stub: HealthCheckRequest{service=1} encoded by
// hand, HealthCheckResponse{status=1} read by field number.
struct HealthAnswer {
  grpc::StatusCode code;
  int status;  // SERVING=1, NOT_SERVING=2, SERVICE_UNKNOWN=3; -1 when absent
};

HealthAnswer Check(int port, const std::string& service, const std::string& method = "/grpc.health.v1.Health/Check") {
  grpc::GenericStub stub(Channel(port, 7));
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kRpcTimeout);
  const std::string request = service.empty() ? std::string() : enc::LenField(1, service);
  grpc::Slice slice(request);
  grpc::ByteBuffer request_buffer(&slice, 1);
  auto call = stub.PrepareUnaryCall(&ctx, method, request_buffer, &cq);
  call->StartCall();
  grpc::ByteBuffer response;
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  EXPECT_TRUE(cq.Next(&tag, &ok));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  HealthAnswer a{status.error_code(), -1};
  if (!status.ok()) return a;
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  Wire w(bytes);
  EXPECT_TRUE(w.ok());
  a.status = w.Has(1) ? static_cast<int>(w.Varint(1).value_or(0)) : 0;  // 0 = UNKNOWN (proto3 default)
  return a;
}

TEST(HealthServerTest, ReadinessFollowsSetReady) {
  auto started = HealthServer::Start("127.0.0.1:0");
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<HealthServer> health = std::move(*started);
  const int port = health->port();
  ASSERT_GT(port, 0);
  const std::string services[] = {"readiness", "inference-extension", std::string(kExtProcServiceName), ""};
  constexpr int kServing = 1, kNotServing = 2;

  EXPECT_EQ(Check(port, "liveness").status, kServing);
  for (const std::string& svc : services) {
    SCOPED_TRACE("before: '" + svc + "'");
    const HealthAnswer a = Check(port, svc);
    EXPECT_EQ(a.code, grpc::StatusCode::OK);
    EXPECT_EQ(a.status, kNotServing);
  }
  EXPECT_EQ(Check(port, "no-such-service").code, grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Check(port, "liveness", "/grpc.health.v1.Health/NoSuchMethod").code, grpc::StatusCode::UNIMPLEMENTED);

  health->SetReady(true);
  EXPECT_EQ(Check(port, "liveness").status, kServing);
  for (const std::string& svc : services) {
    SCOPED_TRACE("ready: '" + svc + "'");
    EXPECT_EQ(Check(port, svc).status, kServing);
  }

  health->SetReady(false);
  EXPECT_EQ(Check(port, "liveness").status, kServing);
  EXPECT_EQ(Check(port, "readiness").status, kNotServing);

  health->Shutdown();
  EXPECT_EQ(Check(port, "liveness").code, grpc::StatusCode::UNAVAILABLE);
  health->Shutdown();  // idempotent
}

}  // namespace
}  // namespace epp
