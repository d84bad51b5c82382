#include "commands/conformance.h"

#include <signal.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "epp/tools/conformance.h"
#include "output.h"

namespace eppctl {
namespace {

// Ctrl-C or a SIGTERM during a --target run: the user's --endpoints-out file is given back before
// the process ends as the signal would end it (the launched EPP follows by PR_SET_PDEATHSIG).
void OnSignal(int sig) {
  epp::RestoreConformanceEndpointsFile();
  raise(sig);  // SA_RESETHAND restored the default action; SA_NODEFER lets it through now
}

void GiveBackOnSignals() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_NODEFER;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

}  // namespace

void SetupConformanceCommand(CLI::App& app, int& exit_code) {
  struct Options {
    epp::ConformanceOptions run;
    double startup_timeout_s = 30, stream_timeout_s = 5;
    std::string output = "text";
    std::string junit_file;
    bool list = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "conformance", "Black-box ext_proc conformance suite for any Endpoint Picker: simulators on loopback, real streams");
  cmd->add_option("--launch", o->run.launch,
                  "Command that starts the EPP under test ({endpoints_file}, {grpc_port}, {health_port}, "
                  "{metrics_port} are replaced); stopped at the end");
  cmd->add_option("--target", o->run.target, "HOST:PORT of an EPP you started (with --endpoints-out)");
  cmd->add_option("--endpoints-out", o->run.endpoints_out,
                  "With --target: the endpoints file that EPP reads; it holds the suite's pool during the run and "
                  "is given back as it was at the end (or removed, if the suite created it)");
  cmd->add_option("--health", o->run.health_target,
                  "HOST:PORT of its grpc.health.v1 server (default with --launch: 127.0.0.1:{health_port}; "
                  "without it and --target: health check skipped)");
  cmd->add_flag("--tls", o->run.tls, "ext_proc over TLS (the server certificate is not verified)");
  cmd->add_option("--simulators", o->run.simulators, "Model-server simulators in the pool")->capture_default_str();
  cmd->add_option("--sheddable-objective", o->run.sheddable_objective,
                  "InferenceObjective name the EPP gives a negative priority (enables shedding-429)");
  cmd->add_option("--only", o->run.only, "Run only these checks (repeatable)");
  cmd->add_option("--skip", o->run.skip, "Do not run these checks (repeatable)");
  cmd->add_option("--startup-timeout", o->startup_timeout_s, "Seconds until the EPP answers its first pick")->capture_default_str();
  cmd->add_option("--stream-timeout", o->stream_timeout_s, "Deadline of each ext_proc stream, seconds")->capture_default_str();
  cmd->add_option("--work-dir", o->run.work_dir, "Directory for the endpoints file and the EPP's log (default: a temporary one)");
  cmd->add_option("-o,--output", o->output, "text, json or junit")->check(CLI::IsMember({"text", "json", "junit"}));
  cmd->add_option("--junit", o->junit_file, "Also write JUnit XML to FILE");
  cmd->add_flag("--list", o->list, "List the checks with what each asserts and cites, and exit");
  cmd->callback([o, &exit_code] {
    if (o->list) {
      for (const auto& c : epp::ConformanceChecks()) std::cout << c.id << "\n  " << c.title << "\n  cites: " << c.cites << "\n";
      exit_code = kExitOk;
      return;
    }
    if (!(o->startup_timeout_s > 0 && o->startup_timeout_s <= 3600) || !(o->stream_timeout_s > 0 && o->stream_timeout_s <= 600)) {
      exit_code = PrintError(absl::InvalidArgumentError("--startup-timeout must be in (0, 3600] s and --stream-timeout in (0, 600] s"));
      return;
    }
    o->run.startup_timeout = std::chrono::milliseconds(static_cast<int64_t>(o->startup_timeout_s * 1000));
    o->run.stream_timeout = std::chrono::milliseconds(static_cast<int64_t>(o->stream_timeout_s * 1000));
    if (!o->run.endpoints_out.empty()) GiveBackOnSignals();
    const bool text = o->output == "text";
    auto progress = [text](const epp::ConformanceResult& r) {
      if (!text) return;
      std::cerr << (r.outcome == epp::ConformanceOutcome::kPass ? "pass " : r.outcome == epp::ConformanceOutcome::kFail ? "FAIL " : "skip ")
                << r.check.id << "\n";
    };
    absl::StatusOr<epp::ConformanceReport> r = epp::RunConformance(o->run, progress);
    if (!r.ok()) {
      PrintError(r.status());
      exit_code = kExitUsage;  // the suite could not run: bad options, or no EPP answering
      return;
    }
    if (o->output == "json") std::cout << epp::FormatConformanceJson(*r);
    else if (o->output == "junit") std::cout << epp::FormatConformanceJUnit(*r);
    else std::cout << epp::FormatConformanceText(*r);
    if (!o->junit_file.empty()) {
      std::ofstream out(o->junit_file, std::ios::trunc);
      out << epp::FormatConformanceJUnit(*r);
      if (!out) {
        exit_code = PrintError(absl::InvalidArgumentError("--junit: cannot write " + o->junit_file));
        return;
      }
    }
    exit_code = r->passed() ? kExitOk : kExitFailure;
  });
}

}  // namespace eppctl
