// The server's settings as an operator writes them, and the one function that turns them into a
// ServeConfig: `eppctl serve` (flags) and `pyepp.serve` (keyword arguments) both fill a ServeArgs
// and call BuildServeConfig, so both get the same defaults, limits, discovery modes and checks.
//
// Defaults are written once, here. Durations are Go duration text ("50ms", "1.5s", "2m"), as the
// reference EPP's flags take them; endpoints are "ADDR[=METRICS]" specs and objectives
// "NAME=PRIORITY", as the flags take them.
//
// Errors name the setting by its field name ("refresh_metrics_interval: must be > 0, got '0s'");
// so do the server's own messages and log lines about these settings. Each edge maps those names
// to its own spelling with RenameServeSettings (the CLI to its flags, pyepp to its keyword
// arguments); every name is a snake_case word with an underscore, so the renaming never touches
// other words of a message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "epp/runtime/extproc.h"
#include "epp/runtime/serve.h"
#include "epp/status.h"

namespace epp {

struct ServeArgs {
  // ---- Scheduling
  std::string config_file;  // EndpointPickerConfig; empty: GIE's default profile
  bool watch_config = true;
  uint64_t seed = 0;

  // ---- Endpoints: a file, flags, an InferencePool's Pods or an InferencePoolImport's clusters
  std::string endpoints_file;
  std::vector<std::string> endpoint_flags;  // "ADDR[=METRICS]", after the file's or the pool's
  // Given: the InferencePool whose Ready Pods are the endpoints (unless endpoints_file is set,
  // when it only names the pool in metrics), and the `name` label of the inference_pool_* gauges.
  std::optional<std::string> pool_name;
  std::string pool_namespace;  // empty: $NAMESPACE, the Pod's namespace, else "default"
  std::string pool_group = std::string(kInferencePoolGroupV1);
  std::string pool_resync_interval = "2s";  // between two lists, without pool_watch
  bool pool_watch = true;  // list once, then watch the pool and its Pods (no periodic list)
  // With pool_name (and discovery from the cluster): watch the pool's InferenceObjectives and
  // InferenceModelRewrites (priorities by objective name, weighted model rewrites).
  bool watch_objectives = true;
  // Standalone mode (GIE's --endpoint-selector, --endpoint-target-ports): the Pods this label
  // selector matches in pool_namespace are the endpoints, one per target port; no InferencePool.
  std::string endpoint_selector;
  std::vector<int> endpoint_target_ports;
  std::string pool_import;    // an InferencePoolImport: its exporting clusters are the endpoints
  std::string clusters_file;  // the cluster directory pool_import needs
  std::string cluster_label = std::string(kClusterLabel);
  std::string kube_api_server;  // empty: in-cluster configuration
  std::string kube_token_file;
  std::string kube_ca_file;
  bool kube_insecure_skip_verify = false;

  // ---- Reading metrics
  std::string engine = "auto";  // dialect of endpoints that name none
  std::string refresh_metrics_interval = "50ms";
  std::string scrape_timeout = "100ms";
  bool scrape_gzip = false;
  // Metrics older than this are stale in the pool-average gauges.
  std::string metrics_staleness_threshold = "200ms";
  // Set: also the default saturation detector's metricsStalenessThreshold, unless the config sets
  // one (eppctl serve sets it when --metrics-staleness-threshold is given).
  std::optional<std::string> detector_staleness;
  std::string metrics_pool_name;  // the inference_pool_* `name` label; empty: pool_name, else "default"
  // Where discovered Pods' metrics are read (GIE's --model-server-metrics-*): port 0 = the target port.
  std::string model_server_metrics_scheme = "http";
  std::string model_server_metrics_path = "/metrics";
  int model_server_metrics_port = 0;
  bool model_server_metrics_https_insecure_skip_verify = true;
  // GIE's metric specs ("name{label=value}"): each one given overrides that field of every
  // engine's mapping (empty: the mapping's own). The reference's defaults are vLLM's names, which
  // epp's vllm mapping already reads.
  std::string total_queued_requests_metric, total_running_requests_metric, kv_cache_usage_percentage_metric,
      lora_info_metric, cache_info_metric;

  // ---- Servers. Port 0 picks a free one; grpc_health_port or metrics_port -1: no such server.
  std::string listen_address = "0.0.0.0";
  int grpc_port = 9002;
  int grpc_health_port = 9003;
  int metrics_port = 9090;
  bool secure_serving = true;
  std::string cert_path;  // directory with tls.crt and tls.key; empty: a self-signed certificate
  // A PEM CA bundle: with secure_serving, the ext_proc port requires a client certificate one of
  // them signed (the gateway's), refusing the TLS handshake otherwise. Empty: none is asked for.
  std::string client_ca;
  // Re-read cert_path's files and client_ca when they change (ServeConfig::reload_*). Unset: on;
  // the reference's --enable-cert-reload defaults to false. false: read once at start.
  std::optional<bool> enable_cert_reload;
  // Also answer grpc.health.v1 on the ext_proc port, following readiness (GIE's --health-checking).
  bool health_checking = false;
  // Largest gRPC message accepted / sent on the ext_proc port, as a Kubernetes quantity ("10MiB",
  // "25MB", "4194304"); empty: max(4 MiB, max_request_bytes + 1 MiB).
  std::string grpc_max_recv_msg_size, grpc_max_send_msg_size;

