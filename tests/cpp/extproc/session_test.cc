// ExtProcSession over serialized ProcessingRequest bytes: the request path (deferred headers
// response, destination header + dynamic metadata, streamed body chunks, subset hints, model
// rewrite, 400/413/429/503), the response path (echo, usage, served endpoint), in-flight load,
// protocol errors, and wire compatibility checked by field number with UnknownFieldSet.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "extproc/extproc_testutil.h"

namespace epp {
namespace {

using namespace extproc_test;  // NOLINT

// Feeds every message, expecting each to be accepted; returns the raw responses.
std::vector<std::string> Feed(ExtProcSession& s, const std::vector<std::string>& messages) {
  std::vector<std::string> out;
  for (const std::string& m : messages) {
    absl::Status st = s.OnMessage(m, out);
    EXPECT_TRUE(st.ok()) << st;
  }
  return out;
}

std::vector<std::string> Feed(ExtProcSession& s, const pb::ProcessingRequest& m) {
  return Feed(s, std::vector<std::string>{m.SerializeAsString()});
}

// Request body of a streamed_response chunk (request or response path).
const pb::StreamedBodyResponse& Streamed(const pb::ProcessingResponse& r) {
  const pb::BodyResponse& b = r.has_request_body() ? r.request_body() : r.response_body();
  EXPECT_TRUE(b.response().has_body_mutation());
  EXPECT_EQ(b.response().body_mutation().mutation_case(), pb::BodyMutation::kStreamedResponse);
  return b.response().body_mutation().streamed_response();
}

void ExpectImmediate(const std::vector<pb::ProcessingResponse>& rs, int code, std::string_view error_name) {
  ASSERT_EQ(rs.size(), 1u);
  ASSERT_TRUE(rs[0].has_immediate_response());
  const pb::ImmediateResponse& ir = rs[0].immediate_response();
  EXPECT_EQ(static_cast<int>(ir.status().code()), code);
  EXPECT_EQ(ir.body().rfind("inference error: " + std::string(error_name) + " - ", 0), 0u) << ir.body();
  EXPECT_FALSE(ir.details().empty());
  EXPECT_FALSE(rs[0].has_dynamic_metadata());
}

std::vector<std::pair<std::string, std::string>> JsonHeaders() { return {{"content-type", "application/json"}}; }

// ---------------------------------------------------------------------------------------------
// Request path.

TEST(ExtProcSessionTest, ChunkedChatRequestIsAnsweredAtBodyEndAndStreamedBack) {
  SchedulerEnv env({Ep("10.0.0.1:8000", 5, 0.5), Ep("10.0.0.2:8000", 0, 0.1), Ep("10.0.0.3:8000", 3, 0.4)});
  ExtProcOptions options;
  ExtProcStats stats;
  ExtProcSession s(*env.scheduler, env.pool, options, &stats);
  const std::string body = ChatBody("llama", std::string(200000, 'a'));
  const std::vector<std::string> messages = BuildProcessingRequests(ChatCapture(body, (body.size() + 2) / 3));
  ASSERT_EQ(messages.size(), 4u);  // headers + 3 body chunks

  std::vector<std::string> out;
  for (size_t i = 0; i + 1 < messages.size(); ++i) {
    ASSERT_TRUE(s.OnMessage(messages[i], out).ok());
    EXPECT_TRUE(out.empty()) << "message " << i << ": nothing is answered before the body ends";
  }
  EXPECT_EQ(s.result(), nullptr);
  ASSERT_TRUE(s.OnMessage(messages.back(), out).ok());
  const auto rs = Decode(out);
  ASSERT_EQ(rs.size(), 1u + 4u);  // headers response + ceil(200 KB / 62,000) body chunks

  ASSERT_TRUE(rs[0].has_request_headers());
  const pb::CommonResponse& common = rs[0].request_headers().response();
  EXPECT_TRUE(common.clear_route_cache());
  const auto dest = SetHeader(common.header_mutation(), kDestinationEndpointHeader);
  ASSERT_TRUE(dest.has_value());
  EXPECT_EQ(*dest, "10.0.0.2:8000");
  EXPECT_EQ(MetadataDestination(rs[0]), dest);
  EXPECT_FALSE(SetHeader(common.header_mutation(), "content-length").has_value()) << "body forwarded unchanged";
  EXPECT_EQ(common.header_mutation().remove_headers_size(), 0);
  for (const auto& o : common.header_mutation().set_headers()) EXPECT_TRUE(o.header().value().empty()) << "raw_value only";

  std::string reassembled;
  for (size_t i = 1; i < rs.size(); ++i) {
    SCOPED_TRACE(i);
    ASSERT_TRUE(rs[i].has_request_body());
    const pb::StreamedBodyResponse& sr = Streamed(rs[i]);
    EXPECT_LE(sr.body().size(), kBodyChunkBytes);
    EXPECT_EQ(sr.end_of_stream(), i + 1 == rs.size());
    reassembled += sr.body();
  }
  EXPECT_EQ(Streamed(rs[1]).body().size(), 62000u);
  EXPECT_EQ(reassembled, body);

  EXPECT_FALSE(s.finished());
  ASSERT_NE(s.result(), nullptr);
  EXPECT_EQ(s.result()->status, 200);
  ASSERT_NE(s.request(), nullptr);
  EXPECT_EQ(s.request()->model, "llama");
  EXPECT_EQ(s.request()->api, ApiKind::kChatCompletions);
  EXPECT_EQ(stats.outcome_200.load(), 1);
  EXPECT_EQ(stats.requests_in_flight.load(), 1);
  int64_t latency_samples = 0;
  for (const auto& c : stats.latency_count) latency_samples += c.load();
  EXPECT_EQ(latency_samples, 1);
}

TEST(ExtProcSessionTest, SubsetHintRestrictsTheCandidates) {
  // 10.0.0.9 is the best endpoint; every hint below excludes it.
  SchedulerEnv env({Ep("10.0.0.9:8000", 0, 0.0), Ep("10.0.0.1:8000", 2, 0.3), Ep("10.0.0.1:8001", 4, 0.4),
                    Ep("10.0.0.2:8000", 3, 0.3), Ep("10.0.0.3:8000", 1, 0.2)});
  struct Case {
    const char* name;
    std::optional<std::vector<std::string>> subset;
    bool as_string;
    int status;
    std::set<std::string> allowed;
  };
  const Case cases[] = {
      {"no hint", std::nullopt, false, 200, {"10.0.0.9:8000"}},
      {"list", std::vector<std::string>{"10.0.0.2:8000"}, false, 200, {"10.0.0.2:8000"}},
      {"comma string", std::vector<std::string>{"10.0.0.2:8000", "10.0.0.3:8000"}, true, 200, {"10.0.0.2:8000", "10.0.0.3:8000"}},
      {"list with comma entries", std::vector<std::string>{"10.0.0.2:8000, 10.0.0.3:8000"}, false, 200,
       {"10.0.0.2:8000", "10.0.0.3:8000"}},
      {"bare ip", std::vector<std::string>{"10.0.0.1"}, false, 200, {"10.0.0.1:8000", "10.0.0.1:8001"}},
      {"empty list", std::vector<std::string>{}, false, 503, {}},
      {"no match", std::vector<std::string>{"10.9.9.9:8000"}, false, 503, {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ExtProcOptions options;
    ExtProcStats stats;
    ExtProcSession s(*env.scheduler, env.pool, options, &stats);
    HttpRequestCapture capture = ChatCapture(ChatBody("m", std::string("hello ") + c.name));
    capture.subset = c.subset;
    capture.subset_as_string = c.as_string;
    const auto rs = Decode(Feed(s, BuildProcessingRequests(capture)));
    if (c.status == 200) {
      ASSERT_EQ(rs.size(), 2u);
      const auto dest = SetHeader(rs[0].request_headers().response().header_mutation(), kDestinationEndpointHeader);
      ASSERT_TRUE(dest.has_value());
      EXPECT_TRUE(c.allowed.count(*dest)) << *dest;
      EXPECT_EQ(MetadataDestination(rs[0]), dest);
      EXPECT_EQ(stats.outcome_200.load(), 1);
    } else {
      ExpectImmediate(rs, 503, "ServiceUnavailable");
      EXPECT_TRUE(s.finished());
      EXPECT_EQ(stats.outcome_503.load(), 1);
    }
  }
}

TEST(ExtProcSessionTest, IgnoreSubsetHintOption) {
  SchedulerEnv env({Ep("10.0.0.9:8000", 0, 0.0), Ep("10.0.0.1:8000", 5, 0.5)});
  ExtProcOptions options;
  options.ignore_subset_hint = true;
  ExtProcSession s(*env.scheduler, env.pool, options);
  HttpRequestCapture capture = ChatCapture(ChatBody("m", "hi"));
  capture.subset = std::vector<std::string>{};  // would be a 503
  const auto rs = Decode(Feed(s, BuildProcessingRequests(capture)));
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(MetadataDestination(rs[0]), "10.0.0.9:8000");
}

TEST(ExtProcSessionTest, ModelRewriteHeaderRewritesTheBody) {
  SchedulerEnv env({Ep("10.0.0.1:8000")});
  ExtProcOptions options;
  ExtProcSession s(*env.scheduler, env.pool, options);
  HttpRequestCapture capture =
      ChatCapture(R"({"model":"alias","messages":[{"role":"user","content":"hi there"}],"temperature":0.5})");
  capture.headers.emplace_back("X-Gateway-Model-Name-Rewrite", "llama-3-70b");  // names are case-insensitive
  const auto rs = Decode(Feed(s, BuildProcessingRequests(capture)));
  ASSERT_EQ(rs.size(), 2u);
  const auto& mutation = rs[0].request_headers().response().header_mutation();
  const std::string new_body = Streamed(rs[1]).body();
  EXPECT_TRUE(Streamed(rs[1]).end_of_stream());
  EXPECT_EQ(SetHeader(mutation, "content-length"), std::to_string(new_body.size()));
  const auto j = nlohmann::json::parse(new_body);
  EXPECT_EQ(j["model"], "llama-3-70b");
  EXPECT_EQ(j["temperature"], 0.5);
  EXPECT_EQ(j["messages"][0]["content"], "hi there");
  auto reparsed = ParseOpenAIRequest("/v1/chat/completions", new_body);
  ASSERT_TRUE(reparsed.ok()) << reparsed.status();
  EXPECT_EQ(reparsed->model, "llama-3-70b");
  ASSERT_NE(s.request(), nullptr);
  EXPECT_EQ(s.request()->model, "llama-3-70b");
}

TEST(ExtProcSessionTest, ModelRewriteToTheSameModelKeepsTheBytes) {
  SchedulerEnv env({Ep("10.0.0.1:8000")});
  ExtProcOptions options;
  ExtProcSession s(*env.scheduler, env.pool, options);
  const std::string body = "{ \"model\" : \"m\", \"messages\": [{\"role\":\"user\",\"content\":\"x\"}] }";
  HttpRequestCapture capture = ChatCapture(body);
  capture.headers.emplace_back(std::string(kModelNameRewriteHeader), "m");
  const auto rs = Decode(Feed(s, BuildProcessingRequests(capture)));
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_FALSE(SetHeader(rs[0].request_headers().response().header_mutation(), "content-length").has_value());
  EXPECT_EQ(Streamed(rs[1]).body(), body);
}

TEST(ExtProcSessionTest, ModelRewriteHeaderThatIsNotUtf8Is400NamingTheHeader) {
  // Header values arrive as raw bytes; one that is not UTF-8 cannot become the body's model. It
  // used to make the JSON writer throw: the session aborted the process, or the stream hung.
  SchedulerEnv env({Ep("10.0.0.1:8000")});
  ExtProcOptions options;
  ExtProcStats stats;
  for (const std::string& bad : {std::string("\xff\xfe"), std::string("llama-\xc3"), std::string("a\xed\xa0\x80" "b")}) {
    SCOPED_TRACE(bad);
    ExtProcSession s(*env.scheduler, env.pool, options, &stats);
    HttpRequestCapture capture = ChatCapture(R"({"model":"alias","messages":[{"role":"user","content":"hi"}]})");
    capture.headers.emplace_back(std::string(kModelNameRewriteHeader), bad);
    const auto rs = Decode(Feed(s, BuildProcessingRequests(capture)));
    ExpectImmediate(rs, 400, "BadRequest");
    EXPECT_NE(rs[0].immediate_response().details().find(std::string(kModelNameRewriteHeader) + ": cannot rewrite the model"),
              std::string::npos)
        << rs[0].immediate_response().details();
    EXPECT_TRUE(s.finished());
  }
  EXPECT_EQ(stats.requests_in_flight.load(), 0);
}

TEST(CaptureToHttpRequestTest, EnvelopesAndBareBodiesAsTheGatewaySendsThem) {
  auto env = CaptureToHttpRequest(
      R"({"headers": {":method": "PUT", "X-Original-Path": "/v1/chat/completions", "x-multi": ["a", "b"]},)"
      R"( "body": {"model": "m", "messages": []}, "ts": 5})");
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->method, "PUT");
  EXPECT_EQ(env->path, "/v1/chat/completions");
  EXPECT_EQ(env->headers, (std::vector<std::pair<std::string, std::string>>{
                              {"X-Original-Path", "/v1/chat/completions"}, {"x-multi", "a"}, {"x-multi", "b"}}));
  EXPECT_EQ(env->body, R"({"model":"m","messages":[]})");
  // The envelope's path wins over the headers; an override wins over both; a string body is kept.
  auto path = CaptureToHttpRequest(R"({"path": "/v1/responses", "headers": {":path": "/x"}, "body": "{\"a\":1}"})");
  ASSERT_TRUE(path.ok());
  EXPECT_EQ(path->path, "/v1/responses");
  EXPECT_EQ(path->body, "{\"a\":1}");
  EXPECT_EQ(CaptureToHttpRequest(R"({"headers": {":path": "/x"}, "body": {}})", "/y")->path, "/y");
  // A bare body is sent whole, on its own path or the default.
  const std::string bare = R"({"model": "m", "prompt": "hi", "path": "/v1/completions"})";
  EXPECT_EQ(CaptureToHttpRequest(bare)->body, bare);
  EXPECT_EQ(CaptureToHttpRequest(R"({"model": "m"})")->path, std::string(kDefaultRequestPath));
  // Without a path the body implies one, as ParseCaptureEnvelope infers it from the same capture
  // (fuzz_capture_envelope found a bare Responses body sent to /v1/completions).
  for (const char* capture : {R"({"model": "m", "input": "tell a story"})", R"({"body": {"model": "m", "input": "x"}})",
                              R"({"body": "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}"})",
                              R"({"model": "m", "input": "x", "encoding_format": "float"})"}) {
    auto http = CaptureToHttpRequest(capture);
    auto parsed = ParseCaptureEnvelope(capture);
    ASSERT_TRUE(http.ok() && parsed.ok()) << capture;
    EXPECT_EQ(http->path, parsed->path) << capture;
    EXPECT_NE(http->path, std::string(kDefaultRequestPath)) << capture;
  }
  // Errors name what is wrong.
  for (const char* bad : {"[1]", "{", R"({"headers": [], "body": {}})", R"({"headers": {"a": 1}, "body": {}})"}) {
    auto r = CaptureToHttpRequest(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(r.status().message()).rfind("capture: ", 0), 0u) << r.status();
  }
}

TEST(ExtProcSessionTest, BodyOverTheLimitIs413) {
  SchedulerEnv env({Ep("10.0.0.1:8000")});
  const std::string body = ChatBody("m", std::string(3000, 'x'));
  {
    SCOPED_TRACE("over");
    ExtProcOptions options;
    options.max_request_bytes = 1000;
    ExtProcStats stats;
    ExtProcSession s(*env.scheduler, env.pool, options, &stats);
    const auto messages = BuildProcessingRequests(ChatCapture(body, 500));
    std::vector<std::string> out;
    for (size_t i = 0; i < messages.size(); ++i) {
      ASSERT_TRUE(s.OnMessage(messages[i], out).ok()) << i;
      // 500 + 500 bytes fit; the third chunk crosses the limit; later chunks are ignored.
      EXPECT_EQ(out.size(), i < 3 ? 0u : 1u) << i;
    }
    const auto rs = Decode(out);
    ExpectImmediate(rs, 413, "PayloadTooLarge");
    EXPECT_NE(rs[0].immediate_response().body().find("1000"), std::string::npos);
    EXPECT_TRUE(s.finished());
    EXPECT_EQ(s.result(), nullptr);
    EXPECT_EQ(stats.outcome_413.load(), 1);
    EXPECT_EQ(env.scheduler->Inflight("10.0.0.1:8000").first, 0);
  }
  {
    SCOPED_TRACE("exactly at the limit");
    ExtProcOptions options;
    options.max_request_bytes = body.size();
    ExtProcSession s(*env.scheduler, env.pool, options);
    const auto rs = Decode(Feed(s, BuildProcessingRequests(ChatCapture(body, 700))));
    ASSERT_GE(rs.size(), 2u);
    EXPECT_TRUE(rs[0].has_request_headers());
  }
}

TEST(ExtProcSessionTest, ADeclaredContentLengthOnlySizesTheBuffer) {
  // The body is reserved from content-length when it starts; whatever the header claims (the
  // truth, more than the limit, less than what comes, garbage), what is picked and echoed is the
  // body that arrived, and the limit still applies to the bytes received.
  SchedulerEnv env({Ep("10.0.0.1:8000")});
  const std::string body = ChatBody("m", std::string(5000, 'y'));
  for (const std::string& declared :
       {std::to_string(body.size()), std::string("999999999999"), std::string("10"), std::string("12abc"),
        std::string("-5"), std::string("")}) {
    SCOPED_TRACE(declared);
    ExtProcOptions options;
    options.max_request_bytes = 8000;
    ExtProcSession s(*env.scheduler, env.pool, options);
    HttpRequestCapture capture = ChatCapture(body, 1500);
    capture.headers.emplace_back("content-length", declared);
    const auto rs = Decode(Feed(s, BuildProcessingRequests(capture)));
    ASSERT_GE(rs.size(), 2u);
    ASSERT_TRUE(rs[0].has_request_headers());
    std::string echoed;
    for (size_t i = 1; i < rs.size(); ++i) echoed += Streamed(rs[i]).body();
    EXPECT_EQ(echoed, body);
    ASSERT_NE(s.result(), nullptr);
    EXPECT_EQ(s.result()->status, 200);
  }
  ExtProcOptions small;
  small.max_request_bytes = 4000;  // under the body: 413 although the header claims 10 bytes
  ExtProcSession s(*env.scheduler, env.pool, small);
  HttpRequestCapture capture = ChatCapture(body, 1500);
  capture.headers.emplace_back("content-length", "10");
  ExpectImmediate(Decode(Feed(s, BuildProcessingRequests(capture))), 413, "PayloadTooLarge");
}

// The buffer budget (ExtProcOptions::buffer_budget) is what every stream together may hold: a
// body that does not fit is answered 429 with the reference's ResourceExhausted and our drop
// reason, a client's content-length reserves only what the budget has, and a pick gives back
// what its body held.
TEST(ExtProcSessionTest, BufferBudgetRefusesABodyThatDoesNotFitAndFreesOnThePick) {
  SchedulerEnv env({Ep("10.0.0.1:8000")});
  const std::string body = ChatBody("m", std::string(3000, 'x'));
  auto budget = std::make_shared<BufferBudget>(5000);
  ExtProcOptions options;
  options.buffer_budget = budget;
  ExtProcStats stats;
  HttpRequestCapture capture = ChatCapture(body, 1000);
  capture.headers.emplace_back("content-length", std::to_string(body.size()));
  const auto messages = BuildProcessingRequests(capture);
  ASSERT_GE(messages.size(), 4u);  // headers and four chunks
  ExtProcSession a(*env.scheduler, env.pool, options, &stats), b(*env.scheduler, env.pool, options, &stats);
  std::vector<std::string> out_a, out_b;
  for (size_t i = 0; i + 1 < messages.size(); ++i) ASSERT_TRUE(a.OnMessage(messages[i], out_a).ok()) << i;
  EXPECT_TRUE(out_a.empty());
  // a reserved its declared length (and the parser's padding) at its first chunk.
  EXPECT_GE(budget->used(), body.size());
  const uint64_t held_by_a = budget->used();
  // b cannot reserve its length; its chunks are held as they come until one does not fit.
  for (size_t i = 0; i < messages.size() && out_b.empty(); ++i) ASSERT_TRUE(b.OnMessage(messages[i], out_b).ok()) << i;
  const auto rb = Decode(out_b);
  ExpectImmediate(rb, 429, "ResourceExhausted");
  EXPECT_EQ(SetHeader(rb[0].immediate_response().headers(), kRequestDroppedReasonHeader),
            std::string(kDroppedBufferBudget));
  EXPECT_TRUE(b.finished());
  EXPECT_EQ(stats.budget_rejected.load(), 1);
  EXPECT_EQ(budget->used(), held_by_a);  // b gave back what it held
  ASSERT_TRUE(a.OnMessage(messages.back(), out_a).ok());
  const auto ra = Decode(out_a);
  ASSERT_GE(ra.size(), 2u);
  EXPECT_TRUE(ra[0].has_request_headers());
  EXPECT_EQ(budget->used(), 0u);  // picked: the body is gone
  EXPECT_LE(budget->peak(), 5000u);

  // A content-length far past the budget reserves nothing: the body is held as it comes.
  HttpRequestCapture claims = ChatCapture(body, 1000);
  claims.headers.emplace_back("content-length", "999999999");
  ExtProcSession c(*env.scheduler, env.pool, options, &stats);
  const auto rc = Decode(Feed(c, BuildProcessingRequests(claims)));
  ASSERT_GE(rc.size(), 2u);
  EXPECT_TRUE(rc[0].has_request_headers());
  EXPECT_EQ(budget->used(), 0u);
}

TEST(ExtProcSessionTest, ResponsePastTheBufferBudgetKeepsNothingMore) {
  SchedulerEnv env({Ep("10.0.0.1:8000")});
  auto budget = std::make_shared<BufferBudget>(4096);
  ExtProcOptions options;
  options.buffer_budget = budget;
  ExtProcStats stats;
  ExtProcSession s(*env.scheduler, env.pool, options, &stats);
  ASSERT_EQ(Decode(Feed(s, BuildProcessingRequests(ChatCapture(ChatBody("m", "hello"))))).size(), 2u);
  const auto headers = BuildResponseMessages(200, JsonHeaders(), "x", "10.0.0.1:8000");
  Feed(s, {headers[0]});
  std::string echoed;
  for (int i = 0; i < 4; ++i) {
    pb::ProcessingRequest m;
    m.mutable_response_body()->set_body(std::string(1500, static_cast<char>('a' + i)));
    m.mutable_response_body()->set_end_of_stream(i == 3);
    for (const auto& r : Decode(Feed(s, m))) echoed += Streamed(r).body();
    EXPECT_LE(budget->used(), 4096u) << i;
  }
  // Every byte still goes back to the gateway; only the copy kept for usage stopped.
  EXPECT_EQ(echoed.size(), 6000u);
  EXPECT_EQ(stats.budget_response_dropped.load(), 1);
  EXPECT_EQ(budget->used(), 0u);
}

TEST(ExtProcSessionTest, UnparsableBodyIs400NamingTheJsonPath) {
  SchedulerEnv env({Ep("10.0.0.1:8000")});
  struct Case {
    const char* name;
    std::string body;
    std::string expect_in_message;
  };
  const Case cases[] = {
      {"wrong type", R"({"model":"m","messages":[{"role":"user","content":5}]})", "messages[0].content"},
      {"model not a string", R"({"model":7,"messages":[{"role":"user","content":"x"}]})", "model"},
      {"syntax", R"({"model":"m",)", "invalid JSON"},
      {"not an object", R"([1,2])", "JSON object"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ExtProcOptions options;
    ExtProcStats stats;
    ExtProcSession s(*env.scheduler, env.pool, options, &stats);
    const auto rs = Decode(Feed(s, BuildProcessingRequests(ChatCapture(c.body))));
    ExpectImmediate(rs, 400, "BadRequest");
    if (rs.empty()) continue;
    EXPECT_NE(rs[0].immediate_response().body().find(c.expect_in_message), std::string::npos)
        << rs[0].immediate_response().body();
    ASSERT_NE(s.result(), nullptr);
    EXPECT_EQ(s.result()->status, 400);
    EXPECT_EQ(s.request(), nullptr);
    EXPECT_EQ(stats.outcome_400.load(), 1);
  }
}

// Issue #41: an operator whose gateway does not set these headers can stop clients from choosing
// their own priority or model. Trusted (the default, as the reference), both take effect.
TEST(ExtProcSessionTest, UntrustedObjectiveAndRewriteHeadersAreIgnoredAndCounted) {
  SchedulerEnv env({Ep("10.0.0.1:8000")});
  for (const bool trusted : {true, false}) {
    SCOPED_TRACE(trusted);
    ExtProcOptions options;
    options.objective_priorities = {{"interactive", 5}};
    options.trust_objective_header = trusted;
    options.trust_model_rewrite_header = trusted;
    ExtProcStats stats;
    ExtProcSession s(*env.scheduler, env.pool, options, &stats);
    const std::string body = ChatBody("m", "hello");
    HttpRequestCapture capture = ChatCapture(body);
    capture.headers.emplace_back(std::string(kObjectiveHeader), "interactive");
    capture.headers.emplace_back(std::string(kLlmdModelNameRewriteHeader), "expensive-model");
    const auto rs = Decode(Feed(s, BuildProcessingRequests(capture)));
    ASSERT_EQ(rs.size(), 2u);
    ASSERT_NE(s.request(), nullptr);
    EXPECT_EQ(s.request()->priority, trusted ? 5 : 0);
    EXPECT_EQ(s.request()->model, trusted ? "expensive-model" : "m");
    const std::string forwarded = Streamed(rs[1]).body();
    EXPECT_EQ(forwarded == body, !trusted) << forwarded;
    EXPECT_EQ(stats.untrusted_headers_ignored.load(), trusted ? 0 : 2);
  }
}

TEST(ExtProcSessionTest, SheddableObjectiveOnSaturatedPoolIs429) {
  SchedulerEnv env({Ep("10.0.0.1:8000", 10, 0.9), Ep("10.0.0.2:8000", 6, 0.5)});
  ExtProcOptions options;
  options.objective_priorities = {{"batch", -1}, {"interactive", 5}};
  struct Case {
    const char* objective;
    int status;
    int priority;
  };
  for (const Case& c : {Case{"batch", 429, -1}, Case{"interactive", 200, 5}, Case{"unknown", 200, 0}}) {
    SCOPED_TRACE(c.objective);
    ExtProcStats stats;
    ExtProcSession s(*env.scheduler, env.pool, options, &stats);
    HttpRequestCapture capture = ChatCapture(ChatBody("m", "summarize"));
    capture.headers.emplace_back(std::string(kObjectiveHeader), c.objective);
    const auto rs = Decode(Feed(s, BuildProcessingRequests(capture)));
    ASSERT_NE(s.request(), nullptr);
    EXPECT_EQ(s.request()->priority, c.priority);
    if (c.status == 429) {
      ExpectImmediate(rs, 429, "ResourceExhausted");
      EXPECT_NE(rs[0].immediate_response().body().find("sheddable"), std::string::npos);
      EXPECT_EQ(stats.outcome_429.load(), 1);
    } else {
      ASSERT_EQ(rs.size(), 2u);
      EXPECT_TRUE(rs[0].has_request_headers());
    }
  }
}

TEST(ExtProcSessionTest, BodylessRequestIsAnsweredAtOnceWithARandomCandidate) {
  SchedulerEnv env({Ep("10.0.0.1:8000"), Ep("10.0.0.2:8000"), Ep("10.0.0.3:8000")});
  ExtProcOptions options;
  ExtProcStats stats;
  HttpRequestCapture capture;
  capture.method = "GET";
  capture.path = "/v1/models";
  const auto messages = BuildProcessingRequests(capture);
  ASSERT_EQ(messages.size(), 1u);
  std::set<std::string> seen;
  for (int i = 0; i < 40; ++i) {
    ExtProcSession s(*env.scheduler, env.pool, options, &stats);
    const auto rs = Decode(Feed(s, messages));
    ASSERT_EQ(rs.size(), 1u);
    ASSERT_TRUE(rs[0].has_request_headers());
    const auto& common = rs[0].request_headers().response();
    EXPECT_TRUE(common.clear_route_cache());
    const auto dest = SetHeader(common.header_mutation(), kDestinationEndpointHeader);
    ASSERT_TRUE(dest.has_value());
    EXPECT_EQ(MetadataDestination(rs[0]), dest);
    EXPECT_FALSE(SetHeader(common.header_mutation(), "content-length").has_value());
    seen.insert(*dest);
    ASSERT_NE(s.result(), nullptr);
    EXPECT_EQ(s.result()->candidates, 3);
  }
  for (const std::string& d : seen) EXPECT_TRUE(d == "10.0.0.1:8000" || d == "10.0.0.2:8000" || d == "10.0.0.3:8000") << d;
  EXPECT_GT(seen.size(), 1u) << "a random candidate, not a scored one";
  EXPECT_EQ(stats.outcome_200.load(), 40);
  EXPECT_EQ(stats.requests_in_flight.load(), 0) << "no load is recorded without a body";

  {
    SCOPED_TRACE("with subset");
    capture.subset = std::vector<std::string>{"10.0.0.3"};
    ExtProcSession s(*env.scheduler, env.pool, options);
    const auto rs = Decode(Feed(s, BuildProcessingRequests(capture)));
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_EQ(MetadataDestination(rs[0]), "10.0.0.3:8000");
  }
  {
    SCOPED_TRACE("empty pool");
    EndpointSnapshot empty;
    capture.subset.reset();
    ExtProcSession s(*env.scheduler, empty, options);
    ExpectImmediate(Decode(Feed(s, BuildProcessingRequests(capture))), 503, "ServiceUnavailable");
  }
}

TEST(ExtProcSessionTest, MaxNumOfEndpointsGivesACommaList) {
  SchedulerEnv env({Ep("10.0.0.1:8000", 3), Ep("10.0.0.2:8000", 1), Ep("10.0.0.3:8000", 2), Ep("10.0.0.4:8000", 9)}, R"(
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: max-score-picker
  parameters: {maxNumOfEndpoints: 2}
)");
  ExtProcOptions options;
  ExtProcStats stats;
  ExtProcSession s(*env.scheduler, env.pool, options, &stats);
  const auto rs = Decode(Feed(s, BuildProcessingRequests(ChatCapture(ChatBody("m", "x")))));
  ASSERT_EQ(rs.size(), 2u);
  const auto dest = SetHeader(rs[0].request_headers().response().header_mutation(), kDestinationEndpointHeader);
  EXPECT_EQ(dest, "10.0.0.2:8000,10.0.0.3:8000");
  EXPECT_EQ(MetadataDestination(rs[0]), dest);
  // The load goes to the primary only.
  EXPECT_EQ(env.scheduler->Inflight("10.0.0.2:8000").first, 1);
  EXPECT_EQ(env.scheduler->Inflight("10.0.0.3:8000").first, 0);
  // The gateway fell back to the second endpoint: a served mismatch.
  const auto echoed = Decode(Feed(s, BuildResponseMessages(200, JsonHeaders(), "{}", "10.0.0.3:8000")));
  EXPECT_EQ(echoed.size(), 2u);
  EXPECT_EQ(s.served(), "10.0.0.3:8000");
  EXPECT_EQ(stats.served_mismatch.load(), 1);
  EXPECT_EQ(env.scheduler->Inflight("10.0.0.2:8000").first, 0);
}

// ---------------------------------------------------------------------------------------------
// Response path.

struct Picked {
  explicit Picked(std::vector<Endpoint> pool = {Ep("10.0.0.1:8000", 4, 0.4), Ep("10.0.0.2:8000", 0, 0.1)})
      : env(std::move(pool)), session(std::make_unique<ExtProcSession>(*env.scheduler, env.pool, options, &stats)) {
    const auto rs = Decode(Feed(*session, BuildProcessingRequests(ChatCapture(ChatBody("m", "tell me a story")))));
    EXPECT_EQ(rs.size(), 2u);
    EXPECT_NE(session->result(), nullptr);
    if (session->result()) primary = *session->result()->primary();
  }
  SchedulerEnv env;
  ExtProcOptions options;
  ExtProcStats stats;
  std::unique_ptr<ExtProcSession> session;
  std::string primary;
};

TEST(ExtProcSessionTest, ResponseIsEchoedAndUsageCounted) {
  Picked p;
  ASSERT_EQ(p.primary, "10.0.0.2:8000");
  const std::string body =
      R"({"id":"c1","object":"chat.completion","choices":[],)"
      R"("usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18,"prompt_tokens_details":{"cached_tokens":4}}})";
  const auto messages = BuildResponseMessages(200, JsonHeaders(), body, p.primary);
  ASSERT_EQ(messages.size(), 2u);

