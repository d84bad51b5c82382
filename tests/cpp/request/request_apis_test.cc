// The request APIs beyond OpenAI's (epp/request.h ParseRequest): which parser a path resolves to
// (llm-d's ParserRegistry rules), Anthropic Messages (canonical prompt, errors with JSON paths,
// the conversion to the chat vLLM renders), vLLM's and SGLang's generate bodies, the gRPC frames
// of Vertex AI and vLLM, capture envelopes, and each API's response usage.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "epp/prefix_cache.h"
#include "epp/request.h"
#include "nlohmann/json.hpp"

namespace epp {
namespace {

InferenceRequest MustParse(std::string_view path, std::string_view body, const ParserSet& set = ParserSet::Default()) {
  absl::StatusOr<InferenceRequest> r = ParseRequest(path, body, set);
  EXPECT_TRUE(r.ok()) << r.status() << "\nbody: " << body;
  return r.ok() ? *std::move(r) : InferenceRequest();
}

std::string ErrorOf(std::string_view path, std::string_view body, const ParserSet& set = ParserSet::Default()) {
  absl::StatusOr<InferenceRequest> r = ParseRequest(path, body, set);
  EXPECT_FALSE(r.ok()) << body;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(r.status().message());
}

// ---------------------------------------------------------------------------------------------
// Parser selection.

TEST(ParserSetTest, LongestClaimedSuffixWinsThenTheFallback) {
  const RequestParser all[] = {RequestParser::kOpenAI,   RequestParser::kAnthropic, RequestParser::kVllmHttp,
                               RequestParser::kSglangHttp, RequestParser::kVertexAI, RequestParser::kVllmGrpc};
  const ParserSet set(all);
  EXPECT_FALSE(set.has_fallback());
  const struct {
    std::string_view path;
    std::optional<RequestParser> parser;
  } cases[] = {
      {"/v1/chat/completions", RequestParser::kOpenAI},
      {"/v1/chat/completions/render?x=1", RequestParser::kOpenAI},
      {"/v1/messages", RequestParser::kAnthropic},
      {"/v1/messages/", RequestParser::kAnthropic},
      {"/v1/messages/count_tokens", RequestParser::kAnthropic},
      {"/inference/v1/generate", RequestParser::kVllmHttp},  // longer than sglang's "generate"
      {"/generate", RequestParser::kSglangHttp},
      {"/x_generate", RequestParser::kSglangHttp},  // a plain suffix, as llm-d matches it
      {"/google.cloud.aiplatform.v1beta1.PredictionService/ChatCompletions", RequestParser::kVertexAI},
      {"/vllm.grpc.engine.VllmEngine/Embed", RequestParser::kVllmGrpc},
      {"/v2/models/m/infer", std::nullopt},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.path);
    EXPECT_EQ(set.Resolve(c.path), c.parser);
  }
  EXPECT_EQ(ErrorOf("/v2/models/m/infer", "{}", set), "no parser claims the path '/v2/models/m/infer'");
}

TEST(ParserSetTest, DefaultIsLlmdsListEndingInPassthrough) {
  const ParserSet& d = ParserSet::Default();
  EXPECT_EQ(d.parsers(), (std::vector<RequestParser>{RequestParser::kOpenAI, RequestParser::kAnthropic,
                                                     RequestParser::kVllmHttp, RequestParser::kPassthrough}));
  EXPECT_EQ(d.Resolve("/generate"), RequestParser::kPassthrough);  // sglanghttp is not a default
  InferenceRequest r = MustParse("/v2/models/m/infer", "\x01 not json");
  EXPECT_EQ(r.api, ApiKind::kOther);
  EXPECT_EQ(r.parser, RequestParser::kPassthrough);
  EXPECT_TRUE(r.model.empty());
  // A repeated parser counts once; the fallback ends the list.
  const RequestParser list[] = {RequestParser::kAnthropic, RequestParser::kAnthropic, RequestParser::kPassthrough,
                                RequestParser::kOpenAI};
  const ParserSet cut(list);
  EXPECT_EQ(cut.parsers(), (std::vector<RequestParser>{RequestParser::kAnthropic, RequestParser::kPassthrough}));
  EXPECT_EQ(cut.Resolve("/v1/chat/completions"), RequestParser::kPassthrough);
}

TEST(ParserSetTest, TypesAndClaims) {
  EXPECT_EQ(RequestParserType(RequestParser::kSglangHttp), "sglanghttp-parser");
  EXPECT_EQ(RequestParserForType("vllmgrpc-parser"), RequestParser::kVllmGrpc);
  EXPECT_EQ(RequestParserForType("queue-scorer"), std::nullopt);
  EXPECT_TRUE(RequestParserClaims(RequestParser::kPassthrough).empty());
  EXPECT_EQ(RequestParserClaims(RequestParser::kVllmHttp).front(), "inference/v1/generate");
}

// ---------------------------------------------------------------------------------------------
// Anthropic Messages.

constexpr std::string_view kMessages = "/v1/messages";

TEST(AnthropicRequestTest, RendersToolsSystemAndEveryBlockType) {
  const std::string body = R"({
    "model": "claude", "max_tokens": 64, "stream": true, "cache_salt": "s",
    "tools": [{"name": "get_weather", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}],
    "system": [{"type": "text", "text": "x-anthropic-billing-header: cc=1;"}, {"type": "text", "text": "Be brief."},
               {"type": "text", "text": " Really.", "cache_control": {"type": "ephemeral"}}],
    "messages": [
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Call the tool.", "signature": "abc"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Zurich", "unit": "C"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "22C"},
          {"type": "image", "source": {"type": "url", "url": "https://x/chart.png"}}]},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}
    ]})";
  InferenceRequest r = MustParse(kMessages, body);
  EXPECT_EQ(r.api, ApiKind::kMessages);
  EXPECT_EQ(r.parser, RequestParser::kAnthropic);
  EXPECT_EQ(r.model, "claude");
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.cache_salt, "s");
  EXPECT_EQ(r.media_parts, 2);
  EXPECT_EQ(r.prompt,
            "tools\n[{\"input_schema\":{\"type\":\"object\"},\"name\":\"get_weather\"}]\n"
            "system\nBe brief. Really.\n"
            "user\nWeather?\n"
            "assistant\n<thinking>Call the tool.</thinking>Checking."
            "<tool_use:{\"id\":\"toolu_1\",\"input\":{\"city\":\"Zurich\",\"unit\":\"C\"},\"name\":\"get_weather\"}>\n"
            "user\n<tool_result:toolu_1>22C<image:https://x/chart.png></tool_result><image:data:image/png;base64,AAAA>\n");
  EXPECT_EQ(r.prompt_tokens, ApproxTokens(r.prompt.size()));
}

