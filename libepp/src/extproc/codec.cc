// Building ProcessingRequest streams from captured HTTP requests, and protobuf JSON conversions.
#include <google/protobuf/util/json_util.h>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json.h"
#include "epp/request.h"
#include "extproc/session_impl.h"

namespace epp {
namespace {

namespace pb = extproc_pb;

void AddHeader(::envoy::config::core::v3::HeaderMap* m, std::string_view k, std::string_view v) {
  auto* h = m->add_headers();
  h->set_key(std::string(k));
  h->set_raw_value(std::string(v));
}

template <typename Message>
absl::StatusOr<std::string> ToJson(std::string_view bytes, const char* what) {
  Message m;
  if (!m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return absl::InvalidArgumentError(absl::StrCat("not a serialized ", what));
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  auto st = google::protobuf::util::MessageToJsonString(m, &out, o);
  if (!st.ok()) return absl::InternalError(absl::StrCat("cannot render ", what, " as JSON: ", st.ToString()));
  return out;
}

}  // namespace

absl::StatusOr<HttpRequestCapture> CaptureToHttpRequest(std::string_view json, std::string_view path_override) {
  absl::StatusOr<nlohmann::ordered_json> parsed = internal::ParseJson<nlohmann::ordered_json>(json);
  if (!parsed.ok()) return absl::InvalidArgumentError("capture: invalid JSON: " + std::string(parsed.status().message()));
  const nlohmann::ordered_json& doc = *parsed;
  if (!doc.is_object()) return absl::InvalidArgumentError("capture: expected a JSON object (a capture envelope or a request body)");
  HttpRequestCapture c;
  c.method = "POST";
  std::string path;
  if (const std::string* p = internal::JsonStringMember(doc, "path")) path = *p;
  auto body = doc.find("body");
  if (body == doc.end()) {
    c.body = std::string(json);  // a bare body, sent as it is
  } else {
    if (auto headers = doc.find("headers"); headers != doc.end() && !headers->is_null()) {
      if (!headers->is_object()) return absl::InvalidArgumentError("capture: headers: expected an object");
      std::string header_path;
      for (auto it = headers->begin(); it != headers->end(); ++it) {
        std::vector<const std::string*> values;
        if (it->is_string()) {
          values.push_back(it->get_ptr<const std::string*>());
        } else if (it->is_array()) {
          for (const auto& v : *it) {
            if (!v.is_string())
              return absl::InvalidArgumentError("capture: headers." + it.key() + ": expected strings");
            values.push_back(v.get_ptr<const std::string*>());
          }
        } else {
          return absl::InvalidArgumentError("capture: headers." + it.key() + ": expected a string or a list of strings");
        }
        const std::string lower = absl::AsciiStrToLower(it.key());
        for (const std::string* v : values) {
          if (lower == ":method") {
            c.method = *v;
          } else if (lower == ":path") {
            if (header_path.empty()) header_path = *v;
          } else {
            c.headers.emplace_back(it.key(), *v);
          }
        }
      }
      if (path.empty()) path = header_path;
    }
    if (path.empty()) {
      for (std::string_view name : {"x-original-path", "x-forwarded-path"})
        for (const auto& [k, v] : c.headers)
          if (path.empty() && absl::AsciiStrToLower(k) == name && !v.empty()) path = v;
    }
    if (body->is_string()) {
      c.body = body->get<std::string>();
    } else {
      EPP_ASSIGN_OR_RETURN(c.body, internal::DumpJson(*body));
    }
  }
  if (!path_override.empty()) path = std::string(path_override);
  // Neither the capture nor its headers name a path: the body's members imply the API, as
  // ParseCaptureEnvelope reads the same capture (a bare Responses body goes to /v1/responses).
  c.path = path.empty() ? std::string(InferRequestPath(c.body)) : path;
  return c;
}

std::vector<std::string> BuildProcessingRequests(const HttpRequestCapture& c) {
  std::vector<std::string> out;
  auto subset_meta = [&](pb::ProcessingRequest& r) {
    if (!c.subset) return;
    auto& ns = (*r.mutable_metadata_context()->mutable_filter_metadata())[std::string(kSubsetHintNamespace)];
    auto& v = (*ns.mutable_fields())[std::string(kDestinationEndpointSubsetKey)];
    if (c.subset_as_string) {
      v.set_string_value(absl::StrJoin(*c.subset, ","));
    } else {
      auto* list = v.mutable_list_value();
      for (const std::string& e : *c.subset) list->add_values()->set_string_value(e);
    }
  };
  pb::ProcessingRequest h;
  auto* hm = h.mutable_request_headers()->mutable_headers();
  AddHeader(hm, ":method", c.method);
  AddHeader(hm, ":path", c.path);
  for (const auto& [k, v] : c.headers) AddHeader(hm, k, v);
  h.mutable_request_headers()->set_end_of_stream(c.body.empty());
  subset_meta(h);
  out.push_back(h.SerializeAsString());
  if (c.body.empty()) return out;
  const size_t chunk = c.chunk_bytes ? c.chunk_bytes : c.body.size();
  for (size_t off = 0; off < c.body.size(); off += chunk) {
    pb::ProcessingRequest b;
    b.mutable_request_body()->set_body(c.body.substr(off, chunk));
    b.mutable_request_body()->set_end_of_stream(off + chunk >= c.body.size());
    subset_meta(b);
    out.push_back(b.SerializeAsString());
  }
  return out;
}

std::vector<std::string> BuildResponseMessages(int status, const std::vector<std::pair<std::string, std::string>>& headers,
                                               std::string_view body, std::string_view served_endpoint) {
  std::vector<std::string> out;
  pb::ProcessingRequest h;
  auto* hm = h.mutable_response_headers()->mutable_headers();
  AddHeader(hm, ":status", std::to_string(status));
  for (const auto& [k, v] : headers) AddHeader(hm, k, v);
  h.mutable_response_headers()->set_end_of_stream(body.empty());
  if (!served_endpoint.empty()) {
    auto& ns = (*h.mutable_metadata_context()->mutable_filter_metadata())[std::string(kDestinationEndpointNamespace)];
    (*ns.mutable_fields())[std::string(kDestinationEndpointServedKey)].set_string_value(std::string(served_endpoint));
  }
  out.push_back(h.SerializeAsString());
  if (!body.empty()) {
    pb::ProcessingRequest b;
    b.mutable_response_body()->set_body(std::string(body));
    b.mutable_response_body()->set_end_of_stream(true);
    out.push_back(b.SerializeAsString());
  }
  return out;
}

absl::StatusOr<std::string> ProcessingRequestToJson(std::string_view bytes) {
  return ToJson<pb::ProcessingRequest>(bytes, "envoy.service.ext_proc.v3.ProcessingRequest");
}

absl::StatusOr<std::string> ProcessingResponseToJson(std::string_view bytes) {
  return ToJson<pb::ProcessingResponse>(bytes, "envoy.service.ext_proc.v3.ProcessingResponse");
}

absl::StatusOr<std::string> ProcessingRequestFromJson(std::string_view json) {
  pb::ProcessingRequest m;
  google::protobuf::util::JsonParseOptions o;
  o.ignore_unknown_fields = true;
  auto st = google::protobuf::util::JsonStringToMessage(std::string(json), &m, o);
  if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat("not a ProcessingRequest in protobuf JSON: ", st.ToString()));
  return m.SerializeAsString();
}

}  // namespace epp
