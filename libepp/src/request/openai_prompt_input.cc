// Completions `prompt` and embeddings `input`: a string, an array of strings, an array of token
// ids, or an array of token-id arrays (the four forms the OpenAI API documents for both).
// Strings are joined with newlines; token ids render as decimals separated by spaces and are
// counted exactly, so a token-id prompt's prompt_tokens is its length rather than an estimate
// from its characters. An empty prompt (or an empty token-id list) is refused with the field's
// name.
#include <cstdint>
#include <optional>
#include <string>

#include "request/request_impl.h"

namespace epp::internal::openai {
namespace {

// A token id: a non-negative integer.
bool TokenId(const element& e, uint64_t& id) {
  if (e.type() == element_type::UINT64) return e.get_uint64().get(id) == simdjson::SUCCESS;
  int64_t v = 0;
  if (e.type() != element_type::INT64 || e.get_int64().get(v) != simdjson::SUCCESS || v < 0) return false;
  id = static_cast<uint64_t>(v);
  return true;
}

// Appends the ids of a token-id array as decimals separated by single spaces.
absl::Status AppendTokenIds(const simdjson::dom::array& ids, const JsonPath& at, std::string& out,
                            int64_t& count) {
  size_t i = 0;
  for (element item : ids) {
    uint64_t id = 0;
    if (!TokenId(item, id)) return TypeError(at.Index(i), "a token id (a non-negative integer)", item);
    if (i > 0) out += ' ';
    AppendNumber(id, out);
    ++i;
  }
  count += static_cast<int64_t>(i);
  return absl::OkStatus();
}

}  // namespace

// A completions `prompt` or embeddings `input`. `token_count` is set for token-id prompts.
absl::Status AppendPromptInput(const element& value, const JsonPath& at, std::string& out,
                               std::optional<int64_t>& token_count) {
  if (std::optional<std::string_view> s = AsString(value)) {
    if (s->empty()) return Empty(at);
    out.append(*s);
    return absl::OkStatus();
  }
  std::optional<simdjson::dom::array> list = AsArray(value);
  if (!list.has_value()) {
    return TypeError(at, "a string, an array of strings or an array of token ids", value);
  }
  if (list->begin() == list->end()) return Empty(at);
  const element first = *list->begin();
  switch (first.type()) {
    case element_type::STRING: {
      size_t i = 0;
      for (element item : *list) {
        std::optional<std::string_view> s = AsString(item);
        if (!s.has_value()) return TypeError(at.Index(i), "a string", item);
        if (i > 0) out += '\n';
        out.append(*s);
        ++i;
      }
      return absl::OkStatus();
    }
    case element_type::INT64:
    case element_type::UINT64:
    case element_type::DOUBLE: {
      int64_t count = 0;
      EPP_RETURN_IF_ERROR(AppendTokenIds(*list, at, out, count));
      token_count = count;
      return absl::OkStatus();
    }
    case element_type::ARRAY: {
      int64_t count = 0;
      size_t i = 0;
      for (element item : *list) {
        const JsonPath item_path = at.Index(i);
        std::optional<simdjson::dom::array> ids = AsArray(item);
        if (!ids.has_value()) return TypeError(item_path, "an array of token ids", item);
        if (ids->begin() == ids->end()) return Empty(item_path);
        if (i > 0) out += '\n';
        EPP_RETURN_IF_ERROR(AppendTokenIds(*ids, item_path, out, count));
        ++i;
      }
      token_count = count;
      return absl::OkStatus();
    }
    default:
      return TypeError(at.Index(0), "a string, a token id or an array of token ids", first);
  }
}

}  // namespace epp::internal::openai
