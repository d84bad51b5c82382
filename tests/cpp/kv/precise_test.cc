// The precise prefix path: KvBlockIndex (block keys over token ids, holders, media, bounds),
// KvEventPublisher and KvEventSubscriber over real ZeroMQ sockets on 127.0.0.1 (gaps, replay,
// restarts, malformed messages, departures), and the precise-prefix-cache-producer in a
// scheduler.
#include <gtest/gtest.h>

#include <malloc.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <unistd.h>
#include <chrono>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/container_memory.h"
#include "epp/config.h"
#include "epp/kv/index.h"
#include "epp/kv/publisher.h"
#include "epp/kv/subscriber.h"
#include "epp/registry.h"
#include "epp/request.h"
#include "epp/scheduler.h"
#include "testing/epp_testing.h"

namespace epp {
namespace {

using std::chrono::milliseconds;

std::vector<uint32_t> Tokens(uint32_t first, size_t n) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = first + static_cast<uint32_t>(i);
  return t;
}

// A BlockStored of `tokens` in blocks of `bs`, engine hashes base, base+1, ...
KvBlockStored Stored(const std::vector<uint32_t>& tokens, int bs, uint64_t base, std::optional<uint64_t> parent = {},
                     std::string medium = "GPU") {
  KvBlockStored s;
  for (size_t i = 0; i < tokens.size() / bs; ++i) s.block_hashes.push_back(base + i);
  s.parent_block_hash = parent;
  s.token_ids.assign(tokens.begin(), tokens.begin() + static_cast<long>(s.block_hashes.size() * bs));
  s.block_size = bs;
  s.medium = std::move(medium);
  return s;
}

KvEventBatch Batch(std::vector<KvEvent> events) {
  KvEventBatch b;
  b.ts = 1;
  b.events = std::move(events);
  return b;
}

std::vector<KvPrefixMatch> Match(const KvBlockIndex& index, const std::vector<uint32_t>& tokens,
                                 std::vector<std::string> endpoints, std::string model = "m") {
  std::vector<KvPrefixMatch> out;
  index.Lookup(tokens, model, endpoints, out);
  return out;
}

TEST(KvIndexTest, EstimateTokenIdsPacksFourBytesLittleEndian) {
  EXPECT_TRUE(EstimateTokenIds("").empty());
  EXPECT_EQ(EstimateTokenIds("abcd"), (std::vector<uint32_t>{0x64636261u}));
  EXPECT_EQ(EstimateTokenIds("abcde"), (std::vector<uint32_t>{0x64636261u, 0x65u}));
}

TEST(KvIndexTest, RunsOfConsecutiveBlocksPerEndpointAndChainedParents) {
  KvBlockIndex index;
  const auto prompt = Tokens(100, 64);  // 4 blocks of 16
  // A holds blocks 0-3 (stored in two events, the second chained on the first's last hash);
  // B holds blocks 0-1 only.
  std::vector<uint32_t> first(prompt.begin(), prompt.begin() + 32), second(prompt.begin() + 32, prompt.end());
  auto r = index.Apply("a:1", "m", Batch({Stored(first, 16, 1000), Stored(second, 16, 1002, 1001)}));
  EXPECT_EQ(r.stored, 4);
  EXPECT_EQ(r.skipped, 0);
  index.Apply("b:1", "m", Batch({Stored(first, 16, 5000)}));
  auto m = Match(index, prompt, {"a:1", "b:1", "c:1"});
  EXPECT_EQ(m[0].blocks, 4);
  EXPECT_EQ(m[0].tokens(), 64);
  EXPECT_DOUBLE_EQ(m[0].weighted_blocks, 4.0);
  EXPECT_EQ(m[1].blocks, 2);
  EXPECT_EQ(m[2].blocks, 0);
  // A different first block matches nothing, even where later tokens agree.
  auto other = prompt;
  other[0] = 7;
  EXPECT_EQ(Match(index, other, {"a:1"})[0].blocks, 0);
  // A partial last block is not a block.
  auto shorter = std::vector<uint32_t>(prompt.begin(), prompt.begin() + 40);
  EXPECT_EQ(Match(index, shorter, {"a:1"})[0].blocks, 2);
  // A child whose parent the index never saw is skipped (its keys cannot be computed).
  r = index.Apply("c:1", "m", Batch({Stored(second, 16, 9000, 424242)}));
  EXPECT_EQ(r.skipped, 1);
  EXPECT_NE(r.last_skip.find("parent"), std::string::npos) << r.last_skip;
  // Token counts that do not fill the blocks are skipped too.
  KvBlockStored ragged = Stored(first, 16, 7000);
  ragged.token_ids.pop_back();
  r = index.Apply("c:1", "m", Batch({ragged}));
  EXPECT_EQ(r.skipped, 1);
}

TEST(KvIndexTest, RemovalsClearsMediaAndLora) {
  KvIndexOptions o;
  KvBlockIndex index(o);
  const auto prompt = Tokens(1, 48);
  index.Apply("a:1", "base", Batch({Stored(prompt, 16, 10)}));
  // Block 1 evicted: the run stops at block 0.
  KvBlockRemoved rm;
  rm.block_hashes = {11};
  rm.medium = "GPU";
  auto r = index.Apply("a:1", "base", Batch({rm}));
  EXPECT_EQ(r.removed, 1);
  EXPECT_EQ(Match(index, prompt, {"a:1"}, "base")[0].blocks, 1);
  // Offloaded to CPU (a token-less BlockStored names known hashes): weighted 0.8 where GPU is gone.
  KvBlockStored cpu;
  cpu.block_hashes = {10};
  cpu.medium = "CPU";
  index.Apply("a:1", "base", Batch({cpu}));
  KvBlockRemoved gpu0;
  gpu0.block_hashes = {10};
  gpu0.medium = "GPU";
  index.Apply("a:1", "base", Batch({gpu0}));
  auto m = Match(index, prompt, {"a:1"}, "base");
  EXPECT_EQ(m[0].blocks, 1);
  EXPECT_DOUBLE_EQ(m[0].weighted_blocks, 0.8);
  // A LoRA adapter's blocks key apart from the base model's.
  KvBlockStored lora = Stored(prompt, 16, 50);
  lora.lora_name = "sql-lora";
  index.Apply("b:1", "base", Batch({lora}));
  EXPECT_EQ(Match(index, prompt, {"b:1"}, "base")[0].blocks, 0);
  EXPECT_EQ(Match(index, prompt, {"b:1"}, "sql-lora")[0].blocks, 3);
  // AllBlocksCleared and ClearEndpoint drop everything the endpoint holds.
  index.Apply("b:1", "base", Batch({KvAllBlocksCleared{}}));
  EXPECT_EQ(Match(index, prompt, {"b:1"}, "sql-lora")[0].blocks, 0);
  index.ClearEndpoint("a:1");
  EXPECT_EQ(Match(index, prompt, {"a:1"}, "base")[0].blocks, 0);
  EXPECT_EQ(index.Stats().blocks, 0);
  EXPECT_EQ(index.Stats().holders, 0);
}

// Lookup against a brute-force reference: random stores of prompt prefixes on two media and
// random evictions over six endpoints; holder lists then repeat over runs of blocks and change
// order (removal swaps), which exercises both of Lookup's paths (full scan and repeat count).
TEST(KvIndexTest, LookupAgreesWithABruteForceReference) {
  constexpr int kBlocks = 40, kBs = 4, kEndpoints = 6;
  const auto prompt = Tokens(1, kBlocks * kBs);
  const char* media[2] = {"GPU", "CPU"};
  const double weight[2] = {1.0, 0.8};
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    KvBlockIndex index;
    bool held[kEndpoints][2][kBlocks] = {};
    std::vector<std::string> names;
    for (int e = 0; e < kEndpoints; ++e) names.push_back(absl::StrCat("e", e, ":1"));
    for (int op = 0; op < 60; ++op) {
      const int e = static_cast<int>(rng() % kEndpoints), md = static_cast<int>(rng() % 2);
      const auto hash = [&](int b) { return static_cast<uint64_t>(e * 1000 + md * 100 + b + 1); };
      if (rng() % 3 != 0) {
        const int k = 1 + static_cast<int>(rng() % kBlocks);
        KvBlockStored s;
        for (int b = 0; b < k; ++b) s.block_hashes.push_back(hash(b));
        s.token_ids.assign(prompt.begin(), prompt.begin() + k * kBs);
        s.block_size = kBs;
        s.medium = media[md];
        index.Apply(names[e], "m", Batch({s}));
        for (int b = 0; b < k; ++b) held[e][md][b] = true;
      } else {
        const int b = static_cast<int>(rng() % kBlocks);
        KvBlockRemoved rm;
        rm.block_hashes = {hash(b)};
        rm.medium = media[md];
        index.Apply(names[e], "m", Batch({rm}));
        held[e][md][b] = false;
      }
      const auto got = Match(index, prompt, names);
      for (int x = 0; x < kEndpoints; ++x) {
        int64_t run = 0;
        double w = 0;
        while (run < kBlocks && (held[x][0][run] || held[x][1][run])) {
          w += held[x][0][run] ? weight[0] : weight[1];
          ++run;
        }
        ASSERT_EQ(got[x].blocks, run) << "trial " << trial << " op " << op << " endpoint " << x;
        ASSERT_NEAR(got[x].weighted_blocks, w, 1e-9) << "trial " << trial << " op " << op << " endpoint " << x;
      }
    }
  }
}

