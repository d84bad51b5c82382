// The ext_proc stream (`eppctl serve`: what a gateway sends for each HTTP request) through
// ExtProcSession::OnMessage, with a scheduler and pool rebuilt for every input.
//
// Input: one flags byte, then
//   raw mode (flags bit 0): serialized ProcessingRequest messages, each preceded by its length as
//     two bytes little-endian; every accepted message and every answer also goes through the
//     protobuf JSON codec (captures, `explain --ext-proc`);
//   structured mode: two chunk-size bytes (request body, response body; the response byte's top
//     bit adds response trailers), then an HTTP exchange as text:
//       [METHOD ]PATH                      request line
//       name: value                        request headers, up to a blank line; the pseudo-headers
//                                          "@subset: a,b" and "@subset-string: a,b" give the
//                                          gateway's subset hint as a list or as one string
//       BODY                               up to a line "@@response", then optionally
//       STATUS                             the model server's answer: status line, headers
//       name: value                        ("@served: ADDR" is the endpoint the gateway reports),
//       BODY                               a blank line and the body (JSON or SSE)
//     turned into messages with BuildProcessingRequests / BuildResponseMessages, so every input
//     reaches the JSON body parser, the scheduler and the response-path usage reader.
// The other flag bits choose the scheduler config (bits 6-7), a small body limit (bit 1), a pool
// of saturated endpoints only (bit 2) or no endpoints (bit 3), ignore_subset_hint (bit 4) and
// traced picks (bit 5).
// Invariants: every answer is a ProcessingResponse; once the session is gone no load is left in
// flight, in the stats or in the scheduler.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "envoy/service/ext_proc/v3/external_processor.pb.h"
#include "epp/config.h"
#include "epp/runtime/extproc.h"
#include "fuzz_util.h"

namespace {

namespace pb = ::envoy::service::ext_proc::v3;

constexpr const char* kConfigs[] = {
    "",  // GIE's default profile
    R"(apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: decode-filter
- type: prefix-cache-scorer
- type: lora-affinity-scorer
- type: queue-scorer
- type: max-score-picker
schedulingProfiles:
- name: decode
  plugins:
  - pluginRef: decode-filter
  - pluginRef: prefix-cache-scorer
    weight: 3
  - pluginRef: lora-affinity-scorer
    weight: 1
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: max-score-picker
)",
    R"(apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: label-selector-filter
  parameters:
    matchExpressions:
    - {key: llm-d.ai/role, operator: NotIn, values: [prefill]}
- type: cache-aware-scorer
- type: token-load-scorer
- type: round-robin-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: label-selector-filter
  - pluginRef: cache-aware-scorer
  - pluginRef: token-load-scorer
  - pluginRef: round-robin-picker
)",
    R"(apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- name: low
  type: utilization-detector
  parameters: {queueDepthThreshold: 1, kvCacheUtilThreshold: 0.2, headroom: 0}
- type: kv-cache-utilization-scorer
- type: running-requests-size-scorer
- type: weighted-random-picker
  parameters: {maxNumOfEndpoints: 2}
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: low
  - pluginRef: kv-cache-utilization-scorer
  - pluginRef: running-requests-size-scorer
  - pluginRef: weighted-random-picker
saturationDetector:
  pluginRef: low
)",
};

const epp::EppConfig& Config(size_t i) {
  static const std::vector<epp::EppConfig>* const kParsed = [] {
    auto* out = new std::vector<epp::EppConfig>();
    for (const char* yaml : kConfigs) {
      if (*yaml == '\0') {
        out->push_back(epp::DefaultConfig());
        continue;
      }
      absl::StatusOr<epp::EppConfig> c = epp::ParseConfig(yaml, "fuzz-session.yaml");
      EPP_FUZZ_CHECK(c.ok(), c.status().ToString());
      out->push_back(*std::move(c));
    }
    return out;
  }();
  return (*kParsed)[i];
}

