// Checks: the request path. In FULL_DUPLEX_STREAMED (which the Protocol requires) Envoy forwards
// only what the EPP sends back, so the body must come back whole, in streamed_response chunks
// Envoy accepts; a body-less request (GET) must be answered from its headers, as GIE's handlers
// do. Then what a request may carry: a body that is not JSON or names no model is refused with
// 400 as GIE's reference EPP refuses it, and the fields Envoy adds to the first message
// (protocol_config, attributes) must not disturb the pick.
//
// Two groups, because the suite's order (docs/conformance.md) runs the subset checks between them.
#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "conformance/conformance_impl.h"

namespace epp::internal::conformance {

namespace {

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

}  // namespace

// The request body streamed through the EPP, and requests without one.
std::vector<ConformanceCase> Suite::RequestBodyCases() {
  return {
      {{"request-body-echo",
        "FULL_DUPLEX_STREAMED: headers response first, then the body as streamed_response chunks of at most 64 KiB, "
        "end_of_stream on the last only, content equal to what was sent",
        "Protocol, requires FULL_DUPLEX_STREAMED; ext_proc: in that mode body responses carry "
        "body_mutation.streamed_response; reference EPP: chunks of at most 62,000 bytes"},
       [](Suite& s) { return s.RequestBodyEcho(); }},
      {{"header-only-request", "a request whose headers end the stream (GET, no body) gets a pick at once",
        "reference EPP handlers (request headers with end_of_stream): a body-less request is answered from the "
        "headers alone"},
       [](Suite& s) { return s.HeaderOnly(); }},
  };
}

// What the EPP refuses (400) and what Envoy adds that it must accept.
std::vector<ConformanceCase> Suite::RequestInputCases() {
  return {
      {{"bad-body-400", "a body that is not JSON is answered with ImmediateResponse 400",
        "reference EPP errors (BadRequest for a body parse error)"},
       [](Suite& s) { return s.BadBody(); }},
      {{"missing-model-400", "a body without a model is answered with ImmediateResponse 400",
        "reference EPP errors (BadRequest: model missing in the request body)"},
       [](Suite& s) { return s.MissingModel(); }},
      {{"envoy-request-fields", "protocol_config and attributes in the first message, as Envoy sends them, are accepted",
        "ext_proc: ProcessingRequest.protocol_config (field 11) and attributes (field 9) on the first message"},
       [](Suite& s) { return s.EnvoyFields(); }},
  };
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

}  // namespace epp::internal::conformance
