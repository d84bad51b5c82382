// Jinja filters (`value | name(args)`): one table, kFilters, names every filter epp implements.
// The parser (IsJinjaFilter) rejects any other name when the template loads; the renderer
// (ApplyFilter) dispatches through the same table. Each filter follows Python Jinja2's filter of
// that name, as transformers' chat template environment configures it (no autoescaping; tojson
// replaced by json.dumps with ensure_ascii=False), since that is what model servers render with.
#include <utf8proc.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "jinja_eval_impl.h"

namespace epp::jinja {
namespace {

// name, the member that implements it, whether map('name') may apply it. Sorted by name.
constexpr JinjaFilter kFilters[] = {
    {"abs",        &Renderer::FilterAbs,             true},
    {"capitalize", &Renderer::FilterCase,            true},
    {"count",      &Renderer::FilterLength,          true},
    {"d",          &Renderer::FilterDefault,         true},
    {"default",    &Renderer::FilterDefault,         true},
    {"dictsort",   &Renderer::FilterDictSort,        false},
    {"e",          &Renderer::FilterEscape,          false},
    {"escape",     &Renderer::FilterEscape,          false},
    {"first",      &Renderer::FilterFirstLast,       true},
    {"float",      &Renderer::FilterNumber,          true},
    {"indent",     &Renderer::FilterIndent,          false},
    {"int",        &Renderer::FilterNumber,          true},
    {"items",      &Renderer::FilterItems,           false},
    {"join",       &Renderer::FilterJoin,            true},
    {"last",       &Renderer::FilterFirstLast,       true},
    {"length",     &Renderer::FilterLength,          true},
    {"list",       &Renderer::FilterList,            true},
    {"lower",      &Renderer::FilterCase,            true},
    {"map",        &Renderer::FilterMap,             false},
    {"max",        &Renderer::FilterMinMaxSum,       false},
    {"min",        &Renderer::FilterMinMaxSum,       false},
    {"reject",     &Renderer::FilterSelect,          false},
    {"rejectattr", &Renderer::FilterSelect,          false},
    {"replace",    &Renderer::FilterReplace,         false},
    {"reverse",    &Renderer::FilterReverse,         true},
    {"round",      &Renderer::FilterRound,           false},
    {"safe",       &Renderer::FilterSafe,            true},
    {"select",     &Renderer::FilterSelect,          false},
    {"selectattr", &Renderer::FilterSelect,          false},
    {"sort",       &Renderer::FilterSort,            false},
    {"string",     &Renderer::FilterString,          true},
    {"sum",        &Renderer::FilterMinMaxSum,       false},
    {"title",      &Renderer::FilterCase,            true},
    {"tojson",     &Renderer::FilterToJson,          true},
    {"trim",       &Renderer::FilterTrim,            true},
    {"unique",     &Renderer::FilterUnique,          true},
    {"upper",      &Renderer::FilterCase,            true},
    {"wordcount",  &Renderer::FilterWordCount,       false},
};
static_assert(SortedByName(kFilters), "kFilters must stay sorted by name (FindJinjaFilter binary-searches it)");

// Jinja's title filter: each word's first character upper, the rest lower; words begin after
// whitespace and -({[<.
std::string JinjaTitle(std::string_view s) {
  std::string out;
  bool start = true;
  for (size_t i = 0; i < s.size();) {
    size_t len;
    int32_t cp = DecodeAt(s, i, len);
    i += len;
    const bool sep = PySpace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
    AppendUtf8(sep ? cp : start ? utf8proc_toupper(cp) : utf8proc_tolower(cp), out);
    start = sep;
  }
  return out;
}

}  // namespace

const JinjaFilter* FindJinjaFilter(std::string_view name) { return FindByName(kFilters, name); }
bool IsJinjaFilter(std::string_view name) { return FindJinjaFilter(name) != nullptr; }

// ---- dispatch ----
// `value | name(args)`: the value, then the arguments, are evaluated first, as Jinja2 does.
absl::StatusOr<Value> Renderer::EvalFilter(const Expr& e) {
  EPP_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
  EPP_ASSIGN_OR_RETURN(Args a, EvalArgs(e, 1));
  return ApplyFilter(e.name, v, a, e.line);
}

// The parser admits only names in kFilters, so the miss is a safeguard, not a path templates take.
absl::StatusOr<Value> Renderer::ApplyFilter(std::string_view f, const Value& v, const Args& a, int line) {
  const JinjaFilter* filter = FindJinjaFilter(f);
  if (filter == nullptr) return FilterError(f, line, "is not supported by epp");
  return (this->*filter->fn)(f, v, a, line);
}

// map('name', ...): a filter named at render time, limited to those marked in_map.
absl::StatusOr<Value> Renderer::ApplyNamedFilter(const std::string& name, const Value& v, const Args& a, int line) {
  const JinjaFilter* filter = FindJinjaFilter(name);
  if (filter != nullptr && filter->in_map) return (this->*filter->fn)(filter->name, v, a, line);
  return Error(line, Cat("map('", name, "'): the filter is not supported by epp in map()"));
}

absl::Status Renderer::FilterError(std::string_view f, int line, std::string_view why) const {
  return Error(line, Cat("filter '", f, "': ", why));
}

// attribute="a.b.0" as Jinja's make_attrgetter reads it.
absl::StatusOr<Value> Renderer::AttrPath(const Value& v, const Value& path, int line) const {
  if (path.kind == Value::kInt) return GetItem(v, path, line);
  if (path.kind != Value::kStr) return Error(line, "attribute must be a string");
  Value cur = v;
  std::string_view p = path.s;
  while (true) {
    size_t dot = p.find('.');
    std::string_view part = p.substr(0, dot);
    int64_t idx;
    auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), idx);
    if (ec == std::errc() && ptr == part.data() + part.size()) {
      EPP_ASSIGN_OR_RETURN(cur, GetItem(cur, Value::Int(idx), line));
    } else {
      if (cur.is_undefined()) return cur;
      EPP_ASSIGN_OR_RETURN(cur, GetItem(cur, Value::View(part), line));
    }
    if (dot == std::string_view::npos) return cur;
    p.remove_prefix(dot + 1);
  }
}

