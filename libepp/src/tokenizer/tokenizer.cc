// Tokenizer (epp/text/tokenizer.h): tokenizer.json loading and the encode pipeline. The regex
// pre-tokenizer is in regex_split.cc, the BPE model in bpe.cc.
#include "epp/text/tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/utf8.h"
#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer_impl.h"
#include "common/os_error.h"

namespace epp {

using Json = nlohmann::json;
using namespace tokenizer_internal;
using Impl = Tokenizer::Impl;

namespace {

absl::Status Unsupported(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(path + ": " + what + " is not supported");
}

std::string TypeOf(const Json& j) { return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : ""; }

// tokenizer.json is read the way Hugging Face tokenizers reads it, stage by stage (normalizer,
// pre_tokenizer, model, post_processor, decoder, added_tokens). Every stage accepts the types
// the supported model families use; any other type or option is refused with its JSON path,
// because a tokenizer that silently differs would give ids that match no model server's.
//
// Normalizers: a Sequence flattened into steps; the Unicode normal forms, Prepend and Replace
// with a literal string (SentencePiece-style vocabularies write spaces as U+2581 this way).
absl::Status ParseNormalizer(const Json& j, const std::string& path, std::vector<NormalizerStep>& out) {
  if (j.is_null()) return absl::OkStatus();
  if (!j.is_object()) return absl::InvalidArgumentError(path + ": expected an object");
  const std::string type = TypeOf(j);
  if (type == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array())
      return absl::InvalidArgumentError(path + ".normalizers: expected a list");
    for (size_t i = 0; i < j["normalizers"].size(); ++i)
      EPP_RETURN_IF_ERROR(ParseNormalizer(j["normalizers"][i], absl::StrCat(path, ".normalizers[", i, "]"), out));
    return absl::OkStatus();
  }
  NormalizerStep step;
  if (type == "NFC") step.kind = NormalizerStep::kNfc;
  else if (type == "NFD") step.kind = NormalizerStep::kNfd;
  else if (type == "NFKC") step.kind = NormalizerStep::kNfkc;
  else if (type == "NFKD") step.kind = NormalizerStep::kNfkd;
  else if (type == "Prepend") {
    if (!j.contains("prepend") || !j["prepend"].is_string()) return absl::InvalidArgumentError(path + ".prepend: expected a string");
    step.kind = NormalizerStep::kPrepend;
    step.text = j["prepend"].get<std::string>();
  } else if (type == "Replace") {
    const Json& pattern = j.value("pattern", Json());
    if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string()) {
      if (pattern.is_object() && pattern.contains("Regex")) return Unsupported(path + ".pattern", "a Replace normalizer with a regex");
      return absl::InvalidArgumentError(path + ".pattern: expected {\"String\": ...}");
    }
    if (!j.contains("content") || !j["content"].is_string()) return absl::InvalidArgumentError(path + ".content: expected a string");
    step.kind = NormalizerStep::kReplace;
    step.text = pattern["String"].get<std::string>();
    step.with = j["content"].get<std::string>();
    if (step.text.empty()) return absl::InvalidArgumentError(path + ".pattern.String: empty");
  } else {
    return Unsupported(path + ".type", "normalizer '" + type + "'");
  }
  out.push_back(std::move(step));
  return absl::OkStatus();
}

