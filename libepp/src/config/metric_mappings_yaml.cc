// Engine mappings from YAML (GIE core-metrics-extractor `engineConfigs` vocabulary).
// yaml-cpp throws; every exception is caught here and becomes kInvalidArgument with a location.
#include <yaml-cpp/yaml.h>

#include <string>

#include "epp/metrics.h"
#include "common/yaml_limits.h"

namespace epp {
namespace {

std::string Where(std::string_view source, const YAML::Node& node, const std::string& path) {
  const YAML::Mark mark = node.Mark();
  std::string out(source);
  if (mark.line >= 0) out += ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
  return out + ": " + path;
}

absl::Status EntryToMapping(std::string_view source, const YAML::Node& entry, const std::string& path,
                            MetricMapping& m) {
  if (!entry.IsMap()) return absl::InvalidArgumentError(Where(source, entry, path) + ": expected a map");
  bool has_name = false;
  for (const auto& kv : entry) {
    const std::string key = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    const std::string kpath = path + "." + key;
    if (!v.IsScalar()) return absl::InvalidArgumentError(Where(source, v, kpath) + ": expected a string");
    const std::string val = v.as<std::string>();
    auto spec_field = [&](std::vector<MetricSpec>& target) -> absl::Status {
      if (val.empty()) {  // empty spec disables the metric, as in GIE
        target.clear();
        return absl::OkStatus();
      }
      auto spec = MetricSpec::Parse(val);
      if (!spec.ok()) return absl::InvalidArgumentError(Where(source, v, kpath) + ": " + std::string(spec.status().message()));
      target = {*std::move(spec)};
      return absl::OkStatus();
    };
    if (key == "name") {
      m.engine = val;
      has_name = true;
    } else if (key == "queuedRequestsSpec") {
      EPP_RETURN_IF_ERROR(spec_field(m.queue));
    } else if (key == "runningRequestsSpec") {
      EPP_RETURN_IF_ERROR(spec_field(m.running));
    } else if (key == "kvUsageSpec") {
      EPP_RETURN_IF_ERROR(spec_field(m.kv_usage));
    } else if (key == "loraSpec") {
      EPP_RETURN_IF_ERROR(spec_field(m.lora));
    } else if (key == "cacheInfoSpec") {
      EPP_RETURN_IF_ERROR(spec_field(m.cache_info));
    } else if (key == "cacheBlockSizeSpec") {
      EPP_RETURN_IF_ERROR(spec_field(m.cache_block_size));
    } else if (key == "cacheNumBlocksSpec") {
      EPP_RETURN_IF_ERROR(spec_field(m.cache_num_blocks));
    } else if (key == "cacheBlockSizeLabelName") {
      m.cache_block_size_label = val;
    } else if (key == "cacheNumBlocksLabelName") {
      m.cache_num_blocks_label = val;
    } else {
      return absl::InvalidArgumentError(Where(source, kv.first, kpath) + ": unknown key");
    }
  }
  if (!has_name || m.engine.empty()) {
    return absl::InvalidArgumentError(Where(source, entry, path) + ": missing 'name'");
  }
  if (m.engine == "default") {
    return absl::InvalidArgumentError(Where(source, entry, path) + ": the name 'default' is reserved");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<MetricMapping>> LoadMetricMappingsYaml(std::string_view yaml,
                                                                  std::string_view source) {
  try {
    YAML::Node root = YAML::Load(std::string(yaml));
    if (absl::Status s = internal::CheckYamlExpansion(root, source); !s.ok()) return s;
    YAML::Node list = root;
    std::string base = "";
    if (root.IsMap()) {
      for (const auto& kv : root) {
        if (kv.first.as<std::string>() != "engineConfigs") {
          return absl::InvalidArgumentError(Where(source, kv.first, kv.first.as<std::string>()) +
                                            ": unknown key (expected 'engineConfigs')");
        }
      }
      list = root["engineConfigs"];
      base = "engineConfigs";
    }
    if (!list.IsSequence()) {
      return absl::InvalidArgumentError(Where(source, list, base.empty() ? "(root)" : base) +
                                        ": expected a list of engine configs");
    }
    std::vector<MetricMapping> out;
    for (size_t i = 0; i < list.size(); ++i) {
      MetricMapping m;
      const std::string path = base + "[" + std::to_string(i) + "]";
      // An entry replaces a built-in of the same name whole (GIE rule), so start empty.
      m.cache_block_size_label = "block_size";
      m.cache_num_blocks_label = "num_gpu_blocks";
      EPP_RETURN_IF_ERROR(EntryToMapping(source, list[i], path, m));
      for (const MetricMapping& prev : out) {
        if (prev.engine == m.engine) {
          return absl::InvalidArgumentError(Where(source, list[i], path) + ": duplicate engine '" + m.engine + "'");
        }
      }
      out.push_back(std::move(m));
    }
    return out;
  } catch (const YAML::Exception& e) {
    std::string where(source);
    if (e.mark.line >= 0) where += ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1);
    return absl::InvalidArgumentError(where + ": " + e.msg);
  }
}

}  // namespace epp
