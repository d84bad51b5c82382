// MetricSpec parsing: `name` or `name{label=value,label2="value2"}`.
#include <string>

#include "common/strings.h"
#include "epp/metrics.h"

namespace epp {

using internal::TrimSpace;
namespace {

bool ValidName(std::string_view s, bool metric) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (metric && c == ':');
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

absl::Status SpecError(std::string_view text, const std::string& why) {
  return absl::InvalidArgumentError("invalid metric spec '" + std::string(text) + "': " + why);
}

}  // namespace

absl::StatusOr<MetricSpec> MetricSpec::Parse(std::string_view text) {
  std::string_view s = TrimSpace(text);
  if (s.empty()) return SpecError(text, "empty");
  MetricSpec spec;
  size_t brace = s.find('{');
  std::string_view name = TrimSpace(s.substr(0, brace));
  if (!ValidName(name, true)) return SpecError(text, "metric name must match [a-zA-Z_:][a-zA-Z0-9_:]*");
  spec.name = std::string(name);
  if (brace == std::string_view::npos) return spec;
  if (s.back() != '}') return SpecError(text, "missing closing '}'");
  std::string_view body = s.substr(brace + 1, s.size() - brace - 2);
  size_t i = 0;
  while (i < body.size()) {
    size_t eq = body.find('=', i);
    if (eq == std::string_view::npos) {
      if (TrimSpace(body.substr(i)).empty()) break;
      return SpecError(text, "expected label=value");
    }
    std::string_view lname = TrimSpace(body.substr(i, eq - i));
    if (!lname.empty() && (lname.back() == '!' || lname.back() == '=' || lname.back() == '~'))
      return SpecError(text, "only '=' matchers are supported");
    if (!ValidName(lname, false)) return SpecError(text, "invalid label name '" + std::string(lname) + "'");
    i = eq + 1;
    if (i < body.size() && (body[i] == '~' || body[i] == '=')) return SpecError(text, "only '=' matchers are supported");
    while (i < body.size() && (body[i] == ' ' || body[i] == '\t')) ++i;
    std::string value;
    if (i < body.size() && body[i] == '"') {
      ++i;
      while (i < body.size() && body[i] != '"') {
        if (body[i] == '\\' && i + 1 < body.size()) {
          char c = body[++i];
          value.push_back(c == 'n' ? '\n' : c);
        } else {
          value.push_back(body[i]);
        }
        ++i;
      }
      if (i >= body.size()) return SpecError(text, "unterminated quoted value");
      ++i;
      while (i < body.size() && (body[i] == ' ' || body[i] == '\t')) ++i;
      if (i < body.size() && body[i] != ',') return SpecError(text, "expected ',' after a quoted value");
    } else {
      size_t comma = body.find(',', i);
      value = std::string(TrimSpace(body.substr(i, comma == std::string_view::npos ? std::string_view::npos : comma - i)));
      i = comma == std::string_view::npos ? body.size() : comma;
    }
    if (i < body.size() && body[i] == ',') ++i;
    if (lname.substr(0, 2) == "__") continue;  // pseudo-labels such as __name__ are dropped
    spec.labels.emplace_back(std::string(lname), std::move(value));
  }
  return spec;
}

std::string MetricSpec::ToString() const {
  std::string out = name;
  if (labels.empty()) return out;
  out += '{';
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i) out += ',';
    out += labels[i].first + "=\"" + labels[i].second + "\"";
  }
  out += '}';
  return out;
}

bool MetricSpec::Matches(const Sample& sample) const {
  if (sample.name != name) return false;
  for (const auto& [k, v] : labels) {
    auto got = sample.label(k);
    if (!got || *got != v) return false;
  }
  return true;
}

}  // namespace epp
