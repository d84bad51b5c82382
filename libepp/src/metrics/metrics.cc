// Extraction and validation of Model Server Protocol values from parsed families.
#include <cmath>
#include <cstdio>
#include <string>

#include "common/strings.h"
#include "epp/metrics.h"

namespace epp {

using internal::ShortestDouble;
using internal::TrimSpace;

std::string_view CheckStatusName(CheckStatus status) {
  switch (status) {
    case CheckStatus::kPass: return "pass";
    case CheckStatus::kWarn: return "warn";
    case CheckStatus::kFail: return "fail";
    case CheckStatus::kSkip: return "skip";
  }
  return "skip";
}

CheckStatus WorseStatus(CheckStatus a, CheckStatus b) {
  auto rank = [](CheckStatus s) {
    switch (s) {
      case CheckStatus::kSkip: return 0;
      case CheckStatus::kPass: return 1;
      case CheckStatus::kWarn: return 2;
      case CheckStatus::kFail: return 3;
    }
    return 0;
  };
  return rank(a) >= rank(b) ? a : b;
}

namespace {

std::string JoinNames(const std::vector<MetricSpec>& specs) {
  std::string out;
  for (const MetricSpec& s : specs) out += (out.empty() ? "" : ", ") + s.ToString();
  return out;
}

// The first candidate spec whose metric name occurs in the scrape, or nullptr.
const MetricSpec* FirstPresent(const MetricFamilies& families, const std::vector<MetricSpec>& candidates) {
  for (const MetricSpec& s : candidates) {
    if (!families.FindBySampleName(s.name).empty()) return &s;
  }
  return nullptr;
}

std::vector<const Sample*> Matching(const MetricFamilies& families, const MetricSpec& spec,
                                    const MetricFamily** family) {
  std::vector<const Sample*> out;
  for (const auto& [f, s] : families.SamplesNamed(spec.name)) {
    if (spec.Matches(*s)) {
      out.push_back(s);
      if (*family == nullptr) *family = f;
    }
  }
  if (*family == nullptr) {
    auto fams = families.FindBySampleName(spec.name);
    if (!fams.empty()) *family = fams.front();
  }
  return out;
}

enum class Combine { kSum, kMax };

// Reads one required gauge; returns the value when it passed validation.
std::optional<double> ReadGauge(const MetricFamilies& families, const std::vector<MetricSpec>& candidates,
                                const char* id, const char* what, Combine combine, bool fraction, bool describe,
                                std::vector<CheckResult>& checks) {
  CheckResult r{id, CheckStatus::kPass, ""};
  if (candidates.empty()) {
    checks.push_back({id, CheckStatus::kFail, std::string("no metric configured for ") + what});
    return std::nullopt;
  }
  const MetricSpec* spec = FirstPresent(families, candidates);
  if (spec == nullptr) {
    checks.push_back({id, CheckStatus::kFail,
                      std::string(what) + " missing: " +
                          (candidates.size() == 1 ? candidates[0].ToString() + " not found"
                                                  : "none of " + JoinNames(candidates) + " found")});
    return std::nullopt;
  }
  const MetricFamily* family = nullptr;
  std::vector<const Sample*> samples = Matching(families, *spec, &family);
  const std::string name = spec->ToString();
  if (family != nullptr && family->type != MetricType::kGauge && family->type != MetricType::kUntyped) {
    checks.push_back({id, CheckStatus::kFail,
                      name + " is a " + std::string(MetricTypeName(family->type)) +
                          " but the Model Server Protocol requires a gauge for " + what});
    return std::nullopt;
  }
  if (samples.empty()) {
    checks.push_back({id, CheckStatus::kFail, spec->name + " is present but no series matches " + name});
    return std::nullopt;
  }
  double total = combine == Combine::kSum ? 0 : -INFINITY;
  for (const Sample* s : samples) {
    if (!std::isfinite(s->value) || s->value < 0) {
      checks.push_back({id, CheckStatus::kFail,
                        name + " = " + ShortestDouble(s->value) + ": " + what + " must be finite and >= 0"});
      return std::nullopt;
    }
    total = combine == Combine::kSum ? total + s->value : std::max(total, s->value);
  }
  if (describe) {
    r.message = name + " = " + ShortestDouble(total);
    if (samples.size() > 1) {
      r.message += std::string(" (") + (combine == Combine::kSum ? "sum" : "max") + " of " +
                   std::to_string(samples.size()) + " series)";
    }
    if (spec != &candidates.front()) {
      r.message += " (older name; " + candidates.front().ToString() + " absent)";
    }
  }
  if (fraction) {
    if (total > 1 && total <= 100) {
      checks.push_back({id, CheckStatus::kFail,
                        name + " = " + ShortestDouble(total) + " looks like a percent; expected a fraction in [0,1]"});
      return std::nullopt;
    }
    if (total > 1) {
      checks.push_back({id, CheckStatus::kFail, name + " = " + ShortestDouble(total) + " is outside [0,1]"});
      return std::nullopt;
    }
  }
  if (family != nullptr && family->type == MetricType::kUntyped) {
    r.status = CheckStatus::kWarn;
    if (describe) r.message += " (no TYPE line: untyped, expected gauge)";
  }
  checks.push_back(std::move(r));
  return total;
}

std::vector<std::string> SplitAdapters(std::string_view s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t c = s.find(',', i);
    if (c == std::string_view::npos) c = s.size();
    std::string_view part = TrimSpace(s.substr(i, c - i));
    if (!part.empty()) out.emplace_back(part);
    i = c + 1;
  }
  return out;
}

// Cache geometry beyond 2^50 (a petabyte of blocks) is not a real server; the bound also keeps
// every product of two such values (capacity = blocks x block size) inside int64.
constexpr int64_t kMaxCacheValue = int64_t{1} << 50;

std::optional<int64_t> ParsePositiveInt(std::string_view s, bool allow_zero) {
  s = TrimSpace(s);
  if (s.empty()) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
    if (v > kMaxCacheValue) return std::nullopt;
  }
  if (!allow_zero && v == 0) return std::nullopt;
  return v;
}

