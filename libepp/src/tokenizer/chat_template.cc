// ChatTemplate (epp/text/chat_template.h): loading, and vLLM's rules for what a chat request's
// template sees. The facts are from vLLM's OpenAI server (entrypoints/chat_utils.py,
// renderers/hf.py, chat_completion/protocol.py) and transformers' apply_chat_template; see
// docs/tokenizer.md ("Chat templates") for the list and where epp differs.
#include "epp/text/chat_template.h"

#include <simdjson.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "jinja_ast.h"
#include "common/os_error.h"

namespace epp {

using jinja::Cat;
using jinja::OJson;

std::string_view ChatContentFormatName(ChatContentFormat f) { return f == ChatContentFormat::kOpenAI ? "openai" : "string"; }

namespace {

// One template of a model (a string chat_template is "default"; a list names each) and what is
// learned from it once, at load: the content format vLLM would detect, whether it knows the
// developer role, and the names it reads before setting them (which chat_template_kwargs it sees).
struct Named {
  std::string name;
  std::string source;
  std::shared_ptr<const jinja::Template> parsed;
  ChatContentFormat format = ChatContentFormat::kString;
  bool mentions_developer = false;
  std::vector<std::string> variables;
};

// Names a template loads before (or without) setting them at its top level: Jinja's
// find_undeclared_variables, which vLLM uses to decide which chat_template_kwargs reach it.
// A name set only inside a branch or a loop stays undeclared after it, as in Jinja.
class Undeclared {
 public:
  std::vector<std::string> Run(const jinja::Body& body) {
    Body(body, declared_);
    return std::move(out_);
  }

