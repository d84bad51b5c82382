// Which parser reads a request (llm-d Router's ParserRegistry: each parser claims path
// suffixes, the longest match wins, a parser claiming none is the fallback), and the
// ParseRequest entry points that dispatch to it.
#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "epp/prefix_cache.h"
#include "epp/request.h"
#include "request/request_apis.h"
#include "request/request_impl.h"

namespace epp {

using internal::openai::JsonPath;

namespace {

// llm-d's Claims().Paths per parser, slashes trimmed as its registry normalizes them.
constexpr std::array<std::string_view, 8> kOpenAIClaims = {
    "chat/completions", "completions", "embeddings", "responses", "conversations",
    "chat/completions/render", "completions/render", "images/generations"};
constexpr std::array<std::string_view, 2> kAnthropicClaims = {"messages", "messages/count_tokens"};
constexpr std::array<std::string_view, 1> kVllmHttpClaims = {"inference/v1/generate"};
constexpr std::array<std::string_view, 1> kSglangHttpClaims = {"generate"};
constexpr std::array<std::string_view, 3> kVertexClaims = {
    "PredictionService/ChatCompletions", "PredictionService/StreamRawPredict", "PredictionService/RawPredict"};
constexpr std::array<std::string_view, 2> kVllmGrpcClaims = {"vllm.grpc.engine.VllmEngine/Generate",
                                                             "vllm.grpc.engine.VllmEngine/Embed"};

constexpr std::array<RequestParser, 7> kAllParsers = {
    RequestParser::kOpenAI,   RequestParser::kAnthropic, RequestParser::kVllmHttp,   RequestParser::kSglangHttp,
    RequestParser::kVertexAI, RequestParser::kVllmGrpc,  RequestParser::kPassthrough};

// The path as llm-d matches it: no query string, no surrounding spaces or trailing slashes.
std::string_view MatchablePath(std::string_view path) {
  path = path.substr(0, path.find('?'));
  while (!path.empty() && (path.back() == '/' || path.back() == ' ')) path.remove_suffix(1);
  while (!path.empty() && path.front() == ' ') path.remove_prefix(1);
  return path;
}

bool IsGrpc(RequestParser p) { return p == RequestParser::kVertexAI || p == RequestParser::kVllmGrpc; }

}  // namespace

std::string_view RequestParserType(RequestParser parser) {
  switch (parser) {
    case RequestParser::kOpenAI: return "openai-parser";
    case RequestParser::kAnthropic: return "anthropic-parser";
    case RequestParser::kVllmHttp: return "vllmhttp-parser";
    case RequestParser::kSglangHttp: return "sglanghttp-parser";
    case RequestParser::kVertexAI: return "vertexai-parser";
    case RequestParser::kVllmGrpc: return "vllmgrpc-parser";
    case RequestParser::kPassthrough: return "passthrough-parser";
  }
  return "passthrough-parser";
}

std::optional<RequestParser> RequestParserForType(std::string_view type) {
  for (RequestParser p : kAllParsers)
    if (RequestParserType(p) == type) return p;
  return std::nullopt;
}

std::span<const std::string_view> RequestParserClaims(RequestParser parser) {
  switch (parser) {
    case RequestParser::kOpenAI: return kOpenAIClaims;
    case RequestParser::kAnthropic: return kAnthropicClaims;
    case RequestParser::kVllmHttp: return kVllmHttpClaims;
    case RequestParser::kSglangHttp: return kSglangHttpClaims;
    case RequestParser::kVertexAI: return kVertexClaims;
    case RequestParser::kVllmGrpc: return kVllmGrpcClaims;
    case RequestParser::kPassthrough: return {};
  }
  return {};
}

const ParserSet& ParserSet::Default() {
  static const ParserSet* set = [] {
    constexpr std::array<RequestParser, 4> kDefault = {RequestParser::kOpenAI, RequestParser::kAnthropic,
                                                       RequestParser::kVllmHttp, RequestParser::kPassthrough};
    return new ParserSet(kDefault);
  }();
  return *set;
}

ParserSet::ParserSet(std::span<const RequestParser> parsers) {
  for (RequestParser p : parsers) {
    if (std::find(parsers_.begin(), parsers_.end(), p) != parsers_.end()) continue;
    parsers_.push_back(p);
    if (RequestParserClaims(p).empty()) break;  // the fallback ends the list
  }
}

std::optional<RequestParser> ParserSet::Resolve(std::string_view path) const {
  path = MatchablePath(path);
  std::optional<RequestParser> best;
  size_t best_len = 0;
  for (RequestParser p : parsers_) {
    for (std::string_view suffix : RequestParserClaims(p)) {
      // A plain suffix, as llm-d's MatchPathSuffix: "generate" also matches "/x_generate"; the
      // longer claim of another parser wins where both match ("inference/v1/generate").
      if (suffix.size() > best_len && path.ends_with(suffix)) {
        best = p;
        best_len = suffix.size();
      }
    }
  }
  if (best.has_value()) return best;
  if (has_fallback()) return RequestParser::kPassthrough;
  return std::nullopt;
}

namespace internal {

ApiKind ApiForParser(RequestParser parser, std::string_view path) {
  const std::string_view p = MatchablePath(path);
  switch (parser) {
    case RequestParser::kOpenAI: return ApiKindForPath(path);
    case RequestParser::kAnthropic:
      // count_tokens only answers a count: llm-d forwards it unread.
      return p.ends_with("messages/count_tokens") ? ApiKind::kOther : ApiKind::kMessages;
    case RequestParser::kVllmHttp: return ApiKind::kGenerate;
    case RequestParser::kSglangHttp: return ApiKind::kSglangGenerate;
    case RequestParser::kVertexAI:
      if (p.ends_with("PredictionService/ChatCompletions")) return ApiKind::kChatCompletions;
      // llm-d reads both raw predict methods' bodies as the Responses API.
      if (p.ends_with("PredictionService/StreamRawPredict") || p.ends_with("PredictionService/RawPredict"))
        return ApiKind::kResponses;
      return ApiKind::kOther;
    case RequestParser::kVllmGrpc:
      if (p.ends_with("vllm.grpc.engine.VllmEngine/Generate")) return ApiKind::kGrpcGenerate;
      if (p.ends_with("vllm.grpc.engine.VllmEngine/Embed")) return ApiKind::kGrpcEmbed;
      return ApiKind::kOther;
    case RequestParser::kPassthrough: return ApiKind::kOther;
  }
  return ApiKind::kOther;
}

absl::Status ChooseParser(const ParserSet& parsers, bool binary_body, InferenceRequest& req) {
  std::optional<RequestParser> parser = parsers.Resolve(req.path);
  if (!parser.has_value())
    return absl::InvalidArgumentError(absl::StrCat("no parser claims the path '", req.path, "'"));
  if (!binary_body && IsGrpc(*parser))
    return absl::InvalidArgumentError(absl::StrCat("the path '", req.path, "' belongs to ", std::string(RequestParserType(*parser)),
                                                   ", which reads binary gRPC frames; a JSON capture cannot carry one"));
  req.parser = *parser;
  req.api = ApiForParser(*parser, req.path);
  return absl::OkStatus();
}

absl::Status ParseJsonBody(const simdjson::dom::element& root, size_t size, const JsonPath& at,
                           InferenceRequest& req) {
  if (req.api == ApiKind::kOther) return absl::OkStatus();
  switch (req.parser) {
    case RequestParser::kOpenAI: return openai::ParseOpenAIBody(root, size, at, req.api, req);
    case RequestParser::kAnthropic: return ParseAnthropicBody(root, size, at, req);
    case RequestParser::kVllmHttp: return ParseVllmGenerateBody(root, at, req);
    case RequestParser::kSglangHttp: return ParseSglangGenerateBody(root, at, req);
    case RequestParser::kVertexAI:
    case RequestParser::kVllmGrpc:
    case RequestParser::kPassthrough: break;
  }
  return absl::OkStatus();
}

namespace {

// The non-OpenAI parsers, after ChooseParser.
absl::StatusOr<InferenceRequest> ParseChosen(InferenceRequest req, std::string_view body, bool padded) {
  if (req.api == ApiKind::kOther) return req;  // routed unread
  if (IsGrpc(req.parser)) {
    EPP_RETURN_IF_ERROR(ParseGrpcBody(body, req));
    return req;
  }
  openai::JsonDocument doc;
  EPP_RETURN_IF_ERROR(doc.Parse(body, 0, nullptr, padded));
  EPP_RETURN_IF_ERROR(ParseJsonBody(doc.root(), body.size(), JsonPath{}, req));
  return req;
}

}  // namespace
}  // namespace internal

absl::StatusOr<InferenceRequest> ParseRequestWith(RequestParser parser, std::string_view path, std::string_view body) {
  InferenceRequest req;
  req.path.assign(path.empty() ? kDefaultRequestPath : path);
  req.parser = parser;
  req.api = internal::ApiForParser(parser, req.path);
  if (parser == RequestParser::kOpenAI) {
    absl::StatusOr<InferenceRequest> r = ParseOpenAIRequest(req.path, body);
    if (r.ok()) r->parser = parser;
    return r;
  }
  return internal::ParseChosen(std::move(req), body, /*padded=*/false);
}

absl::StatusOr<InferenceRequest> ParseRequest(std::string_view path, std::string_view body, const ParserSet& parsers) {
  InferenceRequest req;
  req.path.assign(path.empty() ? kDefaultRequestPath : path);
  EPP_RETURN_IF_ERROR(internal::ChooseParser(parsers, /*binary_body=*/true, req));
  return ParseRequestWith(req.parser, req.path, body);
}

absl::StatusOr<InferenceRequest> ParseRequestInPlace(std::string_view path, std::string& body, const ParserSet& parsers) {
  InferenceRequest req;
  req.path.assign(path.empty() ? kDefaultRequestPath : path);
  EPP_RETURN_IF_ERROR(internal::ChooseParser(parsers, /*binary_body=*/true, req));
  if (req.parser == RequestParser::kOpenAI) return ParseOpenAIRequestInPlace(req.path, body);
  if (req.api == ApiKind::kOther || IsGrpc(req.parser)) return internal::ParseChosen(std::move(req), body, false);
  const size_t size = body.size();
  if (body.capacity() - size < kRequestBodyPadding) body.reserve(size + kRequestBodyPadding);
  body.append(kRequestBodyPadding, ' ');  // written, not only allocated: the parser reads them
  body.resize(size);
  return internal::ParseChosen(std::move(req), body, /*padded=*/true);
}

}  // namespace epp
