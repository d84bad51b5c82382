// ParseConfig / LoadConfigFile / DefaultConfig: synthetic cases plus every real configuration in
// ../shared/fixtures/configs.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "epp/config.h"
#include "epp/scheduler.h"
#include "common/yaml_where.h"

namespace epp {
namespace {

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

absl::StatusOr<EppConfig> Parse(const std::string& yaml) { return ParseConfig(yaml, "c.yaml"); }

bool HasWarning(const EppConfig& c, const std::string& part) {
  for (const std::string& w : c.warnings) {
    if (w.find(part) != std::string::npos) return true;
  }
  return false;
}

constexpr char kHeader[] = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n";

TEST(ConfigYamlTest, ParsesPluginsProfilesWithPathsAndLines) {
  auto c = Parse(std::string(kHeader) + R"(plugins:
- type: queue-scorer
- name: pc
  type: prefix-cache-scorer
  parameters:
    blockSizeTokens: 64
    mode: "16"
    list: [1, two]
    nested:
      deep: 0.5
    empty:
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: pc
)");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->source, "c.yaml");
  EXPECT_EQ(c->api_version, kGieApiVersion);
  ASSERT_EQ(c->plugins.size(), 2u);
  EXPECT_EQ(c->plugins[0].name, "queue-scorer");  // name defaults to type
  EXPECT_EQ(c->plugins[0].path, "plugins[0]");
  EXPECT_EQ(c->plugins[0].line, 4);
  EXPECT_TRUE(c->plugins[0].parameters.is_null());
  EXPECT_EQ(c->plugins[0].parameters.path(), "plugins[0].parameters");
  const PluginSpec& pc = c->plugins[1];
  EXPECT_EQ(pc.name, "pc");
  EXPECT_EQ(pc.type, "prefix-cache-scorer");
  EXPECT_EQ(pc.line, 5);
  ASSERT_TRUE(pc.parameters.is_map());
  EXPECT_EQ(pc.parameters.line(), 7);
  EXPECT_EQ(*pc.parameters.GetInt("blockSizeTokens", 0), 64);
  EXPECT_EQ(pc.parameters.Find("blockSizeTokens")->line(), 8);
  EXPECT_EQ(pc.parameters.Find("blockSizeTokens")->path(), "plugins[1].parameters.blockSizeTokens");
  EXPECT_TRUE(pc.parameters.Find("mode")->quoted());
  EXPECT_FALSE(pc.parameters.Find("blockSizeTokens")->quoted());
  EXPECT_EQ(pc.parameters.Find("list")->items()[1].path(), "plugins[1].parameters.list[1]");
  EXPECT_EQ(pc.parameters.Find("nested")->Find("deep")->line(), 12);
  EXPECT_TRUE(pc.parameters.Find("empty")->is_null());
  EXPECT_EQ(pc.parameters.Find("empty")->line(), 13);
  EXPECT_EQ(pc.parameters.ToJson(),
            R"({"blockSizeTokens":64,"mode":"16","list":[1,"two"],"nested":{"deep":0.5},"empty":null})");
  ASSERT_EQ(c->profiles.size(), 1u);
  const ProfileSpec& p = c->profiles[0];
  EXPECT_EQ(p.name, "default");
  EXPECT_EQ(p.path, "schedulingProfiles[0]");
  EXPECT_EQ(p.line, 15);
  ASSERT_EQ(p.plugins.size(), 2u);
  EXPECT_EQ(p.plugins[0].plugin_ref, "queue-scorer");
  EXPECT_EQ(p.plugins[0].weight, 2.0);
  EXPECT_EQ(p.plugins[0].path, "schedulingProfiles[0].plugins[0]");
  EXPECT_EQ(p.plugins[0].line, 17);
  EXPECT_EQ(p.plugins[1].weight, std::nullopt);
  EXPECT_TRUE(c->warnings.empty());
  EXPECT_TRUE(c->saturation_detector_ref.empty());
  EXPECT_TRUE(c->saturation_detector_params.is_null());
}

TEST(ConfigYamlTest, EmptyPluginListsAreAccepted) {
  for (const char* body : {"", "plugins: []\n", "plugins:\nschedulingProfiles: []\n"}) {
    SCOPED_TRACE(body);
    auto c = Parse(std::string(kHeader) + body);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(c->plugins.empty());
    EXPECT_TRUE(c->profiles.empty());
  }
  auto llmd = Parse("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n");
  ASSERT_TRUE(llmd.ok()) << llmd.status();
  EXPECT_EQ(llmd->api_version, kLlmdApiVersion);
}

struct ErrorCase {
  const char* name;
  std::string yaml;
  std::string message;  // the whole message
};

TEST(ConfigYamlTest, Errors) {
  const std::string h = kHeader;  // two lines
  const ErrorCase cases[] = {
      {"unknown top-level key", h + "plugin: []\n",
       "c.yaml:3: unknown key 'plugin' (known: apiVersion, kind, featureGates, plugins, schedulingProfiles, "
       "saturationDetector, dataLayer, flowControl, parser, requestHandler)"},
      {"unknown plugin key", h + "plugins:\n- type: a\n- type: b\n- type: c\n  paramters: {}\n",
       "c.yaml:7: plugins[2]: unknown key 'paramters' (known: name, type, parameters)"},
      {"unknown profile key", h + "schedulingProfiles:\n- name: p\n  plugin: []\n",
       "c.yaml:5: schedulingProfiles[0]: unknown key 'plugin' (known: name, plugins)"},
      {"unknown profile plugin key",
       h + "plugins:\n- type: a\nschedulingProfiles:\n- name: p\n  plugins:\n  - pluginRef: a\n    wieght: 1\n",
       "c.yaml:9: schedulingProfiles[0].plugins[0]: unknown key 'wieght' (known: pluginRef, weight)"},
      {"duplicate yaml key", h + "plugins:\n- type: a\n  type: b\n", "c.yaml:5: plugins[0]: duplicate key 'type'"},
      {"duplicate top-level key", h + "plugins: []\nplugins: []\n", "c.yaml:4: duplicate key 'plugins'"},
      {"duplicate plugin name", h + "plugins:\n- type: queue-scorer\n- type: x\n- type: y\n- type: queue-scorer\n",
       "c.yaml:7: plugins[3]: duplicate plugin name 'queue-scorer' (first at plugins[0])"},
      {"explicit name duplicates defaulted name", h + "plugins:\n- type: a\n- name: a\n  type: b\n",
       "c.yaml:5: plugins[1]: duplicate plugin name 'a' (first at plugins[0])"},
      {"missing type", h + "plugins:\n- name: a\n", "c.yaml:4: plugins[0]: missing 'type'"},
      {"empty type", h + "plugins:\n- type: ''\n", "c.yaml:4: plugins[0].type: must not be empty"},
      {"null type", h + "plugins:\n- type:\n", "c.yaml:4: plugins[0].type: must not be empty"},
      {"plugin not a map", h + "plugins:\n- queue-scorer\n",
       "c.yaml:4: plugins[0]: expected a map with 'type', got 'queue-scorer'"},
      {"plugins not a list", h + "plugins: {type: a}\n", "c.yaml:3: plugins: expected a list, got a map"},
      {"parameters not a map", h + "plugins:\n- type: a\n  parameters: [1]\n",
       "c.yaml:5: plugins[0].parameters: expected a map, got a list"},
      {"type not a string", h + "plugins:\n- type: [a]\n", "c.yaml:4: plugins[0].type: expected a string, got a list"},
      {"duplicate parameter key", h + "plugins:\n- type: a\n  parameters:\n    x: 1\n    x: 2\n",
       "c.yaml:7: plugins[0].parameters: duplicate key 'x'"},
      {"undefined plugin ref",
       h + "plugins:\n- type: a\n- type: b\nschedulingProfiles:\n- name: p\n  plugins:\n  - pluginRef: a\n  - "
           "pluginRef: b\n  - pluginRef: foo\n",
       "c.yaml:11: schedulingProfiles[0].plugins[2]: references undefined plugin 'foo'"},
      {"missing pluginRef", h + "schedulingProfiles:\n- name: p\n  plugins:\n  - weight: 1\n",
       "c.yaml:6: schedulingProfiles[0].plugins[0]: missing 'pluginRef'"},
      {"missing profile name", h + "schedulingProfiles:\n- plugins: []\n",
       "c.yaml:4: schedulingProfiles[0]: missing 'name'"},
      {"duplicate profile name", h + "schedulingProfiles:\n- name: p\n- name: q\n- name: p\n",
       "c.yaml:6: schedulingProfiles[2]: duplicate profile name 'p' (first at schedulingProfiles[0])"},
      {"weight not a number",
       h + "plugins:\n- type: a\nschedulingProfiles:\n- name: p\n  plugins:\n  - pluginRef: a\n    weight: high\n",
       "c.yaml:9: schedulingProfiles[0].plugins[0].weight: expected a number, got 'high'"},
      {"weight negative",
       h + "plugins:\n- type: a\nschedulingProfiles:\n- name: p\n  plugins:\n  - pluginRef: a\n    weight: -1\n",
       "c.yaml:9: schedulingProfiles[0].plugins[0].weight: must be >= 0, got -1"},
      {"weight infinite",
       h + "plugins:\n- type: a\nschedulingProfiles:\n- name: p\n  plugins:\n  - pluginRef: a\n    weight: .inf\n",
       "c.yaml:9: schedulingProfiles[0].plugins[0].weight: expected a number, got '.inf'"},
      {"bad apiVersion", "apiVersion: v2\nkind: EndpointPickerConfig\n",
       "c.yaml:1: apiVersion: unsupported apiVersion 'v2' (expected inference.networking.x-k8s.io/v1alpha1 or "
       "llm-d.ai/v1alpha1)"},
      {"missing apiVersion", "kind: EndpointPickerConfig\nplugins: []\n",
       "c.yaml:1: apiVersion: missing (expected inference.networking.x-k8s.io/v1alpha1 or llm-d.ai/v1alpha1)"},
      {"wrong kind", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
       "c.yaml:2: kind: expected EndpointPickerConfig, got 'ConfigMap'"},
      {"top level list", "- a\n- b\n", "c.yaml:1: expected a map at the top level, got a list"},
      {"top level scalar", "hello\n", "c.yaml:1: expected a map at the top level, got 'hello'"},
      {"empty document", "# nothing\n", "c.yaml: expected a map at the top level, got an empty document"},
      // Reported where the '[' opens, not where yaml-cpp gave up (4:19).
      {"malformed flow", h + "plugins: [a, b\nschedulingProfiles: []\n",
       "c.yaml:3:10: this '[' is never closed (end of sequence flow not found by the end of the text)"},
      {"malformed indentation", "apiVersion: x\n  kind: y\n", "c.yaml:2:7: illegal map value"},
      // yaml-cpp's own LoadAll would loop forever on this one.
      {"stray flow entry", ",apiVersion: x\n", "c.yaml:1:1: unexpected ','"},
      {"stray flow entry after a document", std::string(kHeader) + "---\n,a: 1\n", "c.yaml:4:1: unexpected ','"},
      {"no kind anywhere", "foo: bar\nplugins: []\n",
       "c.yaml: not an EndpointPickerConfig (no 'kind' at the top level and no embedded EndpointPickerConfig "
       "found)"},
      {"saturation pluginRef plus params",
       h + "plugins:\n- type: d\nsaturationDetector:\n  pluginRef: d\n  queueDepthThreshold: 5\n",
       "c.yaml:5: saturationDetector: 'pluginRef' cannot be combined with inline parameters (queueDepthThreshold)"},
      {"saturation undefined ref", h + "saturationDetector:\n  pluginRef: nope\n",
       "c.yaml:4: saturationDetector.pluginRef: references undefined plugin 'nope'"},
      {"saturation empty ref", h + "plugins:\n- type: d\nsaturationDetector:\n  pluginRef: ''\n",
       "c.yaml:6: saturationDetector.pluginRef: must not be empty"},
      {"saturation not a map", h + "saturationDetector: x\n", "c.yaml:3: saturationDetector: expected a map, got 'x'"},
      {"parser undefined", h + "parser:\n  pluginRef: openai-parser\n",
       "c.yaml:4: parser.pluginRef: references undefined plugin 'openai-parser'"},
      {"parser unknown key", h + "plugins:\n- type: p\nparser:\n  pluginRef: p\n  mode: x\n",
       "c.yaml:7: parser: unknown key 'mode' (known: pluginRef)"},
      {"requestHandler undefined", h + "requestHandler:\n  parsers:\n  - pluginRef: x\n",
       "c.yaml:5: requestHandler.parsers[0].pluginRef: references undefined plugin 'x'"},
      {"requestHandler unknown key", h + "requestHandler:\n  parser: {}\n",
       "c.yaml:4: requestHandler: unknown key 'parser' (known: parsers)"},
      {"flowControl undefined detector", h + "flowControl:\n  saturationDetector:\n    pluginRef: x\n",
       "c.yaml:5: flowControl.saturationDetector.pluginRef: references undefined plugin 'x'"},
      {"flowControl unknown key", h + "flowControl:\n  maxByte: 10\n",
       "c.yaml:4: flowControl: unknown key 'maxByte' (known: maxBytes, maxRequests, defaultRequestTTL, noEndpointRequestTTL, "
       "defaultPriorityBand, defaultNegativePriorityBand, priorityBands, usageLimitPolicyPluginRef, saturationDetector, "
       "enableEviction)"},
      {"flowControl detector params twice", h + "saturationDetector:\n  queueDepthThreshold: 3\nflowControl:\n  saturationDetector:\n"
                                                "    metricsStalenessThreshold: 150ms\n",
       "c.yaml:6: flowControl.saturationDetector: detector parameters given both here and under the top-level "
       "saturationDetector"},
      {"feature gate bad value", h + "featureGates:\n- flowControl=maybe\n",
       "c.yaml:4: featureGates[0]: invalid value 'maybe' for feature gate 'flowControl' (expected true or false)"},
      {"feature gates not a list", h + "featureGates: flowControl\n",
       "c.yaml:3: featureGates: expected a list of strings, got 'flowControl'"},
      {"feature gate empty name", h + "featureGates:\n- =true\n", "c.yaml:4: featureGates[0]: empty feature gate name"},
      {"non-string key", h + "plugins:\n- type: a\n  parameters:\n    [x]: 1\n",
       "c.yaml:6: plugins[0].parameters: keys must be strings, got a list"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = Parse(c.yaml);
    ASSERT_FALSE(r.ok()) << c.yaml;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Msg(r.status()), c.message);
  }
}

TEST(ConfigYamlTest, SelfReferencingAliasStopsAtDepthLimit) {
  // yaml-cpp turns `&l [1, *l]` into a cycle; the builder gives up instead of recursing forever.
  auto r = Parse(std::string(kHeader) + "plugins:\n- type: a\n  parameters:\n    x: &l [1, *l]\n");
  ASSERT_FALSE(r.ok());
  const std::string m = Msg(r.status());
  EXPECT_EQ(m.rfind("c.yaml:6: plugins[0].parameters.x[1][1][1]", 0), 0u) << m;
  EXPECT_NE(m.find(": nested too deeply"), std::string::npos) << m;
}

// Seven levels of anchors, each aliasing the one below ten times: 10^7 paths in a few hundred
// bytes. `top` is the key the last level hangs under.
std::string AliasBomb(const std::string& indent) {
  std::string text = indent + "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int level = 1; level <= 6; ++level) {
    const std::string below = "*l" + std::to_string(level - 1);
    text += indent + "l" + std::to_string(level) + ": &l" + std::to_string(level) + " [";
    for (int i = 0; i < 10; ++i) text += (i ? ", " : "") + below;
    text += "]\n";
  }
  text += indent + "top: [*l6, *l6, *l6, *l6, *l6, *l6, *l6, *l6, *l6, *l6]\n";
  return text;
}

TEST(ConfigYamlTest, AliasExpansionIsBoundedInTheEmbeddedSearch) {
  // Not a config itself, so the embedded-config search walks it (it used to hang here).
  const std::string text = "values:\n" + AliasBomb("  ");
  ASSERT_LT(text.size(), 600u);
  auto r = ParseConfig(text, "values.yaml");
  ASSERT_FALSE(r.ok());
  const std::string m = Msg(r.status());
  EXPECT_EQ(m.rfind("values.yaml:", 0), 0u) << m;
  EXPECT_NE(m.find("the document expands to more than 250000 nodes (through YAML aliases?)"), std::string::npos) << m;
}

TEST(ConfigYamlTest, AliasExpansionIsBoundedInPluginParameters) {
  // The same trick in a plugin's parameters took 38 s and 1.6 GB building the Params tree.
  auto r = Parse(std::string(kHeader) + "plugins:\n- type: queue-scorer\n  parameters:\n" + AliasBomb("    "));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(Msg(r.status()).find("expands to more than 250000 nodes"), std::string::npos) << r.status();
  // A few aliases stay fine: the budget counts nodes, not the use of anchors.
  auto ok = Parse(std::string(kHeader) +
                  "plugins:\n- type: queue-scorer\n  parameters: &p {}\n- name: q2\n  type: queue-scorer\n"
                  "  parameters: *p\n");
  EXPECT_TRUE(ok.ok()) << ok.status();
}

TEST(ConfigYamlTest, FeatureGateForms) {
  auto c = Parse(std::string(kHeader) + R"(featureGates:
- dataLayer
- flowControl=true
- enableLegacyMetrics=false
- " haPopulateNonLeaderDatastore = True "
- myGate
- otherGate=false
- dataLayer=false
)");
  ASSERT_TRUE(c.ok()) << c.status();
  // dataLayer was switched off again by its second mention.
  EXPECT_EQ(c->feature_gates, (std::vector<std::string>{"flowControl", "haPopulateNonLeaderDatastore"}));
  EXPECT_EQ(c->warnings,
            (std::vector<std::string>{
                "featureGates: 'haPopulateNonLeaderDatastore' has no effect in epp",
                "featureGates: unknown feature gate 'myGate' ignored",
                "featureGates: unknown feature gate 'otherGate' ignored",
            }));
  auto d = Parse(std::string(kHeader) + "featureGates: [dataLayer, enableLegacyMetrics]\n");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->warnings, (std::vector<std::string>{"featureGates: 'dataLayer' is deprecated and has no effect",
                                                   "featureGates: 'enableLegacyMetrics' accepted; epp always scrapes "
                                                   "metrics directly"}));
}

