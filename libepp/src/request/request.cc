// OpenAI request bodies -> InferenceRequest, with simdjson's DOM parser.
//
// simdjson validates the whole document (UTF-8 included) in one SIMD pass and gives unescaped
// strings, so the canonical prompt is built by appending views of the parsed strings: no
// intermediate tree of std::strings. Each thread keeps two parsers (one for an envelope, one for a
// body nested in it as a JSON string) so steady-state parsing allocates only the output strings.
//
// simdjson reports *what* went wrong but not *where*; on failure a small scanner (below) re-reads
// the text to find the byte offset of the first error. It runs only on invalid input.
#include <simdjson.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "epp/prefix_cache.h"
#include "epp/request.h"
#include "request/fast_parse.h"

namespace epp {

std::string_view ApiKindName(ApiKind api) {
  switch (api) {
    case ApiKind::kCompletions: return "completions";
    case ApiKind::kChatCompletions: return "chat_completions";
    case ApiKind::kResponses: return "responses";
    case ApiKind::kEmbeddings: return "embeddings";
    case ApiKind::kOther: return "other";
  }
  return "other";
}

ApiKind ApiKindForPath(std::string_view path) {
  path = path.substr(0, path.find('?'));
  if (path.ends_with("/chat/completions")) return ApiKind::kChatCompletions;
  if (path.ends_with("/completions")) return ApiKind::kCompletions;
  if (path.ends_with("/responses")) return ApiKind::kResponses;
  if (path.ends_with("/embeddings")) return ApiKind::kEmbeddings;
  return ApiKind::kCompletions;
}

namespace {

char AsciiLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (AsciiLower(a[i]) != AsciiLower(b[i])) return false;
  }
  return true;
}

}  // namespace

std::optional<std::string_view> InferenceRequest::header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (EqualsIgnoreCase(n, name)) return std::string_view(v);
  }
  return std::nullopt;
}

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

// ---------------------------------------------------------------------------------------------
// Error locations. A JsonPath is a chain of stack-allocated segments; it is turned into text
// ("messages[2].content") only when an error is reported, so the happy path never formats one.

constexpr size_t kNoIndex = static_cast<size_t>(-1);

struct JsonPath {
  const JsonPath* parent = nullptr;
  std::string_view key;  // object member name, unless index != kNoIndex
  size_t index = kNoIndex;

  JsonPath Key(std::string_view k) const { return JsonPath{this, k, kNoIndex}; }
  JsonPath Index(size_t i) const { return JsonPath{this, {}, i}; }
};

std::string PathString(const JsonPath& path) {
  std::vector<const JsonPath*> chain;
  for (const JsonPath* p = &path; p != nullptr; p = p->parent) chain.push_back(p);
  std::string out;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const JsonPath& seg = **it;
    if (seg.index != kNoIndex) {
      absl::StrAppend(&out, "[", seg.index, "]");
    } else if (seg.parent != nullptr) {  // the root segment has no name
      if (!out.empty()) out += '.';
      out += seg.key;
    }
  }
  return out;
}

absl::Status ErrorAt(const JsonPath& path, std::string_view what) {
  std::string where = PathString(path);
  if (where.empty()) where = "request body";
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", ToAbsl(what)));
}

void AppendCanonicalJson(const element& e, std::string& out);

// "string", "object", ..., and numbers with their value ("number -1"), for "got ..." messages.
std::string Describe(const element& e) {
  switch (e.type()) {
    case element_type::ARRAY: return "array";
    case element_type::OBJECT: return "object";
    case element_type::STRING: return "string";
    case element_type::BOOL: return "boolean";
    case element_type::NULL_VALUE: return "null";
    case element_type::INT64:
    case element_type::UINT64:
    case element_type::DOUBLE: {
      std::string out = "number ";
      AppendCanonicalJson(e, out);
      return out;
    }
  }
  return "value";
}

absl::Status TypeError(const JsonPath& path, std::string_view expected, const element& got) {
  return ErrorAt(path, absl::StrCat("expected ", ToAbsl(expected), ", got ", Describe(got)));
}

absl::Status Missing(const JsonPath& path) { return ErrorAt(path, "missing"); }

absl::Status Empty(const JsonPath& path) { return ErrorAt(path, "must not be empty"); }

bool IsNull(const element& e) { return e.type() == element_type::NULL_VALUE; }

std::optional<std::string_view> AsString(const element& e) {
  std::string_view s;
  if (e.get_string().get(s) != simdjson::SUCCESS) return std::nullopt;
  return s;
}

std::optional<simdjson::dom::array> AsArray(const element& e) {
  simdjson::dom::array a;
  if (e.get_array().get(a) != simdjson::SUCCESS) return std::nullopt;
  return a;
}

