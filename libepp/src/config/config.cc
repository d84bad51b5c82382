// EndpointPickerConfig YAML -> EppConfig (strict keys), LoadConfigFile and DefaultConfig.
//
// This is the only file (with metric_mappings_yaml.cc) that sees yaml-cpp. yaml-cpp throws; every
// entry point catches YAML::Exception and returns kInvalidArgument "SOURCE:LINE:COL: message".
// Our own errors are "SOURCE:LINE: PATH: message" with the 1-based line of the offending key or
// item (0 = unknown, then the line is left out).
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <limits>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "common/strings.h"
#include "common/yaml_limits.h"
#include "common/yaml_load.h"
#include "common/yaml_where.h"
#include "epp/config.h"
#include "epp/request.h"

namespace epp {
namespace {

using internal::YamlExceptionError;
using internal::YamlLine;
using internal::YamlWhere;

constexpr std::string_view kKind = "EndpointPickerConfig";
// Deeper than any real parameter tree; stops a self-referencing alias (`&a [*a]`, which yaml-cpp
// turns into a cycle) from recursing forever.
constexpr int kMaxDepth = 64;

std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return "'" + node.Scalar() + "'";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    default:
      return "null";
  }
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// One map member with the line of its key (values such as `key:` have no useful mark of their own).
struct Entry {
  std::string key;
  YAML::Node value;
  int line = 0;
};

class Parser {
 public:
  explicit Parser(std::string source) { config_.source = std::move(source); }

  absl::StatusOr<EppConfig> Parse(const YAML::Node& root);

 private:
  absl::Status Error(int line, std::string_view path, std::string_view message) const {
    std::string out = config_.source;
    if (line > 0) out += ":" + std::to_string(line);
    out += ": ";
    if (!path.empty()) out += std::string(path) + ": ";
    return absl::InvalidArgumentError(out + std::string(message));
  }

  // The members of a map, in order. Keys must be strings and unique; with a non-empty `known`
  // every key must be one of them.
  absl::StatusOr<std::vector<Entry>> Entries(const YAML::Node& map, const std::string& path,
                                             std::initializer_list<std::string_view> known) const;
  absl::Status CheckKnown(const std::vector<Entry>& entries, const std::string& path,
                          std::initializer_list<std::string_view> known) const;
  const Entry* FindEntry(const std::vector<Entry>& entries, std::string_view key) const {
    for (const Entry& e : entries) {
      if (e.key == key) return &e;
    }
    return nullptr;
  }
  // A scalar member as text; "" when null.
  absl::StatusOr<std::string> String(const Entry& e, const std::string& path) const;
  // A list (null -> empty).
  absl::Status ExpectList(const YAML::Node& node, int line, const std::string& path) const;
  absl::Status ExpectMap(const YAML::Node& node, int line, const std::string& path) const;
  absl::StatusOr<Params> BuildParams(const YAML::Node& node, const std::string& path, int line, int depth) const;
  // Validates {pluginRef: NAME} (the only key) and returns NAME.
  absl::StatusOr<std::string> PluginRef(const YAML::Node& node, int line, const std::string& path) const;
  absl::Status CheckDefined(const std::string& name, int line, const std::string& path) const;

  absl::Status ParseFeatureGates(const Entry& e);
  absl::Status ParsePlugins(const Entry& e);
  absl::Status ParseProfiles(const Entry& e);
  absl::Status ParseSaturationDetector(const Entry& e);
  absl::Status ParseRequestHandler(const Entry& e);
  absl::Status ParseFlowControl(const Entry& e);
  absl::StatusOr<FlowControlBandSpec> ParseBand(const YAML::Node& node, int line, const std::string& path) const;
  absl::StatusOr<uint64_t> Quantity(const Entry& e, const std::string& path) const;
  absl::StatusOr<int64_t> Duration(const Entry& e, const std::string& path) const;
  absl::Status ParseDataLayer(const Entry& e);

  EppConfig config_;
};

absl::StatusOr<std::vector<Entry>> Parser::Entries(const YAML::Node& map, const std::string& path,
                                                   std::initializer_list<std::string_view> known) const {
  std::vector<Entry> out;
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node key = it->first;
    const int line = YamlLine(key);
    if (!key.IsScalar()) return Error(line, path, "keys must be strings, got " + Describe(key));
    Entry e{key.Scalar(), it->second, line};
    if (FindEntry(out, e.key) != nullptr) return Error(line, path, "duplicate key '" + e.key + "'");
    out.push_back(std::move(e));
  }
  if (known.size() > 0) EPP_RETURN_IF_ERROR(CheckKnown(out, path, known));
  return out;
}

