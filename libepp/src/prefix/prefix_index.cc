// PrefixIndex: per-endpoint LRU of block hashes plus a reverse map, under a reader-writer lock.
//
// Layout per endpoint: an intrusive LRU (a std::list of hashes, most recent at the back) and a
// hash map from block to its list node. The reverse map holds, per block, the ids of the endpoints
// that hold it; endpoints per block are few (the pool size at most), so a small vector is enough.
#include <algorithm>
#include <list>
#include <mutex>
#include <shared_mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "epp/prefix_cache.h"

namespace epp {

struct PrefixIndex::Impl {
  struct Endpoint {
    std::string name;
    std::list<uint64_t> lru;  // front = least recently used
    absl::flat_hash_map<uint64_t, std::list<uint64_t>::iterator> blocks;
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
  for (size_t b = 0; b < n && !alive.empty(); ++b) {
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
    const uint64_t h = hashes[k];
    auto found = e.blocks.find(h);
    if (found != e.blocks.end()) {
      e.lru.splice(e.lru.end(), e.lru, found->second);
      continue;
    }
    e.lru.push_back(h);
    e.blocks.emplace(h, std::prev(e.lru.end()));
    m.holders[h].push_back(id);
    ++m.entries;
    if (static_cast<int64_t>(e.blocks.size()) > capacity) {
      const uint64_t victim = e.lru.front();
      e.lru.pop_front();
      e.blocks.erase(victim);
      m.Unlink(victim, id);
      --m.entries;
    }
  }
}

void PrefixIndex::RemoveEndpoint(std::string_view endpoint) {
  Impl& m = *impl_;
  std::unique_lock<std::shared_mutex> lock(m.mu);
  auto it = m.ids.find(std::string(endpoint));
  if (it == m.ids.end()) return;
  const uint32_t id = it->second;
  Impl::Endpoint& e = *m.endpoints[id];
  for (uint64_t h : e.lru) m.Unlink(h, id);
  m.entries -= e.blocks.size();
  e.lru.clear();
  e.blocks.clear();
  // The id stays reserved for this name so concurrent callers holding it cannot alias another.
}

size_t PrefixIndex::entries() const {
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  return impl_->entries;
}

size_t PrefixIndex::endpoint_count() const {
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  size_t n = 0;
  for (const auto& e : impl_->endpoints) n += !e->blocks.empty();
  return n;
}

}  // namespace epp
