// gRPC request bodies: Vertex AI's PredictionService (vertexai-parser) and vLLM's VllmEngine
// (vllmgrpc-parser).
//
// Envoy's ext_proc hands epp a gRPC request body as the bytes of the HTTP/2 stream: gRPC's
// length-prefixed frames, each a serialized protobuf message. epp reads the first frame (a unary
// or server-streaming call sends exactly one request message) with the small protobuf wire
// reader below rather than generated classes: only a handful of fields matter, and reading them
// by number keeps the parser independent of both services' .proto files (the field numbers are
// vllm_engine.proto's and google/cloud/aiplatform/v1beta1's). Compressed frames are refused, as
// llm-d refuses them. The body is sent on unchanged.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "epp/prefix_cache.h"
#include "request/request_apis.h"
#include "request/request_impl.h"

namespace epp::internal {

absl::StatusOr<std::string_view> GrpcFrame(std::string_view data, std::string_view* rest) {
  if (data.size() < 5)
    return absl::InvalidArgumentError(absl::StrCat("invalid gRPC frame: expected at least 5 bytes of header, got ", data.size()));
  if (data[0] != 0) return absl::InvalidArgumentError("compressed gRPC payload is not supported");
  const uint64_t len = (uint64_t{static_cast<unsigned char>(data[1])} << 24) |
                       (uint64_t{static_cast<unsigned char>(data[2])} << 16) |
                       (uint64_t{static_cast<unsigned char>(data[3])} << 8) | uint64_t{static_cast<unsigned char>(data[4])};
  if (data.size() - 5 < len)
    return absl::InvalidArgumentError(
        absl::StrCat("incomplete gRPC frame: the header announces ", len, " bytes, ", data.size() - 5, " are there"));
  if (rest != nullptr) *rest = data.substr(5 + len);
  return data.substr(5, len);
}

bool ProtoReader::Varint(uint64_t& out) {
  out = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos_ >= data_.size()) return false;
    const auto b = static_cast<unsigned char>(data_[pos_++]);
    out |= uint64_t{b & 0x7fu} << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

bool ProtoReader::Next(ProtoField& field) {
  if (!ok_ || pos_ >= data_.size()) return false;
  uint64_t key = 0;
  if (!Varint(key) || (key >> 3) == 0 || (key >> 3) > 0x1fffffff) return ok_ = false;
  field = ProtoField{};
  field.number = static_cast<uint32_t>(key >> 3);
  field.wire_type = static_cast<int>(key & 7);
  switch (field.wire_type) {
    case 0:
      if (!Varint(field.varint)) return ok_ = false;
      return true;
    case 1:
      if (data_.size() - pos_ < 8) return ok_ = false;
      pos_ += 8;
      return true;
    case 2: {
      uint64_t len = 0;
      if (!Varint(len) || data_.size() - pos_ < len) return ok_ = false;
      field.bytes = data_.substr(pos_, static_cast<size_t>(len));
      pos_ += static_cast<size_t>(len);
      return true;
    }
    case 5:
      if (data_.size() - pos_ < 4) return ok_ = false;
      pos_ += 4;
      return true;
    default:  // groups (3, 4) are not in proto3; anything else is not protobuf
      return ok_ = false;
  }
}

bool AppendPackedUint32(const ProtoField& field, std::vector<uint32_t>& out) {
  if (field.wire_type == 0) {
    if (field.varint > UINT32_MAX) return false;
    out.push_back(static_cast<uint32_t>(field.varint));
    return true;
  }
  if (field.wire_type != 2) return false;
  // A packed field's bytes are back-to-back varints.
  const std::string_view b = field.bytes;
  size_t pos = 0;
  while (pos < b.size()) {
    uint64_t v = 0;
    int shift = 0;
    for (;; shift += 7) {
      if (pos >= b.size() || shift >= 64) return false;
      const auto c = static_cast<unsigned char>(b[pos++]);
      v |= uint64_t{c & 0x7fu} << shift;
      if ((c & 0x80) == 0) break;
    }
    if (v > UINT32_MAX) return false;
    out.push_back(static_cast<uint32_t>(v));
  }
  return true;
}

namespace {

absl::Status Malformed(std::string_view message_type) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(message_type), ": malformed protobuf"));
}

// The bytes of length-delimited field `number` (the last occurrence, as protobuf merges), or
// nullopt. kInvalidArgument when the message is malformed or the field has another wire type.
absl::StatusOr<std::optional<std::string_view>> BytesField(std::string_view message, uint32_t number,
                                                           std::string_view message_type) {
  ProtoReader r(message);
  ProtoField f;
  std::optional<std::string_view> found;
  while (r.Next(f)) {
    if (f.number != number) continue;
    if (f.wire_type != 2) return Malformed(message_type);
    found = f.bytes;
  }
  if (!r.ok()) return Malformed(message_type);
  return found;
}