// `s` without its non-ASCII bytes: header names, subset entries and the served endpoint travel in
// protobuf `string` fields, which a gateway only fills with UTF-8 (header values travel as bytes
// in raw_value and are kept as they are).
std::string Ascii(std::string_view s) {
  std::string out;
  for (char c : s)
    if (static_cast<unsigned char>(c) < 0x80) out.push_back(c);
  return out;
}

// "name: value" lines up to a blank line; returns the rest.
std::string_view ReadHeaders(std::string_view text, std::vector<std::pair<std::string, std::string>>& out) {
  while (!text.empty()) {
    auto [line, rest] = epp::fuzz::FirstLine(text);
    text = rest;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) break;
    const size_t colon = line.find(':', 1);  // from 1: ":path" is a name
    if (colon == std::string_view::npos) {
      out.emplace_back(Ascii(line), "");
      continue;
    }
    const std::string_view value = line.substr(colon + 1);
    out.emplace_back(Ascii(line.substr(0, colon)), std::string(value.substr(std::min(value.find_first_not_of(' '), value.size()))));
  }
  return text;
}

size_t ChunkBytes(uint8_t selector) {
  static constexpr size_t kSizes[] = {0, 16, 256, 4096, 62000};
  return kSizes[selector % (sizeof kSizes / sizeof kSizes[0])];
}

std::vector<std::string> StructuredMessages(std::string_view text, uint8_t request_chunk, uint8_t response_chunk) {
  auto [request_text, response_text] = epp::fuzz::SplitOnce(text, "\n@@response\n");
  epp::HttpRequestCapture capture;
  auto [request_line, rest] = epp::fuzz::FirstLine(request_text);
  if (const size_t space = request_line.find(' '); space != std::string_view::npos) {
    capture.method = std::string(request_line.substr(0, space));
    request_line.remove_prefix(space + 1);
  }
  capture.path = std::string(request_line);
  std::vector<std::pair<std::string, std::string>> headers;
  capture.body = std::string(ReadHeaders(rest, headers));
  for (auto& [name, value] : headers) {
    if (name == "@subset" || name == "@subset-string") {
      std::vector<std::string> entries = absl::StrSplit(Ascii(value), ',');
      capture.subset = std::move(entries);
      capture.subset_as_string = name == "@subset-string";
    } else {
      capture.headers.emplace_back(std::move(name), std::move(value));
    }
  }
  capture.chunk_bytes = ChunkBytes(request_chunk);
  std::vector<std::string> messages = epp::BuildProcessingRequests(capture);
  if (!response_text) return messages;

  auto [status_line, response_rest] = epp::fuzz::FirstLine(*response_text);
  int status = 200;
  if (!absl::SimpleAtoi(absl::string_view(status_line.data(), status_line.size()), &status)) status = 200;
  std::vector<std::pair<std::string, std::string>> read, response_headers;
  std::string served;
  const std::string_view body = ReadHeaders(response_rest, read);
  for (auto& [name, value] : read) {
    if (name == "@served") {
      served = Ascii(value);
    } else if (!name.empty() && name[0] != '@') {
      response_headers.emplace_back(std::move(name), std::move(value));
    }
  }
  const bool trailers = (response_chunk & 0x80) != 0;
  // The headers message from the codec; the body in chunks, end of stream on the last one
  // (or on the trailers).
  std::vector<std::string> response = epp::BuildResponseMessages(status, response_headers, body.empty() ? "" : "x", served);
  messages.push_back(response.front());
  if (!body.empty()) {
    const size_t chunk = ChunkBytes(response_chunk & 0x7f);
    for (size_t off = 0; off < body.size();) {
      const size_t n = chunk == 0 ? body.size() : std::min(chunk, body.size() - off);
      pb::ProcessingRequest m;
      m.mutable_response_body()->set_body(std::string(body.substr(off, n)));
      off += n;
      m.mutable_response_body()->set_end_of_stream(off >= body.size() && !trailers);
      messages.push_back(m.SerializeAsString());
    }
  }
  if (trailers) {
    pb::ProcessingRequest t;
    t.mutable_response_trailers()->mutable_trailers();
    messages.push_back(t.SerializeAsString());
  }
  return messages;
}

