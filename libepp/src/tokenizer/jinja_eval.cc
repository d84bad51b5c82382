// The Jinja evaluator (jinja.h): runs a parsed template (jinja_ast.h) the way Python Jinja2
// runs it in transformers' chat template environment: statements, scopes and loop variables,
// expressions with Python's operators, attribute and item access, calls of macros and of the
// globals chat templates use. Values, filters, tests and methods are in jinja_value.cc,
// jinja_filters.cc, jinja_tests.cc and jinja_methods.cc (jinja_eval_impl.h ties them together).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "jinja_eval_impl.h"

namespace epp::jinja {

// The whole template into one string (the output limit is checked after each statement).
absl::StatusOr<std::string> Renderer::Run() {
  std::string out;
  Flow f;
  EPP_RETURN_IF_ERROR(Exec(t_.body, out, f));
  return out;
}

// Breaks the reference cycles namespaces can form (see namespaces_), so their Dicts are freed.
Renderer::~Renderer() {
  for (const std::shared_ptr<Dict>& n : namespaces_) n->items.clear();
}

// Errors name the template and the line, as the parser's do.
absl::Status Renderer::Error(int line, std::string_view what) const {
  return absl::InvalidArgumentError(Cat(t_.name, " line ", line, ": ", what));
}

// ---- names ----
// Scopes close to Jinja2's: a frame per loop body and macro call. A macro sees its own frames and the
// template's top level (frames_[0]), not its caller's locals; then the render's variables, then
// the globals transformers adds (raise_exception, strftime_now) and Jinja2's (range, namespace,
// dict).
Value Renderer::Lookup(std::string_view name) const {
  for (size_t f = frames_.size(); f-- > base_;)
    for (auto it = frames_[f].rbegin(); it != frames_[f].rend(); ++it)
      if (it->first == name) return it->second;
  if (base_ > 0)
    for (auto it = frames_[0].rbegin(); it != frames_[0].rend(); ++it)
      if (it->first == name) return it->second;
  if (vars_.is_object())
    if (auto it = vars_.find(std::string(name)); it != vars_.end()) return Value::FromJson(*it);
  static constexpr std::string_view kBuiltins[] = {"raise_exception", "strftime_now", "range", "namespace", "dict"};
  for (std::string_view b : kBuiltins)
    if (b == name) {
      Callable c;
      c.kind = Callable::kBuiltin;
      c.name = b;
      return MakeCallable(std::move(c));
    }
  return Value::Undefined(name);
}
// {% set %}, loop variables and macro parameters bind in the innermost frame, so a set inside a
// loop body does not outlive the iteration, as in Jinja2 (namespace() is how a value gets out).
void Renderer::Assign(std::string_view name, Value v) {
  Frame& f = frames_.back();
  for (auto& [k, old] : f)
    if (k == name) {
      old = std::move(v);
      return;
    }
  f.emplace_back(name, std::move(v));
}

// ---- statements ----
// A body, statement by statement. It stops at break / continue (the enclosing loop reads
// `flow`) and when the output passes RenderOptions::max_output.
absl::Status Renderer::Exec(const Body& body, std::string& out, Flow& flow) {
  flow = Flow::kNormal;
  for (const NodePtr& n : body) {
    EPP_RETURN_IF_ERROR(ExecOne(*n, out, flow));
    if (flow != Flow::kNormal) return absl::OkStatus();
    if (out.size() > o_.max_output)
      return Error(n->line, Cat("the output passed ", o_.max_output, " bytes (a runaway template?)"));
  }
  return absl::OkStatus();
}

// One statement. {% if %} runs the first branch whose condition is true; {% set x %}...{% endset %}
// renders its body to a string and runs its filter chain over it (kSetBlockBody); {% macro %}
// binds a callable in the current scope.
absl::Status Renderer::ExecOne(const Node& n, std::string& out, Flow& flow) {
  switch (n.kind) {
    case Node::kText: out += n.text; return absl::OkStatus();
    case Node::kOutput: {
      EPP_ASSIGN_OR_RETURN(Value v, Eval(*n.expr));
      return AppendStr(v, out, n.line);
    }
    case Node::kIf:
      for (size_t i = 0; i < n.bodies.size(); ++i) {
        if (i < n.conds.size()) {
          EPP_ASSIGN_OR_RETURN(Value c, Eval(*n.conds[i]));
          if (!Truthy(c)) continue;
        }
        return Exec(n.bodies[i], out, flow);
      }
      return absl::OkStatus();
    case Node::kFor: return ExecFor(n, out);
    case Node::kSet: {
      EPP_ASSIGN_OR_RETURN(Value v, Eval(*n.expr));
      return SetTargets(n, std::move(v));
    }
    case Node::kSetBlock: {
      std::string text;
      Flow f;
      EPP_RETURN_IF_ERROR(Exec(n.body, text, f));
      Value v = Value::Str(std::move(text));
      if (n.expr) {
        frames_.emplace_back();
        Assign(kSetBlockBody, v);
        absl::StatusOr<Value> r = Eval(*n.expr);
        frames_.pop_back();
        if (!r.ok()) return r.status();
        v = *std::move(r);
      }
      Assign(n.targets[0], std::move(v));
      return absl::OkStatus();
    }
    case Node::kMacro: {
      Callable c;
      c.kind = Callable::kMacro;
      c.macro = &n;
      c.name = n.targets[0];
      Assign(n.targets[0], MakeCallable(std::move(c)));
      return absl::OkStatus();
    }
    case Node::kBreak: flow = Flow::kBreak; return absl::OkStatus();
    case Node::kContinue: flow = Flow::kContinue; return absl::OkStatus();
  }
  return absl::OkStatus();
}

// {% set %}'s targets: one name, several names unpacked as Python unpacks (`set a, b = pair`), or
// `ns.attr`, which Jinja2 allows on namespace() objects only.
absl::Status Renderer::SetTargets(const Node& n, Value v) {
  if (n.attr_target) {
    Value ns = Lookup(n.targets[0]);
    if (ns.kind != Value::kNamespace)
      return Error(n.line, Cat("`set ", n.targets[0], ".", n.targets[1], "`: '", n.targets[0],
                                        "' is not a namespace (only namespace() objects take attribute assignment)"));
    ns.ns().Set(n.targets[1], std::move(v));
    return absl::OkStatus();
  }
  if (n.targets.size() == 1) {
    Assign(n.targets[0], std::move(v));
    return absl::OkStatus();
  }
  EPP_ASSIGN_OR_RETURN(List items, Items(v, n.line));
  if (items.size() != n.targets.size())
    return Error(n.line, Cat("cannot unpack ", items.size(), " values into ", n.targets.size(), " names"));
  for (size_t i = 0; i < items.size(); ++i) Assign(n.targets[i], std::move(items[i]));
  return absl::OkStatus();
}

// {% for %} as Jinja2 runs it: an Undefined iterable loops zero times; `for x in xs if c` filters
// before loop.* counts; loop.index, index0, revindex, revindex0, first, last, length, depth,
// depth0, previtem, nextitem and cycle(); {% else %} runs when nothing was iterated.
absl::Status Renderer::ExecFor(const Node& n, std::string& out) {
  EPP_ASSIGN_OR_RETURN(Value seq, Eval(*n.expr));
  if (seq.is_undefined()) seq = Value::OfList({});
  EPP_ASSIGN_OR_RETURN(List items, Items(seq, n.line));
  frames_.emplace_back();
  struct Pop {
    Renderer* r;
    ~Pop() { r->frames_.pop_back(); }
  } pop{this};
  auto bind = [&](const Value& item) -> absl::Status {
    if (n.targets.size() == 1) {
      Assign(n.targets[0], item);
      return absl::OkStatus();
    }
    EPP_ASSIGN_OR_RETURN(List parts, Items(item, n.line));
    if (parts.size() != n.targets.size())
      return Error(n.line, Cat("cannot unpack ", parts.size(), " values into ", n.targets.size(), " loop variables"));
    for (size_t i = 0; i < parts.size(); ++i) Assign(n.targets[i], std::move(parts[i]));
    return absl::OkStatus();
  };
  if (n.cond) {  // `for x in xs if cond`: loop.* counts only the kept items
    List kept;
    for (const Value& item : items) {
      EPP_RETURN_IF_ERROR(bind(item));
      EPP_ASSIGN_OR_RETURN(Value c, Eval(*n.cond));
      if (Truthy(c)) kept.push_back(item);
    }
    items = std::move(kept);
  }
  const int64_t len = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < len; ++i) {
    frames_.back().clear();  // each iteration starts from the enclosing scope, as in Jinja
    EPP_RETURN_IF_ERROR(bind(items[static_cast<size_t>(i)]));
    Dict loop;
    loop.items.reserve(12);
    loop.items.emplace_back("index", Value::Int(i + 1));
    loop.items.emplace_back("index0", Value::Int(i));
    loop.items.emplace_back("revindex", Value::Int(len - i));
    loop.items.emplace_back("revindex0", Value::Int(len - i - 1));
    loop.items.emplace_back("first", Value::Bool(i == 0));
    loop.items.emplace_back("last", Value::Bool(i == len - 1));
    loop.items.emplace_back("length", Value::Int(len));
    loop.items.emplace_back("depth", Value::Int(1));
    loop.items.emplace_back("depth0", Value::Int(0));
    loop.items.emplace_back("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::Undefined("loop.previtem"));
    loop.items.emplace_back("nextitem", i + 1 < len ? items[static_cast<size_t>(i + 1)] : Value::Undefined("loop.nextitem"));
    Callable cycle;
    cycle.kind = Callable::kMethod;
    cycle.name = "cycle";
    cycle.self = Value::Int(i);
    loop.items.emplace_back("cycle", MakeCallable(std::move(cycle)));
    Value lv = Value::OfDict(std::move(loop));
    lv.s = "loop";
    Assign("loop", std::move(lv));
    Flow f;
    EPP_RETURN_IF_ERROR(Exec(n.body, out, f));
    if (f == Flow::kBreak) break;
  }
  if (len == 0) {
    Flow f;
    EPP_RETURN_IF_ERROR(Exec(n.else_body, out, f));
  }
  return absl::OkStatus();
}

// ---- attribute and item access ----
// Jinja2's getattr / getitem: `x.name` tries the attribute (a method of str / dict / list, from
// kMethods), then the item; `x[key]` the item, then the attribute. A miss is Undefined, which
// fails only when used (printing it gives "").
// A mapping's item, Undefined when absent (a JSON object is searched in place).
absl::StatusOr<Value> Renderer::MapGet(const Value& m, std::string_view key) const {
  if (m.kind == Value::kJson) {
    auto it = m.j->find(std::string(key));
    if (it != m.j->end()) return Value::FromJson(*it);
    return Value::Undefined(key);
  }
  const Dict& d = m.kind == Value::kDict ? m.dict() : m.ns();
  if (const Value* v = d.Find(key)) return *v;
  return Value::Undefined(key);
}
// `v.name`. The method's name is taken from kMethods, so the bound callable never points into a
// string the render may free (a computed `v[key]`).
absl::StatusOr<Value> Renderer::GetAttr(const Value& v, std::string_view name, int line) const {
  if (v.is_undefined()) return Error(line, Cat("'", v.s, "' is undefined (reading its attribute '", name, "')"));
  if (v.kind == Value::kNamespace) return MapGet(v, name);
  if (v.is_mapping()) {
    if (const JinjaMethod* m = FindJinjaMethod(Receiver::kDict, name)) return Method(v, m->name);
    return MapGet(v, name);
  }
  if (v.kind == Value::kStr)
    if (const JinjaMethod* m = FindJinjaMethod(Receiver::kStr, name)) return Method(v, m->name);
  if (v.is_sequence())
    if (const JinjaMethod* m = FindJinjaMethod(Receiver::kList, name)) return Method(v, m->name);
  return Value::Undefined(name);
}
// `v[key]`: an int indexes a sequence or a string (negative from the end; out of range is
// Undefined, as Jinja2's getitem gives); a str key reads a mapping's item, then the attribute.
absl::StatusOr<Value> Renderer::GetItem(const Value& v, const Value& key, int line) const {
  if (v.is_undefined()) return Error(line, Cat("'", v.s, "' is undefined (reading an item of it)"));
  if (key.kind == Value::kInt || key.kind == Value::kBool) {
    int64_t i = key.kind == Value::kInt ? key.i : key.b;
    if (v.is_sequence()) {
      const int64_t n = static_cast<int64_t>(v.kind == Value::kList ? v.list().size() : v.j->size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::Undefined("[index out of range]");
      return v.kind == Value::kList ? v.list()[static_cast<size_t>(i)] : Value::FromJson((*v.j)[static_cast<size_t>(i)]);
    }
    if (v.kind == Value::kStr) {
      std::vector<size_t> o = CpOffsets(v.s);
      const int64_t n = static_cast<int64_t>(o.size()) - 1;
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::Undefined("[index out of range]");
      Value c = v;
      c.s = v.s.substr(o[static_cast<size_t>(i)], o[static_cast<size_t>(i) + 1] - o[static_cast<size_t>(i)]);
      return c;
    }
    return Value::Undefined("[item]");
  }
  if (key.kind == Value::kStr) {
    if (v.is_mapping()) {
      EPP_ASSIGN_OR_RETURN(Value r, MapGet(v, key.s));
      if (r.is_undefined()) return GetAttr(v, key.s, line);
      return r;
    }
    return GetAttr(v, key.s, line);
  }
  if (key.is_undefined()) return Error(line, Cat("'", key.s, "' is undefined (used as a subscript)"));
  return Value::Undefined("[item]");
}
// Python's slicing, for lists and strings (by code point); a step of 1 on a string is a view.
absl::StatusOr<Value> Renderer::Slice(const Value& v, const Value* a, const Value* b, const Value* c, int line) const {
  auto as_int = [&](const Value* x, int64_t& out) -> absl::Status {
    if (x == nullptr || x->kind == Value::kNone) return absl::OkStatus();
    if (x->kind != Value::kInt) return Error(line, "slice indices must be integers or None");
    out = x->i;
    return absl::OkStatus();
  };
  int64_t step = 1;
  EPP_RETURN_IF_ERROR(as_int(c, step));
  if (step == 0) return Error(line, "slice step cannot be zero");
  std::vector<size_t> offsets;
  int64_t n;
  if (v.is_sequence()) {
    n = static_cast<int64_t>(v.kind == Value::kList ? v.list().size() : v.j->size());
  } else if (v.kind == Value::kStr) {
    offsets = CpOffsets(v.s);
    n = static_cast<int64_t>(offsets.size()) - 1;
  } else if (v.is_undefined()) {
    return Error(line, Cat("'", v.s, "' is undefined (sliced)"));
  } else {
    return Error(line, Cat("'", TypeName(v), "' object is not subscriptable"));
  }
  int64_t start = step > 0 ? 0 : n - 1, stop = step > 0 ? n : -1;
  auto clamp = [&](int64_t x, bool is_stop) {
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1) + (is_stop && x < -1 ? 0 : 0);
  };
  if (a && a->kind != Value::kNone) {
    EPP_RETURN_IF_ERROR(as_int(a, start));
    start = clamp(start, false);
  }
  if (b && b->kind != Value::kNone) {
    EPP_RETURN_IF_ERROR(as_int(b, stop));
    stop = clamp(stop, true);
  }
  std::vector<int64_t> idx;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) idx.push_back(i);
  if (v.kind == Value::kStr) {
    if (step == 1) {
      Value r = v;
      r.s = idx.empty() ? std::string_view() : v.s.substr(offsets[static_cast<size_t>(start)],
                                                          offsets[static_cast<size_t>(stop)] - offsets[static_cast<size_t>(start)]);
      return r;
    }
    std::string s;
    for (int64_t i : idx) s.append(v.s.substr(offsets[static_cast<size_t>(i)], offsets[static_cast<size_t>(i) + 1] - offsets[static_cast<size_t>(i)]));
    return Value::Str(std::move(s));
  }
  List out;
  out.reserve(idx.size());
  for (int64_t i : idx)
    out.push_back(v.kind == Value::kList ? v.list()[static_cast<size_t>(i)] : Value::FromJson((*v.j)[static_cast<size_t>(i)]));
  return Value::OfList(std::move(out));
}

