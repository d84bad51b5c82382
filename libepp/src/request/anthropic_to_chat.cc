// Anthropic Messages -> the OpenAI chat body vLLM builds when it serves /v1/messages
// (vllm/entrypoints/anthropic/serving.py, _convert_anthropic_to_openai_request), so that
// token-producer renders an Anthropic request with the model's chat template exactly as the
// server will (llm-d #2389: without tool calls, tool results and thinking the ids diverge and
// precise prefix routing misses on agent traffic).
//
// Where llm-d's Go conversion and vLLM differ, vLLM is followed: system-role messages inside
// `messages` join the one leading system message (llm-d keeps them as separate system
// messages). One choice of our own: a tool_use without an id gets "call_0000000000" (vLLM writes
// call_<unix time>, which no router can predict; llm-d uses the same stand-in), and an assistant's
// tool_result with block content renders its texts joined by newlines (vLLM writes Python's
// repr of the list, which is not a format to reproduce).
#include <string>
#include <utility>

#include "common/json.h"
#include "epp/request.h"

namespace epp {
namespace {

using OJson = nlohmann::ordered_json;

constexpr std::string_view kBillingHeaderPrefix = "x-anthropic-billing-header";

// Python's json.dumps(v) with its defaults: ", " and ": " separators, key order kept, every
// non-ASCII character as \uXXXX (surrogate pairs above the BMP). vLLM puts this string into the
// prompt as a tool call's arguments, so it must match byte for byte.
void AppendPythonString(const std::string& s, std::string& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  auto u16 = [&](uint32_t c) {
    out += "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(c >> shift) & 0xf];
  };
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
          if (c < 0x20 || c == 0x7f) u16(c);
          else out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // nlohmann validated the UTF-8 when it parsed the body.
    const int len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
    uint32_t cp = c & (len == 4 ? 0x07u : len == 3 ? 0x0fu : 0x1fu);
    for (int k = 1; k < len && i + static_cast<size_t>(k) < s.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0x3fu);
    i += static_cast<size_t>(len);
    if (cp > 0xffff) {
      cp -= 0x10000;
      u16(0xd800 + (cp >> 10));
      u16(0xdc00 + (cp & 0x3ff));
    } else {
      u16(cp);
    }
  }
  out += '"';
}

void AppendPythonJson(const OJson& v, std::string& out) {
  switch (v.type()) {
    case OJson::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [k, item] : v.items()) {
        if (!first) out += ", ";
        first = false;
        AppendPythonString(k, out);
        out += ": ";
        AppendPythonJson(item, out);
      }
      out += '}';
      return;
    }
    case OJson::value_t::array: {
      out += '[';
      bool first = true;
      for (const OJson& item : v) {
        if (!first) out += ", ";
        first = false;
        AppendPythonJson(item, out);
      }
      out += ']';
      return;
    }
    case OJson::value_t::string: AppendPythonString(v.get_ref<const std::string&>(), out); return;
    default: out += v.dump(); return;  // numbers, booleans, null: nlohmann spells them as Python does
  }
}

std::string Str(const OJson& obj, const char* key) {
  if (!obj.is_object()) return "";
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// vLLM's _convert_image_source_to_url.
std::string ImageUrl(const OJson& source) {
  if (!source.is_object()) return "";
  if (Str(source, "type") == "url") return Str(source, "url");
  std::string media = source.contains("media_type") && source["media_type"].is_string() ? Str(source, "media_type") : "image/jpeg";
  return "data:" + media + ";base64," + Str(source, "data");
}

void AppendSystemText(const OJson& content, std::string& out) {
  if (content.is_string()) {
    out += content.get<std::string>();
    return;
  }
  if (!content.is_array()) return;
  for (const OJson& b : content) {
    if (Str(b, "type") != "text") continue;
    const std::string t = Str(b, "text");
    if (t.empty() || std::string_view(t).starts_with(kBillingHeaderPrefix)) continue;
    out += t;
  }
}

// A user's tool_result: a tool message now, then its images as a user message (vLLM's
// _convert_user_tool_result).
void AppendUserToolResult(const OJson& block, OJson& messages) {
  std::string text;
  OJson images = OJson::array();
  OJson refs = OJson::array();
  const OJson content = block.is_object() && block.contains("content") ? block["content"] : OJson();
  if (content.is_string()) {
    text = content.get<std::string>();
  } else if (content.is_array()) {
    bool first = true;
    for (const OJson& item : content) {
      if (!item.is_object()) continue;
      const std::string type = Str(item, "type");
      if (type == "text") {
        if (!first) text += '\n';
        first = false;
        text += Str(item, "text");
      } else if (type == "image") {
        const std::string url = ImageUrl(item.contains("source") ? item["source"] : OJson::object());
        if (!url.empty()) images.push_back(OJson{{"type", "image_url"}, {"image_url", {{"url", url}}}});
      } else if (type == "tool_reference") {
        std::string name = Str(item, "tool_name");
        if (name.empty()) name = Str(item, "name");
        if (!name.empty()) refs.push_back(OJson{{"type", "tool_reference"}, {"name", name}});
      }
    }
  }
  const std::string id = Str(block, "tool_use_id");
  messages.push_back(OJson{{"role", "tool"}, {"tool_call_id", id}, {"content", text}});
  if (!images.empty()) messages.push_back(OJson{{"role", "user"}, {"content", images}});
  if (!refs.empty()) messages.push_back(OJson{{"role", "tool"}, {"tool_call_id", id}, {"content", refs}});
}

std::string ToolResultText(const OJson& block) {
  const OJson content = block.is_object() && block.contains("content") ? block["content"] : OJson();
  if (content.is_string()) return content.get<std::string>();
  std::string text;
  if (!content.is_array()) return text;
  bool first = true;
  for (const OJson& item : content) {
    if (Str(item, "type") != "text") continue;
    if (!first) text += '\n';
    first = false;
    text += Str(item, "text");
  }
  return text;
}

}  // namespace

