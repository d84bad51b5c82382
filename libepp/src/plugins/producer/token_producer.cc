// token-producer (llm-d's name; legacy name tokenizer): the request's token ids, for the precise
// prefix producer. Two backends as llm-d has them, and epp's own in-process one:
//   estimate  llm-d's byte packing (4 bytes a token, kv/index.h EstimateTokenIds) of the
//             canonical prompt: no model needed, matches only servers that tokenize the same way
//             (eppctl sim's default tokenizer).
//   vllm      the model server renders and tokenizes the request (tokenize.h): the request body
//             goes to vllm.url's render endpoint for its API, or /tokenize where the server has
//             no render endpoints (a 404 without an OpenAI error, 405 or 501 once: then /tokenize
//             from then on).
//             Bounded by vllm.timeout (vllm.mmTimeout for requests with media parts). Answers
//             are cached by request (cacheTokens bounds the cache in tokens; least recently used
//             first out): a retried or repeated request is not sent again.
//   local     epp's in-process tokenizer (tokenizer.h) over the model's tokenizer.json: no call to
//             the model server. local.tokenizer is the default tokenizer (a tokenizer.json or a
//             directory holding one), local.models maps model names to their own, and
//             local.adapters maps LoRA adapter names to their base model. Completions prompts
//             are tokenized as vLLM does (BOS added; token ids passed through); chat requests
//             are rendered with the model's chat template (chat_template.jinja or
//             tokenizer_config.json beside the tokenizer.json, epp/text/chat_template.h) and
//             tokenized without adding special tokens, as vLLM's OpenAI server does. A model
//             without a template, or a request its template refuses, is estimated (reason
//             "template").
// Whatever the backend, a request that carries its own token ids (vLLM's and SGLang's generate,
// vLLM gRPC; InferenceRequest::token_ids) keeps them (source "request"), and an Anthropic Messages
// request is tokenized as the OpenAI chat vLLM converts it to (AnthropicToChatCompletions): through
// the chat render endpoint (vllm) or the chat template (local).
// When the server cannot be asked or does not answer in time the request's tokens are estimated
// instead: the pick goes on (its prefix scores then match only what an estimate matches) and the
// fallback is counted by reason (Scheduler::Tokenizers, /metrics epp_tokenizer_fallbacks_total)
// and shown per request (PickResult::tokens_source, tokens_note; explain).
//
// Why the cache is per request and not per prefix: a render answer is the ids of the whole
// rendered conversation, and a tokenizer's ids for a prefix of the text are not in general a
// prefix of the ids for the whole (a word split at the cut tokenizes differently), so ids cannot
// be reused for a different request without risking wrong block keys. An in-process tokenizer
// (a third backend) is what removes the round trip.
#include <xxhash.h>

#include <array>
#include <atomic>
#include <list>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "epp/text/chat_template.h"
#include "epp/runtime/http.h"
#include "epp/kv/index.h"
#include "epp/scheduling.h"
#include "epp/text/tokenize.h"
#include "epp/text/tokenizer.h"
#include "plugins/producer/producer.h"

