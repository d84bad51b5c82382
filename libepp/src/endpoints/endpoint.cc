// ValidateEndpointMetrics and ShiftMetricsTimes (epp/endpoint.h).
#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "epp/endpoint.h"

namespace epp {
namespace {

// %g-style text of a value for messages ("44", "0.5", "nan", "inf").
std::string Num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return absl::StrCat(v);
}

absl::Status CheckCount(const std::optional<double>& v, const char* name) {
  if (v && !(*v >= 0 && std::isfinite(*v)))
    return absl::InvalidArgumentError(absl::StrCat("metrics.", name, ": must be a finite number >= 0, got ", Num(*v)));
  return absl::OkStatus();
}

absl::Status CheckNames(const std::vector<std::string>& names, const char* list) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i].empty())
      return absl::InvalidArgumentError(absl::StrCat("metrics.lora.", list, "[", i, "]: an adapter name must not be empty"));
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateEndpointMetrics(const EndpointMetrics& m) {
  if (absl::Status s = CheckCount(m.waiting_queue_size, "waiting_queue_size"); !s.ok()) return s;
  if (absl::Status s = CheckCount(m.running_requests, "running_requests"); !s.ok()) return s;
  // A percentage (44 for 44%) is the usual mistake; the scorers read a fraction.
  if (m.kv_cache_usage && !(*m.kv_cache_usage >= 0 && *m.kv_cache_usage <= 1))
    return absl::InvalidArgumentError(absl::StrCat("metrics.kv_cache_usage: must be in [0, 1], got ", Num(*m.kv_cache_usage)));
  if (m.cache_block_size && *m.cache_block_size < 0)
    return absl::InvalidArgumentError(absl::StrCat("metrics.cache_block_size: must be >= 0, got ", *m.cache_block_size));
  if (m.cache_num_blocks && *m.cache_num_blocks < 0)
    return absl::InvalidArgumentError(absl::StrCat("metrics.cache_num_blocks: must be >= 0, got ", *m.cache_num_blocks));
  if (m.lora) {
    if (m.lora->max_lora < 0)
      return absl::InvalidArgumentError(absl::StrCat("metrics.lora.max_lora: must be >= 0, got ", m.lora->max_lora));
    if (absl::Status s = CheckNames(m.lora->running, "running"); !s.ok()) return s;
    if (absl::Status s = CheckNames(m.lora->waiting, "waiting"); !s.ok()) return s;
    if (absl::Status s = CheckNames(m.lora->loaded, "loaded"); !s.ok()) return s;
    if (absl::Status s = CheckNames(m.lora->loaded_cpu, "loaded_cpu"); !s.ok()) return s;
  }
  for (size_t i = 0; i < m.custom.size(); ++i) {
    const auto& [key, value] = m.custom[i];
    if (key.empty()) return absl::InvalidArgumentError(absl::StrCat("metrics.attributes[", i, "]: empty attribute key"));
    if (!std::isfinite(value))
      return absl::InvalidArgumentError(absl::StrCat("metrics.attributes.", key, ": must be finite, got ", Num(value)));
    for (size_t j = 0; j < i; ++j)
      if (m.custom[j].first == key) return absl::InvalidArgumentError(absl::StrCat("metrics.attributes.", key, ": given twice"));
  }
  return absl::OkStatus();
}

int64_t LoraInfo::SlotsInUse() const {
  std::vector<std::string_view> seen;
  for (const auto* list : {&running, &waiting, &loaded})
    for (const std::string& a : *list)
      if (std::find(seen.begin(), seen.end(), a) == seen.end()) seen.push_back(a);
  return static_cast<int64_t>(seen.size());
}

bool LoraInfo::Active(std::string_view adapter) const {
  return std::find(running.begin(), running.end(), adapter) != running.end() ||
         std::find(loaded.begin(), loaded.end(), adapter) != loaded.end();
}

void ShiftMetricsTimes(std::span<Endpoint> endpoints, int64_t delta_us) {
  for (Endpoint& e : endpoints)
    if (e.metrics_time_us) *e.metrics_time_us += delta_us;
}

}  // namespace epp
