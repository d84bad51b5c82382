// OpenTelemetry traces: W3C traceparent, the OTEL_* environment, the sampler, the OTLP encodings
// (protobuf read back with protobuf's own wire parser, not ours), the batching exporter against a
// loopback OTLP/HTTP receiver, and the spans a traced scheduling cycle records.
#include "epp/runtime/tracing.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/unknown_field_set.h>
#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "epp/config.h"
#include "epp/registry.h"
#include "epp/request.h"
#include "epp/scheduler.h"
#include "testing/epp_testing.h"
#include "testing/test_server.h"

namespace epp {
namespace {

using google::protobuf::UnknownField;
using google::protobuf::UnknownFieldSet;

TEST(Traceparent, ParsesAndFormats) {
  auto c = ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->sampled);
  EXPECT_EQ(HexId(c->trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(HexId(c->span_id), "00f067aa0ba902b7");
  EXPECT_EQ(FormatTraceparent(*c), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  auto unsampled = ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  ASSERT_TRUE(unsampled.ok());
  EXPECT_FALSE(unsampled->sampled);
  // A later version is read by its first four fields.
  auto later = ParseTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra");
  ASSERT_TRUE(later.ok()) << later.status();
}

TEST(Traceparent, RejectsMalformedNamingWhy) {
  struct Case {
    const char* value;
    const char* why;
  } cases[] = {
      {"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "trace id"},
      {"00-00000000000000000000000000000000-00f067aa0ba902b7-01", "all zeros"},
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "parent id is all zeros"},
      {"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "version ff"},
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", "exactly four"},
      {"00-4bf92f3577b34da6a3ce929d0e0e4736", "too short"},
      {"00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01", "separated"},
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz", "flags"},
  };
  for (const Case& c : cases) {
    auto r = ParseTraceparent(c.value);
    ASSERT_FALSE(r.ok()) << c.value;
    EXPECT_NE(std::string(r.status().message()).find(c.why), std::string::npos) << r.status();
  }
}

absl::StatusOr<TracingOptions> FromEnv(std::map<std::string, std::string> env) {
  return TracingOptions::FromEnvironment([&](std::string_view k) -> std::optional<std::string> {
    auto it = env.find(std::string(k));
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

TEST(TracingOptions, DefaultsAndEndpoints) {
  auto none = FromEnv({});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->exporter, TracingOptions::Exporter::kNone);
  EXPECT_EQ(none->sampler, TraceSampler::kParentBasedTraceIdRatio);
  EXPECT_DOUBLE_EQ(none->sampler_ratio, 0.1);
  EXPECT_EQ(none->service_name, "llm-d-epp");

  auto grpc = FromEnv({{"OTEL_TRACES_EXPORTER", "otlp"}});
  ASSERT_TRUE(grpc.ok());
  EXPECT_EQ(grpc->exporter, TracingOptions::Exporter::kOtlp);
  EXPECT_EQ(grpc->protocol, OtlpProtocol::kGrpc);
  EXPECT_EQ(grpc->endpoint, "http://localhost:4317");

  // The general endpoint is a base URL for HTTP; the traces one is used as given.
  auto json = FromEnv({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"},
                       {"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"}});
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(json->exporter, TracingOptions::Exporter::kOtlp);
  EXPECT_EQ(json->endpoint, "http://collector:4318/v1/traces");
  auto traces = FromEnv({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"},
                         {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://b/custom"},
                         {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"},
                         {"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}});
  ASSERT_TRUE(traces.ok());
  EXPECT_EQ(traces->endpoint, "https://b/custom");
  EXPECT_EQ(traces->protocol, OtlpProtocol::kHttpProtobuf);

  auto off = FromEnv({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"}, {"OTEL_TRACES_EXPORTER", "none"}});
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->exporter, TracingOptions::Exporter::kNone);
}

TEST(TracingOptions, ResourceHeadersSamplerAndBatching) {
  auto o = FromEnv({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"},
                    {"OTEL_EXPORTER_OTLP_HEADERS", "api-key=s%20ecret, x-tenant = t1"},
                    {"OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attrs,deployment.environment=prod,service.version=9"},
                    {"OTEL_SERVICE_NAME", "epp-a"},
                    {"OTEL_TRACES_SAMPLER", "traceidratio"},
                    {"OTEL_TRACES_SAMPLER_ARG", "0.25"},
                    {"OTEL_BSP_MAX_QUEUE_SIZE", "100"},
                    {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1000"},
                    {"OTEL_BSP_SCHEDULE_DELAY", "250"}});
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_EQ(o->headers.size(), 2u);
  EXPECT_EQ(o->headers[0], (std::pair<std::string, std::string>{"api-key", "s ecret"}));
  EXPECT_EQ(o->headers[1], (std::pair<std::string, std::string>{"x-tenant", "t1"}));
  EXPECT_EQ(o->service_name, "epp-a");  // OTEL_SERVICE_NAME wins over the attributes
  std::map<std::string, std::string> attrs(o->resource_attributes.begin(), o->resource_attributes.end());
  EXPECT_EQ(attrs["service.name"], "epp-a");
  EXPECT_EQ(attrs["deployment.environment"], "prod");
  EXPECT_EQ(attrs["service.version"], "9");  // the user's value wins over epp's
  EXPECT_EQ(o->sampler, TraceSampler::kTraceIdRatio);
  EXPECT_DOUBLE_EQ(o->sampler_ratio, 0.25);
  EXPECT_EQ(o->max_queue_spans, 100u);
  EXPECT_EQ(o->max_batch_spans, 100u);  // never above the queue
  EXPECT_EQ(o->schedule_delay, std::chrono::milliseconds(250));
  EXPECT_NE(o->Describe().find("traceidratio 0.25"), std::string::npos) << o->Describe();
}

TEST(TracingOptions, BadValuesNameTheVariable) {
  const std::pair<std::map<std::string, std::string>, const char*> cases[] = {
      {{{"OTEL_TRACES_EXPORTER", "zipkin"}}, "OTEL_TRACES_EXPORTER"},
      {{{"OTEL_EXPORTER_OTLP_PROTOCOL", "http"}}, "OTEL_EXPORTER_OTLP_PROTOCOL"},
      {{{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "thrift"}}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
      {{{"OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"}, {"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"}},
       "OTEL_EXPORTER_OTLP_ENDPOINT"},
      {{{"OTEL_EXPORTER_OTLP_HEADERS", "novalue"}}, "OTEL_EXPORTER_OTLP_HEADERS"},
      {{{"OTEL_EXPORTER_OTLP_HEADERS", "k=%zz"}}, "OTEL_EXPORTER_OTLP_HEADERS"},
      {{{"OTEL_TRACES_SAMPLER", "sometimes"}}, "OTEL_TRACES_SAMPLER"},
      {{{"OTEL_TRACES_SAMPLER_ARG", "1.5"}}, "OTEL_TRACES_SAMPLER_ARG"},
      {{{"OTEL_BSP_MAX_QUEUE_SIZE", "-3"}}, "OTEL_BSP_MAX_QUEUE_SIZE"},
      {{{"OTEL_EXPORTER_OTLP_TIMEOUT", "soon"}}, "OTEL_EXPORTER_OTLP_TIMEOUT"},
  };
  for (const auto& [env, var] : cases) {
    auto o = FromEnv(env);
    ASSERT_FALSE(o.ok()) << var;
    EXPECT_EQ(std::string(o.status().message()).rfind(var, 0), 0u) << o.status();
  }
}

std::unique_ptr<Tracer> ConsoleTracer(TraceSampler sampler, double ratio, std::vector<std::string>* lines = nullptr,
                                      std::mutex* mu = nullptr) {
  TracingOptions o;
  o.exporter = TracingOptions::Exporter::kConsole;
  o.sampler = sampler;
  o.sampler_ratio = ratio;
  o.schedule_delay = std::chrono::milliseconds(20);
  if (lines)
    o.console = [lines, mu](std::string_view line) {
      std::lock_guard<std::mutex> lock(*mu);
      lines->emplace_back(line);
    };
  auto t = Tracer::Start(std::move(o));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

TEST(Tracer, SamplersFollowTheirRule) {
  auto count = [](Tracer& t, const std::optional<TraceContext>& parent, int n) {
    int sampled = 0;
    for (int i = 0; i < n; ++i) sampled += t.StartRequest(parent).sampled;
    return sampled;
  };
  TraceContext parent_on = *ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  TraceContext parent_off = *ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  auto on = ConsoleTracer(TraceSampler::kAlwaysOn, 0);
  EXPECT_EQ(count(*on, std::nullopt, 50), 50);
  EXPECT_EQ(count(*on, parent_off, 50), 50);  // not parent-based
  auto off = ConsoleTracer(TraceSampler::kAlwaysOff, 1);
  EXPECT_EQ(count(*off, parent_on, 50), 0);
  auto zero = ConsoleTracer(TraceSampler::kTraceIdRatio, 0);
  EXPECT_EQ(count(*zero, std::nullopt, 200), 0);
  auto all = ConsoleTracer(TraceSampler::kTraceIdRatio, 1);
  EXPECT_EQ(count(*all, std::nullopt, 200), 200);
  auto half = ConsoleTracer(TraceSampler::kTraceIdRatio, 0.5);
  const int h = count(*half, std::nullopt, 4000);
  EXPECT_GT(h, 1700);
  EXPECT_LT(h, 2300);
  // Parent-based: a parent's flag decides; a new trace gets the ratio.
  auto pb = ConsoleTracer(TraceSampler::kParentBasedTraceIdRatio, 0);
  EXPECT_EQ(count(*pb, parent_on, 30), 30);
  EXPECT_EQ(count(*pb, parent_off, 30), 0);
  EXPECT_EQ(count(*pb, std::nullopt, 30), 0);
  // The parent's trace id is continued, with a new span id.
  TraceContext child = pb->StartRequest(parent_on);
  EXPECT_EQ(child.trace_id, parent_on.trace_id);
  EXPECT_NE(child.span_id, parent_on.span_id);
  EXPECT_EQ(pb->stats().traces_sampled, 31u);
}

std::vector<Span> TwoSpans() {
  Span root;
  root.trace_id = ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")->trace_id;
  root.span_id = {1, 2, 3, 4, 5, 6, 7, 8};
  root.name = "gateway.request";
  root.kind = SpanKind::kServer;
  root.start_unix_ns = 1700000000000000000;
  root.end_unix_ns = 1700000000005000000;
  root.attributes = {{"gen_ai.request.model", std::string("m")}, {"n", int64_t{-3}}, {"ok", true}};
  root.scope = "handlers";
  Span child = root;
  child.span_id = {9, 9, 9, 9, 9, 9, 9, 9};
  child.parent_span_id = root.span_id;
  child.name = "llm_d.epp.scorer.queue-scorer";
  child.kind = SpanKind::kInternal;
  child.attributes = {{"llm_d.epp.scorer.weight", 2.5},
                      {"llm_d.epp.scorer.top_endpoints", std::vector<std::string>{"a:1", "b:2"}},
                      {"llm_d.epp.scorer.top_scores", std::vector<double>{1.0, 0.5}}};
  child.error = true;
  child.status_message = "boom";
  child.scope = "scheduling";
  return {root, child};
}

TracingOptions ServiceOptions() {
  TracingOptions o;
  o.resource_attributes = {{"service.name", "svc"}, {"k", "v"}};
  return o;
}

// Field `number` of `set`, the i-th occurrence.
const UnknownField* Field(const UnknownFieldSet& set, int number, int nth = 0) {
  for (int i = 0; i < set.field_count(); ++i)
    if (set.field(i).number() == number && nth-- == 0) return &set.field(i);
  return nullptr;
}
// The nested message in `f`, parsed; kept alive for the rest of the test binary (UnknownFieldSet
// cannot be copied or moved).
const UnknownFieldSet& Sub(const UnknownField* f) {
  static std::deque<UnknownFieldSet> kept;
  UnknownFieldSet& s = kept.emplace_back();
  EXPECT_NE(f, nullptr);
  if (f) {
    EXPECT_TRUE(s.ParseFromString(f->length_delimited()));
  }
  return s;
}
std::string Str(const UnknownFieldSet& set, int number) {
  const UnknownField* f = Field(set, number);
  return f && f->type() == UnknownField::TYPE_LENGTH_DELIMITED ? f->length_delimited() : "<missing>";
}

TEST(OtlpEncoding, ProtobufHasOtlpFieldNumbers) {
  const std::vector<Span> spans = TwoSpans();
  const std::string bytes = EncodeOtlpProtobuf(ServiceOptions(), spans);
  UnknownFieldSet req;
  ASSERT_TRUE(req.ParseFromString(bytes));
  const UnknownFieldSet& rs = Sub(Field(req, 1));                   // resource_spans
  const UnknownFieldSet& resource = Sub(Field(rs, 1));              // resource
  const UnknownFieldSet& kv0 = Sub(Field(resource, 1));             // attributes[0]
  EXPECT_EQ(Str(kv0, 1), "service.name");
  EXPECT_EQ(Str(Sub(Field(kv0, 2)), 1), "svc");              // AnyValue.string_value
  // Two scopes in first-seen order, one span each.
  const UnknownFieldSet& ss0 = Sub(Field(rs, 2, 0));
  const UnknownFieldSet& ss1 = Sub(Field(rs, 2, 1));
  EXPECT_EQ(Str(Sub(Field(ss0, 1)), 1), "handlers");
  EXPECT_EQ(Str(Sub(Field(ss1, 1)), 1), "scheduling");
  const UnknownFieldSet& root = Sub(Field(ss0, 2));
  const UnknownFieldSet& child = Sub(Field(ss1, 2));
  EXPECT_EQ(Str(root, 1).size(), 16u);                      // trace_id
  EXPECT_EQ(Str(root, 2), std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8));
  EXPECT_EQ(Field(root, 4), nullptr);                        // no parent: a root
  EXPECT_EQ(Str(root, 5), "gateway.request");
  ASSERT_NE(Field(root, 6), nullptr);
  EXPECT_EQ(Field(root, 6)->varint(), 2u);                   // SPAN_KIND_SERVER
  ASSERT_NE(Field(root, 7), nullptr);
  EXPECT_EQ(Field(root, 7)->type(), UnknownField::TYPE_FIXED64);
  EXPECT_EQ(Field(root, 7)->fixed64(), 1700000000000000000u);
  EXPECT_EQ(Field(root, 8)->fixed64(), 1700000000005000000u);
  const UnknownFieldSet& n = Sub(Field(root, 9, 1));
  EXPECT_EQ(Str(n, 1), "n");
  EXPECT_EQ(static_cast<int64_t>(Field(Sub(Field(n, 2)), 3)->varint()), -3);  // int_value
  EXPECT_EQ(Field(Sub(Field(Sub(Field(root, 9, 2)), 2)), 2)->varint(), 1u);    // bool_value
  EXPECT_EQ(Field(root, 15), nullptr);                       // status unset
  EXPECT_EQ(Str(child, 4), Str(root, 2));                    // parent_span_id
  const UnknownFieldSet& weight = Sub(Field(Sub(Field(child, 9, 0)), 2));
  ASSERT_NE(Field(weight, 4), nullptr);                      // double_value
  double w = 0;
  const uint64_t bits = Field(weight, 4)->fixed64();
  std::memcpy(&w, &bits, sizeof w);
  EXPECT_DOUBLE_EQ(w, 2.5);
  const UnknownFieldSet& names = Sub(Field(Sub(Field(Sub(Field(child, 9, 1)), 2)), 5));  // array_value
  EXPECT_EQ(Str(Sub(Field(names, 1, 1)), 1), "b:2");
  const UnknownFieldSet& status = Sub(Field(child, 15));
  EXPECT_EQ(Str(status, 2), "boom");
  EXPECT_EQ(Field(status, 3)->varint(), 2u);                 // STATUS_CODE_ERROR
}

TEST(OtlpEncoding, JsonUsesHexIdsAndCamelCase) {
  const std::vector<Span> spans = TwoSpans();
  const nlohmann::json j = nlohmann::json::parse(EncodeOtlpJson(ServiceOptions(), spans));
  const auto& rs = j["resourceSpans"][0];
  EXPECT_EQ(rs["resource"]["attributes"][0]["key"], "service.name");
  EXPECT_EQ(rs["resource"]["attributes"][0]["value"]["stringValue"], "svc");
  const auto& root = rs["scopeSpans"][0]["spans"][0];
  EXPECT_EQ(rs["scopeSpans"][0]["scope"]["name"], "handlers");
  EXPECT_EQ(root["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(root["spanId"], "0102030405060708");
  EXPECT_FALSE(root.contains("parentSpanId"));
  EXPECT_EQ(root["kind"], 2);
  EXPECT_EQ(root["startTimeUnixNano"], "1700000000000000000");
  EXPECT_EQ(root["attributes"][1]["value"]["intValue"], "-3");
  const auto& child = rs["scopeSpans"][1]["spans"][0];
  EXPECT_EQ(child["parentSpanId"], "0102030405060708");
  EXPECT_EQ(child["attributes"][0]["value"]["doubleValue"], 2.5);
  EXPECT_EQ(child["attributes"][1]["value"]["arrayValue"]["values"][0]["stringValue"], "a:1");
  EXPECT_EQ(child["status"]["code"], 2);
  EXPECT_EQ(child["status"]["message"], "boom");
}

// A loopback OTLP/HTTP receiver: the bodies and content types it was sent.
struct Receiver {
  testing::TestServer server;
  std::mutex mu;
  std::vector<std::pair<std::string, std::string>> posts;  // content type, body
  std::vector<std::string> api_keys;
  int status = 200;

  std::string Start() {
    server.server().Post("/v1/traces", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu);
      posts.emplace_back(req.get_header_value("Content-Type"), req.body);
      api_keys.push_back(req.get_header_value("api-key"));
      res.status = status;
    });
    return server.Start() + "/v1/traces";
  }
};

TEST(Tracer, ExportsBatchesOverHttp) {
  for (OtlpProtocol protocol : {OtlpProtocol::kHttpJson, OtlpProtocol::kHttpProtobuf}) {
    Receiver rx;
    TracingOptions o = ServiceOptions();
    o.exporter = TracingOptions::Exporter::kOtlp;
    o.protocol = protocol;
    o.endpoint = rx.Start();
    o.headers = {{"api-key", "k1"}};
    o.schedule_delay = std::chrono::milliseconds(50);
    o.timeout = std::chrono::milliseconds(5000);
    auto t = Tracer::Start(o);
    ASSERT_TRUE(t.ok()) << t.status();
    (*t)->Export(TwoSpans());
    (*t)->Export(TwoSpans());
    ASSERT_TRUE((*t)->Flush(std::chrono::milliseconds(5000)));
    EXPECT_EQ((*t)->stats().spans_exported, 4u);
    EXPECT_EQ((*t)->stats().spans_dropped, 0u);
    std::lock_guard<std::mutex> lock(rx.mu);
    ASSERT_FALSE(rx.posts.empty());
    EXPECT_EQ(rx.api_keys[0], "k1");
    size_t spans = 0;
    for (const auto& [type, body] : rx.posts) {
      if (protocol == OtlpProtocol::kHttpJson) {
        EXPECT_EQ(type, "application/json");
        const nlohmann::json j = nlohmann::json::parse(body);
        for (const auto& ss : j["resourceSpans"][0]["scopeSpans"]) spans += ss["spans"].size();
      } else {
        EXPECT_EQ(type, "application/x-protobuf");
        UnknownFieldSet req;
        ASSERT_TRUE(req.ParseFromString(body));
        const UnknownFieldSet& rs = Sub(Field(req, 1));
        for (int i = 0; Field(rs, 2, i) != nullptr; ++i) {
          const UnknownFieldSet& ss = Sub(Field(rs, 2, i));
          for (int k = 0; Field(ss, 2, k) != nullptr; ++k) ++spans;
        }
      }
    }
    EXPECT_EQ(spans, 4u);
  }
}

TEST(Tracer, FailuresAndAFullQueueAreCounted) {
  TracingOptions o;
  o.exporter = TracingOptions::Exporter::kOtlp;
  o.protocol = OtlpProtocol::kHttpJson;
  o.endpoint = "http://127.0.0.1:" + std::to_string(testing::ClosedPort()) + "/v1/traces";
  o.max_queue_spans = 3;
  o.max_batch_spans = 3;
  o.schedule_delay = std::chrono::milliseconds(10000);
  o.timeout = std::chrono::milliseconds(2000);
  auto t = Tracer::Start(o);
  ASSERT_TRUE(t.ok());
  std::vector<Span> five;
  for (int i = 0; i < 5; ++i) five.push_back(TwoSpans()[0]);
  (*t)->Export(five);  // room for 3: 2 dropped at once
  EXPECT_GE((*t)->stats().spans_dropped, 2u);
  (*t)->Flush(std::chrono::milliseconds(5000));
  const TracerStats s = (*t)->stats();
  EXPECT_EQ(s.spans_dropped, 5u);  // the 3 queued failed to send
  EXPECT_EQ(s.spans_exported, 0u);
  EXPECT_GE(s.export_failures, 1u);
  EXPECT_FALSE(s.last_error.empty());

  Receiver rx;
  rx.status = 503;
  o.endpoint = rx.Start();
  o.schedule_delay = std::chrono::milliseconds(20);
  auto t2 = Tracer::Start(o);
  ASSERT_TRUE(t2.ok());
  (*t2)->Export(TwoSpans());
  (*t2)->Flush(std::chrono::milliseconds(5000));
  EXPECT_EQ((*t2)->stats().export_failures, 1u);
  EXPECT_NE((*t2)->stats().last_error.find("HTTP 503"), std::string::npos) << (*t2)->stats().last_error;
}

TEST(Tracer, RejectsAnEndpointWithoutScheme) {
  TracingOptions o;
  o.exporter = TracingOptions::Exporter::kOtlp;
  o.protocol = OtlpProtocol::kHttpProtobuf;
  o.endpoint = "collector:4318";
  EXPECT_FALSE(Tracer::Start(o).ok());
}

constexpr std::string_view kConfig = R"(
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
  - name: gold-only
    type: label-selector-filter
    parameters:
      matchLabels: {pool: gold}
  - name: queue
    type: queue-scorer
  - name: kv
    type: kv-cache-utilization-scorer
  - name: best
    type: max-score-picker
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: gold-only
      - pluginRef: queue
        weight: 2
      - pluginRef: kv
      - pluginRef: best
)";

TEST(CycleSpans, ATracedPickRecordsEveryStepUnderItsParent) {
  ManualClock clock{1000000};
  SeededRng rng{7};
  auto cfg = ParseConfig(kConfig, "tracing.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  auto sched = BuildScheduler(*cfg, BuiltinRegistry(), PluginContext{&clock, &rng});
  ASSERT_TRUE(sched.ok()) << sched.status();
  std::vector<Endpoint> eps;
  for (int i = 0; i < 8; ++i)
    eps.push_back(testing::EndpointBuilder("10.0.0." + std::to_string(i) + ":8000")
                      .Queue(i)
                      .Running(0)
                      .Kv(0.1 * i)
                      .Label("pool", i < 6 ? "gold" : "silver"));
  auto req = ParseOpenAIRequest("/v1/chat/completions", R"({"model":"m","messages":[{"role":"user","content":"hi"}]})");
  ASSERT_TRUE(req.ok());
  req->headers = {{"x-request-id", "req-1"}};
  std::vector<CycleSpan> spans;
  PickOptions po;
  po.spans = &spans;
  PickResult r = (*sched)->Pick(*req, eps, po);
  ASSERT_EQ(r.status, 200);
  std::map<std::string, int> index;
  for (size_t i = 0; i < spans.size(); ++i) index[std::string(spans[i].name)] = static_cast<int>(i);
  for (const char* name : {"llm_d.epp.scheduling", "run_scheduler_profile", "filter_endpoints",
                           "llm_d.epp.filter.label-selector-filter", "llm_d.epp.scoring", "llm_d.epp.scorer.queue-scorer",
                           "llm_d.epp.scorer.kv-cache-utilization-scorer", "pick_endpoints"})
    ASSERT_TRUE(index.count(name)) << name;
  auto parent_of = [&](const char* name) {
    const int p = spans[static_cast<size_t>(index[name])].parent;
    return p < 0 ? std::string("<caller>") : spans[static_cast<size_t>(p)].name;
  };
  EXPECT_EQ(parent_of("llm_d.epp.scheduling"), "<caller>");
  EXPECT_EQ(parent_of("run_scheduler_profile"), "llm_d.epp.scheduling");
  EXPECT_EQ(parent_of("filter_endpoints"), "run_scheduler_profile");
  EXPECT_EQ(parent_of("llm_d.epp.filter.label-selector-filter"), "filter_endpoints");
  EXPECT_EQ(parent_of("llm_d.epp.scorer.queue-scorer"), "llm_d.epp.scoring");
  EXPECT_EQ(parent_of("pick_endpoints"), "run_scheduler_profile");
  for (const CycleSpan& s : spans) {
    EXPECT_LE(s.start_ns, s.end_ns) << s.name;
    if (s.parent >= 0) {
      EXPECT_GE(s.start_ns, spans[static_cast<size_t>(s.parent)].start_ns) << s.name;
      EXPECT_LE(s.end_ns, spans[static_cast<size_t>(s.parent)].end_ns) << s.name;
    }
  }
  auto attr = [&](const char* span, const std::string& key) -> const SpanValue* {
    for (const auto& [k, v] : spans[static_cast<size_t>(index[span])].attributes)
      if (k == key) return &v;
    return nullptr;
  };
  // The filter removed the two silver endpoints and says which.
  ASSERT_NE(attr("llm_d.epp.filter.label-selector-filter", "llm_d.epp.filter.removed_endpoints"), nullptr);
  EXPECT_EQ(std::get<std::vector<std::string>>(*attr("llm_d.epp.filter.label-selector-filter", "llm_d.epp.filter.removed_endpoints")),
            (std::vector<std::string>{"10.0.0.6:8000", "10.0.0.7:8000"}));
  EXPECT_EQ(std::get<int64_t>(*attr("filter_endpoints", "llm_d.epp.filter.filtered_endpoints")), 6);
  EXPECT_EQ(std::get<std::string>(*attr("pick_endpoints", "gen_ai.request.id")), "req-1");
  // The queue scorer: weight 2, six candidates, the emptiest queue first among its top five.
  EXPECT_DOUBLE_EQ(std::get<double>(*attr("llm_d.epp.scorer.queue-scorer", "llm_d.epp.scorer.weight")), 2.0);
  EXPECT_EQ(std::get<int64_t>(*attr("llm_d.epp.scorer.queue-scorer", "llm_d.epp.scorer.candidate_endpoints")), 6);
  const auto& top = std::get<std::vector<std::string>>(*attr("llm_d.epp.scorer.queue-scorer", "llm_d.epp.scorer.top_endpoints"));
  ASSERT_EQ(top.size(), 5u);
  EXPECT_EQ(top[0], "10.0.0.0:8000");
  EXPECT_DOUBLE_EQ(std::get<double>(*attr("llm_d.epp.scorer.queue-scorer", "llm_d.epp.scorer.score.max")), 1.0);
  // The picker's choice is the cycle's answer.
  EXPECT_EQ(std::get<std::vector<std::string>>(*attr("pick_endpoints", "llm_d.epp.picker.picked_endpoints")).front(),
            r.endpoints.front());
  EXPECT_EQ(std::get<int64_t>(*attr("llm_d.epp.scheduling", "llm_d.epp.scheduling.status")), 200);

  // Untraced: nothing recorded, same answer.
  PickResult plain = (*sched)->Pick(*req, eps, PickOptions{});
  EXPECT_EQ(plain.endpoints, r.endpoints);

  // A request no endpoint can serve: the cycle span carries the status and reason, as an error.
  std::vector<Endpoint> silver(eps.begin() + 6, eps.end());
  std::vector<CycleSpan> failed;
  po.spans = &failed;
  PickResult none = (*sched)->Pick(*req, silver, po);
  EXPECT_EQ(none.status, 503);
  ASSERT_FALSE(failed.empty());
  EXPECT_EQ(failed[0].name, "llm_d.epp.scheduling");
  EXPECT_TRUE(failed[0].error);
  EXPECT_NE(failed[0].status_message.find("gold-only"), std::string::npos) << failed[0].status_message;
}

TEST(CycleSpans, AppendCycleSpansLinksParentsAndShiftsTimes) {
  std::vector<CycleSpan> cycle = {{"a", -1, 100, 400, {}, false, {}}, {"b", 0, 150, 300, {}, false, {}}};
  TraceId trace{};
  trace[0] = 1;
  SpanId parent{};
  parent[7] = 5;
  std::vector<Span> out(1);  // an earlier span: indices are relative to this cycle
  Tracer::AppendCycleSpans(cycle, trace, parent, "k=v", 1000, out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[1].parent_span_id, parent);
  EXPECT_EQ(out[2].parent_span_id, out[1].span_id);
  EXPECT_EQ(out[1].start_unix_ns, 1100);
  EXPECT_EQ(out[2].end_unix_ns, 1300);
  EXPECT_EQ(out[2].trace_state, "k=v");
  EXPECT_EQ(out[2].trace_id, trace);
}

}  // namespace
}  // namespace epp