namespace epp::plugins {
namespace {

// A local model: its tokenizer (through a prefix cache) and its chat template, if it has one.
struct LocalModel {
  explicit LocalModel(std::shared_ptr<const Tokenizer> t) : tokenizer(std::move(t)) {}
  PrefixTokenizer tokenizer;
  std::shared_ptr<const ChatTemplate> chat;
  std::string no_chat;  // why there is no template
};

struct TokenOptions {
  std::string model_name;  // sent as the body's model (empty: the request's own)
  bool vllm = false;
  bool local = false;
  bool has_vllm = false, has_estimate = false;  // the blocks given (the factory picks the backend)
  // local: the default tokenizer, per-model ones, adapter -> base model (paths as configured,
  // for the effective config; the loaded tokenizers beside them).
  std::string local_default;
  std::vector<std::pair<std::string, std::string>> local_models, local_adapters;
  // Each through a prefix cache: a prompt that starts like an earlier one is tokenized only past
  // the shared part.
  std::shared_ptr<const LocalModel> default_tokenizer;
  absl::flat_hash_map<std::string, std::shared_ptr<const LocalModel>> model_tokenizers;
  absl::flat_hash_map<std::string, std::string> adapter_base;
  std::string url = "http://localhost:8000";
  int64_t timeout_us = 5000000;
  int64_t mm_timeout_us = 30000000;
  int64_t cache_tokens = int64_t{1} << 22;  // 16 MiB of ids
};

// Fallback reasons, in TokenizerCounters::fallbacks' vocabulary.
enum Reason { kTimeout, kUnavailable, kStatus, kAnswer, kNoBody, kApi, kModel, kTemplate, kReasons };
constexpr std::array<const char*, kReasons> kReasonNames = {"timeout", "unavailable", "status", "answer",
                                                            "no-body", "api", "model", "template"};

// Tokenizers (with their prefix caches) and chat templates by path, shared by every plugin
// instance: a config reload does not parse a tokenizer.json again, nor lose its cache, while a
// scheduler still holds it.
absl::StatusOr<std::shared_ptr<const LocalModel>> LoadShared(const std::string& path) {
  static std::mutex mu;
  static absl::flat_hash_map<std::string, std::weak_ptr<const LocalModel>> loaded;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = loaded.find(path); it != loaded.end())
    if (std::shared_ptr<const LocalModel> t = it->second.lock()) return t;
  EPP_ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> t, Tokenizer::FromPath(path));
  auto model = std::make_shared<LocalModel>(std::move(t));
  // A template that is there but outside epp's Jinja subset fails the load (naming its line);
  // none at all only makes chat requests fall back.
  absl::StatusOr<std::shared_ptr<const ChatTemplate>> chat = ChatTemplate::FromPath(path);
  if (chat.ok()) model->chat = *std::move(chat);
  else if (chat.status().code() == absl::StatusCode::kNotFound) model->no_chat = std::string(chat.status().message());
  else return chat.status();
  std::shared_ptr<const LocalModel> cached = std::move(model);
  loaded[path] = cached;
  return cached;
}

// Answers by request, least recently used first out, bounded in tokens.
class AnswerCache {
 public:
  explicit AnswerCache(int64_t budget) : budget_(budget) {}
  bool Get(const XXH128_hash_t& key, std::vector<uint32_t>& out) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(Key{key.low64, key.high64});
    if (it == map_.end()) return false;
    lru_.splice(lru_.end(), lru_, it->second);
    out = it->second->ids;
    return true;
  }
  void Put(const XXH128_hash_t& key, const std::vector<uint32_t>& ids) {
    const int64_t n = static_cast<int64_t>(ids.size());
    if (n > budget_) return;
    std::lock_guard<std::mutex> lock(mu_);
    const Key k{key.low64, key.high64};
    if (map_.contains(k)) return;
    lru_.push_back(Entry{k, ids});
    map_.emplace(k, std::prev(lru_.end()));
    tokens_ += n;
    while (tokens_ > budget_ && !lru_.empty()) {
      tokens_ -= static_cast<int64_t>(lru_.front().ids.size());
      map_.erase(lru_.front().key);
      lru_.pop_front();
    }
  }
  std::pair<int64_t, int64_t> Size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return {static_cast<int64_t>(map_.size()), tokens_};
  }

 private:
  using Key = std::pair<uint64_t, uint64_t>;
  struct Entry {
    Key key;
    std::vector<uint32_t> ids;
  };
  const int64_t budget_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;
  absl::flat_hash_map<Key, std::list<Entry>::iterator> map_;
  int64_t tokens_ = 0;
};

const ParamTable<TokenOptions>& Table();

class TokenProducer : public Plugin, public DataProducer, public TokenSource {
 public:
  TokenProducer(TypedName tn, TokenOptions o) : Plugin(std::move(tn)), o_(std::move(o)), cache_(o_.cache_tokens) {}
  const DataProducer* AsDataProducer() const override { return this; }

