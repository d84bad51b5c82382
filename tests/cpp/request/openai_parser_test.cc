// ParseOpenAIRequest / ParseCaptureEnvelope: every body shape, the canonical prompt rendering
// (docs/scheduling.md), error messages with JSON paths, the shared fixture requests, and inputs
// that must fail cleanly rather than crash.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "epp/prefix_cache.h"
#include "epp/request.h"

namespace epp {
namespace {

constexpr std::string_view kChat = "/v1/chat/completions";
constexpr std::string_view kCompletions = "/v1/completions";
constexpr std::string_view kResponses = "/v1/responses";
constexpr std::string_view kEmbeddings = "/v1/embeddings";

InferenceRequest MustParse(std::string_view path, std::string_view body) {
  absl::StatusOr<InferenceRequest> r = ParseOpenAIRequest(path, body);
  EXPECT_TRUE(r.ok()) << r.status() << "\nbody: " << body;
  return r.ok() ? *std::move(r) : InferenceRequest();
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(RequestApiKindTest, PathSuffixSelectsTheApi) {
  const struct {
    std::string_view path;
    ApiKind api;
  } cases[] = {
      {"/v1/chat/completions", ApiKind::kChatCompletions},
      {"/v1/completions", ApiKind::kCompletions},
      {"/v1/responses", ApiKind::kResponses},
      {"/v1/embeddings", ApiKind::kEmbeddings},
      {"/openai/deployments/d/chat/completions?api-version=2024-06-01", ApiKind::kChatCompletions},
      {"/v1/embeddings?x=/chat/completions", ApiKind::kEmbeddings},
      {"/v1/models", ApiKind::kCompletions},
      {"/v1/chat/completions/extra", ApiKind::kCompletions},
      {"", ApiKind::kCompletions},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.path);
    EXPECT_EQ(ApiKindForPath(c.path), c.api);
  }
  EXPECT_EQ(ApiKindName(ApiKind::kChatCompletions), "chat_completions");
  EXPECT_EQ(ApiKindName(ApiKind::kCompletions), "completions");
  EXPECT_EQ(ApiKindName(ApiKind::kResponses), "responses");
  EXPECT_EQ(ApiKindName(ApiKind::kEmbeddings), "embeddings");
  EXPECT_EQ(ApiKindName(ApiKind::kOther), "other");
}

struct RenderCase {
  const char* name;
  std::string_view path;
  std::string_view body;
  std::string_view prompt;
  int64_t tokens = -1;  // -1: ApproxTokens(prompt.size())
};

TEST(OpenAIRequestParserTest, RendersEveryShapeCanonically) {
  const RenderCase cases[] = {
      {"completions string", kCompletions, R"({"model":"m","prompt":"Hello, world"})", "Hello, world"},
      {"completions list of strings", kCompletions, R"({"model":"m","prompt":["a b","","c"]})", "a b\n\nc"},
      {"completions token ids", kCompletions, R"({"model":"m","prompt":[1, 22, 333, 0]})", "1 22 333 0", 4},
      {"completions list of token lists", kCompletions, R"({"model":"m","prompt":[[1,2],[3],[18446744073709551615]]})",
       "1 2\n3\n18446744073709551615", 4},
      {"chat string contents, developer and system roles", kChat,
       R"({"model":"m","messages":[{"role":"developer","content":"D"},{"role":"system","content":"S"},
           {"role":"user","content":"U"},{"role":"assistant","content":"A"}]})",
       "developer\nD\nsystem\nS\nuser\nU\nassistant\nA\n"},
      {"chat content parts", kChat,
       R"({"model":"m","messages":[{"role":"user","content":[
           {"type":"text","text":"What is this?"},
           {"type":"image_url","image_url":{"url":"https://x/a.png","detail":"low"}},
           {"type":"image_url","image_url":"https://x/b.png"},
           {"type":"input_audio","input_audio":{"data":"QUJD","format":"wav"}},
           {"type":"file","file":{"file_id":"f1"}},
           {"type":"text","text":" Thanks."}]}]})",
       R"(user
What is this?<image:https://x/a.png><image:https://x/b.png><audio:QUJD><file:{"file":{"file_id":"f1"},"type":"file"}> Thanks.
)"},
      {"chat tool calls, null content and refusal", kChat,
       R"({"model":"m","messages":[
           {"role":"user","content":"Weather?"},
           {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
             "function":{"name":"get","arguments":"{\"city\":\"Paris\"}"}}]},
           {"role":"tool","tool_call_id":"c1","content":"sunny"},
           {"role":"assistant","content":[{"type":"refusal","refusal":"No."}]},
           {"role":"user"}]})",
       R"(user
Weather?
assistant
[{"function":{"arguments":"{\"city\":\"Paris\"}","name":"get"},"id":"c1","type":"function"}]
tool
sunny
assistant
No.
user

)"},
      {"chat tools come first, canonical JSON", kChat,
       R"({"tools":[{"type":"function","function":{"name":"f","description":"tab\there \u0041",
           "parameters":{"type":"object","properties":{"x":{"type":"number","default":1.0}}}}}],
           "model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"U"}]})",
       R"(tools
[{"function":{"description":"tab\there A","name":"f","parameters":{"properties":{"x":{"default":1,"type":"number"}},"type":"object"}},"type":"function"}]
system
S
user
U
)"},
      {"canonical JSON numbers, strings and repeated keys", kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f",
           "parameters":{"i":-7,"u":18446744073709551615,"one":1.0,"exp":1e0,"half":5E-1,"big":1e21,"neg0":-0.0,
           "s":"\u00e9\/\u0001\n","é":true,"Z":null,"i":8}}}]})",
       R"(tools
