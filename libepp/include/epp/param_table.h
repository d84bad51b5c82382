// ParamTable: a plugin's parameters declared once (name, type, default, range, deprecated
// spellings, one line of documentation) and read from that one declaration by everything that
// needs them:
//   - the factory: Read() checks the keys, converts each value, checks its range and fills the
//     plugin's options struct, with errors naming the config path;
//   - `eppctl config effective`, explain and config reloads: Effective() writes every declared
//     parameter back out of the options the plugin runs with (a reload reuses a plugin only when
//     these compare equal, so a parameter missing here would be a change a reload ignores);
//   - `eppctl config plugins`, pyepp and docs/plugin-parameters.md: Schema() describes them,
//     defaults taken from a default-constructed options struct.
//
// A plugin declares its table next to its options struct and builds it once:
//
//   struct Options { int block_size = 16; double weight = 1.0; };
//   const ParamTable<Options>& Table() {
//     static const auto* t = &(*new ParamTable<Options>())
//         .Int("blockSizeTokens", &Options::block_size, Range::Closed(1, 65536), "tokens per block")
//         .Alias("blockSize", "blockSizeTokens")
//         .Number("weight", &Options::weight, Range::AtLeast(0), "multiplier");
//     return *t;
//   }
//   EPP_ASSIGN_OR_RETURN(Options o, Table().Read(params));
//
// Checks that involve several parameters stay in the factory, after Read(). Parameters with a
// shape of their own (label selectors, nested maps) are declared with Custom(): the table still
// knows their name, type and documentation, and the factory's reader and writer do the rest.
// Tables are immutable once built and safe to read from many threads.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "epp/params.h"
#include "epp/status.h"

namespace epp {

enum class ParamType { kBool, kInt, kNumber, kString, kDuration, kStringList, kList, kMap };

// "bool", "int", "number", "string", "duration", "[]string", "list", "map".
std::string_view ParamTypeName(ParamType type);

// A numeric range, each end open, closed or absent. Its text is the one errors print:
// "[1, 65536]", "(0, 1]", ">= 0", "> 0".
struct Range {
  std::optional<double> min, max;
  bool min_open = false, max_open = false;

  static Range Any() { return {}; }
  static Range Closed(double lo, double hi) { return {lo, hi, false, false}; }
  static Range OpenClosed(double lo, double hi) { return {lo, hi, true, false}; }  // (lo, hi]
  static Range AtLeast(double lo) { return {lo, std::nullopt, false, false}; }
  static Range Above(double lo) { return {lo, std::nullopt, true, false}; }
  static Range AtMost(double hi) { return {std::nullopt, hi, false, false}; }

  bool Contains(double v) const;
  bool bounded() const { return min.has_value() || max.has_value(); }
  std::string Text() const;
};

// One declared parameter, as Schema() reports it.
struct ParamInfo {
  std::string name;
  ParamType type = ParamType::kString;
  std::string default_text;             // the default as YAML would spell it; empty for none
  Range range;                          // numbers, integers and durations (microseconds)
  std::vector<std::string> choices;     // strings limited to a set; empty for any
  std::vector<std::string> aliases;     // deprecated spellings that mean the same
  bool deprecated = false;              // the parameter itself is kept for old configs only
  std::string doc;

  // The range as errors print it, durations as durations ("> 0s"); "any" when unbounded.
  std::string RangeText() const;
};

// What a plugin type takes. `declared` is false for types registered without a table (plugins
// written in Python, tests' fakes): nothing is known about their parameters.
struct PluginSchema {
  bool declared = false;
  std::vector<ParamInfo> params;
  // Non-empty when the type also takes keys it does not declare (kept verbatim): what they are.
  std::string other_keys;

  const ParamInfo* Find(std::string_view name) const;
  // {"declared": true, "params": [{"name", "type", "default", "range", "choices", "aliases",
  // "deprecated", "doc"}, ...], "otherKeys": "..."}; absent members are left out.
  Params ToParams() const;
};

namespace param_table_internal {
// The non-template parts of ParamTable, shared by every instantiation.
// Params::CheckKeys over a list known only at run time.
absl::Status CheckKeys(const Params& params, const std::vector<std::string_view>& known);
// The non-null member `key` of `map` with a config path (built in `scratch` when the tree was
// made in code without paths), or nullptr.
const Params* Member(const Params& map, std::string_view key, Params& scratch);
// "<path>: must be in [1, 65536], got 0"; durations print their range as durations.
absl::Status OutOfRange(const Params& value, std::string_view name, const Range& range,
                        ParamType type = ParamType::kNumber);
absl::Status NotAChoice(const Params& value, std::string_view name, const std::vector<std::string>& choices);
std::string ScalarText(const Params& value);  // a scalar or a small list as YAML flow text
// The members of `params` (a map, or null) whose keys are not in `known`, as a map (null when
// there are none); kInvalidArgument when `params` is neither.
absl::StatusOr<Params> OtherKeys(const Params& params, const std::vector<std::string_view>& known);
absl::StatusOr<std::vector<std::string>> StringList(const Params& value);
// How Effective() writes a duration: whole milliseconds as "2000ms" (as plugins always wrote
// them), else "1500us"; ParseDurationMicros reads either back exactly.
std::string DurationText(int64_t micros);
}  // namespace param_table_internal

template <class O>
class ParamTable {
 public:
  // Reads a present value (never null) into the options; errors name value.path().
  using Reader = std::function<absl::Status(const Params& value, O& out)>;
  // Writes the effective value; a null result leaves the parameter out of Effective().
  using Writer = std::function<Params(const O& in)>;

