// Multi-profile scheduling with llm-d's disagg-profile-handler: which profiles run in which order
// and why, the x-prefiller-host-port / x-encoder-hosts-ports headers, the deciders, the
// deprecated pd-profile-handler forms, config errors, and reloads.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "epp/config.h"
#include "epp/registry.h"
#include "epp/request.h"
#include "epp/scheduler.h"
#include "testing/epp_testing.h"

namespace epp {
namespace {

using testing::EndpointBuilder;

// The shape of llm-d's deploy/config/pd-epp-config.yaml, written here.
std::string PdConfig(const std::string& handler_params = "    deciders:\n      prefill: pd-decider\n",
                     const std::string& decider = "- name: pd-decider\n  type: prefix-based-pd-decider\n  parameters:\n    nonCachedTokens: 16\n") {
  return "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
         "- type: prefix-cache-scorer\n- type: queue-scorer\n- type: prefill-filter\n- type: decode-filter\n"
         "- type: max-score-picker\n- type: disagg-profile-handler\n  parameters:\n" +
         handler_params + decider +
         "schedulingProfiles:\n"
         "- name: prefill\n  plugins:\n  - pluginRef: prefill-filter\n  - pluginRef: max-score-picker\n"
         "  - pluginRef: prefix-cache-scorer\n    weight: 2\n  - pluginRef: queue-scorer\n    weight: 1\n"
         "- name: decode\n  plugins:\n  - pluginRef: decode-filter\n  - pluginRef: max-score-picker\n"
         "  - pluginRef: prefix-cache-scorer\n    weight: 2\n  - pluginRef: queue-scorer\n    weight: 1\n";
}

struct Env {
  ManualClock clock{testing::kNowUs};
  SeededRng rng{3};
  std::unique_ptr<Scheduler> sched;
  absl::Status status;