[{"function":{"name":"f","parameters":{"Z":null,"big":1e+21,"exp":1,"half":0.5,"i":8,"neg0":-0,"one":1,"s":"é/\u0001\n","u":18446744073709551615,"é":true}},"type":"function"}]
user
x
)"},
      {"chat empty or null tools render nothing", kChat,
       R"({"model":"m","tools":[],"messages":[{"role":"user","content":"U"}]})", "user\nU\n"},
      {"chat unicode escapes are decoded", kChat,
       R"({"model":"m","messages":[{"role":"user","content":"caf\u00e9 \ud83d\ude00 \"q\" \\"}]})",
       "user\ncaf\xC3\xA9 \xF0\x9F\x98\x80 \"q\" \\\n"},
      {"responses string input and instructions", kResponses,
       R"({"model":"m","instructions":"Be brief.","input":"Tell me a story."})",
       "instructions\nBe brief.\nuser\nTell me a story.\n"},
      {"responses items", kResponses,
       R"({"model":"m","instructions":"Be brief.","input":[
           {"role":"user","content":[{"type":"input_text","text":"Hi"},{"type":"input_image","image_url":"https://x/c.png"},
                                     {"type":"input_image","file_id":"file-9"}]},
           {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hello"}]},
           {"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
           {"type":"function_call_output","call_id":"c1","output":"42"}]})",
       R"(instructions
Be brief.
user
Hi<image:https://x/c.png><image:file-9>
assistant
Hello
function_call
{"arguments":"{}","call_id":"c1","name":"f","type":"function_call"}
function_call_output
{"call_id":"c1","output":"42","type":"function_call_output"}
)"},
      {"responses tools (flat shape) between instructions and input", kResponses,
       R"({"model":"m","input":"Q","instructions":"I","tools":[{"type":"function","name":"f","parameters":{}}]})",
       R"(instructions
I
tools
[{"name":"f","parameters":{},"type":"function"}]
user
Q
)"},
      {"responses null and empty instructions", kResponses, R"({"model":"m","input":"Q","instructions":null})",
       "user\nQ\n"},
      {"embeddings string", kEmbeddings, R"({"model":"e","input":"How do I reset my password?"})",
       "How do I reset my password?"},
      {"embeddings list of strings", kEmbeddings, R"({"model":"e","input":["a","b"]})", "a\nb"},
      {"embeddings token ids", kEmbeddings, R"({"model":"e","input":[5,6,7]})", "5 6 7", 3},
      {"embeddings chat messages (vLLM)", kEmbeddings,
       R"({"model":"e","messages":[{"role":"user","content":"x"}]})", "user\nx\n"},
      {"unknown path is completions", "/v2/generate", R"({"model":"m","prompt":"p"})", "p"},
  };
  for (const RenderCase& c : cases) {
    SCOPED_TRACE(c.name);
    InferenceRequest r = MustParse(c.path, c.body);
    EXPECT_EQ(r.prompt, c.prompt);
    EXPECT_EQ(r.prompt_tokens, c.tokens >= 0 ? c.tokens : ApproxTokens(c.prompt.size()));
    EXPECT_EQ(r.path, c.path);
    EXPECT_EQ(r.api, ApiKindForPath(c.path));
  }
}

TEST(OpenAIRequestParserTest, ReadsModelStreamAndCacheSalt) {
  InferenceRequest r = MustParse(
      kChat, R"({"model":"llama","stream":true,"cache_salt":"tenant-a","messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(r.model, "llama");
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.cache_salt, "tenant-a");
  EXPECT_EQ(r.priority, 0);
  EXPECT_TRUE(r.headers.empty());

  r = MustParse(kCompletions, R"({"model":"m","prompt":"p","stream":null,"cache_salt":null})");
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.cache_salt, "");

  r = MustParse("", R"({"model":"m","prompt":"p","stream":false})");
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.path, kDefaultRequestPath);
  EXPECT_EQ(r.api, ApiKind::kCompletions);
}

TEST(OpenAIRequestParserTest, RepeatedKeysKeepTheLastValue) {
  // As Python's json and Go's encoding/json (model servers, GIE) read them.
  InferenceRequest r = MustParse(kCompletions, R"({"model":"a","prompt":"x","model":"b","prompt":"y"})");
  EXPECT_EQ(r.model, "b");
  EXPECT_EQ(r.prompt, "y");
  r = MustParse(kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],
                          "tools":[{"type":"function","function":{"name":"f","name":"g"}}]})");
  EXPECT_EQ(r.prompt, "tools\n[{\"function\":{\"name\":\"g\"},\"type\":\"function\"}]\nuser\nx\n");
}