// ---- expressions ----
// One expression, left to right as Python evaluates. `and` / `or` short-circuit and return an
// operand, not a bool, as Python's do; `a if c` without else gives Undefined, as in Jinja2.
absl::StatusOr<Value> Renderer::Eval(const Expr& e) {
  switch (e.kind) {
    case Expr::kLiteral: return e.value;
    case Expr::kName: return Lookup(e.name);
    case Expr::kList:
    case Expr::kTuple: {
      List l;
      l.reserve(e.args.size());
      for (const ExprPtr& a : e.args) {
        EPP_ASSIGN_OR_RETURN(Value v, Eval(*a));
        l.push_back(std::move(v));
      }
      return e.kind == Expr::kTuple ? Value::OfTuple(std::move(l)) : Value::OfList(std::move(l));
    }
    case Expr::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        EPP_ASSIGN_OR_RETURN(Value k, Eval(*e.args[i]));
        if (k.kind != Value::kStr) return Error(e.line, "epp supports only string keys in dict literals");
        EPP_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i + 1]));
        d.Set(k.s, std::move(v));
      }
      return Value::OfDict(std::move(d));
    }
    case Expr::kAttr: {
      EPP_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      return GetAttr(v, e.name, e.line);
    }
    case Expr::kItem: {
      EPP_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      EPP_ASSIGN_OR_RETURN(Value k, Eval(*e.args[1]));
      return GetItem(v, k, e.line);
    }
    case Expr::kSlice: {
      EPP_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      Value parts[3];
      const Value* p[3] = {nullptr, nullptr, nullptr};
      for (int k = 0; k < 3; ++k)
        if (e.args[static_cast<size_t>(k) + 1]) {
          EPP_ASSIGN_OR_RETURN(parts[k], Eval(*e.args[static_cast<size_t>(k) + 1]));
          p[k] = &parts[k];
        }
      return Slice(v, p[0], p[1], p[2], e.line);
    }
    case Expr::kCall: return EvalCall(e);
    case Expr::kFilter: return EvalFilter(e);
    case Expr::kTest: {
      EPP_ASSIGN_OR_RETURN(bool r, EvalTest(e));
      return Value::Bool(r != e.negate);
    }
    case Expr::kNeg:
    case Expr::kPos: {
      EPP_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      if (v.kind == Value::kInt || v.kind == Value::kBool) {
        int64_t x = v.kind == Value::kInt ? v.i : v.b;
        return Value::Int(e.kind == Expr::kNeg ? -x : x);
      }
      if (v.kind == Value::kFloat) return Value::Float(e.kind == Expr::kNeg ? -v.f : v.f);
      return Error(e.line, Cat("bad operand type for unary ", e.kind == Expr::kNeg ? "-" : "+", ": '", TypeName(v), "'"));
    }
    case Expr::kNot: {
      EPP_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      return Value::Bool(!Truthy(v));
    }
    case Expr::kAnd:
    case Expr::kOr: {
      EPP_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
      if (Truthy(a) == (e.kind == Expr::kOr)) return a;
      return Eval(*e.args[1]);
    }
    case Expr::kCond: {
      EPP_ASSIGN_OR_RETURN(Value c, Eval(*e.args[0]));
      if (Truthy(c)) return Eval(*e.args[1]);
      if (e.args.size() > 2) return Eval(*e.args[2]);
      return Value::Undefined("the else branch of an inline if");
    }
    case Expr::kConcat: {
      std::string s;
      for (const ExprPtr& a : e.args) {
        EPP_ASSIGN_OR_RETURN(Value v, Eval(*a));
        EPP_RETURN_IF_ERROR(AppendStr(v, s, e.line));
      }
      EPP_RETURN_IF_ERROR(CheckSize(s.size(), e.line));
      return Value::Str(std::move(s));
    }
    case Expr::kAddChain: return EvalAddChain(e);
    case Expr::kBinary: {
      EPP_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
      EPP_ASSIGN_OR_RETURN(Value b, Eval(*e.args[1]));
      return Arith(e.name, a, b, e.line);
    }
    case Expr::kCompare: {
      EPP_ASSIGN_OR_RETURN(Value left, Eval(*e.args[0]));
      for (size_t i = 0; i < e.ops.size(); ++i) {
        EPP_ASSIGN_OR_RETURN(Value right, Eval(*e.args[i + 1]));
        const std::string& op = e.ops[i];
        bool r;
        if (op == "==") r = Equal(left, right);
        else if (op == "!=") r = !Equal(left, right);
        else if (op == "in" || op == "notin") {
          EPP_ASSIGN_OR_RETURN(bool c, Contains(right, left, e.line));
          r = c == (op == "in");
        } else {
          EPP_ASSIGN_OR_RETURN(int o, Order(left, right, e.line));
          r = op == "<" ? o < 0 : op == ">" ? o > 0 : op == "<=" ? o <= 0 : o >= 0;
        }
        if (!r) return Value::Bool(false);
        left = std::move(right);
      }
      return Value::Bool(true);
    }
  }
  return Error(e.line, "unknown expression");
}