absl::StatusOr<std::string> AnthropicToChatCompletions(std::string_view body) {
  EPP_ASSIGN_OR_RETURN(OJson req, internal::ParseJson<OJson>(body));
  if (!req.is_object()) return absl::InvalidArgumentError("request body: expected a JSON object");
  const OJson msgs = req.contains("messages") ? req["messages"] : OJson();
  if (!msgs.is_array()) return absl::InvalidArgumentError("messages: expected an array");

  OJson messages = OJson::array();
  std::string system;
  if (req.contains("system")) AppendSystemText(req["system"], system);
  for (const OJson& m : msgs)
    if (Str(m, "role") == "system") AppendSystemText(m.contains("content") ? m["content"] : OJson(), system);
  if (!system.empty()) messages.push_back(OJson{{"role", "system"}, {"content", system}});

  for (const OJson& m : msgs) {
    const std::string role = Str(m, "role");
    if (role == "system") continue;
    OJson msg = OJson{{"role", role}};
    const OJson content = m.is_object() && m.contains("content") ? m["content"] : OJson();
    if (content.is_string()) {
      msg["content"] = content;
    } else if (content.is_array()) {
      OJson parts = OJson::array(), calls = OJson::array();
      std::string reasoning;
      bool has_reasoning = false;
      for (const OJson& b : content) {
        const std::string type = Str(b, "type");
        if (type == "text") {
          const std::string t = Str(b, "text");
          if (!t.empty()) parts.push_back(OJson{{"type", "text"}, {"text", t}});
        } else if (type == "image") {
          if (b.contains("source") && b["source"].is_object())
            parts.push_back(OJson{{"type", "image_url"}, {"image_url", {{"url", ImageUrl(b["source"])}}}});
        } else if (type == "thinking") {
          if (b.contains("thinking") && b["thinking"].is_string()) {
            reasoning += b["thinking"].get<std::string>();
            has_reasoning = true;
          }
        } else if (type == "tool_use") {
          std::string id = Str(b, "id");
          if (id.empty()) id = "call_0000000000";
          const OJson input = b.contains("input") && !b["input"].is_null() ? b["input"] : OJson::object();
          std::string args;
          // Python's `input or {}`: an empty object, list or string is falsy too.
          if (input.empty() || (input.is_string() && input.get_ref<const std::string&>().empty())) args = "{}";
          else AppendPythonJson(input, args);
          calls.push_back(OJson{{"id", id}, {"type", "function"}, {"function", {{"name", Str(b, "name")}, {"arguments", args}}}});
        } else if (type == "tool_result") {
          if (role == "user") AppendUserToolResult(b, messages);
          else parts.push_back(OJson{{"type", "text"}, {"text", "Tool result: " + ToolResultText(b)}});
        }
        // redacted_thinking and tool_reference add nothing.
      }
      if (has_reasoning && !reasoning.empty()) msg["reasoning"] = reasoning;
      if (!calls.empty()) msg["tool_calls"] = calls;
      if (parts.size() == 1 && Str(parts[0], "type") == "text") msg["content"] = parts[0]["text"];
      else if (!parts.empty()) msg["content"] = parts;
    }
    // A user message left with nothing but tool results already went out as tool messages.
    if (role == "user" && !msg.contains("content")) continue;
    messages.push_back(std::move(msg));
  }

  OJson out = OJson::object();
  out["model"] = req.contains("model") ? req["model"] : OJson("");
  out["messages"] = std::move(messages);
  if (req.contains("tools") && req["tools"].is_array() && !req["tools"].empty()) {
    OJson tools = OJson::array();
    for (const OJson& t : req["tools"]) {
      OJson fn = OJson{{"name", Str(t, "name")}};
      if (t.contains("description") && t["description"].is_string()) fn["description"] = t["description"];
      const OJson schema = t.contains("input_schema") && !t["input_schema"].is_null() ? t["input_schema"] : OJson{{"type", "object"}};
      fn["parameters"] = schema;
      if (t.contains("strict") && t["strict"].is_boolean()) fn["strict"] = t["strict"];
      if (t.contains("defer_loading") && t["defer_loading"].is_boolean()) fn["defer_loading"] = t["defer_loading"];
      tools.push_back(OJson{{"type", "function"}, {"function", std::move(fn)}});
    }
    out["tools"] = std::move(tools);
  }
  if (req.contains("chat_template_kwargs") && req["chat_template_kwargs"].is_object())
    out["chat_template_kwargs"] = req["chat_template_kwargs"];
  return internal::DumpJson(out);
}

}  // namespace epp