TEST(OpenAIRequestParserTest, RenderingIgnoresWhitespaceKeyOrderAndEscapes) {
  const struct {
    std::string_view path, a, b;
  } pairs[] = {
      {kChat,
       R"({"model":"m","messages":[{"role":"user","content":"Hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"b":1,"a":[true,null,"\/"]}}}]})",
       "{\n  \"tools\" : [ { \"function\" : { \"parameters\" : { \"a\" : [ true , null , \"/\" ] , \"b\" : 1.0 } ,\n"
       "  \"name\" : \"\\u0066\" } , \"type\" : \"function\" } ],\r\n\t\"messages\" : [ { \"content\" : \"H\\u0069\",\n"
       "  \"role\" : \"user\" } ],\n  \"model\" : \"m\"\n}\n"},
      {kResponses,
       R"({"model":"m","input":[{"type":"function_call","name":"f","arguments":"{}","call_id":"c"}]})",
       R"({ "input" : [ { "call_id" : "c", "arguments" : "{}", "name" : "f", "type" : "function_call" } ], "model" : "m" })"},
      {kCompletions, R"({"model":"m","prompt":[1,2,3]})", "{ \"prompt\" : [ 1 ,\n 2 , 3 ] , \"model\" : \"m\" }"},
      {kChat,
       R"({"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"f","filename":"a.pdf"}}]}]})",
       R"({"messages":[{"content":[{"file":{"filename":"a.pdf","file_id":"f"},"type":"file"}],"role":"user"}],"model":"m"})"},
  };
  for (const auto& p : pairs) {
    SCOPED_TRACE(p.a);
    InferenceRequest a = MustParse(p.path, p.a);
    InferenceRequest b = MustParse(p.path, p.b);
    EXPECT_FALSE(a.prompt.empty());
    EXPECT_EQ(a.prompt, b.prompt);
    EXPECT_EQ(a.prompt_tokens, b.prompt_tokens);
  }
  // And different values do render differently.
  EXPECT_NE(MustParse(kChat, pairs[0].a).prompt,
            MustParse(kChat, R"({"model":"m","messages":[{"role":"user","content":"Hi"}],"tools":[{"type":"function",
                                "function":{"name":"f","parameters":{"b":2,"a":[true,null,"/"]}}}]})")
                .prompt);
}

TEST(OpenAIRequestParserTest, LongMediaReferencesAreShortenedToPrefixAndHash) {
  auto body = [](const std::string& url) {
    return R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":")" + url +
           R"("}}]}]})";
  };
  const std::string short_url = "data:image/png;base64," + std::string(128 - 22, 'A');  // exactly 128 chars
  ASSERT_EQ(short_url.size(), 128u);
  EXPECT_EQ(MustParse(kChat, body(short_url)).prompt, "user\n<image:" + short_url + ">\n");

  const std::string big = "data:image/png;base64," + std::string(2'000'000, 'A');
  std::string big2 = big;
  big2[1'000'000] = 'B';
  const std::string p1 = MustParse(kChat, body(big)).prompt;
  const std::string p2 = MustParse(kChat, body(big2)).prompt;
  // "user\n<image:" + 64 chars + "...#" + 16 hex digits + ">\n"
  ASSERT_EQ(p1.size(), 5 + 7 + 64 + 4 + 16 + 2);
  EXPECT_EQ(p1.substr(0, 12 + 64), "user\n<image:" + big.substr(0, 64));
  EXPECT_EQ(p1.substr(12 + 64, 4), "...#");
  EXPECT_EQ(p1.find_first_not_of("0123456789abcdef", 12 + 64 + 4), 12u + 64 + 4 + 16);
  EXPECT_NE(p1, p2);  // same prefix, different payload
  EXPECT_EQ(p1, MustParse(kChat, body(big)).prompt);

  const std::string audio =
      R"({"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":")" +
      std::string(1000, 'Z') + R"(","format":"mp3"}}]}]})";
  EXPECT_EQ(MustParse(kChat, audio).prompt.substr(0, 12 + 64 + 4), "user\n<audio:" + std::string(64, 'Z') + "...#");
}