TEST(AnthropicRequestTest, CacheControlMarkersAndKeyOrderDoNotChangeThePrompt) {
  // Agents move cache_control to the newest block every turn: the earlier turns must hash alike.
  const std::string a = R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi",
      "cache_control":{"type":"ephemeral"}},{"type":"tool_use","name":"f","input":{"b":1,"a":2},"cache_control":{"type":"ephemeral"}}]}]})";
  const std::string b = R"({"messages":[{"content":[{"text":"hi","type":"text"},{"input":{"a":2,"b":1},"name":"f","type":"tool_use"}],
      "role":"user"}],"model":"m"})";
  EXPECT_EQ(MustParse(kMessages, a).prompt, MustParse(kMessages, b).prompt);
}

TEST(AnthropicRequestTest, ErrorsNameTheJsonPath) {
  EXPECT_EQ(ErrorOf(kMessages, R"({"messages":[{"role":"user","content":"x"}]})"), "model: missing");
  EXPECT_EQ(ErrorOf(kMessages, R"({"model":"m","messages":[]})"), "messages: must not be empty");
  EXPECT_EQ(ErrorOf(kMessages, R"({"model":"m"})"), "messages: missing");
  EXPECT_EQ(ErrorOf(kMessages, R"({"model":"m","messages":[{"role":"user"}]})"), "messages[0].content: missing");
  EXPECT_EQ(ErrorOf(kMessages, R"({"model":"m","messages":[{"role":"user","content":7}]})"),
            "messages[0].content: expected a string or an array of content blocks, got number 7");
  EXPECT_EQ(ErrorOf(kMessages, R"({"model":"m","messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64"}}]}]})"),
            "messages[0].content[0].source.data: missing");
  EXPECT_EQ(ErrorOf(kMessages, R"({"model":"m","messages":[{"role":"user","content":[{"text":"x"}]}]})"),
            "messages[0].content[0].type: missing");
  EXPECT_EQ(ErrorOf(kMessages, R"({"model":"m","system":5,"messages":[{"role":"user","content":"x"}]})"),
            "system: expected a string or an array of text blocks, got number 5");
  EXPECT_EQ(ErrorOf(kMessages, R"({"model":"m","stream":"yes","messages":[{"role":"user","content":"x"}]})"),
            "stream: expected a boolean, got string");
  EXPECT_TRUE(absl::StartsWith(ErrorOf(kMessages, "{"), "invalid JSON at byte 1"));
}

