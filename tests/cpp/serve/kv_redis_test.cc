// The precise index's copy in Redis (llm-d's redisConfig): entries in llm-d's shape, an index
// rebuilt from the copy that answers lookups as the original and goes on applying the engines'
// events (their parent hashes resolve), Redis absent at start and back later. A real
// redis-server on a Unix socket, stopped by its pid; skips without one.
#include "epp/runtime/kv_redis.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "epp/runtime/redis.h"
#include "testing/redis_server.h"

namespace epp {
namespace {

using testing::RedisServerProcess;

std::vector<uint32_t> Tokens(uint32_t start, size_t n) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = start + static_cast<uint32_t>(i);
  return t;
}

KvBlockStored Stored(std::vector<uint64_t> hashes, std::optional<uint64_t> parent, std::vector<uint32_t> tokens,
                     std::string medium = "GPU") {
  KvBlockStored s;
  s.block_hashes = std::move(hashes);
  s.parent_block_hash = parent;
  s.token_ids = std::move(tokens);
  s.block_size = 4;
  s.medium = std::move(medium);
  return s;
}

KvEventBatch Batch(std::vector<KvEvent> events) {
  KvEventBatch b;
  b.events = std::move(events);
  return b;
}

std::vector<KvHolderRecord> Sorted(std::vector<KvHolderRecord> v) {
  std::sort(v.begin(), v.end(), [](const KvHolderRecord& a, const KvHolderRecord& b) {
    return std::tie(a.endpoint, a.medium, a.key) < std::tie(b.endpoint, b.medium, b.key);
  });
  return v;
}

TEST(KvRedisMirror, EntriesInLlmdsShapeRoundTrip) {
  KvHolderRecord h{"10.0.0.1:8000", "GPU", 1234567890123ULL, 0xfeedULL, 16};
  EXPECT_EQ(KvRedisMirror::Field(h),
            R"({"PodIdentifier":"10.0.0.1:8000","DeviceTier":"GPU","Speculative":false,"HasGroup":false,"GroupIdx":0})");
  EXPECT_EQ(KvRedisMirror::Value(h), "16:65261");
  auto back = KvRedisMirror::Parse("1234567890123", KvRedisMirror::Field(h), KvRedisMirror::Value(h));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, h);
  // llm-d's own entries (an empty value), speculative ones, and garbage are not ours.
  EXPECT_FALSE(KvRedisMirror::Parse("1", KvRedisMirror::Field(h), "").has_value());
  EXPECT_FALSE(KvRedisMirror::Parse("1", R"({"PodIdentifier":"a","DeviceTier":"gpu","Speculative":true})", "16:1").has_value());
  EXPECT_FALSE(KvRedisMirror::Parse("1", "{not json", "16:1").has_value());
  EXPECT_FALSE(KvRedisMirror::Parse("engine:5", KvRedisMirror::Field(h), "16:1").has_value());
  EXPECT_FALSE(KvRedisMirror::Parse("1", KvRedisMirror::Field(h), "x:1").has_value());
}

