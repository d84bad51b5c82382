// Prometheus text of a simulated server in the dialect of vLLM, SGLang or trtllm-serve.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "common/strings.h"
#include "metrics/exposition.h"
#include "epp/tools/sim.h"

namespace epp {
namespace {

using internal::Labels;

// The engines' conventions over the shared exposition writer: Python float values, the server's
// own labels after each sample's, counters exposed as NAME_total.
class Writer {
 public:
  explicit Writer(Labels labels) : x_(internal::NumberStyle::kPython, std::move(labels)) {}
  void Family(const std::string& name, const char* type, const char* help) { x_.Family(name, type, help); }
  void Sample(const std::string& name, double v, const Labels& extra = {}) { x_.Sample(name, extra, v); }
  // A sample whose labels are its own only (info gauges).
  void Info(const std::string& name, const Labels& labels, double v) { x_.SampleOwnLabels(name, labels, v); }
  void Gauge(const std::string& name, const char* help, double v) {
    Family(name, "gauge", help);
    Sample(name, v);
  }
  void Counter(const std::string& name, const char* help, double v) {
    Family(name, "counter", help);
    Sample(name + "_total", v);
  }
  void Histogram(const std::string& name, const char* help, const SimHistogram& h) {
    Family(name, "histogram", help);
    std::vector<uint64_t> cumulative(h.counts.size());
    uint64_t cum = 0;
    for (size_t i = 0; i < h.counts.size(); ++i) cumulative[i] = cum += h.counts[i];
    x_.Histogram(name, {}, h.bounds, cumulative, h.count, h.sum);
  }
  std::string Take() { return x_.Take(); }

 private:
  internal::Exposition x_;
};

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

}  // namespace

std::string RenderSimMetrics(const SimParams& p, const SimSnapshot& s, double wall_time_s) {
  const std::string& model = p.models.front();
  const double hit_rate = s.prefix_query_tokens_total
                              ? static_cast<double>(s.prefix_hit_tokens_total) / s.prefix_query_tokens_total
                              : 0.0;
  if (p.engine == "sglang") {
    Writer w({{"model_name", model}});
    w.Gauge("sglang:num_running_reqs", "The number of running requests.", s.running);
    w.Gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", s.waiting);
    w.Gauge("sglang:num_used_tokens", "The number of used tokens.",
            static_cast<double>(s.kv_blocks_used * p.block_size));
    w.Gauge("sglang:token_usage", "The token usage.", s.kv_usage);
    w.Gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", hit_rate);
    w.Family("sglang:cache_config_info", "gauge", "Information of the cache configuration.");
    w.Info("sglang:cache_config_info", {{"num_pages", std::to_string(p.kv_blocks)}, {"page_size", std::to_string(p.block_size)}},
           1.0);
    w.Counter("sglang:prompt_tokens", "Number of prefill tokens processed.", static_cast<double>(s.prompt_tokens_total));
    w.Counter("sglang:generation_tokens", "Number of generation tokens processed.",
              static_cast<double>(s.generation_tokens_total));
    w.Counter("sglang:cached_tokens", "Number of cached prompt tokens.", static_cast<double>(s.prefix_hit_tokens_total));
    w.Counter("sglang:num_requests", "Number of requests processed.", static_cast<double>(s.requests_finished));
    w.Histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", s.ttft_s);
    w.Histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", s.e2e_s);
    return w.Take();
  }
  if (p.engine == "trtllm-serve") {
    Writer w({{"model_name", model}});
    w.Gauge("trtllm_num_requests_waiting", "Number of requests waiting to be scheduled.", s.waiting);
    w.Gauge("trtllm_num_requests_running", "Number of requests in the running batch.", s.running);
    w.Gauge("trtllm_kv_cache_utilization", "Fraction of KV cache blocks in use.", s.kv_usage);
    w.Gauge("trtllm_kv_cache_tokens_per_block", "Tokens per KV cache block.", p.block_size);
    w.Gauge("trtllm_kv_cache_max_blocks", "Maximum number of KV cache blocks.", static_cast<double>(p.kv_blocks));
    w.Gauge("trtllm_kv_cache_hit_rate", "KV cache reuse rate.", hit_rate);
    w.Counter("trtllm_request_success", "Count of successfully processed requests.",
              static_cast<double>(s.requests_finished));
    w.Histogram("trtllm_time_to_first_token_seconds", "Histogram of time to first token in seconds.", s.ttft_s);
    w.Histogram("trtllm_e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", s.e2e_s);
    return w.Take();
  }
  Writer w({{"engine", "0"}, {"model_name", model}});
  w.Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", s.running);
  w.Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", s.waiting);
  w.Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.kv_usage);
  if (!p.loras.empty()) {
    w.Family("vllm:lora_requests_info", "gauge", "Running stats on lora requests.");
    w.Info("vllm:lora_requests_info",
           {{"max_lora", std::to_string(p.max_loras)},
            {"running_lora_adapters", Join(s.running_adapters)},
            {"waiting_lora_adapters", Join(s.waiting_adapters)}},
           wall_time_s);
    if (p.lora_loaded_metric) {
      w.Family("vllm:lora_adapter_loaded", "gauge", "LoRA adapters loaded, one series per adapter.");
      for (const std::string& a : s.resident_adapters)
        w.Info("vllm:lora_adapter_loaded", {{"adapter_name", a}, {"level", "gpu"}, {"pinned", "false"}}, 1.0);
    }
  }
  w.Family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
  w.Info("vllm:cache_config_info",
         {{"block_size", std::to_string(p.block_size)},
          {"cache_dtype", "auto"},
          {"enable_prefix_caching", "True"},
          {"num_gpu_blocks", std::to_string(p.kv_blocks)}},
         1.0);
  w.Counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
            static_cast<double>(s.prefix_query_tokens_total));
  w.Counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
            static_cast<double>(s.prefix_hit_tokens_total));
  w.Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", static_cast<double>(s.prompt_tokens_total));
  w.Counter("vllm:generation_tokens", "Number of generation tokens processed.",
            static_cast<double>(s.generation_tokens_total));
  w.Family("vllm:request_success_total", "counter", "Count of successfully processed requests.");
  w.Sample("vllm:request_success_total", static_cast<double>(s.requests_finished), {{"finished_reason", "length"}});
  w.Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", s.ttft_s);
  w.Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", s.e2e_s);
  w.Histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", s.queue_s);
  return w.Take();
}