TEST(AnthropicRequestTest, CountTokensIsRoutedUnread) {
  InferenceRequest r = MustParse("/v1/messages/count_tokens", "not even json");
  EXPECT_EQ(r.api, ApiKind::kOther);
  EXPECT_EQ(r.parser, RequestParser::kAnthropic);
}

TEST(AnthropicToChatTest, ConvertsAsVllmDoes) {
  const std::string body = R"({"model":"m","system":[{"type":"text","text":"x-anthropic-billing-header: h"},{"type":"text","text":"Sys."}],
    "tools":[{"name":"get_weather","description":"Weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],
    "messages":[
      {"role":"system","content":" More."},
      {"role":"user","content":"Weather in Zürich?"},
      {"role":"assistant","content":[{"type":"thinking","thinking":"use tool"},
        {"type":"tool_use","id":"t1","name":"get_weather","input":{"city":"Zürich","n":[1,2.5]}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"22C"},
        {"type":"image","source":{"type":"url","url":"https://x/a.png"}}]},{"type":"text","text":"Thanks"}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":"done"}]}]})";
  absl::StatusOr<std::string> chat = AnthropicToChatCompletions(body);
  ASSERT_TRUE(chat.ok()) << chat.status();
  const nlohmann::ordered_json got = nlohmann::ordered_json::parse(*chat);
  const nlohmann::ordered_json want = nlohmann::ordered_json::parse(R"({"model":"m","messages":[
      {"role":"system","content":"Sys. More."},
      {"role":"user","content":"Weather in Zürich?"},
      {"role":"assistant","reasoning":"use tool","tool_calls":[{"id":"t1","type":"function","function":{"name":"get_weather",
        "arguments":"{\"city\": \"Z\\u00fcrich\", \"n\": [1, 2.5]}"}}]},
      {"role":"tool","tool_call_id":"t1","content":"22C"},
      {"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/a.png"}}]},
      {"role":"user","content":"Thanks"},
      {"role":"tool","tool_call_id":"t2","content":"done"}],
    "tools":[{"type":"function","function":{"name":"get_weather","description":"Weather",
      "parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]})");
  EXPECT_EQ(got, want) << got.dump(1);
  // Python's json.dumps of an absent or empty input.
  absl::StatusOr<std::string> empty = AnthropicToChatCompletions(
      R"({"model":"m","messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f"}]}]})");
  ASSERT_TRUE(empty.ok());
  EXPECT_NE(empty->find(R"("arguments":"{}")"), std::string::npos) << *empty;
}

// ---------------------------------------------------------------------------------------------
// vLLM and SGLang generate.

TEST(GenerateRequestTest, VllmTokenIdsAreThePrompt) {
  InferenceRequest r = MustParse("/inference/v1/generate",
                                 R"({"model":"m","token_ids":[1,22,333],"sampling_params":{"max_tokens":5},"stream":true,
                                     "cache_salt":"s","features":{"mm_hashes":{"image":["h1","h2"]}}})");
  EXPECT_EQ(r.api, ApiKind::kGenerate);
  EXPECT_EQ(r.parser, RequestParser::kVllmHttp);
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt, "1 22 333");  // as a completions token-id prompt renders
  EXPECT_EQ(r.prompt_tokens, 3);
  EXPECT_EQ(r.token_ids, (std::vector<uint32_t>{1, 22, 333}));
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.cache_salt, "s");
  EXPECT_EQ(r.media_parts, 2);
  EXPECT_TRUE(MustParse("/inference/v1/generate", R"({"token_ids":[7]})").model.empty());  // optional in vLLM
  EXPECT_EQ(ErrorOf("/inference/v1/generate", R"({"model":"m"})"), "token_ids: missing");
  EXPECT_EQ(ErrorOf("/inference/v1/generate", R"({"token_ids":[]})"), "token_ids: must not be empty");
  EXPECT_EQ(ErrorOf("/inference/v1/generate", R"({"token_ids":[1,4294967296]})"),
            "token_ids[1]: expected a token id (an integer in [0, 2^32)), got number 4294967296");
  EXPECT_EQ(ErrorOf("/inference/v1/generate", R"({"token_ids":[1,-1]})"),
            "token_ids[1]: expected a token id (an integer in [0, 2^32)), got number -1");
}

