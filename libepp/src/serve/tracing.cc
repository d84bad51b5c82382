// OpenTelemetry traces over OTLP (see epp/runtime/tracing.h). The protobuf body is written with a
// small wire-format writer (field numbers from opentelemetry-proto's trace, common and resource
// v1 messages) rather than generated classes: a request is a handful of nested messages, and
// the same tree also gives the JSON form.
#include "epp/runtime/tracing.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "common/strings.h"
#include "epp/runtime/http.h"
#include "epp/version.h"

namespace epp {

namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // upper case is not allowed in traceparent
}

template <size_t N>
bool ParseHexId(std::string_view s, std::array<uint8_t, N>& out) {
  if (s.size() != 2 * N) return false;
  for (size_t i = 0; i < N; ++i) {
    const int hi = HexDigit(s[2 * i]), lo = HexDigit(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return true;
}

template <size_t N>
bool AllZero(const std::array<uint8_t, N>& id) {
  return std::all_of(id.begin(), id.end(), [](uint8_t b) { return b == 0; });
}

std::mt19937_64& Rng() {
  thread_local std::mt19937_64 rng{[] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
           static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }()};
  return rng;
}

template <size_t N>
std::array<uint8_t, N> RandomId() {
  std::array<uint8_t, N> id{};
  do {
    for (size_t i = 0; i < N; i += 8) {
      uint64_t v = Rng()();
      for (size_t j = 0; j < 8 && i + j < N; ++j) id[i + j] = static_cast<uint8_t>(v >> (8 * j));
    }
  } while (AllZero(id));
  return id;
}

// ---- Environment ------------------------------------------------------------------------------

// "k=v,k2=v2" with URL-encoded keys and values (the OTel spec's W3C Baggage-like format).
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseKeyValues(std::string_view var,
                                                                               std::string_view text) {
  auto decode = [&](std::string_view s) -> absl::StatusOr<std::string> {
    std::optional<std::string> d = internal::PercentDecode(s);
    if (!d) return absl::InvalidArgumentError(absl::StrCat(std::string(var), ": bad percent escape in '", std::string(s), "'"));
    return *std::move(d);
  };
  std::vector<std::pair<std::string, std::string>> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = internal::TrimSpace(text.substr(start, end - start));
    start = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0)
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(var), ": '", std::string(item), "' is not key=value (the form is key1=value1,key2=value2)"));
    absl::StatusOr<std::string> k = decode(internal::TrimSpace(item.substr(0, eq)));
    if (!k.ok()) return k.status();
    absl::StatusOr<std::string> v = decode(internal::TrimSpace(item.substr(eq + 1)));
    if (!v.ok()) return v.status();
    out.emplace_back(std::move(*k), std::move(*v));
  }
  return out;
}

}  // namespace

absl::StatusOr<TraceContext> ParseTraceparent(std::string_view value) {
  value = internal::TrimSpace(value);
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("traceparent '", internal::BodySnippet(value), "': ", std::string(why)));
  };
  // version "-" trace-id "-" parent-id "-" flags; later versions may append "-..." fields.
  if (value.size() < 55) return bad("too short (the form is 00-<32 hex>-<16 hex>-<2 hex>)");
  if (value[2] != '-' || value[35] != '-' || value[52] != '-') return bad("fields are not separated by '-'");
  std::array<uint8_t, 1> version{}, flags{};
  if (!ParseHexId(value.substr(0, 2), version)) return bad("the version is not two lower-case hex digits");
  if (version[0] == 0xff) return bad("version ff is invalid");
  if (version[0] == 0 && value.size() != 55) return bad("version 00 has exactly four fields");
  if (version[0] != 0 && value.size() > 55 && value[55] != '-') return bad("trailing characters after the flags");
  TraceContext c;
  if (!ParseHexId(value.substr(3, 32), c.trace_id)) return bad("the trace id is not 32 lower-case hex digits");
  if (AllZero(c.trace_id)) return bad("the trace id is all zeros");
  if (!ParseHexId(value.substr(36, 16), c.span_id)) return bad("the parent id is not 16 lower-case hex digits");
  if (AllZero(c.span_id)) return bad("the parent id is all zeros");
  if (!ParseHexId(value.substr(53, 2), flags)) return bad("the flags are not two lower-case hex digits");
  c.sampled = (flags[0] & 1) != 0;
  return c;
}

