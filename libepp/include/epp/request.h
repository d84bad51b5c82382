// Inference requests as the scheduler sees them, parsed from the HTTP (or gRPC) bodies of the
// request APIs llm-d Router's parsers read.
//
// ParseOpenAIRequest() turns the body of a request to /v1/completions, /v1/chat/completions,
// /v1/responses or /v1/embeddings into an InferenceRequest: the API kind (chosen by the path
// suffix, as GIE's openai-parser does), the target model, the `stream` and `cache_salt` fields,
// and the canonical prompt text the prefix-cache machinery hashes (see prefix_cache.h).
// ParseRequest() first chooses the parser a path belongs to, as llm-d Router's requestHandler
// does (ParserSet: the longest claimed path suffix wins), and also reads Anthropic Messages
// (/v1/messages), vLLM's token-in /inference/v1/generate, SGLang's /generate, Vertex AI's gRPC
// PredictionService and vLLM's gRPC VllmEngine bodies.
// ParseCaptureEnvelope() accepts the same bodies wrapped with the path and headers they were
// captured with, which is the input format of `eppctl explain` and `eppctl pick`.
//
// The canonical prompt text depends only on the JSON values, never on whitespace, key order or
// string escapes, so two clients sending the same conversation produce the same text and hence
// the same prefix blocks. Its exact grammar is in docs/scheduling.md, section "How the prompt is
// rendered for hashing"; it is part of the contract, since changing it changes every block hash.
//
// Errors are kInvalidArgument (HTTP 400) and start with the JSON path of the offending value:
//   "messages[2].content: expected a string or an array of parts, got number"
//   "invalid JSON at byte 17: expected ',' or '}' after an object member"
// Parsing never crashes and never throws, whatever the input. All functions are thread-safe; each
// thread reuses its own parser buffers.
// ParseOpenAIRequest first tries a one-pass scanner for the common shapes of each API (text
// contents, string or token-id prompts), which renders the prompt while it validates; any other shape, and any invalid input, goes to
// simdjson's DOM, which also writes every error message. Both give the same result, byte for byte
// (tested differentially and fuzzed). The other APIs are read with the DOM only.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "epp/status.h"

namespace epp {

// Which API a request uses. kOther is for requests epp routes without understanding the body
// (passthrough-parser, Anthropic's count_tokens, a Vertex AI method other than the three it
// reads); ParseOpenAIRequest never produces it, nor any value after it.
enum class ApiKind {
  kCompletions,
  kChatCompletions,
  kResponses,
  kEmbeddings,
  kOther,
  kMessages,        // Anthropic Messages, /v1/messages (anthropic-parser)
  kGenerate,        // vLLM's token-in /inference/v1/generate (vllmhttp-parser)
  kSglangGenerate,  // SGLang's native /generate (sglanghttp-parser)
  kGrpcGenerate,    // vLLM's gRPC vllm.grpc.engine.VllmEngine/Generate (vllmgrpc-parser)
  kGrpcEmbed,       // vLLM's gRPC vllm.grpc.engine.VllmEngine/Embed (vllmgrpc-parser)
};

// "completions", "chat_completions", "responses", "embeddings", "other", "messages", "generate",
// "sglang_generate", "grpc_generate", "grpc_embed".
std::string_view ApiKindName(ApiKind api);

// The request parsers of llm-d Router (requestHandler.parsers), by what they read.
enum class RequestParser {
  kOpenAI,       // openai-parser: the OpenAI API paths (ParseOpenAIRequest)
  kAnthropic,    // anthropic-parser: /v1/messages (and /v1/messages/count_tokens, routed unread)
  kVllmHttp,     // vllmhttp-parser: /inference/v1/generate
  kSglangHttp,   // sglanghttp-parser: /generate
  kVertexAI,     // vertexai-parser: gRPC PredictionService/{ChatCompletions,RawPredict,StreamRawPredict}
  kVllmGrpc,     // vllmgrpc-parser: gRPC vllm.grpc.engine.VllmEngine/{Generate,Embed}
  kPassthrough,  // passthrough-parser: claims no path; the fallback, body not read
};

// The plugin type: "openai-parser", "anthropic-parser", ..., "passthrough-parser".
std::string_view RequestParserType(RequestParser parser);
// The parser of a plugin type, or nullopt for a type that is not a parser.
std::optional<RequestParser> RequestParserForType(std::string_view type);
// The path suffixes a parser claims (llm-d's Claims().Paths, without leading or trailing
// slashes); empty for passthrough.
std::span<const std::string_view> RequestParserClaims(RequestParser parser);

// Which parser reads a request, by its path, as llm-d Router's ParserRegistry resolves it: among
// the parsers in effect, the one claiming the longest suffix of the path (the query string and
// trailing slashes dropped; the suffix is matched as a plain string suffix, as llm-d matches it)
// wins; with none, the fallback parser (one claiming no paths); with no fallback, no parser (the
// request is refused with 400).
class ParserSet {
 public:
  // llm-d's default when a configuration names no parser: openai, anthropic, vllmhttp, then
  // passthrough as the fallback.
  static const ParserSet& Default();
  ParserSet() = default;  // no parser: every path is refused
  // `parsers` in configuration order. A repeated parser is kept once (its first place); the
  // first parser claiming no paths becomes the fallback and ends the list (those after it are
  // dropped, as llm-d skips them).
  explicit ParserSet(std::span<const RequestParser> parsers);