TEST(ConfigYamlTest, SaturationDetectorForms) {
  auto ref = Parse(std::string(kHeader) +
                   "plugins:\n- type: concurrency-detector\nsaturationDetector:\n  pluginRef: concurrency-detector\n");
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(ref->saturation_detector_ref, "concurrency-detector");
  EXPECT_TRUE(ref->saturation_detector_params.is_null());

  auto inline_form = Parse(std::string(kHeader) +
                           "saturationDetector:\n  metricsStalenessThreshold: 150ms\n  queueDepthThreshold: 5\n");
  ASSERT_TRUE(inline_form.ok()) << inline_form.status();
  EXPECT_TRUE(inline_form->saturation_detector_ref.empty());
  const Params& p = inline_form->saturation_detector_params;
  ASSERT_TRUE(p.is_map());
  EXPECT_EQ(p.path(), "saturationDetector");
  EXPECT_EQ(*p.GetDurationMicros("metricsStalenessThreshold", 0), 150'000);
  EXPECT_EQ(p.Find("queueDepthThreshold")->path(), "saturationDetector.queueDepthThreshold");
  EXPECT_EQ(p.Find("queueDepthThreshold")->line(), 5);
}

TEST(ConfigYamlTest, FlowControlDetectorRef) {
  const std::string plugins = "plugins:\n- type: utilization-detector\n- type: concurrency-detector\n";
  auto c = Parse(std::string(kHeader) + plugins +
                 "flowControl:\n  maxRequests: 10\n  saturationDetector:\n    pluginRef: utilization-detector\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->saturation_detector_ref, "utilization-detector");
  EXPECT_EQ(c->warnings, (std::vector<std::string>{"flowControl: the section is set but the flowControl feature gate is off; its settings other than "
                                                   "saturationDetector are ignored (requests are never queued)"}));
  // Both set: the llm-d router uses the new field, and we say so.
  auto both = Parse(std::string(kHeader) + plugins +
                    "saturationDetector: {pluginRef: concurrency-detector}\n"
                    "flowControl: {saturationDetector: {pluginRef: utilization-detector}}\n");
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->saturation_detector_ref, "utilization-detector");
  EXPECT_TRUE(HasWarning(*both,
                         "saturationDetector: pluginRef 'concurrency-detector' overridden by "
                         "flowControl.saturationDetector.pluginRef 'utilization-detector'"));
  // Any other flowControl content is accepted as is (dataLayer is implemented: no warning).
  auto other = Parse(std::string(kHeader) + "flowControl: [whatever, {x: 1}]\ndataLayer: {sources: []}\n");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->warnings, (std::vector<std::string>{"flowControl: the section is set but the flowControl feature gate is off; its settings other than "
                                                   "saturationDetector are ignored (requests are never queued)"}));
  // With the gate on the layer acts on the section: no note; a section with only the detector
  // is not "settings" (the reference's flowControlSettingsConfigured).
  auto gated = Parse(std::string(kHeader) + plugins + "featureGates: [flowControl]\nflowControl: {maxRequests: 10}\n");
  ASSERT_TRUE(gated.ok()) << gated.status();
  EXPECT_TRUE(gated->warnings.empty());
  auto detector_only =
      Parse(std::string(kHeader) + plugins + "flowControl: {saturationDetector: {pluginRef: utilization-detector}}\n");
  ASSERT_TRUE(detector_only.ok()) << detector_only.status();
  EXPECT_TRUE(detector_only->warnings.empty());
}