 private:
  using Set = absl::flat_hash_set<std::string>;
  void Load(const std::string& n, const Set& declared) {
    if (declared.contains(n) || seen_.contains(n)) return;
    seen_.insert(n);
    out_.push_back(n);
  }
  void Expr(const jinja::Expr* e, const Set& declared) {
    if (!e) return;
    if (e->kind == jinja::Expr::kName && e->name != jinja::kSetBlockBody) Load(e->name, declared);
    for (const jinja::ExprPtr& a : e->args) Expr(a.get(), declared);
    for (const auto& [k, v] : e->kwargs) Expr(v.get(), declared);
  }
  void Body(const jinja::Body& body, Set& declared) {
    for (const jinja::NodePtr& n : body) {
      using N = jinja::Node;
      switch (n->kind) {
        case N::kOutput: Expr(n->expr.get(), declared); break;
        case N::kIf: {
          for (const jinja::ExprPtr& c : n->conds) Expr(c.get(), declared);
          for (const jinja::Body& b : n->bodies) {
            Set inner = declared;
            Body(b, inner);
          }
          break;
        }
        case N::kFor: {
          Expr(n->expr.get(), declared);
          Set inner = declared;
          for (const std::string& t : n->targets) inner.insert(t);
          inner.insert("loop");
          Expr(n->cond.get(), inner);
          Body(n->body, inner);
          Set other = declared;
          Body(n->else_body, other);
          break;
        }
        case N::kSet:
          Expr(n->expr.get(), declared);
          if (n->attr_target) Load(n->targets[0], declared);
          else
            for (const std::string& t : n->targets) declared.insert(t);
          break;
        case N::kSetBlock: {
          Set inner = declared;
          Body(n->body, inner);
          Expr(n->expr.get(), declared);
          declared.insert(n->targets[0]);
          break;
        }
        case N::kMacro: {
          Set inner = declared;
          for (const std::string& p : n->params) inner.insert(p);
          for (const jinja::ExprPtr& d : n->defaults) Expr(d.get(), inner);
          Body(n->body, inner);
          declared.insert(n->targets[0]);
          break;
        }
        default: break;
      }
    }
  }
  Set declared_, seen_;
  std::vector<std::string> out_;
};

absl::StatusOr<Named> ParseNamed(std::string name, std::string source, std::string_view where, const ChatTemplateOptions& o) {
  Named n;
  n.name = std::move(name);
  n.source = std::move(source);
  EPP_ASSIGN_OR_RETURN(n.parsed, jinja::Parse(n.source, Cat(where, n.name == "default" ? "" : " (" + n.name + ")")));
  n.format = o.content_format_set ? o.content_format
                                  : (jinja::LoopsOverContent(*n.parsed) ? ChatContentFormat::kOpenAI : ChatContentFormat::kString);
  n.mentions_developer = n.source.find("\"developer\"") != std::string::npos || n.source.find("'developer'") != std::string::npos;
  n.variables = Undeclared().Run(n.parsed->body);
  return n;
}

absl::StatusOr<std::string> ReadText(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot read '" + p.string() + "': " + internal::OsReason());
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::NotFoundError("cannot read '" + p.string() + "': " + internal::OsReason());
  return text.str();
}

absl::Status Bad(std::string_view path, std::string_view what) { return absl::InvalidArgumentError(Cat(path, ": ", what)); }

// A request body as an ordered JSON tree (keys in the order sent, as Python's json keeps them),
// parsed with simdjson: on a 220 KB prompt several times faster than nlohmann's parser, which
// dominated the render.
OJson FromSimdjson(simdjson::dom::element e) {
  switch (e.type()) {
    case simdjson::dom::element_type::ARRAY: {
      OJson a = OJson::array();
      for (simdjson::dom::element x : simdjson::dom::array(e)) a.push_back(FromSimdjson(x));
      return a;
    }
    case simdjson::dom::element_type::OBJECT: {
      OJson o = OJson::object();
      for (simdjson::dom::key_value_pair kv : simdjson::dom::object(e)) o[std::string(kv.key)] = FromSimdjson(kv.value);
      return o;
    }
    case simdjson::dom::element_type::INT64: return OJson(int64_t(e));
    case simdjson::dom::element_type::UINT64: return OJson(uint64_t(e));
    case simdjson::dom::element_type::DOUBLE: return OJson(double(e));
    case simdjson::dom::element_type::STRING: return OJson(std::string(std::string_view(e)));
    case simdjson::dom::element_type::BOOL: return OJson(bool(e));
    case simdjson::dom::element_type::NULL_VALUE: return OJson(nullptr);
  }
  return OJson(nullptr);
}

// The parser is reused per thread: simdjson keeps its buffers, so a steady stream of requests
// does not allocate for parsing.
absl::StatusOr<OJson> ParseBody(std::string_view body) {
  thread_local simdjson::dom::parser reused;
  std::unique_ptr<simdjson::dom::parser> own;
  simdjson::dom::parser* parser = &reused;
  if (body.size() > (size_t{1} << 20)) {  // do not pin a large parser's buffers to the thread
    own = std::make_unique<simdjson::dom::parser>();
    parser = own.get();
  }
  if (body.data() == nullptr) body = std::string_view("", 0);
  simdjson::dom::element root;
  const simdjson::error_code err = parser->parse(body.data(), body.size(), true).get(root);
  if (err != simdjson::SUCCESS) return absl::InvalidArgumentError(Cat("$: the body is not valid JSON (", simdjson::error_message(err), ")"));
  return FromSimdjson(root);
}

// A special token as tokenizer_config.json writes it: a string, or an AddedToken object.
const OJson* TokenContent(const OJson& v) {
  if (v.is_string()) return &v;
  if (v.is_object()) {
    auto it = v.find("content");
    if (it != v.end() && it->is_string()) return &*it;
  }
  return nullptr;
}

}  // namespace

struct ChatTemplate::Impl {
  std::string source;
  std::vector<Named> templates;  // "default" first when present
  OJson special = OJson::object();
  ChatTemplateOptions options;

