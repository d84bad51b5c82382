// The request parser's two paths (internal to libepp; ParseOpenAIRequest in epp/request.h is the
// contract).
//
// FastParseBody is a one-pass scanner for the shapes nearly every request has: messages whose
// contents are strings or text parts (chat, Responses input items, embeddings of a conversation;
// tools, tool calls and Responses items other than messages are rendered from their text), and
// string or token-id prompts (completions, embeddings). It validates the whole document as it
// goes, and decodes each message's string straight into the prompt: no structural index, no
// tape, no second copy of the strings.
// It either produces exactly what the simdjson DOM path produces, or declines; the DOM path then
// parses the body and reports any error. It never reports an error itself.
#pragma once

#include <string>
#include <string_view>

#include "epp/request.h"
#include "epp/status.h"

namespace epp::internal {

// Parses `body` as sent to `api` into `req` (model, stream, cache_salt, prompt, prompt_tokens,
// media_parts; the caller sets path and api). Returns false for anything it does not handle,
// valid or not: invalid JSON or UTF-8, a repeated member it reads, a media or other non-text
// content part, token-id arrays of arrays, a number with an exponent or more than 18 digits,
// nesting deeper than 64 levels, and every input the DOM path rejects. `req` may be partly written when it returns false.
bool FastParseBody(std::string_view body, ApiKind api, InferenceRequest& req);

// For tests: the prompt buffer of this thread's fast parses starts at `bytes` (at least 64)
// instead of the body's size, so that its growth path runs; 0 restores the default.
void SetInitialPromptRoomForTesting(size_t bytes);

// ParseOpenAIRequest without the fast path: the reference the fast path is tested against.
absl::StatusOr<InferenceRequest> ParseOpenAIRequestDom(std::string_view path, std::string_view body);

// Appends the canonical JSON J(v) (docs/scheduling.md) of the JSON text `json`; false, with
// `out` unchanged, when `json` does not parse.
bool AppendCanonicalJsonText(std::string_view json, std::string& out);

}  // namespace epp::internal
