// OpenTelemetry traces of ext_proc requests, exported over OTLP without an OpenTelemetry SDK
// (Debian has no C++ one): W3C trace context, the standard OTEL_* environment variables, a
// sampler, OTLP/HTTP with protobuf or JSON bodies and OTLP/gRPC, batched on a background thread.
//
// Span names follow llm-d Router's so that its dashboards and queries keep working:
//   gateway.request (server)              one per ext_proc stream, parent: the request's traceparent
//     llm_d.epp.scheduling                the scheduling cycle (epp)
//       llm_d.epp.producer.<type>         each data producer (epp)
//       llm_d.epp.admitter.<type>         each admitter (epp)
//       run_scheduler_profile             per profile run (llm_d.epp.scheduling.profile.name)
//         filter_endpoints                the filter chain; llm_d.epp.filter.<type> per filter (epp)
//         llm_d.epp.scoring               the scorer chain
//           llm_d.epp.scorer.<type>       per scorer: type, name, weight, candidates, max/avg score,
//                                         and (epp) the best few endpoints with their scores
//         pick_endpoints                  the picker: top endpoints and their total scores
//     flow_control.wait                   time queued in the flow-control layer (epp)
//     gateway.response                    response headers to the end of the response (epp)
// The request's traceparent is continued (its trace id, its span as parent, its sampled flag
// under the parent-based samplers); the upstream request gets a traceparent naming
// gateway.request, so the model server's spans join the same trace.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "epp/status.h"
#include "epp/scheduler.h"

namespace epp {

using TraceId = std::array<uint8_t, 16>;
using SpanId = std::array<uint8_t, 8>;

// A W3C trace context (the traceparent header, version 00).
struct TraceContext {
  TraceId trace_id{};
  SpanId span_id{};
  bool sampled = false;
  std::string trace_state;  // the tracestate header, passed on unchanged
};

// Parses "00-<32 hex>-<16 hex>-<2 hex>" (lower-case hex; an all-zero id, version ff or a
// malformed value is an error naming what is wrong; a higher version is read by its first four
// fields, as the W3C spec asks).
absl::StatusOr<TraceContext> ParseTraceparent(std::string_view value);
std::string FormatTraceparent(const TraceContext& context);
std::string HexId(std::span<const uint8_t> id);

enum class SpanKind { kInternal = 1, kServer = 2, kClient = 3 };

// A finished span as exported.
struct Span {
  TraceId trace_id{};
  SpanId span_id{};
  SpanId parent_span_id{};  // all zero: a root span
  std::string trace_state;
  std::string name;
  SpanKind kind = SpanKind::kInternal;
  int64_t start_unix_ns = 0;
  int64_t end_unix_ns = 0;
  SpanAttributes attributes;
  bool error = false;  // OTLP status code ERROR (else UNSET)
  std::string status_message;
  std::string scope;  // instrumentation scope name
};

enum class OtlpProtocol { kGrpc, kHttpProtobuf, kHttpJson };
std::string_view OtlpProtocolName(OtlpProtocol p);  // "grpc", "http/protobuf", "http/json"

enum class TraceSampler {
  kAlwaysOn, kAlwaysOff, kTraceIdRatio, kParentBasedAlwaysOn, kParentBasedAlwaysOff, kParentBasedTraceIdRatio
};

// Where and how spans go. FromEnvironment reads the standard variables:
//   OTEL_TRACES_EXPORTER          otlp | console | none (unset: otlp when an OTLP endpoint variable
//                                 is set, else none; llm-d's unset default is console, see serve.md)
//   OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL
//                                 grpc (default, as llm-d's exporter) | http/protobuf | http/json
//   OTEL_EXPORTER_OTLP_ENDPOINT   base URL (http: /v1/traces is appended); default
//                                 http://localhost:4317 (grpc) or http://localhost:4318 (http)
//   OTEL_EXPORTER_OTLP_TRACES_ENDPOINT  the full URL, used as given
//   OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_TRACES_HEADERS   k=v,k2=v2 (URL-encoded values)
//   OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_EXPORTER_OTLP_TRACES_TIMEOUT   ms, default 10000
//   OTEL_EXPORTER_OTLP_INSECURE   true: no TLS to a scheme-less gRPC endpoint
//   OTEL_EXPORTER_OTLP_CERTIFICATE  CA file for https
//   OTEL_SERVICE_NAME             service.name (default: the caller's, "llm-d-epp" for serve)
//   OTEL_RESOURCE_ATTRIBUTES      k=v,k2=v2 resource attributes (service.name there loses to
//                                 OTEL_SERVICE_NAME)
//   OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG   default parentbased_traceidratio, 0.1 (llm-d's)
//   OTEL_BSP_MAX_QUEUE_SIZE (2048), OTEL_BSP_MAX_EXPORT_BATCH_SIZE (512),
//   OTEL_BSP_SCHEDULE_DELAY (ms, 5000)
// A malformed value is an error naming the variable (llm-d falls back silently for some).
struct TracingOptions {
  enum class Exporter { kNone, kOtlp, kConsole };
  Exporter exporter = Exporter::kNone;
  OtlpProtocol protocol = OtlpProtocol::kGrpc;
  std::string endpoint;  // http: the full URL of /v1/traces; grpc: the target URL
  std::vector<std::pair<std::string, std::string>> headers;
  std::chrono::milliseconds timeout{10000};
  bool insecure = false;  // grpc without a scheme: plaintext
  std::string ca_file;
  std::string service_name = "llm-d-epp";
  std::vector<std::pair<std::string, std::string>> resource_attributes;  // service.name first
  TraceSampler sampler = TraceSampler::kParentBasedTraceIdRatio;
  double sampler_ratio = 0.1;
  size_t max_queue_spans = 2048;
  size_t max_batch_spans = 512;
  std::chrono::milliseconds schedule_delay{5000};
  // Where the console exporter writes (one OTLP/JSON export request per line); nullptr: stdout.
  std::function<void(std::string_view)> console;

