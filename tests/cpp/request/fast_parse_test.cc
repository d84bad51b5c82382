// The request parser's fast path (request/fast_parse.h) against its reference, the DOM path:
// the shapes it must take (so a fast path that always declined would fail here), the inputs it
// must leave to the DOM path, and a differential run over mutated bodies where both paths must
// give the same request or the same error.
#include "request/fast_parse.h"

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "epp/prefix_cache.h"
#include "epp/request.h"

namespace epp {
namespace {

constexpr std::string_view kChat = "/v1/chat/completions";
constexpr std::string_view kCompletions = "/v1/completions";
constexpr std::string_view kResponses = "/v1/responses";
constexpr std::string_view kEmbeddings = "/v1/embeddings";

// Both paths agree: the same error, or the same request.
void ExpectSameAsDom(std::string_view path, std::string_view body) {
  const absl::StatusOr<InferenceRequest> dom = internal::ParseOpenAIRequestDom(path, body);
  const absl::StatusOr<InferenceRequest> got = ParseOpenAIRequest(path, body);
  ASSERT_EQ(got.ok(), dom.ok()) << "path " << path << " body " << body << "\ndom: " << dom.status()
                                << "\ngot: " << got.status();
  if (!dom.ok()) {
    EXPECT_EQ(got.status(), dom.status()) << body;
    return;
  }
  EXPECT_EQ(got->api, dom->api) << body;
  EXPECT_EQ(got->path, dom->path) << body;
  EXPECT_EQ(got->model, dom->model) << body;
  EXPECT_EQ(got->stream, dom->stream) << body;
  EXPECT_EQ(got->cache_salt, dom->cache_salt) << body;
  EXPECT_EQ(got->prompt, dom->prompt) << body;
  EXPECT_EQ(got->prompt_tokens, dom->prompt_tokens) << body;
  EXPECT_EQ(got->media_parts, dom->media_parts) << body;
}

bool FastTakes(std::string_view path, std::string_view body) {
  InferenceRequest req;
  return internal::FastParseBody(body, ApiKindForPath(path), req);
}

struct Case {
  std::string_view path;
  std::string body;
};

// Shapes the fast path must parse itself, each also checked against the DOM path.
const std::vector<Case>& Taken() {
  static const std::vector<Case> cases = {
      {kChat, R"({"model":"m","messages":[{"role":"user","content":"hello"}]})"},
      {kChat, R"({"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],)"
              R"("stream":true,"max_tokens":1024,"temperature":0.7,"stream_options":{"include_usage":true}})"},
      {kChat, " \n\t{ \"messages\" : [ { \"content\" : \"late role\" , \"role\" : \"user\" } ] , \"model\" : \"m\" }\r\n"},
      {kChat, R"({"model":"m","messages":[{"content":"","role":"user"},{"role":"assistant","content":null}]})"},
      {kChat, R"({"model":"m","messages":[{"role":"user"}],"stream":false,"cache_salt":null})"},
      {kChat, R"({"model":"m\u00e9","messages":[{"role":"u\"ser","content":"a\nb\"c\\d\/e\b\f\r\t\u0041\u00e9\u20ac\ud83d\ude00\u0000z"}],"cache_salt":"s\u00e9"})"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"text":"b","type":"input_text"},)"
              R"({"type":"output_text","text":null},{"type":"refusal","refusal":"no","text":5}]}]})"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":[]}]})"},
      {kChat, R"({"model":"m","tools":[{"type":"function","function":{"name":"f","parameters":{"b":1,"a":[true,null,1.5]}}}],)"
              R"("messages":[{"role":"user","content":"x"}]})"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],)"
              R"("tools":[{"type":"function","function":{"name":"f","description":"d\u00e9"}}]})"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":[]})"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":null})"},
      {kChat, R"({"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",)"
              R"("function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c1","content":"42"},)"
              R"({"role":"assistant","function_call":{"name":"g","arguments":"{}"},"tool_calls":null}]})"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":"x","name":"n","extra":{"deep":[[[{"a":-0.5}]]]}}],)"
              R"("prompt":"ignored for chat","n":1,"seed":-12,"logit_bias":{"50256":-100},"stop":["\n"]})"},
      {kChat, R"({"mod\u0065l":"m","messages":[{"r\u006fle":"user","content":"escaped keys"}]})"},
      {kCompletions, R"({"model":"m","prompt":"Say this is a test","max_tokens":7,"temperature":0})"},
      {kCompletions, R"({"model":"m","prompt":["a","","b\u00e9"]})"},
      {kCompletions, R"({"model":"m","prompt":[1, 22 ,333,0,123456789012345678]})"},
      {kCompletions, R"({"prompt":"x","model":"m","messages":[1,2],"tools":5,"tools":6})"},
      {kResponses, R"({"model":"m","input":"Tell me a story."})"},
      {kResponses, R"({"input":[{"role":"user","content":"Hi"},{"type":"message","role":"assistant",)"
                   R"("content":[{"type":"output_text","text":"Hello"}]},{"content":"late role","role":"user"},)"
                   R"({"type":"function_call","call_id":"c1","name":"f","arguments":"{\"b\":1,\"a\":2}"},)"
                   R"({"call_id":"c1","output":"42","type":"function_call_output"}],)"
                   R"("instructions":"Be brief.","model":"m","tools":[{"type":"function","name":"f","parameters":{}}],"stream":true})"},
      {kResponses, R"({"model":"m","tools":[{"type":"web_search"}],"instructions":null,"input":[{"role":"user","content":"x"}]})"},
      {kResponses, R"({"model":"m","input":[{"type":"reasoning","id":"r","content":[{"type":"reasoning_text","text":"t"}]}]})"},
      {kResponses, R"({"model":"m","instructions":"","input":"x","messages":5,"prompt":[1]})"},
      {kEmbeddings, R"({"model":"m","input":"embed me","encoding_format":"float"})"},
      {kEmbeddings, R"({"model":"m","input":["a","b"]})"},
      {kEmbeddings, R"({"model":"m","input":[1,2,3]})"},
      {kEmbeddings, R"({"model":"m","messages":[{"role":"user","content":"a conversation"}]})"},
      {kEmbeddings, R"({"messages":[{"role":"user","content":"ignored"}],"model":"m","input":"wins"})"},
      {"/v1/models", R"({"model":"m","prompt":"any other path is completions"})"},
      {"", R"({"model":"m","prompt":"no path"})"},
  };
  return cases;
}

