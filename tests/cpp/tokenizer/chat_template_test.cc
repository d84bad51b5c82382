// Chat templates (epp/text/chat_template.h): errors that name the construct and line, vLLM's request
// rules, and the pieces the Python parity tests cannot see (continue_final_message, named
// templates, limits). Rendering against Python Jinja2 is tests/python/test_chat_template_parity.py.
#include "epp/text/chat_template.h"

#include <gtest/gtest.h>

#include <string>

#include "nlohmann/json.hpp"
#include "tokenizer/jinja.h"

namespace epp {
namespace {

using Json = nlohmann::ordered_json;

std::shared_ptr<const ChatTemplate> Make(const std::string& src, const std::string& special = "", ChatTemplateOptions o = {}) {
  auto t = ChatTemplate::FromSource(src, "t.jinja", special, o);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : nullptr;
}

std::string Render(const std::string& src, const std::string& vars = "{}") {
  auto t = Make(src);
  if (!t) return "<load error>";
  auto r = t->Render(vars);
  return r.ok() ? *r : "ERROR: " + std::string(r.status().message());
}

std::string LoadError(const std::string& src) {
  auto t = ChatTemplate::FromSource(src, "t.jinja");
  return t.ok() ? "<loaded>" : std::string(t.status().message());
}

TEST(ChatTemplateTest, LoadErrorsNameTheConstructAndLine) {
  EXPECT_EQ(LoadError("a\n{% include 'other.jinja' %}"),
            "t.jinja line 2: `{% include %}` is not supported by epp (chat templates need: if, for, set, macro, break, "
            "continue, raw, generation)");
  EXPECT_EQ(LoadError("{{ x | frobnicate }}"), "t.jinja line 1: the filter 'frobnicate' is not supported by epp");
  EXPECT_EQ(LoadError("\n\n{{ x is prime }}"), "t.jinja line 3: the test 'prime' is not supported by epp");
  EXPECT_EQ(LoadError("{% if x %}open"), "t.jinja line 1: `{% if %}` without `{% endif %}`");
  EXPECT_EQ(LoadError("{{ x "), "t.jinja line 1: `{{` is not closed by `}}`");
  EXPECT_EQ(LoadError("{% endfor %}"), "t.jinja line 1: `{% endfor %}` without its opening tag");
  EXPECT_EQ(LoadError("{% for x in xs recursive %}{% endfor %}"), "t.jinja line 1: recursive loops are not supported by epp");
  EXPECT_EQ(LoadError("{% break %}"), "t.jinja line 1: `{% break %}` outside a loop");
  EXPECT_EQ(LoadError("{{ f(*args) }}"), "t.jinja line 1: *args / **kwargs in calls are not supported by epp");
  EXPECT_EQ(LoadError("{{ 'abc }}"), "t.jinja line 1: a string literal is not closed");
  EXPECT_EQ(LoadError("{# never closed"), "t.jinja line 1: a comment `{#` is not closed");
  std::string deep(300, '(');
  EXPECT_NE(LoadError("{{ " + deep + "1" + std::string(300, ')') + " }}").find("nested too deeply"), std::string::npos);
}

TEST(ChatTemplateTest, RenderErrorsNameTheLine) {
  EXPECT_EQ(Render("ok\n{{ raise_exception('roles must alternate') }}"),
            "ERROR: t.jinja line 2: the template raised an exception: roles must alternate");
  EXPECT_EQ(Render("{{ m.x.y }}", R"({"m": {}})"), "ERROR: t.jinja line 1: 'x' is undefined (reading its attribute 'y')");
  EXPECT_EQ(Render("{{ 'a' + 1 }}"), "ERROR: t.jinja line 1: unsupported operand type(s) for +: 'str' and 'int'");
  EXPECT_EQ(Render("{{ 'x' % 1 }}"), "ERROR: t.jinja line 1: printf-style string formatting (str % ...) is not supported by epp");
  EXPECT_EQ(Render("{{ 'a'.zfill(3) }}"), "ERROR: t.jinja line 1: str.zfill() is not supported by epp");
  EXPECT_EQ(Render("{{ xs.append(1) }}", R"({"xs": []})"),
            "ERROR: t.jinja line 1: list.append() modifies its object, which the sandboxed chat template environment refuses");
  EXPECT_EQ(Render("{% set x = 1 %}{% set x.a = 2 %}"),
            "ERROR: t.jinja line 1: `set x.a`: 'x' is not a namespace (only namespace() objects take attribute assignment)");
  EXPECT_EQ(Render("{{ 9223372036854775807 + 1 }}"), "ERROR: t.jinja line 1: integer overflow (epp's integers are 64-bit)");
  EXPECT_EQ(Render("{{ range(200000)|length }}"), "ERROR: t.jinja line 1: range() longer than 100000 items (the sandbox's limit)");
  EXPECT_EQ(Render("{{ missing|tojson }}"), "ERROR: t.jinja line 1: tojson: 'missing' is undefined (Undefined is not JSON serializable)");
  // The name of an Undefined made at render time outlives the filter that made it.
  EXPECT_EQ(Render("{{ (xs|first).y }}", R"({"xs": []})"),
            "ERROR: t.jinja line 1: 'the first item of an empty sequence' is undefined (reading its attribute 'y')");
  EXPECT_EQ(Render("{{ (xs|max).y }}", R"({"xs": []})"),
            "ERROR: t.jinja line 1: 'max of an empty sequence' is undefined (reading its attribute 'y')");
}

TEST(ChatTemplateTest, RunawayTemplatesStop) {
  EXPECT_NE(Render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("macros nested more than 64 deep"),
            std::string::npos);
  ChatTemplateOptions o;
  o.max_output_bytes = 1 << 20;
  auto t = ChatTemplate::FromSource("{% for i in range(100000) %}{% for j in range(100000) %}xxxxxxxx{% endfor %}{% endfor %}", "t",
                                    "", o);
  ASSERT_TRUE(t.ok());
  auto r = (*t)->Render("{}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "t line 1: the output passed 1048576 bytes (a runaway template?)");
}

TEST(ChatTemplateTest, PythonFloatRepr) {
  EXPECT_EQ(jinja::PyFloatRepr(1.0), "1.0");
  EXPECT_EQ(jinja::PyFloatRepr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(jinja::PyFloatRepr(1e16), "1e+16");
  EXPECT_EQ(jinja::PyFloatRepr(1e15), "1000000000000000.0");
  EXPECT_EQ(jinja::PyFloatRepr(0.0001), "0.0001");
  EXPECT_EQ(jinja::PyFloatRepr(0.00001), "1e-05");
  EXPECT_EQ(jinja::PyFloatRepr(-2.5), "-2.5");
  EXPECT_EQ(jinja::PyFloatRepr(123456789012345678.0), "1.2345678901234568e+17");
  EXPECT_EQ(jinja::PyFloatRepr(0.0), "0.0");
  EXPECT_EQ(jinja::PyFloatRepr(5e-324), "5e-324");
}

TEST(ChatTemplateTest, ContentFormatDetectedAsVllmDoes) {
  EXPECT_EQ(Make("{% for m in messages %}{{ m.content }}{% endfor %}")->content_format(), ChatContentFormat::kString);
  EXPECT_EQ(Make("{% for m in messages %}{% for p in m['content'] %}{{ p.text }}{% endfor %}{% endfor %}")->content_format(),
            ChatContentFormat::kOpenAI);
  // Through a variable set from messages (sliced), and a filtered loop over content.
  EXPECT_EQ(Make("{% set loop_messages = messages[1:] %}{% for message in loop_messages %}"
                 "{% for item in message.content | selectattr('type', 'equalto', 'text') %}{{ item.text }}{% endfor %}{% endfor %}")
                ->content_format(),
            ChatContentFormat::kOpenAI);
  // A loop over something else's content is not it.
  EXPECT_EQ(Make("{% for d in documents %}{% for p in d.content %}{{ p }}{% endfor %}{% endfor %}")->content_format(),
            ChatContentFormat::kString);
  ChatTemplateOptions forced;
  forced.content_format_set = true;
  forced.content_format = ChatContentFormat::kOpenAI;
  EXPECT_EQ(Make("{{ messages }}", "", forced)->content_format(), ChatContentFormat::kOpenAI);
}

TEST(ChatTemplateTest, UndeclaredVariables) {
  auto t = Make("{% if not date_string is defined %}{% set date_string = '1 Jan' %}{% endif %}{% set x = 1 %}{{ x }}"
                "{% for m in messages %}{{ m.content }}{{ loop.index }}{% endfor %}{{ enable_thinking }}{{ date_string }}"
                "{% macro f(a) %}{{ a }}{{ outer }}{% endmacro %}");
  std::vector<std::string> want = {"date_string", "messages", "enable_thinking", "outer"};
  EXPECT_EQ(t->variables(), want);
}

Json Vars(const ChatTemplate& t, const std::string& body) {
  auto v = t.RequestVariables(body);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? Json::parse(*v) : Json();
}

TEST(ChatTemplateTest, RequestVariablesFollowVllm) {
  auto t = Make("{% for m in messages %}{{ m.role }}:{{ m.content }}|{% endfor %}{{ enable_thinking }}",
                R"({"bos_token": "<s>", "eos_token": "</s>"})");
  Json v = Vars(*t, R"({"messages": [
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "input_text", "text": "b"}, {"type": "text", "text": null}]},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{\"z\": 1, \"a\": [2]}"}},
        {"id": "2", "type": "function", "function": {"name": "g", "arguments": "not json"}}]},
      {"role": "tool", "tool_call_id": "1", "content": "r", "extra": "dropped"}],
    "tools": [{"function": {"name": "f", "strict": true}, "type": "function"}],
    "chat_template_kwargs": {"enable_thinking": false, "not_read": 1}})");
  EXPECT_EQ(v["messages"][0]["content"], "a\nb");  // text parts joined with "\n"; a null text skipped
  EXPECT_EQ(v["messages"][1]["content"], "");
  EXPECT_EQ(v["messages"][1]["tool_calls"][0]["function"]["arguments"].dump(), R"({"z":1,"a":[2]})");  // parsed, order kept
  EXPECT_EQ(v["messages"][1]["tool_calls"][1]["function"]["arguments"].dump(), "{}");
  EXPECT_EQ(v["messages"][2].dump(), R"({"role":"tool","content":"r","tool_call_id":"1"})");
  EXPECT_EQ(v["tools"].dump(), R"([{"type":"function","function":{"name":"f","description":null,"parameters":null,"strict":true}}])");
  EXPECT_EQ(v["add_generation_prompt"], true);
  EXPECT_TRUE(v["documents"].is_null());
  EXPECT_EQ(v["bos_token"], "<s>");
  EXPECT_EQ(v["enable_thinking"], false);  // the template reads it
  EXPECT_FALSE(v.contains("not_read"));    // it does not: vLLM drops it
  auto r = t->RenderRequest(R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"enable_thinking": true}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "user:hi|True");
}

