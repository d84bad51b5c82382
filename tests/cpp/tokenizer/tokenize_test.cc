// token-producer's backends over real loopback HTTP: the vllm backend asks a simulator's render
// endpoints (or /tokenize on a server without them) for the request's token ids, caches them per
// request, and falls back to estimating (counted by reason) when the server is gone, silent, or
// answers with an error; the precise prefix producer then matches what the server's events said.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "epp/config.h"
#include "epp/kv/index.h"
#include "epp/kv/subscriber.h"
#include "epp/registry.h"
#include "epp/request.h"
#include "epp/scheduler.h"
#include "epp/tools/sim.h"
#include "epp/text/tokenize.h"
#include "testing/epp_testing.h"

namespace epp {
namespace {

constexpr char kModel[] = "meta-llama/Llama-3.1-8B-Instruct";  // the simulator's default model

TEST(TokenizeResponseTest, ReadsEachShapeAndNamesThePlaceOfAnError) {
  auto chat = ParseTokenizeResponse(TokenizeEndpoint::kChatRender, R"({"request_id":"x","token_ids":[1,2,4294967295]})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(*chat, (std::vector<uint32_t>{1, 2, 4294967295u}));
  auto comp = ParseTokenizeResponse(TokenizeEndpoint::kCompletionsRender, R"([{"token_ids":[7]},{"token_ids":[8]}])");
  ASSERT_TRUE(comp.ok()) << comp.status();
  EXPECT_EQ(*comp, (std::vector<uint32_t>{7}));
  auto tok = ParseTokenizeResponse(TokenizeEndpoint::kTokenize, R"({"count":2,"max_model_len":8,"tokens":[5,6]})");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(*tok, (std::vector<uint32_t>{5, 6}));
  // "-0" is the integer 0 in JSON: id 0 (fuzz_tokenize_response's regression minus-zero-id-is-id-zero.json).
  auto zero = ParseTokenizeResponse(TokenizeEndpoint::kChatRender, R"({"token_ids":[-0]})");
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ(*zero, (std::vector<uint32_t>{0}));
  const std::tuple<TokenizeEndpoint, const char*, const char*> bad[] = {
      {TokenizeEndpoint::kChatRender, R"({"token_ids":[1,-2]})", "token_ids[1]: not a token id"},
      {TokenizeEndpoint::kChatRender, R"({"token_ids":[4294967296]})", "token_ids[0]"},
      {TokenizeEndpoint::kChatRender, R"({"token_ids":[1.5]})", "token_ids[0]"},
      {TokenizeEndpoint::kChatRender, R"({"ids":[1]})", "token_ids: missing"},
      {TokenizeEndpoint::kChatRender, R"([1,2])", "expected an object"},
      {TokenizeEndpoint::kCompletionsRender, R"([])", "empty"},
      {TokenizeEndpoint::kCompletionsRender, R"({"token_ids":[1]})", "expected an array"},
      {TokenizeEndpoint::kCompletionsRender, R"([{"token_ids":"1"}])", "[0].token_ids: expected an array"},
      {TokenizeEndpoint::kTokenize, R"({"tokens":[1)", "not JSON"},
  };
  for (const auto& [ep, body, needle] : bad) {
    auto r = ParseTokenizeResponse(ep, body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << body << ": " << r.status().message();
  }
}

TEST(TokenizeResponseTest, WordTokensAreDeterministicAndUnlikeTheEstimate) {
  const auto a = WordTokenIds("Hello world, hello!");
  EXPECT_EQ(a.size(), 5u);  // "Hello", " world", ",", " hello", "!"
  EXPECT_EQ(a, WordTokenIds("Hello world, hello!"));
  EXPECT_NE(a[0], WordTokenIds("hello")[0]);
  for (uint32_t t : a) EXPECT_GE(t, 256u);
  EXPECT_NE(a, EstimateTokenIds("Hello world, hello!"));
  EXPECT_TRUE(WordTokenIds("").empty());
}

std::unique_ptr<SimHttpServer> StartSim(bool render = true) {
  SimHttpOptions o;
  o.tokenizer = "words";
  o.render_endpoints = render;
  o.time_scale = 0.01;
  o.threads = 4;
  auto s = SimHttpServer::Start(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

std::unique_ptr<Scheduler> Precise(const std::string& token_producer_params) {
  const std::string yaml = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
                           "- type: token-producer\n  parameters: " + token_producer_params + "\n" +
                           R"(- type: precise-prefix-cache-producer
  parameters:
    tokenProcessorConfig: {blockSize: 16}
- type: prefix-cache-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-scorer
  - pluginRef: max-score-picker
)";
  auto cfg = ParseConfig(yaml, "precise.yaml");
  EXPECT_TRUE(cfg.ok()) << cfg.status();
  if (!cfg.ok()) return nullptr;
  static ManualClock clock{testing::kNowUs};
  static SeededRng rng{1};
  auto sched = BuildScheduler(*cfg, BuiltinRegistry(), PluginContext{&clock, &rng});
  EXPECT_TRUE(sched.ok()) << sched.status();
  return sched.ok() ? std::move(*sched) : nullptr;
}

std::string ChatBody(const std::string& model = kModel) {
  std::string system;
  for (int i = 0; i < 12; ++i) system += "You are a careful assistant who answers in plain words. ";
  return R"({"model":")" + model + R"(","messages":[{"role":"system","content":")" + system +
         R"("},{"role":"user","content":"what is a block?"}]})";
}

