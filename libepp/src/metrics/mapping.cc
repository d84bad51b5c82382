// Built-in engine mappings (facts: the Model Server Protocol table in GIE's
// docs/proposals/003-model-server-protocol and the engines' own metric names), overrides,
// YAML-defined mappings and engine detection.
#include <algorithm>
#include <string>

#include "epp/metrics.h"

namespace epp {
namespace {

std::vector<MetricSpec> Specs(std::initializer_list<const char*> texts) {
  std::vector<MetricSpec> out;
  for (const char* t : texts) out.push_back(*MetricSpec::Parse(t));  // literals: always valid
  return out;
}

std::vector<MetricMapping> MakeBuiltIns() {
  std::vector<MetricMapping> out;
  {
    MetricMapping m;
    m.engine = "vllm";
    m.queue = Specs({"vllm:num_requests_waiting"});
    m.running = Specs({"vllm:num_requests_running"});
    // vLLM renamed the KV gauge; GIE switched defaults in v1.3.0 (PR #1905).
    m.kv_usage = Specs({"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"});
    m.lora = Specs({"vllm:lora_requests_info"});
    m.lora_loaded = Specs({"vllm:lora_adapter_loaded"});
    m.cache_info = Specs({"vllm:cache_config_info"});
    m.cache_block_size_label = "block_size";
    m.cache_num_blocks_label = "num_gpu_blocks";
    out.push_back(std::move(m));
  }
  {
    MetricMapping m;
    m.engine = "sglang";
    // SGLang before 2025 named these num_requests_waiting / num_requests_running.
    m.queue = Specs({"sglang:num_queue_reqs", "sglang:num_requests_waiting"});
    m.running = Specs({"sglang:num_running_reqs", "sglang:num_requests_running"});
    m.kv_usage = Specs({"sglang:token_usage"});
    m.cache_info = Specs({"sglang:cache_config_info"});
    m.cache_block_size_label = "page_size";
    m.cache_num_blocks_label = "num_pages";
    out.push_back(std::move(m));
  }
  {
    MetricMapping m;
    m.engine = "trtllm-serve";
    m.queue = Specs({"trtllm_num_requests_waiting"});
    m.running = Specs({"trtllm_num_requests_running"});
    m.kv_usage = Specs({"trtllm_kv_cache_utilization"});
    m.cache_block_size = Specs({"trtllm_kv_cache_tokens_per_block"});
    m.cache_num_blocks = Specs({"trtllm_kv_cache_max_blocks"});
    out.push_back(std::move(m));
  }
  {
    MetricMapping m;
    m.engine = "triton-tensorrt-llm";
    m.queue = Specs({"nv_trt_llm_request_metrics{request_type=waiting}"});
    m.running = Specs({"nv_trt_llm_request_metrics{request_type=scheduled}"});
    m.kv_usage = Specs({"nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=fraction}"});
    m.cache_block_size = Specs({"nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=tokens_per}"});
    m.cache_num_blocks = Specs({"nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=max}"});
    out.push_back(std::move(m));
  }
  {
    // A pool behind its gateway, read from that pool's EPP. llm-d's names first (the ones it
    // keeps), GIE's deprecated ones second; epp's serve publishes both.
    MetricMapping m;
    m.engine = std::string(kPoolEngine);
    m.queue = Specs({"llm_d_epp_average_queue_size", "inference_pool_average_queue_size"});
    m.running = Specs({"inference_pool_average_running_requests"});
    m.kv_usage = Specs({"llm_d_epp_average_kv_cache_utilization", "inference_pool_average_kv_cache_utilization"});
    m.custom.emplace_back(std::string(kReadyPodsAttribute), *MetricSpec::Parse("inference_pool_ready_pods"));
    out.push_back(std::move(m));
  }
  return out;
}

const std::vector<MetricMapping>& BuiltIns() {
  static const std::vector<MetricMapping>* const kBuiltIns = new std::vector<MetricMapping>(MakeBuiltIns());
  return *kBuiltIns;
}

}  // namespace

absl::StatusOr<MetricMapping> MetricMapping::BuiltIn(std::string_view engine) {
  for (const MetricMapping& m : BuiltIns()) {
    if (m.engine == engine) return m;
  }
  std::string known;
  for (const std::string& n : BuiltInEngines()) known += (known.empty() ? "" : ", ") + n;
  return absl::NotFoundError("unknown engine '" + std::string(engine) + "' (known: " + known + ")");
}

std::vector<std::string> MetricMapping::BuiltInEngines() {
  std::vector<std::string> out;
  for (const MetricMapping& m : BuiltIns()) out.push_back(m.engine);
  return out;
}

absl::Status ApplyMetricOverride(MetricMapping& mapping, std::string_view field, std::string_view spec_text) {
  EPP_ASSIGN_OR_RETURN(MetricSpec spec, MetricSpec::Parse(spec_text));
  std::vector<MetricSpec>* target = nullptr;
  if (field == "queue") target = &mapping.queue;
  else if (field == "running") target = &mapping.running;
  else if (field == "kv") target = &mapping.kv_usage;
  else if (field == "lora") target = &mapping.lora;
  else if (field == "lora-loaded") target = &mapping.lora_loaded;
  else if (field == "cache-info") target = &mapping.cache_info;
  else if (field == "cache-block-size") target = &mapping.cache_block_size;
  else if (field == "cache-num-blocks") target = &mapping.cache_num_blocks;
  if (target == nullptr) {
    return absl::InvalidArgumentError(
        "unknown metric field '" + std::string(field) +
        "' (known: queue, running, kv, lora, lora-loaded, cache-info, cache-block-size, cache-num-blocks)");
  }
  *target = {std::move(spec)};
  return absl::OkStatus();
}

std::optional<std::string> DetectEngine(const MetricFamilies& families,
                                        std::span<const MetricMapping> candidates) {
  int best = 0;
  std::optional<std::string> winner;
  for (const MetricMapping& m : candidates) {
    int count = 0;
    for (const auto* list : {&m.queue, &m.running, &m.kv_usage}) {
      for (const MetricSpec& s : *list) {
        if (!families.FindBySampleName(s.name).empty()) ++count;
      }
    }
    if (count > best) {
      best = count;
      winner = m.engine;
    }
  }
  return winner;
}

std::optional<std::string> DetectEngine(const MetricFamilies& families) {
  return DetectEngine(families, BuiltIns());
}

absl::Status SetMappingField(MetricMapping& m, std::string_view key, std::string_view val) {
  auto spec_field = [&](std::vector<MetricSpec>& target) -> absl::Status {
    if (val.empty()) {  // an empty spec disables the metric, as in GIE
      target.clear();
      return absl::OkStatus();
    }
    EPP_ASSIGN_OR_RETURN(MetricSpec spec, MetricSpec::Parse(val));
    target = {std::move(spec)};
    return absl::OkStatus();
  };
  if (key == "queuedRequestsSpec") return spec_field(m.queue);
  if (key == "runningRequestsSpec") return spec_field(m.running);
  if (key == "kvUsageSpec") return spec_field(m.kv_usage);
  if (key == "loraSpec") return spec_field(m.lora);
  if (key == "cacheInfoSpec") return spec_field(m.cache_info);
  if (key == "cacheBlockSizeSpec") return spec_field(m.cache_block_size);
  if (key == "cacheNumBlocksSpec") return spec_field(m.cache_num_blocks);
  if (key == "cacheBlockSizeLabelName") {
    m.cache_block_size_label = val.empty() ? "block_size" : std::string(val);
    return absl::OkStatus();
  }
  if (key == "cacheNumBlocksLabelName") {
    m.cache_num_blocks_label = val.empty() ? "num_gpu_blocks" : std::string(val);
    return absl::OkStatus();
  }
  return absl::NotFoundError("unknown key");
}

absl::Status AddCustomMetric(MetricMapping& m, std::string_view attribute_key, std::string_view spec_text) {
  if (attribute_key.empty()) return absl::InvalidArgumentError("attributeKey cannot be empty");
  for (const auto& [k, spec] : m.custom)
    if (k == attribute_key) return absl::InvalidArgumentError("duplicate attributeKey '" + std::string(attribute_key) + "'");
  if (spec_text.empty()) return absl::InvalidArgumentError("metricSpec cannot be empty");
  EPP_ASSIGN_OR_RETURN(MetricSpec spec, MetricSpec::Parse(spec_text));
  m.custom.emplace_back(std::string(attribute_key), std::move(spec));
  return absl::OkStatus();
}

}  // namespace epp
