// epp_extproc_load: a gRPC load generator for an Endpoint Picker's ext_proc port (eppctl serve,
// GIE's EPP, anything that speaks envoy.service.ext_proc.v3 in FULL_DUPLEX_STREAMED mode).
//
// Each ext_proc stream is one HTTP request, driven the way Envoy drives it:
//   request_headers, then the chat request body in --chunk-bytes chunks (the last one with
//   end_of_stream); wait for the request-headers response (the pick) and the streamed body
//   responses up to end_of_stream; then the response path: response_headers (:status 200, the
//   served endpoint in `envoy.lb` metadata) and one response_body carrying `usage` with
//   end_of_stream; wait for both echoes; half-close; read the status.
// The body is an OpenAI chat request whose system prompt is shared by the requests of one of
// --groups groups and whose user question is unique per request, so a prefix-cache scorer does
// real work (the shared blocks match, the unique ones are inserted).
//
// Closed loop: --concurrency streams are kept in flight (a finished stream is replaced at once),
// driven by --threads threads over the async completion-queue API (no thread per stream), on
// --channels HTTP/2 connections. Requests finishing during --warmup are not counted; then for
// --duration every finished stream is counted: requests/s, errors by kind, and percentiles of
//   added latency: from issuing the write of the last request-body chunk to receiving the
//                  request-headers response (the picker's decision as the gateway sees it);
//   stream latency: from starting the call to receiving its status (the whole exchange), less
//                  the --response-delay idle time.
// --response-delay makes the streams production-like: each one stays open and idle between its
// pick and its response path, as while the model server generates, so that N streams in flight
// no longer means N requests being picked at once.
// A comma list of concurrencies runs one level after the other in the same process.
// Soak mode: --requests N runs each level until N streams have been started (no warm-up, every
// stream counted); --prompt-bytes takes a list of sizes mixed per request; --cancel-fraction
// cancels that share of the streams mid-body (after the headers and half the chunks), and
// --stall-fraction sends only the headers of that share and waits for the server to end them
// (eppctl serve's --stream-request-timeout): both are expected outcomes, counted apart from errors.
//
// The wire messages are serialized once (per group) with libepp's BuildProcessingRequests and
// BuildResponseMessages; per request only the chunks holding the unique question are copied and
// patched, so the generator spends its CPU in gRPC, not in building requests.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/alarm.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "envoy/service/ext_proc/v3/external_processor.pb.h"
#include "epp/runtime/extproc.h"