// vllm:lora_adapter_loaded: one series per adapter in memory, `level` gpu or cpu. A series
// whose value is 0 is not counted (an exporter may keep a series at 0 instead of removing it).
// Returns false when the mapping names no such metric or the scrape has none.
bool ReadLoraResidency(const MetricFamilies& families, const MetricMapping& mapping, LoraInfo& info) {
  const MetricSpec* spec = FirstPresent(families, mapping.lora_loaded);
  if (spec == nullptr) return false;
  const MetricFamily* family = nullptr;
  for (const Sample* s : Matching(families, *spec, &family)) {
    if (s->value == 0) continue;
    std::optional<std::string_view> name = s->label("adapter_name");
    if (!name || name->empty()) continue;
    std::vector<std::string>& list = s->label("level").value_or("gpu") == "cpu" ? info.loaded_cpu : info.loaded;
    if (std::find(list.begin(), list.end(), *name) == list.end()) list.emplace_back(*name);
  }
  return true;
}

void ReadLora(const MetricFamilies& families, const MetricMapping& mapping, bool describe, MetricsExtraction& out) {
  const char* id = "metrics.lora";
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
    return "[" + s + "]";
  };
  LoraInfo info;
  const bool residency = ReadLoraResidency(families, mapping, info);
  auto residency_text = [&] {
    return residency ? ", loaded " + join(info.loaded) + ", in CPU memory " + join(info.loaded_cpu) : std::string();
  };
  const MetricSpec* spec = FirstPresent(families, mapping.lora);
  if (spec == nullptr) {
    if (residency) {  // residency alone: which adapters are active, but not how many fit
      out.checks.push_back({id, CheckStatus::kPass,
                            describe ? JoinNames(mapping.lora_loaded) + ": max_lora unknown" + residency_text() : ""});
      out.metrics.lora = std::move(info);
      return;
    }
    out.checks.push_back({id, CheckStatus::kWarn,
                          !describe              ? std::string()
                          : mapping.lora.empty() ? "no LoRA metric for engine " + mapping.engine
                                                 : JoinNames(mapping.lora) + " absent (LoRA affinity unavailable)"});
    return;
  }
  const MetricFamily* family = nullptr;
  std::vector<const Sample*> samples = Matching(families, *spec, &family);
  if (samples.empty()) {
    out.checks.push_back({id, CheckStatus::kWarn, describe ? "no series matches " + spec->ToString() : std::string()});
    return;
  }
  // Each label permutation is its own series; the value is its update time, so the newest wins.
  const Sample* best = samples.front();
  for (const Sample* s : samples) {
    if (s->value > best->value) best = s;
  }
  auto max_lora = best->label("max_lora");
  if (!max_lora) {
    out.checks.push_back({id, CheckStatus::kFail, spec->name + " has no max_lora label"});
    return;
  }
  auto parsed = ParsePositiveInt(*max_lora, /*allow_zero=*/true);
  if (!parsed) {
    out.checks.push_back({id, CheckStatus::kFail,
                          spec->name + ": max_lora '" + std::string(*max_lora) + "' is not a non-negative integer"});
    return;
  }
  info.max_lora = *parsed;
  info.running = SplitAdapters(best->label("running_lora_adapters").value_or(""));
  info.waiting = SplitAdapters(best->label("waiting_lora_adapters").value_or(""));
  std::string msg;
  if (describe) {
    msg = spec->name + ": max_lora " + std::to_string(info.max_lora) + ", running " + join(info.running) + ", waiting " +
          join(info.waiting) + residency_text() + ", slots in use " + std::to_string(info.SlotsInUse());
    if (samples.size() > 1) msg += " (newest of " + std::to_string(samples.size()) + " series)";
  }
  out.checks.push_back({id, CheckStatus::kPass, msg});
  out.metrics.lora = std::move(info);
}

