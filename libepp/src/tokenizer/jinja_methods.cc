// Methods of str, dict and list values (`message.content.strip()`, `x.items()`): one table,
// kMethods, names every method an attribute read resolves to; GetAttr (jinja_eval.cc) and
// CallMethod read it. They follow Python 3's str / dict / list methods, the ones Jinja2's
// ImmutableSandboxedEnvironment (transformers' chat template environment) lets a template call:
// a method that modifies its object (list.append, dict.update) is refused at the call.
#include <utf8proc.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "jinja_eval_impl.h"

namespace epp::jinja {
namespace {

// name, the type it is a method of, the member that implements it (nullptr: Python has the
// method; calling it is an error, below). Sorted by name, then receiver.
constexpr JinjaMethod kMethods[] = {
    {"append",       Receiver::kList, nullptr},
    {"capitalize",   Receiver::kStr,  &Renderer::StrCapitalize},
    {"casefold",     Receiver::kStr,  nullptr},
    {"center",       Receiver::kStr,  nullptr},
    {"clear",        Receiver::kDict, nullptr},
    {"clear",        Receiver::kList, nullptr},
    {"copy",         Receiver::kDict, nullptr},
    {"copy",         Receiver::kList, nullptr},
    {"count",        Receiver::kStr,  &Renderer::StrFind},
    {"count",        Receiver::kList, &Renderer::ListIndexCount},
    {"encode",       Receiver::kStr,  nullptr},
    {"endswith",     Receiver::kStr,  &Renderer::StrStartsEnds},
    {"expandtabs",   Receiver::kStr,  nullptr},
    {"extend",       Receiver::kList, nullptr},
    {"find",         Receiver::kStr,  &Renderer::StrFind},
    {"format",       Receiver::kStr,  nullptr},
    {"format_map",   Receiver::kStr,  nullptr},
    {"get",          Receiver::kDict, &Renderer::DictGet},
    {"index",        Receiver::kStr,  &Renderer::StrFind},
    {"index",        Receiver::kList, &Renderer::ListIndexCount},
    {"insert",       Receiver::kList, nullptr},
    {"isalnum",      Receiver::kStr,  &Renderer::StrIs},
    {"isalpha",      Receiver::kStr,  &Renderer::StrIs},
    {"isascii",      Receiver::kStr,  nullptr},
    {"isdecimal",    Receiver::kStr,  nullptr},
    {"isdigit",      Receiver::kStr,  &Renderer::StrIs},
    {"isidentifier", Receiver::kStr,  nullptr},
    {"islower",      Receiver::kStr,  &Renderer::StrIs},
    {"isnumeric",    Receiver::kStr,  nullptr},
    {"isprintable",  Receiver::kStr,  nullptr},
    {"isspace",      Receiver::kStr,  &Renderer::StrIs},
    {"istitle",      Receiver::kStr,  nullptr},
    {"isupper",      Receiver::kStr,  &Renderer::StrIs},
    {"items",        Receiver::kDict, &Renderer::DictView},
    {"join",         Receiver::kStr,  &Renderer::StrJoin},
    {"keys",         Receiver::kDict, &Renderer::DictView},
    {"ljust",        Receiver::kStr,  nullptr},
    {"lower",        Receiver::kStr,  &Renderer::StrCase},
    {"lstrip",       Receiver::kStr,  &Renderer::StrStrip},
    {"partition",    Receiver::kStr,  nullptr},
    {"pop",          Receiver::kDict, nullptr},
    {"pop",          Receiver::kList, nullptr},
    {"popitem",      Receiver::kDict, nullptr},
    {"remove",       Receiver::kList, nullptr},
    {"removeprefix", Receiver::kStr,  &Renderer::StrRemoveAffix},
    {"removesuffix", Receiver::kStr,  &Renderer::StrRemoveAffix},
    {"replace",      Receiver::kStr,  &Renderer::StrReplace},
    {"reverse",      Receiver::kList, nullptr},
    {"rfind",        Receiver::kStr,  &Renderer::StrFind},
    {"rindex",       Receiver::kStr,  &Renderer::StrFind},
    {"rjust",        Receiver::kStr,  nullptr},
    {"rpartition",   Receiver::kStr,  nullptr},
    {"rsplit",       Receiver::kStr,  &Renderer::StrSplit},
    {"rstrip",       Receiver::kStr,  &Renderer::StrStrip},
    {"setdefault",   Receiver::kDict, nullptr},
    {"sort",         Receiver::kList, nullptr},
    {"split",        Receiver::kStr,  &Renderer::StrSplit},
    {"splitlines",   Receiver::kStr,  &Renderer::StrSplitLines},
    {"startswith",   Receiver::kStr,  &Renderer::StrStartsEnds},
    {"strip",        Receiver::kStr,  &Renderer::StrStrip},
    {"swapcase",     Receiver::kStr,  nullptr},
    {"title",        Receiver::kStr,  &Renderer::StrTitle},
    {"translate",    Receiver::kStr,  nullptr},
    {"update",       Receiver::kDict, nullptr},
    {"upper",        Receiver::kStr,  &Renderer::StrCase},
    {"values",       Receiver::kDict, &Renderer::DictView},
    {"zfill",        Receiver::kStr,  nullptr},
};
constexpr bool MethodsSorted() {
  for (size_t i = 1; i < std::size(kMethods); ++i) {
    const JinjaMethod& x = kMethods[i - 1];
    const JinjaMethod& y = kMethods[i];
    if (!(x.name < y.name || (x.name == y.name && x.on < y.on))) return false;
  }
  return true;
}
static_assert(MethodsSorted(), "kMethods must stay sorted by name, then receiver (FindJinjaMethod binary-searches it)");

// A str argument; Python's TypeError otherwise.
absl::StatusOr<std::string_view> StrArg(const Value* v) {
  if (!v || v->kind != Value::kStr) return absl::InvalidArgumentError("expected a string argument");
  return v->s;
}

// Python's str.title: a cased character after an uncased one is titled, the others lowered.
std::string PyTitle(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    size_t len;
    int32_t cp = DecodeAt(s, i, len);
    i += len;
    const bool cased = IsCased(cp);
    AppendUtf8(cased ? (prev_cased ? utf8proc_tolower(cp) : utf8proc_totitle(cp)) : cp, out);
    prev_cased = cased;
  }
  return out;
}

}  // namespace

