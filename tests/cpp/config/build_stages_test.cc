// Each stage of BuildScheduler (config/build_stages.h) on its own: the state a stage gets, what it
// adds, the errors it names. BuildScheduler as a whole is tested in config_yaml_test and
// scheduler_test.
#include "config/build_stages.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "epp/config.h"
#include "epp/registry.h"
#include "epp/scheduler.h"

namespace epp::build {
namespace {

const PluginRegistry& Registry() {
  static const PluginRegistry r = BuiltinRegistry();
  return r;
}

EppConfig Parse(const std::string& yaml) {
  absl::StatusOr<EppConfig> c = ParseConfig(yaml, "t.yaml");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : EppConfig{};
}

std::string Header() { return "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"; }

// The state after the plugins are created (the first stages every later one needs).
BuildState Created(const std::string& yaml, const Scheduler::Impl* previous = nullptr) {
  BuildState st(WithDefaultPlugins(Parse(Header() + yaml)), Registry(), PluginContext{}, previous);
  absl::Status s = CheckPluginTypes(st.config, Registry());
  EXPECT_TRUE(s.ok()) << s;
  s = CreatePlugins(st);
  EXPECT_TRUE(s.ok()) << s;
  return st;
}

std::vector<std::string> Names(const Scheduler::Impl& impl) {
  std::vector<std::string> out;
  for (const auto& p : impl.plugins) out.push_back(p->name());
  return out;
}

TEST(BuildStagesTest, EmptyConfigBecomesGiesDefaultProfileWithAWarning) {
  EppConfig c = WithDefaultPlugins(Parse(Header()));
  std::vector<std::string> types;
  for (const PluginSpec& p : c.plugins) types.push_back(p.type);
  ASSERT_GE(types.size(), 3u);
  types.resize(3);  // then the data-layer plugins GIE's default also lists
  EXPECT_EQ(types, (std::vector<std::string>{"queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer"}));
  ASSERT_EQ(c.profiles.size(), 1u);
  ASSERT_FALSE(c.warnings.empty());
  EXPECT_NE(c.warnings.back().find("GIE's default profile"), std::string::npos);

  EppConfig given = WithDefaultPlugins(Parse(Header() + "plugins:\n- type: queue-scorer\n"));
  ASSERT_EQ(given.plugins.size(), 1u);
  EXPECT_TRUE(given.profiles.empty());
  EXPECT_TRUE(given.warnings.empty());
}

TEST(BuildStagesTest, UnknownTypesAreReportedTogetherWithTheirPaths) {
  EppConfig c = Parse(Header() + "plugins:\n- type: queue-scorer\n- type: no-such-a\n- name: b\n  type: no-such-b\n");
  absl::Status s = CheckPluginTypes(c, Registry());
  ASSERT_FALSE(s.ok());
  const std::string m(s.message());
  EXPECT_NE(m.find("t.yaml:5: unsupported plugin types: no-such-a (plugins[1], line 5), no-such-b (plugins[2], line 6)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("`eppctl config plugins` lists the "), std::string::npos) << m;
  EXPECT_EQ(m.find("did you mean"), std::string::npos) << "nothing is close to no-such-a: " << m;
  EXPECT_EQ(m.find("queue-scorer ("), std::string::npos) << m;
}

TEST(BuildStagesTest, CreatePluginsNamesTheLineOfADuplicateAndThePathOfBadParameters) {
  // ParseConfig rejects the duplicate already; a config built in code reaches this stage with it.
  BuildState dup(Parse(Header() + "plugins:\n- type: queue-scorer\n- name: other\n  type: kv-cache-utilization-scorer\n"),
                 Registry(), PluginContext{}, nullptr);
  dup.config.plugins[1].name = "queue-scorer";
  absl::Status s = CreatePlugins(dup);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("t.yaml:5: plugins[1]: duplicate plugin name 'queue-scorer'"), std::string::npos) << s;

  BuildState bad(Parse(Header() + "plugins:\n- type: queue-scorer\n  parameters:\n    nope: 1\n"), Registry(),
                 PluginContext{}, nullptr);
  s = CreatePlugins(bad);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("t.yaml:4"), std::string::npos) << s;
  EXPECT_NE(std::string(s.message()).find("plugins[0].parameters"), std::string::npos) << s;
}

TEST(BuildStagesTest, AReloadKeepsInstancesWhoseNameTypeAndParametersAreUnchanged) {
  const std::string before =
      "plugins:\n- type: approx-prefix-cache-producer\n  parameters:\n    blockSizeTokens: 32\n- type: queue-scorer\n- name: rr\n"
      "  type: round-robin-picker\n- type: kv-cache-utilization-scorer\n";
  BuildState old = Created(before);
  // Same document with one parameter changed, one plugin renamed, and a default written out.
  BuildState next = Created(
      "plugins:\n- type: approx-prefix-cache-producer\n  parameters:\n    blockSizeTokens: 64\n- type: queue-scorer\n- name: rr2\n"
      "  type: round-robin-picker\n- type: kv-cache-utilization-scorer\n  parameters: {}\n",
      old.impl.get());
  ASSERT_EQ(next.impl->plugins.size(), 4u);
  EXPECT_NE(next.impl->plugins[0].get(), old.impl->plugins[0].get()) << "blockSizeTokens changed: a new instance";
  EXPECT_EQ(next.impl->plugins[1].get(), old.impl->plugins[1].get()) << "queue-scorer unchanged: the same instance";
  EXPECT_NE(next.impl->plugins[2].get(), old.impl->plugins[2].get()) << "renamed: a new instance";
  EXPECT_EQ(next.impl->plugins[3].get(), old.impl->plugins[3].get()) << "empty parameters equal absent ones";
  EXPECT_EQ(next.impl->load, old.impl->load) << "in-flight load is shared across a reload";

  // Parameters compare as effective YAML: the default blockSizeTokens (16) written out is unchanged.
  BuildState plain = Created("plugins:\n- type: approx-prefix-cache-producer\n");
  BuildState spelled = Created("plugins:\n- type: approx-prefix-cache-producer\n  parameters:\n    blockSizeTokens: 16\n", plain.impl.get());
  EXPECT_EQ(spelled.impl->plugins[0].get(), plain.impl->plugins[0].get());
}

TEST(BuildStagesTest, DefaultProfileHoldsFiltersThenScorersAndPickersButNotTheDetector) {
  BuildState st = Created(
      "plugins:\n- type: queue-scorer\n- type: utilization-detector\n- type: decode-filter\n- type: max-score-picker\n");
  AddDefaultProfile(st);
  ASSERT_EQ(st.config.profiles.size(), 1u);
  EXPECT_EQ(st.config.profiles[0].name, "default");
  std::vector<std::string> refs;
  for (const auto& r : st.config.profiles[0].plugins) refs.push_back(r.plugin_ref);
  EXPECT_EQ(refs, (std::vector<std::string>{"decode-filter", "queue-scorer", "max-score-picker"}));

  BuildState given = Created("plugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: p\n  plugins:\n  - pluginRef: queue-scorer\n");
  AddDefaultProfile(given);
  ASSERT_EQ(given.config.profiles.size(), 1u);
  EXPECT_EQ(given.config.profiles[0].name, "p");
}

TEST(BuildStagesTest, ProfilesWithoutAPickerShareOneDefaultPicker) {
  BuildState st = Created(
      "plugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: a\n  plugins:\n  - pluginRef: queue-scorer\n    weight: 2\n"
      "- name: b\n  plugins:\n  - pluginRef: queue-scorer\n");
  ASSERT_TRUE(ResolveProfiles(st).ok());
  ASSERT_EQ(st.impl->profiles.size(), 2u);
  EXPECT_EQ(st.impl->profiles[0].picker_plugin, st.impl->profiles[1].picker_plugin);
  EXPECT_EQ(st.impl->profiles[0].picker_plugin->type(), "max-score-picker");
  EXPECT_EQ(Names(*st.impl), (std::vector<std::string>{"queue-scorer", "max-score-picker"})) << "created once";
  EXPECT_EQ(st.impl->profiles[0].scorers[0].weight, 2.0);
  EXPECT_EQ(st.impl->profiles[1].scorers[0].weight, 1.0) << "rule 5: weight 1 when absent";

  // The first configured picker is the shared one.
  BuildState configured = Created(
      "plugins:\n- type: queue-scorer\n- type: random-picker\n- type: max-score-picker\nschedulingProfiles:\n- name: a\n  plugins:\n"
      "  - pluginRef: queue-scorer\n- name: b\n  plugins:\n  - pluginRef: max-score-picker\n");
  ASSERT_TRUE(ResolveProfiles(configured).ok());
  EXPECT_EQ(configured.impl->profiles[0].picker_plugin->name(), "random-picker");
  EXPECT_EQ(configured.impl->profiles[1].picker_plugin->name(), "max-score-picker");
  EXPECT_EQ(configured.impl->plugins.size(), 3u);
}

TEST(BuildStagesTest, ProfileReferencesAreCheckedWhereTheyAreWritten) {
  // ParseConfig checks references already; a config built in code reaches this stage unchecked.
  {
    BuildState st = Created("plugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: a\n  plugins:\n  - pluginRef: queue-scorer\n");
    st.config.profiles[0].plugins[0].plugin_ref = "nope";
    absl::Status s = ResolveProfiles(st);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(std::string(s.message()).find("t.yaml:8: schedulingProfiles[0].plugins[0]: references undefined plugin 'nope'"),
              std::string::npos)
        << s;
  }
  {
    BuildState st = Created("plugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: a\n  plugins: []\n- name: b\n  plugins: []\n");
    st.config.profiles[1].name = "a";
    absl::Status s = ResolveProfiles(st);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(std::string(s.message()).find("duplicate profile name 'a'"), std::string::npos) << s;
  }
  for (double bad : {-1.0, std::nan(""), HUGE_VAL}) {
    BuildState st = Created("plugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: a\n  plugins:\n  - pluginRef: queue-scorer\n");
    st.config.profiles[0].plugins[0].weight = bad;
    absl::Status s = ResolveProfiles(st);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(std::string(s.message()).find("weight must be a finite number >= 0"), std::string::npos) << s;
  }
  struct Case {
    std::string profiles;
    std::string error;
  } cases[] = {
      {"- name: a\n  plugins:\n  - pluginRef: random-picker\n  - pluginRef: max-score-picker\n", "has two pickers: 'random-picker' and 'max-score-picker'"},
  };
  for (const Case& c : cases) {
    BuildState st = Created(
        "plugins:\n- type: queue-scorer\n- type: random-picker\n- type: max-score-picker\n- type: approx-prefix-cache-producer\n"
        "schedulingProfiles:\n" +
        c.profiles);
    absl::Status s = ResolveProfiles(st);
    ASSERT_FALSE(s.ok()) << c.profiles;
    EXPECT_NE(std::string(s.message()).find(c.error), std::string::npos) << s;
  }
  // A plugin that neither filters, scores nor picks loads in a profile with a warning naming the
  // place: llm-d ignores it there (its configs list producers and parsers among profile plugins).
  BuildState producer = Created(
      "plugins:\n- type: approx-prefix-cache-producer\n- type: queue-scorer\nschedulingProfiles:\n- name: a\n  plugins:\n"
      "  - pluginRef: approx-prefix-cache-producer\n  - pluginRef: queue-scorer\n");
  ASSERT_TRUE(ResolveProfiles(producer).ok());
  ASSERT_FALSE(producer.impl->warnings.empty());
  EXPECT_NE(producer.impl->warnings.back().find("schedulingProfiles[0].plugins[0]: 'approx-prefix-cache-producer' "
                                                "(approx-prefix-cache-producer) has no part in a profile's filters"),
            std::string::npos)
      << producer.impl->warnings.back();
  // A weight on a picker is ignored with a warning naming the place.
  BuildState warn = Created("plugins:\n- type: random-picker\nschedulingProfiles:\n- name: a\n  plugins:\n  - pluginRef: random-picker\n    weight: 3\n");
  ASSERT_TRUE(ResolveProfiles(warn).ok());
  ASSERT_FALSE(warn.impl->warnings.empty());
  EXPECT_NE(warn.impl->warnings.back().find("schedulingProfiles[0].plugins[0]: weight ignored: 'random-picker' is not a scorer"),
            std::string::npos)
      << warn.impl->warnings.back();
}

TEST(BuildStagesTest, OneProfileGetsTheSingleProfileHandlerAndTwoNeedAHandler) {
  BuildState one = Created("plugins:\n- type: queue-scorer\n");
  AddDefaultProfile(one);
  ASSERT_TRUE(ResolveProfiles(one).ok());
  ASSERT_TRUE(ResolveProfileHandler(one).ok());
  ASSERT_NE(one.impl->handler_plugin, nullptr);
  EXPECT_EQ(one.impl->handler_plugin->type(), "single-profile-handler");

  BuildState two = Created("plugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: a\n  plugins: []\n- name: b\n  plugins: []\n");
  ASSERT_TRUE(ResolveProfiles(two).ok());
  absl::Status s = ResolveProfileHandler(two);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("t.yaml: schedulingProfiles: 2 profiles need a profile handler"), std::string::npos) << s;

