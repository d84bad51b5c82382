// `eppctl serve`: the Endpoint Picker as an Envoy ext_proc server (docs/serve.md).
//
// ext_proc gRPC on --grpc-port (TLS by default), grpc.health.v1 on --grpc-health-port
// (plaintext), Prometheus /metrics and /healthz on --metrics-port; one thread keeps the endpoints'
// metrics fresh and reloads the endpoints file when it changes. SIGTERM/SIGINT: readiness goes
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
  bool secure_serving = true;
  std::string cert_path;  // directory with tls.crt and tls.key
  size_t max_request_bytes = epp::kDefaultMaxRequestBytes;
  std::string drain_timeout = "30s";
  std::string shutdown_delay = "0s";
  std::string capture_dir;
  std::string log_level = "info";
  std::vector<std::string> objectives;  // NAME=PRIORITY
  bool disable_subset_filter = false;
  uint64_t seed = 0;
  std::string ready_file;
  std::string pool_name = "default";
};

void SetupServeCommand(CLI::App& app, int& exit_code);
int RunServe(const ServeOptions& options);

}  // namespace eppctl