const JinjaMethod* FindJinjaMethod(Receiver on, std::string_view name) {
  const JinjaMethod* end = std::end(kMethods);
  auto before = [](const JinjaMethod& m, const std::pair<std::string_view, Receiver>& key) {
    return m.name < key.first || (m.name == key.first && m.on < key.second);
  };
  const JinjaMethod* it = std::lower_bound(std::begin(kMethods), end, std::pair(name, on), before);
  return it != end && it->name == name && it->on == on ? it : nullptr;
}

// ---- dispatch ----
// `self.name` read as an attribute (GetAttr): a callable bound to its object.
Value Renderer::Method(const Value& self, std::string_view name) {
  Callable c;
  c.kind = Callable::kMethod;
  c.name = name;
  c.self = self;
  return MakeCallable(std::move(c));
}

// `self.name(args)`. loop.cycle(a, b, ...) is bound to the loop index rather than to a value of a
// type Python has methods on, so it is handled before the table.
absl::StatusOr<Value> Renderer::CallMethod(const Value& self, std::string_view name, const Args& a, int line) {
  if (name == "cycle" && self.kind == Value::kInt) {  // loop.cycle
    if (a.pos.empty()) return MethodError(self, name, line, "needs at least one value");
    return a.pos[static_cast<size_t>(self.i) % a.pos.size()];
  }
  // The receiver decides which error a listed but unimplemented method gives: str methods epp
  // lacks are unsupported, dict and list ones are refused as the sandbox refuses mutation.
  if (self.kind == Value::kStr) {
    const JinjaMethod* m = FindJinjaMethod(Receiver::kStr, name);
    if (m != nullptr && m->fn != nullptr) return (this->*m->fn)(self, name, a, line);
    return Error(line, Cat("str.", name, "() is not supported by epp"));
  }
  if (self.is_mapping() && self.kind != Value::kNamespace) {
    const JinjaMethod* m = FindJinjaMethod(Receiver::kDict, name);
    if (m != nullptr && m->fn != nullptr) return (this->*m->fn)(self, name, a, line);
    return Error(line, Cat("dict.", name, "() modifies its object, which the sandboxed chat template environment refuses"));
  }
  if (self.is_sequence()) {
    const JinjaMethod* m = FindJinjaMethod(Receiver::kList, name);
    if (m != nullptr && m->fn != nullptr) return (this->*m->fn)(self, name, a, line);
    return Error(line, Cat("list.", name, "() modifies its object, which the sandboxed chat template environment refuses"));
  }
  return Error(line, Cat("'", TypeName(self), "' has no method '", name, "'"));
}