// Pre-tokenizers: Split (a regex, or a literal string quoted into one), ByteLevel (GPT-2's
// pattern unless use_regex is off) and Metaspace. Each becomes a step that cuts a piece into
// smaller pieces; the model then encodes each final piece on its own.
absl::Status ParsePreTokenizer(const Json& j, const std::string& path, std::vector<PreTokenizerStep>& out) {
  if (j.is_null()) return absl::OkStatus();
  if (!j.is_object()) return absl::InvalidArgumentError(path + ": expected an object");
  const std::string type = TypeOf(j);
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      return absl::InvalidArgumentError(path + ".pretokenizers: expected a list");
    for (size_t i = 0; i < j["pretokenizers"].size(); ++i)
      EPP_RETURN_IF_ERROR(ParsePreTokenizer(j["pretokenizers"][i], absl::StrCat(path, ".pretokenizers[", i, "]"), out));
    return absl::OkStatus();
  }
  PreTokenizerStep step;
  if (type == "Split") {
    step.kind = PreTokenizerStep::kSplit;
    const Json& pattern = j.value("pattern", Json());
    std::string regex;
    if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
      regex = pattern["Regex"].get<std::string>();
    } else if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
      regex = "\\Q" + pattern["String"].get<std::string>() + "\\E";
      if (pattern["String"].get<std::string>().find("\\E") != std::string::npos)
        return Unsupported(path + ".pattern.String", "a literal containing \\E");
    } else {
      return absl::InvalidArgumentError(path + ".pattern: expected {\"Regex\": ...} or {\"String\": ...}");
    }
    const std::string behavior = j.value("behavior", std::string());
    if (behavior == "Isolated") step.split_behavior = PreTokenizerStep::kIsolated;
    else if (behavior == "Removed") step.split_behavior = PreTokenizerStep::kRemoved;
    else return Unsupported(path + ".behavior", "split behavior '" + behavior + "'");
    if (j.value("invert", false)) return Unsupported(path + ".invert", "invert: true");
    auto re = SplitRegex::Compile(regex, path + ".pattern");
    if (!re.ok()) return re.status();
    step.regex = std::move(*re);
  } else if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::kByteLevel;
    step.add_prefix_space = j.value("add_prefix_space", false);
    if (j.value("use_regex", true)) {
      // GPT-2's pattern, which the ByteLevel pre-tokenizer applies itself when use_regex is set.
      auto re = SplitRegex::Compile(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
                                    path + ".use_regex");
      if (!re.ok()) return re.status();
      step.regex = std::move(*re);
    }
  } else if (type == "Metaspace") {
    step.kind = PreTokenizerStep::kMetaspace;
    step.replacement = j.value("replacement", std::string("\xE2\x96\x81"));  // U+2581
    if (step.replacement.empty()) return absl::InvalidArgumentError(path + ".replacement: empty");
    // Older files say add_prefix_space instead of prepend_scheme; true meant "always".
    const std::string scheme = j.contains("prepend_scheme") && j["prepend_scheme"].is_string()
                                   ? j["prepend_scheme"].get<std::string>()
                                   : (j.value("add_prefix_space", true) ? "always" : "never");
    if (scheme == "always") step.prepend = PreTokenizerStep::kAlways;
    else if (scheme == "first") step.prepend = PreTokenizerStep::kFirst;
    else if (scheme == "never") step.prepend = PreTokenizerStep::kNever;
    else return Unsupported(path + ".prepend_scheme", "prepend_scheme '" + scheme + "'");
    step.metaspace_split = j.value("split", true);
  } else {
    return Unsupported(path + ".type", "pre-tokenizer '" + type + "'");
  }
  out.push_back(std::move(step));
  return absl::OkStatus();
}

// The post-processor: what add_special_tokens adds around the ids. Only the single-sequence
// template is kept (a prompt is never a pair), e.g. Llama 3's [<|begin_of_text|>, $A].
absl::Status ParsePostProcessor(const Json& j, const std::string& path, const Impl& impl, std::vector<TemplateItem>& single,
                                bool& has_template) {
  if (j.is_null()) return absl::OkStatus();
  if (!j.is_object()) return absl::InvalidArgumentError(path + ": expected an object");
  const std::string type = TypeOf(j);
  if (type == "Sequence") {
    if (!j.contains("processors") || !j["processors"].is_array())
      return absl::InvalidArgumentError(path + ".processors: expected a list");
    for (size_t i = 0; i < j["processors"].size(); ++i)
      EPP_RETURN_IF_ERROR(ParsePostProcessor(j["processors"][i], absl::StrCat(path, ".processors[", i, "]"), impl, single, has_template));
    return absl::OkStatus();
  }
  if (type == "ByteLevel") return absl::OkStatus();  // offsets only; ids unchanged
  if (type != "TemplateProcessing") return Unsupported(path + ".type", "post-processor '" + type + "'");
  if (has_template) return Unsupported(path, "a second TemplateProcessing");
  has_template = true;
  const Json& special = j.value("special_tokens", Json::object());
  if (!j.contains("single") || !j["single"].is_array()) return absl::InvalidArgumentError(path + ".single: expected a list");
  for (size_t i = 0; i < j["single"].size(); ++i) {
    const Json& item = j["single"][i];
    const std::string at = absl::StrCat(path, ".single[", i, "]");
    TemplateItem t;
    if (item.contains("Sequence")) {
      if (item["Sequence"].value("id", std::string()) != "A") return Unsupported(at, "a sequence other than A");
      t.sequence = true;
    } else if (item.contains("SpecialToken")) {
      const std::string name = item["SpecialToken"].value("id", std::string());
      if (!special.contains(name) || !special[name].contains("ids") || !special[name]["ids"].is_array())
        return absl::InvalidArgumentError(at + ": special token '" + name + "' is not in " + path + ".special_tokens");
      for (const Json& id : special[name]["ids"]) {
        if (!id.is_number_unsigned() || id.get<uint64_t>() > (1u << 24))
          return absl::InvalidArgumentError(path + ".special_tokens." + name + ".ids: expected ids below 2^24");
        t.ids.push_back(id.get<uint32_t>());
      }
    } else {
      return absl::InvalidArgumentError(at + ": expected Sequence or SpecialToken");
    }
    single.push_back(std::move(t));
  }
  return absl::OkStatus();
}