// llm-d's full FlowControlConfig schema loads (not acted on), and inline detector parameters under
// flowControl.saturationDetector configure the default utilization-detector (llm-d's own
// config-loader test writes metricsStalenessThreshold there).
TEST(ConfigYamlTest, FlowControlFullSchemaAndInlineDetectorParameters) {
  const std::string yaml =
      "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n"
      "flowControl:\n  maxBytes: 1Gi\n  maxRequests: 100\n  defaultRequestTTL: 30s\n  noEndpointRequestTTL: 5s\n"
      "  defaultPriorityBand:\n    maxBytes: 10Mi\n  priorityBands:\n  - priority: 1\n    maxRequests: 10\n"
      "  usageLimitPolicyPluginRef: static-usage-limit-policy\n  enableEviction: true\n  saturationDetector:\n    metricsStalenessThreshold: 150ms\n";
  auto c = ParseConfig(yaml, "fc.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->saturation_detector_params.Find("metricsStalenessThreshold")->text(), "150ms");
  auto s = BuildScheduler(*c, BuiltinRegistry());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NE((*s)->EffectiveConfigYaml().find("metricsStalenessThreshold: 150ms"), std::string::npos) << (*s)->EffectiveConfigYaml();
}

TEST(ConfigYamlTest, ParserAndRequestHandler) {
  auto c = Parse(std::string(kHeader) + R"(plugins:
- type: openai-parser
- type: passthrough-parser
parser:
  pluginRef: openai-parser
requestHandler:
  parsers:
  - pluginRef: openai-parser
  - pluginRef: passthrough-parser
)");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->parser_ref, "openai-parser");
  EXPECT_EQ(c->parser_refs, (std::vector<std::string>{"openai-parser", "passthrough-parser"}));
  EXPECT_TRUE(c->warnings.empty()) << c->warnings.front();  // both are implemented
  auto other = Parse(std::string(kHeader) +
                     "plugins: [{type: openai-parser}, {name: v, type: vllmgrpc-parser}]\n"
                     "requestHandler: {parsers: [{pluginRef: openai-parser}, {pluginRef: v}]}\n");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_TRUE(other->warnings.empty()) << other->warnings.front();  // every llm-d parser is implemented
  auto scorer = Parse(std::string(kHeader) +
                      "plugins: [{type: openai-parser}, {name: q, type: queue-scorer}]\n"
                      "requestHandler: {parsers: [{pluginRef: openai-parser}, {pluginRef: q}]}\n");
  ASSERT_TRUE(scorer.ok()) << scorer.status();
  EXPECT_EQ(scorer->warnings, (std::vector<std::string>{"requestHandler: loaded, but these are not request parsers and "
                                                        "are not used as parsers: 'q' (queue-scorer)"}));
  auto openai_only =
      Parse(std::string(kHeader) +
            "plugins: [{type: openai-parser}]\nrequestHandler: {parsers: [{pluginRef: openai-parser}]}\n");
  ASSERT_TRUE(openai_only.ok()) << openai_only.status();
  EXPECT_TRUE(openai_only->warnings.empty());
}

// ---- Embedded documents ----

constexpr char kValues[] = R"(# Helm values
router:
  epp:
    replicas: 1
    pluginsCustomConfig:
      plugins.yaml: |
        apiVersion: llm-d.ai/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - type: random-picker
        schedulingProfiles:
        - name: default
          plugins:
          - pluginRef: random-picker
  other: "EndpointPickerConfig is mentioned here"
)";