  // `getenv` returns a variable's value or nullopt; `default_service_name` when
  // OTEL_SERVICE_NAME and the resource attributes name none.
  static absl::StatusOr<TracingOptions> FromEnvironment(
      const std::function<std::optional<std::string>(std::string_view)>& getenv,
      std::string_view default_service_name = "llm-d-epp");
  // The process environment.
  static absl::StatusOr<TracingOptions> FromProcessEnvironment(std::string_view default_service_name = "llm-d-epp");
  // One line for the start-up log: "otlp http/json to http://...; sampler parentbased_traceidratio 0.1".
  std::string Describe() const;
};

// The OTLP ExportTraceServiceRequest of `spans` under one resource (the options' service name
// and attributes), grouped by instrumentation scope. Protobuf wire bytes and OTLP/JSON (hex ids,
// lowerCamelCase names, 64-bit integers as strings, enums as numbers).
std::string EncodeOtlpProtobuf(const TracingOptions& options, std::span<const Span> spans);
std::string EncodeOtlpJson(const TracingOptions& options, std::span<const Span> spans);

struct TracerStats {
  uint64_t traces_sampled = 0;   // requests whose spans were recorded
  uint64_t spans_exported = 0;   // spans a receiver accepted
  uint64_t spans_dropped = 0;    // spans lost: the queue was full, or their export failed
  uint64_t export_failures = 0;  // export calls that failed (connection, non-2xx, gRPC status)
  std::string last_error;        // the last failure, for the log
};

// Samples requests, assigns ids, and exports finished spans in batches from its own thread: the
// request path only appends to a bounded queue under a mutex (a full queue drops and counts).
// Thread-safe.
class Tracer {
 public:
  // kInvalidArgument for options that cannot work (an endpoint URL without http/https).
  static absl::StatusOr<std::unique_ptr<Tracer>> Start(TracingOptions options);
  ~Tracer();  // flushes what is queued (bounded by the export timeout), then stops
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // A new span context for a request: under `parent`'s trace when given (the parent-based
  // samplers follow its sampled flag), else a new trace; sampled per the sampler.
  TraceContext StartRequest(const std::optional<TraceContext>& parent);
  static SpanId NewSpanId();
  // Queues finished spans (of sampled requests only).
  void Export(std::vector<Span> spans);
  // Converts a cycle's recorded spans into `out` (their attributes are moved), parented under
  // `parent` in `trace`, shifting steady-clock times to the Unix epoch by `steady_to_unix_ns`.
  static void AppendCycleSpans(std::span<CycleSpan> cycle, const TraceId& trace, const SpanId& parent,
                               std::string_view trace_state, int64_t steady_to_unix_ns, std::vector<Span>& out);
  // Steady-clock nanoseconds to add to get Unix nanoseconds now.
  static int64_t SteadyToUnixOffsetNs();
  // Waits until everything queued so far has been sent or dropped (tests, shutdown); false after
  // `timeout`.
  bool Flush(std::chrono::milliseconds timeout);
  TracerStats stats() const;
  const TracingOptions& options() const;

  struct Impl;

 private:
  explicit Tracer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace epp
