// OpenAI request bodies -> InferenceRequest, with simdjson's DOM parser: the entry points.
//
// simdjson validates the whole document (UTF-8 included) in one SIMD pass and gives unescaped
// strings, so the canonical prompt is built by appending views of the parsed strings: no
// intermediate tree of std::strings. Each thread keeps two parsers (one for an envelope, one for a
// body nested in it as a JSON string) so steady-state parsing allocates only the output strings.
//
// This file holds what a caller meets first: which API a path names, the parsed documents, the
// top-level body fields every API shares (model, stream, cache_salt) and the dispatch to the
// renderer of each API's input, and capture envelopes. The renderers, the field readers and the
// error locator are in the files request_impl.h lists. fast_parse.cc is the fast path
// tried first; this DOM path is its reference and reports every error.
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "epp/prefix_cache.h"
#include "epp/request.h"
#include "request/fast_parse.h"
#include "request/request_apis.h"
#include "request/request_impl.h"

namespace epp {

std::string_view ApiKindName(ApiKind api) {
  switch (api) {
    case ApiKind::kCompletions: return "completions";
    case ApiKind::kChatCompletions: return "chat_completions";
    case ApiKind::kResponses: return "responses";
    case ApiKind::kEmbeddings: return "embeddings";
    case ApiKind::kOther: return "other";
    case ApiKind::kMessages: return "messages";
    case ApiKind::kGenerate: return "generate";
    case ApiKind::kSglangGenerate: return "sglang_generate";
    case ApiKind::kGrpcGenerate: return "grpc_generate";
    case ApiKind::kGrpcEmbed: return "grpc_embed";
  }
  return "other";
}

// The API a request path names, by its last segments as OpenAI-compatible servers route them
// (a prefix such as /v1 or /openai/v1 and a query string do not matter); any other path is read
// as completions. vLLM's render sub-paths carry their parent's body (llm-d's openai-parser).
ApiKind ApiKindForPath(std::string_view path) {
  path = path.substr(0, path.find('?'));
  if (path.ends_with("/chat/completions") || path.ends_with("/chat/completions/render")) return ApiKind::kChatCompletions;
  if (path.ends_with("/completions")) return ApiKind::kCompletions;
  if (path.ends_with("/responses")) return ApiKind::kResponses;
  if (path.ends_with("/embeddings")) return ApiKind::kEmbeddings;
  return ApiKind::kCompletions;
}

namespace {

char AsciiLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (AsciiLower(a[i]) != AsciiLower(b[i])) return false;
  }
  return true;
}

}  // namespace

std::optional<std::string_view> InferenceRequest::header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (EqualsIgnoreCase(n, name)) return std::string_view(v);
  }
  return std::nullopt;
}

std::string FairnessIdFromHeaders(const InferenceRequest& r) {
  for (std::string_view name : {kLlmdFairnessIdHeader, kFairnessIdHeader})
    for (const auto& [n, v] : r.headers)
      if (!v.empty() && EqualsIgnoreCase(n, name)) return v;
  return {};
}

// The parser's internals (request_impl.h), shared with its other files.
using namespace internal::openai;

