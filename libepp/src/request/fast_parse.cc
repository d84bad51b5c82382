// The request parser's fast path (fast_parse.h): a strict one-pass JSON scanner that renders the
// canonical prompt of the common request shapes of every API while it validates the document.
//
// Why: for a 220 KiB chat body the DOM path runs simdjson's structural pass over every byte,
// builds a tape that copies every string once (unescaped), and then the prompt copies those
// strings again. Here each string of the prompt is read once: every 16-byte block is stored
// straight into the prompt and then searched for a quote, backslash or control byte, so a run of
// plain text costs neither a copy call nor a branch that depends on its length, and an escape is
// decoded through a table. UTF-8 is checked string by string (simdjson's validator, only for
// strings with a byte above 0x7F) while the string is still in the cache; outside strings the
// scanner accepts only ASCII. Anything outside the shapes below goes to the DOM path, which stays
// the reference: the fast path must produce exactly its result (tests/cpp/request/
// fast_parse_test.cc and the openai_request fuzz target compare them).
//
// Measured (docs/benchmarks.md): with 16 different 220 KiB bodies in turn, most of the time goes
// to mispredicted branches (where runs end, which escape comes, simdjson's per-block ASCII test),
// not to memory: the same body 16 times parses in half the time.
#include "request/fast_parse.h"

#include <simdjson.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "common/utf8.h"
#include "epp/prefix_cache.h"

namespace epp::internal {
namespace {

// Declines (not errors): the DOM path decides what these inputs mean.
constexpr int kMaxDepth = 64;
constexpr int kMaxNumberDigits = 18;

// The first byte in [p, end) that ends a run of plain string bytes: '"', '\\' or a control
// character (below 0x20), or `end`. Sets `high` when a byte at or above 0x80 may be in the run
// (the whole 16-byte block is tested, so bytes past the run can set it too).
inline const char* FindStringSpecial(const char* p, const char* end, bool& high) {
#if defined(__SSE2__)
  const __m128i quote = _mm_set1_epi8('"');
  const __m128i backslash = _mm_set1_epi8('\\');
  const __m128i control_max = _mm_set1_epi8(0x1F);
  __m128i seen = _mm_setzero_si128();
  while (end - p >= 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    seen = _mm_or_si128(seen, v);
    // Unsigned v <= 0x1F exactly when min(v, 0x1F) == v.
    const __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                                     _mm_cmpeq_epi8(_mm_min_epu8(v, control_max), v));
    const int mask = _mm_movemask_epi8(hit);
    if (mask != 0) {
      high |= _mm_movemask_epi8(seen) != 0;
      return p + __builtin_ctz(static_cast<unsigned>(mask));
    }
    p += 16;
  }
  high |= _mm_movemask_epi8(seen) != 0;
#endif
  for (; p < end; ++p) {
    const auto c = static_cast<unsigned char>(*p);
    if (c == '"' || c == '\\' || c < 0x20) return p;
    high |= c >= 0x80;
  }
  return end;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

bool Hex4(const char* p, uint32_t& v) {
  v = 0;
  for (int k = 0; k < 4; ++k) {
    const char c = p[k];
    uint32_t h;
    if (c >= '0' && c <= '9') h = static_cast<uint32_t>(c - '0');
    else if (c >= 'a' && c <= 'f') h = static_cast<uint32_t>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') h = static_cast<uint32_t>(c - 'A' + 10);
    else return false;
    v = v * 16 + h;
  }
  return true;
}

// The byte a one-character escape stands for, indexed by the character after the backslash; 0
// for 'u' and for invalid escapes. A table, not a switch: which escape comes next is as random
// as the text, and a mispredicted branch per escape was a large part of the parse.
constexpr std::array<char, 256> kSimpleEscapes = [] {
  std::array<char, 256> t{};
  t['"'] = '"';
  t['\\'] = '\\';
  t['/'] = '/';
  t['b'] = '\b';
  t['f'] = '\f';
  t['n'] = '\n';
  t['r'] = '\r';
  t['t'] = '\t';
  return t;
}();

// The escape at `q` (q[0] is the backslash), decoded into dst (room for 4 bytes). Returns the
// number of bytes written, with `next` past the escape, or -1 for an escape this scanner does
// not accept (invalid, or an unpaired surrogate).
inline int DecodeEscape(const char* q, const char* end, char* dst, const char*& next) {
  if (end - q < 2) return -1;
  const char simple = kSimpleEscapes[static_cast<unsigned char>(q[1])];
  if (simple != 0) {
    *dst = simple;
    next = q + 2;
    return 1;
  }
  if (q[1] != 'u') return -1;
  const char* r = q + 2;
  uint32_t cp = 0;
  if (end - r < 4 || !Hex4(r, cp)) return -1;
  r += 4;
  if (cp >= 0xD800 && cp <= 0xDBFF) {
    uint32_t low = 0;
    if (end - r < 6 || r[0] != '\\' || r[1] != 'u' || !Hex4(r + 2, low) || low < 0xDC00 || low > 0xDFFF) return -1;
    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    r += 6;
  } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
    return -1;
  }
  next = r;
  return static_cast<int>(EncodeUtf8(cp, dst));  // cp <= U+10FFFF and not a surrogate here
}

// The prompt being rendered: a std::string used as a raw buffer (its size is the room, `len_` the
// text), so strings are decoded with 16-byte stores straight into it and no append checks a
// capacity per run. Finish() cuts it to the text.
class Out {
 public:
  Out(std::string& s, size_t initial) : s_(s) { s_.resize(std::max<size_t>(initial, 64)); }