// A chain of `+` (the parser folds `a + b + c`): Python's + pairwise, but one allocation when all
// operands are strings, the common case of prompt building.
absl::StatusOr<Value> Renderer::EvalAddChain(const Expr& e) {
  std::vector<Value> vals;
  vals.reserve(e.args.size());
  bool all_str = true;
  size_t total = 0;
  for (const ExprPtr& a : e.args) {
    EPP_ASSIGN_OR_RETURN(Value v, Eval(*a));
    all_str = all_str && v.kind == Value::kStr;
    if (v.kind == Value::kStr) total += v.s.size();
    vals.push_back(std::move(v));
  }
  if (all_str) {  // one allocation for `'<|im_start|>' + role + '\n' + content + ...`
    EPP_RETURN_IF_ERROR(CheckSize(total, e.line));
    std::string s;
    s.reserve(total);
    for (const Value& v : vals) s += v.s;
    return Value::Str(std::move(s));
  }
  Value acc = std::move(vals[0]);
  for (size_t i = 1; i < vals.size(); ++i) {
    EPP_ASSIGN_OR_RETURN(acc, Arith("+", acc, vals[i], e.line));
  }
  return acc;
}

// Python's arithmetic on int (64-bit here: overflow is an error, where Python grows), float and
// bool; + and * on str and list; `//` and `%` round toward negative infinity as Python's do.
absl::StatusOr<Value> Renderer::Arith(std::string_view op, const Value& a, const Value& b, int line) const {
  if (a.is_undefined() || b.is_undefined())
    return Error(line, Cat("'", a.is_undefined() ? a.s : b.s, "' is undefined (an operand of ", op, ")"));
  auto is_num = [](const Value& v) { return v.kind == Value::kInt || v.kind == Value::kFloat || v.kind == Value::kBool; };
  if (is_num(a) && is_num(b)) {
    const bool ints = a.kind != Value::kFloat && b.kind != Value::kFloat;
    int64_t x = a.kind == Value::kInt ? a.i : a.kind == Value::kBool ? a.b : 0;
    int64_t y = b.kind == Value::kInt ? b.i : b.kind == Value::kBool ? b.b : 0;
    double fx = a.kind == Value::kFloat ? a.f : static_cast<double>(x), fy = b.kind == Value::kFloat ? b.f : static_cast<double>(y);
    int64_t r = 0;
    if (op == "+" || op == "-" || op == "*") {
      if (ints) {
        bool over = op == "+" ? __builtin_add_overflow(x, y, &r) : op == "-" ? __builtin_sub_overflow(x, y, &r) : __builtin_mul_overflow(x, y, &r);
        if (over) return Error(line, "integer overflow (epp's integers are 64-bit)");
        return Value::Int(r);
      }
      return Value::Float(op == "+" ? fx + fy : op == "-" ? fx - fy : fx * fy);
    }
    if (op == "/") {
      if (fy == 0) return Error(line, "division by zero");
      return Value::Float(fx / fy);
    }
    if (op == "//" || op == "%") {
      if (fy == 0) return Error(line, op == "%" ? "modulo by zero" : "integer division by zero");
      if (ints) {
        if (x == INT64_MIN && y == -1) return Error(line, "integer overflow (epp's integers are 64-bit)");
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          --q;
          m += y;
        }
        return Value::Int(op == "//" ? q : m);
      }
      double q = std::floor(fx / fy);
      return Value::Float(op == "//" ? q : fx - q * fy);
    }
    if (op == "**") {
      if (ints && y >= 0) {
        int64_t acc = 1;
        for (int64_t k = 0; k < y; ++k)
          if (__builtin_mul_overflow(acc, x, &acc)) return Error(line, "integer overflow (epp's integers are 64-bit)");
        return Value::Int(acc);
      }
      return Value::Float(std::pow(fx, fy));
    }
  }
  if (op == "+") {
    if (a.kind == Value::kStr && b.kind == Value::kStr) {
      EPP_RETURN_IF_ERROR(CheckSize(a.s.size() + b.s.size(), line));
      std::string s;
      s.reserve(a.s.size() + b.s.size());
      s += a.s;
      s += b.s;
      return Value::Str(std::move(s));
    }
    if (a.is_sequence() && b.is_sequence()) {
      List l = SeqItems(a);
      if (l.size() + (b.kind == Value::kList ? b.list().size() : b.j->size()) > kMaxItems)
        return Error(line, Cat("a list longer than ", kMaxItems, " items"));
      for (Value& v : SeqItems(b)) l.push_back(std::move(v));
      return Value::OfList(std::move(l));
    }
  }
  if (op == "*" && (a.kind == Value::kInt || b.kind == Value::kInt) && (a.kind == Value::kStr || b.kind == Value::kStr || a.is_sequence() || b.is_sequence())) {
    const Value& seq = a.kind == Value::kInt ? b : a;
    int64_t n = a.kind == Value::kInt ? a.i : b.i;
    if (n > 0 && seq.kind == Value::kStr && !seq.s.empty() && static_cast<size_t>(n) > o_.max_output / seq.s.size())
      return Error(line, "a repeated string longer than the output limit");
    if (seq.kind == Value::kStr) {
      std::string s;
      for (int64_t k = 0; k < n; ++k) s += seq.s;
      return Value::Str(std::move(s));
    }
    List base = SeqItems(seq), l;
    if (n > 0 && !base.empty() && static_cast<size_t>(n) > kMaxItems / base.size()) return Error(line, Cat("a list longer than ", kMaxItems, " items"));
    for (int64_t k = 0; k < n; ++k) l.insert(l.end(), base.begin(), base.end());
    return Value::OfList(std::move(l));
  }
  if (op == "%" && a.kind == Value::kStr) return Error(line, "printf-style string formatting (str % ...) is not supported by epp");
  return Error(line, Cat("unsupported operand type(s) for ", op, ": '", TypeName(a), "' and '", TypeName(b), "'"));
}


