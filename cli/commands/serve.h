// `eppctl serve`: the Endpoint Picker as an Envoy ext_proc server (docs/serve.md).
//
// ext_proc gRPC on --grpc-port (TLS by default), grpc.health.v1 on --grpc-health-port
// (plaintext), Prometheus /metrics and /healthz on --metrics-port; one thread keeps the endpoints'
// metrics fresh and reloads the endpoints file when it changes, or (--pool-name,
// --endpoint-selector) the Pods are kept by a Kubernetes watch (--no-pool-watch: listed every
// --pool-resync-interval). SIGTERM/SIGINT: readiness goes NOT_SERVING (and a held leader Lease is
// released), open streams get --drain-timeout to finish, exit 0.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
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
  std::string log_level;  // --log-level; empty: from --v / --zap-log-level (info by default)
  std::string ready_file;
  std::string program = "eppctl serve";  // names the program in the start-up line
  // The reference's logging flags (controller-runtime's zap options and --v).
  int verbosity = 2;
  std::string zap_encoder;        // console (default) or json
  std::string zap_log_level;      // debug, info, error, panic or an integer
  std::string zap_time_encoding;  // iso8601 (default), epoch, millis, nano, rfc3339, rfc3339nano
  std::string zap_stacktrace_level;
  bool zap_devel = false;
};

// Every serve flag (epp's own and the reference EPP's runner flags) on `cmd`; `finish` runs after
// parsing and completes `o` from which flags were given. Shared by `eppctl serve` and the `epp`
// entry point, whose command line is the reference's.
void AddServeFlags(CLI::App* cmd, ServeOptions& o, std::function<void()>& finish);
void SetupServeCommand(CLI::App& app, int& exit_code);
int RunServe(const ServeOptions& options);
// The `epp` program: `eppctl serve` under the reference EPP's command line (Go flag syntax: one or
// two dashes, --flag=value, --bool=false).
int RunEppMain(int argc, char** argv);

}  // namespace eppctl