namespace {

namespace pb = ::envoy::service::ext_proc::v3;
using Clock = std::chrono::steady_clock;

constexpr const char* kMethod = "/envoy.service.ext_proc.v3.ExternalProcessor/Process";

// ---------------------------------------------------------------------------------------------
// Flags

struct Flags {
  std::string target = "127.0.0.1:9002";
  bool tls = false;
  std::string ca;                 // PEM roots to trust (with --tls)
  bool insecure_skip_verify = false;
  std::string server_name;        // TLS name to verify (default: the target's host)
  std::vector<int> concurrency = {16};
  size_t prompt_bytes = 4096;
  std::vector<size_t> prompt_sizes;  // --prompt-bytes A,B,...: mixed per request (first = prompt_bytes)
  int64_t requests = 0;              // --requests: streams per level (0: --duration decides)
  double cancel_fraction = 0;        // streams cancelled mid-body
  double stall_fraction = 0;         // streams that send headers and never a body
  size_t question_bytes = 256;
  int groups = 8;
  double duration_s = 10;
  double warmup_s = 2;
  size_t chunk_bytes = 65536;
  int threads = 2;
  int channels = 0;               // 0: one per thread
  double timeout_s = 10;          // per stream
  double response_delay_s = 0;    // idle time between the pick and the response path (the model's time)
  std::string model = "meta-llama/Llama-3.1-8B-Instruct";
  int max_tokens = 128;
  int server_pid = 0;             // when set: the server's CPU time is reported too
  bool json = false;
};

[[noreturn]] void Usage(const std::string& error) {
  if (!error.empty()) std::fprintf(stderr, "epp_extproc_load: %s\n", error.c_str());
  std::fprintf(error.empty() ? stdout : stderr, R"(usage: epp_extproc_load [flags]
  --target HOST:PORT        ext_proc server (default 127.0.0.1:9002)
  --tls                     TLS; trust --ca FILE (PEM), or --insecure-skip-verify
  --ca FILE                 root certificate(s) to verify the server with (implies --tls)
  --insecure-skip-verify    TLS without verifying the server certificate (implies --tls)
  --server-name NAME        name the certificate must carry (default: the target's host)
  --concurrency N[,N...]    streams in flight; a list runs each level in turn (default 16)
  --prompt-bytes N[,N...]   prompt characters: shared system prompt + unique question (default 4096; k = 1024);
                            a list mixes the sizes, one drawn per request
  --requests N              streams per level, then the level ends (no warm-up, every stream counted)
  --cancel-fraction F       cancel this share of the streams mid-body (expected, not an error)
  --stall-fraction F        this share sends headers and never a body, and waits for the server to end
                            the stream (DEADLINE_EXCEEDED: expected, not an error)
  --question-bytes N        unique part of the prompt (default 256)
  --groups N                distinct system prompts, requests spread round robin (default 8)
  --duration D              measured time per level (default 10s; 500ms, 2s, 1m or seconds)
  --warmup D                unmeasured time before each level (default 2s)
  --chunk-bytes N           request body chunk size, as Envoy streams it (default 65536; 0 = one chunk)
  --threads N               completion-queue threads (default 2)
  --channels N              HTTP/2 connections (default: one per thread)
  --timeout D               per-stream deadline (default 10s)
  --response-delay D        keep the stream idle between the request path's answer and the response
                            path, as while a model server generates: uniform in [D/2, 3D/2] per stream,
                            first streams staggered over [0, D] (default 0: no idle time)
  --model NAME              model of the chat request (default meta-llama/Llama-3.1-8B-Instruct)
  --max-tokens N            max_tokens of the chat request (default 128)
  --server-pid PID          also report this process's CPU use and page faults (e.g. eppctl serve's)
  --json                    JSON on stdout instead of the text table
Exit code: 0 when some request succeeded, 1 when none did or the target is unreachable, 2 usage.
)");
  std::exit(error.empty() ? 0 : 2);
}

double ParseDuration(const std::string& flag, const std::string& v) {
  double x = 0;
  const char* b = v.data();
  const char* e = v.data() + v.size();
  auto [p, ec] = std::from_chars(b, e, x);
  if (ec != std::errc() || x < 0) Usage(flag + ": bad duration '" + v + "'");
  std::string_view unit(p, static_cast<size_t>(e - p));
  if (unit.empty() || unit == "s") return x;
  if (unit == "ms") return x / 1000;
  if (unit == "us") return x / 1e6;
  if (unit == "m") return x * 60;
  Usage(flag + ": bad duration unit in '" + v + "'");
}

size_t ParseSize(const std::string& flag, const std::string& v) {
  uint64_t x = 0;
  const char* e = v.data() + v.size();
  auto [p, ec] = std::from_chars(v.data(), e, x);
  if (ec != std::errc()) Usage(flag + ": bad size '" + v + "'");
  std::string_view unit(p, static_cast<size_t>(e - p));
  if (unit.empty() || unit == "B") return x;
  if (unit == "k" || unit == "K" || unit == "KiB") return x * 1024;
  if (unit == "M" || unit == "MiB") return x * 1024 * 1024;
  Usage(flag + ": bad size unit in '" + v + "'");
}

int ParseInt(const std::string& flag, const std::string& v, int min) {
  int x = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size() || x < min) Usage(flag + ": expected an integer >= " + std::to_string(min) + ", got '" + v + "'");
  return x;
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string value;
    bool has_value = false;
    if (size_t eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_value = true;
    }
    auto next = [&]() -> std::string {
      if (has_value) return value;
      if (i + 1 >= argc) Usage(a + " needs a value");
      return argv[++i];
    };
    auto boolean = [&]() -> bool {
      if (!has_value) return true;
      if (value == "true" || value == "1") return true;
      if (value == "false" || value == "0") return false;
      Usage(a + ": expected true or false");
    };
    if (a == "-h" || a == "--help") Usage("");
    else if (a == "--target") f.target = next();
    else if (a == "--tls") f.tls = boolean();
    else if (a == "--ca") { f.ca = next(); f.tls = true; }
    else if (a == "--insecure-skip-verify") { f.insecure_skip_verify = boolean(); f.tls = f.tls || f.insecure_skip_verify; }
    else if (a == "--server-name") f.server_name = next();
    else if (a == "--concurrency") {
      f.concurrency.clear();
      std::stringstream ss(next());
      for (std::string item; std::getline(ss, item, ',');) f.concurrency.push_back(ParseInt(a, item, 1));
      if (f.concurrency.empty()) Usage("--concurrency: empty list");
    }
    else if (a == "--prompt-bytes") {
      f.prompt_sizes.clear();
      std::stringstream ss(next());
      for (std::string item; std::getline(ss, item, ',');) f.prompt_sizes.push_back(ParseSize(a, item));
      if (f.prompt_sizes.empty()) Usage("--prompt-bytes: empty list");
      f.prompt_bytes = f.prompt_sizes.front();
    }
    else if (a == "--requests") f.requests = ParseInt(a, next(), 1);
    else if (a == "--cancel-fraction") f.cancel_fraction = ParseDuration(a, next());
    else if (a == "--stall-fraction") f.stall_fraction = ParseDuration(a, next());
    else if (a == "--question-bytes") f.question_bytes = ParseSize(a, next());
    else if (a == "--groups") f.groups = ParseInt(a, next(), 1);
    else if (a == "--duration") f.duration_s = ParseDuration(a, next());
    else if (a == "--warmup") f.warmup_s = ParseDuration(a, next());
    else if (a == "--chunk-bytes") f.chunk_bytes = ParseSize(a, next());
    else if (a == "--threads") f.threads = ParseInt(a, next(), 1);
    else if (a == "--channels") f.channels = ParseInt(a, next(), 1);
    else if (a == "--timeout") f.timeout_s = ParseDuration(a, next());
    else if (a == "--response-delay") f.response_delay_s = ParseDuration(a, next());
    else if (a == "--model") f.model = next();
    else if (a == "--max-tokens") f.max_tokens = ParseInt(a, next(), 1);
    else if (a == "--server-pid") f.server_pid = ParseInt(a, next(), 1);
    else if (a == "--json") f.json = boolean();
    else Usage("unknown flag '" + a + "'");
  }
  if (f.duration_s <= 0) Usage("--duration must be > 0");
  if (f.channels == 0) f.channels = f.threads;
  if (f.question_bytes < 16) Usage("--question-bytes must be >= 16");
  if (f.prompt_sizes.empty()) f.prompt_sizes.push_back(f.prompt_bytes);
  for (size_t n : f.prompt_sizes)
    if (n < f.question_bytes) Usage("--prompt-bytes must be >= --question-bytes");
  if (f.cancel_fraction + f.stall_fraction > 1) Usage("--cancel-fraction + --stall-fraction must be <= 1");
  if (f.requests > 0) f.warmup_s = 0;
  return f;
}

// ---------------------------------------------------------------------------------------------
// Workload: per group, the request's messages serialized once; the question's bytes patched per
// request.

uint64_t SplitMix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// `n` characters of lower-case words (JSON-safe: no quote, backslash or control character).
void FillWords(char* out, size_t n, uint64_t seed) {
  static constexpr const char* kWords[] = {
      "the", "model", "server", "cache", "prefix", "token", "request", "answer", "gateway", "picker",
      "latency", "batch", "queue", "route", "prompt", "system", "policy", "review", "summarize", "explain",
      "careful", "concise", "document", "context", "assistant", "user", "value", "report", "table", "result"};
  constexpr size_t kCount = sizeof(kWords) / sizeof(kWords[0]);
  size_t i = 0;
  while (i < n) {
    const char* w = kWords[SplitMix(seed) % kCount];
    for (; *w && i < n; ++w) out[i++] = *w;
    if (i < n) out[i++] = (SplitMix(seed) % 11 == 0) ? '.' : ' ';
  }
}

