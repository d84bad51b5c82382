// The suite's ext_proc client: credentials, and SendRequest, which plays Envoy's side of the request
// path and records what the EPP answered. It reads the answers as Envoy acts on them in
// FULL_DUPLEX_STREAMED (ext_proc's external_processor.proto): headers first, body chunks only as
// body_mutation.streamed_response (Envoy rejects a whole-body mutation in that mode), nothing
// after the chunk with end_of_stream. A deviation is recorded in RequestAnswer::problem, which
// the checks report, rather than ending the read, so a check sees everything that came back.
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "conformance/conformance_impl.h"

namespace epp::internal::conformance {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = absl::ascii_tolower(static_cast<unsigned char>(c));
  return out;
}

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

}  // namespace

std::shared_ptr<grpc::ChannelCredentials> Credentials(bool tls) {
  if (!tls) return grpc::InsecureChannelCredentials();
  grpc::experimental::TlsChannelCredentialsOptions o;
  o.set_verify_server_certs(false);  // as Envoy Gateway dials the EPP: TLS without verification
  o.set_check_call_host(false);
  o.set_certificate_verifier(std::make_shared<grpc::experimental::NoOpCertificateVerifier>());
  return grpc::experimental::TlsCredentials(o);
}

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

}  // namespace epp::internal::conformance
