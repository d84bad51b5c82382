// Chat Completions `messages` -> prompt text (the grammar is in docs/scheduling.md): each message
// as its role, a newline, its content and the tool calls it makes, then a newline; `tools` ahead
// of them as canonical JSON.
//
// Why this shape: the router needs a text that is stable across turns (for prefix-cache hashing)
// and proportional to what the model reads (for token estimates), not the exact tokens of a chat
// template, so no model's template is applied; role, content and tool calls are the parts chat
// templates render. Content parts follow the OpenAI API's part types; where vLLM is more lenient
// (a null text, a bare image URL string) the parser accepts what vLLM accepts, so a body a model
// server would serve is not refused at the gateway. Responses message items reuse AppendMessage
// (openai_responses.cc), which is why the Responses part types (input_text, output_text,
// input_image) are read here too.
#include <xxhash.h>

#include <cstdint>
#include <optional>
#include <string>

#include "request/request_impl.h"

namespace epp::internal::openai {
namespace {

// Media references (URLs, base64 payloads) longer than this are shortened to a prefix plus a
// hash of the whole: a 2 MB data: URL must not turn into 2 MB of "prompt" (and 500K estimated
// tokens), yet two different images must still render differently.
constexpr size_t kMaxInlineMediaRef = 128;
constexpr size_t kMediaRefPrefix = 64;

}  // namespace

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

namespace {

// One element of a content array. Text parts add their text; media parts add a reference
// (<image:...>, <audio:...>) so that the same image renders the same and two images differ, and
// count in `media`; any other part type is carried as its type and canonical JSON rather than
// refused, so a part type the OpenAI API adds later still routes.
absl::Status AppendContentPart(const element& part, const JsonPath& at, std::string& out, MediaSink media) {
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
    media.Add(MediaModality::kImage, *url);
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
    media.Add(MediaModality::kImage, *ref);
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
    // The same clip in another format is another input to the encoder: the format is part of
    // its identity (llm-d hashes data and format together too).
    std::string identity(data);
    if (std::optional<element> format = Member(*audio_obj, "format"))
      if (std::optional<std::string_view> f = AsString(*format)) identity.append("\n").append(*f);
    media.Add(MediaModality::kAudio, identity);
    out += "<audio:";
    AppendMediaRef(data, out);
    out += '>';
    return absl::OkStatus();
  }
  // Any other part (file, video_url, ...): its type and a reference to its canonical JSON.
  std::string json;
  AppendCanonicalJson(part, json);
  if (type == "video_url" || type == "audio_url") {
    // {"video_url": {"url": ...}} (or a bare URL string): the URL identifies it; another shape
    // is identified by its whole canonical JSON.
    std::optional<std::string_view> url;
    if (std::optional<element> ref = Member(*obj, type)) {
      url = AsString(*ref);
      if (!url.has_value())
        if (std::optional<simdjson::dom::object> ref_obj = AsObject(*ref))
          if (std::optional<element> u = Member(*ref_obj, "url")) url = AsString(*u);
    }
    media.Add(type == "video_url" ? MediaModality::kVideo : MediaModality::kAudio, url.value_or(json));
  }
  out += '<';
  out.append(type);
  out += ':';
  AppendMediaRef(json, out);
  out += '>';
  return absl::OkStatus();
}

// `content` of a message: a string, an array of parts, or null.
absl::Status AppendContent(const element& content, const JsonPath& at, std::string& out, MediaSink media) {
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

}  // namespace

// One chat message (or Responses message item): role, content, then the tool calls it makes.
absl::Status AppendMessage(const simdjson::dom::object& msg, const JsonPath& at, std::string& out, MediaSink media) {
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

// A chat `messages` array: at least one message (the OpenAI API requires one), each an object.
absl::Status AppendMessages(const element& messages, const JsonPath& at, std::string& out, MediaSink media) {
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

}  // namespace epp::internal::openai

namespace epp {

std::string_view MediaModalityName(MediaModality modality) {
  switch (modality) {
    case MediaModality::kImage: return "image";
    case MediaModality::kAudio: return "audio";
    case MediaModality::kVideo: return "video";
  }
  return "image";
}

uint64_t MediaContentHash(std::string_view content) { return XXH3_64bits(content.data(), content.size()); }

}  // namespace epp