TEST(OpenAIRequestParserTest, LargeBodiesParse) {
  // Above the 1 MiB limit for the thread's reusable parser, then a small one on the same thread.
  const std::string text(3'000'000, 'x');
  InferenceRequest r = MustParse(kCompletions, R"({"model":"m","prompt":")" + text + R"("})");
  EXPECT_EQ(r.prompt.size(), text.size());
  EXPECT_EQ(r.prompt_tokens, 750'000);
  EXPECT_EQ(MustParse(kCompletions, R"({"model":"m","prompt":"abcde"})").prompt_tokens, 2);
}

struct ErrorCase {
  const char* name;
  std::string_view path;
  std::string_view body;
  std::string_view message;  // exact
};

TEST(OpenAIRequestParserTest, ErrorsNameTheJsonPath) {
  const ErrorCase cases[] = {
      // JSON syntax, with byte offsets.
      {"empty", kChat, "", "invalid JSON at byte 0: empty document"},
      {"blank", kChat, " \n", "invalid JSON at byte 2: empty document"},
      {"trailing comma", kChat, R"({"model": "m",})", "invalid JSON at byte 14: expected a string key"},
      {"missing comma", kChat, R"({"model": "m" "x": 1})",
       "invalid JSON at byte 14: expected ',' or '}' after an object member"},
      {"missing colon", kChat, R"({"model" "m"})", "invalid JSON at byte 9: expected ':' after an object key"},
      {"array", kChat, R"({"a":[1 2]})", "invalid JSON at byte 8: expected ',' or ']' after an array element"},
      {"truncated", kChat, R"({"a":[1,)", "invalid JSON at byte 8: unexpected end of input, expected a value"},
      {"unterminated string", kChat, R"({"a":"xyz)", "invalid JSON at byte 5: unterminated string"},
      {"bad escape", kChat, R"({"a":"x\q"})", "invalid JSON at byte 7: invalid escape sequence"},
      {"bad unicode escape", kChat, R"({"a":"\u12G4"})", "invalid JSON at byte 6: invalid \\u escape"},
      {"lone low surrogate", kChat, R"({"a":"x\udc00"})",
       "invalid JSON at byte 7: unpaired UTF-16 surrogate in a \\u escape"},
      {"lone high surrogate", kChat, R"({"a":"\ud83d x"})",
       "invalid JSON at byte 6: unpaired UTF-16 surrogate in a \\u escape"},
      {"control character", kChat, "{\"a\":\"x\ty\"}", "invalid JSON at byte 7: unescaped control character in a string"},
      {"bad number", kChat, R"({"a":-x})", "invalid JSON at byte 5: invalid number"},
      {"bad fraction", kChat, R"({"a":1.})", "invalid JSON at byte 5: invalid number"},
      {"integer too large", kCompletions, R"({"prompt":[18446744073709551616]})",
       "invalid JSON at byte 11: number out of range"},
      {"integer too small", kCompletions, R"({"a":-9223372036854775809})", "invalid JSON at byte 5: number out of range"},
      {"double too large", kCompletions, R"({"a":[1, 1.5e400]})", "invalid JSON at byte 9: number out of range"},
      {"bad literal", kChat, R"({"a":tru})", "invalid JSON at byte 5: invalid literal (expected true, false or null)"},
      {"trailing garbage", kChat, R"({"a":1} x)", "invalid JSON at byte 8: unexpected characters after the JSON value"},
      {"invalid UTF-8", kChat, "{\"a\":\"\xC3\x28\"}", "invalid JSON at byte 6: invalid UTF-8"},
      {"overlong UTF-8", kChat, "{\"a\":\"\xC0\xAF\"}", "invalid JSON at byte 6: invalid UTF-8"},
      {"single quotes", kChat, "{'a':1}", "invalid JSON at byte 1: expected a string key"},
      // Common fields.
      {"not an object", kChat, "[1]", "request body: expected a JSON object, got array"},
      {"string document", kChat, R"("hi")", "request body: expected a JSON object, got string"},
      {"no model", kChat, R"({"messages":[{"role":"user","content":"x"}]})", "model: missing"},
      {"model not a string", kChat, R"({"model":5,"messages":[]})", "model: expected a string, got number 5"},
      {"model null", kCompletions, R"({"model":null,"prompt":"x"})", "model: expected a string, got null"},
      {"model empty", kCompletions, R"({"model":"","prompt":"x"})", "model: must not be empty"},
      {"stream not a boolean", kCompletions, R"({"model":"m","prompt":"x","stream":"yes"})",
       "stream: expected a boolean, got string"},
      {"cache_salt not a string", kCompletions, R"({"model":"m","prompt":"x","cache_salt":1.5})",
       "cache_salt: expected a string, got number 1.5"},
      // Chat.
      {"no messages", kChat, R"({"model":"m"})", "messages: missing"},
      {"empty messages", kChat, R"({"model":"m","messages":[]})", "messages: must not be empty"},
      {"messages object", kChat, R"({"model":"m","messages":{}})", "messages: expected an array, got object"},
      {"message not an object", kChat, R"({"model":"m","messages":[{"role":"user"},5]})",
       "messages[1]: expected an object, got number 5"},
      {"no role", kChat, R"({"model":"m","messages":[{"content":"x"}]})", "messages[0].role: missing"},
      {"role not a string", kChat, R"({"model":"m","messages":[{"role":1,"content":"x"}]})",
       "messages[0].role: expected a string, got number 1"},
      {"content number", kChat,
       R"({"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"user","content":7}]})",
       "messages[2].content: expected a string or an array of parts, got number 7"},
      {"content object", kChat, R"({"model":"m","messages":[{"role":"user","content":{"text":"x"}}]})",
       "messages[0].content: expected a string or an array of parts, got object"},
      {"part not an object", kChat, R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},"b"]}]})",
       "messages[0].content[1]: expected an object, got string"},
      {"part without type", kChat, R"({"model":"m","messages":[{"role":"user","content":[{"text":"a"}]}]})",
       "messages[0].content[0].type: missing"},
      {"text not a string", kChat, R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":3}]}]})",
       "messages[0].content[0].text: expected a string, got number 3"},
      {"text missing", kChat, R"({"model":"m","messages":[{"role":"user","content":[{"type":"input_text"}]}]})",
       "messages[0].content[0].text: missing"},
      {"image without url", kChat,
       R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"detail":"low"}}]}]})",
       "messages[0].content[0].image_url.url: missing"},
      {"image_url number", kChat,
       R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":4}]}]})",
       "messages[0].content[0].image_url: expected an object or a string, got number 4"},
      {"audio without data", kChat,
       R"({"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"format":"wav"}}]}]})",
       "messages[0].content[0].input_audio.data: missing"},
      {"tools not an array", kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":{}})",
       "tools: expected an array, got object"},
      {"tool not an object", kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":["f"]})",
       "tools[0]: expected an object, got string"},
      // Completions.
      {"no prompt", kCompletions, R"({"model":"m"})", "prompt: missing"},
      {"empty prompt", kCompletions, R"({"model":"m","prompt":""})", "prompt: must not be empty"},
      {"empty prompt list", kCompletions, R"({"model":"m","prompt":[]})", "prompt: must not be empty"},
      {"prompt object", kCompletions, R"({"model":"m","prompt":{}})",
       "prompt: expected a string, an array of strings or an array of token ids, got object"},
      {"prompt of booleans", kCompletions, R"({"model":"m","prompt":[true]})",
       "prompt[0]: expected a string, a token id or an array of token ids, got boolean"},
      {"negative token id", kCompletions, R"({"model":"m","prompt":[1,-2]})",
       "prompt[1]: expected a token id (a non-negative integer), got number -2"},
      {"fractional token id", kCompletions, R"({"model":"m","prompt":[1,2.5]})",
       "prompt[1]: expected a token id (a non-negative integer), got number 2.5"},
      {"mixed strings and ids", kCompletions, R"({"model":"m","prompt":["a",1]})",
       "prompt[1]: expected a string, got number 1"},
      {"empty token list", kCompletions, R"({"model":"m","prompt":[[1],[]]})", "prompt[1]: must not be empty"},
      {"token list of strings", kCompletions, R"({"model":"m","prompt":[[1],["a"]]})",
       "prompt[1][0]: expected a token id (a non-negative integer), got string"},
      {"token lists and strings", kCompletions, R"({"model":"m","prompt":[[1],"a"]})",
       "prompt[1]: expected an array of token ids, got string"},
      // Responses.
      {"no input", kResponses, R"({"model":"m","instructions":"i"})", "input: missing"},
      {"empty input", kResponses, R"({"model":"m","input":""})", "input: must not be empty"},
      {"empty input list", kResponses, R"({"model":"m","input":[]})", "input: must not be empty"},
      {"input number", kResponses, R"({"model":"m","input":3})",
       "input: expected a string or an array of items, got number 3"},
      {"input item not an object", kResponses, R"({"model":"m","input":[3]})",
       "input[0]: expected an object, got number 3"},
      {"input item without type or role", kResponses, R"({"model":"m","input":[{"content":"x"}]})",
       "input[0]: expected an item with a string type or role"},
      {"input item type not a string", kResponses, R"({"model":"m","input":[{"type":1}]})",
       "input[0].type: expected a string, got number 1"},
      {"input message without role", kResponses, R"({"model":"m","input":[{"type":"message","content":"x"}]})",
       "input[0].role: missing"},
      {"input image without reference", kResponses,
       R"({"model":"m","input":[{"role":"user","content":[{"type":"input_image","detail":"auto"}]}]})",
       "input[0].content[0]: expected a string image_url or file_id"},
      {"instructions not a string", kResponses, R"({"model":"m","input":"x","instructions":5})",
       "instructions: expected a string, got number 5"},
      // Embeddings.
      {"embeddings without input", kEmbeddings, R"({"model":"m"})", "input: missing"},
      {"embeddings empty messages", kEmbeddings, R"({"model":"m","messages":[]})", "messages: must not be empty"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<InferenceRequest> r = ParseOpenAIRequest(c.path, c.body);
    ASSERT_FALSE(r.ok()) << "parsed: " << c.body;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(r.status().message()), c.message);
  }
}

