// ext_proc: epp as an Envoy external processor (the Endpoint Picker protocol).
//
// A gateway opens one gRPC stream (`/envoy.service.ext_proc.v3.ExternalProcessor/Process`) per
// HTTP request in FULL_DUPLEX_STREAMED mode. ExtProcSession is the per-stream state machine,
// independent of any transport: it takes ProcessingRequest messages (serialized protobuf) and
// produces the ProcessingResponse messages to send back, in order:
//   request headers  -> remembered; with end_of_stream (no body) a random candidate is answered
//                       at once; otherwise the headers response waits for the whole body;
//   request body     -> buffered up to max_request_bytes (beyond: ImmediateResponse 413); at end
//                       of stream: parse (400 on error, naming the JSON path), optional model
//                       rewrite (header x-gateway-model-name-rewrite), Scheduler::Pick, then the
//                       headers response (clear_route_cache, x-gateway-destination-endpoint,
//                       Content-Length when the body changed) with dynamic metadata
//                       {"envoy.lb": {"x-gateway-destination-endpoint": ...}}, then the body as
//                       streamed_response chunks of at most 62,000 bytes; 429 / 503 as
//                       ImmediateResponse whose body says why;
//   response headers / body / trailers -> echoed (streamed_response chunks mirroring end of
//                       stream); usage parsed from JSON or SSE; the served endpoint read from the
//                       `envoy.lb` metadata; the request's load released at the end.
// ExtProcServer runs sessions behind a gRPC server (callback API, TLS optional); HealthServer
// answers grpc.health.v1 on its own port. Wire names live here and nowhere else.
//
// Thread-safety: a session is used by one stream at a time; servers and EndpointSnapshot are
// thread-safe. The Scheduler and EndpointSource given to a server must outlive it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "epp/endpoint.h"
#include "epp/runtime/tracing.h"
#include "epp/scheduler.h"
#include "epp/status.h"