// Vertex AI: {endpoint = 1, google.api.HttpBody http_body = 2}; HttpBody {content_type = 1,
// bytes data = 2}. The data is an OpenAI body for req.api.
absl::Status ParseVertex(std::string_view message, InferenceRequest& req) {
  const std::string_view type = req.api == ApiKind::kChatCompletions ? "ChatCompletionsRequest" : "RawPredictRequest";
  EPP_ASSIGN_OR_RETURN(std::optional<std::string_view> http_body, BytesField(message, 2, type));
  if (!http_body.has_value()) return absl::InvalidArgumentError(absl::StrCat(std::string(type), " has no http_body"));
  EPP_ASSIGN_OR_RETURN(std::optional<std::string_view> data, BytesField(*http_body, 2, "google.api.HttpBody"));
  const std::string_view json = data.value_or("");
  const openai::JsonPath root;
  const openai::JsonPath body_path = root.Key("http_body");  // each segment must outlive the next
  const openai::JsonPath data_path = body_path.Key("data");
  openai::JsonDocument doc;
  EPP_RETURN_IF_ERROR(doc.Parse(json, 3, &data_path));
  return openai::ParseOpenAIBody(doc.root(), json.size(), data_path, req.api, req);
}

// TokenizedInput {original_text = 1, repeated uint32 input_ids = 2}.
absl::Status ReadTokenized(std::string_view message, InferenceRequest& req) {
  ProtoReader r(message);
  ProtoField f;
  while (r.Next(f))
    if (f.number == 2 && !AppendPackedUint32(f, req.token_ids)) return Malformed("TokenizedInput");
  if (!r.ok()) return Malformed("TokenizedInput");
  for (size_t i = 0; i < req.token_ids.size(); ++i) {
    if (i > 0) req.prompt += ' ';
    openai::AppendNumber(req.token_ids[i], req.prompt);
  }
  req.prompt_tokens = static_cast<int64_t>(req.token_ids.size());
  return absl::OkStatus();
}

// GenerateRequest {request_id = 1; oneof input {TokenizedInput tokenized = 2; string text = 3};
// SamplingParams sampling_params = 4; bool stream = 5; MultimodalInputs mm_inputs = 7}.
absl::Status ParseVllmGenerate(std::string_view message, InferenceRequest& req) {
  ProtoReader r(message);
  ProtoField f;
  // Which member of the `input` oneof came last (protobuf: the last one set wins).
  enum { kNone, kTokenized, kText } input = kNone;
  std::string_view input_bytes, mm;
  bool has_mm = false;
  while (r.Next(f)) {
    switch (f.number) {
      case 2:
      case 3:
        if (f.wire_type != 2) return Malformed("GenerateRequest");
        input = f.number == 2 ? kTokenized : kText;
        input_bytes = f.bytes;
        break;
      case 5:
        if (f.wire_type != 0) return Malformed("GenerateRequest");
        req.stream = f.varint != 0;
        break;
      case 7:
        if (f.wire_type != 2) return Malformed("GenerateRequest");
        mm = f.bytes;
        has_mm = true;
        break;
      default: break;
    }
  }
  if (!r.ok()) return Malformed("GenerateRequest");
  if (has_mm) {  // MultimodalInputs: repeated PlaceholderRange mm_placeholders = 5
    ProtoReader m(mm);
    ProtoField p;
    while (m.Next(p))
      if (p.number == 5) ++req.media_parts;
    if (!m.ok()) return Malformed("MultimodalInputs");
  }
  if (input == kTokenized) return ReadTokenized(input_bytes, req);
  if (input == kText) {
    req.prompt.assign(input_bytes);
    req.prompt_tokens = ApproxTokens(req.prompt.size());
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError("GenerateRequest: no input (neither tokenized nor text)");
}

// EmbedRequest {request_id = 1; TokenizedInput tokenized = 2}.
absl::Status ParseVllmEmbed(std::string_view message, InferenceRequest& req) {
  EPP_ASSIGN_OR_RETURN(std::optional<std::string_view> tokenized, BytesField(message, 2, "EmbedRequest"));
  if (!tokenized.has_value()) return absl::InvalidArgumentError("EmbedRequest: no tokenized input");
  return ReadTokenized(*tokenized, req);
}

}  // namespace

absl::Status ParseGrpcBody(std::string_view body, InferenceRequest& req) {
  absl::StatusOr<std::string_view> message = GrpcFrame(body);
  if (!message.ok()) return absl::InvalidArgumentError(absl::StrCat("invalid or unsupported gRPC payload: ", message.status().message()));
  switch (req.api) {
    case ApiKind::kChatCompletions:
    case ApiKind::kResponses: return ParseVertex(*message, req);
    case ApiKind::kGrpcGenerate: return ParseVllmGenerate(*message, req);
    case ApiKind::kGrpcEmbed: return ParseVllmEmbed(*message, req);
    default: return absl::OkStatus();
  }
}

}  // namespace epp::internal