// Added tokens (special and user-added): matched in the raw text before anything else runs, each
// becoming its one id; lstrip / rstrip / single_word as Hugging Face's AddedVocabulary applies
// them.
absl::Status ParseAddedTokens(const Json& j, Impl& impl) {
  if (j.is_null()) return absl::OkStatus();
  if (!j.is_array()) return absl::InvalidArgumentError("added_tokens: expected a list");
  std::vector<size_t> with_flag, without_flag;  // indexes of normalized: true / false tokens
  for (size_t i = 0; i < j.size(); ++i) {
    const Json& t = j[i];
    const std::string at = absl::StrCat("added_tokens[", i, "]");
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_unsigned() || !t.contains("content") || !t["content"].is_string())
      return absl::InvalidArgumentError(at + ": expected {id, content, ...}");
    AddedToken a;
    if (t["id"].get<uint64_t>() > (1u << 24))
      return absl::InvalidArgumentError(absl::StrCat(at, ".id: ", t["id"].get<uint64_t>(), " is too large"));
    a.id = t["id"].get<uint32_t>();
    a.content = t["content"].get<std::string>();
    a.lstrip = t.value("lstrip", false);
    a.rstrip = t.value("rstrip", false);
    a.single_word = t.value("single_word", false);
    a.special = t.value("special", false);
    if (a.content.empty()) return absl::InvalidArgumentError(at + ".content: empty");
    if (a.id > (1u << 24)) return absl::InvalidArgumentError(absl::StrCat(at, ".id: ", a.id, " is too large"));
    // Hugging Face matches normalized: false tokens on the raw text first, then normalized: true
    // ones on the normalized remainder. One pass over the raw text is the same only when every
    // token has the same flag and, for normalized ones, nothing normalizes the text.
    const bool normalized = t.value("normalized", !a.special);
    if (normalized && !impl.normalizers.empty())
      return Unsupported(at + ".normalized", "a normalized added token with a normalizer");
    (normalized ? with_flag : without_flag).push_back(impl.added.size());
    impl.added.push_back(std::move(a));
  }
  // Both kinds, with no normalizer (DeepSeek V3): the reference's two passes (normalized: false
  // tokens first, then normalized: true ones in what is left) equal one leftmost-longest pass
  // unless a token of one kind can overlap one of the other. Refuse only that.
  auto overlaps = [](const std::string& x, const std::string& y) {
    if (x.find(y) != std::string::npos || y.find(x) != std::string::npos) return true;
    for (size_t k = 1; k < x.size() && k < y.size(); ++k)
      if (x.compare(x.size() - k, k, y, 0, k) == 0 || y.compare(y.size() - k, k, x, 0, k) == 0) return true;
    return false;
  };
  for (size_t a : with_flag)
    for (size_t b : without_flag)
      if (overlaps(impl.added[a].content, impl.added[b].content))
        return Unsupported(absl::StrCat("added_tokens[", a, "].normalized"),
                           absl::StrCat("a normalized: true token that can overlap the normalized: false token '",
                                        impl.added[b].content, "'"));
  return absl::OkStatus();
}

// The one-byte-per-symbol alphabet of byte-level BPE (GPT-2's bytes_to_unicode): printable
// Latin-1 bytes stand for themselves, the others for U+0100 upwards in byte order.
struct ByteAlphabet {
  uint32_t to_cp[256];
  int from_cp[324];  // code point -> byte, -1 when not in the alphabet
  ByteAlphabet() {
    std::fill(std::begin(from_cp), std::end(from_cp), -1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
      from_cp[to_cp[b]] = b;
    }
  }
};

const ByteAlphabet& Alphabet() {
  static const ByteAlphabet a;
  return a;
}