TEST(KvIndexTest, SpeculativeEntriesUntilConfirmedOrExpired) {
  KvBlockIndex index;
  const auto prompt = Tokens(1, 64);  // 4 blocks of 16
  index.AddSpeculative("a:1", prompt, "m", 16, /*expires_us=*/100);
  auto m = Match(index, prompt, {"a:1", "b:1"});
  EXPECT_EQ(m[0].blocks, 4);
  EXPECT_DOUBLE_EQ(m[0].weighted_blocks, 4.0);  // weight 1.0, as llm-d weighs an unknown tier
  EXPECT_EQ(m[1].blocks, 0);
  EXPECT_EQ(index.Stats().speculative, 4);
  // The engine stores the first two: those are confirmed (held by events now).
  std::vector<uint32_t> first(prompt.begin(), prompt.begin() + 32);
  index.Apply("a:1", "m", Batch({Stored(first, 16, 10)}));
  EXPECT_EQ(index.Stats().speculative, 2);
  EXPECT_EQ(index.Stats().speculative_confirmed, 2);
  EXPECT_EQ(index.Endpoints()[0].blocks, 2);
  EXPECT_EQ(index.Endpoints()[0].speculative, 2);
  index.ExpireSpeculative(99);
  EXPECT_EQ(Match(index, prompt, {"a:1"})[0].blocks, 4);
  index.ExpireSpeculative(100);  // the rest were never stored: gone at their expiry
  EXPECT_EQ(Match(index, prompt, {"a:1"})[0].blocks, 2);
  EXPECT_EQ(index.Stats().speculative, 0);
  EXPECT_EQ(index.Stats().speculative_expired, 2);
  // Blocks held by events are not predicted again; an endpoint that leaves takes its predictions.
  index.AddSpeculative("a:1", prompt, "m", 16, 200);
  EXPECT_EQ(index.Stats().speculative, 2);
  index.AddSpeculative("b:1", prompt, "m", 16, 200);
  EXPECT_EQ(Match(index, prompt, {"b:1"})[0].blocks, 4);
  index.ClearEndpoint("b:1");
  EXPECT_EQ(Match(index, prompt, {"b:1"})[0].blocks, 0);
  EXPECT_EQ(index.Stats().speculative, 2);
  index.ExpireSpeculative(1000);
  EXPECT_EQ(index.Stats().speculative, 0);
  EXPECT_EQ(index.Stats().holders, 2);  // a:1's two stored blocks
}

TEST(KvIndexTest, MoreMediaThanIdsShareTheLastOne) {
  // An engine (or anyone on the central socket) naming hundreds of media must not push ids past
  // the weight table.
  KvBlockIndex index;
  const auto prompt = Tokens(1, 16);
  for (int i = 0; i < 300; ++i) index.Apply("a:1", "m", Batch({Stored(prompt, 16, 100 + i, {}, "tier-" + std::to_string(i))}));
  EXPECT_EQ(Match(index, prompt, {"a:1"})[0].blocks, 1);
  EXPECT_FALSE(index.Endpoints().empty());
}

TEST(KvIndexTest, BoundedByMaxBlocksDroppingTheOldest) {
  KvIndexOptions o;
  o.max_blocks = 8;
  KvBlockIndex index(o);
  for (uint32_t p = 0; p < 4; ++p) index.Apply("a:1", "m", Batch({Stored(Tokens(1000 * (p + 1), 64), 16, 100 * (p + 1))}));
  const KvIndexStats s = index.Stats();
  EXPECT_EQ(s.blocks, 8);
  EXPECT_EQ(s.evicted, 8);
  EXPECT_EQ(Match(index, Tokens(1000, 64), {"a:1"})[0].blocks, 0);  // the oldest prompt is gone
  EXPECT_EQ(Match(index, Tokens(4000, 64), {"a:1"})[0].blocks, 4);
  // Evicted blocks' engine hashes are forgotten: a removal naming one is a no-op.
  KvBlockRemoved rm;
  rm.block_hashes = {100};
  EXPECT_EQ(index.Apply("a:1", "m", Batch({rm})).removed, 0);
}