  const Named* Pick(bool with_tools) const {
    if (with_tools)
      for (const Named& n : templates)
        if (n.name == "tool_use") return &n;
    for (const Named& n : templates)
      if (n.name == "default") return &n;
    return nullptr;
  }

  absl::StatusOr<OJson> Variables(const OJson& body, const Named** picked) const;
};

ChatTemplate::ChatTemplate(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChatTemplate::~ChatTemplate() = default;

absl::StatusOr<std::shared_ptr<const ChatTemplate>> ChatTemplate::FromSource(std::string_view source, std::string_view name,
                                                                             std::string_view special_tokens_json,
                                                                             const ChatTemplateOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->source = std::string(name);
  impl->options = options;
  if (!special_tokens_json.empty()) {
    OJson s = OJson::parse(special_tokens_json.begin(), special_tokens_json.end(), nullptr, false);
    if (s.is_discarded() || !s.is_object()) return absl::InvalidArgumentError("special tokens: expected a JSON object");
    impl->special = std::move(s);
  }
  EPP_ASSIGN_OR_RETURN(Named n, ParseNamed("default", std::string(source), name, options));
  impl->templates.push_back(std::move(n));
  return std::shared_ptr<const ChatTemplate>(new ChatTemplate(std::move(impl)));
}

// tokenizer_config.json: the special tokens become template variables (bos_token, eos_token, ...,
// additional_special_tokens), and chat_template is one string or a list of {name, template}, of
// which transformers uses `tool_use` for a request with tools and `default` otherwise.
absl::StatusOr<std::shared_ptr<const ChatTemplate>> ChatTemplate::FromTokenizerConfig(std::string_view json, std::string_view source,
                                                                                      const ChatTemplateOptions& options) {
  OJson c = OJson::parse(json.begin(), json.end(), nullptr, false);
  if (c.is_discarded() || !c.is_object()) return Bad(source, "not a JSON object");
  auto impl = std::make_unique<Impl>();
  impl->source = std::string(source);
  impl->options = options;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    auto it = c.find(key);
    if (it == c.end() || it->is_null()) continue;
    const OJson* content = TokenContent(*it);
    if (!content) return Bad(source, Cat("$.", key, ": expected a string or an AddedToken object with content"));
    impl->special[key] = *content;
  }
  if (auto it = c.find("additional_special_tokens"); it != c.end() && it->is_array()) {
    OJson list = OJson::array();
    for (size_t i = 0; i < it->size(); ++i) {
      const OJson* content = TokenContent((*it)[i]);
      if (!content) return Bad(source, Cat("$.additional_special_tokens[", i, "]: expected a string or an AddedToken object"));
      list.push_back(*content);
    }
    impl->special["additional_special_tokens"] = std::move(list);
  }
  auto t = c.find("chat_template");
  if (t == c.end() || t->is_null()) return absl::NotFoundError(Cat(source, ": no chat_template"));
  if (t->is_string()) {
    EPP_ASSIGN_OR_RETURN(Named n, ParseNamed("default", t->get<std::string>(), Cat(source, " $.chat_template"), options));
    impl->templates.push_back(std::move(n));
  } else if (t->is_array()) {
    for (size_t i = 0; i < t->size(); ++i) {
      const OJson& e = (*t)[i];
      if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("template") || !e["template"].is_string())
        return Bad(source, Cat("$.chat_template[", i, "]: expected {\"name\": ..., \"template\": ...}"));
      EPP_ASSIGN_OR_RETURN(Named n, ParseNamed(e["name"].get<std::string>(), e["template"].get<std::string>(),
                                               Cat(source, " $.chat_template[", i, "]"), options));
      impl->templates.push_back(std::move(n));
    }
    if (!impl->Pick(false)) return Bad(source, "$.chat_template: a list of named templates without one named \"default\"");
  } else {
    return Bad(source, "$.chat_template: expected a string or a list of named templates");
  }
  return std::shared_ptr<const ChatTemplate>(new ChatTemplate(std::move(impl)));
}