// A vocabulary entry in the byte-level alphabet -> its raw bytes; nullopt for a character
// outside the alphabet.
std::optional<std::string> ByteLevelToBytes(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  while (!token.empty()) {
    int32_t cp;
    const size_t n = internal::DecodeUtf8(token, cp);
    if (n == 0 || cp < 0 || cp >= 324 || Alphabet().from_cp[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(Alphabet().from_cp[cp]));
    token.remove_prefix(n);
  }
  return out;
}

// The BPE model. A byte-level vocabulary spells its tokens in the ByteAlphabet; they are turned
// back into raw bytes here, so BPE runs on the text's own bytes with no per-request mapping.
// Merges come as "a b" strings or, in newer files, ["a", "b"] pairs; a merge's rank is its
// position in the list.
absl::Status ParseModel(const Json& j, Impl& impl) {
  if (!j.is_object()) return absl::InvalidArgumentError("model: expected an object");
  const std::string type = TypeOf(j);
  if (type != "BPE" && !(type.empty() && j.contains("merges")))
    return Unsupported("model.type", "model '" + type + "' (only BPE is implemented)");
  if (j.contains("dropout") && !j["dropout"].is_null()) return Unsupported("model.dropout", "BPE dropout");
  const bool chars = impl.bpe.char_level;
  if (j.contains("unk_token") && !j["unk_token"].is_null() && !chars)
    return Unsupported("model.unk_token", "an unknown token with a byte-level vocabulary");
  if (j.value("byte_fallback", false) && !chars)
    return Unsupported("model.byte_fallback", "byte_fallback with a ByteLevel pre-tokenizer");
  impl.bpe.byte_fallback = j.value("byte_fallback", false);
  impl.bpe.fuse_unk = j.value("fuse_unk", false);
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (j.contains(affix) && j[affix].is_string() && !j[affix].get<std::string>().empty())
      return Unsupported(std::string("model.") + affix, "a subword affix");
  impl.bpe.ignore_merges = j.value("ignore_merges", false);
  if (!j.contains("vocab") || !j["vocab"].is_object()) return absl::InvalidArgumentError("model.vocab: expected an object");
  for (auto it = j["vocab"].begin(); it != j["vocab"].end(); ++it) {
    if (!it.value().is_number_unsigned()) return absl::InvalidArgumentError("model.vocab." + it.key() + ": expected an id");
    auto bytes = chars ? std::optional<std::string>(it.key()) : ByteLevelToBytes(it.key());
    if (!bytes) {
      // An added token written in the vocabulary too (DeepSeek's special tokens): reachable only
      // as that added token, which is matched before the model runs, so the model needs no entry.
      const bool added = std::any_of(impl.added.begin(), impl.added.end(), [&](const AddedToken& a) {
        return a.content == it.key() && a.id == it.value().get<uint32_t>();
      });
      if (added) continue;
      return Unsupported("model.vocab." + it.key(), "a token outside the byte-level alphabet");
    }
    if (it.value().get<uint64_t>() > (1u << 24))
      return absl::InvalidArgumentError("model.vocab." + it.key() + ": id " + std::to_string(it.value().get<uint64_t>()) + " is too large");
    const uint32_t id = it.value().get<uint32_t>();
    if (id > (1u << 24)) return absl::InvalidArgumentError("model.vocab." + it.key() + ": id " + std::to_string(id) + " is too large");
    impl.bpe.AddToken(*bytes, id);
    // <0xAB>: byte_fallback's token for the byte 0xAB.
    const std::string& k = it.key();
    if (chars && k.size() == 6 && k.compare(0, 3, "<0x") == 0 && k[5] == '>' && std::isxdigit(static_cast<unsigned char>(k[3])) &&
        std::isxdigit(static_cast<unsigned char>(k[4])))
      impl.bpe.fallback_id[std::stoi(k.substr(3, 2), nullptr, 16)] = id;
  }
  if (chars) {
    if (j.contains("unk_token") && j["unk_token"].is_string()) {
      auto unk = impl.bpe.vocab.find(j["unk_token"].get<std::string>());
      if (unk == impl.bpe.vocab.end()) return absl::InvalidArgumentError("model.unk_token: not in the vocabulary");
      impl.bpe.unk_id = unk->second;
    }
    bool all_bytes = impl.bpe.byte_fallback;
    for (int b = 0; b < 256 && all_bytes; ++b) all_bytes = impl.bpe.fallback_id[b].has_value();
    if (!impl.bpe.unk_id && !all_bytes)
      return Unsupported("model", "a character-level BPE where a character can miss the vocabulary with no unk_token "
                                  "(and no <0x00>..<0xFF> byte_fallback tokens)");
  } else {
    for (int b = 0; b < 256; ++b)
      if (!impl.bpe.byte_id[b])
        return absl::InvalidArgumentError(absl::StrCat("model.vocab: no token for byte 0x", absl::Hex(b), " (not a byte-level vocabulary)"));
  }
  if (!j.contains("merges") || !j["merges"].is_array()) return absl::InvalidArgumentError("model.merges: expected a list");
  const Json& merges = j["merges"];
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& m = merges[i];
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos) return absl::InvalidArgumentError(absl::StrCat("model.merges[", i, "]: expected \"a b\""));
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      return absl::InvalidArgumentError(absl::StrCat("model.merges[", i, "]: expected \"a b\" or [\"a\", \"b\"]"));
    }
    auto ab = chars ? std::optional<std::string>(a) : ByteLevelToBytes(a);
    auto bb = chars ? std::optional<std::string>(b) : ByteLevelToBytes(b);
    if (!ab || !bb) return Unsupported(absl::StrCat("model.merges[", i, "]"), "a merge outside the byte-level alphabet");
    if (absl::Status s = impl.bpe.AddMerge(*ab, *bb, static_cast<uint32_t>(i)); !s.ok())
      return absl::InvalidArgumentError(absl::StrCat("model.merges[", i, "]: ", s.message()));
  }
  return absl::OkStatus();
}

bool IsAscii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

// Unicode White_Space (what lstrip / rstrip strip, as Rust's char::is_whitespace).
size_t WhitespaceBefore(std::string_view s, size_t end) {
  size_t i = end;
  while (i > 0) {
    const size_t start = internal::Utf8CharStart(s, i - 1);
    int32_t cp;
    internal::DecodeUtf8(s.substr(start, i - start), cp);
    if (!IsWhiteSpace(cp)) break;
    i = start;
  }
  return end - i;
}

