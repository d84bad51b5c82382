// The simulator's HTTP front (cpp-httplib): OpenAI endpoints, Anthropic's /v1/messages, vLLM's
// /inference/v1/generate, SGLang's /generate and /metrics over one SimServer.
//
// Threads: httplib's workers run handlers; a driver thread moves the SimServer's virtual clock
// with real time (scaled by time_scale) and wakes handlers whose requests progressed. One mutex
// guards the SimServer.
#include <httplib.h>
#include <xxhash.h>

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "epp/prefix_cache.h"
#include "epp/kv/index.h"
#include "epp/kv/publisher.h"
#include "epp/request.h"
#include "epp/tools/sim.h"
#include "epp/text/tokenize.h"
#include "epp/text/chat_template.h"
#include "epp/text/tokenizer.h"

namespace epp {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;
constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

// Words for deterministic output text; one word is one token.
constexpr const char* kWords[] = {
    "the",     "model",  "server",  "routes", "tokens", "cache",    "prefix",  "queue",  "picker", "gateway",
    "request", "fast",   "latency", "batch",  "decode", "prefill",  "block",   "adapter", "envoy", "pool",
    "endpoint", "score", "weight",  "filter", "random", "balanced", "warm",    "cold",   "memory", "bandwidth",
    "stream",  "answer"};

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void OpenAIError(httplib::Response& res, int status, const std::string& message, const char* type,
                 const char* param = nullptr) {
  Json err = {{"error", {{"message", message}, {"type", type}, {"param", param ? Json(param) : Json(nullptr)},
                         {"code", status == 404 ? Json("model_not_found") : Json(nullptr)}}}};
  res.status = status;
  res.set_content(err.dump(), "application/json");
}

// What the simulator needs from a request body.
struct ParsedCall {
  std::string model;       // as requested
  std::string adapter;     // non-empty when `model` names a LoRA adapter
  std::string prompt;      // rendered prompt text (prefix hashing)
  int64_t prompt_tokens = 0;
  int64_t max_tokens = 0;
  bool stream = false;
  bool include_usage = false;
  std::string cache_salt;
  bool remote_decode = false;                  // a prefill request for a remote decoder (kv_transfer_params)
  std::optional<int64_t> prefiller_cached;     // decode side: cached tokens as the prefiller reported them
  int64_t cached_at_submit = 0;  // prompt tokens in the cache when the request arrived (Anthropic's message_start)
};

// Renders the prompt: completions' prompt as text (lists joined by newlines, token ids counted as
// tokens), chat messages as "role\ncontent\n" with text parts concatenated.
bool ParseCall(const Json& body, bool chat, const SimHttpOptions& o, ParsedCall& c, httplib::Response& res) {
  if (!body.is_object()) {
    OpenAIError(res, 400, "request body must be a JSON object", "invalid_request_error");
    return false;
  }
  if (!body.contains("model") || !body["model"].is_string()) {
    OpenAIError(res, 400, "'model' is required and must be a string", "invalid_request_error", "model");
    return false;
  }
  c.model = body["model"].get<std::string>();
  const auto& p = o.params;
  bool base = std::find(p.models.begin(), p.models.end(), c.model) != p.models.end();
  bool lora = std::find(p.loras.begin(), p.loras.end(), c.model) != p.loras.end();
  if (!base && !lora) {
    OpenAIError(res, 404, "The model '" + c.model + "' does not exist.", "NotFoundError", "model");
    return false;
  }
  if (lora) c.adapter = c.model;
  int64_t id_tokens = 0;
  if (chat) {
    if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty()) {
      OpenAIError(res, 400, "'messages' must be a non-empty array", "invalid_request_error", "messages");
      return false;
    }
    for (size_t i = 0; i < body["messages"].size(); ++i) {
      const Json& m = body["messages"][i];
      const std::string where = "messages[" + std::to_string(i) + "]";
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
        OpenAIError(res, 400, where + ".role is required", "invalid_request_error", "messages");
        return false;
      }
      c.prompt += m["role"].get<std::string>() + "\n";
      if (m.contains("content")) {
        const Json& content = m["content"];
        if (content.is_string()) {
          c.prompt += content.get<std::string>();
        } else if (content.is_array()) {
          for (const Json& part : content) {
            if (part.is_object() && part.contains("text") && part["text"].is_string()) c.prompt += part["text"].get<std::string>();
          }
        } else if (!content.is_null()) {
          OpenAIError(res, 400, where + ".content must be a string or an array", "invalid_request_error", "messages");
          return false;
        }
      }
      c.prompt += "\n";
    }
  } else {
    if (!body.contains("prompt")) {
      OpenAIError(res, 400, "'prompt' is required", "invalid_request_error", "prompt");
      return false;
    }
    const Json& pr = body["prompt"];
    if (pr.is_string()) {
      c.prompt = pr.get<std::string>();
    } else if (pr.is_array()) {
      for (size_t i = 0; i < pr.size(); ++i) {
        if (pr[i].is_string()) {
          c.prompt += (i ? "\n" : "") + pr[i].get<std::string>();
        } else if (pr[i].is_number_integer()) {
          c.prompt += (i ? " " : "") + std::to_string(pr[i].get<int64_t>());
          ++id_tokens;
        } else if (pr[i].is_array()) {
          for (const Json& t : pr[i]) {
            c.prompt += std::to_string(t.is_number_integer() ? t.get<int64_t>() : 0) + " ";
            ++id_tokens;
          }
        } else {
          OpenAIError(res, 400, "prompt[" + std::to_string(i) + "] must be a string or token ids",
                      "invalid_request_error", "prompt");
          return false;
        }
      }
    } else {
      OpenAIError(res, 400, "'prompt' must be a string, a list of strings or token ids", "invalid_request_error",
                  "prompt");
      return false;
    }
    if (c.prompt.empty()) {
      OpenAIError(res, 400, "'prompt' must not be empty", "invalid_request_error", "prompt");
      return false;
    }
  }
  c.prompt_tokens = id_tokens > 0 ? id_tokens : std::max<int64_t>(1, ApproxTokens(c.prompt.size()));
  const char* limit_key = body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (body.contains(limit_key) && !body[limit_key].is_null()) {
    if (!body[limit_key].is_number_integer() || body[limit_key].get<int64_t>() < 1) {
      OpenAIError(res, 400, std::string("'") + limit_key + "' must be a positive integer", "invalid_request_error",
                  limit_key);
      return false;
    }
    c.max_tokens = body[limit_key].get<int64_t>();
  } else {
    c.max_tokens = o.max_tokens_default;
  }
  if (body.contains("stream") && !body["stream"].is_null()) {
    if (!body["stream"].is_boolean()) {
      OpenAIError(res, 400, "'stream' must be a boolean", "invalid_request_error", "stream");
      return false;
    }
    c.stream = body["stream"].get<bool>();
  }
  if (body.contains("stream_options") && body["stream_options"].is_object()) {
    c.include_usage = body["stream_options"].value("include_usage", false);
  }
  if (body.contains("cache_salt") && body["cache_salt"].is_string()) c.cache_salt = body["cache_salt"].get<std::string>();
  if (body.contains("kv_transfer_params") && body["kv_transfer_params"].is_object())
    c.remote_decode = body["kv_transfer_params"].value("do_remote_decode", false) == true;
  return true;
}