TEST(KvIndexTest, ReHashedStoresKeepTheEngineHashNamesBounded) {
  // The same tokens stored again and again under new engine hashes (what an engine does for the
  // same prompt under another cache_salt, and what a flood does on purpose): the block count
  // stays 4, and the names kept stay within one per holder plus max_engine_hash_aliases.
  KvBlockIndex index;  // the default bound: 16384 aliases per endpoint
  const size_t cap = index.options().max_engine_hash_aliases;
  ASSERT_EQ(cap, 16384u);
  const auto prompt = Tokens(7, 64);
  const size_t before = mallinfo2().uordblks;
  int64_t bytes_at_20k = 0;
  for (uint64_t i = 0; i < 200000; ++i) {
    index.Apply("a:1", "m", Batch({Stored(prompt, 16, 1000 + 4 * i)}));  // hashes 1000+4i .. 1003+4i
    if (i == 20000) bytes_at_20k = index.Stats().approx_bytes;
  }
  const size_t after = mallinfo2().uordblks;
  const KvIndexStats st = index.Stats();
  EXPECT_EQ(st.blocks, 4);
  EXPECT_EQ(st.holders, 4);
  EXPECT_EQ(st.engine_hash_aliases, static_cast<int64_t>(cap));
  EXPECT_EQ(st.engine_hashes, 4 + static_cast<int64_t>(cap));
  EXPECT_EQ(st.engine_hash_aliases_dropped, 200000 * 4 - 4 - static_cast<int64_t>(cap));
  EXPECT_LE(st.approx_bytes, bytes_at_20k) << "the estimate stays flat past the cap";
  EXPECT_LT(after - std::min(after, before), size_t{8} << 20) << "heap growth after 800,000 re-hashed names";
  EXPECT_EQ(Match(index, prompt, {"a:1"})[0].blocks, 4);
  // The oldest names are forgotten: a removal naming one is unknown and changes nothing.
  KvBlockRemoved oldest;
  oldest.block_hashes = {1000, 1001};
  KvApplyResult r = index.Apply("a:1", "m", Batch({oldest}));
  EXPECT_EQ(r.removed_unknown, 2);
  EXPECT_EQ(r.removed, 0);
  // A recent alias is known; removing it leaves the block held under its current name.
  KvBlockRemoved alias;
  alias.block_hashes = {1000 + 4 * 199998};
  r = index.Apply("a:1", "m", Batch({alias}));
  EXPECT_EQ(r.removed_unknown, 0);
  EXPECT_EQ(r.removed, 0);
  EXPECT_EQ(Match(index, prompt, {"a:1"})[0].blocks, 4);
  EXPECT_EQ(index.Endpoints()[0].blocks, 4) << "aliases are not counted as blocks";
  EXPECT_EQ(index.Endpoints()[0].media["GPU"], 4);
  // The current names remove the holders.
  KvBlockRemoved current;
  for (uint64_t h = 0; h < 4; ++h) current.block_hashes.push_back(1000 + 4 * 199999 + h);
  r = index.Apply("a:1", "m", Batch({current}));
  EXPECT_EQ(r.removed, 4);
  EXPECT_EQ(Match(index, prompt, {"a:1"})[0].blocks, 0);
}

TEST(KvIndexTest, AnAliasStillResolvesAChildsParent) {
  // Two requests with the same tokens under different salts: the engine holds both copies under
  // different hashes; a continuation of the first chain names its (now older) hash as parent.
  KvIndexOptions o;
  o.max_engine_hash_aliases = 2;
  KvBlockIndex index(o);
  const auto prompt = Tokens(1, 64);
  std::vector<uint32_t> first(prompt.begin(), prompt.begin() + 32), second(prompt.begin() + 32, prompt.end());
  index.Apply("a:1", "m", Batch({Stored(first, 16, 100)}));  // salt A: 100, 101
  index.Apply("a:1", "m", Batch({Stored(first, 16, 200)}));  // salt B: 200, 201 (100, 101 now aliases)
  KvApplyResult r = index.Apply("a:1", "m", Batch({Stored(second, 16, 102, 101)}));
  EXPECT_EQ(r.skipped, 0) << r.last_skip;
  EXPECT_EQ(Match(index, prompt, {"a:1"})[0].blocks, 4);
  EXPECT_EQ(index.Stats().engine_hash_aliases, 2);
  // A third salt pushes the oldest aliases out (cap 2): a child of those is skipped, counted.
  index.Apply("a:1", "m", Batch({Stored(first, 16, 300)}));
  EXPECT_EQ(index.Stats().engine_hash_aliases, 2);
  r = index.Apply("a:1", "m", Batch({Stored(second, 16, 402, 101)}));
  EXPECT_EQ(r.skipped, 1);
  // The engine evicting an older copy (a known alias) leaves the block held under its current name.
  KvBlockRemoved rm;
  rm.block_hashes = {200, 201};
  r = index.Apply("a:1", "m", Batch({rm}));
  EXPECT_EQ(r.removed, 0);
  EXPECT_EQ(r.removed_unknown, 0);
  EXPECT_EQ(index.Stats().engine_hash_aliases, 0);
  EXPECT_EQ(Match(index, prompt, {"a:1"})[0].blocks, 4);
}

TEST(KvIndexTest, TheSpeculativeMediumNameIsReservedForPredictions) {
  KvBlockIndex index;
  const auto prompt = Tokens(1, 32);
  const KvApplyResult r = index.Apply("a:1", "m", Batch({Stored(prompt, 16, 5, {}, std::string(kSpeculativeMedium))}));
  EXPECT_EQ(r.skipped, 1);
  EXPECT_EQ(index.Stats().blocks, 0);
}

// ---- Over ZeroMQ --------------------------------------------------------------------------

template <typename F>
bool PollUntil(KvEventSubscriber& sub, F done, milliseconds limit = milliseconds(5000)) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    sub.PollOnce(milliseconds(20));
  }
  return done();
}

KvEndpointStats StatsOf(KvEventSubscriber& sub, const std::string& endpoint) {
  for (const auto& s : sub.Stats())
    if (s.endpoint == endpoint) return s;
  return {};
}

