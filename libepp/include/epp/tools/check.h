// `eppctl check`: does a model server expose what an Endpoint Picker needs?
//
// RunChecks() takes targets (base URLs such as http://10.0.0.7:8000, or paths of captured
// /metrics text), scrapes or reads each, validates the Model Server Protocol metrics and, for
// URLs, probes the OpenAI APIs the gateway will send. Every check has a stable id:
//   metrics.reachable metrics.parse metrics.engine metrics.queue metrics.running
//   metrics.kv_cache metrics.lora metrics.cache_info api.models api.completions api.chat
//   api.stream
// Network work for all targets runs concurrently from one thread (see http.h).
#pragma once

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "epp/endpoint.h"
#include "epp/runtime/http.h"
#include "epp/metrics.h"
#include "epp/status.h"

namespace epp {

// What a scrape reads (ScrapeOptions: engine, overrides, mappings, path, timeout, TLS, headers,
// lenient parsing, body cap) plus the API probes.
struct CheckOptions : ScrapeOptions {
  std::string model;  // model for API probes; default: first of /v1/models
  bool api = true;    // probe the OpenAI APIs of URL targets
};

struct TargetReport {
  std::string target;
  std::optional<std::string> engine;
  CheckStatus status = CheckStatus::kPass;
  EndpointMetrics metrics;
  std::vector<CheckResult> checks;
  double elapsed_ms = 0;
};

struct CheckReport {
  CheckStatus status = CheckStatus::kPass;  // worst over targets (skip counts as pass)
  std::vector<TargetReport> targets;
};

// Validates `options` (NormalizeScrapeOptions; unknown engine, bad spec or override:
// kInvalidArgument / kNotFound) and runs every check. Problems of a target are check results,
// never a failed Status.
absl::StatusOr<CheckReport> RunChecks(std::span<const std::string> targets, const CheckOptions& options);

// The report as JSON: {"status", "targets": [{"target", "engine", "status", "metrics":
// {"waiting_queue_size", "running_requests", "kv_cache_usage", "lora", "cache_block_size",
// "cache_num_blocks"}, "checks": [{"id", "status", "message"}], "elapsed_ms"}]}.
std::string CheckReportToJson(const CheckReport& report, int indent = 2);

}  // namespace epp
