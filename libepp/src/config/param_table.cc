// The non-template half of ParamTable (epp/param_table.h): key checks, range and choice errors,
// and how a schema is written out for `eppctl config plugins`, pyepp and the docs.
#include "epp/param_table.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace epp {
namespace {

// Range ends print as integers when they are integers ("65536", not "65536.000000").
std::string Num(double v) {
  if (std::isfinite(v) && std::floor(v) == v && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string RangeText(const Range& r, bool duration) {
  auto end = [duration](double v) { return duration ? FormatDurationMicros(static_cast<int64_t>(v)) : Num(v); };
  if (r.min && r.max)
    return absl::StrCat(r.min_open ? "(" : "[", end(*r.min), ", ", end(*r.max), r.max_open ? ")" : "]");
  if (r.min) return absl::StrCat(r.min_open ? "> " : ">= ", end(*r.min));
  if (r.max) return absl::StrCat(r.max_open ? "< " : "<= ", end(*r.max));
  return "any";
}

}  // namespace

std::string_view ParamTypeName(ParamType type) {
  switch (type) {
    case ParamType::kBool: return "bool";
    case ParamType::kInt: return "int";
    case ParamType::kNumber: return "number";
    case ParamType::kString: return "string";
    case ParamType::kDuration: return "duration";
    case ParamType::kStringList: return "[]string";
    case ParamType::kList: return "list";
    case ParamType::kMap: return "map";
  }
  return "?";
}

bool Range::Contains(double v) const {
  if (std::isnan(v)) return !bounded();
  if (min && (min_open ? !(v > *min) : !(v >= *min))) return false;
  if (max && (max_open ? !(v < *max) : !(v <= *max))) return false;
  return true;
}

std::string Range::Text() const { return RangeText(*this, false); }

std::string ParamInfo::RangeText() const { return epp::RangeText(range, type == ParamType::kDuration); }

const ParamInfo* PluginSchema::Find(std::string_view name) const {
  for (const ParamInfo& p : params)
    if (p.name == name) return &p;
  return nullptr;
}

Params PluginSchema::ToParams() const {
  Params out = Params::Map();
  out.Set("declared", Params::Bool(declared));
  Params list = Params::List();
  for (const ParamInfo& p : params) {
    Params m = Params::Map();
    m.Set("name", Params::String(p.name));
    m.Set("type", Params::String(std::string(ParamTypeName(p.type))));
    if (!p.default_text.empty()) m.Set("default", Params::String(p.default_text));
    if (p.range.bounded()) m.Set("range", Params::String(p.RangeText()));
    if (!p.choices.empty()) {
      Params c = Params::List();
      for (const std::string& s : p.choices) c.Append(Params::String(s));
      m.Set("choices", std::move(c));
    }
    if (!p.aliases.empty()) {
      Params a = Params::List();
      for (const std::string& s : p.aliases) a.Append(Params::String(s));
      m.Set("aliases", std::move(a));
    }
    if (p.deprecated) m.Set("deprecated", Params::Bool(true));
    if (!p.doc.empty()) m.Set("doc", Params::String(p.doc));
    list.Append(std::move(m));
  }
  out.Set("params", std::move(list));
  if (!other_keys.empty()) out.Set("otherKeys", Params::String(other_keys));
  return out;
}

namespace param_table_internal {

absl::Status CheckKeys(const Params& params, const std::vector<std::string_view>& known) {
  return params.CheckKeys(known);
}

const Params* Member(const Params& map, std::string_view key, Params& scratch) {
  const Params* v = map.Find(key);
  if (v == nullptr || v->is_null()) return nullptr;
  if (!v->path().empty()) return v;
  scratch = *v;
  scratch.SetPath(map.path().empty() ? std::string(key) : map.path() + "." + std::string(key));
  return &scratch;
}

absl::Status OutOfRange(const Params& value, std::string_view name, const Range& range, ParamType type) {
  const std::string where = value.path().empty() ? std::string(name) : value.path();
  return absl::InvalidArgumentError(absl::StrCat(where, ": must be ", range.min && range.max ? "in " : "",
                                                 RangeText(range, type == ParamType::kDuration), ", got ", value.text()));
}

absl::Status NotAChoice(const Params& value, std::string_view name, const std::vector<std::string>& choices) {
  const std::string where = value.path().empty() ? std::string(name) : value.path();
  // "expected drain or firstToken, got 'aic'"; longer lists as "expected one of a, b, c, ...".
  const std::string want = choices.size() == 2 ? absl::StrCat(choices[0], " or ", choices[1])
                                               : absl::StrCat("one of ", absl::StrJoin(choices, ", "));
  return absl::InvalidArgumentError(absl::StrCat(where, ": expected ", want, ", got '", value.text(), "'"));
}

absl::StatusOr<Params> OtherKeys(const Params& params, const std::vector<std::string_view>& known) {
  if (params.is_null()) return Params();
  if (!params.is_map()) {
    EPP_RETURN_IF_ERROR(params.CheckKeys(known));  // "expected a map of parameters"
    return Params();
  }
  Params rest = Params::Map();
  for (const auto& [key, value] : params.entries()) {
    bool declared = false;
    for (std::string_view k : known) declared = declared || k == key;
    if (!declared) rest.Set(key, value);
  }
  if (rest.entries().empty()) return Params();
  return rest;
}

std::string DurationText(int64_t micros) {
  if (micros % 1000 == 0) return std::to_string(micros / 1000) + "ms";
  return std::to_string(micros) + "us";
}

std::string ScalarText(const Params& value) {
  switch (value.kind()) {
    case Params::Kind::kNull: return {};
    case Params::Kind::kScalar: {
      if (value.text().empty()) return "\"\"";
      // Numbers are written shortest-first ("3e+04"); a reader of the docs wants 30000.
      if (!value.quoted() && value.text().find("e+") != std::string::npos) {
        absl::StatusOr<double> d = value.AsDouble();
        if (d.ok()) return Num(*d);
      }
      return value.text();
    }
    default: return value.ToJson();
  }
}

absl::StatusOr<std::vector<std::string>> StringList(const Params& value) {
  std::vector<std::string> out;
  if (value.kind() == Params::Kind::kScalar) {
    out.push_back(value.text());
    return out;
  }
  if (value.kind() != Params::Kind::kList)
    return absl::InvalidArgumentError(absl::StrCat(value.path(), ": expected a list of strings"));
  for (const Params& item : value.items()) {
    EPP_ASSIGN_OR_RETURN(std::string s, item.AsString());
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace param_table_internal

const ParamTable<NoParams>& NoParamsTable() {
  static const ParamTable<NoParams>* table = new ParamTable<NoParams>();
  return *table;
}

}  // namespace epp
