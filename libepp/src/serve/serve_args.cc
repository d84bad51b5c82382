// BuildServeConfig: ServeArgs (what an operator writes) -> ServeConfig (what EppServer runs).
// Each group of settings is one step; every error starts with the setting's name.
#include "epp/runtime/serve_args.h"

#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "epp/runtime/endpoints.h"
#include "epp/runtime/kube.h"
#include "epp/params.h"

namespace epp {
namespace {

using Micros = std::chrono::microseconds;

absl::StatusOr<Micros> Duration(std::string_view setting, const std::string& text, bool allow_zero) {
  absl::StatusOr<int64_t> us = ParseDurationMicros(text);
  if (!us.ok()) return absl::InvalidArgumentError(absl::StrCat(std::string(setting), ": ", std::string(us.status().message())));
  if (*us < 0 || (*us == 0 && !allow_zero))
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(setting), ": must be ", allow_zero ? ">= 0" : "> 0", ", got '", text, "'"));
  return Micros(*us);
}

std::chrono::milliseconds CeilMillis(Micros us) { return std::chrono::ceil<std::chrono::milliseconds>(us); }

absl::StatusOr<std::string> ReadWhole(std::string_view setting, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(std::string(setting), ": cannot read ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// "NAME=PRIORITY" (the last '=' splits, so a name may hold one).
absl::Status ParseObjectives(const std::vector<std::string>& flags, std::map<std::string, int, std::less<>>& out) {
  for (const std::string& f : flags) {
    const size_t eq = f.rfind('=');
    const std::string name = eq == std::string::npos ? "" : f.substr(0, eq);
    int priority = 0;
    const char* begin = f.data() + (eq == std::string::npos ? f.size() : eq + 1);
    const char* end = f.data() + f.size();
    auto [ptr, ec] = std::from_chars(begin, end, priority);
    if (name.empty() || begin == end || ec != std::errc() || ptr != end)
      return absl::InvalidArgumentError("objective_flags '" + f +
                                        "': expected NAME=PRIORITY with an integer priority (negative = sheddable)");
    out[name] = priority;
  }
  return absl::OkStatus();
}

KubeClientOptions Kube(const ServeArgs& a) {
  KubeClientOptions k;
  k.api_server = a.kube_api_server;
  k.token_file = a.kube_token_file;
  k.ca_file = a.kube_ca_file;
  k.insecure_skip_verify = a.kube_insecure_skip_verify;
  return k;
}

// Where the endpoints come from: flags, a file, an InferencePool's Pods, an InferencePoolImport.
absl::Status Endpoints(const ServeArgs& a, ServeConfig& c) {
  c.endpoints_file = a.endpoints_file;
  for (size_t i = 0; i < a.endpoint_flags.size(); ++i) {
    EPP_ASSIGN_OR_RETURN(EndpointSpec spec, ParseEndpointFlag(a.endpoint_flags[i], static_cast<int>(i + 1)));
    c.endpoints.push_back(std::move(spec));
  }
  if (a.pool_group != kInferencePoolGroupV1 && a.pool_group != kInferencePoolGroupV1Alpha2)
    return absl::InvalidArgumentError(absl::StrCat("pool_group: '", a.pool_group, "' is neither ", std::string(kInferencePoolGroupV1),
                                                   " (v1) nor ", std::string(kInferencePoolGroupV1Alpha2), " (v1alpha2)"));
  if (!a.pool_import.empty()) {
    if (!a.endpoints_file.empty()) return absl::InvalidArgumentError("pool_import and endpoints_file cannot be combined");
    if (a.pool_name) return absl::InvalidArgumentError("pool_import and pool_name cannot be combined");
    if (a.clusters_file.empty())
      return absl::InvalidArgumentError(
          "pool_import needs clusters_file FILE: the gateway and EPP metrics URL of each cluster");
    PoolImportDiscoveryOptions d;
    d.name = a.pool_import;
    d.ns = PoolNamespace(a.pool_namespace);
    EPP_ASSIGN_OR_RETURN(d.clusters, LoadEndpointsFile(a.clusters_file));
    d.cluster_label = a.cluster_label;
    EPP_ASSIGN_OR_RETURN(d.interval, Duration("pool_resync_interval", a.pool_resync_interval, false));
    d.kube = Kube(a);
    c.import_discovery = std::move(d);
  } else if (!a.clusters_file.empty()) {
    return absl::InvalidArgumentError("clusters_file is the cluster directory of pool_import; give pool_import NAME");
  }
  if (a.pool_name && a.endpoints_file.empty()) {
    PoolDiscoveryOptions d;
    d.name = *a.pool_name;
    d.group = a.pool_group;
    d.ns = PoolNamespace(a.pool_namespace);
    EPP_ASSIGN_OR_RETURN(d.interval, Duration("pool_resync_interval", a.pool_resync_interval, false));
    d.kube = Kube(a);
    c.discovery = std::move(d);
  }
  return absl::OkStatus();
}

// How metrics are read and when they count as stale.
absl::Status Metrics(const ServeArgs& a, ServeConfig& c) {
  c.engine = a.engine;
  EPP_ASSIGN_OR_RETURN(c.refresh_interval, Duration("refresh_metrics_interval", a.refresh_metrics_interval, false));
  EPP_ASSIGN_OR_RETURN(c.scrape_timeout, Duration("scrape_timeout", a.scrape_timeout, false));
  EPP_ASSIGN_OR_RETURN(c.staleness, Duration("metrics_staleness_threshold", a.metrics_staleness_threshold, false));
  if (a.detector_staleness) {
    EPP_ASSIGN_OR_RETURN(c.detector_staleness, Duration("detector_staleness", *a.detector_staleness, false));
  }
  c.scrape_gzip = a.scrape_gzip;
  c.pool_name = !a.metrics_pool_name.empty() ? a.metrics_pool_name : a.pool_name.value_or("default");
  return absl::OkStatus();
}

// Ports and TLS material.
absl::Status Servers(const ServeArgs& a, ServeConfig& c) {
  const std::pair<std::string_view, int> ports[] = {
      {"grpc_port", a.grpc_port}, {"grpc_health_port", a.grpc_health_port}, {"metrics_port", a.metrics_port}};
  for (const auto& [name, port] : ports) {
    const int lowest = name == "grpc_port" ? 0 : -1;
    if (port < lowest || port > 65535)
      return absl::InvalidArgumentError(absl::StrCat(std::string(name), ": must be in [", lowest, ", 65535], got ", port));
  }
  if (a.listen_address.empty()) return absl::InvalidArgumentError("listen_address: must not be empty");
  c.listen_address = a.listen_address;
  c.grpc_port = a.grpc_port;
  c.health_port = a.grpc_health_port;
  c.metrics_port = a.metrics_port;
  c.tls = a.secure_serving;
  if (a.secure_serving && !a.cert_path.empty()) {
    EPP_ASSIGN_OR_RETURN(c.cert_pem, ReadWhole("cert_path", a.cert_path + "/tls.crt"));
    EPP_ASSIGN_OR_RETURN(c.key_pem, ReadWhole("cert_path", a.cert_path + "/tls.key"));
    c.tls_source = a.cert_path;
  }
  return absl::OkStatus();
}

// Per-stream limits and what the answer carries.
absl::Status Streams(const ServeArgs& a, ServeConfig& c) {
  if (a.max_request_bytes == 0) return absl::InvalidArgumentError("max_request_bytes: must be > 0");
  c.session.max_request_bytes = a.max_request_bytes;
  c.session.ignore_subset_hint = a.disable_endpoint_subset_filter;
  c.session.emit_endpoint_scores = a.emit_endpoint_scores;
  EPP_ASSIGN_OR_RETURN(Micros request, Duration("stream_request_timeout", a.stream_request_timeout, true));
  EPP_ASSIGN_OR_RETURN(Micros idle, Duration("stream_idle_timeout", a.stream_idle_timeout, true));
  EPP_ASSIGN_OR_RETURN(Micros handshake, Duration("handshake_timeout", a.handshake_timeout, false));
  c.session.request_timeout = CeilMillis(request);
  c.session.idle_timeout = CeilMillis(idle);
  c.session.handshake_timeout = CeilMillis(handshake);
  EPP_RETURN_IF_ERROR(ParseObjectives(a.objective_flags, c.session.objective_priorities));
  if (!a.capture_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(a.capture_dir, ec);
    if (ec) return absl::InvalidArgumentError("capture_dir " + a.capture_dir + ": " + ec.message());
    c.capture_dir = a.capture_dir;
  }
  return absl::OkStatus();
}

absl::Status Decisions(const ServeArgs& a, ServeConfig& c) {
  if (a.decision_log < 0 || a.decision_log > kMaxDecisionLog)
    return absl::InvalidArgumentError(
        absl::StrCat("decision_log: must be in [0, ", kMaxDecisionLog, "], got ", a.decision_log));
  if (a.decision_log_rate < 1)
    return absl::InvalidArgumentError(absl::StrCat("decision_log_rate: must be >= 1, got ", a.decision_log_rate));
  c.decision_log.capacity = static_cast<size_t>(a.decision_log);
  c.decision_log.max_per_second = a.decision_log_rate;
  c.decision_log.include_prompt = a.decision_log_prompts;
  return absl::OkStatus();
}

bool WordChar(char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-'; }

}  // namespace

absl::StatusOr<ServeConfig> BuildServeConfig(const ServeArgs& args) {
  ServeConfig c;
  c.config_file = args.config_file;
  c.watch_config = args.watch_config;
  c.seed = args.seed;
  c.region = args.region;
  c.zone = args.zone;
  EPP_RETURN_IF_ERROR(Endpoints(args, c));
  EPP_RETURN_IF_ERROR(Metrics(args, c));
  EPP_RETURN_IF_ERROR(Servers(args, c));
  EPP_RETURN_IF_ERROR(Streams(args, c));
  EPP_RETURN_IF_ERROR(Decisions(args, c));
  return c;
}

const std::vector<std::string_view>& ServeSettingNames() {
  static const std::vector<std::string_view> names = {
      "config_file", "watch_config", "endpoints_file", "endpoint_flags", "pool_name", "pool_namespace", "pool_group",
      "pool_resync_interval", "pool_import", "clusters_file", "cluster_label", "kube_api_server", "kube_token_file",
      "kube_ca_file", "kube_insecure_skip_verify", "refresh_metrics_interval", "scrape_timeout", "scrape_gzip",
      "metrics_staleness_threshold", "detector_staleness", "metrics_pool_name", "listen_address", "grpc_port",
      "grpc_health_port", "metrics_port", "secure_serving", "cert_path", "max_request_bytes", "stream_request_timeout",
      "stream_idle_timeout", "handshake_timeout", "objective_flags", "disable_endpoint_subset_filter",
      "emit_endpoint_scores", "capture_dir", "decision_log", "decision_log_rate", "decision_log_prompts"};
  return names;
}

std::string RenameServeSettings(std::string_view message, const std::map<std::string, std::string, std::less<>>& names) {
  std::string out;
  out.reserve(message.size() + 16);
  size_t i = 0;
  while (i < message.size()) {
    if (!WordChar(message[i])) {
      out += message[i++];
      continue;
    }
    size_t j = i;
    while (j < message.size() && WordChar(message[j])) ++j;
    const std::string_view word = message.substr(i, j - i);
    // A setting name inside a path or file name ("/tmp/config_file.yaml") is not a setting.
    const bool in_path = (i > 0 && (message[i - 1] == '/' || message[i - 1] == '.')) ||
                         (j + 1 < message.size() && message[j] == '.' && WordChar(message[j + 1])) ||
                         (j < message.size() && message[j] == '/');
    auto it = in_path || word.find('_') == std::string_view::npos ? names.end() : names.find(word);
    if (it != names.end()) out += it->second;
    else out.append(word);
    i = j;
  }
  return out;
}

absl::Status RenameServeSettings(const absl::Status& status, const std::map<std::string, std::string, std::less<>>& names) {
  if (status.ok()) return status;
  return absl::Status(status.code(), RenameServeSettings(std::string(status.message()), names));
}

}  // namespace epp
