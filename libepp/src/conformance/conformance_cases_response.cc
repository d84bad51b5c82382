// Checks: the response path. After the pick Envoy sends the model server's response through the
// EPP too (the Protocol's response path; ext_proc FULL_DUPLEX_STREAMED response_body_mode): the
// headers must be answered, the body echoed as streamed_response chunks, and a gateway's
// half-close must end the stream cleanly. For SSE each event must come back before the next one
// is sent: an EPP that buffers the response holds back the model's first token.
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "conformance/conformance_impl.h"

namespace epp::internal::conformance {

namespace {

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

}  // namespace

std::vector<ConformanceCase> Suite::ResponseCases() {
  return {
      {{"response-path-echo",
        "response headers and a buffered response body are answered and echoed as streamed_response chunks; a "
        "half-close ends the stream with OK",
        "Protocol (response path, served endpoint) and ext_proc FULL_DUPLEX_STREAMED response_body_mode; stream "
        "semantics from external_processor.proto"},
       [](Suite& s) { return s.ResponseEcho(); }},
      {{"response-path-streaming", "an SSE response chunk is echoed before the next one arrives",
        "ext_proc FULL_DUPLEX_STREAMED: the processor answers chunks as they stream (a buffered echo holds back the "
        "model's first token)"},
       [](Suite& s) { return s.ResponseStreaming(); }},
  };
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

}  // namespace epp::internal::conformance