// Output size limits (RenderOptions::max_output), checked before a string is built so a runaway
// template fails instead of exhausting memory.
// The size a replace() would produce, checked before it is built.
absl::Status Renderer::CheckReplace(std::string_view s, std::string_view from, std::string_view to, int line) const {
  if (to.size() <= from.size() && !from.empty()) return absl::OkStatus();
  size_t n = 0;
  if (from.empty()) n = CountUtf8Chars(s) + 1;
  else
    for (size_t at = s.find(from); at != std::string_view::npos; at = s.find(from, at + from.size())) ++n;
  const size_t grow = to.size() - (from.empty() ? 0 : from.size());
  if (n > 0 && grow > 0 && n > (o_.max_output - std::min(o_.max_output, s.size())) / grow)
    return Error(line, Cat("a string longer than the output limit (", o_.max_output, " bytes)"));
  return absl::OkStatus();
}
// A string of `bytes` bytes, checked before it is built.
absl::Status Renderer::CheckSize(size_t bytes, int line) const {
  if (bytes > o_.max_output) return Error(line, Cat("a string longer than the output limit (", o_.max_output, " bytes)"));
  return absl::OkStatus();
}

// ---- calls ----
// Positional arguments from e.args[first], then keyword arguments, evaluated in order.
absl::StatusOr<Args> Renderer::EvalArgs(const Expr& e, size_t first) {
  Args a;
  for (size_t i = first; i < e.args.size(); ++i) {
    EPP_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i]));
    a.pos.push_back(std::move(v));
  }
  for (const auto& [k, x] : e.kwargs) {
    EPP_ASSIGN_OR_RETURN(Value v, Eval(*x));
    a.kw.emplace_back(k, std::move(v));
  }
  return a;
}