std::string HexId(std::span<const uint8_t> id) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(id.size() * 2);
  for (uint8_t b : id) {
    s.push_back(kHex[b >> 4]);
    s.push_back(kHex[b & 15]);
  }
  return s;
}

std::string FormatTraceparent(const TraceContext& c) {
  return absl::StrCat("00-", HexId(c.trace_id), "-", HexId(c.span_id), c.sampled ? "-01" : "-00");
}

std::string_view OtlpProtocolName(OtlpProtocol p) {
  switch (p) {
    case OtlpProtocol::kGrpc:
      return "grpc";
    case OtlpProtocol::kHttpProtobuf:
      return "http/protobuf";
    case OtlpProtocol::kHttpJson:
      return "http/json";
  }
  return "grpc";
}

namespace {

std::string_view SamplerName(TraceSampler s) {
  switch (s) {
    case TraceSampler::kAlwaysOn:
      return "always_on";
    case TraceSampler::kAlwaysOff:
      return "always_off";
    case TraceSampler::kTraceIdRatio:
      return "traceidratio";
    case TraceSampler::kParentBasedAlwaysOn:
      return "parentbased_always_on";
    case TraceSampler::kParentBasedAlwaysOff:
      return "parentbased_always_off";
    case TraceSampler::kParentBasedTraceIdRatio:
      return "parentbased_traceidratio";
  }
  return "";
}

}  // namespace

