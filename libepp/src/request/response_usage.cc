// Token usage in model-server responses, per request API (epp/request.h ParseResponseUsage):
// what the ext_proc session reads at the end of a response for GIE's token metrics and the
// request-attribute-reporter.
//
// A response is read whole when it is JSON; a streamed one is read from the events the session
// kept (the first MiB of the stream, then its tail), scanning back from the end for the OpenAI
// shapes (usage rides on the last event) and forward through every event for Anthropic's, whose
// usage comes in two parts: message_start carries the prompt side, message_delta the completion.
// Malformed input gives no usage, never an error: usage is observed, not required.
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/strings.h"
#include "epp/request.h"
#include "request/request_apis.h"

namespace epp {
namespace {

using Json = nlohmann::json;

// A token count is a non-negative whole number below 2^53 (what a double holds exactly);
// anything else (a fraction, a negative, 1e300) counts as absent rather than as a wild cast.
std::optional<double> Count(const Json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end()) return std::nullopt;
  std::optional<int64_t> n = internal::JsonInt64(*it);
  if (!n || *n < 0 || *n >= (int64_t{1} << 53)) return 0.0;
  return static_cast<double>(*n);
}

// OpenAI's `usage` (chat, completions, embeddings, vLLM generate) or the Responses API's
// `response.usage` (its streamed response.completed event), in either field spelling.
std::optional<ResponseUsage> OpenAIUsage(const Json& j) {
  if (!j.is_object()) return std::nullopt;
  const Json* u = nullptr;
  if (auto it = j.find("usage"); it != j.end() && it->is_object()) u = &*it;
  if (!u)
    if (auto r = j.find("response"); r != j.end() && r->is_object())
      if (auto it = r->find("usage"); it != r->end() && it->is_object()) u = &*it;
  if (!u) return std::nullopt;
  ResponseUsage got;
  got.prompt_tokens = Count(*u, "prompt_tokens").value_or(Count(*u, "input_tokens").value_or(0));
  got.completion_tokens = Count(*u, "completion_tokens").value_or(Count(*u, "output_tokens").value_or(0));
  got.total_tokens = Count(*u, "total_tokens").value_or(0);
  for (const char* details : {"prompt_tokens_details", "prompt_token_details", "input_tokens_details"}) {
    auto d = u->find(details);
    if (d == u->end() || !d->is_object()) continue;
    if (std::optional<double> c = Count(*d, "cached_tokens")) got.cached_tokens = *c;
  }
  return got;
}

// Anthropic's usage object: input_tokens, output_tokens, cache_read_input_tokens.
ResponseUsage AnthropicUsageOf(const Json& u) {
  ResponseUsage got;
  got.prompt_tokens = Count(u, "input_tokens").value_or(0);
  got.completion_tokens = Count(u, "output_tokens").value_or(0);
  got.total_tokens = got.prompt_tokens + got.completion_tokens;
  if (std::optional<double> c = Count(u, "cache_read_input_tokens")) got.cached_tokens = *c;
  return got;
}

// SGLang's meta_info (of the response, or of its first element for a batch).
std::optional<ResponseUsage> SglangUsage(const Json& j, bool require_finish) {
  const Json* r = &j;
  if (j.is_array()) {
    if (j.empty()) return std::nullopt;
    r = &j[0];
  }
  if (!r->is_object()) return std::nullopt;
  auto m = r->find("meta_info");
  if (m == r->end() || !m->is_object()) return std::nullopt;
  // Streamed chunks carry running counts; only the one that finished is the request's usage.
  if (require_finish) {
    auto f = m->find("finish_reason");
    if (f == m->end() || f->is_null()) return std::nullopt;
  }
  std::optional<double> prompt = Count(*m, "prompt_tokens"), completion = Count(*m, "completion_tokens");
  if (!prompt && !completion) return std::nullopt;
  ResponseUsage got;
  got.prompt_tokens = prompt.value_or(0);
  got.completion_tokens = completion.value_or(0);
  got.total_tokens = got.prompt_tokens + got.completion_tokens;
  if (std::optional<double> c = Count(*m, "cached_tokens")) got.cached_tokens = *c;
  return got;
}

// The payloads of the `data:` fields on one SSE line, in order. Besides the line's own `data:`
// prefix, a `data:` right after a closing brace or bracket (spaces allowed between) starts
// another event: events sent in separate body chunks without line ends join up that way. When
// the line splits, the unsplit payload comes first (so it is tried last): a `}data:` inside a
// JSON string splits wrongly, and then only the whole payload parses.
std::vector<std::string_view> SseDataPayloads(std::string_view line) {
  std::vector<std::string_view> out;
  if (line.substr(0, 5) != "data:") return out;
  out.push_back(internal::TrimSpace(line.substr(5)));
  size_t begin = 5;
  size_t from = 5;
  while (true) {
    size_t next = line.find("data:", from);
    while (next != std::string_view::npos) {
      size_t k = next;
      while (k > begin && (line[k - 1] == ' ' || line[k - 1] == '\t')) --k;
      if (k > begin && (line[k - 1] == '}' || line[k - 1] == ']')) break;
      next = line.find("data:", next + 5);
    }
    const size_t stop = next == std::string_view::npos ? line.size() : next;
    if (next == std::string_view::npos && out.size() == 1) break;  // one event: the whole payload
    out.push_back(internal::TrimSpace(line.substr(begin, stop - begin)));
    if (next == std::string_view::npos) break;
    begin = from = next + 5;
  }
  return out;
}

// The last event (scanning back from the end) for which `take` finds usage.
template <typename F>
std::optional<ResponseUsage> LastEventUsage(std::string_view body, F take) {
  size_t end = body.size();
  while (end > 0) {
    size_t start = body.rfind('\n', end - 1);
    start = start == std::string_view::npos ? 0 : start + 1;
    const std::string_view line = internal::TrimSpace(body.substr(start, end - start));
    const std::vector<std::string_view> payloads = SseDataPayloads(line);
    for (auto it = payloads.rbegin(); it != payloads.rend(); ++it) {
      if (*it == "[DONE]") continue;
      if (std::optional<ResponseUsage> u = take(internal::ParseJsonOrDiscarded(*it))) return u;
    }
    if (start == 0) break;
    end = start - 1;
  }
  return std::nullopt;
}

// Anthropic's event stream: message_start's message.usage, then message_delta's usage (vLLM
// repeats input_tokens there; Anthropic's API sends output_tokens only), merged in stream order.
std::optional<ResponseUsage> AnthropicStreamUsage(std::string_view body) {
  std::optional<ResponseUsage> out;
  size_t start = 0;
  while (start < body.size()) {
    size_t end = body.find('\n', start);
    if (end == std::string_view::npos) end = body.size();
    const std::string_view line = internal::TrimSpace(body.substr(start, end - start));
    start = end + 1;
    // Only message_start and message_delta carry usage, both with a literal "usage" key.
    if (line.find("usage") == std::string_view::npos) continue;
    const std::vector<std::string_view> payloads = SseDataPayloads(line);
    // One payload, or the split ones (the whole line is first, tried when nothing else parses).
    const size_t first = payloads.size() > 1 ? 1 : 0;
    for (size_t i = first; i < payloads.size(); ++i) {
      const Json j = internal::ParseJsonOrDiscarded(payloads[i]);
      if (!j.is_object()) continue;
      auto type = j.find("type");
      if (type == j.end() || !type->is_string()) continue;
      const Json* u = nullptr;
      if (*type == "message_start") {
        if (auto m = j.find("message"); m != j.end() && m->is_object())
          if (auto it = m->find("usage"); it != m->end() && it->is_object()) u = &*it;
      } else if (*type == "message_delta") {
        if (auto it = j.find("usage"); it != j.end() && it->is_object()) u = &*it;
      }
      if (u == nullptr) continue;
      if (!out) out = ResponseUsage{};
      MergeUsage(*out, AnthropicUsageOf(*u));
    }
  }
  return out;
}

std::optional<ResponseUsage> OpenAIBodyUsage(std::string_view body, bool event_stream) {
  // A body that starts as an event stream is one, whatever the headers say (a Vertex AI
  // HttpBody chunk carries one without any).
  const std::string_view t = internal::TrimSpace(body);
  if (event_stream || t.starts_with("data:")) return LastEventUsage(body, [](const Json& j) { return OpenAIUsage(j); });
  return OpenAIUsage(internal::ParseJsonOrDiscarded(body));
}

// Each gRPC frame in `body`, in order, while frames parse.
template <typename F>
void ForEachGrpcFrame(std::string_view body, F f) {
  while (!body.empty()) {
    std::string_view rest;
    absl::StatusOr<std::string_view> m = internal::GrpcFrame(body, &rest);
    if (!m.ok()) return;
    f(*m);
    body = rest;
  }
}

// vLLM gRPC: GenerateResponse {chunk = 1 {prompt_tokens = 2, completion_tokens = 3,
// cached_tokens = 4}, complete = 2 {prompt_tokens = 3, completion_tokens = 4, cached_tokens = 5}}
// or EmbedResponse {prompt_tokens = 2} (an embedding, field 1, is packed floats, wire type 2).
std::optional<ResponseUsage> VllmGrpcUsage(std::string_view message) {
  internal::ProtoReader r(message);
  internal::ProtoField f;
  std::optional<ResponseUsage> got;
  double embed_prompt = 0;
  while (r.Next(f)) {
    if ((f.number == 1 || f.number == 2) && f.wire_type == 2) {
      // chunk or complete: their counters sit at different numbers.
      const uint32_t p = f.number == 1 ? 2 : 3, c = p + 1, cached = p + 2;
      internal::ProtoReader inner(f.bytes);
      internal::ProtoField g;
      ResponseUsage u;
      std::optional<double> cached_tokens;
      while (inner.Next(g)) {
        if (g.wire_type != 0) continue;
        if (g.number == p) u.prompt_tokens = static_cast<double>(g.varint & 0xffffffffu);
        else if (g.number == c) u.completion_tokens = static_cast<double>(g.varint & 0xffffffffu);
        else if (g.number == cached) cached_tokens = static_cast<double>(g.varint & 0xffffffffu);
      }
      if (!inner.ok()) continue;
      // Streaming chunks may leave the counters empty until the last one.
      if (u.prompt_tokens > 0 || u.completion_tokens > 0) {
        u.cached_tokens = cached_tokens.value_or(0);
        u.total_tokens = u.prompt_tokens + u.completion_tokens;
        got = u;
      }
    } else if (f.number == 2 && f.wire_type == 0) {
      embed_prompt = static_cast<double>(f.varint & 0xffffffffu);
    }
  }
  if (!got && embed_prompt > 0) {
    ResponseUsage u;
    u.prompt_tokens = u.total_tokens = embed_prompt;
    got = u;
  }
  return got;
}

}  // namespace