TEST(ConfigYamlTest, EmbeddedDocumentFound) {
  auto c = ParseConfig(kValues, "values.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->source,
            "values.yaml (embedded at router.epp.pluginsCustomConfig.plugins.yaml, line numbers within the embedded "
            "text)");
  EXPECT_EQ(c->api_version, kLlmdApiVersion);
  ASSERT_EQ(c->plugins.size(), 1u);
  EXPECT_EQ(c->plugins[0].line, 4);  // within the embedded text
}

TEST(ConfigYamlTest, EmbeddedDocumentErrorsNameTheEmbeddedSource) {
  auto bad = ParseConfig(
      "data:\n  c.yaml: |\n    apiVersion: llm-d.ai/v1alpha1\n    kind: EndpointPickerConfig\n    plugins:\n    - typ: "
      "x\n",
      "cm.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(Msg(bad.status()),
            "cm.yaml (embedded at data.c.yaml, line numbers within the embedded text):4: plugins[0]: unknown key "
            "'typ' (known: name, type, parameters)");
  // Malformed embedded YAML that clearly means to be a config is reported, not skipped.
  auto malformed = ParseConfig("data:\n  c.yaml: |\n    kind: EndpointPickerConfig\n    plugins: [a\n", "cm.yaml");
  ASSERT_FALSE(malformed.ok());
  EXPECT_EQ(Msg(malformed.status()),
            "cm.yaml (embedded at data.c.yaml, line numbers within the embedded text):3:1: end of sequence flow not "
            "found");
}

