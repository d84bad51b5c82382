// Values with Python's behaviour (jinja.h's Value): construction, truthiness, str() and repr(),
// iteration, len(), ==, <, `in`, and json.dumps for tojson. Chat templates are written against
// Python Jinja2 rendering Python objects (transformers passes the request as dicts, lists, str,
// int, float, bool, None), so each operation here does what Python does with the same objects;
// an operation Python refuses fails with Python's message and the template line.
#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/json_string.h"
#include "jinja_eval_impl.h"

namespace epp::jinja {

// ---- construction ----
// Strings own their bytes through `hold` only when made at render time; JSON is borrowed.
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
// A JSON node as a Python value, as json.loads would give it: arrays and objects are borrowed
// (kJson points at the caller's node), strings are views; an unsigned beyond int64 becomes a
// float rather than wrapping.
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

// Callables are held like lists and dicts: shared, immutable.
Value MakeCallable(Callable c) {
  Value v;
  v.kind = Value::kCallable;
  v.hold = std::make_shared<const Callable>(std::move(c));
  return v;
}

// ---- UTF-8 and Python str helpers (input is valid UTF-8: template text and parsed JSON) ----
// The code point at byte i and its length (a byte that is not valid UTF-8 stands for itself).
int32_t DecodeAt(std::string_view s, size_t i, size_t& len) {
  int32_t cp;
  const size_t n = internal::DecodeUtf8(s.substr(i), cp);
  len = n > 0 ? n : 1;
  return n > 0 ? cp : static_cast<unsigned char>(s[i]);
}
// Python's str.isspace.
bool PySpace(int32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}
std::vector<size_t> CpOffsets(std::string_view s) {  // byte offset of each code point, plus the end
  std::vector<size_t> o;
  for (size_t i = 0; i < s.size(); i += Utf8SequenceLength(static_cast<unsigned char>(s[i]))) o.push_back(i);
  o.push_back(s.size());
  return o;
}
// str.strip / lstrip / rstrip: str.isspace whitespace, or any code point of `chars`; a view.
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
      const size_t start = internal::Utf8CharStart(s, s.size() - 1);
      size_t len;
      int32_t cp = DecodeAt(s, start, len);
      if (!strip_cp(cp, s.substr(start))) break;
      s.remove_suffix(s.size() - start);
    }
  }
  return s;
}

// str.lower / str.upper with Unicode's simple case mapping (one code point to one).
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
    AppendUtf8(mode ? utf8proc_toupper(cp) : utf8proc_tolower(cp), out);
    i += len;
  }
  return out;
}
// A character that has case (close to Python's cased: categories Lu, Ll, Lt).
bool IsCased(int32_t cp) { return utf8proc_toupper(cp) != cp || utf8proc_tolower(cp) != cp; }

// repr(str) as Python writes it: single quotes unless the text holds ' and no ", then double;
// backslash escapes for the quote, \\, \n, \r, \t and \xNN for other ASCII control characters.
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