// The APIs the simulator serves: OpenAI's two, Anthropic Messages (as vLLM serves
// /v1/messages), vLLM's token-in /inference/v1/generate and SGLang's native /generate.
enum class Api { kCompletions, kChat, kMessages, kVllmGenerate, kSglangGenerate };

// A positive integer member of `obj` (absent or null: `dflt`); false after answering 400.
bool PositiveInt(const Json& obj, const char* key, int64_t dflt, int64_t& out, httplib::Response& res) {
  out = dflt;
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) return true;
  if (!obj[key].is_number_integer() || obj[key].get<int64_t>() < 1) {
    OpenAIError(res, 400, std::string("'") + key + "' must be a positive integer", "invalid_request_error", key);
    return false;
  }
  out = obj[key].get<int64_t>();
  return true;
}

// The non-OpenAI APIs: the body read by libepp's parser for the API (what an EPP reads of it),
// plus the fields only the server needs (the output limit, the adapter).
bool ParseNativeCall(Api api, const Json& body, std::string_view raw, const SimHttpOptions& o, ParsedCall& c,
                     InferenceRequest& parsed, httplib::Response& res) {
  const RequestParser parser = api == Api::kMessages       ? RequestParser::kAnthropic
                               : api == Api::kVllmGenerate ? RequestParser::kVllmHttp
                                                           : RequestParser::kSglangHttp;
  const char* path = api == Api::kMessages ? "/v1/messages" : api == Api::kVllmGenerate ? "/inference/v1/generate" : "/generate";
  absl::StatusOr<InferenceRequest> r = ParseRequestWith(parser, path, raw);
  if (!r.ok()) {
    OpenAIError(res, 400, std::string(r.status().message()), "invalid_request_error");
    return false;
  }
  parsed = *std::move(r);
  const auto& p = o.params;
  c.model = parsed.model;
  if (api == Api::kSglangGenerate && body.contains("lora_path") && body["lora_path"].is_string())
    c.model = body["lora_path"].get<std::string>();  // SGLang picks an adapter by lora_path
  if (c.model.empty()) c.model = p.models.front();  // the served model, as vLLM and SGLang default
  const bool base = std::find(p.models.begin(), p.models.end(), c.model) != p.models.end();
  const bool lora = std::find(p.loras.begin(), p.loras.end(), c.model) != p.loras.end();
  if (!base && !lora) {
    OpenAIError(res, 404, "The model '" + c.model + "' does not exist.", "NotFoundError", "model");
    return false;
  }
  if (lora) c.adapter = c.model;
  if (api == Api::kSglangGenerate && parsed.token_ids.empty() && body.contains("input_ids")) {
    OpenAIError(res, 400, "the simulator serves one prompt per /generate request, not a batch", "invalid_request_error",
                "input_ids");
    return false;
  }
  if (api == Api::kSglangGenerate && body.contains("text") && body["text"].is_array()) {
    OpenAIError(res, 400, "the simulator serves one prompt per /generate request, not a batch", "invalid_request_error", "text");
    return false;
  }
  c.prompt = parsed.prompt;
  c.prompt_tokens = std::max<int64_t>(1, parsed.prompt_tokens);
  c.stream = parsed.stream;
  c.cache_salt = parsed.cache_salt;
  switch (api) {
    case Api::kMessages:
      // Anthropic requires max_tokens; its streams always report usage.
      if (!body.contains("max_tokens")) {
        OpenAIError(res, 400, "max_tokens: Field required", "invalid_request_error", "max_tokens");
        return false;
      }
      if (!PositiveInt(body, "max_tokens", o.max_tokens_default, c.max_tokens, res)) return false;
      c.include_usage = true;
      break;
    case Api::kVllmGenerate: {
      const Json sp = body.contains("sampling_params") ? body["sampling_params"] : Json::object();
      if (!PositiveInt(sp, "max_tokens", o.max_tokens_default, c.max_tokens, res)) return false;
      if (body.contains("stream_options") && body["stream_options"].is_object())
        c.include_usage = body["stream_options"].value("include_usage", false);
      break;
    }
    case Api::kSglangGenerate: {
      const Json sp = body.contains("sampling_params") ? body["sampling_params"] : Json::object();
      if (!PositiveInt(sp, "max_new_tokens", o.max_tokens_default, c.max_tokens, res)) return false;
      c.include_usage = true;  // meta_info carries the counts
      break;
    }
    default: break;
  }
  return true;
}

// The prefill request llm-d's sidecar (NIXL v2) sends for a decode request: the same body with
// stream off, every token limit 1, and kv_transfer_params asking the prefiller to keep the KV for
// a remote decoder.
Json PrefillBody(const Json& body) {
  Json p = body;
  p["stream"] = false;
  p.erase("stream_options");
  for (const char* k : {"max_tokens", "max_completion_tokens", "min_tokens"}) p[k] = 1;
  p["kv_transfer_params"] = {{"do_remote_decode", true}, {"do_remote_prefill", false}, {"remote_engine_id", nullptr},
                             {"remote_block_ids", nullptr}, {"remote_host", nullptr}, {"remote_port", nullptr}};
  return p;
}

// "ip:port" or "[v6]:port" -> (host, port); port 0 when malformed.
std::pair<std::string, int> SplitHostPort(const std::string& hp) {
  const size_t colon = hp.rfind(':');
  if (colon == std::string::npos || colon == 0) return {"", 0};
  std::string host = hp.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = 0;
  for (size_t i = colon + 1; i < hp.size(); ++i) {
    if (hp[i] < '0' || hp[i] > '9' || port > 65535) return {"", 0};
    port = port * 10 + (hp[i] - '0');
  }
  return {host, port > 0 && port <= 65535 ? port : 0};
}

// Chained hashes of the full blocks of `tokens` (block_size tokens each), from `seed`.
std::vector<uint64_t> TokenBlockHashes(const std::vector<uint32_t>& tokens, int block_size, uint64_t seed) {
  std::vector<uint64_t> out;
  const size_t bs = static_cast<size_t>(std::max(1, block_size));
  uint64_t h = seed;
  for (size_t i = 0; i + bs <= tokens.size(); i += bs) {
    h = XXH3_64bits_withSeed(tokens.data() + i, bs * sizeof(uint32_t), h);
    out.push_back(h);
  }
  return out;
}

}  // namespace