std::unique_ptr<KvEventPublisher> StartPublisher(bool replay, KvPublisherOptions o = {}) {
  o.endpoint = "tcp://127.0.0.1:0";
  if (replay) o.replay_endpoint = "tcp://127.0.0.1:0";
  o.topic = "kv@a:1@m";
  auto p = KvEventPublisher::Start(o);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : nullptr;
}

// Publishes empty batches until the subscriber has applied one (ZeroMQ's slow joiner: a PUB drops
// what it sends before the subscription reaches it).
void Handshake(KvEventPublisher& pub, KvEventSubscriber& sub, const std::string& endpoint) {
  ASSERT_TRUE(PollUntil(sub, [&] {
    if (StatsOf(sub, endpoint).batches > 0) return true;
    pub.Publish({});
    pub.Flush();
    return false;
  }));
}

TEST(KvSubscriberTest, AppliesEventsAndDropsEntriesWhenTheEndpointLeaves) {
  auto pub = StartPublisher(false);
  ASSERT_NE(pub, nullptr);
  KvBlockIndex index;
  KvEventSubscriber sub(&index);
  sub.SetSubscriptions({{"a:1", pub->endpoint(), "", ""}});
  Handshake(*pub, sub, "a:1");
  const auto prompt = Tokens(1, 64);
  pub->Publish({Stored(prompt, 16, 77)});
  ASSERT_TRUE(PollUntil(sub, [&] { return Match(index, prompt, {"a:1"})[0].blocks == 4; }));
  const KvEndpointStats st = StatsOf(sub, "a:1");
  EXPECT_GE(st.events, 1);
  EXPECT_EQ(st.malformed, 0);
  EXPECT_GT(st.last_event_unix_us, 0);
  // The base model came from the topic kv@a:1@m: a request for "m" is a base-model request.
  EXPECT_EQ(index.Endpoints().size(), 1u);
  sub.SetSubscriptions({});
  sub.PollOnce(milliseconds(10));
  EXPECT_EQ(Match(index, prompt, {"a:1"})[0].blocks, 0);
  EXPECT_TRUE(sub.Stats().empty());
}

TEST(KvSubscriberTest, MalformedMessagesAreCountedAndSkipped) {
  auto pub = StartPublisher(false);
  ASSERT_NE(pub, nullptr);
  KvBlockIndex index;
  KvEventSubscriber sub(&index);
  sub.SetSubscriptions({{"a:1", pub->endpoint(), "", "m"}});
  Handshake(*pub, sub, "a:1");
  const int64_t seq0 = StatsOf(sub, "a:1").last_seq;
  pub->PublishRaw({"kv@a:1@m", "short"});                                         // two frames
  pub->PublishRaw({"kv@a:1@m", "12345678", "\xc1"});                              // 0xc1: never msgpack
  pub->PublishRaw({"kv@a:1@m", EncodeKvSequence(static_cast<uint64_t>(seq0) + 1), "\x93\xcb"});  // truncated
  const auto prompt = Tokens(9, 32);
  pub->Publish({Stored(prompt, 16, 500)});
  pub->Flush();
  ASSERT_TRUE(PollUntil(sub, [&] { return Match(index, prompt, {"a:1"})[0].blocks == 2; }));
  const KvEndpointStats st = StatsOf(sub, "a:1");
  EXPECT_EQ(st.malformed, 3) << st.last_error;
}

TEST(KvSubscriberTest, GapWithoutReplayDropsTheEndpointsEntriesOnceTheNextBatchConfirmsIt) {
  KvPublisherOptions o;
  auto pub = StartPublisher(false, o);
  ASSERT_NE(pub, nullptr);
  KvBlockIndex index;
  KvEventSubscriber sub(&index);
  sub.SetSubscriptions({{"a:1", pub->endpoint(), "", "m"}});
  Handshake(*pub, sub, "a:1");
  const auto p1 = Tokens(1, 32), p2 = Tokens(1000, 32);
  pub->Publish({Stored(p1, 16, 10)});
  ASSERT_TRUE(PollUntil(sub, [&] { return Match(index, p1, {"a:1"})[0].blocks == 2; }));
  // Batches lost on the way (a removal of p1's blocks, say): the next one that arrives carries a
  // later sequence number (sent by hand here).
  const int64_t last = StatsOf(sub, "a:1").last_seq;
  KvEventBatch b = Batch({Stored(p2, 16, 20)});
  pub->PublishRaw({"kv@a:1@m", EncodeKvSequence(static_cast<uint64_t>(last) + 3), EncodeKvEventBatch(b)});
  pub->Flush();
  // One message alone could be anyone's: it is held, and nothing is dropped yet.
  ASSERT_TRUE(PollUntil(sub, [&] { return StatsOf(sub, "a:1").gaps == 1; }));
  EXPECT_EQ(Match(index, p2, {"a:1"})[0].blocks, 0);
  EXPECT_EQ(Match(index, p1, {"a:1"})[0].blocks, 2);
  // The batch after it confirms the gap: the entries go, then both batches are applied.
  pub->PublishRaw({"kv@a:1@m", EncodeKvSequence(static_cast<uint64_t>(last) + 4), EncodeKvEventBatch(Batch({}))});
  ASSERT_TRUE(PollUntil(sub, [&] { return Match(index, p2, {"a:1"})[0].blocks == 2; }));
  EXPECT_EQ(Match(index, p1, {"a:1"})[0].blocks, 0) << "entries from before the gap were dropped";
  const KvEndpointStats st = StatsOf(sub, "a:1");
  EXPECT_EQ(st.gaps, 1);
  EXPECT_GE(st.resets, 1);
  EXPECT_EQ(st.last_seq, last + 4);
  EXPECT_EQ(st.seq_rejected, 0);
}

TEST(KvSubscriberTest, GapsAndLateJoinsAreFilledFromTheReplaySocket) {
  for (bool legacy : {false, true}) {
    SCOPED_TRACE(legacy ? "replay without the topic frame (older engines)" : "replay with the topic frame");
    KvPublisherOptions o;
    o.legacy_replay = legacy;
    auto pub = StartPublisher(true, o);
    ASSERT_NE(pub, nullptr);
    // History published before anyone subscribes: a late joiner learns it by replay.
    const auto p1 = Tokens(1, 32);
    pub->Publish({Stored(p1, 16, 10)});
    pub->Flush();
    KvBlockIndex index;
    KvEventSubscriber sub(&index);
    sub.SetSubscriptions({{"a:1", pub->endpoint(), pub->replay_endpoint(), "m"}});
    Handshake(*pub, sub, "a:1");
    EXPECT_EQ(Match(index, p1, {"a:1"})[0].blocks, 2) << "replayed history";
    EXPECT_GE(StatsOf(sub, "a:1").replays, 1);
    EXPECT_EQ(StatsOf(sub, "a:1").replay_failures, 0);
  }
}