  template <class T>
  ParamTable& Int(std::string_view name, T O::*field, Range range, std::string_view doc) {
    static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>, "Int() takes an integer member");
    ParamInfo info = Info(name, ParamType::kInt, doc);
    info.range = range;
    const std::string key(name);
    return Add(std::move(info),
               [field, range, key](const Params& v, O& o) -> absl::Status {
                 EPP_ASSIGN_OR_RETURN(int64_t x, v.AsInt());
                 if (!range.Contains(static_cast<double>(x)) || x < std::numeric_limits<T>::min() ||
                     x > std::numeric_limits<T>::max())
                   return param_table_internal::OutOfRange(v, key, range);
                 o.*field = static_cast<T>(x);
                 return absl::OkStatus();
               },
               [field](const O& o) { return Params::Int(static_cast<int64_t>(o.*field)); });
  }

  ParamTable& Number(std::string_view name, double O::*field, Range range, std::string_view doc) {
    ParamInfo info = Info(name, ParamType::kNumber, doc);
    info.range = range;
    const std::string key(name);
    return Add(std::move(info),
               [field, range, key](const Params& v, O& o) -> absl::Status {
                 EPP_ASSIGN_OR_RETURN(double x, v.AsDouble());
                 if (!range.Contains(x)) return param_table_internal::OutOfRange(v, key, range);
                 o.*field = x;
                 return absl::OkStatus();
               },
               [field](const O& o) { return Params::Number(o.*field); });
  }

  ParamTable& Bool(std::string_view name, bool O::*field, std::string_view doc) {
    return Add(Info(name, ParamType::kBool, doc),
               [field](const Params& v, O& o) -> absl::Status {
                 EPP_ASSIGN_OR_RETURN(o.*field, v.AsBool());
                 return absl::OkStatus();
               },
               [field](const O& o) { return Params::Bool(o.*field); });
  }

  // A string, limited to `choices` when it is not empty.
  ParamTable& String(std::string_view name, std::string O::*field, std::string_view doc,
                     std::vector<std::string> choices = {}) {
    ParamInfo info = Info(name, ParamType::kString, doc);
    info.choices = choices;
    const std::string key(name);
    return Add(std::move(info),
               [field, choices, key](const Params& v, O& o) -> absl::Status {
                 EPP_ASSIGN_OR_RETURN(std::string s, v.AsString());
                 if (!choices.empty()) {
                   bool ok = false;
                   for (const std::string& c : choices) ok = ok || c == s;
                   if (!ok) return param_table_internal::NotAChoice(v, key, choices);
                 }
                 o.*field = std::move(s);
                 return absl::OkStatus();
               },
               [field](const O& o) { return Params::String(o.*field); });
  }

  // A Go duration ("200ms", "1.5s") or a bare number of seconds, kept in microseconds; `range`
  // is in microseconds too. Written back as milliseconds ("2000ms") when whole.
  ParamTable& Duration(std::string_view name, int64_t O::*micros, Range range, std::string_view doc) {
    ParamInfo info = Info(name, ParamType::kDuration, doc);
    info.range = range;
    const std::string key(name);
    return Add(std::move(info),
               [micros, range, key](const Params& v, O& o) -> absl::Status {
                 EPP_ASSIGN_OR_RETURN(int64_t us, v.AsDurationMicros());
                 if (!range.Contains(static_cast<double>(us)))
                   return param_table_internal::OutOfRange(v, key, range, ParamType::kDuration);
                 o.*micros = us;
                 return absl::OkStatus();
               },
               [micros](const O& o) { return Params::String(param_table_internal::DurationText(o.*micros)); });
  }

  // A list of strings (a single string is taken as a list of one).
  ParamTable& StringList(std::string_view name, std::vector<std::string> O::*field, std::string_view doc) {
    return Add(Info(name, ParamType::kStringList, doc),
               [field](const Params& v, O& o) -> absl::Status {
                 EPP_ASSIGN_OR_RETURN(o.*field, param_table_internal::StringList(v));
                 return absl::OkStatus();
               },
               [field](const O& o) {
                 Params list = Params::List();
                 for (const std::string& s : o.*field) list.Append(Params::String(s));
                 return list;
               });
  }

  // A parameter of its own shape: the table knows its name, type and documentation; `read` and
  // `write` (either may be empty: accepted and ignored / not reported) do the rest.
  ParamTable& Custom(std::string_view name, ParamType type, std::string_view doc, Reader read, Writer write) {
    return Add(Info(name, type, doc), std::move(read), std::move(write));
  }

