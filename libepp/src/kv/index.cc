// KvBlockIndex (kv/index.h): block keys chained over token ids, holders per key, engine hashes
// per endpoint and medium, an LRU bound on the keys.
#include "epp/kv/index.h"

#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstring>
#include <atomic>
#include <deque>
#include <list>
#include <queue>
#include <mutex>
#include <shared_mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace epp {

std::vector<uint32_t> EstimateTokenIds(std::string_view text) {
  std::vector<uint32_t> out((text.size() + 3) / 4, 0);
  if constexpr (std::endian::native == std::endian::little) {
    if (!text.empty()) std::memcpy(out.data(), text.data(), text.size());  // the packing is little-endian
  } else {
    for (size_t i = 0; i < text.size(); ++i)
      out[i / 4] |= static_cast<uint32_t>(static_cast<unsigned char>(text[i])) << (8 * (i % 4));
  }
  return out;
}

namespace {

// The first key of a chain: seed, block size and adapter, so that chains of different block
// sizes or adapters never share keys.
uint64_t RootKey(uint64_t seed, int block_size, std::string_view lora) {
  uint64_t h = XXH3_64bits_withSeed(lora.data(), lora.size(), seed);
  const uint64_t bs = static_cast<uint64_t>(block_size);
  return XXH3_64bits_withSeed(&bs, sizeof bs, h);
}

// The key of the next block: its token ids hashed with the parent's key as the seed, so a key
// names the whole prefix up to and including its block, as the engines' own block hashes do.
uint64_t NextKey(uint64_t parent, const uint32_t* tokens, int block_size) {
  uint64_t k = XXH3_64bits_withSeed(tokens, static_cast<size_t>(block_size) * sizeof(uint32_t), parent);
  return k == 0 ? 1 : k;  // 0 is never a key
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

struct KvBlockIndex::Impl {
  struct Holder {
    uint64_t engine_hash;
    uint32_t endpoint;
    uint16_t medium;
  };
  // Holders of a block in two parallel arrays: `who` (endpoint << 8 | medium) is what a lookup
  // scans, 4 bytes a holder; the engine hashes are only read to forget evicted blocks. `who` is
  // kept sorted, so blocks held by the same endpoints on the same media have equal arrays
  // whatever order the holders stored them in (Lookup counts such repeats instead of scanning).
  static uint32_t Who(uint32_t endpoint, uint16_t medium) { return endpoint << 8 | medium; }
  struct Holders {
    std::vector<uint32_t> who;
    std::vector<uint64_t> engine;
    size_t size() const { return who.size(); }
    bool empty() const { return who.empty(); }
    Holder at(size_t i) const { return Holder{engine[i], who[i] >> 8, static_cast<uint16_t>(who[i] & 0xff)}; }
    // Position of `w`, or size() when absent.
    size_t find(uint32_t w) const {
      auto it = std::lower_bound(who.begin(), who.end(), w);
      return it != who.end() && *it == w ? static_cast<size_t>(it - who.begin()) : who.size();
    }
    void insert(const Holder& h) {  // REQUIRES: absent
      const uint32_t w = Who(h.endpoint, h.medium);
      const auto pos = std::lower_bound(who.begin(), who.end(), w) - who.begin();
      who.insert(who.begin() + pos, w);
      engine.insert(engine.begin() + pos, h.engine_hash);
    }
    void erase_at(size_t i) {
      who.erase(who.begin() + static_cast<long>(i));
      engine.erase(engine.begin() + static_cast<long>(i));
    }
  };
  struct Block {
    Holders holders;
    std::list<uint64_t>::iterator lru;  // position in `lru` (back = most recently stored)
    int32_t block_size = 0;
  };
  // An engine hash is only unique per endpoint and medium (each engine hashes on its own, and
  // a block offloaded to CPU keeps its hash), so the engine-hash maps are keyed by both.
  struct EngineKey {
    uint64_t hash;
    uint16_t medium;
    bool operator==(const EngineKey&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const EngineKey& k) {
      return H::combine(std::move(h), k.hash, k.medium);
    }
  };
  // The engine-hash names of one endpoint. Invariant: each holder it has (speculative ones
  // aside) has its `engine_hash` in `engine`, pointing at the holder's block: its current name.
  // Any other name is an alias: an older name of a block stored again under a new hash (the same
  // tokens under another cache_salt or multimodal input, or a flood of re-hashed stores), or a
  // name whose block was evicted or removed under its current name. Aliases are what let a
  // later BlockRemoved or child name a block by an older hash, so some are kept, but at most
  // options.max_engine_hash_aliases per endpoint: `alias_fifo` lists names in the order they
  // became aliases, and the oldest go first. It may hold stale entries (names since removed or
  // current again), skipped when popped and compacted away when they outnumber the live ones.
  struct EndpointState {
    std::string name;
    std::string base_model;
    absl::flat_hash_map<EngineKey, uint64_t> engine;  // engine hash (per medium) -> block key
    absl::flat_hash_map<uint64_t, int64_t> speculative;  // block key -> expiry (AddSpeculative)
    std::deque<EngineKey> alias_fifo;                 // names as they became aliases, oldest first
    int64_t named = 0;                                // holders (speculative ones aside)
    bool live = false;                                // known to the index (not cleared away)
    int64_t aliases() const { return std::max<int64_t>(0, static_cast<int64_t>(engine.size()) - named); }
  };
  // Speculative entries by expiry, for ExpireSpeculative. Entries confirmed, cleared or extended
  // since are left in the queue and skipped when they come due, instead of being searched for.
  struct SpecDue {
    int64_t expires_us;
    uint32_t endpoint;
    uint64_t key;
    bool operator>(const SpecDue& o) const { return expires_us > o.expires_us; }
  };

  KvIndexOptions options;
  uint64_t seed = 0;
  mutable std::shared_mutex mu;
  absl::flat_hash_map<uint64_t, Block> blocks;
  std::list<uint64_t> lru;
  std::vector<EndpointState> endpoints;
  absl::flat_hash_map<std::string, uint32_t> endpoint_ids;
  std::vector<std::string> media;             // as sent
  std::vector<double> medium_weight;          // per medium id
  absl::flat_hash_map<std::string, uint16_t> medium_ids;
  std::map<int, int64_t> block_sizes;         // block size -> blocks keyed at it
  int64_t holders = 0, evicted = 0, aliases_dropped = 0;
  uint16_t spec_medium = 1;                   // kSpeculativeMedium's id
  std::priority_queue<SpecDue, std::vector<SpecDue>, std::greater<SpecDue>> spec_due;
  std::atomic<int64_t> next_expiry{INT64_MAX};
  int64_t spec_holders = 0, spec_confirmed = 0, spec_expired = 0;
  // SetChangeObserver: changes recorded while it is set, handed over at the end of each call.
  std::function<void(std::span<const KvHolderChange>)> observer;
  std::vector<KvHolderChange> changes;

  void Note(bool stored, uint64_t key, int block_size, const Holder& h) {
    if (!observer || h.medium == spec_medium) return;
    changes.push_back(KvHolderChange{stored, KvHolderRecord{endpoints[h.endpoint].name, media[h.medium], key,
                                                            h.engine_hash, block_size}});
  }
  void Flush() {
    if (!observer || changes.empty()) return;
    observer(changes);
    changes.clear();
  }

  uint32_t EndpointId(std::string_view name) {
    auto it = endpoint_ids.find(absl::string_view(name.data(), name.size()));
    if (it != endpoint_ids.end()) return it->second;
    const uint32_t id = static_cast<uint32_t>(endpoints.size());
    endpoints.emplace_back();
    endpoints.back().name = std::string(name);
    endpoint_ids.emplace(std::string(name), id);
    return id;
  }
  uint16_t MediumId(std::string_view sent) {
    const std::string name = sent.empty() ? std::string("GPU") : std::string(sent);  // nil medium: GPU (llm-d)
    auto it = medium_ids.find(name);
    if (it != medium_ids.end()) return it->second;  // (std::string key)
    if (media.size() >= 255) return 254;  // more media than any engine has: the rest share the last id
    const uint16_t id = static_cast<uint16_t>(media.size());
    media.push_back(name);
    auto w = options.medium_weights.find(Lower(name));
    medium_weight.push_back(w == options.medium_weights.end() ? 1.0 : w->second);
    medium_ids.emplace(name, id);
    return id;
  }

  // Finds the block key an endpoint's engine hash names, on any medium (GPU first).
  const uint64_t* FindEngine(const EndpointState& ep, uint64_t hash) const {
    for (uint16_t m = 0; m < media.size(); ++m) {
      auto it = ep.engine.find(EngineKey{hash, m});
      if (it != ep.engine.end()) return &it->second;
    }
    return nullptr;
  }

  // `key` is now held by h.endpoint on h.medium: a new block enters the LRU as the most recent;
  // a known one moves there (a store refreshes it, as an engine's LRU would).
  void AddHolder(uint64_t key, int block_size, const Holder& h) {
    auto [it, inserted] = blocks.try_emplace(key);
    Block& b = it->second;
    if (inserted) {
      b.block_size = block_size;
      lru.push_back(key);
      b.lru = std::prev(lru.end());
      block_sizes[block_size]++;
    } else {
      lru.splice(lru.end(), lru, b.lru);  // stored again: most recent
      const size_t i = b.holders.find(Who(h.endpoint, h.medium));
      if (i < b.holders.size()) {
        const uint64_t was = b.holders.engine[i];
        if (was != h.engine_hash) {  // stored again under another name: the old one is an alias now
          Note(true, key, b.block_size, h);
          if (h.medium != spec_medium) endpoints[h.endpoint].alias_fifo.push_back(EngineKey{was, h.medium});
        }
        b.holders.engine[i] = h.engine_hash;
        return;
      }
    }
    b.holders.insert(h);
    ++holders;
    if (h.medium != spec_medium) ++endpoints[h.endpoint].named;
    Note(true, key, b.block_size, h);
  }

  // Whether `n` is the current name of endpoint `id`'s holder of `key` (not an alias).
  bool IsCurrent(uint32_t id, const EngineKey& n, uint64_t key) const {
    auto it = blocks.find(key);
    if (it == blocks.end()) return false;
    const size_t i = it->second.holders.find(Who(id, n.medium));
    return i < it->second.holders.size() && it->second.holders.engine[i] == n.hash;
  }

  // Endpoint `id`'s engine names `key` `n`: the name points at the key and becomes its holder's
  // current name (the holder added when new; its previous name, if another, an alias). A name
  // that was the current one of another block (the engine reused the hash for other content)
  // takes its holder with it.
  void Name(uint32_t id, const EngineKey& n, uint64_t key, int block_size) {
    EndpointState& ep = endpoints[id];
    auto [slot, fresh] = ep.engine.try_emplace(n, key);
    if (!fresh && slot->second != key) {
      const uint64_t old = slot->second;
      slot->second = key;
      if (IsCurrent(id, n, old)) RemoveHolder(old, id, n.medium);
    }
    AddHolder(key, block_size, Holder{n.hash, id, n.medium});
  }

  // Keeps endpoint `id`'s aliases within options.max_engine_hash_aliases, the oldest forgotten
  // first. Amortized O(1) per alias made.
  void TrimAliases(uint32_t id) {
    EndpointState& ep = endpoints[id];
    const int64_t cap = static_cast<int64_t>(options.max_engine_hash_aliases);
    while (ep.aliases() > cap && !ep.alias_fifo.empty()) {
      const EngineKey n = ep.alias_fifo.front();
      ep.alias_fifo.pop_front();
      auto it = ep.engine.find(n);
      if (it == ep.engine.end() || IsCurrent(id, n, it->second)) continue;  // stale entry
      ep.engine.erase(it);
      ++aliases_dropped;
    }
    if (ep.alias_fifo.size() <= static_cast<size_t>(2 * ep.aliases()) + 64) return;
    // Compaction: the live aliases, each once at its latest position, in order.
    absl::flat_hash_set<EngineKey> seen;
    std::deque<EngineKey> kept;
    for (auto it = ep.alias_fifo.rbegin(); it != ep.alias_fifo.rend(); ++it) {
      auto name = ep.engine.find(*it);
      if (name == ep.engine.end() || IsCurrent(id, *it, name->second) || !seen.insert(*it).second) continue;
      kept.push_front(*it);
    }
    ep.alias_fifo = std::move(kept);
  }

  // Removes one holder; drops the block when it was the last. Does not touch the engine maps.
  void RemoveHolder(uint64_t key, uint32_t endpoint, uint16_t medium) {
    auto it = blocks.find(key);
    if (it == blocks.end()) return;
    auto& hs = it->second.holders;
    const size_t i = hs.find(Who(endpoint, medium));
    if (i < hs.size()) {
      Note(false, key, it->second.block_size, hs.at(i));
      hs.erase_at(i);
      --holders;
      if (medium != spec_medium) --endpoints[endpoint].named;
    }
    if (hs.empty()) DropBlock(it);
  }

  void DropBlock(absl::flat_hash_map<uint64_t, Block>::iterator it) {
    lru.erase(it->second.lru);
    if (--block_sizes[it->second.block_size] == 0) block_sizes.erase(it->second.block_size);
    blocks.erase(it);
  }

  // Past max_blocks, the least recently stored blocks go with all their holders, and each
  // holder's engine-hash (or speculative) entry with them, so no name points at a dropped key.
  void EvictOverflow() {
    while (blocks.size() > options.max_blocks && !lru.empty()) {
      auto it = blocks.find(lru.front());
      for (size_t i = 0; i < it->second.holders.size(); ++i) {
        const Holder h = it->second.holders.at(i);
        Note(false, it->first, it->second.block_size, h);
        if (h.medium == spec_medium) {
          if (endpoints[h.endpoint].speculative.erase(it->first)) --spec_holders;
        } else {
          endpoints[h.endpoint].engine.erase(EngineKey{h.engine_hash, h.medium});
          --endpoints[h.endpoint].named;
        }
        --holders;
      }
      DropBlock(it);
      ++evicted;
    }
  }

  // AllBlocksCleared, or the endpoint gone: everything it held, by its events or speculatively.
  void Clear(uint32_t id) {
    EndpointState& ep = endpoints[id];
    for (const auto& [ek, key] : ep.engine) RemoveHolder(key, id, ek.medium);
    ep.engine.clear();
    ep.alias_fifo.clear();
    ep.named = 0;
    for (const auto& [key, expiry] : ep.speculative) RemoveHolder(key, id, spec_medium);
    spec_holders -= static_cast<int64_t>(ep.speculative.size());
    ep.speculative.clear();
  }

  // The engine stored `key` on endpoint `id`: a speculative entry for it is confirmed.
  void Confirm(uint32_t id, uint64_t key) {
    EndpointState& ep = endpoints[id];
    if (ep.speculative.empty() || !ep.speculative.erase(key)) return;
    RemoveHolder(key, id, spec_medium);
    --spec_holders;
    ++spec_confirmed;
  }

  // BlockStored. With token ids, the keys are computed from them, chained from the parent block
  // (found by the engine hash the event names) or from the root for a first block; the event's
  // engine hashes are recorded as names for those keys. Without token ids (an offload to another
  // medium), the engine hashes must already name known blocks. An event whose parent is unknown
  // (its predecessor was missed or evicted) is skipped: its keys could not be computed.
  void Stored(uint32_t id, const KvBlockStored& s, KvApplyResult& r) {
    EndpointState& ep = endpoints[id];
    const uint16_t medium = MediumId(s.medium);
    if (medium == spec_medium) {  // the name the index lists its predictions under
      ++r.skipped;
      r.last_skip = absl::StrCat("BlockStored on medium '", std::string(kSpeculativeMedium), "' (reserved)");
      return;
    }
    if (s.token_ids.empty()) {  // location only: a known block now also on this medium
      for (uint64_t h : s.block_hashes) {
        const uint64_t* key = FindEngine(ep, h);
        if (!key || !blocks.contains(*key)) continue;
        const uint64_t k = *key;
        Name(id, EngineKey{h, medium}, k, blocks[k].block_size);
        Confirm(id, k);
        ++r.stored;
      }
      return;
    }
    if (s.block_size <= 0 || s.block_size > (1 << 20) ||
        s.token_ids.size() != static_cast<size_t>(s.block_size) * s.block_hashes.size()) {
      ++r.skipped;
      r.last_skip = absl::StrCat("BlockStored with ", s.token_ids.size(), " tokens for ", s.block_hashes.size(),
                                 " blocks of ", s.block_size);
      return;
    }
    const int bs = static_cast<int>(s.block_size);
    uint64_t prev;
    if (s.parent_block_hash) {
      const uint64_t* parent = FindEngine(ep, *s.parent_block_hash);
      if (!parent) {
        ++r.skipped;
        r.last_skip = "BlockStored parent " + Hex(*s.parent_block_hash) + " unknown";
        return;
      }
      prev = *parent;
    } else {
      const std::string_view lora =
          s.lora_name.empty() || s.lora_name == ep.base_model ? std::string_view() : std::string_view(s.lora_name);
      prev = RootKey(seed, bs, lora);
    }
    for (size_t i = 0; i < s.block_hashes.size(); ++i) {
      const uint64_t key = NextKey(prev, s.token_ids.data() + i * static_cast<size_t>(bs), bs);
      Name(id, EngineKey{s.block_hashes[i], medium}, key, bs);
      Confirm(id, key);
      prev = key;
      ++r.stored;
    }
  }

  // BlockRemoved: the engine hash, on that medium, no longer names a block of this endpoint.
  // Its current name: the holder goes. An alias: only the name goes (the block is still held
  // under its current name). A name the index does not know (never stored, evicted, or an alias
  // forgotten for the cap) is counted and otherwise ignored.
  void Removed(uint32_t id, const KvBlockRemoved& rm, KvApplyResult& r) {
    EndpointState& ep = endpoints[id];
    const uint16_t medium = MediumId(rm.medium);
    for (uint64_t h : rm.block_hashes) {
      const EngineKey n{h, medium};
      auto it = ep.engine.find(n);
      if (it == ep.engine.end()) {
        ++r.removed_unknown;
        continue;
      }
      const uint64_t key = it->second;
      ep.engine.erase(it);
      if (IsCurrent(id, n, key)) {
        RemoveHolder(key, id, medium);
        ++r.removed;
      }
    }
  }
};

KvBlockIndex::KvBlockIndex(KvIndexOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  if (impl_->options.max_blocks == 0) impl_->options.max_blocks = 1;
  std::map<std::string, double> lowered;
  for (const auto& [k, v] : impl_->options.medium_weights) lowered[Lower(k)] = v;
  impl_->options.medium_weights = std::move(lowered);
  impl_->seed = XXH3_64bits(impl_->options.hash_seed.data(), impl_->options.hash_seed.size());
  impl_->MediumId("GPU");  // id 0: GPU first in FindEngine
  impl_->spec_medium = impl_->MediumId(kSpeculativeMedium);
}

KvBlockIndex::~KvBlockIndex() = default;

const KvIndexOptions& KvBlockIndex::options() const { return impl_->options; }

// One batch of one endpoint's events, in order, under the writer lock; eviction runs once per
// batch rather than per event.
KvApplyResult KvBlockIndex::Apply(std::string_view endpoint, std::string_view base_model, const KvEventBatch& batch) {
  KvApplyResult r;
  Impl& m = *impl_;
  std::unique_lock lock(m.mu);
  const uint32_t id = m.EndpointId(endpoint);
  m.endpoints[id].live = true;
  m.endpoints[id].base_model = std::string(base_model);
  for (const KvEvent& ev : batch.events) {
    if (const auto* s = std::get_if<KvBlockStored>(&ev)) {
      m.Stored(id, *s, r);
      m.TrimAliases(id);
    } else if (const auto* rm = std::get_if<KvBlockRemoved>(&ev)) {
      m.Removed(id, *rm, r);
    } else {
      m.Clear(id);
      ++r.cleared;
    }
  }
  m.EvictOverflow();
  m.Flush();
  return r;
}

void KvBlockIndex::ClearEndpoint(std::string_view endpoint) {
  Impl& m = *impl_;
  std::unique_lock lock(m.mu);
  auto it = m.endpoint_ids.find(absl::string_view(endpoint.data(), endpoint.size()));
  if (it == m.endpoint_ids.end()) return;
  m.Clear(it->second);
  m.endpoints[it->second].live = false;
  m.Flush();
}

// Predicted holders: the blocks of a request just routed to `endpoint`, before its engine has
// published them (the producer's speculativeIndexing), under their own medium so they weigh
// and expire apart from confirmed ones.
void KvBlockIndex::AddSpeculative(std::string_view endpoint, std::span<const uint32_t> tokens, std::string_view model,
                                  int block_size, int64_t expires_us) {
  if (block_size <= 0 || tokens.size() < static_cast<size_t>(block_size)) return;
  Impl& m = *impl_;
  std::unique_lock lock(m.mu);
  const uint32_t id = m.EndpointId(endpoint);
  Impl::EndpointState& ep = m.endpoints[id];
  ep.live = true;
  const std::string_view lora = ep.base_model.empty() || ep.base_model == model ? std::string_view() : model;
  const size_t n = tokens.size() / static_cast<size_t>(block_size);
  uint64_t prev = RootKey(m.seed, block_size, lora);
  const uint32_t lo = Impl::Who(id, 0), hi = Impl::Who(id, 0xff);
  for (size_t i = 0; i < n; ++i) {
    prev = NextKey(prev, tokens.data() + i * static_cast<size_t>(block_size), block_size);
    auto it = m.blocks.find(prev);
    if (it != m.blocks.end()) {  // held by its events already: nothing to predict
      const auto& who = it->second.holders.who;
      bool held = false;
      for (auto w = std::lower_bound(who.begin(), who.end(), lo); w != who.end() && *w <= hi && !held; ++w)
        held = (*w & 0xff) != m.spec_medium;
      if (held) continue;
    }
    auto [slot, fresh] = ep.speculative.try_emplace(prev, expires_us);
    if (!fresh) {
      slot->second = std::max(slot->second, expires_us);
    } else {
      m.AddHolder(prev, block_size, Impl::Holder{0, id, m.spec_medium});
      ++m.spec_holders;
    }
    m.spec_due.push(Impl::SpecDue{expires_us, id, prev});
  }
  m.EvictOverflow();
  m.Flush();
  m.next_expiry = m.spec_due.empty() ? INT64_MAX : m.spec_due.top().expires_us;
}

std::vector<KvHolderRecord> KvBlockIndex::Holders() const {
  const Impl& m = *impl_;
  std::shared_lock lock(m.mu);
  std::vector<KvHolderRecord> out;
  out.reserve(static_cast<size_t>(m.holders));
  for (const auto& [key, b] : m.blocks)
    for (size_t i = 0; i < b.holders.size(); ++i) {
      const Impl::Holder h = b.holders.at(i);
      if (h.medium == m.spec_medium) continue;
      out.push_back(KvHolderRecord{m.endpoints[h.endpoint].name, m.media[h.medium], key, h.engine_hash, b.block_size});
    }
  return out;
}

size_t KvBlockIndex::Restore(std::span<const KvHolderRecord> holders) {
  Impl& m = *impl_;
  std::unique_lock lock(m.mu);
  // What is restored is already where it came from: not handed to the observer again.
  auto observer = std::move(m.observer);
  m.observer = nullptr;
  size_t added = 0;
  for (const KvHolderRecord& r : holders) {
    if (r.endpoint.empty() || r.key == 0 || r.block_size <= 0 || r.block_size > (1 << 20) ||
        r.medium == kSpeculativeMedium)
      continue;
    const uint32_t id = m.EndpointId(r.endpoint);
    m.endpoints[id].live = true;
    const uint16_t medium = m.MediumId(r.medium);
    if (medium == m.spec_medium) continue;
    auto b = m.blocks.find(r.key);
    const int block_size = b != m.blocks.end() ? b->second.block_size : r.block_size;
    m.Name(id, Impl::EngineKey{r.engine_hash, medium}, r.key, block_size);
    m.TrimAliases(id);
    ++added;
  }
  m.EvictOverflow();
  m.changes.clear();
  m.observer = std::move(observer);
  return added;
}

void KvBlockIndex::SetChangeObserver(std::function<void(std::span<const KvHolderChange>)> observer) {
  Impl& m = *impl_;
  std::unique_lock lock(m.mu);
  m.observer = std::move(observer);
  m.changes.clear();
}

void KvBlockIndex::ExpireSpeculative(int64_t now_us) {
  Impl& m = *impl_;
  if (now_us < m.next_expiry.load(std::memory_order_relaxed)) return;
  std::unique_lock lock(m.mu);
  while (!m.spec_due.empty() && m.spec_due.top().expires_us <= now_us) {
    const Impl::SpecDue d = m.spec_due.top();
    m.spec_due.pop();
    auto& spec = m.endpoints[d.endpoint].speculative;
    auto it = spec.find(d.key);
    if (it == spec.end() || it->second > now_us) continue;  // confirmed, cleared, or extended
    spec.erase(it);
    m.RemoveHolder(d.key, d.endpoint, m.spec_medium);
    --m.spec_holders;
    ++m.spec_expired;
  }
  m.next_expiry = m.spec_due.empty() ? INT64_MAX : m.spec_due.top().expires_us;
}

std::vector<uint64_t> KvBlockIndex::BlockKeys(std::span<const uint32_t> tokens, int block_size,
                                              std::string_view lora) const {
  std::vector<uint64_t> keys;
  if (block_size <= 0) return keys;
  const size_t n = tokens.size() / static_cast<size_t>(block_size);
  keys.reserve(n);
  uint64_t prev = RootKey(impl_->seed, block_size, lora);
  for (size_t i = 0; i < n; ++i) {
    prev = NextKey(prev, tokens.data() + i * static_cast<size_t>(block_size), block_size);
    keys.push_back(prev);
  }
  return keys;
}

// The hot path of precise prefix scoring, under the reader lock: for each block size present
// and each kind of request (base model, LoRA), the request's keys are walked from the first and
// each asked endpoint's run of consecutive held blocks is counted. The walk stops at the first
// block no asked endpoint extends its run with.
void KvBlockIndex::Lookup(std::span<const uint32_t> tokens, std::string_view model, std::span<const std::string> endpoints,
                          std::vector<KvPrefixMatch>& out, std::span<const uint64_t> base_keys,
                          int base_keys_block_size) const {
  out.assign(endpoints.size(), KvPrefixMatch{});
  const Impl& m = *impl_;
  std::shared_lock lock(m.mu);
  if (m.blocks.empty() || endpoints.empty()) return;
  // Per endpoint id: its position in `endpoints` (-1: not asked) and whether the request is a
  // LoRA request there (a model other than the endpoint's base model).
  thread_local std::vector<int32_t> slot;
  thread_local std::vector<uint8_t> lora_at;  // per position
  slot.assign(m.endpoints.size(), -1);
  lora_at.assign(endpoints.size(), 0);
  bool any_lora = false, any_base = false;
  for (size_t i = 0; i < endpoints.size(); ++i) {
    auto it = m.endpoint_ids.find(endpoints[i]);
    if (it == m.endpoint_ids.end() || !m.endpoints[it->second].live) continue;
    slot[it->second] = static_cast<int32_t>(i);
    const std::string& base = m.endpoints[it->second].base_model;
    lora_at[i] = !(base.empty() || base == model);
    (lora_at[i] ? any_lora : any_base) = true;
  }
  // Per position: blocks held so far from the first, their weighted sum, and the weight counted
  // for the current block (an endpoint holding a block on two media counts the better one).
  struct Run {
    int64_t blocks;
    double weight;
    double last;
  };
  thread_local std::vector<Run> runs;
  thread_local std::vector<int32_t> pass_slot;  // endpoint id -> position for this pass, -1: skip
  for (const auto& [bs, count] : m.block_sizes) {
    for (int pass = 0; pass < 2; ++pass) {
      const bool lora_pass = pass == 1;
      if (lora_pass ? !any_lora : !any_base) continue;
      std::vector<uint64_t> hashed;
      std::span<const uint64_t> keys;
      if (!lora_pass && bs == base_keys_block_size && !base_keys.empty()) {
        keys = base_keys;
      } else {
        hashed = BlockKeys(tokens, bs, lora_pass ? model : std::string_view());
        keys = hashed;
      }
      if (keys.empty()) continue;
      pass_slot = slot;
      for (int32_t& p : pass_slot)
        if (p >= 0 && static_cast<bool>(lora_at[p]) != lora_pass) p = -1;
      runs.assign(endpoints.size(), Run{0, 0, 0});
      // Consecutive blocks of one prompt usually have the same holders (a sorted list, so equal
      // sets are equal arrays). Such a block changes the runs exactly as the block before it did, so it is only counted (`repeat`) and applied to the endpoints that
      // advanced (`advanced_at`) when the list changes: a 384-byte compare instead of 96 holder
      // updates per block at 96 endpoints.
      thread_local std::vector<int32_t> advanced_at;
      advanced_at.clear();
      const std::vector<uint32_t>* prev_who = nullptr;
      int64_t repeat = 0;
      auto flush = [&] {
        if (repeat == 0) return;
        for (const int32_t pos : advanced_at) {
          Run& r = runs[pos];
          r.blocks += repeat;
          r.weight += static_cast<double>(repeat) * r.last;
        }
        repeat = 0;
      };
      for (size_t b = 0; b < keys.size(); ++b) {
        auto it = m.blocks.find(keys[b]);
        if (it == m.blocks.end()) break;
        const std::vector<uint32_t>& who = it->second.holders.who;
        if (prev_who && who.size() == prev_who->size() &&
            std::memcmp(who.data(), prev_who->data(), who.size() * sizeof(uint32_t)) == 0) {
          ++repeat;
          continue;
        }
        flush();
        prev_who = &who;
        advanced_at.clear();
        const int64_t at = static_cast<int64_t>(b);
        for (const uint32_t w : who) {
          const int32_t pos = pass_slot[w >> 8];
          if (pos < 0) continue;
          Run& r = runs[pos];
          const double mw = m.medium_weight[w & 0xff];
          if (r.blocks == at) {  // held every block so far: extends its run
            r.blocks = at + 1;
            r.weight += mw;
            r.last = mw;
            advanced_at.push_back(pos);
          } else if (r.blocks == at + 1 && mw > r.last) {  // the same block on a better medium
            r.weight += mw - r.last;
            r.last = mw;
          }
        }
        if (advanced_at.empty()) break;
      }
      flush();
      for (size_t i = 0; i < endpoints.size(); ++i) {
        const Run& r = runs[i];
        if (r.blocks == 0) continue;
        // Several block sizes: keep the longest match in tokens.
        if (r.blocks * bs > out[i].tokens()) out[i] = KvPrefixMatch{bs, r.blocks, r.weight};
      }
    }
  }
}

std::vector<KvEndpointSummary> KvBlockIndex::Endpoints() const {
  const Impl& m = *impl_;
  std::shared_lock lock(m.mu);
  std::vector<KvEndpointSummary> out;
  for (uint32_t id = 0; id < m.endpoints.size(); ++id) {
    const Impl::EndpointState& ep = m.endpoints[id];
    if (!ep.live) continue;
    KvEndpointSummary s;
    s.endpoint = ep.name;
    absl::flat_hash_map<uint64_t, bool> keys;
    for (const auto& [ek, key] : ep.engine) {
      if (!m.IsCurrent(id, ek, key)) continue;  // an alias: its block is counted under its current name
      keys[key] = true;
      s.media[m.media[ek.medium]]++;
    }
    s.blocks = static_cast<int64_t>(keys.size());
    s.speculative = static_cast<int64_t>(ep.speculative.size());
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.endpoint < b.endpoint; });
  return out;
}

// Counts for the server's status; approx_bytes is an estimate from the structure sizes (the
// header gives measured figures).
KvIndexStats KvBlockIndex::Stats() const {
  const Impl& m = *impl_;
  std::shared_lock lock(m.mu);
  KvIndexStats s;
  s.blocks = static_cast<int64_t>(m.blocks.size());
  s.holders = m.holders;
  s.evicted = m.evicted;
  s.speculative = m.spec_holders;
  s.speculative_confirmed = m.spec_confirmed;
  s.speculative_expired = m.spec_expired;
  int64_t engine_entries = 0, fifo_entries = 0;
  for (const auto& ep : m.endpoints) {
    engine_entries += static_cast<int64_t>(ep.engine.size());
    s.engine_hash_aliases += ep.aliases();
    fifo_entries += static_cast<int64_t>(ep.alias_fifo.size());
  }
  s.engine_hashes = engine_entries;
  s.engine_hash_aliases_dropped = m.aliases_dropped;
  // flat_hash_map slot + control byte, list node, holder, engine-map slot, alias FIFO entry.
  const int64_t block_bytes = static_cast<int64_t>(sizeof(uint64_t) + sizeof(Impl::Block) + 1) + 3 * 8 + 8;
  s.approx_bytes = s.blocks * block_bytes + s.holders * static_cast<int64_t>(sizeof(uint32_t) + sizeof(uint64_t)) +
                   engine_entries * static_cast<int64_t>(sizeof(Impl::EngineKey) + sizeof(uint64_t) + 1) +
                   fifo_entries * static_cast<int64_t>(sizeof(Impl::EngineKey));
  return s;
}

}  // namespace epp
