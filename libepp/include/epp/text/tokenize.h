// A request's token ids as the model server computes them (its chat template rendered, then its
// tokenizer applied), asked of the server itself: vLLM's render endpoints
// (POST /v1/chat/completions/render, /v1/completions/render; `vllm serve` and the GPU-less
// `vllm launch render`) or, on servers without them, POST /tokenize. token-producer's `vllm`
// backend (docs/plugins.md) sends the request body there and reads the ids back with
// ParseTokenizeResponse; `eppctl sim` serves the same endpoints with its own tokenizer.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "epp/request.h"
#include "epp/status.h"

namespace epp {

enum class TokenizeEndpoint {
  kChatRender,         // POST /v1/chat/completions/render: one GenerateRequest {token_ids, ...}
  kCompletionsRender,  // POST /v1/completions/render: an array of them, one per prompt
  kTokenize,           // POST /tokenize: {count, max_model_len, tokens, token_strs}
};

// "/v1/chat/completions/render", "/v1/completions/render", "/tokenize".
std::string_view TokenizePath(TokenizeEndpoint endpoint);

// The render endpoint for a request of `api` (chat or completions); nullopt for the APIs the
// servers render no prompt for (responses, embeddings).
std::optional<TokenizeEndpoint> RenderEndpointFor(ApiKind api);

// The token ids in an answer of `endpoint` (for kCompletionsRender: the first prompt's). Each id
// must be an integer in [0, 2^32). kInvalidArgument naming the JSON path otherwise
// ("[0].token_ids[17]: not a token id").
absl::StatusOr<std::vector<uint32_t>> ParseTokenizeResponse(TokenizeEndpoint endpoint, std::string_view body);

// The simulator's `words` tokenizer (eppctl sim --tokenizer words): a run of letters and digits
// (bytes >= 0x80 count as letters), with the one space before it, is a token; so is any other
// byte. Ids are a hash of the piece, in [256, 100256). Deterministic and unlike `estimate`'s
// 4-byte packing, so that an EPP only matches such a server's KV events when it asks the server
// for the tokens.
std::vector<uint32_t> WordTokenIds(std::string_view text);

}  // namespace epp
