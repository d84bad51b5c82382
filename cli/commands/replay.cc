#include "commands/replay.h"

#include <cerrno>
#include <cstring>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "epp/params.h"
#include "output.h"

namespace eppctl {
namespace {

// Workload flags that only make sense with a generated workload.
// --rate and --arrivals also apply to traces (their requests get those arrival times).
constexpr const char* kWorkloadFlags[] = {"--groups",     "--prompts-per-group", "--system-len", "--question-len",
                                          "--output-len", "--multi-turn",        "--shared-system-prompt"};

// A one-line progress bar on stderr, redrawn when the shown percentage changes.
class ProgressBar {
 public:
  void Update(double fraction) {
    const int pct = static_cast<int>(std::clamp(fraction, 0.0, 1.0) * 100.0);
    if (pct == shown_) return;
    shown_ = pct;
    constexpr int kWidth = 40;
    const int fill = pct * kWidth / 100;
    std::fprintf(stderr, "\rreplay [%s%s] %3d%%", std::string(static_cast<size_t>(fill), '#').c_str(),
                 std::string(static_cast<size_t>(kWidth - fill), ' ').c_str(), pct);
    std::fflush(stderr);
  }
  void Clear() {
    if (shown_ < 0) return;
    std::fprintf(stderr, "\r%60s\r", "");
    std::fflush(stderr);
  }