absl::Status Parser::CheckKnown(const std::vector<Entry>& entries, const std::string& path,
                                std::initializer_list<std::string_view> known) const {
  for (const Entry& e : entries) {
    bool ok = false;
    std::string list;
    for (std::string_view k : known) {
      ok = ok || k == e.key;
      list += (list.empty() ? "" : ", ") + std::string(k);
    }
    if (!ok) return Error(e.line, path, "unknown key '" + e.key + "' (known: " + list + ")");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Parser::String(const Entry& e, const std::string& path) const {
  if (e.value.IsNull()) return std::string();
  if (!e.value.IsScalar()) return Error(e.line, path, "expected a string, got " + Describe(e.value));
  return e.value.Scalar();
}

absl::Status Parser::ExpectList(const YAML::Node& node, int line, const std::string& path) const {
  if (node.IsNull() || node.IsSequence()) return absl::OkStatus();
  return Error(line, path, "expected a list, got " + Describe(node));
}

absl::Status Parser::ExpectMap(const YAML::Node& node, int line, const std::string& path) const {
  if (node.IsMap()) return absl::OkStatus();
  return Error(line, path, "expected a map, got " + Describe(node));
}

absl::StatusOr<Params> Parser::BuildParams(const YAML::Node& node, const std::string& path, int line, int depth) const {
  if (depth > kMaxDepth) return Error(line, path, "nested too deeply");
  Params out;
  switch (node.Type()) {
    case YAML::NodeType::Scalar: {
      // yaml-cpp tags a non-plain scalar (quoted or block) "!"; an explicit !!str is a string too.
      const bool quoted = node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str";
      out = Params::Scalar(node.Scalar(), quoted, path);
      break;
    }
    case YAML::NodeType::Sequence: {
      out = Params::List(path);
      for (size_t i = 0; i < node.size(); ++i) {
        const YAML::Node item = node[i];
        const int item_line = YamlLine(item) > 0 ? YamlLine(item) : line;
        EPP_ASSIGN_OR_RETURN(Params child,
                             BuildParams(item, path + "[" + std::to_string(i) + "]", item_line, depth + 1));
        out.Append(std::move(child));
      }
      break;
    }
    case YAML::NodeType::Map: {
      out = Params::Map(path);
      EPP_ASSIGN_OR_RETURN(std::vector<Entry> entries, Entries(node, path, {}));
      for (const Entry& e : entries) {
        EPP_ASSIGN_OR_RETURN(Params child, BuildParams(e.value, path + "." + e.key, e.line, depth + 1));
        out.Set(e.key, std::move(child));
      }
      break;
    }
    default:
      out.SetPath(path);
      break;
  }
  out.set_line(line);
  return out;
}

absl::Status Parser::CheckDefined(const std::string& name, int line, const std::string& path) const {
  std::vector<std::string> names;
  for (const PluginSpec& p : config_.plugins) {
    if (p.name == name) return absl::OkStatus();
    names.push_back(p.name);
  }
  // A typo in a plugin's type (its default name) or name shows up here first: name the plugin
  // that was probably meant, with its line.
  std::string message = "references undefined plugin '" + name + "'";
  if (const std::string near = internal::Nearest(name, names); !near.empty()) {
    for (const PluginSpec& p : config_.plugins) {
      if (p.name != near) continue;
      message += "; the closest defined is '" + near + "' (" + p.path;
      if (p.line > 0) message += ", line " + std::to_string(p.line);
      message += "): a typo in its " + std::string(p.name == p.type ? "type" : "name") + "?";
      break;
    }
  }
  return Error(line, path, message);
}

absl::StatusOr<std::string> Parser::PluginRef(const YAML::Node& node, int line, const std::string& path) const {
  EPP_RETURN_IF_ERROR(ExpectMap(node, line, path));
  EPP_ASSIGN_OR_RETURN(std::vector<Entry> entries, Entries(node, path, {"pluginRef"}));
  const Entry* ref = FindEntry(entries, "pluginRef");
  if (ref == nullptr) return Error(line, path, "missing 'pluginRef'");
  const std::string ref_path = path + ".pluginRef";
  EPP_ASSIGN_OR_RETURN(std::string name, String(*ref, ref_path));
  if (name.empty()) return Error(ref->line, ref_path, "must not be empty");
  EPP_RETURN_IF_ERROR(CheckDefined(name, ref->line, ref_path));
  return name;
}

absl::Status Parser::ParseFeatureGates(const Entry& e) {
  const std::string path = "featureGates";
  if (!e.value.IsNull() && !e.value.IsSequence()) {
    return Error(e.line, path, "expected a list of strings, got " + Describe(e.value));
  }
  // Gate -> enabled, in order of first mention; a later mention overrides an earlier one.
  std::vector<std::pair<std::string, bool>> gates;
  for (size_t i = 0; i < e.value.size(); ++i) {
    const YAML::Node item = e.value[i];
    const std::string item_path = path + "[" + std::to_string(i) + "]";
    if (!item.IsScalar()) return Error(YamlLine(item), item_path, "expected a string, got " + Describe(item));
    const std::string_view text = internal::TrimSpace(item.Scalar());
    std::string name(text);
    bool enabled = true;
    if (size_t eq = text.find('='); eq != std::string::npos) {
      name = std::string(internal::TrimSpace(text.substr(0, eq)));
      const std::string value(internal::TrimSpace(text.substr(eq + 1)));
      // Go's strconv.ParseBool spellings, as the llm-d router parses gate values.
      if (value == "true" || value == "True" || value == "TRUE" || value == "t" || value == "T" || value == "1") {
        enabled = true;
      } else if (value == "false" || value == "False" || value == "FALSE" || value == "f" || value == "F" ||
                 value == "0") {
        enabled = false;
      } else {
        return Error(YamlLine(item), item_path,
                     "invalid value '" + value + "' for feature gate '" + name + "' (expected true or false)");
      }
    }
    if (name.empty()) return Error(YamlLine(item), item_path, "empty feature gate name");
    bool seen = false;
    for (auto& [n, on] : gates) {
      if (n == name) {
        on = enabled;
        seen = true;
      }
    }
    if (!seen) gates.emplace_back(name, enabled);
  }
  for (const auto& [name, enabled] : gates) {
    std::string warning;
    if (name == "dataLayer") {
      warning = "featureGates: 'dataLayer' is deprecated and has no effect";
    } else if (name == "flowControl") {
      // Implemented by `eppctl serve` (requests queue in the flow-control layer): no note.
    } else if (name == "enableLegacyMetrics") {
      warning = "featureGates: 'enableLegacyMetrics' accepted; epp always scrapes metrics directly";
    } else if (name == "haPopulateNonLeaderDatastore") {
      warning = "featureGates: 'haPopulateNonLeaderDatastore' has no effect in epp";
    } else {
      config_.warnings.push_back("featureGates: unknown feature gate '" + name + "' ignored");
      continue;
    }
    if (!enabled) continue;  // a known gate switched off needs no note
    config_.feature_gates.push_back(name);
    if (!warning.empty()) config_.warnings.push_back(std::move(warning));
  }
  return absl::OkStatus();
}

absl::Status Parser::ParsePlugins(const Entry& e) {
  EPP_RETURN_IF_ERROR(ExpectList(e.value, e.line, "plugins"));
  for (size_t i = 0; i < e.value.size(); ++i) {
    const YAML::Node item = e.value[i];
    PluginSpec spec;
    spec.path = "plugins[" + std::to_string(i) + "]";
    spec.line = YamlLine(item);
    if (!item.IsMap()) return Error(spec.line, spec.path, "expected a map with 'type', got " + Describe(item));
    EPP_ASSIGN_OR_RETURN(std::vector<Entry> entries, Entries(item, spec.path, {"name", "type", "parameters"}));
    spec.parameters.SetPath(spec.path + ".parameters");
    for (const Entry& m : entries) {
      const std::string path = spec.path + "." + m.key;
      if (m.key == "name") {
        EPP_ASSIGN_OR_RETURN(spec.name, String(m, path));
      } else if (m.key == "type") {
        EPP_ASSIGN_OR_RETURN(spec.type, String(m, path));
        if (spec.type.empty()) return Error(m.line, path, "must not be empty");
      } else {  // parameters
        if (!m.value.IsNull() && !m.value.IsMap()) {
          return Error(m.line, path, "expected a map, got " + Describe(m.value));
        }
        EPP_ASSIGN_OR_RETURN(spec.parameters, BuildParams(m.value, path, m.line, 0));
      }
    }
    if (FindEntry(entries, "type") == nullptr) return Error(spec.line, spec.path, "missing 'type'");
    if (spec.name.empty()) spec.name = spec.type;  // GIE defaulting rule 1
    for (const PluginSpec& prev : config_.plugins) {
      if (prev.name == spec.name) {
        return Error(spec.line, spec.path, "duplicate plugin name '" + spec.name + "' (first at " + prev.path + ")");
      }
    }
    config_.plugins.push_back(std::move(spec));
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseProfiles(const Entry& e) {
  EPP_RETURN_IF_ERROR(ExpectList(e.value, e.line, "schedulingProfiles"));
  for (size_t i = 0; i < e.value.size(); ++i) {
    const YAML::Node item = e.value[i];
    ProfileSpec profile;
    profile.path = "schedulingProfiles[" + std::to_string(i) + "]";
    profile.line = YamlLine(item);
    if (!item.IsMap()) return Error(profile.line, profile.path, "expected a map with 'name', got " + Describe(item));
    EPP_ASSIGN_OR_RETURN(std::vector<Entry> entries, Entries(item, profile.path, {"name", "plugins"}));
    if (const Entry* name = FindEntry(entries, "name")) {
      EPP_ASSIGN_OR_RETURN(profile.name, String(*name, profile.path + ".name"));
    }
    if (profile.name.empty()) return Error(profile.line, profile.path, "missing 'name'");
    for (const ProfileSpec& prev : config_.profiles) {
      if (prev.name == profile.name) {
        return Error(profile.line, profile.path,
                     "duplicate profile name '" + profile.name + "' (first at " + prev.path + ")");
      }
    }
    if (const Entry* plugins = FindEntry(entries, "plugins")) {
      const std::string list_path = profile.path + ".plugins";
      EPP_RETURN_IF_ERROR(ExpectList(plugins->value, plugins->line, list_path));
      for (size_t j = 0; j < plugins->value.size(); ++j) {
        const YAML::Node ref_node = plugins->value[j];
        ProfilePluginRef ref;
        ref.path = list_path + "[" + std::to_string(j) + "]";
        ref.line = YamlLine(ref_node);
        if (!ref_node.IsMap()) {
          return Error(ref.line, ref.path, "expected a map with 'pluginRef', got " + Describe(ref_node));
        }
        EPP_ASSIGN_OR_RETURN(std::vector<Entry> ref_entries, Entries(ref_node, ref.path, {"pluginRef", "weight"}));
        if (const Entry* r = FindEntry(ref_entries, "pluginRef")) {
          EPP_ASSIGN_OR_RETURN(ref.plugin_ref, String(*r, ref.path + ".pluginRef"));
        }
        if (ref.plugin_ref.empty()) return Error(ref.line, ref.path, "missing 'pluginRef'");
        EPP_RETURN_IF_ERROR(CheckDefined(ref.plugin_ref, ref.line, ref.path));
        if (const Entry* w = FindEntry(ref_entries, "weight"); w != nullptr && !w->value.IsNull()) {
          EPP_ASSIGN_OR_RETURN(Params weight, BuildParams(w->value, ref.path + ".weight", w->line, 0));
          auto value = weight.AsDouble();
          if (!value.ok()) return Error(w->line, "", std::string(value.status().message()));
          if (*value < 0) return Error(w->line, weight.path(), "must be >= 0, got " + weight.text());
          ref.weight = *value;
        }
        profile.plugins.push_back(std::move(ref));
      }
    }
    config_.profiles.push_back(std::move(profile));
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseSaturationDetector(const Entry& e) {
  const std::string path = "saturationDetector";
  if (e.value.IsNull()) return absl::OkStatus();
  EPP_RETURN_IF_ERROR(ExpectMap(e.value, e.line, path));
  EPP_ASSIGN_OR_RETURN(std::vector<Entry> entries, Entries(e.value, path, {}));
  if (FindEntry(entries, "pluginRef") != nullptr) {
    std::vector<std::string> others;
    for (const Entry& m : entries) {
      if (m.key != "pluginRef") others.push_back(m.key);
    }
    if (!others.empty()) {
      return Error(e.line, path, "'pluginRef' cannot be combined with inline parameters (" + Join(others) + ")");
    }
    EPP_ASSIGN_OR_RETURN(config_.saturation_detector_ref, PluginRef(e.value, e.line, path));
    return absl::OkStatus();
  }
  // Legacy form: the default detector's parameters given inline.
  EPP_ASSIGN_OR_RETURN(config_.saturation_detector_params, BuildParams(e.value, path, e.line, 0));
  return absl::OkStatus();
}

absl::Status Parser::ParseRequestHandler(const Entry& e) {
  const std::string path = "requestHandler";
  if (e.value.IsNull()) return absl::OkStatus();
  EPP_RETURN_IF_ERROR(ExpectMap(e.value, e.line, path));
  EPP_ASSIGN_OR_RETURN(std::vector<Entry> entries, Entries(e.value, path, {"parsers"}));
  std::vector<std::string> unused;  // referenced parsers epp will not run
  if (const Entry* parsers = FindEntry(entries, "parsers")) {
    const std::string list_path = path + ".parsers";
    EPP_RETURN_IF_ERROR(ExpectList(parsers->value, parsers->line, list_path));
    for (size_t i = 0; i < parsers->value.size(); ++i) {
      const YAML::Node item = parsers->value[i];
      const std::string item_path = list_path + "[" + std::to_string(i) + "]";
      EPP_ASSIGN_OR_RETURN(std::string name, PluginRef(item, YamlLine(item), item_path));
      config_.parser_refs.push_back(name);
      for (const PluginSpec& p : config_.plugins) {
        if (p.name == name && !RequestParserForType(p.type).has_value())
          unused.push_back("'" + name + "' (" + p.type + ")");
      }
    }
  }
  if (!unused.empty()) {
    config_.warnings.push_back(
        "requestHandler: loaded, but these are not request parsers and are not used as parsers: " +
        Join(unused));
  }
  return absl::OkStatus();
}

// llm-d's DataLayerConfig: sources (with their extractors) and discovery are acted on (the plugins
// in plugins/datalayer/ read them); the peer-discovery and cross-replica keys load with a warning.
absl::Status Parser::ParseDataLayer(const Entry& e) {
  const std::string path = "dataLayer";
  DataLayerSpec& dl = config_.data_layer;
  dl.present = true;
  if (e.value.IsNull()) return absl::OkStatus();
  EPP_RETURN_IF_ERROR(ExpectMap(e.value, e.line, path));
  EPP_ASSIGN_OR_RETURN(std::vector<Entry> entries,
                       Entries(e.value, path,
                               {"injectDefaults", "sources", "discovery", "peerDiscovery", "crossReplicaSyncerPluginRef",
                                "crossReplicaSyncInterval"}));
  dl.other = Params::Map();
  for (const Entry& x : entries) {
    const std::string at = path + "." + x.key;
    if (x.key == "injectDefaults") {
      EPP_ASSIGN_OR_RETURN(std::string v, String(x, at));
      if (v != "true" && v != "false") return Error(x.line, at, "expected true or false, got '" + v + "'");
      dl.inject_defaults = v == "true";
    } else if (x.key == "sources") {
      EPP_RETURN_IF_ERROR(ExpectList(x.value, x.line, at));
      for (size_t i = 0; i < x.value.size(); ++i) {
        const YAML::Node item = x.value[i];
        DataLayerSourceSpec src;
        src.path = at + "[" + std::to_string(i) + "]";
        src.line = YamlLine(item) > 0 ? YamlLine(item) : x.line;
        EPP_RETURN_IF_ERROR(ExpectMap(item, src.line, src.path));
        EPP_ASSIGN_OR_RETURN(std::vector<Entry> fields, Entries(item, src.path, {"pluginRef", "extractors"}));
        const Entry* ref = FindEntry(fields, "pluginRef");
        if (ref == nullptr) return Error(src.line, src.path, "missing 'pluginRef'");
        EPP_ASSIGN_OR_RETURN(src.plugin_ref, String(*ref, src.path + ".pluginRef"));
        if (src.plugin_ref.empty()) return Error(ref->line, src.path + ".pluginRef", "must not be empty");
        EPP_RETURN_IF_ERROR(CheckDefined(src.plugin_ref, ref->line, src.path + ".pluginRef"));
        for (const DataLayerSourceSpec& prev : dl.sources)
          if (prev.plugin_ref == src.plugin_ref)
            return Error(ref->line, src.path + ".pluginRef", "source '" + src.plugin_ref + "' listed twice (first at " + prev.path + ")");
        if (const Entry* ex = FindEntry(fields, "extractors")) {
          const std::string ex_path = src.path + ".extractors";
          EPP_RETURN_IF_ERROR(ExpectList(ex->value, ex->line, ex_path));
          for (size_t j = 0; j < ex->value.size(); ++j) {
            const YAML::Node ext = ex->value[j];
            EPP_ASSIGN_OR_RETURN(std::string name, PluginRef(ext, YamlLine(ext) > 0 ? YamlLine(ext) : ex->line,
                                                             ex_path + "[" + std::to_string(j) + "]"));
            src.extractor_refs.push_back(std::move(name));
          }
        }
        dl.sources.push_back(std::move(src));
      }
    } else if (x.key == "discovery") {
      if (x.value.IsNull()) continue;
      EPP_ASSIGN_OR_RETURN(dl.discovery_ref, PluginRef(x.value, x.line, at));
      dl.discovery_line = x.line;
    } else {
      EPP_ASSIGN_OR_RETURN(Params v, BuildParams(x.value, at, x.line, 1));
      dl.other.Set(x.key, std::move(v));
      config_.warnings.push_back(at + ": loaded but not implemented by epp (" +
                                 (x.key == "peerDiscovery" ? std::string("no peer EPP discovery")
                                                           : std::string("epp replicas share no state")) +
                                 ")");
    }
  }
  return absl::OkStatus();
}

// A Kubernetes resource quantity (apimachinery's resource.Quantity) as Quantity.Value() reads it:
// a decimal number with an optional binary (Ki..Ei) or decimal (m, k, M, G, T, P, E) suffix or an
// exponent (e3), rounded up to a whole number. Returns false when the text is not a quantity, or
// is negative or too large for an int64.
// 128-bit arithmetic (a GCC/Clang extension, marked so -Wpedantic accepts it): 30 digits times
// 2^60 or 10^30 need more than 64 bits before the result is known to fit.
__extension__ typedef unsigned __int128 QuantityInt;

bool ParseK8sQuantity(std::string_view text, uint64_t& out) {
  constexpr QuantityInt kMax = ~QuantityInt{0};
  size_t i = 0;
  if (i < text.size() && text[i] == '+') ++i;
  if (i < text.size() && text[i] == '-') return false;
  QuantityInt num = 0, den = 1;
  size_t digits = 0;
  bool dot = false;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '.' && !dot) {
      dot = true;
      continue;
    }
    if (c < '0' || c > '9') break;
    if (++digits > 30) return false;
    num = num * 10 + static_cast<unsigned>(c - '0');
    if (dot) den *= 10;
  }
  if (digits == 0) return false;
  const std::string_view suffix = text.substr(i);
  static const std::pair<std::string_view, int> kBinary[] = {{"Ki", 10}, {"Mi", 20}, {"Gi", 30},
                                                             {"Ti", 40}, {"Pi", 50}, {"Ei", 60}};
  static const std::pair<std::string_view, int> kDecimal[] = {{"", 0},  {"m", -3}, {"k", 3},  {"M", 6},
                                                              {"G", 9}, {"T", 12}, {"P", 15}, {"E", 18}};
  int shift = -1, exp10 = 0;
  bool known = false;
  for (const auto& [name, s] : kBinary) {
    if (suffix == name) shift = s, known = true;
  }
  for (const auto& [name, e] : kDecimal) {
    if (suffix == name) exp10 = e, known = true;
  }
  if (!known && suffix.size() > 1 && (suffix[0] == 'e' || suffix[0] == 'E')) {
    int e = 0;
    const auto [p, ec] = std::from_chars(suffix.data() + 1 + (suffix[1] == '+'), suffix.data() + suffix.size(), e);
    if (ec != std::errc() || p != suffix.data() + suffix.size() || e < -30 || e > 30) return false;
    exp10 = e;
    known = true;
  }
  if (!known) return false;
  // Every step is checked: a value past 128 bits is far past int64 (too large), and a
  // denominator past it leaves a non-zero fraction below one, which rounds up to 1.
  if (shift > 0) {
    if (num > (kMax >> shift)) return false;
    num <<= shift;
  }
  for (; exp10 > 0; --exp10) {
    if (num > kMax / 10) return false;
    num *= 10;
  }
  for (; exp10 < 0; ++exp10) {
    if (den > kMax / 10) {
      out = num > 0 ? 1 : 0;
      return true;
    }
    den *= 10;
  }
  if (num > kMax - den) return false;
  const QuantityInt value = (num + den - 1) / den;  // Value() rounds up
  if (value > static_cast<QuantityInt>(std::numeric_limits<int64_t>::max())) return false;
  out = static_cast<uint64_t>(value);
  return true;
}

absl::StatusOr<uint64_t> Parser::Quantity(const Entry& e, const std::string& path) const {
  if (e.value.IsNull()) return uint64_t{0};
  if (!e.value.IsScalar()) return Error(e.line, path, "expected a quantity, got " + Describe(e.value));
  uint64_t v = 0;
  if (!ParseK8sQuantity(e.value.Scalar(), v))
    return Error(e.line, path,
                 "'" + e.value.Scalar() + "' is not a non-negative quantity (e.g. 100, 1k, 500M, 1Gi)");
  return v;
}

absl::StatusOr<int64_t> Parser::Duration(const Entry& e, const std::string& path) const {
  if (!e.value.IsScalar()) return Error(e.line, path, "expected a duration (e.g. 30s), got " + Describe(e.value));
  absl::StatusOr<int64_t> us = ParseDurationMicros(e.value.Scalar());
  if (!us.ok()) return Error(e.line, path, std::string(us.status().message()));
  // The reference's controller config refuses negative TTLs.
  if (*us < 0) return Error(e.line, path, "must not be negative, got '" + e.value.Scalar() + "'");
  return *us;
}

absl::StatusOr<FlowControlBandSpec> Parser::ParseBand(const YAML::Node& node, int line, const std::string& path) const {
  EPP_RETURN_IF_ERROR(ExpectMap(node, line, path));
  EPP_ASSIGN_OR_RETURN(std::vector<Entry> fields,
                       Entries(node, path, {"priority", "maxBytes", "maxRequests", "fairnessPolicyRef", "orderingPolicyRef"}));
  FlowControlBandSpec band;
  band.path = path;
  band.line = line;
  for (const Entry& f : fields) {
    const std::string at = path + "." + f.key;
    if (f.key == "priority") {
      int64_t p = 0;
      if (!f.value.IsScalar() || !absl::SimpleAtoi(f.value.Scalar(), &p) || p < std::numeric_limits<int>::min() ||
          p > std::numeric_limits<int>::max())
        return Error(f.line, at, "expected an integer, got " + Describe(f.value));
      band.priority = static_cast<int>(p);
    } else if (f.key == "maxBytes") {
      EPP_ASSIGN_OR_RETURN(band.max_bytes, Quantity(f, at));
    } else if (f.key == "maxRequests") {
      EPP_ASSIGN_OR_RETURN(band.max_requests, Quantity(f, at));
    } else {
      EPP_ASSIGN_OR_RETURN(std::string ref, String(f, at));
      // The reference registers its default ordering and fairness policies under their type names
      // when the config does not define them, so those names resolve without a plugins entry.
      if (!ref.empty() && ref != "fcfs-ordering-policy" && ref != "global-strict-fairness-policy")
        EPP_RETURN_IF_ERROR(CheckDefined(ref, f.line, at));
      (f.key == "fairnessPolicyRef" ? band.fairness_policy_ref : band.ordering_policy_ref) = std::move(ref);
    }
  }
  return band;
}

absl::Status Parser::ParseFlowControl(const Entry& e) {
  // As llm-d: without the feature gate the section's settings other than saturationDetector are
  // ignored, and a section that sets any says so.
  if (std::find(config_.feature_gates.begin(), config_.feature_gates.end(), "flowControl") ==
      config_.feature_gates.end()) {
    bool settings = !e.value.IsMap() && !e.value.IsNull();
    if (e.value.IsMap())
      for (auto it = e.value.begin(); it != e.value.end(); ++it)
        settings = settings || !it->first.IsScalar() || it->first.Scalar() != "saturationDetector";
    if (settings)
      config_.warnings.push_back(
          "flowControl: the section is set but the flowControl feature gate is off; its settings other than "
          "saturationDetector are ignored (requests are never queued)");
  }
  if (!e.value.IsMap()) return absl::OkStatus();
  const std::string path = "flowControl.saturationDetector";
  // The reference's whole FlowControlConfig schema (llm-d-router apix/config/v1alpha1).
  EPP_ASSIGN_OR_RETURN(std::vector<Entry> entries,
                       Entries(e.value, "flowControl",
                               {"maxBytes", "maxRequests", "defaultRequestTTL", "noEndpointRequestTTL", "defaultPriorityBand",
                                "defaultNegativePriorityBand", "priorityBands", "usageLimitPolicyPluginRef",
                                "saturationDetector", "enableEviction"}));
  FlowControlSpec& fc = config_.flow_control;
  fc.present = true;
  fc.line = e.line;
  for (const Entry& f : entries) {
    const std::string at = "flowControl." + f.key;
    if (f.value.IsNull()) continue;
    if (f.key == "maxBytes") {
      EPP_ASSIGN_OR_RETURN(fc.max_bytes, Quantity(f, at));
    } else if (f.key == "maxRequests") {
      EPP_ASSIGN_OR_RETURN(fc.max_requests, Quantity(f, at));
    } else if (f.key == "defaultRequestTTL") {
      EPP_ASSIGN_OR_RETURN(fc.default_request_ttl_us, Duration(f, at));
    } else if (f.key == "noEndpointRequestTTL") {
      EPP_ASSIGN_OR_RETURN(fc.no_endpoint_request_ttl_us, Duration(f, at));
    } else if (f.key == "defaultPriorityBand") {
      EPP_ASSIGN_OR_RETURN(fc.default_band, ParseBand(f.value, f.line, at));
    } else if (f.key == "defaultNegativePriorityBand") {
      EPP_ASSIGN_OR_RETURN(fc.default_negative_band, ParseBand(f.value, f.line, at));
    } else if (f.key == "priorityBands") {
      EPP_RETURN_IF_ERROR(ExpectList(f.value, f.line, at));
      for (size_t i = 0; i < f.value.size(); ++i) {
        const YAML::Node item = f.value[i];
        const std::string item_path = at + "[" + std::to_string(i) + "]";
        EPP_ASSIGN_OR_RETURN(FlowControlBandSpec band,
                             ParseBand(item, YamlLine(item) > 0 ? YamlLine(item) : f.line, item_path));
        for (const FlowControlBandSpec& prev : fc.bands) {
          // The reference's registry refuses a priority level configured twice.
          if (prev.priority == band.priority)
            return Error(band.line, item_path + ".priority",
                         "duplicate priority level " + std::to_string(band.priority) + " (first at " + prev.path + ")");
        }
        fc.bands.push_back(std::move(band));
      }
    } else if (f.key == "usageLimitPolicyPluginRef") {
      EPP_ASSIGN_OR_RETURN(fc.usage_limit_policy_ref, String(f, at));
      fc.usage_limit_policy_line = f.line;
      if (!fc.usage_limit_policy_ref.empty() && fc.usage_limit_policy_ref != "static-usage-limit-policy")
        EPP_RETURN_IF_ERROR(CheckDefined(fc.usage_limit_policy_ref, f.line, at));
    } else if (f.key == "enableEviction") {
      if (!f.value.IsScalar() || (f.value.Scalar() != "true" && f.value.Scalar() != "false"))
        return Error(f.line, at, "expected true or false, got " + Describe(f.value));
      fc.enable_eviction = f.value.Scalar() == "true";
    }
  }
  const Entry* detector = FindEntry(entries, "saturationDetector");
  if (detector == nullptr || detector->value.IsNull()) return absl::OkStatus();
  EPP_RETURN_IF_ERROR(ExpectMap(detector->value, detector->line, path));
  if (!detector->value["pluginRef"].IsDefined()) {
    // The default detector's parameters inline (llm-d's own config-loader test writes
    // metricsStalenessThreshold here), as under the top-level saturationDetector.
    if (!config_.saturation_detector_params.is_null())
      return Error(detector->line, path, "detector parameters given both here and under the top-level saturationDetector");
    EPP_ASSIGN_OR_RETURN(config_.saturation_detector_params, BuildParams(detector->value, path, detector->line, 0));
    return absl::OkStatus();
  }
  EPP_ASSIGN_OR_RETURN(std::string ref, PluginRef(detector->value, detector->line, path));
  if (!config_.saturation_detector_ref.empty() && config_.saturation_detector_ref != ref) {
    // Router rule for the deprecated top-level field: "if both are set, the new field is used".
    config_.warnings.push_back("saturationDetector: pluginRef '" + config_.saturation_detector_ref +
                               "' overridden by flowControl.saturationDetector.pluginRef '" + ref + "'");
  }
  if (!config_.saturation_detector_params.is_null()) {
    config_.warnings.push_back(
        "saturationDetector: inline parameters ignored because flowControl.saturationDetector.pluginRef is set");
  }
  config_.saturation_detector_ref = ref;
  return absl::OkStatus();
}

absl::StatusOr<EppConfig> Parser::Parse(const YAML::Node& root) {
  if (!root.IsMap()) return Error(YamlLine(root), "", "expected a map at the top level, got " + Describe(root));
  // Keys are checked after kind and apiVersion, so a document of another kind is reported as such.
  EPP_ASSIGN_OR_RETURN(std::vector<Entry> entries, Entries(root, "", {}));
  const int root_line = YamlLine(root);
  const std::string versions = std::string(kGieApiVersion) + " or " + std::string(kLlmdApiVersion);

  const Entry* kind = FindEntry(entries, "kind");
  if (kind == nullptr) return Error(root_line, "kind", "missing (expected EndpointPickerConfig)");
  EPP_ASSIGN_OR_RETURN(std::string kind_text, String(*kind, "kind"));
  if (kind_text != kKind) {
    return Error(kind->line, "kind", "expected EndpointPickerConfig, got '" + kind_text + "'");
  }
  const Entry* api = FindEntry(entries, "apiVersion");
  if (api == nullptr) return Error(root_line, "apiVersion", "missing (expected " + versions + ")");
  EPP_ASSIGN_OR_RETURN(config_.api_version, String(*api, "apiVersion"));
  if (config_.api_version != kGieApiVersion && config_.api_version != kLlmdApiVersion) {
    return Error(api->line, "apiVersion",
                 "unsupported apiVersion '" + config_.api_version + "' (expected " + versions + ")");
  }
  EPP_RETURN_IF_ERROR(CheckKnown(entries, "",
                                 {"apiVersion", "kind", "featureGates", "plugins", "schedulingProfiles",
                                  "saturationDetector", "dataLayer", "flowControl", "parser", "requestHandler"}));

  // Fixed order: references need every plugin, whatever order the sections come in.
  if (const Entry* e = FindEntry(entries, "featureGates")) EPP_RETURN_IF_ERROR(ParseFeatureGates(*e));
  if (const Entry* e = FindEntry(entries, "plugins")) EPP_RETURN_IF_ERROR(ParsePlugins(*e));
  if (const Entry* e = FindEntry(entries, "schedulingProfiles")) EPP_RETURN_IF_ERROR(ParseProfiles(*e));
  if (const Entry* e = FindEntry(entries, "saturationDetector")) EPP_RETURN_IF_ERROR(ParseSaturationDetector(*e));
  if (const Entry* e = FindEntry(entries, "parser"); e != nullptr && !e->value.IsNull()) {
    EPP_ASSIGN_OR_RETURN(config_.parser_ref, PluginRef(e->value, e->line, "parser"));
  }
  if (const Entry* e = FindEntry(entries, "requestHandler")) EPP_RETURN_IF_ERROR(ParseRequestHandler(*e));
  if (const Entry* e = FindEntry(entries, "dataLayer")) EPP_RETURN_IF_ERROR(ParseDataLayer(*e));
  if (const Entry* e = FindEntry(entries, "flowControl")) EPP_RETURN_IF_ERROR(ParseFlowControl(*e));
  return std::move(config_);
}

// ---- Embedded documents (Helm values files, ConfigMaps) ----

struct Embedded {
  std::string location;  // "router.epp.pluginsCustomConfig.plugins.yaml"
  std::string text;
  absl::Status load_error;  // set when the text looks like a config but is not valid YAML
};

bool IsEppConfigDocument(const YAML::Node& node) {
  if (!node.IsMap()) return false;
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == "kind") {
      return it->second.IsScalar() && it->second.Scalar() == kKind;
    }
  }
  return false;
}

bool HasKindKey(const YAML::Node& node) {
  if (!node.IsMap()) return false;
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == "kind") return true;
  }
  return false;
}