// Where a model keeps its template (docs/tokenizer.md): a .jinja file or a tokenizer_config.json
// named directly; for a directory or a tokenizer.json, chat_template.jinja beside it, else the
// config's chat_template. A separate .jinja still takes its special tokens from the config.
absl::StatusOr<std::shared_ptr<const ChatTemplate>> ChatTemplate::FromPath(const std::string& path, const ChatTemplateOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = path;
  fs::path dir;
  if (fs::is_directory(p, ec)) {
    dir = p;
  } else if (p.extension() == ".jinja") {
    EPP_ASSIGN_OR_RETURN(std::string src, ReadText(p));
    std::string special;
    if (absl::StatusOr<std::string> cfg = ReadText(p.parent_path() / "tokenizer_config.json"); cfg.ok()) {
      // Special tokens from the config beside it, when there is one with a parsable body.
      absl::StatusOr<std::shared_ptr<const ChatTemplate>> withcfg = FromTokenizerConfig(*cfg, (p.parent_path() / "tokenizer_config.json").string(), options);
      if (withcfg.ok()) special = (*withcfg)->impl_->special.dump();
    }
    return FromSource(src, p.string(), special, options);
  } else if (p.filename() == "tokenizer_config.json") {
    EPP_ASSIGN_OR_RETURN(std::string cfg, ReadText(p));
    return FromTokenizerConfig(cfg, p.string(), options);
  } else {
    dir = p.parent_path();  // a tokenizer.json: the files beside it
  }
  const fs::path jinja_file = dir / "chat_template.jinja";
  const fs::path cfg_file = dir / "tokenizer_config.json";
  absl::StatusOr<std::string> cfg = ReadText(cfg_file);
  if (fs::exists(jinja_file, ec)) {
    EPP_ASSIGN_OR_RETURN(std::string src, ReadText(jinja_file));
    std::string special;
    if (cfg.ok()) {
      OJson c = OJson::parse(*cfg, nullptr, false);
      if (c.is_object()) {
        // Only the special tokens are wanted: an empty template lets FromTokenizerConfig read them
        // without parsing the config's own template, which the .jinja file replaces.
        c["chat_template"] = "";
        absl::StatusOr<std::shared_ptr<const ChatTemplate>> t = FromTokenizerConfig(c.dump(), cfg_file.string(), options);
        if (!t.ok()) return t.status();
        special = (*t)->impl_->special.dump();
      }
    }
    return FromSource(src, jinja_file.string(), special, options);
  }
  if (!cfg.ok()) return absl::NotFoundError(Cat("no chat template in '", dir.string(), "' (neither chat_template.jinja nor tokenizer_config.json)"));
  return FromTokenizerConfig(*cfg, cfg_file.string(), options);
}

ChatContentFormat ChatTemplate::content_format() const { return impl_->Pick(false)->format; }
const std::string& ChatTemplate::source() const { return impl_->source; }
const std::vector<std::string>& ChatTemplate::variables() const { return impl_->Pick(false)->variables; }

// Variables given as they are (pyepp's render): no vLLM request rules, only the choice of the
// tool_use template when `tools` is set.
absl::StatusOr<std::string> ChatTemplate::Render(std::string_view variables_json) const {
  OJson vars = OJson::parse(variables_json.begin(), variables_json.end(), nullptr, false);
  if (vars.is_discarded() || !vars.is_object()) return absl::InvalidArgumentError("variables: expected a JSON object");
  const Named* n = impl_->Pick(vars.contains("tools") && !vars["tools"].is_null());
  jinja::RenderOptions ro;
  ro.now = impl_->options.now;
  ro.max_output = impl_->options.max_output_bytes;
  return jinja::Render(*n->parsed, vars, ro);
}

