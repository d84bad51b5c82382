// Private to the Jinja evaluator: what its files share. jinja_eval.cc runs statements and
// expressions, jinja_value.cc gives values Python's behaviour (str(), repr, ==, <, len, `in`,
// json.dumps), jinja_filters.cc, jinja_tests.cc and jinja_methods.cc implement `x | f`,
// `x is t` and `s.strip()` and keep the one table of names for each. The parser (jinja_parse.cc)
// sees only IsJinjaFilter / IsJinjaTest (jinja_ast.h), which read those same tables.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/utf8.h"
#include "jinja_ast.h"

namespace epp::jinja {

// A value that can be called: a {% macro %}, a global function (range, namespace, ...), or a
// method bound to its object (`message.content.strip`, `loop.cycle`).
struct Callable {
  enum Kind { kMacro, kBuiltin, kMethod } kind = kBuiltin;
  const Node* macro = nullptr;
  std::string_view name;  // builtin or method name
  Value self;             // a method's object
};
Value MakeCallable(Callable c);

// ---- UTF-8 and Python str helpers (jinja_value.cc) ----
// Strings are UTF-8 (template text and parsed JSON are valid), but Python counts, slices and
// cases code points, so these work per code point. Python's len() of a str is CountUtf8Chars.
using internal::AppendUtf8;
using internal::CountUtf8Chars;
using internal::Utf8SequenceLength;
int32_t DecodeAt(std::string_view s, size_t i, size_t& len);
bool PySpace(int32_t cp);
std::vector<size_t> CpOffsets(std::string_view s);
std::string_view StripView(std::string_view s, bool left, bool right, const std::string_view* chars);
std::string MapCase(std::string_view s, int mode);
bool IsCased(int32_t cp);
std::string PyStrRepr(std::string_view s);
std::string Capitalize(std::string_view s);
std::string Replace(std::string_view s, std::string_view from, std::string_view to, int64_t count);

// ---- value semantics that cannot fail (jinja_value.cc) ----
bool Truthy(const Value& v);
std::string_view TypeName(const Value& v);
bool Equal(const Value& a, const Value& b);
List SeqItems(const Value& v);
std::vector<std::pair<std::string, Value>> MapItems(const Value& v);

// How a body ended: normally, or at {% break %} / {% continue %} (Jinja's loopcontrols).
enum class Flow { kNormal, kBreak, kContinue };

// A call's evaluated arguments. Get(i, name) reads the i-th positional or the keyword `name`,
// the way Python binds a parameter (filters, tests, methods and macros all read them so).
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string_view, Value>> kw;
  const Value* Get(size_t i, std::string_view name) const {
    if (i < pos.size()) return &pos[i];
    for (const auto& [k, v] : kw)
      if (k == name) return &v;
    return nullptr;
  }
};

class Renderer;

// ---- the name tables ----
// One entry per name epp implements. Aliases (d / default, eq / == / equalto) and variants that
// share code (first / last) point at one function, which gets the name it was called by.

// Each table is sorted by name (checked when it compiles) and binary-searched.
template <typename Entry, size_t N>
constexpr bool SortedByName(const Entry (&table)[N]) {
  for (size_t i = 1; i < N; ++i)
    if (!(table[i - 1].name < table[i].name)) return false;
  return true;
}
template <typename Entry, size_t N>
const Entry* FindByName(const Entry (&table)[N], std::string_view name) {
  const Entry* it = std::lower_bound(table, table + N, name, [](const Entry& e, std::string_view n) { return e.name < n; });
  return it != table + N && it->name == name ? it : nullptr;
}

// Filters (jinja_filters.cc): `v | name(a...)`.
using FilterFn = absl::StatusOr<Value> (Renderer::*)(std::string_view f, const Value& v, const Args& a, int line);
struct JinjaFilter {
  std::string_view name;
  FilterFn fn;
  bool in_map;  // map('name') may apply it (the filters chat templates map with)
};
const JinjaFilter* FindJinjaFilter(std::string_view name);

// Tests (jinja_tests.cc): `v is name(arg)`. A test of the value's type alone (`is string`)
// cannot fail and takes no argument: `of` holds it and `fn` is null; the others have `fn`.
using TestFn = absl::StatusOr<bool> (Renderer::*)(std::string_view t, const Value& v, const Value* arg, int line) const;
struct JinjaTest {
  std::string_view name;
  bool (*of)(const Value& v);
  TestFn fn;
};
const JinjaTest* FindJinjaTest(std::string_view name);

// Methods (jinja_methods.cc): `self.name(a...)` on a str, a dict or a list. Python's methods
// that epp does not implement, or that modify their object (refused by the sandbox), are listed
// with a null fn: reading them gives a method, calling it a clear error.
enum class Receiver : uint8_t { kStr, kDict, kList };
using MethodFn = absl::StatusOr<Value> (Renderer::*)(const Value& self, std::string_view name, const Args& a, int line);
struct JinjaMethod {
  std::string_view name;
  Receiver on;
  MethodFn fn;
};
const JinjaMethod* FindJinjaMethod(Receiver on, std::string_view name);