absl::StatusOr<TracingOptions> TracingOptions::FromEnvironment(
    const std::function<std::optional<std::string>(std::string_view)>& getenv, std::string_view default_service_name) {
  TracingOptions o;
  o.service_name = std::string(default_service_name);
  // The signal-specific variable wins over the general one (the OTel spec).
  auto get = [&](std::string_view traces_var, std::string_view general_var) -> std::optional<std::pair<std::string, std::string>> {
    if (!traces_var.empty())
      if (std::optional<std::string> v = getenv(traces_var); v && !internal::TrimSpace(*v).empty())
        return std::pair{std::string(traces_var), std::string(internal::TrimSpace(*v))};
    if (std::optional<std::string> v = getenv(general_var); v && !internal::TrimSpace(*v).empty())
      return std::pair{std::string(general_var), std::string(internal::TrimSpace(*v))};
    return std::nullopt;
  };
  const auto endpoint = get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT");
  if (auto e = get("", "OTEL_TRACES_EXPORTER")) {
    const std::string v = absl::AsciiStrToLower(e->second);
    if (v == "otlp") {
      o.exporter = Exporter::kOtlp;
    } else if (v == "console" || v == "logging") {
      o.exporter = Exporter::kConsole;
    } else if (v == "none") {
      o.exporter = Exporter::kNone;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("OTEL_TRACES_EXPORTER: '", e->second, "' is not otlp, console or none"));
    }
  } else if (endpoint) {
    o.exporter = Exporter::kOtlp;
  }
  if (auto p = get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")) {
    const std::string v = absl::AsciiStrToLower(p->second);
    if (v == "grpc") {
      o.protocol = OtlpProtocol::kGrpc;
    } else if (v == "http/protobuf") {
      o.protocol = OtlpProtocol::kHttpProtobuf;
    } else if (v == "http/json") {
      o.protocol = OtlpProtocol::kHttpJson;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(p->first, ": '", p->second, "' is not grpc, http/protobuf or http/json"));
    }
  }
  if (auto i = get("OTEL_EXPORTER_OTLP_TRACES_INSECURE", "OTEL_EXPORTER_OTLP_INSECURE"))
    o.insecure = absl::AsciiStrToLower(i->second) == "true";
  if (auto c = get("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE")) o.ca_file = c->second;
  const bool http = o.protocol != OtlpProtocol::kGrpc;
  if (endpoint) {
    std::string url = endpoint->second;
    const bool has_scheme = url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0;
    if (!has_scheme && http)
      return absl::InvalidArgumentError(absl::StrCat(endpoint->first, ": '", url,
                                                     "' has no http:// or https:// scheme (protocol ",
                                                     std::string(OtlpProtocolName(o.protocol)), ")"));
    if (http && endpoint->first == "OTEL_EXPORTER_OTLP_ENDPOINT") {
      // The general endpoint is a base URL: the traces path is appended.
      while (!url.empty() && url.back() == '/') url.pop_back();
      url += "/v1/traces";
    }
    o.endpoint = url;
  } else {
    o.endpoint = http ? "http://localhost:4318/v1/traces" : "http://localhost:4317";
  }
  if (auto h = get("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")) {
    absl::StatusOr<std::vector<std::pair<std::string, std::string>>> kv = ParseKeyValues(h->first, h->second);
    if (!kv.ok()) return kv.status();
    o.headers = std::move(*kv);
  }
  if (auto t = get("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")) {
    int64_t ms = 0;
    if (!absl::SimpleAtoi(t->second, &ms) || ms <= 0)
      return absl::InvalidArgumentError(absl::StrCat(t->first, ": '", t->second, "' is not a positive number of milliseconds"));
    o.timeout = std::chrono::milliseconds(ms);
  }
  std::vector<std::pair<std::string, std::string>> attrs;
  if (auto r = get("", "OTEL_RESOURCE_ATTRIBUTES")) {
    absl::StatusOr<std::vector<std::pair<std::string, std::string>>> kv = ParseKeyValues(r->first, r->second);
    if (!kv.ok()) return kv.status();
    attrs = std::move(*kv);
  }
  for (const auto& [k, v] : attrs)
    if (k == "service.name") o.service_name = v;
  if (auto s = get("", "OTEL_SERVICE_NAME")) o.service_name = s->second;
  o.resource_attributes.emplace_back("service.name", o.service_name);
  o.resource_attributes.emplace_back("service.version", std::string(EPP_VERSION_STRING));
  o.resource_attributes.emplace_back("telemetry.sdk.name", "epp");
  o.resource_attributes.emplace_back("telemetry.sdk.language", "cpp");
  for (auto& [k, v] : attrs) {
    if (k == "service.name") continue;
    // (A named reference, not the binding, in the lambda: clang before 16, which builds the
    // fuzz targets, cannot capture structured bindings.)
    const std::string& key = k;
    auto it = std::find_if(o.resource_attributes.begin(), o.resource_attributes.end(),
                           [&](const auto& kv) { return kv.first == key; });
    if (it != o.resource_attributes.end()) {
      it->second = v;  // the user's value wins over epp's
    } else {
      o.resource_attributes.emplace_back(k, v);
    }
  }
  if (auto s = get("", "OTEL_TRACES_SAMPLER")) {
    const std::string v = absl::AsciiStrToLower(s->second);
    bool found = false;
    for (TraceSampler t : {TraceSampler::kAlwaysOn, TraceSampler::kAlwaysOff, TraceSampler::kTraceIdRatio,
                           TraceSampler::kParentBasedAlwaysOn, TraceSampler::kParentBasedAlwaysOff,
                           TraceSampler::kParentBasedTraceIdRatio})
      if (v == SamplerName(t)) {
        o.sampler = t;
        found = true;
      }
    if (!found)
      return absl::InvalidArgumentError(absl::StrCat(
          "OTEL_TRACES_SAMPLER: '", s->second,
          "' is not always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or "
          "parentbased_traceidratio"));
  }
  if (auto a = get("", "OTEL_TRACES_SAMPLER_ARG")) {
    double r = 0;
    if (!absl::SimpleAtod(a->second, &r) || !(r >= 0 && r <= 1))
      return absl::InvalidArgumentError(absl::StrCat("OTEL_TRACES_SAMPLER_ARG: '", a->second, "' is not a ratio in [0, 1]"));
    o.sampler_ratio = r;
  }
  auto positive = [&](std::string_view var, auto& field, auto make) -> absl::Status {
    if (auto v = get("", var)) {
      int64_t n = 0;
      if (!absl::SimpleAtoi(v->second, &n) || n <= 0)
        return absl::InvalidArgumentError(absl::StrCat(std::string(var), ": '", v->second, "' is not a positive integer"));
      field = make(n);
    }
    return absl::OkStatus();
  };
  if (absl::Status s = positive("OTEL_BSP_MAX_QUEUE_SIZE", o.max_queue_spans, [](int64_t n) { return static_cast<size_t>(n); }); !s.ok()) return s;
  if (absl::Status s = positive("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", o.max_batch_spans, [](int64_t n) { return static_cast<size_t>(n); }); !s.ok()) return s;
  if (absl::Status s = positive("OTEL_BSP_SCHEDULE_DELAY", o.schedule_delay, [](int64_t n) { return std::chrono::milliseconds(n); }); !s.ok()) return s;
  o.max_batch_spans = std::min(o.max_batch_spans, o.max_queue_spans);
  return o;
}