TEST(ChatTemplateTest, DeveloperBecomesOneLeadingSystemMessage) {
  auto plain = Make("{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}");
  Json v = Vars(*plain, R"({"messages": [{"role": "user", "content": "u1"}, {"role": "developer", "content": "d"},
                                         {"role": "system", "content": [{"type": "text", "text": "s1"}, {"type": "text", "text": "s2"}]}]})");
  EXPECT_EQ(v["messages"].dump(), R"([{"role":"system","content":"d\n\ns1\ns2"},{"role":"user","content":"u1"}])");
  // A single leading developer message just becomes system.
  v = Vars(*plain, R"({"messages": [{"role": "developer", "content": "d"}, {"role": "user", "content": "u"}]})");
  EXPECT_EQ(v["messages"].dump(), R"([{"role":"system","content":"d"},{"role":"user","content":"u"}])");
  // A template that knows the role gets it as sent (with vLLM's tools key).
  auto knows = Make("{% for m in messages %}{% if m.role == 'developer' %}D{% endif %}{% endfor %}");
  v = Vars(*knows, R"({"messages": [{"role": "user", "content": "u"}, {"role": "developer", "content": "d"}]})");
  EXPECT_EQ(v["messages"][1].dump(), R"({"role":"developer","content":"d","tools":null})");
}