std::string RenderDcgmMetrics(const SimParams& p, const SimSnapshot& s, const SimDcgmOptions& o) {
  const double occupancy = std::min(1.0, static_cast<double>(s.running + s.waiting) / std::max(1, p.max_running));
  const double util = std::round(100 * occupancy);
  // H100 80GB HBM3: 81559 MiB, 90% taken at start (weights and the preallocated KV cache).
  constexpr double kTotalMiB = 81559;
  const double used = std::round(kTotalMiB * 0.9);
  char uuid[64];
  std::snprintf(uuid, sizeof uuid, "GPU-%08x-5e1d-4a7c-9b1f-%012llx", static_cast<unsigned>(p.seed * 2654435761u + o.gpu),
                static_cast<unsigned long long>(p.seed + 1));
  internal::Labels labels = {{"gpu", std::to_string(o.gpu)},
                             {"UUID", uuid},
                             {"pci_bus_id", "00000000:" + std::to_string(10 + o.gpu) + ":00.0"},
                             {"device", "nvidia" + std::to_string(o.gpu)},
                             {"modelName", "NVIDIA H100 80GB HBM3"},
                             {"Hostname", o.hostname},
                             {"DCGM_FI_DRIVER_VERSION", "550.90.07"}};
  if (!o.pod.empty()) {
    labels.emplace_back("container", o.container);
    labels.emplace_back("namespace", o.ns);
    labels.emplace_back("pod", o.pod);
  }
  internal::Exposition x(internal::NumberStyle::kShortest);
  auto gauge = [&](const char* name, const char* help, double v) {
    x.Family(name, "gauge", help);
    x.Sample(name, labels, v);
  };
  gauge("DCGM_FI_DEV_SM_CLOCK", "SM frequency (in MHz).", util > 0 ? 1980 : 345);
  gauge("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", std::round(30 + 40 * occupancy));
  gauge("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", std::round((70 + 630 * occupancy) * 1000) / 1000);
  gauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", util);
  gauge("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", std::round(60 * occupancy));
  gauge("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", kTotalMiB - used);
  gauge("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", used);
  return x.Take();
}

}  // namespace epp