TEST(ConfigYamlTest, EmbeddedFlowStyleOneLiner) {
  auto c = ParseConfig("cfg: '{apiVersion: llm-d.ai/v1alpha1, kind: EndpointPickerConfig}'\n", "v.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->source, "v.yaml (embedded at cfg, line numbers within the embedded text)");
}

TEST(ConfigYamlTest, EmbeddedInConfigMapAndLists) {
  auto c = ParseConfig(R"(apiVersion: v1
kind: ConfigMap
metadata:
  name: epp
data:
  list:
  - "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
)",
                       "cm.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->source, "cm.yaml (embedded at data.list[0], line numbers within the embedded text)");
}

TEST(ConfigYamlTest, EmbeddedDocumentsIdenticalOrAmbiguous) {
  const std::string doc = "|\n    apiVersion: llm-d.ai/v1alpha1\n    kind: EndpointPickerConfig\n";
  const std::string other = "|\n    apiVersion: llm-d.ai/v1alpha1\n    kind: EndpointPickerConfig\n    plugins: []\n";
  auto same = ParseConfig("a:\n  x: " + doc + "b:\n  y: " + doc, "v.yaml");
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->source, "v.yaml (embedded at a.x, line numbers within the embedded text)");
  auto ambiguous = ParseConfig("a:\n  x: " + doc + "b:\n  y: " + other, "v.yaml");
  ASSERT_FALSE(ambiguous.ok());
  EXPECT_EQ(Msg(ambiguous.status()),
            "v.yaml: found 2 different embedded EndpointPickerConfig documents (at a.x, b.y); expected exactly one");
}