  explicit Env(const std::string& yaml) {
    auto cfg = ParseConfig(yaml, "pd.yaml");
    if (!cfg.ok()) {
      status = cfg.status();
      return;
    }
    auto s = BuildScheduler(*cfg, BuiltinRegistry(), PluginContext{&clock, &rng});
    status = s.status();
    if (s.ok()) sched = std::move(*s);
  }
};

std::vector<Endpoint> Pool() {
  return {EndpointBuilder("10.0.0.1:8000").Queue(0).Running(0).Kv(0.1).Label("llm-d.ai/role", "prefill"),
          EndpointBuilder("10.0.0.2:8000").Queue(0).Running(0).Kv(0.1).Label("llm-d.ai/role", "decode"),
          EndpointBuilder("10.0.0.3:8000").Queue(5).Running(0).Kv(0.1).Label("llm-d.ai/role", "decode")};
}

InferenceRequest Chat(const std::string& text) {
  auto r = ParseOpenAIRequest("/v1/chat/completions", R"({"model":"m","messages":[{"role":"user","content":")" + text + R"("}]})");
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : InferenceRequest{};
}

std::string Header(const PickResult& r, const std::string& name) {
  for (const auto& [k, v] : r.headers)
    if (k == name) return v;
  return "";
}

TEST(DisaggTest, LongUncachedPromptGetsAPrefillServerShortOneDecodeOnly) {
  Env env(PdConfig());
  ASSERT_TRUE(env.status.ok()) << env.status;
  const std::vector<Endpoint> pool = Pool();

  PickResult r = env.sched->Pick(Chat(std::string(400, 'a')), pool, {.trace = true, .record = false});
  ASSERT_EQ(r.status, 200) << r.reason;
  EXPECT_EQ(r.primary_profile, "decode");
  EXPECT_EQ(r.DestinationValue(), "10.0.0.2:8000") << "decode-filter and the shorter queue";
  EXPECT_EQ(Header(r, "x-prefiller-host-port"), "10.0.0.1:8000");
  EXPECT_EQ(r.profiles_reason, "prefill-decode");
  ASSERT_EQ(r.profile_picks.size(), 2u);
  EXPECT_EQ(r.profile_picks[0].profile, "decode") << "decode-first";
  EXPECT_EQ(r.profile_picks[1].profile, "prefill");
  EXPECT_TRUE(r.profile_picks[1].ran);
  EXPECT_EQ(r.profile_picks[1].endpoints, std::vector<std::string>{"10.0.0.1:8000"});
  EXPECT_NE(r.profile_picks[1].reason.find("pd-decider: 10"), std::string::npos) << r.profile_picks[1].reason;
  EXPECT_NE(r.profile_picks[1].reason.find(">= nonCachedTokens 16"), std::string::npos) << r.profile_picks[1].reason;
  ASSERT_EQ(r.profiles.size(), 2u) << "the trace has both profiles' tables";
  EXPECT_FALSE(r.profiles[1].scores.empty());

  PickResult s = env.sched->Pick(Chat("hi"), pool, {.trace = true, .record = false});
  ASSERT_EQ(s.status, 200) << s.reason;
  EXPECT_EQ(s.DestinationValue(), "10.0.0.2:8000");
  EXPECT_TRUE(Header(s, "x-prefiller-host-port").empty());
  EXPECT_EQ(s.profiles_reason, "decode-only");
  ASSERT_EQ(s.profile_picks.size(), 2u);
  EXPECT_FALSE(s.profile_picks[1].ran) << "prefill skipped by the decider";
  EXPECT_NE(s.profile_picks[1].reason.find("< nonCachedTokens 16"), std::string::npos) << s.profile_picks[1].reason;
  ASSERT_EQ(s.profiles.size(), 2u);
  EXPECT_FALSE(s.profiles[1].ran);
  EXPECT_TRUE(s.profiles[1].scores.empty());
}

TEST(DisaggTest, APromptTheDecodeServerHoldsSkipsPrefill) {
  Env env(PdConfig());
  ASSERT_TRUE(env.status.ok()) << env.status;
  const std::vector<Endpoint> pool = Pool();
  const std::string prompt(2000, 'b');
  PickResult first = env.sched->Pick(Chat(prompt), pool);  // recorded: both servers learn the prompt
  ASSERT_EQ(first.status, 200) << first.reason;
  EXPECT_EQ(Header(first, "x-prefiller-host-port"), "10.0.0.1:8000");
  PickResult again = env.sched->Pick(Chat(prompt), pool, {.record = false});
  ASSERT_EQ(again.status, 200) << again.reason;
  EXPECT_EQ(again.DestinationValue(), first.DestinationValue()) << "prefix affinity";
  EXPECT_TRUE(Header(again, "x-prefiller-host-port").empty()) << again.profile_picks.back().reason;
  EXPECT_NE(again.profile_picks.back().reason.find("< nonCachedTokens"), std::string::npos) << again.profile_picks.back().reason;
  EXPECT_GT(again.prefix_match_blocks, 0);
}

TEST(DisaggTest, NoPrefillServerServesDecodeOnlyNoDecodeServerFails) {
  Env env(PdConfig());
  ASSERT_TRUE(env.status.ok()) << env.status;
  std::vector<Endpoint> decode_only = {EndpointBuilder("10.0.0.2:8000").Queue(0).Label("llm-d.ai/role", "decode")};
  PickResult r = env.sched->Pick(Chat(std::string(400, 'c')), decode_only, {.record = false});
  ASSERT_EQ(r.status, 200) << r.reason;
  EXPECT_TRUE(r.headers.empty());
  EXPECT_NE(r.profiles_reason.find("decode-only (prefill profile failed"), std::string::npos) << r.profiles_reason;

  std::vector<Endpoint> prefill_only = {EndpointBuilder("10.0.0.1:8000").Queue(0).Label("llm-d.ai/role", "prefill")};
  PickResult f = env.sched->Pick(Chat(std::string(400, 'c')), prefill_only, {.record = false});
  EXPECT_EQ(f.status, 503);
  EXPECT_NE(f.reason.find("failed to find available decode workers"), std::string::npos) << f.reason;
  EXPECT_EQ(f.profile_picks.size(), 1u) << "prefill is not tried without a decode pick";
}

TEST(DisaggTest, PrefillFirstRunsPrefillUnconditionally) {
  Env env(PdConfig("    stageOrder: prefill-first\n", ""));
  ASSERT_TRUE(env.status.ok()) << env.status;
  PickResult r = env.sched->Pick(Chat("hi"), Pool(), {.record = false});
  ASSERT_EQ(r.status, 200) << r.reason;
  ASSERT_EQ(r.profile_picks.size(), 2u);
  EXPECT_EQ(r.profile_picks[0].profile, "prefill");
  EXPECT_EQ(r.profile_picks[1].profile, "decode");
  EXPECT_EQ(Header(r, "x-prefiller-host-port"), "10.0.0.1:8000");
}

TEST(DisaggTest, EncodeStageForMediaRequests) {
  const std::string yaml =
      "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: encode-filter\n- type: decode-filter\n"
      "- type: queue-scorer\n- type: disagg-profile-handler\n  parameters:\n    deciders:\n      encode: mm\n"
      "- name: mm\n  type: always-disagg-multimodal-decider\n"
      "schedulingProfiles:\n- name: encode\n  plugins:\n  - pluginRef: encode-filter\n  - pluginRef: queue-scorer\n"
      "- name: decode\n  plugins:\n  - pluginRef: decode-filter\n  - pluginRef: queue-scorer\n";
  Env env(yaml);
  ASSERT_TRUE(env.status.ok()) << env.status;
  std::vector<Endpoint> pool = {EndpointBuilder("10.0.0.5:8000").Queue(0).Label("llm-d.ai/role", "encode"),
                                EndpointBuilder("10.0.0.2:8000").Queue(0).Label("llm-d.ai/role", "decode")};
  auto image = ParseOpenAIRequest("/v1/chat/completions",
                                  R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what is it"},)"
                                  R"({"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]})");
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->media_parts, 1);
  PickResult r = env.sched->Pick(*image, pool, {.record = false});
  ASSERT_EQ(r.status, 200) << r.reason;
  EXPECT_EQ(r.DestinationValue(), "10.0.0.2:8000");
  EXPECT_EQ(Header(r, "x-encoder-hosts-ports"), "10.0.0.5:8000");
  EXPECT_EQ(r.profiles_reason, "encode-decode");

  PickResult text = env.sched->Pick(Chat("plain text"), pool, {.record = false});
  ASSERT_EQ(text.status, 200) << text.reason;
  EXPECT_TRUE(text.headers.empty());
  ASSERT_EQ(text.profile_picks.size(), 2u);
  EXPECT_EQ(text.profile_picks[1].reason, "the request has no media parts");
}