// Runs one render. Internal, so everything is public: the tables above point at its members.
class Renderer {
 public:
  Renderer(const Template& t, const OJson& vars, const RenderOptions& o) : t_(t), vars_(vars), o_(o) {
    frames_.emplace_back();
  }
  ~Renderer();
  absl::StatusOr<std::string> Run();

  using Frame = std::vector<std::pair<std::string_view, Value>>;
  absl::Status Error(int line, std::string_view what) const;

  // ---- names and statements (jinja_eval.cc) ----
  Value Lookup(std::string_view name) const;
  void Assign(std::string_view name, Value v);
  absl::Status Exec(const Body& body, std::string& out, Flow& flow);
  absl::Status ExecOne(const Node& n, std::string& out, Flow& flow);
  absl::Status SetTargets(const Node& n, Value v);
  absl::Status ExecFor(const Node& n, std::string& out);

  // ---- value semantics that can fail, naming the line (jinja_value.cc) ----
  absl::Status AppendStr(const Value& v, std::string& out, int line) const;
  absl::Status AppendRepr(const Value& v, std::string& out, int line, bool top) const;
  absl::StatusOr<std::string> Str(const Value& v, int line) const;
  absl::StatusOr<List> Items(const Value& v, int line) const;
  absl::StatusOr<int64_t> Length(const Value& v, int line) const;
  absl::StatusOr<int> Order(const Value& a, const Value& b, int line) const;
  absl::StatusOr<bool> Contains(const Value& container, const Value& x, int line) const;

  // ---- attribute and item access, expressions, calls (jinja_eval.cc) ----
  absl::StatusOr<Value> MapGet(const Value& m, std::string_view key) const;
  absl::StatusOr<Value> GetAttr(const Value& v, std::string_view name, int line) const;
  absl::StatusOr<Value> GetItem(const Value& v, const Value& key, int line) const;
  absl::StatusOr<Value> Slice(const Value& v, const Value* a, const Value* b, const Value* c, int line) const;
  absl::StatusOr<Value> Eval(const Expr& e);
  absl::StatusOr<Value> EvalAddChain(const Expr& e);
  absl::StatusOr<Value> Arith(std::string_view op, const Value& a, const Value& b, int line) const;
  static constexpr size_t kMaxItems = 1000000;
  absl::Status CheckReplace(std::string_view s, std::string_view from, std::string_view to, int line) const;
  absl::Status CheckSize(size_t bytes, int line) const;
  absl::StatusOr<Args> EvalArgs(const Expr& e, size_t first);
  absl::StatusOr<Value> EvalCall(const Expr& e);
  absl::StatusOr<Value> Call(const Value& f, const Args& a, int line, std::string_view what);
  absl::StatusOr<Value> CallMacro(const Node& m, const Args& a, int line);
  absl::StatusOr<Value> CallBuiltin(std::string_view name, const Args& a, int line);

  // ---- filters (jinja_filters.cc) ----
  absl::StatusOr<Value> EvalFilter(const Expr& e);
  absl::StatusOr<Value> ApplyFilter(std::string_view f, const Value& v, const Args& a, int line);
  absl::StatusOr<Value> ApplyNamedFilter(const std::string& name, const Value& v, const Args& a, int line);
  absl::Status FilterError(std::string_view f, int line, std::string_view why) const;
  absl::StatusOr<Value> AttrPath(const Value& v, const Value& path, int line) const;
  absl::StatusOr<Value> FilterDefault(std::string_view f, const Value& v, const Args& a, int line);
  absl::StatusOr<Value> FilterSafe(std::string_view f, const Value& v, const Args& a, int line);
  absl::StatusOr<Value> FilterTrim(std::string_view f, const Value& v, const Args& a, int line);
  absl::StatusOr<Value> FilterLength(std::string_view f, const Value& v, const Args& a, int line);
  absl::StatusOr<Value> FilterToJson(std::string_view f, const Value& v, const Args& a, int line);
  absl::StatusOr<Value> FilterString(std::string_view f, const Value& v, const Args& a, int line);
  absl::StatusOr<Value> FilterCase(std::string_view f, const Value& v, const Args& a, int line);
  absl::StatusOr<Value> FilterReplace(std::string_view f, const Value& v, const Args& a, int line);
  absl::StatusOr<Value> FilterList(std::string_view f, const Value& v, const Args& a, int line);
  absl::StatusOr<Value> FilterFirstLast(std::string_view f, const Value& v, const Args& a, int line);
  absl::StatusOr<Value> FilterReverse(std::string_view f, const Value& v, const Args& a, int line);
  absl::StatusOr<Value> FilterJoin(std::string_view f, const Value& v, const Args& a, int line);
  absl::StatusOr<Value> FilterItems(std::string_view f, const Value& v, const Args& a, int line);
  absl::StatusOr<Value> FilterDictSort(std::string_view f, const Value& v, const Args& a, int line);
  absl::StatusOr<Value> FilterMap(std::string_view f, const Value& v, const Args& a, int line);
  absl::StatusOr<Value> FilterSelect(std::string_view f, const Value& v, const Args& a, int line);
  absl::StatusOr<Value> FilterUnique(std::string_view f, const Value& v, const Args& a, int line);
  absl::StatusOr<Value> FilterSort(std::string_view f, const Value& v, const Args& a, int line);
  absl::StatusOr<Value> FilterMinMaxSum(std::string_view f, const Value& v, const Args& a, int line);
  absl::StatusOr<Value> FilterAbs(std::string_view f, const Value& v, const Args& a, int line);
  absl::StatusOr<Value> FilterNumber(std::string_view f, const Value& v, const Args& a, int line);
  absl::StatusOr<Value> FilterRound(std::string_view f, const Value& v, const Args& a, int line);
  absl::StatusOr<Value> FilterIndent(std::string_view f, const Value& v, const Args& a, int line);
  absl::StatusOr<Value> FilterWordCount(std::string_view f, const Value& v, const Args& a, int line);
  absl::StatusOr<Value> FilterEscape(std::string_view f, const Value& v, const Args& a, int line);