void ReadCacheInfo(const MetricFamilies& families, const MetricMapping& mapping, bool describe, MetricsExtraction& out) {
  const char* id = "metrics.cache_info";
  std::optional<int64_t> size, blocks;
  std::string source;
  if (const MetricSpec* spec = FirstPresent(families, mapping.cache_info)) {
    const MetricFamily* family = nullptr;
    std::vector<const Sample*> samples = Matching(families, *spec, &family);
    if (samples.empty()) {
      out.checks.push_back({id, CheckStatus::kWarn, describe ? "no series matches " + spec->ToString() : std::string()});
      return;
    }
    const Sample* s = samples.front();
    auto bs = s->label(mapping.cache_block_size_label);
    auto nb = s->label(mapping.cache_num_blocks_label);
    if (!bs || !nb) {
      out.checks.push_back({id, CheckStatus::kFail,
                            spec->name + " lacks label " + (bs ? mapping.cache_num_blocks_label : mapping.cache_block_size_label)});
      return;
    }
    size = ParsePositiveInt(*bs, false);
    blocks = ParsePositiveInt(*nb, false);
    if (!size || !blocks) {
      out.checks.push_back({id, CheckStatus::kFail,
                            spec->name + ": " + mapping.cache_block_size_label + "='" + std::string(*bs) + "', " +
                                mapping.cache_num_blocks_label + "='" + std::string(*nb) +
                                "' must be positive integers up to 2^50"});
      return;
    }
    source = spec->name;
  } else {
    const MetricSpec* bs = FirstPresent(families, mapping.cache_block_size);
    const MetricSpec* nb = FirstPresent(families, mapping.cache_num_blocks);
    if ((bs == nullptr || nb == nullptr) && !describe) {
      out.checks.push_back({id, CheckStatus::kWarn, std::string()});
      return;
    }
    if (bs == nullptr || nb == nullptr) {
      std::vector<MetricSpec> all = mapping.cache_info;
      all.insert(all.end(), mapping.cache_block_size.begin(), mapping.cache_block_size.end());
      out.checks.push_back({id, CheckStatus::kWarn,
                            all.empty() ? "no cache-info metric for engine " + mapping.engine
                                        : JoinNames(all) + " absent (prefix-cache auto-tuning unavailable)"});
      return;
    }
    auto value_of = [&](const MetricSpec& spec) -> std::optional<int64_t> {
      const MetricFamily* family = nullptr;
      for (const Sample* s : Matching(families, spec, &family)) {
        // Checked before the cast: a gauge near or above 2^63 would be undefined behaviour.
        if (std::isfinite(s->value) && s->value >= 1 && s->value <= static_cast<double>(kMaxCacheValue) &&
            s->value == std::floor(s->value)) {
          return static_cast<int64_t>(s->value);
        }
        return std::nullopt;
      }
      return std::nullopt;
    };
    size = value_of(*bs);
    blocks = value_of(*nb);
    if (!size || !blocks) {
      out.checks.push_back({id, CheckStatus::kFail,
                            bs->ToString() + " / " + nb->ToString() + " must be positive integers up to 2^50"});
      return;
    }
    source = bs->name;
  }
  out.metrics.cache_block_size = size;
  out.metrics.cache_num_blocks = blocks;
  out.checks.push_back({id, CheckStatus::kPass,
                        describe ? source + ": block size " + std::to_string(*size) + ", blocks " + std::to_string(*blocks)
                                 : std::string()});
}