absl::StatusOr<TracingOptions> TracingOptions::FromProcessEnvironment(std::string_view default_service_name) {
  return FromEnvironment(
      [](std::string_view name) -> std::optional<std::string> {
        const char* v = std::getenv(std::string(name).c_str());
        if (v == nullptr) return std::nullopt;
        return std::string(v);
      },
      default_service_name);
}

std::string TracingOptions::Describe() const {
  std::string sampler(SamplerName(this->sampler));
  if (this->sampler == TraceSampler::kTraceIdRatio || this->sampler == TraceSampler::kParentBasedTraceIdRatio)
    absl::StrAppend(&sampler, " ", internal::Num(sampler_ratio));
  switch (exporter) {
    case Exporter::kNone:
      return "off (no exporter: set OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_TRACES_EXPORTER)";
    case Exporter::kConsole:
      return absl::StrCat("console (OTLP/JSON lines on stdout), service ", service_name, ", sampler ", sampler);
    case Exporter::kOtlp:
      break;
  }
  return absl::StrCat("otlp ", std::string(OtlpProtocolName(protocol)), " to ", endpoint, ", service ", service_name, ", sampler ",
                      sampler);
}

// ---- Encoding -----------------------------------------------------------------------------------

namespace {

// Protobuf wire format: just what OTLP's messages need.
class Wire {
 public:
  void Varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  void Tag(int field, int wire_type) { Varint((static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type)); }
  void Bytes(int field, std::string_view b) {
    Tag(field, 2);
    Varint(b.size());
    out_.append(b);
  }
  void Bytes(int field, std::span<const uint8_t> b) {
    Bytes(field, std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
  }
  void VarintField(int field, uint64_t v) {
    Tag(field, 0);
    Varint(v);
  }
  void Fixed64(int field, uint64_t v) {
    Tag(field, 1);
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>(v >> (8 * i)));
  }
  void Fixed32(int field, uint32_t v) {
    Tag(field, 5);
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>(v >> (8 * i)));
  }
  void Double(int field, double d) {
    uint64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    Fixed64(field, bits);
  }
  // A nested message written by `fill` into this same buffer; its length is inserted in front of
  // it afterwards (a move of the message's bytes, no buffer per nesting level).
  template <class F>
  void Message(int field, F&& fill) {
    Tag(field, 2);
    const size_t start = out_.size();
    fill(*this);
    uint64_t len = out_.size() - start;
    char prefix[10];
    size_t n = 0;
    while (len >= 0x80) {
      prefix[n++] = static_cast<char>((len & 0x7f) | 0x80);
      len >>= 7;
    }
    prefix[n++] = static_cast<char>(len);
    out_.insert(start, prefix, n);
  }
  std::string& str() { return out_; }

 private:
  std::string out_;
};

// AnyValue: string_value 1, bool_value 2, int_value 3, double_value 4, array_value 5 (ArrayValue:
// values 1).
void EncodeAnyValue(Wire& w, const SpanValue& v) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          w.Bytes(1, std::string_view(x));
        } else if constexpr (std::is_same_v<T, bool>) {
          w.VarintField(2, x ? 1 : 0);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          w.VarintField(3, static_cast<uint64_t>(x));
        } else if constexpr (std::is_same_v<T, double>) {
          w.Double(4, x);
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          w.Message(5, [&](Wire& a) {
            for (const std::string& s : x) a.Message(1, [&](Wire& e) { e.Bytes(1, std::string_view(s)); });
          });
        } else {
          w.Message(5, [&](Wire& a) {
            for (double d : x) a.Message(1, [&](Wire& e) { e.Double(4, d); });
          });
        }
      },
      v);
}

