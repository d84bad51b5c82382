// Captured requests (the input of `eppctl explain -r`, `eppctl pick -t` and OpenAI replay traces)
// through ParseCaptureEnvelope: an envelope {"path", "headers", "body"} with the body as an object
// or as a JSON string, or a bare body with an optional "path". Invariants: a parsed request has a
// model, lower-case header names, and a path override replaces the path.
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/ascii.h"
#include "epp/request.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json = epp::fuzz::Text(data, size);
  absl::StatusOr<epp::InferenceRequest> r = epp::ParseCaptureEnvelope(json);
  if (!r.ok()) {
    EPP_FUZZ_CHECK(r.status().code() == absl::StatusCode::kInvalidArgument, r.status().ToString());
    return 0;
  }
  EPP_FUZZ_CHECK(!r->model.empty(), "parsed a capture without a model");
  EPP_FUZZ_CHECK(!r->path.empty(), "parsed a capture without a path");
  for (const auto& [name, value] : r->headers) {
    EPP_FUZZ_CHECK(name == absl::AsciiStrToLower(name), name);
    EPP_FUZZ_CHECK(r->header(name).has_value(), name);
  }
  // The same capture sent to another API may fail (the body shape differs), but when it parses
  // it is that API's request.
  absl::StatusOr<epp::InferenceRequest> chat = epp::ParseCaptureEnvelope(json, "/v1/chat/completions");
  if (chat.ok()) {
    EPP_FUZZ_CHECK(chat->api == epp::ApiKind::kChatCompletions, chat->path);
    EPP_FUZZ_CHECK(chat->path == "/v1/chat/completions", chat->path);
  }
  return 0;
}
