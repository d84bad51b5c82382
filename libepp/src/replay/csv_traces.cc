// CSV request traces without prefix information: Azure's LLM inference traces
// (TIMESTAMP,ContextTokens,GeneratedTokens, wall-clock timestamps) and BurstGPT's
// (Timestamp in seconds, Model, Request tokens, Response tokens, ...). Each request's prompt is
// one segment of its own: nothing is shared, as nothing is known to be.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "common/strings.h"
#include "epp/tools/replay.h"
#include "common/os_error.h"

namespace epp {
namespace {

constexpr uint64_t kCsvPromptBase = uint64_t{5} << 60;  // beside workloads.cc's segment id bases

absl::Status Bad(const std::string& m) { return absl::InvalidArgumentError(m); }

std::vector<std::string> SplitCsv(std::string_view line) {
  std::vector<std::string> out;
  for (absl::string_view f : absl::StrSplit(absl::string_view(line.data(), line.size()), ','))
    out.emplace_back(internal::TrimSpace(std::string_view(f.data(), f.size())));
  return out;
}

// "2023-11-16 18:15:46.6805900" (or with 'T'; up to 9 fractional digits) as microseconds since
// the Unix epoch, UTC.
std::optional<int64_t> ParseWallClock(std::string_view s) {
  if (s.size() < 19) return std::nullopt;
  auto digits = [&](size_t at, size_t n, int* out) {
    int v = 0;
    for (size_t i = at; i < at + n; ++i) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(s[i]))) return false;
      v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
  };
  int y, mo, d, h, mi, sec;
  if (!digits(0, 4, &y) || s[4] != '-' || !digits(5, 2, &mo) || s[7] != '-' || !digits(8, 2, &d) ||
      (s[10] != ' ' && s[10] != 'T') || !digits(11, 2, &h) || s[13] != ':' || !digits(14, 2, &mi) || s[16] != ':' ||
      !digits(17, 2, &sec))
    return std::nullopt;
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) return std::nullopt;
  int64_t frac_us = 0;
  size_t i = 19;
  if (i < s.size() && s[i] == '.') {
    ++i;
    int64_t scale = 100000;
    size_t n = 0;
    for (; i < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[i])); ++i, ++n) {
      if (n >= 9) return std::nullopt;
      if (scale > 0) {
        frac_us += (s[i] - '0') * scale;
        scale /= 10;
      }
    }
    if (n == 0) return std::nullopt;
  }
  if (i < s.size() && !(s.substr(i) == "Z" || s.substr(i) == "+00:00")) return std::nullopt;
  const absl::CivilSecond cs(y, mo, d, h, mi, sec);
  if (cs.year() != y || cs.month() != mo || cs.day() != d) return std::nullopt;  // 2023-02-31 normalises
  return absl::ToUnixMicros(absl::FromCivil(cs, absl::UTCTimeZone())) + frac_us;
}

struct CsvRow {
  int line = 0;
  int64_t at_us = 0;  // before scaling and shifting
  std::string model;
  int64_t prompt = 0, output = 0;
};

