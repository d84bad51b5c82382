// SplitRegex (tokenizer_impl.h): tokenizer.json Split patterns on PCRE2.
//
// The patterns are written for Oniguruma (the Rust tokenizers crate). Under UTF + UCP, PCRE2
// agrees on the constructs real tokenizers use (\p{L}, \p{N}, classes, (?i:...), lookahead)
// except `\s`: PCRE2 10.42 matches Z categories plus \t\n\v\f\r, Oniguruma the White_Space
// property (which adds U+0085). Translate() rewrites `\s` and `\S` as explicit sets.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <utf8proc.h>

#include "absl/strings/str_cat.h"
#include "common/utf8.h"
#include "tokenizer/tokenizer_impl.h"

namespace epp::tokenizer_internal {
namespace {

// Oniguruma's `\s` (Unicode White_Space), spelled out for PCRE2; the same set as IsWhiteSpace.
const std::string kSpaceSet =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

pcre2_code* Code(void* p) { return static_cast<pcre2_code*>(p); }

// Per-thread match state: PCRE2's JIT stack and match data are not shareable.
struct ThreadMatch {
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_match_data* data = nullptr;
  ThreadMatch() {
    stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    if (stack && context) pcre2_jit_stack_assign(context, nullptr, stack);
    data = pcre2_match_data_create(8, nullptr);
  }
  ~ThreadMatch() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

ThreadMatch& Thread() {
  thread_local ThreadMatch m;
  return m;
}

}  // namespace

SplitRegex::~SplitRegex() { pcre2_code_free(Code(code_)); }

// A one-pass rewrite that tracks only whether it is inside a character class, which is all
// `\s` / `\S` need: inside a class the set is spliced in bare, outside it in brackets. `\S` in a
// class would need set subtraction, and POSIX brackets read differently in the two engines, so
// both are refused rather than approximated.
absl::StatusOr<std::string> SplitRegex::Translate(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      if (e == 's') {
        out += in_class ? kSpaceSet : "[" + kSpaceSet + "]";
      } else if (e == 'S') {
        if (in_class) return absl::InvalidArgumentError(absl::StrCat("\\S inside a character class (offset ", i, ")"));
        out += "[^" + kSpaceSet + "]";
      } else {
        out += c;
        out += e;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':')
      return absl::InvalidArgumentError(absl::StrCat("POSIX bracket expressions are not supported (offset ", i, ")"));
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

// Compiled once per tokenizer load; the pattern is also matched against the hand-written
// scanners (known_split.cc), which Split prefers for speed.
absl::StatusOr<std::shared_ptr<const SplitRegex>> SplitRegex::Compile(std::string_view pattern, const std::string& path) {
  auto translated = Translate(pattern);
  if (!translated.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", translated.status().message()));
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated->data()), translated->size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    return absl::InvalidArgumentError(absl::StrCat(path, ": the regex does not compile (", reinterpret_cast<const char*>(message),
                                                   " at offset ", offset, " of the translated pattern)"));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // without JIT support the interpreter runs
  std::shared_ptr<SplitRegex> re(new SplitRegex());
  re->code_ = code;
  re->known_ = RecognizePattern(pattern);
  return std::shared_ptr<const SplitRegex>(std::move(re));
}

absl::Status SplitRegex::Split(std::string_view text, bool removed, PieceSink out) const {
  if (known_ != KnownPattern::kNone && !removed) {
    SplitKnown(known_, text, out);
    return absl::OkStatus();
  }
  return SplitPcre2(text, removed, out);
}

// The Split pre-tokenizer with behavior Isolated (matches and the gaps between them are both
// pieces) or Removed (only the gaps), as Hugging Face's Split cuts a piece. The text was checked
// to be UTF-8 before encoding, so PCRE2's own check is skipped.
absl::Status SplitRegex::SplitPcre2(std::string_view text, bool removed, PieceSink out) const {
  ThreadMatch& t = Thread();
  if (t.data == nullptr || t.context == nullptr) return absl::ResourceExhaustedError("pcre2: out of memory");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0, gap = 0;
  while (pos <= text.size()) {
    const int rc = pcre2_match(Code(code_), subject, text.size(), pos, PCRE2_NO_UTF_CHECK, t.data, t.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof message);
      return absl::ResourceExhaustedError(absl::StrCat("pre-tokenizer regex: ", reinterpret_cast<const char*>(message)));
    }
    const PCRE2_SIZE* v = pcre2_get_ovector_pointer(t.data);
    const size_t begin = v[0], end = v[1];
    if (end == begin) {  // an empty match splits nothing: step one character on
      if (begin >= text.size()) break;
      pos = begin + 1;
      while (pos < text.size() && internal::IsUtf8Continuation(text[pos])) ++pos;
      continue;
    }
    if (begin > gap) out(text.substr(gap, begin - gap));
    if (!removed) out(text.substr(begin, end - begin));
    gap = pos = end;
  }
  if (gap < text.size()) out(text.substr(gap));
  return absl::OkStatus();
}

// Whether PCRE2 and utf8proc put every character of `text` in the same letter / number classes:
// the scanners classify with utf8proc, the regexes with PCRE2, and the two ship different
// Unicode versions (see tokenizer_impl.h).
bool SplitRegex::SameCharacterClasses(std::string_view text) {
  static const std::shared_ptr<const SplitRegex> letter = *Compile("\\G\\p{L}", "letter");
  static const std::shared_ptr<const SplitRegex> number = *Compile("\\G\\p{N}", "number");
  ThreadMatch& t = Thread();
  size_t i = 0;
  while (i < text.size()) {
    int32_t cp;
    const size_t n = internal::DecodeUtf8(text.substr(i), cp);
    if (n == 0) return false;
    if (cp >= 0x80) {
      const utf8proc_category_t c = utf8proc_category(cp);
      const bool is_letter = c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
      const bool is_number = c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO;
      for (const auto& [re, want] : {std::pair{letter.get(), is_letter}, std::pair{number.get(), is_number}}) {
        const int rc = pcre2_match(Code(re->code_), reinterpret_cast<PCRE2_SPTR>(text.data()), i + n, i,
                                   PCRE2_NO_UTF_CHECK, t.data, t.context);
        if ((rc >= 0) != want) return false;
      }
    }
    i += n;
  }
  return true;
}

}  // namespace epp::tokenizer_internal