  BuildState twice = Created("plugins:\n- type: single-profile-handler\n- name: h2\n  type: single-profile-handler\n");
  AddDefaultProfile(twice);
  ASSERT_TRUE(ResolveProfiles(twice).ok());
  s = ResolveProfileHandler(twice);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("two profile handlers: 'single-profile-handler' and 'h2'"), std::string::npos) << s;
}

TEST(BuildStagesTest, SaturationDetectorIsTheReferenceTheNamedPluginOrANewDefault) {
  BuildState ref = Created("plugins:\n- name: d\n  type: utilization-detector\nsaturationDetector:\n  pluginRef: d\n");
  ASSERT_TRUE(ResolveSaturationDetector(ref).ok());
  EXPECT_EQ(ref.impl->detector_plugin->name(), "d");

  BuildState named = Created("plugins:\n- type: utilization-detector\n");
  ASSERT_TRUE(ResolveSaturationDetector(named).ok());
  EXPECT_EQ(named.impl->detector_plugin, named.impl->plugins[0].get());

  BuildState fresh = Created("plugins:\n- type: queue-scorer\n");
  ASSERT_TRUE(ResolveSaturationDetector(fresh).ok());
  EXPECT_EQ(fresh.impl->detector_plugin->name(), "utilization-detector");
  EXPECT_EQ(fresh.impl->plugins.size(), 2u);

  // Inline parameters next to a plugin named utilization-detector: a separate default, renamed.
  BuildState inline_params =
      Created("plugins:\n- type: utilization-detector\nsaturationDetector:\n  queueDepthThreshold: 9\n");
  ASSERT_TRUE(ResolveSaturationDetector(inline_params).ok());
  EXPECT_EQ(inline_params.impl->detector_plugin->name(), "default-utilization-detector");

  BuildState missing = Created("plugins:\n- type: queue-scorer\n");
  missing.config.saturation_detector_ref = "nope";  // ParseConfig would have said so; built in code
  absl::Status s = ResolveSaturationDetector(missing);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("saturationDetector.pluginRef: references undefined plugin 'nope'"), std::string::npos) << s;

  BuildState wrong = Created("plugins:\n- type: queue-scorer\nsaturationDetector:\n  pluginRef: queue-scorer\n");
  s = ResolveSaturationDetector(wrong);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("is not a saturation detector"), std::string::npos) << s;
}

