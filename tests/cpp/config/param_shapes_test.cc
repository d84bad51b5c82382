// Older parameter shapes (docs/config.md "Older parameter shapes"): each parameter spelling a
// released llm-d Router / llm-d-inference-scheduler accepted for a plugin epp has. Every case
// loads a small config in the old shape, checks the deprecation warning names the new form, and
// checks the scheduler built from it is the one the new form builds (the whole effective config
// compared). Shapes the reference now rejects on purpose fail naming the replacement.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "epp/config.h"
#include "epp/registry.h"
#include "epp/scheduler.h"

namespace epp {
namespace {

const PluginRegistry& Registry() {
  static const PluginRegistry r = BuiltinRegistry();
  return r;
}

absl::StatusOr<std::unique_ptr<Scheduler>> Build(const std::string& plugins, const std::string& profiles = "") {
  const std::string yaml = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n" +
                           plugins + profiles;
  absl::StatusOr<EppConfig> c = ParseConfig(yaml, "t.yaml");
  if (!c.ok()) return c.status();
  return BuildScheduler(*c, Registry());
}

// The warning containing `needle`, or "" (the test then prints every warning).
std::string WarningWith(const Scheduler& s, const std::string& needle) {
  for (const std::string& w : s.warnings())
    if (w.find(needle) != std::string::npos) return w;
  return "";
}

std::string AllWarnings(const Scheduler& s) {
  std::string out;
  for (const std::string& w : s.warnings()) out += "  " + w + "\n";
  return out;
}

// Builds both configs; the old one must warn with `needle`, and both must come out the same.
void ExpectSameAsNewForm(const std::string& old_form, const std::string& new_form, const std::string& needle,
                         const std::string& profiles = "") {
  auto old_s = Build(old_form, profiles);
  ASSERT_TRUE(old_s.ok()) << old_s.status();
  auto new_s = Build(new_form, profiles);
  ASSERT_TRUE(new_s.ok()) << new_s.status();
  EXPECT_NE(WarningWith(**old_s, needle), "") << "no warning with '" << needle << "' in:\n" << AllWarnings(**old_s);
  EXPECT_EQ((*old_s)->EffectiveConfigYaml(), (*new_s)->EffectiveConfigYaml());
}

// --- precise prefix caching: indexerConfig and tokenProcessorConfig ---------------------------

TEST(ParamShapesTest, NestedTokenProcessorConfigMovesToTheTop) {
  // llm-d-kv-cache <= v0.4 (llm-d v0.3, v0.4) held it inside indexerConfig.
  for (const char* type : {"precise-prefix-cache-scorer", "precise-prefix-cache-producer"}) {
    SCOPED_TRACE(type);
    const std::string t(type);
    ExpectSameAsNewForm("- name: p\n  type: " + t + "\n  parameters:\n    indexerConfig:\n      tokenProcessorConfig:\n"
                        "        blockSizeTokens: 32\n        hashSeed: '7'\n",
                        "- name: p\n  type: " + t + "\n  parameters:\n    tokenProcessorConfig:\n      blockSizeTokens: 32\n"
                        "      hashSeed: '7'\n",
                        "move it to parameters.tokenProcessorConfig");
  }
}

TEST(ParamShapesTest, NestedTokenProcessorConfigLosesToTheTopLevelOne) {
  // llm-d v0.5 on read only the top-level block.
  ExpectSameAsNewForm("- name: p\n  type: precise-prefix-cache-producer\n  parameters:\n    tokenProcessorConfig:\n"
                      "      blockSizeTokens: 64\n    indexerConfig:\n      tokenProcessorConfig:\n        blockSizeTokens: 8\n",
                      "- name: p\n  type: precise-prefix-cache-producer\n  parameters:\n    tokenProcessorConfig:\n"
                      "      blockSizeTokens: 64\n",
                      "indexerConfig.tokenProcessorConfig: ignored");
}

TEST(ParamShapesTest, TokenProcessorBlockSizeIsBlockSizeTokens) {
  // llm-d-kv-cache's blockSize (tokens), renamed blockSizeTokens.
  ExpectSameAsNewForm("- name: p\n  type: precise-prefix-cache-producer\n  parameters:\n    tokenProcessorConfig:\n"
                      "      blockSize: 48\n",
                      "- name: p\n  type: precise-prefix-cache-producer\n  parameters:\n    tokenProcessorConfig:\n"
                      "      blockSizeTokens: 48\n",
                      "tokenProcessorConfig.blockSize: deprecated; use blockSizeTokens");
}

TEST(ParamShapesTest, PrefixStoreConfigIsIgnored) {
  // llm-d-kv-cache <= v0.5: the tokenizer's prefix store, gone since v0.6.
  ExpectSameAsNewForm("- name: p\n  type: precise-prefix-cache-scorer\n  parameters:\n    indexerConfig:\n"
                      "      prefixStoreConfig:\n        cacheSize: 1000\n        blockSize: 256\n"
                      "      kvBlockIndexConfig:\n        inMemoryConfig:\n          size: 1000\n",
                      "- name: p\n  type: precise-prefix-cache-scorer\n  parameters:\n    indexerConfig:\n"
                      "      kvBlockIndexConfig:\n        inMemoryConfig:\n          size: 1000\n",
                      "prefixStoreConfig: removed in llm-d-kv-cache v0.6");
  // Its own keys are still checked.
  auto bad = Build("- type: precise-prefix-cache-scorer\n  parameters:\n    indexerConfig:\n      prefixStoreConfig:\n"
                   "        cachSize: 1\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("prefixStoreConfig: unknown parameter 'cachSize'"), std::string::npos)
      << bad.status();
}

TEST(ParamShapesTest, IndexMaxPrefixBlocksToMatchIsIgnoredAsBefore) {
  // llm-d's v0.6 to v0.9 samples put it in kvBlockIndexConfig, which never had it.
  ExpectSameAsNewForm("- name: p\n  type: precise-prefix-cache-producer\n  parameters:\n    indexerConfig:\n"
                      "      kvBlockIndexConfig:\n        maxPrefixBlocksToMatch: 256\n",
                      "- name: p\n  type: precise-prefix-cache-producer\n",
                      "kvBlockIndexConfig.maxPrefixBlocksToMatch: never read by llm-d");
  EXPECT_FALSE(Build("- type: precise-prefix-cache-producer\n  parameters:\n    indexerConfig:\n"
                     "      kvBlockIndexConfig:\n        maxPrefixBlocksToMatch: many\n")
                   .ok());
}

TEST(ParamShapesTest, TokenizersPoolConfigOnTheScorerIsAcceptedAndNamesTokenProducer) {
  // Every shape llm-d-kv-cache gave the pool: v0.3's flat HuggingFace keys, v0.5's hf block,
  // v0.7's uds block; llm-d's scorer still takes it, its producer does not.
  for (const char* pool : {"        tokenizersCacheDir: /cache/tokenizers\n",
                           "        modelName: m\n        hf:\n          tokenizersCacheDir: /cache\n",
                           "        modelName: m\n        uds:\n          socketFile: /tmp/t.socket\n",
                           "        modelName: m\n        workersCount: 4\n        local:\n          modelTokenizerMap: {m: /x}\n"}) {
    SCOPED_TRACE(pool);
    ExpectSameAsNewForm(std::string("- name: p\n  type: precise-prefix-cache-scorer\n  parameters:\n    indexerConfig:\n"
                                    "      tokenizersPoolConfig:\n") + pool,
                        "- name: p\n  type: precise-prefix-cache-scorer\n",
                        "declare a token-producer");
  }
  auto producer = Build("- type: precise-prefix-cache-producer\n  parameters:\n    indexerConfig:\n"
                        "      tokenizersPoolConfig:\n        modelName: m\n");
  ASSERT_FALSE(producer.ok());
  EXPECT_NE(producer.status().message().find("indexerConfig.tokenizersPoolConfig: not supported on "
                                             "precise-prefix-cache-producer; declare a token-producer"),
            std::string::npos)
      << producer.status();
  auto typo = Build("- type: precise-prefix-cache-scorer\n  parameters:\n    indexerConfig:\n"
                    "      tokenizersPoolConfig:\n        modelNmae: m\n");
  EXPECT_FALSE(typo.ok());
}

TEST(ParamShapesTest, V04PreciseSampleLoads) {
  // The shape of llm-d v0.4's precise sample, written here: everything nested in indexerConfig.
  ExpectSameAsNewForm("- name: p\n  type: precise-prefix-cache-scorer\n  parameters:\n"
                      "    kvEventsConfig:\n      zmqEndpoint: tcp://0.0.0.0:5557\n"
                      "    indexerConfig:\n      prefixStoreConfig:\n        blockSize: 64\n"
                      "      tokenProcessorConfig:\n        blockSize: 64\n        hashSeed: '12345'\n"
                      "      kvBlockIndexConfig:\n        enableMetrics: true\n"
                      "      tokenizersPoolConfig:\n        hf:\n          tokenizersCacheDir: /tmp\n",
                      "- name: p\n  type: precise-prefix-cache-scorer\n  parameters:\n"
                      "    tokenProcessorConfig:\n      blockSizeTokens: 64\n      hashSeed: '12345'\n"
                      "    kvEventsConfig:\n      zmqEndpoint: tcp://0.0.0.0:5557\n",
                      "move it to parameters.tokenProcessorConfig");
}

// --- prefix-cache-scorer's mode (llm-d v0.2) --------------------------------------------------

TEST(ParamShapesTest, ModeEstimateIsThePrefixCacheScorer) {
  ExpectSameAsNewForm("- name: s\n  type: prefix-cache-scorer\n  parameters:\n    mode: estimate\n",
                      "- name: s\n  type: prefix-cache-scorer\n", "estimate is what prefix-cache-scorer does");
  // With the hashing parameters of GIE's scorer of that time (moved to the producer as before).
  ExpectSameAsNewForm("- name: s\n  type: prefix-cache-scorer\n  parameters:\n    mode: estimate\n    hashBlockSize: 64\n",
                      "- name: s\n  type: prefix-cache-scorer\n- type: approx-prefix-cache-producer\n  parameters:\n"
                      "    blockSizeTokens: 16\n",
                      "delete mode");
}

TEST(ParamShapesTest, ModeCacheTrackingIsThePreciseScorer) {
  ExpectSameAsNewForm("- name: s\n  type: prefix-cache-scorer\n  parameters:\n    mode: cache_tracking\n"
                      "    kvEventsConfig:\n      zmqEndpoint: tcp://0.0.0.0:5557\n"
                      "    indexerConfig:\n      tokenProcessorConfig:\n        blockSize: 16\n        hashSeed: '42'\n",
                      "- name: s\n  type: precise-prefix-cache-scorer\n  parameters:\n"
                      "    tokenProcessorConfig:\n      blockSizeTokens: 16\n      hashSeed: '42'\n"
                      "    kvEventsConfig:\n      zmqEndpoint: tcp://0.0.0.0:5557\n",
                      "read as precise-prefix-cache-scorer");
  auto bad = Build("- type: prefix-cache-scorer\n  parameters:\n    mode: exact\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("mode: expected estimate or cache_tracking, got 'exact'"), std::string::npos)
      << bad.status();
  // A key no release declared (the v0.2 test's kvCacheRedisAddr) is still an error.
  EXPECT_FALSE(Build("- type: prefix-cache-scorer\n  parameters:\n    mode: cache_tracking\n"
                     "    kvCacheRedisAddr: redis://localhost:6379\n")
                   .ok());
}

// --- approx-prefix-cache-producer's character blockSize -----------------------------------------

TEST(ParamShapesTest, CharacterBlockSizeRoundsToWholeTokens) {
  // GIE <= v1.3's blockSize (hashBlockSize before) counted characters; llm-d's simulator samples
  // used 5. At 4 characters a token that is one token, with a warning saying so.
  ExpectSameAsNewForm("- name: a\n  type: approx-prefix-cache-producer\n  parameters:\n    blockSize: 5\n",
                      "- name: a\n  type: approx-prefix-cache-producer\n  parameters:\n    blockSizeTokens: 1\n",
                      "read as blockSizeTokens: 1 (5 characters rounded");
  ExpectSameAsNewForm("- name: a\n  type: approx-prefix-cache-producer\n  parameters:\n    blockSize: 64\n",
                      "- name: a\n  type: approx-prefix-cache-producer\n  parameters:\n    blockSizeTokens: 16\n",
                      "blockSize: deprecated (characters per block); read as blockSizeTokens: 16");
  ExpectSameAsNewForm("- name: a\n  type: approx-prefix-cache-producer\n  parameters:\n    blockSize: 2\n",
                      "- name: a\n  type: approx-prefix-cache-producer\n  parameters:\n    blockSizeTokens: 1\n",
                      "read as blockSizeTokens: 1");
  ExpectSameAsNewForm("- name: a\n  type: approx-prefix-cache-producer\n  parameters:\n    blockSize: 64\n"
                      "    blockSizeTokens: 8\n",
                      "- name: a\n  type: approx-prefix-cache-producer\n  parameters:\n    blockSizeTokens: 8\n",
                      "ignored: blockSizeTokens is given");
  EXPECT_FALSE(Build("- type: approx-prefix-cache-producer\n  parameters:\n    blockSize: 0\n").ok());
  // llm-d v0.2's simulator sample: hashBlockSize on the scorer.
  ExpectSameAsNewForm("- name: s\n  type: prefix-cache-scorer\n  parameters:\n    hashBlockSize: 5\n"
                      "    maxPrefixBlocksToMatch: 256\n    lruCapacityPerServer: 31250\n",
                      "- name: s\n  type: prefix-cache-scorer\n- type: approx-prefix-cache-producer\n  parameters:\n"
                      "    blockSizeTokens: 1\n",
                      "5 characters rounded");
}

// --- pd-profile-handler without a decider (llm-d <= v0.5) -------------------------------------

const char* kPdProfiles =
    "schedulingProfiles:\n- name: prefill\n  plugins:\n  - pluginRef: max-score-picker\n"
    "- name: decode\n  plugins:\n  - pluginRef: max-score-picker\n";

TEST(ParamShapesTest, PdProfileHandlerWithoutDeciderAlwaysPrefillsAsBeforeDeciders) {
  ExpectSameAsNewForm("- type: max-score-picker\n- name: h\n  type: pd-profile-handler\n",
                      "- type: max-score-picker\n- name: h\n  type: pd-profile-handler\n  parameters:\n    threshold: 0\n",
                      "read as llm-d v0.5's pd-profile-handler, which always ran prefill", kPdProfiles);
  // With a plugin of the default decider's name, llm-d v0.6's reading: that decider, no warning.
  auto s = Build("- type: max-score-picker\n- type: prefix-based-pd-decider\n- name: h\n  type: pd-profile-handler\n",
                 kPdProfiles);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(WarningWith(**s, "always ran prefill"), "");
  EXPECT_NE((*s)->EffectiveConfigYaml().find("deciderPluginName: prefix-based-pd-decider"), std::string::npos);
  // A decider named explicitly must exist.
  auto missing = Build("- type: max-score-picker\n- name: h\n  type: pd-profile-handler\n  parameters:\n"
                       "    deciderPluginName: prefix-based-pd-decider\n",
                       kPdProfiles);
  EXPECT_FALSE(missing.ok());
}

// --- session-affinity-scorer's headerName (llm-d v0.9, removed in v0.10) ------------------------

TEST(ParamShapesTest, SessionHeaderNameIsRejectedNamingTheNestedForm) {
  // llm-d v0.10 replaced it by strategies without keeping it; its decoder rejects it. So does
  // epp, with the exact replacement in the message.
  for (const char* type : {"session-affinity-scorer", "session-affinity-filter"}) {
    SCOPED_TRACE(type);
    auto s = Build(std::string("- type: ") + type + "\n  parameters:\n    headerName: X-My-Session\n");
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("headerName: llm-d v0.9's form, removed in v0.10; use "
                                        "encodedEndpointHeaderConfig: {header: X-My-Session}"),
              std::string::npos)
        << s.status();
  }
}

}  // namespace
}  // namespace epp
