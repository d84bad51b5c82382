// Prometheus text exposition parser.
//
// Speed matters (an EPP scrapes every endpoint every 50 ms), so the parser makes one pass with
// no per-sample allocation: the input is copied once into the result, names and label values are
// views into that copy, and only values with escape sequences are unescaped into an arena. Labels
// of all samples share one flat vector; the spans are fixed up once at the end.
//
// Family grouping reproduces the reference parsers exactly (see metrics.h), including their
// corner cases: a sample that fits no open family closes it and becomes a singleton untyped
// family; a counter whose TYPE name lacks `_total` gets `_total` appended to its samples.
#include <charconv>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <string>
#include <unordered_map>

#include "epp/metrics.h"

namespace epp {

struct MetricFamilies::Impl {
  std::string text;
  std::deque<std::string> arena;  // deque: element addresses (and SSO buffers) never move
  std::vector<Label> labels;
  std::vector<Sample> samples;
  std::vector<MetricFamily> families;
  std::vector<std::pair<int, std::string>> skipped;
  std::unordered_map<std::string_view, std::vector<uint32_t>> by_name;  // family or sample name
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

std::vector<const MetricFamily*> MetricFamilies::FindBySampleName(std::string_view name) const {
  std::vector<const MetricFamily*> out;
  auto it = impl_->by_name.find(name);
  if (it == impl_->by_name.end()) return out;
  for (uint32_t idx : it->second) out.push_back(&impl_->families[idx]);
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

inline bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }
inline bool IsNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
inline bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }
inline bool IsLabelStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
inline bool IsLabelChar(char c) { return IsLabelStart(c) || (c >= '0' && c <= '9'); }

bool IsValidMetricName(std::string_view s) {
  if (s.empty() || !IsNameStart(s[0])) return false;
  for (char c : s) {
    if (!IsNameChar(c)) return false;
  }
  return true;
}

// A parse failure within one line: the 0-based offset in the line and what went wrong.
struct LineError {
  size_t offset;
  const char* what;
};

// Parses a float the way Prometheus writes them: decimal, exponent, NaN, +Inf, -Inf
// (case-insensitive, as Go's strconv and Python's float() accept).
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
    const std::string& text = m_.text;
    size_t pos = 0;
    int line_no = 0;
    while (pos < text.size()) {
      size_t nl = text.find('\n', pos);
      size_t end = nl == std::string::npos ? text.size() : nl;
      ++line_no;
      std::string_view line(text.data() + pos, end - pos);
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

  // Splits "# KEYWORD name rest" on whitespace runs, at most 4 parts (like str.split(None, 3)).
  static int SplitComment(std::string_view line, std::string_view parts[4], size_t starts[4]) {
    int n = 0;
    size_t i = 0;
    while (n < 4) {
      while (i < line.size() && IsSpace(line[i])) ++i;
      if (i >= line.size()) break;
      starts[n] = i;
      if (n == 3) {
        parts[n++] = line.substr(i);
        break;
      }
      size_t j = i;
      while (j < line.size() && !IsSpace(line[j])) ++j;
      parts[n++] = line.substr(i, j - i);
      i = j;
    }
    return n;
  }

  void ParseComment(std::string_view line, size_t base, std::optional<LineError>& err, bool& eof) {
    std::string_view parts[4];
    size_t starts[4] = {0, 0, 0, 0};
    int n = SplitComment(line, parts, starts);
    if (n < 2 || parts[0] != "#") return;  // "#", "#HELP ..." and the like are plain comments
    if (parts[1] == "EOF" && n == 2) {
      eof = true;
      return;
    }
    bool help = parts[1] == "HELP";
    bool type = parts[1] == "TYPE";
    if (!help && !type) return;
    if (n < 3) {
      err = LineError{base + line.size(), help ? "HELP line without a metric name"
                                               : "TYPE line without a metric name"};
      return;
    }
    if (!IsValidMetricName(parts[2])) {
      err = LineError{base + starts[2], "invalid metric name"};
      return;
    }
    if (help) {
      if (parts[2] != name_) {
        CloseFamily();
        StartFamily(parts[2]);
        allowed_ = {parts[2], {}, {}, true};
      }
      help_ = n == 4 ? UnescapeHelp(parts[3]) : std::string_view();
      return;
    }
    if (n < 4) {
      err = LineError{base + line.size(), "TYPE line without a type"};
      return;
    }
    MetricType t;
    std::string_view ts = parts[3];
    if (ts == "counter") t = MetricType::kCounter;
    else if (ts == "gauge") t = MetricType::kGauge;
    else if (ts == "histogram") t = MetricType::kHistogram;
    else if (ts == "summary") t = MetricType::kSummary;
    else if (ts == "untyped" || ts == "unknown") t = MetricType::kUntyped;
    else {
      err = LineError{base + starts[3], "unknown metric type (want counter, gauge, histogram, summary or untyped)"};
      return;
    }
    if (parts[2] != name_) {
      CloseFamily();
      StartFamily(parts[2]);
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
    if (name_.empty()) return false;
    if (sample.size() < name_.size() || sample.compare(0, name_.size(), name_) != 0) return false;
    std::string_view suffix = sample.substr(name_.size());
    if (suffix.empty()) return allowed_.single;
    if (suffix == "_sum" || suffix == "_count") return allowed_.sum_count;
    if (suffix == "_bucket") return allowed_.bucket;
    return false;
  }

  void ParseSample(std::string_view line, size_t base, std::optional<LineError>& err) {
    size_t i = 0;
    const size_t n = line.size();
    if (!IsNameStart(line[0])) {
      err = LineError{base, "expected a metric name, a comment or a blank line"};
      return;
    }
    while (i < n && IsNameChar(line[i])) ++i;
    std::string_view name = line.substr(0, i);
    while (i < n && IsSpace(line[i])) ++i;
    const size_t label_begin = m_.labels.size();
    if (i < n && line[i] == '{') {
      ++i;
      for (;;) {
        while (i < n && IsSpace(line[i])) ++i;
        if (i >= n) {
          err = LineError{base + i, "unterminated label set (missing '}')"};
          break;
        }
        if (line[i] == '}') {
          ++i;
          break;
        }
        if (!IsLabelStart(line[i])) {
          err = LineError{base + i, "expected a label name"};
          break;
        }
        size_t ln = i;
        while (i < n && IsLabelChar(line[i])) ++i;
        std::string_view lname = line.substr(ln, i - ln);
        while (i < n && IsSpace(line[i])) ++i;
        if (i >= n || line[i] != '=') {
          err = LineError{base + i, "expected '=' after label name"};
          break;
        }
        ++i;
        while (i < n && IsSpace(line[i])) ++i;
        if (i >= n || line[i] != '"') {
          err = LineError{base + i, "expected '\"' to open a label value"};
          break;
        }
        ++i;
        size_t vs = i;
        bool escaped = false;
        while (i < n && line[i] != '"') {
          if (line[i] == '\\') {
            escaped = true;
            if (i + 1 >= n) break;
            char c = line[i + 1];
            if (c != '\\' && c != '"' && c != 'n') {
              err = LineError{base + i, "invalid escape in label value (only \\\\, \\\" and \\n)"};
              break;
            }
            i += 2;
          } else {
            ++i;
          }
        }
        if (err) break;
        if (i >= n) {
          err = LineError{base + vs - 1, "unterminated label value"};
          break;
        }
        std::string_view value = line.substr(vs, i - vs);
        ++i;  // closing quote
        if (escaped) value = UnescapeLabel(value);
        m_.labels.push_back(Label{lname, value});
        while (i < n && IsSpace(line[i])) ++i;
        if (i < n && line[i] == ',') {
          ++i;
          continue;
        }
        if (i < n && line[i] == '}') {
          ++i;
          break;
        }
        err = LineError{base + i, "expected ',' or '}' after a label value"};
        break;
      }
      if (err) {
        m_.labels.resize(label_begin);
        return;
      }
    }
    // value
    if (i >= n || (i > name.size() && !IsSpace(line[i - 1]) && line[i - 1] != '}')) {
      err = LineError{base + i, "expected a value after the metric name"};
      m_.labels.resize(label_begin);
      return;
    }
    while (i < n && IsSpace(line[i])) ++i;
    size_t vs = i;
    while (i < n && !IsSpace(line[i])) ++i;
    double value;
    if (vs == i) {
      err = LineError{base + vs, "expected a value after the metric name"};
      m_.labels.resize(label_begin);
      return;
    }
    if (!ParseValue(line.substr(vs, i - vs), value)) {
      err = LineError{base + vs, "invalid sample value (want a number, NaN, +Inf or -Inf)"};
      m_.labels.resize(label_begin);
      return;
    }
    while (i < n && IsSpace(line[i])) ++i;
    std::optional<int64_t> ts;
    if (i < n) {
      size_t tsb = i;
      while (i < n && !IsSpace(line[i])) ++i;
      int64_t t;
      if (!ParseTimestamp(line.substr(tsb, i - tsb), t)) {
        err = LineError{base + tsb, "invalid timestamp (want integer milliseconds)"};
        m_.labels.resize(label_begin);
        return;
      }
      ts = t;
      while (i < n && IsSpace(line[i])) ++i;
      if (i < n) {
        err = LineError{base + i, "unexpected text after the timestamp"};
        m_.labels.resize(label_begin);
        return;
      }
    }
    Sample s;
    s.name = name;
    s.value = value;
    s.timestamp_ms = ts;
    // Labels are recorded as (begin, count) in the span's data/size until Finish().
    label_ranges_.emplace_back(static_cast<uint32_t>(label_begin),
                               static_cast<uint32_t>(m_.labels.size() - label_begin));
    if (!Allowed(name)) {
      CloseFamily();
      name_ = {};
      allowed_ = {};
      m_.samples.push_back(s);
      EmitFamily(name, MetricType::kUntyped, {}, m_.samples.size() - 1);
    } else {
      m_.samples.push_back(s);
    }
  }

  std::string_view UnescapeLabel(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\\' && i + 1 < s.size()) {
        char c = s[++i];
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
        std::string renamed = std::string(name) + "_total";
        m_.arena.push_back(std::move(renamed));
        for (size_t k = first; k < m_.samples.size(); ++k) m_.samples[k].name = m_.arena.back();
      }
    }
    const uint32_t idx = static_cast<uint32_t>(m_.families.size());
    // The span is fixed in Finish(); keep the range in it for now.
    family_ranges_.emplace_back(static_cast<uint32_t>(first), static_cast<uint32_t>(m_.samples.size()));
    m_.families.push_back(f);
    Index(f.name, idx);
    std::string_view last;
    for (size_t k = first; k < m_.samples.size(); ++k) {
      if (m_.samples[k].name != last && m_.samples[k].name != f.name) {
        last = m_.samples[k].name;
        Index(last, idx);
      }
    }
    help_ = {};
  }