TEST(KvSubscriberTest, DroppedBatchesAreReplayedAndRestartsReset) {
  KvPublisherOptions o;
  o.drop_rate = 1.0;  // nothing goes out live: every batch only reaches the replay buffer
  auto dropping = StartPublisher(true, o);
  ASSERT_NE(dropping, nullptr);
  KvBlockIndex index;
  KvEventSubscriber sub(&index);
  const auto p1 = Tokens(1, 32);
  dropping->Publish({Stored(p1, 16, 10)});
  dropping->Flush();
  // The subscriber only learns of p1 through replay (the new subscription's, and the one a live
  // message with a later sequence number would trigger; sent raw, since the publisher drops its
  // own).
  sub.SetSubscriptions({{"a:1", dropping->endpoint(), dropping->replay_endpoint(), "m"}});
  ASSERT_TRUE(PollUntil(sub, [&] {
    dropping->PublishRaw({"kv@a:1@m", EncodeKvSequence(1), EncodeKvEventBatch(Batch({}))});
    dropping->Flush();
    return Match(index, p1, {"a:1"})[0].blocks == 2 && StatsOf(sub, "a:1").last_seq == 1;
  }));
  EXPECT_GE(StatsOf(sub, "a:1").replays, 1);
  // The engine restarts: its sequence goes back to 0. What the old process held is gone.
  const int64_t last = StatsOf(sub, "a:1").last_seq;
  ASSERT_GE(last, 1);
  dropping->PublishRaw({"kv@a:1@m", EncodeKvSequence(0), EncodeKvEventBatch(Batch({}))});
  ASSERT_TRUE(PollUntil(sub, [&] { return StatsOf(sub, "a:1").last_seq == 0; }));
  EXPECT_EQ(Match(index, p1, {"a:1"})[0].blocks, 0);
  EXPECT_GE(StatsOf(sub, "a:1").resets, 1);
}

TEST(KvSubscriberTest, CentralSocketRoutesByTopicToTheNamedEndpoint) {
  KvBlockIndex index;
  KvSubscriberOptions so;
  so.topic_filter = "kv@";
  so.central_endpoint = "tcp://127.0.0.1:*";
  KvEventSubscriber sub(&index, so);
  ASSERT_NE(sub.central_address(), "") << sub.central_error();
  // Two engines connect to the one socket (as vLLM does for an address without '*').
  auto connect = [&](const std::string& topic) {
    KvPublisherOptions o;
    o.endpoint = sub.central_address();
    o.connect = true;
    o.topic = topic;
    auto p = KvEventPublisher::Start(o);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? std::move(*p) : nullptr;
  };
  // The endpoints are named by IP address: the central socket only takes an endpoint's messages
  // from that address (here both engines send from 127.0.0.1).
  auto a = connect("kv@127.0.0.1:1@m"), b = connect("kv@127.0.0.1:2@m"), stranger = connect("kv@127.0.0.9:9@m");
  ASSERT_TRUE(a && b && stranger);
  sub.SetSubscriptions({{"127.0.0.1:1", "", "", ""}, {"127.0.0.1:2", "", "", ""}});
  const auto pa = Tokens(1, 32), pb = Tokens(500, 48);
  ASSERT_TRUE(PollUntil(sub, [&] {
    a->Publish({Stored(pa, 16, 10)});
    b->Publish({Stored(pb, 16, 90)});
    stranger->Publish({Stored(pa, 16, 10)});
    a->Flush();
    b->Flush();
    stranger->Flush();
    return Match(index, pa, {"127.0.0.1:1"})[0].blocks == 2 && Match(index, pb, {"127.0.0.1:2"})[0].blocks == 3 &&
           sub.central_unknown() > 0;
  }));
  // Each endpoint got only its own blocks; the stranger's went nowhere.
  EXPECT_EQ(Match(index, pb, {"127.0.0.1:1"})[0].blocks, 0);
  EXPECT_EQ(Match(index, pa, {"127.0.0.1:2", "127.0.0.9:9"})[1].blocks, 0);
  EXPECT_EQ(sub.central_stats().unknown_endpoint, sub.central_unknown());
  EXPECT_EQ(sub.central_stats().peer_mismatch, 0);
  EXPECT_NE(StatsOf(sub, "127.0.0.1:1").address.find("central tcp://127.0.0.1:"), std::string::npos)
      << StatsOf(sub, "127.0.0.1:1").address;
  // An endpoint that leaves drops its entries.
  sub.SetSubscriptions({{"127.0.0.1:2", "", "", ""}});
  ASSERT_TRUE(PollUntil(sub, [&] { return Match(index, pa, {"127.0.0.1:1"})[0].blocks == 0; }));
  // A second subscriber cannot bind the same address: it says so and keeps going.
  KvSubscriberOptions again = so;
  again.central_endpoint = sub.central_address();
  KvEventSubscriber busy(&index, again);
  EXPECT_EQ(busy.central_address(), "");
  EXPECT_NE(busy.central_error().find("cannot bind"), std::string::npos) << busy.central_error();
}

TEST(KvSubscriberTest, ReconnectsWhenThePublisherComesBack) {
  KvBlockIndex index;
  KvEventSubscriber sub(&index);
  auto pub = StartPublisher(false);
  ASSERT_NE(pub, nullptr);
  const std::string address = pub->endpoint();
  sub.SetSubscriptions({{"a:1", address, "", "m"}});
  Handshake(*pub, sub, "a:1");
  pub.reset();  // the server goes away
  KvPublisherOptions again;
  again.endpoint = address;  // and comes back on the same port
  again.topic = "kv@a:1@m";
  auto back = KvEventPublisher::Start(again);
  ASSERT_TRUE(back.ok()) << back.status();
  const auto p = Tokens(3, 16);
  ASSERT_TRUE(PollUntil(sub, [&] {
    (*back)->Publish({Stored(p, 16, 900)});
    (*back)->Flush();
    return Match(index, p, {"a:1"})[0].blocks == 1;
  }, milliseconds(10000)));
}