namespace {

// Content part types: the text ones vLLM's parser reads (OpenAI chat and Responses names plus
// refusal and thinking), and the media ones it knows, which a text-only tokenizer cannot count.
bool IsTextPart(std::string_view t) {
  return t == "text" || t == "input_text" || t == "output_text" || t == "refusal" || t == "thinking";
}
bool IsMediaPart(std::string_view t) {
  return t == "image_url" || t == "input_image" || t == "image_pil" || t == "image_embeds" || t == "audio_url" ||
         t == "input_audio" || t == "audio_embeds" || t == "video_url" || t == "prompt_embeds" || t == "file";
}

// A message's content as vLLM hands it to the template.
absl::StatusOr<OJson> Content(const OJson& msg, const std::string& at, ChatContentFormat format, bool tool_role) {
  auto it = msg.find("content");
  if (it == msg.end() || it->is_null()) return format == ChatContentFormat::kOpenAI ? OJson::array() : OJson("");
  if (it->is_string()) {
    if (format == ChatContentFormat::kString || tool_role) return *it;
    return OJson::array({OJson{{"type", "text"}, {"text", *it}}});
  }
  if (!it->is_array()) return Bad(at + ".content", "expected a string, a list of content parts, or null");
  std::vector<std::string> texts;
  OJson parts = OJson::array();
  for (size_t i = 0; i < it->size(); ++i) {
    const OJson& p = (*it)[i];
    const std::string pat = Cat(at, ".content[", i, "]");
    if (p.is_string()) {  // vLLM accepts a bare string as a text part
      texts.push_back(p.get<std::string>());
      parts.push_back(OJson{{"type", "text"}, {"text", p}});
      continue;
    }
    if (!p.is_object()) return Bad(pat, "expected a content part object");
    auto type = p.find("type");
    if (type == p.end() || !type->is_string()) return Bad(pat + ".type", "missing (expected \"text\", \"image_url\", ...)");
    const std::string t = type->get<std::string>();
    if (IsMediaPart(t))
      return Bad(pat, Cat("a '", t, "' part: epp's tokenizer is text-only (vLLM refuses media parts for a text-only model too)"));
    if (!IsTextPart(t)) return Bad(pat + ".type", Cat("unknown content part type '", t, "'"));
    const char* field = t == "refusal" ? "refusal" : t == "thinking" ? "thinking" : "text";
    auto text = p.find(field);
    if (text == p.end() || text->is_null()) continue;  // vLLM skips such a part (with a warning)
    if (!text->is_string()) return Bad(Cat(pat, ".", field), "expected a string");
    texts.push_back(text->get<std::string>());
    parts.push_back(OJson{{"type", "text"}, {"text", *text}});
  }
  if (format == ChatContentFormat::kString || tool_role) {
    std::string joined;
    for (size_t i = 0; i < texts.size(); ++i) {
      if (i) joined += '\n';
      joined += texts[i];
    }
    return OJson(std::move(joined));
  }
  return parts;
}

// A string's content for merging system messages (list parts flattened with "\n").
std::string Flatten(const OJson& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (content.is_array())
    for (const OJson& p : content)
      if (p.is_object() && p.contains("text") && p["text"].is_string()) {
        if (!out.empty()) out += '\n';
        out += p["text"].get<std::string>();
      }
  return out;
}

// An OpenAI tool as vLLM's ChatCompletionToolsParam.model_dump() gives it: declared fields in
// their order (omitted ones as null), extra keys after them as sent.
absl::StatusOr<OJson> ToolDict(const OJson& tool, const std::string& at) {
  if (!tool.is_object()) return Bad(at, "expected a tool object");
  OJson out = OJson::object();
  auto type = tool.find("type");
  if (type != tool.end() && !type->is_string()) return Bad(at + ".type", "expected \"function\"");
  out["type"] = type != tool.end() ? *type : OJson("function");
  auto fn = tool.find("function");
  if (fn == tool.end() || !fn->is_object()) return Bad(at + ".function", "missing (expected {\"name\": ...})");
  if (!fn->contains("name") || !(*fn)["name"].is_string()) return Bad(at + ".function.name", "missing (expected a string)");
  OJson f = OJson::object();
  f["name"] = (*fn)["name"];
  f["description"] = fn->contains("description") ? (*fn)["description"] : OJson(nullptr);
  f["parameters"] = fn->contains("parameters") ? (*fn)["parameters"] : OJson(nullptr);
  for (auto it = fn->begin(); it != fn->end(); ++it)
    if (it.key() != "name" && it.key() != "description" && it.key() != "parameters") f[it.key()] = *it;
  out["function"] = std::move(f);
  for (auto it = tool.begin(); it != tool.end(); ++it)
    if (it.key() != "type" && it.key() != "function") out[it.key()] = *it;
  return out;
}

}  // namespace