// Stores `tokens` on `endpoint` in the index as its KV events would.
void Hold(KvBlockIndex& index, const std::string& endpoint, const std::vector<uint32_t>& tokens) {
  KvBlockStored s;
  for (size_t i = 0; i < tokens.size() / 16; ++i) s.block_hashes.push_back(1000 + i);
  s.token_ids.assign(tokens.begin(), tokens.begin() + static_cast<long>(s.block_hashes.size() * 16));
  s.block_size = 16;
  s.medium = "GPU";
  KvEventBatch b;
  b.events.emplace_back(std::move(s));
  index.Apply(endpoint, kModel, b);
}

PickResult PickWithBody(const Scheduler& sched, const std::string& body, const std::vector<Endpoint>& pool,
                        const std::string& path = "/v1/chat/completions") {
  auto req = ParseOpenAIRequest(path, body);
  EXPECT_TRUE(req.ok()) << req.status();
  req->body = body;
  PickOptions po;
  po.record = false;
  return sched.Pick(*req, pool, po);
}

TEST(TokenProducerTest, VllmBackendAsksTheServerAndThePreciseProducerMatchesItsEvents) {
  auto sim = StartSim();
  ASSERT_NE(sim, nullptr);
  auto sched = Precise("{vllm: {url: '" + sim->url() + "/', timeout: 5s}}");
  ASSERT_NE(sched, nullptr);
  const std::string body = ChatBody();
  auto req = ParseOpenAIRequest("/v1/chat/completions", body);
  ASSERT_TRUE(req.ok());
  const std::vector<uint32_t> words = WordTokenIds(req->prompt);
  ASSERT_GE(words.size(), 32u);
  std::vector<Endpoint> pool = {testing::Ep("10.0.0.1:8000"), testing::Ep("10.0.0.2:8000")};
  // The second server holds the prompt as its tokenizer splits it: only the server's own ids find it.
  Hold(*sched->KvEvents()->index, "10.0.0.2:8000", words);
  PickResult r = PickWithBody(*sched, body, pool);
  ASSERT_EQ(r.status, 200) << r.reason;
  EXPECT_EQ(r.tokens_source, "vllm") << r.tokens_note;
  EXPECT_EQ(r.tokens, static_cast<int64_t>(words.size()));
  EXPECT_EQ(r.endpoints[0], "10.0.0.2:8000");
  EXPECT_EQ(r.prefix_match_blocks, static_cast<int>(words.size() / 16));
  // The same request again: from the cache, no second call.
  r = PickWithBody(*sched, body, pool);
  EXPECT_EQ(r.tokens_source, "vllm-cache");
  EXPECT_EQ(r.endpoints[0], "10.0.0.2:8000");
  std::vector<TokenizerCounters> c = sched->Tokenizers();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].backend, "vllm");
  EXPECT_EQ(c[0].requests, 2);
  EXPECT_EQ(c[0].calls, 1);
  EXPECT_EQ(c[0].cache_hits, 1);
  EXPECT_EQ(c[0].cache_tokens, static_cast<int64_t>(words.size()));
  // A completions request goes to the completions render endpoint.
  const std::string comp = R"({"model":")" + std::string(kModel) + R"(","prompt":"one two three four"})";
  r = PickWithBody(*sched, comp, pool, "/v1/completions");
  EXPECT_EQ(r.tokens_source, "vllm") << r.tokens_note;
  EXPECT_EQ(r.tokens, 4);
  // Without a body to send (a replayed request): estimated, counted, and said so.
  auto bare = ParseOpenAIRequest("/v1/chat/completions", body);
  r = sched->Pick(*bare, pool);
  EXPECT_EQ(r.tokens_source, "estimate-fallback");
  EXPECT_NE(r.tokens_note.find("no-body"), std::string::npos) << r.tokens_note;
  EXPECT_EQ(sched->Tokenizers()[0].fallbacks.at("no-body"), 1);
  // The estimate backend never finds the words-tokenized blocks.
  auto est = Precise("{estimate: {}}");
  ASSERT_NE(est, nullptr);
  Hold(*est->KvEvents()->index, "10.0.0.2:8000", words);
  r = PickWithBody(*est, body, pool);
  EXPECT_EQ(r.tokens_source, "estimate");
  EXPECT_EQ(r.prefix_match_blocks, 0);
}