TEST(ConfigYamlTest, MultiDocumentStreams) {
  const std::string config = std::string(kHeader) + "plugins:\n- type: a\n- type: b\n  bad: 1\n";
  auto direct = ParseConfig("apiVersion: v1\nkind: Service\n---\n" + config, "all.yaml");
  ASSERT_FALSE(direct.ok());
  // Line numbers count through the whole stream.
  EXPECT_EQ(Msg(direct.status()), "all.yaml:9: plugins[1]: unknown key 'bad' (known: name, type, parameters)");
  auto embedded = ParseConfig(
      "kind: Service\n---\ndata:\n  c: |\n    kind: EndpointPickerConfig\n    apiVersion: llm-d.ai/v1alpha1\n",
      "all.yaml");
  ASSERT_TRUE(embedded.ok()) << embedded.status();
  EXPECT_EQ(embedded->source, "all.yaml (embedded at document 2: data.c, line numbers within the embedded text)");
  auto none = ParseConfig("kind: Service\n---\nkind: Deployment\n", "all.yaml");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(Msg(none.status()), "all.yaml: none of the 2 YAML documents is or embeds an EndpointPickerConfig");
  auto two = ParseConfig(std::string(kHeader) + "---\n" + kHeader, "all.yaml");
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(Msg(two.status()),
            "all.yaml: 2 YAML documents with more than one EndpointPickerConfig; expected exactly one");
  auto trailing = ParseConfig(std::string(kHeader) + "---\n", "all.yaml");
  EXPECT_TRUE(trailing.ok()) << trailing.status();
}