size_t WhitespaceAfter(std::string_view s, size_t begin) {
  size_t i = begin;
  while (i < s.size()) {
    int32_t cp;
    const size_t n = internal::DecodeUtf8(s.substr(i), cp);
    if (n == 0 || !IsWhiteSpace(cp)) break;
    i += n;
  }
  return i - begin;
}

// Rust regex's Unicode \w, Hugging Face's single_word boundary test: letters (and letter
// numbers), marks, decimal digits, connector punctuation, ZWNJ and ZWJ.
bool IsWordChar(utf8proc_int32_t cp) {
  if (cp == 0x200C || cp == 0x200D) return true;
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

}  // namespace

namespace tokenizer_internal {

bool IsWhiteSpace(int32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

}  // namespace tokenizer_internal

// ---- Impl

void Impl::IndexAddedTokens() {
  for (bool& b : added_first) b = false;
  order.clear();
  single_first = added.empty() ? -1 : static_cast<unsigned char>(added[0].content[0]);
  for (size_t i = 0; i < added.size(); ++i) {
    added_first[static_cast<unsigned char>(added[i].content[0])] = true;
    order.push_back(i);
    if (static_cast<unsigned char>(added[i].content[0]) != single_first) single_first = -1;
  }
  // Longest first, so the first match at a position is the longest one.
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return added[a].content.size() > added[b].content.size(); });
  size_t max_id = bpe.max_id;
  for (const AddedToken& a : added) max_id = std::max<size_t>(max_id, a.id);
  id_to_bytes.assign(max_id + 1, std::nullopt);
  for (const auto& [bytes, id] : bpe.vocab) id_to_bytes[id] = bytes;
  for (const AddedToken& a : added) id_to_bytes[a.id] = a.content;
}

// The added token matching at `pos` (the longest), or nullptr. A longest match that single_word
// rejects is dropped whole, as Hugging Face's matcher drops it (its search resumes after it):
// `*skip` is then its length, else 0.
const AddedToken* Impl::AddedAt(std::string_view text, size_t pos, size_t* skip) const {
  *skip = 0;
  for (size_t i : order) {
    const AddedToken& a = added[i];
    if (text.size() - pos < a.content.size() || text.compare(pos, a.content.size(), a.content) != 0) continue;
    if (a.single_word) {
      auto word_before = [&] {
        if (pos == 0) return false;
        const size_t s = internal::Utf8CharStart(text, pos - 1);
        int32_t cp;
        internal::DecodeUtf8(text.substr(s, pos - s), cp);
        return IsWordChar(cp);
      };
      auto word_after = [&] {
        const size_t e = pos + a.content.size();
        if (e >= text.size()) return false;
        int32_t cp;
        internal::DecodeUtf8(text.substr(e), cp);
        return IsWordChar(cp);
      };
      if (word_before() || word_after()) {
        *skip = a.content.size();
        return nullptr;
      }
    }
    return &a;
  }
  return nullptr;
}

// One section of text between added tokens: normalized on its own (Hugging Face normalizes the
// text between added tokens, never across one), then pre-tokenized and encoded.
absl::Status Impl::EncodeSection(std::string_view text, std::vector<uint32_t>& out, const CheckpointSink* sink,
                                 bool first) const {
  if (text.empty()) return absl::OkStatus();
  // Normalizers.
  std::string normalized;
  std::string_view current = text;
  for (const NormalizerStep& step : normalizers) {
    if (step.kind == NormalizerStep::kPrepend) {
      if (!current.empty()) {
        std::string s = step.text;
        s += current;
        normalized = std::move(s);
        current = normalized;
      }
      continue;
    }
    if (step.kind == NormalizerStep::kReplace) {
      if (current.find(step.text) == std::string_view::npos) continue;
      std::string s;
      s.reserve(current.size());
      for (size_t from = 0;;) {
        const size_t at = current.find(step.text, from);
        s.append(current.substr(from, at == std::string_view::npos ? std::string_view::npos : at - from));
        if (at == std::string_view::npos) break;
        s += step.with;
        from = at + step.text.size();
      }
      normalized = std::move(s);
      current = normalized;
      continue;
    }
    if (IsAscii(current)) continue;  // every normal form of ASCII is itself
    int options = UTF8PROC_STABLE;
    switch (step.kind) {
      case NormalizerStep::kNfc: options |= UTF8PROC_COMPOSE; break;
      case NormalizerStep::kNfd: options |= UTF8PROC_DECOMPOSE; break;
      case NormalizerStep::kNfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
      case NormalizerStep::kNfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
      default: break;
    }
    utf8proc_uint8_t* result = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(current.data()),
                                            static_cast<utf8proc_ssize_t>(current.size()), &result,
                                            static_cast<utf8proc_option_t>(options));
    if (n < 0) {
      std::free(result);
      return absl::InvalidArgumentError(std::string("normalization failed: ") + utf8proc_errmsg(n));
    }
    const std::string_view mapped(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
    if (mapped != current) {  // text already in normal form (nearly all of it) stays where it is
      normalized.assign(mapped);
      current = normalized;
    }
    std::free(result);
  }
  return PreTokenize(0, current, out, sink, first);
}