// A publisher connected to `central` (the subscriber's bound address) from `source_ip`, with
// libzmq's "tcp://SOURCE:0;DEST:PORT" form: how an engine on another host would appear.
std::unique_ptr<KvEventPublisher> ConnectFrom(const std::string& source_ip, const std::string& central,
                                              const std::string& topic) {
  KvPublisherOptions o;
  o.endpoint = absl::StrCat("tcp://", source_ip, ":0;", central.substr(6));  // central: "tcp://..."
  o.connect = true;
  o.topic = topic;
  auto p = KvEventPublisher::Start(o);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : nullptr;
}

TEST(KvSubscriberTest, CentralSocketDropsBatchesFromAPeerThatIsNotTheEndpoint) {
  for (const bool verify : {true, false}) {
    SCOPED_TRACE(verify ? "verifyPeerAddress: true (default)" : "verifyPeerAddress: false");
    KvBlockIndex index;
    KvSubscriberOptions so;
    so.topic_filter = "kv@";
    so.central_endpoint = "tcp://127.0.0.1:*";
    so.verify_peer_address = verify;
    KvEventSubscriber sub(&index, so);
    ASSERT_NE(sub.central_address(), "") << sub.central_error();
    // The real engine of 127.0.0.1:8000 sends from 127.0.0.1; a forger on 127.0.0.2 sends batches
    // whose topic names the same endpoint; the engine of 127.0.0.2:8000 sends its own; and
    // localhost:8000, named by host, sends from 127.0.0.1.
    auto engine = ConnectFrom("127.0.0.1", sub.central_address(), "kv@127.0.0.1:8000@m");
    auto forger = ConnectFrom("127.0.0.2", sub.central_address(), "kv@127.0.0.1:8000@m");
    auto other = ConnectFrom("127.0.0.2", sub.central_address(), "kv@127.0.0.2:8000@m");
    auto named = ConnectFrom("127.0.0.1", sub.central_address(), "kv@localhost:8000@m");
    ASSERT_TRUE(engine && forger && other && named);
    sub.SetSubscriptions({{"127.0.0.1:8000", "", "", ""}, {"127.0.0.2:8000", "", "", ""}, {"localhost:8000", "", "", ""}});
    const auto real = Tokens(1, 32), forged = Tokens(900, 64), theirs = Tokens(5000, 48), local = Tokens(7000, 16);
    ASSERT_TRUE(PollUntil(sub, [&] {
      forger->Publish({Stored(forged, 16, 66)});
      forger->Flush();
      // Unverified, the two streams would mix under one sequence: without the check only the
      // forger speaks for 127.0.0.1:8000 here (what the opt-out risks).
      if (verify) engine->Publish({Stored(real, 16, 10)});
      other->Publish({Stored(theirs, 16, 90)});
      named->Publish({Stored(local, 16, 30)});
      engine->Flush();
      other->Flush();
      named->Flush();
      const bool forged_seen = verify ? sub.central_stats().peer_mismatch > 0
                                      : Match(index, forged, {"127.0.0.1:8000"})[0].blocks == 4;
      return forged_seen && (!verify || Match(index, real, {"127.0.0.1:8000"})[0].blocks == 2) &&
             Match(index, theirs, {"127.0.0.2:8000"})[0].blocks == 3 &&
             Match(index, local, {"localhost:8000"})[0].blocks == 1;
    }));
    const KvEndpointStats st = StatsOf(sub, "127.0.0.1:8000");
    if (verify) {
      EXPECT_EQ(Match(index, forged, {"127.0.0.1:8000"})[0].blocks, 0) << "the forged batch never reached the index";
      EXPECT_GE(st.peer_rejected, 1);
      EXPECT_EQ(sub.central_stats().peer_mismatch, st.peer_rejected);
      EXPECT_EQ(sub.central_stats().peer_unverifiable, 0);
      // The forger's own sequence numbers never entered the endpoint's stream either.
      EXPECT_EQ(st.seq_rejected, 0);
    } else {
      EXPECT_EQ(Match(index, forged, {"127.0.0.1:8000"})[0].blocks, 4) << "the opt-out trusts the topic";
      EXPECT_EQ(st.peer_rejected, 0);
      EXPECT_EQ(sub.central_stats().peer_mismatch, 0);
    }
    EXPECT_EQ(StatsOf(sub, "127.0.0.2:8000").peer_rejected, 0);
  }
}

TEST(KvSubscriberTest, CentralSocketDropsWhatItCannotVerify) {
  KvBlockIndex index;
  KvSubscriberOptions so;
  so.central_endpoint = "tcp://127.0.0.1:*";
  KvEventSubscriber sub(&index, so);
  ASSERT_NE(sub.central_address(), "") << sub.central_error();
  // A host that does not resolve (the .invalid TLD never does): its messages cannot be checked.
  auto p = ConnectFrom("127.0.0.1", sub.central_address(), "kv@nowhere.invalid:8000@m");
  ASSERT_NE(p, nullptr);
  sub.SetSubscriptions({{"nowhere.invalid:8000", "", "", ""}});
  ASSERT_TRUE(PollUntil(sub, [&] {
    p->Publish({Stored(Tokens(1, 16), 16, 1)});
    p->Flush();
    return sub.central_stats().peer_unverifiable > 0;
  }));
  EXPECT_EQ(index.Stats().blocks, 0);
  EXPECT_NE(StatsOf(sub, "nowhere.invalid:8000").last_error.find("does not resolve"), std::string::npos);
}

// Publishes `n` empty batches and waits until the subscriber applied the last.
void Advance(KvEventPublisher& pub, KvEventSubscriber& sub, const std::string& endpoint, int n) {
  for (int i = 0; i < n; ++i) pub.Publish({});
  pub.Flush();
  const int64_t want = static_cast<int64_t>(pub.stats().batches) - 1;
  ASSERT_TRUE(PollUntil(sub, [&] { return StatsOf(sub, endpoint).last_seq == want; }));
}