// ---- Files ----

TEST(ConfigYamlTest, LoadConfigFileNotFound) {
  auto c = LoadConfigFile("/nonexistent/epp-config.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Msg(c.status()), "cannot read config file '/nonexistent/epp-config.yaml': No such file or directory");
  auto dir = LoadConfigFile("/");
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kNotFound);
}

TEST(ConfigYamlTest, DefaultConfigIsGiesDefault) {
  EppConfig c = DefaultConfig();
  EXPECT_EQ(c.source, "<default>");
  EXPECT_TRUE(c.warnings.empty());
  std::vector<std::string> types;
  for (const PluginSpec& p : c.plugins) {
    types.push_back(p.type);
    EXPECT_EQ(p.name, p.type);
    EXPECT_TRUE(p.parameters.is_null());
  }
  EXPECT_EQ(types, (std::vector<std::string>{"queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer",
                                             "metrics-data-source", "core-metrics-extractor"}));
  ASSERT_EQ(c.profiles.size(), 1u);
  EXPECT_EQ(c.profiles[0].name, "default");
  ASSERT_EQ(c.profiles[0].plugins.size(), 3u);
  EXPECT_EQ(c.profiles[0].plugins[0].plugin_ref, "queue-scorer");
  EXPECT_EQ(c.profiles[0].plugins[0].weight, 2.0);
  EXPECT_EQ(c.profiles[0].plugins[1].plugin_ref, "kv-cache-utilization-scorer");
  EXPECT_EQ(c.profiles[0].plugins[1].weight, 2.0);
  EXPECT_EQ(c.profiles[0].plugins[2].plugin_ref, "prefix-cache-scorer");
  EXPECT_EQ(c.profiles[0].plugins[2].weight, 3.0);
}

class ConfigFixturesTest : public ::testing::Test {
 protected:
  static std::string Dir() { return std::string(EPP_SHARED_FIXTURES) + "/configs"; }
  void SetUp() override {
    if (!std::filesystem::is_directory(Dir())) GTEST_SKIP() << "shared fixtures not found at " << Dir();
  }
};

struct FixtureCase {
  const char* file;
  size_t plugins;
  size_t profiles;
  std::string api_version;
  bool embedded;
  std::vector<std::string> warnings;  // substrings, one per warning, in order
  std::string saturation_detector_ref;
};