void MergeUsage(ResponseUsage& into, const ResponseUsage& from) {
  if (from.prompt_tokens != 0) into.prompt_tokens = from.prompt_tokens;
  if (from.completion_tokens != 0) into.completion_tokens = from.completion_tokens;
  if (from.cached_tokens.has_value()) into.cached_tokens = from.cached_tokens;
  if (from.prompt_tokens != 0 && from.completion_tokens != 0 && from.total_tokens != 0) {
    into.total_tokens = from.total_tokens;
    return;
  }
  into.total_tokens = into.prompt_tokens + into.completion_tokens;
}

std::optional<ResponseUsage> ParseResponseUsage(RequestParser parser, ApiKind api, std::string_view body,
                                                bool event_stream) {
  if (body.empty()) return std::nullopt;
  switch (parser) {
    case RequestParser::kOpenAI:
    case RequestParser::kVllmHttp: return OpenAIBodyUsage(body, event_stream);
    case RequestParser::kAnthropic: {
      if (api != ApiKind::kMessages) return std::nullopt;
      if (event_stream || internal::TrimSpace(body).starts_with("event:")) return AnthropicStreamUsage(body);
      const Json j = internal::ParseJsonOrDiscarded(body);
      if (!j.is_object()) return std::nullopt;
      auto u = j.find("usage");
      if (u == j.end() || !u->is_object()) return std::nullopt;
      return AnthropicUsageOf(*u);
    }
    case RequestParser::kSglangHttp:
      if (event_stream) return LastEventUsage(body, [](const Json& j) { return SglangUsage(j, /*require_finish=*/true); });
      return SglangUsage(internal::ParseJsonOrDiscarded(body), /*require_finish=*/false);
    case RequestParser::kVertexAI: {
      std::optional<ResponseUsage> got;
      ForEachGrpcFrame(body, [&](std::string_view m) {
        // google.api.HttpBody {content_type = 1, data = 2}
        internal::ProtoReader r(m);
        internal::ProtoField f;
        while (r.Next(f))
          if (f.number == 2 && f.wire_type == 2)
            if (std::optional<ResponseUsage> u = OpenAIBodyUsage(f.bytes, false)) got = u;
      });
      return got;
    }
    case RequestParser::kVllmGrpc: {
      std::optional<ResponseUsage> got;
      ForEachGrpcFrame(body, [&](std::string_view m) {
        if (std::optional<ResponseUsage> u = VllmGrpcUsage(m)) got = u;
      });
      return got;
    }
    case RequestParser::kPassthrough: return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace epp
