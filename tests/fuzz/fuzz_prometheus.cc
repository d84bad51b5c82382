// Prometheus text exposition (a model server's /metrics answer, scraped every 50 ms) through
// ParsePrometheusText, strict and then lenient, and ParsePrometheusTextInto reusing buffers that
// held another scrape; then DetectEngine and ExtractMetrics with every built-in engine mapping.
// Invariants: both parse paths agree, extracted values are in the ranges metrics.h promises.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "epp/metrics.h"
#include "fuzz_util.h"

namespace {

using epp::MetricFamilies;

// A scrape the reused buffers hold before each input (views into it must not survive).
constexpr std::string_view kPrevious =
    "# HELP vllm:num_requests_waiting Number of requests waiting.\n"
    "# TYPE vllm:num_requests_waiting gauge\n"
    "vllm:num_requests_waiting{model_name=\"llama\",engine=\"0\"} 3\n"
    "# TYPE vllm:kv_cache_usage_perc gauge\n"
    "vllm:kv_cache_usage_perc{model_name=\"llama\\\"x\\\\y\"} 0.25\n"
    "# TYPE vllm:e2e_request_latency_seconds histogram\n"
    "vllm:e2e_request_latency_seconds_bucket{le=\"0.5\"} 4 1700000000000\n"
    "vllm:e2e_request_latency_seconds_bucket{le=\"+Inf\"} 9\n"
    "vllm:e2e_request_latency_seconds_sum 7.5\n"
    "vllm:e2e_request_latency_seconds_count 9\n";

bool SameValue(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b)); }

void CheckSame(const MetricFamilies& a, const MetricFamilies& b) {
  EPP_FUZZ_CHECK(a.families().size() == b.families().size(), "family count differs after buffer reuse");
  EPP_FUZZ_CHECK(a.sample_count() == b.sample_count(), "sample count differs after buffer reuse");
  EPP_FUZZ_CHECK(a.skipped_lines() == b.skipped_lines(), "skipped lines differ after buffer reuse");
  for (size_t f = 0; f < a.families().size(); ++f) {
    const epp::MetricFamily& fa = a.families()[f];
    const epp::MetricFamily& fb = b.families()[f];
    EPP_FUZZ_CHECK(fa.name == fb.name && fa.type == fb.type && fa.help == fb.help, std::string(fa.name));
    EPP_FUZZ_CHECK(fa.samples.size() == fb.samples.size(), std::string(fa.name));
    for (size_t s = 0; s < fa.samples.size(); ++s) {
      const epp::Sample& sa = fa.samples[s];
      const epp::Sample& sb = fb.samples[s];
      EPP_FUZZ_CHECK(sa.name == sb.name && SameValue(sa.value, sb.value) && sa.timestamp_ms == sb.timestamp_ms,
                     std::string(sa.name));
      EPP_FUZZ_CHECK(sa.labels.size() == sb.labels.size(), std::string(sa.name));
      for (size_t l = 0; l < sa.labels.size(); ++l)
        EPP_FUZZ_CHECK(sa.labels[l].name == sb.labels[l].name && sa.labels[l].value == sb.labels[l].value,
                       std::string(sa.labels[l].name));
    }
  }
}

void Extract(const MetricFamilies& families) {
  (void)epp::DetectEngine(families);
  for (const epp::MetricFamily& f : families.families()) {
    if (f.samples.empty()) continue;
    EPP_FUZZ_CHECK(!families.FindBySampleName(f.samples[0].name).empty(), std::string(f.samples[0].name));
    (void)f.samples[0].label("model_name");
  }
  for (const std::string& engine : epp::MetricMapping::BuiltInEngines()) {
    absl::StatusOr<epp::MetricMapping> mapping = epp::MetricMapping::BuiltIn(engine);
    EPP_FUZZ_CHECK(mapping.ok(), engine);
    epp::fuzz::CheckExtraction(epp::ExtractMetrics(families, *mapping), engine);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = epp::fuzz::Text(data, size);
  static MetricFamilies* const reused = new MetricFamilies();
  for (const bool lenient : {false, true}) {
    const epp::ParseOptions options{.lenient = lenient};
    absl::StatusOr<MetricFamilies> fresh = epp::ParsePrometheusText(text, options);
    EPP_FUZZ_CHECK(epp::ParsePrometheusTextInto(kPrevious, options, *reused).ok(), "the fixed scrape parses");
    const absl::Status again = epp::ParsePrometheusTextInto(text, options, *reused);
    EPP_FUZZ_CHECK(again.ok() == fresh.ok(), "ParsePrometheusTextInto and ParsePrometheusText disagree");
    if (!fresh.ok()) {
      EPP_FUZZ_CHECK(reused->families().empty(), "a failed parse leaves families behind");
      EPP_FUZZ_CHECK(!lenient, "lenient parsing failed");
      continue;
    }
    if (!lenient) EPP_FUZZ_CHECK(fresh->skipped_lines() == 0, "strict parse skipped lines");
    CheckSame(*fresh, *reused);
    Extract(*fresh);
    break;  // the lenient parse of a text the strict one accepts adds nothing
  }
  return 0;
}
