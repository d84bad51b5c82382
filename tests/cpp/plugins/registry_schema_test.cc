// Every built-in plugin type declares its parameters (a ParamTable), its effective parameters
// read back to the same plugin, and docs/plugin-parameters.md is what the declarations generate.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>

#include "epp/registry.h"
#include "epp/scheduling.h"
#include "testing/epp_testing.h"

namespace epp {
namespace {

// Types that cannot be created without parameters: the least that creates them.
Params Required(const std::string& type) {
  static const std::map<std::string, Params> required = [] {
    std::map<std::string, Params> m;
    const Params selector = Params::Map().Set("matchLabels", Params::Map().Set("app", Params::String("vllm")));
    m["label-selector-filter"] = selector;
    m["by-label-selector"] = selector;
    m["by-label"] = Params::Map().Set("label", Params::String("llm-d.ai/role"));
    m["priority-holdback-policy"] = Params::Map().Set("minCeiling", Params::Number(0.5));
    m["endpoint-attribute-filter"] =
        Params::Map()
            .Set("attribute", Params::String("load"))
            .Set("algorithm",
                 Params::Map()
                     .Set("type", Params::String("threshold"))
                     .Set("threshold", Params::Map().Set("operator", Params::String("LessThan")).Set("value", Params::Int(5))));
    m["endpoint-attribute-scorer"] =
        Params::Map()
            .Set("attributeKey", Params::String("load"))
            .Set("algorithm", Params::Map().Set("type", Params::String("linear_lower_is_better")));
    Params attribute = Params::Map()
                           .Set("key", Params::Map().Set("name", Params::String("cost")))
                           .Set("expression", Params::String("usage.total_tokens"));
    m["request-attribute-reporter"] = Params::Map().Set("attributes", Params::List().Append(std::move(attribute)));
    m["header-label-affinity-scorer"] =
        Params::Map().Set("headerName", Params::String("x-zone")).Set("labelKey", Params::String("zone"));
    m["session-id-producer"] = Params::Map().Set("cookieName", Params::String("session"));
    m["disaggregatedset-rollout-screener"] =
        Params::Map()
            .Set("scope", Params::Map().Set("labelSelector", Params::String("app=set")))
            .Set("revisionGating", Params::Map().Set("mode", Params::String("disabled")));
    m["utilization-filter"] = Params::Map().Set(
        "conditions", Params::List().Append(
                          Params::Map().Set("metric", Params::String("waiting-queue")).Set("maxValue", Params::Int(4))));
    m["file-discovery"] = Params::Map().Set("path", Params::String("/etc/epp/endpoints.yaml"));
    m["multicluster-file-discovery"] = m["file-discovery"];
    m["k8s-notification-source"] = Params::Map().Set("version", Params::String("v1")).Set("kind", Params::String("Pod"));
    return m;
  }();
  auto it = required.find(type);
  return it == required.end() ? Params() : it->second;
}

struct Created {
  absl::StatusOr<std::unique_ptr<Plugin>> plugin;
  Params used;
};

Created Create(const PluginRegistry& r, const std::string& type, Params params) {
  static SeededRng rng(7);
  std::vector<std::string> warnings;
  PluginContext ctx{&SteadyClock::Get(), &rng};
  ctx.warnings = &warnings;
  params.SetPath("plugins[0].parameters");
  return Created{r.Create(type, "p", params, ctx), params};
}

TEST(RegistrySchemaTest, EveryBuiltinTypeDeclaresItsParameters) {
  const PluginRegistry r = BuiltinRegistry();
  ASSERT_GT(r.Types().size(), 50u);
  for (const std::string& type : r.Types()) {
    const PluginSchema* s = r.Schema(type);
    ASSERT_NE(s, nullptr) << type;
    EXPECT_TRUE(s->declared) << type << " is registered without a ParamTable schema";
    std::set<std::string> names;
    for (const ParamInfo& p : s->params) {
      EXPECT_TRUE(names.insert(p.name).second) << type << ": " << p.name << " declared twice";
      EXPECT_FALSE(p.doc.empty()) << type << ": " << p.name << " has no documentation";
      for (const std::string& a : p.aliases) EXPECT_TRUE(names.insert(a).second) << type << ": alias " << a;
    }
  }
  EXPECT_EQ(r.Schema("no-such-type"), nullptr);
  // A type registered without a schema says so.
  PluginRegistry custom;
  ASSERT_TRUE(custom.Register("mine", [](const std::string&, const Params&, const PluginContext&) -> absl::StatusOr<std::unique_ptr<Plugin>> {
                      return absl::UnimplementedError("x");
                    }).ok());
  EXPECT_FALSE(custom.Schema("mine")->declared);
}

// Create with no parameters (or the least a type requires), take EffectiveParams(), create again
// from those: the second plugin's EffectiveParams() are the same. This is what a config reload
// and `eppctl config effective` rely on.
TEST(RegistrySchemaTest, EffectiveParametersRoundTripForEveryType) {
  const PluginRegistry r = BuiltinRegistry();
  for (const std::string& type : r.Types()) {
    SCOPED_TRACE(type);
    Created first = Create(r, type, Required(type));
    ASSERT_TRUE(first.plugin.ok()) << first.plugin.status();
    const Params eff = (*first.plugin)->EffectiveParams();
    ASSERT_TRUE(eff.is_map()) << eff.ToJson();
    // Everything written out is declared.
    const PluginSchema& s = *r.Schema(type);
    for (const auto& [key, value] : eff.entries())
      EXPECT_TRUE(s.Find(key) != nullptr || !s.other_keys.empty()) << key << " is written but not declared";
    Created second = Create(r, type, eff);
    ASSERT_TRUE(second.plugin.ok()) << second.plugin.status() << "\nfrom " << eff.ToJson();
    EXPECT_EQ((*second.plugin)->EffectiveParams().ToJson(), eff.ToJson());
  }
}

TEST(RegistrySchemaTest, UnknownParametersAreRejectedWithTheirPath) {
  const PluginRegistry r = BuiltinRegistry();
  for (const std::string& type : r.Types()) {
    if (!r.Schema(type)->other_keys.empty()) continue;  // metrics-data-source keeps anything
    Params p = Required(type);
    if (p.is_null()) p = Params::Map();
    p.Set("noSuchParameter", Params::Int(1));
    Created c = Create(r, type, p);
    ASSERT_FALSE(c.plugin.ok()) << type;
    EXPECT_NE(std::string(c.plugin.status().message()).find("plugins[0].parameters: unknown parameter 'noSuchParameter'"),
              std::string::npos)
        << c.plugin.status();
  }
}

// docs/plugin-parameters.md: a hand-written introduction, then the marker line, then exactly
// PluginParametersMarkdown(BuiltinRegistry()).
TEST(RegistrySchemaTest, PluginParametersDocIsGenerated) {
  const std::string marker = "<!-- generated: eppctl config plugins --markdown -->\n";
  std::ifstream in(std::string(EPP_SOURCE_DIR) + "/docs/plugin-parameters.md");
  ASSERT_TRUE(in) << "docs/plugin-parameters.md is missing";
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const size_t at = doc.find(marker);
  ASSERT_NE(at, std::string::npos) << "docs/plugin-parameters.md lost its marker line";
  EXPECT_TRUE(doc.substr(at + marker.size()) == PluginParametersMarkdown(BuiltinRegistry()))
      << "docs/plugin-parameters.md is out of date; regenerate its part after the marker with\n"
         "  eppctl config plugins --markdown";
}

TEST(RegistrySchemaTest, MarkdownShowsTypesDefaultsRangesAndAliases) {
  const std::string md = PluginParametersMarkdown(BuiltinRegistry());
  EXPECT_NE(md.find("### `queue-scorer`\n\nNo parameters.\n"), std::string::npos);
  EXPECT_NE(md.find("| `blockSizeTokens` | int | `16` | [1, 65536] |"), std::string::npos) << md;
  EXPECT_NE(md.find("| `prefillLoadModel` | string | `drain` | `drain`, `firstToken` |"), std::string::npos);
  EXPECT_NE(md.find("Older spelling: `deciderPluginName`."), std::string::npos);
  EXPECT_NE(md.find("| `metricsStalenessThreshold` | duration | `200ms` | > 0s |"), std::string::npos);
  EXPECT_NE(md.find("Other keys: "), std::string::npos);
  PluginRegistry custom;
  ASSERT_TRUE(custom.Register("mine", [](const std::string&, const Params&, const PluginContext&) -> absl::StatusOr<std::unique_ptr<Plugin>> {
                      return absl::UnimplementedError("x");
                    }).ok());
  EXPECT_EQ(PluginParametersMarkdown(custom), "### `mine`\n\nParameters not declared.\n\n");
}

}  // namespace
}  // namespace epp
