// What the Kubernetes watches read besides Pods and pools (`eppctl serve --pool-name`,
// --endpoint-selector): the input's first line is a label selector (--endpoint-selector, the
// watch's labelSelector); the text after the first "\n---\n" is parsed as an InferenceObjective
// and as an InferenceModelRewrite of pool "p", the text after a second one as a Lease-less
// PodList for the selector. Invariants: a parsed selector prints as text that parses back to
// itself and matches what it matched; a parsed rewrite has rules with 1+ targets and weights in
// [0, 1000000], and the merged policies pick one of the rule's targets for any draw; Pod endpoints
// validate as an endpoints file would and carry only selected Pods' labels.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "epp/runtime/endpoints.h"
#include "epp/runtime/kube.h"
#include "epp/runtime/serve.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = epp::fuzz::Text(data, size);
  const size_t nl = text.find('\n');
  const std::string_view selector_text = text.substr(0, nl);
  auto [head, rest] = epp::fuzz::SplitOnce(text, "\n---\n");
  (void)head;
  epp::LabelSelector selector;
  absl::StatusOr<epp::LabelSelector> parsed = epp::ParseLabelSelector(selector_text);
  if (parsed.ok()) {
    selector = *parsed;
    absl::StatusOr<epp::LabelSelector> again = epp::ParseLabelSelector(selector.String());
    EPP_FUZZ_CHECK(again.ok() && *again == selector, selector.String());
    const std::map<std::string, std::string> labels = {{"app", "vllm"}, {"env", "prod"}};
    EPP_FUZZ_CHECK(again->Matches(labels) == selector.Matches(labels), "match changed through the text");
  } else {
    EPP_FUZZ_CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument, parsed.status().ToString());
  }
  if (!rest) return 0;
  auto [object, pods] = epp::fuzz::SplitOnce(*rest, "\n---\n");

  absl::StatusOr<std::optional<epp::ObjectivePolicy>> objective = epp::ParseInferenceObjective(object, "p");
  if (!objective.ok())
    EPP_FUZZ_CHECK(objective.status().code() == absl::StatusCode::kInvalidArgument, objective.status().ToString());
  absl::StatusOr<std::optional<epp::RewritePolicy>> rewrite = epp::ParseInferenceModelRewrite(object, "p");
  if (!rewrite.ok()) {
    EPP_FUZZ_CHECK(rewrite.status().code() == absl::StatusCode::kInvalidArgument, rewrite.status().ToString());
  } else if (rewrite->has_value()) {
    const epp::RewritePolicy& r = **rewrite;
    for (const epp::ModelRewriteRule& rule : r.rules) {
      EPP_FUZZ_CHECK(!rule.targets.empty(), "a rule without targets");
      for (const epp::ModelRewriteTarget& t : rule.targets)
        EPP_FUZZ_CHECK(t.weight >= 0 && t.weight <= 1000000 && !t.model.empty(), t.model);
    }
    std::vector<epp::ObjectivePolicy> objectives;
    if (objective.ok() && objective->has_value()) objectives.push_back(**objective);
    const epp::RequestPolicies policies = epp::MergeRequestPolicies(objectives, {r});
    for (const epp::ModelRewriteRule& rule : policies.rewrites) {
      for (double u : {0.0, 0.3, 0.999999}) {
        const std::string& target = epp::PickRewriteTarget(rule, u);
        bool listed = false;
        for (const epp::ModelRewriteTarget& t : rule.targets) listed = listed || t.model == target;
        EPP_FUZZ_CHECK(listed, target);
      }
      for (const std::string& model : rule.models) EPP_FUZZ_CHECK(policies.RuleFor(model) != nullptr, model);
    }
  }

  if (!pods) return 0;
  absl::StatusOr<std::vector<epp::PodInfo>> list = epp::ParsePodList(*pods, "watch pods", "ns1", selector);
  if (!list.ok()) {
    EPP_FUZZ_CHECK(list.status().code() == absl::StatusCode::kInvalidArgument, list.status().ToString());
    return 0;
  }
  const std::vector<int> ports = {8000, 8001};
  epp::PodMetricsOptions metrics;
  metrics.scheme = "https";
  metrics.port = 9400;
  const std::vector<epp::EndpointSpec> specs = epp::PodEndpoints(*list, selector, ports, metrics);
  const absl::Status valid = epp::ValidateEndpointSpecs(specs);
  EPP_FUZZ_CHECK(valid.ok(), valid.ToString());
  for (const epp::EndpointSpec& s : specs) EPP_FUZZ_CHECK(selector.Matches(s.labels), s.address);
  return 0;
}