// KeyValue: key 1, value 2.
void EncodeKeyValue(Wire& w, int field, std::string_view key, const SpanValue& value) {
  w.Message(field, [&](Wire& kv) {
    kv.Bytes(1, key);
    kv.Message(2, [&](Wire& av) { EncodeAnyValue(av, value); });
  });
}

// Spans grouped by scope, in first-seen order.
std::vector<std::pair<std::string, std::vector<const Span*>>> ByScope(std::span<const Span> spans) {
  std::vector<std::pair<std::string, std::vector<const Span*>>> groups;
  for (const Span& s : spans) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == s.scope; });
    if (it == groups.end()) {
      groups.push_back({s.scope, {}});
      it = std::prev(groups.end());
    }
    it->second.push_back(&s);
  }
  return groups;
}

nlohmann::json JsonAnyValue(const SpanValue& v) {
  return std::visit(
      [](const auto& x) -> nlohmann::json {
        using T = std::decay_t<decltype(x)>;
        auto dbl = [](double d) -> nlohmann::json {
          if (std::isfinite(d)) return d;
          return std::isnan(d) ? "NaN" : (d > 0 ? "Infinity" : "-Infinity");  // the proto3 JSON spellings
        };
        if constexpr (std::is_same_v<T, std::string>) {
          return {{"stringValue", x}};
        } else if constexpr (std::is_same_v<T, bool>) {
          return {{"boolValue", x}};
        } else if constexpr (std::is_same_v<T, int64_t>) {
          return {{"intValue", std::to_string(x)}};
        } else if constexpr (std::is_same_v<T, double>) {
          return {{"doubleValue", dbl(x)}};
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          nlohmann::json values = nlohmann::json::array();
          for (const std::string& s : x) values.push_back({{"stringValue", s}});
          return {{"arrayValue", {{"values", values}}}};
        } else {
          nlohmann::json values = nlohmann::json::array();
          for (double d : x) values.push_back({{"doubleValue", dbl(d)}});
          return {{"arrayValue", {{"values", values}}}};
        }
      },
      v);
}

}  // namespace

std::string EncodeOtlpProtobuf(const TracingOptions& options, std::span<const Span> spans) {
  Wire w;
  // ExportTraceServiceRequest.resource_spans 1 -> ResourceSpans {resource 1, scope_spans 2}.
  w.Message(1, [&](Wire& rs) {
    rs.Message(1, [&](Wire& res) {  // Resource.attributes 1
      for (const auto& [k, v] : options.resource_attributes) EncodeKeyValue(res, 1, k, SpanValue(v));
    });
    for (const auto& by_scope : ByScope(spans)) {
      const auto& scope = by_scope.first;  // not a structured binding: captured below (clang < 16)
      const auto& members = by_scope.second;
      rs.Message(2, [&](Wire& ss) {  // ScopeSpans {scope 1, spans 2}
        ss.Message(1, [&](Wire& sc) {  // InstrumentationScope {name 1, version 2}
          sc.Bytes(1, std::string_view(scope));
          sc.Bytes(2, std::string_view(EPP_VERSION_STRING));
        });
        for (const Span* s : members) {
          ss.Message(2, [&](Wire& sp) {
            sp.Bytes(1, s->trace_id);
            sp.Bytes(2, s->span_id);
            if (!s->trace_state.empty()) sp.Bytes(3, std::string_view(s->trace_state));
            if (!AllZero(s->parent_span_id)) sp.Bytes(4, s->parent_span_id);
            sp.Bytes(5, std::string_view(s->name));
            sp.VarintField(6, static_cast<uint64_t>(s->kind));
            sp.Fixed64(7, static_cast<uint64_t>(s->start_unix_ns));
            sp.Fixed64(8, static_cast<uint64_t>(s->end_unix_ns));
            for (const auto& [k, v] : s->attributes) EncodeKeyValue(sp, 9, k, v);
            if (s->error)
              sp.Message(15, [&](Wire& st) {  // Status {message 2, code 3}
                if (!s->status_message.empty()) st.Bytes(2, std::string_view(s->status_message));
                st.VarintField(3, 2);  // STATUS_CODE_ERROR
              });
            sp.Fixed32(16, 0x100 | 1);  // flags: sampled, and "has remote parent" known (bit 8)
          });
        }
      });
    }
  });
  return std::move(w.str());
}

