// Kubernetes API answers (`eppctl serve --pool-name`): the text before a line "---" is an
// InferencePool object, parsed as both API versions (ParseInferencePool); the text after it is a
// PodList, converted to endpoints (ParsePodListEndpoints) for the first version that parsed, or
// for a fixed pool when neither did. The text before "---" is also parsed as an
// InferencePoolImport and looked up in a fixed cluster directory. Invariants: a parsed pool has
// 1..8 ports in range and a valid API path; the endpoints of a PodList validate as an endpoints
// file would; an import's exporting clusters are sorted, unique and non-empty, and its endpoints
// are exactly the directory entries of exporting clusters.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "epp/runtime/endpoints.h"
#include "epp/runtime/kube.h"
#include "fuzz_util.h"

namespace {

epp::InferencePool FixedPool() {
  epp::InferencePool pool;
  pool.group = std::string(epp::kInferencePoolGroupV1);
  pool.ns = "ns1";
  pool.name = "llama";
  pool.selector = {{"app", "vllm"}, {"tier", "a b"}};
  pool.target_ports = {8000, 8002};
  return pool;
}

}  // namespace

void CheckImport(std::string_view json) {
  absl::StatusOr<epp::InferencePoolImport> imp = epp::ParseInferencePoolImport(json, "GET import");
  if (!imp.ok()) {
    EPP_FUZZ_CHECK(imp.status().code() == absl::StatusCode::kInvalidArgument, imp.status().ToString());
    return;
  }
  for (size_t i = 0; i < imp->exporting_clusters.size(); ++i) {
    EPP_FUZZ_CHECK(!imp->exporting_clusters[i].empty(), "empty cluster");
    EPP_FUZZ_CHECK(i == 0 || imp->exporting_clusters[i - 1] < imp->exporting_clusters[i], "not sorted and unique");
  }
  std::vector<epp::EndpointSpec> directory(3);
  const char* names[] = {"east-1", "west-1", "a"};
  for (size_t i = 0; i < directory.size(); ++i) {
    directory[i].address = "gw" + std::to_string(i) + ".test:443";
    directory[i].labels["cluster"] = names[i];
  }
  std::vector<std::string> missing;
  const std::vector<epp::EndpointSpec> out = epp::ImportEndpoints(*imp, directory, "cluster", &missing);
  EPP_FUZZ_CHECK(out.size() + missing.size() >= imp->exporting_clusters.size(), "lost a cluster");
  for (const epp::EndpointSpec& s : out) {
    const std::string& c = s.labels.at("cluster");
    EPP_FUZZ_CHECK(std::binary_search(imp->exporting_clusters.begin(), imp->exporting_clusters.end(), c), c);
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto [pool_json, pods_json] = epp::fuzz::SplitOnce(epp::fuzz::Text(data, size), "\n---\n");
  CheckImport(pool_json);
  std::optional<epp::InferencePool> pool;
  for (std::string_view group : {epp::kInferencePoolGroupV1, epp::kInferencePoolGroupV1Alpha2}) {
    absl::StatusOr<epp::InferencePool> p = epp::ParseInferencePool(pool_json, group, "GET pool");
    if (!p.ok()) {
      EPP_FUZZ_CHECK(p.status().code() == absl::StatusCode::kInvalidArgument, p.status().ToString());
      continue;
    }
    EPP_FUZZ_CHECK(p->group == group, p->group);
    EPP_FUZZ_CHECK(!p->target_ports.empty() && p->target_ports.size() <= 8, "target port count");
    for (int port : p->target_ports) EPP_FUZZ_CHECK(port >= 1 && port <= 65535, std::to_string(port));
    (void)epp::InferencePoolPath(p->group, p->ns, p->name);
    (void)epp::PodListPath(*p);
    if (!pool) pool = *std::move(p);
  }
  if (!pods_json) return 0;
  if (!pool) pool = FixedPool();
  absl::StatusOr<std::vector<epp::EndpointSpec>> specs = epp::ParsePodListEndpoints(*pods_json, *pool, "GET pods");
  if (!specs.ok()) {
    EPP_FUZZ_CHECK(specs.status().code() == absl::StatusCode::kInvalidArgument, specs.status().ToString());
    return 0;
  }
  const absl::Status valid = epp::ValidateEndpointSpecs(*specs);
  EPP_FUZZ_CHECK(valid.ok(), valid.ToString());
  for (const epp::EndpointSpec& spec : *specs) EPP_FUZZ_CHECK(spec.metrics.empty(), spec.metrics);
  return 0;
}