// `f(args)`: the callee, then its arguments.
absl::StatusOr<Value> Renderer::EvalCall(const Expr& e) {
  EPP_ASSIGN_OR_RETURN(Value f, Eval(*e.args[0]));
  EPP_ASSIGN_OR_RETURN(Args a, EvalArgs(e, 1));
  return Call(f, a, e.line, e.args[0]->kind == Expr::kName || e.args[0]->kind == Expr::kAttr ? e.args[0]->name : "");
}

// What is called: a macro, a method bound to its object (jinja_methods.cc), or a global.
absl::StatusOr<Value> Renderer::Call(const Value& f, const Args& a, int line, std::string_view what) {
  if (f.kind != Value::kCallable) {
    if (f.is_undefined()) return Error(line, Cat("'", f.s, "' is undefined (called as a function)"));
    return Error(line, Cat("'", TypeName(f), "' object is not callable"));
  }
  const Callable& c = f.callable();
  (void)what;
  if (c.kind == Callable::kMacro) return CallMacro(*c.macro, a, line);
  if (c.kind == Callable::kMethod) return CallMethod(c.self, c.name, a, line);
  return CallBuiltin(c.name, a, line);
}

// A {% macro %} called as Jinja2 calls it: parameters bind by position or keyword, missing ones
// take their defaults or are Undefined, extra positionals and unknown keywords are errors; the
// value is the body's output. Nesting is capped at 64 against runaway recursion.
absl::StatusOr<Value> Renderer::CallMacro(const Node& m, const Args& a, int line) {
  if (++macro_depth_ > 64) return Error(line, "macros nested more than 64 deep");
  if (a.pos.size() > m.params.size())
    return Error(line, Cat("macro '", m.targets[0], "' takes ", m.params.size(), " arguments, got ", a.pos.size()));
  const size_t saved = base_;
  // The parameters' defaults are evaluated in the macro's scope, as Jinja does.
  frames_.emplace_back();
  base_ = frames_.size() - 1;
  absl::Status st;
  for (size_t i = 0; i < m.params.size() && st.ok(); ++i) {
    const Value* v = a.Get(i, m.params[i]);
    if (v) {
      Assign(m.params[i], *v);
    } else if (m.defaults[i]) {
      absl::StatusOr<Value> d = Eval(*m.defaults[i]);
      if (!d.ok()) st = d.status();
      else Assign(m.params[i], *std::move(d));
    } else {
      Assign(m.params[i], Value::Undefined(m.params[i]));
    }
  }
  for (const auto& [k, v] : a.kw)
    if (std::find(m.params.begin(), m.params.end(), std::string(k)) == m.params.end() && st.ok())
      st = Error(line, Cat("macro '", m.targets[0], "' has no parameter '", k, "'"));
  std::string out;
  if (st.ok()) {
    Flow flow;
    st = Exec(m.body, out, flow);
  }
  frames_.pop_back();
  base_ = saved;
  --macro_depth_;
  if (!st.ok()) return st;
  return Value::Str(std::move(out));
}

