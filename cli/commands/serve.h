// `eppctl serve`: the Endpoint Picker as an Envoy ext_proc server (docs/serve.md).
//
// ext_proc gRPC on --grpc-port (TLS by default), grpc.health.v1 on --grpc-health-port
// (plaintext), Prometheus /metrics and /healthz on --metrics-port; one thread keeps the endpoints'
// metrics fresh and reloads the endpoints file when it changes, or (--pool-name) another lists
// the InferencePool's Ready Pods every --pool-resync-interval. SIGTERM/SIGINT: readiness goes
// NOT_SERVING, open streams get --drain-timeout to finish, exit 0.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "epp/runtime/serve_args.h"

namespace eppctl {

// The flags: the server's settings (epp::ServeArgs, whose defaults the flags show) and what is
// process policy (signals, drain, the ready file, the log level).
struct ServeOptions {
  epp::ServeArgs args;
  std::string pool_name = "default";  // --pool-name; args.pool_name is set when the flag is given
  std::string drain_timeout = "30s";
  std::string shutdown_delay = "0s";
  std::string log_level = "info";
  std::string ready_file;
};

void SetupServeCommand(CLI::App& app, int& exit_code);
int RunServe(const ServeOptions& options);

}  // namespace eppctl
