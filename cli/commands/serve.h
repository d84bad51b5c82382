// `eppctl serve`: the Endpoint Picker as an Envoy ext_proc server (docs/serve.md).
//
// ext_proc gRPC on --grpc-port (TLS by default), grpc.health.v1 on --grpc-health-port
// (plaintext), Prometheus /metrics and /healthz on --metrics-port; one thread keeps the endpoints'
// metrics fresh and reloads the endpoints file when it changes, or (--pool-name) another lists
// the InferencePool's Ready Pods every --pool-resync-interval. SIGTERM/SIGINT: readiness goes
// NOT_SERVING, open streams get --drain-timeout to finish, exit 0.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "epp/extproc.h"

namespace eppctl {

struct ServeOptions {
  std::string config;                  // EndpointPickerConfig; empty = GIE's default profile
  std::string endpoints_file;          // watched for changes
  std::vector<std::string> endpoints;  // ADDR[=METRICS]
  std::string engine = "auto";
  int grpc_port = 9002;
  int grpc_health_port = 9003;
  int metrics_port = 9090;
  std::string listen_address = "0.0.0.0";
  std::string refresh_metrics_interval = "50ms";
  std::string metrics_staleness_threshold = "200ms";
  bool staleness_given = false;  // set by the command when the flag was on the command line
  std::string scrape_timeout = "100ms";
  bool scrape_gzip = false;
  bool secure_serving = true;
  std::string cert_path;  // directory with tls.crt and tls.key
  size_t max_request_bytes = epp::kDefaultMaxRequestBytes;
  std::string drain_timeout = "30s";
  std::string shutdown_delay = "0s";
  std::string stream_request_timeout = "60s";  // ExtProcOptions::request_timeout; 0 disables
  std::string stream_idle_timeout = "15m";     // ExtProcOptions::idle_timeout; 0 disables
  std::string handshake_timeout = "10s";       // ExtProcOptions::handshake_timeout
  std::string capture_dir;
  int decision_log = 0;
  int decision_log_rate = 50;
  bool decision_log_prompts = false;
  std::string log_level = "info";
  std::vector<std::string> objectives;  // NAME=PRIORITY
  bool disable_subset_filter = false;
  bool emit_endpoint_scores = false;
  uint64_t seed = 0;
  std::string ready_file;
  // --pool-name: the InferencePool whose Ready Pods are the endpoints (unless --endpoints is
  // given) and the `name` label of the inference_pool_* metrics.
  std::string pool_name = "default";
  std::string region, zone;      // --region / --zone: PluginContext of the plugins
  std::string pool_import;       // --pool-import NAME: cluster-level endpoints from an InferencePoolImport
  std::string clusters_file;     // --clusters FILE: the cluster directory
  std::string cluster_label = "cluster";
  bool pool_name_given = false;  // set by the command: discovery only when the flag is given
  std::string pool_namespace;    // empty: $NAMESPACE, the Pod's namespace, else "default"
  std::string pool_group = "inference.networking.k8s.io";
  std::string pool_resync_interval = "2s";
  std::string kube_api_server;  // empty: in cluster
  std::string kube_token_file;
  std::string kube_ca_file;
  bool kube_insecure_skip_verify = false;
};

void SetupServeCommand(CLI::App& app, int& exit_code);
int RunServe(const ServeOptions& options);

}  // namespace eppctl
