// What a replay is given, resolved once for `eppctl replay` and pyepp.replay alike: trace files
// (format detection) and policy arguments (baseline names, YAML text, config files).
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/json.h"
#include "common/strings.h"
#include "epp/config.h"
#include "epp/tools/replay.h"
#include "replay/render.h"
#include "common/os_error.h"

namespace epp {

absl::StatusOr<TraceFormat> ParseTraceFormat(std::string_view name) {
  if (name == "auto" || name.empty()) return TraceFormat::kAuto;
  if (name == "mooncake") return TraceFormat::kMooncake;
  if (name == "openai") return TraceFormat::kOpenAI;
  if (name == "azure") return TraceFormat::kAzure;
  if (name == "burstgpt") return TraceFormat::kBurstGpt;
  return absl::InvalidArgumentError("trace format '" + std::string(name) +
                                    "': expected auto, mooncake, openai, azure or burstgpt");
}

absl::StatusOr<TraceFormat> DetectTraceFormat(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot read trace '" + path + "': " + internal::OsReason());
  std::string line;
  while (std::getline(in, line)) {
    if (internal::TrimSpace(line).empty()) continue;
    std::string lower = line;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower.find("contexttokens") != std::string::npos && lower.find("timestamp") != std::string::npos)
      return TraceFormat::kAzure;
    if (lower.find("request tokens") != std::string::npos && lower.find("timestamp") != std::string::npos)
      return TraceFormat::kBurstGpt;
    const nlohmann::json first = internal::ParseJsonOrDiscarded(line);
    return first.is_object() && first.contains("hash_ids") ? TraceFormat::kMooncake : TraceFormat::kOpenAI;
  }
  return TraceFormat::kOpenAI;  // empty: the loader gives an empty trace
}

absl::StatusOr<std::vector<ReplayRequest>> LoadReplayTrace(const std::string& path, TraceFormat format,
                                                           double time_scale) {
  if (format == TraceFormat::kAuto) {
    EPP_ASSIGN_OR_RETURN(format, DetectTraceFormat(path));
  }
  switch (format) {
    case TraceFormat::kMooncake: return LoadMooncakeTrace(path, time_scale);
    case TraceFormat::kAzure: return LoadAzureTrace(path, time_scale);
    case TraceFormat::kBurstGpt: return LoadBurstGptTrace(path, time_scale);
    default: return LoadOpenAITrace(path, time_scale);
  }
}

absl::StatusOr<std::vector<ReplayRequest>> LoadReplayTrace(const std::string& path, TraceFormat format, double time_scale,
                                                           const TraceArrivals& arrivals) {
  if (format == TraceFormat::kAuto) {
    EPP_ASSIGN_OR_RETURN(format, DetectTraceFormat(path));
  }
  std::vector<ReplayRequest> trace;
  if (format == TraceFormat::kOpenAI) {
    // Lines may lack an arrival time: they come in file order.
    EPP_ASSIGN_OR_RETURN(trace, replay_internal::LoadOpenAITraceLines(path, 1.0, false));
  } else {
    EPP_ASSIGN_OR_RETURN(trace, LoadReplayTrace(path, format, 1.0));
  }
  EPP_RETURN_IF_ERROR(AssignArrivals(trace, arrivals));
  if (time_scale != 1.0)
    for (ReplayRequest& r : trace) r.arrival_us = std::llround(static_cast<double>(r.arrival_us) * time_scale);
  return trace;
}

absl::StatusOr<std::vector<SimParams>> MixedSpeedServers(const SimParams& base, int servers, const std::vector<double>& speeds) {
  if (speeds.empty()) return absl::InvalidArgumentError("server speeds: give at least one");
  if (servers <= 0) return absl::InvalidArgumentError("servers must be > 0");
  for (size_t i = 0; i < speeds.size(); ++i)
    if (!(speeds[i] > 0) || !(speeds[i] <= 100))
      return absl::InvalidArgumentError(absl::StrCat("server speeds[", i, "]: must be in (0, 100], got ", speeds[i]));
  std::vector<SimParams> out(static_cast<size_t>(servers), base);
  for (size_t i = 0; i < out.size(); ++i) {
    const double s = speeds[i % speeds.size()];
    out[i].prefill_tokens_per_s *= s;
    out[i].decode_step_ms /= s;
    out[i].decode_ms_per_seq /= s;
  }
  return out;
}

absl::StatusOr<std::vector<double>> ParseServerSpeeds(std::string_view text) {
  std::vector<double> out;
  for (absl::string_view item : absl::StrSplit(absl::string_view(text.data(), text.size()), ',')) {
    const std::string it(internal::TrimSpace(std::string_view(item.data(), item.size())));
    double v = 0;
    if (!absl::SimpleAtod(it, &v) || !(v > 0) || !(v <= 100))
      return absl::InvalidArgumentError(absl::StrCat("--server-speed '", it, "': expected a speed in (0, 100], such as 0.5"));
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<ReplayPolicy> ResolveReplayPolicy(std::string_view spec, size_t index) {
  absl::StatusOr<ReplayPolicy> named = NamedReplayPolicy(spec);
  if (named.ok()) return named;
  const bool yaml = spec.find('\n') != std::string_view::npos || internal::TrimSpace(spec).substr(0, 1) == "{" ||
                    spec.find(": ") != std::string_view::npos;
  if (yaml) {
    ReplayPolicy p;
    p.name = "policy" + std::to_string(index + 1);
    EPP_ASSIGN_OR_RETURN(p.config, ParseConfig(spec, "policies[" + std::to_string(index) + "]"));
    return p;
  }
  const std::filesystem::path path{std::string(spec)};
  const std::string ext = path.extension().string();
  std::error_code ec;
  if (ext != ".yaml" && ext != ".yml" && ext != ".json" && !std::filesystem::is_regular_file(path, ec))
    return named.status();
  ReplayPolicy p;
  p.name = path.stem().string();
  EPP_ASSIGN_OR_RETURN(p.config, LoadConfigFile(path.string()));
  return p;
}

void MakePolicyNamesUnique(std::vector<ReplayPolicy>& policies) {
  for (size_t i = 1; i < policies.size(); ++i) {
    const std::string base = policies[i].name;
    auto taken = [&](const std::string& name) {
      return std::any_of(policies.begin(), policies.begin() + static_cast<std::ptrdiff_t>(i),
                         [&](const ReplayPolicy& q) { return q.name == name; });
    };
    for (int k = 2; taken(policies[i].name); ++k) policies[i].name = base + "#" + std::to_string(k);
  }
}

}  // namespace epp
