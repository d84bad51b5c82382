// The black-box ext_proc conformance suite (epp/tools/conformance.h): simulators, the EPP under test
// (launched or given), an ext_proc client over gRPC, and the checks.
#include "epp/tools/conformance.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "envoy/service/ext_proc/v3/external_processor.grpc.pb.h"
#include "epp/runtime/extproc.h"
#include "epp/runtime/http.h"
#include "epp/tools/sim.h"
#include "common/strings.h"

namespace epp {
namespace {

namespace pb = ::envoy::service::ext_proc::v3;
using Clock = std::chrono::steady_clock;

// Where each assertion comes from. "Protocol" is the Endpoint Picker Protocol of the Gateway API
// Inference Extension (docs/proposals/004-endpoint-picker-protocol); "reference EPP" is GIE's
// pkg/epp/handlers; "ext_proc" is Envoy's envoy/service/ext_proc/v3/external_processor.proto.
const std::vector<ConformanceCheckInfo>& Checks() {
  static const std::vector<ConformanceCheckInfo> checks = {
      {"health-services", "grpc.health.v1 answers SERVING for liveness, readiness and the ext_proc service name",
       "Protocol, Health Checking: the EPP serves the gRPC health protocol with the services liveness, readiness and "
       "envoy.service.ext_proc.v3.ExternalProcessor"},
      {"destination-header-and-metadata",
       "a pick sets header x-gateway-destination-endpoint and envoy.lb dynamic metadata with the same value",
       "Protocol, Destination Endpoint: the EPP MUST communicate the endpoint both as the header and as the "
       "envoy.lb/x-gateway-destination-endpoint dynamic metadata, with identical values"},
      {"destination-value-format", "the destination is ip:port or a comma-separated list of distinct ip:port, set once",
       "Protocol, Destination Endpoint and Fallback: the value is <ip:port> or <ip:port>,<ip:port>,... (primary first, "
       "fallbacks after it)"},
      {"pick-within-pool", "every endpoint named (primary and fallbacks) belongs to the pool",
       "Protocol, Endpoint Subset: without a subset hint the EPP picks from the InferencePool's endpoints"},
      {"request-body-echo",
       "FULL_DUPLEX_STREAMED: headers response first, then the body as streamed_response chunks of at most 64 KiB, "
       "end_of_stream on the last only, content equal to what was sent",
       "Protocol, requires FULL_DUPLEX_STREAMED; ext_proc: in that mode body responses carry "
       "body_mutation.streamed_response; reference EPP: chunks of at most 62,000 bytes"},
      {"header-only-request", "a request whose headers end the stream (GET, no body) gets a pick at once",
       "reference EPP handlers (request headers with end_of_stream): a body-less request is answered from the "
       "headers alone"},
      {"subset-hint-list", "a subset hint given as a list restricts the pick to its entries",
       "Protocol, Endpoint Subset: envoy.lb.subset_hint/x-gateway-destination-endpoint-subset as a list; the EPP "
       "MUST pick from it"},
      {"subset-hint-string", "a subset hint given as one comma-separated string restricts the pick to its entries",
       "Protocol, Endpoint Subset (the same hint written by a header-to-metadata filter as a string; GIE's "
       "lightweight EPP accepts both forms)"},
      {"subset-empty-503", "an empty subset hint is answered with ImmediateResponse 503",
       "Protocol, Endpoint Subset: an empty list or no eligible endpoint in it MUST be answered with 503"},
      {"subset-unmatched-503", "a subset hint naming no pool endpoint is answered with ImmediateResponse 503",
       "Protocol, Endpoint Subset: no eligible endpoint among the listed ones MUST be answered with 503"},
      {"bad-body-400", "a body that is not JSON is answered with ImmediateResponse 400",
       "reference EPP errors (BadRequest for a body parse error)"},
      {"missing-model-400", "a body without a model is answered with ImmediateResponse 400",
       "reference EPP errors (BadRequest: model missing in the request body)"},
      {"envoy-request-fields", "protocol_config and attributes in the first message, as Envoy sends them, are accepted",
       "ext_proc: ProcessingRequest.protocol_config (field 11) and attributes (field 9) on the first message"},
      {"response-path-echo",
       "response headers and a buffered response body are answered and echoed as streamed_response chunks; a "
       "half-close ends the stream with OK",
       "Protocol (response path, served endpoint) and ext_proc FULL_DUPLEX_STREAMED response_body_mode; stream "
       "semantics from external_processor.proto"},
      {"response-path-streaming", "an SSE response chunk is echoed before the next one arrives",
       "ext_proc FULL_DUPLEX_STREAMED: the processor answers chunks as they stream (a buffered echo holds back the "
       "model's first token)"},
      {"concurrent-streams", "64 streams opened at once all get a pick within the pool",
       "ext_proc: one gRPC stream per HTTP request; a gateway opens them concurrently"},
      {"shedding-429", "with every model server saturated, a sheddable request gets 429 and a standard one a pick",
       "Protocol, Error codes: 429 when the request should be dropped (sheddable under load); reference EPP: "
       "priority < 0 and saturation"},
      {"model-server-down", "after a model server stops, every request is still answered (a pick in the pool or 503)",
       "Protocol, Error codes (503 when no endpoint is ready); ext_proc: a stream closed with an error fails the "
       "request"},
  };
  return checks;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = absl::ascii_tolower(static_cast<unsigned char>(c));
  return out;
}

// ---- The EPP under test as a child process ---------------------------------------------------

class Launched {
 public:
  ~Launched() { Stop(); }
  absl::Status Start(const std::string& command, const std::string& log_path) {
    log_path_ = log_path;
    pid_t pid = fork();
    if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
    if (pid == 0) {  // only async-signal-safe calls until exec
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      int in = open("/dev/null", O_RDONLY);
      if (in >= 0) dup2(in, 0);
      execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    setpgid(pid, pid);
    pid_ = pid;
    return absl::OkStatus();
  }
  // The exit description when the process has ended, nullopt while it runs.
  std::optional<std::string> Exited() {
    if (pid_ <= 0) return exited_;
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      exited_ = WIFEXITED(st) ? absl::StrCat("exited with code ", WEXITSTATUS(st))
                              : absl::StrCat("killed by signal ", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
      pid_ = -1;
    }
    return exited_;
  }
  void Stop() {
    if (pid_ <= 0) return;
    kill(-pid_, SIGTERM);
    for (int i = 0; i < 200 && !Exited(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (pid_ > 0) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  std::string LogTail(size_t lines = 30) const {
    std::ifstream in(log_path_);
    std::vector<std::string> all;
    for (std::string l; std::getline(in, l);) all.push_back(l);
    size_t from = all.size() > lines ? all.size() - lines : 0;
    std::string out;
    for (size_t i = from; i < all.size(); ++i) absl::StrAppend(&out, all[i], "\n");
    return out;
  }
  bool running() const { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
  std::optional<std::string> exited_;
  std::string log_path_;
};

absl::StatusOr<int> FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot find a free loopback port: ", std::strerror(errno)));
  }
  int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

// ---- ext_proc client -------------------------------------------------------------------------

std::shared_ptr<grpc::ChannelCredentials> Credentials(bool tls) {
  if (!tls) return grpc::InsecureChannelCredentials();
  grpc::experimental::TlsChannelCredentialsOptions o;
  o.set_verify_server_certs(false);  // as Envoy Gateway dials the EPP: TLS without verification
  o.set_check_call_host(false);
  o.set_certificate_verifier(std::make_shared<grpc::experimental::NoOpCertificateVerifier>());
  return grpc::experimental::TlsCredentials(o);
}

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

void CollectHeaders(const pb::CommonResponse& c, std::vector<std::pair<std::string, std::string>>& out) {
  for (const auto& h : c.header_mutation().set_headers())
    out.emplace_back(Lower(h.header().key()), h.header().raw_value().empty() ? h.header().value() : h.header().raw_value());
}

void CollectMetadata(const pb::ProcessingResponse& m, RequestAnswer& a) {
  if (!m.has_dynamic_metadata()) return;
  auto ns = m.dynamic_metadata().fields().find(std::string(kDestinationEndpointNamespace));
  if (ns == m.dynamic_metadata().fields().end() || !ns->second.has_struct_value()) return;
  auto k = ns->second.struct_value().fields().find(std::string(kDestinationEndpointKey));
  if (k != ns->second.struct_value().fields().end() && k->second.has_string_value())
    a.metadata_destination = k->second.string_value();
}

// Writes the request messages, then reads until the request path is answered: an
// ImmediateResponse, or the headers response and (with a body) the body's last chunk.
RequestAnswer SendRequest(Stream& s, const std::vector<std::string>& messages, bool has_body) {
  RequestAnswer a;
  for (const std::string& m : messages) {
    if (!s.Write([&] {
          pb::ProcessingRequest r;
          r.ParseFromString(m);
          return r;
        }()))
      break;  // the server ended the stream; Read reports it
  }
  pb::ProcessingResponse r;
  while (true) {
    if (!s.Read(&r)) {
      a.status = s.Finish();
      if (a.problem.empty())
        a.problem = a.status.ok() ? "the EPP ended the stream before answering the request"
                                  : absl::StrCat("the stream ended with gRPC status ", a.status.error_code(), ": ",
                                                 a.status.error_message());
      return a;
    }
    a.messages.push_back(r);
    CollectMetadata(r, a);
    if (r.has_immediate_response()) {
      a.immediate = true;
      a.immediate_status = static_cast<int>(r.immediate_response().status().code());
      a.immediate_body = r.immediate_response().body();
      return a;
    }
    if (r.has_request_headers()) {
      if (a.headers_seen && a.problem.empty()) a.problem = "two request_headers responses";
      a.headers_seen = true;
      CollectHeaders(r.request_headers().response(), a.set_headers);
      if (!has_body) return a;
      continue;
    }
    if (r.has_request_body()) {
      if (!a.headers_seen && a.problem.empty()) a.problem = "a request_body response came before the request_headers response";
      const auto& c = r.request_body().response();
      if (c.has_header_mutation()) CollectHeaders(c, a.set_headers);
      if (!c.has_body_mutation() || !c.body_mutation().has_streamed_response()) {
        if (a.problem.empty())
          a.problem = c.has_body_mutation() && c.body_mutation().has_body()
                          ? "a request_body response with body_mutation.body, not streamed_response (Envoy rejects it "
                            "in FULL_DUPLEX_STREAMED)"
                          : "a request_body response without body_mutation.streamed_response (Envoy rejects it in "
                            "FULL_DUPLEX_STREAMED)";
        continue;
      }
      const auto& sr = c.body_mutation().streamed_response();
      if (a.body_eos && a.problem.empty()) a.problem = "a body chunk after the chunk with end_of_stream";
      a.body += sr.body();
      a.chunk_sizes.push_back(sr.body().size());
      if (sr.end_of_stream()) {
        a.body_eos = true;
        return a;
      }
      continue;
    }
    if (a.problem.empty()) a.problem = absl::StrCat("an unexpected response message (field ", r.response_case(), ")");
  }
}

// ---- The run ---------------------------------------------------------------------------------

constexpr std::string_view kModel = "conformance-model";

std::string CompletionBody(std::string_view prompt) {
  nlohmann::json j = {{"model", kModel}, {"prompt", std::string(prompt)}, {"max_tokens", 8}};
  return j.dump();
}

// The first entry of a destination list.
std::string Primary(const std::string& d) { return d.substr(0, d.find(',')); }

// ip:port, [v6]:port (no spaces, a port in 1..65535).
bool ValidHostPort(std::string_view s) {
  size_t colon = s.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  std::string_view host = s.substr(0, colon), port = s.substr(colon + 1);
  int p = 0;
  if (!absl::SimpleAtoi(absl::string_view(port.data(), port.size()), &p) || p < 1 || p > 65535) return false;
  if (host.front() == '[') return host.back() == ']' && host.size() > 2;
  for (char c : host)
    if (!(absl::ascii_isalnum(c) || c == '.' || c == '-')) return false;
  return true;
}

struct Outcome {
  ConformanceOutcome outcome;
  std::string detail;
};
Outcome Pass(std::string d) { return {ConformanceOutcome::kPass, std::move(d)}; }
Outcome Fail(std::string d) { return {ConformanceOutcome::kFail, std::move(d)}; }
Outcome Skip(std::string d) { return {ConformanceOutcome::kSkip, std::move(d)}; }

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

 private:
  absl::Status Setup(ConformanceReport& report);
  absl::Status WaitReady();
  void Connect();  // a new channel and stub to target_
  Outcome RunCheck(const std::string& id);

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
  std::string target_, health_target_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::ExternalProcessor::Stub> stub_;
  std::thread load_thread_;
  bool failed_ = false;

 public:
  bool failed() const { return failed_; }
  const std::string& work_dir() const { return work_dir_; }
  bool own_work_dir() const { return own_work_dir_; }
};

absl::Status Suite::Setup(ConformanceReport& report) {
  if (o_.launch.empty() == o_.target.empty())
    return absl::InvalidArgumentError("give exactly one of --launch COMMAND and --target HOST:PORT");
  if (!o_.target.empty() && o_.endpoints_out.empty())
    return absl::InvalidArgumentError("--target needs --endpoints-out FILE: the endpoints file the EPP under test reads");
  if (o_.simulators < 2 || o_.simulators > 16)
    return absl::InvalidArgumentError(absl::StrCat("--simulators must be in [2, 16], got ", o_.simulators));
  const auto& all = Checks();
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

  const std::string endpoints = o_.endpoints_out.empty() ? work_dir_ + "/endpoints.yaml" : o_.endpoints_out;
  {
    std::ofstream out(endpoints, std::ios::trunc);
    out << "# Written by eppctl conformance: the simulated model servers of this run.\nendpoints:\n";
    for (const std::string& a : pool_) out << "- address: " << a << "\n  metrics: http://" << a << "/metrics\n  engine: vllm\n";
    out.close();
    if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot write the endpoints file ", endpoints));
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
  Connect();
  return WaitReady();
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
  const auto deadline = Clock::now() + o_.startup_timeout;
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

// ---- Checks ----------------------------------------------------------------------------------

int HealthCheck(const std::shared_ptr<grpc::Channel>& ch, const std::string& service, std::string* error) {
  grpc::GenericStub stub(ch);
  if (service.size() > 127) {
    *error = "service name too long";
    return -1;
  }
  std::string req;  // grpc.health.v1.HealthCheckRequest{service = 1}
  req.push_back(0x0a);
  req.push_back(static_cast<char>(service.size()));
  req += service;
  grpc::Slice slice(req);
  grpc::ByteBuffer in(&slice, 1), out;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &in, &out,
                 [&](grpc::Status st) { done.set_value(std::move(st)); });
  grpc::Status st = done.get_future().get();
  if (!st.ok()) {
    *error = absl::StrCat("gRPC status ", st.error_code(), ": ", st.error_message());
    return -1;
  }
  std::vector<grpc::Slice> slices;
  (void)out.Dump(&slices);
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  // HealthCheckResponse{status = 1 (enum)}; absent = UNKNOWN (0).
  if (bytes.size() >= 2 && bytes[0] == 0x08) return static_cast<unsigned char>(bytes[1]);
  return 0;
}

Outcome Suite::HealthServices() {
  if (health_target_.empty()) return Skip("no health address (--health HOST:PORT)");
  auto ch = grpc::CreateChannel(health_target_, grpc::InsecureChannelCredentials());
  std::vector<std::string> bad;
  for (const std::string& svc : std::vector<std::string>{"liveness", "readiness", std::string(kExtProcServiceName)}) {
    std::string err;
    int st = HealthCheck(ch, svc, &err);
    if (st != 1) {
      static const char* names[] = {"UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"};
      bad.push_back(absl::StrCat("'", svc, "': ", st < 0 ? err : (st <= 3 ? names[st] : std::to_string(st))));
    }
  }
  if (!bad.empty()) return Fail(absl::StrCat("at ", health_target_, ": ", absl::StrJoin(bad, "; ")));
  return Pass(absl::StrCat("SERVING for all three at ", health_target_));
}

Outcome Suite::DestinationHeaderAndMetadata() {
  RequestAnswer a = Request(Basic());
  if (!a.problem.empty()) return Fail(a.problem);
  if (a.immediate) return Fail(absl::StrCat("ImmediateResponse ", a.immediate_status, " (", a.immediate_body, ")"));
  auto d = a.Destination();
  if (!d) return Fail("no x-gateway-destination-endpoint in the request_headers response's header_mutation");
  if (!a.metadata_destination) return Fail(absl::StrCat("header says ", *d, " but dynamic_metadata has no envoy.lb/x-gateway-destination-endpoint"));
  if (*a.metadata_destination != *d)
    return Fail(absl::StrCat("header '", *d, "' differs from envoy.lb metadata '", *a.metadata_destination, "'"));
  return Pass(absl::StrCat("both say ", *d));
}

Outcome Suite::DestinationValueFormat() {
  for (int i = 0; i < 5; ++i) {
    RequestAnswer a = Request(Basic(absl::StrCat("format probe ", i)));
    if (!a.problem.empty()) return Fail(a.problem);
    auto v = a.Header(kDestinationEndpointHeader);
    if (v.empty()) return Fail("no destination header");
    if (v.size() > 1) return Fail(absl::StrCat("x-gateway-destination-endpoint set ", v.size(), " times"));
    std::set<std::string> seen;
    for (absl::string_view e : absl::StrSplit(v[0], ',')) {
      if (!ValidHostPort(std::string_view(e.data(), e.size()))) return Fail(absl::StrCat("'", v[0], "': entry '", e, "' is not ip:port (no spaces allowed)"));
      if (!seen.insert(std::string(e)).second) return Fail(absl::StrCat("'", v[0], "': ", e, " is listed twice"));
    }
  }
  return Pass("5 picks, each ip:port[,ip:port...]");
}

Outcome Suite::PickWithinPool() {
  std::map<std::string, int> counts;
  for (int i = 0; i < 30; ++i) {
    RequestAnswer a = Request(Basic(absl::StrCat("pool probe ", i, ": tell me about the number ", i * 7919)));
    std::string why = CheckPick(a, pool_set_);
    if (!why.empty()) return Fail(absl::StrCat("request ", i + 1, ": ", why));
    counts[Primary(*a.Destination())]++;
  }
  std::vector<std::string> parts;
  for (const auto& [k, n] : counts) parts.push_back(absl::StrCat(k, " x", n));
  return Pass(absl::StrCat("30 picks in the pool: ", absl::StrJoin(parts, ", ")));
}

std::string BodyProblem(const RequestAnswer& a, const std::string& sent) {
  if (!a.problem.empty()) return a.problem;
  if (a.immediate) return absl::StrCat("ImmediateResponse ", a.immediate_status, " (", a.immediate_body, ")");
  if (!a.body_eos) return "no body chunk with end_of_stream";
  for (size_t i = 0; i < a.chunk_sizes.size(); ++i)
    if (a.chunk_sizes[i] > 65536) return absl::StrCat("chunk ", i + 1, " has ", a.chunk_sizes[i], " bytes (more than 64 KiB)");
  if (a.body == sent) return "";
  // A re-serialised body (the reference EPP re-marshals JSON) must mean the same and be announced.
  nlohmann::json x = nlohmann::json::parse(a.body, nullptr, false), y = nlohmann::json::parse(sent, nullptr, false);
  if (x.is_discarded() || x != y)
    return absl::StrCat("the echoed body (", a.body.size(), " bytes) differs from the one sent (", sent.size(), " bytes)");
  auto cl = a.Header("content-length");
  if (cl.empty() || cl.back() != std::to_string(a.body.size()))
    return absl::StrCat("the body was re-serialised (", sent.size(), " -> ", a.body.size(),
                        " bytes) without a matching Content-Length header");
  return "";
}

Outcome Suite::RequestBodyEcho() {
  // A 200 KiB prompt in 16 KiB chunks, and the same in one chunk.
  std::string prompt;
  for (int i = 0; prompt.size() < 200 * 1024; ++i) absl::StrAppend(&prompt, "line ", i, " of a long document. ");
  std::vector<std::string> seen;
  for (size_t chunk : {size_t{16384}, size_t{0}}) {
    HttpRequestCapture c = Basic(prompt);
    c.chunk_bytes = chunk;
    RequestAnswer a = Request(c);
    std::string why = BodyProblem(a, c.body);
    const std::string how = chunk ? "in 16 KiB chunks" : "in one message";
    if (!why.empty()) return Fail(absl::StrCat(c.body.size(), " bytes sent ", how, ": ", why));
    size_t biggest = *std::max_element(a.chunk_sizes.begin(), a.chunk_sizes.end());
    seen.push_back(absl::StrCat(how, ": ", a.chunk_sizes.size(), " chunks, largest ", biggest));
  }
  return Pass(absl::StrJoin(seen, "; "));
}

Outcome Suite::HeaderOnly() {
  HttpRequestCapture c;
  c.method = "GET";
  c.path = "/v1/models";
  RequestAnswer a = Request(c);
  if (!a.problem.empty()) return Fail(a.problem);
  if (a.immediate) return Fail(absl::StrCat("ImmediateResponse ", a.immediate_status, " (", a.immediate_body, ")"));
  std::string why = CheckPick(a, pool_set_);
  if (!why.empty()) return Fail(why);
  return Pass(absl::StrCat("picked ", *a.Destination()));
}

Outcome Suite::SubsetHint(bool as_string) {
  std::vector<std::vector<std::string>> subsets;
  for (const std::string& e : pool_) subsets.push_back({e});
  subsets.push_back({pool_[1], pool_[0]});
  int n = 0;
  for (const auto& subset : subsets) {
    for (int rep = 0; rep < 3; ++rep, ++n) {
      HttpRequestCapture c = Basic(absl::StrCat("subset probe ", n));
      c.subset = subset;
      c.subset_as_string = as_string;
      RequestAnswer a = Request(c);
      std::string why = CheckPick(a, {subset.begin(), subset.end()});
      if (!why.empty()) return Fail(absl::StrCat("subset ", as_string ? "\"" : "[", absl::StrJoin(subset, ","), as_string ? "\"" : "]", ": ", why));
    }
  }
  return Pass(absl::StrCat(n, " requests, each picked within its subset"));
}

Outcome Suite::SubsetEmpty() {
  HttpRequestCapture c = Basic();
  c.subset = std::vector<std::string>{};
  std::string why = ExpectImmediate(Request(c), 503);
  return why.empty() ? Pass("503") : Fail(why);
}

Outcome Suite::SubsetUnmatched() {
  HttpRequestCapture c = Basic();
  c.subset = std::vector<std::string>{"127.0.0.2:9", "127.0.0.3:9"};
  std::string why = ExpectImmediate(Request(c), 503);
  return why.empty() ? Pass("503 for [127.0.0.2:9, 127.0.0.3:9]") : Fail(why);
}

Outcome Suite::BadBody() {
  HttpRequestCapture c = Basic();
  c.body = R"({"model": "conformance-model", "prompt": "unterminated)";
  std::string why = ExpectImmediate(Request(c), 400);
  return why.empty() ? Pass("400") : Fail(why);
}

Outcome Suite::MissingModel() {
  HttpRequestCapture c = Basic();
  c.body = R"({"prompt": "a request that names no model", "max_tokens": 4})";
  std::string why = ExpectImmediate(Request(c), 400);
  return why.empty() ? Pass("400") : Fail(why);
}

Outcome Suite::EnvoyFields() {
  HttpRequestCapture c = Basic();
  std::vector<std::string> msgs = BuildProcessingRequests(c);
  pb::ProcessingRequest first;
  first.ParseFromString(msgs[0]);
  auto& attrs = (*first.mutable_attributes())["envoy.filters.http.ext_proc"];
  (*attrs.mutable_fields())["request.path"].set_string_value("/v1/completions");
  (*attrs.mutable_fields())["request.method"].set_string_value("POST");
  // protocol_config (field 11, not in our copy of the proto): ProtocolConfiguration{
  // request_body_mode = 1, response_body_mode = 2} both FULL_DUPLEX_STREAMED (4), as wire bytes.
  msgs[0] = first.SerializeAsString() + std::string("\x5a\x04\x08\x04\x10\x04", 6);
  Stream s(*stub_, o_.stream_timeout);
  RequestAnswer a = SendRequest(s, msgs, true);
  std::string why = CheckPick(a, pool_set_);
  return why.empty() ? Pass(absl::StrCat("picked ", *a.Destination())) : Fail(why);
}

pb::ProcessingRequest ResponseHeaders(std::string_view content_type, std::string_view served) {
  pb::ProcessingRequest r;
  auto* h = r.mutable_response_headers()->mutable_headers();
  auto add = [&](std::string_view k, std::string_view v) {
    auto* x = h->add_headers();
    x->set_key(std::string(k));
    x->set_raw_value(std::string(v));
  };
  add(":status", "200");
  add("content-type", content_type);
  auto& ns = (*r.mutable_metadata_context()->mutable_filter_metadata())[std::string(kDestinationEndpointNamespace)];
  (*ns.mutable_fields())[std::string(kDestinationEndpointServedKey)].set_string_value(std::string(served));
  return r;
}

pb::ProcessingRequest ResponseBody(std::string body, bool eos) {
  pb::ProcessingRequest r;
  r.mutable_response_body()->set_body(std::move(body));
  r.mutable_response_body()->set_end_of_stream(eos);
  return r;
}

// Reads response-path messages until a response_body chunk with end_of_stream; returns the
// problem ("" when fine) and the echoed body.
std::string ReadResponseBody(Stream& s, std::string* body, size_t* chunks, bool stop_after_one = false) {
  pb::ProcessingResponse r;
  while (s.Read(&r)) {
    if (r.has_response_headers()) return "a second response_headers response";
    if (!r.has_response_body())
      return absl::StrCat("an unexpected message on the response path (field ", r.response_case(), ")");
    const auto& c = r.response_body().response();
    if (!c.has_body_mutation() || !c.body_mutation().has_streamed_response())
      return "a response_body response without body_mutation.streamed_response (Envoy rejects it in FULL_DUPLEX_STREAMED)";
    const auto& sr = c.body_mutation().streamed_response();
    if (sr.body().size() > 65536) return absl::StrCat("a response chunk of ", sr.body().size(), " bytes (more than 64 KiB)");
    *body += sr.body();
    ++*chunks;
    if (sr.end_of_stream() || stop_after_one) return "";
  }
  grpc::Status st = s.Finish();
  return absl::StrCat("the stream ended (gRPC status ", st.error_code(), " ", st.error_message(),
                      ") before the response body was echoed");
}

std::string Suite::StartResponse(Stream& s, std::string_view content_type) {
  RequestAnswer a = SendRequest(s, BuildProcessingRequests(Basic()), true);
  std::string why = CheckPick(a, pool_set_);
  if (!why.empty()) return "request path: " + why;
  if (!s.Write(ResponseHeaders(content_type, Primary(*a.Destination())))) return "the stream ended before the response headers";
  pb::ProcessingResponse r;
  if (!s.Read(&r)) return "no answer to the response headers (stream ended)";
  if (!r.has_response_headers())
    return absl::StrCat("the answer to response headers is field ", r.response_case(), ", not response_headers");
  return "";
}

Outcome Suite::ResponseEcho() {
  Stream s(*stub_, o_.stream_timeout);
  std::string why = StartResponse(s, "application/json");
  if (!why.empty()) return Fail(why);
  // A JSON completion of ~100 KiB in three chunks, the last with end_of_stream.
  std::string text;
  while (text.size() < 100 * 1024) text += "All work and no play makes the model a dull model. ";
  nlohmann::json resp = {{"id", "cmpl-conformance"},
                         {"object", "text_completion"},
                         {"model", kModel},
                         {"choices", {{{"index", 0}, {"text", text}, {"finish_reason", "length"}}}},
                         {"usage", {{"prompt_tokens", 12}, {"completion_tokens", 8}, {"total_tokens", 20}}}};
  const std::string body = resp.dump();
  const size_t third = body.size() / 3;
  for (int i = 0; i < 3; ++i) {
    std::string part = i < 2 ? body.substr(i * third, third) : body.substr(2 * third);
    if (!s.Write(ResponseBody(part, i == 2))) return Fail("the stream ended while the response body was sent");
  }
  std::string echoed;
  size_t chunks = 0;
  why = ReadResponseBody(s, &echoed, &chunks);
  if (!why.empty()) return Fail(why);
  if (echoed != body)
    return Fail(absl::StrCat("the echoed response body (", echoed.size(), " bytes) differs from the one sent (", body.size(), ")"));
  grpc::Status st = s.Close();
  if (!st.ok()) return Fail(absl::StrCat("after the half-close the stream ended with gRPC status ", st.error_code(), ": ", st.error_message()));
  if (s.extra_after_close()) return Fail(absl::StrCat(s.extra_after_close(), " messages after the response ended"));
  return Pass(absl::StrCat(body.size(), " bytes echoed in ", chunks, " chunks; stream ended OK"));
}

Outcome Suite::ResponseStreaming() {
  Stream s(*stub_, o_.stream_timeout);
  std::string why = StartResponse(s, "text/event-stream");
  if (!why.empty()) return Fail(why);
  const std::string events[] = {
      R"(data: {"id":"c1","object":"text_completion","choices":[{"index":0,"text":"Hello"}]})" "\n\n",
      R"(data: {"id":"c1","object":"text_completion","choices":[{"index":0,"text":" world"}]})" "\n\n",
      "data: [DONE]\n\n"};
  for (int i = 0; i < 3; ++i) {
    if (!s.Write(ResponseBody(events[i], i == 2))) return Fail("the stream ended while events were sent");
    std::string echoed;
    size_t chunks = 0;
    // Each event must come back before the next is sent (the stream's deadline bounds the wait).
    while (echoed.size() < events[i].size()) {
      why = ReadResponseBody(s, &echoed, &chunks, /*stop_after_one=*/true);
      if (!why.empty())
        return Fail(absl::StrCat("event ", i + 1, " was not echoed before the next one: ", why));
    }
    if (echoed != events[i]) return Fail(absl::StrCat("event ", i + 1, " came back changed: '", echoed, "'"));
  }
  return Pass("3 events, each echoed at once");
}

Outcome Suite::Concurrent() {
  constexpr int kStreams = 64;
  std::vector<std::string> errors(kStreams);
  std::vector<std::thread> threads;
  std::atomic<int> ready{0};
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      Stream s(*stub_, o_.stream_timeout);
      ready++;
      while (ready.load() < kStreams) std::this_thread::yield();
      RequestAnswer a = SendRequest(s, BuildProcessingRequests(Basic(absl::StrCat("concurrent ", i))), true);
      errors[i] = CheckPick(a, pool_set_);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kStreams; ++i)
    if (!errors[i].empty()) return Fail(absl::StrCat("stream ", i + 1, " of ", kStreams, ": ", errors[i]));
  return Pass(absl::StrCat(kStreams, " concurrent streams, all picked within the pool"));
}

Outcome Suite::Shedding() {
  if (o_.sheddable_objective.empty())
    return Skip("no --sheddable-objective: name an InferenceObjective the EPP under test gives a negative priority");
  // Fill every server: two running and eight waiting long requests each (GIE's utilization
  // detector calls a server saturated from 5 waiting requests).
  std::vector<HttpRequest> load;
  for (const std::string& a : pool_)
    for (int i = 0; i < 10; ++i) {
      HttpRequest h;
      h.url = absl::StrCat("http://", a, "/v1/completions");
      h.method = "POST";
      h.headers = {"Content-Type: application/json"};
      h.body = nlohmann::json({{"model", kModel}, {"prompt", "keep busy"}, {"max_tokens", 20000}}).dump();
      h.timeout = std::chrono::milliseconds(600000);
      load.push_back(std::move(h));
    }
  load_thread_ = std::thread([load = std::move(load)] { (void)HttpFetchAll(load); });
  const auto deadline = Clock::now() + std::chrono::seconds(15);
  RequestAnswer last;
  int tries = 0;
  while (Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    HttpRequestCapture c = Basic("sheddable");
    c.headers.emplace_back(std::string(kObjectiveHeader), o_.sheddable_objective);
    last = Request(c);
    ++tries;
    if (last.immediate && last.immediate_status == 429) break;
  }
  if (!(last.immediate && last.immediate_status == 429)) {
    std::string seen = last.immediate ? absl::StrCat("ImmediateResponse ", last.immediate_status, " (", last.immediate_body, ")")
                                      : (last.Destination() ? "a pick of " + *last.Destination() : last.problem);
    return Fail(absl::StrCat("no 429 within 15 s (", tries, " tries) with every server 2 running + 8 waiting; last answer: ", seen));
  }
  RequestAnswer std_req = Request(Basic("standard priority under saturation"));
  std::string why = CheckPick(std_req, pool_set_);
  if (!why.empty()) return Fail("the sheddable request got 429, but a request without an objective: " + why);
  return Pass(absl::StrCat("429 after ", tries, " tries; a standard request still picked ", *std_req.Destination()));
}

Outcome Suite::ServerDown() {
  const std::string dead = pool_[0];
  sims_[0]->Stop();
  int picks = 0, to_dead = 0, unavailable = 0;
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    RequestAnswer a = Request(Basic(absl::StrCat("after a server died ", i)));
    if (!a.problem.empty() && !a.immediate) return Fail(absl::StrCat("request ", i + 1, " after ", dead, " stopped: ", a.problem));
    if (a.immediate) {
      if (a.immediate_status != 503 && a.immediate_status != 429)
        return Fail(absl::StrCat("request ", i + 1, ": ImmediateResponse ", a.immediate_status, " (", a.immediate_body, ")"));
      ++unavailable;
      continue;
    }
    std::string why = CheckPick(a, pool_set_);
    if (!why.empty()) return Fail(absl::StrCat("request ", i + 1, ": ", why));
    ++picks;
    if (Primary(*a.Destination()) == dead) ++to_dead;
  }
  return Pass(absl::StrCat("20 answers over 2 s after ", dead, " stopped: ", picks, " picks (", to_dead,
                           " of them to the stopped server), ", unavailable, " 503/429"));
}

Outcome Suite::RunCheck(const std::string& id) {
  if (id == "health-services") return HealthServices();
  if (id == "destination-header-and-metadata") return DestinationHeaderAndMetadata();
  if (id == "destination-value-format") return DestinationValueFormat();
  if (id == "pick-within-pool") return PickWithinPool();
  if (id == "request-body-echo") return RequestBodyEcho();
  if (id == "header-only-request") return HeaderOnly();
  if (id == "subset-hint-list") return SubsetHint(false);
  if (id == "subset-hint-string") return SubsetHint(true);
  if (id == "subset-empty-503") return SubsetEmpty();
  if (id == "subset-unmatched-503") return SubsetUnmatched();
  if (id == "bad-body-400") return BadBody();
  if (id == "missing-model-400") return MissingModel();
  if (id == "envoy-request-fields") return EnvoyFields();
  if (id == "response-path-echo") return ResponseEcho();
  if (id == "response-path-streaming") return ResponseStreaming();
  if (id == "concurrent-streams") return Concurrent();
  if (id == "shedding-429") return Shedding();
  if (id == "model-server-down") return ServerDown();
  return Fail("no such check");
}

absl::StatusOr<ConformanceReport> Suite::Run(const std::function<void(const ConformanceResult&)>& progress) {
  const auto start = Clock::now();
  ConformanceReport report;
  EPP_RETURN_IF_ERROR(Setup(report));
  for (const ConformanceCheckInfo& info : Checks()) {
    ConformanceResult r;
    r.check = info;
    const bool selected = o_.only.empty() || std::count(o_.only.begin(), o_.only.end(), info.id);
    if (!selected || std::count(o_.skip.begin(), o_.skip.end(), info.id)) {
      r.outcome = ConformanceOutcome::kSkip;
      r.detail = "not selected";
    } else {
      const auto t0 = Clock::now();
      Outcome out = RunCheck(info.id);
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
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return report;
}

std::string XmlEscape(std::string_view s) { return internal::EscapeMarkup(s, "&quot;", "&apos;", true); }

}  // namespace

const std::vector<ConformanceCheckInfo>& ConformanceChecks() { return Checks(); }

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
  bool remove = false;
  absl::StatusOr<ConformanceReport> report;
  {
    Suite suite(options);
    report = suite.Run(progress);
    dir = suite.work_dir();
    remove = suite.own_work_dir() && report.ok() && !suite.failed();
  }
  if (remove) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  return report;
}

std::string FormatConformanceText(const ConformanceReport& r) {
  std::string out = absl::StrCat("ext_proc conformance of ", r.target, r.launch.empty() ? "" : " (launched: " + r.launch + ")",
                                 "\npool: ", absl::StrJoin(r.pool, ", "), " (", r.endpoints_file, ")\n\n");
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