  Params EffectiveParams() const override { return Table().Effective(o_); }

  void Prepare(SchedulingContext& ctx, Candidates) const override {
    TokenState& t = ctx.tokens;
    const InferenceRequest& r = *ctx.request;
    t = TokenState{};
    t.computed = true;
    ++requests_;
    // A request that carries its token ids (vLLM's and SGLang's generate, vLLM gRPC) is already
    // tokenized, by the client as the server expects: those ids are the ones its KV cache holds.
    if (!r.token_ids.empty()) {
      t.ids = r.token_ids;
      t.source = "request";
      return;
    }
    if (o_.local) return PrepareLocal(t, r);
    if (!o_.vllm) {
      t.ids = EstimateTokenIds(r.prompt);
      t.source = "estimate";
      return;
    }
    // Anthropic Messages: vLLM renders the chat body it converts them to (AnthropicToChatCompletions).
    const bool messages = r.api == ApiKind::kMessages;
    const std::optional<TokenizeEndpoint> render = messages ? TokenizeEndpoint::kChatRender : RenderEndpointFor(r.api);
    if (!render) return Fallback(t, r, kApi, absl::StrCat("the ", std::string(ApiKindName(r.api)), " API has no render endpoint"));
    if (r.body.empty()) return Fallback(t, r, kNoBody, "no request body to send (the caller had none)");
    std::string converted;
    std::string_view body = r.body;
    if (messages) {
      absl::StatusOr<std::string> chat = AnthropicToChatCompletions(r.body);
      if (!chat.ok()) return Fallback(t, r, kNoBody, std::string(chat.status().message()));
      converted = std::move(*chat);
      body = converted;
    }
    const std::string_view model = o_.model_name.empty() ? std::string_view(r.model) : std::string_view(o_.model_name);
    XXH3_state_t* st = XXH3_createState();
    XXH3_128bits_reset(st);
    const uint8_t api = static_cast<uint8_t>(r.api);
    XXH3_128bits_update(st, &api, 1);
    XXH3_128bits_update(st, model.data(), model.size());
    XXH3_128bits_update(st, "\0", 1);
    XXH3_128bits_update(st, body.data(), body.size());
    const XXH128_hash_t key = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    if (cache_.Get(key, t.ids)) {
      ++cache_hits_;
      t.source = "vllm-cache";
      return;
    }
    std::string rewritten;
    std::string_view send = body;
    if (!o_.model_name.empty() && o_.model_name != r.model) {  // llm-d sends the configured model
      absl::StatusOr<nlohmann::ordered_json> j = internal::ParseJson<nlohmann::ordered_json>(body);
      if (!j.ok() || !j->is_object()) return Fallback(t, r, kNoBody, "the request body is not a JSON object");
      (*j)["model"] = o_.model_name;
      absl::StatusOr<std::string> dumped = internal::DumpJson(*j);
      if (!dumped.ok()) return Fallback(t, r, kNoBody, std::string(dumped.status().message()));
      rewritten = std::move(*dumped);
      send = rewritten;
    }
    const int64_t timeout_us = r.media_parts > 0 ? o_.mm_timeout_us : o_.timeout_us;
    TokenizeEndpoint ep = render_missing_.load() ? TokenizeEndpoint::kTokenize : *render;
    for (int attempt = 0; attempt < 2; ++attempt) {
      HttpRequest req;
      req.method = "POST";
      req.url = absl::StrCat(o_.url, std::string(TokenizePath(ep)));
      req.body.assign(send);
      req.headers = {"Content-Type: application/json"};
      req.timeout = std::chrono::milliseconds(std::max<int64_t>(1, timeout_us / 1000));
      req.accept_gzip = false;
      ++calls_;
      thread_local HttpClient client;
      absl::StatusOr<HttpResponse> res = std::move(client.FetchAll(std::span<const HttpRequest>(&req, 1))[0]);
      if (!res.ok()) {
        const bool timeout = absl::IsDeadlineExceeded(res.status());
        return Fallback(t, r, timeout ? kTimeout : kUnavailable, std::string(res.status().message()));
      }
      // No render route: 405 or 501, or a 404 that is not an OpenAI error (an unknown model is
      // one, {"error": ...}; a missing route is not).
      const bool no_route = res->status == 405 || res->status == 501 ||
                            (res->status == 404 && res->body.find("\"error\"") == std::string::npos);
      if (ep != TokenizeEndpoint::kTokenize && no_route) {
        render_missing_ = true;  // an older server: /tokenize from now on
        ep = TokenizeEndpoint::kTokenize;
        continue;
      }
      if (res->status < 200 || res->status > 299)
        return Fallback(t, r, kStatus,
                        absl::StrCat("POST ", req.url, ": HTTP ", res->status, ": ", res->body.substr(0, 200)));
      absl::StatusOr<std::vector<uint32_t>> ids = ParseTokenizeResponse(ep, res->body);
      if (!ids.ok()) return Fallback(t, r, kAnswer, absl::StrCat("POST ", req.url, ": ", ids.status().message()));
      cache_.Put(key, *ids);
      t.ids = std::move(*ids);
      t.source = "vllm";
      return;
    }
    Fallback(t, r, kStatus, "the server has neither render endpoints nor /tokenize");
  }