TEST(BuildStagesTest, APrefixProducerIsAddedOnlyForAProfileThatReadsPrefixData) {
  BuildState used = Created("plugins:\n- type: prefix-cache-scorer\n");
  AddDefaultProfile(used);
  ASSERT_TRUE(ResolveProfiles(used).ok());
  ASSERT_TRUE(ResolvePrefixProducer(used).ok());
  EXPECT_EQ(Names(*used.impl).back(), "approx-prefix-cache-producer");

  // Configured but in no profile: nothing reads prefix data, no producer.
  BuildState unused = Created(
      "plugins:\n- type: prefix-cache-scorer\n- type: queue-scorer\nschedulingProfiles:\n- name: p\n  plugins:\n  - pluginRef: queue-scorer\n");
  ASSERT_TRUE(ResolveProfiles(unused).ok());
  ASSERT_TRUE(ResolvePrefixProducer(unused).ok());
  for (const std::string& n : Names(*unused.impl)) EXPECT_NE(n, "approx-prefix-cache-producer");

  BuildState mismatch = Created(
      "plugins:\n- type: approx-prefix-cache-producer\n- type: prefix-cache-scorer\n  parameters:\n    prefixMatchInfoProducerName: other\n");
  AddDefaultProfile(mismatch);
  ASSERT_TRUE(ResolveProfiles(mismatch).ok());
  absl::Status s = ResolvePrefixProducer(mismatch);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("prefixMatchInfoProducerName 'other' does not name"), std::string::npos) << s;
}