// The globals. raise_exception(message) and strftime_now(format) are the ones transformers adds
// (the first fails the render with the template's message, the second formats the render's
// clock in local time); range is Python's, capped at 100000 items as Jinja2's sandbox caps it
// (MAX_RANGE); namespace(...) is Jinja2's mutable object; dict(...) is Python's.
absl::StatusOr<Value> Renderer::CallBuiltin(std::string_view name, const Args& a, int line) {
  if (name == "raise_exception") {
    std::string msg;
    if (const Value* m = a.Get(0, "message")) {
      EPP_ASSIGN_OR_RETURN(msg, Str(*m, line));
    }
    return Error(line, Cat("the template raised an exception: ", msg));
  }
  if (name == "strftime_now") {
    const Value* fmt = a.Get(0, "format");
    if (!fmt || fmt->kind != Value::kStr) return Error(line, "strftime_now(format) needs a format string");
    std::time_t now = o_.now != 0 ? o_.now : std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[256];
    std::string f(fmt->s);
    size_t n = std::strftime(buf, sizeof buf, f.c_str(), &tm);
    return Value::Str(std::string(buf, n));
  }
  if (name == "range") {
    int64_t v[3] = {0, 0, 1};
    if (a.pos.empty() || a.pos.size() > 3) return Error(line, "range() takes 1 to 3 integer arguments");
    for (size_t i = 0; i < a.pos.size(); ++i) {
      if (a.pos[i].kind != Value::kInt) return Error(line, "range() arguments must be integers");
    }
    if (a.pos.size() == 1) v[1] = a.pos[0].i;
    else {
      v[0] = a.pos[0].i;
      v[1] = a.pos[1].i;
      if (a.pos.size() == 3) v[2] = a.pos[2].i;
    }
    if (v[2] == 0) return Error(line, "range() step must not be zero");
    List l;
    for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2]) {
      if (l.size() >= 100000) return Error(line, "range() longer than 100000 items (the sandbox's limit)");
      l.push_back(Value::Int(i));
    }
    return Value::OfList(std::move(l));
  }
  if (name == "namespace" || name == "dict") {
    Dict d;
    if (!a.pos.empty()) {
      if (a.pos.size() > 1 || !a.pos[0].is_mapping()) return Error(line, Cat(name, "() takes a mapping or keyword arguments"));
      for (auto& [k, v] : MapItems(a.pos[0])) d.Set(k, v);
    }
    for (const auto& [k, v] : a.kw) d.Set(k, v);
    Value out;
    out.kind = name == "dict" ? Value::kDict : Value::kNamespace;
    auto held = std::make_shared<Dict>(std::move(d));
    if (name == "namespace") namespaces_.push_back(held);
    out.hold = std::move(held);
    return out;
  }
  return Error(line, Cat("'", name, "' is undefined"));
}

