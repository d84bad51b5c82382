// Writing a JSON string literal by hand (private to libepp), for the writers that build JSON text
// themselves rather than through nlohmann: the prompt's canonical JSON (request/) and the Jinja
// evaluator's json.dumps (tokenizer/jinja_value.cc).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace epp::internal {

// Appends `s` as a quoted JSON string with the minimal escapes, the way Python's
// json.dumps(..., ensure_ascii=False) writes one: `"` and `\` backslashed, \b \f \n \r \t in
// short form, other control characters (below 0x20) as \u00XX in lower-case hex; everything else,
// DEL and non-ASCII included, copied as it is (no check that it is UTF-8). Unescaped runs are
// appended whole, since most text has no byte to escape.
inline void AppendJsonString(std::string_view s, std::string& out) {
  out += '"';
  size_t run = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default: {
        static constexpr char kHex[] = "0123456789abcdef";
        const char esc[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xf]};
        out.append(esc, sizeof(esc));
      }
    }
  }
  out.append(s.data() + run, s.size() - run);
  out += '"';
}

}  // namespace epp::internal