namespace epp {

// Wire names (GIE pkg/epp/metadata/consts.go and the Endpoint Picker protocol).
inline constexpr std::string_view kDestinationEndpointHeader = "x-gateway-destination-endpoint";
inline constexpr std::string_view kDestinationEndpointNamespace = "envoy.lb";
inline constexpr std::string_view kDestinationEndpointKey = "x-gateway-destination-endpoint";
// llm-d's --emit-endpoint-scores key in the same namespace: {"ip:port": total score}.
inline constexpr std::string_view kDestinationEndpointScoresKey = "x-gateway-destination-endpoint-scores";
inline constexpr std::string_view kDestinationEndpointServedKey = "x-gateway-destination-endpoint-served";
inline constexpr std::string_view kSubsetHintNamespace = "envoy.lb.subset_hint";
inline constexpr std::string_view kDestinationEndpointSubsetKey = "x-gateway-destination-endpoint-subset";
inline constexpr std::string_view kModelNameRewriteHeader = "x-gateway-model-name-rewrite";
inline constexpr std::string_view kObjectiveHeader = "x-gateway-inference-objective";
// llm-d's names of the two (the x-gateway-* ones stay read as aliases).
inline constexpr std::string_view kLlmdModelNameRewriteHeader = "x-llm-d-model-name-rewrite";
inline constexpr std::string_view kLlmdObjectiveHeader = "x-llm-d-inference-objective";
// Request headers llm-d's routing sidecar on a model server acts on: where to run the prefill,
// which encoders to use, which data-parallel rank to forward to. Only the EPP may set them: a
// client's copies are removed from every forwarded request (the sidecar would otherwise connect
// wherever a client says), unless this pick set them itself.
inline constexpr std::string_view kSidecarControlHeaders[] = {"x-prefiller-host-port", "x-encoder-hosts-ports",
                                                              "x-data-parallel-host-port"};
// The fairness-id headers are in epp/request.h (FairnessIdFromHeaders).
// Set on every answer that stops a request before it reaches a model server (429, 503), with
// PickResult::dropped_reason's value ("rejected-saturated", "rejected-no-endpoints").
inline constexpr std::string_view kRequestDroppedReasonHeader = "x-llm-d-request-dropped-reason";
inline constexpr std::string_view kExtProcServiceName = "envoy.service.ext_proc.v3.ExternalProcessor";
// Largest streamed body chunk sent back (GIE's BodyByteLimit: below a 64 KiB per-chunk limit some
// proxies enforce).
inline constexpr size_t kBodyChunkBytes = 62000;
inline constexpr size_t kDefaultMaxRequestBytes = size_t{16} << 20;

class DecisionLog;  // epp/runtime/decision_log.h
namespace flowcontrol {
class FlowController;  // libepp's flow-control layer (private)
}

// The flow-control layer new streams wait in (serve with llm-d's `featureGates: [flowControl]`):
// replaced whole on a config reload; each stream reads it once, as it reads the scheduler.
// Thread-safe.
class FlowControlHandle {
 public:
  void Set(std::shared_ptr<flowcontrol::FlowController> controller) {
    std::lock_guard<std::mutex> lock(mu_);
    current_ = std::move(controller);
  }
  std::shared_ptr<flowcontrol::FlowController> Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return current_;
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<flowcontrol::FlowController> current_;
};

// The pool as of now. Implementations return an immutable snapshot; readers keep it alive for as
// long as they use it.
class EndpointSource {
 public:
  virtual ~EndpointSource() = default;
  virtual std::shared_ptr<const std::vector<Endpoint>> Snapshot() const = 0;
};

// An EndpointSource whose snapshot is replaced whole (by serve's scrape loop).
class EndpointSnapshot final : public EndpointSource {
 public:
  explicit EndpointSnapshot(std::vector<Endpoint> endpoints = {})
      : current_(std::make_shared<const std::vector<Endpoint>>(std::move(endpoints))) {}
  std::shared_ptr<const std::vector<Endpoint>> Snapshot() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return current_;
  }
  void Set(std::vector<Endpoint> endpoints) {
    auto next = std::make_shared<const std::vector<Endpoint>>(std::move(endpoints));
    std::lock_guard<std::mutex> lock(mu_);
    current_ = std::move(next);
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const std::vector<Endpoint>> current_;
};

// What the streams of a server may hold buffered at once: request bodies from their first chunk
// until the pick (also while they wait in flow control), and the part of each response kept for
// its usage. A request whose body would pass it is answered 429 (ResourceExhausted, the
// reference's overload status, x-llm-d-request-dropped-reason: rejected-buffer-budget); a
// response past it keeps nothing more (its usage goes uncounted). Thread-safe.
class BufferBudget {
 public:
  explicit BufferBudget(uint64_t limit) : limit_(limit) {}  // 0: no limit (still counted)
  // Takes `n` bytes when they fit (always with no limit); false leaves nothing taken.
  bool TryTake(uint64_t n) {
    uint64_t used = used_.load(std::memory_order_relaxed);
    do {
      if (limit_ != 0 && (n > limit_ || used > limit_ - n)) return false;
    } while (!used_.compare_exchange_weak(used, used + n, std::memory_order_relaxed));
    uint64_t peak = peak_.load(std::memory_order_relaxed);
    while (used + n > peak && !peak_.compare_exchange_weak(peak, used + n, std::memory_order_relaxed)) {
    }
    return true;
  }
  void Give(uint64_t n) {
    used_.fetch_sub(n, std::memory_order_relaxed);
    given_.fetch_add(n, std::memory_order_relaxed);
  }
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  uint64_t given_total() const { return given_.load(std::memory_order_relaxed); }  // all Give()s
  uint64_t peak() const { return peak_.load(std::memory_order_relaxed); }
  uint64_t limit() const { return limit_; }