TEST(GenerateRequestTest, SglangTextInputIdsAndBatches) {
  const RequestParser p[] = {RequestParser::kSglangHttp};
  const ParserSet set(p);
  InferenceRequest ids = MustParse("/generate", R"({"input_ids":[5,6],"extra_key":"k","stream":true,"image_data":"u"})", set);
  EXPECT_EQ(ids.api, ApiKind::kSglangGenerate);
  EXPECT_EQ(ids.token_ids, (std::vector<uint32_t>{5, 6}));
  EXPECT_EQ(ids.prompt, "5 6");
  EXPECT_EQ(ids.cache_salt, "k");
  EXPECT_EQ(ids.media_parts, 1);
  InferenceRequest text = MustParse("/generate", R"({"text":"Hello there","sampling_params":{"max_new_tokens":4}})", set);
  EXPECT_EQ(text.prompt, "Hello there");
  EXPECT_TRUE(text.token_ids.empty());
  EXPECT_EQ(text.prompt_tokens, ApproxTokens(11));
  InferenceRequest batch = MustParse("/generate", R"({"input_ids":[[1,2],[3]]})", set);
  EXPECT_EQ(batch.prompt, "1 2\n3");
  EXPECT_EQ(batch.prompt_tokens, 3);
  EXPECT_TRUE(batch.token_ids.empty());  // several prompts: none handed over as the request's ids
  EXPECT_EQ(MustParse("/generate", R"({"text":["a","b"]})", set).prompt, "a\nb");
  EXPECT_EQ(ErrorOf("/generate", R"({"text":"a","input_ids":[1]})", set), "text: give either text or input_ids, not both");
  EXPECT_EQ(ErrorOf("/generate", R"({"sampling_params":{}})", set), "input_ids: missing (give input_ids or text)");
  EXPECT_EQ(ErrorOf("/generate", R"({"input_ids":[[1],[]]})", set), "input_ids[1]: must not be empty");
  EXPECT_EQ(ErrorOf("/generate", R"({"input_ids":[1],"extra_key":3})", set), "extra_key: expected a string, got number 3");
}

// ---------------------------------------------------------------------------------------------
// gRPC frames: protobuf written by hand, field by field.