std::optional<simdjson::dom::object> AsObject(const element& e) {
  simdjson::dom::object o;
  if (e.get_object().get(o) != simdjson::SUCCESS) return std::nullopt;
  return o;
}

// The value of member `key`. JSON allows repeated names; like Python's json and Go's
// encoding/json (what model servers and GIE use) the last one wins.
std::optional<element> Member(const simdjson::dom::object& obj, std::string_view key) {
  std::optional<element> found;
  for (simdjson::dom::key_value_pair kv : obj) {
    if (kv.key == key) found = kv.value;
  }
  return found;
}

// A string member: nullopt with `status` set when present but not a string. Absent or null
// members give nullopt with an OK status.
std::optional<std::string_view> OptionalString(const simdjson::dom::object& obj, std::string_view key,
                                               const JsonPath& at, absl::Status& status) {
  std::optional<element> v = Member(obj, key);
  if (!v.has_value() || IsNull(*v)) return std::nullopt;
  std::optional<std::string_view> s = AsString(*v);
  if (!s.has_value()) status = TypeError(at.Key(key), "a string", *v);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Canonical JSON: keys sorted bytewise (a repeated key keeps its last value), no whitespace,
// strings with the minimal escapes (", \, control characters; everything else raw UTF-8), numbers
// by value (integers in decimal, other numbers in shortest round-trip form, so 1.0 is "1").
// simdjson bounds nesting at 1024 levels, which bounds this recursion.

void AppendJsonString(std::string_view s, std::string& out) {
  out += '"';
  size_t run = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default: {
        static constexpr char kHex[] = "0123456789abcdef";
        const char esc[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xf]};
        out.append(esc, sizeof(esc));
      }
    }
  }
  out.append(s.data() + run, s.size() - run);
  out += '"';
}

template <typename T>
void AppendNumber(T value, std::string& out) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), value);
  out.append(buf, r.ptr);
}