  TokenizerCounters Counters() const override {
    TokenizerCounters c;
    c.plugin = name();
    c.backend = o_.local ? "local" : o_.vllm ? "vllm" : "estimate";
    c.requests = requests_.load();
    c.calls = calls_.load();
    c.cache_hits = cache_hits_.load();
    if (o_.vllm || o_.local)
      for (int i = 0; i < kReasons; ++i) c.fallbacks[kReasonNames[static_cast<size_t>(i)]] = fallbacks_[static_cast<size_t>(i)].load();
    std::tie(c.cache_entries, c.cache_tokens) = cache_.Size();
    return c;
  }

 private:
  void PrepareLocal(TokenState& t, const InferenceRequest& r) const {
    std::string_view model = o_.model_name.empty() ? std::string_view(r.model) : std::string_view(o_.model_name);
    if (auto a = o_.adapter_base.find(absl::string_view(model.data(), model.size())); a != o_.adapter_base.end())
      model = a->second;
    const LocalModel* tok = o_.default_tokenizer.get();
    if (auto m = o_.model_tokenizers.find(absl::string_view(model.data(), model.size())); m != o_.model_tokenizers.end())
      tok = m->second.get();
    if (tok == nullptr) return Fallback(t, r, kModel, absl::StrCat("no tokenizer for model '", r.model, "'"));
    // Anthropic Messages are rendered with the chat template after vLLM's conversion to a chat.
    const bool messages = r.api == ApiKind::kMessages;
    const bool chat = r.api == ApiKind::kChatCompletions || messages;
    if (r.api != ApiKind::kCompletions && !chat)
      return Fallback(t, r, kApi, absl::StrCat("the ", std::string(ApiKindName(r.api)), " API is not tokenized"));
    if (r.body.empty()) return Fallback(t, r, kNoBody, "no request body (the caller had none)");
    if (chat && !tok->chat) return Fallback(t, r, kTemplate, tok->no_chat);
    std::string converted;
    if (messages) {
      absl::StatusOr<std::string> c = AnthropicToChatCompletions(r.body);
      if (!c.ok()) return Fallback(t, r, kNoBody, std::string(c.status().message()));
      converted = std::move(*c);
    }
    absl::StatusOr<TokenizedPrompt> p = TokenizeRequestBody(tok->tokenizer, chat ? "/v1/chat/completions" : "/v1/completions",
                                                            messages ? std::string_view(converted) : r.body, tok->chat.get());
    if (!p.ok()) return Fallback(t, r, chat ? kTemplate : kAnswer, std::string(p.status().message()));
    t.ids = std::move(p->ids);
    t.source = "local";
  }