// Reads `path` with a header naming its columns; `row` turns the fields of one line into a
// CsvRow (an error names file:line and the column). Arrivals start at 0 (the earliest row),
// scaled by time_scale, sorted.
template <typename Row>
absl::StatusOr<std::vector<ReplayRequest>> LoadCsv(const std::string& path, double time_scale, const char* format,
                                                   const std::vector<std::string>& required, Row row) {
  if (!(time_scale > 0) || !std::isfinite(time_scale)) return Bad("time scale must be > 0");
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read trace '", path, "': ", internal::OsReason()));
  std::string line;
  int n = 0;
  std::map<std::string, size_t> columns;
  std::vector<CsvRow> rows;
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (internal::TrimSpace(line).empty()) continue;
    std::vector<std::string> f = SplitCsv(line);
    const std::string where = absl::StrCat(path, ":", n, ": ");
    if (columns.empty()) {
      for (size_t i = 0; i < f.size(); ++i) columns[absl::AsciiStrToLower(f[i])] = i;
      for (const std::string& c : required)
        if (!columns.count(c))
          return Bad(absl::StrCat(where, "not a ", format, " trace header: no column '", c, "' (expected ",
                                  absl::StrJoin(required, ","), ")"));
      continue;
    }
    auto field = [&](const std::string& c) -> const std::string* {
      auto it = columns.find(c);
      return it == columns.end() || it->second >= f.size() ? nullptr : &f[it->second];
    };
    absl::StatusOr<CsvRow> r = row(field, where);
    if (!r.ok()) return r.status();
    r->line = n;
    rows.push_back(*std::move(r));
  }
  if (columns.empty() && n > 0) return Bad(absl::StrCat(path, ": no header line"));
  std::vector<ReplayRequest> out;
  if (rows.empty()) return out;
  int64_t first = rows.front().at_us;
  for (const CsvRow& r : rows) first = std::min(first, r.at_us);
  out.reserve(rows.size());
  for (const CsvRow& r : rows) {
    ReplayRequest q;
    const double us = static_cast<double>(r.at_us - first) * time_scale;
    if (!std::isfinite(us) || us > 4.6e18) return Bad(absl::StrCat(path, ":", r.line, ": arrival time out of range"));
    q.arrival_us = std::llround(us);
    if (!r.model.empty()) q.model = r.model;
    q.prompt_tokens = std::max<int64_t>(1, r.prompt);
    q.output_tokens = std::max<int64_t>(1, r.output);
    q.segments.push_back({kCsvPromptBase + static_cast<uint64_t>(r.line), static_cast<int32_t>(std::min<int64_t>(q.prompt_tokens, INT32_MAX))});
    out.push_back(std::move(q));
  }
  std::stable_sort(out.begin(), out.end(), [](const ReplayRequest& a, const ReplayRequest& b) { return a.arrival_us < b.arrival_us; });
  return out;
}

absl::StatusOr<int64_t> Count(const std::string* v, const std::string& where, const char* column) {
  int64_t x = 0;
  if (!v || !absl::SimpleAtoi(*v, &x) || x < 0 || x > (int64_t{1} << 31))
    return Bad(absl::StrCat(where, column, ": expected a token count (a whole number >= 0), got '", v ? *v : "", "'"));
  return x;
}

}  // namespace

absl::StatusOr<std::vector<ReplayRequest>> LoadAzureTrace(const std::string& path, double time_scale) {
  return LoadCsv(path, time_scale, "Azure LLM inference", {"timestamp", "contexttokens", "generatedtokens"},
                 [](auto field, const std::string& where) -> absl::StatusOr<CsvRow> {
                   CsvRow r;
                   const std::string* ts = field("timestamp");
                   std::optional<int64_t> at = ts ? ParseWallClock(*ts) : std::nullopt;
                   if (!at)
                     return Bad(absl::StrCat(where, "TIMESTAMP: expected a wall-clock time like 2023-11-16 18:15:46.6805900, got '",
                                             ts ? *ts : "", "'"));
                   r.at_us = *at;
                   EPP_ASSIGN_OR_RETURN(r.prompt, Count(field("contexttokens"), where, "ContextTokens"));
                   EPP_ASSIGN_OR_RETURN(r.output, Count(field("generatedtokens"), where, "GeneratedTokens"));
                   return r;
                 });
}

absl::StatusOr<std::vector<ReplayRequest>> LoadBurstGptTrace(const std::string& path, double time_scale) {
  return LoadCsv(path, time_scale, "BurstGPT", {"timestamp", "request tokens", "response tokens"},
                 [](auto field, const std::string& where) -> absl::StatusOr<CsvRow> {
                   CsvRow r;
                   const std::string* ts = field("timestamp");
                   double s = 0;
                   if (!ts || !absl::SimpleAtod(*ts, &s) || !std::isfinite(s) || s < 0 || s > 4.6e12)
                     return Bad(absl::StrCat(where, "Timestamp: expected seconds >= 0, got '", ts ? *ts : "", "'"));
                   r.at_us = std::llround(s * 1e6);
                   if (const std::string* m = field("model")) r.model = *m;
                   EPP_ASSIGN_OR_RETURN(r.prompt, Count(field("request tokens"), where, "Request tokens"));
                   EPP_ASSIGN_OR_RETURN(r.output, Count(field("response tokens"), where, "Response tokens"));
                   return r;
                 });
}

}  // namespace epp