// Depth-first, in document order: string scalars that load as a map with kind EndpointPickerConfig.
void FindEmbedded(const YAML::Node& node, const std::string& location, int depth, std::vector<Embedded>& found) {
  if (depth > kMaxDepth) return;
  if (node.IsScalar()) {
    const std::string& text = node.Scalar();
    if (text.find(kKind) == std::string::npos) return;
    try {
      if (IsEppConfigDocument(YAML::Load(text))) found.push_back({location, text, absl::OkStatus()});
    } catch (const YAML::Exception& e) {
      // Keep the error only for text that clearly means to be a config; anything else is unrelated.
      if (text.find("kind: EndpointPickerConfig") != std::string::npos) {
        found.push_back({location, text, YamlExceptionError("", e)});
      }
    }
  } else if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) {
      FindEmbedded(node[i], location + "[" + std::to_string(i) + "]", depth + 1, found);
    }
  } else if (node.IsMap()) {
    for (auto it = node.begin(); it != node.end(); ++it) {
      const std::string key = it->first.IsScalar() ? it->first.Scalar() : "?";
      FindEmbedded(it->second, location.empty() ? key : location + "." + key, depth + 1, found);
    }
  }
}

absl::StatusOr<EppConfig> ParseDocument(const YAML::Node& root, std::string source) {
  return Parser(std::move(source)).Parse(root);
}