  const auto headers = Decode(Feed(*p.session, {messages[0]}));
  ASSERT_EQ(headers.size(), 1u);
  ASSERT_TRUE(headers[0].has_response_headers());
  EXPECT_TRUE(headers[0].response_headers().has_response());
  EXPECT_EQ(headers[0].response_headers().response().header_mutation().set_headers_size(), 0) << "no debug headers";
  EXPECT_EQ(headers[0].response_headers().response().status(), pb::CommonResponse::CONTINUE);
  EXPECT_EQ(p.session->served(), p.primary);
  EXPECT_EQ(p.stats.requests_in_flight.load(), 1) << "the response has not ended yet";

  const auto echoed = Decode(Feed(*p.session, {messages[1]}));
  ASSERT_EQ(echoed.size(), 1u);
  ASSERT_TRUE(echoed[0].has_response_body());
  EXPECT_EQ(Streamed(echoed[0]).body(), body);
  EXPECT_TRUE(Streamed(echoed[0]).end_of_stream());
  EXPECT_EQ(p.stats.prompt_tokens.load(), 11);
  EXPECT_EQ(p.stats.completion_tokens.load(), 7);
  EXPECT_EQ(p.stats.cached_tokens.load(), 4);
  EXPECT_EQ(p.stats.served_mismatch.load(), 0);
  EXPECT_EQ(p.stats.requests_in_flight.load(), 0);
}

