// Captured requests (the input of `eppctl explain -r`, `eppctl pick -t` and OpenAI replay traces)
// through ParseCaptureEnvelope: an envelope {"path", "headers", "body"} with the body as an object
// or as a JSON string, or a bare body with an optional "path"; and through CaptureToHttpRequest
// (the same capture as the HTTP request `explain --ext-proc` and pyepp send), whose messages are
// built with BuildProcessingRequests. Invariants: a parsed request has a model (none when its path
// is routed unread), lower-case header names, and a path override replaces the path; a capture
// that parses converts, to the same path, and its body parses as the same request.
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/ascii.h"
#include "epp/runtime/extproc.h"
#include "epp/request.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json = epp::fuzz::Text(data, size);
  absl::StatusOr<epp::InferenceRequest> r = epp::ParseCaptureEnvelope(json);
  if (!r.ok()) {
    EPP_FUZZ_CHECK(r.status().code() == absl::StatusCode::kInvalidArgument, r.status().ToString());
    return 0;
  }
  // A path no API claims is routed unread (llm-d's passthrough): nothing is read from the body.
  if (r->api == epp::ApiKind::kOther) EPP_FUZZ_CHECK(r->model.empty() && r->prompt.empty(), r->path);
  else EPP_FUZZ_CHECK(!r->model.empty(), "parsed a capture without a model");
  EPP_FUZZ_CHECK(!r->path.empty(), "parsed a capture without a path");
  for (const auto& [name, value] : r->headers) {
    EPP_FUZZ_CHECK(name == absl::AsciiStrToLower(name), name);
    EPP_FUZZ_CHECK(r->header(name).has_value(), name);
  }
  absl::StatusOr<epp::HttpRequestCapture> http = epp::CaptureToHttpRequest(json);
  EPP_FUZZ_CHECK(http.ok(), http.status().ToString());
  EPP_FUZZ_CHECK(http->path == r->path, http->path + " vs " + r->path);
  (void)epp::BuildProcessingRequests(*http);
  // The same parser set reads the sent body (ParseOpenAIRequest alone reads every path as OpenAI).
  absl::StatusOr<epp::InferenceRequest> body = epp::ParseRequest(http->path, http->body);
  EPP_FUZZ_CHECK(body.ok(), body.status().ToString());
  EPP_FUZZ_CHECK(body->model == r->model && body->api == r->api && body->stream == r->stream &&
                     body->cache_salt == r->cache_salt,
                 http->body);
  EPP_FUZZ_CHECK(body->prompt == r->prompt, http->body);
  // The same capture sent to another API may fail (the body shape differs), but when it parses
  // it is that API's request.
  absl::StatusOr<epp::InferenceRequest> chat = epp::ParseCaptureEnvelope(json, "/v1/chat/completions");
  if (chat.ok()) {
    EPP_FUZZ_CHECK(chat->api == epp::ApiKind::kChatCompletions, chat->path);
    EPP_FUZZ_CHECK(chat->path == "/v1/chat/completions", chat->path);
  }
  return 0;
}
