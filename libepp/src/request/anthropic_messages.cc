// Anthropic Messages (/v1/messages) bodies -> InferenceRequest: the canonical prompt
// (docs/scheduling.md, "Anthropic Messages"), model, stream, cache_salt and media parts.
//
// Like the chat rendering, the prompt is what the router hashes and estimates, not the tokens of a
// chat template (token-producer renders those through AnthropicToChatCompletions): tools, then
// the system text, then each message as its role and content. Two choices keep agent traffic
// (Claude Code and the like) stable across turns, which is where prefix caching pays:
// cache_control markers, which clients move to the newest block every turn, are never rendered,
// and system text blocks starting with x-anthropic-billing-header (a per-request hash Claude Code
// sends) are dropped, as vLLM drops them.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/json_string.h"
#include "epp/prefix_cache.h"
#include "request/request_apis.h"
#include "request/request_impl.h"

namespace epp::internal {
namespace {

using namespace openai;  // NOLINT: the JSON readers of request_impl.h

constexpr std::string_view kBillingHeaderPrefix = "x-anthropic-billing-header";

// J(v) of an object without its cache_control member (members sorted, last duplicate wins).
void AppendCanonicalWithoutCacheControl(const element& e, std::string& out) {
  std::optional<simdjson::dom::object> obj = AsObject(e);
  if (!obj.has_value()) {
    AppendCanonicalJson(e, out);
    return;
  }
  std::vector<std::pair<std::string_view, element>> members;
  for (simdjson::dom::key_value_pair kv : *obj) {
    if (kv.key == "cache_control") continue;
    auto it = std::find_if(members.begin(), members.end(), [&](const auto& m) { return m.first == kv.key; });
    if (it != members.end()) it->second = kv.value;
    else members.emplace_back(kv.key, kv.value);
  }
  std::sort(members.begin(), members.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  out += '{';
  bool first = true;
  for (const auto& [key, value] : members) {
    if (!first) out += ',';
    first = false;
    AppendJsonString(key, out);
    out += ':';
    AppendCanonicalJson(value, out);
  }
  out += '}';
}

// The URL vLLM makes of an image source: a URL source's url, else a data: URI of the base64 data
// (media type image/jpeg when none is given).
absl::StatusOr<std::string> ImageSourceUrl(const simdjson::dom::object& block, const JsonPath& at) {
  const JsonPath source_path = at.Key("source");
  std::optional<element> source = Member(block, "source");
  if (!source.has_value()) return Missing(source_path);
  std::optional<simdjson::dom::object> src = AsObject(*source);
  if (!src.has_value()) return TypeError(source_path, "an object", *source);
  absl::Status status;
  std::optional<std::string_view> type = OptionalString(*src, "type", source_path, status);
  EPP_RETURN_IF_ERROR(status);
  std::optional<std::string_view> url = OptionalString(*src, "url", source_path, status);
  EPP_RETURN_IF_ERROR(status);
  if (type == "url" || url.has_value()) {
    if (!url.has_value()) return Missing(source_path.Key("url"));
    return std::string(*url);
  }
  std::optional<std::string_view> media_type = OptionalString(*src, "media_type", source_path, status);
  EPP_RETURN_IF_ERROR(status);
  EPP_ASSIGN_OR_RETURN(std::string_view data, RequiredString(*src, "data", source_path));
  std::string out = "data:";
  out.append(media_type.value_or("image/jpeg"));
  out += ";base64,";
  out.append(data);
  return out;
}

absl::Status AppendBlocks(const element& content, const JsonPath& at, std::string& out, MediaSink media, int depth);

// One content block.
absl::Status AppendBlock(const element& b, const JsonPath& at, std::string& out, MediaSink media, int depth) {
  std::optional<simdjson::dom::object> block = AsObject(b);
  if (!block.has_value()) return TypeError(at, "an object", b);
  EPP_ASSIGN_OR_RETURN(std::string_view type, RequiredString(*block, "type", at));
  if (type == "text") {
    if (std::optional<element> v = Member(*block, "text"); v.has_value() && v->is_null()) return absl::OkStatus();
    EPP_ASSIGN_OR_RETURN(std::string_view text, RequiredString(*block, "text", at));
    out.append(text);
    return absl::OkStatus();
  }
  if (type == "image") {
    EPP_ASSIGN_OR_RETURN(std::string url, ImageSourceUrl(*block, at));
    media.Add(MediaModality::kImage, url);
    out += "<image:";
    AppendMediaRef(url, out);
    out += '>';
    return absl::OkStatus();
  }
  if (type == "thinking") {
    EPP_ASSIGN_OR_RETURN(std::string_view thinking, RequiredString(*block, "thinking", at));
    out += "<thinking>";
    out.append(thinking);
    out += "</thinking>";
    return absl::OkStatus();
  }
  // Opaque (encrypted) reasoning: vLLM gives it no tokens, so neither does the estimate.
  if (type == "redacted_thinking") return absl::OkStatus();
  if (type == "tool_use") {
    // J of {id, input, name}: the call as a model sees it, without cache_control.
    absl::Status status;
    std::optional<std::string_view> id = OptionalString(*block, "id", at, status);
    EPP_RETURN_IF_ERROR(status);
    std::optional<std::string_view> name = OptionalString(*block, "name", at, status);
    EPP_RETURN_IF_ERROR(status);
    std::optional<element> input = Member(*block, "input");
    out += "<tool_use:{";
    bool first = true;
    auto member = [&](std::string_view key, const std::optional<element>& v) {
      if (!v.has_value()) return;
      if (!first) out += ',';
      first = false;
      out += '"';
      out.append(key);
      out += "\":";
      AppendCanonicalJson(*v, out);
    };
    member("id", id.has_value() ? Member(*block, "id") : std::nullopt);
    member("input", input);
    member("name", name.has_value() ? Member(*block, "name") : std::nullopt);
    out += "}>";
    return absl::OkStatus();
  }
  if (type == "tool_result") {
    absl::Status status;
    std::optional<std::string_view> id = OptionalString(*block, "tool_use_id", at, status);
    EPP_RETURN_IF_ERROR(status);
    out += "<tool_result:";
    out.append(id.value_or(""));
    out += '>';
    if (std::optional<element> content = Member(*block, "content"); content.has_value() && !IsNull(*content)) {
      // Nested blocks are one level deep in the API; the bound keeps a hostile body from recursing.
      if (depth >= 4) return ErrorAt(at.Key("content"), "tool results nested too deeply");
      EPP_RETURN_IF_ERROR(AppendBlocks(*content, at.Key("content"), out, media, depth + 1));
    }
    out += "</tool_result>";
    return absl::OkStatus();
  }
  // document, search_result, server tool blocks, and types the API adds later: the type and a
  // reference to the block's canonical JSON.
  std::string json;
  AppendCanonicalWithoutCacheControl(b, json);
  out += '<';
  out.append(type);
  out += ':';
  AppendMediaRef(json, out);
  out += '>';
  return absl::OkStatus();
}

// A content value: a string, or an array of blocks.
absl::Status AppendBlocks(const element& content, const JsonPath& at, std::string& out, MediaSink media, int depth) {
  if (std::optional<std::string_view> s = AsString(content)) {
    out.append(*s);
    return absl::OkStatus();
  }
  std::optional<simdjson::dom::array> blocks = AsArray(content);
  if (!blocks.has_value()) return TypeError(at, "a string or an array of content blocks", content);
  size_t i = 0;
  for (element b : *blocks) {
    EPP_RETURN_IF_ERROR(AppendBlock(b, at.Index(i), out, media, depth));
    ++i;
  }
  return absl::OkStatus();
}

// `system`: a string, or text blocks (their texts joined with nothing between, as vLLM joins
// them; other block types are not text a model reads and are skipped).
absl::Status AppendSystem(const element& system, const JsonPath& at, std::string& out) {
  std::string text;
  if (std::optional<std::string_view> s = AsString(system)) {
    text.assign(*s);
  } else {
    std::optional<simdjson::dom::array> blocks = AsArray(system);
    if (!blocks.has_value()) return TypeError(at, "a string or an array of text blocks", system);
    size_t i = 0;
    for (element b : *blocks) {
      const JsonPath block_path = at.Index(i++);
      std::optional<simdjson::dom::object> block = AsObject(b);
      if (!block.has_value()) return TypeError(block_path, "an object", b);
      EPP_ASSIGN_OR_RETURN(std::string_view type, RequiredString(*block, "type", block_path));
      if (type != "text") continue;
      EPP_ASSIGN_OR_RETURN(std::string_view t, RequiredString(*block, "text", block_path));
      if (t.starts_with(kBillingHeaderPrefix)) continue;
      text.append(t);
    }
  }
  if (text.empty()) return absl::OkStatus();
  out += "system\n";
  out += text;
  out += '\n';
  return absl::OkStatus();
}

absl::Status AppendAnthropicTools(const element& tools, const JsonPath& at, std::string& out) {
  if (IsNull(tools)) return absl::OkStatus();
  std::optional<simdjson::dom::array> list = AsArray(tools);
  if (!list.has_value()) return TypeError(at, "an array", tools);
  if (list->begin() == list->end()) return absl::OkStatus();
  out += "tools\n[";
  size_t i = 0;
  for (element t : *list) {
    if (!AsObject(t).has_value()) return TypeError(at.Index(i), "an object", t);
    if (i > 0) out += ',';
    AppendCanonicalWithoutCacheControl(t, out);
    ++i;
  }
  out += "]\n";
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseAnthropicBody(const element& root, size_t size, const JsonPath& at, InferenceRequest& req) {
  std::optional<simdjson::dom::object> obj = AsObject(root);
  if (!obj.has_value()) return TypeError(at, "a JSON object", root);
  std::optional<element> model, stream, cache_salt, system, messages, tools;
  for (simdjson::dom::key_value_pair kv : *obj) {
    const std::string_view k = kv.key;
    if (k == "model") model = kv.value;
    else if (k == "stream") stream = kv.value;
    else if (k == "cache_salt") cache_salt = kv.value;
    else if (k == "system") system = kv.value;
    else if (k == "messages") messages = kv.value;
    else if (k == "tools") tools = kv.value;
  }
  const JsonPath model_path = at.Key("model");
  if (!model.has_value()) return Missing(model_path);
  std::optional<std::string_view> m = AsString(*model);
  if (!m.has_value()) return TypeError(model_path, "a string", *model);
  if (m->empty()) return Empty(model_path);
  req.model.assign(*m);
  if (stream.has_value() && !IsNull(*stream)) {
    bool s = false;
    if (stream->get_bool().get(s) != simdjson::SUCCESS) return TypeError(at.Key("stream"), "a boolean", *stream);
    req.stream = s;
  }
  if (cache_salt.has_value() && !IsNull(*cache_salt)) {
    std::optional<std::string_view> salt = AsString(*cache_salt);
    if (!salt.has_value()) return TypeError(at.Key("cache_salt"), "a string", *cache_salt);
    req.cache_salt.assign(*salt);
  }

  std::string& out = req.prompt;
  out.reserve(size);
  if (tools.has_value()) EPP_RETURN_IF_ERROR(AppendAnthropicTools(*tools, at.Key("tools"), out));
  if (system.has_value() && !IsNull(*system)) EPP_RETURN_IF_ERROR(AppendSystem(*system, at.Key("system"), out));
  const JsonPath messages_path = at.Key("messages");
  if (!messages.has_value()) return Missing(messages_path);
  std::optional<simdjson::dom::array> list = AsArray(*messages);
  if (!list.has_value()) return TypeError(messages_path, "an array", *messages);
  if (list->begin() == list->end()) return Empty(messages_path);
  size_t i = 0;
  for (element e : *list) {
    const JsonPath msg_path = messages_path.Index(i++);
    std::optional<simdjson::dom::object> msg = AsObject(e);
    if (!msg.has_value()) return TypeError(msg_path, "an object", e);
    EPP_ASSIGN_OR_RETURN(std::string_view role, RequiredString(*msg, "role", msg_path));
    std::optional<element> content = Member(*msg, "content");
    if (!content.has_value()) return Missing(msg_path.Key("content"));
    out.append(role);
    out += '\n';
    EPP_RETURN_IF_ERROR(AppendBlocks(*content, msg_path.Key("content"), out, MediaSink(req), 0));
    out += '\n';
  }
  if (out.capacity() > 2 * out.size() + 4096) out.shrink_to_fit();
  req.prompt_tokens = ApproxTokens(out.size());
  return absl::OkStatus();
}

}  // namespace epp::internal
