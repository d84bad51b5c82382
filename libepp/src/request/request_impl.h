// Internals of the OpenAI request body parser (the DOM path; ParseOpenAIRequest in epp/request.h
// is the contract), shared by its files. Private to libepp/src/request/.
//
// The parser is split by what each part reads:
//   request.cc        the entry points: path -> ApiKind, documents (thread parsers), the
//                           top-level body fields, capture envelopes
//   openai_fields.cc        error locations (JsonPath) and the "<path>: expected ..., got ..."
//                           messages; the typed member readers are inline below
//   openai_canonical_json.cc  canonical JSON J(v) (docs/scheduling.md)
//   openai_chat.cc          chat `messages`, content parts and `tools` (also used by Responses)
//   openai_responses.cc     Responses `instructions` and `input` items
//   openai_prompt_input.cc  completions `prompt` and embeddings `input`: strings or token ids
//   json_syntax_error.cc    the byte offset of the first syntax error, for invalid bodies
//
// Everything is in epp::internal::openai; the hot readers are inline so that splitting the files
// costs the happy path no calls.
#pragma once

#include <simdjson.h>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "epp/request.h"
#include "epp/status.h"

namespace epp::internal::openai {

using simdjson::dom::element;
using simdjson::dom::element_type;

// ---------------------------------------------------------------------------------------------
// Error locations (openai_fields.cc). A JsonPath is a chain of stack-allocated segments; it is
// turned into text ("messages[2].content") only when an error is reported, so the happy path
// never formats one. The messages say where and what, as a client needs to fix its request: GIE
// and model servers answer a bad body with 400, and this text is what epp puts in it.

inline constexpr size_t kNoIndex = static_cast<size_t>(-1);

struct JsonPath {
  const JsonPath* parent = nullptr;
  std::string_view key;  // object member name, unless index != kNoIndex
  size_t index = kNoIndex;

  JsonPath Key(std::string_view k) const { return JsonPath{this, k, kNoIndex}; }
  JsonPath Index(size_t i) const { return JsonPath{this, {}, i}; }
};

std::string PathString(const JsonPath& path);

absl::Status ErrorAt(const JsonPath& path, std::string_view what);

// "string", "object", ..., and numbers with their value ("number -1"), for "got ..." messages.
std::string Describe(const element& e);

absl::Status TypeError(const JsonPath& path, std::string_view expected, const element& got);

absl::Status Missing(const JsonPath& path);

absl::Status Empty(const JsonPath& path);

// ---------------------------------------------------------------------------------------------
// Typed member readers: what every part of the parser uses to read a field.

inline bool IsNull(const element& e) { return e.type() == element_type::NULL_VALUE; }

inline std::optional<std::string_view> AsString(const element& e) {
  std::string_view s;
  if (e.get_string().get(s) != simdjson::SUCCESS) return std::nullopt;
  return s;
}

inline std::optional<simdjson::dom::array> AsArray(const element& e) {
  simdjson::dom::array a;
  if (e.get_array().get(a) != simdjson::SUCCESS) return std::nullopt;
  return a;
}

inline std::optional<simdjson::dom::object> AsObject(const element& e) {
  simdjson::dom::object o;
  if (e.get_object().get(o) != simdjson::SUCCESS) return std::nullopt;
  return o;
}

// The value of member `key`. JSON allows repeated names; like Python's json and Go's
// encoding/json (what model servers and GIE use) the last one wins.
inline std::optional<element> Member(const simdjson::dom::object& obj, std::string_view key) {
  std::optional<element> found;
  for (simdjson::dom::key_value_pair kv : obj) {
    if (kv.key == key) found = kv.value;
  }
  return found;
}

// A string member: nullopt with `status` set when present but not a string. Absent or null
// members give nullopt with an OK status.
inline std::optional<std::string_view> OptionalString(const simdjson::dom::object& obj, std::string_view key,
                                                      const JsonPath& at, absl::Status& status) {
  std::optional<element> v = Member(obj, key);
  if (!v.has_value() || IsNull(*v)) return std::nullopt;
  std::optional<std::string_view> s = AsString(*v);
  if (!s.has_value()) status = TypeError(at.Key(key), "a string", *v);
  return s;
}

// A required string member.
inline absl::StatusOr<std::string_view> RequiredString(const simdjson::dom::object& obj, std::string_view key,
                                                       const JsonPath& at) {
  std::optional<element> v = Member(obj, key);
  if (!v.has_value()) return Missing(at.Key(key));
  std::optional<std::string_view> s = AsString(*v);
  if (!s.has_value()) return TypeError(at.Key(key), "a string", *v);
  return *s;
}

// ---------------------------------------------------------------------------------------------
// Canonical JSON (openai_canonical_json.cc): how parts with no text of their own (tools, tool
// calls, non-message items, unknown content parts) enter the prompt, so that the same value
// always renders the same bytes whatever its key order or spacing.

template <typename T>
void AppendNumber(T value, std::string& out) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), value);
  out.append(buf, r.ptr);
}