struct SimHttpServer::Impl {
  SimHttpOptions o;
  std::unique_ptr<SimServer> sim;
  std::mutex mu;
  std::condition_variable progressed;  // streaming handlers wait here
  // Non-streaming handlers wait on their own condition variable, woken by their request's
  // events only: one shared one would wake every waiting handler on every event.
  absl::flat_hash_map<uint64_t, std::condition_variable*> waiters;
  int streams = 0;
  std::condition_variable wake;        // the driver waits here
  std::atomic<bool> stopping{false};
  Clock::time_point t0 = Clock::now();
  uint64_t next_id = 1;
  int inflight = 0;
  std::vector<SimEvent> events;  // scratch for AdvanceLocked
  std::mt19937_64 rng;
  httplib::Server http;
  std::thread driver, server;
  int port = 0;
  // The DCGM exporter's listener (SimHttpOptions::dcgm_port), when there is one.
  std::unique_ptr<httplib::Server> dcgm;
  std::thread dcgm_thread;
  int dcgm_port = -1;
  // P/D counters (SimHttpOptions::role).
  std::atomic<uint64_t> prefill_hops{0}, prefill_hop_errors{0}, kv_transfer_bytes{0}, remote_prefills{0};
  std::atomic<int64_t> kv_transfer_us{0};  // simulated
  std::unique_ptr<KvEventPublisher> kv;    // SimHttpOptions::kv_events_endpoint
  std::atomic<uint64_t> next_render_id{1}, render_calls{0};
  std::shared_ptr<const Tokenizer> real;  // SimHttpOptions::tokenizer named a tokenizer.json
  std::shared_ptr<const ChatTemplate> chat_template;  // the chat template beside it, if any

  // Sends what the cache did since the last call as one batch. REQUIRES: mu held.
  void FlushKvEventsLocked() {
    if (!kv) return;
    std::vector<KvEvent> events = sim->TakeKvEvents();
    if (!events.empty()) kv->Publish(std::move(events));
  }

  // The simulator's own P/D counters, in every dialect.
  std::string RolesText() const {
    std::string t;
    auto counter = [&](const char* name, const char* help, const std::string& v) {
      absl::StrAppend(&t, "# HELP ", name, " ", help, "\n# TYPE ", name, " counter\n", name, " ", v, "\n");
    };
    absl::StrAppend(&t, "# HELP epp_sim_role The simulator's llm-d role (label role).\n# TYPE epp_sim_role gauge\nepp_sim_role{role=\"",
                    o.role, "\"} 1\n");
    counter("epp_sim_prefill_hops_total", "Decode requests whose prefill ran on the server in x-prefiller-host-port.",
            absl::StrCat(prefill_hops.load()));
    counter("epp_sim_prefill_hop_errors_total", "Prefill hops that failed (the client got the prefill's error).",
            absl::StrCat(prefill_hop_errors.load()));
    counter("epp_sim_kv_transfer_bytes_total", "KV bytes received from prefill servers (simulated).",
            absl::StrCat(kv_transfer_bytes.load()));
    counter("epp_sim_kv_transfer_seconds_total", "Simulated KV transfer time from prefill servers.",
            absl::StrCat(static_cast<double>(kv_transfer_us.load()) / 1e6));
    counter("epp_sim_remote_prefills_total", "Prefill-only requests served for a remote decoder (kv_transfer_params).",
            absl::StrCat(remote_prefills.load()));
    counter("epp_sim_tokenize_calls_total", "Render and tokenize requests answered (/v1/*/render, /tokenize).",
            absl::StrCat(render_calls.load()));
    return t;
  }

  bool DecodeRole() const { return o.role == "decode" || o.role == "both"; }

  // Runs the prefill on `hop` for a decode request. Returns false with `res` set to the answer
  // for the client when the prefill failed.
  bool PrefillHop(const std::string& hop, const httplib::Request& req, const Json& body, ParsedCall& call,
                  httplib::Response& res) {
    const auto [host, hport] = SplitHostPort(hop);
    if (hport == 0) {
      ++prefill_hop_errors;
      OpenAIError(res, 400, "x-prefiller-host-port: expected ip:port, got '" + hop + "'", "invalid_request_error");
      return false;
    }
    httplib::Client cli(host, hport);
    cli.set_connection_timeout(5);
    cli.set_read_timeout(120);
    httplib::Headers headers;
    if (req.has_header("x-request-id")) headers.emplace("x-request-id", req.get_header_value("x-request-id"));
    httplib::Result r = cli.Post(req.path, headers, PrefillBody(body).dump(), "application/json");
    if (!r) {
      ++prefill_hop_errors;
      OpenAIError(res, 502, "prefill server " + hop + " unreachable: " + httplib::to_string(r.error()), "server_error");
      return false;
    }
    if (r->status < 200 || r->status >= 300) {
      // As llm-d's sidecar since mid 2026: the prefill's own answer goes back to the client.
      ++prefill_hop_errors;
      res.status = r->status;
      res.set_content(r->body, r->get_header_value("content-type").empty() ? "application/json" : r->get_header_value("content-type"));
      return false;
    }
    ++prefill_hops;
    Json answer = Json::parse(r->body, nullptr, false);
    if (answer.is_object() && answer.contains("usage") && answer["usage"].is_object()) {
      const Json& u = answer["usage"];
      if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object() &&
          u["prompt_tokens_details"].contains("cached_tokens") && u["prompt_tokens_details"]["cached_tokens"].is_number_integer())
        call.prefiller_cached = u["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
    }
    return true;
  }

  int64_t VirtualNow() const {
    const double real_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    return static_cast<int64_t>(real_us / o.time_scale);
  }
  Clock::time_point RealAt(int64_t v) const {
    return t0 + std::chrono::microseconds(static_cast<int64_t>(static_cast<double>(v) * o.time_scale));
  }

  // Moves the simulation to now; wakes waiting handlers when anything happened. REQUIRES: mu held.
  bool AdvanceLocked() {
    events.clear();
    sim->AdvanceTo(std::max(sim->now_us(), VirtualNow()), &events);
    FlushKvEventsLocked();
    if (events.empty()) return false;
    for (const SimEvent& e : events) {
      if (auto it = waiters.find(e.id); it != waiters.end()) it->second->notify_one();
    }
    if (streams > 0) progressed.notify_all();
    return true;
  }

  void WakeAllLocked() {
    for (auto& [id, cv] : waiters) cv->notify_one();
    progressed.notify_all();
  }

