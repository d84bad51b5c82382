// PrefixIndex: per-endpoint LRU of block hashes plus a reverse map, under a reader-writer lock.
//
// The index is large (64 endpoints x 31,250 blocks is two million entries, ~100 MB) and each
// request touches up to 256 blocks at random places in it, so the cost is cache misses, not
// instructions. The layout keeps them few and lets them overlap:
//   - per endpoint, a flat hash map from block to the stamp of its last use (a per-endpoint
//     counter), and a FIFO of (block, stamp) touches in order. Touching a block is one map probe
//     plus a sequential append, where a linked LRU would also chase list nodes. Eviction pops the
//     FIFO's oldest touch and drops the block only if that touch is still its latest (otherwise
//     the entry is stale and skipped). The FIFO is a deque, so popping frees its front; when
//     stale entries make it longer than twice the map's size, it is compacted into a fresh one
//     a bounded slice per Add, so no single call pays for the whole FIFO under the writer lock;
//   - a lowered capacity (autoTune learning the server's real KV size) is applied a bounded
//     number of evictions per Add, for the same reason;
//   - the reverse map holds, per block, the ids of the endpoints holding it (a small inline
//     vector: endpoints per block are few);
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
}  // namespace

struct PrefixIndex::Impl {
  struct Touch {
    uint64_t block;
    uint64_t stamp;
  };
  struct Endpoint {
    std::string name;
    absl::flat_hash_map<uint64_t, uint64_t> stamps;  // block -> stamp of its latest touch
    std::deque<Touch> fifo;                           // touches, oldest first
    uint64_t clock = 0;
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

    bool Live(const Touch& t) const {
      auto it = stamps.find(t.block);
      return it != stamps.end() && it->second == t.stamp;
    }

    // Advances compaction by at most `budget` FIFO entries (starting it when the FIFO is over
    // twice the map's size).
    void CompactStep(size_t budget) {
      if (!compacting) {
        if (fifo.size() <= 2 * stamps.size() + 64) return;
        compacting = true;
        scan = 0;
        next.clear();
      }
      const size_t end = std::min(fifo.size(), scan + budget);
      for (size_t i = scan; i < end; ++i) {
        if (i + kPrefetchAhead < end) stamps.prefetch(fifo[i + kPrefetchAhead].block);
        if (Live(fifo[i])) next.push_back(fifo[i]);
      }
      scan = end;
      if (scan == fifo.size()) {
        fifo.swap(next);
        next = {};
        scan = 0;
        compacting = false;
      }
    }
  };

  PrefixIndexOptions options;
  mutable std::shared_mutex mu;
  absl::flat_hash_map<std::string, uint32_t> ids;
  std::vector<std::unique_ptr<Endpoint>> endpoints;  // by id; null after removal
  absl::flat_hash_map<uint64_t, absl::InlinedVector<uint32_t, 4>> holders;
  size_t entries = 0;

  void Unlink(uint64_t block, uint32_t id) {
    auto it = holders.find(block);
    if (it == holders.end()) return;
    auto& v = it->second;
    v.erase(std::remove(v.begin(), v.end(), id), v.end());
    if (v.empty()) holders.erase(it);
  }

  // Drops the least recently used blocks of `e` until it holds at most `capacity`, at most
  // `max_evictions` of them and `max_pops` FIFO entries per call (a later call continues).
  void Evict(Endpoint& e, uint32_t id, size_t capacity, size_t max_evictions, size_t max_pops) {
    if (e.stamps.size() > capacity)
      for (size_t a = 0; a < kPrefetchAhead && a < e.fifo.size(); ++a) e.stamps.prefetch(e.fifo[a].block);
    size_t evicted = 0, popped = 0;
    while (e.stamps.size() > capacity && !e.fifo.empty() && evicted < max_evictions && popped < max_pops) {
      if (kPrefetchAhead < e.fifo.size()) {
        e.stamps.prefetch(e.fifo[kPrefetchAhead].block);
        holders.prefetch(e.fifo[kPrefetchAhead].block);
      }
      const Touch t = e.PopFront();
      ++popped;
      auto it = e.stamps.find(t.block);
      if (it == e.stamps.end() || it->second != t.stamp) continue;  // touched again later
      e.stamps.erase(it);
      Unlink(t.block, id);
      --entries;
      ++evicted;
    }
  }
};

