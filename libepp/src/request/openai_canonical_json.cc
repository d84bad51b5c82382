// Canonical JSON J(v) (docs/scheduling.md): keys sorted bytewise (a repeated key keeps its last
// value), no whitespace, strings with the minimal escapes (", \, control characters; everything
// else raw UTF-8), numbers by value (integers in decimal, other numbers in shortest round-trip
// form, so 1.0 is "1"). simdjson bounds nesting at 1024 levels, which bounds this recursion.
//
// Why: the prompt is what the prefix cache hashes, and parts of a request without text of their
// own (tools, tool calls, Responses items that are not messages, unknown content parts) enter it
// as JSON. Clients re-serialise the same conversation with other key orders and spacing on every
// turn; rendering the value rather than the bytes keeps those turns on the same prefix. The last
// repeated key wins, as with Python's json and Go's encoding/json (what model servers and GIE
// decode bodies with). The fast path (fast_parse.cc) reaches this through
// internal::AppendCanonicalJsonText.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/json_string.h"
#include "request/request_impl.h"

namespace epp::internal::openai {
void AppendCanonicalJson(const element& e, std::string& out) {
  switch (e.type()) {
    case element_type::NULL_VALUE: out += "null"; return;
    // The type was just checked, so the typed getters cannot fail.
    case element_type::BOOL: {
      bool b = false;
      if (e.get_bool().get(b) == simdjson::SUCCESS) out += b ? "true" : "false";
      return;
    }
    case element_type::INT64: {
      int64_t v = 0;
      if (e.get_int64().get(v) == simdjson::SUCCESS) AppendNumber(v, out);
      return;
    }
    case element_type::UINT64: {
      uint64_t v = 0;
      if (e.get_uint64().get(v) == simdjson::SUCCESS) AppendNumber(v, out);
      return;
    }
    case element_type::DOUBLE: {
      double v = 0;
      if (e.get_double().get(v) == simdjson::SUCCESS) AppendNumber(v, out);
      return;
    }
    case element_type::STRING: AppendJsonString(*AsString(e), out); return;
    case element_type::ARRAY: {
      out += '[';
      bool first = true;
      const simdjson::dom::array items = *AsArray(e);
      for (element item : items) {
        if (!first) out += ',';
        first = false;
        AppendCanonicalJson(item, out);
      }
      out += ']';
      return;
    }
    case element_type::OBJECT: {
      std::vector<std::pair<std::string_view, element>> members;
      const simdjson::dom::object obj = *AsObject(e);
      for (simdjson::dom::key_value_pair kv : obj) members.emplace_back(kv.key, kv.value);
      std::stable_sort(members.begin(), members.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      out += '{';
      bool first = true;
      for (size_t i = 0; i < members.size(); ++i) {
        if (i + 1 < members.size() && members[i + 1].first == members[i].first) continue;
        if (!first) out += ',';
        first = false;
        AppendJsonString(members[i].first, out);
        out += ':';
        AppendCanonicalJson(members[i].second, out);
      }
      out += '}';
      return;
    }
  }
}

}  // namespace epp::internal::openai