namespace {

// vLLM's detection (renderers/hf.py _detect_content_format): names bound to `messages` (or set
// from it, sliced or filtered), loop variables over those, and a loop over such a variable's
// `content`.
struct ContentLoopFinder {
  std::vector<std::string> message_lists{"messages"};
  std::vector<std::string> message_vars;
  bool found = false;

  static const Expr* Strip(const Expr* e) {  // through filters, tests and slices to the variable
    while (e && (e->kind == Expr::kFilter || e->kind == Expr::kTest || e->kind == Expr::kSlice) && !e->args.empty())
      e = e->args[0].get();
    return e;
  }
  static bool IsName(const Expr* e, const std::vector<std::string>& names) {
    e = Strip(e);
    return e && e->kind == Expr::kName && std::find(names.begin(), names.end(), e->name) != names.end();
  }
  bool IsMessagesExpr(const Expr* e) const {
    e = Strip(e);
    if (!e) return false;
    if (IsName(e, message_lists)) return true;
    return false;
  }
  // `m.content` or `m['content']` for a message variable m (through filters and slices).
  bool IsContentOfMessage(const Expr* e) const {
    e = Strip(e);
    if (!e) return false;
    if (e->kind == Expr::kAttr && e->name == "content") return IsName(e->args[0].get(), message_vars);
    if (e->kind == Expr::kItem && e->args[1]->kind == Expr::kLiteral && e->args[1]->value.kind == Value::kStr &&
        e->args[1]->value.s == "content")
      return IsName(e->args[0].get(), message_vars);
    return false;
  }
  // One pass in template order: a name set from messages counts for the statements after it.
  void Walk(const Body& body) {
    for (const NodePtr& n : body) {
      if (n->kind == Node::kSet && n->targets.size() == 1 && !n->attr_target && n->expr && IsMessagesExpr(n->expr.get()))
        message_lists.push_back(n->targets[0]);
      if (n->kind == Node::kFor) {
        if (IsMessagesExpr(n->expr.get()) && n->targets.size() == 1) message_vars.push_back(n->targets[0]);
        if (IsContentOfMessage(n->expr.get())) found = true;
      }
      for (const Body& b : n->bodies) Walk(b);
      Walk(n->body);
      Walk(n->else_body);
    }
  }
};

}  // namespace

// ---- jinja.h's entry points ----
// A Renderer per call: renders share only the parsed template, which they do not change.
absl::StatusOr<std::string> Render(const Template& t, const OJson& vars, const RenderOptions& options) {
  Renderer r(t, vars, options);
  return r.Run();
}

bool LoopsOverContent(const Template& t) {
  ContentLoopFinder f;
  f.Walk(t.body);
  return f.found;
}

}  // namespace epp::jinja