  size_t size() const { return len_; }
  // Room for `n` more bytes at the end; returns where they go.
  char* Reserve(size_t n) {
    if (s_.size() - len_ < n) s_.resize(std::max(2 * s_.size(), len_ + n));
    return s_.data() + len_;
  }
  void Commit(const char* end) { len_ = static_cast<size_t>(end - s_.data()); }
  void Append(std::string_view v) {
    std::memcpy(Reserve(v.size()), v.data(), v.size());
    len_ += v.size();
  }
  void Append(char c) {
    *Reserve(1) = c;
    ++len_;
  }
  void Insert(size_t at, std::string_view v) {
    char* base = Reserve(v.size()) - len_;
    std::memmove(base + at + v.size(), base + at, len_ - at);
    std::memcpy(base + at, v.data(), v.size());
    len_ += v.size();
  }
  void Truncate(size_t len) { len_ = len; }
  void Finish() { s_.resize(len_); }

 private:
  std::string& s_;
  size_t len_ = 0;
};

// A cursor over JSON text. Every method returns false when the text is not in the accepted
// subset of JSON (which includes all of it that is invalid); the parse then declines.
class Scanner {
 public:
  explicit Scanner(std::string_view text) : p_(text.data()), end_(text.data() + text.size()) {}

  const char* pos() const { return p_; }

  void SkipSpace() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  bool AtEnd() {
    SkipSpace();
    return p_ == end_;
  }
  // The next non-space byte ('\0' at the end), not consumed.
  char Peek() {
    SkipSpace();
    return p_ < end_ ? *p_ : '\0';
  }
  bool Consume(char c) {
    SkipSpace();
    if (p_ < end_ && *p_ == c) {
      ++p_;
      return true;
    }
    return false;
  }

  // The string at the cursor, decoded and appended to `out` (skipped when `out` is null): for
  // short strings (names, roles, types).
  // UTF-8 is checked here, string by string while its bytes are still in the cache: outside
  // strings every byte the scanner accepts is ASCII.
  bool String(std::string* out) {
    if (Peek() != '"') return false;
    const char* start = ++p_;
    bool high = false;
    while (true) {
      const char* q = FindStringSpecial(p_, end_, high);
      if (q == end_) return false;
      if (out != nullptr) out->append(p_, static_cast<size_t>(q - p_));
      if (*q == '"') {
        p_ = q + 1;
        return Utf8(start, q, high);
      }
      if (*q != '\\') return false;  // a raw control byte
      char decoded[4];
      const int n = DecodeEscape(q, end_, decoded, p_);
      if (n < 0) return false;
      if (out != nullptr) out->append(decoded, static_cast<size_t>(n));
    }
  }