TEST(FastParseTest, TakesTheCommonShapesAndMatchesTheDomPath) {
  for (const Case& c : Taken()) {
    SCOPED_TRACE(c.body);
    EXPECT_TRUE(FastTakes(c.path, c.body));
    ExpectSameAsDom(c.path, c.body);
  }
}

TEST(FastParseTest, RendersExactlyTheDocumentedPrompt) {
  // Not only equal to the DOM path: equal to the grammar in docs/scheduling.md.
  InferenceRequest req;
  ASSERT_TRUE(internal::FastParseBody(
      R"({"messages":[{"content":"Be brief.","role":"system"},{"role":"user","content":[{"type":"text","text":"a\"b"}]},)"
      R"({"role":"assistant","content":null,"tool_calls":[{"type":"function","id":"1"}]}],"model":"m",)"
      R"("tools":[{"type":"function","function":{"name":"f"}}],"stream":true})",
      ApiKind::kChatCompletions, req));
  EXPECT_EQ(req.model, "m");
  EXPECT_TRUE(req.stream);
  EXPECT_EQ(req.prompt,
            "tools\n[{\"function\":{\"name\":\"f\"},\"type\":\"function\"}]\n"
            "system\nBe brief.\nuser\na\"b\nassistant\n[{\"id\":\"1\",\"type\":\"function\"}]\n");
  EXPECT_EQ(req.prompt_tokens, ApproxTokens(req.prompt.size()));

  InferenceRequest ids;
  ASSERT_TRUE(internal::FastParseBody(R"({"model":"m","prompt":[7,0,18446744073]})", ApiKind::kCompletions, ids));
  EXPECT_EQ(ids.prompt, "7 0 18446744073");
  EXPECT_EQ(ids.prompt_tokens, 3);
}

