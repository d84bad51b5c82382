// The Responses API (POST /v1/responses) -> prompt text: `instructions` first (the system or
// developer message the API inserts ahead of the input), then `input`, either a string (one user
// message) or an array of items. Message items render as chat messages do (openai_chat.cc); the
// other item types (function_call, function_call_output, reasoning, ...) render as their type and
// canonical JSON, so a tool round trip in the conversation stays part of the hashed prefix.
// `tools` is read by request.cc with the chat renderer's AppendTools, as both APIs send it
// the same way.
#include <optional>
#include <string>

#include "request/request_impl.h"

namespace epp::internal::openai {
namespace {

// One item of a Responses `input` array: a message (has a role; type absent or "message"), or
// another item (function_call, function_call_output, reasoning, ...) rendered as its type and
// canonical JSON.
absl::Status AppendResponseItem(const element& item, const JsonPath& at, std::string& out, MediaSink media) {
  std::optional<simdjson::dom::object> obj = AsObject(item);
  if (!obj.has_value()) return TypeError(at, "an object", item);
  std::optional<element> type = Member(*obj, "type");
  std::optional<std::string_view> type_name;
  if (type.has_value()) {
    type_name = AsString(*type);
    if (!type_name.has_value()) return TypeError(at.Key("type"), "a string", *type);
  }
  if (!type_name.has_value() || *type_name == "message") {
    if (!type_name.has_value() && !Member(*obj, "role").has_value()) {
      return ErrorAt(at, "expected an item with a string type or role");
    }
    return AppendMessage(*obj, at, out, media);
  }
  out.append(*type_name);
  out += '\n';
  AppendCanonicalJson(item, out);
  out += '\n';
  return absl::OkStatus();
}

}  // namespace

// `instructions`: absent, null and "" render nothing.
absl::Status AppendInstructions(const std::optional<element>& instructions, const JsonPath& at, std::string& out) {
  if (!instructions.has_value() || IsNull(*instructions)) return absl::OkStatus();
  std::optional<std::string_view> text = AsString(*instructions);
  if (!text.has_value()) return TypeError(at, "a string", *instructions);
  if (!text->empty()) {
    out += "instructions\n";
    out.append(*text);
    out += '\n';
  }
  return absl::OkStatus();
}

// `input`: a non-empty string or a non-empty array of items.
absl::Status AppendResponsesInput(const element& input, const JsonPath& at, std::string& out, MediaSink media) {
  if (std::optional<std::string_view> s = AsString(input)) {
    if (s->empty()) return Empty(at);
    out += "user\n";
    out.append(*s);
    out += '\n';
    return absl::OkStatus();
  }
  std::optional<simdjson::dom::array> items = AsArray(input);
  if (!items.has_value()) return TypeError(at, "a string or an array of items", input);
  if (items->begin() == items->end()) return Empty(at);
  size_t i = 0;
  for (element item : *items) {
    EPP_RETURN_IF_ERROR(AppendResponseItem(item, at.Index(i), out, media));
    ++i;
  }
  return absl::OkStatus();
}

}  // namespace epp::internal::openai