// str.capitalize (Python 3.8+): the first character titled, the rest lower-cased.
std::string Capitalize(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    size_t len;
    int32_t cp = DecodeAt(s, i, len);
    AppendUtf8(i == 0 ? utf8proc_totitle(cp) : utf8proc_tolower(cp), out);
    i += len;
  }
  return out;
}
// str.replace(old, new, count); an empty `old` matches between every two characters.
std::string Replace(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between characters (and at both ends)
    int64_t n = 0;
    for (size_t i = 0; i <= s.size();) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      if (i == s.size()) break;
      size_t len = Utf8SequenceLength(static_cast<unsigned char>(s[i]));
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

// ---- semantics that cannot fail ----
// Python's bool(v); Undefined is false, as Jinja2's Undefined.__bool__.
bool Truthy(const Value& v) {
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

// type(v).__name__, for error messages worded as Python's.
std::string_view TypeName(const Value& v) {
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

// Python's ==: numbers across int / float / bool, sequences and mappings by content (a mapping's
// order does not matter), other values by identity. A namespace equals only itself.
bool Equal(const Value& a, const Value& b) {
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
// A sequence's items and a mapping's pairs as copies, for operations that walk both sides.
List SeqItems(const Value& v) {
  if (v.kind == Value::kList) return v.list();
  List out;
  for (const OJson& x : *v.j) out.push_back(Value::FromJson(x));
  return out;
}
std::vector<std::pair<std::string, Value>> MapItems(const Value& v) {
  if (v.kind == Value::kDict) return v.dict().items;
  if (v.kind == Value::kNamespace) return v.ns().items;
  std::vector<std::pair<std::string, Value>> out;
  for (auto it = v.j->begin(); it != v.j->end(); ++it) out.emplace_back(it.key(), Value::FromJson(*it));
  return out;
}

// ---- semantics that can fail (Renderer members: errors name the template line) ----
// Python's str(v), appended.
absl::Status Renderer::AppendStr(const Value& v, std::string& out, int line) const {
  switch (v.kind) {
    case Value::kUndefined: return absl::OkStatus();
    case Value::kStr: out += v.s; return absl::OkStatus();
    default: return AppendRepr(v, out, line, /*top=*/true);
  }
}
// repr(v) as Python prints containers ([1, 'a'], {'k': None}, (1,)). At the top (str() of the
// outer value) a str prints bare and Undefined prints nothing, as Jinja2 prints them.
absl::Status Renderer::AppendRepr(const Value& v, std::string& out, int line, bool top) const {
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
// str(v) as a string of its own.
absl::StatusOr<std::string> Renderer::Str(const Value& v, int line) const {
  if (v.kind == Value::kStr) return std::string(v.s);
  std::string out;
  EPP_RETURN_IF_ERROR(AppendStr(v, out, line));
  return out;
}

// The items of an iterable: list elements, mapping keys, a string's characters.
absl::StatusOr<List> Renderer::Items(const Value& v, int line) const {
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
        size_t len = Utf8SequenceLength(static_cast<unsigned char>(v.s[i]));
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
// Python's len(); Undefined has length 0 as in Jinja2.
absl::StatusOr<int64_t> Renderer::Length(const Value& v, int line) const {
  switch (v.kind) {
    case Value::kStr: return static_cast<int64_t>(CountUtf8Chars(v.s));
    case Value::kList: return static_cast<int64_t>(v.list().size());
    case Value::kDict: return static_cast<int64_t>(v.dict().items.size());
    case Value::kNamespace: return static_cast<int64_t>(v.ns().items.size());
    case Value::kJson: return static_cast<int64_t>(v.j->size());
    case Value::kUndefined: return 0;
    default: return Error(line, Cat("object of type '", TypeName(v), "' has no len()"));
  }
}

// Python's ordering (<, sort, min, max): numbers, strings by code point (UTF-8 byte order is the
// same), sequences lexicographically; anything else is Python's TypeError.
absl::StatusOr<int> Renderer::Order(const Value& a, const Value& b, int line) const {  // <0, 0, >0
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
// Python's `x in container`: a substring, an item, or a mapping's key.
absl::StatusOr<bool> Renderer::Contains(const Value& container, const Value& x, int line) const {
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

// ---- json.dumps (tojson) ----
namespace {

// The newline and indentation json.dumps(indent=N) writes before an item and a closing bracket.
void Indent(std::string& out, int indent, int depth) {
  out += '\n';
  out.append(static_cast<size_t>(indent * depth), ' ');
}

// json.dumps(v, ensure_ascii=False, indent): separators ", " and ": " (with indent, "," then a
// newline), keys in insertion order, NaN / Infinity as Python writes them; Undefined, functions
// and namespaces are not serializable, as in Python. Depth is capped at 200.
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
    case Value::kStr: internal::AppendJsonString(v.s, out); return absl::OkStatus();
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
    internal::AppendJsonString(k, out);
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

}  // namespace

// repr(float) as Python writes it; tojson prints floats this way too.
// The shortest digits that round-trip (std::to_chars), laid out as repr lays them out.
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

// jinja.h's entry point; the tojson filter calls it too.
absl::Status ToJson(const Value& v, int indent, std::string& out) { return ToJsonAt(v, indent, 0, out); }

}  // namespace epp::jinja