namespace {

// ---------------------------------------------------------------------------------------------
// The top-level body: the fields every API shares, then the input of the API the path names.
// `model` is required and non-empty (GIE refuses a body without one with 400, and routing needs
// it); `stream` and `cache_salt` are optional. Which member holds the input follows the OpenAI
// API: chat `messages` (after `tools`), Responses `instructions`, `tools` and `input`, embeddings
// `input` (or, as vLLM allows, chat `messages`), completions `prompt`.

// The top-level members the parser reads (last occurrence wins).
struct BodyFields {
  std::optional<element> model, stream, cache_salt, prompt, messages, input, instructions, tools;
};

absl::Status ParseBody(const element& root, size_t body_size, const JsonPath& at, ApiKind api,
                       InferenceRequest& req) {
  std::optional<simdjson::dom::object> obj = AsObject(root);
  if (!obj.has_value()) return TypeError(at, "a JSON object", root);
  BodyFields f;
  for (simdjson::dom::key_value_pair kv : *obj) {
    const std::string_view k = kv.key;
    if (k == "model") f.model = kv.value;
    else if (k == "stream") f.stream = kv.value;
    else if (k == "cache_salt") f.cache_salt = kv.value;
    else if (k == "prompt") f.prompt = kv.value;
    else if (k == "messages") f.messages = kv.value;
    else if (k == "input") f.input = kv.value;
    else if (k == "instructions") f.instructions = kv.value;
    else if (k == "tools") f.tools = kv.value;
  }

  const JsonPath model_path = at.Key("model");
  if (!f.model.has_value()) return Missing(model_path);
  std::optional<std::string_view> model = AsString(*f.model);
  if (!model.has_value()) return TypeError(model_path, "a string", *f.model);
  if (model->empty()) return Empty(model_path);
  req.model.assign(*model);

  if (f.stream.has_value() && !IsNull(*f.stream)) {
    bool stream = false;
    if (f.stream->get_bool().get(stream) != simdjson::SUCCESS) {
      return TypeError(at.Key("stream"), "a boolean", *f.stream);
    }
    req.stream = stream;
  }
  if (f.cache_salt.has_value() && !IsNull(*f.cache_salt)) {
    std::optional<std::string_view> salt = AsString(*f.cache_salt);
    if (!salt.has_value()) return TypeError(at.Key("cache_salt"), "a string", *f.cache_salt);
    req.cache_salt.assign(*salt);
  }

  std::string& out = req.prompt;
  // The rendering is almost never longer than the JSON it comes from; one allocation up front
  // avoids re-copying a 200 KB prompt on every doubling.
  out.reserve(body_size);
  std::optional<int64_t> token_count;
  switch (api) {
    case ApiKind::kChatCompletions: {
      const JsonPath messages_path = at.Key("messages");
      if (!f.messages.has_value()) return Missing(messages_path);
      EPP_RETURN_IF_ERROR(AppendTools(f.tools, at.Key("tools"), out));
      EPP_RETURN_IF_ERROR(AppendMessages(*f.messages, messages_path, out, MediaSink(req)));
      break;
    }
    case ApiKind::kResponses: {
      const JsonPath input_path = at.Key("input");
      if (!f.input.has_value()) return Missing(input_path);
      EPP_RETURN_IF_ERROR(AppendInstructions(f.instructions, at.Key("instructions"), out));
      EPP_RETURN_IF_ERROR(AppendTools(f.tools, at.Key("tools"), out));
      EPP_RETURN_IF_ERROR(AppendResponsesInput(*f.input, input_path, out, MediaSink(req)));
      break;
    }
    case ApiKind::kEmbeddings: {
      // vLLM also embeds chat conversations given as `messages` instead of `input`.
      if (!f.input.has_value() && f.messages.has_value()) {
        EPP_RETURN_IF_ERROR(AppendMessages(*f.messages, at.Key("messages"), out, MediaSink(req)));
        break;
      }
      const JsonPath input_path = at.Key("input");
      if (!f.input.has_value()) return Missing(input_path);
      EPP_RETURN_IF_ERROR(AppendPromptInput(*f.input, input_path, out, token_count));
      break;
    }
    case ApiKind::kCompletions:
    case ApiKind::kOther:
    // Not OpenAI APIs (request_apis.h reads them); never given here.
    case ApiKind::kMessages:
    case ApiKind::kGenerate:
    case ApiKind::kSglangGenerate:
    case ApiKind::kGrpcGenerate:
    case ApiKind::kGrpcEmbed: {
      const JsonPath prompt_path = at.Key("prompt");
      if (!f.prompt.has_value()) return Missing(prompt_path);
      EPP_RETURN_IF_ERROR(AppendPromptInput(*f.prompt, prompt_path, out, token_count));
      break;
    }
  }
  // Media payloads shrink to references; don't keep megabytes reserved for the request's lifetime.
  if (out.capacity() > 2 * out.size() + 4096) out.shrink_to_fit();
  req.prompt_tokens = token_count.has_value() ? *token_count : ApproxTokens(out.size());
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Parsers and documents: where simdjson's buffers live, and the "invalid JSON at byte N" message
// (json_syntax_error.cc finds N) a client gets for a body that does not parse.

// Bodies up to this size are parsed with the calling thread's reusable parser. simdjson sizes its
// buffers to the largest document seen (about 10 bytes per input byte), so larger ones get a
// parser of their own rather than pinning that memory to the thread for good.
constexpr size_t kMaxRetainedDocumentBytes = size_t{1} << 20;

// Slots: 0 a document, 1 a body nested in an envelope as a JSON string, 2 a value the fast path
// renders as canonical JSON, 3 a JSON body nested in a gRPC frame (vertexai).
simdjson::dom::parser& ThreadParser(int slot) {
  thread_local std::array<simdjson::dom::parser, 4> parsers;
  return parsers[slot];
}

}  // namespace

// JsonDocument (request_impl.h): the calling thread's parser for the slot, or for large inputs
// one of its own.
absl::Status internal::openai::JsonDocument::Parse(std::string_view text, int slot, const JsonPath* where, bool padded) {
  // simdjson copies the text with memcpy, which must not get the null pointer of an empty
  // std::string_view() (undefined behaviour even for 0 bytes).
  if (text.data() == nullptr) text = std::string_view("", 0);
  simdjson::dom::parser* parser = &ThreadParser(slot);
  if (text.size() > kMaxRetainedDocumentBytes) {
    own_ = std::make_unique<simdjson::dom::parser>();
    parser = own_.get();
  }
  const simdjson::error_code err = parser->parse(text.data(), text.size(), !padded).get(root_);
  if (err == simdjson::SUCCESS) return absl::OkStatus();
  if (err == simdjson::MEMALLOC) return absl::ResourceExhaustedError("out of memory parsing JSON");
  std::string msg;
  if (std::optional<SyntaxError> syntax = FindSyntaxError(text)) {
    msg = absl::StrCat("invalid JSON at byte ", syntax->offset, ": ", ToAbsl(syntax->reason));
  } else {
    msg = absl::StrCat("invalid JSON: ", simdjson::error_message(err));
  }
  if (where != nullptr) msg = absl::StrCat(PathString(*where), ": ", msg);
  return absl::InvalidArgumentError(msg);
}

absl::Status internal::openai::ParseOpenAIBody(const element& root, size_t body_size, const JsonPath& at,
                                              ApiKind api, InferenceRequest& req) {
  return ParseBody(root, body_size, at, api, req);
}

namespace {

using Document = JsonDocument;

// A capture envelope's `headers`: names lower-cased (as HTTP/2 and Envoy give them to ext_proc),
// a value a string or, for a repeated header, an array of strings.
absl::Status ParseHeaders(const element& headers, const JsonPath& at, InferenceRequest& req) {
  if (IsNull(headers)) return absl::OkStatus();
  std::optional<simdjson::dom::object> obj = AsObject(headers);
  if (!obj.has_value()) return TypeError(at, "an object", headers);
  for (simdjson::dom::key_value_pair kv : *obj) {
    std::string name(kv.key);
    for (char& c : name) c = AsciiLower(c);
    if (std::optional<std::string_view> v = AsString(kv.value)) {
      req.headers.emplace_back(std::move(name), std::string(*v));
      continue;
    }
    const JsonPath header_path = at.Key(kv.key);
    std::optional<simdjson::dom::array> values = AsArray(kv.value);
    if (!values.has_value()) return TypeError(header_path, "a string or an array of strings", kv.value);
    size_t i = 0;
    for (element item : *values) {
      std::optional<std::string_view> v = AsString(item);
      if (!v.has_value()) return TypeError(header_path.Index(i), "a string", item);
      req.headers.emplace_back(name, std::string(*v));
      ++i;
    }
  }
  req.fairness_id = FairnessIdFromHeaders(req);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Entry points (epp/request.h): the fast path first, this DOM path when it declines.

// `padded`: `body` has kRequestBodyPadding readable bytes past its end. `fast`: try the fast
// path (request/fast_parse.h) first.
absl::StatusOr<InferenceRequest> ParseRequest(std::string_view path, std::string_view body, bool padded,
                                              bool fast = true) {
  InferenceRequest req;
  req.path.assign(path.empty() ? kDefaultRequestPath : path);
  req.api = ApiKindForPath(req.path);
  if (fast) {
    if (internal::FastParseBody(body, req.api, req)) return req;
    // Declined: the DOM path starts from a clean request (the fast path may have written parts).
    InferenceRequest clean;
    clean.path = std::move(req.path);
    clean.api = req.api;
    req = std::move(clean);
  }
  const JsonPath root;
  Document doc;
  EPP_RETURN_IF_ERROR(doc.Parse(body, 0, nullptr, padded));
  EPP_RETURN_IF_ERROR(ParseBody(doc.root(), body.size(), root, req.api, req));
  return req;
}

}  // namespace

namespace internal {

absl::StatusOr<InferenceRequest> ParseOpenAIRequestDom(std::string_view path, std::string_view body) {
  return ParseRequest(path, body, /*padded=*/false, /*fast=*/false);
}

bool AppendCanonicalJsonText(std::string_view json, std::string& out) {
  element root;
  if (ThreadParser(2).parse(json.data(), json.size(), /*realloc_if_needed=*/true).get(root) != simdjson::SUCCESS) {
    return false;
  }
  AppendCanonicalJson(root, out);
  return true;
}

}  // namespace internal

absl::StatusOr<InferenceRequest> ParseOpenAIRequest(std::string_view path, std::string_view body) {
  return ParseRequest(path, body, /*padded=*/false);
}

absl::StatusOr<InferenceRequest> ParseOpenAIRequestInPlace(std::string_view path, std::string& body) {
  static_assert(kRequestBodyPadding >= simdjson::SIMDJSON_PADDING);
  const size_t size = body.size();
  if (body.capacity() - size < kRequestBodyPadding) body.reserve(size + kRequestBodyPadding);
  // Written, not only allocated: the parser reads these bytes.
  body.append(kRequestBodyPadding, ' ');
  body.resize(size);
  return ParseRequest(path, body, /*padded=*/true);
}

// Captured requests (replay workloads, eppctl pick/explain/tokenize, pyepp): an envelope {path,
// headers, body} or a bare body. The path falls back to the headers GIE's openai-parser reads it
// from, so a capture taken at the gateway replays against the same API.
namespace {

// InferRequestPath over a parsed body.
std::string_view PathForBody(const element& body) {
  std::optional<simdjson::dom::object> o = AsObject(body);
  if (!o.has_value()) return kDefaultRequestPath;
  bool messages = false, anthropic = false, input = false, embeddings = false;
  for (auto field : *o) {
    const std::string_view k = field.key;
    if (k == "messages") messages = true;
    else if (k == "system" || k == "anthropic_version" || k == "stop_sequences") anthropic = true;
    else if (k == "input") input = true;
    else if (k == "encoding_format" || k == "dimensions") embeddings = true;
  }
  if (messages) return anthropic ? std::string_view("/v1/messages") : std::string_view("/v1/chat/completions");
  if (input) return embeddings ? std::string_view("/v1/embeddings") : std::string_view("/v1/responses");
  return kDefaultRequestPath;
}

}  // namespace

std::string_view InferRequestPath(std::string_view body) {
  Document doc;
  if (!doc.Parse(body, 0, nullptr).ok()) return kDefaultRequestPath;
  return PathForBody(doc.root());
}

absl::StatusOr<InferenceRequest> ParseCaptureEnvelope(std::string_view json, std::string_view path_override,
                                                      std::string* body_out, const ParserSet* parsers) {
  if (parsers == nullptr) parsers = &ParserSet::Default();
  const JsonPath root;
  Document doc;
  EPP_RETURN_IF_ERROR(doc.Parse(json, 0, nullptr));
  std::optional<simdjson::dom::object> top = AsObject(doc.root());
  if (!top.has_value()) {
    return ErrorAt(root, absl::StrCat("expected a JSON object (a capture envelope or a request body), got ",
                                      Describe(doc.root())));
  }
  InferenceRequest req;
  absl::Status status;
  std::optional<std::string_view> path = OptionalString(*top, "path", root, status);
  EPP_RETURN_IF_ERROR(status);
  if (!path_override.empty()) path = path_override;

  std::optional<element> body = Member(*top, "body");
  if (!body.has_value()) {  // a bare body
    req.path.assign(path.value_or(std::string_view()));
    if (req.path.empty()) req.path.assign(PathForBody(doc.root()));
    EPP_RETURN_IF_ERROR(internal::ChooseParser(*parsers, /*binary_body=*/false, req));
    EPP_RETURN_IF_ERROR(internal::ParseJsonBody(doc.root(), json.size(), root, req));
    if (body_out) body_out->assign(json);
    return req;
  }

  if (std::optional<element> headers = Member(*top, "headers")) {
    EPP_RETURN_IF_ERROR(ParseHeaders(*headers, root.Key("headers"), req));
  }
  if (path.has_value() && !path->empty()) {
    req.path.assign(*path);
  } else {
    // Where GIE's openai-parser looks for the path, in its order.
    for (std::string_view name : {":path", "x-original-path", "x-forwarded-path"}) {
      if (std::optional<std::string_view> v = req.header(name)) {
        req.path.assign(*v);
        break;
      }
    }
  }
  const JsonPath body_path = root.Key("body");
  std::optional<std::string_view> text = AsString(*body);
  Document inner;
  if (req.path.empty()) {
    // Neither the capture nor its headers name a path: the body's members imply the API.
    std::string_view implied = kDefaultRequestPath;
    if (!text.has_value()) {
      implied = PathForBody(*body);
    } else if (inner.Parse(*text, 1, &body_path).ok()) {
      implied = PathForBody(inner.root());
    }
    req.path.assign(implied);
  }
  EPP_RETURN_IF_ERROR(internal::ChooseParser(*parsers, /*binary_body=*/false, req));

  if (text.has_value()) {
    if (body_out) body_out->assign(*text);
    if (req.api == ApiKind::kOther) return req;  // routed unread: the body need not be JSON
    EPP_RETURN_IF_ERROR(inner.Parse(*text, 1, &body_path));
    EPP_RETURN_IF_ERROR(internal::ParseJsonBody(inner.root(), text->size(), body_path, req));
    return req;
  }
  if (!AsObject(*body).has_value()) {
    return TypeError(body_path, "a JSON object or a JSON string", *body);
  }
  EPP_RETURN_IF_ERROR(internal::ParseJsonBody(*body, json.size(), body_path, req));
  if (body_out) *body_out = simdjson::minify(*body);
  return req;
}

}  // namespace epp