  // The same for the prompt's text (message contents, prompts), which is most of a body: each
  // 16-byte block is stored to the output before it is searched, so a run of plain bytes costs
  // no copy call and no size-dependent branch, and an escape costs one branch.
  bool String(Out& out) {
    if (Peek() != '"') return false;
    // Locals, not members: the compiler keeps them in registers across the stores.
    const char* p = ++p_;
    const char* const start = p;
    const char* const end = end_;
    char* w = out.Reserve(32);
    const char* limit = w + 32;
    bool high = false;
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"');
    const __m128i backslash = _mm_set1_epi8('\\');
    const __m128i control_max = _mm_set1_epi8(0x1F);
    __m128i seen = _mm_setzero_si128();
    // 32 bytes a step, as two 16-byte blocks: half the loop's branches on long runs.
    while (end - p >= 32) {
      if (limit - w < 48) {  // room for the step and an escape's 4 bytes
        const size_t room = std::max<size_t>(4096, static_cast<size_t>(end - p) / 4);
        out.Commit(w);
        w = out.Reserve(room);
        limit = w + room;
      }
      const __m128i v0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      const __m128i v1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(w), v0);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(w + 16), v1);
      seen = _mm_or_si128(seen, _mm_or_si128(v0, v1));
      // Unsigned v <= 0x1F exactly when min(v, 0x1F) == v.
      const __m128i hit0 = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v0, quote), _mm_cmpeq_epi8(v0, backslash)),
                                        _mm_cmpeq_epi8(_mm_min_epu8(v0, control_max), v0));
      const __m128i hit1 = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v1, quote), _mm_cmpeq_epi8(v1, backslash)),
                                        _mm_cmpeq_epi8(_mm_min_epu8(v1, control_max), v1));
      const uint32_t mask = static_cast<uint32_t>(_mm_movemask_epi8(hit0)) |
                            (static_cast<uint32_t>(_mm_movemask_epi8(hit1)) << 16);
      if (mask == 0) {
        p += 32;
        w += 32;
        continue;
      }
      const int at = __builtin_ctz(mask);
      p += at;
      w += at;
      if (*p != '\\') break;  // the closing quote, or a control byte (below)
      const int n = DecodeEscape(p, end, w, p);
      if (n < 0) return false;
      w += n;
    }
    high = _mm_movemask_epi8(seen) != 0;
#endif
    // The last bytes (and all of them without SSE2), one at a time.
    while (true) {
      if (p == end) return false;
      if (limit - w < 8) {
        out.Commit(w);
        w = out.Reserve(64);
        limit = w + 64;
      }
      const auto c = static_cast<unsigned char>(*p);
      if (c == '"') break;
      if (c < 0x20) return false;
      if (c == '\\') {
        const int n = DecodeEscape(p, end, w, p);
        if (n < 0) return false;
        w += n;
        continue;
      }
      high |= c >= 0x80;
      *w++ = static_cast<char>(c);
      ++p;
    }
    out.Commit(w);
    p_ = p + 1;
    return Utf8(start, p, high);
  }

  // The raw text of a string is valid UTF-8 (the DOM path rejects a document whose raw text is
  // not; outside strings that text is ASCII here, so checking each string checks the document).
  static bool Utf8(const char* begin, const char* end, bool high) {
    return !high || simdjson::validate_utf8(begin, static_cast<size_t>(end - begin));
  }

  // An object key: a view of the text when it has no escapes, else decoded into a scratch string
  // (valid until the next Key). Consumes the ':' after it.
  bool Key(std::string_view& key) {
    if (Peek() != '"') return false;
    const char* start = p_ + 1;
    bool high = false;
    const char* q = FindStringSpecial(start, end_, high);
    if (q < end_ && *q == '"' && !high) {
      key = std::string_view(start, static_cast<size_t>(q - start));
      p_ = q + 1;
    } else {
      scratch_.clear();
      if (!String(&scratch_)) return false;
      key = scratch_;
    }
    return Consume(':');
  }

  // `true`, `false` or `null` at the cursor.
  bool Literal(std::string_view word) {
    if (static_cast<size_t>(end_ - p_) < word.size() || std::string_view(p_, word.size()) != word) return false;
    p_ += word.size();
    return true;
  }
  bool Null() { return Peek() == 'n' && Literal("null"); }

  // A number without exponent and with at most kMaxNumberDigits digits (so simdjson reads it as
  // an int64 or a finite double). `integer_text` gets the text of a non-negative integer, else
  // an empty view.
  bool Number(std::string_view* integer_text) {
    SkipSpace();
    const char* start = p_;
    if (p_ < end_ && *p_ == '-') ++p_;
    const char* first_digit = p_;
    if (p_ == end_ || !IsDigit(*p_)) return false;
    if (*p_ == '0') {
      ++p_;
    } else {
      while (p_ < end_ && IsDigit(*p_)) ++p_;
    }
    ptrdiff_t digits = p_ - first_digit;
    bool integer = true;
    if (p_ < end_ && *p_ == '.') {
      integer = false;
      const char* frac = ++p_;
      while (p_ < end_ && IsDigit(*p_)) ++p_;
      if (p_ == frac) return false;
      digits += p_ - frac;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) return false;
    if (digits > kMaxNumberDigits) return false;
    if (integer_text != nullptr) {
      *integer_text = (integer && *start != '-') ? std::string_view(start, static_cast<size_t>(p_ - start))
                                                 : std::string_view();
    }
    return true;
  }

  // Any value, validated and skipped.
  bool SkipValue(int depth) {
    switch (Peek()) {
      case '"': return String(nullptr);
      case 't': return Literal("true");
      case 'f': return Literal("false");
      case 'n': return Literal("null");
      case '{': {
        if (depth >= kMaxDepth) return false;
        ++p_;
        if (Consume('}')) return true;
        do {
          std::string_view key;
          if (!Key(key) || !SkipValue(depth + 1)) return false;
        } while (Consume(','));
        return Consume('}');
      }
      case '[': {
        if (depth >= kMaxDepth) return false;
        ++p_;
        if (Consume(']')) return true;
        do {
          if (!SkipValue(depth + 1)) return false;
        } while (Consume(','));
        return Consume(']');
      }
      default: return Number(nullptr);
    }
  }

  // The text of the value at the cursor, validated and skipped.
  bool Span(std::string_view& span, int depth) {
    SkipSpace();
    const char* start = p_;
    if (!SkipValue(depth)) return false;
    span = std::string_view(start, static_cast<size_t>(p_ - start));
    return true;
  }

 private:
  const char* p_;
  const char* end_;
  std::string scratch_;
};