std::string EncodeOtlpJson(const TracingOptions& options, std::span<const Span> spans) {
  nlohmann::json resource_attrs = nlohmann::json::array();
  for (const auto& [k, v] : options.resource_attributes)
    resource_attrs.push_back({{"key", k}, {"value", {{"stringValue", v}}}});
  nlohmann::json scope_spans = nlohmann::json::array();
  for (const auto& [scope, members] : ByScope(spans)) {
    nlohmann::json list = nlohmann::json::array();
    for (const Span* s : members) {
      nlohmann::json attrs = nlohmann::json::array();
      for (const auto& [k, v] : s->attributes) attrs.push_back({{"key", k}, {"value", JsonAnyValue(v)}});
      nlohmann::json j = {{"traceId", HexId(s->trace_id)},
                          {"spanId", HexId(s->span_id)},
                          {"name", s->name},
                          {"kind", static_cast<int>(s->kind)},
                          {"startTimeUnixNano", std::to_string(s->start_unix_ns)},
                          {"endTimeUnixNano", std::to_string(s->end_unix_ns)},
                          {"attributes", attrs},
                          {"flags", 0x101}};
      if (!AllZero(s->parent_span_id)) j["parentSpanId"] = HexId(s->parent_span_id);
      if (!s->trace_state.empty()) j["traceState"] = s->trace_state;
      if (s->error) {
        j["status"] = {{"code", 2}};
        if (!s->status_message.empty()) j["status"]["message"] = s->status_message;
      }
      list.push_back(std::move(j));
    }
    scope_spans.push_back({{"scope", {{"name", scope}, {"version", std::string(EPP_VERSION_STRING)}}}, {"spans", list}});
  }
  nlohmann::json req = {
      {"resourceSpans", nlohmann::json::array({{{"resource", {{"attributes", resource_attrs}}}, {"scopeSpans", scope_spans}}})}};
  // Attribute strings are the client's (model names, request ids): never fail on bad UTF-8.
  return internal::DumpJsonLossy(req);
}

// ---- Tracer -------------------------------------------------------------------------------------

struct Tracer::Impl {
  TracingOptions options;
  std::unique_ptr<HttpClient> http;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::GenericStub> stub;

  mutable std::mutex mu;
  std::condition_variable wake;
  std::condition_variable flushed;
  std::deque<Span> queue;
  bool stop = false;
  uint64_t enqueued = 0;  // spans accepted into the queue, ever
  uint64_t settled = 0;   // of those, spans exported or dropped after dequeue
  size_t flush_waiters = 0;
  TracerStats stats;
  std::thread thread;

  // One export call: OK, or why not.
  absl::Status Send(std::span<const Span> batch);
  void Loop();
};

absl::Status Tracer::Impl::Send(std::span<const Span> batch) {
  if (options.exporter == TracingOptions::Exporter::kConsole) {
    const std::string line = EncodeOtlpJson(options, batch);
    if (options.console) {
      options.console(line);
    } else {
      std::fwrite(line.data(), 1, line.size(), stdout);
      std::fputc('\n', stdout);
      std::fflush(stdout);
    }
    return absl::OkStatus();
  }
  if (options.protocol == OtlpProtocol::kGrpc) {
    const std::string body = EncodeOtlpProtobuf(options, batch);
    grpc::Slice slice(body);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + options.timeout);
    for (const auto& [k, v] : options.headers) ctx.AddMetadata(absl::AsciiStrToLower(k), v);
    std::promise<grpc::Status> done;
    stub->UnaryCall(&ctx, "/opentelemetry.proto.collector.trace.v1.TraceService/Export", grpc::StubOptions(), &request,
                    &response, [&done](grpc::Status s) { done.set_value(std::move(s)); });
    const grpc::Status s = done.get_future().get();
    if (!s.ok())
      return absl::UnavailableError(absl::StrCat("OTLP gRPC export to ", options.endpoint, ": status ",
                                                 static_cast<int>(s.error_code()), " ", s.error_message()));
    return absl::OkStatus();
  }
  HttpRequest req;
  req.url = options.endpoint;
  req.method = "POST";
  const bool json = options.protocol == OtlpProtocol::kHttpJson;
  req.body = json ? EncodeOtlpJson(options, batch) : EncodeOtlpProtobuf(options, batch);
  req.headers.push_back(json ? "Content-Type: application/json" : "Content-Type: application/x-protobuf");
  for (const auto& [k, v] : options.headers) req.headers.push_back(absl::StrCat(k, ": ", v));
  req.timeout = options.timeout;
  req.ca_file = options.ca_file;
  req.max_body_bytes = 1 << 20;
  req.accept_gzip = false;
  std::vector<absl::StatusOr<HttpResponse>> answers = http->FetchAll(std::span<const HttpRequest>(&req, 1));
  if (!answers[0].ok()) return answers[0].status();
  if (answers[0]->status < 200 || answers[0]->status > 299)
    return absl::UnavailableError(absl::StrCat("OTLP export to ", options.endpoint, ": HTTP ", answers[0]->status, " ",
                                               internal::BodySnippet(answers[0]->body)));
  return absl::OkStatus();
}

