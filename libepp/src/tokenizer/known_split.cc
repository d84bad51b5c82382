// Hand-written scanners for the split patterns of the common byte-level BPE tokenizers (Llama 3,
// Qwen 2/3 and GPT-2's ByteLevel pattern): the same pieces PCRE2 gives for those exact patterns
// (tests/cpp/tokenizer compares them on random text), at several times the speed. Any other
// pattern runs on PCRE2.
//
// Each pattern is an ordered alternation; at every position the first alternative that matches
// wins, with the regex's greedy-then-backtrack lengths worked out by hand:
//   Llama 3  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//            ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   Qwen 2/3 the same with \p{N} (one digit per piece)
//   GPT-2    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
#include <utf8proc.h>

#include "common/utf8.h"
#include "tokenizer/tokenizer_impl.h"

namespace epp::tokenizer_internal {
namespace {

constexpr std::string_view kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum Class : uint8_t { kLetter = 1, kNumber = 2, kSpace = 4, kCrLf = 8 };

// Classes of the ASCII bytes.
struct AsciiTable {
  uint8_t c[128] = {};
  AsciiTable() {
    for (int b = 'a'; b <= 'z'; ++b) c[b] = kLetter;
    for (int b = 'A'; b <= 'Z'; ++b) c[b] = kLetter;
    for (int b = '0'; b <= '9'; ++b) c[b] = kNumber;
    for (int b : {'\t', '\n', '\v', '\f', '\r', ' '}) c[b] = kSpace;
    c[static_cast<int>('\r')] |= kCrLf;
    c[static_cast<int>('\n')] |= kCrLf;
  }
};
const AsciiTable kAscii;

struct Char {
  uint8_t cls = 0;
  uint8_t len = 0;  // 0 at the end of the text
  int32_t cp = -1;
};

inline Char At(std::string_view s, size_t i) {
  Char c;
  if (i >= s.size()) return c;
  const unsigned char b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    c.cls = kAscii.c[b];
    c.len = 1;
    c.cp = b;
    return c;
  }
  int32_t cp;
  const size_t n = internal::DecodeUtf8(s.substr(i), cp);
  c.len = static_cast<uint8_t>(n > 0 ? n : 1);  // the text is validated before; a stray byte counts as one
  c.cp = cp;
  if (IsWhiteSpace(cp)) {
    c.cls = kSpace;
    return c;
  }
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      c.cls = kLetter;
      break;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      c.cls = kNumber;
      break;
    default:
      break;
  }
  return c;
}

// Past a run of characters whose class has any of `mask` bits, from i.
inline size_t RunOf(std::string_view s, size_t i, uint8_t mask) {
  for (;;) {
    const Char c = At(s, i);
    if (c.len == 0 || !(c.cls & mask)) return i;
    i += c.len;
  }
}

// Past a run of "other" characters (not space, letter or number), from i.
inline size_t RunOfOther(std::string_view s, size_t i) {
  for (;;) {
    const Char c = At(s, i);
    if (c.len == 0 || (c.cls & (kSpace | kLetter | kNumber))) return i;
    i += c.len;
  }
}

// 's 't 're 've 'm 'll 'd at i (s[i] == '\''): the length matched, 0 when none.
inline size_t Contraction(std::string_view s, size_t i, bool caseless) {
  auto is = [&](size_t k, char lower) {
    if (k >= s.size()) return false;
    const char c = s[k];
    if (c == lower) return true;
    if (!caseless) return false;
    if (c == lower - 32) return true;
    // Unicode case folding maps U+017F (long s) to 's' and U+212A (Kelvin) to 'k'.
    if (lower == 's' && k + 1 < s.size() && static_cast<unsigned char>(c) == 0xC5 && static_cast<unsigned char>(s[k + 1]) == 0xBF)
      return true;
    return false;
  };
  auto len_of = [&](size_t k) -> size_t {
    // The byte length of the character at k when it is a folded long s.
    return static_cast<unsigned char>(s[k]) == 0xC5 ? 2 : 1;
  };
  if (is(i + 1, 's')) return 1 + len_of(i + 1);
  if (is(i + 1, 't')) return 2;
  if (is(i + 1, 'r') && is(i + 2, 'e')) return 3;
  if (is(i + 1, 'v') && is(i + 2, 'e')) return 3;
  if (is(i + 1, 'm')) return 2;
  if (is(i + 1, 'l') && is(i + 2, 'l')) return 3;
  if (is(i + 1, 'd')) return 2;
  return 0;
}