// Sets `seen` and returns true the first time; a repeated member (last one wins in the DOM path)
// makes the parse decline.
bool First(bool& seen) {
  if (seen) return false;
  seen = true;
  return true;
}

// The string value at the cursor, decoded into `out` (replacing it).
bool StringInto(Scanner& s, std::string& out) {
  out.clear();
  return s.String(&out);
}

// One element of a content array: only text-like parts (text, input_text, output_text, refusal).
bool ContentPart(Scanner& s, Out& out) {
  if (!s.Consume('{')) return false;
  bool seen_type = false, seen_text = false, seen_refusal = false;
  std::string type;
  // The raw text of the `text` and `refusal` values; rendered once the type is known.
  std::string_view text, refusal;
  if (!s.Consume('}')) {
    do {
      std::string_view key;
      if (!s.Key(key)) return false;
      if (key == "type") {
        if (!First(seen_type) || !StringInto(s, type)) return false;
      } else if (key == "text") {
        if (!First(seen_text) || !s.Span(text, 2)) return false;
      } else if (key == "refusal") {
        if (!First(seen_refusal) || !s.Span(refusal, 2)) return false;
      } else if (!s.SkipValue(2)) {
        return false;
      }
    } while (s.Consume(','));
    if (!s.Consume('}')) return false;
  }
  if (!seen_type) return false;
  std::string_view value;
  if (type == "text" || type == "input_text" || type == "output_text") {
    if (!seen_text) return false;
    value = text;
  } else if (type == "refusal") {
    if (!seen_refusal) return false;
    value = refusal;
  } else {
    return false;  // media and other parts: the DOM path
  }
  if (value == "null") return true;  // skipped, as vLLM skips it
  Scanner v(value);
  return v.String(out);
}

// `content`: a string, null, or an array of text-like parts.
bool Content(Scanner& s, Out& out) {
  switch (s.Peek()) {
    case '"': return s.String(out);
    case 'n': return s.Null();
    case '[': {
      s.Consume('[');
      if (s.Consume(']')) return true;
      do {
        if (!ContentPart(s, out)) return false;
      } while (s.Consume(','));
      return s.Consume(']');
    }
    default: return false;
  }
}

// The canonical JSON of a value's text (a non-null `tool_calls` or `function_call`, a Responses
// item that is not a message).
bool AppendJsonOfText(std::string_view span, Out& out) {
  std::string json;
  if (!AppendCanonicalJsonText(span, json)) return false;
  out.Append(json);
  return true;
}