TEST(ChatTemplateTest, OpenAIContentFormatKeepsParts) {
  auto t = Make("{% for m in messages %}{% for p in m.content %}<{{ p.type }}:{{ p.text }}>{% endfor %}{% endfor %}");
  ASSERT_EQ(t->content_format(), ChatContentFormat::kOpenAI);
  auto r = t->RenderRequest(R"({"messages": [{"role": "user", "content": "plain"},
                                             {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "refusal", "refusal": "no"}]}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "<text:plain><text:a><text:no>");
  Json v = Vars(*t, R"({"messages": [{"role": "tool", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]}]})");
  EXPECT_EQ(v["messages"][0]["content"], "x\ny");  // tool results flattened to a string
}

TEST(ChatTemplateTest, RequestErrorsNameTheJsonPath) {
  auto t = Make("{{ messages }}");
  auto err = [&](const std::string& body) {
    auto r = t->RenderRequest(body);
    return r.ok() ? "<ok>" : std::string(r.status().message());
  };
  EXPECT_EQ(err("[1]"), "$: the body is not a JSON object");
  EXPECT_EQ(err("{}"), "$.messages: missing");
  EXPECT_EQ(err(R"({"messages": [{"content": "x"}]})"), "$.messages[0].role: missing (expected a string)");
  EXPECT_EQ(err(R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]})"),
            "$.messages[0].content[0]: a 'image_url' part: epp's tokenizer is text-only (vLLM refuses media parts for a "
            "text-only model too)");
  EXPECT_EQ(err(R"({"messages": [{"role": "user", "content": [{"type": "hologram"}]}]})"),
            "$.messages[0].content[0].type: unknown content part type 'hologram'");
  EXPECT_EQ(err(R"({"messages": [], "tools": [{"type": "function"}]})"), "$.tools[0].function: missing (expected {\"name\": ...})");
  EXPECT_EQ(err(R"({"messages": [], "chat_template_kwargs": {"chat_template": "x"}})"),
            "$.chat_template_kwargs.chat_template: not allowed (vLLM refuses it too)");
  EXPECT_EQ(err(R"({"messages": [{"role": "user", "content": "x"}], "continue_final_message": true})"),
            "$.continue_final_message: cannot be true together with add_generation_prompt (which defaults to true; send "
            "\"add_generation_prompt\": false)");
  EXPECT_EQ(err(R"({"messages": [], "add_generation_prompt": "yes"})"), "$.add_generation_prompt: expected true or false");
}