// The whitespace alternatives shared by every pattern: \s*[\r\n]+ (Llama/Qwen only),
// \s+(?!\S), \s+. `i` is at a whitespace character. Returns the end of the match.
inline size_t Whitespace(std::string_view s, size_t i, bool crlf_alternative) {
  // The maximal run, and the last CR/LF in it.
  size_t end = i, last_crlf_end = 0;
  size_t last_start = i;
  for (;;) {
    const Char c = At(s, end);
    if (c.len == 0 || !(c.cls & kSpace)) break;
    last_start = end;
    end += c.len;
    if (c.cls & kCrLf) last_crlf_end = end;
  }
  if (crlf_alternative && last_crlf_end != 0) return last_crlf_end;
  // \s+(?!\S): all of it at the end of the text; else all but its last character, when that
  // leaves at least one.
  if (end >= s.size()) return end;
  if (last_start > i) return last_start;
  return end;  // \s+
}

void SplitLlamaLike(std::string_view s, bool three_digits, PieceSink out) {
  size_t i = 0;
  while (i < s.size()) {
    const Char c = At(s, i);
    size_t end = 0;
    if (s[i] == '\'') end = i + Contraction(s, i, /*caseless=*/true);
    if (end <= i) {
      if (c.cls & kLetter) {
        end = RunOf(s, i + c.len, kLetter);
      } else if (!(c.cls & (kNumber | kCrLf)) && (At(s, i + c.len).cls & kLetter)) {
        end = RunOf(s, i + c.len, kLetter);  // one leading non-letter (a space, a quote) and letters
      } else if (c.cls & kNumber) {
        end = i + c.len;
        if (three_digits)
          for (int k = 1; k < 3; ++k) {
            const Char d = At(s, end);
            if (!(d.cls & kNumber)) break;
            end += d.len;
          }
      } else if (!(c.cls & kSpace)) {
        end = RunOf(s, RunOfOther(s, i), kCrLf);  // punctuation and symbols, then line breaks
      } else if (s[i] == ' ' && !(At(s, i + 1).cls & (kSpace | kLetter | kNumber)) && At(s, i + 1).len != 0) {
        end = RunOf(s, RunOfOther(s, i + 1), kCrLf);  // " ?" with the punctuation after it
      } else {
        end = Whitespace(s, i, /*crlf_alternative=*/true);
      }
    }
    out(s.substr(i, end - i));
    i = end;
  }
}

void SplitGpt2(std::string_view s, PieceSink out) {
  size_t i = 0;
  while (i < s.size()) {
    const Char c = At(s, i);
    size_t end = 0;
    if (s[i] == '\'') end = i + Contraction(s, i, /*caseless=*/false);
    if (end <= i) {
      size_t j = i;
      Char d = c;
      if (s[i] == ' ') {  // " ?" before a letter, number or other run
        const Char n = At(s, i + 1);
        if (n.len != 0 && !(n.cls & kSpace)) {
          j = i + 1;
          d = n;
        }
      }
      if (d.cls & kLetter) end = RunOf(s, j, kLetter);
      else if (d.cls & kNumber) end = RunOf(s, j, kNumber);
      else if (!(d.cls & kSpace)) end = RunOfOther(s, j);
      else end = Whitespace(s, i, /*crlf_alternative=*/false);
    }
    out(s.substr(i, end - i));
    i = end;
  }
}

}  // namespace

KnownPattern RecognizePattern(std::string_view pattern) {
  if (pattern == kLlama3) return KnownPattern::kLlama3;
  if (pattern == kQwen2) return KnownPattern::kQwen2;
  if (pattern == kGpt2) return KnownPattern::kGpt2;
  return KnownPattern::kNone;
}

void SplitKnown(KnownPattern pattern, std::string_view text, PieceSink out) {
  switch (pattern) {
    case KnownPattern::kLlama3: SplitLlamaLike(text, true, out); return;
    case KnownPattern::kQwen2: SplitLlamaLike(text, false, out); return;
    case KnownPattern::kGpt2: SplitGpt2(text, out); return;
    case KnownPattern::kNone: return;
  }
}

}  // namespace epp::tokenizer_internal
