// approx-prefix-cache-producer: hashes the request's prompt into chained blocks, looks up how
// many leading blocks each candidate holds in the PrefixIndex, and after a pick records the
// blocks on the picked endpoint (GIE's approximateprefix data producer, PreRequest update).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "epp/prefix_cache.h"
#include "epp/scheduling.h"
#include "epp/shared_state.h"
#include "plugins/producer/producer.h"

namespace epp::plugins {
namespace {

struct ProducerOptions {
  bool auto_tune = true;
  int block_size_tokens = 16;
  int max_prefix_blocks = 256;
  int64_t max_prefix_tokens = 0;  // 0: use max_prefix_blocks
  int64_t lru_capacity = 31250;   // 500k tokens of KV (H100 80GB, 8B model) / 16 tokens per block
  int64_t block_size_chars = 0;   // the deprecated blockSize (characters), converted by the factory
};

// GIE's approximate prefix producer's names and defaults; maxPrefixTokensToMatch is llm-d's.
const ParamTable<ProducerOptions>& Table() {
  static const auto* t =
      &(*new ParamTable<ProducerOptions>())
           .Bool("autoTune", &ProducerOptions::auto_tune,
                 "take the block size and per-server capacity from the servers' cache metrics")
           .Int("blockSizeTokens", &ProducerOptions::block_size_tokens, Range::Closed(1, 65536),
                "tokens per hashed block (also the smallest block autoTune uses)")
           .Int("maxPrefixBlocksToMatch", &ProducerOptions::max_prefix_blocks, Range::Closed(1, 1 << 20),
                "blocks of the prompt hashed and matched")
           .Int("maxPrefixTokensToMatch", &ProducerOptions::max_prefix_tokens, Range::AtLeast(0),
                "tokens of the prompt matched; overrides maxPrefixBlocksToMatch when > 0")
           .Int("lruCapacityPerServer", &ProducerOptions::lru_capacity, Range::Above(0),
                "blocks remembered per server when autoTune has no capacity")
           .Custom("blockSize", ParamType::kInt, "characters per block; use blockSizeTokens",
                   [](const Params& v, ProducerOptions& o) -> absl::Status {
                     EPP_ASSIGN_OR_RETURN(o.block_size_chars, v.AsInt());
                     if (o.block_size_chars <= 0)
                       return absl::InvalidArgumentError(
                           absl::StrCat(v.path(), ": must be > 0 (deprecated: characters per block; use blockSizeTokens)"));
                     return absl::OkStatus();
                   },
                   nullptr)
           .Deprecated();
  return *t;
}

class ApproxPrefixProducer : public Plugin, public DataProducer, public RequestObserver, public EndpointState {
 public:
  ApproxPrefixProducer(TypedName tn, ProducerOptions o, SharedPrefixBus* bus)
      : Plugin(std::move(tn)),
        o_(o),
        index_(PrefixIndexOptions{o.block_size_tokens, MaxBlocksCap(o), o.lru_capacity}),
        bus_(bus) {
    // Shared state (--shared-state, replay's replicas): the other replicas' picks go into this
    // index as if this replica had made them; the bus keys them by this producer's name.
    if (bus_ != nullptr)
      subscription_ = bus_->Subscribe(name(), [this](std::string_view endpoint, std::span<const uint64_t> hashes,
                                                     int64_t capacity) { index_.Add(endpoint, hashes, capacity); });
  }
  ~ApproxPrefixProducer() override {
    if (bus_ != nullptr) bus_->Unsubscribe(subscription_);
  }
  const DataProducer* AsDataProducer() const override { return this; }
  PluginInputs Consumes() const override {
    return o_.auto_tune ? PluginInputs{PluginInput::kCacheGeometry} : PluginInputs{};
  }
  const RequestObserver* AsRequestObserver() const override { return this; }
  Params EffectiveParams() const override { return Table().Effective(o_); }

  void Prepare(SchedulingContext& ctx, Candidates candidates) const override {
    PrefixState& st = ctx.prefix;
    st.computed = true;
    st.producer = name();
    const int bs = candidates.empty() ? o_.block_size_tokens : BlockSize(*candidates.front());
    st.block_size_tokens = bs;
    const int64_t max_blocks = o_.max_prefix_tokens > 0 ? std::max<int64_t>(1, o_.max_prefix_tokens / bs)
                                                        : static_cast<int64_t>(o_.max_prefix_blocks);
    const InferenceRequest& r = *ctx.request;
    st.hashes = ChainedBlockHashes(r.prompt, static_cast<size_t>(bs) * kCharsPerToken, PrefixSeed(r.model, r.cache_salt),
                                   static_cast<size_t>(max_blocks));
    st.match_blocks.assign(ctx.endpoints.size(), 0);
    if (st.hashes.empty() || candidates.empty() || index_.entries() == 0) return;
    std::vector<std::string_view> names;
    names.reserve(candidates.size());
    for (const Endpoint* e : candidates) names.emplace_back(e->address);
    const std::vector<int> m = index_.MatchLengths(st.hashes, names);
    for (size_t i = 0; i < candidates.size(); ++i) st.match_blocks[ctx.IndexOf(candidates[i])] = m[i];
  }