// Runs the pre-tokenizer steps depth first: each step cuts the piece and hands every sub-piece
// to the next step, and a piece that has passed all steps goes to BPE. Depth first keeps the
// ids in text order without collecting the pieces of each step. A piece that ends inside the
// original text records a checkpoint: encoding can restart there (prefix_tokenizer.cc).
absl::Status Impl::PreTokenize(size_t step_index, std::string_view piece, std::vector<uint32_t>& out,
                               const CheckpointSink* sink, bool first) const {
  if (step_index == pre_tokenizers.size()) {
    if (!piece.empty()) bpe.EncodeCached(piece, out);
    if (sink && piece.data() >= sink->origin.data() && piece.data() + piece.size() <= sink->origin.data() + sink->origin.size())
      sink->out->push_back({static_cast<uint32_t>(piece.data() + piece.size() - sink->origin.data()), static_cast<uint32_t>(out.size())});
    return absl::OkStatus();
  }
  const PreTokenizerStep& step = pre_tokenizers[step_index];
  if (step.kind == PreTokenizerStep::kMetaspace) {
    // Spaces become the replacement, which is prepended (unless the piece starts with it) and,
    // with split, begins each piece (the replacement merged with what follows it).
    std::string m;
    const bool prepend = step.prepend == PreTokenizerStep::kAlways || (step.prepend == PreTokenizerStep::kFirst && first);
    if (prepend && piece.substr(0, step.replacement.size()) != step.replacement && !piece.empty()) m = step.replacement;
    for (char c : piece) {
      if (c == ' ') m += step.replacement;
      else m += c;
    }
    const std::string_view all = m;
    if (!step.metaspace_split) return PreTokenize(step_index + 1, all, out, sink);
    size_t start = 0;
    for (size_t at = all.find(step.replacement, 1); start < all.size(); at = all.find(step.replacement, at + 1)) {
      if (at == std::string_view::npos) at = all.size();
      if (at > start) EPP_RETURN_IF_ERROR(PreTokenize(step_index + 1, all.substr(start, at - start), out, sink));
      start = at;
      if (at == all.size()) break;
    }
    return absl::OkStatus();
  }
  // Split, and ByteLevel with its regex: the regex cuts the piece (Removed drops the matches).
  std::string spaced;  // ByteLevel's add_prefix_space rewrites the piece
  if (step.kind == PreTokenizerStep::kByteLevel && step.add_prefix_space && !piece.empty() && piece.front() != ' ') {
    spaced = " " + std::string(piece);
    piece = spaced;
  }
  if (!step.regex) return PreTokenize(step_index + 1, piece, out, sink, first);
  absl::Status status;
  EPP_RETURN_IF_ERROR(step.regex->Split(piece, step.kind == PreTokenizerStep::kSplit && step.split_behavior == PreTokenizerStep::kRemoved,
                                        [&](std::string_view sub) {
                                          if (status.ok()) status = PreTokenize(step_index + 1, sub, out, sink);
                                        }));
  return status;
}

// The decoder of a SentencePiece-style vocabulary: Sequence of Replace (a string), ByteFallback,
// Fuse and Strip (leading spaces), or Metaspace. Anything else leaves Decode unimplemented (the
// ids, which are what routing needs, do not depend on it).
absl::Status ParseDecoder(const Json& j, const std::string& path, Impl& impl) {
  if (j.is_null()) return absl::OkStatus();
  if (!j.is_object()) return absl::InvalidArgumentError(path + ": expected an object");
  const std::string type = TypeOf(j);
  if (type == "Sequence") {
    if (!j.contains("decoders") || !j["decoders"].is_array()) return absl::InvalidArgumentError(path + ".decoders: expected a list");
    for (size_t i = 0; i < j["decoders"].size(); ++i)
      EPP_RETURN_IF_ERROR(ParseDecoder(j["decoders"][i], absl::StrCat(path, ".decoders[", i, "]"), impl));
    return absl::OkStatus();
  }
  if (type == "ByteFallback" || type == "Fuse") return absl::OkStatus();  // Decode joins bytes already
  if (type == "Replace" && j.contains("pattern") && j["pattern"].is_object() && j["pattern"].contains("String") &&
      j["pattern"]["String"].is_string() && j.contains("content") && j["content"].is_string()) {
    impl.decode_replace.emplace_back(j["pattern"]["String"].get<std::string>(), j["content"].get<std::string>());
    return absl::OkStatus();
  }
  if (type == "Strip" && j.value("content", std::string(" ")) == " " && j.value("stop", 0) == 0) {
    impl.decode_strip = j.value("start", static_cast<size_t>(0));
    return absl::OkStatus();
  }
  if (type == "Metaspace") {
    impl.decode_replace.emplace_back(j.value("replacement", std::string("\xE2\x96\x81")), " ");
    const std::string scheme = j.contains("prepend_scheme") && j["prepend_scheme"].is_string()
                                   ? j["prepend_scheme"].get<std::string>()
                                   : (j.value("add_prefix_space", true) ? "always" : "never");
    impl.decode_strip = scheme == "never" ? 0 : 1;
    return absl::OkStatus();
  }
  if (impl.decoder_unsupported.empty()) impl.decoder_unsupported = absl::StrCat(path, ": decoder '", type, "' is not implemented");
  return absl::OkStatus();
}