// customMetrics: of the series matching each spec, the one with the latest timestamp (the first
// when none has one), as llm-d's core-metrics-extractor takes it. Absent is a warning.
void ReadCustom(const MetricFamilies& families, const MetricMapping& mapping, bool describe, MetricsExtraction& out) {
  for (const auto& [key, spec] : mapping.custom) {
    const std::string id = "metrics.custom." + key;
    const MetricFamily* family = nullptr;
    const Sample* latest = nullptr;
    for (const Sample* s : Matching(families, spec, &family)) {
      if (latest == nullptr || s->timestamp_ms.value_or(0) > latest->timestamp_ms.value_or(0)) latest = s;
    }
    if (latest == nullptr) {
      out.checks.push_back({id, CheckStatus::kWarn,
                            "attribute " + key + ": " + spec.ToString() + (family ? ": no series matches" : " not found")});
      continue;
    }
    if (!std::isfinite(latest->value)) {
      out.checks.push_back({id, CheckStatus::kFail, "attribute " + key + ": " + spec.ToString() + " = " +
                                                        ShortestDouble(latest->value) + " is not finite"});
      continue;
    }
    out.metrics.custom.emplace_back(key, latest->value);
    out.checks.push_back({id, CheckStatus::kPass,
                          describe ? "attribute " + key + ": " + spec.ToString() + " = " + ShortestDouble(latest->value)
                                   : std::string()});
  }
}

}  // namespace

MetricsExtraction ExtractMetrics(const MetricFamilies& families, const MetricMapping& mapping, bool describe) {
  MetricsExtraction out;
  out.metrics.waiting_queue_size = ReadGauge(families, mapping.queue, "metrics.queue", "waiting queue size",
                                             Combine::kSum, false, describe, out.checks);
  out.metrics.running_requests = ReadGauge(families, mapping.running, "metrics.running", "running requests",
                                           Combine::kSum, false, describe, out.checks);
  out.metrics.kv_cache_usage = ReadGauge(families, mapping.kv_usage, "metrics.kv_cache", "KV-cache usage",
                                         Combine::kMax, true, describe, out.checks);
  ReadLora(families, mapping, describe, out);
  ReadCacheInfo(families, mapping, describe, out);
  ReadCustom(families, mapping, describe, out);
  return out;
}

}  // namespace epp