TEST(KvSubscriberTest, OneForgedSequenceDoesNotWipeTheEndpointButARestartResetsIt) {
  for (const bool replay : {false, true}) {
    SCOPED_TRACE(replay ? "with a replay socket" : "without a replay socket");
    auto pub = StartPublisher(replay);
    ASSERT_NE(pub, nullptr);
    const std::string address = pub->endpoint(), replay_address = pub->replay_endpoint();
    KvBlockIndex index;
    KvEventSubscriber sub(&index);
    sub.SetSubscriptions({{"a:1", address, replay_address, "m"}});
    Handshake(*pub, sub, "a:1");
    const auto held = Tokens(1, 64), forged = Tokens(3000, 32);
    pub->Publish({Stored(held, 16, 10)});
    Advance(*pub, sub, "a:1", 50);
    ASSERT_EQ(Match(index, held, {"a:1"})[0].blocks, 4);
    const int64_t last = StatsOf(sub, "a:1").last_seq;
    // One message whose sequence went back (as a restarted engine's would), then one far ahead:
    // neither is applied, and the entries stay.
    pub->PublishRaw({"kv@a:1@m", EncodeKvSequence(0), EncodeKvEventBatch(Batch({Stored(forged, 16, 77)}))});
    pub->Flush();
    ASSERT_TRUE(PollUntil(sub, [&] { return replay ? StatsOf(sub, "a:1").seq_rejected == 1 : true; }));
    pub->PublishRaw({"kv@a:1@m", EncodeKvSequence(static_cast<uint64_t>(last) + 40),
                     EncodeKvEventBatch(Batch({KvAllBlocksCleared{}}))});
    pub->Flush();
    ASSERT_TRUE(PollUntil(sub, [&] { return StatsOf(sub, "a:1").gaps == 1; }));
    // The engine's own stream goes on.
    Advance(*pub, sub, "a:1", 2);
    KvEndpointStats st = StatsOf(sub, "a:1");
    EXPECT_EQ(Match(index, held, {"a:1"})[0].blocks, 4) << "a forged sequence wiped the endpoint";
    EXPECT_EQ(Match(index, forged, {"a:1"})[0].blocks, 0);
    EXPECT_EQ(st.resets, 0);
    EXPECT_EQ(st.seq_rejected, 2) << st.last_error;
    EXPECT_EQ(st.last_seq, last + 2);
    // The engine really restarts: a new process on the same addresses numbers from 0 again.
    pub.reset();
    KvPublisherOptions again;
    again.endpoint = address;
    again.replay_endpoint = replay_address;
    again.topic = "kv@a:1@m";
    auto back = KvEventPublisher::Start(again);
    ASSERT_TRUE(back.ok()) << back.status();
    const auto fresh = Tokens(8000, 32);
    ASSERT_TRUE(PollUntil(sub, [&] {
      (*back)->Publish({Stored(fresh, 16, 500)});
      (*back)->Flush();
      return Match(index, fresh, {"a:1"})[0].blocks == 2;
    }, milliseconds(10000)));
    st = StatsOf(sub, "a:1");
    EXPECT_EQ(Match(index, held, {"a:1"})[0].blocks, 0) << "what the old process held is gone";
    EXPECT_EQ(st.resets, 1) << st.last_error;
    EXPECT_LT(st.last_seq, last);
  }
}

// ---- The producer in a scheduler ------------------------------------------------------------

TEST(PrecisePrefixProducerTest, PrefixScorerFollowsWhatTheServersHold) {
  const char* yaml = R"(apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
- type: precise-prefix-cache-producer
  parameters:
    tokenProcessorConfig: {blockSize: 16}
- type: prefix-cache-scorer
  parameters: {prefixMatchInfoProducerName: precise-prefix-cache-producer}
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-scorer
  - pluginRef: max-score-picker
)";
  auto cfg = ParseConfig(yaml, "precise.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  ManualClock clock{testing::kNowUs};
  SeededRng rng{1};
  auto sched = BuildScheduler(*cfg, BuiltinRegistry(), PluginContext{&clock, &rng});
  ASSERT_TRUE(sched.ok()) << sched.status();
  const KvEventsBinding* b = (*sched)->KvEvents();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->topic_filter, "kv@");
  EXPECT_EQ(b->socket_port, 5557);
  std::string body = R"({"model":"m","messages":[{"role":"system","content":")" + std::string(400, 's') +
                     R"("},{"role":"user","content":"hi"}]})";
  auto req = ParseOpenAIRequest("/v1/chat/completions", body);
  ASSERT_TRUE(req.ok()) << req.status();
  std::vector<Endpoint> pool = {testing::Ep("10.0.0.1:8000"), testing::Ep("10.0.0.2:8000")};
  // The second server holds the prompt's blocks (as its events would say): it is picked.
  const std::vector<uint32_t> tokens = EstimateTokenIds(req->prompt);
  b->index->Apply("10.0.0.2:8000", "m", Batch({Stored(tokens, 16, 1)}));
  PickOptions traced;
  traced.trace = true;
  for (int i = 0; i < 5; ++i) {
    PickResult r = (*sched)->Pick(*req, pool, traced);
    ASSERT_EQ(r.status, 200) << r.reason;
    EXPECT_EQ(r.endpoints[0], "10.0.0.2:8000");
    EXPECT_EQ(r.prefix_match_blocks, static_cast<int>(tokens.size() / 16));
  }
  // Evicted there, cached on the first: the preference follows.
  b->index->Apply("10.0.0.2:8000", "m", Batch({KvAllBlocksCleared{}}));
  b->index->Apply("10.0.0.1:8000", "m", Batch({Stored(tokens, 16, 1)}));
  EXPECT_EQ((*sched)->Pick(*req, pool).endpoints[0], "10.0.0.1:8000");
  EXPECT_GT((*sched)->PrefixIndexEntries(), 0u);
  (*sched)->ForgetEndpoint("10.0.0.1:8000");
  EXPECT_EQ((*sched)->PrefixIndexEntries(), 0u);
}

TEST(PrecisePrefixProducerTest, SpeculativeIndexingSteersFollowersUntilTheTtl) {
  const char* yaml = R"(apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: precise-prefix-cache-producer
  parameters:
    tokenProcessorConfig: {blockSize: 16}
    speculativeIndexing: true
    speculativeTTL: 2s
- type: prefix-cache-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-scorer
  - pluginRef: max-score-picker
)";
  auto cfg = ParseConfig(yaml, "spec.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  ManualClock clock{testing::kNowUs};
  SeededRng rng{3};
  auto sched = BuildScheduler(*cfg, BuiltinRegistry(), PluginContext{&clock, &rng});
  ASSERT_TRUE(sched.ok()) << sched.status();
  EXPECT_NE((*sched)->EffectiveConfigYaml().find("speculativeIndexing: true"), std::string::npos);
  std::vector<Endpoint> pool;
  for (int i = 1; i <= 8; ++i) pool.push_back(testing::Ep("10.0.0." + std::to_string(i) + ":8000"));
  const std::string body = R"({"model":"m","prompt":")" + std::string(640, 'p') + R"("})";
  auto req = ParseOpenAIRequest("/v1/completions", body);
  ASSERT_TRUE(req.ok());
  // No events yet: the first pick is a tie; the followers go where it went.
  PickResult first = (*sched)->Pick(*req, pool);
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(first.prefix_match_blocks, 0);
  EXPECT_EQ(first.tokens_source, "estimate");
  for (int i = 0; i < 5; ++i) {
    PickResult r = (*sched)->Pick(*req, pool);
    EXPECT_EQ(r.endpoints[0], first.endpoints[0]);
    EXPECT_EQ(r.prefix_match_blocks, 10);
  }
  // No event confirms them: after the TTL the prediction is gone (the next pick predicts anew).
  clock.Advance(2'000'001);
  PickOptions what_if;
  what_if.record = false;
  EXPECT_EQ((*sched)->Pick(*req, pool, what_if).prefix_match_blocks, 0);
  EXPECT_EQ((*sched)->KvEvents()->index->Stats().speculative_expired, 10);
}

