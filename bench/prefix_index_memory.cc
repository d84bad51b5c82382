// Memory per entry of epp::PrefixIndex: 8 endpoints each fill their LRU (31,250 blocks, GIE's
// lruCapacityPerServer) with 100-block prompts of distinct blocks; heap bytes (mallinfo2) before
// and after (small blocks and mmap'ed ones), divided by the (endpoint, block) entries held.
#include <malloc.h>
#include <iostream>
#include <random>
#include "epp/prefix_cache.h"
int main() {
  std::vector<std::string> pods; for (int i = 0; i < 8; ++i) pods.push_back("10.0.0." + std::to_string(i) + ":8000");
  auto heap = [] { const auto m = mallinfo2(); return m.uordblks + m.hblkhd; };
  auto before = heap();
  {
    epp::PrefixIndex index;
    std::mt19937_64 rng(1);
    // Each pod fills its LRU (31,250 blocks) with prompts of 100 blocks; 30% of blocks shared by 2 pods.
    for (int p = 0; p < 8; ++p) for (int r = 0; r < 320; ++r) {
      std::vector<uint64_t> b(100); for (auto& h : b) h = rng();
      index.Add(pods[p], b);
    }
    auto after = heap();
    std::cout << "entries " << index.entries() << " bytes " << (after - before) << " per entry " << double(after - before) / index.entries() << "\n";
  }
}
