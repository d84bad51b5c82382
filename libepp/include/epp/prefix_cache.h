// Prefix hashing shared by the simulator's KV cache, the scheduler's prefix index and replay.
//
// epp approximates tokens as characters / 4 everywhere (kCharsPerToken); a KV block of B tokens is
// therefore B * 4 characters of the canonical prompt text. A prompt's block hashes are chained:
// hash[i] = XXH3_64(bytes of block i, seed = hash[i-1]) with hash[-1] = the request seed, so equal
// hashes at position i mean equal text in blocks 0..i (a prefix match). Only full blocks are
// hashed, as model servers cache only full blocks. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace epp {

// The token approximation used throughout epp (simulator, scheduler, replay).
inline constexpr int kCharsPerToken = 4;

// ceil(chars / kCharsPerToken).
inline int64_t ApproxTokens(size_t chars) {
  return static_cast<int64_t>((chars + kCharsPerToken - 1) / kCharsPerToken);
}

// The seed of a request's hash chain: XXH3 of the target model name and the cache salt, so
// different models (or salts) never share blocks.
uint64_t PrefixSeed(std::string_view model, std::string_view cache_salt = {});

// Chained hashes of the full blocks of `text`, each `block_chars` characters long, at most
// `max_blocks` of them (0 = no limit). REQUIRES: block_chars > 0.
std::vector<uint64_t> ChainedBlockHashes(std::string_view text, size_t block_chars, uint64_t seed,
                                         size_t max_blocks = 0);

// Defaults of GIE's approximate prefix cache (approx-prefix-cache-producer / prefix-cache-scorer).
struct PrefixIndexOptions {
  int block_size_tokens = 16;             // blockSizeTokens: 16 tokens = 64 characters per block
  int max_prefix_blocks_to_match = 256;   // maxPrefixBlocksToMatch
  // lruCapacityPerServer. GIE derives it as an H100 80GB serving an 8B model: ~500k tokens of KV
  // cache / 16 tokens per block = 31,250 blocks.
  int64_t lru_capacity_per_server = 31250;
};

// The scheduler's guess of which endpoint holds which prompt blocks: per endpoint, an LRU of the
// block hashes of prompts routed to it (capacity lru_capacity_per_server), plus a reverse map from
// block hash to the endpoints holding it. Thread-safe: MatchLengths may run concurrently with
// itself and with Add/RemoveEndpoint (a reader-writer lock; Add takes it exclusively).
class PrefixIndex {
 public:
  explicit PrefixIndex(const PrefixIndexOptions& options = {});
  ~PrefixIndex();
  PrefixIndex(const PrefixIndex&) = delete;
  PrefixIndex& operator=(const PrefixIndex&) = delete;

  const PrefixIndexOptions& options() const;

  // For each endpoint, how many leading blocks of `hashes` it holds (at most
  // max_prefix_blocks_to_match); index-aligned with `endpoints`.
  std::vector<int> MatchLengths(std::span<const uint64_t> hashes, std::span<const std::string> endpoints) const;
  std::vector<int> MatchLengths(std::span<const uint64_t> hashes, std::span<const std::string_view> endpoints) const;

  // Records that `endpoint` now holds these blocks (the first max_prefix_blocks_to_match): they
  // become its most recently used entries; the least recently used beyond capacity are dropped.
  // `capacity` > 0 overrides lru_capacity_per_server for this endpoint (autoTune: the server's
  // own KV block count).
  void Add(std::string_view endpoint, std::span<const uint64_t> hashes, int64_t capacity = 0);

  // Forgets an endpoint (it left the pool).
  void RemoveEndpoint(std::string_view endpoint);

  size_t entries() const;    // (endpoint, block) pairs held
  size_t endpoint_count() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace epp
