// Prometheus text exposition parser.
//
// Speed matters (an EPP scrapes every endpoint every 50 ms), so the parser makes one pass with
// no per-sample allocation: the input is copied once into the result, names and label values are
// views into that copy, and only values with escape sequences are unescaped into an arena. Labels
// of all samples share one flat vector; the spans are fixed up once at the end.
//
// Hot-path tricks: character classes come from a 256-entry table; label values are found with
// memchr; a sample's metric name and label names are first compared with the previous sample's
// (consecutive series of one metric repeat them), which turns most name scanning into one
// memcmp; plain decimals skip from_chars. ParsePrometheusTextInto reuses every buffer.
//
// Family grouping reproduces the reference parsers exactly (see metrics.h), including their
// corner cases: a sample that fits no open family closes it and becomes a singleton untyped
// family; a counter whose TYPE name lacks `_total` gets `_total` appended to its samples.
#include <algorithm>
#include <array>
#include <charconv>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <string>

#include "epp/metrics.h"

namespace epp {

struct MetricFamilies::Impl {
  std::string text;
  std::deque<std::string> arena;  // deque: element addresses (and SSO buffers) never move
  std::vector<Label> labels;
  std::vector<Sample> samples;
  std::vector<MetricFamily> families;
  std::vector<std::pair<int, std::string>> skipped;
  // Scratch kept between parses: (begin, count) of each sample's labels, (begin, end) of each
  // family's samples, until the spans are fixed up.
  std::vector<std::pair<uint32_t, uint32_t>> label_ranges;
  std::vector<std::pair<uint32_t, uint32_t>> family_ranges;

  void Clear() {
    text.clear();
    arena.clear();
    labels.clear();
    samples.clear();
    families.clear();
    skipped.clear();
    label_ranges.clear();
    family_ranges.clear();
  }
};

MetricFamilies::MetricFamilies() : impl_(std::make_unique<Impl>()) {}
MetricFamilies::~MetricFamilies() = default;
MetricFamilies::MetricFamilies(MetricFamilies&&) noexcept = default;
MetricFamilies& MetricFamilies::operator=(MetricFamilies&&) noexcept = default;

std::span<const MetricFamily> MetricFamilies::families() const { return impl_->families; }
size_t MetricFamilies::sample_count() const { return impl_->samples.size(); }
int MetricFamilies::skipped_lines() const { return static_cast<int>(impl_->skipped.size()); }
const std::vector<std::pair<int, std::string>>& MetricFamilies::skipped() const {
  return impl_->skipped;
}

namespace {

// Whether a family may hold samples named `name` (or is itself named so), by the grouping rules:
// the family's own name, plus _sum/_count for summaries and histograms, _bucket for histograms,
// and _total for counters (whose family names drop it).
bool FamilyOwnsName(const MetricFamily& f, std::string_view name) {
  const std::string_view fam = f.name;
  if (name.size() < fam.size() || name.compare(0, fam.size(), fam) != 0) return false;
  const std::string_view suffix = name.substr(fam.size());
  if (suffix.empty()) return true;
  switch (f.type) {
    case MetricType::kCounter: return suffix == "_total";
    case MetricType::kHistogram: return suffix == "_bucket" || suffix == "_sum" || suffix == "_count";
    case MetricType::kSummary: return suffix == "_sum" || suffix == "_count";
    default: return false;
  }
}

}  // namespace

// A linear scan over families: exporters have tens of families, lookups happen a few times per
// scrape, and the parse stays free of index building.
std::vector<const MetricFamily*> MetricFamilies::FindBySampleName(std::string_view name) const {
  std::vector<const MetricFamily*> out;
  for (const MetricFamily& f : impl_->families) {
    if (FamilyOwnsName(f, name)) out.push_back(&f);
  }
  return out;
}

std::vector<std::pair<const MetricFamily*, const Sample*>> MetricFamilies::SamplesNamed(
    std::string_view name) const {
  std::vector<std::pair<const MetricFamily*, const Sample*>> out;
  for (const MetricFamily* f : FindBySampleName(name)) {
    for (const Sample& s : f->samples) {
      if (s.name == name) out.emplace_back(f, &s);
    }
  }
  return out;
}

std::optional<std::string_view> Sample::label(std::string_view n) const {
  for (const Label& l : labels) {
    if (l.name == n) return l.value;
  }
  return std::nullopt;
}

std::string_view MetricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
    case MetricType::kSummary: return "summary";
    case MetricType::kUntyped: return "untyped";
  }
  return "untyped";
}

