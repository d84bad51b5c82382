// precise-prefix-cache-producer (llm-d's name): prefix matches from what the model servers
// report they hold (KV-cache events, kv/index.h) instead of what the EPP routed. The runtime
// (eppctl serve) subscribes to every endpoint's events and feeds the index this plugin owns;
// Prepare tokenizes the request, walks its block keys and gives every candidate its run of
// consecutive held blocks, medium-weighted, for prefix-cache-scorer to read. The deprecated
// precise-prefix-cache-scorer is this producer and a prefix-cache-scorer in one plugin.
//
// The token ids come from a token-producer (token_producer.cc) when the config has one, else
// from llm-d's `estimate` byte packing (kv/index.h EstimateTokenIds) of the canonical prompt.
// endpoint-notification-source is accepted with llm-d's (empty) parameters.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/container_memory.h"
#include "epp/kv/index.h"
#include "epp/runtime/redis.h"
#include "epp/kv/subscriber.h"
#include "epp/scheduling.h"
#include "plugins/producer/producer.h"
#include "plugins/scorer/scorer.h"

namespace epp::plugins {
namespace {

struct PreciseOptions {
  int block_size_tokens = 16;           // tokenProcessorConfig.blockSizeTokens (the scorer's unit)
  std::string hash_seed;
  int64_t max_prefix_tokens = 131072;   // llm-d's maxPrefixTokensToMatch default
  bool speculative = false;             // speculativeIndexing
  int64_t speculative_ttl_us = 2000000;  // speculativeTTL
  KvIndexOptions index;
  // Older shapes (docs/config.md "Older parameter shapes"): read, then mapped by the factory.
  bool top_token_processor = false;  // tokenProcessorConfig given at the top level
  Params nested_token_processor;     // indexerConfig.tokenProcessorConfig (llm-d-kv-cache <= v0.4)
  Params tokenizers_pool;            // indexerConfig.tokenizersPoolConfig (the scorer's own tokenizer)
  std::vector<std::string> notes;    // deprecation warnings for the factory to report
  // llm-d's topic filter when kvEventsConfig is absent ("" given explicitly means every topic).
  KvEventsBinding binding = [] {
    KvEventsBinding b;
    b.topic_filter = "kv@";
    return b;
  }();
};

const ParamTable<PreciseOptions>& Table();

// What a block with one holder costs in the index, measured (kv/index.h, docs/benchmarks.md).
constexpr uint64_t kIndexBytesPerBlock = 800;

class PrecisePrefixProducer : public Plugin,
                              public DataProducer,
                              public RequestObserver,
                              public EndpointState,
                              public KvEventsSource {
 public:
  PrecisePrefixProducer(TypedName tn, PreciseOptions o) : Plugin(std::move(tn)), o_(std::move(o)) {
    o_.binding.index = std::make_shared<KvBlockIndex>(o_.index);
  }
  const DataProducer* AsDataProducer() const override { return this; }
  const RequestObserver* AsRequestObserver() const override { return o_.speculative ? this : nullptr; }
  Params EffectiveParams() const override { return Table().Effective(o_); }

  void Prepare(SchedulingContext& ctx, Candidates candidates) const override {
    PrefixState& st = ctx.prefix;
    st.computed = true;
    st.producer = name();
    const int bs = o_.block_size_tokens;
    st.block_size_tokens = bs;
    const InferenceRequest& r = *ctx.request;
    // The token-producer's ids when one ran (it runs first), else llm-d's estimate (kept in
    // ctx.tokens for PreRequest and the pick's report).
    if (!ctx.tokens.computed) {
      ctx.tokens.computed = true;
      ctx.tokens.ids = EstimateTokenIds(r.prompt);
      ctx.tokens.source = "estimate";
    }
    std::span<const uint32_t> tokens = ctx.tokens.ids;
    const size_t cap = static_cast<size_t>(o_.max_prefix_tokens);
    if (tokens.size() > cap) tokens = tokens.first(cap);
    KvBlockIndex& index = *o_.binding.index;
    if (o_.speculative) index.ExpireSpeculative(ctx.now_us);
    st.hashes = index.BlockKeys(tokens, bs);
    st.match_blocks.assign(ctx.endpoints.size(), 0);
    if (st.hashes.empty() || candidates.empty()) return;
    thread_local std::vector<std::string> names;
    thread_local std::vector<KvPrefixMatch> matches;
    names.clear();
    for (const Endpoint* e : candidates) names.push_back(e->address);
    index.Lookup(tokens, r.model, names, matches, st.hashes, bs);
    for (size_t i = 0; i < candidates.size(); ++i) {
      const KvPrefixMatch& m = matches[i];
      if (m.blocks == 0) continue;
      // Weighted tokens in the scorer's block unit (llm-d truncates the weighted count too).
      const double weighted_tokens = m.weighted_blocks * m.block_size;
      const int blocks = static_cast<int>(std::min<double>(static_cast<double>(st.hashes.size()),
                                                           std::floor(weighted_tokens / bs)));
      st.match_blocks[ctx.IndexOf(candidates[i])] = blocks;
    }
  }

  // speculativeIndexing: the request's blocks go on the picked endpoint until its events confirm
  // them or speculativeTTL passes (kv/index.h AddSpeculative).
  void PreRequest(const SchedulingContext& ctx, const Endpoint& picked) const override {
    if (!ctx.tokens.computed) return;
    std::span<const uint32_t> tokens = ctx.tokens.ids;
    const size_t cap = static_cast<size_t>(o_.max_prefix_tokens);
    if (tokens.size() > cap) tokens = tokens.first(cap);
    o_.binding.index->AddSpeculative(picked.address, tokens, ctx.request->model, o_.block_size_tokens,
                                     ctx.now_us + o_.speculative_ttl_us);
  }

  void ForgetEndpoint(std::string_view endpoint) const override { o_.binding.index->ClearEndpoint(endpoint); }
  size_t PrefixEntries() const override { return static_cast<size_t>(o_.binding.index->Stats().blocks); }
  const KvEventsBinding& Binding() const override { return o_.binding; }

 private:
  PreciseOptions o_;
};

// precise-prefix-cache-scorer, llm-d's deprecated all-in-one form: its parameters are the
// producer's; it is that producer and a prefix-cache-scorer (default parameters) reading it, in
// one plugin a profile can reference as a scorer.
class PrecisePrefixScorer : public Plugin, public EndpointState, public KvEventsSource {
 public:
  PrecisePrefixScorer(TypedName tn, std::unique_ptr<Plugin> producer, std::unique_ptr<Plugin> scorer)
      : Plugin(std::move(tn)), producer_(std::move(producer)), scorer_(std::move(scorer)) {}
  Params EffectiveParams() const override { return producer_->EffectiveParams(); }
  PluginInputs Consumes() const override { return scorer_->Consumes(); }
  const DataProducer* AsDataProducer() const override { return producer_->AsDataProducer(); }
  const RequestObserver* AsRequestObserver() const override { return producer_->AsRequestObserver(); }
  const Scorer* AsScorer() const override { return scorer_->AsScorer(); }
  void ForgetEndpoint(std::string_view endpoint) const override { Producer().ForgetEndpoint(endpoint); }
  size_t PrefixEntries() const override { return Producer().PrefixEntries(); }
  const KvEventsBinding& Binding() const override { return Producer().Binding(); }

