// PrefixTokenizer (epp/text/tokenizer.h): reuse of earlier texts' ids at safe cuts.
#include <xxhash.h>

#include <algorithm>
#include <list>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/utf8.h"
#include "epp/text/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"

namespace epp {

using tokenizer_internal::Checkpoint;
using tokenizer_internal::CheckpointSink;

namespace {

struct Key {
  uint64_t lo, hi;
  bool operator==(const Key&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const Key& k) {
    return H::combine(std::move(h), k.lo, k.hi);
  }
};

// Chained hashes of the full blocks of `text`: keys[k] identifies text[0, (k+1) * kBlockBytes).
std::vector<Key> BlockKeys(std::string_view text) {
  std::vector<Key> keys;
  XXH128_hash_t prev{0, 0};
  for (size_t at = 0; at + PrefixTokenizer::kBlockBytes <= text.size(); at += PrefixTokenizer::kBlockBytes) {
    prev = XXH3_128bits_withSeed(text.data() + at, PrefixTokenizer::kBlockBytes, prev.low64 ^ prev.high64);
    keys.push_back({prev.low64, prev.high64});
  }
  return keys;
}

// A printable ASCII character other than space (the header's safe-cut rule): a cut between two of
// these cannot split a UTF-8 character or a run of whitespace.
bool SafeChar(char c) {
  const unsigned char u = static_cast<unsigned char>(c);
  return u > 0x20 && u < 0x7F;
}

struct Entry {
  std::vector<uint32_t> ids;      // the text's ids, without the template
  std::vector<Checkpoint> cuts;   // per full block: the safe cut inside the first k+1 blocks
  std::vector<Key> keys;
};

// What an entry counts against the budget, in ids (a block key is four ids' worth).
size_t Cost(const Entry& e) { return e.ids.size() + 4 * e.keys.size(); }

}  // namespace

// The cache: entries in LRU order, and every block key of every entry indexed to (entry, block
// number), so the longest cached prefix of a new text is found by probing its own keys from the
// last one down. One mutex; encoding itself runs outside it.
struct PrefixTokenizer::State {
  size_t max_ids;
  size_t margin;
  mutable std::mutex mu;
  std::list<std::shared_ptr<const Entry>> lru;  // most recent first
  absl::flat_hash_map<Key, std::pair<std::shared_ptr<const Entry>, size_t>> by_key;  // -> (entry, block)
  absl::flat_hash_map<const Entry*, std::list<std::shared_ptr<const Entry>>::iterator> where;
  size_t ids = 0;
  Stats stats;
};

PrefixTokenizer::PrefixTokenizer(std::shared_ptr<const Tokenizer> tokenizer, size_t max_ids)
    : tokenizer_(std::move(tokenizer)), state_(std::make_unique<State>()) {
  state_->max_ids = max_ids;
  state_->margin = std::max<size_t>(64, tokenizer_->impl_->max_added_bytes + 16);
}

PrefixTokenizer::~PrefixTokenizer() = default;

PrefixTokenizer::Stats PrefixTokenizer::stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  Stats s = state_->stats;
  s.entries = state_->lru.size();
  s.ids = state_->ids;
  return s;
}

absl::StatusOr<std::vector<uint32_t>> PrefixTokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  const Tokenizer::Impl& impl = *tokenizer_->impl_;
  State& st = *state_;
  // Tokenizers where a cut cannot be proven safe, and texts shorter than one block, take the
  // plain path (still counted, so the hit rate is of all encodes).
  if (impl.prefix_space || !impl.restartable || text.size() < kBlockBytes) {
    {
      std::lock_guard<std::mutex> lock(st.mu);
      ++st.stats.encodes;
    }
    return tokenizer_->Encode(text, add_special_tokens);
  }
  if (size_t bad = internal::FirstInvalidUtf8(text); bad != std::string_view::npos)
    return absl::InvalidArgumentError(absl::StrCat("text is not valid UTF-8 at byte ", bad));
  const std::vector<Key> keys = BlockKeys(text);
  // The longest cached prefix.
  std::shared_ptr<const Entry> base;
  size_t base_blocks = 0;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    ++st.stats.encodes;
    for (size_t k = keys.size(); k > 0; --k) {
      auto it = st.by_key.find(keys[k - 1]);
      if (it == st.by_key.end()) continue;
      const auto& [entry, block] = it->second;
      if (block != k - 1 || entry->cuts[k - 1].end == 0) continue;
      base = entry;
      base_blocks = k;
      st.lru.splice(st.lru.begin(), st.lru, st.where[entry.get()]);
      break;
    }
  }
  // Reuse the base's ids up to its cut in the matched blocks, then encode the rest of this text
  // with checkpoints, which become the new entry's cuts.
  auto entry = std::make_shared<Entry>();
  std::vector<Checkpoint> checkpoints;
  size_t from = 0;
  if (base) {
    const Checkpoint cut = base->cuts[base_blocks - 1];
    entry->ids.assign(base->ids.begin(), base->ids.begin() + cut.ids);
    entry->cuts.assign(base->cuts.begin(), base->cuts.begin() + static_cast<std::ptrdiff_t>(base_blocks));
    from = cut.end;
  }
  const std::string_view rest = text.substr(from);
  const CheckpointSink sink{rest, &checkpoints};
  EPP_RETURN_IF_ERROR(impl.EncodeBody(rest, entry->ids, &sink));
  // Cuts for the blocks past the reused ones: the last safe checkpoint at least `margin` before
  // each block's end.
  size_t c = 0;
  Checkpoint best{0, 0};
  for (size_t k = entry->cuts.size(); k < keys.size(); ++k) {
    const size_t limit = (k + 1) * kBlockBytes - st.margin;
    for (; c < checkpoints.size() && from + checkpoints[c].end <= limit; ++c) {
      const size_t end = from + checkpoints[c].end;
      // Not where an added token could start: its single_word / lstrip test looks back past
      // the cut.
      if (end > 0 && end < text.size() && SafeChar(text[end - 1]) && SafeChar(text[end]) &&
          !impl.added_first[static_cast<unsigned char>(text[end])])
        best = {static_cast<uint32_t>(end), checkpoints[c].ids};  // ids counted in entry->ids, reused ones included
    }
    // No safe cut inside this block: the previous block's cut serves (a cut in fewer blocks is
    // still inside these).
    if (best.end == 0 && !entry->cuts.empty()) best = entry->cuts.back();
    entry->cuts.push_back(best);
  }
  entry->keys = keys;
  std::vector<uint32_t> out;
  if (add_special_tokens) impl.ApplyTemplate(entry->ids, out);
  else out = entry->ids;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    if (base) {
      ++st.stats.hits;
      st.stats.reused_bytes += static_cast<int64_t>(from);
    }
    // An entry costs its ids and its block keys (a text of few ids still holds its keys).
    if (Cost(*entry) <= st.max_ids) {
      st.lru.push_front(entry);
      st.where[entry.get()] = st.lru.begin();
      st.ids += Cost(*entry);
      for (size_t k = 0; k < keys.size(); ++k) st.by_key[keys[k]] = {entry, k};
      while (st.ids > st.max_ids && !st.lru.empty()) {
        std::shared_ptr<const Entry> old = st.lru.back();
        st.lru.pop_back();
        st.where.erase(old.get());
        st.ids -= Cost(*old);
        for (const Key& key : old->keys)
          if (auto it = st.by_key.find(key); it != st.by_key.end() && it->second.first == old) st.by_key.erase(it);
      }
    }
  }
  return out;
}

}  // namespace epp