absl::StatusOr<OJson> ChatTemplate::Impl::Variables(const OJson& body, const Named** picked) const {
  if (!body.is_object()) return absl::InvalidArgumentError("$: the body is not a JSON object");
  auto msgs = body.find("messages");
  if (msgs == body.end()) return absl::InvalidArgumentError("$.messages: missing");
  if (!msgs->is_array()) return absl::InvalidArgumentError("$.messages: expected a list of messages");

  // Tools first: whether there are any decides the template (tool_use or default), and the
  // template's content format decides how every message's content is shaped.
  OJson tools = nullptr;
  if (auto t = body.find("tools"); t != body.end() && !t->is_null()) {
    if (!t->is_array()) return absl::InvalidArgumentError("$.tools: expected a list of tools");
    tools = OJson::array();
    for (size_t i = 0; i < t->size(); ++i) {
      EPP_ASSIGN_OR_RETURN(OJson d, ToolDict((*t)[i], Cat("$.tools[", i, "]")));
      tools.push_back(std::move(d));
    }
  }
  const Named* n = Pick(!tools.is_null());
  *picked = n;

  // Each message reduced to the keys vLLM passes on: role, content, name, tool_call_id (tool),
  // tool_calls (assistant), reasoning / reasoning_content (either fills both) and tools
  // (developer). Other keys are dropped.
  OJson messages = OJson::array();
  bool has_developer = false;
  for (size_t i = 0; i < msgs->size(); ++i) {
    const OJson& m = (*msgs)[i];
    const std::string at = Cat("$.messages[", i, "]");
    if (!m.is_object()) return Bad(at, "expected a message object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) return Bad(at + ".role", "missing (expected a string)");
    const std::string r = role->get<std::string>();
    OJson out = OJson::object();
    out["role"] = r;
    EPP_ASSIGN_OR_RETURN(out["content"], Content(m, at, n->format, r == "tool"));
    if (auto name = m.find("name"); name != m.end() && name->is_string()) out["name"] = *name;
    if (r == "tool")
      if (auto id = m.find("tool_call_id"); id != m.end()) out["tool_call_id"] = *id;
    if (r == "assistant")
      if (auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) {
        if (!calls->is_array()) return Bad(at + ".tool_calls", "expected a list");
        OJson list = OJson::array();
        for (size_t k = 0; k < calls->size(); ++k) {
          OJson call = (*calls)[k];
          if (!call.is_object()) return Bad(Cat(at, ".tool_calls[", k, "]"), "expected a tool call object");
          if (auto fn = call.find("function"); fn != call.end() && fn->is_object()) {
            OJson& args = (*fn)["arguments"];
            if (args.is_string()) {  // vLLM parses the JSON string into a dict ({} when it is not one)
              const std::string& s = args.get_ref<const std::string&>();
              OJson parsed = OJson::parse(s, nullptr, false);
              args = (!parsed.is_discarded() && (parsed.is_object() || parsed.is_array())) ? std::move(parsed) : OJson::object();
            } else if (!args.is_object() && !args.is_array()) {
              args = OJson::object();
            }
          }
          list.push_back(std::move(call));
        }
        if (!list.empty()) out["tool_calls"] = std::move(list);
      }
    const OJson* reasoning = nullptr;
    for (const char* key : {"reasoning", "reasoning_content"})
      if (auto it = m.find(key); it != m.end() && !it->is_null() && !reasoning) reasoning = &*it;
    if (reasoning) {
      out["reasoning"] = *reasoning;
      out["reasoning_content"] = *reasoning;
    }
    if (r == "developer") {
      has_developer = true;
      auto t = m.find("tools");
      out["tools"] = t != m.end() ? *t : OJson(nullptr);
    }
    messages.push_back(std::move(out));
  }
  // A template that does not know the developer role gets developer messages as system ones,
  // merged into one leading system message when they are not a single first message.
  if (has_developer && !n->mentions_developer) {
    size_t systems = 0;
    bool first_is_system = false;
    for (size_t i = 0; i < messages.size(); ++i) {
      OJson& m = messages[i];
      if (m["role"] == "developer") {
        m["role"] = "system";
        m.erase("tools");
      }
      if (m["role"] == "system") {
        ++systems;
        if (i == 0) first_is_system = true;
      }
    }
    if (systems > 1 || (systems == 1 && !first_is_system)) {
      std::string merged;
      OJson rest = OJson::array();
      bool any = false;
      for (OJson& m : messages) {
        if (m["role"] == "system") {
          if (any) merged += "\n\n";
          merged += Flatten(m["content"]);
          any = true;
        } else {
          rest.push_back(std::move(m));
        }
      }
      OJson sys = OJson::object();
      sys["role"] = "system";
      sys["content"] = std::move(merged);
      OJson all = OJson::array();
      all.push_back(std::move(sys));
      for (OJson& m : rest) all.push_back(std::move(m));
      messages = std::move(all);
    }
  }

  // The request flags, with vLLM's defaults and its refusal of continuing a final message while
  // also adding a generation prompt.
  auto flag = [&](const char* key, bool dflt) -> absl::StatusOr<bool> {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return dflt;
    if (!it->is_boolean()) return absl::InvalidArgumentError(Cat("$.", key, ": expected true or false"));
    return it->get<bool>();
  };
  EPP_ASSIGN_OR_RETURN(bool add_generation_prompt, flag("add_generation_prompt", true));
  EPP_ASSIGN_OR_RETURN(bool continue_final, flag("continue_final_message", false));
  if (continue_final && add_generation_prompt)
    return absl::InvalidArgumentError(
        "$.continue_final_message: cannot be true together with add_generation_prompt (which defaults to true; send "
        "\"add_generation_prompt\": false)");

  // The template's variables: special tokens, then the kwargs it reads, then what the request
  // itself sets, which wins over a kwarg of the same name.
  OJson vars = special;  // the tokenizer's special tokens, which kwargs may override
  if (auto k = body.find("chat_template_kwargs"); k != body.end() && !k->is_null()) {
    if (!k->is_object()) return absl::InvalidArgumentError("$.chat_template_kwargs: expected an object");
    for (auto it = k->begin(); it != k->end(); ++it) {
      const std::string& key = it.key();
      if (key == "chat_template" || key == "tokenize")
        return absl::InvalidArgumentError(Cat("$.chat_template_kwargs.", key, ": not allowed (vLLM refuses it too)"));
      if (key == "add_generation_prompt" || key == "continue_final_message" || key == "messages" || key == "tools") continue;
      // vLLM keeps a kwarg only where the template reads it (or apply_chat_template takes it).
      if (key == "documents" || std::find(n->variables.begin(), n->variables.end(), key) != n->variables.end()) vars[key] = *it;
    }
  }
  vars["messages"] = std::move(messages);
  vars["tools"] = std::move(tools);
  if (!vars.contains("documents")) vars["documents"] = nullptr;
  if (auto d = body.find("documents"); d != body.end() && !d->is_null()) vars["documents"] = *d;
  if (auto r = body.find("reasoning_effort"); r != body.end() && !r->is_null()) vars["reasoning_effort"] = *r;
  vars["add_generation_prompt"] = add_generation_prompt;
  if (continue_final) vars[" continue_final_message"] = true;  // not a template variable: read by RenderRequest
  return vars;
}

// What the template would see for this request, as JSON (eppctl tokenize --variables and pyepp's
// request_variables show it); bytes that are not UTF-8 are replaced rather than failing the dump.
absl::StatusOr<std::string> ChatTemplate::RequestVariables(std::string_view body) const {
  EPP_ASSIGN_OR_RETURN(OJson b, ParseBody(body));
  const Named* n = nullptr;
  EPP_ASSIGN_OR_RETURN(OJson vars, impl_->Variables(b, &n));
  vars.erase(" continue_final_message");
  return vars.dump(-1, ' ', false, OJson::error_handler_t::replace);
}

// The prompt vLLM's chat endpoint would tokenize. Its text is tokenized without special tokens
// unless the body's add_special_tokens says otherwise (vLLM's chat default), which is reported
// through `add_special_tokens`.
absl::StatusOr<std::string> ChatTemplate::RenderRequest(std::string_view body, bool* add_special_tokens) const {
  EPP_ASSIGN_OR_RETURN(OJson b, ParseBody(body));
  if (add_special_tokens != nullptr && b.is_object()) {
    *add_special_tokens = false;
    if (auto it = b.find("add_special_tokens"); it != b.end() && !it->is_null()) {
      if (!it->is_boolean()) return absl::InvalidArgumentError("$.add_special_tokens: expected true or false");
      *add_special_tokens = it->get<bool>();
    }
  }
  const Named* n = nullptr;
  EPP_ASSIGN_OR_RETURN(OJson vars, impl_->Variables(b, &n));
  jinja::RenderOptions ro;
  ro.now = impl_->options.now;
  ro.max_output = impl_->options.max_output_bytes;
  if (!vars.contains(" continue_final_message")) return jinja::Render(*n->parsed, vars, ro);
  // continue_final_message, as transformers does it: mark the final message's text, render,
  // and cut the prompt where the mark is (the template may have stripped its trailing space).
  vars.erase(" continue_final_message");
  static constexpr std::string_view kTag = "CONTINUE_FINAL_MESSAGE_TAG ";
  OJson& msgs = vars["messages"];
  if (msgs.empty()) return absl::InvalidArgumentError("$.continue_final_message: there is no final message to continue");
  OJson& content = msgs.back()["content"];
  if (content.is_string()) {
    content = content.get<std::string>() + std::string(kTag);
  } else if (content.is_array() && !content.empty() && content.back().is_object() && content.back().contains("text")) {
    content.back()["text"] = content.back()["text"].get<std::string>() + std::string(kTag);
  } else {
    return absl::InvalidArgumentError("$.continue_final_message: the final message has no text to continue");
  }
  EPP_ASSIGN_OR_RETURN(std::string text, jinja::Render(*n->parsed, vars, ro));
  if (size_t at = text.rfind(kTag); at != std::string::npos) return text.substr(0, at);
  // The mark lost its trailing space: the template strips the content, so the prompt ends at
  // the stripped text, where transformers cuts it in that case too.
  if (size_t at = text.rfind(kTag.substr(0, kTag.size() - 1)); at != std::string::npos) {
    text.resize(at);
    while (!text.empty() && (text.back() == ' ' || text.back() == '\n' || text.back() == '\t' || text.back() == '\r')) text.pop_back();
    return text;
  }
  return absl::InvalidArgumentError("$.continue_final_message: the template does not render the final message's text as it is");
}

}  // namespace epp
