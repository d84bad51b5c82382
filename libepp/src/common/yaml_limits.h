// A bound on how much work a loaded YAML document can make its readers do (private to libepp).
//
// yaml-cpp shares an aliased node instead of copying it, so a few hundred bytes of anchors and
// aliases, each level pointing ten times at the one below, load instantly but make every walk of
// the tree visit 10^7 paths (the "billion laughs" shape). A self-referencing alias (`&a [*a]`)
// even makes the tree cyclic. Every loader checks each document with CheckYamlExpansion before
// walking it, so the walks that follow (config parsing, embedded-config search, parameter trees,
// endpoints files) are bounded by the budget instead of by the aliases.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "common/yaml_where.h"

namespace epp::internal {

struct YamlBudget {
  size_t max_nodes = 250'000;             // nodes visited, aliases counted at every use
  size_t max_scalar_bytes = size_t{32} << 20;  // scalar text visited, likewise
  int max_depth = 128;                    // levels walked (the readers' own limits are lower)
};

namespace yaml_limits_detail {

struct Walk {
  const YamlBudget& budget;
  size_t nodes = 0;
  size_t bytes = 0;
  YAML::Mark where;  // the node at which a limit was reached
  const char* what = nullptr;

  bool Visit(const YAML::Node& node, int depth) {
    if (++nodes > budget.max_nodes) return Fail(node, "nodes");
    // Deeper levels are not walked: every reader stops at a lower depth of its own (and names
    // the path), and a cyclic alias must not recurse here until the node budget runs out.
    if (depth > budget.max_depth) return true;
    switch (node.Type()) {
      case YAML::NodeType::Scalar:
        bytes += node.Scalar().size();
        if (bytes > budget.max_scalar_bytes) return Fail(node, "bytes of scalar text");
        return true;
      case YAML::NodeType::Sequence:
        for (const YAML::Node& item : node)
          if (!Visit(item, depth + 1)) return false;
        return true;
      case YAML::NodeType::Map:
        for (auto it = node.begin(); it != node.end(); ++it)
          if (!Visit(it->first, depth + 1) || !Visit(it->second, depth + 1)) return false;
        return true;
      default:
        return true;
    }
  }
  bool Fail(const YAML::Node& node, const char* limit) {
    where = node.Mark();
    what = limit;
    return false;
  }
};

}  // namespace yaml_limits_detail

// OK when walking `root` (aliases expanded) stays within `budget`; otherwise an error naming the
// source, the line where the limit was reached and which limit it was, e.g.
// "cfg.yaml:3: the document expands to more than 250000 nodes (through YAML aliases?)".
inline absl::Status CheckYamlExpansion(const YAML::Node& root, std::string_view source,
                                       const YamlBudget& budget = YamlBudget()) {
  yaml_limits_detail::Walk walk{budget};
  if (walk.Visit(root, 0)) return absl::OkStatus();
  const std::string what = walk.what;
  const size_t limit = what == "nodes" ? budget.max_nodes : budget.max_scalar_bytes;
  return absl::InvalidArgumentError(YamlWhere(source, walk.where, /*with_column=*/false) +
                                    ": the document expands to more than " + std::to_string(limit) + " " + what +
                                    " (through YAML aliases?)");
}

}  // namespace epp::internal