PrefixIndex::PrefixIndex(const PrefixIndexOptions& options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
}
PrefixIndex::~PrefixIndex() = default;

const PrefixIndexOptions& PrefixIndex::options() const { return impl_->options; }

namespace {

template <typename Name>
std::vector<int> MatchLengthsImpl(const PrefixIndex::Impl& m, std::span<const uint64_t> hashes,
                                  std::span<const Name> endpoints) {
  std::vector<int> out(endpoints.size(), 0);
  const size_t n = std::min(hashes.size(), static_cast<size_t>(std::max(0, m.options.max_prefix_blocks_to_match)));
  std::shared_lock<std::shared_mutex> lock(m.mu);
  // Candidate ids still matching every block so far, with their position in `endpoints`.
  std::vector<std::pair<uint32_t, size_t>> alive;
  for (size_t i = 0; i < endpoints.size(); ++i) {
    auto it = m.ids.find(absl::string_view(endpoints[i].data(), endpoints[i].size()));
    if (it != m.ids.end()) alive.emplace_back(it->second, i);
  }
  for (size_t b = 0; b < std::min(n, kPrefetchAhead); ++b) m.holders.prefetch(hashes[b]);
  for (size_t b = 0; b < n && !alive.empty(); ++b) {
    if (b + kPrefetchAhead < n) m.holders.prefetch(hashes[b + kPrefetchAhead]);
    auto h = m.holders.find(hashes[b]);
    if (h == m.holders.end()) break;
    const auto& holders = h->second;
    auto keep = std::remove_if(alive.begin(), alive.end(), [&](const std::pair<uint32_t, size_t>& a) {
      return std::find(holders.begin(), holders.end(), a.first) == holders.end();
    });
    alive.erase(keep, alive.end());
    for (const auto& a : alive) out[a.second] = static_cast<int>(b + 1);
  }
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
  capacity = std::max<int64_t>(1, capacity > 0 ? capacity : m.options.lru_capacity_per_server);
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
    if (k >= kPrefetchAhead) {
      e.stamps.prefetch(hashes[k - kPrefetchAhead]);
      m.holders.prefetch(hashes[k - kPrefetchAhead]);
    }
    const uint64_t h = hashes[k];
    const uint64_t stamp = ++e.clock;
    auto [slot, inserted] = e.stamps.try_emplace(h, stamp);
    if (!inserted) slot->second = stamp;
    e.fifo.push_back({h, stamp});
    if (inserted) {
      m.holders[h].push_back(id);
      ++m.entries;
    }
  }
  // Bounded work per call (see the top of the file): inserts are at most n, so n + 64 evictions
  // keep up with them and also work a lowered capacity off; compaction scans 2n + 64 entries,
  // more than the n this call appended, so it always finishes.
  m.Evict(e, id, static_cast<size_t>(capacity), n + 64, 4 * n + 256);
  e.CompactStep(2 * n + 64);
}

void PrefixIndex::RemoveEndpoint(std::string_view endpoint) {
  Impl& m = *impl_;
  std::unique_lock<std::shared_mutex> lock(m.mu);
  auto it = m.ids.find(std::string(endpoint));
  if (it == m.ids.end()) return;
  const uint32_t id = it->second;
  Impl::Endpoint& e = *m.endpoints[id];
  for (const auto& [h, stamp] : e.stamps) m.Unlink(h, id);
  m.entries -= e.stamps.size();
  e.stamps = {};
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
  for (const auto& e : impl_->endpoints) n += !e->stamps.empty();
  return n;
}

}  // namespace epp