TEST(KvRedisMirror, AnIndexRebuiltFromTheCopyAnswersAsTheOriginalAndGoesOnApplyingEvents) {
  if (!RedisServerProcess::Available()) GTEST_SKIP() << "redis-server is not installed (scripts/setup installs it)";
  RedisServerProcess redis;
  ASSERT_TRUE(redis.WaitReady());
  KvRedisOptions o;
  o.address = redis.url();
  o.interval = std::chrono::milliseconds(20);

  auto original = std::make_shared<KvBlockIndex>();
  auto mirror = KvRedisMirror::Create(o, original, nullptr);
  ASSERT_TRUE(mirror.ok()) << mirror.status();
  ASSERT_TRUE((*mirror)->Load().ok());  // an empty copy
  (*mirror)->Start();
  const std::vector<uint32_t> prompt = Tokens(100, 16);  // four blocks of 4
  original->Apply("10.0.0.1:8000", "m", Batch({Stored({11, 12, 13}, std::nullopt, Tokens(100, 12))}));
  original->Apply("10.0.0.2:8000", "m", Batch({Stored({21, 22}, std::nullopt, Tokens(100, 8))}));
  original->Apply("10.0.0.2:8000", "m", Batch({Stored({21, 22}, std::nullopt, {}, "CPU")}));  // offloaded too
  original->Apply("10.0.0.1:8000", "m", Batch({KvBlockRemoved{{13}, "GPU", std::nullopt}}));
  (*mirror)->Stop();  // sends what is queued
  EXPECT_GE((*mirror)->stats().written, 8);
  EXPECT_EQ((*mirror)->stats().errors, 0);

  auto rebuilt = std::make_shared<KvBlockIndex>();
  auto again = KvRedisMirror::Create(o, rebuilt, nullptr);
  ASSERT_TRUE(again.ok());
  auto loaded = (*again)->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, 6u);  // 1:{11,12} GPU, 2:{21,22} GPU and CPU
  EXPECT_EQ(Sorted(rebuilt->Holders()), Sorted(original->Holders()));
  const std::vector<std::string> eps{"10.0.0.1:8000", "10.0.0.2:8000"};
  std::vector<KvPrefixMatch> a, b;
  original->Lookup(prompt, "m", eps, a);
  rebuilt->Lookup(prompt, "m", eps, b);
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(a[i].blocks, b[i].blocks) << eps[i];
    EXPECT_DOUBLE_EQ(a[i].weighted_blocks, b[i].weighted_blocks) << eps[i];
  }
  EXPECT_EQ(b[0].blocks, 2);
  // The engines' next events chain from blocks the rebuilt index learnt from the copy.
  KvApplyResult r = rebuilt->Apply("10.0.0.1:8000", "m", Batch({Stored({13}, 12, Tokens(108, 4))}));
  EXPECT_EQ(r.skipped, 0) << r.last_skip;
  EXPECT_EQ(r.stored, 1);
  r = rebuilt->Apply("10.0.0.2:8000", "m", Batch({KvBlockRemoved{{22}, "CPU", std::nullopt}}));
  EXPECT_EQ(r.removed, 1);
  rebuilt->Lookup(prompt, "m", eps, b);
  EXPECT_EQ(b[0].blocks, 3);

  // The entries are where llm-d keeps them: a hash per block key, a field per holder.
  RedisAddress addr;
  addr.transport = RedisAddress::Transport::kUnix;
  addr.socket_path = redis.socket_path();
  auto c = RedisConnection::Connect(addr);
  ASSERT_TRUE(c.ok());
  auto keys = (*c)->Command({"DBSIZE"});
  ASSERT_TRUE(keys.ok());
  // Both endpoints' first two blocks are the same tokens, so the same two keys (a field per
  // holder); the third key's hash went with its last field.
  EXPECT_EQ(keys->integer, 2);
}

TEST(KvRedisMirror, RedisAbsentAtStartLeavesTheIndexColdAndTheCopyCatchesUp) {
  if (!RedisServerProcess::Available()) GTEST_SKIP() << "redis-server is not installed (scripts/setup installs it)";
  RedisServerProcess redis;
  ASSERT_TRUE(redis.WaitReady());
  redis.Kill(SIGKILL);
  KvRedisOptions o;
  o.address = redis.url();
  o.interval = std::chrono::milliseconds(20);
  o.timeout = std::chrono::milliseconds(200);
  auto index = std::make_shared<KvBlockIndex>();
  auto mirror = KvRedisMirror::Create(o, index, nullptr);
  ASSERT_TRUE(mirror.ok());
  EXPECT_FALSE((*mirror)->Load().ok());
  (*mirror)->Start();
  index->Apply("10.0.0.1:8000", "m", Batch({Stored({1, 2}, std::nullopt, Tokens(0, 8))}));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE((*mirror)->stats().up);
  EXPECT_GE((*mirror)->stats().errors, 1);
  redis.Start();
  ASSERT_TRUE(redis.WaitReady());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(8);
  while ((*mirror)->stats().written < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ((*mirror)->stats().written, 2);
  EXPECT_TRUE((*mirror)->stats().up);
  (*mirror)->Stop();
  auto rebuilt = std::make_shared<KvBlockIndex>();
  auto again = KvRedisMirror::Create(o, rebuilt, nullptr);
  ASSERT_TRUE(again.ok());
  auto loaded = (*again)->Load();
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(*loaded, 2u);
}

}  // namespace
}  // namespace epp