std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
  return out;
}
std::string Field(uint32_t number, std::string_view bytes) {
  return Varint((uint64_t{number} << 3) | 2) + Varint(bytes.size()) + std::string(bytes);
}
std::string VarintField(uint32_t number, uint64_t v) { return Varint(uint64_t{number} << 3) + Varint(v); }
std::string Frame(std::string_view message, char compressed = 0) {
  std::string out(1, compressed);
  const auto n = static_cast<uint32_t>(message.size());
  out += static_cast<char>(n >> 24);
  out += static_cast<char>(n >> 16);
  out += static_cast<char>(n >> 8);
  out += static_cast<char>(n);
  return out + std::string(message);
}

const ParserSet& GrpcSet() {
  static const RequestParser p[] = {RequestParser::kVertexAI, RequestParser::kVllmGrpc};
  static const ParserSet set(p);
  return set;
}

TEST(GrpcRequestTest, VllmGenerateTokenizedAndText) {
  constexpr std::string_view kGenerate = "/vllm.grpc.engine.VllmEngine/Generate";
  std::string packed = Varint(1) + Varint(300) + Varint(70000);
  const std::string tokenized = Field(1, "req-1") + Field(2, Field(1, "orig") + Field(2, packed)) +
                                Field(4, VarintField(8, 16)) + VarintField(5, 1) +
                                Field(7, Field(5, VarintField(1, 0) + VarintField(2, 4)) + Field(6, "hash"));
  InferenceRequest r = MustParse(kGenerate, Frame(tokenized), GrpcSet());
  EXPECT_EQ(r.api, ApiKind::kGrpcGenerate);
  EXPECT_EQ(r.parser, RequestParser::kVllmGrpc);
  EXPECT_EQ(r.token_ids, (std::vector<uint32_t>{1, 300, 70000}));
  EXPECT_EQ(r.prompt, "1 300 70000");
  EXPECT_EQ(r.prompt_tokens, 3);
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.media_parts, 1);
  InferenceRequest text = MustParse(kGenerate, Frame(Field(3, "Hello gRPC")), GrpcSet());
  EXPECT_EQ(text.prompt, "Hello gRPC");
  EXPECT_TRUE(text.token_ids.empty());
  InferenceRequest embed = MustParse("/vllm.grpc.engine.VllmEngine/Embed", Frame(Field(2, VarintField(2, 9))), GrpcSet());
  EXPECT_EQ(embed.api, ApiKind::kGrpcEmbed);
  EXPECT_EQ(embed.token_ids, (std::vector<uint32_t>{9}));
  EXPECT_EQ(ErrorOf("/vllm.grpc.engine.VllmEngine/HealthCheck", "", GrpcSet()),
            "no parser claims the path '/vllm.grpc.engine.VllmEngine/HealthCheck'");
  EXPECT_EQ(ErrorOf(kGenerate, Frame(Field(1, "id")), GrpcSet()), "GenerateRequest: no input (neither tokenized nor text)");
  EXPECT_EQ(ErrorOf(kGenerate, Frame(Field(3, "x"), 1), GrpcSet()),
            "invalid or unsupported gRPC payload: compressed gRPC payload is not supported");
  EXPECT_EQ(ErrorOf(kGenerate, Frame(Field(3, "x")).substr(0, 6), GrpcSet()),
            "invalid or unsupported gRPC payload: incomplete gRPC frame: the header announces 3 bytes, 1 are there");
  EXPECT_EQ(ErrorOf(kGenerate, Frame("\xff\xff"), GrpcSet()), "GenerateRequest: malformed protobuf");
}

