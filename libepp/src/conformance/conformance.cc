// The black-box ext_proc conformance suite (epp/tools/conformance.h): the runner and the reports.
//
// The runner sets up what a real deployment gives an EPP (model servers, an endpoints file, a
// gRPC address to serve on), starts the EPP under test or waits for the one the user runs, and
// runs the checks of the case files (conformance_impl.h lists them) in one fixed order, each
// timed and each failed if the launched EPP exits during it. The reports are plain text for a
// terminal, JSON for scripts and JUnit XML for CI dashboards.
#include "epp/tools/conformance.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/strings.h"
#include "conformance/conformance_impl.h"

namespace epp {
namespace internal::conformance {

// ---- The run ------------------------------------------------------------------------------------

std::string CompletionBody(std::string_view prompt) {
  nlohmann::json j = {{"model", kModel}, {"prompt", std::string(prompt)}, {"max_tokens", 8}};
  return j.dump();
}

// The first entry of a destination list.
std::string Primary(const std::string& d) { return d.substr(0, d.find(',')); }

// ---- The case table -----------------------------------------------------------------------------

const std::vector<ConformanceCase>& Suite::Cases() {
  static const std::vector<ConformanceCase> cases = [] {
    std::vector<ConformanceCase> all;
    for (auto group : {&Suite::HealthCases, &Suite::DestinationCases, &Suite::RequestBodyCases, &Suite::SubsetCases,
                       &Suite::RequestInputCases, &Suite::ResponseCases, &Suite::LoadCases}) {
      std::vector<ConformanceCase> g = group();
      all.insert(all.end(), g.begin(), g.end());
    }
    return all;
  }();
  return cases;
}

// ---- The runner ---------------------------------------------------------------------------------
// The pool is simulators on loopback (epp/tools/sim.h), so the suite needs no GPUs and every check
// knows exactly which endpoints exist. The EPP is ready once it picks within that pool.

absl::Status Suite::Setup(ConformanceReport& report) {
  if (o_.launch.empty() == o_.target.empty())
    return absl::InvalidArgumentError("give exactly one of --launch COMMAND and --target HOST:PORT");
  if (!o_.target.empty() && o_.endpoints_out.empty())
    return absl::InvalidArgumentError(
        "--target needs --endpoints-out FILE: the endpoints file the EPP under test reads (the suite writes its pool "
        "there for the run and gives the file back as it was at the end)");
  if (!o_.launch.empty() && !o_.endpoints_out.empty())
    return absl::InvalidArgumentError(
        "--endpoints-out goes with --target: with --launch the suite writes {endpoints_file} into its work directory "
        "(--work-dir DIR keeps it)");
  if (o_.simulators < 2 || o_.simulators > 16)
    return absl::InvalidArgumentError(absl::StrCat("--simulators must be in [2, 16], got ", o_.simulators));
  const auto& all = ConformanceChecks();
  for (const auto* list : {&o_.only, &o_.skip})
    for (const std::string& id : *list)
      if (std::none_of(all.begin(), all.end(), [&](const ConformanceCheckInfo& c) { return c.id == id; }))
        return absl::InvalidArgumentError(absl::StrCat("unknown check '", id, "' (eppctl conformance --list names them)"));

  std::error_code ec;
  if (!o_.work_dir.empty()) {
    work_dir_ = o_.work_dir;
    std::filesystem::create_directories(work_dir_, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("--work-dir ", work_dir_, ": ", ec.message()));
  } else {
    std::string tmpl = (std::filesystem::temp_directory_path(ec) / "epp-conformance-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) return absl::InternalError(absl::StrCat("mkdtemp ", tmpl, ": ", std::strerror(errno)));
    work_dir_ = tmpl;
    own_work_dir_ = true;
  }

  // The pool: simulators that admit two requests at a time, so the shedding check can fill
  // their queues with a few long requests.
  for (int i = 0; i < o_.simulators; ++i) {
    SimHttpOptions so;
    so.params.models = {std::string(kModel)};
    so.params.max_running = 2;
    so.params.seed = static_cast<uint64_t>(i + 1);
    so.threads = 32;
    so.host = "127.0.0.1";
    EPP_ASSIGN_OR_RETURN(auto sim, SimHttpServer::Start(so));
    pool_.push_back(absl::StrCat("127.0.0.1:", sim->port()));
    sims_.push_back(std::move(sim));
  }
  pool_set_ = {pool_.begin(), pool_.end()};
  report.pool = pool_;

  // The endpoints file: in the work directory, or (--target) the user's file, lent for the run.
  std::string content = "# Written by eppctl conformance: the simulated model servers of this run.\nendpoints:\n";
  for (const std::string& a : pool_) absl::StrAppend(&content, "- address: ", a, "\n  metrics: http://", a, "/metrics\n  engine: vllm\n");
  const std::string endpoints = o_.endpoints_out.empty() ? work_dir_ + "/endpoints.yaml" : o_.endpoints_out;
  if (o_.endpoints_out.empty()) {
    std::ofstream out(endpoints, std::ios::trunc);
    out << content;
    out.close();
    if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot write the endpoints file ", endpoints));
  } else {
    EPP_RETURN_IF_ERROR(endpoints_out_.Lend(endpoints, content, work_dir_ + "/endpoints-out.before"));
  }
  report.endpoints_file = endpoints;

  if (!o_.launch.empty()) {
    EPP_ASSIGN_OR_RETURN(int grpc_port, FreePort());
    EPP_ASSIGN_OR_RETURN(int health_port, FreePort());
    EPP_ASSIGN_OR_RETURN(int metrics_port, FreePort());
    const std::string cmd = absl::StrReplaceAll(o_.launch, {{"{endpoints_file}", endpoints},
                                                            {"{grpc_port}", std::to_string(grpc_port)},
                                                            {"{health_port}", std::to_string(health_port)},
                                                            {"{metrics_port}", std::to_string(metrics_port)}});
    report.launch = cmd;
    target_ = absl::StrCat("127.0.0.1:", grpc_port);
    health_target_ = o_.health_target.empty() ? absl::StrCat("127.0.0.1:", health_port) : o_.health_target;
    EPP_RETURN_IF_ERROR(launched_.Start(cmd, work_dir_ + "/epp.log"));
  } else {
    target_ = o_.target;
    health_target_ = o_.health_target;
  }
  report.target = target_;
  startup_deadline_ = Clock::now() + o_.startup_timeout;
  EPP_RETURN_IF_ERROR(WaitListening());
  Connect();
  return WaitReady();
}

absl::Status Suite::WaitListening() {
  // Before any gRPC call: is something listening, and does it speak the transport of --tls? A
  // channel with the wrong one only retries (a plaintext client at a TLS server sees the
  // connection close; the server logs a handshake error per attempt) until the start-up timeout.
  const auto deadline = startup_deadline_;
  TransportProbe p;
  while (true) {
    if (auto exited = launched_.Exited())
      return absl::UnavailableError(absl::StrCat("the EPP under test ", *exited, " before answering a pick; its output:\n",
                                                 launched_.LogTail()));
    p = ProbeTransport(target_, o_.tls, std::chrono::milliseconds(1000));
    if (p.kind != TransportProbe::kRefused) break;
    if (Clock::now() + std::chrono::milliseconds(100) >= deadline) {
      std::string msg = absl::StrCat("the EPP at ", target_, " answered no pick within this run's pool in ",
                                     o_.startup_timeout.count(), " ms (last: ", p.detail, ")");
      if (launched_.running()) absl::StrAppend(&msg, "; its output:\n", launched_.LogTail());
      return absl::UnavailableError(msg);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (p.kind == TransportProbe::kTls && !o_.tls)
    return absl::InvalidArgumentError(absl::StrCat("the target speaks TLS; add --tls (", p.detail, ")"));
  if (p.kind == TransportProbe::kPlaintext && o_.tls)
    return absl::InvalidArgumentError(absl::StrCat("the target speaks plaintext; drop --tls (", p.detail, ")"));
  return absl::OkStatus();  // the right transport, or one the probe cannot tell: gRPC will say
}

void Suite::Connect() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  // The launched EPP is not listening yet on the first attempts: retry connecting quickly. (Not
  // GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: gRPC also takes it as the connect timeout, which a TLS
  // handshake on a busy machine can exceed.) A channel of its own subchannels, so a new one
  // really makes a new connection.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  channel_ = grpc::CreateCustomChannel(target_, Credentials(o_.tls), args);
  stub_ = pb::ExternalProcessor::NewStub(channel_);
}

absl::Status Suite::WaitReady() {
  // Ready once a pick lands in this run's pool: an EPP already running (--target) may still hold
  // the endpoints it read before the suite wrote its file.
  const auto deadline = startup_deadline_;
  std::string last = "no answer yet";
  while (Clock::now() < deadline) {
    if (auto exited = launched_.Exited())
      return absl::UnavailableError(absl::StrCat("the EPP under test ", *exited, " before answering a pick; its output:\n",
                                                 launched_.LogTail()));
    bool reconnect = false;
    {
      Stream s(*stub_, std::chrono::milliseconds(2000));
      RequestAnswer a = SendRequest(s, BuildProcessingRequests(Basic()), true);
      last = CheckPick(a, pool_set_);
      if (last.empty()) return absl::OkStatus();
      reconnect = !a.status.ok() && a.status.error_code() == grpc::StatusCode::UNAVAILABLE;
    }
    // A connection that failed while the EPP was starting can stay broken (seen once under CI
    // load with TLS: "Broken pipe" for 30 s): start over with a fresh channel, once the stream
    // on the old one is gone.
    if (reconnect) Connect();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::string msg = absl::StrCat("the EPP at ", target_, " answered no pick within this run's pool in ",
                                 o_.startup_timeout.count(), " ms (last: ", last, ")");
  if (launched_.running()) absl::StrAppend(&msg, "; its output:\n", launched_.LogTail());
  return absl::UnavailableError(msg);
}

absl::StatusOr<ConformanceReport> Suite::Run(const std::function<void(const ConformanceResult&)>& progress) {
  const auto start = Clock::now();
  ConformanceReport report;
  if (absl::Status st = Setup(report); !st.ok()) {
    endpoints_out_.GiveBack();
    return st;
  }
  for (const ConformanceCase& c : Cases()) {
    const ConformanceCheckInfo& info = c.info;
    ConformanceResult r;
    r.check = info;
    const bool selected = o_.only.empty() || std::count(o_.only.begin(), o_.only.end(), info.id);
    if (!selected || std::count(o_.skip.begin(), o_.skip.end(), info.id)) {
      r.outcome = ConformanceOutcome::kSkip;
      r.detail = "not selected";
    } else {
      const auto t0 = Clock::now();
      Outcome out = c.run(*this);
      r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      if (auto exited = launched_.Exited(); exited && out.outcome != ConformanceOutcome::kSkip) {
        out = Fail(absl::StrCat("the EPP under test ", *exited, " during this check"));
      }
      r.outcome = out.outcome;
      r.detail = std::move(out.detail);
    }
    if (r.outcome == ConformanceOutcome::kFail) failed_ = true;
    if (progress) progress(r);
    report.results.push_back(std::move(r));
  }
  if (failed_ && !o_.launch.empty()) report.epp_log_tail = launched_.LogTail();
  if (!o_.endpoints_out.empty()) report.endpoints_file_after = endpoints_out_.GiveBack();
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return report;
}

}  // namespace internal::conformance

namespace {

// ---- Reports ------------------------------------------------------------------------------------

std::string XmlEscape(std::string_view s) { return internal::EscapeMarkup(s, "&quot;", "&apos;", true); }

}  // namespace


const std::vector<ConformanceCheckInfo>& ConformanceChecks() {
  static const std::vector<ConformanceCheckInfo> checks = [] {
    std::vector<ConformanceCheckInfo> out;
    for (const internal::conformance::ConformanceCase& c : internal::conformance::Suite::Cases()) out.push_back(c.info);
    return out;
  }();
  return checks;
}

std::string_view ConformanceOutcomeName(ConformanceOutcome o) {
  switch (o) {
    case ConformanceOutcome::kPass: return "pass";
    case ConformanceOutcome::kFail: return "fail";
    case ConformanceOutcome::kSkip: return "skip";
  }
  return "skip";
}

int ConformanceReport::count(ConformanceOutcome o) const {
  return static_cast<int>(std::count_if(results.begin(), results.end(), [&](const ConformanceResult& r) { return r.outcome == o; }));
}

absl::StatusOr<ConformanceReport> RunConformance(const ConformanceOptions& options,
                                                 const std::function<void(const ConformanceResult&)>& progress) {
  std::string dir;
  bool own = false, keep = false;
  absl::StatusOr<ConformanceReport> report;
  {
    internal::conformance::Suite suite(options);
    report = suite.Run(progress);
    dir = suite.work_dir();
    own = suite.own_work_dir();
    keep = !report.ok() || suite.keep_work_dir();
  }
  // A temporary work directory goes when every check passed; after a failure it stays for the
  // launched EPP's log (an empty one goes anyway).
  std::error_code ec;
  if (own && !keep) std::filesystem::remove_all(dir, ec);
  else if (own) std::filesystem::remove(dir, ec);  // only when empty
  if (report.ok() && report->endpoints_file_after.empty()) {
    if (!own) report->endpoints_file_after = "kept in the work directory";
    else if (!keep) report->endpoints_file_after = "removed with the temporary work directory";
    else report->endpoints_file_after = absl::StrCat("kept in the work directory ", dir, " (a check failed)");
  }
  return report;
}

std::string FormatConformanceText(const ConformanceReport& r) {
  std::string out = absl::StrCat("ext_proc conformance of ", r.target, r.launch.empty() ? "" : " (launched: " + r.launch + ")",
                                 "\npool: ", absl::StrJoin(r.pool, ", "), "\nendpoints file: ", r.endpoints_file,
                                 r.endpoints_file_after.empty() ? "" : " (after the run: " + r.endpoints_file_after + ")", "\n\n");
  for (const ConformanceResult& x : r.results) {
    absl::StrAppend(&out, x.outcome == ConformanceOutcome::kPass ? "PASS" : x.outcome == ConformanceOutcome::kFail ? "FAIL" : "SKIP",
                    "  ", x.check.id, "  ", x.detail, "\n");
    if (x.outcome == ConformanceOutcome::kFail) absl::StrAppend(&out, "      asserts: ", x.check.title, "\n      cites: ", x.check.cites, "\n");
  }
  absl::StrAppend(&out, "\n", r.count(ConformanceOutcome::kPass), " passed, ", r.count(ConformanceOutcome::kFail), " failed, ",
                  r.count(ConformanceOutcome::kSkip), " skipped in ", absl::StrFormat("%.1f", r.seconds), " s\n");
  if (!r.epp_log_tail.empty()) absl::StrAppend(&out, "\nlast output of the EPP under test:\n", r.epp_log_tail);
  return out;
}

std::string FormatConformanceJson(const ConformanceReport& r) {
  nlohmann::ordered_json j;
  j["target"] = r.target;
  if (!r.launch.empty()) j["launch"] = r.launch;
  j["endpoints_file"] = r.endpoints_file;
  j["endpoints_file_after"] = r.endpoints_file_after;
  j["pool"] = r.pool;
  j["passed"] = r.passed();
  j["counts"] = {{"pass", r.count(ConformanceOutcome::kPass)},
                 {"fail", r.count(ConformanceOutcome::kFail)},
                 {"skip", r.count(ConformanceOutcome::kSkip)}};
  j["seconds"] = r.seconds;
  j["checks"] = nlohmann::ordered_json::array();
  for (const ConformanceResult& x : r.results)
    j["checks"].push_back({{"id", x.check.id},
                           {"outcome", std::string(ConformanceOutcomeName(x.outcome))},
                           {"detail", x.detail},
                           {"asserts", x.check.title},
                           {"cites", x.check.cites},
                           {"seconds", x.seconds}});
  if (!r.epp_log_tail.empty()) j["epp_log_tail"] = r.epp_log_tail;
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string FormatConformanceJUnit(const ConformanceReport& r) {
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  absl::StrAppend(&out, "<testsuite name=\"epp-conformance\" tests=\"", r.results.size(), "\" failures=\"",
                  r.count(ConformanceOutcome::kFail), "\" errors=\"0\" skipped=\"", r.count(ConformanceOutcome::kSkip),
                  "\" time=\"", absl::StrFormat("%.3f", r.seconds), "\">\n");
  absl::StrAppend(&out, "  <properties>\n    <property name=\"target\" value=\"", XmlEscape(r.target), "\"/>\n");
  if (!r.launch.empty()) absl::StrAppend(&out, "    <property name=\"launch\" value=\"", XmlEscape(r.launch), "\"/>\n");
  absl::StrAppend(&out, "    <property name=\"endpoints_file\" value=\"", XmlEscape(r.endpoints_file), "\"/>\n");
  if (!r.endpoints_file_after.empty())
    absl::StrAppend(&out, "    <property name=\"endpoints_file_after\" value=\"", XmlEscape(r.endpoints_file_after), "\"/>\n");
  absl::StrAppend(&out, "  </properties>\n");
  for (const ConformanceResult& x : r.results) {
    absl::StrAppend(&out, "  <testcase classname=\"ext_proc\" name=\"", XmlEscape(x.check.id), "\" time=\"",
                    absl::StrFormat("%.3f", x.seconds), "\">\n");
    if (x.outcome == ConformanceOutcome::kFail)
      absl::StrAppend(&out, "    <failure message=\"", XmlEscape(x.detail), "\">", XmlEscape(x.check.title), "\n",
                      XmlEscape(x.check.cites), "</failure>\n");
    else if (x.outcome == ConformanceOutcome::kSkip)
      absl::StrAppend(&out, "    <skipped message=\"", XmlEscape(x.detail), "\"/>\n");
    else
      absl::StrAppend(&out, "    <system-out>", XmlEscape(x.detail), "</system-out>\n");
    absl::StrAppend(&out, "  </testcase>\n");
  }
  absl::StrAppend(&out, "</testsuite>\n");
  return out;
}

}  // namespace epp