 private:
  const uint64_t limit_;
  std::atomic<uint64_t> used_{0}, peak_{0}, given_{0};
};
inline constexpr uint64_t kDefaultMaxBufferedBytes = uint64_t{192} << 20;
inline constexpr std::string_view kDroppedBufferBudget = "rejected-buffer-budget";
inline constexpr std::string_view kDroppedStreamLimit = "rejected-stream-limit";

// Counters shared by every session of a server (serve's /metrics renders them).
struct ExtProcStats {
  std::atomic<int64_t> streams_total{0};
  std::atomic<int64_t> streams_active{0};
  std::atomic<int64_t> requests_in_flight{0};  // picked, response not finished
  // Outcomes: picked (200), bad request (400), too large (413), shed (429), unavailable (503),
  // internal (500).
  std::atomic<int64_t> outcome_200{0}, outcome_400{0}, outcome_413{0}, outcome_429{0}, outcome_503{0}, outcome_500{0};
  std::atomic<int64_t> served_mismatch{0};   // served endpoint differed from the primary pick
  std::atomic<int64_t> stripped_control_headers{0};  // client-sent kSidecarControlHeaders removed
  std::atomic<int64_t> untrusted_headers_ignored{0};  // objective / rewrite headers ignored (trust_* off)
  std::atomic<int64_t> capture_bytes{0}, capture_truncated{0};  // --capture: bytes written, files cut short
  // Memory budgets: requests answered 429 because their body did not fit the BufferBudget,
  // responses that stopped keeping their body for it, streams answered 429 past max_streams.
  std::atomic<int64_t> budget_rejected{0}, budget_response_dropped{0}, streams_refused{0};
  std::atomic<int64_t> request_body_bytes{0};  // every request body byte received
  // ExtProcServer's returns of freed memory to the system (ExtProcServerOptions::trim_after_bytes).
  std::atomic<int64_t> memory_trims{0}, memory_trim_us{0};
  // Streams ExtProcServer ended for a time limit (ExtProcOptions::request_timeout, idle_timeout).
  std::atomic<int64_t> timeouts_request{0}, timeouts_idle{0};
  std::atomic<int64_t> prompt_tokens{0}, completion_tokens{0}, cached_tokens{0};  // from response usage
  // Pick latency (parse + schedule + encode), histogram in microseconds with these upper bounds.
  static constexpr double kLatencyBucketsUs[] = {10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 50000, 100000};
  static constexpr size_t kLatencyBuckets = sizeof(kLatencyBucketsUs) / sizeof(kLatencyBucketsUs[0]);
  std::atomic<int64_t> latency_count[kLatencyBuckets + 1] = {};
  std::atomic<int64_t> latency_sum_us{0};
  std::atomic<int64_t> prefix_blocks{0}, prefix_match_blocks{0};  // over picked requests

  void RecordOutcome(int status);
  void RecordLatencyMicros(int64_t us);
  // Per endpoint: requests picked with it as the primary, and their prefix blocks (hashed, and
  // placed on it by the index). For /metrics' epp_endpoint_picks_total and eppctl top.
  struct EndpointPicks {
    int64_t picks = 0, prefix_blocks = 0, prefix_match_blocks = 0;
    int64_t unreachable_skips = 0;  // picks that passed the endpoint over as unreachable
  };
  void RecordPick(const std::string& endpoint, int prefix_blocks, int prefix_match_blocks);
  void RecordUnreachableSkips(const std::vector<std::string>& endpoints);
  std::map<std::string, EndpointPicks> PicksByEndpoint() const;