grpc::ByteBuffer ToByteBuffer(const std::string& bytes) {
  grpc::Slice s(bytes.data(), bytes.size());
  return grpc::ByteBuffer(&s, 1);
}

struct Chunk {
  grpc::ByteBuffer shared;           // chunks before the question: sent as is
  std::string serialized;            // chunks holding question bytes: copied and patched
  size_t patch_msg_offset = 0;       // where the question's bytes start in `serialized`
  size_t patch_question_offset = 0;  // ... and which bytes of the question go there
  size_t patch_len = 0;
};

struct Group {
  grpc::ByteBuffer headers;
  std::vector<Chunk> chunks;  // the last one carries end_of_stream
  size_t body_bytes = 0;
};

struct Workload {
  size_t body_bytes = 0;
  size_t system_bytes = 0;
  size_t question_bytes = 0;
  size_t chunk_count = 0;
  size_t patched_chunks = 0;  // per request
  std::vector<Group> groups;  // size-major: groups[size_index * group_count + group]
  int group_count = 0;
  grpc::ByteBuffer response_body;  // the response path's body with usage
  std::string usage_json;
};

Workload BuildWorkload(const Flags& f) {
  Workload w;
  w.question_bytes = f.question_bytes;
  w.group_count = f.groups;
  // The user question's text is "[q" + 14 id digits + "] " + words; the placeholder marks where.
  const std::string placeholder(w.question_bytes, '#');
  for (size_t size_index = f.prompt_sizes.size(); size_index-- > 0;)  // the first size last: its figures are reported
  for (int g = 0; g < f.groups; ++g) {
    w.system_bytes = f.prompt_sizes[size_index] - f.question_bytes;
    std::string system(w.system_bytes, ' ');
    const std::string lead = "You are assistant number " + std::to_string(g) + ". ";
    FillWords(system.data(), system.size(), 0x5eed0000ULL + static_cast<uint64_t>(g));
    system.replace(0, std::min(lead.size(), system.size()), lead.substr(0, std::min(lead.size(), system.size())));
    const std::string prefix = "{\"model\":\"" + f.model + "\",\"messages\":[{\"role\":\"system\",\"content\":\"";
    std::string body = prefix + system + "\"},{\"role\":\"user\",\"content\":\"";
    const size_t qoff = body.size();
    body += placeholder + "\"}],\"max_tokens\":" + std::to_string(f.max_tokens) + ",\"stream\":false}";
    w.body_bytes = body.size();

    epp::HttpRequestCapture c;
    c.path = "/v1/chat/completions";
    c.method = "POST";
    c.headers = {{":scheme", "http"},
                 {":authority", "llm-gateway.example"},
                 {"content-type", "application/json"},
                 {"content-length", std::to_string(body.size())},
                 {"user-agent", "epp_extproc_load"},
                 {"x-forwarded-proto", "http"},
                 {"x-request-id", "00000000-0000-0000-0000-000000000000"}};
    c.body = body;
    c.chunk_bytes = f.chunk_bytes;
    std::vector<std::string> msgs = epp::BuildProcessingRequests(c);
    Group grp;
    grp.headers = ToByteBuffer(msgs[0]);
    grp.body_bytes = body.size();
    const size_t chunk = f.chunk_bytes ? f.chunk_bytes : body.size();
    for (size_t k = 1; k < msgs.size(); ++k) {
      const size_t a = (k - 1) * chunk, b = std::min(body.size(), a + chunk);
      const size_t qa = std::max(a, qoff), qb = std::min(b, qoff + w.question_bytes);
      Chunk ch;
      if (qa >= qb) {
        ch.shared = ToByteBuffer(msgs[k]);
      } else {
        // The body bytes are stored contiguously in the message: find them once.
        const std::string_view piece(body.data() + a, b - a);
        const size_t at = std::string_view(msgs[k]).find(piece);
        if (at == std::string::npos) {
          std::fprintf(stderr, "epp_extproc_load: internal error: body chunk not found in its message\n");
          std::exit(1);
        }
        ch.serialized = msgs[k];
        ch.patch_msg_offset = at + (qa - a);
        ch.patch_question_offset = qa - qoff;
        ch.patch_len = qb - qa;
        ++w.patched_chunks;
      }
      grp.chunks.push_back(std::move(ch));
    }
    w.chunk_count = grp.chunks.size();
    w.groups.push_back(std::move(grp));
  }
  // Built from the last size to the first; put them in --prompt-bytes order.
  std::vector<Group> ordered;
  for (size_t k = f.prompt_sizes.size(); k-- > 0;)
    for (int g = 0; g < f.groups; ++g) ordered.push_back(std::move(w.groups[k * static_cast<size_t>(f.groups) + static_cast<size_t>(g)]));
  w.groups = std::move(ordered);
  // A non-streaming chat completion with usage (the response path's last message).
  const int prompt_tokens = static_cast<int>(f.prompt_bytes / 4);
  w.usage_json = "{\"id\":\"chatcmpl-load\",\"object\":\"chat.completion\",\"model\":\"" + f.model +
                 "\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"ok\"},"
                 "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":" +
                 std::to_string(prompt_tokens) + ",\"completion_tokens\":1,\"total_tokens\":" +
                 std::to_string(prompt_tokens + 1) + ",\"prompt_tokens_details\":{\"cached_tokens\":" +
                 std::to_string(static_cast<int>(w.system_bytes / 4)) + "}}}";
  return w;
}

// ---------------------------------------------------------------------------------------------
// Reading responses. Body responses (the echoed request body, the bulk of the bytes) are scanned
// in place: the body's length and end_of_stream are read and its bytes skipped, not copied.

namespace wire = google::protobuf::internal;
using google::protobuf::io::CodedInputStream;

// Moves `in` into the length-delimited field `field` of the current message; false if absent.
bool EnterField(CodedInputStream& in, int field) {
  for (;;) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) return false;
    if (wire::WireFormatLite::GetTagFieldNumber(tag) == field &&
        wire::WireFormatLite::GetTagWireType(tag) == wire::WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t len = 0;
      if (!in.ReadVarint32(&len)) return false;
      in.PushLimit(static_cast<int>(len));
      return true;
    }
    if (!wire::WireFormatLite::SkipField(&in, tag)) return false;
  }
}

