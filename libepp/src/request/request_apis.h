// Private: the request APIs beyond OpenAI's (epp/request.h ParseRequest is the contract) and
// the choice of parser by path, shared by request.cc (capture envelopes) and the parsers' files:
//   parsers.cc              parser types, claims, ParserSet, ParseRequest* entry points
//   anthropic_messages.cc   Anthropic Messages body -> canonical prompt
//   anthropic_to_chat.cc    Anthropic Messages body -> the OpenAI chat body vLLM renders
//   generate.cc             vLLM /inference/v1/generate and SGLang /generate bodies
//   grpc_requests.cc        Vertex AI and vLLM gRPC request frames
//   response_usage.cc       token usage in each API's responses
#pragma once

#include <simdjson.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "epp/request.h"
#include "epp/status.h"
#include "request/request_impl.h"

namespace epp::internal {

// The API a parser reads at `path` (kOther: the parser routes that path unread).
ApiKind ApiForParser(RequestParser parser, std::string_view path);

// Sets req.parser and req.api for req.path through `parsers`. kInvalidArgument when no parser
// claims the path, or when the body is JSON text (`binary_body` false: a capture envelope) and
// the parser reads gRPC frames.
absl::Status ChooseParser(const ParserSet& parsers, bool binary_body, InferenceRequest& req);

// A JSON body for req.parser and req.api (openai, anthropic, vllmhttp, sglanghttp); nothing for
// kOther. `size` is the body's length (the prompt's reserve).
absl::Status ParseJsonBody(const simdjson::dom::element& root, size_t size, const openai::JsonPath& at,
                           InferenceRequest& req);

// One per API, the fields of epp/request.h's ParseRequest comment.
absl::Status ParseAnthropicBody(const simdjson::dom::element& root, size_t size, const openai::JsonPath& at,
                                InferenceRequest& req);
absl::Status ParseVllmGenerateBody(const simdjson::dom::element& root, const openai::JsonPath& at,
                                   InferenceRequest& req);
absl::Status ParseSglangGenerateBody(const simdjson::dom::element& root, const openai::JsonPath& at,
                                     InferenceRequest& req);
// A gRPC request frame for req.parser (vertexai, vllmgrpc) and req.api.
absl::Status ParseGrpcBody(std::string_view body, InferenceRequest& req);

// Token ids rendered as docs/scheduling.md renders a completions token-id prompt ("1 22 333"),
// appended to `out`; each id is checked to be an integer in [0, 2^32) and kept in `ids`.
absl::Status AppendTokenIds(const simdjson::dom::array& list, const openai::JsonPath& at, std::string& out,
                            std::vector<uint32_t>* ids, int64_t& count);

// ---------------------------------------------------------------------------------------------
// gRPC framing and the protobuf wire format, as far as the parsers read them (grpc_requests.cc).

// The message of the first gRPC frame of `data` (a 1-byte compressed flag and a 4-byte
// big-endian length, then the message); `rest` gets what follows it. kInvalidArgument for a
// short or compressed frame.
absl::StatusOr<std::string_view> GrpcFrame(std::string_view data, std::string_view* rest = nullptr);

// One field of a protobuf message: its number and wire type, and the value as a varint or the
// bytes of a length-delimited field (fixed32/64 values are skipped whole).
struct ProtoField {
  uint32_t number = 0;
  int wire_type = 0;  // 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32
  uint64_t varint = 0;
  std::string_view bytes;
};

// Reads a protobuf message field by field. Next() is false at the end or on malformed input
// (then ok() is false).
class ProtoReader {
 public:
  explicit ProtoReader(std::string_view message) : data_(message) {}
  bool Next(ProtoField& field);
  bool ok() const { return ok_; }

 private:
  bool Varint(uint64_t& out);
  std::string_view data_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// The values of a repeated uint32 field, packed (length-delimited) or not; false when malformed
// or a value exceeds 32 bits.
bool AppendPackedUint32(const ProtoField& field, std::vector<uint32_t>& out);

}  // namespace epp::internal
