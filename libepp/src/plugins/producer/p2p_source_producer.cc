// p2p-source-producer (llm-d Router): names a peer server to pull the prompt's cached KV blocks
// from, in the upstream request header x-kv-cache-source-host-port, so that llm-d's routing
// sidecar fetches them over the P2P connector (vLLM's OffloadingConnector with a p2p tier)
// instead of recomputing them.
//
// From the prefix producer's matches (SchedulingContext::prefix) it takes the candidates caching
// within one block of the most prompt tokens and samples one with weight 1 / (1 + waiting queue),
// the sampling coordinate a hash of the request id (x-request-id), so that requests for a widely
// cached prefix spread their pulls over its holders while one request always gets the same
// answer. After the pick, the header is set when that peer caches at least minCachedTokenDelta
// more tokens than the server computing the prefix: the prefillProfileName profile's pick when
// that profile ran and picked one (P/D), else the primary pick. A gateway's own copy of the
// header is always removed.
//
// Differences from llm-d, on purpose: llm-d chooses the peer in its data-producer phase and
// writes the header in PreRequest; epp does both after the pick (RequestHeaderSource), from the
// same per-cycle matches, which gives the same answer. llm-d counts only a peer's CPU-tier blocks
// when the precise producer reports tiers; epp's prefix data has no tiers, so every cached block
// counts (as llm-d does for producers without tier data).
#include <algorithm>
#include <cstdint>

#include "epp/scheduling.h"
#include "plugins/producer/producer.h"

namespace epp::plugins {
namespace {

struct P2pOptions {
  std::string producer;
  int64_t min_delta = 1;
  std::string prefill_profile = "prefill";
};

const ParamTable<P2pOptions>& Table() {
  static const auto* t =
      &(*new ParamTable<P2pOptions>())
           .String("prefixMatchInfoProducerName", &P2pOptions::producer,
                   "the prefix producer whose matches are read; empty: the one in use")
           .OmitEmpty()
           .Int("minCachedTokenDelta", &P2pOptions::min_delta, Range::AtLeast(1),
                "cached prompt tokens the peer must hold beyond the computing server for the header to be set")
           .String("prefillProfileName", &P2pOptions::prefill_profile,
                   "the P/D prefill profile; its pick, when it has one, is the server computing the prefix");
  return *t;
}

// FNV-1a, 32 bits (llm-d's sampling coordinate), mapped onto [0, 1).
double SpreadFraction(std::string_view id) {
  uint32_t h = 2166136261u;
  for (unsigned char c : id) {
    h ^= c;
    h *= 16777619u;
  }
  return static_cast<double>(h) / 4294967296.0;
}

class P2pSourceProducer : public Plugin, public RequestHeaderSource {
 public:
  P2pSourceProducer(TypedName tn, P2pOptions o) : Plugin(std::move(tn)), o_(std::move(o)) {}
  const RequestHeaderSource* AsRequestHeaderSource() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kPrefixMatch, PluginInput::kWaitingQueue}; }
  Params EffectiveParams() const override { return Table().Effective(o_); }
  std::vector<std::string> OwnedHeaders() const override { return {std::string(kKvCacheSourceHeader)}; }

  void RequestHeaders(const SchedulingContext& ctx, std::span<const ProfileRun> runs, std::string_view primary_profile,
                      std::vector<std::pair<std::string, std::string>>& out) const override {
    const PrefixState& st = ctx.prefix;
    if (!st.computed || (!o_.producer.empty() && o_.producer != st.producer)) return;
    const Endpoint* source = nullptr;
    int64_t source_tokens = 0;
    if (!ChooseSource(ctx, source, source_tokens)) return;
    const Endpoint* computing = nullptr;
    for (const ProfileRun& r : runs)
      if (r.profile == o_.prefill_profile && !r.picked.empty()) computing = r.picked.front();
    if (computing == nullptr)
      for (const ProfileRun& r : runs)
        if (r.profile == primary_profile && !r.picked.empty()) computing = r.picked.front();
    if (computing == nullptr || computing->address == source->address) return;
    const int64_t computing_tokens = static_cast<int64_t>(ctx.PrefixMatchBlocks(computing)) * st.block_size_tokens;
    if (source_tokens - computing_tokens < o_.min_delta) return;
    out.emplace_back(std::string(kKvCacheSourceHeader), source->address);
  }

 private:
  bool ChooseSource(const SchedulingContext& ctx, const Endpoint*& source, int64_t& source_tokens) const {
    const PrefixState& st = ctx.prefix;
    const int64_t block = st.block_size_tokens;
    int64_t max_cached = 0;
    for (size_t i = 0; i < st.match_blocks.size() && i < ctx.endpoints.size(); ++i)
      max_cached = std::max(max_cached, static_cast<int64_t>(st.match_blocks[i]) * block);
    if (max_cached == 0) return false;
    std::vector<std::pair<const Endpoint*, double>> band;  // within one block of the most cached
    double total = 0;
    for (size_t i = 0; i < st.match_blocks.size() && i < ctx.endpoints.size(); ++i) {
      const int64_t cached = static_cast<int64_t>(st.match_blocks[i]) * block;
      if (cached == 0 || cached + block < max_cached) continue;
      const double w = 1.0 / (1.0 + ctx.endpoints[i].metrics.waiting_queue_size.value_or(0));
      band.emplace_back(&ctx.endpoints[i], w);
      total += w;
    }
    double target = SpreadFraction(ctx.request->header("x-request-id").value_or("")) * total;
    source = band.back().first;
    for (const auto& [e, w] : band) {
      if (target < w) {
        source = e;
        break;
      }
      target -= w;
    }
    source_tokens = static_cast<int64_t>(ctx.PrefixMatchBlocks(source)) * block;
    return true;
  }

  P2pOptions o_;
};

}  // namespace

PluginSchema P2pSourceProducerSchema() { return Table().Schema(); }

PluginOr CreateP2pSourceProducer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(P2pOptions o, Table().Read(params));
  if (o.prefill_profile.empty()) o.prefill_profile = "prefill";  // llm-d: empty means the default
  return std::make_unique<P2pSourceProducer>(TN(kP2pSourceProducerType, name), std::move(o));
}

}  // namespace epp::plugins
