// OpenAI request bodies (what a client sends through the gateway) through ParseOpenAIRequest.
// An input starting with '/' names the path on its first line and the body follows; any other
// input is the body alone, parsed as sent to each API (completions, chat, responses, embeddings).
// Invariants: a parsed request has a model, the API its path selects and a token estimate that
// agrees with the prompt; and the parser's fast path (request/fast_parse.h) gives exactly the
// answer of the DOM path alone (the same request, or the same error).
#include <cstdint>
#include <string>
#include <string_view>

#include "epp/prefix_cache.h"
#include "epp/request.h"
#include "fuzz_util.h"
#include "request/fast_parse.h"

namespace {

void ParseOne(std::string_view path, std::string_view body) {
  absl::StatusOr<epp::InferenceRequest> r = epp::ParseOpenAIRequest(path, body);
  const absl::StatusOr<epp::InferenceRequest> dom = epp::internal::ParseOpenAIRequestDom(path, body);
  EPP_FUZZ_CHECK(r.ok() == dom.ok(), dom.ok() ? r.status().ToString() : dom.status().ToString());
  if (r.ok()) {
    EPP_FUZZ_CHECK(r->model == dom->model, "fast path model " + r->model);
    EPP_FUZZ_CHECK(r->prompt == dom->prompt, "fast path prompt " + r->prompt);
    EPP_FUZZ_CHECK(r->stream == dom->stream && r->cache_salt == dom->cache_salt, "fast path stream or salt");
    EPP_FUZZ_CHECK(r->prompt_tokens == dom->prompt_tokens && r->media_parts == dom->media_parts, "fast path counts");
  } else {
    EPP_FUZZ_CHECK(r.status() == dom.status(), r.status().ToString());
  }
  if (!r.ok()) {
    EPP_FUZZ_CHECK(r.status().code() == absl::StatusCode::kInvalidArgument, r.status().ToString());
    EPP_FUZZ_CHECK(!r.status().message().empty(), "an error without a message");
    return;
  }
  EPP_FUZZ_CHECK(!r->model.empty(), "parsed a request without a model");
  EPP_FUZZ_CHECK(r->api == epp::ApiKindForPath(path), "API kind is not the path's");
  EPP_FUZZ_CHECK(r->path == (path.empty() ? epp::kDefaultRequestPath : path), r->path);
  EPP_FUZZ_CHECK(r->prompt_tokens >= 0, "negative prompt tokens");
  EPP_FUZZ_CHECK(r->headers.empty(), "a bare body carries headers");
  // The prefix-cache producer hashes every parsed prompt.
  (void)epp::ChainedBlockHashes(r->prompt, 64, epp::PrefixSeed(r->model, r->cache_salt), 256);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Odd-sized inputs start the fast path's prompt buffer at 64 bytes, so its growth path runs.
  epp::internal::SetInitialPromptRoomForTesting(size % 2 == 1 ? 64 : 0);
  const std::string_view text = epp::fuzz::Text(data, size);
  if (!text.empty() && text[0] == '/') {
    auto [path, body] = epp::fuzz::FirstLine(text);
    ParseOne(path, body);
    return 0;
  }
  for (std::string_view path : {"/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/embeddings"})
    ParseOne(path, text);
  return 0;
}