 private:
  const PrecisePrefixProducer& Producer() const { return static_cast<const PrecisePrefixProducer&>(*producer_); }
  std::unique_ptr<Plugin> producer_, scorer_;
};

absl::Status Bad(const Params& at, std::string_view key, std::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(at.path(), key.empty() ? "" : ".", std::string(key), ": ", std::string(message)));
}

absl::Status ReadTokenProcessor(const Params& tp, PreciseOptions& o) {
  EPP_RETURN_IF_ERROR(tp.CheckKeys({"blockSizeTokens", "blockSize", "hashSeed", "hashAlgorithm"}));
  EPP_ASSIGN_OR_RETURN(int64_t bs, tp.GetInt("blockSizeTokens", 0));
  if (bs == 0) {
    EPP_ASSIGN_OR_RETURN(bs, tp.GetInt("blockSize", 16));  // llm-d's deprecated alias (tokens here)
    if (tp.Has("blockSize"))
      o.notes.push_back(absl::StrCat(tp.path(), ".blockSize: deprecated; use blockSizeTokens (the same number of tokens)"));
  }
  if (bs <= 0 || bs > 65536) return Bad(tp, "blockSizeTokens", "must be in [1, 65536]");
  o.block_size_tokens = static_cast<int>(bs);
  EPP_ASSIGN_OR_RETURN(o.hash_seed, tp.GetString("hashSeed", ""));
  EPP_ASSIGN_OR_RETURN(std::string algo, tp.GetString("hashAlgorithm", ""));
  // Our block keys are our own (XXH3 chained over token ids); llm-d's choice between its two
  // algorithms does not change what matches, so both names are accepted.
  if (!algo.empty() && algo != "cbor-fnv" && algo != "xxh64")
    return Bad(tp, "hashAlgorithm", "expected cbor-fnv or xxh64, got '" + algo + "'");
  return absl::OkStatus();
}

Params WriteTokenProcessor(const PreciseOptions& o) {
  return Params::Map().Set("blockSizeTokens", Params::Int(o.block_size_tokens)).Set("hashSeed", Params::String(o.hash_seed));
}

// indexerConfig.tokenizersPoolConfig, every shape llm-d-kv-cache gave it (v0.2: the HuggingFace
// settings flat; v0.4 on: local / uds / hf blocks): checked, then left to the factory.
absl::Status ReadTokenizersPool(const Params& pool, PreciseOptions& o) {
  EPP_RETURN_IF_ERROR(pool.CheckKeys({"modelName", "workersCount", "minPrefixOverlapRatio", "huggingFaceToken",
                                      "tokenizersCacheDir", "enabled", "local", "uds", "hf"}));
  o.tokenizers_pool = pool;
  return absl::OkStatus();
}

absl::Status ReadIndexer(const Params& ic, PreciseOptions& o) {
  EPP_RETURN_IF_ERROR(ic.CheckKeys({"kvBlockIndexConfig", "kvCacheBackendConfigs", "tokenizersPoolConfig",
                                    "tokenProcessorConfig", "prefixStoreConfig"}));
  if (const Params* pool = ic.Find("tokenizersPoolConfig"); pool && !pool->is_null())
    EPP_RETURN_IF_ERROR(ReadTokenizersPool(*pool, o));
  if (const Params* tp = ic.Find("tokenProcessorConfig"); tp && !tp->is_null()) o.nested_token_processor = *tp;
  if (const Params* ps = ic.Find("prefixStoreConfig"); ps && !ps->is_null()) {
    // llm-d-kv-cache <= v0.5: the tokenizer's prefix cache (reuse of an earlier prompt's tokens).
    // epp's local tokenizer keeps its own; nothing here maps onto the index.
    EPP_RETURN_IF_ERROR(ps->CheckKeys({"cacheSize", "blockSize"}));
    o.notes.push_back(absl::StrCat(ps->path(), ": removed in llm-d-kv-cache v0.6 (the tokenizer's prefix cache); ignored. "
                                               "Delete it; token-producer's local backend caches prefixes itself"));
  }
  if (const Params* kbi = ic.Find("kvBlockIndexConfig"); kbi && !kbi->is_null()) {
    EPP_RETURN_IF_ERROR(kbi->CheckKeys({"inMemoryConfig", "enableMetrics", "metricsLoggingInterval",
                                        "costAwareMemoryConfig", "redisConfig", "maxPrefixBlocksToMatch"}));
    if (const Params* m = kbi->Find("maxPrefixBlocksToMatch"); m && !m->is_null()) {
      // In llm-d's samples from v0.6 to v0.9 but never a field of the index: releases before v0.9
      // dropped it unread, v0.9 on reject it. Kept loading, as those releases did.
      EPP_RETURN_IF_ERROR(m->AsInt().status());
      o.notes.push_back(absl::StrCat(m->path(), ": never read by llm-d (its index has no such field); ignored. "
                                                "Delete it; maxPrefixTokensToMatch caps matching"));
    }
    if (const Params* rc = kbi->Find("redisConfig"); rc && !rc->is_null()) {
      // llm-d's Redis index: epp keeps its index in memory (picks never wait on Redis) and keeps
      // a copy in this Redis, from which a replica that starts is warm (epp/runtime/kv_redis.h).
      EPP_RETURN_IF_ERROR(rc->CheckKeys({"address"}));
      EPP_ASSIGN_OR_RETURN(o.binding.redis_address, rc->GetString("address", "redis://127.0.0.1:6379"));
      if (absl::StatusOr<RedisAddress> a = ParseRedisAddress(o.binding.redis_address); !a.ok())
        return Bad(*rc, "address", std::string(a.status().message()));
    }
    if (kbi->Has("costAwareMemoryConfig"))
      return Bad(*kbi, "costAwareMemoryConfig", "not supported; bound the in-memory index with inMemoryConfig.size");
    EPP_ASSIGN_OR_RETURN(bool metrics, kbi->GetBool("enableMetrics", false));
    (void)metrics;  // /metrics always shows the index
    if (const Params* mem = kbi->Find("inMemoryConfig"); mem && !mem->is_null()) {
      EPP_RETURN_IF_ERROR(mem->CheckKeys({"size", "podCacheSize", "maxEngineHashAliases"}));
      EPP_ASSIGN_OR_RETURN(int64_t size, mem->GetInt("size", static_cast<int64_t>(o.index.max_blocks)));
      if (size <= 0 || size > (int64_t{1} << 32)) return Bad(*mem, "size", "must be in [1, 2^32]");
      o.index.max_blocks = static_cast<size_t>(size);
      // epp only: per endpoint, engine hashes kept beyond one per held block (kv/index.h).
      EPP_ASSIGN_OR_RETURN(int64_t aliases,
                           mem->GetInt("maxEngineHashAliases", static_cast<int64_t>(o.index.max_engine_hash_aliases)));
      if (aliases < 0 || aliases > (int64_t{1} << 32)) return Bad(*mem, "maxEngineHashAliases", "must be in [0, 2^32]");
      o.index.max_engine_hash_aliases = static_cast<size_t>(aliases);
      EPP_ASSIGN_OR_RETURN(int64_t pods, mem->GetInt("podCacheSize", 10));
      if (pods <= 0) return Bad(*mem, "podCacheSize", "must be > 0");
    }
  }
  if (const Params* be = ic.Find("kvCacheBackendConfigs"); be && !be->is_null()) {
    if (be->kind() != Params::Kind::kList) return Bad(*be, "", "expected a list of {name, weight}");
    o.index.medium_weights.clear();
    for (const Params& b : be->items()) {
      EPP_RETURN_IF_ERROR(b.CheckKeys({"name", "weight"}));
      EPP_ASSIGN_OR_RETURN(std::string n, b.GetString("name", ""));
      EPP_ASSIGN_OR_RETURN(double w, b.GetDouble("weight", 1.0));
      if (n.empty()) return Bad(b, "name", "must not be empty");
      if (!(w >= 0) || !std::isfinite(w)) return Bad(b, "weight", "must be a finite number >= 0");
      o.index.medium_weights[n] = w;
    }
  }
  return absl::OkStatus();
}

Params WriteIndexer(const PreciseOptions& o) {
  Params backends = Params::List();
  for (const auto& [name, w] : o.index.medium_weights)
    backends.Append(Params::Map().Set("name", Params::String(name)).Set("weight", Params::Number(w)));
  Params mem = Params::Map()
                   .Set("size", Params::Int(static_cast<int64_t>(o.index.max_blocks)))
                   .Set("maxEngineHashAliases", Params::Int(static_cast<int64_t>(o.index.max_engine_hash_aliases)));
  Params kbi = Params::Map().Set("inMemoryConfig", std::move(mem));
  if (!o.binding.redis_address.empty())
    kbi.Set("redisConfig", Params::Map().Set("address", Params::String(o.binding.redis_address)));
  return Params::Map()
      .Set("kvBlockIndexConfig", std::move(kbi))
      .Set("kvCacheBackendConfigs", std::move(backends));
}

absl::Status ReadKvEvents(const Params& ke, PreciseOptions& o) {
  EPP_RETURN_IF_ERROR(ke.CheckKeys({"zmqEndpoint", "topicFilter", "concurrency", "engineType", "discoverPods",
                                    "podDiscoveryConfig", "verifyPeerAddress"}));
  EPP_ASSIGN_OR_RETURN(o.binding.central_endpoint, ke.GetString("zmqEndpoint", ""));
  if (!o.binding.central_endpoint.empty() && o.binding.central_endpoint.rfind("tcp://", 0) != 0 &&
      o.binding.central_endpoint.rfind("ipc://", 0) != 0)
    return Bad(ke, "zmqEndpoint", "expected tcp://HOST:PORT or ipc://PATH, got '" + o.binding.central_endpoint + "'");
  // epp only: on the central socket, a message counts only when sent from the IP address of the
  // endpoint its topic names (kv/subscriber.h). Off for engines whose connections arrive from
  // another address (NAT, a proxy or sidecar that re-originates them).
  EPP_ASSIGN_OR_RETURN(o.binding.verify_peer_address, ke.GetBool("verifyPeerAddress", true));
  EPP_ASSIGN_OR_RETURN(o.binding.topic_filter, ke.GetString("topicFilter", "kv@"));
  EPP_ASSIGN_OR_RETURN(int64_t conc, ke.GetInt("concurrency", 4));
  if (conc <= 0) return Bad(ke, "concurrency", "must be > 0");
  EPP_ASSIGN_OR_RETURN(std::string engine, ke.GetString("engineType", "vllm"));
  if (engine != "vllm" && engine != "sglang") return Bad(ke, "engineType", "expected vllm or sglang");
  EPP_ASSIGN_OR_RETURN(o.binding.discover_pods, ke.GetBool("discoverPods", true));
  // As in llm-d, a central socket without podDiscoveryConfig means the engines come to us:
  // no per-pod subscriptions then.
  if (!o.binding.central_endpoint.empty() && !ke.Has("podDiscoveryConfig")) o.binding.discover_pods = false;
  if (const Params* pd = ke.Find("podDiscoveryConfig"); pd && !pd->is_null()) {
    EPP_RETURN_IF_ERROR(pd->CheckKeys({"socketPort", "replaySocketPort", "podLabelSelector", "podNamespace"}));
    EPP_ASSIGN_OR_RETURN(int64_t port, pd->GetInt("socketPort", 5557));
    EPP_ASSIGN_OR_RETURN(int64_t replay, pd->GetInt("replaySocketPort", 0));
    if (port <= 0 || port > 65535) return Bad(*pd, "socketPort", "must be in [1, 65535]");
    if (replay < 0 || replay > 65535) return Bad(*pd, "replaySocketPort", "must be in [0, 65535] (0: no replay)");
    o.binding.socket_port = static_cast<int>(port);
    o.binding.replay_socket_port = static_cast<int>(replay);
  }
  return absl::OkStatus();
}

Params WriteKvEvents(const PreciseOptions& o) {
  Params ke = Params::Map();
  if (!o.binding.central_endpoint.empty()) {
    ke.Set("zmqEndpoint", Params::String(o.binding.central_endpoint));
    ke.Set("verifyPeerAddress", Params::Bool(o.binding.verify_peer_address));
  }
  ke.Set("topicFilter", Params::String(o.binding.topic_filter));
  ke.Set("discoverPods", Params::Bool(o.binding.discover_pods));
  ke.Set("podDiscoveryConfig", Params::Map()
                                   .Set("socketPort", Params::Int(o.binding.socket_port))
                                   .Set("replaySocketPort", Params::Int(o.binding.replay_socket_port)));
  return ke;
}

// llm-d's precise prefix producer's names; its nested blocks are read whole (their inner keys are
// checked by the readers above).
const ParamTable<PreciseOptions>& Table() {
  static const auto* t =
      &(*new ParamTable<PreciseOptions>())
           .Custom("tokenProcessorConfig", ParamType::kMap,
                   "{blockSizeTokens (16; blockSize is the old name), hashSeed, hashAlgorithm: cbor-fnv|xxh64}",
                   [](const Params& v, PreciseOptions& o) {
                     o.top_token_processor = true;
                     return ReadTokenProcessor(v, o);
                   },
                   WriteTokenProcessor)
           .Custom("indexerConfig", ParamType::kMap,
                   "{kvBlockIndexConfig: {inMemoryConfig: {size, podCacheSize, maxEngineHashAliases (16384; epp "
                   "only)}, enableMetrics}, "
                   "kvCacheBackendConfigs: [{name, weight}]}: the in-memory block index",
                   ReadIndexer, WriteIndexer)
           .Custom("kvEventsConfig", ParamType::kMap,
                   "{zmqEndpoint, verifyPeerAddress (true; epp only), topicFilter (kv@), concurrency, "
                   "engineType: vllm|sglang, discoverPods, podDiscoveryConfig: {socketPort (5557), replaySocketPort}}: "
                   "where KV events come from",
                   ReadKvEvents, WriteKvEvents)
           .Int("maxPrefixTokensToMatch", &PreciseOptions::max_prefix_tokens, Range::Above(0),
                "prompt tokens hashed and matched")
           .Bool("speculativeIndexing", &PreciseOptions::speculative,
                 "record a pick's blocks at once, before the server's events confirm them")
           .Duration("speculativeTTL", &PreciseOptions::speculative_ttl_us, Range::Any(),
                     "how long an unconfirmed speculative entry counts; 0 means 2s");
  return *t;
}

// Reads the parameters and maps the older shapes onto the current ones, noting each.
absl::StatusOr<PreciseOptions> ReadPrecise(const Params& params) {
  EPP_ASSIGN_OR_RETURN(PreciseOptions o, Table().Read(params));
  if (!o.nested_token_processor.is_null()) {
    const std::string& at = o.nested_token_processor.path();
    if (o.top_token_processor) {
      // llm-d v0.5 on read only the top-level block; the nested one was ignored.
      o.notes.push_back(absl::StrCat(at, ": ignored: tokenProcessorConfig is given at the top level, which wins"));
    } else {
      EPP_RETURN_IF_ERROR(ReadTokenProcessor(o.nested_token_processor, o));
      o.notes.push_back(absl::StrCat(at, ": the llm-d-kv-cache v0.4 place; move it to parameters.tokenProcessorConfig"));
    }
  }
  o.index.hash_seed = o.hash_seed;
  if (o.speculative_ttl_us <= 0) o.speculative_ttl_us = 2000000;  // llm-d: zero or negative means its default
  // The default bound (2^22 blocks, about 3.3 GiB at one holder each) is more than many
  // containers have: say so when the container's limit is known (kv/index.h has the figure).
  if (std::string w = internal::IndexBoundWarning(
          absl::StrCat(params.path().empty() ? "" : params.path() + ".",
                       "indexerConfig.kvBlockIndexConfig.inMemoryConfig.size"),
          o.index.max_blocks, kIndexBytesPerBlock, internal::ContainerMemoryLimit());
      !w.empty())
    o.notes.push_back(std::move(w));
  return o;
}

void Report(const PluginContext& ctx, std::vector<std::string>& notes) {
  if (ctx.warnings != nullptr)
    for (std::string& n : notes) ctx.warnings->push_back(std::move(n));
  notes.clear();
}

}  // namespace

