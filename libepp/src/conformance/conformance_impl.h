// Internals of the ext_proc conformance suite (epp/tools/conformance.h), shared by its files. Private to
// libepp/src/conformance/.
//
//   conformance.cc                     the runner (simulators, endpoints file, the EPP under
//                                      test, waiting for its first pick), the case table and the
//                                      reports (text, JSON, JUnit)
//   conformance_launch.cc              the EPP under test as a child process; free ports; the
//                                      user's endpoints file (--endpoints-out), lent to the run
//   conformance_client.cc              the ext_proc client: one stream, and what it answered
//   conformance_cases_health.cc        grpc.health.v1 services
//   conformance_cases_destination.cc   what a pick says: the destination header and metadata
//   conformance_cases_request.cc       the request path: body echo, body-less requests, bad
//                                      bodies (400) and Envoy's first-message fields
//   conformance_cases_subset.cc        the subset hint and its 503s
//   conformance_cases_response.cc      the response path: echo and streaming
//   conformance_cases_load.cc          concurrency, shedding (429) and a model server that dies
//
// Each case file contributes a group of {check info, function} entries; Suite::Cases() joins the
// groups in the order the suite runs them (and docs/conformance.md lists them).
#pragma once

#include <sys/types.h>

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "envoy/service/ext_proc/v3/external_processor.grpc.pb.h"
#include "epp/tools/conformance.h"
#include "epp/runtime/extproc.h"
#include "epp/tools/sim.h"
#include "epp/status.h"

namespace epp::internal::conformance {

namespace pb = ::envoy::service::ext_proc::v3;
using Clock = std::chrono::steady_clock;

// ---- The EPP under test as a child process (conformance_launch.cc) ------------------------------
// With --launch the suite owns the EPP's lifetime: its own process group (so a shell wrapper and
// its children stop together), SIGTERM then SIGKILL at the end, and its output kept for the
// report when a check fails.

class Launched {
 public:
  ~Launched() { Stop(); }
  absl::Status Start(const std::string& command, const std::string& log_path);
  // The exit description when the process has ended, nullopt while it runs.
  std::optional<std::string> Exited();
  void Stop();
  std::string LogTail(size_t lines = 30) const;
  bool running() const { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
  std::optional<std::string> exited_;
  std::string log_path_;
};

// A loopback port free at the time of asking, for the {grpc_port}-style placeholders.
absl::StatusOr<int> FreePort();

// ---- The user's endpoints file (conformance_launch.cc) ------------------------------------------
// With --target the EPP under test reads a file the user names (--endpoints-out); the suite lends
// it the run's pool and gives it back at the end: its previous bytes written back in place (the
// EPP watching it reloads its own pool), or removed when the suite created it. A file that no
// longer holds what the suite wrote was changed by someone else and is left alone. Until the end,
// a copy of the previous bytes is kept in the work directory, and a signal handler can give the
// file back (RestoreConformanceEndpointsFile, epp/tools/conformance.h).

class LentFile {
 public:
  LentFile() = default;
  LentFile(const LentFile&) = delete;
  LentFile& operator=(const LentFile&) = delete;
  ~LentFile() { GiveBack(); }
  // Remembers what `path` holds (a regular file, or nothing), keeps a copy in `backup`, writes
  // `content` in place.
  absl::Status Lend(const std::string& path, const std::string& content, const std::string& backup);
  // Gives the file back once; returns what was done, for the report ("restored to its previous
  // 57 bytes", "removed: ...", "left as found: ..."). Empty when nothing was lent.
  std::string GiveBack();
  // After GiveBack: the copy in the work directory is still needed (the outcome names it).
  bool backup_kept() const { return backup_kept_; }

