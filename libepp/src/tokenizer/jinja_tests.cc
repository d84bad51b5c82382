// Jinja tests (`value is [not] name(arg)`, and the test names select / reject take): one table,
// kTests, names every test epp implements. The parser (IsJinjaTest) rejects any other name when
// the template loads (after mapping None / True / False to none / true / false); the renderer
// (ApplyTest) dispatches through the same table. Each test follows Python Jinja2's test of that
// name (jinja2/tests.py), with Python's == and < for the comparisons.
#include "absl/strings/str_cat.h"
#include "jinja_eval_impl.h"

namespace epp::jinja {
namespace {

// name, then either a test of the value alone (`of`) or the member that implements it (`fn`).
// Sorted by name (ASCII: the operator spellings come first).
constexpr JinjaTest kTests[] = {
    {"!=", nullptr, &Renderer::TestNotEqual},
    {"<", nullptr, &Renderer::TestOrder},
    {"<=", nullptr, &Renderer::TestOrder},
    {"==", nullptr, &Renderer::TestEqual},
    {">", nullptr, &Renderer::TestOrder},
    {">=", nullptr, &Renderer::TestOrder},
    {"boolean", [](const Value& v) { return v.kind == Value::kBool; }, nullptr},
    {"callable", [](const Value& v) { return v.kind == Value::kCallable; }, nullptr},
    {"defined", [](const Value& v) { return !v.is_undefined(); }, nullptr},
    {"divisibleby", nullptr, &Renderer::TestDivisibleBy},
    {"eq", nullptr, &Renderer::TestEqual},
    {"equalto", nullptr, &Renderer::TestEqual},
    // Markup objects (which have __html__) never occur: nothing is autoescaped.
    {"escaped", [](const Value&) { return false; }, nullptr},
    {"even", nullptr, &Renderer::TestParity},
    {"false", [](const Value& v) { return v.kind == Value::kBool && !v.b; }, nullptr},
    {"float", [](const Value& v) { return v.kind == Value::kFloat; }, nullptr},
    {"ge", nullptr, &Renderer::TestOrder},
    {"greaterthan", nullptr, &Renderer::TestOrder},
    {"gt", nullptr, &Renderer::TestOrder},
    {"in", nullptr, &Renderer::TestIn},
    // Jinja2's integer excludes True and False; number (below) includes them, as Python's Number.
    {"integer", [](const Value& v) { return v.kind == Value::kInt; }, nullptr},
    // Jinja2 tries iter(value): strings, sequences, mappings, and Undefined (iterates as empty).
    {"iterable", [](const Value& v) { return v.kind == Value::kStr || v.is_sequence() || v.is_mapping() || v.is_undefined(); }, nullptr},
    {"le", nullptr, &Renderer::TestOrder},
    {"lessthan", nullptr, &Renderer::TestOrder},
    {"lower", nullptr, &Renderer::TestCase},
    {"lt", nullptr, &Renderer::TestOrder},
    // A namespace() is not a Mapping in Jinja2 (it only has attributes).
    {"mapping", [](const Value& v) { return v.is_mapping() && v.kind != Value::kNamespace; }, nullptr},
    {"ne", nullptr, &Renderer::TestNotEqual},
    {"none", [](const Value& v) { return v.kind == Value::kNone; }, nullptr},
    {"number", [](const Value& v) { return v.kind == Value::kInt || v.kind == Value::kFloat || v.kind == Value::kBool; }, nullptr},
    {"odd", nullptr, &Renderer::TestParity},
    {"sameas", nullptr, &Renderer::TestSameAs},
    // Jinja2 checks len() and __getitem__: strings, sequences and mappings.
    {"sequence", [](const Value& v) { return v.kind == Value::kStr || v.is_sequence() || v.is_mapping(); }, nullptr},
    {"string", [](const Value& v) { return v.kind == Value::kStr; }, nullptr},
    {"true", [](const Value& v) { return v.kind == Value::kBool && v.b; }, nullptr},
    {"undefined", [](const Value& v) { return v.is_undefined(); }, nullptr},
    {"upper", nullptr, &Renderer::TestCase},
};
static_assert(SortedByName(kTests), "kTests must stay sorted by name (FindJinjaTest binary-searches it)");

}  // namespace

const JinjaTest* FindJinjaTest(std::string_view name) { return FindByName(kTests, name); }
bool IsJinjaTest(std::string_view name) { return FindJinjaTest(name) != nullptr; }

// ---- dispatch ----
absl::StatusOr<bool> Renderer::EvalTest(const Expr& e) {
  // `x is defined` must not fail on an undefined x's attribute lookups: evaluate as usual; an
  // undefined value reaching here is fine.
  EPP_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
  EPP_ASSIGN_OR_RETURN(Args a, EvalArgs(e, 1));
  return ApplyTest(e.name, v, a, e.line);
}

// Also reached from select / reject with a name given at render time, so a name outside
// kTests fails here as it would at parse time.
absl::StatusOr<bool> Renderer::ApplyTest(std::string_view t, const Value& v, const Args& a, int line) const {
  const Value* arg = a.Get(0, "other");
  const JinjaTest* test = FindJinjaTest(t);
  if (test == nullptr) return Error(line, Cat("the test '", t, "' is not supported by epp"));
  if (test->of != nullptr) return test->of(v);
  return (this->*test->fn)(t, v, arg, line);
}

// The tests below that compare take one argument, Jinja2's `other`.
absl::Status Renderer::NeedArg(std::string_view t, const Value* arg, int line) const {
  if (!arg) return Error(line, Cat("the test '", t, "' needs an argument"));
  return absl::OkStatus();
}

// ---- the tests, in kTests' entries ----

// lower, upper: a string equal to its lower- / upper-cased form; anything else is false.
absl::StatusOr<bool> Renderer::TestCase(std::string_view t, const Value& v, const Value* /*arg*/, int /*line*/) const {
  if (v.kind != Value::kStr) return false;
  return MapCase(v.s, t == "upper") == v.s;
}

// even, odd: of an integer; another type is an error (Python's % on it would be too).
absl::StatusOr<bool> Renderer::TestParity(std::string_view t, const Value& v, const Value* /*arg*/, int line) const {
  if (v.kind != Value::kInt) return Error(line, Cat("the test '", t, "' needs an integer"));
  return (v.i % 2 == 0) == (t == "even");
}

// divisibleby(num): value % num == 0, for integers only (zero is an error, not False).
absl::StatusOr<bool> Renderer::TestDivisibleBy(std::string_view t, const Value& v, const Value* arg, int line) const {
  EPP_RETURN_IF_ERROR(NeedArg(t, arg, line));
  if (v.kind != Value::kInt || arg->kind != Value::kInt || arg->i == 0) return Error(line, "divisibleby needs nonzero integers");
  return v.i % arg->i == 0;
}

// eq, equalto, ==: Python's ==.
absl::StatusOr<bool> Renderer::TestEqual(std::string_view t, const Value& v, const Value* arg, int line) const {
  EPP_RETURN_IF_ERROR(NeedArg(t, arg, line));
  return Equal(v, *arg);
}

// ne, !=: Python's !=.
absl::StatusOr<bool> Renderer::TestNotEqual(std::string_view t, const Value& v, const Value* arg, int line) const {
  EPP_RETURN_IF_ERROR(NeedArg(t, arg, line));
  return !Equal(v, *arg);
}

// sameas: Python's `is`. None, Undefined and the booleans are singletons; other values count as
// the same object when equal and sharing their storage (numbers and borrowed JSON share none).
absl::StatusOr<bool> Renderer::TestSameAs(std::string_view t, const Value& v, const Value* arg, int line) const {
  EPP_RETURN_IF_ERROR(NeedArg(t, arg, line));
  if (v.kind != arg->kind) return false;
  if (v.kind == Value::kNone || v.kind == Value::kUndefined) return true;
  if (v.kind == Value::kBool) return v.b == arg->b;
  return Equal(v, *arg) && (v.hold == arg->hold);
}

// in(seq): Python's `value in seq`.
absl::StatusOr<bool> Renderer::TestIn(std::string_view t, const Value& v, const Value* arg, int line) const {
  EPP_RETURN_IF_ERROR(NeedArg(t, arg, line));
  return Contains(*arg, v, line);
}

// lt / < / lessthan, le / <=, gt / > / greaterthan, ge / >=: Python's ordering (Order), which
// fails for types Python cannot order.
absl::StatusOr<bool> Renderer::TestOrder(std::string_view t, const Value& v, const Value* arg, int line) const {
  EPP_RETURN_IF_ERROR(NeedArg(t, arg, line));
  EPP_ASSIGN_OR_RETURN(int o, Order(v, *arg, line));
  if (t == "lt" || t == "<" || t == "lessthan") return o < 0;
  if (t == "le" || t == "<=") return o <= 0;
  if (t == "gt" || t == ">" || t == "greaterthan") return o > 0;
  return o >= 0;
}

}  // namespace epp::jinja