absl::StatusOr<EppConfig> ParseText(std::string_view yaml, std::string_view source, bool search_embedded);

absl::StatusOr<EppConfig> ParseEmbedded(const Embedded& e, std::string_view source) {
  const std::string embedded_source =
      std::string(source) + " (embedded at " + e.location + ", line numbers within the embedded text)";
  if (!e.load_error.ok()) {
    // YamlExceptionError("") produced ":LINE:COL: message"; put the embedded source in front.
    return absl::InvalidArgumentError(embedded_source + std::string(e.load_error.message()));
  }
  return ParseText(e.text, embedded_source, /*search_embedded=*/false);
}

// Picks the one embedded config among `found`; identical texts count once.
absl::StatusOr<const Embedded*> PickEmbedded(const std::vector<Embedded>& found, std::string_view source) {
  std::vector<const Embedded*> distinct;
  for (const Embedded& e : found) {
    bool dup = false;
    for (const Embedded* d : distinct) dup = dup || (d->text == e.text);
    if (!dup) distinct.push_back(&e);
  }
  // Text that failed to load only matters when nothing loaded.
  std::vector<const Embedded*> good;
  for (const Embedded* e : distinct) {
    if (e->load_error.ok()) good.push_back(e);
  }
  if (good.size() == 1) return good.front();
  if (good.empty()) return distinct.empty() ? nullptr : distinct.front();
  std::vector<std::string> locations;
  for (const Embedded* e : good) locations.push_back(e->location);
  return absl::InvalidArgumentError(std::string(source) + ": found " + std::to_string(good.size()) +
                                    " different embedded EndpointPickerConfig documents (at " + Join(locations) +
                                    "); expected exactly one");
}