// ---- Tokenizer

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

// Reads the stages in the order their checks need: added tokens before the model (a vocabulary
// entry outside the byte alphabet is allowed when it is an added token), the pre-tokenizers
// before the model (they decide whether the vocabulary is byte- or character-level). Then works
// out whether encoding may restart at piece ends, which prefix reuse depends on.
absl::StatusOr<std::shared_ptr<const Tokenizer>> Tokenizer::FromJson(std::string_view json, std::string_view source) {
  auto impl = std::make_unique<Impl>();
  impl->source = std::string(source);
  const std::string src(source);
  auto located = [&](const absl::Status& s) { return absl::Status(s.code(), absl::StrCat(src, ": ", s.message())); };
  Json j = Json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(src + ": not valid JSON");
  if (!j.is_object()) return absl::InvalidArgumentError(src + ": expected a JSON object");
  for (const char* key : {"truncation", "padding"})
    if (j.contains(key) && !j[key].is_null()) return located(Unsupported(key, std::string(key) + " settings"));
  if (absl::Status s = ParseNormalizer(j.value("normalizer", Json()), "normalizer", impl->normalizers); !s.ok()) return located(s);
  if (absl::Status s = ParsePreTokenizer(j.value("pre_tokenizer", Json()), "pre_tokenizer", impl->pre_tokenizers); !s.ok())
    return located(s);
  const bool byte_level = std::any_of(impl->pre_tokenizers.begin(), impl->pre_tokenizers.end(),
                                      [](const PreTokenizerStep& s) { return s.kind == PreTokenizerStep::kByteLevel; });
  // Without a ByteLevel step the vocabulary is of characters (SentencePiece-style BPE: Llama 2,
  // Mistral, Gemma), usually with byte_fallback. Prefix reuse is off for those.
  impl->bpe.char_level = !byte_level;
  if (!j.contains("model")) return located(absl::InvalidArgumentError("model: missing"));
  if (absl::Status s = ParseAddedTokens(j.value("added_tokens", Json()), *impl); !s.ok()) return located(s);
  if (absl::Status s = ParseModel(j["model"], *impl); !s.ok()) return located(s);
  bool has_template = false;
  if (absl::Status s = ParsePostProcessor(j.value("post_processor", Json()), "post_processor", *impl, impl->single, has_template); !s.ok())
    return located(s);
  if (!has_template) impl->single = {TemplateItem{true, {}}};
  impl->IndexAddedTokens();
  for (const PreTokenizerStep& st : impl->pre_tokenizers) {
    impl->prefix_space |= st.add_prefix_space;
    // A piece end is a place to restart encoding only for patterns without look-behind or
    // anchors: the ones with a hand-written scanner (analysed), not arbitrary regexes.
    if (st.regex && st.regex->known() == tokenizer_internal::KnownPattern::kNone) impl->restartable = false;
    if (st.kind == PreTokenizerStep::kSplit && st.split_behavior == PreTokenizerStep::kRemoved) impl->restartable = false;
  }
  for (const AddedToken& a : impl->added) impl->max_added_bytes = std::max(impl->max_added_bytes, a.content.size());
  // Prepend, Replace and Metaspace rewrite every piece: no restart points in the original text.
  if (impl->bpe.char_level) impl->restartable = false;
  for (const NormalizerStep& n : impl->normalizers)
    if (n.kind == NormalizerStep::kPrepend || n.kind == NormalizerStep::kReplace) impl->restartable = false;
  for (const PreTokenizerStep& st : impl->pre_tokenizers)
    if (st.kind == PreTokenizerStep::kMetaspace) impl->restartable = false;
  if (impl->bpe.char_level) {
    for (int b = 0; b < 256; ++b)
      if (impl->bpe.fallback_id[b] && *impl->bpe.fallback_id[b] < impl->id_to_bytes.size())
        impl->id_to_bytes[*impl->bpe.fallback_id[b]] = std::string(1, static_cast<char>(b));
    if (absl::Status s = ParseDecoder(j.value("decoder", Json()), "decoder", *impl); !s.ok()) return located(s);
  }
  return std::shared_ptr<const Tokenizer>(new Tokenizer(std::move(impl)));
}