namespace {

enum : uint8_t { kSpace = 1, kNameStart = 2, kNameChar = 4, kLabelStart = 8, kLabelChar = 16 };

constexpr std::array<uint8_t, 256> MakeClasses() {
  std::array<uint8_t, 256> t{};
  for (int c = 0; c < 256; ++c) {
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    uint8_t v = 0;
    if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') v |= kSpace;
    if (alpha || c == ':') v |= kNameStart | kNameChar;
    if (digit) v |= kNameChar | kLabelChar;
    if (alpha) v |= kLabelStart | kLabelChar;
    t[c] = v;
  }
  return t;
}
constexpr std::array<uint8_t, 256> kClass = MakeClasses();

inline bool Is(char c, uint8_t cls) { return (kClass[static_cast<unsigned char>(c)] & cls) != 0; }
inline bool IsSpace(char c) { return Is(c, kSpace); }
inline bool IsNameStart(char c) { return Is(c, kNameStart); }
inline bool IsNameChar(char c) { return Is(c, kNameChar); }
inline bool IsLabelStart(char c) { return Is(c, kLabelStart); }
inline bool IsLabelChar(char c) { return Is(c, kLabelChar); }


// A parse failure within one line: the 0-based offset in the line and what went wrong.
struct LineError {
  size_t offset;
  const char* what;
};

// Scans a plain number at p[i]: digits, an optional fraction, an optional exponent, no sign.
// With at most 15 significant digits and a decimal exponent within +-22, m * 10^e is computed
// from two exactly representable doubles and so correctly rounded (Clinger's fast path), equal
// to what from_chars gives. Returns the end position, or 0 when the fast path does not apply.
inline size_t ScanSimpleNumber(const char* p, size_t i, size_t n, double& out) {
  static constexpr double kPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                      1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
  uint64_t m = 0;
  int digits = 0, exp10 = 0;
  size_t k = i;
  for (; k < n; ++k) {
    const unsigned d = static_cast<unsigned char>(p[k]) - '0';
    if (d > 9) break;
    m = m * 10 + d;
    ++digits;
  }
  if (k < n && p[k] == '.') {
    for (++k; k < n; ++k) {
      const unsigned d = static_cast<unsigned char>(p[k]) - '0';
      if (d > 9) break;
      m = m * 10 + d;
      ++digits;
      --exp10;
    }
  }
  if (digits == 0 || digits > 15) return 0;
  if (k < n && (p[k] == 'e' || p[k] == 'E')) {
    ++k;
    bool neg = false;
    if (k < n && (p[k] == '+' || p[k] == '-')) neg = p[k++] == '-';
    int e = 0, edigits = 0;
    for (; k < n && edigits < 4; ++k, ++edigits) {
      const unsigned d = static_cast<unsigned char>(p[k]) - '0';
      if (d > 9) break;
      e = e * 10 + static_cast<int>(d);
    }
    if (edigits == 0 || edigits == 4) return 0;
    exp10 += neg ? -e : e;
  }
  if (exp10 < -22 || exp10 > 22) return 0;
  const double v = static_cast<double>(m);
  out = exp10 < 0 ? v / kPow10[-exp10] : v * kPow10[exp10];
  return k;
}

// The first position in [i, n) holding '"' or a backslash, or n. Reads up to 15 bytes past
// p + n: the parser's copy of the text is padded for that.
inline size_t FindQuoteOrBackslash(const char* p, size_t i, size_t n) {
#ifdef __SSE2__
  const __m128i quote = _mm_set1_epi8('"');
  const __m128i backslash = _mm_set1_epi8('\\');
  while (i < n) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    const int mask = _mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)));
    if (mask != 0) {
      const size_t j = i + static_cast<size_t>(__builtin_ctz(static_cast<unsigned>(mask)));
      return j < n ? j : n;
    }
    i += 16;
  }
  return n;