TEST(ExtProcSessionTest, ResponseBodyChunksAreEchoedWithTheirEndOfStream) {
  Picked q;
  auto headers = BuildResponseMessages(200, JsonHeaders(), "x", q.primary);
  Feed(*q.session, {headers[0]});
  const std::string big(70000, 'b');
  struct Chunk {
    std::string body;
    bool eos;
  };
  const Chunk chunks[] = {{big, false}, {"middle", false}, {"", false}, {"last", true}};
  std::string reassembled;
  std::vector<bool> eos_flags;
  for (const Chunk& c : chunks) {
    pb::ProcessingRequest m;
    m.mutable_response_body()->set_body(c.body);
    m.mutable_response_body()->set_end_of_stream(c.eos);
    for (const auto& r : Decode(Feed(*q.session, m))) {
      ASSERT_TRUE(r.has_response_body());
      EXPECT_LE(Streamed(r).body().size(), kBodyChunkBytes);
      reassembled += Streamed(r).body();
      eos_flags.push_back(Streamed(r).end_of_stream());
    }
  }
  EXPECT_EQ(reassembled, big + "middle" + "last");
  // 70,000 bytes go back as 62,000 + 8,000; the empty chunk is echoed as one empty chunk.
  EXPECT_EQ(eos_flags, (std::vector<bool>{false, false, false, false, true}));
  EXPECT_EQ(q.stats.requests_in_flight.load(), 0);
}