  // A parameter other configs (GIE's, llm-d's) pass that epp accepts and does not use; it is not
  // reported by Effective(). The factory may still warn when it is present.
  ParamTable& Ignored(std::string_view name, ParamType type, std::string_view doc) {
    return Add(Info(name, type, doc), nullptr, nullptr);
  }

  // Keys the table does not declare are accepted and kept verbatim in `rest` (a map, null when
  // there are none), and Effective() writes them back after the declared ones: for types that
  // only name what epp does anyway, whose parameters belong to another implementation.
  ParamTable& OtherKeys(Params O::*rest, std::string_view doc) {
    // Kept as functions rather than the member pointer, so tables without other keys never
    // form an access to a Params member their options do not have.
    set_rest_ = [rest](O& o, Params p) { o.*rest = std::move(p); };
    get_rest_ = [rest](const O& o) -> const Params& { return o.*rest; };
    other_keys_doc_ = std::string(doc);
    return *this;
  }

  // Effective() leaves the parameter declared last out while it is empty (an empty string or
  // list): optional references to another plugin, which configs omit rather than spell "".
  ParamTable& OmitEmpty() {
    if (fields_.empty() || !fields_.back().write) return *this;
    Writer inner = std::move(fields_.back().write);
    fields_.back().write = [inner](const O& o) {
      Params v = inner(o);
      const bool empty = (v.kind() == Params::Kind::kScalar && v.text().empty()) ||
                         (v.kind() == Params::Kind::kList && v.items().empty()) ||
                         (v.kind() == Params::Kind::kMap && v.entries().empty());
      return empty ? Params() : v;
    };
    return *this;
  }

  // `deprecated` is an older spelling of `name`: read into the same field when `name` is absent.
  ParamTable& Alias(std::string_view deprecated, std::string_view name) {
    for (Field& f : fields_)
      if (f.info.name == name) f.info.aliases.emplace_back(deprecated);
    return *this;
  }

  // Marks the parameter declared last as kept for old configs only (docs and `config plugins`
  // say so; it is still read).
  ParamTable& Deprecated() {
    if (!fields_.empty()) fields_.back().info.deprecated = true;
    return *this;
  }

  // Checks the keys of `params` (null: no parameters given) and reads every present one over
  // `defaults`.
  absl::StatusOr<O> Read(const Params& params, O defaults = O{}) const {
    std::vector<std::string_view> known;
    for (const Field& f : fields_) {
      known.push_back(f.info.name);
      for (const std::string& a : f.info.aliases) known.push_back(a);
    }
    if (!set_rest_) {
      EPP_RETURN_IF_ERROR(param_table_internal::CheckKeys(params, known));
    } else {
      EPP_ASSIGN_OR_RETURN(Params rest, param_table_internal::OtherKeys(params, known));
      set_rest_(defaults, std::move(rest));
    }
    for (const Field& f : fields_) {
      if (!f.read) continue;
      Params scratch;
      const Params* v = param_table_internal::Member(params, f.info.name, scratch);
      for (size_t i = 0; v == nullptr && i < f.info.aliases.size(); ++i)
        v = param_table_internal::Member(params, f.info.aliases[i], scratch);
      if (v != nullptr) EPP_RETURN_IF_ERROR(f.read(*v, defaults));
    }
    return defaults;
  }

  // Every declared parameter with a writer, in declaration order.
  Params Effective(const O& o) const {
    Params p = Params::Map();
    for (const Field& f : fields_) {
      if (!f.write) continue;
      Params v = f.write(o);
      if (!v.is_null()) p.Set(f.info.name, std::move(v));
    }
    if (get_rest_ && get_rest_(o).is_map())
      for (const auto& [key, value] : get_rest_(o).entries()) p.Set(key, value);
    return p;
  }

  PluginSchema Schema() const {
    PluginSchema s;
    s.declared = true;
    s.other_keys = other_keys_doc_;
    const O defaults{};
    for (const Field& f : fields_) {
      ParamInfo info = f.info;
      if (f.write) info.default_text = param_table_internal::ScalarText(f.write(defaults));
      s.params.push_back(std::move(info));
    }
    return s;
  }

 private:
  struct Field {
    ParamInfo info;
    Reader read;
    Writer write;
  };
  static ParamInfo Info(std::string_view name, ParamType type, std::string_view doc) {
    ParamInfo i;
    i.name = std::string(name);
    i.type = type;
    i.doc = std::string(doc);
    return i;
  }
  ParamTable& Add(ParamInfo info, Reader read, Writer write) {
    fields_.push_back(Field{std::move(info), std::move(read), std::move(write)});
    return *this;
  }
  std::vector<Field> fields_;
  std::function<void(O&, Params)> set_rest_;              // OtherKeys(): empty when not taken
  std::function<const Params&(const O&)> get_rest_;
  std::string other_keys_doc_;
};

// The table of a plugin without parameters: Read() accepts only none.
struct NoParams {};
const ParamTable<NoParams>& NoParamsTable();

}  // namespace epp
