// Byte-level BPE (tokenizer_impl.h): Hugging Face's merge order, the lowest-ranked adjacent pair
// first and the leftmost of equal ranks, with a heap so long pre-tokens stay O(n log n).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <queue>

#include "absl/strings/str_cat.h"
#include "common/utf8.h"
#include "tokenizer/tokenizer_impl.h"

namespace epp::tokenizer_internal {
namespace {

inline uint64_t Key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }

}  // namespace

namespace {

// A possible merge in the heap of Merge(): ordered by rank, then position, so the heap pops what
// Hugging Face's BPE would merge next. left / right are the symbols seen when it was pushed; a
// candidate whose symbols have since changed is stale and skipped.
struct Candidate {
  uint32_t rank;
  uint32_t pos;
  uint32_t left, right, merged;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

// The ids of recently seen pre-tokens, per thread and tokenizer (no locks on the encode path):
// prose and code repeat their words, and BPE over a word costs far more than a lookup. Bounded:
// a full cache starts over.
struct CachedIds {
  uint8_t n = 0;
  uint32_t ids[7];
};
constexpr size_t kCacheEntries = 1 << 15;
constexpr size_t kCachedWordBytes = 32;

struct ThreadCaches {
  struct One {
    uint64_t owner = 0;
    absl::flat_hash_map<std::string, CachedIds> map;
    absl::flat_hash_map<uint64_t, CachedIds> short_map;  // words of up to 7 bytes
  };
  One slots[4];
  unsigned next = 0;
  One& For(uint64_t owner) {
    for (One& s : slots)
      if (s.owner == owner) return s;
    One& s = slots[next++ % 4];  // a fifth tokenizer on this thread evicts the oldest
    s.owner = owner;
    s.map.clear();
    s.short_map.clear();
    return s;
  }
};

std::atomic<uint64_t> next_owner{1};

}  // namespace

// Each model has its own owner number, so the per-thread caches never serve one tokenizer's ids
// to another (nor to a new tokenizer loaded at a freed address).
Bpe::Bpe() : cache_owner(next_owner.fetch_add(1)) {}

// The symbols BPE starts from. Byte-level: one symbol per byte (every byte has a token).
// Character-level (SentencePiece-style): one per UTF-8 character; a character missing from the
// vocabulary becomes its bytes' <0xXX> tokens with byte_fallback, else the unknown token,
// consecutive unknowns fused into one with fuse_unk, as Hugging Face's BPE does.
uint32_t Bpe::Initial(std::string_view word, uint32_t* sym) const {
  const uint32_t n = static_cast<uint32_t>(word.size());
  if (!char_level) {
    for (uint32_t i = 0; i < n; ++i) sym[i] = *byte_id[static_cast<unsigned char>(word[i])];
    return n;
  }
  uint32_t k = 0;
  bool last_unk = false;
  for (uint32_t i = 0; i < n;) {
    const unsigned char c = static_cast<unsigned char>(word[i]);
    const uint32_t len = std::min<uint32_t>(n - i, static_cast<uint32_t>(internal::Utf8SequenceLength(c)));
    const std::string_view ch = word.substr(i, len);
    i += len;
    std::optional<uint32_t> id;
    if (len <= 7) {
      if (auto it = short_vocab.find(ShortKey(ch)); it != short_vocab.end()) id = it->second;
    }
    if (id) {
      sym[k++] = *id;
      last_unk = false;
      continue;
    }
    if (byte_fallback) {
      bool all = true;
      for (char b : ch) all = all && fallback_id[static_cast<unsigned char>(b)].has_value();
      if (all) {
        for (char b : ch) sym[k++] = *fallback_id[static_cast<unsigned char>(b)];
        last_unk = false;
        continue;
      }
    }
    if (fuse_unk && last_unk) continue;
    sym[k++] = *unk_id;  // the loader requires an unknown token where a character can miss
    last_unk = true;
  }
  return k;
}

// Keeps the ids `out` gained since `before` under `key`, when they fit an entry.
template <typename Map, typename Key>
void Remember(Map& map, Key&& key, const std::vector<uint32_t>& out, size_t before) {
  const size_t n = out.size() - before;
  if (n > 7) return;
  if (map.size() >= kCacheEntries) map.clear();
  CachedIds& c = map[std::forward<Key>(key)];
  c.n = static_cast<uint8_t>(n);
  std::copy(out.begin() + static_cast<std::ptrdiff_t>(before), out.end(), c.ids);
}

template <typename Map, typename Key>
bool Recall(const Map& map, const Key& key, std::vector<uint32_t>& out) {
  auto it = map.find(key);
  if (it == map.end()) return false;
  out.insert(out.end(), it->second.ids, it->second.ids + it->second.n);
  return true;
}

// Encode with the per-thread cache of recent words. A single byte of a byte-level vocabulary
// skips it (one array lookup is cheaper), and so does a long word (rarely repeated, costly to key). With ignore_merges (Llama 3),
// a word that is itself in the vocabulary is that one token, before any merge is tried.
void Bpe::EncodeCached(std::string_view word, std::vector<uint32_t>& out) const {
  if (word.size() > kCachedWordBytes || (word.size() == 1 && !char_level)) {
    Encode(word, out);
    return;
  }
  thread_local ThreadCaches caches;
  ThreadCaches::One& cache = caches.For(cache_owner);
  const size_t before = out.size();
  if (word.size() <= 7) {
    // The thread's recent words first: a small table that stays in cache, where the whole
    // vocabulary does not.
    const uint64_t key = ShortKey(word);
    if (Recall(cache.short_map, key, out)) return;
    if (auto v = ignore_merges ? short_vocab.find(key) : short_vocab.end(); v != short_vocab.end())
      out.push_back(v->second);
    else
      Merge(word, out);
    Remember(cache.short_map, key, out, before);
    return;
  }
  const absl::string_view key(word.data(), word.size());
  if (ignore_merges) {
    if (auto it = vocab.find(key); it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (Recall(cache.map, key, out)) return;
  Merge(word, out);
  Remember(cache.map, std::string(word), out, before);
}

void Bpe::AddToken(const std::string& bytes, uint32_t id) {
  vocab[bytes] = id;
  if (bytes.size() <= 7) short_vocab[ShortKey(bytes)] = id;
  if (bytes.size() == 1) byte_id[static_cast<unsigned char>(bytes[0])] = id;
  max_id = std::max(max_id, id);
}

// Merges are keyed by the two ids they join and store (rank << 32 | merged id), so one lookup
// answers both whether a pair merges and into what.
absl::Status Bpe::AddMerge(const std::string& a, const std::string& b, uint32_t rank) {
  auto ia = vocab.find(a), ib = vocab.find(b), im = vocab.find(a + b);
  if (ia == vocab.end() || ib == vocab.end() || im == vocab.end())
    return absl::InvalidArgumentError("a merge whose parts or result are not in the vocabulary");
  // A repeated merge takes its last rank, as the reference's map collect keeps the last.
  merges.insert_or_assign(Key(ia->second, ib->second), (static_cast<uint64_t>(rank) << 32) | im->second);
  return absl::OkStatus();
}

// Short pre-tokens (nearly all of them): symbols and the rank of each adjacent pair in arrays on
// the stack; each step merges the lowest-ranked pair (leftmost on ties) and looks up only the two
// pairs it changed. Same order as the heap below, without allocating.
void Bpe::EncodeSmall(std::string_view word, std::vector<uint32_t>& out) const {
  uint32_t sym[kSmallWord];
  uint64_t pair[kSmallWord];  // (rank << 32 | merged id) of (sym[i], sym[i+1]); kNoMerge when none
  constexpr uint64_t kNoMerge = ~uint64_t{0};
  uint32_t n = Initial(word, sym);
  auto lookup = [&](uint32_t i) {
    auto it = merges.find(Key(sym[i], sym[i + 1]));
    return it == merges.end() ? kNoMerge : it->second;
  };
  for (uint32_t i = 0; i + 1 < n; ++i) pair[i] = lookup(i);
  while (n > 1) {
    uint32_t best = 0;
    for (uint32_t i = 1; i + 1 < n; ++i)
      if ((pair[i] >> 32) < (pair[best] >> 32)) best = i;  // strict: the leftmost of equal ranks
    if (pair[best] == kNoMerge) break;
    sym[best] = static_cast<uint32_t>(pair[best]);
    for (uint32_t i = best + 1; i + 1 < n; ++i) sym[i] = sym[i + 1];
    for (uint32_t i = best + 1; i + 2 < n; ++i) pair[i] = pair[i + 1];  // pairs 0..n-2 are set
    --n;
    if (best + 1 < n) pair[best] = lookup(best);
    else pair[best] = kNoMerge;
    if (best > 0) pair[best - 1] = lookup(best - 1);
  }
  out.insert(out.end(), sym, sym + n);
}

void Bpe::Encode(std::string_view word, std::vector<uint32_t>& out) const {
  if (word.size() == 1 && !char_level) {
    out.push_back(*byte_id[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (ignore_merges) {
    if (auto it = vocab.find(absl::string_view(word.data(), word.size())); it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  Merge(word, out);
}

// Long words: the symbols as a linked list and the candidate merges in a min-heap. Each merge
// pushes the two pairs it created; entries made stale by an earlier merge are dropped when they
// surface, which keeps the work O(n log n) where rescanning every pair would be O(n^2).
void Bpe::Merge(std::string_view word, std::vector<uint32_t>& out) const {
  if (word.size() <= kSmallWord) {
    EncodeSmall(word, out);
    return;
  }
  std::vector<uint32_t> sym(word.size());
  const uint32_t n = Initial(word, sym.data());
  if (n == 0) return;
  std::vector<int32_t> next(n), prev(n);
  for (uint32_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
    prev[i] = static_cast<int32_t>(i) - 1;
  }
  std::vector<bool> alive(n, true);
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto consider = [&](int32_t left) {
    if (left < 0 || next[left] < 0) return;
    const uint32_t l = sym[left], r = sym[next[left]];
    auto it = merges.find(Key(l, r));
    if (it == merges.end()) return;
    heap.push({static_cast<uint32_t>(it->second >> 32), static_cast<uint32_t>(left), l, r, static_cast<uint32_t>(it->second)});
  };
  for (uint32_t i = 0; i + 1 < n; ++i) consider(static_cast<int32_t>(i));
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int32_t p = static_cast<int32_t>(c.pos);
    if (!alive[p] || next[p] < 0 || sym[p] != c.left || sym[next[p]] != c.right) continue;  // stale
    const int32_t r = next[p];
    sym[p] = c.merged;
    alive[r] = false;
    next[p] = next[r];
    if (next[r] >= 0) prev[next[r]] = p;
    consider(prev[p]);
    consider(p);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(sym[i]);
}

}  // namespace epp::tokenizer_internal