TEST(PrecisePrefixProducerTest, DeprecatedScorerFormIsProducerAndScorerInOne) {
  const char* yaml = R"(apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: precise-prefix-cache-scorer
  parameters:
    tokenProcessorConfig: {blockSize: 16}
    kvEventsConfig: {topicFilter: "kv@", podDiscoveryConfig: {socketPort: 6000}}
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: precise-prefix-cache-scorer
  - pluginRef: max-score-picker
)";
  auto cfg = ParseConfig(yaml, "deprecated.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  ManualClock clock{testing::kNowUs};
  SeededRng rng{1};
  auto sched = BuildScheduler(*cfg, BuiltinRegistry(), PluginContext{&clock, &rng});
  ASSERT_TRUE(sched.ok()) << sched.status();
  bool warned = false;
  for (const std::string& w : (*sched)->warnings()) warned = warned || w.find("deprecated") != std::string::npos;
  EXPECT_TRUE(warned);
  const KvEventsBinding* b = (*sched)->KvEvents();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->socket_port, 6000);
  auto req = ParseOpenAIRequest("/v1/completions", R"({"model":"m","prompt":")" + std::string(320, 'q') + R"("})");
  ASSERT_TRUE(req.ok());
  std::vector<Endpoint> pool = {testing::Ep("10.0.0.1:8000"), testing::Ep("10.0.0.2:8000"), testing::Ep("10.0.0.3:8000")};
  b->index->Apply("10.0.0.3:8000", "m", Batch({Stored(EstimateTokenIds(req->prompt), 16, 1)}));
  for (int i = 0; i < 4; ++i) {
    PickResult r = (*sched)->Pick(*req, pool);
    EXPECT_EQ(r.endpoints[0], "10.0.0.3:8000");
    EXPECT_EQ(r.prefix_match_blocks, 5);
  }
}

TEST(PrecisePrefixProducerTest, ParametersAreCheckedNamingThePlace) {
  auto build = [](const std::string& params) {
    std::string yaml = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
                       "- type: precise-prefix-cache-producer\n  parameters: " + params +
                       "\n- type: prefix-cache-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n"
                       "  - pluginRef: prefix-cache-scorer\n";
    auto cfg = ParseConfig(yaml, "p.yaml");
    if (!cfg.ok()) return cfg.status();
    ManualClock clock{0};
    SeededRng rng{1};
    auto s = BuildScheduler(*cfg, BuiltinRegistry(), PluginContext{&clock, &rng});
    return s.ok() ? absl::OkStatus() : s.status();
  };
  EXPECT_TRUE(build("{}").ok());
  EXPECT_TRUE(build("{kvEventsConfig: {topicFilter: 'kv@', podDiscoveryConfig: {socketPort: 6000, replaySocketPort: 6001}}}").ok());
  const std::pair<const char*, const char*> bad[] = {
      {"{tokenProcessorConfig: {blockSizeTokens: -1}}", "blockSizeTokens"},
      {"{indexerConfig: {tokenizersPoolConfig: {}}}", "token-producer"},
      {"{kvEventsConfig: {zmqEndpoint: 'udp://0.0.0.0:5557'}}", "zmqEndpoint"},
      {"{kvEventsConfig: {podDiscoveryConfig: {socketPort: 70000}}}", "socketPort"},
      {"{speculativeIndexing: 3}", "speculativeIndexing"},
      {"{indexerConfig: {kvCacheBackendConfigs: [{name: gpu, weight: -1}]}}", "weight"},
      {"{nope: 1}", "nope"},
  };
  for (const auto& [params, needle] : bad) {
    absl::Status s = build(params);
    EXPECT_FALSE(s.ok()) << params;
    EXPECT_NE(s.message().find(needle), std::string::npos) << params << ": " << s.message();
  }
}

// Issue #41: the index's default bound (about 3.3 GiB) is more than a 2Gi container has; with the
// container's limit known, loading such a config warns, naming the setting and a size that fits.
TEST(KvIndexTest, ContainerMemoryLimitAndTheIndexBoundWarning) {
  const std::string root = ::testing::TempDir() + "/cgroup-" + std::to_string(::getpid());
  std::filesystem::create_directories(root + "/v1/memory");
  std::filesystem::create_directories(root + "/v2");
  auto write = [](const std::string& path, const std::string& text) { std::ofstream(path) << text; };
  EXPECT_EQ(internal::ContainerMemoryLimit(root + "/none"), std::nullopt);
  write(root + "/v2/memory.max", "max\n");
  EXPECT_EQ(internal::ContainerMemoryLimit(root + "/v2"), std::nullopt);
  write(root + "/v2/memory.max", "2147483648\n");
  EXPECT_EQ(internal::ContainerMemoryLimit(root + "/v2"), uint64_t{2147483648});
  write(root + "/v1/memory/memory.limit_in_bytes", "9223372036854771712\n");  // v1's "no limit"
  EXPECT_EQ(internal::ContainerMemoryLimit(root + "/v1"), std::nullopt);
  write(root + "/v1/memory/memory.limit_in_bytes", "1073741824");
  EXPECT_EQ(internal::ContainerMemoryLimit(root + "/v1"), uint64_t{1073741824});
  std::filesystem::remove_all(root);

  const std::string w = internal::IndexBoundWarning("p.size", uint64_t{1} << 22, 800, uint64_t{2} << 30);
  EXPECT_NE(w.find("p.size: 4194304 blocks may take about 3200 MiB"), std::string::npos) << w;
  EXPECT_NE(w.find("limit (2048 MiB)"), std::string::npos) << w;
  EXPECT_NE(w.find("at most 671088"), std::string::npos) << w;
  EXPECT_EQ(internal::IndexBoundWarning("p.size", 671088, 800, uint64_t{2} << 30), "");
  EXPECT_EQ(internal::IndexBoundWarning("p.size", uint64_t{1} << 22, 800, std::nullopt), "");
}

}  // namespace
}  // namespace epp
