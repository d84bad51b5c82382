// PrefixIndex: per-endpoint LRU of block hashes plus a reverse map, under a reader-writer lock.
//
// The index is large (64 endpoints x 31,250 blocks is two million entries) and each request
// touches up to 256 blocks at random places in it, so the cost is cache misses, not
// instructions. The layout keeps them few and lets them overlap:
//   - one hash map, block -> the endpoints holding it, each with the stamp of its last use of the
//     block (a per-endpoint counter). It is both the reverse map MatchLengths reads and every
//     endpoint's LRU membership, so a pick's Add finds the entries MatchLengths has just brought
//     into cache, and an eviction costs one probe. (Until 2026-12 a second map per endpoint held
//     the stamps: twice the misses per touched and per evicted block, and 16 more bytes per entry.)
//   - per endpoint, a FIFO of (block, stamp) touches in order. Touching a block restamps it and
//     appends. Eviction pops the oldest touch and drops the block only if that touch is still its
//     latest (otherwise the entry is stale and skipped). The FIFO is a deque, so popping frees its
//     front; when stale entries make it longer than twice the endpoint's block count, it is
//     compacted into a fresh one a bounded slice per Add, so no single call pays for the whole
//     FIFO under the writer lock;
//   - stamps are 32 bits and only compared for equality: a stale touch would be taken for live
//     only if 2^32 touches of its endpoint had passed while it was still queued, and compaction
//     drops every stale touch within a few times the endpoint's capacity, which is capped at
//     kMaxCapacity (2^28 blocks, billions of tokens) for that reason;
//   - a lowered capacity (autoTune learning the server's real KV size) is applied a bounded
//     number of evictions per Add, for the same reason;
//   - lookups are prefetched a few blocks ahead (the hashes are known up front), so the misses of
//     consecutive blocks are in flight together instead of one after another.
#include <algorithm>
#include <deque>
#include <mutex>
#include <shared_mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "epp/prefix_cache.h"

namespace epp {

namespace {
constexpr size_t kPrefetchAhead = 8;
constexpr int64_t kMaxCapacity = int64_t{1} << 28;
}  // namespace

struct PrefixIndex::Impl {
  // One endpoint holding a block, with the stamp of its latest touch of it.
  struct Holder {
    uint32_t id;
    uint32_t stamp;
  };
  using Holders = absl::InlinedVector<Holder, 2>;
  struct Touch {
    uint64_t block;
    uint32_t stamp;
  };
  struct Endpoint {
    std::string name;
    size_t blocks = 0;    // blocks held
    uint32_t clock = 0;   // wraps; see the top of the file
    std::deque<Touch> fifo;  // touches, oldest first
    // Incremental compaction: entries of `fifo` before `scan` that were live when scanned are in
    // `next`, in order; when `scan` reaches the end, `next` replaces `fifo`. Entries that turn
    // stale after being copied (re-touched, or evicted from the front) are skipped at eviction
    // like any other stale entry.
    bool compacting = false;
    size_t scan = 0;
    std::deque<Touch> next;

    Touch PopFront() {
      const Touch t = fifo.front();
      fifo.pop_front();
      if (scan > 0) --scan;
      return t;
    }
  };

  PrefixIndexOptions options;
  mutable std::shared_mutex mu;
  absl::flat_hash_map<std::string, uint32_t> ids;
  std::vector<std::unique_ptr<Endpoint>> endpoints;  // by id; emptied after removal
  absl::flat_hash_map<uint64_t, Holders> holders;
  size_t entries = 0;

  // `id`'s entry in `v` (const or not), or null.
  template <typename V>
  static auto* Find(V& v, uint32_t id) {
    for (auto& h : v)
      if (h.id == id) return &h;
    return static_cast<decltype(&*v.begin())>(nullptr);
  }

  bool Live(const Touch& t, uint32_t id) const {
    auto it = holders.find(t.block);
    if (it == holders.end()) return false;
    const Holder* h = Find(it->second, id);
    return h != nullptr && h->stamp == t.stamp;
  }