TEST(GrpcRequestTest, VertexAiBodiesAreOpenAIInsideHttpBody) {
  const std::string chat = R"({"model":"gemma","messages":[{"role":"user","content":"Hi"}]})";
  const std::string message = Field(1, "projects/p/locations/l/endpoints/e") + Field(2, Field(1, "application/json") + Field(2, chat));
  InferenceRequest r = MustParse("/google.cloud.aiplatform.v1beta1.PredictionService/ChatCompletions", Frame(message), GrpcSet());
  EXPECT_EQ(r.api, ApiKind::kChatCompletions);
  EXPECT_EQ(r.parser, RequestParser::kVertexAI);
  EXPECT_EQ(r.model, "gemma");
  EXPECT_EQ(r.prompt, MustParse("/v1/chat/completions", chat).prompt);
  InferenceRequest raw = MustParse("/google.cloud.aiplatform.v1.PredictionService/RawPredict",
                                   Frame(Field(2, Field(2, R"({"model":"m","input":"Hello"})"))), GrpcSet());
  EXPECT_EQ(raw.api, ApiKind::kResponses);
  EXPECT_EQ(ErrorOf("/google.cloud.aiplatform.v1beta1.PredictionService/ChatCompletions",
                    Frame(Field(2, Field(2, R"({"messages":[]})"))), GrpcSet()),
            "http_body.data.model: missing");
  // Other PredictionService methods are not claimed: without a fallback they are refused.
  EXPECT_EQ(ErrorOf("/google.cloud.aiplatform.v1.PredictionService/Predict", "x", GrpcSet()),
            "no parser claims the path '/google.cloud.aiplatform.v1.PredictionService/Predict'");
}

// ---------------------------------------------------------------------------------------------
// Capture envelopes pick the parser by path.

TEST(CaptureEnvelopeApisTest, ThePathChoosesTheParser) {
  absl::StatusOr<InferenceRequest> r =
      ParseCaptureEnvelope(R"({"path":"/v1/messages","headers":{"x-request-id":"a"},"body":{"model":"m","messages":[{"role":"user","content":"hi"}]}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->api, ApiKind::kMessages);
  EXPECT_EQ(r->prompt, "user\nhi\n");
  absl::StatusOr<InferenceRequest> gen = ParseCaptureEnvelope(R"({"token_ids":[4,5]})", "/inference/v1/generate");
  ASSERT_TRUE(gen.ok()) << gen.status();
  EXPECT_EQ(gen->token_ids, (std::vector<uint32_t>{4, 5}));
  absl::StatusOr<InferenceRequest> bad = ParseCaptureEnvelope(R"({"path":"/v1/messages","body":{"model":"m","messages":[]}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "body.messages: must not be empty");
  const RequestParser p[] = {RequestParser::kVllmGrpc};
  const ParserSet grpc(p);
  absl::StatusOr<InferenceRequest> g = ParseCaptureEnvelope(R"({"body":"x"})", "/vllm.grpc.engine.VllmEngine/Generate", nullptr, &grpc);
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(absl::StrContains(g.status().message(), "reads binary gRPC frames")) << g.status();
  absl::StatusOr<InferenceRequest> other = ParseCaptureEnvelope(R"({"path":"/v2/models/m/infer","body":"raw bytes"})");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->parser, RequestParser::kPassthrough);
}

// ---------------------------------------------------------------------------------------------
// Response usage per API.

TEST(ResponseUsageTest, AnthropicJsonAndStreamMergedAcrossEvents) {
  std::optional<ResponseUsage> u = ParseResponseUsage(
      RequestParser::kAnthropic, ApiKind::kMessages,
      R"({"type":"message","usage":{"input_tokens":10,"output_tokens":4,"cache_read_input_tokens":6}})", false);
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->prompt_tokens, 10);
  EXPECT_EQ(u->completion_tokens, 4);
  EXPECT_EQ(u->total_tokens, 14);
  EXPECT_EQ(u->cached_tokens, 6);
  const std::string stream =
      "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1000,"
      "\"cache_read_input_tokens\":800,\"output_tokens\":1}}}\n\n"
      "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"usage\"}}\n\n"
      "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":200}}\n\n"
      "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
  std::optional<ResponseUsage> s = ParseResponseUsage(RequestParser::kAnthropic, ApiKind::kMessages, stream, true);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->prompt_tokens, 1000);
  EXPECT_EQ(s->completion_tokens, 200);
  EXPECT_EQ(s->total_tokens, 1200);
  EXPECT_EQ(s->cached_tokens, 800);
  // The same two events in separate body chunks, folded with MergeUsage as the session does.
  const size_t cut = stream.find("event: content_block_delta");
  ResponseUsage merged;
  MergeUsage(merged, *ParseResponseUsage(RequestParser::kAnthropic, ApiKind::kMessages, stream.substr(0, cut), true));
  MergeUsage(merged, *ParseResponseUsage(RequestParser::kAnthropic, ApiKind::kMessages, stream.substr(cut), true));
  EXPECT_EQ(merged.prompt_tokens, 1000);
  EXPECT_EQ(merged.completion_tokens, 200);
  EXPECT_EQ(merged.total_tokens, 1200);
  EXPECT_EQ(merged.cached_tokens, 800);
  EXPECT_FALSE(ParseResponseUsage(RequestParser::kAnthropic, ApiKind::kOther, "{\"usage\":{}}", false).has_value());
}