TEST_F(ConfigFixturesTest, EveryConfigParses) {
  const std::string gie(kGieApiVersion), llmd(kLlmdApiVersion);
  const FixtureCase cases[] = {
      {"gie-1748e829__test_integration_epp_testdata_default-config.yaml",
       5,
       1,
       gie,
       false,
       {"'enableLegacyMetrics' accepted"},
       ""},
      // Unknown plugin types (test-one, ...) are BuildScheduler's business; the legacy inline
      // saturationDetector form is accepted.
      {"gie-1748e829__test_testdata_configloader_1_test.yaml",
       6,
       1,
       gie,
       false,
       {"'dataLayer' is deprecated"},
       ""},
      {"llm-d-router__deploy_config_epp-config.yaml", 4, 1, llmd, false, {}, ""},
      {"llm-d-router__deploy_config_epp-precise-prefix-cache-config.yaml",
       11,
       1,
       llmd,
       false,
       {},
       ""},
      {"llm-d-router__deploy_config_pd-epp-config.yaml", 8, 2, llmd, false, {}, ""},
      {"llm-d-router__deploy_config_probabilistic-admitter-epp-config.yaml",
       3,
       1,
       gie,
       false,
       {},  // flowControl names only its detector: no settings ignored, no note (as llm-d)
       "utilization-detector"},
      {"llm-d-router__deploy_config_sim-epp-config.yaml", 5, 1, llmd, false, {}, ""},
      {"llm-d-router__test_perf_config_router-configs_optimized-baseline.yaml", 5, 1, llmd, true, {}, ""},
      {"llm-d-router__test_perf_config_router-configs_random-only-default-parsers.yaml", 1, 1, llmd, true, {}, ""},
  };
  std::set<std::string> listed;
  for (const FixtureCase& c : cases) {
    SCOPED_TRACE(c.file);
    listed.insert(c.file);
    const std::string path = Dir() + "/" + c.file;
    auto config = LoadConfigFile(path);
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->plugins.size(), c.plugins);
    EXPECT_EQ(config->profiles.size(), c.profiles);
    EXPECT_EQ(config->api_version, c.api_version);
    EXPECT_EQ(config->saturation_detector_ref, c.saturation_detector_ref);
    if (c.embedded) {
      EXPECT_EQ(config->source, path +
                                    " (embedded at router.epp.pluginsCustomConfig.optimized-baseline-plugins.yaml, "
                                    "line numbers within the embedded text)");
    } else {
      EXPECT_EQ(config->source, path);
    }
    ASSERT_EQ(config->warnings.size(), c.warnings.size()) << ::testing::PrintToString(config->warnings);
    for (size_t i = 0; i < c.warnings.size(); ++i) {
      EXPECT_NE(config->warnings[i].find(c.warnings[i]), std::string::npos) << config->warnings[i];
    }
  }
  // A new fixture must be added to the table above.
  for (const auto& entry : std::filesystem::directory_iterator(Dir())) {
    EXPECT_EQ(listed.count(entry.path().filename().string()), 1u) << "not in the table: " << entry.path();
  }
}

TEST_F(ConfigFixturesTest, ConfigLoaderDetails) {
  auto c = LoadConfigFile(Dir() + "/gie-1748e829__test_testdata_configloader_1_test.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->plugins[2].name, "test-two");
  EXPECT_EQ(c->plugins[2].line, 10);
  EXPECT_EQ(*c->plugins[2].parameters.GetInt("blockSize", 0), 32);
  EXPECT_EQ(c->profiles[0].plugins[1].weight, 50.0);
  EXPECT_EQ(*c->saturation_detector_params.GetDurationMicros("metricsStalenessThreshold", 0), 150'000);
  EXPECT_EQ(c->feature_gates, (std::vector<std::string>{"dataLayer"}));
}

TEST_F(ConfigFixturesTest, DefaultConfigFixtureMatchesParser) {
  auto c = LoadConfigFile(Dir() + "/gie-1748e829__test_integration_epp_testdata_default-config.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->parser_ref, "openai-parser");
  EXPECT_EQ(c->profiles[0].plugins.size(), 4u);
  EXPECT_EQ(c->profiles[0].plugins[0].weight, std::nullopt);
}

}  // namespace
}  // namespace epp

namespace epp {
namespace {

// An unclosed '{' or '[' is reported where it opens, not where the text ends (yaml-cpp's mark).
TEST(ConfigYamlTest, AnUnclosedFlowCollectionNamesItsOwnLine) {
  const std::string map_text =
      "apiVersion: inference.networking.x-k8s.io/v1alpha1\n"
      "kind: EndpointPickerConfig\n"
      "plugins: [{type: queue-scorer, name: q\n"
      "schedulingProfiles: []\n";
  auto r = ParseConfig(map_text, "cfg.yaml");
  ASSERT_FALSE(r.ok());
  const std::string m(r.status().message());
  EXPECT_EQ(m.rfind("cfg.yaml:3:", 0), 0u) << m;
  EXPECT_NE(m.find("never closed"), std::string::npos) << m;
  // Brackets inside quotes and comments do not count.
  const std::string quoted =
      "apiVersion: inference.networking.x-k8s.io/v1alpha1  # [not this\n"
      "kind: EndpointPickerConfig\n"
      "plugins:\n"
      "- {type: queue-scorer, name: \"a{b\"\n";
  auto q = ParseConfig(quoted, "q.yaml");
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(std::string(q.status().message()).rfind("q.yaml:4:3:", 0), 0u) << q.status();
  EXPECT_EQ(internal::UnclosedFlowOpener("a: [1, {b: 2}]\n").line, -1);
}

}  // namespace
}  // namespace epp