TEST(TokenProducerTest, ServerWithoutRenderEndpointsIsAskedThroughTokenize) {
  auto sim = StartSim(/*render=*/false);
  ASSERT_NE(sim, nullptr);
  auto sched = Precise("{vllm: {url: '" + sim->url() + "'}}");
  ASSERT_NE(sched, nullptr);
  std::vector<Endpoint> pool = {testing::Ep("10.0.0.1:8000")};
  const std::string body = ChatBody();
  auto req = ParseOpenAIRequest("/v1/chat/completions", body);
  PickResult r = PickWithBody(*sched, body, pool);
  EXPECT_EQ(r.tokens_source, "vllm") << r.tokens_note;
  EXPECT_EQ(r.tokens, static_cast<int64_t>(WordTokenIds(req->prompt).size()));
  EXPECT_EQ(sched->Tokenizers()[0].calls, 2);  // render (404), then /tokenize
  // Remembered: the next request goes to /tokenize directly.
  r = PickWithBody(*sched, ChatBody() + " ", pool);
  EXPECT_EQ(r.tokens_source, "vllm");
  EXPECT_EQ(sched->Tokenizers()[0].calls, 3);
}

// A port with a listener that never accepts (the kernel completes the handshake, nobody reads),
// and a port with nothing at all.
struct DeadPorts {
  int silent_fd = -1, silent_port = 0, closed_port = 0;
  DeadPorts() {
    auto bound = [](int& fd) {
      fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
      socklen_t n = sizeof a;
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
      return static_cast<int>(ntohs(a.sin_port));
    };
    silent_port = bound(silent_fd);
    listen(silent_fd, 8);
    int closed_fd = -1;
    closed_port = bound(closed_fd);
    close(closed_fd);
  }
  ~DeadPorts() { close(silent_fd); }
};

TEST(TokenProducerTest, SilentGoneAndFailingServersFallBackToTheEstimateCountedByReason) {
  DeadPorts ports;
  std::vector<Endpoint> pool = {testing::Ep("10.0.0.1:8000")};
  const std::string body = ChatBody();
  auto silent = Precise("{vllm: {url: 'http://127.0.0.1:" + std::to_string(ports.silent_port) + "', timeout: 200ms}}");
  ASSERT_NE(silent, nullptr);
  PickResult r = PickWithBody(*silent, body, pool);
  ASSERT_EQ(r.status, 200) << r.reason;  // the pick goes on
  EXPECT_EQ(r.tokens_source, "estimate-fallback");
  EXPECT_NE(r.tokens_note.find("timeout"), std::string::npos) << r.tokens_note;
  EXPECT_EQ(silent->Tokenizers()[0].fallbacks.at("timeout"), 1);

  auto gone = Precise("{vllm: {url: 'http://127.0.0.1:" + std::to_string(ports.closed_port) + "'}}");
  ASSERT_NE(gone, nullptr);
  r = PickWithBody(*gone, body, pool);
  EXPECT_EQ(r.tokens_source, "estimate-fallback");
  EXPECT_NE(r.tokens_note.find("unavailable"), std::string::npos) << r.tokens_note;

  // The configured model is sent in the body; a server that does not serve it answers 404 with
  // an OpenAI error, which is an error and not a missing endpoint.
  auto sim = StartSim();
  ASSERT_NE(sim, nullptr);
  auto wrong = Precise("{modelName: other-model, vllm: {url: '" + sim->url() + "'}}");
  ASSERT_NE(wrong, nullptr);
  r = PickWithBody(*wrong, body, pool);
  EXPECT_EQ(r.tokens_source, "estimate-fallback");
  EXPECT_NE(r.tokens_note.find("HTTP 404"), std::string::npos) << r.tokens_note;
  EXPECT_EQ(wrong->Tokenizers()[0].fallbacks.at("status"), 1);
  EXPECT_EQ(wrong->Tokenizers()[0].calls, 1);
}

TEST(TokenProducerTest, ParametersAreCheckedNamingThePlace) {
  const std::pair<const char*, const char*> bad[] = {
      {"{estimate: {}, vllm: {}}", "one backend"},
      {"{vllm: {url: 'ftp://x'}}", "url"},
      {"{vllm: {timeout: 0s}}", "timeout"},
      {"{vllm: {cacheTokens: -1}}", "cacheTokens"},
      {"{vllm: {nope: 1}}", "nope"},
      {"{udsTokenizerConfig: {socketFile: /x}}", "udsTokenizerConfig"},
  };
  for (const auto& [params, needle] : bad) {
    const std::string yaml = std::string("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
                                         "- type: token-producer\n  parameters: ") + params + "\n";
    auto cfg = ParseConfig(yaml, "t.yaml");
    ASSERT_TRUE(cfg.ok()) << cfg.status();
    ManualClock clock{0};
    SeededRng rng{1};
    auto s = BuildScheduler(*cfg, BuiltinRegistry(), PluginContext{&clock, &rng});
    ASSERT_FALSE(s.ok()) << params;
    EXPECT_NE(s.status().message().find(needle), std::string::npos) << params << ": " << s.status().message();
  }
  // llm-d: a modelName alone selects the vllm backend.
  auto sched = Precise("{modelName: m}");
  ASSERT_NE(sched, nullptr);
  EXPECT_EQ(sched->Tokenizers()[0].backend, "vllm");
}

}  // namespace
}  // namespace epp
