// mm-embeddings-cache-producer and mm-embeddings-cache-scorer (llm-d Router's multimodal
// encoder-cache affinity): the producer remembers, per endpoint, the media items (images, audio,
// video; InferenceRequest::media_items) of the requests it recently sent there, in an LRU sized
// from the servers' encoder cache; for each request it counts how many of its distinct items each
// candidate holds (SchedulingContext::encoder_cache). The scorer turns that into matched / total.
//
// A model server caches the encoder's output for a media input (vLLM's encoder cache), so sending
// the same image to the server that encoded it recently skips the vision encoder. The servers do
// not publish what they hold; like the approximate prefix producer, this one infers it from its
// own decisions.
//
// Differences from llm-d, on purpose:
//   - Items come from the request parser (the URL or inline data of each media part), not from
//     the tokenizer's multimodal features: epp's token-producer does not return vLLM's mm hashes,
//     and the parser already reads every part. llm-d's own estimate backend hashes the same
//     identities (URL, audio data and format).
//   - After a pick the items are recorded on every server the request reaches (epp's
//     RequestObserver contract), not only the primary profile's: in P/D the prefill server runs the
//     encoder, so it is the one that holds the embeddings.
//   - The deploy sample's `cacheSizeInMB` (which llm-d's strict decoder would refuse) is read as a
//     deprecated spelling of cacheSizeInMBPerServer, so the sample loads.
#include <algorithm>
#include <array>
#include <list>
#include <map>
#include <mutex>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "epp/scheduling.h"
#include "plugins/producer/producer.h"

namespace epp::plugins {
namespace {

// llm-d's sizing: the MiB budget describes the server's encoder cache, and one tracked item is
// assumed to take 2 MiB of it.
constexpr int64_t kDefaultCacheSizeMb = 4096;
constexpr int64_t kAssumedItemMb = 2;

// llm-d's hit-ratio histogram buckets.
constexpr std::array<double, 11> kRatioBounds = {0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0};

struct MmProducerOptions {
  int64_t cache_size_mb = kDefaultCacheSizeMb;
};

const ParamTable<MmProducerOptions>& ProducerTable() {
  static const auto* t =
      &(*new ParamTable<MmProducerOptions>())
           .Int("cacheSizeInMBPerServer", &MmProducerOptions::cache_size_mb, Range::Any(),
                "per-endpoint encoder-cache budget in MiB; entries remembered = MiB / 2 (2 MiB assumed per "
                "item); <= 0 means the default")
           .Alias("cacheSizeInMB", "cacheSizeInMBPerServer");
  return *t;
}

// Recently served item hashes of one endpoint, most recent first.
class ItemLru {
 public:
  bool Contains(uint64_t h) const { return pos_.contains(h); }
  void Add(uint64_t h, size_t capacity) {
    if (auto it = pos_.find(h); it != pos_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      return;
    }
    order_.push_front(h);
    pos_[h] = order_.begin();
    while (order_.size() > capacity) {
      pos_.erase(order_.back());
      order_.pop_back();
    }
  }
  size_t size() const { return order_.size(); }