TEST(DisaggTest, TheHandlerOwnsItsHeaders) {
  Env env(PdConfig());
  ASSERT_TRUE(env.status.ok()) << env.status;
  EXPECT_EQ(env.sched->OwnedHeaders(), (std::vector<std::string>{"x-prefiller-host-port", "x-encoder-hosts-ports"}));
  Env single("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n");
  ASSERT_TRUE(single.status.ok()) << single.status;
  EXPECT_TRUE(single.sched->OwnedHeaders().empty());
}

TEST(DisaggTest, ConfigErrorsNameTheParameter) {
  struct Case {
    std::string handler_params, decider, error;
  } cases[] = {
      {"    deciders:\n      prefill: nope\n", "", "parameters.deciders.prefill: no plugin named 'nope'"},
      {"    deciders:\n      prefill: queue-scorer\n", "", "plugin 'queue-scorer' (type: queue-scorer) is not a disaggregation decider"},
      {"    profiles:\n      decode: dec\n", "", "parameters.profiles.decode: no profile named 'dec' (profiles: prefill, decode)"},
      {"    stageOrder: sideways\n", "", "stageOrder: expected decode-first or prefill-first, got 'sideways'"},
      {"    stageOrder: prefill-first\n    deciders:\n      prefill: pd-decider\n", "- name: pd-decider\n  type: always-disagg-pd-decider\n",
       "prefill-first always runs prefill; it takes no deciders.prefill"},
      {"    deciders:\n      prefill: pd-decider\n    prefillProfile: prefill\n", "- name: pd-decider\n  type: always-disagg-pd-decider\n",
       "mixes the nested form"},
      {"    deciders:\n      prefill: pd-decider\n", "- name: pd-decider\n  type: prefix-based-pd-decider\n  parameters:\n    nonCachedTokens: -1\n",
       "nonCachedTokens: must be >= 0, got -1"},
  };
  for (const Case& c : cases) {
    Env env(PdConfig(c.handler_params, c.decider));
    ASSERT_FALSE(env.status.ok()) << c.handler_params;
    EXPECT_NE(std::string(env.status.message()).find(c.error), std::string::npos) << env.status;
    EXPECT_NE(std::string(env.status.message()).find("pd.yaml"), std::string::npos) << env.status;
  }
}

