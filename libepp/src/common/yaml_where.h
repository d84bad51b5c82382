// Where in a YAML text something is, for error messages (private to libepp).
//
// yaml-cpp counts lines and columns from 0 and gives -1 where it has no position; messages count
// from 1 ("cfg.yaml:3:5: ...", the form compilers and editors jump to) and leave out a position
// they do not have. Every YAML reader outside the plugins formats its positions with these.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <string_view>

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

}  // namespace epp::internal