absl::StatusOr<EppConfig> ParseText(std::string_view yaml, std::string_view source, bool search_embedded) {
  std::vector<YAML::Node> docs;
  try {
    for (YAML::Node& d : internal::LoadAllDocuments(std::string(yaml))) {
      // Bound every walk below (parsing, the embedded-config search, parameter trees).
      EPP_RETURN_IF_ERROR(internal::CheckYamlExpansion(d, source));
      if (!d.IsNull()) docs.push_back(d);  // a stray "---" adds an empty document
    }
  } catch (const YAML::Exception& e) {
    return YamlExceptionError(source, e, yaml);
  }
  try {
    if (docs.empty()) {
      return absl::InvalidArgumentError(std::string(source) +
                                        ": expected a map at the top level, got an empty document");
    }
    if (docs.size() == 1) {
      const YAML::Node& root = docs.front();
      if (!search_embedded || !root.IsMap() || IsEppConfigDocument(root)) {
        return ParseDocument(root, std::string(source));
      }
      // Not itself a config: a Helm values file or a ConfigMap may carry one as a string.
      std::vector<Embedded> found;
      FindEmbedded(root, "", 0, found);
      EPP_ASSIGN_OR_RETURN(const Embedded* pick, PickEmbedded(found, source));
      if (pick != nullptr) return ParseEmbedded(*pick, source);
      if (HasKindKey(root)) return ParseDocument(root, std::string(source));  // reports the wrong kind
      return absl::InvalidArgumentError(
          std::string(source) +
          ": not an EndpointPickerConfig (no 'kind' at the top level and no embedded EndpointPickerConfig found)");
    }
    // A multi-document stream (a manifest bundle): exactly one document may be a config, directly
    // or embedded. Marks are stream-wide, so direct documents keep real line numbers.
    std::vector<const YAML::Node*> direct;
    std::vector<Embedded> found;
    for (size_t i = 0; i < docs.size(); ++i) {
      if (IsEppConfigDocument(docs[i])) {
        direct.push_back(&docs[i]);
      } else if (search_embedded) {
        const size_t before = found.size();
        FindEmbedded(docs[i], "", 0, found);
        for (size_t j = before; j < found.size(); ++j) {
          found[j].location = "document " + std::to_string(i + 1) + ": " + found[j].location;
        }
      }
    }
    EPP_ASSIGN_OR_RETURN(const Embedded* pick, PickEmbedded(found, source));
    const size_t embedded_count = pick == nullptr ? 0 : 1;
    if (direct.size() + embedded_count == 1) {
      return direct.empty() ? ParseEmbedded(*pick, source) : ParseDocument(*direct.front(), std::string(source));
    }
    if (direct.empty() && embedded_count == 0) {
      return absl::InvalidArgumentError(std::string(source) + ": none of the " + std::to_string(docs.size()) +
                                        " YAML documents is or embeds an EndpointPickerConfig");
    }
    return absl::InvalidArgumentError(std::string(source) + ": " + std::to_string(docs.size()) +
                                      " YAML documents with more than one EndpointPickerConfig; expected exactly one");
  } catch (const YAML::Exception& e) {
    return YamlExceptionError(source, e);
  }
}

}  // namespace