  // ---- tests (jinja_tests.cc) ----
  absl::StatusOr<bool> EvalTest(const Expr& e);
  absl::StatusOr<bool> ApplyTest(std::string_view t, const Value& v, const Args& a, int line) const;
  absl::Status NeedArg(std::string_view t, const Value* arg, int line) const;
  absl::StatusOr<bool> TestCase(std::string_view t, const Value& v, const Value* arg, int line) const;
  absl::StatusOr<bool> TestParity(std::string_view t, const Value& v, const Value* arg, int line) const;
  absl::StatusOr<bool> TestDivisibleBy(std::string_view t, const Value& v, const Value* arg, int line) const;
  absl::StatusOr<bool> TestEqual(std::string_view t, const Value& v, const Value* arg, int line) const;
  absl::StatusOr<bool> TestNotEqual(std::string_view t, const Value& v, const Value* arg, int line) const;
  absl::StatusOr<bool> TestSameAs(std::string_view t, const Value& v, const Value* arg, int line) const;
  absl::StatusOr<bool> TestIn(std::string_view t, const Value& v, const Value* arg, int line) const;
  absl::StatusOr<bool> TestOrder(std::string_view t, const Value& v, const Value* arg, int line) const;

  // ---- methods (jinja_methods.cc) ----
  static Value Method(const Value& self, std::string_view name);
  absl::StatusOr<Value> CallMethod(const Value& self, std::string_view name, const Args& a, int line);
  absl::Status MethodError(const Value& self, std::string_view name, int line, std::string_view why) const;
  absl::StatusOr<Value> StrStrip(const Value& self, std::string_view name, const Args& a, int line);
  absl::StatusOr<Value> StrSplit(const Value& self, std::string_view name, const Args& a, int line);
  absl::StatusOr<Value> StrStartsEnds(const Value& self, std::string_view name, const Args& a, int line);
  absl::StatusOr<Value> StrCase(const Value& self, std::string_view name, const Args& a, int line);
  absl::StatusOr<Value> StrCapitalize(const Value& self, std::string_view name, const Args& a, int line);
  absl::StatusOr<Value> StrTitle(const Value& self, std::string_view name, const Args& a, int line);
  absl::StatusOr<Value> StrReplace(const Value& self, std::string_view name, const Args& a, int line);
  absl::StatusOr<Value> StrFind(const Value& self, std::string_view name, const Args& a, int line);
  absl::StatusOr<Value> StrJoin(const Value& self, std::string_view name, const Args& a, int line);
  absl::StatusOr<Value> StrIs(const Value& self, std::string_view name, const Args& a, int line);
  absl::StatusOr<Value> StrSplitLines(const Value& self, std::string_view name, const Args& a, int line);
  absl::StatusOr<Value> StrRemoveAffix(const Value& self, std::string_view name, const Args& a, int line);
  absl::StatusOr<Value> DictGet(const Value& self, std::string_view name, const Args& a, int line);
  absl::StatusOr<Value> DictView(const Value& self, std::string_view name, const Args& a, int line);
  absl::StatusOr<Value> ListIndexCount(const Value& self, std::string_view name, const Args& a, int line);

  const Template& t_;
  const OJson& vars_;
  RenderOptions o_;
  mutable std::vector<const void*> printing_;  // containers being printed (AppendRepr)
  // Namespaces are the only mutable values, so the only way to a reference cycle
  // ({% set ns.self = ns %}): emptied when the render ends, which frees such cycles.
  std::vector<std::shared_ptr<Dict>> namespaces_;
  std::vector<Frame> frames_;
  size_t base_ = 0;
  int macro_depth_ = 0;
};

}  // namespace epp::jinja