  // Removes endpoint `id` from the holders of `block` if `stamp` is its latest touch of it (any
  // stamp when `any`). Returns whether it did.
  bool Drop(uint64_t block, uint32_t id, uint32_t stamp, bool any) {
    auto it = holders.find(block);
    if (it == holders.end()) return false;
    Holders& v = it->second;
    Holder* h = Find(v, id);
    if (h == nullptr || (!any && h->stamp != stamp)) return false;
    *h = v.back();
    v.pop_back();
    if (v.empty()) holders.erase(it);
    return true;
  }

  // Drops the least recently used blocks of `e` until it holds at most `capacity`, at most
  // `max_evictions` of them and `max_pops` FIFO entries per call (a later call continues).
  void Evict(Endpoint& e, uint32_t id, size_t capacity, size_t max_evictions, size_t max_pops) {
    if (e.blocks > capacity)
      for (size_t a = 0; a < kPrefetchAhead && a < e.fifo.size(); ++a) holders.prefetch(e.fifo[a].block);
    size_t evicted = 0, popped = 0;
    while (e.blocks > capacity && !e.fifo.empty() && evicted < max_evictions && popped < max_pops) {
      if (kPrefetchAhead < e.fifo.size()) holders.prefetch(e.fifo[kPrefetchAhead].block);
      const Touch t = e.PopFront();
      ++popped;
      if (!Drop(t.block, id, t.stamp, false)) continue;  // touched again later
      --e.blocks;
      --entries;
      ++evicted;
    }
  }

