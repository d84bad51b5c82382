#include "metrics/exposition.h"

#include <charconv>
#include <cmath>

#include "common/strings.h"

namespace epp::internal {

std::string FormatNumber(double v, NumberStyle style) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (style == NumberStyle::kPython) {
    std::string s = ShortestDouble(v);
    if (s.find_first_of(".eE") == std::string::npos) s += ".0";
    return s;
  }
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

void Exposition::Family(std::string_view name, std::string_view type, std::string_view help) {
  out_.append("# HELP ").append(name).append(" ");
  // HELP text escapes only backslash and line feed.
  for (char c : help) {
    if (c == '\\')
      out_ += "\\\\";
    else if (c == '\n')
      out_ += "\\n";
    else
      out_ += c;
  }
  out_.append("\n# TYPE ").append(name).append(" ").append(type).append("\n");
}

void Exposition::Write(std::string_view name, const Labels& labels, const std::string& value, bool with_common) {
  out_.append(name);
  const size_t n = labels.size() + (with_common ? common_.size() : 0);
  if (n > 0) {
    out_ += '{';
    size_t i = 0;
    auto add = [&](const std::pair<std::string, std::string>& l) {
      if (i++) out_ += ',';
      out_.append(l.first).append("=\"");
      for (char c : l.second) {
        if (c == '\\')
          out_ += "\\\\";
        else if (c == '"')
          out_ += "\\\"";
        else if (c == '\n')
          out_ += "\\n";
        else
          out_ += c;
      }
      out_ += '"';
    };
    for (const auto& l : labels) add(l);
    if (with_common)
      for (const auto& l : common_) add(l);
    out_ += '}';
  }
  out_.append(" ").append(value).append("\n");
}

void Exposition::Histogram(std::string_view name, const Labels& labels, std::span<const double> bounds,
                           std::span<const uint64_t> cumulative, uint64_t count, double sum) {
  const std::string n(name);
  Labels with_le = labels;
  with_le.emplace_back("le", "");
  for (size_t i = 0; i < cumulative.size() && i < bounds.size(); ++i) {
    with_le.back().second = Number(bounds[i]);
    Write(n + "_bucket", with_le, style_ == NumberStyle::kPython ? Number(static_cast<double>(cumulative[i]))
                                                                 : std::to_string(cumulative[i]),
          true);
  }
  with_le.back().second = "+Inf";
  const std::string total = style_ == NumberStyle::kPython ? Number(static_cast<double>(count)) : std::to_string(count);
  Write(n + "_bucket", with_le, total, true);
  Write(n + "_count", labels, total, true);
  Write(n + "_sum", labels, Number(sum), true);
}

}  // namespace epp::internal