  void Fallback(TokenState& t, const InferenceRequest& r, Reason why, std::string note) const {
    ++fallbacks_[static_cast<size_t>(why)];
    t.ids = EstimateTokenIds(r.prompt);
    t.source = "estimate-fallback";
    t.note = absl::StrCat(kReasonNames[static_cast<size_t>(why)], ": ", note);
  }

  TokenOptions o_;
  mutable AnswerCache cache_;
  mutable std::atomic<bool> render_missing_{false};
  mutable std::atomic<int64_t> requests_{0}, calls_{0}, cache_hits_{0};
  mutable std::array<std::atomic<int64_t>, kReasons> fallbacks_{};
};

absl::Status Bad(const Params& at, std::string_view key, std::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat(at.path(), key.empty() ? "" : ".", std::string(key), ": ", std::string(message)));
}

absl::Status ReadLocal(const Params& local, TokenOptions& o) {
  EPP_RETURN_IF_ERROR(local.CheckKeys({"tokenizer", "models", "adapters"}));
  o.local = true;
  EPP_ASSIGN_OR_RETURN(o.local_default, local.GetString("tokenizer", ""));
  auto load = [&](const std::string& path, const Params& at, std::string_view key) -> absl::StatusOr<std::shared_ptr<const LocalModel>> {
    absl::StatusOr<std::shared_ptr<const LocalModel>> t = LoadShared(path);
    if (!t.ok()) return absl::Status(t.status().code(), absl::StrCat(at.path(), ".", std::string(key), ": ", t.status().message()));
    return t;
  };
  if (!o.local_default.empty()) {
    EPP_ASSIGN_OR_RETURN(std::shared_ptr<const LocalModel> t, load(o.local_default, local, "tokenizer"));
    o.default_tokenizer = std::move(t);
  }
  for (const char* key : {"models", "adapters"}) {
    const Params* m = local.Find(key);
    if (m == nullptr || m->is_null()) continue;
    if (!m->is_map()) return Bad(local, key, "expected a map of name to " + std::string(key[0] == 'm' ? "tokenizer path" : "base model"));
    for (const auto& [name, value] : m->entries()) {
      EPP_ASSIGN_OR_RETURN(std::string v, value.AsString());
      if (key[0] == 'm') {
        EPP_ASSIGN_OR_RETURN(std::shared_ptr<const LocalModel> t, load(v, *m, name));
        o.model_tokenizers[name] = std::move(t);
        o.local_models.emplace_back(name, v);
      } else {
        o.adapter_base[name] = v;
        o.local_adapters.emplace_back(name, v);
      }
    }
  }
  for (const auto& [adapter, base] : o.local_adapters)
    if (!o.model_tokenizers.count(base) && !o.default_tokenizer)
      return Bad(local, "adapters." + adapter, "base model '" + base + "' has no tokenizer in local.models (and there is no local.tokenizer)");
  if (!o.default_tokenizer && o.model_tokenizers.empty())
    return absl::InvalidArgumentError(absl::StrCat(local.path(), ": give local.tokenizer (a tokenizer.json or its directory) or local.models"));
  return absl::OkStatus();
}

Params WriteLocal(const TokenOptions& o) {
  if (!o.local) return Params();
  Params l = Params::Map();
  if (!o.local_default.empty()) l.Set("tokenizer", Params::String(o.local_default));
  for (const auto& [key, list] : {std::pair{"models", &o.local_models}, std::pair{"adapters", &o.local_adapters}}) {
    if (list->empty()) continue;
    Params m = Params::Map();
    for (const auto& [k, v] : *list) m.Set(k, Params::String(v));
    l.Set(key, std::move(m));
  }
  return l;
}

