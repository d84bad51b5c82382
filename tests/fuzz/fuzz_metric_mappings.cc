// Engine metric mappings (`eppctl check --mappings`, the core-metrics-extractor's engineConfigs)
// through LoadMetricMappingsYaml; every mapping that loads detects and extracts over a fixed
// scrape holding the built-in engines' metric names and custom ones. Each input line is also
// parsed alone as a MetricSpec (`--metric queue=NAME{label=value}`). Invariants: extracted
// values keep metrics.h's ranges; a spec whose values need no escaping prints back to itself.
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "epp/metrics.h"
#include "fuzz_util.h"

namespace {

const epp::MetricFamilies& Scrape() {
  static const epp::MetricFamilies* const kFamilies = [] {
    absl::StatusOr<epp::MetricFamilies> f = epp::ParsePrometheusText(
        "# TYPE vllm:num_requests_waiting gauge\n"
        "vllm:num_requests_waiting{model_name=\"llama\"} 2\n"
        "# TYPE vllm:num_requests_running gauge\n"
        "vllm:num_requests_running{model_name=\"llama\"} 7\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        "vllm:kv_cache_usage_perc{model_name=\"llama\"} 0.4\n"
        "# TYPE vllm:lora_requests_info gauge\n"
        "vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"a, b\",waiting_lora_adapters=\"\"} "
        "1.7e9\n"
        "# TYPE vllm:cache_config_info gauge\n"
        "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"8192\"} 1\n"
        "# TYPE sglang:num_queue_reqs gauge\n"
        "sglang:num_queue_reqs 1\n"
        "# TYPE sglang:token_usage gauge\n"
        "sglang:token_usage 61\n"
        "# TYPE trtllm_kv_cache_tokens_per_block gauge\n"
        "trtllm_kv_cache_tokens_per_block 32\n"
        "trtllm_kv_cache_max_blocks 9.3e18\n"
        "# TYPE my_queue counter\n"
        "my_queue_total{pool=\"a\"} 3\n"
        "my_running{pool=\"a\"} 4\n"
        "my_running{pool=\"b\"} NaN\n"
        "my_kv{pool=\"a\"} 0.5\n"
        "my_kv{pool=\"b\"} -1\n"
        "my_cache{page_size=\"1\",num_pages=\"180000\"} 1\n"
        "my_lora{running=\"x\",max=\"1e3\"} +Inf\n"
        "# TYPE my_hist histogram\n"
        "my_hist_bucket{le=\"1\"} 1\n"
        "my_hist_count 1\n");
    EPP_FUZZ_CHECK(f.ok(), f.status().ToString());
    return new epp::MetricFamilies(*std::move(f));
  }();
  return *kFamilies;
}

bool NeedsEscaping(const epp::MetricSpec& spec) {
  for (const auto& [name, value] : spec.labels)
    if (value.find_first_of("\"\\\n") != std::string::npos) return true;
  return false;
}

void CheckSpec(const epp::MetricSpec& spec) {
  if (NeedsEscaping(spec)) return;  // ToString() does not escape (it only names specs in messages)
  absl::StatusOr<epp::MetricSpec> again = epp::MetricSpec::Parse(spec.ToString());
  EPP_FUZZ_CHECK(again.ok(), again.status().ToString());
  EPP_FUZZ_CHECK(*again == spec, spec.ToString() + " vs " + again->ToString());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = epp::fuzz::Text(data, size);
  int lines = 0;
  for (std::string_view line : epp::fuzz::SplitAll(text, "\n")) {
    if (++lines > 64) break;
    absl::StatusOr<epp::MetricSpec> spec = epp::MetricSpec::Parse(line);
    if (spec.ok()) CheckSpec(*spec);
  }

  absl::StatusOr<std::vector<epp::MetricMapping>> mappings = epp::LoadMetricMappingsYaml(text, "fuzz.yaml");
  if (!mappings.ok()) {
    EPP_FUZZ_CHECK(mappings.status().code() == absl::StatusCode::kInvalidArgument, mappings.status().ToString());
    return 0;
  }
  const epp::MetricFamilies& scrape = Scrape();
  (void)epp::DetectEngine(scrape, *mappings);
  for (epp::MetricMapping& m : *mappings) {
    EPP_FUZZ_CHECK(!m.engine.empty() && m.engine != "default", m.engine);
    for (const auto* field : {&m.queue, &m.running, &m.kv_usage, &m.lora, &m.cache_info, &m.cache_block_size,
                              &m.cache_num_blocks})
      for (const epp::MetricSpec& spec : *field) CheckSpec(spec);
    epp::fuzz::CheckExtraction(epp::ExtractMetrics(scrape, m), m.engine);
    // An override replaces a field's candidates (eppctl check --metric FIELD=SPEC).
    if (epp::ApplyMetricOverride(m, "queue", "my_queue_total{pool=a}").ok())
      epp::fuzz::CheckExtraction(epp::ExtractMetrics(scrape, m), m.engine + " with override");
  }
  return 0;
}