// ---- the filters, in kFilters' entries ----

// default(value, default_value='', boolean=False), alias d: the default replaces an undefined
// value, or with boolean=true any falsy one (Jinja2's do_default).
absl::StatusOr<Value> Renderer::FilterDefault(std::string_view /*f*/, const Value& v, const Args& a, int /*line*/) {
  const Value* dv = a.Get(0, "default_value");
  const Value* boolean = a.Get(1, "boolean");
  const bool use = v.is_undefined() || (boolean && Truthy(*boolean) && !Truthy(v));
  if (use) return dv ? *dv : Value::View("");
  return v;
}

// safe: marks markup as safe. Chat templates render without autoescaping
// (transformers' environment), so the value passes unchanged.
absl::StatusOr<Value> Renderer::FilterSafe(std::string_view /*f*/, const Value& v, const Args& /*a*/, int /*line*/) {
  return v;
}

// trim(value, chars=None): str.strip(chars) of the value's text (Jinja2's do_trim); a
// string stays a view of its bytes.
absl::StatusOr<Value> Renderer::FilterTrim(std::string_view /*f*/, const Value& v, const Args& a, int line) {
  const Value* chars = a.Get(0, "chars");
  std::string_view cs;
  if (chars && chars->kind == Value::kStr) cs = chars->s;
  if (v.kind == Value::kStr) {
    Value r = v;
    r.s = StripView(v.s, true, true, chars && chars->kind == Value::kStr ? &cs : nullptr);
    return r;
  }
  EPP_ASSIGN_OR_RETURN(std::string s, Str(v, line));
  return Value::Str(std::string(StripView(s, true, true, chars && chars->kind == Value::kStr ? &cs : nullptr)));
}

// length, alias count: Python's len() (code points for a str).
absl::StatusOr<Value> Renderer::FilterLength(std::string_view /*f*/, const Value& v, const Args& /*a*/, int line) {
  EPP_ASSIGN_OR_RETURN(int64_t n, Length(v, line));
  return Value::Int(n);
}

