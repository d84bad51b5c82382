// Params: the read-only parameter tree handed to plugin factories, and Go-style durations.
//
// Conversions work on the scalar text whatever its quoting: `threshold: "0.8"` reads as 0.8,
// like a quoted number in a Helm values file would be meant. Quoting only matters for ToJson,
// where a quoted "1" stays a string. Number syntax is YAML 1.2's decimal form, checked over the
// whole text (no hex, no "1_000", no trailing junk) and finite.
#include "epp/params.h"

#include <cassert>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <system_error>

#include "common/strings.h"

namespace epp {
namespace {

// YAML 1.2 core schema decimal number: [-+]? ( \.[0-9]+ | [0-9]+ ( \.[0-9]* )? ) ( [eE] [-+]? [0-9]+ )?
bool LooksLikeDecimal(std::string_view s) {
  size_t i = 0;
  auto digits = [&]() {
    size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i - start;
  };
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (digits() == 0) return false;
  } else {
    if (digits() == 0) return false;
    if (i < s.size() && s[i] == '.') {
      ++i;
      digits();
    }
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  return i == s.size();
}

// The value of a decimal number text; false when the text is not one or is out of range.
bool ParseDecimal(std::string_view s, double& out) {
  if (!LooksLikeDecimal(s)) return false;
  if (s.front() == '+') s.remove_prefix(1);  // from_chars rejects a leading '+'
  double v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(v)) return false;
  out = v;
  return true;
}

bool ParseInteger(std::string_view s, int64_t& out) {
  std::string_view digits = s;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  // Plain integers go through from_chars directly so values above 2^53 stay exact.
  int64_t i = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), i);
  if (ec == std::errc() && ptr == digits.data() + digits.size() && LooksLikeDecimal(s)) {
    out = i;
    return true;
  }
  double d = 0;
  if (!ParseDecimal(s, d) || d != std::trunc(d)) return false;
  // 2^63 is exactly representable; anything at or above it does not fit.
  if (d < -9223372036854775808.0 || d >= 9223372036854775808.0) return false;
  out = static_cast<int64_t>(d);
  return true;
}

// YAML 1.2 core schema booleans and nulls.
bool ParseBoolText(std::string_view s, bool& out) {
  if (s == "true" || s == "True" || s == "TRUE") {
    out = true;
    return true;
  }
  if (s == "false" || s == "False" || s == "FALSE") {
    out = false;
    return true;
  }
  return false;
}

bool IsNullText(std::string_view s) { return s == "null" || s == "Null" || s == "NULL" || s == "~"; }

const char* KindName(Params::Kind kind) {
  switch (kind) {
    case Params::Kind::kNull:
      return "null";
    case Params::Kind::kScalar:
      return "a scalar";
    case Params::Kind::kList:
      return "a list";
    case Params::Kind::kMap:
      return "a map";
  }
  return "?";
}

std::string Prefix(const std::string& path) { return path.empty() ? std::string() : path + ": "; }

absl::Status ConversionError(const Params& value, std::string_view expected) {
  std::string got = value.kind() == Params::Kind::kScalar ? "'" + value.text() + "'" : KindName(value.kind());
  return absl::InvalidArgumentError(Prefix(value.path()) + "expected " + std::string(expected) + ", got " + got);
}

void AppendJsonString(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out += c;  // UTF-8 passes through unchanged
        }
    }
  }
  out += '"';
}

// True when `s` is already a valid JSON number literal (JSON forbids "+1", ".5", "1.", "01").
bool IsJsonNumber(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && s[i] == '-') ++i;
  if (i >= s.size()) return false;
  if (s[i] == '0') {
    ++i;
  } else if (s[i] >= '1' && s[i] <= '9') {
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  } else {
    return false;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    if (i == start) return false;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    if (i == start) return false;
  }
  return i == s.size();
}