// The estimated-ttft-scorer's calibration learns from a streamed response's first body chunk:
// the time since the pick, less the step overhead, over the pick's uncached tokens. A response
// whose body comes whole (not streamed) times nothing.
TEST(ExtProcSessionTest, StreamedFirstChunkCalibratesThePrefillRate) {
  const std::string yaml = R"(apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: approx-prefix-cache-producer
- type: estimated-ttft-scorer
  parameters: {calibratePrefillRate: true, calibrationMinSamples: 1, calibrationMinTokens: 1, stepOverheadMs: 6}
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: estimated-ttft-scorer
  - pluginRef: max-score-picker
)";
  SchedulerEnv env({Ep("10.0.0.1:8000", 0, 0.1)}, yaml);
  ExtProcOptions options;
  ExtProcStats stats;
  // What the scorer says about a request, as a what-if pick (nothing recorded).
  auto detail = [&](const std::string& body) {
    auto req = ParseOpenAIRequest("/v1/chat/completions", body);
    EXPECT_TRUE(req.ok());
    const PickResult r = env.scheduler->Pick(*req, *env.pool.Snapshot(), {.trace = true, .record = false});
    for (const ProfileTrace& p : r.profiles)
      for (const EndpointScoreTrace& e : p.scores)
        for (const ScorerTrace& t : e.scorers)
          if (t.type == "estimated-ttft-scorer") return t.detail;
    return std::string();
  };
  // One request through a session; its first body chunk arrives `after_us` after the pick.
  // Returns what the scorer estimated for it just before.
  auto serve = [&](const std::string& body, bool stream, int64_t after_us) {
    const std::string explained = detail(body);
    ExtProcSession s(*env.scheduler, env.pool, options, &stats);
    Feed(s, BuildProcessingRequests(ChatCapture(body)));
    EXPECT_NE(s.result(), nullptr);
    env.clock.Advance(after_us);
    Feed(s, BuildResponseMessages(200, {{"content-type", stream ? "text/event-stream" : "application/json"}}, "data: {}\n\n",
                                  "10.0.0.1:8000"));
    env.clock.Advance(10'000'000);  // the scorer's fluid queue drains before the next request
    return explained;
  };
  const std::string probe = ChatBody("m", "a different question entirely");
  // Not streamed: nothing timed.
  serve(ChatBody("m", std::string(400, 'q')), false, 56'000);
  EXPECT_NE(detail(probe).find("at 20000 tokens/s (configured; 0 of 1 responses timed)"), std::string::npos) << detail(probe);
  // Streamed, first chunk 56 ms after the pick: (56 - 6) ms for the request's uncached tokens.
  const std::string before = serve(ChatBody("m", std::string(400, 'r'), true), true, 56'000);
  const size_t at = before.find(" uncached of ");
  ASSERT_NE(at, std::string::npos) << before;
  const size_t start = before.rfind(' ', at - 1) + 1;
  const double uncached = std::stod(before.substr(start, at - start));
  const std::string after = detail(probe);
  char want[96];
  std::snprintf(want, sizeof want, "at %.0f tokens/s (calibrated from 1 responses)", std::round(uncached / 0.050));
  EXPECT_NE(after.find(want), std::string::npos) << after << " / want " << want;
}

TEST(ExtProcSessionTest, UsageFromJsonAndSse) {
  struct Case {
    const char* name;
    std::string content_type;
    std::vector<std::string> chunks;
    int64_t prompt, completion, cached;
  };
  const Case cases[] = {
      {"chat json", "application/json",
       {R"({"object":"chat.completion","usage":{"prompt_tokens":3,"completion_tokens":2}})"}, 3, 2, 0},
      {"responses json", "application/json",
       {R"({"object":"response","usage":{"input_tokens":9,"output_tokens":4,"input_tokens_details":{"cached_tokens":8}}})"}, 9, 4,
       8},
      {"sse", "text/event-stream",
       {"data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n",
        "data: {\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":3}}\n\n",
        "data: [DONE]\n\n"},
       20, 3, 0},
      {"sse usage split across chunks", "text/event-stream",
       {"data: {\"choices\":[],\"usage\":{\"prompt_", "tokens\":5,\"completion_tokens\":6}}\n\ndata: [DONE]\n\n"}, 5, 6, 0},
      {"responses sse", "text/event-stream; charset=utf-8",
       {"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n"},
       12, 1, 0},
      {"no usage", "application/json", {R"({"object":"chat.completion"})"}, 0, 0, 0},
      // GIE's own test: one event per chunk, no line ends, so the joined stream is one line.
      {"sse one event per chunk without line ends", "text/event-stream",
       {"data: {}", "data: {\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":10,\"total_tokens\":17}}"}, 7, 10, 0},
      {"sse events without line ends, usage mid-stream", "text/event-stream",
       {"data: {\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":1}}", "data: {\"choices\":[]}", "data: [DONE]"}, 4, 1,
       0},
      {"sse event spanning chunks without line ends", "text/event-stream",
       {"data: {\"choices\":[]}data: {\"usage\":{\"prompt_tok", "ens\":8,\"completion_tokens\":2}}"}, 8, 2, 0},
      {"sse with }data: inside a string", "text/event-stream",
       {"data: {\"note\":\"a}data: b\",\"usage\":{\"prompt_tokens\":6,\"completion_tokens\":5}}\n\n"}, 6, 5, 0},
      // Token counts that are not whole non-negative numbers below 2^53 count as absent (a float
      // beyond the int64 range was undefined behaviour in get<int64_t>()).
      {"float token counts", "application/json",
       {R"({"usage":{"prompt_tokens":12.0,"completion_tokens":1e300,"prompt_tokens_details":{"cached_tokens":-3}}})"}, 12, 0,
       0},
      {"fractional and huge token counts", "application/json",
       {R"({"usage":{"prompt_tokens":2.5,"completion_tokens":18446744073709551615}})"}, 0, 0, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Picked p;
    Feed(*p.session, {BuildResponseMessages(200, {{"content-type", c.content_type}}, "x", p.primary)[0]});
    for (size_t i = 0; i < c.chunks.size(); ++i) {
      pb::ProcessingRequest m;
      m.mutable_response_body()->set_body(c.chunks[i]);
      m.mutable_response_body()->set_end_of_stream(i + 1 == c.chunks.size());
      Feed(*p.session, m);
    }
    EXPECT_EQ(p.stats.prompt_tokens.load(), c.prompt);
    EXPECT_EQ(p.stats.completion_tokens.load(), c.completion);
    EXPECT_EQ(p.stats.cached_tokens.load(), c.cached);
  }
}