  // GIE's request metrics (inference_objective_*), per (model_name, target_model_name): the model
  // the client asked for and the one it was sent as (after a rewrite). Bucket bounds are GIE's.
  struct Histogram {
    const std::vector<double>* bounds = nullptr;
    std::vector<int64_t> counts;  // per bound, then +Inf; not cumulative
    double sum = 0;
    int64_t count = 0;
    void Observe(double v);
  };
  struct ModelFigures {
    std::map<int, int64_t> requests;                 // by priority
    std::map<std::string, int64_t> errors;           // by GIE error code
    int64_t running = 0;                             // picked, response not finished
    Histogram duration, request_bytes, response_bytes, input_tokens, output_tokens, cached_tokens, ttft, tpot,
        ntpot;
  };
  // What a finished response tells (unknown values absent).
  struct ModelResponse {
    double duration_s = 0;
    int64_t response_bytes = 0;
    std::optional<double> ttft_s;
    std::optional<int64_t> input_tokens, output_tokens, cached_tokens;
  };
  static const std::vector<double>& LatencyBucketsSeconds();  // GIE's 5 ms .. 1 h
  void RecordModelRequest(const std::string& model, const std::string& target, int priority, size_t bytes);
  void RecordModelError(const std::string& model, const std::string& target, int status);
  void RecordModelResponse(const std::string& model, const std::string& target, const ModelResponse& r);
  std::map<std::pair<std::string, std::string>, ModelFigures> ModelFiguresByModel() const;
  // GIE's error_code label for an answer status: BadRequest, InferencePoolResourceExhausted,
  // ServiceUnavailable, Internal.
  static std::string_view ErrorCode(int status);
  // inference_extension_model_rewrite_decisions_total{model_rewrite_name, model_name, target_model}.
  void RecordRewrite(const std::string& rule, const std::string& model, const std::string& target);
  std::map<std::tuple<std::string, std::string, std::string>, int64_t> Rewrites() const;

