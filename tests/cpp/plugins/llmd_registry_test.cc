// Every plugin type llm-d Router registers (its cmd/epp/runner/runner.go at ebab6879, 2026-08-21,
// test doubles aside) is a type epp knows: a config naming any of them loads, or fails only on a
// parameter the type requires. The list is written here, not read from the reference, so a
// type dropped from epp's registry fails this test.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "epp/plugin.h"
#include "epp/registry.h"

namespace epp {
namespace {

const std::vector<std::string>& LlmdRouterTypes() {
  static const std::vector<std::string> types = {
      "active-request-scorer",
      "agent-identity",
      "always-disagg-multimodal-decider",
      "always-disagg-pd-decider",
      "anthropic-parser",
      "approx-prefix-cache-producer",
      "burst-prefix-cache-producer",
      "by-label",
      "by-label-selector",
      "concurrency-detector",
      "context-length-aware",
      "core-metrics-extractor",
      "data-parallel-profile-handler",
      "dcgm-data-source",
      "dcgm-extractor",
      "decode-filter",
      "disagg-headers-handler",
      "disagg-profile-handler",
      "disaggregatedset-rollout-screener",
      "edf-ordering-policy",
      "encode-filter",
      "endpoint-attribute-filter",
      "endpoint-attribute-scorer",
      "endpoint-notification-source",
      "fcfs-ordering-policy",
      "file-discovery",
      "global-strict-fairness-policy",
      "header-label-affinity-scorer",
      "header-profile-handler",
      "inflight-load-producer",
      "k8s-notification-source",
      "kv-cache-utilization-scorer",
      "label-selector-filter",
      "latency-scorer",
      "latency-slo-admitter",
      "load-aware-scorer",
      "lora-affinity-scorer",
      "max-score-picker",
      "metrics-data-source",
      "mm-embeddings-cache-producer",
      "mm-embeddings-cache-scorer",
      "models-data-extractor",
      "models-data-source",
      "multicluster-approx-prefix-cache-producer",
      "multicluster-file-discovery",
      "multicluster-kv-cache-utilization-scorer",
      "multicluster-metrics-data-source",
      "multicluster-metrics-extractor",
      "multicluster-prefix-cache-scorer",
      "multicluster-queue-scorer",
      "multicluster-session-affinity-filter",
      "no-hit-lru-scorer",
      "openai-parser",
      "p2p-source-producer",
      "passthrough-parser",
      "pd-profile-handler",
      "precise-prefix-cache-producer",
      "precise-prefix-cache-scorer",
      "predicted-latency-producer",
      "prefill-filter",
      "prefill-header-handler",
      "prefix-based-pd-decider",
      "prefix-cache-affinity-filter",
      "prefix-cache-scorer",
      "priority-holdback-policy",
      "priority-then-time-eviction-order-policy",
      "probabilistic-admitter",
      "program-aware-fairness",
      "queue-scorer",
      "random-picker",
      "request-attribute-reporter",
      "round-robin-fairness-policy",
      "running-requests-size-scorer",
      "session-affinity-filter",
      "session-affinity-scorer",
      "session-id-producer",
      "sglanghttp-parser",
      "sheddable-eviction-filter",
      "single-profile-handler",
      "slo-deadline-ordering-policy",
      "slo-headroom-tier-filter",
      "soft-reflective-ceiling-policy",
      "static-usage-limit-policy",
      "token-load-scorer",
      "token-producer",
      "tokenizer",
      "topology-affinity-filter",
      "topology-affinity-scorer",
      "topology-extractor",
      "utilization-detector",
      "utilization-filter",
      "vertexai-parser",
      "vllmgrpc-parser",
      "vllmhttp-parser",
      "weighted-random-picker"};
  return types;
}

TEST(LlmdRegistryTest, EveryTypeOfTheReferenceRegistryIsKnown) {
  const PluginRegistry r = BuiltinRegistry();
  std::vector<std::string> missing;
  for (const std::string& t : LlmdRouterTypes())
    if (!r.Has(t)) missing.push_back(t);
  EXPECT_TRUE(missing.empty()) << "unknown to epp: " << testing::PrintToString(missing);
  EXPECT_EQ(LlmdRouterTypes().size(), 95u);
}

TEST(LlmdRegistryTest, EveryTypeDeclaresItsParameters) {
  const PluginRegistry r = BuiltinRegistry();
  for (const std::string& t : LlmdRouterTypes()) {
    const PluginSchema* s = r.Schema(t);
    if (s == nullptr) continue;  // reported by the test above
    EXPECT_TRUE(s->declared) << t;
  }
}

TEST(LlmdRegistryTest, DeprecatedTypesLoadWithAWarningNamingTheReplacement) {
  const PluginRegistry r = BuiltinRegistry();
  SeededRng rng(1);
  std::vector<std::string> warnings;
  PluginContext ctx{&SteadyClock::Get(), &rng};
  ctx.warnings = &warnings;
  Params by_label = Params::Map().Set("label", Params::String("llm-d.ai/role"));
  ASSERT_TRUE(r.Create("by-label", "old", by_label, ctx).ok());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], "plugin 'old': type 'by-label' is deprecated since llm-d v0.9.0 (removed in v0.11.0); use 'label-selector-filter'");
  warnings.clear();
  ASSERT_TRUE(r.Create("label-selector-filter", "new",
                       Params::Map().Set("matchLabels", Params::Map().Set("a", Params::String("b"))), ctx)
                  .ok());
  EXPECT_TRUE(warnings.empty());
}

}  // namespace
}  // namespace epp