#else
  while (i < n && p[i] != '"' && p[i] != '\\') ++i;
  return i;
#endif
}

// Bytes of padding after the parser's copy of the text (see FindQuoteOrBackslash).
constexpr size_t kPadding = 16;

// Any value Prometheus writes: decimal, exponent, NaN, +Inf, -Inf, signs (case-insensitive, as
// Go's strconv and Python's float() accept).
bool ParseValue(std::string_view tok, double& out) {
  if (tok.empty()) return false;
  bool neg = false;
  if (tok[0] == '+' || tok[0] == '-') {
    neg = tok[0] == '-';
    tok.remove_prefix(1);
    if (tok.empty() || tok[0] == '+' || tok[0] == '-') return false;
  }
  auto [ptr, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), out);
  if (ptr != tok.data() + tok.size()) return false;
  if (ec == std::errc::result_out_of_range) {
    // from_chars leaves `out` unchanged on range errors; mirror strtod.
    out = std::strtod(std::string(tok).c_str(), nullptr);
  } else if (ec != std::errc()) {
    return false;
  }
  if (neg) out = -out;
  return true;
}

bool ParseTimestamp(std::string_view tok, int64_t& out) {
  if (!tok.empty() && tok[0] == '+') tok.remove_prefix(1);
  auto [ptr, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), out);
  return ec == std::errc() && ptr == tok.data() + tok.size() && !tok.empty();
}

class Parser {
 public:
  Parser(MetricFamilies::Impl& impl, bool lenient) : m_(impl), lenient_(lenient) {}

  absl::Status Run() {
    const char* const data = m_.text.data();
    const size_t size = m_.text.size() - kPadding;
    size_t pos = 0;
    int line_no = 0;
    while (pos < size) {
      const void* nl = std::memchr(data + pos, '\n', size - pos);
      const size_t end = nl == nullptr ? size : static_cast<size_t>(static_cast<const char*>(nl) - data);
      ++line_no;
      std::string_view line(data + pos, end - pos);
      pos = end + 1;
      std::optional<LineError> err;
      bool eof = false;
      ParseLine(line, err, eof);
      if (err) {
        if (!lenient_) {
          return absl::InvalidArgumentError("line " + std::to_string(line_no) + ", column " +
                                            std::to_string(err->offset + 1) + ": " + err->what);
        }
        m_.skipped.emplace_back(line_no, std::string(err->what));
      }
      if (eof) break;
    }
    CloseFamily();
    Finish();
    return absl::OkStatus();
  }

 private:
  void ParseLine(std::string_view raw, std::optional<LineError>& err, bool& eof) {
    size_t b = 0, e = raw.size();
    while (b < e && IsSpace(raw[b])) ++b;
    while (e > b && IsSpace(raw[e - 1])) --e;
    if (b == e) return;
    std::string_view line = raw.substr(b, e - b);
    if (line[0] == '#') {
      ParseComment(line, b, err, eof);
    } else {
      ParseSample(line, b, err);
    }
  }