TEST(OpenAIRequestParserTest, TooDeepNestingFailsCleanly) {
  for (const std::string& body : {std::string(100'000, '['), std::string(5'000, '[') + std::string(5'000, ']'),
                                  R"({"model":"m","prompt":"x","tools":)" + std::string(3'000, '[') +
                                      std::string(3'000, ']') + "}"}) {
    absl::StatusOr<InferenceRequest> r = ParseOpenAIRequest(kChat, body);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StartsWith(r.status().message(), "invalid JSON")) << r.status();
  }
}

TEST(OpenAIRequestParserTest, EmptyViewWithoutStorageIsAnEmptyDocument) {
  // A default std::string_view has a null data pointer, which reached memcpy inside simdjson
  // (undefined behaviour; found by tests/fuzz/fuzz_openai_request under UBSan).
  absl::StatusOr<InferenceRequest> r = ParseOpenAIRequest(kChat, std::string_view());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "invalid JSON at byte 0: empty document");
  absl::StatusOr<InferenceRequest> c = ParseCaptureEnvelope(std::string_view());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "invalid JSON at byte 0: empty document");
}

// Without the shared fixtures the robustness tests still run on these.
const struct {
  std::string_view path, body;
} kSamples[] = {
    {kChat, R"({"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":[{"type":"text","text":"a"},
       {"type":"image_url","image_url":{"url":"https://x"}}]}],"tools":[{"type":"function","function":{"name":"f",
       "parameters":{"type":"object","properties":{"p":{"type":"string","enum":["x","y"]}}}}}],"stream":true})"},
    {kCompletions, R"({"model":"m","prompt":[[1,2,3],[4,5]],"cache_salt":"s\u00e9"})"},
    {kResponses, R"({"model":"m","instructions":"I","input":[{"role":"user","content":"x"},{"type":"function_call","name":"f"}]})"},
};

