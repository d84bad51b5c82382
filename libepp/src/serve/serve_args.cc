// BuildServeConfig: ServeArgs (what an operator writes) -> ServeConfig (what EppServer runs).
// Each group of settings is one step; every error starts with the setting's name.
#include "epp/runtime/serve_args.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <tuple>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "epp/runtime/endpoints.h"
#include "epp/runtime/kube.h"
#include "epp/runtime/leader_election.h"
#include "epp/runtime/metrics_auth.h"
#include "epp/metrics.h"
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
  const bool standalone = !a.endpoint_selector.empty();
  if (standalone && a.pool_name)
    return absl::InvalidArgumentError("pool_name and endpoint_selector cannot be combined: give one of them");
  if (standalone && (!a.endpoints_file.empty() || !a.pool_import.empty()))
    return absl::InvalidArgumentError("endpoint_selector cannot be combined with endpoints_file or pool_import");
  if (!standalone && !a.endpoint_target_ports.empty() && !a.pool_name)
    return absl::InvalidArgumentError("endpoint_target_ports is for endpoint_selector (standalone mode); give endpoint_selector");
  if ((a.pool_name && a.endpoints_file.empty()) || standalone) {
    PoolDiscoveryOptions d;
    d.group = a.pool_group;
    d.ns = PoolNamespace(a.pool_namespace);
    if (standalone) {
      absl::StatusOr<LabelSelector> selector = ParseLabelSelector(a.endpoint_selector);
      if (!selector.ok()) return absl::InvalidArgumentError("endpoint_selector: " + std::string(selector.status().message()));
      if (selector->empty()) return absl::InvalidArgumentError("endpoint_selector: must select something");
      d.selector = a.endpoint_selector;
      // Duplicates dropped, order kept, as the reference does.
      for (int port : a.endpoint_target_ports) {
        if (port < 1 || port > 65535)
          return absl::InvalidArgumentError(absl::StrCat("endpoint_target_ports: invalid port number ", port));
        if (std::find(d.target_ports.begin(), d.target_ports.end(), port) == d.target_ports.end()) d.target_ports.push_back(port);
      }
      if (d.target_ports.empty() || d.target_ports.size() > 8)
        return absl::InvalidArgumentError(absl::StrCat("endpoint_target_ports: expected 1 to 8 ports with endpoint_selector, got ",
                                                       d.target_ports.size()));
    } else {
      d.name = *a.pool_name;
      if (!a.endpoint_target_ports.empty())
        c.notices.push_back("endpoint_target_ports is ignored with pool_name: the InferencePool's targetPorts are used");
    }
    d.watch = a.pool_watch;
    EPP_ASSIGN_OR_RETURN(d.interval, Duration("pool_resync_interval", a.pool_resync_interval, false));
    d.kube = Kube(a);
    if (a.model_server_metrics_scheme != "http" && a.model_server_metrics_scheme != "https")
      return absl::InvalidArgumentError("model_server_metrics_scheme: expected http or https, got '" +
                                        a.model_server_metrics_scheme + "'");
    if (a.model_server_metrics_path.empty() || a.model_server_metrics_path.front() != '/')
      return absl::InvalidArgumentError("model_server_metrics_path: must start with '/', got '" + a.model_server_metrics_path + "'");
    if (a.model_server_metrics_port < 0 || a.model_server_metrics_port > 65535)
      return absl::InvalidArgumentError(absl::StrCat("model_server_metrics_port: must be in [0, 65535], got ",
                                                     a.model_server_metrics_port));
    d.metrics.scheme = a.model_server_metrics_scheme;
    d.metrics.path = a.model_server_metrics_path;
    d.metrics.port = a.model_server_metrics_port;
    c.discovery = std::move(d);
    if (!standalone && a.watch_objectives && a.pool_watch) {
      PolicyWatchOptions pw;
      pw.kube = Kube(a);
      pw.ns = c.discovery->ns;
      pw.pool_name = *a.pool_name;
      c.policy_watch = std::move(pw);
    }
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
  c.metrics_insecure_skip_verify = a.model_server_metrics_scheme == "https" && a.model_server_metrics_https_insecure_skip_verify;
  // GIE's metric-spec flags, as overrides of the fields they name (checked here, so that a bad
  // spec is the flag's error and not a scrape failure later).
  const std::tuple<std::string_view, const std::string*, std::string_view> specs[] = {
      {"total_queued_requests_metric", &a.total_queued_requests_metric, "queue"},
      {"total_running_requests_metric", &a.total_running_requests_metric, "running"},
      {"kv_cache_usage_percentage_metric", &a.kv_cache_usage_percentage_metric, "kv"},
      {"lora_info_metric", &a.lora_info_metric, "lora"},
      {"cache_info_metric", &a.cache_info_metric, "cache-info"}};
  for (const auto& [setting, given, field] : specs) {
    std::string spec = *given;
    // GIE's chart writes these flags quoted (--total-queued-requests-metric="sglang:..."), and
    // without a shell the quotes reach the program: one surrounding pair is taken off.
    if (spec.size() >= 2 && spec.front() == '"' && spec.back() == '"') spec = spec.substr(1, spec.size() - 2);
    if (spec.empty()) continue;
    MetricMapping probe;
    if (absl::Status st = ApplyMetricOverride(probe, field, spec); !st.ok())
      return absl::InvalidArgumentError(absl::StrCat(std::string(setting), ": ", std::string(st.message())));
    c.metric_overrides.emplace_back(std::string(field), spec);
  }
  if (!a.refresh_prometheus_metrics_interval.empty()) {
    // Accepted for the reference's command line: epp computes /metrics when it is scraped, so
    // there is nothing to flush periodically.
    EPP_RETURN_IF_ERROR(Duration("refresh_prometheus_metrics_interval", a.refresh_prometheus_metrics_interval, false).status());
  }
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
  c.health_checking = a.health_checking;
  if (!a.grpc_max_recv_msg_size.empty()) {
    EPP_ASSIGN_OR_RETURN(c.grpc_max_recv_bytes, ParseByteQuantity("grpc_max_recv_msg_size", a.grpc_max_recv_msg_size));
  }
  if (!a.grpc_max_send_msg_size.empty()) {
    EPP_ASSIGN_OR_RETURN(c.grpc_max_send_bytes, ParseByteQuantity("grpc_max_send_msg_size", a.grpc_max_send_msg_size));
  }
  // Checked here so that bad material is a configuration error naming its setting; the server
  // checks again what it is given, at start and at each reload.
  const bool reload = a.enable_cert_reload.value_or(true);
  if (a.secure_serving && !a.cert_path.empty()) {
    const std::string crt = a.cert_path + "/tls.crt", key = a.cert_path + "/tls.key";
    EPP_ASSIGN_OR_RETURN(c.cert_pem, ReadWhole("cert_path", crt));
    EPP_ASSIGN_OR_RETURN(c.key_pem, ReadWhole("cert_path", key));
    if (absl::Status st = CheckCertificateAndKey(c.cert_pem, c.key_pem); !st.ok())
      return absl::InvalidArgumentError(absl::StrCat("cert_path: ", a.cert_path, " (tls.crt, tls.key): ", st.message()));
    c.tls_source = a.cert_path;
    if (reload) {
      c.reload_cert_file = crt;
      c.reload_key_file = key;
    }
  }
  if (!a.client_ca.empty()) {
    if (!a.secure_serving)
      return absl::InvalidArgumentError(
          "client_ca: client certificates are checked in the TLS handshake, and secure_serving is off: turn TLS on "
          "or drop client_ca");
    EPP_ASSIGN_OR_RETURN(c.client_ca_pem, ReadWhole("client_ca", a.client_ca));
    if (absl::Status st = CheckCertificateBundle(c.client_ca_pem); !st.ok())
      return absl::InvalidArgumentError(absl::StrCat("client_ca: ", a.client_ca, ": ", st.message()));
    c.client_ca_source = a.client_ca;
    if (reload) c.reload_client_ca_file = a.client_ca;
  }
  return absl::OkStatus();
}