  // "# HELP name text", "# TYPE name type", "# EOF"; anything else is a plain comment. Tokens are
  // split on whitespace runs as str.split(None, 3) splits them.
  void ParseComment(std::string_view line, size_t base, std::optional<LineError>& err, bool& eof) {
    const size_t size = line.size();
    if (size < 2 || !IsSpace(line[1])) return;  // "#", "#HELP ...": plain comments
    size_t i = 2;
    while (i < size && IsSpace(line[i])) ++i;
    auto keyword = [&](const char* k) {
      return line.compare(i, 4, k) == 0 && (i + 4 == size || IsSpace(line[i + 4]));
    };
    const bool help = keyword("HELP");
    const bool type = !help && keyword("TYPE");
    if (!help && !type) {
      if (line.compare(i, 3, "EOF") == 0 && i + 3 == size) eof = true;
      return;
    }
    i += 4;
    while (i < size && IsSpace(line[i])) ++i;
    const size_t name_at = i;
    if (i == size) {
      err = LineError{base + size, help ? "HELP line without a metric name" : "TYPE line without a metric name"};
      return;
    }
    if (const size_t same = open_ ? SameAs<true>(line.data() + i, size - i, name_) : 0; same != 0) {
      i += same;  // TYPE after HELP (or the reverse) names the open family again
    } else if (IsNameStart(line[i])) {
      ++i;
      while (i < size && IsNameChar(line[i])) ++i;
    }
    if (i == name_at || (i < size && !IsSpace(line[i]))) {
      err = LineError{base + name_at, "invalid metric name"};
      return;
    }
    const std::string_view name = line.substr(name_at, i - name_at);
    while (i < line.size() && IsSpace(line[i])) ++i;
    const std::string_view rest = line.substr(i);
    if (help) {
      if (name != name_ || !open_) {
        CloseFamily();
        StartFamily(name);
        allowed_ = {true, false, false};
      }
      help_ = UnescapeHelp(rest);
      return;
    }
    if (rest.empty()) {
      err = LineError{base + line.size(), "TYPE line without a type"};
      return;
    }
    MetricType t;
    if (rest == "counter") t = MetricType::kCounter;
    else if (rest == "gauge") t = MetricType::kGauge;
    else if (rest == "histogram") t = MetricType::kHistogram;
    else if (rest == "summary") t = MetricType::kSummary;
    else if (rest == "untyped" || rest == "unknown") t = MetricType::kUntyped;
    else {
      err = LineError{base + i, "unknown metric type (want counter, gauge, histogram, summary or untyped)"};
      return;
    }
    if (name != name_ || !open_) {
      CloseFamily();
      StartFamily(name);
      help_ = {};
    }
    type_ = t;
    allowed_.single = t != MetricType::kHistogram;
    allowed_.sum_count = t == MetricType::kHistogram || t == MetricType::kSummary;
    allowed_.bucket = t == MetricType::kHistogram;
  }