 private:
  std::list<uint64_t> order_;
  absl::flat_hash_map<uint64_t, std::list<uint64_t>::iterator> pos_;
};

class MmEmbeddingsProducer : public Plugin,
                             public DataProducer,
                             public RequestObserver,
                             public EndpointState,
                             public MetricsSource {
 public:
  MmEmbeddingsProducer(TypedName tn, MmProducerOptions o)
      : Plugin(std::move(tn)), o_(o), capacity_(static_cast<size_t>(std::max<int64_t>(1, o.cache_size_mb / kAssumedItemMb))) {}
  const DataProducer* AsDataProducer() const override { return this; }
  const RequestObserver* AsRequestObserver() const override { return this; }
  const MetricsSource* AsMetricsSource() const override { return this; }
  Params EffectiveParams() const override { return ProducerTable().Effective(o_); }
  bool FillsPrefix() const override { return false; }

  void Prepare(SchedulingContext& ctx, Candidates candidates) const override {
    EncoderCacheState& st = ctx.encoder_cache;
    st = EncoderCacheState{};
    st.producer = name();
    // A media item referenced twice in one request is encoded once: count it once.
    for (const MediaItem& item : ctx.request->media_items)
      if (std::none_of(st.items.begin(), st.items.end(), [&](const MediaItem& i) { return i.hash == item.hash; }))
        st.items.push_back(item);
    if (st.items.empty()) return;
    st.computed = true;
    st.matched.assign(ctx.endpoints.size(), 0);
    const double total = static_cast<double>(st.items.size());
    std::lock_guard<std::mutex> lock(mu_);
    for (const MediaItem& item : st.items) {
      ++queries_[item.modality];
      for (const auto& [endpoint, lru] : caches_)
        if (lru.Contains(item.hash)) ++hits_[{endpoint, item.modality}];
    }
    for (const Endpoint* e : candidates) {
      int m = 0;
      if (auto it = caches_.find(e->address); it != caches_.end())
        for (const MediaItem& item : st.items) m += it->second.Contains(item.hash) ? 1 : 0;
      st.matched[ctx.IndexOf(e)] = m;
      ObserveRatio(static_cast<double>(m) / total);
    }
  }

  void PreRequest(const SchedulingContext& ctx, const Endpoint& picked) const override {
    const EncoderCacheState& st = ctx.encoder_cache;
    if (!st.computed || st.producer != name()) return;
    std::lock_guard<std::mutex> lock(mu_);
    ItemLru& lru = caches_[picked.address];
    for (const MediaItem& item : st.items) lru.Add(item.hash, capacity_);
  }

  void ForgetEndpoint(std::string_view endpoint) const override {
    std::lock_guard<std::mutex> lock(mu_);
    caches_.erase(std::string(endpoint));
  }

  void CollectMetrics(std::vector<PluginMetric>& out) const override {
    std::lock_guard<std::mutex> lock(mu_);
    const std::pair<std::string, std::string> type{"plugin_type", std::string(kMmEmbeddingsCacheProducerType)};
    const std::pair<std::string, std::string> plugin{"plugin_name", name()};
    for (MediaModality m : {MediaModality::kImage, MediaModality::kAudio, MediaModality::kVideo}) {
      auto it = queries_.find(m);
      if (it == queries_.end()) continue;
      PluginMetric q;
      q.name = "llm_d_epp_encoder_cache_queries_total";
      q.type = "counter";
      q.help = "Media item lookups against the encoder-cache affinity LRUs (one per distinct item of a request).";
      q.labels = {type, plugin, {"modality", std::string(MediaModalityName(m))}};
      q.value = static_cast<double>(it->second);
      out.push_back(std::move(q));
    }
    for (const auto& [key, n] : hits_) {
      PluginMetric h;
      h.name = "llm_d_epp_encoder_cache_hits_total";
      h.type = "counter";
      h.help = "Of those lookups, the ones an endpoint's LRU held, by endpoint.";
      h.labels = {type, plugin, {"pod", key.first}, {"modality", std::string(MediaModalityName(key.second))}};
      h.value = static_cast<double>(n);
      out.push_back(std::move(h));
    }
    PluginMetric r;
    r.name = "llm_d_epp_encoder_cache_hit_ratio";
    r.type = "histogram";
    r.help = "Per candidate endpoint and request: the share of the request's media items its LRU held.";
    r.labels = {type, plugin};
    r.bounds.assign(kRatioBounds.begin(), kRatioBounds.end());
    uint64_t acc = 0;
    for (size_t i = 0; i < kRatioBounds.size(); ++i) r.cumulative.push_back(acc += ratio_buckets_[i]);
    r.count = acc + ratio_buckets_[kRatioBounds.size()];
    r.sum = ratio_sum_;
    out.push_back(std::move(r));
  }

  // Items remembered for `endpoint` (tests).
  size_t Entries(std::string_view endpoint) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = caches_.find(std::string(endpoint));
    return it == caches_.end() ? 0 : it->second.size();
  }