// Inputs the fast path leaves to the DOM path, valid or not; the answer is still the DOM's.
TEST(FastParseTest, DeclinesWhatItDoesNotHandleAndTheDomPathAnswers) {
  const std::vector<Case> declined = {
      // Responses and embeddings shapes it leaves alone, and invalid ones
      {kResponses, R"({"model":"m","input":[{"content":[{"type":"reasoning_text","text":"t"}],"type":"reasoning"}]})"},
      {kResponses, R"({"model":"m","input":[{"content":"no role or type"}]})"},
      {kResponses, R"({"model":"m","input":[{"type":5,"role":"user","content":"x"}]})"},
      {kResponses, R"({"model":"m","input":[{"type":"message","content":"no role"}]})"},
      {kResponses, R"({"model":"m","input":""})"},
      {kResponses, R"({"model":"m","input":[]})"},
      {kResponses, R"({"model":"m","input":"x","instructions":5})"},
      {kResponses, R"({"model":"m","input":"x","instructions":"a","instructions":"b"})"},
      {kResponses, R"({"model":"m","instructions":"no input"})"},
      {kEmbeddings, R"({"model":"m","input":null,"messages":[{"role":"user","content":"x"}]})"},
      {kEmbeddings, R"({"model":"m","messages":[]})"},
      {kEmbeddings, R"({"model":"m"})"},
      // parts and values it leaves alone
      {kChat, R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x"}}]}]})"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"QQ=="}}]}]})"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"temperature":1e-3})"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"seed":1234567890123456789012})"},
      {kCompletions, R"({"model":"m","prompt":[[1,2],[3]]})"},
      {kCompletions, R"({"model":"m","prompt":[-0]})"},
      // repeated members (the DOM path keeps the last)
      {kChat, R"({"model":"a","model":"b","messages":[{"role":"user","content":"x"}]})"},
      {kChat, R"({"model":"m","messages":[{"role":"user","role":"system","content":"x"}]})"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":"x","content":"y"}]})"},
      {kChat, R"({"model":"m","stream":true,"stream":false,"messages":[{"role":"user","content":"x"}]})"},
      // invalid requests
      {kChat, R"({"model":"m","messages":[]})"},
      {kChat, R"({"model":"","messages":[{"role":"user","content":"x"}]})"},
      {kChat, R"({"messages":[{"role":"user","content":"x"}]})"},
      {kChat, R"({"model":"m"})"},
      {kChat, R"({"model":"m","messages":[{"content":"x"}]})"},
      {kChat, R"({"model":"m","messages":[{"role":1,"content":"x"}]})"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":5}]})"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":[{"text":"no type"}]}]})"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":[{"type":"text"}]}]})"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":3}]}]})"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":{}})"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":[1]})"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"stream":"yes"})"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"cache_salt":1})"},
      {kCompletions, R"({"model":"m","prompt":""})"},
      {kCompletions, R"({"model":"m","prompt":[]})"},
      {kCompletions, R"({"model":"m","prompt":["a",1]})"},
      {kCompletions, R"({"model":"m","prompt":[1,"a"]})"},
      {kCompletions, R"({"model":"m","prompt":[1.5]})"},
      {kCompletions, R"(["model"])"},
      // invalid JSON and text
      {kChat, ""},
      {kChat, "   "},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}])"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}]} x)"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],})"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":"a)" "\x01" R"(b"}]})"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":"\x"}]})"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":"\u12"}]})"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":"\ud800"}]})"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":"\udc00"}]})"},
      {kChat, R"({"model":"m","messages":[{"role":"user","content":"\ud800\u0041"}]})"},
      {kChat, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\x28\"}]}"},
      {kChat, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":01}"},
      {kChat, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":tru}"},
      {kChat, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":1.}"},
      {kChat, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":[1 2]}"},
      {kChat, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":{1:2}}"},
      {kChat, "\xef\xbb\xbf{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}"},
  };
  for (const Case& c : declined) {
    SCOPED_TRACE(c.body);
    EXPECT_FALSE(FastTakes(c.path, c.body));
    ExpectSameAsDom(c.path, c.body);
  }
  // Nesting beyond the fast path's 64 levels (the DOM path allows 1024).
  std::string deep = R"({"model":"m","messages":[{"role":"user","content":"x"}],"x":)";
  deep += std::string(100, '[') + std::string(100, ']') + "}";
  EXPECT_FALSE(FastTakes(kChat, deep));
  ExpectSameAsDom(kChat, deep);
}

