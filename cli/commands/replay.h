// `eppctl replay`: replay a trace or a generated workload through routing policies over simulated
// servers in virtual time, and compare the policies (docs/routing.md).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "epp/tools/replay.h"

namespace eppctl {

struct ReplayCommandOptions {
  // Input: a trace file, or a generated workload.
  std::string trace;
  std::string trace_format = "auto";  // auto, mooncake or openai
  std::string workload;                   // shared-prefix
  std::string gie_workload;               // one of the GIE prefix-cache benchmark configurations
  epp::SharedPrefixWorkload shared;       // flags given explicitly override the GIE workload's
  std::string arrivals = "poisson";       // poisson or constant
  double duration_s = 0;                  // workload: rate x duration requests; trace: first S seconds
  double time_scale = 1.0;                // trace timestamps are multiplied by this
  std::string tenants;                    // --tenants: "N" or NAME=WEIGHT,... (epp::ParseTenantMix)
  std::string priority_mix;               // --priority-mix: PRIORITY=SHARE,...
  int64_t slo_ttft_ms = -1;               // --slo-ttft-ms: for requests without their own
  int64_t slo_tpot_ms = -1;               // --slo-tpot-ms
  // Servers.
  int servers = 8;
  int64_t server_kv_tokens = 0;           // 0: SimParams' default kv_blocks
  int prefill_servers = 0, decode_servers = 0;  // > 0: a P/D pool (ReplayOptions)
  double kv_link_gbytes_per_s = 25;
  int64_t kv_bytes_per_token = 131072;
  epp::SimParams server;
  // Policies and the EPP.
  std::vector<std::string> policies;      // names or config files; default round-robin, gie-default
  std::string refresh_metrics_interval = "50ms";
  int epp_replicas = 1;                   // ReplayOptions::epp_replicas
  std::string kv_event_delay = "0s";      // ReplayOptions::kv_event_delay_us
  bool shared_state = false;              // ReplayOptions::shared_state
  std::string shared_state_delay = "100ms";  // ReplayOptions::shared_state_delay_us
  uint64_t seed = 0;
  // Several regions (RunMultiRegionReplay): --regions NAME:SERVERS[:SHARE[:CAPACITY]],... with --rtt.
  std::string regions, rtt, global_region;
  std::string server_speed;               // --server-speed: MixedSpeedServers' list
  double saturation_queue = 5, saturation_kv = 0.8;
  // Output.
  std::string output = "text";
  std::string report;                     // HTML file
  bool progress = true;                   // a progress bar on stderr when it is a terminal

  std::vector<std::string> given;         // the workload flags given on the command line
};

void SetupReplayCommand(CLI::App& app, int& exit_code);
int RunReplay(const ReplayCommandOptions& options);

}  // namespace eppctl
