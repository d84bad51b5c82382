// Inference requests as the scheduler sees them, parsed from OpenAI-style HTTP bodies.
//
// ParseOpenAIRequest() turns the body of a request to /v1/completions, /v1/chat/completions,
// /v1/responses or /v1/embeddings into an InferenceRequest: the API kind (chosen by the path
// suffix, as GIE's openai-parser does), the target model, the `stream` and `cache_salt` fields,
// and the canonical prompt text the prefix-cache machinery hashes (see prefix_cache.h).
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
// (tested differentially and fuzzed).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "epp/status.h"

namespace epp {

// Which OpenAI API a request uses. kOther is for requests epp routes without understanding the
// body (e.g. a future passthrough parser); ParseOpenAIRequest never produces it.
enum class ApiKind { kCompletions, kChatCompletions, kResponses, kEmbeddings, kOther };

// "completions", "chat_completions", "responses", "embeddings", "other".
std::string_view ApiKindName(ApiKind api);

// The path assumed when a request comes without one (as in GIE's openai-parser).
inline constexpr std::string_view kDefaultRequestPath = "/v1/completions";

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
  std::string path;        // as received (kDefaultRequestPath when none was given)
  std::string model;       // body field `model`, never empty
  bool stream = false;     // body field `stream`
  std::string cache_salt;  // body field `cache_salt`; empty when absent
  // The canonical rendering of the prompt (docs/scheduling.md), the input of prefix hashing.
  std::string prompt;
  // Estimated prompt tokens: the number of token ids for token-id prompts, otherwise
  // ApproxTokens(prompt.size()).
  int64_t prompt_tokens = 0;
  // Media parts of the prompt (chat image_url / input_audio / video_url / audio_url, Responses
  // input_image; not files): what an encode stage would process (always-disagg-multimodal-decider).
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
//     `x-original-path` or `x-forwarded-path` (in that order), else kDefaultRequestPath.
//     Errors inside the body are reported under `body.` (e.g. "body.messages: must not be
//     empty"); JSON syntax errors in a string body give the byte offset within that string.
//   a bare body  with an optional top-level string field `path` (default kDefaultRequestPath).
// The document is an envelope exactly when its top level has a `body` member. Unknown envelope
// members (timestamps, ids) are ignored.
// A non-empty `path_override` replaces the path the capture names (or implies).
// With `body_out`, the request body is stored there as JSON text (for InferenceRequest::body).
absl::StatusOr<InferenceRequest> ParseCaptureEnvelope(std::string_view json, std::string_view path_override = {},
                                                      std::string* body_out = nullptr);

}  // namespace epp
