// Error paths of the OpenAI request parser: where in the body a problem is ("messages[2].content")
// and the message a client gets for it ("messages[2].content: expected a string or an array of
// parts, got number 3"). The text becomes the body of the 400 ImmediateResponse (as GIE's
// handlers answer a body they cannot parse with BadRequest), so it must name the field the
// client has to fix; tests compare these messages byte for byte.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "request/request_impl.h"

namespace epp::internal::openai {

std::string PathString(const JsonPath& path) {
  std::vector<const JsonPath*> chain;
  for (const JsonPath* p = &path; p != nullptr; p = p->parent) chain.push_back(p);
  std::string out;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const JsonPath& seg = **it;
    if (seg.index != kNoIndex) {
      absl::StrAppend(&out, "[", seg.index, "]");
    } else if (seg.parent != nullptr) {  // the root segment has no name
      if (!out.empty()) out += '.';
      out += seg.key;
    }
  }
  return out;
}

absl::Status ErrorAt(const JsonPath& path, std::string_view what) {
  std::string where = PathString(path);
  if (where.empty()) where = "request body";
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", ToAbsl(what)));
}

std::string Describe(const element& e) {
  switch (e.type()) {
    case element_type::ARRAY: return "array";
    case element_type::OBJECT: return "object";
    case element_type::STRING: return "string";
    case element_type::BOOL: return "boolean";
    case element_type::NULL_VALUE: return "null";
    case element_type::INT64:
    case element_type::UINT64:
    case element_type::DOUBLE: {
      std::string out = "number ";
      AppendCanonicalJson(e, out);
      return out;
    }
  }
  return "value";
}

absl::Status TypeError(const JsonPath& path, std::string_view expected, const element& got) {
  return ErrorAt(path, absl::StrCat("expected ", ToAbsl(expected), ", got ", Describe(got)));
}

absl::Status Missing(const JsonPath& path) { return ErrorAt(path, "missing"); }

absl::Status Empty(const JsonPath& path) { return ErrorAt(path, "must not be empty"); }

}  // namespace epp::internal::openai
