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
#include "epp/http.h"
#include "epp/metrics.h"
#include "epp/status.h"

namespace epp {

struct CheckOptions {
  std::string engine = "auto";  // "auto" or an engine name (built-in or custom)
  // (field, spec) overrides applied to the chosen mapping, e.g. {"queue", "my_queue{pool=a}"}.
  std::vector<std::pair<std::string, std::string>> metric_overrides;
  std::vector<MetricMapping> custom_mappings;  // replace built-ins of the same name
  std::string metrics_path = "/metrics";
  std::chrono::milliseconds timeout = kDefaultHttpTimeout;
  bool insecure = false;
  std::string bearer_token;           // sent as "Authorization: Bearer <token>" when non-empty
  std::vector<std::string> headers;   // extra "Name: value" headers
  std::string model;                  // model for API probes; default: first of /v1/models
  bool lenient = false;               // skip malformed metric lines instead of failing
  bool api = true;                    // probe the OpenAI APIs of URL targets
  size_t max_body_bytes = kDefaultMaxBodyBytes;
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

// Validates `options` (unknown engine, bad spec or override: kInvalidArgument / kNotFound) and
// runs every check. Problems of a target are check results, never a failed Status.
absl::StatusOr<CheckReport> RunChecks(std::span<const std::string> targets, const CheckOptions& options);

// The report as JSON: {"status", "targets": [{"target", "engine", "status", "metrics":
// {"waiting_queue_size", "running_requests", "kv_cache_usage", "lora", "cache_block_size",
// "cache_num_blocks"}, "checks": [{"id", "status", "message"}], "elapsed_ms"}]}.
std::string CheckReportToJson(const CheckReport& report, int indent = 2);

// Builds the mapping RunChecks would use for `engine` (no detection): built-in or custom, then
// the overrides. Exposed for pyepp and tests.
absl::StatusOr<MetricMapping> ResolveMapping(std::string_view engine, const CheckOptions& options);

// Every mapping auto-detection considers: the built-ins (custom entries of the same name replace
// them), then the other custom engines, each with the overrides applied.
absl::StatusOr<std::vector<MetricMapping>> CandidateMappings(const CheckOptions& options);

// The engine RunChecks would use for these families: options.engine when it is not "auto",
// otherwise DetectEngine over CandidateMappings(); kNotFound naming the candidates when none fits.
absl::StatusOr<std::string> ResolveEngine(const MetricFamilies& families, const CheckOptions& options);

// Checks and normalises options in place: timeout >= 1 ms, max_body_bytes > 0, metrics_path
// starting with '/', headers of the form "Name: value" (spaces around the colon trimmed), a
// bearer token without surrounding whitespace (a blank one is an error).
// kInvalidArgument naming the option otherwise. RunChecks calls it on its own copy.
absl::Status NormalizeCheckOptions(CheckOptions& options);

}  // namespace epp