  std::string_view UnescapeHelp(std::string_view s) {
    if (s.find('\\') == std::string_view::npos) return s;
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == '\\' || s[i + 1] == 'n')) {
        out.push_back(s[i + 1] == 'n' ? '\n' : '\\');
        ++i;
      } else {
        out.push_back(s[i]);
      }
    }
    m_.arena.push_back(std::move(out));
    return m_.arena.back();
  }

  bool Allowed(std::string_view sample) const {
    if (!open_) return false;
    if (sample.size() < name_.size() || std::memcmp(sample.data(), name_.data(), name_.size()) != 0) return false;
    const std::string_view suffix = sample.substr(name_.size());
    if (suffix.empty()) return allowed_.single;
    if (suffix == "_sum" || suffix == "_count") return allowed_.sum_count;
    if (suffix == "_bucket") return allowed_.bucket;
    return false;
  }

  // Length of the identifier at `p` if it equals `prev` exactly (a memcmp instead of a scan).
  template <bool kMetric>
  static size_t SameAs(const char* p, size_t avail, std::string_view prev) {
    const size_t n = prev.size();
    if (n == 0 || avail <= n || std::memcmp(p, prev.data(), n) != 0) return 0;
    return (kMetric ? IsNameChar(p[n]) : IsLabelChar(p[n])) ? 0 : n;
  }

  void ParseSample(std::string_view line, size_t base, std::optional<LineError>& err) {
    const char* const p = line.data();
    const size_t n = line.size();
    size_t i = SameAs<true>(p, n, prev_name_);
    if (i == 0) {
      if (!IsNameStart(p[0])) {
        err = LineError{base, "expected a metric name, a comment or a blank line"};
        return;
      }
      i = 1;
      while (i < n && IsNameChar(p[i])) ++i;
    }
    const std::string_view name(p, i);
    prev_name_ = name;
    while (i < n && IsSpace(p[i])) ++i;
    const size_t label_begin = m_.labels.size();
    auto fail = [&](size_t at, const char* what) {
      err = LineError{base + at, what};
      m_.labels.resize(label_begin);
    };
    if (i < n && p[i] == '{') {
      ++i;
      size_t li = 0;  // index of the label within this sample
      for (;;) {
        while (i < n && IsSpace(p[i])) ++i;
        if (i >= n) return fail(i, "unterminated label set (missing '}')");
        if (p[i] == '}') {
          ++i;
          break;
        }
        const size_t ln = i;
        size_t len = li < prev_labels_.size() ? SameAs<false>(p + i, n - i, prev_labels_[li]) : 0;
        if (len == 0) {
          if (!IsLabelStart(p[i])) return fail(i, "expected a label name");
          len = 1;
          while (i + len < n && IsLabelChar(p[i + len])) ++len;
        }
        i += len;
        const std::string_view lname(p + ln, len);
        if (li < prev_labels_.size()) prev_labels_[li] = lname;
        else prev_labels_.push_back(lname);
        ++li;
        while (i < n && IsSpace(p[i])) ++i;
        if (i >= n || p[i] != '=') return fail(i, "expected '=' after label name");
        ++i;
        while (i < n && IsSpace(p[i])) ++i;
        if (i >= n || p[i] != '"') return fail(i, "expected '\"' to open a label value");
        ++i;
        const size_t vs = i;
        bool escaped = false;
        const size_t stop = FindQuoteOrBackslash(p, i, n);
        if (stop < n && p[stop] == '"') {
          i = stop;
        } else {
          while (i < n && p[i] != '"') {
            if (p[i] == '\\') {
              escaped = true;
              if (i + 1 >= n) break;
              const char c = p[i + 1];
              if (c != '\\' && c != '"' && c != 'n') {
                return fail(i, "invalid escape in label value (only \\\\, \\\" and \\n)");
              }
              i += 2;
            } else {
              ++i;
            }
          }
          if (i >= n) return fail(vs - 1, "unterminated label value");
        }
        std::string_view value(p + vs, i - vs);
        ++i;  // closing quote
        if (escaped) value = UnescapeLabel(value);
        m_.labels.push_back(Label{lname, value});
        while (i < n && IsSpace(p[i])) ++i;
        if (i < n && p[i] == ',') {
          ++i;
          continue;
        }
        if (i < n && p[i] == '}') {
          ++i;
          break;
        }
        return fail(i, "expected ',' or '}' after a label value");
      }
    } else if (i < n && i == name.size()) {
      return fail(i, "expected a value after the metric name");
    }
    while (i < n && IsSpace(p[i])) ++i;
    const size_t vs = i;
    double value;
    if (size_t end = ScanSimpleNumber(p, i, n, value); end != 0 && (end == n || IsSpace(p[end]))) {
      i = end;  // the common case: plain digits with an optional fraction and exponent
    } else {
      while (i < n && !IsSpace(p[i])) ++i;
      if (vs == i) return fail(vs, "expected a value after the metric name");
      if (!ParseValue(line.substr(vs, i - vs), value)) {
        return fail(vs, "invalid sample value (want a number, NaN, +Inf or -Inf)");
      }
    }
    std::optional<int64_t> ts;
    while (i < n && IsSpace(p[i])) ++i;
    if (i < n) {
      const size_t tsb = i;
      while (i < n && !IsSpace(p[i])) ++i;
      int64_t t;
      if (!ParseTimestamp(line.substr(tsb, i - tsb), t)) return fail(tsb, "invalid timestamp (want integer milliseconds)");
      ts = t;
      while (i < n && IsSpace(p[i])) ++i;
      if (i < n) return fail(i, "unexpected text after the timestamp");
    }
    m_.label_ranges.emplace_back(static_cast<uint32_t>(label_begin),
                                 static_cast<uint32_t>(m_.labels.size() - label_begin));
    if (Allowed(name)) {
      m_.samples.push_back(Sample{name, {}, value, ts});
    } else {
      // Closes the open family; the sample becomes a family of its own.
      CloseFamily();
      m_.samples.push_back(Sample{name, {}, value, ts});
      EmitFamily(name, MetricType::kUntyped, {}, m_.samples.size() - 1);
    }
  }

  std::string_view UnescapeLabel(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\\' && i + 1 < s.size()) {
        const char c = s[++i];
        out.push_back(c == 'n' ? '\n' : c);
      } else {
        out.push_back(s[i]);
      }
    }
    m_.arena.push_back(std::move(out));
    return m_.arena.back();
  }

  void StartFamily(std::string_view name) {
    name_ = name;
    type_ = MetricType::kUntyped;
    first_sample_ = m_.samples.size();
    open_ = true;
  }

  void CloseFamily() {
    if (!open_) return;
    open_ = false;
    EmitFamily(name_, type_, help_, first_sample_);
    name_ = {};
    allowed_ = {};
  }

  void EmitFamily(std::string_view name, MetricType type, std::string_view help, size_t first) {
    MetricFamily f;
    f.type = type;
    f.help = help;
    f.name = name;
    if (type == MetricType::kCounter) {
      if (name.size() >= 6 && name.substr(name.size() - 6) == "_total") {
        f.name = name.substr(0, name.size() - 6);
      } else {
        // Each sample's own name gets the suffix (they differ only in malformed input).
        std::string_view prev;
        for (size_t k = first; k < m_.samples.size(); ++k) {
          if (m_.arena.empty() || m_.samples[k].name != prev) {
            prev = m_.samples[k].name;
            m_.arena.push_back(std::string(prev) + "_total");
          }
          m_.samples[k].name = m_.arena.back();
        }
      }
    }
    m_.family_ranges.emplace_back(static_cast<uint32_t>(first), static_cast<uint32_t>(m_.samples.size()));
    m_.families.push_back(f);
    help_ = {};
  }

  void Finish() {
    for (size_t k = 0; k < m_.samples.size(); ++k) {
      const auto [b, c] = m_.label_ranges[k];
      m_.samples[k].labels = std::span<const Label>(m_.labels.data() + b, c);
    }
    for (size_t k = 0; k < m_.families.size(); ++k) {
      const auto [b, e] = m_.family_ranges[k];
      m_.families[k].samples = std::span<const Sample>(m_.samples.data() + b, e - b);
    }
  }

  struct AllowedNames {
    bool single = false, sum_count = false, bucket = false;
  };

  MetricFamilies::Impl& m_;
  bool lenient_;
  bool open_ = false;
  std::string_view name_;
  std::string_view help_;
  MetricType type_ = MetricType::kUntyped;
  size_t first_sample_ = 0;
  AllowedNames allowed_;
  std::string_view prev_name_;
  std::vector<std::string_view> prev_labels_;
};

}  // namespace

absl::Status ParsePrometheusTextInto(std::string_view text, const ParseOptions& options, MetricFamilies& out) {
  MetricFamilies::Impl& m = *out.impl_;
  m.Clear();
  m.text.reserve(text.size() + kPadding);
  m.text.assign(text.data(), text.size());
  m.text.append(kPadding, '\0');
  m.samples.reserve(text.size() / 64 + 1);
  m.labels.reserve(text.size() / 32 + 1);
  m.label_ranges.reserve(text.size() / 64 + 1);
  Parser parser(m, options.lenient);
  absl::Status st = parser.Run();
  if (!st.ok()) m.Clear();
  return st;
}

absl::StatusOr<MetricFamilies> ParsePrometheusText(std::string_view text, const ParseOptions& options) {
  MetricFamilies result;
  EPP_RETURN_IF_ERROR(ParsePrometheusTextInto(text, options, result));
  return result;
}

}  // namespace epp