  void Index(std::string_view name, uint32_t idx) {
    auto& v = m_.by_name[name];
    if (v.empty() || v.back() != idx) v.push_back(idx);
  }

  void Finish() {
    for (size_t k = 0; k < m_.samples.size(); ++k) {
      auto [b, c] = label_ranges_[k];
      m_.samples[k].labels = std::span<const Label>(m_.labels.data() + b, c);
    }
    for (size_t k = 0; k < m_.families.size(); ++k) {
      auto [b, e] = family_ranges_[k];
      m_.families[k].samples = std::span<const Sample>(m_.samples.data() + b, e - b);
    }
  }

  struct Allowed_ {
    std::string_view name;
    bool sum_count = false, bucket = false, single = false;
  };

  MetricFamilies::Impl& m_;
  bool lenient_;
  bool open_ = false;
  std::string_view name_;
  std::string_view help_;
  MetricType type_ = MetricType::kUntyped;
  size_t first_sample_ = 0;
  Allowed_ allowed_;
  std::vector<std::pair<uint32_t, uint32_t>> label_ranges_;
  std::vector<std::pair<uint32_t, uint32_t>> family_ranges_;
};

}  // namespace

absl::StatusOr<MetricFamilies> ParsePrometheusText(std::string_view text, const ParseOptions& options) {
  MetricFamilies result;
  result.impl_->text.assign(text.data(), text.size());
  result.impl_->samples.reserve(text.size() / 64 + 1);
  result.impl_->labels.reserve(text.size() / 32 + 1);
  Parser parser(*result.impl_, options.lenient);
  EPP_RETURN_IF_ERROR(parser.Run());
  return result;
}

}  // namespace epp