// tojson(indent=None): transformers replaces Jinja's tojson with json.dumps(x,
// ensure_ascii=False, indent=indent), so keys keep their order and text stays unescaped;
// ToJson (jinja_value.cc) writes what json.dumps writes.
absl::StatusOr<Value> Renderer::FilterToJson(std::string_view f, const Value& v, const Args& a, int line) {
  auto bad = [&](std::string_view why) { return FilterError(f, line, why); };
  int indent = -1;
  if (const Value* ind = a.Get(0, "indent")) {
    if (ind->kind == Value::kInt) indent = static_cast<int>(std::clamp<int64_t>(ind->i, 0, 64));
    else if (ind->kind != Value::kNone) return bad("indent must be an integer");
  }
  std::string out;
  absl::Status st = ToJson(v, indent, out);
  if (!st.ok()) return Error(line, std::string(st.message()));
  return Value::Str(std::move(out));
}

// string: str(value) (Jinja2's soft_str); a str is returned as it is.
absl::StatusOr<Value> Renderer::FilterString(std::string_view /*f*/, const Value& v, const Args& /*a*/, int line) {
  if (v.kind == Value::kStr) return v;
  EPP_ASSIGN_OR_RETURN(std::string s, Str(v, line));
  return Value::Str(std::move(s));
}

// upper, lower, capitalize, title of the value's text. upper / lower / capitalize are
// Python's str methods; title is Jinja2's own (JinjaTitle below), not str.title.
absl::StatusOr<Value> Renderer::FilterCase(std::string_view f, const Value& v, const Args& /*a*/, int line) {
  EPP_ASSIGN_OR_RETURN(std::string s, Str(v, line));
  if (f == "upper" || f == "lower") return Value::Str(MapCase(s, f == "upper"));
  if (f == "capitalize") return Value::Str(Capitalize(s));
  return Value::Str(JinjaTitle(s));
}

// replace(old, new, count=None): str.replace of the value's text (Jinja2's do_replace); the
// result's size is checked before it is built.
absl::StatusOr<Value> Renderer::FilterReplace(std::string_view f, const Value& v, const Args& a, int line) {
  auto bad = [&](std::string_view why) { return FilterError(f, line, why); };
  EPP_ASSIGN_OR_RETURN(std::string s, Str(v, line));
  const Value* from = a.Get(0, "old");
  const Value* to = a.Get(1, "new");
  if (!from || !to) return bad("needs old and new");
  EPP_ASSIGN_OR_RETURN(std::string fs, Str(*from, line));
  EPP_ASSIGN_OR_RETURN(std::string ts, Str(*to, line));
  const Value* cnt = a.Get(2, "count");
  EPP_RETURN_IF_ERROR(CheckReplace(s, fs, ts, line));
  return Value::Str(Replace(s, fs, ts, cnt && cnt->kind == Value::kInt ? cnt->i : -1));
}

// list: list(value): a sequence's items, a mapping's keys, a string's characters.
absl::StatusOr<Value> Renderer::FilterList(std::string_view /*f*/, const Value& v, const Args& /*a*/, int line) {
  EPP_ASSIGN_OR_RETURN(List items, Items(v, line));
  return Value::OfList(std::move(items));
}

// first, last: an item of the sequence; an empty one gives Undefined, as in Jinja2.
absl::StatusOr<Value> Renderer::FilterFirstLast(std::string_view f, const Value& v, const Args& /*a*/, int line) {
  EPP_ASSIGN_OR_RETURN(List items, Items(v, line));
  if (items.empty()) return Value::OwnedUndefined(Cat("the ", f, " item of an empty sequence"));
  return f == "first" ? items.front() : items.back();
}

// reverse: a string reversed by code point, other iterables as a reversed list.
absl::StatusOr<Value> Renderer::FilterReverse(std::string_view /*f*/, const Value& v, const Args& /*a*/, int line) {
  if (v.kind == Value::kStr) {
    std::vector<size_t> o = CpOffsets(v.s);
    std::string s;
    for (size_t k = o.size() - 1; k-- > 0;) s.append(v.s.substr(o[k], o[k + 1] - o[k]));
    return Value::Str(std::move(s));
  }
  EPP_ASSIGN_OR_RETURN(List items, Items(v, line));
  std::reverse(items.begin(), items.end());
  return Value::OfList(std::move(items));
}