 private:
  int shown_ = -1;
};

absl::StatusOr<std::vector<epp::ReplayRequest>> LoadInput(const ReplayCommandOptions& o, std::string& title) {
  std::vector<epp::ReplayRequest> trace;
  if (!o.trace.empty()) {
    for (const std::string& flag : o.given)
      if (std::find(std::begin(kWorkloadFlags), std::end(kWorkloadFlags), flag) != std::end(kWorkloadFlags))
        return absl::InvalidArgumentError(flag + " applies to --workload / --gie-workload, not to --trace");
    EPP_ASSIGN_OR_RETURN(epp::TraceFormat format, epp::ParseTraceFormat(o.trace_format));
    const bool rate_given = std::find(o.given.begin(), o.given.end(), "--rate") != o.given.end();
    if (rate_given) {
      epp::TraceArrivals arrivals;
      arrivals.rate = o.shared.rate;
      arrivals.poisson = o.arrivals == "poisson";
      arrivals.seed = o.seed;
      EPP_ASSIGN_OR_RETURN(trace, epp::LoadReplayTrace(o.trace, format, o.time_scale, arrivals));
    } else {
      if (std::find(o.given.begin(), o.given.end(), "--arrivals") != o.given.end())
        return absl::InvalidArgumentError("--arrivals applies to a trace only with --rate");
      EPP_ASSIGN_OR_RETURN(trace, epp::LoadReplayTrace(o.trace, format, o.time_scale));
    }
    if (o.duration_s > 0 && !trace.empty()) {
      const int64_t end = trace.front().arrival_us + static_cast<int64_t>(std::llround(o.duration_s * 1e6));
      trace.erase(std::find_if(trace.begin(), trace.end(), [&](const epp::ReplayRequest& r) { return r.arrival_us > end; }),
                  trace.end());
    }
    title = std::filesystem::path(o.trace).filename().string();
    return trace;
  }
  epp::SharedPrefixWorkload w;
  std::string name = "shared-prefix";
  if (!o.gie_workload.empty()) {
    EPP_ASSIGN_OR_RETURN(w, epp::GieBenchmarkWorkload(o.gie_workload));
    name = o.gie_workload;
  }
  auto given = [&](const char* flag) { return std::find(o.given.begin(), o.given.end(), flag) != o.given.end(); };
  // Explicit flags win over the GIE configuration; without one, the flags' defaults apply.
  if (o.gie_workload.empty() || given("--groups")) w.groups = o.shared.groups;
  if (o.gie_workload.empty() || given("--prompts-per-group")) w.prompts_per_group = o.shared.prompts_per_group;
  if (o.gie_workload.empty() || given("--system-len")) w.system_len = o.shared.system_len;
  if (o.gie_workload.empty() || given("--question-len")) w.question_len = o.shared.question_len;
  if (o.gie_workload.empty() || given("--output-len")) w.output_len = o.shared.output_len;
  if (o.gie_workload.empty() || given("--multi-turn")) w.multi_turn = o.shared.multi_turn;
  if (o.gie_workload.empty() || given("--shared-system-prompt")) w.shared_system_prompt = o.shared.shared_system_prompt;
  w.rate = o.shared.rate;
  w.poisson = o.arrivals == "poisson";
  w.duration_s = o.duration_s;
  w.seed = o.seed;
  EPP_ASSIGN_OR_RETURN(trace, epp::GenerateSharedPrefix(w));
  if (o.time_scale != 1.0)
    for (epp::ReplayRequest& r : trace) r.arrival_us = std::llround(static_cast<double>(r.arrival_us) * o.time_scale);
  title = name;
  return trace;
}

}  // namespace

void SetupReplayCommand(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<ReplayCommandOptions>();
  epp::SimParams& p = o->server;
  epp::SharedPrefixWorkload& w = o->shared;
  CLI::App* cmd = app.add_subcommand(
      "replay", "Replay a trace or a generated workload through routing policies over simulated servers (virtual time)");
  auto* trace = cmd->add_option("--trace", o->trace, "Trace file (JSONL or CSV)");
  cmd->add_option("--trace-format", o->trace_format,
                  "auto (from the first line), mooncake (timestamp, input_length, output_length, hash_ids), openai "
                  "(captured requests), azure (CSV TIMESTAMP,ContextTokens,GeneratedTokens) or burstgpt (CSV)")
      ->check(CLI::IsMember({"auto", "mooncake", "openai", "azure", "burstgpt"}))->capture_default_str();
  auto* workload = cmd->add_option("--workload", o->workload, "Generated workload: shared-prefix")
      ->check(CLI::IsMember({"shared-prefix"}));
  auto* gie = cmd->add_option("--gie-workload", o->gie_workload,
                              "A GIE prefix-cache benchmark configuration (implies --workload shared-prefix): "
                              "short-questions__many-system-prompts, long-questions__many-system-prompts, "
                              "short-questions__few-system-prompts__multi-chat, long-questions__few-system-prompts__multi-chat");
  trace->excludes(workload)->excludes(gie);
  cmd->add_option("--groups", w.groups, "shared-prefix: distinct system prompts")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--prompts-per-group", w.prompts_per_group, "shared-prefix: questions per system prompt (turns with --multi-turn)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--system-len", w.system_len, "shared-prefix: system prompt tokens")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--question-len", w.question_len, "shared-prefix: question tokens")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--output-len", w.output_len, "shared-prefix: output tokens")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_flag("--multi-turn", w.multi_turn, "shared-prefix: each group is a conversation whose turns accumulate");
  cmd->add_flag("--shared-system-prompt", w.shared_system_prompt,
                "shared-prefix: every group starts with the same system prompt (with --multi-turn: many conversations "
                "behind one system prompt)");
  cmd->add_option("--rate", w.rate, "Workload arrivals per second; with --trace, the trace's requests arrive at this rate in their order (for traces without timestamps)")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--arrivals", o->arrivals, "poisson or constant")->check(CLI::IsMember({"poisson", "constant"}))->capture_default_str();
  cmd->add_option("--duration", o->duration_s,
                  "Seconds: a workload generates rate x duration requests (default: every prompt once); a trace is cut after it")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--tenants", o->tenants,
                  "Give every request a tenant (fairness id): N equal tenants t1..tN, or NAME=WEIGHT,... drawn by weight "
                  "(replaces the trace's own)");
  cmd->add_option("--priority-mix", o->priority_mix,
                  "Give every request a priority drawn by share, PRIORITY=SHARE,... e.g. 1=0.1,0=0.9 (replaces the trace's own)");
  cmd->add_option("--slo-ttft-ms", o->slo_ttft_ms,
                  "A TTFT SLO (ms) for every request without its own (sent as x-llm-d-slo-ttft-ms); the report gives attainment "
                  "and goodput")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--slo-tpot-ms", o->slo_tpot_ms, "A TPOT SLO (ms) for every request without its own (x-llm-d-slo-tpot-ms)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--time-scale", o->time_scale, "Multiplies arrival times (0.5 = twice as fast)")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--servers", o->servers, "Simulated model servers")->capture_default_str()->check(CLI::Range(1, 100000));
  cmd->add_option("--prefill-servers", o->prefill_servers,
                  "P/D pool: prefill servers (with --decode-servers; multi-profile policies run on it, the others on as many "
                  "unlabelled servers)")
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--decode-servers", o->decode_servers, "P/D pool: decode servers")->check(CLI::Range(0, 100000));
  cmd->add_option("--kv-link-gbytes-per-s", o->kv_link_gbytes_per_s, "P/D: KV transfer bandwidth (GB/s)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--kv-bytes-per-token", o->kv_bytes_per_token, "P/D: KV bytes per token (Llama-3.1-8B bf16: 131072)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--server-kv-tokens", o->server_kv_tokens,
                  "KV-cache capacity per server in tokens (default " + std::to_string(p.kv_blocks * p.block_size) + ")")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--server-speed", o->server_speed,
                  "Mixed GPUs: speeds S1,S2,... repeated over the servers (prefill rate x S, decode step / S)");
  cmd->add_option("--engine", p.engine, "Servers' engine (metrics dialect)")->check(CLI::IsMember({"vllm", "sglang", "trtllm-serve"}))
      ->capture_default_str();
  cmd->add_option("--max-running", p.max_running, "Requests in a server's running batch (max-num-seqs)")->capture_default_str();
  cmd->add_option("--prefill-tokens-per-s", p.prefill_tokens_per_s, "Prefill throughput per server")->capture_default_str();
  cmd->add_option("--decode-step-ms", p.decode_step_ms, "Decode step time at batch size 1")->capture_default_str();
  cmd->add_option("--decode-ms-per-seq", p.decode_ms_per_seq, "Decode step time added per running request")->capture_default_str();
  cmd->add_option("--policy", o->policies,
                  "A named policy (" + [] {
                    std::string s;
                    for (const std::string& n : epp::NamedReplayPolicies()) s += (s.empty() ? "" : ", ") + n;
                    return s;
                  }() + ") or an EndpointPickerConfig file; repeatable (default: round-robin and gie-default)");
  cmd->add_option("--epp-replicas", o->epp_replicas,
                  "Independent EPP replicas behind the gateway, requests spread round robin (each learns only its own "
                  "picks; a precise policy's replicas all get every server's KV events)")
      ->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_flag("--shared-state", o->shared_state,
                "With --epp-replicas: the replicas share prefix updates and in-flight counts as serve's --shared-state "
                "does (after --shared-state-delay)");
  cmd->add_option("--shared-state-delay", o->shared_state_delay,
                  "How long a replica's update takes to reach the others (Go duration; serve: about twice "
                  "--shared-state-interval)")
      ->capture_default_str();
  cmd->add_option("--kv-event-delay", o->kv_event_delay,
                  "Precise policies: how long a server's KV event takes to reach the EPP (Go duration)")
      ->capture_default_str();
  cmd->add_option("--refresh-metrics-interval", o->refresh_metrics_interval, "How often the EPP scrapes the servers (Go duration)")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed for the workload, tie-breaks and random pickers")->capture_default_str();
  cmd->add_option("--regions", o->regions,
                  "Several regions: NAME:SERVERS[:SHARE[:CAPACITY_RPS]],... compares a global EPP, region-level EPPs over "
                  "pools and local EPPs with overflow, with one --policy as the local one (default gie-default; docs/routing.md)");
  cmd->add_option("--rtt", o->rtt, "With --regions: round-trip times A/B=MS,... for every pair of regions");
  cmd->add_option("--global-region", o->global_region, "With --regions: where the global EPP runs (default: the first region)");
  cmd->add_option("--saturation-queue", o->saturation_queue,
                  "With --regions: a server's queue at which it counts as saturated (spill-over and overflow)")
      ->capture_default_str();
  cmd->add_option("--saturation-kv", o->saturation_kv, "With --regions: the KV-cache use at which a server counts as saturated")
      ->capture_default_str();
  cmd->add_option("--output,-o", o->output, "text or json")->check(CLI::IsMember({"text", "json"}))->capture_default_str();
  cmd->add_option("--report", o->report, "Also write a self-contained HTML report (inline SVG charts) to this file");
  cmd->add_flag_callback("--no-progress", [o] { o->progress = false; },
                         "No progress bar (by default it is shown on stderr when stderr is a terminal)");
  cmd->callback([o, cmd, &exit_code] {
    o->given.clear();
    for (const char* flag : kWorkloadFlags)
      if (cmd->count(flag) > 0) o->given.push_back(flag);
    for (const char* flag : {"--rate", "--arrivals"})
      if (cmd->count(flag) > 0) o->given.push_back(flag);
    exit_code = RunReplay(*o);
  });
}