  void Drive() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stopping) {
      AdvanceLocked();
      if (streams > 0) progressed.notify_all();  // streams poll progress between events
      const int64_t next = sim->NextEventTime();
      auto deadline = next == kNever ? Clock::now() + std::chrono::seconds(1) : RealAt(next);
      if (streams > 0) deadline = std::min(deadline, Clock::now() + std::chrono::milliseconds(10));
      wake.wait_until(lock, deadline);
    }
    WakeAllLocked();
  }

  bool Roll(double rate) {
    if (rate <= 0) return false;
    std::lock_guard<std::mutex> lock(mu);
    return std::uniform_real_distribution<double>(0, 1)(rng) < rate;
  }

  static void Drop(httplib::Response& res) {
    res.set_content_provider(
        1024, "text/plain", [](size_t, size_t, httplib::DataSink&) { return false; });
  }

  // The ids of OutputText's words (one token a word), for the token-out APIs.
  Json OutputIds(const ParsedCall& c, int64_t from, int64_t to) const {
    std::mt19937_64 g(o.params.seed ^ XXH3_64bits(c.prompt.data(), c.prompt.size()));
    Json out = Json::array();
    for (int64_t i = 0; i < to; ++i) {
      const uint64_t w = g() % (sizeof(kWords) / sizeof(kWords[0]));
      if (i >= from) out.push_back(1000 + w);
    }
    return out;
  }

  std::string OutputText(const ParsedCall& c, int64_t from, int64_t to) const {
    std::mt19937_64 g(o.params.seed ^ XXH3_64bits(c.prompt.data(), c.prompt.size()));
    std::string out;
    for (int64_t i = 0; i < to; ++i) {
      const char* w = kWords[g() % (sizeof(kWords) / sizeof(kWords[0]))];
      if (i >= from) out += std::string(i == 0 ? "" : " ") + w;
    }
    return out;
  }

  std::vector<uint32_t> Tokenize(std::string_view text) const {
    if (real) {  // a chat's canonical prompt, or a prompt of a batch: the text as it is
      absl::StatusOr<std::vector<uint32_t>> ids = real->Encode(text, /*add_special_tokens=*/false);
      return ids.ok() ? *std::move(ids) : std::vector<uint32_t>{};
    }
    return o.tokenizer == "words" ? WordTokenIds(text) : EstimateTokenIds(text);
  }
  // A request's ids as this server computes them: with a tokenizer.json, a completions prompt as
  // vLLM tokenizes it (BOS added, token ids passed through) and a chat rendered with the chat
  // template beside it and tokenized as vLLM does; a chat without a template, and everything
  // without a tokenizer.json, as its canonical prompt's text.
  std::vector<uint32_t> TokenizeRequest(bool chat, std::string_view body, std::string_view canonical_prompt) const {
    if (real && (!chat || chat_template)) {
      absl::StatusOr<TokenizedPrompt> p =
          TokenizeRequestBody(*real, chat ? "/v1/chat/completions" : "/v1/completions", body, chat_template.get());
      if (p.ok()) return std::move(p->ids);
    }
    return Tokenize(canonical_prompt);
  }

  // vLLM's render endpoints and /tokenize, with this server's tokenizer over the canonical
  // prompt (the ids its KV events carry for the same request).
  void HandleTokenize(const httplib::Request& req, httplib::Response& res, TokenizeEndpoint ep) {
    Json body = Json::parse(req.body, nullptr, false);
    if (!body.is_object()) return OpenAIError(res, 400, "request body must be a JSON object", "invalid_request_error");
    const bool chat = ep == TokenizeEndpoint::kChatRender || (ep == TokenizeEndpoint::kTokenize && body.contains("messages"));
    if (body.contains("model") && body["model"].is_string()) {
      const std::string m = body["model"].get<std::string>();
      const auto& ms = o.params.models;
      const auto& ls = o.params.loras;
      if (std::find(ms.begin(), ms.end(), m) == ms.end() && std::find(ls.begin(), ls.end(), m) == ls.end())
        return OpenAIError(res, 404, "The model `" + m + "` does not exist.", "NotFoundError", "model");
    } else {
      body["model"] = o.params.models.front();  // vLLM's tokenize and render default to the served model
    }
    absl::StatusOr<InferenceRequest> canonical =
        ParseOpenAIRequest(chat ? "/v1/chat/completions" : "/v1/completions", body.dump());
    if (!canonical.ok()) return OpenAIError(res, 400, std::string(canonical.status().message()), "invalid_request_error");
    const std::string model = body["model"].get<std::string>();
    auto generate = [&](const std::vector<uint32_t>& ids) {
      return Json{{"request_id", "sim-render-" + std::to_string(next_render_id++)},
                  {"token_ids", ids},
                  {"features", nullptr},
                  {"sampling_params", Json::object()},
                  {"model", model},
                  {"stream", false},
                  {"cache_salt", canonical->cache_salt.empty() ? Json(nullptr) : Json(canonical->cache_salt)},
                  {"priority", 0},
                  {"kv_transfer_params", nullptr}};
    };
    ++render_calls;
    switch (ep) {
      case TokenizeEndpoint::kChatRender:
        return res.set_content(generate(TokenizeRequest(true, req.body, canonical->prompt)).dump(), "application/json");
      case TokenizeEndpoint::kCompletionsRender: {
        Json out = Json::array();
        const Json& pr = body["prompt"];
        if (pr.is_array() && pr.size() > 1 && pr[0].is_string()) {
          for (const Json& p : pr) out.push_back(generate(Tokenize(p.is_string() ? p.get<std::string>() : "")));
        } else {
          out.push_back(generate(TokenizeRequest(false, body.dump(), canonical->prompt)));
        }
        return res.set_content(out.dump(), "application/json");
      }
      case TokenizeEndpoint::kTokenize: {
        const std::vector<uint32_t> ids = TokenizeRequest(chat, body.dump(), canonical->prompt);
        return res.set_content(Json{{"count", ids.size()}, {"max_model_len", 131072}, {"tokens", ids}, {"token_strs", nullptr}}.dump(),
                               "application/json");
      }
    }
  }

  // The answer of a non-OpenAI API: Anthropic's message (usage input_tokens, output_tokens,
  // cache_read_input_tokens), vLLM's GenerateResponse (token ids; with an OpenAI `usage` added:
  // vLLM's own has none, and llm-d's vllmhttp-parser reads one when a server sends it), SGLang's
  // {text, output_ids, meta_info}.
  Json NativeResponse(Api api, const ParsedCall& c, const std::string& rid, const SimRequestResult& r,
                      const std::string& text) const {
    const int64_t cached = c.prefiller_cached.value_or(r.cached_tokens);
    switch (api) {
      case Api::kMessages:
        return Json{{"id", rid}, {"type", "message"}, {"role", "assistant"}, {"model", c.model},
                    {"content", Json::array({Json{{"type", "text"}, {"text", text}}})},
                    {"stop_reason", "max_tokens"}, {"stop_sequence", nullptr},
                    {"usage", {{"input_tokens", r.prompt_tokens}, {"output_tokens", r.output_tokens},
                               {"cache_creation_input_tokens", 0}, {"cache_read_input_tokens", cached}}}};
      case Api::kVllmGenerate:
        return Json{{"request_id", rid},
                    {"choices", Json::array({Json{{"index", 0}, {"logprobs", nullptr}, {"finish_reason", "length"},
                                                  {"token_ids", OutputIds(c, 0, r.output_tokens)}}})},
                    {"prompt_logprobs", nullptr}, {"kv_transfer_params", nullptr},
                    {"usage", {{"prompt_tokens", r.prompt_tokens}, {"completion_tokens", r.output_tokens},
                               {"total_tokens", r.prompt_tokens + r.output_tokens},
                               {"prompt_tokens_details", {{"cached_tokens", cached}}}}}};
      default:
        return Json{{"text", text}, {"output_ids", OutputIds(c, 0, r.output_tokens)},
                    {"meta_info", {{"id", rid}, {"finish_reason", {{"type", "length"}, {"length", r.output_tokens}}},
                                   {"prompt_tokens", r.prompt_tokens}, {"completion_tokens", r.output_tokens},
                                   {"cached_tokens", cached}}}};
    }
  }

  // The stream events of a non-OpenAI API for tokens [from, to), and its ending once `r` (the
  // result) is there: Anthropic's event sequence (message_start with the prompt's usage,
  // content_block_start/delta/stop, message_delta with the usage, message_stop), vLLM's
  // GenerateResponse chunks (a usage chunk with stream_options.include_usage) and [DONE], SGLang's
  // cumulative chunks whose meta_info gets a finish_reason on the last.
  std::string NativeStreamEvents(Api api, const ParsedCall& c, const std::string& rid, int64_t from, int64_t to,
                                 const SimRequestResult* r) const {
    std::string out;
    auto event = [&](const char* name, const Json& data) {
      if (name != nullptr) out += std::string("event: ") + name + "\n";
      out += "data: " + data.dump() + "\n\n";
    };
    const int64_t prompt = r ? r->prompt_tokens : c.prompt_tokens;
    const int64_t cached = r ? c.prefiller_cached.value_or(r->cached_tokens) : c.cached_at_submit;
    switch (api) {
      case Api::kMessages: {
        if (from == 0 && (to > 0 || r)) {
          event("message_start",
                Json{{"type", "message_start"},
                     {"message", {{"id", rid}, {"type", "message"}, {"role", "assistant"}, {"model", c.model},
                                  {"content", Json::array()}, {"stop_reason", nullptr}, {"stop_sequence", nullptr},
                                  {"usage", {{"input_tokens", c.prompt_tokens}, {"output_tokens", 0},
                                             {"cache_read_input_tokens", c.cached_at_submit}}}}}});
          event("content_block_start",
                Json{{"type", "content_block_start"}, {"index", 0}, {"content_block", {{"type", "text"}, {"text", ""}}}});
        }
        for (int64_t i = from; i < to; ++i)
          event("content_block_delta", Json{{"type", "content_block_delta"}, {"index", 0},
                                            {"delta", {{"type", "text_delta"}, {"text", OutputText(c, i, i + 1)}}}});
        if (r) {
          event("content_block_stop", Json{{"type", "content_block_stop"}, {"index", 0}});
          // vLLM repeats the prompt's count here; Anthropic's API sends output_tokens (and, lately,
          // the cache counters) too.
          event("message_delta", Json{{"type", "message_delta"},
                                      {"delta", {{"stop_reason", "max_tokens"}, {"stop_sequence", nullptr}}},
                                      {"usage", {{"input_tokens", prompt}, {"output_tokens", r->output_tokens},
                                                 {"cache_read_input_tokens", cached}}}});
          event("message_stop", Json{{"type", "message_stop"}});
        }
        return out;
      }
      case Api::kVllmGenerate: {
        for (int64_t i = from; i < to; ++i) {
          const bool last = r && i + 1 == to;
          event(nullptr, Json{{"request_id", rid},
                              {"choices", Json::array({Json{{"index", 0}, {"logprobs", nullptr},
                                                            {"finish_reason", last ? Json("length") : Json(nullptr)},
                                                            {"token_ids", OutputIds(c, i, i + 1)}}})}});
        }
        if (r) {
          if (c.include_usage)
            event(nullptr, Json{{"request_id", rid}, {"choices", Json::array()},
                                {"usage", {{"prompt_tokens", prompt}, {"completion_tokens", r->output_tokens},
                                           {"total_tokens", prompt + r->output_tokens},
                                           {"prompt_tokens_details", {{"cached_tokens", cached}}}}}});
          out += "data: [DONE]\n\n";
        }
        return out;
      }
      default: {
        auto chunk = [&](int64_t n, bool fin) {
          event(nullptr, Json{{"text", OutputText(c, 0, n)}, {"output_ids", OutputIds(c, 0, n)},
                              {"meta_info", {{"id", rid},
                                             {"finish_reason", fin ? Json{{"type", "length"}, {"length", n}} : Json(nullptr)},
                                             {"prompt_tokens", prompt}, {"completion_tokens", n},
                                             {"cached_tokens", cached}}}});
        };
        for (int64_t i = from; i < to; ++i) chunk(i + 1, r && i + 1 == to);
        if (r) {
          if (from == to) chunk(to, true);
          out += "data: [DONE]\n\n";
        }
        return out;
      }
    }
  }

  void HandleInference(const httplib::Request& req, httplib::Response& res, Api api) {
    if (Roll(o.drop_rate)) return Drop(res);
    const bool chat = api == Api::kChat;
    const bool openai = api == Api::kChat || api == Api::kCompletions;
    Json body = Json::parse(req.body, nullptr, false);
    if (body.is_discarded()) {
      return OpenAIError(res, 400, "request body is not valid JSON", "invalid_request_error");
    }
    auto call = std::make_shared<ParsedCall>();
    InferenceRequest native;  // the other APIs' body as libepp reads it
    if (openai) {
      if (!ParseCall(body, chat, o, *call, res)) return;
    } else if (!ParseNativeCall(api, body, req.body, o, *call, native, res)) {
      return;
    }
    if (Roll(o.fail_rate)) return OpenAIError(res, 500, "simulated server failure (--fail-rate)", "server_error");
    if (call->remote_decode) ++remote_prefills;
    const std::string hop = req.get_header_value("x-prefiller-host-port");
    const bool remote_prefill = openai && !hop.empty() && DecodeRole() && !call->remote_decode;
    if (remote_prefill && !PrefillHop(hop, req, body, *call, res)) return;
    SimRequest sr;
    const bool words = o.tokenizer == "words" || real != nullptr;  // blocks of real token ids
    if ((kv || words) && !openai) {
      // A token-in request's ids are what the engine caches; Anthropic Messages are rendered as
      // the chat vLLM converts them to; SGLang text as its text.
      if (!native.token_ids.empty()) {
        sr.token_ids = native.token_ids;
      } else if (api == Api::kMessages) {
        absl::StatusOr<std::string> converted = AnthropicToChatCompletions(req.body);
        sr.token_ids = converted.ok() ? TokenizeRequest(true, *converted, call->prompt) : Tokenize(call->prompt);
      } else {
        sr.token_ids = Tokenize(call->prompt);
      }
      if (!sr.token_ids.empty()) call->prompt_tokens = static_cast<int64_t>(sr.token_ids.size());
    }
    if ((kv || words) && openai) {
      // Token ids of the canonical prompt libepp's parser builds: 4 characters a token
      // (`estimate`, what an EPP tokenizing that way sees) or the words tokenizer (what only an
      // EPP that asks this server's render endpoints sees). They fill the KV events.
      absl::StatusOr<InferenceRequest> canonical =
          ParseOpenAIRequest(chat ? "/v1/chat/completions" : "/v1/completions", req.body);
      if (canonical.ok() && !canonical->prompt.empty()) {
        call->prompt = canonical->prompt;
        sr.token_ids = TokenizeRequest(chat, req.body, call->prompt);
        call->prompt_tokens = static_cast<int64_t>(sr.token_ids.size());
      }
    }
    sr.adapter = call->adapter;
    sr.prompt_tokens = call->prompt_tokens;
    sr.output_tokens = call->max_tokens;
    if (words && !sr.token_ids.empty()) {
      // Blocks are token blocks here (a block of 4 x block_size characters is not one).
      sr.block_hashes = TokenBlockHashes(sr.token_ids, o.params.block_size, PrefixSeed(call->model, call->cache_salt));
    } else {
      sr.block_hashes = ChainedBlockHashes(call->prompt, static_cast<size_t>(o.params.block_size) * kCharsPerToken,
                                           PrefixSeed(call->model, call->cache_salt));
    }
    if (static_cast<int64_t>(sr.block_hashes.size()) * o.params.block_size > sr.prompt_tokens) {
      sr.block_hashes.resize(sr.prompt_tokens / o.params.block_size);
    }
    if (remote_prefill) {
      // The KV of the prompt tokens this server does not hold comes over the link.
      int64_t local = 0;
      {
        std::lock_guard<std::mutex> lock(mu);
        local = std::min(sr.prompt_tokens, sim->CachedPrefixBlocks(sr.block_hashes) * o.params.block_size);
      }
      sr.remote_prefilled_tokens = sr.prompt_tokens - local;
      const double bytes = static_cast<double>(sr.remote_prefilled_tokens) * static_cast<double>(o.kv_bytes_per_token);
      const int64_t transfer_us = static_cast<int64_t>(bytes / (o.kv_link_gbytes_per_s * 1e9) * 1e6);
      kv_transfer_bytes += static_cast<uint64_t>(bytes);
      kv_transfer_us += transfer_us;
      std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(static_cast<double>(transfer_us) * o.time_scale)));
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      sr.id = next_id++;
      call->cached_at_submit =
          std::min(sr.prompt_tokens, sim->CachedPrefixBlocks(sr.block_hashes) * o.params.block_size);
      absl::Status st = sim->Submit(sr, std::max(sim->now_us(), VirtualNow()));
      FlushKvEventsLocked();
      if (!st.ok()) return OpenAIError(res, 400, std::string(st.message()), "invalid_request_error");
      ++inflight;
      if (call->stream) ++streams;
    }
    wake.notify_all();
    const uint64_t id = sr.id;
    const char* rid_prefix = api == Api::kChat ? "chatcmpl-" : api == Api::kCompletions ? "cmpl-"
                             : api == Api::kMessages ? "msg_" : "gen-";
    const std::string rid = rid_prefix + std::to_string(id);
    const int64_t created = static_cast<int64_t>(WallSeconds());
    auto usage = [call](const SimRequestResult& r) {
      // After a prefill hop the sidecar reports the prefiller's cached tokens.
      return Json{{"prompt_tokens", r.prompt_tokens},
                  {"completion_tokens", r.output_tokens},
                  {"total_tokens", r.prompt_tokens + r.output_tokens},
                  {"prompt_tokens_details", {{"cached_tokens", call->prefiller_cached.value_or(r.cached_tokens)}}}};
    };
    if (!call->stream) {
      std::optional<SimRequestResult> result;
      {
        // The handler moves the clock itself when its answer is due, rather than waiting for the
        // driver thread to come round: at small time scales that round trip dominates latency.
        std::condition_variable done;
        std::unique_lock<std::mutex> lock(mu);
        waiters[id] = &done;
        while (!stopping && !(result = sim->TakeResult(id))) {
          if (AdvanceLocked()) continue;
          const int64_t next = sim->NextEventTime();
          done.wait_until(lock, next == kNever ? Clock::now() + std::chrono::milliseconds(50) : RealAt(next));
        }
        waiters.erase(id);
        --inflight;
      }
      if (!result) return OpenAIError(res, 503, "simulator shutting down", "server_error");
      if (result->rejected) return OpenAIError(res, 400, "prompt does not fit in the KV cache", "invalid_request_error");
      std::string text = OutputText(*call, 0, result->output_tokens);
      if (!openai) return res.set_content(NativeResponse(api, *call, rid, *result, text).dump(), "application/json");
      Json choice = chat ? Json{{"index", 0}, {"message", {{"role", "assistant"}, {"content", text}}}, {"logprobs", nullptr},
                                {"finish_reason", "length"}}
                         : Json{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", "length"}};
      Json out = {{"id", rid}, {"object", chat ? "chat.completion" : "text_completion"}, {"created", created},
                  {"model", call->model}, {"choices", Json::array({choice})}, {"usage", usage(*result)}};
      if (call->remote_decode) {
        // What vLLM's NIXL connector hands the decoder: where to read the prompt's KV blocks.
        const int64_t blocks = (result->prompt_tokens + o.params.block_size - 1) / o.params.block_size;
        Json ids = Json::array();
        for (int64_t b = 0; b < blocks; ++b) ids.push_back(b);
        out["kv_transfer_params"] = {{"do_remote_decode", false}, {"do_remote_prefill", true},
                                     {"remote_engine_id", "epp-sim-" + std::to_string(port)}, {"remote_block_ids", ids},
                                     {"remote_host", o.host}, {"remote_port", port}, {"tp_size", 1}};
      }
      res.set_content(out.dump(), "application/json");
      return;
    }
    // Streaming: one SSE chunk per generated token as the simulation produces them.
    auto emitted = std::make_shared<int64_t>(0);
    auto finished = std::make_shared<bool>(false);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, call, id, rid, created, chat, api, openai, emitted, finished, usage](size_t, httplib::DataSink& sink) {
          if (*finished) {
            sink.done();
            return true;
          }
          std::optional<SimRequestResult> result;
          int64_t progress = 0;
          {
            std::unique_lock<std::mutex> lock(mu);
            progressed.wait(lock, [&] {
              if (stopping) return true;
              progress = sim->Progress(id).value_or(0);
              return progress > *emitted;
            });
            if (stopping) return false;
            result = sim->TakeResult(id);
          }
          if (result && result->rejected) {
            std::string s = api == Api::kMessages
                                ? "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\","
                                  "\"message\":\"prompt does not fit in the KV cache\"}}\n\n"
                                : "data: {\"error\":{\"message\":\"prompt does not fit in the KV cache\"}}\n\n";
            sink.write(s.data(), s.size());
            *finished = true;
            return true;
          }
          std::string payload;
          const int64_t total = call->max_tokens;
          if (!openai) {
            payload = NativeStreamEvents(api, *call, rid, *emitted, progress, result ? &*result : nullptr);
            *emitted = progress;
            if (result) *finished = true;
            if (!payload.empty() && !sink.write(payload.data(), payload.size())) return false;
            return true;
          }
          for (int64_t i = *emitted; i < progress; ++i) {
            std::string piece = OutputText(*call, i, i + 1);
            const bool last = i + 1 == total;
            Json choice = chat ? Json{{"index", 0},
                                      {"delta", i == 0 ? Json{{"role", "assistant"}, {"content", piece}}
                                                       : Json{{"content", piece}}},
                                      {"logprobs", nullptr},
                                      {"finish_reason", last ? Json("length") : Json(nullptr)}}
                               : Json{{"index", 0}, {"text", piece}, {"logprobs", nullptr},
                                      {"finish_reason", last ? Json("length") : Json(nullptr)}};
            Json chunk = {{"id", rid}, {"object", chat ? "chat.completion.chunk" : "text_completion"},
                          {"created", created}, {"model", call->model}, {"choices", Json::array({choice})}};
            payload += "data: " + chunk.dump() + "\n\n";
          }
          *emitted = progress;
          if (result) {
            if (call->include_usage) {
              Json chunk = {{"id", rid}, {"object", chat ? "chat.completion.chunk" : "text_completion"},
                            {"created", created}, {"model", call->model}, {"choices", Json::array()},
                            {"usage", usage(*result)}};
              payload += "data: " + chunk.dump() + "\n\n";
            }
            payload += "data: [DONE]\n\n";
            *finished = true;
          }
          if (!payload.empty() && !sink.write(payload.data(), payload.size())) return false;
          return true;
        },
        [this](bool) {
          // Runs once the stream ends for any reason; an abandoned request still runs to completion
          // in the simulation (as in a real engine without abort), its result is simply not read.
          std::lock_guard<std::mutex> lock(mu);
          --inflight;
          --streams;
        });
  }

  void Setup() {
    http.new_task_queue = [n = o.threads] { return new httplib::ThreadPool(static_cast<size_t>(n)); };
    // Headers and body go out in separate writes; without TCP_NODELAY, Nagle plus the client's
    // delayed ACK adds ~40 ms to answers.
    http.set_tcp_nodelay(true);
    // An idle kept-alive connection holds a worker until this passes, and Stop() waits for the
    // workers: 1 s instead of httplib's 5 bounds a stop while clients keep connections open
    // (a scraper, token-producer). Clients reconnect when a kept connection was closed.
    http.set_keep_alive_timeout(1);
    http.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("", "text/plain"); });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      if (o.metrics_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.metrics_delay_ms));
      if (Roll(o.drop_rate)) return Drop(res);
      std::string text;
      {
        std::lock_guard<std::mutex> lock(mu);
        sim->AdvanceTo(std::max(sim->now_us(), VirtualNow()));
        FlushKvEventsLocked();
        text = RenderSimMetrics(o.params, sim->Snapshot(), WallSeconds());
      }
      text += RolesText();
      if (o.metrics_malformed) {
        size_t cut = text.find('\n', text.size() / 2);
        text.insert(cut == std::string::npos ? text.size() : cut + 1, "...\n");
      }
      res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      Json data = Json::array();
      const int64_t created = static_cast<int64_t>(WallSeconds());
      for (const std::string& m : o.params.models) {
        data.push_back({{"id", m}, {"object", "model"}, {"created", created}, {"owned_by", "epp-sim"}, {"root", m},
                        {"parent", nullptr}});
      }
      for (const std::string& l : o.params.loras) {
        data.push_back({{"id", l}, {"object", "model"}, {"created", created}, {"owned_by", "epp-sim"}, {"root", l},
                        {"parent", o.params.models.front()}});
      }
      res.set_content(Json{{"object", "list"}, {"data", data}}.dump(), "application/json");
    });
    http.Post("/v1/completions",
              [this](const httplib::Request& req, httplib::Response& res) { HandleInference(req, res, Api::kCompletions); });
    http.Post("/v1/messages",
              [this](const httplib::Request& req, httplib::Response& res) { HandleInference(req, res, Api::kMessages); });
    http.Post("/inference/v1/generate",
              [this](const httplib::Request& req, httplib::Response& res) { HandleInference(req, res, Api::kVllmGenerate); });
    http.Post("/generate",
              [this](const httplib::Request& req, httplib::Response& res) { HandleInference(req, res, Api::kSglangGenerate); });
    if (o.render_endpoints) {
      http.Post("/v1/completions/render", [this](const httplib::Request& req, httplib::Response& res) {
        HandleTokenize(req, res, TokenizeEndpoint::kCompletionsRender);
      });
      http.Post("/v1/chat/completions/render", [this](const httplib::Request& req, httplib::Response& res) {
        HandleTokenize(req, res, TokenizeEndpoint::kChatRender);
      });
    }
    http.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
      HandleTokenize(req, res, TokenizeEndpoint::kTokenize);
    });
    http.Post("/v1/chat/completions",
              [this](const httplib::Request& req, httplib::Response& res) { HandleInference(req, res, Api::kChat); });
  }
};