absl::StatusOr<std::shared_ptr<const Tokenizer>> Tokenizer::FromPath(const std::string& path) {
  std::error_code ec;
  std::filesystem::path file = path;
  if (std::filesystem::is_directory(file, ec)) file /= "tokenizer.json";
  std::ifstream in(file, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot read tokenizer file '" + file.string() + "': " + internal::OsReason());
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::NotFoundError("cannot read tokenizer file '" + file.string() + "': " + internal::OsReason());
  return FromJson(text.str(), file.string());
}

absl::Status Tokenizer::EncodeInto(std::string_view text, bool add_special_tokens, std::vector<uint32_t>& out) const {
  if (size_t bad = internal::FirstInvalidUtf8(text); bad != std::string_view::npos)
    return absl::InvalidArgumentError(absl::StrCat("text is not valid UTF-8 at byte ", bad));
  if (!add_special_tokens) return impl_->EncodeBody(text, out);
  std::vector<uint32_t> body;
  EPP_RETURN_IF_ERROR(impl_->EncodeBody(text, body));
  impl_->ApplyTemplate(body, out);
  return absl::OkStatus();
}

void Impl::ApplyTemplate(const std::vector<uint32_t>& body, std::vector<uint32_t>& out) const {
  for (const TemplateItem& t : single) {
    if (t.sequence) out.insert(out.end(), body.begin(), body.end());
    else out.insert(out.end(), t.ids.begin(), t.ids.end());
  }
}

// The added-token split of Hugging Face's AddedVocabulary: scan for the leftmost (then longest)
// added token, encode the section before it with the normal pipeline, emit the token's id, go on
// after it. Bytes that start no added token are skipped without trying any (added_first), which
// keeps the scan cheap on long prompts.
absl::Status Impl::EncodeBody(std::string_view text, std::vector<uint32_t>& target, const CheckpointSink* sink) const {
  const Impl& m = *this;
  // Split on added tokens: leftmost, longest; lstrip / rstrip take the whitespace around.
  size_t section = 0, pos = 0;
  while (pos < text.size()) {
    if (!m.added_first[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      if (m.single_first >= 0) {  // every added token starts with the same byte: jump to it
        const void* next = std::memchr(text.data() + pos, m.single_first, text.size() - pos);
        pos = next ? static_cast<size_t>(static_cast<const char*>(next) - text.data()) : text.size();
      }
      continue;
    }
    size_t skip = 0;
    const AddedToken* a = m.AddedAt(text, pos, &skip);
    if (a == nullptr) {
      pos += skip > 0 ? skip : 1;
      continue;
    }
    size_t begin = pos, end = pos + a->content.size();
    if (a->lstrip) begin -= WhitespaceBefore(text.substr(section), begin - section);
    if (a->rstrip) end += WhitespaceAfter(text, end);
    EPP_RETURN_IF_ERROR(m.EncodeSection(text.substr(section, begin - section), target, sink, section == 0));
    target.push_back(a->id);
    if (sink) sink->out->push_back({static_cast<uint32_t>(end), static_cast<uint32_t>(target.size())});
    section = pos = end;
  }
  return m.EncodeSection(text.substr(section), target, sink, section == 0);
}

absl::StatusOr<std::vector<uint32_t>> Tokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  std::vector<uint32_t> out;
  EPP_RETURN_IF_ERROR(EncodeInto(text, add_special_tokens, out));
  return out;
}

// Ids back to text: each id's raw bytes joined; a character-level vocabulary then undoes its
// decoder's rewrites (U+2581 back to spaces, the prepended space stripped).
absl::StatusOr<std::string> Tokenizer::Decode(std::span<const uint32_t> ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= impl_->id_to_bytes.size() || !impl_->id_to_bytes[ids[i]])
      return absl::InvalidArgumentError(absl::StrCat("ids[", i, "]: unknown id ", ids[i]));
    out += *impl_->id_to_bytes[ids[i]];
  }
  if (!impl_->bpe.char_level) return out;
  if (!impl_->decoder_unsupported.empty())
    return absl::UnimplementedError(absl::StrCat(impl_->source, ": cannot decode: ", impl_->decoder_unsupported));
  for (const auto& [from, to] : impl_->decode_replace) {
    std::string r;
    for (size_t at = 0;;) {
      const size_t hit = out.find(from, at);
      r.append(out, at, hit == std::string::npos ? std::string::npos : hit - at);
      if (hit == std::string::npos) break;
      r += to;
      at = hit + from.size();
    }
    out = std::move(r);
  }
  for (size_t k = 0; k < impl_->decode_strip && !out.empty() && out[0] == ' '; ++k) out.erase(0, 1);
  return out;
}

std::optional<uint32_t> Tokenizer::TokenId(std::string_view token) const {
  for (const AddedToken& a : impl_->added)
    if (a.content == token) return a.id;
  auto bytes = impl_->bpe.char_level ? std::optional<std::string>(token) : ByteLevelToBytes(token);
  if (!bytes) return std::nullopt;
  auto it = impl_->bpe.vocab.find(absl::string_view(*bytes));
  if (it == impl_->bpe.vocab.end()) return std::nullopt;
  return it->second;
}

size_t Tokenizer::vocab_size() const { return impl_->id_to_bytes.size(); }
const std::string& Tokenizer::source() const { return impl_->source; }

}  // namespace epp