 private:
  mutable std::mutex picks_mu_;
  std::map<std::string, EndpointPicks, std::less<>> picks_;
  mutable std::mutex models_mu_;
  std::map<std::pair<std::string, std::string>, ModelFigures> models_;
  std::map<std::tuple<std::string, std::string, std::string>, int64_t> rewrites_;
};

// ---- Request policies from the cluster: InferenceObjective and InferenceModelRewrite ----------
//
// llm-d.ai/v1alpha2 (and inference.networking.x-k8s.io/v1alpha2 before it). An
// InferenceObjective gives requests that name it (x-llm-d-inference-objective, or its alias
// x-gateway-inference-objective) a priority; an InferenceModelRewrite rewrites a request's model
// to one of weighted targets (canary splits, A/B tests). Precedence, as the reference resolves
// it: a rule with an exact model match before a generic one (no matches); among those, the oldest
// resource first; within a resource, the first rule in list order.
struct ModelRewriteTarget {
  std::string model;
  int weight = 0;  // 0: not given (then every target is chosen evenly, as the reference does)
};

struct ModelRewriteRule {
  std::string source;               // "NS/NAME" of the InferenceModelRewrite (model_rewrite_name)
  std::vector<std::string> models;  // exact model matches (any of them); empty: every model
  std::vector<ModelRewriteTarget> targets;
};

struct RequestPolicies {
  std::map<std::string, int, std::less<>> objective_priorities;  // objective name -> priority
  std::vector<ModelRewriteRule> rewrites;                        // in precedence order
  // The rule for `model`: the first one listing it, else the first generic one; nullptr: none.
  const ModelRewriteRule* RuleFor(std::string_view model) const;
};

// The reference's weighted choice: `u` uniform in [0, 1). With weights, a target without one is
// never chosen (the reference logs that mix); without any, every target is equally likely.
const std::string& PickRewriteTarget(const ModelRewriteRule& rule, double u);

// The policies in force, replaced as a whole by whoever watches the cluster; every stream reads
// the current value once. Thread-safe.
class RequestPolicyHandle {
 public:
  void Set(std::shared_ptr<const RequestPolicies> policies);
  std::shared_ptr<const RequestPolicies> Get() const;

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const RequestPolicies> current_ = std::make_shared<const RequestPolicies>();
};

struct ExtProcOptions {
  size_t max_request_bytes = kDefaultMaxRequestBytes;
  // InferenceObjective priorities by name (the --objective flags; header
  // x-llm-d-inference-objective or x-gateway-inference-objective); unknown -> 0.
  std::map<std::string, int, std::less<>> objective_priorities;
  // The cluster's objectives and rewrites when watched (their priorities win over the flags').
  std::shared_ptr<const RequestPolicyHandle> policies;
  bool ignore_subset_hint = false;  // GIE's --disable-endpoint-subset-filter
  // Whether the request's own headers may choose its objective (x-llm-d-inference-objective,
  // x-gateway-inference-objective) and rewrite its model (x-llm-d-model-name-rewrite,
  // x-gateway-model-name-rewrite). true: as the reference (the gateway is expected to set or strip
  // them). false: they are ignored (priority 0; only the cluster's InferenceModelRewrites rewrite),
  // each ignored header counted in ExtProcStats::untrusted_headers_ignored.
  bool trust_objective_header = true;
  bool trust_model_rewrite_header = true;
  bool trace = false;               // keep the pick's explain trace (explain --ext-proc)
  // llm-d's --emit-endpoint-scores: every candidate's total score of the primary profile in
  // envoy.lb dynamic metadata as x-gateway-destination-endpoint-scores {"ip:port": score}.
  bool emit_endpoint_scores = false;
  // Stream time limits, enforced by ExtProcServer (a session alone has no clock). A stream past
  // one is ended with DEADLINE_EXCEEDED and its request's load released; 0 disables a limit.
  //   request_timeout: from the stream's start until its request body has ended (or an
  //     ImmediateResponse was sent): headers and never a body, or a body trickled forever.
  //   idle_timeout: after that, the longest wait for the gateway's next message (the model's
  //     time to first token and between response chunks). Longer than Envoy's default
  //     stream_idle_timeout (5 min), so a healthy gateway always ends its streams first.
  std::chrono::milliseconds request_timeout{60000};
  std::chrono::milliseconds idle_timeout{900000};
  // A connection whose TLS and HTTP/2 handshake has not completed this long after it was
  // accepted is closed (gRPC's server handshake timeout; its own default is 120 s). Bounds the
  // descriptors and memory that clients stalling in the handshake can hold.
  std::chrono::milliseconds handshake_timeout{10000};
  // When set (serve --decision-log): decisions the log admits are made with a trace and kept.
  std::shared_ptr<DecisionLog> decision_log;
  // When set (serve with the flowControl feature gate): a parsed request waits in the layer until
  // it dispatches it, its stream open and nothing sent on; then it is picked as usual, or
  // answered with the layer's outcome (429 / 503 and x-llm-d-request-dropped-reason). Only
  // ExtProcServer's streams queue: a bare ExtProcSession ignores it.
  std::shared_ptr<const FlowControlHandle> flow_control;
  // When set (serve --tracing with an exporter): each stream continues the request's W3C
  // traceparent (or starts a trace), sends the upstream request a traceparent naming its
  // gateway.request span, and, when sampled, exports that span with the scheduling cycle's spans,
  // the flow-control wait and the response (epp/runtime/tracing.h lists them).
  std::shared_ptr<Tracer> tracer;
  // The bytes all streams may hold buffered (BufferBudget); unset: no limit. ExtProcServer sets
  // its own (ExtProcServerOptions::max_buffered_bytes) when this is unset.
  std::shared_ptr<BufferBudget> buffer_budget;
};

// The per-stream state machine over serialized messages (see the file comment).
class ExtProcSession {
 public:
  ExtProcSession(const Scheduler& scheduler, const EndpointSource& endpoints, const ExtProcOptions& options,
                 ExtProcStats* stats = nullptr);
  ~ExtProcSession();  // releases the request's load if the response never finished
  ExtProcSession(const ExtProcSession&) = delete;
  ExtProcSession& operator=(const ExtProcSession&) = delete;

