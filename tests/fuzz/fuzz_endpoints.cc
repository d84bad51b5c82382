// Endpoints files (`--endpoints pool.yaml`, reloaded by `eppctl serve` when it changes) through
// ParseEndpointsYaml, then ValidateEndpointSpecs and ResolveEndpoints (engine choice and
// detection, metrics extraction) with every metrics source pointed at one local file or "none"
// (never the network, never another file); and the first line as an `--endpoint ADDR[=METRICS]`
// flag. Invariants: what the parser accepts validates; endpoints come back in spec order.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "epp/runtime/endpoints.h"
#include "fuzz_util.h"

namespace {

// A directory holding the one metrics file endpoints may read ("m.prom"), removed at exit.
const std::string& BaseDir() {
  static const std::string* const kDir = [] {
    std::error_code ec;
    const std::filesystem::path dir = std::filesystem::temp_directory_path(ec) /
                                      ("epp-fuzz-endpoints-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir, ec);
    std::ofstream(dir / "m.prom") << "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 2\n"
                                     "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 5\n"
                                     "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.5\n"
                                     "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"2048\"} 1\n";
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(BaseDir(), ignored);
    });
    return new std::string(dir.string());
  }();
  return *kDir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = epp::fuzz::Text(data, size);
  const std::string& base = BaseDir();
  (void)epp::ParseEndpointFlag(epp::fuzz::FirstLine(text).first, 1);

  absl::StatusOr<std::vector<epp::EndpointSpec>> specs = epp::ParseEndpointsYaml(text, "fuzz.yaml", base);
  if (!specs.ok()) {
    EPP_FUZZ_CHECK(specs.status().code() == absl::StatusCode::kInvalidArgument, specs.status().ToString());
    return 0;
  }
  const absl::Status valid = epp::ValidateEndpointSpecs(*specs);
  EPP_FUZZ_CHECK(valid.ok(), valid.ToString());

  const std::string local = base + "/m.prom";
  for (epp::EndpointSpec& spec : *specs)
    if (spec.metrics != local) spec.metrics = std::string(epp::kNoMetrics);
  epp::ManualClock clock(epp::fuzz::kNowUs);
  epp::ResolveOptions options;
  options.clock = &clock;
  absl::StatusOr<std::vector<epp::Endpoint>> endpoints = epp::ResolveEndpoints(*specs, options);
  if (!endpoints.ok()) return 0;  // an unknown engine name
  EPP_FUZZ_CHECK(endpoints->size() == specs->size(), "one endpoint per spec");
  for (size_t i = 0; i < specs->size(); ++i) {
    EPP_FUZZ_CHECK((*endpoints)[i].address == (*specs)[i].address, (*specs)[i].address);
    EPP_FUZZ_CHECK((*endpoints)[i].labels == (*specs)[i].labels, (*specs)[i].address);
  }
  return 0;
}