TEST(OpenAIRequestParserTest, NeverCrashesOnTruncatedOrMutatedBodies) {
  std::vector<std::string> bodies;
  for (const auto& sample : kSamples) bodies.emplace_back(sample.body);
  const std::filesystem::path dir = std::filesystem::path(EPP_SHARED_FIXTURES) / "requests";
  if (std::filesystem::is_directory(dir)) {
    for (const auto& entry : std::filesystem::directory_iterator(dir)) bodies.push_back(ReadFile(entry.path()));
  }
  const std::string_view paths[] = {kChat, kCompletions, kResponses, kEmbeddings};
  const char replacements[] = {'"', '{', '}', '[', ']', ',', ':', '\\', '\0', '\xff', '1', ' '};
  size_t parsed = 0, failed = 0;
  auto check = [&](std::string_view path, std::string_view body) {
    absl::StatusOr<InferenceRequest> r = ParseOpenAIRequest(path, body);
    if (r.ok()) {
      ++parsed;
      EXPECT_FALSE(r->model.empty());
    } else {
      ++failed;
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    }
    absl::StatusOr<InferenceRequest> e = ParseCaptureEnvelope(body);
    if (!e.ok()) {
      EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << e.status();
    }
  };
  for (const std::string& body : bodies) {
    for (std::string_view path : paths) {
      for (size_t n = 0; n <= body.size(); ++n) check(path, std::string_view(body).substr(0, n));
    }
    for (size_t i = 0; i < body.size(); ++i) {
      for (char c : replacements) {
        std::string mutated = body;
        mutated[i] = c;
        check(kChat, mutated);
      }
    }
  }
  std::mt19937_64 rng(42);
  constexpr std::string_view kAlphabet = "{}[]\":,0123 -.eEtrufalsn\\u\x80\xc3";
  for (int i = 0; i < 2000; ++i) {
    std::string noise(rng() % 64, '\0');
    for (char& c : noise) c = kAlphabet[rng() % kAlphabet.size()];
    check(kChat, noise);
  }
  EXPECT_GT(parsed, 0u);
  EXPECT_GT(failed, 0u);
}

TEST(OpenAIRequestParserTest, ConcurrentParsesAgree) {
  std::vector<std::string> expected;
  for (const auto& sample : kSamples) expected.push_back(MustParse(sample.path, sample.body).prompt);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        const size_t k = static_cast<size_t>(i + t) % std::size(kSamples);
        absl::StatusOr<InferenceRequest> r = ParseOpenAIRequest(kSamples[k].path, kSamples[k].body);
        if (!r.ok() || r->prompt != expected[k]) ++mismatches[t];
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST(CaptureEnvelopeRequestTest, EnvelopeWithObjectBodyAndHeaders) {
  absl::StatusOr<InferenceRequest> r = ParseCaptureEnvelope(R"({
    "ts": 1700000000,
    "path": "/v1/chat/completions",
    "headers": {"X-Request-Id": "r1", "Content-Type": "application/json", "X-Multi": ["a", "b"]},
    "body": {"model": "m", "messages": [{"role": "user", "content": "Hello!"}], "stream": true}
  })");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->api, ApiKind::kChatCompletions);
  EXPECT_EQ(r->path, "/v1/chat/completions");
  EXPECT_EQ(r->model, "m");
  EXPECT_TRUE(r->stream);
  EXPECT_EQ(r->prompt, "user\nHello!\n");
  const std::vector<std::pair<std::string, std::string>> headers = {
      {"x-request-id", "r1"}, {"content-type", "application/json"}, {"x-multi", "a"}, {"x-multi", "b"}};
  EXPECT_EQ(r->headers, headers);
  EXPECT_EQ(r->header("X-REQUEST-ID"), "r1");
  EXPECT_EQ(r->header("x-multi"), "a");
  EXPECT_FALSE(r->header("x-missing").has_value());
}

TEST(CaptureEnvelopeRequestTest, EnvelopeWithStringBodyMatchesTheBareBody) {
  const std::string body = R"({"model":"m","prompt":[1,2,3],"cache_salt":"s"})";
  std::string escaped;
  for (char c : body) {
    if (c == '"' || c == '\\') escaped += '\\';
    escaped += c;
  }
  absl::StatusOr<InferenceRequest> env =
      ParseCaptureEnvelope(R"({"path":"/v1/completions","headers":{},"body":")" + escaped + R"("})");
  ASSERT_TRUE(env.ok()) << env.status();
  InferenceRequest bare = MustParse(kCompletions, body);
  EXPECT_EQ(env->prompt, bare.prompt);
  EXPECT_EQ(env->prompt, "1 2 3");
  EXPECT_EQ(env->prompt_tokens, 3);
  EXPECT_EQ(env->cache_salt, "s");
  EXPECT_EQ(env->model, bare.model);
}

TEST(CaptureEnvelopeRequestTest, PathComesFromFieldThenHeadersThenDefault) {
  const struct {
    const char* json;
    std::string_view path;
    ApiKind api;
  } cases[] = {
      {R"({"headers":{":path":"/v1/embeddings","x-original-path":"/v1/responses"},"body":{"model":"m","input":"x"}})",
       "/v1/embeddings", ApiKind::kEmbeddings},
      {R"({"headers":{"x-forwarded-path":"/v1/chat/completions","X-Original-Path":"/v1/responses"},
           "body":{"model":"m","input":"x"}})",
       "/v1/responses", ApiKind::kResponses},
      {R"({"headers":{"x-forwarded-path":"/v1/chat/completions"},"body":{"model":"m","messages":[{"role":"user"}]}})",
       "/v1/chat/completions", ApiKind::kChatCompletions},
      {R"({"path":"/v1/completions","headers":{":path":"/v1/embeddings"},"body":{"model":"m","prompt":"x"}})",
       "/v1/completions", ApiKind::kCompletions},
      {R"({"body":{"model":"m","prompt":"x"}})", kDefaultRequestPath, ApiKind::kCompletions},
      {R"({"path":"","headers":null,"body":{"model":"m","prompt":"x"}})", kDefaultRequestPath, ApiKind::kCompletions},
      // Bare bodies, with and without a path.
      {R"({"path":"/v1/chat/completions","model":"m","messages":[{"role":"user","content":"x"}]})",
       "/v1/chat/completions", ApiKind::kChatCompletions},
      {R"({"model":"m","prompt":"x"})", kDefaultRequestPath, ApiKind::kCompletions},
      // Without a path anywhere, the body's members imply the API (bare, object and string bodies).
      {R"({"model":"m","messages":[{"role":"user","content":"x"}]})", "/v1/chat/completions", ApiKind::kChatCompletions},
      {R"({"body":{"model":"m","messages":[{"role":"user","content":"x"}]}})", "/v1/chat/completions",
       ApiKind::kChatCompletions},
      {R"({"body":"{\"model\":\"m\",\"input\":\"x\"}"})", "/v1/responses", ApiKind::kResponses},
      {R"({"model":"m","input":"x","encoding_format":"float"})", "/v1/embeddings", ApiKind::kEmbeddings},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.json);
    absl::StatusOr<InferenceRequest> r = ParseCaptureEnvelope(c.json);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->path, c.path);
    EXPECT_EQ(r->api, c.api);
  }
}

