// EndpointPickerConfig YAML (a ConfigMap, a Helm values file, `eppctl config validate`) through
// ParseConfig; a config that parses is built with the built-in plugin registry (BuildScheduler:
// defaulting, every plugin factory and its parameters, validation), and a scheduler that builds
// picks over a fixed pool (plain, traced and explained, sheddable, with a subset hint).
// Invariants: picks name pool endpoints; the effective config reloads, rebuilds and is a fixed
// point of that round trip.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "epp/config.h"
#include "epp/request.h"
#include "epp/scheduler.h"
#include "fuzz_util.h"

namespace {

const epp::InferenceRequest& Request() {
  static const epp::InferenceRequest* const kRequest = [] {
    std::string body = R"({"model":"llama","messages":[{"role":"system","content":")";
    for (int i = 0; i < 12; ++i) body += "You are a helpful assistant for Contoso; answer briefly. ";
    body += R"("},{"role":"user","content":"Where is my order 42?"}]})";
    absl::StatusOr<epp::InferenceRequest> r = epp::ParseOpenAIRequest("/v1/chat/completions", body);
    EPP_FUZZ_CHECK(r.ok(), r.status().ToString());
    return new epp::InferenceRequest(*std::move(r));
  }();
  return *kRequest;
}

void CheckResult(const epp::PickResult& r, const std::vector<epp::Endpoint>& pool) {
  EPP_FUZZ_CHECK(!r.reason.empty(), "a pick without a reason");
  if (r.status != 200) {
    EPP_FUZZ_CHECK(r.endpoints.empty(), "a failed pick names endpoints");
    return;
  }
  EPP_FUZZ_CHECK(!r.endpoints.empty(), "a 200 pick without endpoints");
  for (const std::string& e : r.endpoints)
    EPP_FUZZ_CHECK(std::any_of(pool.begin(), pool.end(), [&](const epp::Endpoint& p) { return p.address == e; }), e);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<epp::EppConfig> config = epp::ParseConfig(epp::fuzz::Text(data, size), "fuzz.yaml");
  if (!config.ok()) {
    EPP_FUZZ_CHECK(config.status().code() == absl::StatusCode::kInvalidArgument, config.status().ToString());
    return 0;
  }
  epp::fuzz::SchedulerEnv env;
  if (!env.Build(*config).ok()) return 0;
  const epp::Scheduler& scheduler = *env.scheduler;
  const std::vector<epp::Endpoint> pool = epp::fuzz::Pool();

  epp::InferenceRequest request = Request();
  for (int round = 0; round < 3; ++round) {
    epp::PickOptions options;
    options.trace = round == 1;
    if (round == 2) options.subset = std::vector<std::string>{"10.0.0.1", "10.0.0.3:8000", "[fd00::4]"};
    const epp::PickResult r = scheduler.Pick(request, pool, options);
    CheckResult(r, pool);
    if (options.trace) {
      (void)epp::PickResultToJson(&request, r);
      (void)epp::PickResultToText(&request, r);
    }
    scheduler.Release(r);
    env.clock.Advance(1000);
  }
  request.priority = -1;  // sheddable: the saturation detector decides
  const epp::PickResult shed = scheduler.Pick(request, pool, {.trace = true});
  CheckResult(shed, pool);
  scheduler.Release(shed);
  (void)scheduler.PluginTimings();

  // What `eppctl config effective` prints must load back into the same scheduler.
  const std::string effective = scheduler.EffectiveConfigYaml();
  absl::StatusOr<epp::EppConfig> reloaded = epp::ParseConfig(effective, "effective.yaml");
  EPP_FUZZ_CHECK(reloaded.ok(), reloaded.status().ToString() + "\n" + effective);
  epp::fuzz::SchedulerEnv again;
  const absl::Status rebuilt = again.Build(*reloaded);
  EPP_FUZZ_CHECK(rebuilt.ok(), rebuilt.ToString() + "\n" + effective);
  EPP_FUZZ_CHECK(again.scheduler->EffectiveConfigYaml() == effective, effective);
  return 0;
}