// One chat message: role + "\n" + content + calls + "\n". The content is decoded straight into
// `out`; a role that comes after a non-empty content is inserted before it.
// With `type` (a Responses input item): an item whose `type` is absent or "message" is a message;
// any other item renders as type + "\n" + J(item) + "\n", from the item's text.
bool Message(Scanner& s, Out& out, std::string& role, std::string* type = nullptr) {
  s.SkipSpace();
  const char* item = s.pos();
  if (!s.Consume('{')) return false;
  const size_t start = out.size();
  bool seen_role = false, seen_content = false, seen_tool_calls = false, seen_function_call = false;
  bool seen_type = false, role_written = false, other_item = false;
  std::string_view tool_calls, function_call;
  if (s.Consume('}')) return false;  // no role
  do {
    std::string_view key;
    if (!s.Key(key)) return false;
    if (type != nullptr && key == "type") {
      if (!First(seen_type) || !StringInto(s, *type)) return false;
      other_item = *type != "message";
    } else if (other_item) {
      if (!s.SkipValue(2)) return false;  // rendered whole below
    } else if (key == "role") {
      if (!First(seen_role) || !StringInto(s, role)) return false;
      if (out.size() == start) {  // the usual order: the role first, written where it belongs
        out.Append(role);
        out.Append('\n');
        role_written = true;
      }
    } else if (key == "content") {
      if (!First(seen_content) || !Content(s, out)) return false;
    } else if (key == "tool_calls") {
      if (!First(seen_tool_calls) || !s.Span(tool_calls, 2)) return false;
    } else if (key == "function_call") {
      if (!First(seen_function_call) || !s.Span(function_call, 2)) return false;
    } else if (!s.SkipValue(2)) {
      return false;
    }
  } while (s.Consume(','));
  if (!s.Consume('}')) return false;
  if (other_item) {  // what was rendered before the type was known is dropped
    out.Truncate(start);
    out.Append(*type);
    out.Append('\n');
    if (!AppendJsonOfText(std::string_view(item, static_cast<size_t>(s.pos() - item)), out)) return false;
    out.Append('\n');
    return true;
  }
  if (!seen_role) return false;
  if (!role_written) {  // the content came first
    role += '\n';
    out.Insert(start, role);
  }
  if (!tool_calls.empty() && tool_calls != "null" && !AppendJsonOfText(tool_calls, out)) return false;
  if (!function_call.empty() && function_call != "null" && !AppendJsonOfText(function_call, out)) return false;
  out.Append('\n');
  return true;
}

bool Messages(Scanner& s, Out& out) {
  if (!s.Consume('[') || s.Consume(']')) return false;  // not an array, or empty
  std::string role;
  do {
    if (!Message(s, out, role)) return false;
  } while (s.Consume(','));
  return s.Consume(']');
}

// A Responses `input`: a non-empty string (a user message) or a non-empty array of items.
bool ResponsesInput(Scanner& s, Out& out) {
  if (s.Peek() == '"') {
    out.Append("user\n");
    const size_t start = out.size();
    if (!s.String(out) || out.size() == start) return false;
    out.Append('\n');
    return true;
  }
  if (!s.Consume('[') || s.Consume(']')) return false;
  std::string role, type;
  do {
    type.clear();
    if (!Message(s, out, role, &type)) return false;
  } while (s.Consume(','));
  return s.Consume(']');
}

// `tools` (its raw text): "tools\n" + J(tools) + "\n" for a non-empty array of objects; nothing
// for null or [].
bool ToolsBlock(std::string_view span, std::string& block) {
  Scanner s(span);
  if (s.Null()) return true;
  if (!s.Consume('[')) return false;
  if (s.Consume(']')) return true;
  do {
    if (s.Peek() != '{' || !s.SkipValue(1)) return false;
  } while (s.Consume(','));
  block += "tools\n";
  if (!AppendCanonicalJsonText(span, block)) return false;
  block += '\n';
  return true;
}

// A completions `prompt`: a non-empty string, or a non-empty array of strings (joined with '\n')
// or of token ids (decimal, joined with ' ').
bool Prompt(Scanner& s, Out& out, std::optional<int64_t>& token_count) {
  if (s.Peek() == '"') return s.String(out) && out.size() > 0;
  if (!s.Consume('[') || s.Consume(']')) return false;
  if (s.Peek() == '"') {
    bool first = true;
    do {
      if (!first) out.Append('\n');
      first = false;
      if (!s.String(out)) return false;
    } while (s.Consume(','));
    return s.Consume(']');
  }
  int64_t count = 0;
  do {
    std::string_view digits;
    if (!s.Number(&digits) || digits.empty()) return false;
    if (count > 0) out.Append(' ');
    out.Append(digits);
    ++count;
  } while (s.Consume(','));
  token_count = count;
  return s.Consume(']');
}