void Tracer::Impl::Loop() {
  std::unique_lock<std::mutex> lock(mu);
  while (true) {
    const auto deadline = std::chrono::steady_clock::now() + options.schedule_delay;
    wake.wait_until(lock, deadline, [&] {
      return stop || (!queue.empty() && (flush_waiters > 0 || queue.size() >= options.max_batch_spans));
    });
    if (stop) {
      // Shutdown after the final flush: what is left (a receiver that stopped answering) goes.
      stats.spans_dropped += queue.size();
      settled += queue.size();
      queue.clear();
      flushed.notify_all();
      return;
    }
    if (queue.empty()) continue;
    const size_t n = std::min(queue.size(), options.max_batch_spans);
    std::vector<Span> batch(std::make_move_iterator(queue.begin()), std::make_move_iterator(queue.begin() + n));
    queue.erase(queue.begin(), queue.begin() + n);
    lock.unlock();
    const absl::Status s = Send(batch);
    lock.lock();
    if (s.ok()) {
      stats.spans_exported += n;
    } else {
      stats.spans_dropped += n;
      stats.export_failures++;
      stats.last_error = std::string(s.message());
    }
    settled += n;
    flushed.notify_all();
  }
}

Tracer::Tracer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

absl::StatusOr<std::unique_ptr<Tracer>> Tracer::Start(TracingOptions options) {
  auto impl = std::make_unique<Impl>();
  if (options.max_batch_spans == 0) options.max_batch_spans = 1;
  if (options.max_queue_spans < options.max_batch_spans) options.max_queue_spans = options.max_batch_spans;
  if (options.exporter == TracingOptions::Exporter::kOtlp) {
    if (options.protocol == OtlpProtocol::kGrpc) {
      std::string target = options.endpoint;
      bool tls = !options.insecure;
      if (target.rfind("http://", 0) == 0) {
        target = target.substr(7);
        tls = false;
      } else if (target.rfind("https://", 0) == 0) {
        target = target.substr(8);
        tls = true;
      }
      while (!target.empty() && target.back() == '/') target.pop_back();
      if (target.empty()) return absl::InvalidArgumentError("OTLP gRPC endpoint: no host:port");
      std::shared_ptr<grpc::ChannelCredentials> creds;
      if (tls) {
        grpc::SslCredentialsOptions ssl;
        if (!options.ca_file.empty()) {
          std::ifstream in(options.ca_file);
          if (!in)
            return absl::InvalidArgumentError(absl::StrCat("OTEL_EXPORTER_OTLP_CERTIFICATE: cannot read ", options.ca_file,
                                                           ": ", std::strerror(errno)));
          std::stringstream ss;
          ss << in.rdbuf();
          ssl.pem_root_certs = ss.str();
        }
        creds = grpc::SslCredentials(ssl);
      } else {
        creds = grpc::InsecureChannelCredentials();
      }
      impl->channel = grpc::CreateChannel(target, creds);
      impl->stub = std::make_unique<grpc::GenericStub>(impl->channel);
    } else {
      if (options.endpoint.rfind("http://", 0) != 0 && options.endpoint.rfind("https://", 0) != 0)
        return absl::InvalidArgumentError(
            absl::StrCat("OTLP endpoint '", options.endpoint, "' has no http:// or https:// scheme"));
      impl->http = std::make_unique<HttpClient>();
    }
  }
  impl->options = std::move(options);
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->Loop(); });
  return std::unique_ptr<Tracer>(new Tracer(std::move(impl)));
}

