// Private: the Jinja subset chat templates use (jinja_parse.cc, jinja_eval.cc + its parts), for
// chat_template.cc. The rules are Python Jinja2's as transformers configures it for chat
// templates (ImmutableSandboxedEnvironment, trim_blocks and lstrip_blocks on, one trailing
// newline dropped, loop controls, tojson as json.dumps(ensure_ascii=False), globals
// raise_exception and strftime_now), because that is what the model server renders with.
//
// Values follow Python: None, bool, int (64-bit; overflow is an error), float, str (code
// points), list, dict (insertion ordered), plus Jinja's Undefined. Request data is not copied:
// a value can borrow a node of the caller's JSON, and strings are views that may share an owner.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "epp/status.h"
#include "nlohmann/json.hpp"

namespace epp::jinja {

// absl::StrCat taking std::string_view too (Debian's Abseil has its own string_view).
inline absl::string_view CatArg(std::string_view s) { return absl::string_view(s.data(), s.size()); }
template <typename T>
const T& CatArg(const T& t) { return t; }
template <typename... A>
std::string Cat(const A&... a) { return absl::StrCat(CatArg(a)...); }

using OJson = nlohmann::ordered_json;

struct Value;
using List = std::vector<Value>;
struct Dict;
struct Callable;

struct Value {
  enum Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kStr, kList, kDict, kJson, kNamespace, kCallable };
  Kind kind = kUndefined;
  bool tuple = false;  // a kList made as a tuple (printed as (a, b))
  union {
    bool b;
    int64_t i;
    double f;
    const OJson* j;  // kJson: an array or an object of the caller's JSON
  };
  std::string_view s;              // kStr; kUndefined: the name that was undefined (for errors)
  std::shared_ptr<const void> hold;  // owner of s, or the List / Dict / Callable

  Value() : i(0) {}
  static Value None() { Value v; v.kind = kNone; return v; }
  static Value Bool(bool x) { Value v; v.kind = kBool; v.b = x; return v; }
  static Value Int(int64_t x) { Value v; v.kind = kInt; v.i = x; return v; }
  static Value Float(double x) { Value v; v.kind = kFloat; v.f = x; return v; }
  // A view whose bytes outlive the render (template text, the caller's JSON).
  static Value View(std::string_view x) { Value v; v.kind = kStr; v.s = x; return v; }
  static Value Str(std::string x);
  static Value Undefined(std::string_view name) { Value v; v.s = name; return v; }
  // An Undefined whose name is made at render time (the Value owns the text, which a view of a
  // temporary would not).
  static Value OwnedUndefined(std::string name) { Value v = Str(std::move(name)); v.kind = kUndefined; return v; }
  static Value OfList(List l);
  static Value OfTuple(List l) { Value v = OfList(std::move(l)); v.tuple = true; return v; }
  static Value OfDict(Dict d);
  static Value FromJson(const OJson& j);  // borrows arrays and objects, views strings

  bool is_undefined() const { return kind == kUndefined; }
  bool is_str() const { return kind == kStr; }
  bool is_number() const { return kind == kInt || kind == kFloat; }
  bool is_sequence() const { return kind == kList || (kind == kJson && j->is_array()); }
  bool is_mapping() const { return kind == kDict || kind == kNamespace || (kind == kJson && j->is_object()); }
  const List& list() const { return *static_cast<const List*>(hold.get()); }
  const Dict& dict() const { return *static_cast<const Dict*>(hold.get()); }
  Dict& ns() const { return *const_cast<Dict*>(static_cast<const Dict*>(hold.get())); }
  const Callable& callable() const { return *static_cast<const Callable*>(hold.get()); }
};

struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* Find(std::string_view key) const {
    for (const auto& [k, v] : items)
      if (k == key) return &v;
    return nullptr;
  }
  void Set(std::string_view key, Value v) {
    for (auto& [k, old] : items)
      if (k == key) { old = std::move(v); return; }
    items.emplace_back(std::string(key), std::move(v));
  }
};

class Template;

// What a render may call out to. strftime_now formats the render's clock (`now`, local time).
struct RenderOptions {
  std::time_t now = 0;              // 0: the current time
  size_t max_output = size_t{64} << 20;  // bytes; longer output is an error (a runaway loop)
};

// Parses `source`. `name` prefixes errors ("chat template line 3: unknown filter 'foo'").
// Constructs outside the subset fail here, naming the construct and its line.
absl::StatusOr<std::shared_ptr<const Template>> Parse(std::string_view source, std::string_view name);

// Renders with the top-level variables `vars` (a JSON object, borrowed for the call). Errors
// (raise_exception, an undefined attribute, a type error) name the template line.
absl::StatusOr<std::string> Render(const Template& t, const OJson& vars, const RenderOptions& options = {});

// vLLM's content-format detection: true when the template loops over a message's `content`
// (`for part in message['content']`, message bound by a loop over `messages` or a variable set
// from it), so messages keep their content as a list of parts ("openai"); false: content is a
// string ("string").
bool LoopsOverContent(const Template& t);

// Python's repr of a float (shortest round trip; 1.0, 1e-05, 1e+16, inf, nan).
std::string PyFloatRepr(double d);
// json.dumps(v, ensure_ascii=False[, indent=N]) as Python writes it (indent < 0: none).
absl::Status ToJson(const Value& v, int indent, std::string& out);

}  // namespace epp::jinja