PluginOr CreatePrecisePrefixProducer(const std::string& name, const Params& params, const PluginContext& ctx) {
  EPP_ASSIGN_OR_RETURN(PreciseOptions o, ReadPrecise(params));
  // As llm-d's producer: it takes token ids from a token-producer and has no tokenizer of its own
  // (only the deprecated precise-prefix-cache-scorer still reads this block).
  if (!o.tokenizers_pool.is_null())
    return Bad(o.tokenizers_pool, "", "not supported on precise-prefix-cache-producer; declare a token-producer "
                                      "(vllm or local) for the token ids, as llm-d requires");
  Report(ctx, o.notes);
  return std::make_unique<PrecisePrefixProducer>(TypedName{std::string(kPrecisePrefixProducerType), name}, std::move(o));
}

PluginOr CreatePrecisePrefixScorer(const std::string& name, const Params& params, const PluginContext& ctx) {
  EPP_ASSIGN_OR_RETURN(PreciseOptions o, ReadPrecise(params));
  if (!o.tokenizers_pool.is_null()) {
    // llm-d's scorer tokenizes with this pool only when no token-producer gave token ids. epp has
    // no HuggingFace download or UDS sidecar tokenizer: a token-producer in the config is used
    // as llm-d would; without one the ids are estimated (llm-d's estimate byte packing), which
    // matches only engines that tokenize that way.
    o.notes.push_back(absl::StrCat(o.tokenizers_pool.path(), ": llm-d's older in-scorer tokenizer pool; not used by epp. "
                                   "Token ids come from a token-producer when the config has one, else they are "
                                   "estimated; declare a token-producer (vllm: {url} or local: {models}) instead"));
    o.tokenizers_pool = Params();
  }
  Report(ctx, o.notes);
  std::unique_ptr<Plugin> producer =
      std::make_unique<PrecisePrefixProducer>(TypedName{std::string(kPrecisePrefixProducerType), name}, std::move(o));
  EPP_ASSIGN_OR_RETURN(std::unique_ptr<Plugin> scorer, CreatePrefixCacheScorer(name, Params::Map(), ctx));
  if (ctx.warnings)
    ctx.warnings->push_back(absl::StrCat("plugin '", name, "' (", std::string(kPrecisePrefixScorerType),
                                         "): deprecated in llm-d; declare a precise-prefix-cache-producer with these "
                                         "parameters and a prefix-cache-scorer reading it"));
  return std::make_unique<PrecisePrefixScorer>(TypedName{std::string(kPrecisePrefixScorerType), name}, std::move(producer),
                                               std::move(scorer));
}

PluginOr CreateEndpointNotificationSource(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(ReadNoParams(params));
  // eppctl serve delivers endpoint add/remove events to the precise producer itself.
  return std::make_unique<ParamsOnlyPlugin>(TypedName{std::string(kEndpointNotificationSourceType), name}, Params::Map());
}

// precise-prefix-cache-scorer takes the producer's parameters.
PluginSchema PrecisePrefixProducerSchema() { return Table().Schema(); }

}  // namespace epp::plugins