TEST(BuildStagesTest, EffectiveDocumentListsProfilesInCycleOrderWithWeights) {
  BuildState st = Created(
      "plugins:\n- type: queue-scorer\n- type: decode-filter\nschedulingProfiles:\n- name: p\n  plugins:\n  - pluginRef: queue-scorer\n"
      "    weight: 2.5\n  - pluginRef: decode-filter\n");
  ASSERT_TRUE(ResolveProfiles(st).ok());
  ASSERT_TRUE(ResolveProfileHandler(st).ok());
  ASSERT_TRUE(ResolveSaturationDetector(st).ok());
  Params doc = EffectiveDocument(st.config, *st.impl);
  const Params* profs = doc.Find("schedulingProfiles");
  ASSERT_NE(profs, nullptr);
  ASSERT_EQ(profs->items().size(), 1u);
  const Params* refs = profs->items()[0].Find("plugins");
  ASSERT_NE(refs, nullptr);
  std::vector<std::string> order;
  for (const Params& r : refs->items()) order.push_back(r.Find("pluginRef")->text());
  EXPECT_EQ(order, (std::vector<std::string>{"decode-filter", "queue-scorer", "max-score-picker"}));
  EXPECT_EQ(refs->items()[1].Find("weight")->text(), "2.5");
  EXPECT_EQ(doc.Find("saturationDetector")->Find("pluginRef")->text(), "utilization-detector");
}

