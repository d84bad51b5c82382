// Where in a YAML text something is, for error messages (private to libepp).
//
// yaml-cpp counts lines and columns from 0 and gives -1 where it has no position; messages count
// from 1 ("cfg.yaml:3:5: ...", the form compilers and editors jump to) and leave out a position
// they do not have. Every YAML reader outside the plugins formats its positions with these.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace epp::internal {

// The 1-based line of `mark`, or 0 when it has none.
inline int YamlLine(const YAML::Mark& mark) { return mark.line >= 0 ? mark.line + 1 : 0; }

// The 1-based line where `node` starts, or 0 for an undefined node (a missing key) or one
// without a position.
inline int YamlLine(const YAML::Node& node) { return node.IsDefined() ? YamlLine(node.Mark()) : 0; }

// "SOURCE:LINE:COLUMN" (or "SOURCE:LINE" without `with_column`), 1-based; just "SOURCE" when
// `mark` has no position.
inline std::string YamlWhere(std::string_view source, const YAML::Mark& mark, bool with_column = true) {
  std::string out(source);
  if (mark.line < 0) return out;
  out += ":" + std::to_string(mark.line + 1);
  if (with_column) out += ":" + std::to_string(mark.column + 1);
  return out;
}

// A yaml-cpp parse or conversion error as kInvalidArgument "SOURCE:LINE:COLUMN: reason".
inline absl::Status YamlExceptionError(std::string_view source, const YAML::Exception& e) {
  return absl::InvalidArgumentError(YamlWhere(source, e.mark) + ": " + e.msg);
}

// The innermost '{' or '[' of `text` that is never closed, as a 0-based mark (line -1: none);
// `opener` gets the character.
// Quoted strings and comments are skipped; for flow collections only (block scalars holding
// brackets can mislead it, which is why callers use it only when yaml-cpp reports a flow error).
inline YAML::Mark UnclosedFlowOpener(std::string_view text, char* opener = nullptr) {
  struct Open {
    char c;
    int line, column;
  };
  std::vector<Open> stack;
  int line = 0, column = 0;
  char quote = 0;
  bool comment = false;
  char prev = '\n';
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      column = 0;
      comment = false;
      if (quote == '\'') quote = 0;  // a plain newline inside quotes is folded; keep scanning
      prev = c;
      continue;
    }
    if (!comment) {
      if (quote != 0) {
        if (c == quote) {
          if (quote == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
            ++i;
            ++column;
          } else {
            quote = 0;
          }
        } else if (c == '\\' && quote == '"') {
          ++i;
          ++column;
        }
      } else if (c == '#' && (prev == ' ' || prev == '\t' || prev == '\n')) {
        comment = true;
      } else if (c == '"' || c == '\'') {
        quote = c;
      } else if (c == '{' || c == '[') {
        stack.push_back({c, line, column});
      } else if ((c == '}' || c == ']') && !stack.empty()) {
        stack.pop_back();
      }
    }
    prev = c;
    ++column;
  }
  YAML::Mark m = YAML::Mark::null_mark();
  if (!stack.empty()) {
    m.line = stack.back().line;
    m.column = stack.back().column;
    if (opener) *opener = stack.back().c;
  }
  return m;
}

// As above, with the text: a flow collection left open ("end of map flow not found", which
// yaml-cpp reports where the input ends) is reported where its '{' or '[' is.
inline absl::Status YamlExceptionError(std::string_view source, const YAML::Exception& e, std::string_view text) {
  if (e.msg.find("flow not found") != std::string::npos) {
    char c = '{';
    const YAML::Mark open = UnclosedFlowOpener(text, &c);
    if (open.line >= 0) {
      return absl::InvalidArgumentError(YamlWhere(source, open) + ": this '" + std::string(1, c) +
                                        "' is never closed (" + e.msg + " by the end of the text)");
    }
  }
  return YamlExceptionError(source, e);
}

}  // namespace epp::internal
