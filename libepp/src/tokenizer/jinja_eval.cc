// The Jinja evaluator (jinja.h): Python's semantics for the values chat templates handle.
#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "jinja_ast.h"
#include "common/strings.h"

namespace epp::jinja {

Value Value::Str(std::string x) {
  auto owner = std::make_shared<const std::string>(std::move(x));
  Value v;
  v.kind = kStr;
  v.s = *owner;
  v.hold = std::move(owner);
  return v;
}
Value Value::OfList(List l) {
  Value v;
  v.kind = kList;
  v.hold = std::make_shared<const List>(std::move(l));
  return v;
}
Value Value::OfDict(Dict d) {
  Value v;
  v.kind = kDict;
  v.hold = std::make_shared<const Dict>(std::move(d));
  return v;
}
Value Value::FromJson(const OJson& j) {
  switch (j.type()) {
    case OJson::value_t::null: return None();
    case OJson::value_t::boolean: return Bool(j.get<bool>());
    case OJson::value_t::number_integer: return Int(j.get<int64_t>());
    case OJson::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      return u > static_cast<uint64_t>(INT64_MAX) ? Float(static_cast<double>(u)) : Int(static_cast<int64_t>(u));
    }
    case OJson::value_t::number_float: return Float(j.get<double>());
    case OJson::value_t::string: return View(j.get_ref<const std::string&>());
    case OJson::value_t::array:
    case OJson::value_t::object: {
      Value v;
      v.kind = kJson;
      v.j = &j;
      return v;
    }
    default: return None();
  }
}

struct Callable {
  enum Kind { kMacro, kBuiltin, kMethod } kind = kBuiltin;
  const Node* macro = nullptr;
  std::string_view name;  // builtin or method name
  Value self;             // a method's object
};

namespace {

Value MakeCallable(Callable c) {
  Value v;
  v.kind = Value::kCallable;
  v.hold = std::make_shared<const Callable>(std::move(c));
  return v;
}

// ---- UTF-8 helpers (input is valid UTF-8: template text and parsed JSON) ----
size_t CpLen(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }
int32_t DecodeAt(std::string_view s, size_t i, size_t& len) {
  utf8proc_int32_t cp = 0;
  utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                        static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
  len = n > 0 ? static_cast<size_t>(n) : 1;
  return n > 0 ? cp : static_cast<unsigned char>(s[i]);
}
void AppendCp(int32_t cp, std::string& out) {
  utf8proc_uint8_t buf[4];
  utf8proc_ssize_t n = utf8proc_encode_char(cp, buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}
// Python's str.isspace.
bool PySpace(int32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}
std::vector<size_t> CpOffsets(std::string_view s) {  // byte offset of each code point, plus the end
  std::vector<size_t> o;
  for (size_t i = 0; i < s.size(); i += CpLen(static_cast<unsigned char>(s[i]))) o.push_back(i);
  o.push_back(s.size());
  return o;
}
size_t CpCount(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::string_view StripView(std::string_view s, bool left, bool right, const std::string_view* chars) {
  auto strip_cp = [&](int32_t cp, std::string_view piece) {
    return chars ? chars->find(piece) != std::string_view::npos && !piece.empty() : PySpace(cp);
  };
  if (left) {
    while (!s.empty()) {
      size_t len;
      int32_t cp = DecodeAt(s, 0, len);
      if (!strip_cp(cp, s.substr(0, len))) break;
      s.remove_prefix(len);
    }
  }
  if (right) {
    while (!s.empty()) {
      size_t start = s.size() - 1;
      while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      size_t len;
      int32_t cp = DecodeAt(s, start, len);
      if (!strip_cp(cp, s.substr(start))) break;
      s.remove_suffix(s.size() - start);
    }
  }
  return s;
}

std::string MapCase(std::string_view s, int mode) {  // 0 lower, 1 upper
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out += static_cast<char>(mode ? (c >= 'a' && c <= 'z' ? c - 32 : c) : (c >= 'A' && c <= 'Z' ? c + 32 : c));
      ++i;
      continue;
    }
    size_t len;
    int32_t cp = DecodeAt(s, i, len);
    AppendCp(mode ? utf8proc_toupper(cp) : utf8proc_tolower(cp), out);
    i += len;
  }
  return out;
}
bool IsCased(int32_t cp) { return utf8proc_toupper(cp) != cp || utf8proc_tolower(cp) != cp; }

std::string PyStrRepr(std::string_view s) {
  const bool dq = s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (ch == q || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += ch;
    }
  }
  out += q;
  return out;
}