// join(d='', attribute=None): str() of each item (or of its attribute path) joined by d
// (Jinja2's do_join).
absl::StatusOr<Value> Renderer::FilterJoin(std::string_view /*f*/, const Value& v, const Args& a, int line) {
  EPP_ASSIGN_OR_RETURN(List items, Items(v, line));
  std::string sep;
  if (const Value* d = a.Get(0, "d")) {
    EPP_ASSIGN_OR_RETURN(sep, Str(*d, line));
  }
  const Value* attr = a.Get(1, "attribute");
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    Value x = items[i];
    if (attr) {
      EPP_ASSIGN_OR_RETURN(x, AttrPath(x, *attr, line));
    }
    EPP_RETURN_IF_ERROR(AppendStr(x, out, line));
  }
  return Value::Str(std::move(out));
}

// items: a mapping's (key, value) pairs; Undefined gives an empty list (Jinja2 3.1's items).
absl::StatusOr<Value> Renderer::FilterItems(std::string_view f, const Value& v, const Args& /*a*/, int line) {
  auto bad = [&](std::string_view why) { return FilterError(f, line, why); };
  if (v.is_undefined()) return Value::OfList({});
  if (!v.is_mapping()) return bad("needs a mapping");
  List out;
  for (auto& [k, x] : MapItems(v)) out.push_back(Value::OfTuple({Value::Str(k), x}));
  return Value::OfList(std::move(out));
}

// dictsort: (key, value) pairs sorted by key, ignoring case (Jinja2's defaults:
// case_sensitive=False, by='key'); other arguments are not read.
absl::StatusOr<Value> Renderer::FilterDictSort(std::string_view f, const Value& v, const Args& /*a*/, int line) {
  auto bad = [&](std::string_view why) { return FilterError(f, line, why); };
  if (!v.is_mapping()) return bad("needs a mapping");
  auto items = MapItems(v);
  std::stable_sort(items.begin(), items.end(), [](const auto& x, const auto& y) { return MapCase(x.first, 0) < MapCase(y.first, 0); });
  List out;
  for (auto& [k, x] : items) out.push_back(Value::OfTuple({Value::Str(k), x}));
  return Value::OfList(std::move(out));
}

// map(attribute=..., default=...) reads an attribute path of each item; map('name', ...)
// applies a filter to each item (only those marked in_map in kFilters), as Jinja2's do_map.
absl::StatusOr<Value> Renderer::FilterMap(std::string_view f, const Value& v, const Args& a, int line) {
  auto bad = [&](std::string_view why) { return FilterError(f, line, why); };
  EPP_ASSIGN_OR_RETURN(List items, Items(v, line));
  List out;
  if (const Value* attr = a.Get(99, "attribute")) {
    const Value* dflt = a.Get(99, "default");
    for (const Value& x : items) {
      EPP_ASSIGN_OR_RETURN(Value y, AttrPath(x, *attr, line));
      out.push_back(y.is_undefined() && dflt ? *dflt : y);
    }
    return Value::OfList(std::move(out));
  }
  if (a.pos.empty() || a.pos[0].kind != Value::kStr) return bad("needs a filter name or attribute=");
  std::string name(a.pos[0].s);
  Args rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  for (const Value& x : items) {
    EPP_ASSIGN_OR_RETURN(Value y, ApplyNamedFilter(name, x, rest, line));
    out.push_back(std::move(y));
  }
  return Value::OfList(std::move(out));
}

// select / reject(test, args...) keep the items that pass / fail a test (truthiness when
// no test is named); selectattr / rejectattr(attr, test, args...) test an attribute path of
// each item instead (Jinja2's select_or_reject).
absl::StatusOr<Value> Renderer::FilterSelect(std::string_view f, const Value& v, const Args& a, int line) {
  auto bad = [&](std::string_view why) { return FilterError(f, line, why); };
  EPP_ASSIGN_OR_RETURN(List items, Items(v, line));
  const bool attr = f == "selectattr" || f == "rejectattr";
  const bool keep_if = f == "select" || f == "selectattr";
  size_t at = 0;
  const Value* attr_name = nullptr;
  if (attr) {
    if (a.pos.empty()) return bad("needs an attribute name");
    attr_name = &a.pos[0];
    at = 1;
  }
  std::string test;
  if (a.pos.size() > at) {
    if (a.pos[at].kind != Value::kStr) return bad("the test name must be a string");
    test = std::string(a.pos[at].s);
  }
  Args targs;
  if (a.pos.size() > at + 1) targs.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(at) + 1, a.pos.end());
  List out;
  for (const Value& x : items) {
    Value subject = x;
    if (attr_name) {
      EPP_ASSIGN_OR_RETURN(subject, AttrPath(x, *attr_name, line));
    }
    bool r;
    if (test.empty()) {
      r = Truthy(subject);
    } else {
      EPP_ASSIGN_OR_RETURN(r, ApplyTest(test, subject, targs, line));
    }
    if (r == keep_if) out.push_back(x);
  }
  return Value::OfList(std::move(out));
}

