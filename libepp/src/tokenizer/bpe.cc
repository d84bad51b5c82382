// Byte-level BPE (tokenizer_impl.h): Hugging Face's merge order, the lowest-ranked adjacent pair
// first and the leftmost of equal ranks, with a heap so long pre-tokens stay O(n log n).
#include <algorithm>
#include <queue>

#include "absl/strings/str_cat.h"
#include "tokenizer/tokenizer_impl.h"

namespace epp::tokenizer_internal {
namespace {

inline uint64_t Key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }

struct Candidate {
  uint32_t rank;
  uint32_t pos;
  uint32_t left, right, merged;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

void Bpe::AddToken(const std::string& bytes, uint32_t id) {
  vocab[bytes] = id;
  if (bytes.size() == 1) byte_id[static_cast<unsigned char>(bytes[0])] = id;
  max_id = std::max(max_id, id);
}

absl::Status Bpe::AddMerge(const std::string& a, const std::string& b, uint32_t rank) {
  auto ia = vocab.find(a), ib = vocab.find(b), im = vocab.find(a + b);
  if (ia == vocab.end() || ib == vocab.end() || im == vocab.end())
    return absl::InvalidArgumentError("a merge whose parts or result are not in the vocabulary");
  // The first (lowest) rank of a pair wins, as a map insert in the reference keeps the first.
  merges.try_emplace(Key(ia->second, ib->second), (static_cast<uint64_t>(rank) << 32) | im->second);
  return absl::OkStatus();
}

void Bpe::Encode(std::string_view word, std::vector<uint32_t>& out) const {
  if (word.size() == 1) {
    out.push_back(*byte_id[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (ignore_merges) {
    if (auto it = vocab.find(absl::string_view(word.data(), word.size())); it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const uint32_t n = static_cast<uint32_t>(word.size());
  std::vector<uint32_t> sym(n);
  std::vector<int32_t> next(n), prev(n);
  for (uint32_t i = 0; i < n; ++i) {
    sym[i] = *byte_id[static_cast<unsigned char>(word[i])];
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
