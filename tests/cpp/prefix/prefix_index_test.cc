#include "epp/prefix_cache.h"

#include <list>
#include <map>
#include <random>
#include <thread>

#include <gtest/gtest.h>

namespace epp {
namespace {

const std::vector<std::string> kPods = {"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"};

TEST(PrefixHasherTest, ChainedHashesMeanPrefixEquality) {
  const uint64_t seed = PrefixSeed("m");
  std::string a(64 * 3, 'a'), b = a;
  b[64 * 2] = 'b';  // third block differs
  auto ha = ChainedBlockHashes(a, 64, seed), hb = ChainedBlockHashes(b, 64, seed);
  ASSERT_EQ(ha.size(), 3u);
  EXPECT_EQ(ha[0], hb[0]);
  EXPECT_EQ(ha[1], hb[1]);
  EXPECT_NE(ha[2], hb[2]);
  // Same block content at another position hashes differently (the chain carries the prefix).
  EXPECT_NE(ha[0], ha[1]);
  // Partial blocks are not hashed; max_blocks caps the count.
  EXPECT_EQ(ChainedBlockHashes(std::string(100, 'x'), 64, seed).size(), 1u);
  EXPECT_EQ(ChainedBlockHashes(a, 64, seed, 2).size(), 2u);
  // Model and cache salt separate caches.
  EXPECT_NE(ChainedBlockHashes(a, 64, PrefixSeed("other"))[0], ha[0]);
  EXPECT_NE(ChainedBlockHashes(a, 64, PrefixSeed("m", "salt"))[0], ha[0]);
  EXPECT_EQ(ApproxTokens(0), 0);
  EXPECT_EQ(ApproxTokens(5), 2);
}

TEST(PrefixIndexTest, MatchLengthIsTheLongestHeldPrefix) {
  PrefixIndex index;
  index.Add(kPods[0], std::vector<uint64_t>{1, 2, 3});
  index.Add(kPods[1], std::vector<uint64_t>{1, 2});
  index.Add(kPods[2], std::vector<uint64_t>{2, 3});  // not a prefix: block 1 missing
  EXPECT_EQ(index.MatchLengths(std::vector<uint64_t>{1, 2, 3, 4}, kPods), (std::vector<int>{3, 2, 0}));
  EXPECT_EQ(index.MatchLengths(std::vector<uint64_t>{9}, kPods), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(index.MatchLengths(std::vector<uint64_t>{}, kPods), (std::vector<int>{0, 0, 0}));
  const std::vector<std::string> unknown = {"10.9.9.9:1"};
  EXPECT_EQ(index.MatchLengths(std::vector<uint64_t>{1}, unknown), (std::vector<int>{0}));
  EXPECT_EQ(index.entries(), 7u);
  EXPECT_EQ(index.endpoint_count(), 3u);
}

// A candidate list with repeats and unknown names, and a prefix held by many endpoints whose
// holders are not in the candidate list at all: each position gets its own endpoint's length,
// and a later call is not affected by the earlier one's candidates.
TEST(PrefixIndexTest, MatchLengthsWithRepeatedUnknownAndManyHolders) {
  PrefixIndex index;
  std::vector<std::string> many;
  for (int i = 0; i < 40; ++i) {
    many.push_back("10.1.0." + std::to_string(i) + ":8000");
    std::vector<uint64_t> blocks = {7, 8};
    if (i % 2 == 0) blocks.push_back(9);
    index.Add(many.back(), blocks);
  }
  const std::vector<std::string> some = {many[3], "10.9.9.9:1", many[4], many[3], many[39], many[4]};
  EXPECT_EQ(index.MatchLengths(std::vector<uint64_t>{7, 8, 9, 10}, some), (std::vector<int>{2, 0, 3, 2, 2, 3}));
  // Hashes are keys: block 9 at position 1 is held by the even endpoints.
  EXPECT_EQ(index.MatchLengths(std::vector<uint64_t>{7, 9}, some), (std::vector<int>{1, 0, 2, 1, 1, 2}));
  const std::vector<std::string> one = {many[10]};
  EXPECT_EQ(index.MatchLengths(std::vector<uint64_t>{7, 8, 9}, one), (std::vector<int>{3}));
  std::vector<int> all_expected;
  for (int i = 0; i < 40; ++i) all_expected.push_back(i % 2 == 0 ? 3 : 2);
  EXPECT_EQ(index.MatchLengths(std::vector<uint64_t>{7, 8, 9}, many), all_expected);
}

TEST(PrefixIndexTest, LruEvictsTheTailBeforeThePrefix) {
  PrefixIndexOptions o;
  o.lru_capacity_per_server = 4;
  PrefixIndex index(o);
  index.Add(kPods[0], std::vector<uint64_t>{1, 2, 3});
  index.Add(kPods[0], std::vector<uint64_t>{10, 20, 30});  // 6 blocks > 4: two oldest go
  // The first prompt's blocks were added tail first, so 3 and 2 were least recently used.
  EXPECT_EQ(index.MatchLengths(std::vector<uint64_t>{1, 2, 3}, kPods)[0], 1);
  EXPECT_EQ(index.MatchLengths(std::vector<uint64_t>{10, 20, 30}, kPods)[0], 3);
  EXPECT_EQ(index.entries(), 4u);
  // Touching a prompt again makes it most recent.
  index.Add(kPods[0], std::vector<uint64_t>{1});
  index.Add(kPods[0], std::vector<uint64_t>{40});
  EXPECT_EQ(index.MatchLengths(std::vector<uint64_t>{1}, kPods)[0], 1);
  // LRU order was 30, 20, 10, 1 (oldest first); adding 40 evicted 30, the tail of that prompt.
  EXPECT_EQ(index.MatchLengths(std::vector<uint64_t>{10, 20, 30}, kPods)[0], 2);
}

TEST(PrefixIndexTest, MaxBlocksToMatchCapsBothSides) {
  PrefixIndexOptions o;
  o.max_prefix_blocks_to_match = 2;
  PrefixIndex index(o);
  index.Add(kPods[0], std::vector<uint64_t>{1, 2, 3, 4});
  EXPECT_EQ(index.entries(), 2u);
  EXPECT_EQ(index.MatchLengths(std::vector<uint64_t>{1, 2, 3, 4}, kPods)[0], 2);
}

TEST(PrefixIndexTest, RemoveEndpointForgetsItsBlocks) {
  PrefixIndex index;
  index.Add(kPods[0], std::vector<uint64_t>{1, 2});
  index.Add(kPods[1], std::vector<uint64_t>{1, 2});
  index.RemoveEndpoint(kPods[0]);
  index.RemoveEndpoint("never-seen");
  EXPECT_EQ(index.MatchLengths(std::vector<uint64_t>{1, 2}, kPods), (std::vector<int>{0, 2, 0}));
  EXPECT_EQ(index.entries(), 2u);
  EXPECT_EQ(index.endpoint_count(), 1u);
  index.Add(kPods[0], std::vector<uint64_t>{1});
  EXPECT_EQ(index.MatchLengths(std::vector<uint64_t>{1, 2}, kPods), (std::vector<int>{1, 2, 0}));
}

TEST(PrefixIndexTest, ConcurrentAddsAndMatchesStayConsistent) {
  PrefixIndexOptions o;
  o.lru_capacity_per_server = 64;
  PrefixIndex index(o);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < 2000; ++i) {
        const std::vector<uint64_t> blocks = {i % 50, 1000 + i % 7, 2000 + i};
        index.Add(kPods[static_cast<size_t>(t) % kPods.size()], blocks);
        auto m = index.MatchLengths(blocks, kPods);
        for (int v : m) ASSERT_LE(v, 3);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(index.entries(), 3u * 64u);
}

// The index against a plain linked-list LRU per endpoint, over many random prompts that share
// prefixes, re-touch blocks (stale FIFO entries), shrink and grow the capacity, and remove
// endpoints: every MatchLengths answer and the entry count must agree.
TEST(PrefixIndexTest, AgreesWithAReferenceLruUnderChurn) {
  PrefixIndexOptions o;
  o.lru_capacity_per_server = 40;
  o.max_prefix_blocks_to_match = 12;
  PrefixIndex index(o);
  struct RefLru {
    std::list<uint64_t> order;  // front = least recently used
    std::map<uint64_t, std::list<uint64_t>::iterator> where;
  };
  std::map<std::string, RefLru> ref;
  auto ref_add = [&](const std::string& ep, const std::vector<uint64_t>& blocks, size_t capacity) {
    RefLru& r = ref[ep];
    const size_t n = std::min<size_t>(blocks.size(), 12);
    for (size_t k = n; k-- > 0;) {
      auto it = r.where.find(blocks[k]);
      if (it != r.where.end()) r.order.erase(it->second);
      r.order.push_back(blocks[k]);
      r.where[blocks[k]] = std::prev(r.order.end());
    }
    while (r.order.size() > capacity) {
      r.where.erase(r.order.front());
      r.order.pop_front();
    }
  };
  auto ref_match = [&](const std::vector<uint64_t>& blocks) {
    std::vector<int> out;
    for (const std::string& ep : kPods) {
      int m = 0;
      auto it = ref.find(ep);
      if (it != ref.end())
        while (m < static_cast<int>(std::min<size_t>(blocks.size(), 12)) && it->second.where.count(blocks[m])) ++m;
      out.push_back(m);
    }
    return out;
  };
  std::mt19937_64 rng(7);
  for (int step = 0; step < 20000; ++step) {
    // Prompts: one of 9 "system prompts" (blocks 100*s + j) then a random tail.
    std::vector<uint64_t> blocks;
    const uint64_t sys = rng() % 9;
    const size_t shared = rng() % 8, tail = rng() % 6;
    for (size_t j = 0; j < shared; ++j) blocks.push_back(100 * sys + j);
    for (size_t j = 0; j < tail; ++j) blocks.push_back(100000 + rng() % 5000);
    const std::string& ep = kPods[rng() % kPods.size()];
    const size_t capacity = step % 5000 < 2500 ? 40 : 7;  // shrinks, then grows back
    const uint64_t action = rng() % 1000;
    if (action == 0) {
      index.RemoveEndpoint(ep);
      ref.erase(ep);
    } else if (action < 600) {
      index.Add(ep, blocks, static_cast<int64_t>(capacity));
      ref_add(ep, blocks, capacity);
    }
    ASSERT_EQ(index.MatchLengths(blocks, kPods), ref_match(blocks)) << "step " << step;
    size_t total = 0;
    for (const auto& [name, r] : ref) total += r.order.size();
    ASSERT_EQ(index.entries(), total) << "step " << step;
  }
}

// A lower capacity (autoTune learning the server's KV size) is worked off n + 64 evictions per
// Add, oldest first, rather than all at once under the writer lock.
TEST(PrefixIndexTest, LoweredCapacityIsAppliedGradually) {
  PrefixIndexOptions o;
  o.lru_capacity_per_server = 1000;
  PrefixIndex index(o);
  std::vector<uint64_t> first;
  for (uint64_t b = 1; b <= 250; ++b) first.push_back(b);  // under maxPrefixBlocksToMatch (256)
  index.Add(kPods[0], first);
  EXPECT_EQ(index.entries(), 250u);
  index.Add(kPods[0], std::vector<uint64_t>{1000}, /*capacity=*/10);
  EXPECT_EQ(index.entries(), 251u - 65u);  // one insert, 1 + 64 evictions
  // The evicted are the least recently used: the first prompt's tail (it was added tail first).
  EXPECT_EQ(index.MatchLengths(first, kPods)[0], 250 - 65);
  int calls = 1;
  for (uint64_t b = 1001; index.entries() > 10; ++b, ++calls) {
    index.Add(kPods[0], std::vector<uint64_t>{b}, 10);
    ASSERT_LT(calls, 10);
  }
  EXPECT_EQ(calls, 4);  // 251 -> 186 -> 122 -> 58 -> 10 (each call inserts one, evicts up to 65)
  EXPECT_EQ(index.entries(), 10u);
  EXPECT_EQ(index.MatchLengths(std::vector<uint64_t>{1}, kPods)[0], 1);  // the first prompt's head is the most recent of it
}

}  // namespace
}  // namespace epp