// unique: the first of each group of equal items, in order. Items compare with Python's ==
// (case-sensitive; Jinja2 defaults to case_sensitive=False).
absl::StatusOr<Value> Renderer::FilterUnique(std::string_view /*f*/, const Value& v, const Args& /*a*/, int line) {
  EPP_ASSIGN_OR_RETURN(List items, Items(v, line));
  List out;
  for (const Value& x : items)
    if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return Equal(x, y); })) out.push_back(x);
  return Value::OfList(std::move(out));
}

// sort(reverse=False, case_sensitive=False, attribute=None): a stable sort, strings compared
// lower-cased (Jinja2's default); mixed types fail as Python's < does.
absl::StatusOr<Value> Renderer::FilterSort(std::string_view /*f*/, const Value& v, const Args& a, int line) {
  EPP_ASSIGN_OR_RETURN(List items, Items(v, line));
  const Value* rev = a.Get(0, "reverse");
  const Value* attr = a.Get(2, "attribute");
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& x : items) {
    Value k = x;
    if (attr) {
      EPP_ASSIGN_OR_RETURN(k, AttrPath(x, *attr, line));
    }
    if (k.kind == Value::kStr) k = Value::Str(MapCase(k.s, 0));  // case_sensitive=False
    keyed.emplace_back(k, x);
  }
  absl::Status st;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    absl::StatusOr<int> o = Order(x.first, y.first, line);
    if (!o.ok()) {
      st = o.status();
      return false;
    }
    return *o < 0;
  });
  EPP_RETURN_IF_ERROR(st);
  if (rev && Truthy(*rev)) std::reverse(keyed.begin(), keyed.end());
  List out;
  for (auto& [k, x] : keyed) out.push_back(std::move(x));
  return Value::OfList(std::move(out));
}

// min, max: the least / greatest item by Python's < (Undefined when empty); sum(attribute=None,
// start=0): start + each item (or its attribute path), with Python's +.
absl::StatusOr<Value> Renderer::FilterMinMaxSum(std::string_view f, const Value& v, const Args& a, int line) {
  EPP_ASSIGN_OR_RETURN(List items, Items(v, line));
  if (f == "sum") {
    Value acc = Value::Int(0);
    if (const Value* start = a.Get(1, "start")) acc = *start;
    const Value* attr = a.Get(0, "attribute");
    for (const Value& x : items) {
      Value y = x;
      if (attr) {
        EPP_ASSIGN_OR_RETURN(y, AttrPath(x, *attr, line));
      }
      EPP_ASSIGN_OR_RETURN(acc, Arith("+", acc, y, line));
    }
    return acc;
  }
  if (items.empty()) return Value::OwnedUndefined(Cat(f, " of an empty sequence"));
  Value best = items[0];
  for (size_t i = 1; i < items.size(); ++i) {
    EPP_ASSIGN_OR_RETURN(int o, Order(items[i], best, line));
    if (f == "min" ? o < 0 : o > 0) best = items[i];
  }
  return best;
}

// abs: Python's abs() of an int or a float.
absl::StatusOr<Value> Renderer::FilterAbs(std::string_view f, const Value& v, const Args& /*a*/, int line) {
  auto bad = [&](std::string_view why) { return FilterError(f, line, why); };
  if (v.kind == Value::kInt) return Value::Int(v.i < 0 ? -v.i : v.i);
  if (v.kind == Value::kFloat) return Value::Float(std::fabs(v.f));
  return bad(Cat("bad operand type for abs(): '", TypeName(v), "'"));
}