thread_local size_t initial_room_for_testing = 0;

}  // namespace

void SetInitialPromptRoomForTesting(size_t bytes) { initial_room_for_testing = bytes; }

bool FastParseBody(std::string_view body, ApiKind api, InferenceRequest& req) {
  const bool chat = api == ApiKind::kChatCompletions;
  const bool responses = api == ApiKind::kResponses;
  const bool embeddings = api == ApiKind::kEmbeddings;
  const bool completions = api == ApiKind::kCompletions || api == ApiKind::kOther;
  Scanner s(body);
  if (!s.Consume('{')) return false;
  // The rendering is almost never longer than the JSON it comes from (Out grows if it is).
  req.prompt.clear();
  Out out(req.prompt, initial_room_for_testing != 0 ? initial_room_for_testing : body.size() + 64);
  // seen_main: the member the prompt comes from (messages, prompt or input).
  bool seen_model = false, seen_stream = false, seen_salt = false, seen_main = false, seen_tools = false;
  bool seen_instructions = false, seen_messages = false;
  // Raw texts rendered at the end: tools that follow the chat messages (or any Responses tools:
  // the instructions go before them), and an embeddings request's messages (used without input).
  std::string_view tools, messages;
  std::string instructions;
  std::optional<int64_t> token_count;
  if (s.Consume('}')) return false;  // no model
  do {
    std::string_view key;
    if (!s.Key(key)) return false;
    if (key == "model") {
      if (!First(seen_model) || !StringInto(s, req.model) || req.model.empty()) return false;
    } else if (key == "stream") {
      if (!First(seen_stream)) return false;
      const char c = s.Peek();
      if (c == 't' && s.Literal("true")) {
        req.stream = true;
      } else if (c == 'f' && s.Literal("false")) {
        req.stream = false;
      } else if (!s.Null()) {
        return false;
      }
    } else if (key == "cache_salt") {
      if (!First(seen_salt)) return false;
      if (!s.Null() && !StringInto(s, req.cache_salt)) return false;
    } else if (chat && key == "messages") {
      if (!First(seen_main) || !Messages(s, out)) return false;
    } else if ((chat || responses) && key == "tools") {
      if (!First(seen_tools)) return false;
      std::string_view span;
      if (!s.Span(span, 1)) return false;
      // Chat tools before the messages are rendered in place; otherwise inserted in front at the end.
      if (chat && !seen_main) {
        std::string block;
        if (!ToolsBlock(span, block)) return false;
        out.Append(block);
      } else {
        tools = span;
      }
    } else if (completions && key == "prompt") {
      if (!First(seen_main) || !Prompt(s, out, token_count)) return false;
    } else if (embeddings && key == "input") {
      if (!First(seen_main) || !Prompt(s, out, token_count)) return false;
    } else if (embeddings && key == "messages") {
      if (!First(seen_messages) || !s.Span(messages, 1)) return false;
    } else if (responses && key == "input") {
      if (!First(seen_main) || !ResponsesInput(s, out)) return false;
    } else if (responses && key == "instructions") {
      if (!First(seen_instructions)) return false;
      if (!s.Null() && !StringInto(s, instructions)) return false;
    } else if (!s.SkipValue(1)) {
      return false;
    }
  } while (s.Consume(','));
  if (!s.Consume('}') || !s.AtEnd() || !seen_model) return false;
  if (embeddings && !seen_main && seen_messages) {  // vLLM embeds a chat conversation too
    Scanner m(messages);
    if (!Messages(m, out)) return false;
    seen_main = true;
  }
  if (!seen_main) return false;
  std::string prefix;
  if (!instructions.empty()) {
    prefix += "instructions\n";
    prefix += instructions;
    prefix += '\n';
  }
  if (!tools.empty() && !ToolsBlock(tools, prefix)) return false;
  if (!prefix.empty()) out.Insert(0, prefix);
  out.Finish();
  std::string& prompt = req.prompt;
  // As the DOM path: no megabytes kept reserved for the request's lifetime.
  if (prompt.capacity() > 2 * prompt.size() + 4096) prompt.shrink_to_fit();
  req.prompt_tokens = token_count.has_value() ? *token_count : ApproxTokens(prompt.size());
  req.media_parts = 0;
  return true;
}

}  // namespace epp::internal