 private:
  void ObserveRatio(double ratio) const {  // REQUIRES: mu_ held
    size_t b = 0;
    while (b < kRatioBounds.size() && ratio > kRatioBounds[b]) ++b;
    ++ratio_buckets_[b];
    ratio_sum_ += ratio;
  }

  MmProducerOptions o_;
  size_t capacity_;
  mutable std::mutex mu_;
  mutable std::map<std::string, ItemLru, std::less<>> caches_;  // by endpoint address
  mutable std::map<MediaModality, int64_t> queries_;
  mutable std::map<std::pair<std::string, MediaModality>, int64_t> hits_;
  mutable std::array<uint64_t, kRatioBounds.size() + 1> ratio_buckets_{};  // last: +Inf
  mutable double ratio_sum_ = 0;
};

struct MmScorerOptions {
  std::string producer;
};

const ParamTable<MmScorerOptions>& ScorerTable() {
  static const auto* t = &(*new ParamTable<MmScorerOptions>())
                              .String("producerName", &MmScorerOptions::producer,
                                      "the mm-embeddings-cache-producer whose matches are read; empty: any")
                              .OmitEmpty();
  return *t;
}

class MmEmbeddingsScorer : public Plugin, public Scorer {
 public:
  MmEmbeddingsScorer(TypedName tn, MmScorerOptions o) : Plugin(std::move(tn)), o_(std::move(o)) {}
  const Scorer* AsScorer() const override { return this; }
  ScorerCategory category() const override { return ScorerCategory::kAffinity; }
  Params EffectiveParams() const override { return ScorerTable().Effective(o_); }
  void Score(const SchedulingContext& ctx, Candidates candidates, std::span<double> scores) const override {
    const EncoderCacheState& st = ctx.encoder_cache;
    const bool usable = st.computed && !st.items.empty() && (o_.producer.empty() || o_.producer == st.producer);
    for (size_t i = 0; i < candidates.size(); ++i) {
      const size_t idx = ctx.IndexOf(candidates[i]);
      scores[i] = usable && idx < st.matched.size()
                      ? static_cast<double>(st.matched[idx]) / static_cast<double>(st.items.size())
                      : 0.0;
    }
  }
  std::string Explain(const SchedulingContext& ctx, const Endpoint& e) const override {
    const EncoderCacheState& st = ctx.encoder_cache;
    if (!st.computed || st.items.empty()) return "no media items";
    const size_t idx = ctx.IndexOf(&e);
    const int m = idx < st.matched.size() ? st.matched[idx] : 0;
    return absl::StrCat(m, "/", st.items.size(), " media items recently sent here");
  }

 private:
  MmScorerOptions o_;
};

}  // namespace

PluginSchema MmEmbeddingsCacheProducerSchema() { return ProducerTable().Schema(); }
PluginSchema MmEmbeddingsCacheScorerSchema() { return ScorerTable().Schema(); }

PluginOr CreateMmEmbeddingsCacheProducer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(MmProducerOptions o, ProducerTable().Read(params));
  if (o.cache_size_mb <= 0) o.cache_size_mb = kDefaultCacheSizeMb;  // llm-d's rule
  return std::make_unique<MmEmbeddingsProducer>(TN(kMmEmbeddingsCacheProducerType, name), o);
}

PluginOr CreateMmEmbeddingsCacheScorer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(MmScorerOptions o, ScorerTable().Read(params));
  return std::make_unique<MmEmbeddingsScorer>(TN(kMmEmbeddingsCacheScorerType, name), std::move(o));
}

size_t MmEmbeddingsCacheEntries(const Plugin& producer, std::string_view endpoint) {
  const auto* p = dynamic_cast<const MmEmbeddingsProducer*>(&producer);
  return p ? p->Entries(endpoint) : 0;
}

}  // namespace epp::plugins