  std::optional<RequestParser> Resolve(std::string_view path) const;
  // The parsers in effect, in order (the fallback, if any, last).
  const std::vector<RequestParser>& parsers() const { return parsers_; }
  bool has_fallback() const { return !parsers_.empty() && parsers_.back() == RequestParser::kPassthrough; }

 private:
  std::vector<RequestParser> parsers_;
};

// The path assumed when a request comes without one (as in GIE's openai-parser).
inline constexpr std::string_view kDefaultRequestPath = "/v1/completions";

// The path a request body implies when it comes without one (a file given to `eppctl explain`,
// `pick` or `tokenize` without --path, pyepp.Request.from_openai without a path), from its
// top-level members: `messages` -> /v1/chat/completions, or /v1/messages when the body also has
// Anthropic's top-level `system`, `anthropic_version` or `stop_sequences`; `input` ->
// /v1/responses, or /v1/embeddings with `encoding_format` or `dimensions`; otherwise (`prompt`,
// or a body that is not a JSON object) kDefaultRequestPath. A path that is given always wins.
std::string_view InferRequestPath(std::string_view body);

// The API selected by `path`: a suffix match on the path without its query string, checked in
// the order /chat/completions, /completions, /responses, /embeddings. Any other path (including
// the empty one) is kCompletions.
ApiKind ApiKindForPath(std::string_view path);

// The token usage a model server reports in its response (`usage` of an OpenAI response, or its
// last streamed chunk): what response observers and the request-attribute-reporter read.
struct ResponseUsage {
  double prompt_tokens = 0;
  double completion_tokens = 0;
  double total_tokens = 0;
  std::optional<double> cached_tokens;  // prompt_tokens_details.cached_tokens, when sent
};

// What kind of media a prompt part carries (InferenceRequest::media_items).
enum class MediaModality : uint8_t { kImage, kAudio, kVideo };
// "image", "audio", "video" (llm-d's modality label values).
std::string_view MediaModalityName(MediaModality modality);

// One media part of a prompt: its modality and a hash of what identifies its content (for a
// URL part the URL, for inline data the data), so that the same image sent again by URL or as
// the same base64 payload has the same hash. mm-embeddings-cache-producer remembers these per
// endpoint (an encoder-cache affinity signal).
struct MediaItem {
  MediaModality modality = MediaModality::kImage;
  uint64_t hash = 0;
  bool operator==(const MediaItem&) const = default;
};

// The hash of a media part's identifying content (MediaItem::hash): XXH3-64 of `content`. Every
// parser uses it, so that a part means the same whatever API carried it.
uint64_t MediaContentHash(std::string_view content);

struct InferenceRequest {
  ApiKind api = ApiKind::kCompletions;
  RequestParser parser = RequestParser::kOpenAI;  // the parser that read it
  std::string path;        // as received (kDefaultRequestPath when none was given)
  // Body field `model`: never empty for the OpenAI and Anthropic APIs; optional in vLLM's
  // generate body; empty for SGLang's /generate and vLLM's gRPC API (their bodies name none) and
  // for requests routed unread (api kOther).
  std::string model;
  bool stream = false;     // body field `stream`
  std::string cache_salt;  // body field `cache_salt`; empty when absent
  // The canonical rendering of the prompt (docs/scheduling.md), the input of prefix hashing.
  std::string prompt;
  // Estimated prompt tokens: the number of token ids for token-id prompts, otherwise
  // ApproxTokens(prompt.size()).
  int64_t prompt_tokens = 0;
  // The prompt's token ids when the request carries exactly one tokenized prompt (vLLM's generate,
  // SGLang's input_ids, vLLM gRPC's tokenized input): token-producer takes them as they are
  // (TokenState source "request"). Empty otherwise.
  std::vector<uint32_t> token_ids;
  // Media parts of the prompt (chat image_url / input_audio / video_url / audio_url, Responses
  // input_image, Anthropic image blocks, SGLang image_data, vLLM gRPC mm_placeholders; not
  // files): what an encode stage would process (always-disagg-multimodal-decider).
  int media_parts = 0;
  // The media parts themselves, one entry per part in prompt order (repeats included), as far as
  // the parser identifies them: chat image_url (the URL), input_audio (data and format),
  // video_url and audio_url (the URL), Responses input_image (image_url or file_id). A parser
  // that only counts a kind of part leaves it out, so size() <= media_parts.
  std::vector<MediaItem> media_items;
  // Request headers in arrival order, names lower-cased; a repeated header appears repeatedly.
  // Empty for ParseOpenAIRequest (the body carries none).
  std::vector<std::pair<std::string, std::string>> headers;
  // Scheduling priority; negative means sheddable. Never read from the body: it comes from the
  // InferenceObjective named by the request's headers, or from the caller.
  int priority = 0;
  // The tenant (flow) this request is queued and shared fairly under by flow control: llm-d's
  // x-llm-d-inference-fairness-id header (x-gateway-inference-fairness-id read as its alias), or
  // what agent-identity derives from an agent's session header; empty when neither names one.
  std::string fairness_id;
  // The request body as JSON text, for plugins that send the request on (token-producer's vllm
  // backend asks the model server to render it). A view, not a copy: the caller that has the
  // body points it there just for Scheduler::Pick (the ext_proc session, eppctl pick/explain with
  // ParseCaptureEnvelope's body_out); empty otherwise, and plugins then do without it.
  std::string_view body;

