// Prefix hashing shared by the simulator's KV cache, the scheduler's prefix index and replay.
//
// epp approximates tokens as characters / 4 everywhere (kCharsPerToken); a KV block of B tokens is
// therefore B * 4 characters of the canonical prompt text. A prompt's block hashes are chained:
// hash[i] = XXH3_64(bytes of block i, seed = hash[i-1]) with hash[-1] = the request seed, so equal
// hashes at position i mean equal text in blocks 0..i (a prefix match). Only full blocks are
// hashed, as model servers cache only full blocks. Pure functions; thread-safe.
#pragma once

#include <cstdint>
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

}  // namespace epp