// Large bodies with every escape at every alignment of the 16-byte search.
void LongStringsAtEveryAlignment() {
  const std::string_view pieces[] = {"plain text ", "\\n", "\\\"", "\\\\", "caf\xc3\xa9 ", "\\u00e9", "\\ud83d\\ude00", "\\/"};
  std::mt19937 rng(7);
  for (int shift = 0; shift < 40; ++shift) {
    std::string content(static_cast<size_t>(shift), 'a');
    for (int k = 0; k < 300; ++k) content += pieces[rng() % std::size(pieces)];
    const std::string body = R"({"model":"m","messages":[{"role":"user","content":")" + content + R"("}]})";
    SCOPED_TRACE(shift);
    EXPECT_TRUE(FastTakes(kChat, body));
    ExpectSameAsDom(kChat, body);
  }
}

TEST(FastParseTest, LongStringsAtEveryAlignment) { LongStringsAtEveryAlignment(); }

std::vector<std::string> Seeds() {
  std::vector<std::string> seeds;
  for (const Case& c : Taken()) seeds.push_back(c.body);
  const std::filesystem::path dir = std::filesystem::path(EPP_SHARED_FIXTURES) / "requests";
  if (std::filesystem::is_directory(dir)) {
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      std::ifstream in(entry.path(), std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      seeds.push_back(ss.str());
    }
  }
  return seeds;
}

// Differential: random edits of valid bodies (bytes replaced by JSON's special characters,
// deleted, duplicated, truncated) give the same answer on both paths.
void MutatedBodiesGiveTheDomPathsAnswer(int rounds) {
  const std::vector<std::string> seeds = Seeds();
  const std::string_view paths[] = {kChat, kCompletions, kResponses, kEmbeddings};
  const char specials[] = {'"', '{', '}', '[', ']', ',', ':', '\\', '\0', '\x1f', '\xff', '\xc3', '1', '-', '.', 'e',
                           'n', 'u', ' ', '0'};
  std::mt19937 rng(12345);
  size_t taken = 0, total = 0;
  for (int round = 0; round < rounds; ++round) {
    std::string body = seeds[rng() % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits && !body.empty(); ++e) {
      const size_t at = rng() % body.size();
      switch (rng() % 4) {
        case 0: body[at] = specials[rng() % std::size(specials)]; break;
        case 1: body.erase(at, 1 + rng() % 3); break;
        case 2: body.insert(at, body.substr(at, 1 + rng() % 8)); break;
        case 3: body.resize(at); break;
      }
    }
    for (std::string_view path : paths) {
      ++total;
      taken += FastTakes(path, body) ? 1 : 0;
      ExpectSameAsDom(path, body);
      if (::testing::Test::HasFailure()) return;
    }
  }
  // Some edits leave a valid body (a changed letter): the fast path must have been exercised.
  EXPECT_GT(taken, total / 50) << taken << " of " << total;
}

TEST(FastParseTest, MutatedBodiesGiveTheDomPathsAnswer) { MutatedBodiesGiveTheDomPathsAnswer(20000); }

// The prompt buffer starts at the body's size, which real bodies never outgrow; started at 64
// bytes it must grow through every path (block stores, escapes, the byte-wise tail, appends,
// inserts) and still give the DOM path's answer.
TEST(FastParseTest, APromptBufferThatMustGrowGivesTheSameAnswer) {
  struct Room {
    Room() { internal::SetInitialPromptRoomForTesting(64); }
    ~Room() { internal::SetInitialPromptRoomForTesting(0); }
  } room;
  for (const Case& c : Taken()) {
    SCOPED_TRACE(c.body);
    EXPECT_TRUE(FastTakes(c.path, c.body));
    ExpectSameAsDom(c.path, c.body);
  }
  LongStringsAtEveryAlignment();
  MutatedBodiesGiveTheDomPathsAnswer(3000);
}

}  // namespace
}  // namespace epp
