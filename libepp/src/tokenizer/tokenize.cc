// Reading the model server's render / tokenize answers (tokenize.h), and the simulator's words
// tokenizer.
#include "epp/text/tokenize.h"

#include <simdjson.h>
#include <xxhash.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace epp {
namespace {

using simdjson::dom::element;

absl::Status Bad(std::string_view where, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(where), ": ", std::string(what)));
}

// The ids in `arr` (at JSON path `where`), appended to `out`.
absl::Status ReadIds(const element& arr, const std::string& where, std::vector<uint32_t>& out) {
  simdjson::dom::array a;
  if (arr.get_array().get(a) != simdjson::SUCCESS) return Bad(where, "expected an array of token ids");
  out.reserve(a.size());
  size_t i = 0;
  for (element v : a) {
    uint64_t id = 0;
    if (v.get_uint64().get(id) != simdjson::SUCCESS || id > UINT32_MAX)
      return Bad(absl::StrCat(where, "[", i, "]"), "not a token id (an integer in [0, 2^32))");
    out.push_back(static_cast<uint32_t>(id));
    ++i;
  }
  return absl::OkStatus();
}

absl::Status ReadField(const element& obj, std::string_view key, const std::string& where,
                       std::vector<uint32_t>& out) {
  simdjson::dom::object o;
  if (obj.get_object().get(o) != simdjson::SUCCESS) return Bad(where.empty() ? "answer" : where, "expected an object");
  element v;
  const std::string at = where.empty() ? std::string(key) : absl::StrCat(where, ".", std::string(key));
  if (o.at_key(key).get(v) != simdjson::SUCCESS) return Bad(at, "missing");
  return ReadIds(v, at, out);
}

}  // namespace

std::string_view TokenizePath(TokenizeEndpoint endpoint) {
  switch (endpoint) {
    case TokenizeEndpoint::kChatRender: return "/v1/chat/completions/render";
    case TokenizeEndpoint::kCompletionsRender: return "/v1/completions/render";
    case TokenizeEndpoint::kTokenize: return "/tokenize";
  }
  return "/tokenize";
}

std::optional<TokenizeEndpoint> RenderEndpointFor(ApiKind api) {
  switch (api) {
    case ApiKind::kChatCompletions: return TokenizeEndpoint::kChatRender;
    case ApiKind::kCompletions: return TokenizeEndpoint::kCompletionsRender;
    default: return std::nullopt;
  }
}

// One answer per request on the token-producer's path: the per-thread parser keeps its buffers
// between answers. Only the ids are read; the other fields of each answer are not needed.
absl::StatusOr<std::vector<uint32_t>> ParseTokenizeResponse(TokenizeEndpoint endpoint, std::string_view body) {
  thread_local simdjson::dom::parser parser;
  element doc;
  if (auto err = parser.parse(body.data(), body.size()).get(doc); err != simdjson::SUCCESS)
    return Bad("answer", absl::StrCat("not JSON (", simdjson::error_message(err), ")"));
  std::vector<uint32_t> out;
  switch (endpoint) {
    case TokenizeEndpoint::kChatRender:
      EPP_RETURN_IF_ERROR(ReadField(doc, "token_ids", "", out));
      break;
    case TokenizeEndpoint::kCompletionsRender: {
      simdjson::dom::array a;
      if (doc.get_array().get(a) != simdjson::SUCCESS) return Bad("answer", "expected an array (one entry per prompt)");
      if (a.size() == 0) return Bad("answer", "empty: no prompt was rendered");
      EPP_RETURN_IF_ERROR(ReadField(a.at(0).value_unsafe(), "token_ids", "[0]", out));
      break;
    }
    case TokenizeEndpoint::kTokenize:
      EPP_RETURN_IF_ERROR(ReadField(doc, "tokens", "", out));
      break;
  }
  return out;
}

// One pass: at each position, a word (with the space before it, GPT-2 style) or else one byte is
// a token, its id a hash of its bytes.
std::vector<uint32_t> WordTokenIds(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size() / 4 + 1);
  auto word = [](unsigned char c) { return c >= 0x80 || (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z'); };
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    if (text[j] == ' ' && j + 1 < text.size() && word(static_cast<unsigned char>(text[j + 1]))) ++j;
    if (word(static_cast<unsigned char>(text[j]))) {
      while (j < text.size() && word(static_cast<unsigned char>(text[j]))) ++j;
    } else {
      j = i + 1;
    }
    out.push_back(256 + static_cast<uint32_t>(XXH3_64bits(text.data() + i, j - i) % 100000));
    i = j;
  }
  return out;
}

}  // namespace epp