Tracer::~Tracer() {
  if (!impl_) return;
  Flush(impl_->options.timeout);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->wake.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

TraceContext Tracer::StartRequest(const std::optional<TraceContext>& parent) {
  TraceContext c;
  c.trace_id = parent ? parent->trace_id : RandomId<16>();
  c.span_id = RandomId<8>();
  if (parent) c.trace_state = parent->trace_state;
  const TracingOptions& o = impl_->options;
  auto ratio = [&] {
    // The upper 63 bits of the trace id's last 8 bytes against ratio * 2^63, as OTel's
    // TraceIdRatioBased: the same trace gets the same decision in every service.
    uint64_t x = 0;
    for (int i = 8; i < 16; ++i) x = (x << 8) | c.trace_id[i];
    x >>= 1;
    const double bound = o.sampler_ratio * 9223372036854775808.0;
    return o.sampler_ratio >= 1 || static_cast<double>(x) < bound;
  };
  switch (o.sampler) {
    case TraceSampler::kAlwaysOn:
      c.sampled = true;
      break;
    case TraceSampler::kAlwaysOff:
      c.sampled = false;
      break;
    case TraceSampler::kTraceIdRatio:
      c.sampled = ratio();
      break;
    case TraceSampler::kParentBasedAlwaysOn:
      c.sampled = parent ? parent->sampled : true;
      break;
    case TraceSampler::kParentBasedAlwaysOff:
      c.sampled = parent ? parent->sampled : false;
      break;
    case TraceSampler::kParentBasedTraceIdRatio:
      c.sampled = parent ? parent->sampled : ratio();
      break;
  }
  if (o.exporter == TracingOptions::Exporter::kNone) c.sampled = false;
  if (c.sampled) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stats.traces_sampled++;
  }
  return c;
}

SpanId Tracer::NewSpanId() { return RandomId<8>(); }

void Tracer::Export(std::vector<Span> spans) {
  if (spans.empty()) return;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    const size_t room = impl_->options.max_queue_spans - std::min(impl_->options.max_queue_spans, impl_->queue.size());
    const size_t take = std::min(room, spans.size());
    impl_->stats.spans_dropped += spans.size() - take;
    for (size_t i = 0; i < take; ++i) impl_->queue.push_back(std::move(spans[i]));
    impl_->enqueued += take;
    wake = impl_->queue.size() >= impl_->options.max_batch_spans;
  }
  if (wake) impl_->wake.notify_one();
}

void Tracer::AppendCycleSpans(std::span<CycleSpan> cycle, const TraceId& trace, const SpanId& parent,
                              std::string_view trace_state, int64_t steady_to_unix_ns, std::vector<Span>& out) {
  const size_t base = out.size();
  out.reserve(base + cycle.size());
  for (CycleSpan& c : cycle) {
    Span s;
    s.trace_id = trace;
    s.span_id = RandomId<8>();
    s.parent_span_id = c.parent >= 0 && static_cast<size_t>(c.parent) < cycle.size() ? out[base + c.parent].span_id : parent;
    s.trace_state = std::string(trace_state);
    s.name = std::string(c.name);
    s.kind = SpanKind::kInternal;
    s.start_unix_ns = c.start_ns + steady_to_unix_ns;
    s.end_unix_ns = std::max(c.end_ns, c.start_ns) + steady_to_unix_ns;
    s.attributes = std::move(c.attributes);
    s.error = c.error;
    s.status_message = std::move(c.status_message);
    s.scope = "llm-d-router/pkg/epp/scheduling";
    out.push_back(std::move(s));
  }
}

int64_t Tracer::SteadyToUnixOffsetNs() {
  const int64_t unix_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  const int64_t steady_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  return unix_ns - steady_ns;
}

bool Tracer::Flush(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  const uint64_t target = impl_->enqueued;
  impl_->flush_waiters++;
  impl_->wake.notify_all();
  const bool ok = impl_->flushed.wait_for(lock, timeout, [&] { return impl_->settled >= target || impl_->stop; });
  impl_->flush_waiters--;
  return ok && impl_->settled >= target;
}

TracerStats Tracer::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

const TracingOptions& Tracer::options() const { return impl_->options; }

}  // namespace epp