void AppendJson(std::string& out, const Params& p) {
  switch (p.kind()) {
    case Params::Kind::kNull:
      out += "null";
      return;
    case Params::Kind::kScalar: {
      const std::string& t = p.text();
      if (!p.quoted()) {
        double d = 0;
        bool b = false;
        if (ParseDecimal(t, d)) {
          out += IsJsonNumber(t) ? t : internal::ShortestDouble(d);
          return;
        }
        if (ParseBoolText(t, b)) {
          out += b ? "true" : "false";
          return;
        }
        if (IsNullText(t)) {
          out += "null";
          return;
        }
      }
      AppendJsonString(out, t);
      return;
    }
    case Params::Kind::kList: {
      out += '[';
      bool first = true;
      for (const Params& item : p.items()) {
        if (!first) out += ',';
        first = false;
        AppendJson(out, item);
      }
      out += ']';
      return;
    }
    case Params::Kind::kMap: {
      out += '{';
      bool first = true;
      for (const auto& [key, value] : p.entries()) {
        if (!first) out += ',';
        first = false;
        AppendJsonString(out, key);
        out += ':';
        AppendJson(out, value);
      }
      out += '}';
      return;
    }
  }
}

// Go's time.ParseDuration units, in nanoseconds.
int64_t UnitNanos(std::string_view unit) {
  if (unit == "ns") return 1;
  if (unit == "us" || unit == "\xC2\xB5s" || unit == "\xCE\xBCs") return 1000;  // us, µs (U+00B5), μs (U+03BC)
  if (unit == "ms") return 1000 * 1000;
  if (unit == "s") return 1000 * 1000 * 1000;
  if (unit == "m") return int64_t{60} * 1000 * 1000 * 1000;
  if (unit == "h") return int64_t{3600} * 1000 * 1000 * 1000;
  return 0;
}

absl::Status DurationError(std::string_view text) {
  return absl::InvalidArgumentError("expected a duration such as 200ms, 1.5s or 1m30s (or a number of seconds), got '" +
                                    std::string(text) + "'");
}

}  // namespace

Params Params::Map(std::string path) {
  Params p;
  p.kind_ = Kind::kMap;
  p.path_ = std::move(path);
  return p;
}

Params Params::List(std::string path) {
  Params p;
  p.kind_ = Kind::kList;
  p.path_ = std::move(path);
  return p;
}

Params Params::Scalar(std::string text, bool quoted, std::string path) {
  Params p;
  p.kind_ = Kind::kScalar;
  p.text_ = std::move(text);
  p.quoted_ = quoted;
  p.path_ = std::move(path);
  return p;
}

Params Params::Number(double value) { return Scalar(internal::ShortestDouble(value)); }
Params Params::Int(int64_t value) { return Scalar(std::to_string(value)); }
Params Params::Bool(bool value) { return Scalar(value ? "true" : "false"); }
Params Params::String(std::string value) { return Scalar(std::move(value), /*quoted=*/true); }

const Params* Params::Find(std::string_view key) const {
  if (kind_ != Kind::kMap) return nullptr;
  for (const auto& [k, v] : entries_) {
    if (k == key) return &v;
  }
  return nullptr;
}

// A null value becomes an empty map (or list) on the first Set (Append), so `Params p; p.Set(...)`
// works. Children are re-homed under this value's path when it has one.
Params& Params::Set(std::string key, Params value) {
  if (kind_ == Kind::kNull) kind_ = Kind::kMap;
  assert(kind_ == Kind::kMap && "Params::Set on a non-map");
  if (!path_.empty()) value.SetPath(path_ + "." + key);
  for (auto& [k, v] : entries_) {
    if (k == key) {
      v = std::move(value);
      return *this;
    }
  }
  entries_.emplace_back(std::move(key), std::move(value));
  return *this;
}

Params& Params::Append(Params value) {
  if (kind_ == Kind::kNull) kind_ = Kind::kList;
  assert(kind_ == Kind::kList && "Params::Append on a non-list");
  if (!path_.empty()) value.SetPath(path_ + "[" + std::to_string(items_.size()) + "]");
  items_.push_back(std::move(value));
  return *this;
}