  // Advances compaction of `e` by at most `budget` FIFO entries (starting it when the FIFO is
  // over twice the endpoint's block count).
  void CompactStep(Endpoint& e, uint32_t id, size_t budget) {
    if (!e.compacting) {
      if (e.fifo.size() <= 2 * e.blocks + 64) return;
      e.compacting = true;
      e.scan = 0;
      e.next.clear();
    }
    const size_t end = std::min(e.fifo.size(), e.scan + budget);
    for (size_t i = e.scan; i < end; ++i) {
      if (i + kPrefetchAhead < end) holders.prefetch(e.fifo[i + kPrefetchAhead].block);
      if (Live(e.fifo[i], id)) e.next.push_back(e.fifo[i]);
    }
    e.scan = end;
    if (e.scan == e.fifo.size()) {
      e.fifo.swap(e.next);
      e.next = {};
      e.scan = 0;
      e.compacting = false;
    }
  }
};

PrefixIndex::PrefixIndex(const PrefixIndexOptions& options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
}
PrefixIndex::~PrefixIndex() = default;

const PrefixIndexOptions& PrefixIndex::options() const { return impl_->options; }

namespace {

// Per block, only the block's holders are visited (not every candidate still matching against
// every holder, which was quadratic in the holders of a widely shared prefix): a candidate that
// has matched blocks 0..b-1 has depth b, and a holder of block b at depth b moves to b + 1.
template <typename Name>
std::vector<int> MatchLengthsImpl(const PrefixIndex::Impl& m, std::span<const uint64_t> hashes,
                                  std::span<const Name> endpoints) {
  std::vector<int> out(endpoints.size(), 0);
  const size_t n = std::min(hashes.size(), static_cast<size_t>(std::max(0, m.options.max_prefix_blocks_to_match)));
  std::shared_lock<std::shared_mutex> lock(m.mu);
  // By endpoint id: the candidate's depth, or -1 for an id that is not a candidate of this call.
  // Kept per thread at -1 between calls, so a call costs its candidates, not every id ever seen.
  thread_local std::vector<int32_t> depth;
  if (depth.size() < m.endpoints.size()) depth.resize(m.endpoints.size(), -1);
  std::vector<uint32_t> candidates;  // ids, in `endpoints` order (kNoId for unknown names)
  constexpr uint32_t kNoId = ~uint32_t{0};
  candidates.reserve(endpoints.size());
  size_t alive = 0;
  for (size_t i = 0; i < endpoints.size(); ++i) {
    auto it = m.ids.find(absl::string_view(endpoints[i].data(), endpoints[i].size()));
    const uint32_t id = it == m.ids.end() ? kNoId : it->second;
    if (id != kNoId && depth[id] < 0) {  // a name given twice is one candidate
      depth[id] = 0;
      ++alive;
    }
    candidates.push_back(id);
  }
  for (size_t b = 0; b < std::min(n, kPrefetchAhead); ++b) m.holders.prefetch(hashes[b]);
  for (size_t b = 0; b < n && alive > 0; ++b) {
    if (b + kPrefetchAhead < n) m.holders.prefetch(hashes[b + kPrefetchAhead]);
    auto h = m.holders.find(hashes[b]);
    if (h == m.holders.end()) break;
    alive = 0;
    const int32_t at = static_cast<int32_t>(b);
    for (const PrefixIndex::Impl::Holder& holder : h->second) {
      int32_t& d = depth[holder.id];
      if (d == at) {
        d = at + 1;
        ++alive;
      }
    }
  }
  for (size_t i = 0; i < endpoints.size(); ++i)
    if (candidates[i] != kNoId) out[i] = depth[candidates[i]];
  for (uint32_t id : candidates)
    if (id != kNoId) depth[id] = -1;
  return out;
}

}  // namespace

std::vector<int> PrefixIndex::MatchLengths(std::span<const uint64_t> hashes,
                                           std::span<const std::string> endpoints) const {
  return MatchLengthsImpl(*impl_, hashes, endpoints);
}

std::vector<int> PrefixIndex::MatchLengths(std::span<const uint64_t> hashes,
                                           std::span<const std::string_view> endpoints) const {
  return MatchLengthsImpl(*impl_, hashes, endpoints);
}

void PrefixIndex::Add(std::string_view endpoint, std::span<const uint64_t> hashes, int64_t capacity) {
  Impl& m = *impl_;
  const size_t n = std::min(hashes.size(), static_cast<size_t>(std::max(0, m.options.max_prefix_blocks_to_match)));
  capacity = std::clamp<int64_t>(capacity > 0 ? capacity : m.options.lru_capacity_per_server, 1, kMaxCapacity);
  std::unique_lock<std::shared_mutex> lock(m.mu);
  auto [it, inserted] = m.ids.try_emplace(std::string(endpoint), static_cast<uint32_t>(m.endpoints.size()));
  if (inserted) {
    m.endpoints.push_back(std::make_unique<Impl::Endpoint>());
    m.endpoints.back()->name = std::string(endpoint);
  }
  const uint32_t id = it->second;
  Impl::Endpoint& e = *m.endpoints[id];
  // Walk from the last block to the first so that the first ends up most recently used: the
  // prefix outlives the blocks that extend it.
  for (size_t k = n; k-- > 0;) {
    if (k >= kPrefetchAhead) m.holders.prefetch(hashes[k - kPrefetchAhead]);
    const uint64_t h = hashes[k];
    const uint32_t stamp = ++e.clock;
    Impl::Holders& v = m.holders[h];
    if (Impl::Holder* mine = Impl::Find(v, id)) {
      mine->stamp = stamp;
    } else {
      v.push_back({id, stamp});
      ++e.blocks;
      ++m.entries;
    }
    e.fifo.push_back({h, stamp});
  }
  // Bounded work per call (see the top of the file): inserts are at most n, so n + 64 evictions
  // keep up with them and also work a lowered capacity off; compaction scans 2n + 64 entries,
  // more than the n this call appended, so it always finishes.
  m.Evict(e, id, static_cast<size_t>(capacity), n + 64, 4 * n + 256);
  m.CompactStep(e, id, 2 * n + 64);
}

void PrefixIndex::RemoveEndpoint(std::string_view endpoint) {
  Impl& m = *impl_;
  std::unique_lock<std::shared_mutex> lock(m.mu);
  auto it = m.ids.find(std::string(endpoint));
  if (it == m.ids.end()) return;
  const uint32_t id = it->second;
  Impl::Endpoint& e = *m.endpoints[id];
  // Every held block has at least one touch queued (in `fifo`, or in `next` while compacting).
  for (const auto* q : {&e.fifo, &e.next})
    for (const Impl::Touch& t : *q) m.Drop(t.block, id, t.stamp, true);
  m.entries -= e.blocks;
  e.blocks = 0;
  e.fifo = {};
  e.next = {};
  e.scan = 0;
  e.compacting = false;
  // The id stays reserved for this name so concurrent callers holding it cannot alias another.
}

size_t PrefixIndex::entries() const {
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  return impl_->entries;
}

size_t PrefixIndex::endpoint_count() const {
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  size_t n = 0;
  for (const auto& e : impl_->endpoints) n += e->blocks > 0;
  return n;
}

}  // namespace epp