absl::Status ReadVllm(const Params& v, TokenOptions& o) {
  o.has_vllm = true;
  EPP_RETURN_IF_ERROR(v.CheckKeys({"url", "timeout", "mmTimeout", "cacheTokens"}));
  EPP_ASSIGN_OR_RETURN(o.url, v.GetString("url", o.url));
  while (!o.url.empty() && o.url.back() == '/') o.url.pop_back();
  if (o.url.rfind("http://", 0) != 0 && o.url.rfind("https://", 0) != 0)
    return Bad(v, "url", "expected an http:// or https:// URL, got '" + o.url + "'");
  EPP_ASSIGN_OR_RETURN(o.timeout_us, v.GetDurationMicros("timeout", o.timeout_us));
  EPP_ASSIGN_OR_RETURN(o.mm_timeout_us, v.GetDurationMicros("mmTimeout", o.mm_timeout_us));
  if (o.timeout_us <= 0) return Bad(v, "timeout", "must be > 0");
  if (o.mm_timeout_us <= 0) return Bad(v, "mmTimeout", "must be > 0");
  EPP_ASSIGN_OR_RETURN(o.cache_tokens, v.GetInt("cacheTokens", o.cache_tokens));
  if (o.cache_tokens < 0) return Bad(v, "cacheTokens", "must be >= 0 (0: no cache)");
  return absl::OkStatus();
}

Params WriteVllm(const TokenOptions& o) {
  if (o.local || !o.vllm) return Params();
  return Params::Map()
      .Set("url", Params::String(o.url))
      .Set("timeout", Params::String(absl::StrCat(o.timeout_us / 1000, "ms")))
      .Set("mmTimeout", Params::String(absl::StrCat(o.mm_timeout_us / 1000, "ms")))
      .Set("cacheTokens", Params::Int(o.cache_tokens));
}

// llm-d's token producer's names; one backend block at most (the factory checks), and the
// effective config names the backend in use.
const ParamTable<TokenOptions>& Table() {
  static const auto* t =
      &(*new ParamTable<TokenOptions>())
           .String("modelName", &TokenOptions::model_name,
                   "the model sent to the tokenizer (empty: the request's); alone it selects vllm")
           .OmitEmpty()
           .Custom("estimate", ParamType::kMap, "{}: no tokenizer; token counts estimated from the text (the default)",
                   [](const Params& v, TokenOptions& o) -> absl::Status {
                     o.has_estimate = true;
                     return v.CheckKeys({"image", "video"});
                   },
                   [](const TokenOptions& o) { return o.local || o.vllm ? Params() : Params::Map(); })
           .Custom("vllm", ParamType::kMap,
                   "{url (http://localhost:8000), timeout (5s), mmTimeout (30s), cacheTokens}: a vLLM server's "
                   "/tokenize and /v1/chat/completions/render",
                   ReadVllm, WriteVllm)
           .Custom("local", ParamType::kMap,
                   "{tokenizer, models: {name: path}, adapters: {adapter: base model}}: tokenizer.json files read here",
                   ReadLocal, WriteLocal)
           .Custom("udsTokenizerConfig", ParamType::kMap, "llm-d's UDS tokenizer sidecar: rejected (use vllm or estimate)",
                   [](const Params& v, TokenOptions&) {
                     return absl::InvalidArgumentError(absl::StrCat(
                         v.path(), ": the UDS tokenizer sidecar is deprecated and not supported; use vllm or estimate"));
                   },
                   nullptr)
           .Deprecated();
  return *t;
}

}  // namespace

PluginOr CreateTokenProducer(const std::string& name, const Params& params, const PluginContext&) {
  // Checked before Read(), which would load the local tokenizers first.
  int backends = 0;
  for (const char* key : {"estimate", "vllm", "local"}) backends += params.Find(key) && !params.Find(key)->is_null();
  if (backends > 1) return Bad(params, "", "give one backend: estimate, vllm or local");
  EPP_ASSIGN_OR_RETURN(TokenOptions o, Table().Read(params));
  // As in llm-d: a vllm block, or a modelName without a backend, selects vllm.
  if (!o.local) o.vllm = o.has_vllm || (!o.has_estimate && !o.model_name.empty());
  return std::make_unique<TokenProducer>(TypedName{std::string(kTokenProducerType), name}, std::move(o));
}

PluginSchema TokenProducerSchema() { return Table().Schema(); }

}  // namespace epp::plugins