void Params::SetPath(std::string path) {
  path_ = std::move(path);
  for (size_t i = 0; i < items_.size(); ++i) items_[i].SetPath(path_ + "[" + std::to_string(i) + "]");
  for (auto& [k, v] : entries_) v.SetPath(path_ + "." + k);
}

absl::StatusOr<double> Params::AsDouble() const {
  double d = 0;
  if (kind_ == Kind::kScalar && ParseDecimal(text_, d)) return d;
  return ConversionError(*this, "a number");
}

absl::StatusOr<int64_t> Params::AsInt() const {
  int64_t i = 0;
  if (kind_ == Kind::kScalar && ParseInteger(text_, i)) return i;
  return ConversionError(*this, "an integer");
}

absl::StatusOr<bool> Params::AsBool() const {
  bool b = false;
  if (kind_ == Kind::kScalar && ParseBoolText(text_, b)) return b;
  return ConversionError(*this, "a boolean (true or false)");
}

absl::StatusOr<std::string> Params::AsString() const {
  if (kind_ == Kind::kScalar) return text_;
  return ConversionError(*this, "a string");
}

namespace {

// The member `key` of `map`, with a path for messages even when the tree was built without one.
const Params* Member(const Params& map, std::string_view key, Params& scratch) {
  const Params* v = map.Find(key);
  if (v == nullptr || v->is_null() || !v->path().empty()) return v;
  scratch = *v;
  scratch.SetPath(map.path().empty() ? std::string(key) : map.path() + "." + std::string(key));
  return &scratch;
}

}  // namespace

absl::StatusOr<double> Params::GetDouble(std::string_view key, double default_value) const {
  Params scratch;
  const Params* v = Member(*this, key, scratch);
  if (v == nullptr || v->is_null()) return default_value;
  return v->AsDouble();
}

absl::StatusOr<int64_t> Params::GetInt(std::string_view key, int64_t default_value) const {
  Params scratch;
  const Params* v = Member(*this, key, scratch);
  if (v == nullptr || v->is_null()) return default_value;
  return v->AsInt();
}

absl::StatusOr<bool> Params::GetBool(std::string_view key, bool default_value) const {
  Params scratch;
  const Params* v = Member(*this, key, scratch);
  if (v == nullptr || v->is_null()) return default_value;
  return v->AsBool();
}

absl::StatusOr<std::string> Params::GetString(std::string_view key, std::string default_value) const {
  Params scratch;
  const Params* v = Member(*this, key, scratch);
  if (v == nullptr || v->is_null()) return default_value;
  return v->AsString();
}

absl::StatusOr<int64_t> Params::GetDurationMicros(std::string_view key, int64_t default_value) const {
  Params scratch;
  const Params* v = Member(*this, key, scratch);
  if (v == nullptr || v->is_null()) return default_value;
  return v->AsDurationMicros();
}

absl::StatusOr<int64_t> Params::AsDurationMicros() const {
  if (kind_ != Kind::kScalar) return ConversionError(*this, "a duration");
  auto d = ParseDurationMicros(text_);
  if (!d.ok()) return absl::InvalidArgumentError(Prefix(path_) + std::string(d.status().message()));
  return d;
}

absl::Status Params::CheckKeys(std::initializer_list<std::string_view> known) const {
  return CheckKeys(std::vector<std::string_view>(known));
}

absl::Status Params::CheckKeys(const std::vector<std::string_view>& known) const {
  if (kind_ == Kind::kNull) return absl::OkStatus();
  if (kind_ != Kind::kMap) return ConversionError(*this, "a map of parameters");
  for (const auto& [key, value] : entries_) {
    bool found = false;
    for (std::string_view k : known) found = found || k == key;
    if (found) continue;
    std::string list;
    for (std::string_view k : known) {
      if (!list.empty()) list += ", ";
      list += k;
    }
    std::string hint = known.empty() ? "this plugin takes no parameters" : "known: " + list;
    return absl::InvalidArgumentError(Prefix(path_) + "unknown parameter '" + key + "' (" + hint + ")");
  }
  return absl::OkStatus();
}