absl::StatusOr<EppConfig> ParseConfig(std::string_view yaml, std::string_view source) {
  return ParseText(yaml, source, /*search_embedded=*/true);
}

absl::StatusOr<EppConfig> LoadConfigFile(const std::string& path) {
  auto fail = [&](int err) {
    return absl::NotFoundError("cannot read config file '" + path + "': " + std::strerror(err));
  };
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return fail(errno);
  std::string text;
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) return fail(err);
  return ParseConfig(text, path);
}

EppConfig DefaultConfig() {
  EppConfig config;
  config.source = "<default>";
  config.api_version = std::string(kGieApiVersion);
  const char* types[] = {"queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer", "metrics-data-source",
                         "core-metrics-extractor"};
  for (const char* type : types) {
    PluginSpec spec;
    spec.name = type;
    spec.type = type;
    spec.path = "plugins[" + std::to_string(config.plugins.size()) + "]";
    spec.parameters.SetPath(spec.path + ".parameters");
    config.plugins.push_back(std::move(spec));
  }
  ProfileSpec profile;
  profile.name = "default";
  profile.path = "schedulingProfiles[0]";
  const std::pair<const char*, double> refs[] = {
      {"queue-scorer", 2}, {"kv-cache-utilization-scorer", 2}, {"prefix-cache-scorer", 3}};
  for (const auto& [name, weight] : refs) {
    ProfilePluginRef ref;
    ref.plugin_ref = name;
    ref.weight = weight;
    ref.path = profile.path + ".plugins[" + std::to_string(profile.plugins.size()) + "]";
    profile.plugins.push_back(std::move(ref));
  }
  config.profiles.push_back(std::move(profile));
  return config;
}

}  // namespace epp