 private:
  std::string path_, backup_;
  bool lent_ = false, existed_ = false, in_view_ = false, backup_kept_ = false;
  std::string before_, written_, outcome_;
};

// ---- ext_proc client (conformance_client.cc) ----------------------------------------------------
// The suite speaks to the EPP as Envoy does: one bidirectional Process stream per HTTP request,
// FULL_DUPLEX_STREAMED, and reads the answers the way Envoy would act on them.

// Plaintext, or TLS without verifying the server (as Envoy Gateway dials the EPP).
std::shared_ptr<grpc::ChannelCredentials> Credentials(bool tls);

// Which transport the server at `target` speaks, told from the first bytes it answers to a TLS
// ClientHello and to a plaintext HTTP/2 preface (the one `tls_first` says first; the other only
// when the first gets no telling answer), each on a connection of its own, each within `timeout`.
struct TransportProbe {
  enum Kind { kRefused, kUnknown, kPlaintext, kTls } kind = kUnknown;
  std::string detail;  // "127.0.0.1:9002 closed the connection on a plaintext HTTP/2 preface, then ..."
};
TransportProbe ProbeTransport(const std::string& target, bool tls_first, std::chrono::milliseconds timeout);

// What a stream answered to the request path.
struct RequestAnswer {
  std::vector<pb::ProcessingResponse> messages;  // in order
  bool immediate = false;
  int immediate_status = 0;
  std::string immediate_body;
  bool headers_seen = false;
  std::vector<std::pair<std::string, std::string>> set_headers;  // lower-cased names
  std::optional<std::string> metadata_destination;
  std::string body;          // streamed_response chunks joined
  std::vector<size_t> chunk_sizes;
  bool body_eos = false;
  std::string problem;       // a protocol problem seen while reading (empty: none)
  grpc::Status status;       // set when the stream ended early

  std::vector<std::string> Header(std::string_view name) const {
    std::vector<std::string> v;
    for (const auto& [k, val] : set_headers)
      if (k == name) v.push_back(val);
    return v;
  }
  std::optional<std::string> Destination() const {
    auto v = Header(kDestinationEndpointHeader);
    if (v.empty()) return std::nullopt;
    return v.front();
  }
};

class Stream {
 public:
  Stream(pb::ExternalProcessor::Stub& stub, std::chrono::milliseconds timeout) {
    ctx_.set_deadline(std::chrono::system_clock::now() + timeout);
    rw_ = stub.Process(&ctx_);
  }
  ~Stream() {
    if (!finished_) {
      ctx_.TryCancel();
      rw_->Finish();
    }
  }
  bool Write(const pb::ProcessingRequest& r) { return rw_->Write(r); }
  bool WriteSerialized(const std::string& bytes) {
    pb::ProcessingRequest r;
    r.ParseFromString(bytes);
    return Write(r);
  }
  bool Read(pb::ProcessingResponse* r) { return rw_->Read(r); }
  // Half-closes and waits for the server's end of the stream.
  grpc::Status Close() {
    rw_->WritesDone();
    pb::ProcessingResponse extra;
    while (rw_->Read(&extra)) ++extra_after_close_;
    finished_ = true;
    return rw_->Finish();
  }
  grpc::Status Finish() {
    finished_ = true;
    return rw_->Finish();
  }
  int extra_after_close() const { return extra_after_close_; }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<pb::ProcessingRequest, pb::ProcessingResponse>> rw_;
  bool finished_ = false;
  int extra_after_close_ = 0;
};

// Writes the request messages, then reads until the request path is answered: an
// ImmediateResponse, or the headers response and (with a body) the body's last chunk.
RequestAnswer SendRequest(Stream& s, const std::vector<std::string>& messages, bool has_body);

// ---- The run (conformance.cc) -------------------------------------------------------------------

inline constexpr std::string_view kModel = "conformance-model";

std::string CompletionBody(std::string_view prompt);

// The first entry of a destination list.
std::string Primary(const std::string& d);

struct Outcome {
  ConformanceOutcome outcome;
  std::string detail;
};
inline Outcome Pass(std::string d) { return {ConformanceOutcome::kPass, std::move(d)}; }
inline Outcome Fail(std::string d) { return {ConformanceOutcome::kFail, std::move(d)}; }
inline Outcome Skip(std::string d) { return {ConformanceOutcome::kSkip, std::move(d)}; }

class Suite;

// One check: what it asserts and cites, and how it runs. Where each assertion comes from:
// "Protocol" is the Endpoint Picker Protocol of the Gateway API Inference Extension
// (docs/proposals/004-endpoint-picker-protocol); "reference EPP" is GIE's pkg/epp/handlers;
// "ext_proc" is Envoy's envoy/service/ext_proc/v3/external_processor.proto.
struct ConformanceCase {
  ConformanceCheckInfo info;
  Outcome (*run)(Suite&);
};

class Suite {
 public:
  explicit Suite(const ConformanceOptions& o) : o_(o) {}
  ~Suite() {
    if (load_thread_.joinable()) {
      for (auto& s : sims_) s->Stop();
      load_thread_.join();
    }
    launched_.Stop();
    for (auto& s : sims_)
      if (s) s->Stop();
  }

  absl::StatusOr<ConformanceReport> Run(const std::function<void(const ConformanceResult&)>& progress);