TEST(DisaggTest, DeprecatedFormsLoadWithAWarning) {
  // The flat disagg-profile-handler parameters.
  Env flat(PdConfig("    prefillDeciderPluginName: pd-decider\n"));
  ASSERT_TRUE(flat.status.ok()) << flat.status;
  bool warned = false;
  for (const std::string& w : flat.sched->warnings()) warned |= w.find("flat parameters") != std::string::npos;
  EXPECT_TRUE(warned);
  PickResult r = flat.sched->Pick(Chat(std::string(400, 'd')), Pool(), {.record = false});
  EXPECT_EQ(Header(r, "x-prefiller-host-port"), "10.0.0.1:8000");

  // pd-profile-handler with the old threshold rule (characters; 0 = always prefill).
  auto pd = [](const std::string& params) {
    std::string y = PdConfig("", "");
    const std::string from = "- type: disagg-profile-handler\n  parameters:\n";
    y.replace(y.find(from), from.size(), "- type: pd-profile-handler\n  parameters:\n" + params);
    return y;
  };
  Env always(pd("    threshold: 0\n    hashBlockSize: 64\n"));
  ASSERT_TRUE(always.status.ok()) << always.status;
  warned = false;
  for (const std::string& w : always.sched->warnings()) warned |= w.find("pd-profile-handler is deprecated") != std::string::npos;
  EXPECT_TRUE(warned);
  PickResult a = always.sched->Pick(Chat("hi"), Pool(), {.record = false});
  EXPECT_EQ(Header(a, "x-prefiller-host-port"), "10.0.0.1:8000") << "threshold 0: always";

  Env chars(pd("    threshold: 100\n"));
  ASSERT_TRUE(chars.status.ok()) << chars.status;
  EXPECT_TRUE(Header(chars.sched->Pick(Chat(std::string(50, 'e')), Pool(), {.record = false}), "x-prefiller-host-port").empty());
  EXPECT_FALSE(Header(chars.sched->Pick(Chat(std::string(300, 'e')), Pool(), {.record = false}), "x-prefiller-host-port").empty());

  // Without threshold or deciderPluginName and no plugin of the default decider's name: llm-d
  // v0.5's reading (threshold 0, always prefill), with a warning. A decider named explicitly
  // must exist.
  Env defaulted(pd(""));
  ASSERT_TRUE(defaulted.status.ok()) << defaulted.status;
  warned = false;
  for (const std::string& w : defaulted.sched->warnings()) warned |= w.find("always ran prefill") != std::string::npos;
  EXPECT_TRUE(warned);
  EXPECT_EQ(Header(defaulted.sched->Pick(Chat("hi"), Pool(), {.record = false}), "x-prefiller-host-port"), "10.0.0.1:8000");
  Env missing(pd("    deciderPluginName: prefix-based-pd-decider\n"));
  ASSERT_FALSE(missing.status.ok());
  EXPECT_NE(std::string(missing.status.message()).find("no plugin named 'prefix-based-pd-decider'"), std::string::npos) << missing.status;
  // primaryPort: the decode pick goes to its host's sidecar port, the rank in x-data-parallel-host-port.
  Env port(pd("    threshold: 0\n    primaryPort: 8200\n"));
  ASSERT_TRUE(port.status.ok()) << port.status;
  PickResult dp = port.sched->Pick(Chat("hi"), Pool());
  ASSERT_EQ(dp.status, 200) << dp.reason;
  EXPECT_EQ(dp.endpoints[0], "10.0.0.2:8200");
  EXPECT_EQ(Header(dp, "x-data-parallel-host-port"), "10.0.0.2:8000");
  EXPECT_EQ(dp.load_endpoint, "10.0.0.2:8000");
  EXPECT_EQ(port.sched->Inflight("10.0.0.2:8000").first, 1);
  port.sched->Release(dp);
  EXPECT_EQ(port.sched->Inflight("10.0.0.2:8000").first, 0);
  Env bad_port(pd("    threshold: 0\n    primaryPort: 70000\n"));
  ASSERT_FALSE(bad_port.status.ok());
  EXPECT_NE(std::string(bad_port.status.message()).find("primaryPort"), std::string::npos) << bad_port.status;
}

