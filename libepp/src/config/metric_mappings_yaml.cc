// Engine mappings from YAML (GIE core-metrics-extractor `engineConfigs` vocabulary).
// yaml-cpp throws; every exception is caught here and becomes kInvalidArgument with a location.
#include <yaml-cpp/yaml.h>

#include <string>

#include "epp/metrics.h"
#include "common/yaml_limits.h"
#include "common/yaml_where.h"

namespace epp {
namespace {

std::string Where(std::string_view source, const YAML::Node& node, const std::string& path) {
  return internal::YamlWhere(source, node.Mark()) + ": " + path;
}

absl::Status EntryToMapping(std::string_view source, const YAML::Node& entry, const std::string& path,
                            MetricMapping& m) {
  if (!entry.IsMap()) return absl::InvalidArgumentError(Where(source, entry, path) + ": expected a map");
  bool has_name = false;
  for (const auto& kv : entry) {
    const std::string key = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    const std::string kpath = path + "." + key;
    if (key == "customMetrics") {
      if (v.IsNull()) continue;
      if (!v.IsSequence()) return absl::InvalidArgumentError(Where(source, v, kpath) + ": expected a list");
      for (size_t i = 0; i < v.size(); ++i) {
        const YAML::Node& c = v[i];
        const std::string cpath = kpath + "[" + std::to_string(i) + "]";
        if (!c.IsMap()) return absl::InvalidArgumentError(Where(source, c, cpath) + ": expected a map");
        std::string attribute, spec;
        for (const auto& ckv : c) {
          const std::string ckey = ckv.first.as<std::string>();
          if (!ckv.second.IsScalar())
            return absl::InvalidArgumentError(Where(source, ckv.second, cpath + "." + ckey) + ": expected a string");
          if (ckey == "attributeKey") attribute = ckv.second.as<std::string>();
          else if (ckey == "metricSpec") spec = ckv.second.as<std::string>();
          else return absl::InvalidArgumentError(Where(source, ckv.first, cpath + "." + ckey) + ": unknown key (expected attributeKey or metricSpec)");
        }
        if (absl::Status s = AddCustomMetric(m, attribute, spec); !s.ok())
          return absl::InvalidArgumentError(Where(source, c, cpath) + ": " + std::string(s.message()));
      }
      continue;
    }
    if (!v.IsScalar()) return absl::InvalidArgumentError(Where(source, v, kpath) + ": expected a string");
    const std::string val = v.as<std::string>();
    if (key == "name") {
      m.engine = val;
      has_name = true;
      continue;
    }
    absl::Status s = SetMappingField(m, key, val);
    if (absl::IsNotFound(s)) return absl::InvalidArgumentError(Where(source, kv.first, kpath) + ": unknown key");
    if (!s.ok()) return absl::InvalidArgumentError(Where(source, v, kpath) + ": " + std::string(s.message()));
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
    return internal::YamlExceptionError(source, e, yaml);
  }
}

}  // namespace epp