struct BodyScan {
  int top = 0;          // the ProcessingResponse oneof's field number (0: none / unreadable)
  size_t body_len = 0;  // streamed_response.body length (body responses)
  bool eos = false;     // streamed_response.end_of_stream
};

// The response's kind from its first field (the oneof, serialized before dynamic_metadata), and for
// request_body (3) / response_body (4): BodyResponse.response(1).body_mutation(3).streamed_response(3).
bool ScanResponse(grpc::ByteBuffer& bb, BodyScan& out) {
  grpc::ProtoBufferReader reader(&bb);
  CodedInputStream in(&reader);
  const uint32_t tag = in.ReadTag();
  if (tag == 0) return false;
  out.top = wire::WireFormatLite::GetTagFieldNumber(tag);
  if (out.top != 3 && out.top != 4) return true;
  uint32_t len = 0;
  if (!in.ReadVarint32(&len)) return false;
  in.PushLimit(static_cast<int>(len));
  if (!EnterField(in, 1) || !EnterField(in, 3) || !EnterField(in, 3)) return true;  // no streamed body
  for (;;) {
    const uint32_t t = in.ReadTag();
    if (t == 0) return true;
    const int field = wire::WireFormatLite::GetTagFieldNumber(t);
    if (field == 1 && wire::WireFormatLite::GetTagWireType(t) == wire::WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t n = 0;
      if (!in.ReadVarint32(&n) || !in.Skip(static_cast<int>(n))) return false;
      out.body_len += n;
    } else if ((field == 2 || field == 3) && wire::WireFormatLite::GetTagWireType(t) == wire::WireFormatLite::WIRETYPE_VARINT) {
      uint64_t v = 0;
      if (!in.ReadVarint64(&v)) return false;
      out.eos = out.eos || v != 0;
    } else if (!wire::WireFormatLite::SkipField(&in, t)) {
      return false;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Results

struct LevelStats {
  int64_t ok = 0;
  int64_t cancelled = 0;       // --cancel-fraction streams, cancelled as planned
  int64_t stalled_ended = 0;   // --stall-fraction streams the server ended (DEADLINE_EXCEEDED)
  std::vector<double> added_us, stream_us;
  std::map<std::string, int64_t> errors;
  int64_t started = 0;
  void Merge(LevelStats&& o) {
    ok += o.ok;
    cancelled += o.cancelled;
    stalled_ended += o.stalled_ended;
    started += o.started;
    added_us.insert(added_us.end(), o.added_us.begin(), o.added_us.end());
    stream_us.insert(stream_us.end(), o.stream_us.begin(), o.stream_us.end());
    for (auto& [k, v] : o.errors) errors[k] += v;
  }
};

const char* CodeName(grpc::StatusCode c) {
  switch (c) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN_CODE";
  }
}

// ---------------------------------------------------------------------------------------------
// The streams: one Slot per stream in flight, owned by one worker thread and its completion queue.

struct Worker;

enum class OpKind { kStart, kWrite, kRead, kWritesDone, kFinish, kAlarm, kLaunch };
constexpr int kOpKinds = 7;

struct Slot;
struct Tag {
  Slot* slot;
  OpKind kind;
};

enum class Plan { kWhole, kCancel, kStall };

struct Slot {
  Worker* worker = nullptr;
  Plan plan = Plan::kWhole;
  size_t body_bytes = 0;
  grpc::GenericStub* stub = nullptr;
  Tag tags[kOpKinds];
  grpc::Alarm alarm;  // --response-delay
  bool alarm_pending = false;
  std::unique_ptr<grpc::ClientContext> ctx;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call;
  std::vector<grpc::ByteBuffer> out;  // this phase's messages
  size_t next_out = 0;
  bool write_pending = false, read_pending = false, wd_pending = false, finish_issued = false;
  bool closing = false, clean_close = false;  // clean: half-close and read the status; else cancelled
  bool request_writes_done = false, request_path_done = false, response_phase = false;
  bool got_headers = false, resp_headers_seen = false, done_ok = false, delayed = false;
  size_t echoed = 0;
  grpc::ByteBuffer in;
  pb::ProcessingResponse resp;
  grpc::Status status;
  std::string error;  // first error kind of this stream
  std::string dest;
  Clock::time_point t_start, t_last_chunk, t_headers, t_idle;
  double idle_us = 0;  // --response-delay time, left out of the stream latency
};

struct Worker {
  const Flags* flags = nullptr;
  const Workload* work = nullptr;
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<Slot>> slots;
  Clock::time_point warm_end, end;
  int active = 0;
  uint64_t next_request = 0;
  uint64_t id_base = 0;
  LevelStats stats;
  std::unordered_map<std::string, grpc::ByteBuffer> response_headers;  // per served endpoint
  std::mt19937_64 rng;
  std::atomic<int64_t>* launched = nullptr;  // --requests: streams started by every worker of the level

  // Uniform in [lo, hi) times the response delay, as a deadline from now.
  std::chrono::system_clock::time_point DelayDeadline(double lo, double hi) {
    const double d = flags->response_delay_s * std::uniform_real_distribution<double>(lo, hi)(rng);
    return std::chrono::system_clock::now() + std::chrono::microseconds(static_cast<int64_t>(d * 1e6));
  }

  const grpc::ByteBuffer& ResponseHeaders(const std::string& dest) {
    auto it = response_headers.find(dest);
    if (it != response_headers.end()) return it->second;
    std::vector<std::string> msgs = epp::BuildResponseMessages(
        200, {{"content-type", "application/json"}, {"content-length", std::to_string(work->usage_json.size())}},
        work->usage_json, dest);
    return response_headers.emplace(dest, ToByteBuffer(msgs[0])).first->second;
  }

  // Starts the slot's next stream; false (nothing started) once --requests streams were.
  bool Start(Slot& s) {
    if (flags->requests > 0 && launched->fetch_add(1, std::memory_order_relaxed) >= flags->requests) return false;
    const uint64_t n = next_request++;
    // The unique question: "[q<id>] " then words seeded by the id.
    const uint64_t id = id_base + n;
    uint64_t draw = id * 0x2545f4914f6cdd1dULL + 1;
    const size_t sizes = work->groups.size() / static_cast<size_t>(work->group_count);
    const size_t size_index = sizes > 1 ? SplitMix(draw) % sizes : 0;
    const Group& g = work->groups[size_index * static_cast<size_t>(work->group_count) + n % static_cast<size_t>(work->group_count)];
    const double u = static_cast<double>(SplitMix(draw) >> 11) / 9007199254740992.0;
    s.plan = u < flags->cancel_fraction ? Plan::kCancel
             : u < flags->cancel_fraction + flags->stall_fraction ? Plan::kStall
                                                                  : Plan::kWhole;
    s.body_bytes = g.body_bytes;
    std::string q(work->question_bytes, ' ');
    char head[32];
    const int hl = std::snprintf(head, sizeof head, "[q%014" PRIu64 "] ", id);
    std::memcpy(q.data(), head, std::min<size_t>(static_cast<size_t>(hl), q.size()));
    if (q.size() > static_cast<size_t>(hl)) FillWords(q.data() + hl, q.size() - static_cast<size_t>(hl), id * 7919 + 17);
    s.out.clear();
    s.out.push_back(g.headers);
    // A cancelled stream sends half its chunks (none of a one-chunk body); a stalled one none.
    const size_t chunks = s.plan == Plan::kWhole ? g.chunks.size() : s.plan == Plan::kCancel ? g.chunks.size() / 2 : 0;
    for (size_t k = 0; k < chunks; ++k) {
      const Chunk& c = g.chunks[k];
      if (c.patch_len == 0) {
        s.out.push_back(c.shared);
        continue;
      }
      grpc_slice sl = grpc_slice_malloc(c.serialized.size());
      char* p = reinterpret_cast<char*>(GRPC_SLICE_START_PTR(sl));
      std::memcpy(p, c.serialized.data(), c.serialized.size());
      std::memcpy(p + c.patch_msg_offset, q.data() + c.patch_question_offset, c.patch_len);
      grpc::Slice slice(sl, grpc::Slice::STEAL_REF);
      s.out.emplace_back(&slice, 1);
    }
    s.next_out = 0;
    s.write_pending = s.read_pending = s.wd_pending = s.finish_issued = s.closing = s.clean_close = false;
    s.request_writes_done = s.request_path_done = s.response_phase = false;
    s.got_headers = s.resp_headers_seen = s.done_ok = s.delayed = false;
    s.echoed = 0;
    s.idle_us = 0;
    s.error.clear();
    s.dest.clear();
    s.ctx = std::make_unique<grpc::ClientContext>();
    s.ctx->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::microseconds(static_cast<int64_t>(flags->timeout_s * 1e6)));
    // As a gateway does, the call's HTTP/2 HEADERS leave with its first message (corked initial
    // metadata): one flush instead of two. StartCall then completes nothing; read and write at once.
    s.ctx->set_initial_metadata_corked(true);
    s.t_start = Clock::now();
    s.call = s.stub->PrepareCall(s.ctx.get(), kMethod, &cq);
    s.call->StartCall(&s.tags[static_cast<int>(OpKind::kStart)]);
    ++stats.started;
    IssueRead(s);
    IssueWrite(s);
    return true;
  }

  void IssueRead(Slot& s) {
    s.read_pending = true;
    s.call->Read(&s.in, &s.tags[static_cast<int>(OpKind::kRead)]);
  }

  void IssueWrite(Slot& s) {
    if (!s.response_phase && s.next_out + 1 == s.out.size()) s.t_last_chunk = Clock::now();
    s.write_pending = true;
    // The response path's headers and body are queued together: the headers' write may wait in
    // gRPC's buffer for the body's (never the call's first write, which carries its HEADERS).
    grpc::WriteOptions options;
    if (s.response_phase && s.next_out + 1 < s.out.size()) options.set_buffer_hint();
    s.call->Write(s.out[s.next_out], options, &s.tags[static_cast<int>(OpKind::kWrite)]);
  }

  void Fail(Slot& s, std::string kind) {
    if (s.error.empty()) s.error = std::move(kind);
    if (s.alarm_pending) s.alarm.Cancel();
    if (!s.closing) {
      s.closing = true;
      s.ctx->TryCancel();
    }
    MaybeFinish(s);
  }

  // A clean end: half-close once nothing is being written, then read the status.
  void Close(Slot& s) {
    s.closing = true;
    s.clean_close = true;
    if (s.write_pending || s.wd_pending || s.finish_issued) return;  // OnWrite comes back here
    s.wd_pending = true;
    s.call->WritesDone(&s.tags[static_cast<int>(OpKind::kWritesDone)]);
  }

  void MaybeFinish(Slot& s) {
    if (s.finish_issued || s.write_pending || s.read_pending || s.wd_pending || s.alarm_pending) return;
    s.finish_issued = true;
    s.call->Finish(&s.status, &s.tags[static_cast<int>(OpKind::kFinish)]);
  }

  void MaybeStartResponse(Slot& s) {
    if (s.response_phase || !s.request_path_done || !s.request_writes_done || s.closing || s.alarm_pending) return;
    if (flags->response_delay_s > 0 && !s.delayed) {
      s.delayed = true;
      s.alarm_pending = true;
      s.t_idle = Clock::now();
      s.alarm.Set(&cq, DelayDeadline(0.5, 1.5), &s.tags[static_cast<int>(OpKind::kAlarm)]);
      return;
    }
    s.response_phase = true;
    s.out.clear();
    s.out.push_back(ResponseHeaders(s.dest));
    s.out.push_back(work->response_body);
    s.next_out = 0;
    IssueWrite(s);
  }

  void OnRead(Slot& s, bool ok) {
    s.read_pending = false;
    if (!ok) {  // the server ended the stream before the exchange finished
      if (s.closing) return MaybeFinish(s);
      if (s.error.empty()) s.error = "stream_ended_early";
      s.closing = true;
      if (s.alarm_pending) s.alarm.Cancel();
      if (s.write_pending) return;
      return MaybeFinish(s);
    }
    if (s.closing) return MaybeFinish(s);
    BodyScan scan;
    if (!ScanResponse(s.in, scan)) return Fail(s, "bad_response_message");
    if (scan.top == 3) {  // request_body
      if (!s.got_headers) return Fail(s, "body_before_headers_response");
      s.echoed += scan.body_len;
      if (scan.eos) {
        if (s.echoed != s.body_bytes) return Fail(s, "request_body_echo_length");
        s.request_path_done = true;
        MaybeStartResponse(s);
      }
      return IssueRead(s);
    }
    if (scan.top == 4) {  // response_body
      if (!s.resp_headers_seen) return Fail(s, "response_body_before_headers");
      if (scan.eos) {
        s.done_ok = true;
        return Close(s);
      }
      return IssueRead(s);
    }
    grpc::ProtoBufferReader reader(&s.in);
    if (!s.resp.ParseFromZeroCopyStream(&reader)) return Fail(s, "bad_response_message");
    switch (s.resp.response_case()) {
      case pb::ProcessingResponse::kImmediateResponse: {
        const int code = static_cast<int>(s.resp.immediate_response().status().code());
        s.error = "immediate_" + std::to_string(code);
        return Close(s);
      }
      case pb::ProcessingResponse::kRequestHeaders: {
        if (s.got_headers || s.response_phase) return Fail(s, "unexpected_request_headers_response");
        s.t_headers = Clock::now();
        s.got_headers = true;
        for (const auto& h : s.resp.request_headers().response().header_mutation().set_headers())
          if (h.header().key() == epp::kDestinationEndpointHeader)
            s.dest = h.header().raw_value().empty() ? h.header().value() : h.header().raw_value();
        if (s.dest.empty()) return Fail(s, "no_destination_header");
        break;
      }
      case pb::ProcessingResponse::kResponseHeaders:
        s.resp_headers_seen = true;
        break;
      default:
        return Fail(s, "unexpected_response_message");
    }
    IssueRead(s);
  }

  void OnWrite(Slot& s, bool ok) {
    s.write_pending = false;
    if (!ok) {
      if (s.error.empty() && !s.closing) s.error = "write_failed";
      s.closing = true;
      return MaybeFinish(s);
    }
    if (s.closing) return s.clean_close ? Close(s) : MaybeFinish(s);
    ++s.next_out;
    if (s.next_out < s.out.size()) return IssueWrite(s);
    if (!s.response_phase) {
      s.request_writes_done = true;
      if (s.plan == Plan::kCancel) {  // mid-body, as a client that went away
        s.closing = true;
        s.ctx->TryCancel();
        return MaybeFinish(s);
      }
      MaybeStartResponse(s);  // a stalled stream waits here for the server to end it
    }
  }

  void OnFinish(Slot& s) {
    const Clock::time_point now = Clock::now();
    bool planned = false;  // a cancel or stall that ended as planned
    if (s.plan == Plan::kCancel && s.status.error_code() == grpc::StatusCode::CANCELLED && s.error.empty()) {
      planned = true;
      if (now >= warm_end && now <= end) ++stats.cancelled;
    } else if (s.plan == Plan::kStall && s.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
               s.status.error_message().find("request timeout") != std::string::npos) {
      planned = true;
      if (now >= warm_end && now <= end) ++stats.stalled_ended;
    } else if (!s.status.ok()) {
      if (s.error.empty() || s.error == "stream_ended_early" || s.error == "write_failed")
        s.error = std::string("grpc_") + CodeName(s.status.error_code());
    } else if (s.error.empty() && !s.done_ok) {
      s.error = s.plan == Plan::kWhole ? "incomplete_exchange" : "planned_stream_ended_ok";
    }
    if (planned) {
    } else if (now >= warm_end && now <= end) {
      if (s.error.empty()) {
        ++stats.ok;
        stats.added_us.push_back(std::chrono::duration<double, std::micro>(s.t_headers - s.t_last_chunk).count());
        stats.stream_us.push_back(std::chrono::duration<double, std::micro>(now - s.t_start).count() - s.idle_us);
      } else {
        ++stats.errors[s.error];
      }
    }
    s.call.reset();
    s.ctx.reset();
    if (now < end && Start(s)) return;
    if (--active == 0) cq.Shutdown();
  }

  void Run() {
    active = static_cast<int>(slots.size());
    for (auto& s : slots) {
      if (flags->response_delay_s > 0) {  // staggered, so that the streams' phases do not align
        s->alarm.Set(&cq, DelayDeadline(0, 1), &s->tags[static_cast<int>(OpKind::kLaunch)]);
      } else if (!Start(*s)) {
        --active;
      }
    }
    if (active == 0) cq.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (cq.Next(&tag, &ok)) {
      Tag* t = static_cast<Tag*>(tag);
      Slot& s = *t->slot;
      switch (t->kind) {
        case OpKind::kStart:  // not delivered for corked calls
          break;
        case OpKind::kWrite: OnWrite(s, ok); break;
        case OpKind::kRead: OnRead(s, ok); break;
        case OpKind::kWritesDone:
          s.wd_pending = false;
          MaybeFinish(s);
          break;
        case OpKind::kFinish: OnFinish(s); break;
        case OpKind::kLaunch:
          if (!Start(s) && --active == 0) cq.Shutdown();
          break;
        case OpKind::kAlarm:
          s.alarm_pending = false;
          s.idle_us = std::chrono::duration<double, std::micro>(Clock::now() - s.t_idle).count();
          if (s.closing) MaybeFinish(s);
          else MaybeStartResponse(s);
          break;
      }
    }
  }
};

// ---------------------------------------------------------------------------------------------
// CPU accounting

double SelfCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// utime + stime of another process, from /proc/PID/stat, and its minor page faults; < 0 when
// unreadable.
double ProcessCpuSeconds(int pid, double* minflt = nullptr) {
  if (pid <= 0) return -1;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return -1;
  const size_t rp = line.rfind(')');
  if (rp == std::string::npos) return -1;
  std::istringstream rest(line.substr(rp + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0, faults = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 10) faults = std::stoull(field);
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  if (minflt) *minflt = static_cast<double>(faults);
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// ---------------------------------------------------------------------------------------------
// Reporting

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0, p999 = 0, max = 0, mean = 0;
};

Percentiles Compute(std::vector<double>& v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {  // nearest rank
    size_t r = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::clamp<size_t>(r, 1, v.size()) - 1];
  };
  p.p50 = at(0.5);
  p.p90 = at(0.9);
  p.p99 = at(0.99);
  p.p999 = at(0.999);
  p.max = v.back();
  double sum = 0;
  for (double x : v) sum += x;
  p.mean = sum / static_cast<double>(v.size());
  return p;
}

struct LevelResult {
  int concurrency = 0;
  double seconds = 0;
  int64_t ok = 0, error_count = 0, cancelled = 0, stalled_ended = 0, started = 0;
  double rps = 0;
  Percentiles added, stream;
  std::map<std::string, int64_t> errors;
  double client_cpu = 0, server_cpu = -1;  // cores (CPU seconds per second)
  double server_faults = -1;                // minor page faults per request
};

std::string JsonEscape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

std::string PercentilesJson(const Percentiles& p) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "{\"p50\": %.4f, \"p90\": %.4f, \"p99\": %.4f, \"p999\": %.4f, \"max\": %.4f, \"mean\": %.4f}",
                p.p50 / 1000, p.p90 / 1000, p.p99 / 1000, p.p999 / 1000, p.max / 1000, p.mean / 1000);
  return buf;
}