std::string Params::ToJson() const {
  std::string out;
  AppendJson(out, *this);
  return out;
}

// Go's time.ParseDuration grammar, [-+]?([0-9]*(\.[0-9]*)?[a-z]+)+ or "0", plus a bare number of
// seconds. Computed in integer nanoseconds like Go (so "1.1s" is exact), then truncated to
// microseconds as Go's Duration.Microseconds() does.
absl::StatusOr<int64_t> ParseDurationMicros(std::string_view text) {
  const std::string_view original = text;
  if (text.empty()) return DurationError(original);
  bool negative = false;
  if (text.front() == '+' || text.front() == '-') {
    negative = text.front() == '-';
    text.remove_prefix(1);
  }
  if (text.empty()) return DurationError(original);

  int64_t total_nanos = 0;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  double seconds = 0;
  if (text == "0") {
    total_nanos = 0;
  } else if (ParseDecimal(text, seconds)) {
    // A bare number is seconds. (ParseDecimal accepts a sign again; reject "--1".)
    if (text.front() == '+' || text.front() == '-') return DurationError(original);
    if (seconds * 1e9 >= static_cast<double>(kMax)) return DurationError(original);
    total_nanos = static_cast<int64_t>(std::llround(seconds * 1e9));
  } else {
    while (!text.empty()) {
      // Integer part.
      int64_t whole = 0;
      size_t i = 0;
      bool overflow = false;
      while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
        if (whole > (kMax - 9) / 10) overflow = true;
        if (!overflow) whole = whole * 10 + (text[i] - '0');
        ++i;
      }
      const bool had_whole = i > 0;
      // Fraction: keep up to 18 digits (more cannot matter at nanosecond resolution).
      int64_t frac = 0;
      int64_t frac_scale = 1;
      bool had_frac = false;
      if (i < text.size() && text[i] == '.') {
        ++i;
        while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
          had_frac = true;
          if (frac_scale < 1'000'000'000'000'000'000) {
            frac = frac * 10 + (text[i] - '0');
            frac_scale *= 10;
          }
          ++i;
        }
      }
      if (!had_whole && !had_frac) return DurationError(original);
      size_t unit_end = i;
      while (unit_end < text.size() && !(text[unit_end] >= '0' && text[unit_end] <= '9') && text[unit_end] != '.') {
        ++unit_end;
      }
      const int64_t unit = UnitNanos(text.substr(i, unit_end - i));
      if (unit == 0 || overflow) return DurationError(original);
      if (whole > kMax / unit) return DurationError(original);
      int64_t nanos = whole * unit;
      // frac / frac_scale of a unit, computed in long double to avoid overflowing frac * unit.
      const auto frac_nanos = static_cast<int64_t>(static_cast<long double>(frac) * unit / frac_scale);
      if (frac_nanos > kMax - nanos) return DurationError(original);
      nanos += frac_nanos;
      if (total_nanos > kMax - nanos) return DurationError(original);
      total_nanos += nanos;
      text.remove_prefix(unit_end);
    }
  }
  if (negative && total_nanos != 0) {
    return absl::InvalidArgumentError("expected a non-negative duration, got '" + std::string(original) + "'");
  }
  return total_nanos / 1000;
}

std::string FormatDurationMicros(int64_t us) {
  // The largest unit that divides exactly, so "1500ms" stays exact rather than "1.5s" rounding
  // through a double, and ParseDurationMicros reads every output back to the same value.
  if (us % 1000000 == 0) return std::to_string(us / 1000000) + "s";
  if (us % 1000 == 0) return std::to_string(us / 1000) + "ms";
  return std::to_string(us) + "us";
}

}  // namespace epp