SimHttpServer::SimHttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

SimHttpServer::~SimHttpServer() { Stop(); }

absl::StatusOr<std::unique_ptr<SimHttpServer>> SimHttpServer::Start(const SimHttpOptions& options) {
  if (!(options.time_scale > 0)) return absl::InvalidArgumentError("simulator: time_scale must be > 0");
  if (options.fail_rate < 0 || options.fail_rate > 1) return absl::InvalidArgumentError("simulator: fail_rate must be in [0,1]");
  if (options.drop_rate < 0 || options.drop_rate > 1) return absl::InvalidArgumentError("simulator: drop_rate must be in [0,1]");
  if (options.port < 0 || options.port > 65535) return absl::InvalidArgumentError("simulator: port must be in [0,65535]");
  if (options.threads < 1) return absl::InvalidArgumentError("simulator: threads must be >= 1");
  if (options.max_tokens_default < 1) return absl::InvalidArgumentError("simulator: max_tokens_default must be >= 1");
  if (options.role != "both" && options.role != "decode" && options.role != "prefill" && options.role != "encode")
    return absl::InvalidArgumentError("simulator: role must be prefill, decode, encode or both, got '" + options.role + "'");
  if (!(options.kv_link_gbytes_per_s > 0) || !std::isfinite(options.kv_link_gbytes_per_s))
    return absl::InvalidArgumentError("simulator: kv_link_gbytes_per_s must be > 0");
  if (options.kv_bytes_per_token < 0) return absl::InvalidArgumentError("simulator: kv_bytes_per_token must be >= 0");
  std::shared_ptr<const Tokenizer> real;
  std::shared_ptr<const ChatTemplate> chat_template;
  if (options.tokenizer != "estimate" && options.tokenizer != "words") {
    absl::StatusOr<std::shared_ptr<const Tokenizer>> t = Tokenizer::FromPath(options.tokenizer);
    if (!t.ok())
      return absl::Status(t.status().code(), "simulator: tokenizer must be estimate, words or a tokenizer.json (or its "
                                             "directory): " + std::string(t.status().message()));
    real = *std::move(t);
    absl::StatusOr<std::shared_ptr<const ChatTemplate>> ct = ChatTemplate::FromPath(options.tokenizer);
    if (ct.ok()) chat_template = *std::move(ct);
    else if (ct.status().code() != absl::StatusCode::kNotFound)
      return absl::Status(ct.status().code(), "simulator: " + std::string(ct.status().message()));
  }
  SimParams params = options.params;
  params.kv_events = !options.kv_events_endpoint.empty();
  if (options.kv_events_endpoint.empty() && !options.kv_events_replay_endpoint.empty())
    return absl::InvalidArgumentError("simulator: a KV-event replay endpoint needs kv_events_endpoint");
  auto sim = SimServer::Create(params);
  if (!sim.ok()) return sim.status();
  auto impl = std::make_unique<Impl>();
  impl->o = options;
  impl->real = std::move(real);
  impl->chat_template = std::move(chat_template);
  impl->sim = *std::move(sim);
  impl->rng.seed(options.params.seed * 0x9E3779B97F4A7C15ull + 1);
  impl->Setup();
  // Debian's cpp-httplib is a compiled library whose listen backlog is fixed at 5: a burst of
  // connections beyond that has its SYNs dropped and retried a second later. Remember the
  // listening socket and widen its backlog (listen() again updates it on Linux).
  int listen_fd = -1;
  impl->http.set_socket_options([&listen_fd](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd = sock;
  });
  if (options.port == 0) {
    impl->port = impl->http.bind_to_any_port(options.host);
  } else {
    impl->port = impl->http.bind_to_port(options.host, options.port) ? options.port : -1;
  }
  if (impl->port > 0 && listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
  if (impl->port <= 0) {
    return absl::UnavailableError("simulator: cannot listen on " + options.host + ":" + std::to_string(options.port));
  }
  if (params.kv_events) {
    KvPublisherOptions kv;
    kv.endpoint = options.kv_events_endpoint;
    kv.replay_endpoint = options.kv_events_replay_endpoint;
    kv.connect = options.kv_events_connect;
    kv.topic = options.kv_events_topic.value_or(
        FormatKvTopic(options.host + ":" + std::to_string(impl->port), options.params.models.front()));
    kv.buffer_steps = options.kv_events_buffer_steps;
    kv.drop_rate = options.kv_events_drop_rate;
    kv.delay = std::chrono::milliseconds(options.kv_events_delay_ms);
    kv.seed = options.params.seed;
    auto pub = KvEventPublisher::Start(kv);
    if (!pub.ok()) return absl::Status(pub.status().code(), "simulator: " + std::string(pub.status().message()));
    impl->kv = *std::move(pub);
    impl->o.params.kv_events = true;
  }
  if (options.dcgm_port >= 0) {
    if (options.dcgm_port > 65535 || options.dcgm_path.empty() || options.dcgm_path.front() != '/')
      return absl::InvalidArgumentError("simulator: dcgm_port must be in [0,65535] and dcgm_path start with '/'");
    impl->dcgm = std::make_unique<httplib::Server>();
    impl->dcgm->set_keep_alive_timeout(1);
    Impl* self = impl.get();
    impl->dcgm->Get(options.dcgm_path, [self](const httplib::Request&, httplib::Response& res) {
      std::string text;
      {
        std::lock_guard<std::mutex> lock(self->mu);
        self->sim->AdvanceTo(std::max(self->sim->now_us(), self->VirtualNow()));
        text = RenderDcgmMetrics(self->o.params, self->sim->Snapshot(), self->o.dcgm);
      }
      res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
    });
    impl->dcgm_port = options.dcgm_port == 0 ? impl->dcgm->bind_to_any_port(options.host)
                                             : (impl->dcgm->bind_to_port(options.host, options.dcgm_port) ? options.dcgm_port : -1);
    if (impl->dcgm_port <= 0)
      return absl::UnavailableError("simulator: cannot listen on " + options.host + ":" + std::to_string(options.dcgm_port) +
                                    " for the DCGM exporter");
  }
  Impl* raw = impl.get();
  impl->driver = std::thread([raw] { raw->Drive(); });
  impl->server = std::thread([raw] { raw->http.listen_after_bind(); });
  // httplib's stop() does nothing until the listen loop runs; a Stop() right after Start() would
  // then leave the loop blocked in accept() forever. Return only once it runs.
  const auto give_up = Clock::now() + std::chrono::seconds(10);
  while (!impl->http.is_running()) {
    if (Clock::now() > give_up) {
      impl->stopping = true;
      impl->wake.notify_all();
      impl->driver.join();
      impl->server.detach();
      return absl::UnavailableError("simulator: the HTTP server did not start on " + options.host);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (impl->dcgm) {
    httplib::Server* dcgm = impl->dcgm.get();
    impl->dcgm_thread = std::thread([dcgm] { dcgm->listen_after_bind(); });
    // As above: a Stop() before the loop runs would leave it blocked in accept().
    while (!dcgm->is_running() && Clock::now() < give_up) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return std::unique_ptr<SimHttpServer>(new SimHttpServer(std::move(impl)));
}

int SimHttpServer::port() const { return impl_->port; }
int SimHttpServer::dcgm_port() const { return impl_->dcgm_port; }
std::string SimHttpServer::url() const { return "http://" + impl_->o.host + ":" + std::to_string(impl_->port); }
std::string SimHttpServer::kv_events_endpoint() const { return impl_->kv ? impl_->kv->endpoint() : ""; }
std::string SimHttpServer::kv_events_replay_endpoint() const { return impl_->kv ? impl_->kv->replay_endpoint() : ""; }

void SimHttpServer::Stop() {
  if (!impl_ || impl_->stopping.exchange(true)) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->WakeAllLocked();
  }
  impl_->wake.notify_all();
  impl_->http.stop();
  if (impl_->server.joinable()) impl_->server.join();
  if (impl_->dcgm) impl_->dcgm->stop();
  if (impl_->dcgm_thread.joinable()) impl_->dcgm_thread.join();
  if (impl_->driver.joinable()) impl_->driver.join();
  if (impl_->kv) impl_->kv->Stop();
}

}  // namespace epp