TEST(CaptureEnvelopeRequestTest, TheBodyImpliesThePathOnlyWhenNoneIsGiven) {
  EXPECT_EQ(InferRequestPath(R"({"model":"m","messages":[]})"), "/v1/chat/completions");
  EXPECT_EQ(InferRequestPath(R"({"model":"m","system":"be terse","max_tokens":9,"messages":[]})"), "/v1/messages");
  EXPECT_EQ(InferRequestPath(R"({"model":"m","anthropic_version":"2023-06-01","messages":[]})"), "/v1/messages");
  EXPECT_EQ(InferRequestPath(R"({"model":"m","input":[{"role":"user","content":"x"}]})"), "/v1/responses");
  EXPECT_EQ(InferRequestPath(R"({"model":"m","input":"x","dimensions":8})"), "/v1/embeddings");
  EXPECT_EQ(InferRequestPath(R"({"model":"m","prompt":"x"})"), kDefaultRequestPath);
  EXPECT_EQ(InferRequestPath("[1,2]"), kDefaultRequestPath);
  EXPECT_EQ(InferRequestPath("{not json"), kDefaultRequestPath);
  // An Anthropic body without a path goes to the anthropic parser.
  absl::StatusOr<InferenceRequest> a = ParseCaptureEnvelope(
      R"({"model":"claude","system":"be terse","max_tokens":9,"messages":[{"role":"user","content":"hi"}]})");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->path, "/v1/messages");
  EXPECT_EQ(a->parser, RequestParser::kAnthropic);
  // A given path still wins: a chat body sent to completions is that API's error.
  absl::StatusOr<InferenceRequest> r =
      ParseCaptureEnvelope(R"({"model":"m","messages":[{"role":"user","content":"x"}]})", "/v1/completions");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("prompt"), std::string::npos) << r.status();
  absl::StatusOr<InferenceRequest> h = ParseCaptureEnvelope(
      R"({"headers":{":path":"/v1/completions"},"body":{"model":"m","messages":[{"role":"user","content":"x"}]}})");
  EXPECT_FALSE(h.ok());
}

TEST(CaptureEnvelopeRequestTest, ErrorsNameThePathInTheEnvelope) {
  const struct {
    const char* name;
    std::string_view json;
    std::string_view message;
  } cases[] = {
      {"not an object", "[]", "request body: expected a JSON object (a capture envelope or a request body), got array"},
      {"invalid envelope", R"({"body":)", "invalid JSON at byte 8: unexpected end of input, expected a value"},
      {"path not a string", R"({"path":3,"body":{}})", "path: expected a string, got number 3"},
      {"bare body path not a string", R"({"path":true,"model":"m","prompt":"x"})",
       "path: expected a string, got boolean"},
      {"headers not an object", R"({"headers":3,"body":{}})", "headers: expected an object, got number 3"},
      {"header value", R"({"headers":{"x-a":3},"body":{}})",
       "headers.x-a: expected a string or an array of strings, got number 3"},
      {"header list value", R"({"headers":{"x-a":["a",1]},"body":{}})", "headers.x-a[1]: expected a string, got number 1"},
      {"body number", R"({"body":5})", "body: expected a JSON object or a JSON string, got number 5"},
      {"body string not JSON", R"({"body":"{\"model\": }"})",
       "body: invalid JSON at byte 10: unexpected character, expected a value"},
      {"body string is an array", R"({"body":"[]"})", "body: expected a JSON object, got array"},
      {"error inside the body", R"({"path":"/v1/chat/completions","body":{"model":"m","messages":[]}})",
       "body.messages: must not be empty"},
      {"error deep inside a string body", R"({"path":"/v1/chat/completions","body":"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":1}]}"})",
       "body.messages[0].content: expected a string or an array of parts, got number 1"},
      {"bare body error", R"({"path":"/v1/responses","model":"m"})", "input: missing"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<InferenceRequest> r = ParseCaptureEnvelope(c.json);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(r.status().message()), c.message);
  }
}

// Every real request in ../shared/fixtures/requests parses as the API its file name says.
class RequestFixturesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::is_directory(dir_)) GTEST_SKIP() << "shared fixtures not found at " << dir_;
  }
  const std::filesystem::path dir_ = std::filesystem::path(EPP_SHARED_FIXTURES) / "requests";
};

