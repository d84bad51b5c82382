// Request text (untrusted) through the in-process tokenizer.
// Invariants: for each of the three patterns with a hand-written scanner, the scanner's pieces
// equal PCRE2's on every valid UTF-8 input whose characters both engines' Unicode tables class
// alike; a byte-level tokenizer (Llama 3's pattern, NFC, an
// added token) encodes every valid input, decodes it back byte for byte (NFC-stable input), gives
// PrefixTokenizer's ids, and refuses invalid UTF-8 with kInvalidArgument.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/utf8.h"
#include "epp/text/tokenizer.h"
#include "fuzz_util.h"
#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer_impl.h"

namespace {

using Json = nlohmann::json;

std::string ByteChar(int b) {
  auto printable = [](int x) { return (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255); };
  int cp = b;
  if (!printable(b)) {
    cp = 256;
    for (int x = 0; x < b; ++x) cp += printable(x) ? 0 : 1;
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

constexpr const char* kPatterns[] = {
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
};

struct Fixture {
  std::vector<std::shared_ptr<const epp::tokenizer_internal::SplitRegex>> regexes;
  std::shared_ptr<const epp::Tokenizer> tokenizer;
  std::unique_ptr<epp::PrefixTokenizer> prefix;
  Fixture() {
    for (const char* p : kPatterns) regexes.push_back(*epp::tokenizer_internal::SplitRegex::Compile(p, "fuzz"));
    Json vocab = Json::object();
    for (int b = 0; b < 256; ++b) vocab[ByteChar(b)] = b;
    Json merges = Json::array({"t h", "th e", ByteChar(' ') + " th"});
    vocab["th"] = 256;
    vocab["the"] = 257;
    vocab[ByteChar(' ') + "th"] = 258;
    Json j = {{"normalizer", {{"type", "NFC"}}},
              {"added_tokens", Json::array({{{"id", 300}, {"content", "<|x|>"}, {"special", true}}})},
              {"pre_tokenizer", {{"type", "Sequence"},
                                 {"pretokenizers", Json::array({{{"type", "Split"}, {"pattern", {{"Regex", kPatterns[0]}}},
                                                                 {"behavior", "Isolated"}},
                                                                {{"type", "ByteLevel"}, {"use_regex", false}}})}}},
              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
    tokenizer = *epp::Tokenizer::FromJson(j.dump(), "fuzz.json");
    prefix = std::make_unique<epp::PrefixTokenizer>(tokenizer, 1 << 16);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture f;
  const std::string_view text = epp::fuzz::Text(data, size);
  const bool valid = epp::internal::FirstInvalidUtf8(text) == std::string_view::npos;
  absl::StatusOr<std::vector<uint32_t>> ids = f.tokenizer->Encode(text, false);
  if (!valid) {
    EPP_FUZZ_CHECK(!ids.ok() && ids.status().code() == absl::StatusCode::kInvalidArgument, "invalid UTF-8 is refused");
    return 0;
  }
  EPP_FUZZ_CHECK(ids.ok(), ids.status().ToString());
  // Where the two engines' Unicode tables agree (not on characters new in Unicode 15).
  const bool same_tables = epp::tokenizer_internal::SplitRegex::SameCharacterClasses(text);
  for (const auto& re : f.regexes) {
    if (!same_tables) break;
    std::vector<std::string_view> fast, slow;
    EPP_FUZZ_CHECK(re->Split(text, false, [&](std::string_view p) { fast.push_back(p); }).ok(), "split");
    EPP_FUZZ_CHECK(re->SplitPcre2(text, false, [&](std::string_view p) { slow.push_back(p); }).ok(), "pcre2 split");
    EPP_FUZZ_CHECK(fast == slow, "the scanner's pieces are PCRE2's");
  }
  absl::StatusOr<std::vector<uint32_t>> cached = f.prefix->Encode(text, false);
  EPP_FUZZ_CHECK(cached.ok() && *cached == *ids, "PrefixTokenizer gives Encode's ids");
  absl::StatusOr<std::string> back = f.tokenizer->Decode(*ids);
  EPP_FUZZ_CHECK(back.ok(), back.status().ToString());
  // Decoding gives the NFC form of the text (the text itself when it is already NFC).
  absl::StatusOr<std::vector<uint32_t>> again = f.tokenizer->Encode(*back, false);
  EPP_FUZZ_CHECK(again.ok() && *again == *ids, "encoding the decoded text gives the same ids");
  return 0;
}