  // Every check, in the order the suite runs them: the groups below, joined (conformance.cc).
  static const std::vector<ConformanceCase>& Cases();
  // The groups, one per case file.
  static std::vector<ConformanceCase> HealthCases();       // conformance_cases_health.cc
  static std::vector<ConformanceCase> DestinationCases();  // conformance_cases_destination.cc
  static std::vector<ConformanceCase> RequestBodyCases();  // conformance_cases_request.cc
  static std::vector<ConformanceCase> SubsetCases();       // conformance_cases_subset.cc
  static std::vector<ConformanceCase> RequestInputCases(); // conformance_cases_request.cc
  static std::vector<ConformanceCase> ResponseCases();     // conformance_cases_response.cc
  static std::vector<ConformanceCase> LoadCases();         // conformance_cases_load.cc

 private:
  absl::Status Setup(ConformanceReport& report);
  // Until something accepts connections at target_; then an error when it speaks the other
  // transport than --tls says (TLS without --tls, plaintext with it).
  absl::Status WaitListening();
  absl::Status WaitReady();
  void Connect();  // a new channel and stub to target_

  RequestAnswer Request(const HttpRequestCapture& c) {
    Stream s(*stub_, o_.stream_timeout);
    return SendRequest(s, BuildProcessingRequests(c), !c.body.empty());
  }
  HttpRequestCapture Basic(std::string_view prompt = "Write as if you were a critic: San Francisco") const {
    HttpRequestCapture c;
    c.path = "/v1/completions";
    c.headers = {{"content-type", "application/json"}, {":authority", "conformance.local"}};
    c.body = CompletionBody(prompt);
    return c;
  }
  bool InPool(std::string_view a) const { return pool_set_.count(std::string(a)) > 0; }
  // "" when `a` is a pick within `allowed` (every entry), else what is wrong.
  std::string CheckPick(const RequestAnswer& a, const std::set<std::string>& allowed) const {
    if (!a.problem.empty()) return a.problem;
    if (a.immediate) return absl::StrCat("ImmediateResponse ", a.immediate_status, " (", a.immediate_body, ") instead of a pick");
    auto d = a.Destination();
    if (!d) return "no x-gateway-destination-endpoint header in the request_headers response";
    for (absl::string_view e : absl::StrSplit(*d, ','))
      if (!allowed.count(std::string(e))) return absl::StrCat("picked ", e, ", not one of {", absl::StrJoin(allowed, ", "), "}");
    return "";
  }
  std::string ExpectImmediate(const RequestAnswer& a, int status) const {
    if (!a.problem.empty() && !a.immediate) return a.problem;
    if (!a.immediate) {
      auto d = a.Destination();
      return absl::StrCat("no ImmediateResponse; ", d ? "picked " + *d : std::string("answered without a destination"));
    }
    if (a.immediate_status != status)
      return absl::StrCat("ImmediateResponse ", a.immediate_status, " (", a.immediate_body, "), expected ", status);
    return "";
  }

  // The checks, in the files of their groups.
  Outcome HealthServices();
  Outcome DestinationHeaderAndMetadata();
  Outcome DestinationValueFormat();
  Outcome PickWithinPool();
  Outcome RequestBodyEcho();
  Outcome HeaderOnly();
  Outcome SubsetHint(bool as_string);
  Outcome SubsetEmpty();
  Outcome SubsetUnmatched();
  Outcome BadBody();
  Outcome MissingModel();
  Outcome EnvoyFields();
  // Sends a request and, once picked, response headers of `content_type`; "" when both were
  // answered as they should be, else what went wrong.
  std::string StartResponse(Stream& s, std::string_view content_type);
  Outcome ResponseEcho();
  Outcome ResponseStreaming();
  Outcome Concurrent();
  Outcome Shedding();
  Outcome ServerDown();

  const ConformanceOptions& o_;
  std::string work_dir_;
  bool own_work_dir_ = false;
  std::vector<std::unique_ptr<SimHttpServer>> sims_;
  std::vector<std::string> pool_;
  std::set<std::string> pool_set_;
  Launched launched_;
  LentFile endpoints_out_;
  std::string target_, health_target_;
  Clock::time_point startup_deadline_;  // for the EPP's first pick: --startup-timeout from its launch
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::ExternalProcessor::Stub> stub_;
  std::thread load_thread_;
  bool failed_ = false;

 public:
  bool failed() const { return failed_; }
  const std::string& work_dir() const { return work_dir_; }
  bool own_work_dir() const { return own_work_dir_; }
  bool keep_work_dir() const { return failed_ || endpoints_out_.backup_kept(); }
};

}  // namespace epp::internal::conformance