TEST(ResponseUsageTest, SglangMetaInfoAndVllmGenerate) {
  std::optional<ResponseUsage> j = ParseResponseUsage(
      RequestParser::kSglangHttp, ApiKind::kSglangGenerate,
      R"({"text":"x","meta_info":{"finish_reason":{"type":"length"},"prompt_tokens":7,"completion_tokens":3,"cached_tokens":2}})", false);
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ(j->prompt_tokens, 7);
  EXPECT_EQ(j->completion_tokens, 3);
  EXPECT_EQ(j->cached_tokens, 2);
  const std::string stream =
      "data: {\"meta_info\":{\"finish_reason\":null,\"prompt_tokens\":7,\"completion_tokens\":1}}\n\n"
      "data: {\"meta_info\":{\"finish_reason\":{\"type\":\"length\"},\"prompt_tokens\":7,\"completion_tokens\":2,\"cached_tokens\":0}}\n\n"
      "data: [DONE]\n\n";
  std::optional<ResponseUsage> s = ParseResponseUsage(RequestParser::kSglangHttp, ApiKind::kSglangGenerate, stream, true);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->completion_tokens, 2);
  EXPECT_EQ(s->total_tokens, 9);
  std::optional<ResponseUsage> v = ParseResponseUsage(
      RequestParser::kVllmHttp, ApiKind::kGenerate,
      R"({"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6,"prompt_tokens_details":{"cached_tokens":4}}})", false);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->total_tokens, 6);
  EXPECT_EQ(v->cached_tokens, 4);
  EXPECT_FALSE(ParseResponseUsage(RequestParser::kPassthrough, ApiKind::kOther, R"({"usage":{"prompt_tokens":1}})", false));
}

TEST(ResponseUsageTest, GrpcFrames) {
  // Two GenerateResponse chunks (the first without counters), then a complete message.
  const std::string body = Frame(Field(1, Field(1, Varint(5)))) +
                           Frame(Field(1, VarintField(2, 9) + VarintField(3, 1))) +
                           Frame(Field(2, Field(2, "length") + VarintField(3, 9) + VarintField(4, 3) + VarintField(5, 8)));
  std::optional<ResponseUsage> u = ParseResponseUsage(RequestParser::kVllmGrpc, ApiKind::kGrpcGenerate, body, true);
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->prompt_tokens, 9);
  EXPECT_EQ(u->completion_tokens, 3);
  EXPECT_EQ(u->cached_tokens, 8);
  std::optional<ResponseUsage> e = ParseResponseUsage(RequestParser::kVllmGrpc, ApiKind::kGrpcEmbed,
                                                      Frame(Field(1, std::string(8, '\0')) + VarintField(2, 12)), false);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->prompt_tokens, 12);
  std::optional<ResponseUsage> vx = ParseResponseUsage(
      RequestParser::kVertexAI, ApiKind::kChatCompletions,
      Frame(Field(1, "application/json") + Field(2, R"({"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}})")), false);
  ASSERT_TRUE(vx.has_value());
  EXPECT_EQ(vx->prompt_tokens, 5);
  EXPECT_FALSE(ParseResponseUsage(RequestParser::kVllmGrpc, ApiKind::kGrpcGenerate, "\x01\x00", false).has_value());
}

}  // namespace
}  // namespace epp