void JsonString(std::string_view s, std::string& out) {
  out += '"';
  size_t run = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default: {
        static const char* hex = "0123456789abcdef";
        out += "\\u00";
        out += hex[c >> 4];
        out += hex[c & 15];
      }
    }
  }
  out.append(s.data() + run, s.size() - run);
  out += '"';
}

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  Renderer(const Template& t, const OJson& vars, const RenderOptions& o) : t_(t), vars_(vars), o_(o) {
    frames_.emplace_back();
  }

  absl::StatusOr<std::string> Run() {
    std::string out;
    Flow f;
    EPP_RETURN_IF_ERROR(Exec(t_.body, out, f));
    return out;
  }

 private:
  using Frame = std::vector<std::pair<std::string_view, Value>>;

  absl::Status Error(int line, std::string_view what) const {
    return absl::InvalidArgumentError(Cat(t_.name, " line ", line, ": ", what));
  }

  // ---- names ----
  Value Lookup(std::string_view name) const {
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
  void Assign(std::string_view name, Value v) {
    Frame& f = frames_.back();
    for (auto& [k, old] : f)
      if (k == name) {
        old = std::move(v);
        return;
      }
    f.emplace_back(name, std::move(v));
  }

  // ---- statements ----
  absl::Status Exec(const Body& body, std::string& out, Flow& flow) {
    flow = Flow::kNormal;
    for (const NodePtr& n : body) {
      EPP_RETURN_IF_ERROR(ExecOne(*n, out, flow));
      if (flow != Flow::kNormal) return absl::OkStatus();
      if (out.size() > o_.max_output)
        return Error(n->line, Cat("the output passed ", o_.max_output, " bytes (a runaway template?)"));
    }
    return absl::OkStatus();
  }

  absl::Status ExecOne(const Node& n, std::string& out, Flow& flow) {
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

  absl::Status SetTargets(const Node& n, Value v) {
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

  absl::Status ExecFor(const Node& n, std::string& out) {
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

  // ---- conversions ----
  static bool Truthy(const Value& v) {
    switch (v.kind) {
      case Value::kUndefined:
      case Value::kNone: return false;
      case Value::kBool: return v.b;
      case Value::kInt: return v.i != 0;
      case Value::kFloat: return v.f != 0;
      case Value::kStr: return !v.s.empty();
      case Value::kList: return !v.list().empty();
      case Value::kDict: return !v.dict().items.empty();
      case Value::kJson: return !v.j->empty();
      case Value::kNamespace:
      case Value::kCallable: return true;
    }
    return false;
  }

  // Python's str(v), appended.
  absl::Status AppendStr(const Value& v, std::string& out, int line) const {
    switch (v.kind) {
      case Value::kUndefined: return absl::OkStatus();
      case Value::kStr: out += v.s; return absl::OkStatus();
      default: return AppendRepr(v, out, line, /*top=*/true);
    }
  }
  absl::Status AppendRepr(const Value& v, std::string& out, int line, bool top) const {
    switch (v.kind) {
      case Value::kUndefined: out += top ? "" : "Undefined"; break;
      case Value::kNone: out += "None"; break;
      case Value::kBool: out += v.b ? "True" : "False"; break;
      case Value::kInt: absl::StrAppend(&out, v.i); break;
      case Value::kFloat: out += PyFloatRepr(v.f); break;
      case Value::kStr: out += top ? std::string(v.s) : PyStrRepr(v.s); break;
      case Value::kList:
      case Value::kJson:
      case Value::kDict:
      case Value::kNamespace: {
        // A container that holds itself prints as Python prints it: [...] / {...}.
        const void* id = v.kind == Value::kJson ? static_cast<const void*>(v.j) : v.hold.get();
        if (std::find(printing_.begin(), printing_.end(), id) != printing_.end()) {
          out += v.kind == Value::kNamespace ? "<Namespace {...}>" : v.is_mapping() ? "{...}" : v.tuple ? "(...)" : "[...]";
          return absl::OkStatus();
        }
        if (printing_.size() > 200) return Error(line, "a value nested too deeply to print");
        printing_.push_back(id);
        struct Pop {
          std::vector<const void*>& s;
          ~Pop() { s.pop_back(); }
        } pop{printing_};
        if (v.kind == Value::kNamespace) out += "<Namespace ";
        const bool map = v.is_mapping();
        out += map ? "{" : v.tuple ? "(" : "[";
        bool first = true;
        auto each = [&](std::string_view key, const Value& x) -> absl::Status {
          if (!first) out += ", ";
          first = false;
          if (map) {
            out += PyStrRepr(key);
            out += ": ";
          }
          return AppendRepr(x, out, line, false);
        };
        if (v.kind == Value::kList) {
          for (const Value& x : v.list()) EPP_RETURN_IF_ERROR(each({}, x));
        } else if (v.kind == Value::kJson) {
          for (auto it = v.j->begin(); it != v.j->end(); ++it)
            EPP_RETURN_IF_ERROR(each(v.j->is_object() ? std::string_view(it.key()) : std::string_view(), Value::FromJson(*it)));
        } else {
          for (const auto& [k, x] : (v.kind == Value::kDict ? v.dict() : v.ns()).items) EPP_RETURN_IF_ERROR(each(k, x));
        }
        if (v.tuple && v.list().size() == 1) out += ',';
        out += map ? "}" : v.tuple ? ")" : "]";
        if (v.kind == Value::kNamespace) out += '>';
        break;
      }
      case Value::kCallable: out += Cat("<function ", v.callable().name, ">"); break;
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> Str(const Value& v, int line) const {
    if (v.kind == Value::kStr) return std::string(v.s);
    std::string out;
    EPP_RETURN_IF_ERROR(AppendStr(v, out, line));
    return out;
  }

  // The items of an iterable: list elements, mapping keys, a string's characters.
  absl::StatusOr<List> Items(const Value& v, int line) const {
    List out;
    switch (v.kind) {
      case Value::kList: return v.list();
      case Value::kJson:
        out.reserve(v.j->size());
        if (v.j->is_array()) {
          for (const OJson& x : *v.j) out.push_back(Value::FromJson(x));
        } else {
          for (auto it = v.j->begin(); it != v.j->end(); ++it) out.push_back(Value::View(it.key()));
        }
        return out;
      case Value::kDict:
        for (const auto& [k, x] : v.dict().items) out.push_back(Value::Str(k));
        return out;
      case Value::kStr:
        for (size_t i = 0; i < v.s.size();) {
          size_t len = CpLen(static_cast<unsigned char>(v.s[i]));
          Value c = v;
          c.s = v.s.substr(i, len);
          out.push_back(std::move(c));
          i += len;
        }
        return out;
      case Value::kUndefined: return out;
      default: return Error(line, Cat("'", TypeName(v), "' object is not iterable"));
    }
  }
  static std::string_view TypeName(const Value& v) {
    switch (v.kind) {
      case Value::kUndefined: return "Undefined";
      case Value::kNone: return "NoneType";
      case Value::kBool: return "bool";
      case Value::kInt: return "int";
      case Value::kFloat: return "float";
      case Value::kStr: return "str";
      case Value::kList: return "list";
      case Value::kDict: return "dict";
      case Value::kJson: return v.j->is_array() ? "list" : "dict";
      case Value::kNamespace: return "Namespace";
      case Value::kCallable: return "function";
    }
    return "?";
  }
  absl::StatusOr<int64_t> Length(const Value& v, int line) const {
    switch (v.kind) {
      case Value::kStr: return static_cast<int64_t>(CpCount(v.s));
      case Value::kList: return static_cast<int64_t>(v.list().size());
      case Value::kDict: return static_cast<int64_t>(v.dict().items.size());
      case Value::kNamespace: return static_cast<int64_t>(v.ns().items.size());
      case Value::kJson: return static_cast<int64_t>(v.j->size());
      case Value::kUndefined: return 0;
      default: return Error(line, Cat("object of type '", TypeName(v), "' has no len()"));
    }
  }

  // ---- comparisons ----
  static bool Equal(const Value& a, const Value& b) {
    auto num = [](const Value& v, double& d, bool& is_int, int64_t& i) {
      if (v.kind == Value::kInt || v.kind == Value::kBool) {
        i = v.kind == Value::kInt ? v.i : v.b;
        d = static_cast<double>(i);
        is_int = true;
        return true;
      }
      if (v.kind == Value::kFloat) {
        d = v.f;
        is_int = false;
        return true;
      }
      return false;
    };
    double da, db;
    bool ia, ib;
    int64_t xa, xb;
    if (num(a, da, ia, xa) && num(b, db, ib, xb)) return ia && ib ? xa == xb : da == db;
    if (a.kind == Value::kStr || b.kind == Value::kStr) return a.kind == b.kind && a.s == b.s;
    if (a.kind == Value::kNone || b.kind == Value::kNone) return a.kind == b.kind;
    if (a.kind == Value::kUndefined || b.kind == Value::kUndefined) return a.kind == b.kind;
    if (a.is_sequence() && b.is_sequence()) {
      List la = SeqItems(a), lb = SeqItems(b);
      if (la.size() != lb.size()) return false;
      for (size_t i = 0; i < la.size(); ++i)
        if (!Equal(la[i], lb[i])) return false;
      return true;
    }
    if (a.is_mapping() && b.is_mapping() && a.kind != Value::kNamespace && b.kind != Value::kNamespace) {
      std::vector<std::pair<std::string, Value>> ma = MapItems(a), mb = MapItems(b);
      if (ma.size() != mb.size()) return false;
      for (const auto& kv : ma) {
        auto it = std::find_if(mb.begin(), mb.end(), [&](const auto& p) { return p.first == kv.first; });
        if (it == mb.end() || !Equal(kv.second, it->second)) return false;
      }
      return true;
    }
    return a.kind == b.kind && a.hold == b.hold && (a.kind != Value::kJson || a.j == b.j);
  }
  static List SeqItems(const Value& v) {
    if (v.kind == Value::kList) return v.list();
    List out;
    for (const OJson& x : *v.j) out.push_back(Value::FromJson(x));
    return out;
  }
  static std::vector<std::pair<std::string, Value>> MapItems(const Value& v) {
    if (v.kind == Value::kDict) return v.dict().items;
    if (v.kind == Value::kNamespace) return v.ns().items;
    std::vector<std::pair<std::string, Value>> out;
    for (auto it = v.j->begin(); it != v.j->end(); ++it) out.emplace_back(it.key(), Value::FromJson(*it));
    return out;
  }
  absl::StatusOr<int> Order(const Value& a, const Value& b, int line) const {  // <0, 0, >0
    auto is_num = [](const Value& v) { return v.kind == Value::kInt || v.kind == Value::kFloat || v.kind == Value::kBool; };
    if (is_num(a) && is_num(b)) {
      if ((a.kind != Value::kFloat) && (b.kind != Value::kFloat)) {
        int64_t x = a.kind == Value::kInt ? a.i : a.b, y = b.kind == Value::kInt ? b.i : b.b;
        return x < y ? -1 : x > y ? 1 : 0;
      }
      double x = a.kind == Value::kFloat ? a.f : a.kind == Value::kInt ? static_cast<double>(a.i) : a.b;
      double y = b.kind == Value::kFloat ? b.f : b.kind == Value::kInt ? static_cast<double>(b.i) : b.b;
      return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.kind == Value::kStr && b.kind == Value::kStr) return a.s.compare(b.s) < 0 ? -1 : a.s == b.s ? 0 : 1;
    if (a.is_sequence() && b.is_sequence()) {
      List la = SeqItems(a), lb = SeqItems(b);
      for (size_t i = 0; i < la.size() && i < lb.size(); ++i) {
        if (Equal(la[i], lb[i])) continue;
        return Order(la[i], lb[i], line);
      }
      return la.size() < lb.size() ? -1 : la.size() > lb.size() ? 1 : 0;
    }
    if (a.is_undefined() || b.is_undefined())
      return Error(line, Cat("'", a.is_undefined() ? a.s : b.s, "' is undefined"));
    return Error(line, Cat("'<' not supported between instances of '", TypeName(a), "' and '", TypeName(b), "'"));
  }
  absl::StatusOr<bool> Contains(const Value& container, const Value& x, int line) const {
    switch (container.kind) {
      case Value::kStr:
        if (x.kind != Value::kStr)
          return Error(line, Cat("'in <string>' requires string as left operand, not ", TypeName(x)));
        return container.s.find(x.s) != std::string_view::npos;
      case Value::kList:
        for (const Value& v : container.list())
          if (Equal(v, x)) return true;
        return false;
      case Value::kJson:
        if (container.j->is_object()) return x.kind == Value::kStr && container.j->contains(std::string(x.s));
        for (const OJson& v : *container.j)
          if (Equal(Value::FromJson(v), x)) return true;
        return false;
      case Value::kDict: return x.kind == Value::kStr && container.dict().Find(x.s) != nullptr;
      case Value::kNamespace: return x.kind == Value::kStr && container.ns().Find(x.s) != nullptr;
      case Value::kUndefined: return false;
      default: return Error(line, Cat("argument of type '", TypeName(container), "' is not iterable"));
    }
  }

  // ---- attribute and item access ----
  static bool IsDictMethod(std::string_view n) {
    return n == "items" || n == "keys" || n == "values" || n == "get" || n == "pop" || n == "update" || n == "copy" ||
           n == "setdefault" || n == "clear" || n == "popitem";
  }
  static bool IsStrMethod(std::string_view n) {
    static constexpr std::string_view kNames[] = {
        "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format", "format_map",
        "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric",
        "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "partition", "removeprefix",
        "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit", "rstrip", "split", "splitlines",
        "startswith", "strip", "swapcase", "title", "translate", "upper", "zfill"};
    for (std::string_view k : kNames)
      if (k == n) return true;
    return false;
  }
  static bool IsListMethod(std::string_view n) {
    return n == "append" || n == "extend" || n == "insert" || n == "pop" || n == "remove" || n == "reverse" || n == "sort" ||
           n == "clear" || n == "copy" || n == "index" || n == "count";
  }
  static Value Method(const Value& self, std::string_view name) {
    Callable c;
    c.kind = Callable::kMethod;
    c.name = name;
    c.self = self;
    return MakeCallable(std::move(c));
  }
  absl::StatusOr<Value> MapGet(const Value& m, std::string_view key) const {
    if (m.kind == Value::kJson) {
      auto it = m.j->find(std::string(key));
      if (it != m.j->end()) return Value::FromJson(*it);
      return Value::Undefined(key);
    }
    const Dict& d = m.kind == Value::kDict ? m.dict() : m.ns();
    if (const Value* v = d.Find(key)) return *v;
    return Value::Undefined(key);
  }
  absl::StatusOr<Value> GetAttr(const Value& v, std::string_view name, int line) const {
    if (v.is_undefined()) return Error(line, Cat("'", v.s, "' is undefined (reading its attribute '", name, "')"));
    if (v.kind == Value::kNamespace) return MapGet(v, name);
    if (v.is_mapping()) {
      if (IsDictMethod(name)) return Method(v, name);
      return MapGet(v, name);
    }
    if (v.kind == Value::kStr && IsStrMethod(name)) return Method(v, name);
    if (v.is_sequence() && IsListMethod(name)) return Method(v, name);
    return Value::Undefined(name);
  }
  absl::StatusOr<Value> GetItem(const Value& v, const Value& key, int line) const {
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
  absl::StatusOr<Value> Slice(const Value& v, const Value* a, const Value* b, const Value* c, int line) const {
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
  absl::StatusOr<Value> Eval(const Expr& e) {
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

  absl::StatusOr<Value> EvalAddChain(const Expr& e) {
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

  absl::StatusOr<Value> Arith(std::string_view op, const Value& a, const Value& b, int line) const {
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

  static constexpr size_t kMaxItems = 1000000;
  // The size a replace() would produce, checked before it is built.
  absl::Status CheckReplace(std::string_view s, std::string_view from, std::string_view to, int line) const {
    if (to.size() <= from.size() && !from.empty()) return absl::OkStatus();
    size_t n = 0;
    if (from.empty()) n = CpCount(s) + 1;
    else
      for (size_t at = s.find(from); at != std::string_view::npos; at = s.find(from, at + from.size())) ++n;
    const size_t grow = to.size() - (from.empty() ? 0 : from.size());
    if (n > 0 && grow > 0 && n > (o_.max_output - std::min(o_.max_output, s.size())) / grow)
      return Error(line, Cat("a string longer than the output limit (", o_.max_output, " bytes)"));
    return absl::OkStatus();
  }
  absl::Status CheckSize(size_t bytes, int line) const {
    if (bytes > o_.max_output) return Error(line, Cat("a string longer than the output limit (", o_.max_output, " bytes)"));
    return absl::OkStatus();
  }

  // ---- calls ----
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
  absl::StatusOr<Args> EvalArgs(const Expr& e, size_t first) {
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

  absl::StatusOr<Value> EvalCall(const Expr& e) {
    EPP_ASSIGN_OR_RETURN(Value f, Eval(*e.args[0]));
    EPP_ASSIGN_OR_RETURN(Args a, EvalArgs(e, 1));
    return Call(f, a, e.line, e.args[0]->kind == Expr::kName || e.args[0]->kind == Expr::kAttr ? e.args[0]->name : "");
  }

  absl::StatusOr<Value> Call(const Value& f, const Args& a, int line, std::string_view what) {
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

  absl::StatusOr<Value> CallMacro(const Node& m, const Args& a, int line) {
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

  absl::StatusOr<Value> CallBuiltin(std::string_view name, const Args& a, int line) {
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

  static absl::StatusOr<std::string_view> StrArg(const Value* v) {
    if (!v || v->kind != Value::kStr) return absl::InvalidArgumentError("expected a string argument");
    return v->s;
  }

  absl::StatusOr<Value> CallMethod(const Value& self, std::string_view name, const Args& a, int line) {
    auto bad = [&](std::string_view why) { return Error(line, Cat(TypeName(self), ".", name, "(): ", why)); };
    if (name == "cycle" && self.kind == Value::kInt) {  // loop.cycle
      if (a.pos.empty()) return bad("needs at least one value");
      return a.pos[static_cast<size_t>(self.i) % a.pos.size()];
    }
    if (self.kind == Value::kStr) {
      std::string_view s = self.s;
      if (name == "strip" || name == "lstrip" || name == "rstrip") {
        const Value* chars = a.Get(0, "chars");
        std::string_view cs;
        const bool has = chars && chars->kind == Value::kStr;
        if (chars && chars->kind != Value::kStr && chars->kind != Value::kNone) return bad("chars must be a string or None");
        if (has) cs = chars->s;
        Value r = self;
        r.s = StripView(s, name != "rstrip", name != "lstrip", has ? &cs : nullptr);
        return r;
      }
      if (name == "split" || name == "rsplit") {
        const Value* sep = a.Get(0, "sep");
        const Value* maxv = a.Get(1, "maxsplit");
        int64_t maxsplit = maxv && maxv->kind == Value::kInt ? maxv->i : -1;
        List out;
        auto piece = [&](std::string_view p) {
          Value v = self;
          v.s = p;
          return v;
        };
        if (!sep || sep->kind == Value::kNone) {  // runs of whitespace, ends dropped
          std::vector<std::string_view> words;
          size_t i = 0;
          while (i < s.size()) {
            size_t len;
            while (i < s.size() && PySpace(DecodeAt(s, i, len))) i += len;
            if (i >= s.size()) break;
            size_t start = i;
            while (i < s.size() && !PySpace(DecodeAt(s, i, len))) i += len;
            words.push_back(s.substr(start, i - start));
          }
          if (maxsplit >= 0 && static_cast<int64_t>(words.size()) > maxsplit + 1) {
            // Rare; fall back to joining the rest as Python keeps it (from the first kept word on).
            if (name == "split") {
              std::vector<std::string_view> head(words.begin(), words.begin() + maxsplit);
              size_t rest = static_cast<size_t>(words[static_cast<size_t>(maxsplit)].data() - s.data());
              head.push_back(StripView(s.substr(rest), false, true, nullptr));
              words = head;
            } else {
              return bad("rsplit() without a separator and with maxsplit is not supported by epp");
            }
          }
          for (std::string_view w : words) out.push_back(piece(w));
          return Value::OfList(std::move(out));
        }
        EPP_ASSIGN_OR_RETURN(std::string_view sp, StrArg(sep));
        if (sp.empty()) return bad("empty separator");
        std::vector<std::string_view> parts;
        if (name == "split") {
          size_t from = 0;
          while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
            size_t at = s.find(sp, from);
            if (at == std::string_view::npos) break;
            parts.push_back(s.substr(from, at - from));
            from = at + sp.size();
          }
          parts.push_back(s.substr(from));
        } else {
          size_t end = s.size();
          std::vector<std::string_view> rev;
          while (maxsplit < 0 || static_cast<int64_t>(rev.size()) < maxsplit) {
            if (end < sp.size()) break;
            size_t at = s.rfind(sp, end - sp.size());
            if (at == std::string_view::npos) break;
            rev.push_back(s.substr(at + sp.size(), end - at - sp.size()));
            end = at;
          }
          rev.push_back(s.substr(0, end));
          parts.assign(rev.rbegin(), rev.rend());
        }
        for (std::string_view p : parts) out.push_back(piece(p));
        return Value::OfList(std::move(out));
      }
      if (name == "startswith" || name == "endswith") {
        const Value* p = a.Get(0, "prefix");
        if (!p) return bad("needs an argument");
        List options;
        if (p->kind == Value::kStr) options.push_back(*p);
        else if (p->is_sequence()) options = SeqItems(*p);
        else return bad("the argument must be a string or a tuple of strings");
        for (const Value& o : options) {
          if (o.kind != Value::kStr) return bad("the argument must be a string or a tuple of strings");
          if (name == "startswith" ? s.substr(0, o.s.size()) == o.s : (s.size() >= o.s.size() && s.substr(s.size() - o.s.size()) == o.s))
            return Value::Bool(true);
        }
        return Value::Bool(false);
      }
      if (name == "upper" || name == "lower") return Value::Str(MapCase(s, name == "upper"));
      if (name == "capitalize") return Value::Str(Capitalize(s));
      if (name == "title") return Value::Str(PyTitle(s));
      if (name == "replace") {
        EPP_ASSIGN_OR_RETURN(std::string_view from, StrArg(a.Get(0, "old")));
        EPP_ASSIGN_OR_RETURN(std::string_view to, StrArg(a.Get(1, "new")));
        const Value* cnt = a.Get(2, "count");
        EPP_RETURN_IF_ERROR(CheckReplace(s, from, to, line));
        return Value::Str(Replace(s, from, to, cnt && cnt->kind == Value::kInt ? cnt->i : -1));
      }
      if (name == "find" || name == "rfind" || name == "count" || name == "index" || name == "rindex") {
        EPP_ASSIGN_OR_RETURN(std::string_view sub, StrArg(a.Get(0, "sub")));
        if (name == "count") {
          int64_t n = 0;
          if (sub.empty()) return Value::Int(static_cast<int64_t>(CpCount(s)) + 1);
          for (size_t at = s.find(sub); at != std::string_view::npos; at = s.find(sub, at + sub.size())) ++n;
          return Value::Int(n);
        }
        size_t at = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
        if (at == std::string_view::npos) {
          if (name == "index" || name == "rindex") return bad("substring not found");
          return Value::Int(-1);
        }
        return Value::Int(static_cast<int64_t>(CpCount(s.substr(0, at))));
      }
      if (name == "join") {
        const Value* it = a.Get(0, "iterable");
        if (!it) return bad("needs an iterable");
        EPP_ASSIGN_OR_RETURN(List items, Items(*it, line));
        std::string out;
        for (size_t i = 0; i < items.size(); ++i) {
          if (items[i].kind != Value::kStr) return bad(Cat("sequence item ", i, ": expected str instance, ", TypeName(items[i]), " found"));
          if (i) out += s;
          out += items[i].s;
        }
        return Value::Str(std::move(out));
      }
      if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum" || name == "isupper" || name == "islower") {
        if (s.empty()) return Value::Bool(false);
        bool cased = false;
        for (size_t i = 0; i < s.size();) {
          size_t len;
          int32_t cp = DecodeAt(s, i, len);
          i += len;
          const utf8proc_category_t cat = utf8proc_category(cp);
          const bool alpha = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT ||
                             cat == UTF8PROC_CATEGORY_LM || cat == UTF8PROC_CATEGORY_LO;
          const bool digit = cat == UTF8PROC_CATEGORY_ND;
          if (name == "isdigit" && !digit) return Value::Bool(false);
          if (name == "isalpha" && !alpha) return Value::Bool(false);
          if (name == "isalnum" && !alpha && !digit && cat != UTF8PROC_CATEGORY_NL && cat != UTF8PROC_CATEGORY_NO) return Value::Bool(false);
          if (name == "isspace" && !PySpace(cp)) return Value::Bool(false);
          if (name == "isupper" || name == "islower") {
            if (IsCased(cp)) {
              cased = true;
              if (name == "isupper" ? utf8proc_toupper(cp) != cp : utf8proc_tolower(cp) != cp) return Value::Bool(false);
            }
          }
        }
        return Value::Bool(name == "isupper" || name == "islower" ? cased : true);
      }
      if (name == "splitlines") {
        List out;
        size_t from = 0;
        for (size_t i = 0; i < s.size(); ++i)
          if (s[i] == '\n') {
            Value v = self;
            v.s = s.substr(from, i - from);
            out.push_back(v);
            from = i + 1;
          }
        if (from < s.size()) {
          Value v = self;
          v.s = s.substr(from);
          out.push_back(v);
        }
        return Value::OfList(std::move(out));
      }
      if (name == "removeprefix" || name == "removesuffix") {
        EPP_ASSIGN_OR_RETURN(std::string_view x, StrArg(a.Get(0, "prefix")));
        Value r = self;
        if (name == "removeprefix" && s.substr(0, x.size()) == x) r.s = s.substr(x.size());
        if (name == "removesuffix" && s.size() >= x.size() && s.substr(s.size() - x.size()) == x) r.s = s.substr(0, s.size() - x.size());
        return r;
      }
      return Error(line, Cat("str.", name, "() is not supported by epp"));
    }
    if (self.is_mapping() && self.kind != Value::kNamespace) {
      if (name == "get") {
        const Value* k = a.Get(0, "key");
        if (!k || k->kind != Value::kStr) return bad("needs a string key");
        EPP_ASSIGN_OR_RETURN(Value v, MapGet(self, k->s));
        if (v.is_undefined()) {
          const Value* d = a.Get(1, "default");
          return d ? *d : Value::None();
        }
        return v;
      }
      if (name == "items" || name == "keys" || name == "values") {
        List out;
        for (auto& [k, v] : MapItems(self)) {
          if (name == "items") out.push_back(Value::OfTuple({Value::Str(k), v}));
          else if (name == "keys") out.push_back(Value::Str(k));
          else out.push_back(v);
        }
        return Value::OfList(std::move(out));
      }
      return Error(line, Cat("dict.", name, "() modifies its object, which the sandboxed chat template environment refuses"));
    }
    if (self.is_sequence()) {
      if (name == "index" || name == "count") {
        const Value* x = a.Get(0, "value");
        if (!x) return bad("needs a value");
        List items = SeqItems(self);
        int64_t n = 0;
        for (size_t i = 0; i < items.size(); ++i)
          if (Equal(items[i], *x)) {
            if (name == "index") return Value::Int(static_cast<int64_t>(i));
            ++n;
          }
        if (name == "index") return bad("value is not in list");
        return Value::Int(n);
      }
      return Error(line, Cat("list.", name, "() modifies its object, which the sandboxed chat template environment refuses"));
    }
    return Error(line, Cat("'", TypeName(self), "' has no method '", name, "'"));
  }

  static std::string Capitalize(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
      size_t len;
      int32_t cp = DecodeAt(s, i, len);
      AppendCp(i == 0 ? utf8proc_totitle(cp) : utf8proc_tolower(cp), out);
      i += len;
    }
    return out;
  }
  static std::string PyTitle(std::string_view s) {  // str.title: a cased char after an uncased one is titled
    std::string out;
    bool prev_cased = false;
    for (size_t i = 0; i < s.size();) {
      size_t len;
      int32_t cp = DecodeAt(s, i, len);
      i += len;
      const bool cased = IsCased(cp);
      AppendCp(cased ? (prev_cased ? utf8proc_tolower(cp) : utf8proc_totitle(cp)) : cp, out);
      prev_cased = cased;
    }
    return out;
  }
  static std::string Replace(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
    std::string out;
    if (from.empty()) {  // Python inserts `to` between characters (and at both ends)
      int64_t n = 0;
      for (size_t i = 0; i <= s.size();) {
        if (count < 0 || n < count) {
          out += to;
          ++n;
        }
        if (i == s.size()) break;
        size_t len = CpLen(static_cast<unsigned char>(s[i]));
        out.append(s.substr(i, len));
        i += len;
      }
      return out;
    }
    size_t from_pos = 0;
    int64_t n = 0;
    while (count < 0 || n < count) {
      size_t at = s.find(from, from_pos);
      if (at == std::string_view::npos) break;
      out.append(s.substr(from_pos, at - from_pos));
      out += to;
      from_pos = at + from.size();
      ++n;
    }
    out.append(s.substr(from_pos));
    return out;
  }

  // ---- filters ----
  absl::StatusOr<Value> EvalFilter(const Expr& e) {
    EPP_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
    EPP_ASSIGN_OR_RETURN(Args a, EvalArgs(e, 1));
    return ApplyFilter(e.name, v, a, e.line);
  }

  absl::StatusOr<Value> ApplyFilter(std::string_view f, const Value& v, const Args& a, int line) {
    auto bad = [&](std::string_view why) { return Error(line, Cat("filter '", f, "': ", why)); };
    if (f == "default" || f == "d") {
      const Value* dv = a.Get(0, "default_value");
      const Value* boolean = a.Get(1, "boolean");
      const bool use = v.is_undefined() || (boolean && Truthy(*boolean) && !Truthy(v));
      if (use) return dv ? *dv : Value::View("");
      return v;
    }
    if (f == "safe") return v;
    if (f == "trim") {
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
    if (f == "length" || f == "count") {
      EPP_ASSIGN_OR_RETURN(int64_t n, Length(v, line));
      return Value::Int(n);
    }
    if (f == "tojson") {
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
    if (f == "string") {
      if (v.kind == Value::kStr) return v;
      EPP_ASSIGN_OR_RETURN(std::string s, Str(v, line));
      return Value::Str(std::move(s));
    }
    if (f == "upper" || f == "lower" || f == "capitalize" || f == "title") {
      EPP_ASSIGN_OR_RETURN(std::string s, Str(v, line));
      if (f == "upper" || f == "lower") return Value::Str(MapCase(s, f == "upper"));
      if (f == "capitalize") return Value::Str(Capitalize(s));
      return Value::Str(JinjaTitle(s));
    }
    if (f == "replace") {
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
    if (f == "list") {
      EPP_ASSIGN_OR_RETURN(List items, Items(v, line));
      return Value::OfList(std::move(items));
    }
    if (f == "first" || f == "last") {
      EPP_ASSIGN_OR_RETURN(List items, Items(v, line));
      if (items.empty()) return Value::Undefined(Cat("the ", f, " item of an empty sequence"));
      return f == "first" ? items.front() : items.back();
    }
    if (f == "reverse") {
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
    if (f == "join") {
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
    if (f == "items") {
      if (v.is_undefined()) return Value::OfList({});
      if (!v.is_mapping()) return bad("needs a mapping");
      List out;
      for (auto& [k, x] : MapItems(v)) out.push_back(Value::OfTuple({Value::Str(k), x}));
      return Value::OfList(std::move(out));
    }
    if (f == "dictsort") {
      if (!v.is_mapping()) return bad("needs a mapping");
      auto items = MapItems(v);
      std::stable_sort(items.begin(), items.end(), [](const auto& x, const auto& y) { return MapCase(x.first, 0) < MapCase(y.first, 0); });
      List out;
      for (auto& [k, x] : items) out.push_back(Value::OfTuple({Value::Str(k), x}));
      return Value::OfList(std::move(out));
    }
    if (f == "map") {
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
    if (f == "select" || f == "reject" || f == "selectattr" || f == "rejectattr") {
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
    if (f == "unique") {
      EPP_ASSIGN_OR_RETURN(List items, Items(v, line));
      List out;
      for (const Value& x : items)
        if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return Equal(x, y); })) out.push_back(x);
      return Value::OfList(std::move(out));
    }
    if (f == "sort") {
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
    if (f == "min" || f == "max" || f == "sum") {
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
      if (items.empty()) return Value::Undefined(Cat(f, " of an empty sequence"));
      Value best = items[0];
      for (size_t i = 1; i < items.size(); ++i) {
        EPP_ASSIGN_OR_RETURN(int o, Order(items[i], best, line));
        if (f == "min" ? o < 0 : o > 0) best = items[i];
      }
      return best;
    }
    if (f == "abs") {
      if (v.kind == Value::kInt) return Value::Int(v.i < 0 ? -v.i : v.i);
      if (v.kind == Value::kFloat) return Value::Float(std::fabs(v.f));
      return bad(Cat("bad operand type for abs(): '", TypeName(v), "'"));
    }
    if (f == "int" || f == "float") {
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
    if (f == "round") {
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
    if (f == "indent") {
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
    if (f == "wordcount") {
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
    if (f == "escape" || f == "e") {
      EPP_ASSIGN_OR_RETURN(std::string s, Str(v, line));
      return Value::Str(epp::internal::EscapeMarkup(s, "&#34;", "&#39;"));
    }
    return bad("is not supported by epp");
  }
  absl::StatusOr<Value> ApplyNamedFilter(const std::string& name, const Value& v, const Args& a, int line) {
    static const char* kAllowed[] = {"abs", "capitalize", "count", "default", "d", "first", "float", "int", "join", "last", "length",
                                     "list", "lower", "reverse", "safe", "string", "title", "tojson", "trim", "upper", "unique"};
    for (const char* k : kAllowed)
      if (name == k) return ApplyFilter(k, v, a, line);
    return Error(line, Cat("map('", name, "'): the filter is not supported by epp in map()"));
  }
  // Jinja's title filter: each word's first character upper, the rest lower; words begin after
  // whitespace and -({[<.
  static std::string JinjaTitle(std::string_view s) {
    std::string out;
    bool start = true;
    for (size_t i = 0; i < s.size();) {
      size_t len;
      int32_t cp = DecodeAt(s, i, len);
      i += len;
      const bool sep = PySpace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
      AppendCp(sep ? cp : start ? utf8proc_toupper(cp) : utf8proc_tolower(cp), out);
      start = sep;
    }
    return out;
  }
  // attribute="a.b.0" as Jinja's make_attrgetter reads it.
  absl::StatusOr<Value> AttrPath(const Value& v, const Value& path, int line) const {
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

  // ---- tests ----
  absl::StatusOr<bool> EvalTest(const Expr& e) {
    // `x is defined` must not fail on an undefined x's attribute lookups: evaluate as usual; an
    // undefined value reaching here is fine.
    EPP_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
    EPP_ASSIGN_OR_RETURN(Args a, EvalArgs(e, 1));
    return ApplyTest(e.name, v, a, e.line);
  }
  absl::StatusOr<bool> ApplyTest(std::string_view t, const Value& v, const Args& a, int line) const {
    const Value* arg = a.Get(0, "other");
    auto need = [&]() -> absl::Status {
      if (!arg) return Error(line, Cat("the test '", t, "' needs an argument"));
      return absl::OkStatus();
    };
    if (t == "defined") return !v.is_undefined();
    if (t == "undefined") return v.is_undefined();
    if (t == "none") return v.kind == Value::kNone;
    if (t == "boolean") return v.kind == Value::kBool;
    if (t == "true") return v.kind == Value::kBool && v.b;
    if (t == "false") return v.kind == Value::kBool && !v.b;
    if (t == "integer") return v.kind == Value::kInt;
    if (t == "float") return v.kind == Value::kFloat;
    if (t == "number") return v.kind == Value::kInt || v.kind == Value::kFloat || v.kind == Value::kBool;
    if (t == "string") return v.kind == Value::kStr;
    if (t == "mapping") return v.is_mapping() && v.kind != Value::kNamespace;
    if (t == "iterable") return v.kind == Value::kStr || v.is_sequence() || v.is_mapping() || v.is_undefined();
    if (t == "sequence") return v.kind == Value::kStr || v.is_sequence() || v.is_mapping();
    if (t == "callable") return v.kind == Value::kCallable;
    if (t == "escaped") return false;
    if (t == "lower" || t == "upper") {
      if (v.kind != Value::kStr) return false;
      return MapCase(v.s, t == "upper") == v.s;
    }
    if (t == "even" || t == "odd") {
      if (v.kind != Value::kInt) return Error(line, Cat("the test '", t, "' needs an integer"));
      return (v.i % 2 == 0) == (t == "even");
    }
    if (t == "divisibleby") {
      EPP_RETURN_IF_ERROR(need());
      if (v.kind != Value::kInt || arg->kind != Value::kInt || arg->i == 0) return Error(line, "divisibleby needs nonzero integers");
      return v.i % arg->i == 0;
    }
    if (t == "eq" || t == "equalto" || t == "==") {
      EPP_RETURN_IF_ERROR(need());
      return Equal(v, *arg);
    }
    if (t == "ne" || t == "!=") {
      EPP_RETURN_IF_ERROR(need());
      return !Equal(v, *arg);
    }
    if (t == "sameas") {
      EPP_RETURN_IF_ERROR(need());
      if (v.kind != arg->kind) return false;
      if (v.kind == Value::kNone || v.kind == Value::kUndefined) return true;
      if (v.kind == Value::kBool) return v.b == arg->b;
      return Equal(v, *arg) && (v.hold == arg->hold);
    }
    if (t == "in") {
      EPP_RETURN_IF_ERROR(need());
      return Contains(*arg, v, line);
    }
    if (t == "lt" || t == "<" || t == "lessthan" || t == "le" || t == "<=" || t == "gt" || t == ">" || t == "greaterthan" ||
        t == "ge" || t == ">=") {
      EPP_RETURN_IF_ERROR(need());
      EPP_ASSIGN_OR_RETURN(int o, Order(v, *arg, line));
      if (t == "lt" || t == "<" || t == "lessthan") return o < 0;
      if (t == "le" || t == "<=") return o <= 0;
      if (t == "gt" || t == ">" || t == "greaterthan") return o > 0;
      return o >= 0;
    }
    return Error(line, Cat("the test '", t, "' is not supported by epp"));
  }

  const Template& t_;
  const OJson& vars_;
  RenderOptions o_;
  mutable std::vector<const void*> printing_;  // containers being printed (AppendRepr)
  // Namespaces are the only mutable values, so the only way to a reference cycle
  // ({% set ns.self = ns %}): emptied when the render ends, which frees such cycles.
  std::vector<std::shared_ptr<Dict>> namespaces_;

 public:
  ~Renderer() {
    for (const std::shared_ptr<Dict>& n : namespaces_) n->items.clear();
  }
  std::vector<Frame> frames_;
  size_t base_ = 0;
  int macro_depth_ = 0;
};

void Indent(std::string& out, int indent, int depth) {
  out += '\n';
  out.append(static_cast<size_t>(indent * depth), ' ');
}

absl::Status ToJsonAt(const Value& v, int indent, int depth, std::string& out) {
  if (depth > 200) return absl::InvalidArgumentError("tojson: the value is nested too deeply");
  switch (v.kind) {
    case Value::kUndefined: return absl::InvalidArgumentError(Cat("tojson: '", v.s, "' is undefined (Undefined is not JSON serializable)"));
    case Value::kNone: out += "null"; return absl::OkStatus();
    case Value::kBool: out += v.b ? "true" : "false"; return absl::OkStatus();
    case Value::kInt: absl::StrAppend(&out, v.i); return absl::OkStatus();
    case Value::kFloat: {
      if (std::isnan(v.f)) out += "NaN";
      else if (std::isinf(v.f)) out += v.f > 0 ? "Infinity" : "-Infinity";
      else out += PyFloatRepr(v.f);
      return absl::OkStatus();
    }
    case Value::kStr: JsonString(v.s, out); return absl::OkStatus();
    case Value::kCallable: return absl::InvalidArgumentError("tojson: a function is not JSON serializable");
    case Value::kNamespace: return absl::InvalidArgumentError("tojson: a namespace is not JSON serializable");
    default: break;
  }
  const bool map = v.is_mapping();
  size_t n = v.kind == Value::kList ? v.list().size() : v.kind == Value::kDict ? v.dict().items.size() : v.j->size();
  if (n == 0) {
    out += map ? "{}" : "[]";
    return absl::OkStatus();
  }
  out += map ? '{' : '[';
  size_t i = 0;
  auto sep = [&] {
    if (i++ > 0) out += indent >= 0 ? "," : ", ";
    if (indent >= 0) Indent(out, indent, depth + 1);
  };
  auto key = [&](std::string_view k) {
    JsonString(k, out);
    out += ": ";
  };
  if (v.kind == Value::kList) {
    for (const Value& x : v.list()) {
      sep();
      EPP_RETURN_IF_ERROR(ToJsonAt(x, indent, depth + 1, out));
    }
  } else if (v.kind == Value::kDict) {
    for (const auto& [k, x] : v.dict().items) {
      sep();
      key(k);
      EPP_RETURN_IF_ERROR(ToJsonAt(x, indent, depth + 1, out));
    }
  } else {
    for (auto it = v.j->begin(); it != v.j->end(); ++it) {
      sep();
      if (map) key(it.key());
      EPP_RETURN_IF_ERROR(ToJsonAt(Value::FromJson(*it), indent, depth + 1, out));
    }
  }
  if (indent >= 0) Indent(out, indent, depth);
  out += map ? '}' : ']';
  return absl::OkStatus();
}

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
  bool IsContentOfMessage(const Expr* e) const {
    e = Strip(e);
    if (!e) return false;
    if (e->kind == Expr::kAttr && e->name == "content") return IsName(e->args[0].get(), message_vars);
    if (e->kind == Expr::kItem && e->args[1]->kind == Expr::kLiteral && e->args[1]->value.kind == Value::kStr &&
        e->args[1]->value.s == "content")
      return IsName(e->args[0].get(), message_vars);
    return false;
  }
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

std::string PyFloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view s(buf, static_cast<size_t>(end - buf));
  const bool neg = !s.empty() && s[0] == '-';
  if (neg) s.remove_prefix(1);
  size_t e = s.find('e');
  std::string digits;
  for (char c : s.substr(0, e))
    if (c != '.') digits += c;
  int exp = std::atoi(std::string(s.substr(e + 1)).c_str());
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = neg ? "-" : "";
  if (exp >= -5 && exp < 16) {  // repr switches to exponent form below 1e-4 and from 1e16
    if (exp < -4) {
      // falls through to the exponent form below
    } else if (exp < 0) {
      out += "0.";
      out.append(static_cast<size_t>(-exp - 1), '0');
      out += digits;
      return out;
    } else {
      const size_t int_digits = static_cast<size_t>(exp) + 1;
      if (digits.size() <= int_digits) {
        out += digits;
        out.append(int_digits - digits.size(), '0');
        out += ".0";
      } else {
        out += digits.substr(0, int_digits);
        out += '.';
        out += digits.substr(int_digits);
      }
      return out;
    }
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) {
    out += '.';
    out += digits.substr(1);
  }
  out += 'e';
  out += exp < 0 ? '-' : '+';
  int ax = exp < 0 ? -exp : exp;
  if (ax < 10) out += '0';
  absl::StrAppend(&out, ax);
  return out;
}

absl::Status ToJson(const Value& v, int indent, std::string& out) { return ToJsonAt(v, indent, 0, out); }

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
