// Lint for InferencePool deployments: Kubernetes YAML (multi-document files, kustomize and Helm
// template output) checked for the wiring mistakes that otherwise show up only at run time as a
// 500, a 503 or silent round robin. Works on epp's own manifests (deploy/) and on the reference
// EPP's (GIE / llm-d-router flags). The rules are listed by LintRules() and in docs/lint.md, each
// with the facts it rests on.
//
// What is recognised: InferencePool (inference.networking.k8s.io/v1 and the older
// inference.networking.x-k8s.io/v1alpha2), HTTPRoute, Deployment / StatefulSet / DaemonSet / Pod
// (the EPP: a container with --pool-name or --endpoint-selector, or `eppctl serve`; model servers:
// everything else), Service, ServiceAccount, Role / ClusterRole and their bindings, ConfigMap (the
// EPP's config), Envoy Gateway's EnvoyGateway configuration and EnvoyExtensionPolicy. Documents
// without apiVersion and kind (an Envoy bootstrap, a values file) are skipped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "epp/status.h"

namespace epp {

enum class LintSeverity { kError, kWarning, kInfo };
std::string_view LintSeverityName(LintSeverity s);  // "error", "warning", "info"

struct LintFinding {
  std::string rule;  // e.g. "EPP001"
  LintSeverity severity = LintSeverity::kError;
  std::string file;
  int line = 0;        // 1-based; 0 when the finding is about the bundle as a whole
  std::string object;  // "InferencePool ns/name"
  std::string message;
  std::string fix;
  std::vector<std::string> gateways;  // the gateways the harm depends on; empty: all
};

struct LintRule {
  std::string id;
  LintSeverity severity;  // the usual severity (some rules also report a lesser one)
  std::string summary;
};
const std::vector<LintRule>& LintRules();

struct LintReport {
  std::vector<std::string> files;
  int objects = 0;  // Kubernetes objects read
  std::vector<LintFinding> findings;
  int count(LintSeverity s) const;
};

// Files, or directories read recursively (*.yaml, *.yml, *.json). kNotFound for a path that does
// not exist; unparsable YAML is a finding (LINT001), not an error.
absl::StatusOr<LintReport> LintPaths(const std::vector<std::string>& paths);
// One document stream (for tests and pyepp); `file` names it in findings.
LintReport LintText(std::string_view yaml, std::string_view file);

std::string FormatLintText(const LintReport& r);
std::string FormatLintJson(const LintReport& r);
std::string FormatLintSarif(const LintReport& r);  // SARIF 2.1.0

}  // namespace epp