TEST(ExtProcSessionTest, ServedEndpointIsRecordedAndMismatchCounted) {
  Picked p;
  Feed(*p.session, BuildResponseMessages(200, JsonHeaders(), "{}", "10.0.0.1:8000"));
  EXPECT_EQ(p.session->served(), "10.0.0.1:8000");
  EXPECT_NE(p.primary, "10.0.0.1:8000");
  EXPECT_EQ(p.stats.served_mismatch.load(), 1);

  Picked same;
  Feed(*same.session, BuildResponseMessages(200, JsonHeaders(), "{}", same.primary));
  EXPECT_EQ(same.stats.served_mismatch.load(), 0);

  Picked none;
  Feed(*none.session, BuildResponseMessages(200, JsonHeaders(), "{}"));
  EXPECT_EQ(none.session->served(), "");
  EXPECT_EQ(none.stats.served_mismatch.load(), 0);
}

TEST(ExtProcSessionTest, InflightLoadIsReleasedAtResponseEnd) {
  struct Case {
    const char* name;
    std::function<std::vector<std::string>(const std::string& served)> end;
  };
  const Case cases[] = {
      {"response body end_of_stream",
       [](const std::string& served) { return BuildResponseMessages(200, JsonHeaders(), "{}", served); }},
      {"response headers end_of_stream",
       [](const std::string& served) { return BuildResponseMessages(204, {}, "", served); }},
      {"response trailers",
       [](const std::string& served) {
         auto m = BuildResponseMessages(200, JsonHeaders(), "", served);
         pb::ProcessingRequest h;
         EXPECT_TRUE(h.ParseFromString(m[0]));
         h.mutable_response_headers()->set_end_of_stream(false);
         pb::ProcessingRequest body;
         body.mutable_response_body()->set_body("partial");
         pb::ProcessingRequest trailers;
         trailers.mutable_response_trailers();
         return std::vector<std::string>{h.SerializeAsString(), body.SerializeAsString(), trailers.SerializeAsString()};
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Picked p({Ep("10.0.0.2:8000")});
    // Another request holds load on the same endpoint; it must survive this one's release.
    ExtProcSession other(*p.env.scheduler, p.env.pool, p.options, &p.stats);
    Feed(other, BuildProcessingRequests(ChatCapture(ChatBody("m", "another one"))));
    const auto before = p.env.scheduler->Inflight("10.0.0.2:8000");
    EXPECT_EQ(before.first, 2);
    EXPECT_GT(p.session->result()->load_tokens, 0);
    EXPECT_EQ(p.stats.requests_in_flight.load(), 2);

    const auto rs = Decode(Feed(*p.session, c.end(p.primary)));
    EXPECT_FALSE(rs.empty());
    auto after = p.env.scheduler->Inflight("10.0.0.2:8000");
    EXPECT_EQ(after.first, 1);
    EXPECT_EQ(after.second, before.second - p.session->result()->load_tokens);
    EXPECT_EQ(p.stats.requests_in_flight.load(), 1);
    p.session.reset();  // no second release
    after = p.env.scheduler->Inflight("10.0.0.2:8000");
    EXPECT_EQ(after.first, 1);
    EXPECT_EQ(p.stats.requests_in_flight.load(), 1);
  }
}

TEST(ExtProcSessionTest, InflightLoadIsReleasedWhenTheSessionIsDestroyed) {
  Picked p({Ep("10.0.0.2:8000")});
  EXPECT_EQ(p.env.scheduler->Inflight("10.0.0.2:8000").first, 1);
  // The response started but never finished (the gateway went away).
  Feed(*p.session, {BuildResponseMessages(200, JsonHeaders(), "x", p.primary)[0]});
  EXPECT_EQ(p.env.scheduler->Inflight("10.0.0.2:8000").first, 1);
  p.session.reset();
  EXPECT_EQ(p.env.scheduler->Inflight("10.0.0.2:8000"), std::make_pair(int64_t{0}, int64_t{0}));
  EXPECT_EQ(p.stats.requests_in_flight.load(), 0);
}

TEST(ExtProcSessionTest, RequestTrailersEndABodyWithoutEndOfStream) {
  SchedulerEnv env({Ep("10.0.0.1:8000")});
  ExtProcOptions options;
  ExtProcSession s(*env.scheduler, env.pool, options);
  auto messages = BuildProcessingRequests(ChatCapture(ChatBody("m", "x")));
  pb::ProcessingRequest body;
  ASSERT_TRUE(body.ParseFromString(messages[1]));
  body.mutable_request_body()->set_end_of_stream(false);
  pb::ProcessingRequest trailers;
  trailers.mutable_request_trailers();
  EXPECT_TRUE(Feed(s, {messages[0], body.SerializeAsString()}).empty());
  const auto rs = Decode(Feed(s, trailers));
  ASSERT_EQ(rs.size(), 3u);
  EXPECT_TRUE(rs[0].has_request_headers());
  EXPECT_TRUE(rs[1].has_request_body());
  EXPECT_TRUE(Streamed(rs[1]).end_of_stream());
  EXPECT_TRUE(rs[2].has_request_trailers());
}

TEST(ExtProcSessionTest, ProtocolErrorsAreInvalidArgument) {
  SchedulerEnv env({Ep("10.0.0.1:8000")});
  ExtProcOptions options;
  const auto messages = BuildProcessingRequests(ChatCapture(ChatBody("m", "x")));
  struct Case {
    const char* name;
    std::vector<std::string> before;
    std::string bad;
  };
  const Case cases[] = {
      {"body before headers", {}, messages[1]},
      {"headers twice", {messages[0]}, messages[0]},
      {"garbage bytes", {}, std::string("\xff\xff\xff\xff\xff\xff", 6)},
      {"text", {}, "not a protobuf at all"},
      {"truncated field", {}, std::string("\x12\x10\x0a", 3)},
      {"no request set", {}, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ExtProcSession s(*env.scheduler, env.pool, options);
    EXPECT_TRUE(Feed(s, c.before).empty());
    std::vector<std::string> out;
    const absl::Status st = s.OnMessage(c.bad, out);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_TRUE(out.empty());
  }
}

// ---------------------------------------------------------------------------------------------
// Wire compatibility: field numbers of gie-epp.md section 1.2, read with UnknownFieldSet.

TEST(ExtProcWireTest, PickResponsesUseThePublicFieldNumbers) {
  SchedulerEnv env({Ep("10.0.0.7:8000")});
  ExtProcOptions options;
  ExtProcSession s(*env.scheduler, env.pool, options);
  const std::string body = ChatBody("m", std::string(100000, 'w'));
  const auto out = Feed(s, BuildProcessingRequests(ChatCapture(body, 40000)));
  ASSERT_EQ(out.size(), 3u);  // headers + 62,000 + the rest

  // ProcessingResponse{request_headers=1, dynamic_metadata=8}
  Wire top(out[0]);
  ASSERT_TRUE(top.ok());
  EXPECT_EQ(top.Numbers(), (std::vector<int>{1, 8}));
  // HeadersResponse.response=1 -> CommonResponse{header_mutation=2, clear_route_cache=5}
  Wire common = top.Sub(1).Sub(1);
  EXPECT_EQ(common.Varint(5), 1u);
  Wire mutation = common.Sub(2);
  EXPECT_FALSE(mutation.Has(2)) << "no remove_headers";
  // HeaderMutation.set_headers=1 -> HeaderValueOption.header=1 -> HeaderValue{key=1, raw_value=3}
  std::optional<std::string> dest;
  for (const Wire& option : mutation.Subs(1)) {
    Wire hv = option.Sub(1);
    if (hv.Bytes(1) == kDestinationEndpointHeader) {
      dest = hv.Bytes(3);
      EXPECT_FALSE(hv.Has(2)) << "the value travels in raw_value";
    }
  }
  ASSERT_EQ(dest, "10.0.0.7:8000");
  // dynamic_metadata: Struct.fields=1 map entry {key=1 "envoy.lb", value=2 Value.struct_value=5
  //   -> Struct.fields=1 {key=1 "x-gateway-destination-endpoint", value=2 Value.string_value=3}}
  Wire metadata = top.Sub(8);
  std::optional<Wire> ns = metadata.MapValue(1, "envoy.lb");
  ASSERT_TRUE(ns.has_value());
  std::optional<Wire> value = ns->Sub(5).MapValue(1, "x-gateway-destination-endpoint");
  ASSERT_TRUE(value.has_value());
  EXPECT_EQ(value->Bytes(3), *dest);

  // ProcessingResponse.request_body=3 -> BodyResponse.response=1 -> CommonResponse.body_mutation=3
  //   -> BodyMutation.streamed_response=3 -> StreamedBodyResponse{body=1, end_of_stream=2}
  std::string reassembled;
  for (size_t i = 1; i < out.size(); ++i) {
    SCOPED_TRACE(i);
    Wire r(out[i]);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r.Numbers(), (std::vector<int>{3}));
    Wire streamed = r.Sub(3).Sub(1).Sub(3).Sub(3);
    reassembled += streamed.Bytes(1);
    if (i + 1 == out.size()) {
      EXPECT_EQ(streamed.Varint(2), 1u);
    } else {
      EXPECT_FALSE(streamed.Has(2));
    }
  }
  EXPECT_EQ(reassembled, body);
}

TEST(ExtProcWireTest, ImmediateResponsesUseThePublicFieldNumbers) {
  SchedulerEnv env({Ep("10.0.0.7:8000")});
  ExtProcOptions options;
  options.max_request_bytes = 200;
  struct Case {
    const char* name;
    std::string body;
    std::optional<std::vector<std::string>> subset;
    uint64_t code;
  };
  const Case cases[] = {
      {"503", ChatBody("m", "x"), std::vector<std::string>{}, 503},
      {"400", "{", std::nullopt, 400},
      {"413", ChatBody("m", std::string(300, 'x')), std::nullopt, 413},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ExtProcSession s(*env.scheduler, env.pool, options);
    HttpRequestCapture capture = ChatCapture(c.body);
    capture.subset = c.subset;
    const auto out = Feed(s, BuildProcessingRequests(capture));
    ASSERT_EQ(out.size(), 1u);
    // ProcessingResponse.immediate_response=7 -> ImmediateResponse{status=1 HttpStatus.code=1,
    //   headers=2, body=3, details=5}
    Wire top(out[0]);
    ASSERT_TRUE(top.ok());
    EXPECT_EQ(top.Numbers(), (std::vector<int>{7}));
    Wire ir = top.Sub(7);
    EXPECT_EQ(ir.Sub(1).Varint(1), c.code);
    EXPECT_EQ(ir.Bytes(3).rfind("inference error: ", 0), 0u);
    EXPECT_FALSE(ir.Bytes(5).empty());
  }
}

TEST(ExtProcWireTest, ResponsePathUsesThePublicFieldNumbers) {
  Picked p;
  const auto out = Feed(*p.session, BuildResponseMessages(200, JsonHeaders(), "hello", p.primary));
  ASSERT_EQ(out.size(), 2u);
  Wire headers(out[0]);
  EXPECT_EQ(headers.Numbers(), (std::vector<int>{2}));  // response_headers=2
  EXPECT_TRUE(headers.Sub(2).Has(1));                    // HeadersResponse.response=1
  Wire body(out[1]);
  EXPECT_EQ(body.Numbers(), (std::vector<int>{4}));  // response_body=4
  Wire streamed = body.Sub(4).Sub(1).Sub(3).Sub(3);
  EXPECT_EQ(streamed.Bytes(1), "hello");
  EXPECT_EQ(streamed.Varint(2), 1u);

  pb::ProcessingRequest trailers;
  trailers.mutable_response_trailers();
  Picked q;
  const auto t = Feed(*q.session, trailers);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(Wire(t[0]).Numbers(), (std::vector<int>{6}));  // response_trailers=6
}

TEST(ExtProcWireTest, BuiltRequestsUseThePublicFieldNumbers) {
  HttpRequestCapture capture = ChatCapture(ChatBody("m", "x"));
  capture.subset = std::vector<std::string>{"10.0.0.1:8000", "10.0.0.2:8000"};
  const auto messages = BuildProcessingRequests(capture);
  ASSERT_EQ(messages.size(), 2u);
  // ProcessingRequest{request_headers=2 HttpHeaders{headers=1 HeaderMap{headers=1 HeaderValue}},
  //   metadata_context=8 Metadata{filter_metadata=1 map<string, Struct>}}
  Wire headers(messages[0]);
  ASSERT_TRUE(headers.ok());
  EXPECT_EQ(headers.Numbers(), (std::vector<int>{2, 8}));
  std::map<std::string, std::string> seen;
  for (const Wire& hv : headers.Sub(2).Sub(1).Subs(1)) seen[hv.Bytes(1)] = hv.Bytes(3);
  EXPECT_EQ(seen[":path"], "/v1/chat/completions");
  EXPECT_EQ(seen[":method"], "POST");
  EXPECT_FALSE(headers.Sub(2).Has(3)) << "end_of_stream false: a body follows";
  std::optional<Wire> hint = headers.Sub(8).MapValue(1, "envoy.lb.subset_hint");
  ASSERT_TRUE(hint.has_value());
  std::optional<Wire> list = hint->MapValue(1, "x-gateway-destination-endpoint-subset");
  ASSERT_TRUE(list.has_value());
  std::vector<std::string> entries;
  for (const Wire& v : list->Sub(6).Subs(1)) entries.push_back(v.Bytes(3));  // list_value=6, values=1
  EXPECT_EQ(entries, *capture.subset);
  // request_body=4 HttpBody{body=1, end_of_stream=2}
  Wire body(messages[1]);
  EXPECT_EQ(body.Sub(4).Bytes(1), capture.body);
  EXPECT_EQ(body.Sub(4).Varint(2), 1u);
}

// Hand-encoded messages, as a gateway built from other generated code would send them.
namespace hand {
std::string HeaderValue(std::string_view k, std::string_view v) { return enc::LenField(1, k) + enc::LenField(3, v); }
std::string StringValue(std::string_view s) { return enc::LenField(3, s); }
std::string ListValue(const std::vector<std::string>& items) {
  std::string list;
  for (const auto& i : items) list += enc::LenField(1, StringValue(i));
  return enc::LenField(6, list);
}
std::string Struct(std::string_view key, const std::string& value) {
  return enc::LenField(1, enc::LenField(1, key) + enc::LenField(2, value));
}
// Metadata{filter_metadata=1 {ns: Struct{key: value}}}
std::string MetadataContext(std::string_view ns, std::string_view key, const std::string& value) {
  return enc::LenField(8, enc::LenField(1, enc::LenField(1, ns) + enc::LenField(2, Struct(key, value))));
}
}  // namespace hand

TEST(ExtProcWireTest, HandEncodedRequestsAreUnderstood) {
  SchedulerEnv env({Ep("10.0.0.1:8000", 0, 0.0), Ep("10.0.0.2:8000", 3, 0.5), Ep("10.0.0.3:8000", 4, 0.6)});
  struct Case {
    const char* name;
    std::string subset_value;  // an encoded google.protobuf.Value
    std::set<std::string> allowed;
  };
  const Case cases[] = {
      {"list", hand::ListValue({"10.0.0.2:8000", "10.0.0.3:8000"}), {"10.0.0.2:8000", "10.0.0.3:8000"}},
      {"string", hand::StringValue("10.0.0.3:8000"), {"10.0.0.3:8000"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ExtProcOptions options;
    ExtProcStats stats;
    ExtProcSession s(*env.scheduler, env.pool, options, &stats);
    const std::string body = R"({"model":"m","prompt":"hand encoded"})";
    // HttpHeaders{headers=1 HeaderMap{headers=1 ...}}; end_of_stream=3 absent
    const std::string header_map = enc::LenField(1, hand::HeaderValue(":path", "/v1/completions")) +
                                   enc::LenField(1, hand::HeaderValue(":method", "POST")) +
                                   enc::LenField(1, hand::HeaderValue("content-type", "application/json"));
    const std::string request_headers =
        enc::LenField(2, enc::LenField(1, header_map)) +
        hand::MetadataContext("envoy.lb.subset_hint", "x-gateway-destination-endpoint-subset", c.subset_value) +
        // Fields this build does not know (protocol_config=11, observability_mode=10) are skipped.
        enc::LenField(11, enc::VarintField(1, 4) + enc::VarintField(2, 4)) + enc::VarintField(10, 0);
    // HttpBody{body=1, end_of_stream=2}, split in two.
    const std::string body1 = enc::LenField(4, enc::LenField(1, body.substr(0, 10)));
    const std::string body2 = enc::LenField(4, enc::LenField(1, body.substr(10)) + enc::VarintField(2, 1));
    const auto out = Feed(s, {request_headers, body1, body2});
    ASSERT_EQ(out.size(), 2u);
    Wire top(out[0]);
    std::string dest;
    for (const Wire& option : top.Sub(1).Sub(1).Sub(2).Subs(1))
      if (option.Sub(1).Bytes(1) == kDestinationEndpointHeader) dest = option.Sub(1).Bytes(3);
    EXPECT_TRUE(c.allowed.count(dest)) << dest;
    EXPECT_EQ(Wire(out[1]).Sub(3).Sub(1).Sub(3).Sub(3).Bytes(1), body);
    ASSERT_NE(s.request(), nullptr);
    EXPECT_EQ(s.request()->api, ApiKind::kCompletions);

    // Response path: response_headers=3 with the served endpoint in metadata_context, then
    // response_body=5 with end_of_stream.
    const std::string response_headers =
        enc::LenField(3, enc::LenField(1, enc::LenField(1, hand::HeaderValue(":status", "200")))) +
        hand::MetadataContext("envoy.lb", "x-gateway-destination-endpoint-served", hand::StringValue(dest));
    const std::string response_body = enc::LenField(5, enc::LenField(1, "done") + enc::VarintField(2, 1));
    const auto echoed = Feed(s, {response_headers, response_body});
    ASSERT_EQ(echoed.size(), 2u);
    EXPECT_EQ(s.served(), dest);
    EXPECT_EQ(Wire(echoed[0]).Numbers(), (std::vector<int>{2}));
    Wire streamed = Wire(echoed[1]).Sub(4).Sub(1).Sub(3).Sub(3);
    EXPECT_EQ(streamed.Bytes(1), "done");
    EXPECT_EQ(streamed.Varint(2), 1u);
    EXPECT_EQ(stats.served_mismatch.load(), 0);
    EXPECT_EQ(stats.requests_in_flight.load(), 0);
  }
}

TEST(ExtProcWireTest, HandEncodedBodylessRequestWithEmptySubsetIs503) {
  SchedulerEnv env({Ep("10.0.0.1:8000")});
  ExtProcOptions options;
  ExtProcSession s(*env.scheduler, env.pool, options);
  const std::string m =
      enc::LenField(2, enc::LenField(1, enc::LenField(1, hand::HeaderValue(":path", "/v1/models"))) + enc::VarintField(3, 1)) +
      hand::MetadataContext("envoy.lb.subset_hint", "x-gateway-destination-endpoint-subset", hand::ListValue({}));
  const auto out = Feed(s, {m});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(Wire(out[0]).Sub(7).Sub(1).Varint(1), 503u);
}

// P/D over ext_proc: the handler's x-prefiller-host-port is set in the request-headers response
// next to the destination, and when no prefill runs the gateway's own copy is removed (a client
// must not choose the prefill server).
TEST(ExtProcSessionTest, DisaggregatedPickSetsThePrefillerHeaderAndStripsInjectedOnes) {
  const std::string yaml =
      "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: prefill-filter\n- type: decode-filter\n"
      "- type: queue-scorer\n- type: disagg-profile-handler\n  parameters:\n    deciders:\n      prefill: pd\n"
      "- name: pd\n  type: prefix-based-pd-decider\n  parameters:\n    nonCachedTokens: 32\n"
      "schedulingProfiles:\n- name: prefill\n  plugins:\n  - pluginRef: prefill-filter\n  - pluginRef: queue-scorer\n"
      "- name: decode\n  plugins:\n  - pluginRef: decode-filter\n  - pluginRef: queue-scorer\n";
  Endpoint prefill = Ep("10.0.0.1:8000");
  prefill.labels["llm-d.ai/role"] = "prefill";
  Endpoint decode = Ep("10.0.0.2:8000");
  decode.labels["llm-d.ai/role"] = "decode";
  SchedulerEnv env({prefill, decode}, yaml);
  ASSERT_NE(env.scheduler, nullptr);
  ExtProcOptions options;

  auto exchange = [&](const std::string& content) {
    ExtProcSession s(*env.scheduler, env.pool, options, nullptr);
    HttpRequestCapture c = ChatCapture(ChatBody("m", content));
    c.headers.emplace_back("x-prefiller-host-port", "6.6.6.6:1");  // injected by the client
    std::vector<std::string> out;
    for (const std::string& m : BuildProcessingRequests(c)) EXPECT_TRUE(s.OnMessage(m, out).ok());
    std::vector<pb::ProcessingResponse> rs = Decode(out);
    EXPECT_FALSE(rs.empty());
    return rs.empty() ? pb::HeaderMutation() : rs[0].request_headers().response().header_mutation();
  };

  const pb::HeaderMutation long_prompt = exchange(std::string(1000, 'p'));
  EXPECT_EQ(SetHeader(long_prompt, kDestinationEndpointHeader), "10.0.0.2:8000");
  EXPECT_EQ(SetHeader(long_prompt, "x-prefiller-host-port"), "10.0.0.1:8000");
  std::vector<std::string> removed(long_prompt.remove_headers().begin(), long_prompt.remove_headers().end());
  EXPECT_EQ(removed, std::vector<std::string>{"x-encoder-hosts-ports"});

  const pb::HeaderMutation short_prompt = exchange("hi");
  EXPECT_EQ(SetHeader(short_prompt, kDestinationEndpointHeader), "10.0.0.2:8000");
  EXPECT_FALSE(SetHeader(short_prompt, "x-prefiller-host-port").has_value());
  removed.assign(short_prompt.remove_headers().begin(), short_prompt.remove_headers().end());
  EXPECT_EQ(removed, (std::vector<std::string>{"x-prefiller-host-port", "x-encoder-hosts-ports"}));
}

// A client's sidecar control headers never reach the model server, whatever the configuration
// (issue #41): with GIE's default profile no handler owns them, and they are still removed, each
// one counted; headers the client may send (x-request-id, anything else) are left alone.
TEST(ExtProcSessionTest, ClientSidecarControlHeadersAreRemovedWithAnyProfile) {
  SchedulerEnv env({Ep("10.0.0.1:8000"), Ep("10.0.0.2:8000")});
  ExtProcOptions options;
  ExtProcStats stats;
  ExtProcSession s(*env.scheduler, env.pool, options, &stats);
  HttpRequestCapture c = ChatCapture(ChatBody("m", "steer me"));
  c.headers.emplace_back("X-Prefiller-Host-Port", "169.254.169.254:80");
  c.headers.emplace_back("x-encoder-hosts-ports", "6.6.6.6:1,6.6.6.7:1");
  c.headers.emplace_back("x-data-parallel-host-port", "6.6.6.6:2");
  c.headers.emplace_back("x-custom", "kept");
  std::vector<std::string> out;
  for (const std::string& m : BuildProcessingRequests(c)) ASSERT_TRUE(s.OnMessage(m, out).ok());
  const std::vector<pb::ProcessingResponse> rs = Decode(out);
  ASSERT_FALSE(rs.empty());
  const pb::HeaderMutation& m = rs[0].request_headers().response().header_mutation();
  std::vector<std::string> removed(m.remove_headers().begin(), m.remove_headers().end());
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<std::string>{"x-data-parallel-host-port", "x-encoder-hosts-ports",
                                               "x-prefiller-host-port"}));
  EXPECT_FALSE(SetHeader(m, "x-prefiller-host-port").has_value());
  EXPECT_EQ(stats.stripped_control_headers.load(), 3);

  // Without them nothing is removed.
  ExtProcSession plain(*env.scheduler, env.pool, options, &stats);
  out.clear();
  for (const std::string& msg : BuildProcessingRequests(ChatCapture(ChatBody("m", "plain")))) ASSERT_TRUE(plain.OnMessage(msg, out).ok());
  const std::vector<pb::ProcessingResponse> prs = Decode(out);
  ASSERT_FALSE(prs.empty());
  EXPECT_EQ(prs[0].request_headers().response().header_mutation().remove_headers_size(), 0);
  EXPECT_EQ(stats.stripped_control_headers.load(), 3);
}

// llm-d's --emit-endpoint-scores: every candidate of the primary profile with its total score in
// envoy.lb, next to the destination; off by default.
TEST(ExtProcSessionTest, EmitEndpointScoresPutsEveryCandidatesTotalInTheMetadata) {
  SchedulerEnv env({Ep("10.0.0.1:8000", 5, 0.5), Ep("10.0.0.2:8000", 0, 0.1), Ep("10.0.0.3:8000", 3, 0.4)});
  auto scores_of = [&](bool emit) {
    ExtProcOptions options;
    options.emit_endpoint_scores = emit;
    ExtProcSession s(*env.scheduler, env.pool, options, nullptr);
    std::vector<std::string> out;
    for (const std::string& m : BuildProcessingRequests(ChatCapture(ChatBody("m", "scores please")))) EXPECT_TRUE(s.OnMessage(m, out).ok());
    std::map<std::string, double> scores;
    const std::vector<pb::ProcessingResponse> rs = Decode(out);
    if (rs.empty()) return scores;
    const auto& ns = rs[0].dynamic_metadata().fields().at(std::string(kDestinationEndpointNamespace)).struct_value().fields();
    auto it = ns.find(std::string(kDestinationEndpointScoresKey));
    if (it == ns.end()) return scores;
    for (const auto& [k, v] : it->second.struct_value().fields()) scores[k] = v.number_value();
    return scores;
  };
  EXPECT_TRUE(scores_of(false).empty());
  const std::map<std::string, double> scores = scores_of(true);
  ASSERT_EQ(scores.size(), 3u);
  // GIE's default profile (queue 2, kv 2, prefix 3): the idle endpoint has the highest total,
  // a raw weighted sum above 1.
  EXPECT_GT(scores.at("10.0.0.2:8000"), scores.at("10.0.0.3:8000"));
  EXPECT_GT(scores.at("10.0.0.3:8000"), scores.at("10.0.0.1:8000"));
  EXPECT_GT(scores.at("10.0.0.2:8000"), 1.0);
}

}  // namespace
}  // namespace epp