// Per-stream limits and what the answer carries.
absl::Status Streams(const ServeArgs& a, ServeConfig& c) {
  if (a.max_request_bytes == 0) return absl::InvalidArgumentError("max_request_bytes: must be > 0");
  c.session.max_request_bytes = a.max_request_bytes;
  c.session.ignore_subset_hint = a.disable_endpoint_subset_filter;
  c.session.trust_objective_header = a.trust_objective_header;
  c.session.trust_model_rewrite_header = a.trust_model_rewrite_header;
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
  EPP_ASSIGN_OR_RETURN(size_t capture_max, ParseByteQuantity("capture_max_bytes", a.capture_max_bytes));
  c.capture_max_bytes = capture_max;
  if (a.max_buffered_request_bytes == "0") {
    c.max_buffered_bytes = 0;
  } else {
    EPP_ASSIGN_OR_RETURN(size_t buffered, ParseByteQuantity("max_buffered_request_bytes", a.max_buffered_request_bytes));
    if (buffered < a.max_request_bytes)
      return absl::InvalidArgumentError(absl::StrCat("max_buffered_request_bytes: ", a.max_buffered_request_bytes,
                                                     " is less than max_request_bytes (", a.max_request_bytes,
                                                     "): no body that large could ever be buffered"));
    c.max_buffered_bytes = buffered;
  }
  if (a.max_streams < 0)
    return absl::InvalidArgumentError(absl::StrCat("max_streams: must be >= 0 (0: no limit), got ", a.max_streams));
  c.max_streams = a.max_streams;
  if (a.max_streams_per_connection < 0 || a.max_streams_per_connection > INT32_MAX)
    return absl::InvalidArgumentError(absl::StrCat("max_streams_per_connection: must be in [0, 2147483647], got ",
                                                   a.max_streams_per_connection));
  c.max_streams_per_connection = static_cast<uint32_t>(a.max_streams_per_connection);
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

// Leader election on a Lease named after the pool (llm-d Router's name), in its namespace.
absl::Status LeaderElection(const ServeArgs& a, ServeConfig& c) {
  if (!a.ha_enable_leader_election) return absl::OkStatus();
  LeaderElectionOptions o;
  o.kube = Kube(a);
  o.ns = !a.leader_election_namespace.empty() ? a.leader_election_namespace : PoolNamespace(a.pool_namespace);
  if (!a.leader_election_id.empty()) {
    o.name = a.leader_election_id;
  } else if (a.pool_name) {
    o.name = DefaultLeaseName(o.ns, *a.pool_name);
  } else {
    return absl::InvalidArgumentError(
        "ha_enable_leader_election needs pool_name (the Lease is named after the pool) or leader_election_id");
  }
  o.identity = !a.leader_election_identity.empty() ? a.leader_election_identity : DefaultLeaderIdentity();
  EPP_ASSIGN_OR_RETURN(Micros lease, Duration("leader_election_lease_duration", a.leader_election_lease_duration, false));
  EPP_ASSIGN_OR_RETURN(Micros renew, Duration("leader_election_renew_deadline", a.leader_election_renew_deadline, false));
  EPP_ASSIGN_OR_RETURN(Micros retry, Duration("leader_election_retry_period", a.leader_election_retry_period, false));
  o.lease_duration = CeilMillis(lease);
  o.renew_deadline = CeilMillis(renew);
  o.retry_period = CeilMillis(retry);
  if (!(o.retry_period < o.renew_deadline && o.renew_deadline < o.lease_duration))
    return absl::InvalidArgumentError(
        "leader_election_retry_period < leader_election_renew_deadline < leader_election_lease_duration must hold, got " +
        a.leader_election_retry_period + ", " + a.leader_election_renew_deadline + ", " + a.leader_election_lease_duration);
  c.leader_election = std::move(o);
  return absl::OkStatus();
}

// Reference flags given that ask for something epp does not do: one notice each, saying so and
// what to use instead (docs/serve.md, "The reference's command line").
void Notices(const ServeArgs& a, ServeConfig& c) {
  auto note = [&c](std::string_view setting, std::string_view why) {
    c.notices.push_back(absl::StrCat(std::string(setting), " is accepted but not implemented: ", std::string(why)));
  };
  if (a.enable_pprof.value_or(false))
    note("enable_pprof", "epp has no Go pprof handlers; profile the process with perf or heaptrack");
  if (!a.tls_min_version.empty() || !a.tls_cipher_suites.empty())
    note(a.tls_min_version.empty() ? "tls_cipher_suites" : "tls_min_version",
         "gRPC's defaults apply (TLS 1.2 and 1.3 with its cipher suites)");
  if (!a.metrics_client_ca_file.empty() || !a.metrics_cert_dir.empty())
    note(a.metrics_cert_dir.empty() ? "metrics_client_ca_file" : "metrics_cert_dir", "/metrics is served over plain HTTP");
}

bool WordChar(char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-'; }

absl::Status SharedState(const ServeArgs& a, ServeConfig& c) {
  const bool any = !a.shared_state_password_file.empty() || !a.shared_state_ca_file.empty() ||
                   !a.shared_state_key_prefix.empty() || !a.shared_state_replica_id.empty();
  if (a.shared_state.empty()) {
    if (any) return absl::InvalidArgumentError("shared_state_*: these settings need shared_state (a Redis URL)");
    return absl::OkStatus();
  }
  SharedStateOptions o;
  o.address = a.shared_state;
  if (absl::StatusOr<RedisAddress> parsed = ParseRedisAddress(a.shared_state); !parsed.ok())
    return absl::InvalidArgumentError(absl::StrCat("shared_state: ", parsed.status().message()));
  if (!a.shared_state_password_file.empty()) {
    EPP_ASSIGN_OR_RETURN(o.password, ReadWhole("shared_state_password_file", a.shared_state_password_file));
    while (!o.password.empty() && (o.password.back() == '\n' || o.password.back() == '\r')) o.password.pop_back();
    if (o.password.empty())
      return absl::InvalidArgumentError(
          absl::StrCat("shared_state_password_file: ", a.shared_state_password_file, " is empty"));
  } else if (const char* env = std::getenv("EPP_SHARED_STATE_PASSWORD"); env != nullptr && *env != '\0') {
    o.password = env;
  }
  o.ca_file = a.shared_state_ca_file;
  o.key_prefix = a.shared_state_key_prefix.empty() ? absl::StrCat("epp:", c.pool_name, ":") : a.shared_state_key_prefix;
  o.replica_id = a.shared_state_replica_id;
  if (o.replica_id.empty())
    if (const char* pod = std::getenv("POD_NAME"); pod != nullptr) o.replica_id = pod;
  for (char ch : o.replica_id)
    if (ch == ' ' || ch == '\n' || static_cast<unsigned char>(ch) < 0x20)
      return absl::InvalidArgumentError("shared_state_replica_id: no spaces or control characters");
  EPP_ASSIGN_OR_RETURN(Micros interval, Duration("shared_state_interval", a.shared_state_interval, false));
  EPP_ASSIGN_OR_RETURN(Micros timeout, Duration("shared_state_timeout", a.shared_state_timeout, false));
  o.interval = CeilMillis(interval);
  o.timeout = CeilMillis(timeout);
  // Checks the rest (load expiry against the interval) as the server will.
  EPP_RETURN_IF_ERROR(RedisSharedState::Create(o).status());
  c.shared_state = std::move(o);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ServeConfig> BuildServeConfig(const ServeArgs& args) {
  ServeConfig c;
  if (!args.config_file.empty() && !args.config_text.empty())
    return absl::InvalidArgumentError("config_file and config_text cannot both be set");
  c.config_file = args.config_file;
  c.config_yaml = args.config_text;
  c.watch_config = args.watch_config;
  c.seed = args.seed;
  c.region = args.region;
  c.zone = args.zone;
  EPP_RETURN_IF_ERROR(Endpoints(args, c));
  EPP_RETURN_IF_ERROR(Metrics(args, c));
  EPP_RETURN_IF_ERROR(Servers(args, c));
  EPP_RETURN_IF_ERROR(Streams(args, c));
  EPP_RETURN_IF_ERROR(Decisions(args, c));
  EPP_RETURN_IF_ERROR(LeaderElection(args, c));
  // The reference authenticates /metrics by default; epp does whenever it talks to a Kubernetes
  // API anyway (discovery, policies, leader election), since only then is there a TokenReview to
  // ask. Given explicitly, the setting wins (true without an API server fails at start).
  const bool kube = c.discovery || c.import_discovery || c.leader_election;
  if (args.metrics_endpoint_auth.value_or(kube)) {
    MetricsAuthOptions ao;
    ao.kube = Kube(args);
    c.metrics_auth = std::move(ao);
  }
  // OpenTelemetry (GIE's --tracing, on by default as there): the standard OTEL_* variables say
  // where spans go; without an exporter in them nothing is recorded. A malformed variable is an
  // error naming it (read only when tracing is on).
  if (args.enable_tracing.value_or(true)) {
    EPP_ASSIGN_OR_RETURN(TracingOptions t, TracingOptions::FromProcessEnvironment("llm-d-epp"));
    if (t.exporter != TracingOptions::Exporter::kNone) {
      c.tracing = std::move(t);
    } else if (args.enable_tracing.has_value()) {
      c.notices.push_back(
          "enable_tracing: no trace exporter is configured, so no spans are sent (set OTEL_EXPORTER_OTLP_ENDPOINT, "
          "or OTEL_TRACES_EXPORTER=otlp|console)");
    }
  }
  EPP_RETURN_IF_ERROR(SharedState(args, c));
  Notices(args, c);
  return c;
}

absl::StatusOr<size_t> ParseByteQuantity(std::string_view setting, std::string_view text) {
  std::string_view t = text;
  while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
  while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
  if (t.size() > 1 && (t.back() == 'B' || t.back() == 'b')) t.remove_suffix(1);  // "25MB" as the reference reads it
  size_t digits = 0;
  while (digits < t.size() && std::isdigit(static_cast<unsigned char>(t[digits]))) ++digits;
  const std::string_view suffix = t.substr(digits);
  static const std::pair<std::string_view, uint64_t> kUnits[] = {
      {"", 1},          {"k", 1000},       {"K", 1000},          {"M", 1000000},       {"G", 1000000000},
      {"Ki", 1ULL << 10}, {"Mi", 1ULL << 20}, {"Gi", 1ULL << 30}};
  uint64_t unit = 0;
  for (const auto& [name, mult] : kUnits)
    if (suffix == name) unit = mult;
  uint64_t n = 0;
  const auto [ptr, ec] = std::from_chars(t.data(), t.data() + digits, n);
  if (digits == 0 || unit == 0 || ec != std::errc() || ptr != t.data() + digits)
    return absl::InvalidArgumentError(absl::StrCat(std::string(setting), ": '", std::string(text),
                                                   "' is not a size (e.g. 4194304, 10MiB, 25MB, 1Gi)"));
  if (n > (uint64_t{1} << 40) / unit)
    return absl::InvalidArgumentError(absl::StrCat(std::string(setting), ": '", std::string(text), "' is too large"));
  return static_cast<size_t>(n * unit);
}

const std::vector<std::string_view>& ServeSettingNames() {
  static const std::vector<std::string_view> names = {
      "config_file", "watch_config", "endpoints_file", "endpoint_flags", "pool_name", "pool_namespace", "pool_group",
      "pool_resync_interval", "pool_import", "clusters_file", "cluster_label", "kube_api_server", "kube_token_file",
      "kube_ca_file", "kube_insecure_skip_verify", "refresh_metrics_interval", "scrape_timeout", "scrape_gzip",
      "metrics_staleness_threshold", "detector_staleness", "metrics_pool_name", "listen_address", "grpc_port",
      "grpc_health_port", "metrics_port", "secure_serving", "cert_path", "client_ca", "max_request_bytes", "stream_request_timeout",
      "stream_idle_timeout", "handshake_timeout", "objective_flags", "disable_endpoint_subset_filter", "trust_objective_header",
      "trust_model_rewrite_header",
      "emit_endpoint_scores", "capture_dir", "capture_max_bytes", "max_buffered_request_bytes", "max_streams",
      "max_streams_per_connection", "decision_log", "decision_log_rate", "decision_log_prompts",
      "pool_watch", "endpoint_selector", "endpoint_target_ports", "model_server_metrics_scheme",
      "model_server_metrics_path", "model_server_metrics_port", "model_server_metrics_https_insecure_skip_verify",
      "total_queued_requests_metric", "total_running_requests_metric", "kv_cache_usage_percentage_metric",
      "lora_info_metric", "cache_info_metric", "health_checking", "grpc_max_recv_msg_size", "grpc_max_send_msg_size",
      "config_text", "ha_enable_leader_election", "enable_tracing", "enable_pprof", "enable_cert_reload",
      "metrics_endpoint_auth", "enable_grpc_stream_metrics", "allow_experimental_plugins",
      "refresh_prometheus_metrics_interval", "tls_min_version", "metrics_client_ca_file", "metrics_cert_dir",
      "tls_cipher_suites", "watch_objectives", "leader_election_id", "leader_election_namespace", "leader_election_identity",
      "leader_election_lease_duration", "leader_election_renew_deadline", "leader_election_retry_period",
      "shared_state", "shared_state_password_file", "shared_state_ca_file", "shared_state_key_prefix",
      "shared_state_replica_id", "shared_state_interval", "shared_state_timeout"};
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