  // The value of the first header named `name` (compared case-insensitively), or nullopt.
  std::optional<std::string_view> header(std::string_view name) const;
};

// The flow-control tenant's headers: llm-d's name, then its old alias.
inline constexpr std::string_view kLlmdFairnessIdHeader = "x-llm-d-inference-fairness-id";
inline constexpr std::string_view kFairnessIdHeader = "x-gateway-inference-fairness-id";

// The fairness id `r.headers` name: the first non-empty x-llm-d-inference-fairness-id, else
// x-gateway-inference-fairness-id; empty when neither. ext_proc and ParseCaptureEnvelope store it
// in InferenceRequest::fairness_id.
std::string FairnessIdFromHeaders(const InferenceRequest& r);

// Parses an OpenAI request body sent to `path` (an empty path means kDefaultRequestPath). The
// API kind comes from ApiKindForPath(path). Requirements, each a kInvalidArgument naming the
// JSON path when violated:
//   all:         the body is a JSON object; `model` is a non-empty string; `stream` is a boolean
//                and `cache_salt` a string when present (null counts as absent).
//   completions: `prompt` is a non-empty string, or a non-empty array of strings, of token ids
//                (non-negative integers) or of non-empty arrays of token ids.
//   chat:        `messages` is a non-empty array of objects with a string `role`; each
//                `content` is absent, null, a string or an array of typed parts.
//   responses:   `input` is a non-empty string or a non-empty array of items;
//                `instructions` is a string when present.
//   embeddings:  `input` shaped as a completions `prompt`, or else chat-style `messages`.
// Fields the scheduler does not need are not validated.
absl::StatusOr<InferenceRequest> ParseOpenAIRequest(std::string_view path, std::string_view body);

// Bytes of capacity a caller-owned body needs past its end for ParseOpenAIRequestInPlace.
inline constexpr size_t kRequestBodyPadding = 64;

// ParseOpenAIRequest for a caller that owns the body's buffer (the ext_proc session): the buffer
// gets kRequestBodyPadding initialised bytes of capacity past its end (a reallocation only when
// its capacity falls short), and the JSON parser then reads the body where it lies instead of
// copying it first (for a 220 KiB body, one copy of 220 KiB fewer). The body's contents and
// size are unchanged.
absl::StatusOr<InferenceRequest> ParseOpenAIRequestInPlace(std::string_view path, std::string& body);

// Parses a captured request. Two shapes are accepted:
//   an envelope  {"path": "/v1/chat/completions", "headers": {"x-request-id": "r1", ...},
//                 "body": {...} or "<the body as a JSON string>"}
//     where `path` and `headers` are optional. Header values are strings, or arrays of strings
//     for repeated headers. Without `path`, the path comes from the headers `:path`,
//     `x-original-path` or `x-forwarded-path` (in that order), else the one the body implies
//     (InferRequestPath).
//     Errors inside the body are reported under `body.` (e.g. "body.messages: must not be
//     empty"); JSON syntax errors in a string body give the byte offset within that string.
//   a bare body  with an optional top-level string field `path` (default: the one the body
//                implies, InferRequestPath).
// The document is an envelope exactly when its top level has a `body` member. Unknown envelope
// members (timestamps, ids) are ignored.
// A non-empty `path_override` replaces the path the capture names (or implies).
// With `body_out`, the request body is stored there as JSON text (for InferenceRequest::body).
// `parsers` chooses the parser by the path (nullptr: ParserSet::Default()); a path no parser in
// it claims is an error. The gRPC parsers (vertexai, vllmgrpc) need the binary request body,
// which a JSON envelope cannot carry: their paths are an error here.
absl::StatusOr<InferenceRequest> ParseCaptureEnvelope(std::string_view json, std::string_view path_override = {},
                                                      std::string* body_out = nullptr,
                                                      const ParserSet* parsers = nullptr);

// Parses a request body with the parser `parsers` resolves for `path` (an empty path means
// kDefaultRequestPath); kInvalidArgument "no parser claims the path '<path>'" when none does.
// By parser (each error a kInvalidArgument naming the JSON path, or the protobuf field):
//   openai:       ParseOpenAIRequest.
//   anthropic:    /v1/messages: `model` a non-empty string; `messages` a non-empty array of
//                 objects with a string `role` and a `content` that is a string or an array of
//                 typed blocks (text, image, tool_use, tool_result, thinking, redacted_thinking,
//                 others carried whole); `system` a string or an array of text blocks; `tools` an
//                 array of objects; `stream` a boolean, `cache_salt` a string.
//                 /v1/messages/count_tokens: routed unread (api kOther), as llm-d does.
//   vllmhttp:     `token_ids` a non-empty array of token ids (integers in [0, 2^32)); `model` a
//                 string when present; `stream` a boolean, `cache_salt` a string.
//   sglanghttp:   exactly one of `text` (a string, or a non-empty array of strings: a batch) and
//                 `input_ids` (token ids, or a non-empty array of token-id arrays: a batch);
//                 `extra_key` (SGLang's cache salt) a string; `stream` a boolean.
//   vertexai:     a gRPC frame (uncompressed) holding a ChatCompletionsRequest, RawPredictRequest
//                 or StreamRawPredictRequest whose http_body.data is an OpenAI chat (ChatCompletions)
//                 or Responses (the two raw predict methods) body, parsed as ParseOpenAIRequest
//                 does; other PredictionService methods are routed unread (api kOther).
//   vllmgrpc:     a gRPC frame holding a vllm.grpc.engine GenerateRequest (tokenized input_ids or
//                 text) or EmbedRequest (tokenized input_ids); other methods are routed unread.
//   passthrough:  nothing is read (api kOther, no model, no prompt).
absl::StatusOr<InferenceRequest> ParseRequest(std::string_view path, std::string_view body,
                                              const ParserSet& parsers = ParserSet::Default());
// ParseRequest with the parser given (the path still selects the API within it).
absl::StatusOr<InferenceRequest> ParseRequestWith(RequestParser parser, std::string_view path, std::string_view body);
// ParseRequest for a caller that owns the body's buffer (see ParseOpenAIRequestInPlace).
absl::StatusOr<InferenceRequest> ParseRequestInPlace(std::string_view path, std::string& body, const ParserSet& parsers);

// An Anthropic Messages body converted to the OpenAI chat body vLLM builds from it when it serves
// /v1/messages (vllm/entrypoints/anthropic): one system message (the system text blocks and any
// system-role messages joined, Claude Code's x-anthropic-billing-header blocks dropped), text and
// image blocks as content parts (a lone text part as a string), tool_use blocks as the
// assistant's tool_calls (arguments as Python's json.dumps writes them), a user's tool_result
// blocks as role "tool" messages ahead of the user message (its images as a following user
// message), thinking blocks as the message's `reasoning`, and tools as OpenAI function tools.
// Key order of tool schemas and inputs is kept. Only `model`, `messages` and `tools` are written:
// what a chat template reads. The input must be a body ParseRequest accepts for /v1/messages.
absl::StatusOr<std::string> AnthropicToChatCompletions(std::string_view body);

// The token usage in a response body of a request read by `parser` for `api`: the whole body of a
// JSON response, or the events of a streamed one (`event_stream`: the response's content-type is
// text/event-stream) as far as they were kept. By parser:
//   openai, vllmhttp: `usage` (or Responses' `response.usage`) with prompt_tokens / input_tokens,
//                 completion_tokens / output_tokens, total_tokens and
//                 prompt_tokens_details.cached_tokens; streamed: the last event carrying usage.
//   anthropic:    `usage.input_tokens`, `output_tokens`, `cache_read_input_tokens` (as cached
//                 tokens); streamed: message_start's message.usage and message_delta's usage,
//                 merged field by field (MergeUsage).
//   sglanghttp:   `meta_info.prompt_tokens`, `completion_tokens`, `cached_tokens` (of the first
//                 element for a batch); streamed: the event whose meta_info has a finish_reason.
//   vertexai:     each gRPC frame's google.api.HttpBody data read as the OpenAI parser reads a body.
//   vllmgrpc:     each gRPC frame's GenerateResponse chunk or complete message (prompt_tokens,
//                 completion_tokens, cached_tokens) or EmbedResponse (prompt_tokens); the last one
//                 reporting tokens wins.
//   passthrough:  none.
// nullopt when the body reports no usage. Never fails: a malformed body has no usage.
std::optional<ResponseUsage> ParseResponseUsage(RequestParser parser, ApiKind api, std::string_view body,
                                                bool event_stream);

// Folds `from` into `into` field by field (llm-d #2437): a field `from` reports (non-zero, or a
// cached count present) replaces the one in `into`; the total is `from`'s when it reports both
// prompt and completion tokens, else the sum of the merged halves. For usage that arrives in
// parts (Anthropic's message_start and message_delta in different body chunks).
void MergeUsage(ResponseUsage& into, const ResponseUsage& from);

}  // namespace epp