TEST(BuildStagesTest, OlderPrefixScorerParametersMoveToTheProducer) {
  // llm-d-inference-scheduler's samples: hashing parameters on the scorer itself.
  EppConfig c = Parse(Header() + "plugins:\n- type: prefix-cache-scorer\n  parameters:\n    hashBlockSize: 64\n"
                                 "    maxPrefixBlocksToMatch: 256\n    lruCapacityPerServer: 31250\n    matchLengthWeight: 0\n");
  ASSERT_TRUE(MoveLegacyPrefixScorerParams(c).ok());
  ASSERT_EQ(c.plugins.size(), 2u);
  EXPECT_EQ(c.plugins[0].parameters.entries().size(), 1u) << "the scorer keeps its own parameter";
  EXPECT_EQ(c.plugins[1].type, "approx-prefix-cache-producer");
  EXPECT_EQ(c.plugins[1].parameters.Find("blockSize")->text(), "64") << "hashBlockSize was renamed blockSize";
  EXPECT_EQ(c.plugins[1].parameters.Find("maxPrefixBlocksToMatch")->text(), "256");
  ASSERT_FALSE(c.warnings.empty());
  EXPECT_NE(c.warnings.back().find("older form"), std::string::npos);
  // The whole build uses them: 64 characters = 16-token blocks, the warning reaches the scheduler.
  auto s = BuildScheduler(Parse(Header() + "plugins:\n- type: prefix-cache-scorer\n  parameters:\n    blockSize: 128\n"),
                          Registry());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NE((*s)->EffectiveConfigYaml().find("blockSizeTokens: 32"), std::string::npos) << (*s)->EffectiveConfigYaml();
  bool warned = false;
  for (const std::string& w : (*s)->warnings()) warned |= w.find("older form") != std::string::npos;
  EXPECT_TRUE(warned);

  // A declared producer without parameters takes them; one with its own is a conflict.
  EppConfig declared = Parse(Header() + "plugins:\n- type: approx-prefix-cache-producer\n- type: prefix-cache-scorer\n"
                                        "  parameters:\n    lruCapacityPerServer: 100\n");
  ASSERT_TRUE(MoveLegacyPrefixScorerParams(declared).ok());
  EXPECT_EQ(declared.plugins.size(), 2u);
  EXPECT_EQ(declared.plugins[0].parameters.Find("lruCapacityPerServer")->text(), "100");
  EppConfig both = Parse(Header() + "plugins:\n- type: approx-prefix-cache-producer\n  parameters:\n    blockSizeTokens: 8\n"
                                    "- type: prefix-cache-scorer\n  parameters:\n    lruCapacityPerServer: 100\n");
  absl::Status st = MoveLegacyPrefixScorerParams(both);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("give them on the producer only"), std::string::npos) << st;
}

}  // namespace
}  // namespace epp::build