TEST(ChatTemplateTest, ContinueFinalMessageCutsAfterTheFinalText) {
  auto t = Make("{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>\n{% endfor %}"
                "{% if add_generation_prompt %}<assistant>{% endif %}");
  auto r = t->RenderRequest(R"({"messages": [{"role": "user", "content": "Write"}, {"role": "assistant", "content": "Once upon"}],
                                "add_generation_prompt": false, "continue_final_message": true})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "<user>Write</user>\n<assistant>Once upon");
  // A template that strips the content: transformers cuts at the tag and strips the end.
  auto s = Make("{% for m in messages %}[{{ m.content | trim }}] {% endfor %}");
  r = s->RenderRequest(R"({"messages": [{"role": "assistant", "content": "half "}], "add_generation_prompt": false,
                           "continue_final_message": true})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "[half");
}

TEST(ChatTemplateTest, NamedTemplatesPickToolUseWhenToolsAreSent) {
  const std::string cfg = R"({"bos_token": {"__type": "AddedToken", "content": "<B>"}, "chat_template": [
      {"name": "default", "template": "{{ bos_token }}plain"},
      {"name": "tool_use", "template": "{{ bos_token }}tools:{{ tools|length }}"}]})";
  auto t = ChatTemplate::FromTokenizerConfig(cfg, "tokenizer_config.json");
  ASSERT_TRUE(t.ok()) << t.status();
  auto plain = (*t)->RenderRequest(R"({"messages": []})");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(*plain, "<B>plain");
  auto tools = (*t)->RenderRequest(R"({"messages": [], "tools": [{"type": "function", "function": {"name": "f"}}]})");
  ASSERT_TRUE(tools.ok()) << tools.status();
  EXPECT_EQ(*tools, "<B>tools:1");
  auto none = ChatTemplate::FromTokenizerConfig(R"({"bos_token": "<s>"})", "tokenizer_config.json");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  auto bad = ChatTemplate::FromTokenizerConfig(R"({"chat_template": [{"name": "tool_use", "template": "x"}]})", "c.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "c.json: $.chat_template: a list of named templates without one named \"default\"");
  auto syntax = ChatTemplate::FromTokenizerConfig(R"({"chat_template": "{{ x | nope }}"})", "c.json");
  EXPECT_EQ(syntax.status().message(), "c.json $.chat_template line 1: the filter 'nope' is not supported by epp");
}

TEST(ChatTemplateTest, StrftimeNowReadsTheGivenClock) {
  ChatTemplateOptions o;
  o.now = 86400 * 365;  // 1971-01-01
  auto t = Make("{{ strftime_now('%Y') }}", "", o);
  auto r = t->Render("{}");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(*r == "1971" || *r == "1970") << *r;  // local time zone
}

}  // namespace
}  // namespace epp