  void PreRequest(const SchedulingContext& ctx, const Endpoint& picked) const override {
    if (!ctx.prefix.computed || ctx.prefix.producer != name() || ctx.prefix.hashes.empty()) return;
    // autoTune: the server's KV capacity, converted from its blocks to ours.
    int64_t capacity = 0;
    if (o_.auto_tune && picked.metrics.cache_num_blocks.value_or(0) > 0) {
      const int64_t server_bs = std::max<int64_t>(1, picked.metrics.cache_block_size.value_or(ctx.prefix.block_size_tokens));
      // Metrics can come from files or Python as well as from the extractor (which bounds them):
      // the product saturates instead of overflowing.
      int64_t tokens = 0;
      if (__builtin_mul_overflow(*picked.metrics.cache_num_blocks, server_bs, &tokens)) tokens = INT64_MAX;
      capacity = std::max<int64_t>(1, tokens / ctx.prefix.block_size_tokens);
    }
    index_.Add(picked.address, ctx.prefix.hashes, capacity);
    if (bus_ != nullptr) bus_->Publish(name(), picked.address, ctx.prefix.hashes, capacity);
  }

  // autoTune: the endpoint's KV block size, as GIE takes the first candidate's. Deviation: a
  // block smaller than blockSizeTokens (SGLang's page size is 1 token) is not used, since with
  // maxPrefixBlocksToMatch 256 it would cap matching at the first 1 KB of the prompt.
  int BlockSize(const Endpoint& e) const {
    const int64_t server = e.metrics.cache_block_size.value_or(0);
    if (!o_.auto_tune || server < o_.block_size_tokens) return o_.block_size_tokens;
    return static_cast<int>(std::min<int64_t>(server, 1 << 16));
  }

  void ForgetEndpoint(std::string_view endpoint) const override { index_.RemoveEndpoint(endpoint); }
  size_t PrefixEntries() const override { return index_.entries(); }

 private:
  static int MaxBlocksCap(const ProducerOptions& o) {
    // The index caps matching at this many blocks; with a token budget it is the budget over the
    // smallest block size autoTune could pick (1 token), bounded to keep the index sane.
    if (o.max_prefix_tokens > 0) return static_cast<int>(std::min<int64_t>(o.max_prefix_tokens, 1 << 20));
    return o.max_prefix_blocks;
  }
  ProducerOptions o_;
  mutable PrefixIndex index_;
  SharedPrefixBus* bus_;
  uint64_t subscription_ = 0;
};

}  // namespace

PluginSchema ApproxPrefixProducerSchema() { return Table().Schema(); }

namespace {

PluginOr CreateProducer(std::string_view type, const std::string& name, const Params& params, const PluginContext& ctx) {
  EPP_ASSIGN_OR_RETURN(ProducerOptions o, Table().Read(params));
  // The deprecated character block size counts only when blockSizeTokens is not given. It is read
  // as GIE read it when it was current (hashBlockSize, then blockSize: characters; GIE <= v1.3,
  // llm-d <= v0.6), at epp's 4 characters a token, rounded to the nearest token (at least 1): a
  // block is a whole number of tokens here. llm-d v0.9 on copies it into blockSizeTokens
  // unchanged; configs of that era spell blockSizeTokens, and the older ones meant characters.
  if (o.block_size_chars > 0 && !params.Has("blockSizeTokens")) {
    if (o.block_size_chars / kCharsPerToken > 65536)
      return absl::InvalidArgumentError(absl::StrCat(params.path(), ".blockSize: must be at most ",
                                                     65536 * kCharsPerToken, " characters"));
    o.block_size_tokens =
        static_cast<int>(std::max<int64_t>(1, (o.block_size_chars + kCharsPerToken / 2) / kCharsPerToken));
    if (ctx.warnings != nullptr) {
      const bool exact = o.block_size_chars % kCharsPerToken == 0;
      ctx.warnings->push_back(absl::StrCat(
          params.path(), ".blockSize: deprecated (characters per block); read as blockSizeTokens: ", o.block_size_tokens,
          exact ? "" : absl::StrCat(" (", o.block_size_chars, " characters rounded to whole tokens of ", kCharsPerToken, ")")));
    }
  } else if (o.block_size_chars > 0 && ctx.warnings != nullptr) {
    ctx.warnings->push_back(absl::StrCat(params.path(), ".blockSize: deprecated and ignored: blockSizeTokens is given"));
  }
  o.block_size_chars = 0;
  return std::make_unique<ApproxPrefixProducer>(TypedName{std::string(type), name}, o, ctx.shared_prefix);
}

}  // namespace

PluginOr CreateApproxPrefixProducer(const std::string& name, const Params& params, const PluginContext& ctx) {
  return CreateProducer(kApproxPrefixProducerType, name, params, ctx);
}

// llm-d's cluster-scoped type: its candidates are cluster endpoints (one address per remote
// pool's gateway), and the index keys blocks by endpoint address, so a repeated prefix already
// maps to the cluster that served it: the same producer under its own type name.
PluginOr CreateMultiClusterApproxPrefixProducer(const std::string& name, const Params& params, const PluginContext& ctx) {
  return CreateProducer(kMultiClusterApproxPrefixProducerType, name, params, ctx);
}

}  // namespace epp::plugins