// int(default=0), float(default=0.0): Jinja2's do_int / do_float. Numbers convert, a
// string is parsed (surrounding whitespace ignored; int accepts a float's text and truncates),
// anything else or a failed parse gives the default.
absl::StatusOr<Value> Renderer::FilterNumber(std::string_view f, const Value& v, const Args& a, int /*line*/) {
  const Value* dflt = a.Get(0, "default");
  Value fallback = dflt ? *dflt : (f == "int" ? Value::Int(0) : Value::Float(0));
  double d = 0;
  if (v.kind == Value::kInt || v.kind == Value::kBool) d = static_cast<double>(v.kind == Value::kInt ? v.i : v.b);
  else if (v.kind == Value::kFloat) d = v.f;
  else if (v.kind == Value::kStr) {
    std::string s(StripView(v.s, true, true, nullptr));
    if (f == "int") {
      int64_t x;
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
      if (ec == std::errc() && p == s.data() + s.size()) return Value::Int(x);
    }
    char* end = nullptr;
    d = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size()) return fallback;
  } else {
    return fallback;
  }
  if (f == "int") return std::isfinite(d) ? Value::Int(static_cast<int64_t>(d)) : fallback;
  return Value::Float(d);
}

// round(precision=0, method='common'): Jinja2's do_round, always a float; 'common' rounds
// halves to even as Python's round() does, 'floor' and 'ceil' round down / up.
absl::StatusOr<Value> Renderer::FilterRound(std::string_view /*f*/, const Value& v, const Args& a, int /*line*/) {
  const Value* prec = a.Get(0, "precision");
  const Value* method = a.Get(1, "method");
  int64_t p = prec && prec->kind == Value::kInt ? prec->i : 0;
  double x = v.kind == Value::kFloat ? v.f : v.kind == Value::kInt ? static_cast<double>(v.i) : 0;
  double m = std::pow(10.0, static_cast<double>(p));
  std::string_view how = method && method->kind == Value::kStr ? method->s : "common";
  // Python's round() ("common"): halves to even.
  double r = how == "floor" ? std::floor(x * m) / m : how == "ceil" ? std::ceil(x * m) / m : std::nearbyint(x * m) / m;
  return Value::Float(r);
}

// indent(width=4, first=False, blank=False): Jinja2's do_indent. Every line but the first
// (unless first) is prefixed by width spaces (or the width string); blank lines only with
// blank.
absl::StatusOr<Value> Renderer::FilterIndent(std::string_view /*f*/, const Value& v, const Args& a, int line) {
  EPP_ASSIGN_OR_RETURN(std::string s, Str(v, line));
  const Value* w = a.Get(0, "width");
  const Value* first = a.Get(1, "first");
  const Value* blank = a.Get(2, "blank");
  std::string pad = w && w->kind == Value::kStr ? std::string(w->s) : std::string(static_cast<size_t>(w && w->kind == Value::kInt ? std::clamp<int64_t>(w->i, 0, 1000) : 4), ' ');
  std::string out;
  size_t from = 0;
  bool first_line = true;
  while (from <= s.size()) {
    size_t nl = s.find('\n', from);
    std::string_view ln = std::string_view(s).substr(from, nl == std::string::npos ? std::string::npos : nl - from);
    const bool indent_it = first_line ? (first && Truthy(*first)) : (!ln.empty() || (blank && Truthy(*blank)));
    if (indent_it) out += pad;
    out += ln;
    first_line = false;
    if (nl == std::string::npos) break;
    out += '\n';
    from = nl + 1;
    EPP_RETURN_IF_ERROR(CheckSize(out.size(), line));
  }
  return Value::Str(std::move(out));
}

// wordcount: runs of word characters (letters, digits, _; any non-ASCII byte counts as a
// letter), as Jinja2 counts \w+ matches.
absl::StatusOr<Value> Renderer::FilterWordCount(std::string_view /*f*/, const Value& v, const Args& /*a*/, int line) {
  EPP_ASSIGN_OR_RETURN(std::string s, Str(v, line));
  int64_t n = 0;
  bool in = false;
  for (char c : s) {
    bool w = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || static_cast<unsigned char>(c) >= 0x80;
    if (w && !in) ++n;
    in = w;
  }
  return Value::Int(n);
}

// escape, alias e: markupsafe's escape of the value's text (&, <, >, " and ' as entities,
// the quotes written &#34; and &#39; as markupsafe writes them).
absl::StatusOr<Value> Renderer::FilterEscape(std::string_view /*f*/, const Value& v, const Args& /*a*/, int line) {
  EPP_ASSIGN_OR_RETURN(std::string s, Str(v, line));
  return Value::Str(epp::internal::EscapeMarkup(s, "&#34;", "&#39;"));
}

}  // namespace epp::jinja
