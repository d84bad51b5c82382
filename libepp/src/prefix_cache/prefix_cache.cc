#include <xxhash.h>

#include "epp/prefix_cache.h"

namespace epp {

uint64_t PrefixSeed(std::string_view model, std::string_view cache_salt) {
  uint64_t h = XXH3_64bits(model.data(), model.size());
  if (!cache_salt.empty()) h = XXH3_64bits_withSeed(cache_salt.data(), cache_salt.size(), h);
  return h;
}

std::vector<uint64_t> ChainedBlockHashes(std::string_view text, size_t block_chars, uint64_t seed,
                                         size_t max_blocks) {
  size_t n = text.size() / block_chars;
  if (max_blocks != 0 && n > max_blocks) n = max_blocks;
  std::vector<uint64_t> out(n);
  uint64_t h = seed;
  for (size_t i = 0; i < n; ++i) {
    h = XXH3_64bits_withSeed(text.data() + i * block_chars, block_chars, h);
    out[i] = h;
  }
  return out;
}

}  // namespace epp