void AppendCanonicalJson(const element& e, std::string& out) {
  switch (e.type()) {
    case element_type::NULL_VALUE: out += "null"; return;
    // The type was just checked, so the typed getters cannot fail.
    case element_type::BOOL: {
      bool b = false;
      if (e.get_bool().get(b) == simdjson::SUCCESS) out += b ? "true" : "false";
      return;
    }
    case element_type::INT64: {
      int64_t v = 0;
      if (e.get_int64().get(v) == simdjson::SUCCESS) AppendNumber(v, out);
      return;
    }
    case element_type::UINT64: {
      uint64_t v = 0;
      if (e.get_uint64().get(v) == simdjson::SUCCESS) AppendNumber(v, out);
      return;
    }
    case element_type::DOUBLE: {
      double v = 0;
      if (e.get_double().get(v) == simdjson::SUCCESS) AppendNumber(v, out);
      return;
    }
    case element_type::STRING: AppendJsonString(*AsString(e), out); return;
    case element_type::ARRAY: {
      out += '[';
      bool first = true;
      const simdjson::dom::array items = *AsArray(e);
      for (element item : items) {
        if (!first) out += ',';
        first = false;
        AppendCanonicalJson(item, out);
      }
      out += ']';
      return;
    }
    case element_type::OBJECT: {
      std::vector<std::pair<std::string_view, element>> members;
      const simdjson::dom::object obj = *AsObject(e);
      for (simdjson::dom::key_value_pair kv : obj) members.emplace_back(kv.key, kv.value);
      std::stable_sort(members.begin(), members.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      out += '{';
      bool first = true;
      for (size_t i = 0; i < members.size(); ++i) {
        if (i + 1 < members.size() && members[i + 1].first == members[i].first) continue;
        if (!first) out += ',';
        first = false;
        AppendJsonString(members[i].first, out);
        out += ':';
        AppendCanonicalJson(members[i].second, out);
      }
      out += '}';
      return;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Prompt rendering; the grammar is documented in docs/scheduling.md.

// Media references (URLs, base64 payloads) longer than this are shortened to a prefix plus a
// hash of the whole: a 2 MB data: URL must not turn into 2 MB of "prompt" (and 500K estimated
// tokens), yet two different images must still render differently.
constexpr size_t kMaxInlineMediaRef = 128;
constexpr size_t kMediaRefPrefix = 64;

void AppendMediaRef(std::string_view ref, std::string& out) {
  if (ref.size() <= kMaxInlineMediaRef) {
    out.append(ref);
    return;
  }
  out.append(ref.substr(0, kMediaRefPrefix));
  out += "...#";
  uint64_t h = XXH3_64bits(ref.data(), ref.size());
  static constexpr char kHex[] = "0123456789abcdef";
  char hex[16];
  for (int i = 15; i >= 0; --i, h >>= 4) hex[i] = kHex[h & 0xf];
  out.append(hex, sizeof(hex));
}

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

// A required string member.
absl::StatusOr<std::string_view> RequiredString(const simdjson::dom::object& obj, std::string_view key,
                                                const JsonPath& at) {
  std::optional<element> v = Member(obj, key);
  if (!v.has_value()) return Missing(at.Key(key));
  std::optional<std::string_view> s = AsString(*v);
  if (!s.has_value()) return TypeError(at.Key(key), "a string", *v);
  return *s;
}

// One element of a content array.
absl::Status AppendContentPart(const element& part, const JsonPath& at, std::string& out, int& media) {
  std::optional<simdjson::dom::object> obj = AsObject(part);
  if (!obj.has_value()) return TypeError(at, "an object", part);
  EPP_ASSIGN_OR_RETURN(std::string_view type, RequiredString(*obj, "type", at));

  if (type == "text" || type == "input_text" || type == "output_text" || type == "refusal") {
    const std::string_view key = type == "refusal" ? "refusal" : "text";
    // A null text is skipped, as vLLM skips it (with a warning).
    if (std::optional<element> v = Member(*obj, key); v.has_value() && v->is_null()) return absl::OkStatus();
    EPP_ASSIGN_OR_RETURN(std::string_view text, RequiredString(*obj, key, at));
    out.append(text);
    return absl::OkStatus();
  }
  if (type == "image_url") {
    // Chat: {"image_url": {"url": ...}}; a bare string URL is accepted as vLLM does.
    const JsonPath image_path = at.Key("image_url");
    std::optional<element> image = Member(*obj, "image_url");
    if (!image.has_value()) return Missing(image_path);
    std::optional<std::string_view> url = AsString(*image);
    if (!url.has_value()) {
      std::optional<simdjson::dom::object> image_obj = AsObject(*image);
      if (!image_obj.has_value()) return TypeError(image_path, "an object or a string", *image);
      EPP_ASSIGN_OR_RETURN(url, RequiredString(*image_obj, "url", image_path));
    }
    ++media;
    out += "<image:";
    AppendMediaRef(*url, out);
    out += '>';
    return absl::OkStatus();
  }
  if (type == "input_image") {
    // Responses: {"image_url": "<url>"} or {"file_id": "<id>"}.
    absl::Status status;
    std::optional<std::string_view> ref = OptionalString(*obj, "image_url", at, status);
    EPP_RETURN_IF_ERROR(status);
    if (!ref.has_value()) ref = OptionalString(*obj, "file_id", at, status);
    EPP_RETURN_IF_ERROR(status);
    if (!ref.has_value()) return ErrorAt(at, "expected a string image_url or file_id");
    ++media;
    out += "<image:";
    AppendMediaRef(*ref, out);
    out += '>';
    return absl::OkStatus();
  }
  if (type == "input_audio") {
    const JsonPath audio_path = at.Key("input_audio");
    std::optional<element> audio = Member(*obj, "input_audio");
    if (!audio.has_value()) return Missing(audio_path);
    std::optional<simdjson::dom::object> audio_obj = AsObject(*audio);
    if (!audio_obj.has_value()) return TypeError(audio_path, "an object", *audio);
    EPP_ASSIGN_OR_RETURN(std::string_view data, RequiredString(*audio_obj, "data", audio_path));
    ++media;
    out += "<audio:";
    AppendMediaRef(data, out);
    out += '>';
    return absl::OkStatus();
  }
  // Any other part (file, video_url, ...): its type and a reference to its canonical JSON.
  if (type == "video_url" || type == "audio_url") ++media;
  std::string json;
  AppendCanonicalJson(part, json);
  out += '<';
  out.append(type);
  out += ':';
  AppendMediaRef(json, out);
  out += '>';
  return absl::OkStatus();
}

// `content` of a message: a string, an array of parts, or null.
absl::Status AppendContent(const element& content, const JsonPath& at, std::string& out, int& media) {
  if (std::optional<std::string_view> s = AsString(content)) {
    out.append(*s);
    return absl::OkStatus();
  }
  if (IsNull(content)) return absl::OkStatus();
  std::optional<simdjson::dom::array> parts = AsArray(content);
  if (!parts.has_value()) return TypeError(at, "a string or an array of parts", content);
  size_t i = 0;
  for (element part : *parts) {
    EPP_RETURN_IF_ERROR(AppendContentPart(part, at.Index(i), out, media));
    ++i;
  }
  return absl::OkStatus();
}

// One chat message (or Responses message item): role, content, then the tool calls it makes.
absl::Status AppendMessage(const simdjson::dom::object& msg, const JsonPath& at, std::string& out, int& media) {
  std::optional<element> role, content, tool_calls, function_call;
  for (simdjson::dom::key_value_pair kv : msg) {
    if (kv.key == "role") role = kv.value;
    else if (kv.key == "content") content = kv.value;
    else if (kv.key == "tool_calls") tool_calls = kv.value;
    else if (kv.key == "function_call") function_call = kv.value;
  }
  if (!role.has_value()) return Missing(at.Key("role"));
  std::optional<std::string_view> role_name = AsString(*role);
  if (!role_name.has_value()) return TypeError(at.Key("role"), "a string", *role);
  out.append(*role_name);
  out += '\n';
  if (content.has_value()) EPP_RETURN_IF_ERROR(AppendContent(*content, at.Key("content"), out, media));
  if (tool_calls.has_value() && !IsNull(*tool_calls)) AppendCanonicalJson(*tool_calls, out);
  if (function_call.has_value() && !IsNull(*function_call)) AppendCanonicalJson(*function_call, out);
  out += '\n';
  return absl::OkStatus();
}

absl::Status AppendMessages(const element& messages, const JsonPath& at, std::string& out, int& media) {
  std::optional<simdjson::dom::array> list = AsArray(messages);
  if (!list.has_value()) return TypeError(at, "an array", messages);
  if (list->begin() == list->end()) return Empty(at);
  size_t i = 0;
  for (element m : *list) {
    const JsonPath msg_path = at.Index(i);
    std::optional<simdjson::dom::object> msg = AsObject(m);
    if (!msg.has_value()) return TypeError(msg_path, "an object", m);
    EPP_RETURN_IF_ERROR(AppendMessage(*msg, msg_path, out, media));
    ++i;
  }
  return absl::OkStatus();
}

// `tools`: rendered whole (names, descriptions, parameter schemas) as canonical JSON, since model
// servers put all of it into the prompt. Absent, null and [] render nothing.
absl::Status AppendTools(const std::optional<element>& tools, const JsonPath& at, std::string& out) {
  if (!tools.has_value() || IsNull(*tools)) return absl::OkStatus();
  std::optional<simdjson::dom::array> list = AsArray(*tools);
  if (!list.has_value()) return TypeError(at, "an array", *tools);
  if (list->begin() == list->end()) return absl::OkStatus();
  size_t i = 0;
  for (element t : *list) {
    if (!AsObject(t).has_value()) return TypeError(at.Index(i), "an object", t);
    ++i;
  }
  out += "tools\n";
  AppendCanonicalJson(*tools, out);
  out += '\n';
  return absl::OkStatus();
}

// One item of a Responses `input` array: a message (has a role; type absent or "message"), or
// another item (function_call, function_call_output, reasoning, ...) rendered as its type and
// canonical JSON.
absl::Status AppendResponseItem(const element& item, const JsonPath& at, std::string& out, int& media) {
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

absl::Status AppendResponsesInput(const element& input, const JsonPath& at, std::string& out, int& media) {
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

// The top-level members the parser reads (last occurrence wins).
struct BodyFields {
  std::optional<element> model, stream, cache_salt, prompt, messages, input, instructions, tools;
};

absl::Status ParseBody(const element& root, size_t body_size, const JsonPath& at, ApiKind api,
                       InferenceRequest& req) {
  std::optional<simdjson::dom::object> obj = AsObject(root);
  if (!obj.has_value()) return TypeError(at, "a JSON object", root);
  BodyFields f;
  for (simdjson::dom::key_value_pair kv : *obj) {
    const std::string_view k = kv.key;
    if (k == "model") f.model = kv.value;
    else if (k == "stream") f.stream = kv.value;
    else if (k == "cache_salt") f.cache_salt = kv.value;
    else if (k == "prompt") f.prompt = kv.value;
    else if (k == "messages") f.messages = kv.value;
    else if (k == "input") f.input = kv.value;
    else if (k == "instructions") f.instructions = kv.value;
    else if (k == "tools") f.tools = kv.value;
  }

  const JsonPath model_path = at.Key("model");
  if (!f.model.has_value()) return Missing(model_path);
  std::optional<std::string_view> model = AsString(*f.model);
  if (!model.has_value()) return TypeError(model_path, "a string", *f.model);
  if (model->empty()) return Empty(model_path);
  req.model.assign(*model);

  if (f.stream.has_value() && !IsNull(*f.stream)) {
    bool stream = false;
    if (f.stream->get_bool().get(stream) != simdjson::SUCCESS) {
      return TypeError(at.Key("stream"), "a boolean", *f.stream);
    }
    req.stream = stream;
  }
  if (f.cache_salt.has_value() && !IsNull(*f.cache_salt)) {
    std::optional<std::string_view> salt = AsString(*f.cache_salt);
    if (!salt.has_value()) return TypeError(at.Key("cache_salt"), "a string", *f.cache_salt);
    req.cache_salt.assign(*salt);
  }

  std::string& out = req.prompt;
  // The rendering is almost never longer than the JSON it comes from; one allocation up front
  // avoids re-copying a 200 KB prompt on every doubling.
  out.reserve(body_size);
  std::optional<int64_t> token_count;
  switch (api) {
    case ApiKind::kChatCompletions: {
      const JsonPath messages_path = at.Key("messages");
      if (!f.messages.has_value()) return Missing(messages_path);
      EPP_RETURN_IF_ERROR(AppendTools(f.tools, at.Key("tools"), out));
      EPP_RETURN_IF_ERROR(AppendMessages(*f.messages, messages_path, out, req.media_parts));
      break;
    }
    case ApiKind::kResponses: {
      const JsonPath input_path = at.Key("input");
      if (!f.input.has_value()) return Missing(input_path);
      if (f.instructions.has_value() && !IsNull(*f.instructions)) {
        std::optional<std::string_view> instructions = AsString(*f.instructions);
        if (!instructions.has_value()) return TypeError(at.Key("instructions"), "a string", *f.instructions);
        if (!instructions->empty()) {
          out += "instructions\n";
          out.append(*instructions);
          out += '\n';
        }
      }
      EPP_RETURN_IF_ERROR(AppendTools(f.tools, at.Key("tools"), out));
      EPP_RETURN_IF_ERROR(AppendResponsesInput(*f.input, input_path, out, req.media_parts));
      break;
    }
    case ApiKind::kEmbeddings: {
      // vLLM also embeds chat conversations given as `messages` instead of `input`.
      if (!f.input.has_value() && f.messages.has_value()) {
        EPP_RETURN_IF_ERROR(AppendMessages(*f.messages, at.Key("messages"), out, req.media_parts));
        break;
      }
      const JsonPath input_path = at.Key("input");
      if (!f.input.has_value()) return Missing(input_path);
      EPP_RETURN_IF_ERROR(AppendPromptInput(*f.input, input_path, out, token_count));
      break;
    }
    case ApiKind::kCompletions:
    case ApiKind::kOther: {
      const JsonPath prompt_path = at.Key("prompt");
      if (!f.prompt.has_value()) return Missing(prompt_path);
      EPP_RETURN_IF_ERROR(AppendPromptInput(*f.prompt, prompt_path, out, token_count));
      break;
    }
  }
  // Media payloads shrink to references; don't keep megabytes reserved for the request's lifetime.
  if (out.capacity() > 2 * out.size() + 4096) out.shrink_to_fit();
  req.prompt_tokens = token_count.has_value() ? *token_count : ApproxTokens(out.size());
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Locating syntax errors. An iterative RFC 8259 scanner (no recursion, so any nesting depth is
// safe) plus a UTF-8 check; the earlier of the two findings is reported.

struct SyntaxError {
  size_t offset;
  std::string_view reason;
};

// The offset of the first byte that does not belong to a well-formed UTF-8 sequence (overlong
// forms, surrogates and code points above U+10FFFF are ill-formed), or nullopt.
std::optional<size_t> FirstInvalidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + len > n) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    }
    i += len;
  }
  return std::nullopt;
}

class SyntaxScanner {
 public:
  explicit SyntaxScanner(std::string_view s) : s_(s) {}

  std::optional<SyntaxError> Scan() {
    SkipSpace();
    if (i_ == s_.size()) return SyntaxError{i_, "empty document"};
    enum class State { kValue, kKey, kAfterValue } state = State::kValue;
    std::vector<char> stack;  // '{' or '[' per open container
    while (true) {
      SkipSpace();
      switch (state) {
        case State::kValue: {
          if (i_ == s_.size()) return SyntaxError{i_, "unexpected end of input, expected a value"};
          const char c = s_[i_];
          if (c == '{' || c == '[') {
            stack.push_back(c);
            ++i_;
            SkipSpace();
            if (i_ < s_.size() && s_[i_] == (c == '{' ? '}' : ']')) {
              ++i_;
              stack.pop_back();
              state = State::kAfterValue;
            } else {
              state = c == '{' ? State::kKey : State::kValue;
            }
            continue;
          }
          std::optional<SyntaxError> err;
          if (c == '"') {
            err = ScanString();
          } else if (c == '-' || (c >= '0' && c <= '9')) {
            err = ScanNumber();
          } else if (c == 't' || c == 'f' || c == 'n') {
            err = ScanLiteral();
          } else {
            return SyntaxError{i_, "unexpected character, expected a value"};
          }
          if (err.has_value()) return err;
          state = State::kAfterValue;
          continue;
        }
        case State::kKey: {
          if (i_ == s_.size()) return SyntaxError{i_, "unexpected end of input, expected a string key"};
          if (s_[i_] != '"') return SyntaxError{i_, "expected a string key"};
          if (std::optional<SyntaxError> err = ScanString()) return err;
          SkipSpace();
          if (i_ == s_.size() || s_[i_] != ':') return SyntaxError{i_, "expected ':' after an object key"};
          ++i_;
          state = State::kValue;
          continue;
        }
        case State::kAfterValue: {
          if (stack.empty()) {
            if (i_ != s_.size()) return SyntaxError{i_, "unexpected characters after the JSON value"};
            return std::nullopt;
          }
          const bool in_object = stack.back() == '{';
          if (i_ == s_.size()) {
            return SyntaxError{i_, in_object ? "unexpected end of input, expected ',' or '}'"
                                             : "unexpected end of input, expected ',' or ']'"};
          }
          if (s_[i_] == ',') {
            ++i_;
            state = in_object ? State::kKey : State::kValue;
          } else if (s_[i_] == (in_object ? '}' : ']')) {
            ++i_;
            stack.pop_back();
          } else {
            return SyntaxError{i_, in_object ? "expected ',' or '}' after an object member"
                                             : "expected ',' or ']' after an array element"};
          }
          continue;
        }
      }
    }
  }

 private:
  void SkipSpace() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }

  static int HexValue(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // Reads "\uXXXX" at i_; nullopt if malformed.
  std::optional<int> ReadUnicodeEscape() {
    if (i_ + 6 > s_.size() || s_[i_] != '\\' || s_[i_ + 1] != 'u') return std::nullopt;
    int v = 0;
    for (size_t k = 2; k < 6; ++k) {
      const int h = HexValue(s_[i_ + k]);
      if (h < 0) return std::nullopt;
      v = v * 16 + h;
    }
    i_ += 6;
    return v;
  }

  std::optional<SyntaxError> ScanString() {
    const size_t start = i_;
    ++i_;  // opening quote
    while (true) {
      if (i_ >= s_.size()) return SyntaxError{start, "unterminated string"};
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        ++i_;
        return std::nullopt;
      }
      if (c < 0x20) return SyntaxError{i_, "unescaped control character in a string"};
      if (c != '\\') {
        ++i_;
        continue;
      }
      const size_t esc = i_;
      if (i_ + 1 >= s_.size()) return SyntaxError{start, "unterminated string"};
      const char e = s_[i_ + 1];
      if (e == 'u') {
        std::optional<int> cp = ReadUnicodeEscape();
        if (!cp.has_value()) return SyntaxError{esc, "invalid \\u escape"};
        if (*cp >= 0xD800 && *cp <= 0xDBFF) {
          std::optional<int> low = ReadUnicodeEscape();
          if (!low.has_value() || *low < 0xDC00 || *low > 0xDFFF) {
            return SyntaxError{esc, "unpaired UTF-16 surrogate in a \\u escape"};
          }
        } else if (*cp >= 0xDC00 && *cp <= 0xDFFF) {
          return SyntaxError{esc, "unpaired UTF-16 surrogate in a \\u escape"};
        }
        continue;
      }
      if (e == '\0' || std::strchr("\"\\/bfnrt", e) == nullptr) return SyntaxError{esc, "invalid escape sequence"};
      i_ += 2;
    }
  }

  std::optional<SyntaxError> ScanNumber() {
    const size_t start = i_;
    auto digit = [&](size_t k) { return k < s_.size() && s_[k] >= '0' && s_[k] <= '9'; };
    if (s_[i_] == '-') ++i_;
    if (!digit(i_)) return SyntaxError{start, "invalid number"};
    if (s_[i_] == '0') {
      ++i_;
    } else {
      while (digit(i_)) ++i_;
    }
    bool integer = true;
    if (i_ < s_.size() && s_[i_] == '.') {
      integer = false;
      ++i_;
      if (!digit(i_)) return SyntaxError{start, "invalid number"};
      while (digit(i_)) ++i_;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      integer = false;
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!digit(i_)) return SyntaxError{start, "invalid number"};
      while (digit(i_)) ++i_;
    }
    // simdjson rejects integers outside int64/uint64 and numbers beyond the double range.
    const char* first = s_.data() + start;
    const char* last = s_.data() + i_;
    bool in_range = true;
    if (integer && *first == '-') {
      int64_t v = 0;
      in_range = std::from_chars(first, last, v).ec == std::errc();
    } else if (integer) {
      uint64_t v = 0;
      in_range = std::from_chars(first, last, v).ec == std::errc();
    } else {
      in_range = std::isfinite(std::strtod(std::string(first, last).c_str(), nullptr));
    }
    if (!in_range) return SyntaxError{start, "number out of range"};
    return std::nullopt;
  }

  std::optional<SyntaxError> ScanLiteral() {
    for (std::string_view lit : {std::string_view("true"), std::string_view("false"), std::string_view("null")}) {
      if (s_.substr(i_, lit.size()) == lit) {
        i_ += lit.size();
        return std::nullopt;
      }
    }
    return SyntaxError{i_, "invalid literal (expected true, false or null)"};
  }

  std::string_view s_;
  size_t i_ = 0;
};

std::optional<SyntaxError> FindSyntaxError(std::string_view text) {
  std::optional<SyntaxError> syntax = SyntaxScanner(text).Scan();
  std::optional<size_t> utf8 = FirstInvalidUtf8(text);
  if (utf8.has_value() && (!syntax.has_value() || *utf8 < syntax->offset)) {
    return SyntaxError{*utf8, "invalid UTF-8"};
  }
  return syntax;
}

// ---------------------------------------------------------------------------------------------
// Parsers and documents.

// Bodies up to this size are parsed with the calling thread's reusable parser. simdjson sizes its
// buffers to the largest document seen (about 10 bytes per input byte), so larger ones get a
// parser of their own rather than pinning that memory to the thread for good.
constexpr size_t kMaxRetainedDocumentBytes = size_t{1} << 20;

// Slots: 0 a document, 1 a body nested in an envelope as a JSON string, 2 a value the fast path
// renders as canonical JSON.
simdjson::dom::parser& ThreadParser(int slot) {
  thread_local std::array<simdjson::dom::parser, 3> parsers;
  return parsers[slot];
}

// A parsed document: the root element and, for large inputs, the parser that owns it.
class Document {
 public:
  // `padded`: the text has kRequestBodyPadding readable bytes past its end (simdjson reads it in
  // place); otherwise simdjson copies it into a padded buffer first.
  absl::Status Parse(std::string_view text, int slot, const JsonPath* where, bool padded = false) {
    // simdjson copies the text with memcpy, which must not get the null pointer of an empty
    // std::string_view() (undefined behaviour even for 0 bytes).
    if (text.data() == nullptr) text = std::string_view("", 0);
    simdjson::dom::parser* parser = &ThreadParser(slot);
    if (text.size() > kMaxRetainedDocumentBytes) {
      own_ = std::make_unique<simdjson::dom::parser>();
      parser = own_.get();
    }
    const simdjson::error_code err = parser->parse(text.data(), text.size(), !padded).get(root_);
    if (err == simdjson::SUCCESS) return absl::OkStatus();
    if (err == simdjson::MEMALLOC) return absl::ResourceExhaustedError("out of memory parsing JSON");
    std::string msg;
    if (std::optional<SyntaxError> syntax = FindSyntaxError(text)) {
      msg = absl::StrCat("invalid JSON at byte ", syntax->offset, ": ", ToAbsl(syntax->reason));
    } else {
      msg = absl::StrCat("invalid JSON: ", simdjson::error_message(err));
    }
    if (where != nullptr) msg = absl::StrCat(PathString(*where), ": ", msg);
    return absl::InvalidArgumentError(msg);
  }

  const element& root() const { return root_; }

 private:
  std::unique_ptr<simdjson::dom::parser> own_;
  element root_;
};

absl::Status ParseHeaders(const element& headers, const JsonPath& at, InferenceRequest& req) {
  if (IsNull(headers)) return absl::OkStatus();
  std::optional<simdjson::dom::object> obj = AsObject(headers);
  if (!obj.has_value()) return TypeError(at, "an object", headers);
  for (simdjson::dom::key_value_pair kv : *obj) {
    std::string name(kv.key);
    for (char& c : name) c = AsciiLower(c);
    if (std::optional<std::string_view> v = AsString(kv.value)) {
      req.headers.emplace_back(std::move(name), std::string(*v));
      continue;
    }
    const JsonPath header_path = at.Key(kv.key);
    std::optional<simdjson::dom::array> values = AsArray(kv.value);
    if (!values.has_value()) return TypeError(header_path, "a string or an array of strings", kv.value);
    size_t i = 0;
    for (element item : *values) {
      std::optional<std::string_view> v = AsString(item);
      if (!v.has_value()) return TypeError(header_path.Index(i), "a string", item);
      req.headers.emplace_back(name, std::string(*v));
      ++i;
    }
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// `padded`: `body` has kRequestBodyPadding readable bytes past its end. `fast`: try the fast
// path (request/fast_parse.h) first.
absl::StatusOr<InferenceRequest> ParseRequest(std::string_view path, std::string_view body, bool padded,
                                              bool fast = true) {
  InferenceRequest req;
  req.path.assign(path.empty() ? kDefaultRequestPath : path);
  req.api = ApiKindForPath(req.path);
  if (fast) {
    if (internal::FastParseBody(body, req.api, req)) return req;
    // Declined: the DOM path starts from a clean request (the fast path may have written parts).
    InferenceRequest clean;
    clean.path = std::move(req.path);
    clean.api = req.api;
    req = std::move(clean);
  }
  const JsonPath root;
  Document doc;
  EPP_RETURN_IF_ERROR(doc.Parse(body, 0, nullptr, padded));
  EPP_RETURN_IF_ERROR(ParseBody(doc.root(), body.size(), root, req.api, req));
  return req;
}

}  // namespace

namespace internal {

absl::StatusOr<InferenceRequest> ParseOpenAIRequestDom(std::string_view path, std::string_view body) {
  return ParseRequest(path, body, /*padded=*/false, /*fast=*/false);
}

bool AppendCanonicalJsonText(std::string_view json, std::string& out) {
  element root;
  if (ThreadParser(2).parse(json.data(), json.size(), /*realloc_if_needed=*/true).get(root) != simdjson::SUCCESS) {
    return false;
  }
  AppendCanonicalJson(root, out);
  return true;
}

}  // namespace internal

absl::StatusOr<InferenceRequest> ParseOpenAIRequest(std::string_view path, std::string_view body) {
  return ParseRequest(path, body, /*padded=*/false);
}

absl::StatusOr<InferenceRequest> ParseOpenAIRequestInPlace(std::string_view path, std::string& body) {
  static_assert(kRequestBodyPadding >= simdjson::SIMDJSON_PADDING);
  const size_t size = body.size();
  if (body.capacity() - size < kRequestBodyPadding) body.reserve(size + kRequestBodyPadding);
  // Written, not only allocated: the parser reads these bytes.
  body.append(kRequestBodyPadding, ' ');
  body.resize(size);
  return ParseRequest(path, body, /*padded=*/true);
}

absl::StatusOr<InferenceRequest> ParseCaptureEnvelope(std::string_view json, std::string_view path_override,
                                                      std::string* body_out) {
  const JsonPath root;
  Document doc;
  EPP_RETURN_IF_ERROR(doc.Parse(json, 0, nullptr));
  std::optional<simdjson::dom::object> top = AsObject(doc.root());
  if (!top.has_value()) {
    return ErrorAt(root, absl::StrCat("expected a JSON object (a capture envelope or a request body), got ",
                                      Describe(doc.root())));
  }
  InferenceRequest req;
  absl::Status status;
  std::optional<std::string_view> path = OptionalString(*top, "path", root, status);
  EPP_RETURN_IF_ERROR(status);
  if (!path_override.empty()) path = path_override;

  std::optional<element> body = Member(*top, "body");
  if (!body.has_value()) {  // a bare body
    req.path.assign(path.value_or(kDefaultRequestPath));
    if (req.path.empty()) req.path.assign(kDefaultRequestPath);
    req.api = ApiKindForPath(req.path);
    EPP_RETURN_IF_ERROR(ParseBody(doc.root(), json.size(), root, req.api, req));
    if (body_out) body_out->assign(json);
    return req;
  }

  if (std::optional<element> headers = Member(*top, "headers")) {
    EPP_RETURN_IF_ERROR(ParseHeaders(*headers, root.Key("headers"), req));
  }
  if (path.has_value() && !path->empty()) {
    req.path.assign(*path);
  } else {
    // Where GIE's openai-parser looks for the path, in its order.
    for (std::string_view name : {":path", "x-original-path", "x-forwarded-path"}) {
      if (std::optional<std::string_view> v = req.header(name)) {
        req.path.assign(*v);
        break;
      }
    }
    if (req.path.empty()) req.path.assign(kDefaultRequestPath);
  }
  req.api = ApiKindForPath(req.path);

  const JsonPath body_path = root.Key("body");
  if (std::optional<std::string_view> text = AsString(*body)) {
    Document inner;
    EPP_RETURN_IF_ERROR(inner.Parse(*text, 1, &body_path));
    EPP_RETURN_IF_ERROR(ParseBody(inner.root(), text->size(), body_path, req.api, req));
    if (body_out) body_out->assign(*text);
    return req;
  }
  if (!AsObject(*body).has_value()) {
    return TypeError(body_path, "a JSON object or a JSON string", *body);
  }
  EPP_RETURN_IF_ERROR(ParseBody(*body, json.size(), body_path, req.api, req));
  if (body_out) *body_out = simdjson::minify(*body);
  return req;
}

}  // namespace epp