  // Feeds one serialized ProcessingRequest and appends the serialized responses to send, in
  // order. kInvalidArgument when the bytes are not a ProcessingRequest or arrive out of protocol
  // order (the server then closes the stream with that error).
  absl::Status OnMessage(std::string_view request, std::vector<std::string>& responses);
  // True once an ImmediateResponse was produced: nothing more will be answered.
  bool finished() const;
  // The decision, once made (nullptr before the request body ended).
  const PickResult* result() const;
  // The parsed request, once the body ended and parsed.
  const InferenceRequest* request() const;
  // The served endpoint the gateway reported on the response path, if any.
  const std::string& served() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// A captured HTTP request turned into the ProcessingRequest stream a gateway would send:
// request headers (with ":path"; end_of_stream when the body is empty), then the body in chunks
// of `chunk_bytes` (0: one chunk), the last with end_of_stream. The subset hint, when given, is
// attached to every message's metadata_context as a list (or, with subset_as_string, as one
// comma-separated string).
struct HttpRequestCapture {
  std::string path = "/v1/completions";
  std::string method = "POST";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::optional<std::vector<std::string>> subset;
  bool subset_as_string = false;
  size_t chunk_bytes = 0;
};
std::vector<std::string> BuildProcessingRequests(const HttpRequestCapture& capture);
// The HTTP request a capture describes, as `eppctl explain` and pyepp read captures: an envelope
// {"path", "headers", "body"} or a bare body, the path found as ParseCaptureEnvelope finds it
// (`path_override`, else the envelope's `path`, else the headers `:path`, `x-original-path`,
// `x-forwarded-path`, else kDefaultRequestPath). `:method` (default POST) and `:path` leave the
// header list; repeated headers (a list of strings) stay in order. An object body is written
// compactly, a string body kept as is, a bare body kept whole. The body is not validated (a bad
// one gets its 400 from the EPP). kInvalidArgument naming the JSON path for JSON that is not an
// object or headers that are not strings or lists of strings.
absl::StatusOr<HttpRequestCapture> CaptureToHttpRequest(std::string_view json, std::string_view path_override = {});
// Serialized response messages a model server's answer produces on the response path.
std::vector<std::string> BuildResponseMessages(int status, const std::vector<std::pair<std::string, std::string>>& headers,
                                               std::string_view body, std::string_view served_endpoint = {});

// protobuf JSON of serialized messages (for captures, explain --ext-proc, pyepp).
absl::StatusOr<std::string> ProcessingRequestToJson(std::string_view bytes);
absl::StatusOr<std::string> ProcessingResponseToJson(std::string_view bytes);
absl::StatusOr<std::string> ProcessingRequestFromJson(std::string_view json);

// The scheduler new streams use. Set() replaces it whole (a configuration reload); a stream keeps
// the scheduler it started with until it ends, which keeps that one alive.
class SchedulerHandle {
 public:
  explicit SchedulerHandle(std::shared_ptr<const Scheduler> scheduler) : current_(std::move(scheduler)) {}
  std::shared_ptr<const Scheduler> Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return current_;
  }
  void Set(std::shared_ptr<const Scheduler> scheduler) {
    std::lock_guard<std::mutex> lock(mu_);
    current_.swap(scheduler);  // the old one is released with the argument, after the lock
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const Scheduler> current_;
};

struct ExtProcServerOptions {
  std::string listen = "0.0.0.0:9002";  // host:port; port 0 picks a free one
  bool tls = false;
  std::string cert_pem, key_pem;        // required with tls: the certificate (then its chain) and its key
  // With tls, non-empty: every connection must present a client certificate that one of these CAs
  // (a PEM bundle) signed, or its TLS handshake fails. Empty: no client certificate is asked for.
  std::string client_ca_pem;
  ExtProcOptions session;
  // When set: every stream's messages as protobuf JSON lines, one file per stream, mode 0600, the
  // values of credential headers (authorization, proxy-authorization, cookie, set-cookie, x-api-key)
  // replaced by "<redacted>". At most capture_max_bytes are written in all (then a file ends with
  // a {"truncated": ...} line and later streams are not captured); ExtProcStats counts both.
  std::string capture_dir;
  uint64_t capture_max_bytes = uint64_t{1} << 30;
  // Largest gRPC message received / sent; 0: max(4 MiB, session.max_request_bytes + 1 MiB).
  size_t max_receive_message_bytes = 0, max_send_message_bytes = 0;
  // GIE's --health-checking: grpc.health.v1 on this port too (services as HealthServer's), its
  // states set by SetServing(); otherwise health checks are answered on the health port only.
  bool health_checking = false;
  // Memory budgets (0: no limit). max_buffered_bytes: what every stream together may hold
  // buffered (BufferBudget; used unless session.buffer_budget is set). max_streams: open streams
  // past it are answered 429 (x-llm-d-request-dropped-reason: rejected-stream-limit) at their first
  // message. max_streams_per_connection: HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS (a gateway opens
  // more connections or waits; nothing fails).
  uint64_t max_buffered_bytes = kDefaultMaxBufferedBytes;
  int64_t max_streams = 10000;
  uint32_t max_streams_per_connection = 0;
  // gRPC receives a large message in many small pieces, which the allocator keeps (in the middle
  // of its heaps) after they are freed, as it keeps freed bodies: once this many request body
  // bytes came or were freed since the last time, and then none for a watchdog period (at most a
  // second), the server hands free pages back to the system (malloc_trim). 0: never.
  uint64_t trim_after_bytes = uint64_t{64} << 20;
};

class ExtProcServer {
 public:
  // Every stream takes the handle's scheduler when it opens. The handle and `endpoints` must
  // outlive the server.
  static absl::StatusOr<std::unique_ptr<ExtProcServer>> Start(const SchedulerHandle& scheduler,
                                                               const EndpointSource& endpoints,
                                                               const ExtProcServerOptions& options);
  // One fixed scheduler, which must outlive the server.
  static absl::StatusOr<std::unique_ptr<ExtProcServer>> Start(const Scheduler& scheduler, const EndpointSource& endpoints,
                                                               const ExtProcServerOptions& options);
  ~ExtProcServer();
  int port() const;
  ExtProcStats& stats();
  // What the streams hold buffered now, at most, and the limit (ExtProcServerOptions).
  const BufferBudget& buffer_budget() const;
  // From now on a new stream is refused with UNAVAILABLE; open ones go on. Shutdown does this
  // too; call it first where something else (readiness) announces the drain.
  void BeginDrain();
  // Stops accepting streams, lets open ones finish for up to `drain`, then cancels the rest.
  void Shutdown(std::chrono::milliseconds drain);
  // With health_checking: the state this port's health service reports (liveness always serving).
  void SetServing(bool serving);
  // With tls: new connections are served `cert_pem` and `key_pem` and, when the server started
  // with a client CA, verify clients against `client_ca_pem`; open connections keep what they were
  // set up with. Checked as Start checks them: kInvalidArgument saying what is wrong, and nothing
  // changes. kFailedPrecondition without tls, or when `client_ca_pem` is empty and was not at
  // Start (or the reverse): whether clients must present a certificate is fixed at Start.
  absl::Status UpdateTls(const std::string& cert_pem, const std::string& key_pem, const std::string& client_ca_pem);