std::shared_ptr<grpc::ChannelCredentials> Credentials(const Flags& f) {
  if (!f.tls) return grpc::InsecureChannelCredentials();
  if (f.insecure_skip_verify) {
    grpc::experimental::TlsChannelCredentialsOptions o;
    o.set_verify_server_certs(false);
    o.set_check_call_host(false);
    o.set_certificate_verifier(std::make_shared<grpc::experimental::NoOpCertificateVerifier>());
    return grpc::experimental::TlsCredentials(o);
  }
  grpc::SslCredentialsOptions o;
  if (!f.ca.empty()) {
    std::ifstream in(f.ca, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in || ss.str().empty()) Usage("--ca: cannot read " + f.ca);
    o.pem_root_certs = ss.str();
  }
  return grpc::SslCredentials(o);
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  // Keep freed memory in the process: gRPC's read buffers and the echoed bodies come and go at
  // hundreds of MB/s, and glibc would otherwise return them to the kernel and fault them back in
  // (17% of the generator's CPU with 220 KiB bodies).
  mallopt(M_MMAP_THRESHOLD, 16 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  // As eppctl serve does: no lock-order cycle detection on every absl::Mutex (gRPC's) acquisition.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  Workload work = BuildWorkload(f);
  work.response_body = ToByteBuffer(epp::BuildResponseMessages(200, {}, work.usage_json)[1]);

  // Channels: a distinct argument per channel keeps gRPC from sharing one connection.
  auto creds = Credentials(f);
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  for (int i = 0; i < f.channels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("epp.load.channel", i);
    args.SetMaxReceiveMessageSize(64 << 20);
    args.SetMaxSendMessageSize(64 << 20);
    if (!f.server_name.empty()) args.SetSslTargetNameOverride(f.server_name);
    channels.push_back(grpc::CreateCustomChannel(f.target, creds, args));
    if (!channels.back()->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(5))) {
      std::fprintf(stderr, "epp_extproc_load: cannot connect to %s%s\n", f.target.c_str(),
                   f.tls ? " over TLS (certificate? --ca / --insecure-skip-verify / --server-name)" : "");
      return 1;
    }
    stubs.push_back(std::make_unique<grpc::GenericStub>(channels.back()));
  }

  const std::string mode = !f.tls ? "plaintext h2c"
                           : f.insecure_skip_verify ? "TLS, certificate not verified"
                                                    : (f.ca.empty() ? "TLS, system roots" : "TLS, --ca " + f.ca);
  if (!f.json) {
    std::printf(
        "epp_extproc_load: %s (%s); prompt %zu B (system %zu shared by %d groups + question %zu unique), body %zu B "
        "in %zu chunks of <= %zu B; %d threads, %d channels; warm-up %.3gs, measured %.3gs per level%s\n",
        f.target.c_str(), mode.c_str(), f.prompt_bytes, work.system_bytes, f.groups, work.question_bytes,
        work.body_bytes, work.chunk_count, f.chunk_bytes ? f.chunk_bytes : work.body_bytes, f.threads, f.channels,
        f.warmup_s, f.duration_s,
        f.response_delay_s > 0 ? ("; response delay " + std::to_string(f.response_delay_s * 1000).substr(0, std::to_string(f.response_delay_s * 1000).find('.')) + " ms +-50%").c_str() : "");
    std::printf("%11s %9s %9s | %-30s | %-30s | %7s %7s | %s\n", "concurrency", "requests", "req/s",
                "added ms p50 / p99 / p99.9", "stream ms p50 / p99 / p99.9", "cli cpu", "srv cpu", "errors");
    std::fflush(stdout);
  }

  std::vector<LevelResult> results;
  uint64_t id_base = 0;
  for (int conc : f.concurrency) {
    const auto start = Clock::now();
    const auto warm_end = start + std::chrono::microseconds(static_cast<int64_t>(f.warmup_s * 1e6));
    // --requests: the level ends when its streams are done, whatever the time.
    const auto end = f.requests > 0 ? warm_end + std::chrono::hours(24 * 365)
                                    : warm_end + std::chrono::microseconds(static_cast<int64_t>(f.duration_s * 1e6));
    std::atomic<int64_t> launched{0};
    std::vector<std::unique_ptr<Worker>> workers;
    for (int t = 0; t < f.threads; ++t) {
      auto w = std::make_unique<Worker>();
      w->flags = &f;
      w->work = &work;
      w->warm_end = warm_end;
      w->end = end;
      w->launched = &launched;
      w->id_base = id_base + (static_cast<uint64_t>(t) << 40);
      w->rng.seed(0x10ad0000ULL + static_cast<uint64_t>(t) + id_base);
      workers.push_back(std::move(w));
    }
    for (int i = 0; i < conc; ++i) {
      Worker& w = *workers[static_cast<size_t>(i % f.threads)];
      auto s = std::make_unique<Slot>();
      s->worker = &w;
      s->stub = stubs[static_cast<size_t>(i % f.channels)].get();
      for (int k = 0; k < kOpKinds; ++k) s->tags[k] = Tag{s.get(), static_cast<OpKind>(k)};
      w.slots.push_back(std::move(s));
    }
    std::vector<std::thread> threads;
    for (auto& w : workers) threads.emplace_back([&w] { w->Run(); });
    std::this_thread::sleep_until(warm_end);
    double f0 = 0, f1 = 0;
    const double c0 = SelfCpuSeconds(), s0 = ProcessCpuSeconds(f.server_pid, &f0);
    if (f.requests > 0) {
      for (auto& t : threads) t.join();
    } else {
      std::this_thread::sleep_until(end);
    }
    const double measured_s = std::chrono::duration<double>(Clock::now() - warm_end).count();
    const double c1 = SelfCpuSeconds(), s1 = ProcessCpuSeconds(f.server_pid, &f1);
    for (auto& t : threads)
      if (t.joinable()) t.join();
    id_base += uint64_t{1} << 48;

    LevelStats all;
    for (auto& w : workers) all.Merge(std::move(w->stats));
    LevelResult r;
    r.concurrency = conc;
    r.seconds = measured_s;
    r.ok = all.ok;
    r.cancelled = all.cancelled;
    r.stalled_ended = all.stalled_ended;
    r.started = all.started;
    r.rps = static_cast<double>(all.ok) / measured_s;
    r.added = Compute(all.added_us);
    r.stream = Compute(all.stream_us);
    r.errors = all.errors;
    for (auto& [k, v] : all.errors) r.error_count += v;
    r.client_cpu = (c1 - c0) / measured_s;
    if (s0 >= 0 && s1 >= 0) r.server_cpu = (s1 - s0) / measured_s;
    if (s0 >= 0 && s1 >= 0 && all.ok > 0) r.server_faults = (f1 - f0) / static_cast<double>(all.ok);
    results.push_back(r);
    if (!f.json) {
      std::string errs;
      for (auto& [k, v] : r.errors) errs += (errs.empty() ? "" : ", ") + k + " " + std::to_string(v);
      if (r.cancelled || r.stalled_ended)
        errs += (errs.empty() ? "none" : "") + std::string("; planned: ") + std::to_string(r.cancelled) + " cancelled, " +
                std::to_string(r.stalled_ended) + " stalled ended by the server";
      char added[64], stream[64], srv[16];
      std::snprintf(added, sizeof added, "%.3f / %.3f / %.3f", r.added.p50 / 1000, r.added.p99 / 1000, r.added.p999 / 1000);
      std::snprintf(stream, sizeof stream, "%.3f / %.3f / %.3f", r.stream.p50 / 1000, r.stream.p99 / 1000,
                    r.stream.p999 / 1000);
      if (r.server_cpu >= 0) std::snprintf(srv, sizeof srv, "%.2f", r.server_cpu);
      else std::snprintf(srv, sizeof srv, "-");
      std::printf("%11d %9" PRId64 " %9.0f | %-30s | %-30s | %7.2f %7s | %s\n", conc, r.ok, r.rps, added, stream,
                  r.client_cpu, srv, errs.empty() ? "none" : errs.c_str());
      std::fflush(stdout);
    }
  }

  if (f.json) {
    std::printf("{\n  \"target\": \"%s\",\n  \"tls\": %s,\n  \"mode\": \"%s\",\n  \"prompt_bytes\": %zu,\n"
                "  \"system_bytes\": %zu,\n  \"question_bytes\": %zu,\n  \"body_bytes\": %zu,\n  \"groups\": %d,\n"
                "  \"chunk_bytes\": %zu,\n  \"chunks\": %zu,\n  \"threads\": %d,\n  \"channels\": %d,\n"
                "  \"warmup_s\": %g,\n  \"duration_s\": %g,\n  \"response_delay_s\": %g,\n  \"levels\": [\n",
                JsonEscape(f.target).c_str(), f.tls ? "true" : "false", JsonEscape(mode).c_str(), f.prompt_bytes,
                work.system_bytes, work.question_bytes, work.body_bytes, f.groups, f.chunk_bytes, work.chunk_count,
                f.threads, f.channels, f.warmup_s, f.duration_s, f.response_delay_s);
    for (size_t i = 0; i < results.size(); ++i) {
      const LevelResult& r = results[i];
      std::string errs;
      for (auto& [k, v] : r.errors) errs += (errs.empty() ? "" : ", ") + ("\"" + JsonEscape(k) + "\": " + std::to_string(v));
      std::printf("    {\"concurrency\": %d, \"seconds\": %.3f, \"started\": %" PRId64 ", \"cancelled\": %" PRId64
                  ", \"stalled_ended\": %" PRId64 ",\n     \"requests\": %" PRId64 ", \"requests_per_s\": %.1f, \"errors\": %" PRId64
                  ", \"errors_by_kind\": {%s},\n     \"added_latency_ms\": %s,\n     \"stream_latency_ms\": %s,\n"
                  "     \"client_cpu_cores\": %.3f, \"server_cpu_cores\": %s, \"server_minor_faults_per_request\": %s}%s\n",
                  r.concurrency, r.seconds, r.started, r.cancelled, r.stalled_ended, r.ok, r.rps, r.error_count, errs.c_str(), PercentilesJson(r.added).c_str(),
                  PercentilesJson(r.stream).c_str(), r.client_cpu,
                  r.server_cpu >= 0 ? std::to_string(r.server_cpu).c_str() : "null",
                  r.server_faults >= 0 ? std::to_string(r.server_faults).c_str() : "null", i + 1 < results.size() ? "," : "");
    }
    std::printf("  ]\n}\n");
  }
  int64_t total_ok = 0;
  for (const auto& r : results) total_ok += r.ok;
  return total_ok > 0 ? 0 : 1;
}