void AppendCanonicalJson(const element& e, std::string& out);

// ---------------------------------------------------------------------------------------------
// Prompt rendering, one function per input shape; the grammar is documented in
// docs/scheduling.md. `media` counts image, audio and video parts (InferenceRequest::media_parts).

// Where a renderer reports a media part: it always counts it, and when the sink was made from
// the request it also records what the part is (InferenceRequest::media_items). Passed by value;
// a bare `int&` still converts to a counting-only sink.
class MediaSink {
 public:
  MediaSink(int& count) : count_(&count) {}  // NOLINT(google-explicit-constructor): counting only
  MediaSink(InferenceRequest& req) : count_(&req.media_parts), items_(&req.media_items) {}  // NOLINT
  // Counts a part whose identity is unknown.
  void Count() const { ++*count_; }
  // Counts a part and records it with the hash of `content` (MediaContentHash).
  void Add(MediaModality modality, std::string_view content) const {
    ++*count_;
    if (items_ != nullptr) items_->push_back(MediaItem{modality, MediaContentHash(content)});
  }

 private:
  int* count_;
  std::vector<MediaItem>* items_ = nullptr;
};

// openai_chat.cc: a chat `messages` array (also an embeddings conversation), and `tools`.
absl::Status AppendMessage(const simdjson::dom::object& msg, const JsonPath& at, std::string& out, MediaSink media);
absl::Status AppendMessages(const element& messages, const JsonPath& at, std::string& out, MediaSink media);
absl::Status AppendTools(const std::optional<element>& tools, const JsonPath& at, std::string& out);

// openai_responses.cc: the Responses API's `instructions` and `input`.
absl::Status AppendInstructions(const std::optional<element>& instructions, const JsonPath& at, std::string& out);
absl::Status AppendResponsesInput(const element& input, const JsonPath& at, std::string& out, MediaSink media);

// openai_prompt_input.cc: a completions `prompt` or embeddings `input`. `token_count` is set for
// token-id prompts.
absl::Status AppendPromptInput(const element& value, const JsonPath& at, std::string& out,
                               std::optional<int64_t>& token_count);

// ---------------------------------------------------------------------------------------------
// Documents and bodies (request.cc), shared with the parsers of the other request APIs.

// A parsed JSON document: the root element and, for inputs over 1 MiB, the parser that owns it
// (smaller ones use the calling thread's parser of `slot`: 0 a document, 1 a body nested in an
// envelope as a JSON string, 2 the fast path's canonical JSON, 3 a body nested in a gRPC frame).
class JsonDocument {
 public:
  // `padded`: the text has kRequestBodyPadding readable bytes past its end (simdjson reads it in
  // place); otherwise simdjson copies it into a padded buffer first. Syntax errors give the byte
  // offset, prefixed by `where` when given.
  absl::Status Parse(std::string_view text, int slot, const JsonPath* where, bool padded = false);
  const element& root() const { return root_; }

 private:
  std::unique_ptr<simdjson::dom::parser> own_;
  element root_;
};

// An OpenAI body (the DOM path of ParseOpenAIRequest) for `api`.
absl::Status ParseOpenAIBody(const element& root, size_t body_size, const JsonPath& at, ApiKind api,
                             InferenceRequest& req);

// media: a media reference M(s) (docs/scheduling.md), in openai_chat.cc.
void AppendMediaRef(std::string_view ref, std::string& out);

// ---------------------------------------------------------------------------------------------
// Locating syntax errors (json_syntax_error.cc). simdjson reports *what* went wrong but not
// *where*; on failure this re-reads the text to find the byte offset of the first error. It runs
// only on invalid input.

struct SyntaxError {
  size_t offset;
  std::string_view reason;
};

// The earlier of the first RFC 8259 syntax error and the first invalid UTF-8 byte, or nullopt.
std::optional<SyntaxError> FindSyntaxError(std::string_view text);

}  // namespace epp::internal::openai