TEST_F(RequestFixturesTest, EveryRequestParsesAsTheApiItsNameSays) {
  const struct {
    std::string_view prefix, path;
    ApiKind api;
  } kinds[] = {
      {"chat-", kChat, ApiKind::kChatCompletions},
      {"completions-", kCompletions, ApiKind::kCompletions},
      {"responses-", kResponses, ApiKind::kResponses},
      {"embeddings-", kEmbeddings, ApiKind::kEmbeddings},
  };
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    const auto* kind = std::find_if(std::begin(kinds), std::end(kinds),
                                    [&](const auto& k) { return name.starts_with(k.prefix); });
    if (kind == std::end(kinds)) {
      ADD_FAILURE() << "no API known for this file-name prefix";
      continue;
    }
    ++files;
    const std::string body = ReadFile(entry.path());
    InferenceRequest r = MustParse(kind->path, body);
    EXPECT_EQ(r.api, kind->api);
    EXPECT_FALSE(r.model.empty());
    EXPECT_FALSE(r.prompt.empty());
    EXPECT_GT(r.prompt_tokens, 0);

    // The same body inside an envelope, and bare with a path field, gives the same request.
    absl::StatusOr<InferenceRequest> env = ParseCaptureEnvelope(
        absl::StrCat(R"({"path":")", ToAbsl(kind->path), R"(","headers":{"x-request-id":"1"},"body":)", body, "}"));
    ASSERT_TRUE(env.ok()) << env.status();
    EXPECT_EQ(env->api, kind->api);
    EXPECT_EQ(env->prompt, r.prompt);
    EXPECT_EQ(env->model, r.model);
    EXPECT_EQ(env->stream, r.stream);
  }
  EXPECT_GT(files, 0);
}

TEST_F(RequestFixturesTest, SelectedRequestsRenderAsExpected) {
  auto parse = [&](const char* file, std::string_view path) { return MustParse(path, ReadFile(dir_ / file)); };
  if (!std::filesystem::exists(dir_ / "chat-aigw-stream.json")) GTEST_SKIP() << "fixture set changed";
  EXPECT_TRUE(parse("chat-aigw-stream.json", kChat).stream);
  EXPECT_EQ(parse("chat-aigw-basic.json", kChat).prompt, "user\nHello!\n");
  EXPECT_EQ(parse("chat-aigw-basic.json", kChat).model, "gpt-5-nano");
  EXPECT_EQ(parse("chat-aigw-multiturn-developer-system.json", kChat).prompt,
            "developer\nYou are a helpful assistant.\nuser\nHello!\nassistant\nHello! How can I assist you today?\n"
            "user\nAnswer in up to 5 words: What's the weather like?\n");
  const InferenceRequest image = parse("chat-aigw-multimodal-image_url-https.json", kChat);
  EXPECT_TRUE(absl::StartsWith(image.prompt, "user\nWhat is in this image?<image:https://upload.wikimedia.org/"))
      << image.prompt;
  const InferenceRequest tools = parse("chat-aigw-tools-function.json", kChat);
  EXPECT_TRUE(absl::StartsWith(tools.prompt, R"(tools
[{"function":{"description":"Get the current weather in a given location","name":"get_current_weather",)"))
      << tools.prompt;
  EXPECT_TRUE(absl::EndsWith(tools.prompt, "\nuser\nWhat is the weather like in Boston today?\n"));
  const InferenceRequest ids = parse("completions-aigw-token-ids.json", kCompletions);
  EXPECT_EQ(ids.prompt_tokens, 31);
  EXPECT_TRUE(absl::StartsWith(ids.prompt, "755 16178 1471 997 "));
  const InferenceRequest strings = parse("completions-aigw-list-of-strings.json", kCompletions);
  EXPECT_NE(strings.prompt.find("fib(n-2)\ndef fib(n):"), std::string::npos);
  const InferenceRequest fn = parse("responses-openapi-functions.json", kResponses);
  EXPECT_TRUE(absl::StartsWith(fn.prompt, "tools\n[{\"description\":\"Get the current weather"));
  EXPECT_TRUE(absl::EndsWith(fn.prompt, "\nuser\nWhat is the weather like in Boston today?\n"));
  EXPECT_EQ(parse("embeddings-aigw-basic.json", kEmbeddings).prompt, "How do I reset my password?");
}

}  // namespace
TEST(OpenAIRequestParserTest, InPlaceParsingMatchesTheCopyAndLeavesTheBodyAlone) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/v1/chat/completions", R"({"model":"m","messages":[{"role":"user","content":"hello \u00e9 there"}],"stream":true})"},
      {"/v1/completions", R"({"model":"m","prompt":["a","b"],"cache_salt":"s"})"},
      {"/v1/completions", R"({"model":"m","prompt":"x")"},    // truncated: the padding must not complete it
      {"/v1/completions", R"({"model":"m","prompt":"x"}   )"},  // trailing spaces, as the padding
      {"/v1/completions", ""},
  };
  for (const auto& [path, text] : cases) {
    const absl::StatusOr<InferenceRequest> copied = ParseOpenAIRequest(path, text);
    for (bool tight : {false, true}) {
      std::string body = text;
      if (tight) body.shrink_to_fit();  // no spare capacity: the padding needs a reallocation
      const absl::StatusOr<InferenceRequest> in_place = ParseOpenAIRequestInPlace(path, body);
      EXPECT_EQ(body, text);
      EXPECT_GE(body.capacity() - body.size(), kRequestBodyPadding);
      ASSERT_EQ(in_place.ok(), copied.ok()) << text;
      if (!copied.ok()) {
        EXPECT_EQ(in_place.status(), copied.status()) << text;
        continue;
      }
      EXPECT_EQ(in_place->model, copied->model);
      EXPECT_EQ(in_place->prompt, copied->prompt);
      EXPECT_EQ(in_place->stream, copied->stream);
      EXPECT_EQ(in_place->cache_salt, copied->cache_salt);
    }
  }
}

}  // namespace epp