std::vector<std::string> RawMessages(std::string_view text) {
  std::vector<std::string> messages;
  while (text.size() >= 2 && messages.size() < 64) {
    const size_t n = static_cast<uint8_t>(text[0]) | (size_t{static_cast<uint8_t>(text[1])} << 8);
    text.remove_prefix(2);
    messages.emplace_back(text.substr(0, n));
    text.remove_prefix(std::min(n, text.size()));
  }
  return messages;
}

std::vector<epp::Endpoint> PoolFor(uint8_t flags) {
  if (flags & 0x08) return {};
  std::vector<epp::Endpoint> pool = epp::fuzz::Pool();
  if (flags & 0x04) {
    for (epp::Endpoint& e : pool) {
      e.metrics.waiting_queue_size = 100;
      e.metrics.kv_cache_usage = 1;
      e.metrics_time_us = epp::fuzz::kNowUs;
    }
  }
  return pool;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t flags = data[0];
  const bool raw = (flags & 0x01) != 0;
  if (!raw && size < 3) return 0;
  const std::string_view text = epp::fuzz::Text(data + (raw ? 1 : 3), size - (raw ? 1 : 3));
  const std::vector<std::string> messages = raw ? RawMessages(text) : StructuredMessages(text, data[1], data[2]);

  epp::fuzz::SchedulerEnv env;
  const absl::Status built = env.Build(Config(flags >> 6));
  EPP_FUZZ_CHECK(built.ok(), built.ToString());
  const std::vector<epp::Endpoint> endpoints = PoolFor(flags);
  const epp::EndpointSnapshot pool(endpoints);
  epp::ExtProcOptions options;
  if (flags & 0x02) options.max_request_bytes = 4096;
  options.ignore_subset_hint = (flags & 0x10) != 0;
  options.trace = (flags & 0x20) != 0;
  options.objective_priorities = {{"critical", 2}, {"standard", 0}, {"sheddable", -1}};
  epp::ExtProcStats stats;
  {
    epp::ExtProcSession session(*env.scheduler, pool, options, &stats);
    std::vector<std::string> responses;
    for (const std::string& m : messages) {
      const size_t before = responses.size();
      const absl::Status s = session.OnMessage(m, responses);
      if (raw) {
        if (s.ok()) {
          absl::StatusOr<std::string> json = epp::ProcessingRequestToJson(m);
          EPP_FUZZ_CHECK(json.ok(), json.status().ToString());
          EPP_FUZZ_CHECK(epp::ProcessingRequestFromJson(*json).ok(), *json);
        }
        for (size_t i = before; i < responses.size(); ++i) {
          absl::StatusOr<std::string> json = epp::ProcessingResponseToJson(responses[i]);
          EPP_FUZZ_CHECK(json.ok(), json.status().ToString());
        }
      } else {
        // Messages built by the codec are always in protocol order.
        EPP_FUZZ_CHECK(s.ok(), s.ToString());
      }
      for (size_t i = before; i < responses.size(); ++i) {
        pb::ProcessingResponse r;
        EPP_FUZZ_CHECK(r.ParseFromString(responses[i]), "an answer that is not a ProcessingResponse");
      }
      if (!s.ok()) break;  // the server closes the stream with this error
    }
    if (const epp::PickResult* r = session.result(); r != nullptr && r->status == 200)
      EPP_FUZZ_CHECK(!r->endpoints.empty(), "a 200 pick without endpoints");
  }
  EPP_FUZZ_CHECK(stats.requests_in_flight.load() == 0, "requests left in flight");
  for (const epp::Endpoint& e : endpoints) {
    const auto [requests, tokens] = env.scheduler->Inflight(e.address);
    EPP_FUZZ_CHECK(requests == 0 && tokens == 0, e.address + " keeps in-flight load");
  }
  return 0;
}
