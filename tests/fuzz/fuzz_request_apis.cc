// Request bodies of every API llm-d Router's parsers read, through ParseRequest with all the
// parsers: Anthropic Messages, vLLM's and SGLang's generate, and the gRPC frames of Vertex AI and
// vLLM (epp/request.h). An input starting with '/' names the path on its first line and the body
// follows; any other input is the body alone, sent to each API's path in turn.
// Invariants: a failure is a kInvalidArgument with a message; a parsed request has the parser its
// path resolves to and an API of that parser; token ids handed over are the prompt's count; an
// accepted Anthropic body converts to a chat body; and reading any body as any API's response
// usage never fails or yields a negative count.
#include <cstdint>
#include <string>
#include <string_view>

#include "epp/prefix_cache.h"
#include "epp/request.h"
#include "fuzz_util.h"

namespace {

const epp::ParserSet& All() {
  static const epp::RequestParser kAll[] = {epp::RequestParser::kOpenAI,     epp::RequestParser::kAnthropic,
                                            epp::RequestParser::kVllmHttp,   epp::RequestParser::kSglangHttp,
                                            epp::RequestParser::kVertexAI,   epp::RequestParser::kVllmGrpc,
                                            epp::RequestParser::kPassthrough};
  static const epp::ParserSet set(kAll);
  return set;
}

void ParseOne(std::string_view path, std::string_view body) {
  absl::StatusOr<epp::InferenceRequest> r = epp::ParseRequest(path, body, All());
  if (!r.ok()) {
    EPP_FUZZ_CHECK(r.status().code() == absl::StatusCode::kInvalidArgument ||
                       r.status().code() == absl::StatusCode::kResourceExhausted,
                   r.status().ToString());
    EPP_FUZZ_CHECK(!r.status().message().empty(), "an error without a message");
    return;
  }
  EPP_FUZZ_CHECK(r->parser == All().Resolve(path.empty() ? epp::kDefaultRequestPath : path), r->path);
  EPP_FUZZ_CHECK(r->prompt_tokens >= 0 && r->media_parts >= 0, "negative counts");
  if (!r->token_ids.empty())
    EPP_FUZZ_CHECK(static_cast<int64_t>(r->token_ids.size()) == r->prompt_tokens, "token ids are not the prompt's count");
  if (r->api == epp::ApiKind::kMessages) {
    EPP_FUZZ_CHECK(!r->model.empty(), "a Messages request without a model");
    absl::StatusOr<std::string> chat = epp::AnthropicToChatCompletions(body);
    EPP_FUZZ_CHECK(chat.ok(), chat.status().ToString());
    EPP_FUZZ_CHECK(epp::ParseOpenAIRequest("/v1/chat/completions", *chat).status().code() != absl::StatusCode::kInternal,
                   "the converted chat");
  }
  (void)epp::ChainedBlockHashes(r->prompt, 64, epp::PrefixSeed(r->model, r->cache_salt), 256);
  for (bool stream : {false, true}) {
    std::optional<epp::ResponseUsage> u = epp::ParseResponseUsage(r->parser, r->api, body, stream);
    if (u) EPP_FUZZ_CHECK(u->prompt_tokens >= 0 && u->completion_tokens >= 0 && u->total_tokens >= 0, "negative usage");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = epp::fuzz::Text(data, size);
  if (!text.empty() && text[0] == '/') {
    auto [path, body] = epp::fuzz::FirstLine(text);
    ParseOne(path, body);
    return 0;
  }
  for (std::string_view path : {"/v1/messages", "/v1/messages/count_tokens", "/inference/v1/generate", "/generate",
                                "/google.cloud.aiplatform.v1beta1.PredictionService/ChatCompletions",
                                "/google.cloud.aiplatform.v1.PredictionService/RawPredict",
                                "/vllm.grpc.engine.VllmEngine/Generate", "/vllm.grpc.engine.VllmEngine/Embed"})
    ParseOne(path, text);
  for (epp::RequestParser p : All().parsers())
    for (epp::ApiKind api : {epp::ApiKind::kMessages, epp::ApiKind::kGrpcGenerate, epp::ApiKind::kChatCompletions})
      for (bool stream : {false, true}) (void)epp::ParseResponseUsage(p, api, text, stream);
  return 0;
}
