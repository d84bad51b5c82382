// Small string helpers shared by libepp's sources (private: not part of the public API).
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace epp::internal {

// `s` with &, <, > and both quotes written as entities (HTML and XML text and attribute values).
// `quote` and `apostrophe` are the spellings (Jinja's markupsafe writes "&#34;", HTML "&quot;");
// with `controls_to_space`, control characters other than tab and LF become spaces (XML 1.0
// allows none of them).
inline std::string EscapeMarkup(std::string_view s, std::string_view quote = "&quot;", std::string_view apostrophe = "&#39;",
                                bool controls_to_space = false) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += quote; break;
      case '\'': out += apostrophe; break;
      default:
        if (controls_to_space && static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') out += ' ';
        else out += c;
    }
  }
  return out;
}

// `s` without leading and trailing spaces, tabs, CR and LF.
// `s` with %XX escapes decoded (either case of hex digit); nullopt for a '%' not followed by two
// hex digits. For URL parts and the OTel variables' key=value lists.
inline std::optional<std::string> PercentDecode(std::string_view s) {
  const auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    const int hi = i + 1 < s.size() ? hex(s[i + 1]) : -1;
    const int lo = i + 2 < s.size() ? hex(s[i + 2]) : -1;
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

inline std::string_view TrimSpace(std::string_view s) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// The shortest "%g" spelling of `v` that reads back as exactly `v` ("0.25", "1e+06", "3").
inline std::string ShortestDouble(double v) {
  char buf[32];
  if (!std::isfinite(v)) {
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
  }
  // The fewest significant digits that read back as `v` (to_chars' shortest round trip), then
  // %g at that precision: one conversion each instead of trying precisions 1..17 in turn.
  char sci[40];
  const std::to_chars_result r = std::to_chars(sci, sci + sizeof sci, v, std::chars_format::scientific);
  int digits = 0;
  for (const char* p = sci; p < r.ptr && *p != 'e'; ++p) digits += *p >= '0' && *p <= '9';
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

// `v` for humans: at most 4 significant digits ("0.9231", "2.76", "1200", "1.5e+07").
inline std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// The first 160 bytes of an HTTP body on one line, "..." when cut: for error messages that quote
// what a server answered.
inline std::string BodySnippet(std::string_view body) {
  std::string s(body.substr(0, 160));
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  if (body.size() > 160) s += "...";
  return s;
}

// Levenshtein distance between `a` and `b` (insertions, deletions, substitutions; bytes).
inline size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min(std::min(row[j] + 1, row[j - 1] + 1), diagonal + (a[i - 1] == b[j - 1] ? 0 : 1));
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The candidate closest to `word` by EditDistance, when it is close enough to be a typo of it
// (at most 2 edits, or a quarter of the word's length for long words); "" otherwise. Ties go to
// the earlier candidate.
template <typename Range>
std::string Nearest(std::string_view word, const Range& candidates) {
  const size_t limit = std::max<size_t>(2, word.size() / 4);
  std::string best;
  size_t best_d = limit + 1;
  for (const auto& c : candidates) {
    const std::string_view cv(c);
    if (cv == word) continue;
    const size_t d = EditDistance(word, cv);
    if (d < best_d) {
      best_d = d;
      best = std::string(cv);
    }
  }
  return best;
}

}  // namespace epp::internal