// An argument error names the method as Python does: "str.split(): empty separator".
absl::Status Renderer::MethodError(const Value& self, std::string_view name, int line, std::string_view why) const {
  return Error(line, Cat(TypeName(self), ".", name, "(): ", why));
}

// ---- the methods, in kMethods' entries ----

// strip, lstrip, rstrip(chars=None): Python's, whitespace by str.isspace; the result is a view.
absl::StatusOr<Value> Renderer::StrStrip(const Value& self, std::string_view name, const Args& a, int line) {
  auto bad = [&](std::string_view why) { return MethodError(self, name, line, why); };
  std::string_view s = self.s;
  const Value* chars = a.Get(0, "chars");
  std::string_view cs;
  const bool has = chars && chars->kind == Value::kStr;
  if (chars && chars->kind != Value::kStr && chars->kind != Value::kNone) return bad("chars must be a string or None");
  if (has) cs = chars->s;
  Value r = self;
  r.s = StripView(s, name != "rstrip", name != "lstrip", has ? &cs : nullptr);
  return r;
}

// split, rsplit(sep=None, maxsplit=-1): Python's. Without sep, runs of whitespace separate
// and the ends are dropped; the pieces are views of the string.
absl::StatusOr<Value> Renderer::StrSplit(const Value& self, std::string_view name, const Args& a, int line) {
  auto bad = [&](std::string_view why) { return MethodError(self, name, line, why); };
  std::string_view s = self.s;
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

// startswith, endswith(prefix): a string or a tuple / list of strings, any of which matches.
absl::StatusOr<Value> Renderer::StrStartsEnds(const Value& self, std::string_view name, const Args& a, int line) {
  auto bad = [&](std::string_view why) { return MethodError(self, name, line, why); };
  std::string_view s = self.s;
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

// upper, lower: as Python's, with Unicode's simple case mapping (one code point to one, where
// Python maps 'ß'.upper() to 'SS').
absl::StatusOr<Value> Renderer::StrCase(const Value& self, std::string_view name, const Args& /*a*/, int /*line*/) {
  std::string_view s = self.s;
  return Value::Str(MapCase(s, name == "upper"));
}

// capitalize: the first character titled, the rest lower-cased (Python 3.8+).
absl::StatusOr<Value> Renderer::StrCapitalize(const Value& self, std::string_view /*name*/, const Args& /*a*/, int /*line*/) {
  std::string_view s = self.s;
  return Value::Str(Capitalize(s));
}

// title: Python's str.title (PyTitle), unlike the title filter.
absl::StatusOr<Value> Renderer::StrTitle(const Value& self, std::string_view /*name*/, const Args& /*a*/, int /*line*/) {
  std::string_view s = self.s;
  return Value::Str(PyTitle(s));
}

// replace(old, new, count=-1): Python's; the result's size is checked first.
absl::StatusOr<Value> Renderer::StrReplace(const Value& self, std::string_view /*name*/, const Args& a, int line) {
  std::string_view s = self.s;
  EPP_ASSIGN_OR_RETURN(std::string_view from, StrArg(a.Get(0, "old")));
  EPP_ASSIGN_OR_RETURN(std::string_view to, StrArg(a.Get(1, "new")));
  const Value* cnt = a.Get(2, "count");
  EPP_RETURN_IF_ERROR(CheckReplace(s, from, to, line));
  return Value::Str(Replace(s, from, to, cnt && cnt->kind == Value::kInt ? cnt->i : -1));
}

// find, rfind, index, rindex(sub), count(sub): positions count code points, as Python's do;
// index / rindex fail where find / rfind give -1.
absl::StatusOr<Value> Renderer::StrFind(const Value& self, std::string_view name, const Args& a, int line) {
  auto bad = [&](std::string_view why) { return MethodError(self, name, line, why); };
  std::string_view s = self.s;
  EPP_ASSIGN_OR_RETURN(std::string_view sub, StrArg(a.Get(0, "sub")));
  if (name == "count") {
    int64_t n = 0;
    if (sub.empty()) return Value::Int(static_cast<int64_t>(CountUtf8Chars(s)) + 1);
    for (size_t at = s.find(sub); at != std::string_view::npos; at = s.find(sub, at + sub.size())) ++n;
    return Value::Int(n);
  }
  size_t at = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
  if (at == std::string_view::npos) {
    if (name == "index" || name == "rindex") return bad("substring not found");
    return Value::Int(-1);
  }
  return Value::Int(static_cast<int64_t>(CountUtf8Chars(s.substr(0, at))));
}

// join(iterable): the string between the items, each of which must be a str (Python's error
// otherwise).
absl::StatusOr<Value> Renderer::StrJoin(const Value& self, std::string_view name, const Args& a, int line) {
  auto bad = [&](std::string_view why) { return MethodError(self, name, line, why); };
  std::string_view s = self.s;
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

// isdigit, isalpha, isalnum, isspace, isupper, islower: close to Python's, by Unicode general
// category (an empty string is false; isupper / islower need a cased character).
absl::StatusOr<Value> Renderer::StrIs(const Value& self, std::string_view name, const Args& /*a*/, int /*line*/) {
  std::string_view s = self.s;
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

// splitlines: split at \n only (Python also splits at \r, \v, \f, ...), no trailing empty piece.
absl::StatusOr<Value> Renderer::StrSplitLines(const Value& self, std::string_view /*name*/, const Args& /*a*/, int /*line*/) {
  std::string_view s = self.s;
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

// removeprefix, removesuffix(x): Python 3.9's.
absl::StatusOr<Value> Renderer::StrRemoveAffix(const Value& self, std::string_view name, const Args& a, int /*line*/) {
  std::string_view s = self.s;
  EPP_ASSIGN_OR_RETURN(std::string_view x, StrArg(a.Get(0, "prefix")));
  Value r = self;
  if (name == "removeprefix" && s.substr(0, x.size()) == x) r.s = s.substr(x.size());
  if (name == "removesuffix" && s.size() >= x.size() && s.substr(s.size() - x.size()) == x) r.s = s.substr(0, s.size() - x.size());
  return r;
}

// get(key, default=None): the value, or the default when the key is absent.
absl::StatusOr<Value> Renderer::DictGet(const Value& self, std::string_view name, const Args& a, int line) {
  auto bad = [&](std::string_view why) { return MethodError(self, name, line, why); };
  const Value* k = a.Get(0, "key");
  if (!k || k->kind != Value::kStr) return bad("needs a string key");
  EPP_ASSIGN_OR_RETURN(Value v, MapGet(self, k->s));
  if (v.is_undefined()) {
    const Value* d = a.Get(1, "default");
    return d ? *d : Value::None();
  }
  return v;
}

// items, keys, values: lists in insertion order ((key, value) tuples for items).
absl::StatusOr<Value> Renderer::DictView(const Value& self, std::string_view name, const Args& /*a*/, int /*line*/) {
  List out;
  for (auto& [k, v] : MapItems(self)) {
    if (name == "items") out.push_back(Value::OfTuple({Value::Str(k), v}));
    else if (name == "keys") out.push_back(Value::Str(k));
    else out.push_back(v);
  }
  return Value::OfList(std::move(out));
}

// index(value), count(value): by Python's ==; index fails when the value is absent.
absl::StatusOr<Value> Renderer::ListIndexCount(const Value& self, std::string_view name, const Args& a, int line) {
  auto bad = [&](std::string_view why) { return MethodError(self, name, line, why); };
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

}  // namespace epp::jinja