  struct Impl;

 private:
  static absl::StatusOr<std::unique_ptr<ExtProcServer>> StartWith(const SchedulerHandle& scheduler,
                                                                   const EndpointSource& endpoints,
                                                                   const ExtProcServerOptions& options,
                                                                   std::unique_ptr<SchedulerHandle> owned);
  explicit ExtProcServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// grpc.health.v1.Health on its own port. Services `liveness` (always serving once started),
// `readiness`, `inference-extension`, `envoy.service.ext_proc.v3.ExternalProcessor` and "" follow
// SetReady().
class HealthServer {
 public:
  static absl::StatusOr<std::unique_ptr<HealthServer>> Start(const std::string& listen);
  ~HealthServer();
  int port() const;
  void SetReady(bool ready);
  void Shutdown();

  struct Impl;

 private:
  explicit HealthServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A self-signed certificate for TLS serving (RSA 2048, CN "epp", 10 years), PEM encoded.
struct PemKeyPair {
  std::string cert_pem;
  std::string key_pem;
};
absl::StatusOr<PemKeyPair> GenerateSelfSignedCertificate();

// The checks ExtProcServer::Start and UpdateTls make on TLS material, for callers that want to
// refuse it before (a configuration error rather than a server that cannot start). kInvalidArgument
// with a message saying what is wrong, not where the material came from (callers prefix that).
// `cert_pem`: PEM certificates, the server's first, then its chain; `key_pem`: the first one's
// private key, PEM, not encrypted.
absl::Status CheckCertificateAndKey(std::string_view cert_pem, std::string_view key_pem);
// `pem`: one or more PEM certificates (a CA bundle), each of which parses.
absl::Status CheckCertificateBundle(std::string_view pem);

}  // namespace epp
