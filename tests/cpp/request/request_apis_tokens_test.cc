// token-producer over the request APIs beyond OpenAI's: a request that carries its token ids is
// taken as it is (source "request"), and an Anthropic Messages request is rendered with the
// model's chat template after vLLM's conversion to a chat (tool calls, tool results, reasoning).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "epp/config.h"
#include "epp/registry.h"
#include "epp/request.h"
#include "epp/scheduler.h"
#include "nlohmann/json.hpp"

namespace epp {
namespace {

using Json = nlohmann::json;

std::unique_ptr<Scheduler> Build(const std::string& producer_params) {
  static SeededRng rng(5);
  auto cfg = ParseConfig("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: token-producer\n"
                         "  parameters:\n" + producer_params + "- type: queue-scorer\n"
                         "schedulingProfiles:\n- name: default\n  plugins: [{pluginRef: queue-scorer}]\n", "t.yaml");
  EXPECT_TRUE(cfg.ok()) << cfg.status();
  auto s = BuildScheduler(*cfg, BuiltinRegistry(), PluginContext{&SteadyClock::Get(), &rng});
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

PickResult PickOne(const Scheduler& s, std::string_view path, const std::string& body) {
  absl::StatusOr<InferenceRequest> r = ParseRequest(path, body);
  EXPECT_TRUE(r.ok()) << r.status();
  r->body = body;
  std::vector<Endpoint> eps(1);
  eps[0].address = "10.0.0.1:8000";
  return s.Pick(*r, eps);
}

TEST(RequestApisTokensTest, RequestIdsAreTakenAsTheyAre) {
  auto s = Build("    estimate: {}\n");
  ASSERT_NE(s, nullptr);
  PickResult p = PickOne(*s, "/inference/v1/generate", R"({"model":"m","token_ids":[11,12,13,14]})");
  EXPECT_EQ(p.tokens_source, "request");
  EXPECT_EQ(p.tokens, 4);
  PickResult chat = PickOne(*s, "/v1/messages", R"({"model":"m","messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(chat.tokens_source, "estimate");  // no ids of its own
}

// A byte-level tokenizer (one token a byte, GPT-2's byte map) makes the token count the rendered
// template's length, so the test reads exactly what the template received.
std::string ByteChar(int b) {
  auto printable = [](int x) { return (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255); };
  int cp = b;
  if (!printable(b)) {
    int n = 0;
    for (int x = 0; x < b; ++x)
      if (!printable(x)) ++n;
    cp = 256 + n;
  }
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

TEST(RequestApisTokensTest, AnthropicIsRenderedAsTheChatVllmConvertsItTo) {
  const auto dir = std::filesystem::temp_directory_path() / ("epp-anthropic-tok-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteChar(b)] = b;
  Json tok = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", Json::array()},
              {"normalizer", nullptr},
              {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}},
              {"post_processor", nullptr},
              {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"byte_fallback", false},
                         {"ignore_merges", false}, {"vocab", vocab}, {"merges", Json::array()}}}};
  { std::ofstream(dir / "tokenizer.json") << tok.dump(); }
  const std::string tmpl =
      "{% for m in messages %}{{ m.role }}:{% if m.reasoning %}<{{ m.reasoning }}>{% endif %}"
      "{% if m.content %}{{ m.content }}{% endif %}{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments }}"
      "{% endif %}|{% endfor %}{% if tools %}{{ tools[0].function.name }}{% endif %}";
  { std::ofstream(dir / "tokenizer_config.json") << Json{{"chat_template", tmpl}}.dump(); }
  {
    auto s = Build("    local: {tokenizer: '" + dir.string() + "'}\n");
    ASSERT_NE(s, nullptr);
    const std::string body = R"({"model":"m","max_tokens":9,"system":"S","tools":[{"name":"fn","input_schema":{"type":"object"}}],
      "messages":[{"role":"user","content":"Hi"},
        {"role":"assistant","content":[{"type":"thinking","thinking":"T"},{"type":"tool_use","id":"t","name":"fn","input":{"a":1}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"R"},{"type":"text","text":"OK"}]}]})";
    PickResult p = PickOne(*s, "/v1/messages", body);
    EXPECT_EQ(p.tokens_source, "local") << p.tokens_note;
    const std::string rendered = R"(system:S|user:Hi|assistant:<T>{"a": 1}|tool:R|user:OK|fn)";
    EXPECT_EQ(p.tokens, static_cast<int64_t>(rendered.size()));
    // The ids of a request that brings its own stay its own, whatever the backend.
    EXPECT_EQ(PickOne(*s, "/inference/v1/generate", R"({"token_ids":[1,2]})").tokens_source, "request");
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace epp
