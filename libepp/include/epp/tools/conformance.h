// A black-box conformance suite for any ext_proc Endpoint Picker (`eppctl conformance`).
//
// The suite starts model-server simulators on 127.0.0.1, writes an endpoints file naming them,
// launches the EPP under test from a command template (or waits for one the user started), and
// drives real ext_proc streams at it over gRPC: the destination header and `envoy.lb` metadata,
// picks within the pool, the subset hint, error statuses, body echo in FULL_DUPLEX_STREAMED, the
// response path, health services, shedding, concurrency and a model server that dies. Every check
// names the protocol text it tests (ConformanceCheckInfo::cites); docs/conformance.md lists them.
//
// Nothing here knows epp's own server: the EPP under test is only a gRPC address (and, for the
// health check, a second one), so Go, Rust or C++ pickers are tested alike.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "epp/status.h"

namespace epp {

struct ConformanceCheckInfo {
  std::string id;     // "destination-header-and-metadata"
  std::string title;  // one line: what is asserted
  std::string cites;  // the protocol text (document and section) the assertion comes from
};
// Every check, in the order the suite runs them.
const std::vector<ConformanceCheckInfo>& ConformanceChecks();

struct ConformanceOptions {
  // One of the two forms:
  //  launch: a shell command (run with /bin/sh -c, in its own process group, stopped with SIGTERM
  //    then SIGKILL at the end) with placeholders {endpoints_file}, {grpc_port}, {health_port} and
  //    {metrics_port}, replaced by the suite's file and free loopback ports.
  //  target: HOST:PORT of an EPP the user runs; endpoints_out is the endpoints file that EPP
  //    reads (required with target, refused with launch). The suite lends it the run's pool and
  //    gives it back at the end, whatever the outcome: what it held before written back in place,
  //    or removed when the suite created it; left alone when something else changed it during
  //    the run (ConformanceReport::endpoints_file_after says which). Until then a copy of what
  //    it held is kept in the work directory (endpoints-out.before).
  std::string launch;
  std::string target;
  std::string endpoints_out;
  // grpc.health.v1 address. With launch: empty means 127.0.0.1:{health_port}. With target: empty
  // means the health checks are skipped.
  std::string health_target;
  // ext_proc over TLS; the server's certificate is not verified (as gateways do). Before the first
  // gRPC call the suite probes the target's transport: the wrong one is an error at once
  // ("the target speaks TLS; add --tls", or "... plaintext; drop --tls").
  bool tls = false;
  int simulators = 3;            // model servers in the pool (>= 2)
  // An InferenceObjective name the EPP under test gives a negative priority: with it, the
  // shedding check saturates every model server and expects 429 for requests naming it. Empty:
  // that check is skipped.
  std::string sheddable_objective;
  std::vector<std::string> only;  // check ids to run (empty: all)
  std::vector<std::string> skip;  // check ids not to run
  std::chrono::milliseconds startup_timeout{30000};  // until the EPP answers its first pick
  std::chrono::milliseconds stream_timeout{5000};    // deadline of each ext_proc stream
  // Where the endpoints file and the launched EPP's log go; empty: a new directory under $TMPDIR,
  // removed at the end unless a check failed.
  std::string work_dir;
};

enum class ConformanceOutcome { kPass, kFail, kSkip };
std::string_view ConformanceOutcomeName(ConformanceOutcome o);  // "pass", "fail", "skip"

struct ConformanceResult {
  ConformanceCheckInfo check;
  ConformanceOutcome outcome = ConformanceOutcome::kSkip;
  std::string detail;  // why it failed or was skipped; what was observed when it passed
  double seconds = 0;
};

struct ConformanceReport {
  std::string target;          // the address tested
  std::string launch;          // the command line run (placeholders replaced), if any
  std::string endpoints_file;  // the file written
  // What became of it after the run: "restored to what it held before (57 bytes)", "removed (the
  // suite created it)", "left as found: it changed during the run, ...", "removed with the
  // temporary work directory", "kept in the work directory ...".
  std::string endpoints_file_after;
  std::vector<std::string> pool;  // the simulators' addresses
  std::vector<ConformanceResult> results;
  double seconds = 0;
  std::string epp_log_tail;    // the launched EPP's last output lines when a check failed
  int count(ConformanceOutcome o) const;
  bool passed() const { return count(ConformanceOutcome::kFail) == 0; }
};

// Runs the suite. `progress`, when set, sees each result as it is decided. An error Status (not a
// report) when the suite cannot run: bad options (kInvalidArgument naming the option), a
// simulator that cannot start, a launched EPP that exits or never answers a pick within
// startup_timeout (kUnavailable, with its last output lines).
absl::StatusOr<ConformanceReport> RunConformance(const ConformanceOptions& options,
                                                 const std::function<void(const ConformanceResult&)>& progress = {});

// For a SIGINT / SIGTERM handler of a program running the suite (eppctl conformance installs
// one): gives back the endpoints_out file of the run in progress as RunConformance would at its
// end (what it held before, or removed). Async-signal-safe (open, read, write, unlink only); the
// handler then ends the process as the signal would have. Covers one run at a time (runs that
// lend a file while another one's is lent are given back only at their end); a no-op when none
// is lent.
void RestoreConformanceEndpointsFile();

std::string FormatConformanceText(const ConformanceReport& report);
std::string FormatConformanceJson(const ConformanceReport& report);
std::string FormatConformanceJUnit(const ConformanceReport& report);  // JUnit XML (one testsuite)

}  // namespace epp