TEST(DisaggTest, HeaderProfileHandlerRunsTheProfileTheHeaderNames) {
  const std::string yaml = R"(apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: header-profile-handler
- type: prefill-filter
- type: decode-filter
- type: max-score-picker
- type: queue-scorer
schedulingProfiles:
- name: prefill
  plugins: [{pluginRef: prefill-filter}, {pluginRef: queue-scorer}, {pluginRef: max-score-picker}]
- name: decode
  plugins: [{pluginRef: decode-filter}, {pluginRef: queue-scorer}, {pluginRef: max-score-picker}]
)";
  Env env(yaml);
  ASSERT_TRUE(env.status.ok()) << env.status;
  auto with = [](const std::string& value) {
    InferenceRequest r = Chat("hi");
    if (!value.empty()) r.headers.emplace_back("epp-profile", value);
    return r;
  };
  PickResult pre = env.sched->Pick(with("prefill"), Pool(), {.record = false});
  ASSERT_EQ(pre.status, 200) << pre.reason;
  EXPECT_EQ(pre.primary_profile, "prefill");
  EXPECT_EQ(pre.endpoints[0], "10.0.0.1:8000");
  PickResult dflt = env.sched->Pick(with(""), Pool(), {.record = false});  // defaultProfile decode
  EXPECT_EQ(dflt.primary_profile, "decode");
  EXPECT_EQ(dflt.endpoints[0], "10.0.0.2:8000");
  PickResult bad = env.sched->Pick(with("encode"), Pool(), {.record = false});
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.reason.find("no scheduling profile is named 'encode'"), std::string::npos) << bad.reason;
  // A defaultProfile that names no profile is the config's fault: 503, not 400.
  std::string wrong = yaml;
  wrong.replace(wrong.find("- type: header-profile-handler\n"), std::string("- type: header-profile-handler\n").size(),
                "- type: header-profile-handler\n  parameters: {defaultProfile: nope}\n");
  Env misconfigured(wrong);
  ASSERT_TRUE(misconfigured.status.ok()) << misconfigured.status;
  EXPECT_EQ(misconfigured.sched->Pick(with(""), Pool(), {.record = false}).status, 503);
}

TEST(DisaggTest, DataParallelHandlerSendsThePickToTheSidecarPort) {
  const std::string yaml = R"(apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: data-parallel-profile-handler
  parameters: {primaryPort: 8000}
- type: queue-scorer
- type: max-score-picker
- type: disagg-headers-handler
schedulingProfiles:
- name: default
  plugins: [{pluginRef: queue-scorer}, {pluginRef: max-score-picker}]
)";
  Env env(yaml);
  ASSERT_TRUE(env.status.ok()) << env.status;
  int deprecated = 0;
  for (const std::string& w : env.sched->warnings()) deprecated += w.find("deprecated in llm-d") != std::string::npos;
  EXPECT_EQ(deprecated, 2);
  std::vector<Endpoint> ranks = {EndpointBuilder("10.0.0.9:8001").Queue(4).Running(0).Kv(0.1),
                                 EndpointBuilder("10.0.0.9:8002").Queue(0).Running(0).Kv(0.1)};
  PickResult r = env.sched->Pick(Chat("hi"), ranks, {.record = false});
  ASSERT_EQ(r.status, 200) << r.reason;
  EXPECT_EQ(r.endpoints[0], "10.0.0.9:8000");
  EXPECT_EQ(Header(r, "x-data-parallel-host-port"), "10.0.0.9:8002");
  const auto& owned = env.sched->OwnedHeaders();
  EXPECT_NE(std::find(owned.begin(), owned.end(), "x-data-parallel-host-port"), owned.end());
}

TEST(DisaggTest, AReloadBuildsANewHandlerBoundToTheNewDeciders) {
  Env env(PdConfig());
  ASSERT_TRUE(env.status.ok()) << env.status;
  auto cfg = ParseConfig(PdConfig("    deciders:\n      prefill: pd-decider\n",
                                  "- name: pd-decider\n  type: prefix-based-pd-decider\n  parameters:\n    nonCachedTokens: 100000\n"),
                         "pd.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  auto next = RebuildScheduler(*cfg, BuiltinRegistry(), PluginContext{&env.clock, &env.rng}, *env.sched);
  ASSERT_TRUE(next.ok()) << next.status();
  env.sched.reset();  // the old scheduler (and its decider) is gone
  PickResult r = (*next)->Pick(Chat(std::string(400, 'f')), Pool(), {.record = false});
  ASSERT_EQ(r.status, 200) << r.reason;
  EXPECT_TRUE(r.headers.empty()) << "the new decider's threshold applies";
  EXPECT_NE(r.profile_picks.back().reason.find("nonCachedTokens 100000"), std::string::npos) << r.profile_picks.back().reason;
}

TEST(DisaggTest, EffectiveConfigShowsTheHandlersNestedParameters) {
  Env env(PdConfig("    prefillDeciderPluginName: pd-decider\n"));
  ASSERT_TRUE(env.status.ok()) << env.status;
  const std::string yaml = env.sched->EffectiveConfigYaml();
  EXPECT_NE(yaml.find("    deciders:\n      prefill: pd-decider\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("stageOrder: decode-first"), std::string::npos) << yaml;
  // The effective document loads back to the same scheduler shape.
  auto again = ParseConfig(yaml, "effective.yaml");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << yaml;
  EXPECT_TRUE(BuildScheduler(*again, BuiltinRegistry()).ok());
}

}  // namespace
}  // namespace epp