int RunReplay(const ReplayCommandOptions& o) {
  if (o.trace.empty() && o.workload.empty() && o.gie_workload.empty())
    return PrintError(absl::InvalidArgumentError("nothing to replay: give --trace FILE, --workload shared-prefix or --gie-workload NAME"));
  absl::StatusOr<int64_t> interval = epp::ParseDurationMicros(o.refresh_metrics_interval);
  if (!interval.ok())
    return PrintError(absl::InvalidArgumentError("--refresh-metrics-interval: " + std::string(interval.status().message())));
  if (*interval <= 0) return PrintError(absl::InvalidArgumentError("--refresh-metrics-interval: must be > 0"));

  std::vector<epp::ReplayPolicy> policies;
  // Default: round-robin and gie-default; with --regions one local policy, gie-default.
  const std::vector<std::string> args = !o.policies.empty() ? o.policies
                                        : o.regions.empty() ? std::vector<std::string>{"round-robin", "gie-default"}
                                                            : std::vector<std::string>{"gie-default"};
  for (size_t i = 0; i < args.size(); ++i) {
    absl::StatusOr<epp::ReplayPolicy> p = epp::ResolveReplayPolicy(args[i], i);
    if (!p.ok()) return PrintError(p.status());
    policies.push_back(*std::move(p));
  }
  epp::MakePolicyNamesUnique(policies);

  epp::ReplayOptions ro;
  ro.servers = o.servers;
  ro.prefill_servers = o.prefill_servers;
  ro.decode_servers = o.decode_servers;
  ro.kv_link_gbytes_per_s = o.kv_link_gbytes_per_s;
  ro.kv_bytes_per_token = o.kv_bytes_per_token;
  ro.epp_replicas = o.epp_replicas;
  ro.shared_state = o.shared_state;
  {
    absl::StatusOr<int64_t> delay = epp::ParseDurationMicros(o.shared_state_delay);
    if (!delay.ok() || *delay < 0)
      return PrintError(absl::InvalidArgumentError(
          "--shared-state-delay: " + (delay.ok() ? std::string("must be >= 0") : std::string(delay.status().message()))));
    ro.shared_state_delay_us = *delay;
  }
  {
    absl::StatusOr<int64_t> delay = epp::ParseDurationMicros(o.kv_event_delay);
    if (!delay.ok()) return PrintError(absl::InvalidArgumentError("--kv-event-delay: " + std::string(delay.status().message())));
    ro.kv_event_delay_us = *delay;
  }
  ro.server = o.server;
  ro.server.seed = o.seed;
  if (o.server_kv_tokens > 0) {
    ro.server.kv_blocks = o.server_kv_tokens / ro.server.block_size;
    if (ro.server.kv_blocks < 1)
      return PrintError(absl::InvalidArgumentError("--server-kv-tokens: less than one " + std::to_string(ro.server.block_size) +
                                                   "-token block"));
  }
  if (absl::Status s = ro.server.Validate(); !s.ok()) return PrintError(absl::InvalidArgumentError(std::string(s.message())));
  ro.scrape_interval_us = *interval;
  ro.seed = o.seed;
  if (!o.server_speed.empty()) {
    absl::StatusOr<std::vector<double>> speeds = epp::ParseServerSpeeds(o.server_speed);
    if (!speeds.ok()) return PrintError(speeds.status());
    const int count = ro.prefill_servers + ro.decode_servers > 0 ? ro.prefill_servers + ro.decode_servers : ro.servers;
    absl::StatusOr<std::vector<epp::SimParams>> mixed = epp::MixedSpeedServers(ro.server, count, *speeds);
    if (!mixed.ok()) return PrintError(mixed.status());
    ro.per_server = *std::move(mixed);
  }

  std::string title;
  absl::StatusOr<std::vector<epp::ReplayRequest>> trace = LoadInput(o, title);
  if (!trace.ok()) return PrintError(trace.status());
  if (!o.tenants.empty() || !o.priority_mix.empty()) {
    absl::StatusOr<epp::TenantMix> mix = epp::ParseTenantMix(o.tenants, o.priority_mix, o.seed);
    if (!mix.ok()) return PrintError(mix.status());
    epp::MixTenants(*trace, *mix);
  }
  epp::AttachSlos(*trace, o.slo_ttft_ms, o.slo_tpot_ms);

  if (!o.regions.empty()) {
    if (policies.size() != 1)
      return PrintError(absl::InvalidArgumentError("--regions compares routing shapes with one local policy: give one --policy"));
    if (!o.report.empty()) return PrintError(absl::InvalidArgumentError("--report is not available with --regions"));
    if (o.prefill_servers > 0 || o.decode_servers > 0 || o.epp_replicas != 1 || !o.server_speed.empty())
      return PrintError(absl::InvalidArgumentError(
          "--regions takes its servers from the regions: --prefill-servers, --decode-servers, --epp-replicas and "
          "--server-speed do not apply"));
  }
  // Open the report file before the run so that a bad path fails fast.
  std::ofstream report_file;
  if (!o.report.empty()) {
    report_file.open(o.report, std::ios::binary | std::ios::trunc);
    if (!report_file) return PrintError(absl::InvalidArgumentError("--report: cannot write '" + o.report + "': " + std::string(std::strerror(errno))));
  }

  if (!o.regions.empty()) {
    epp::MultiRegionOptions mo;
    absl::StatusOr<std::vector<epp::ReplayRegion>> regions = epp::ParseReplayRegions(o.regions);
    if (!regions.ok()) return PrintError(regions.status());
    mo.regions = *std::move(regions);
    absl::StatusOr<std::map<std::pair<std::string, std::string>, double>> rtt = epp::ParseRttMatrix(o.rtt);
    if (!rtt.ok()) return PrintError(rtt.status());
    mo.rtt_ms = *std::move(rtt);
    mo.server = ro.server;
    mo.scrape_interval_us = ro.scrape_interval_us;
    mo.seed = o.seed;
    mo.global_region = o.global_region;
    mo.saturation_queue = o.saturation_queue;
    mo.saturation_kv = o.saturation_kv;
    absl::StatusOr<epp::MultiRegionReport> mr = epp::RunMultiRegionReplay(*trace, policies.front(), mo);
    if (!mr.ok()) return PrintError(mr.status());
    std::cout << (o.output == "json" ? epp::MultiRegionReportToJson(*mr) + "\n" : epp::MultiRegionReportToText(*mr));
    return kExitOk;
  }
  if (!o.rtt.empty() || !o.global_region.empty())
    return PrintError(absl::InvalidArgumentError("--rtt and --global-region go with --regions"));

  ProgressBar bar;
  if (o.progress && isatty(fileno(stderr))) ro.progress = [&bar](double f) { bar.Update(f); };
  absl::StatusOr<epp::ReplayReport> report = epp::RunReplay(*trace, policies, ro);
  bar.Clear();
  if (!report.ok()) return PrintError(report.status());

  if (o.output == "json") {
    std::cout << epp::ReplayReportToJson(*report) << "\n";
  } else {
    std::cout << epp::ReplayReportToText(*report);
  }
  if (report_file.is_open()) {
    report_file << epp::ReplayReportToHtml(*report, "eppctl replay: " + title);
    report_file.close();
    if (!report_file) return PrintError(absl::UnavailableError("--report: writing '" + o.report + "' failed"));
    if (o.output != "json") std::cerr << "report written to " << o.report << "\n";
  }
  return kExitOk;
}

}  // namespace eppctl