  // ---- Streams
  size_t max_request_bytes = kDefaultMaxRequestBytes;
  std::string stream_request_timeout = "60s";  // "0s": no limit
  std::string stream_idle_timeout = "15m";     // "0s": no limit
  std::string handshake_timeout = "10s";
  std::vector<std::string> objective_flags;  // "NAME=PRIORITY" (negative = sheddable)
  bool disable_endpoint_subset_filter = false;
  // May a client's own headers choose its objective / rewrite its model (ExtProcOptions)?
  bool trust_objective_header = true;
  bool trust_model_rewrite_header = true;
  bool emit_endpoint_scores = false;
  std::string capture_dir;  // created when missing (files 0600, credentials redacted)
  std::string capture_max_bytes = "1Gi";  // what every capture file together may hold
  // Memory budgets of the ext_proc port (ExtProcServerOptions): the bytes all streams may hold
  // buffered ("0": no limit), open streams ("0": no limit), HTTP/2 streams per connection (0: gRPC's).
  std::string max_buffered_request_bytes = "192Mi";
  int64_t max_streams = 10000;
  int64_t max_streams_per_connection = 0;

  // ---- Decisions
  int decision_log = 0;  // recent decisions kept for /debug/decisions, 0..kMaxDecisionLog
  int decision_log_rate = 50;
  bool decision_log_prompts = false;

  // ---- Where this EPP runs (the locality plugins' home region and gateway zone)
  std::string region, zone;

  // ---- The configuration as text instead of config_file (GIE's --config-text)
  std::string config_text;

  // ---- High availability: of the replicas sharing the Lease, only the leader reports readiness
  // (GIE's --ha-enable-leader-election). The Lease is `leader_election_id` in
  // `leader_election_namespace` (defaults: "epp-NS-POOL.llm-d.ai", as llm-d Router names it, in the
  // pool's namespace); each replica is `leader_election_identity` (default $POD_NAME, else the
  // host name). Timing as controller-runtime's defaults.
  bool ha_enable_leader_election = false;
  std::string leader_election_id, leader_election_namespace, leader_election_identity;
  std::string leader_election_lease_duration = "15s";
  std::string leader_election_renew_deadline = "10s";
  std::string leader_election_retry_period = "2s";

  // ---- Active-active replicas: prefix updates and in-flight counts shared through Redis or
  // Valkey (epp/runtime/redis_state.h). shared_state: the server's URL (redis://, rediss://,
  // unix://, valkey(s)://, host:port); empty: nothing shared. The password comes from
  // shared_state_password_file, else $EPP_SHARED_STATE_PASSWORD, else the URL. Keys start with
  // shared_state_key_prefix (empty: "epp:<metrics pool name>:"); each replica is
  // shared_state_replica_id (empty: $POD_NAME, else host-pid-random).
  std::string shared_state;
  std::string shared_state_password_file, shared_state_ca_file, shared_state_key_prefix, shared_state_replica_id;
  std::string shared_state_interval = "50ms";
  std::string shared_state_timeout = "250ms";

  // ---- GIE's --metrics-endpoint-auth: /metrics answers only tokens the API server authenticates
  // and authorizes (epp/runtime/metrics_auth.h). Unset: on whenever a Kubernetes API is used.
  std::optional<bool> metrics_endpoint_auth;
  // ---- Reference flags epp accepts without doing what they ask (each one given true is named in
  // a start-up notice saying why): unset = not given.
  std::optional<bool> enable_tracing, enable_pprof, enable_grpc_stream_metrics, allow_experimental_plugins;
  std::string refresh_prometheus_metrics_interval, tls_min_version, metrics_client_ca_file, metrics_cert_dir;
  std::vector<std::string> tls_cipher_suites;
};

// A Kubernetes quantity of bytes ("10MiB", "25MB", "1Gi", "4194304"; a trailing B is accepted as
// the reference's flags accept it). kInvalidArgument naming `setting` otherwise.
absl::StatusOr<size_t> ParseByteQuantity(std::string_view setting, std::string_view text);

inline constexpr int kMaxDecisionLog = 1000000;

// Checks every setting and builds the server's configuration (the logger is the caller's:
// ServeConfig::log stays null). kInvalidArgument naming the setting for a bad value or a
// combination that cannot work or TLS material that does not pass CheckCertificateAndKey /
// CheckCertificateBundle; kNotFound for a file that cannot be read (cert_path's, client_ca, the
// cluster directory).
absl::StatusOr<ServeConfig> BuildServeConfig(const ServeArgs& args);

// Every setting name BuildServeConfig and the server may put in a message, in ServeArgs order.
const std::vector<std::string_view>& ServeSettingNames();

// `message` with each whole-word setting name (ServeSettingNames) replaced by names.at(it) where
// `names` has it; other text unchanged.
std::string RenameServeSettings(std::string_view message, const std::map<std::string, std::string, std::less<>>& names);
absl::Status RenameServeSettings(const absl::Status& status, const std::map<std::string, std::string, std::less<>>& names);

}  // namespace epp
