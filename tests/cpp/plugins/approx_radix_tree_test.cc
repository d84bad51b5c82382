#include "plugins/scorer/approx_radix_tree.h"

#include <algorithm>
#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace epp::internal {
namespace {

constexpr std::string_view kPod1 = "10.0.0.1:8000";
constexpr std::string_view kPod2 = "10.0.0.2:8000";
constexpr std::string_view kPod3 = "10.0.0.3:8000";

#define EXPECT_CONSISTENT(tree) EXPECT_EQ((tree).CheckInvariantsForTest(), "")

TEST(Utf8CharsTest, CountsCodePointsAndInvalidBytes) {
  struct Case {
    const char* name;
    std::string input;
    size_t expected;
  } cases[] = {
      {"empty", "", 0},
      {"ascii", "hello", 5},
      {"latin1 accents", "héllo wörld", 11},
      {"cjk", "你好嗎", 3},
      {"emoji", "😀👍🏽", 3},  // U+1F44D U+1F3FD: two code points, one grapheme
      {"mixed", "a中😀é", 4},
      {"lone 0xff", "a\xff" "b", 3},
      {"stray continuation", "\x80\xbf", 2},
      {"truncated 3-byte", "\xe4\xb8", 2},
      {"truncated 4-byte at end", "x\xf0\x9f\x98", 4},
      {"overlong slash", "\xc0\xaf", 2},
      {"overlong 3-byte", "\xe0\x80\xaf", 3},
      {"surrogate", "\xed\xa0\x80", 3},
      {"above U+10FFFF", "\xf4\x90\x80\x80", 4},
      {"max code point", "\xf4\x8f\xbf\xbf", 1},
      {"lead then ascii", "\xc3" "a", 2},
      {"nul bytes", std::string("a\0b", 3), 3},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(Utf8Chars(c.input), c.expected);
  }
}

TEST(ApproxRadixTreeTest, EmptyTreeMatchesNothing) {
  ApproxRadixTree tree;
  auto m = tree.PrefixMatch("hello");
  EXPECT_EQ(m.matched_chars, 0u);
  EXPECT_EQ(m.text_chars, 5u);
  EXPECT_EQ(m.tenant, "");
  m = tree.PrefixMatch("");
  EXPECT_EQ(m.matched_chars, 0u);
  EXPECT_EQ(m.text_chars, 0u);
  EXPECT_EQ(tree.NodeCount(), 0u);
  EXPECT_TRUE(tree.Tenants().empty());
  EXPECT_EQ(tree.TenantChars(kPod1), 0u);
  EXPECT_EQ(tree.EvictTenantsOver(0), 0u);
  tree.RemoveTenant(kPod1);  // unknown: no-op
  EXPECT_CONSISTENT(tree);
}

TEST(ApproxRadixTreeTest, EmptyTextRegistersTheTenantOnly) {
  ApproxRadixTree tree;
  tree.Insert("", kPod1);
  EXPECT_EQ(tree.Tenants(), std::vector<std::string>{std::string(kPod1)});
  EXPECT_EQ(tree.TenantChars(kPod1), 0u);
  EXPECT_EQ(tree.NodeCount(), 0u);
  EXPECT_EQ(tree.PrefixMatch("x").tenant, "");
  EXPECT_CONSISTENT(tree);
}

TEST(ApproxRadixTreeTest, ExactAndPartialMatches) {
  ApproxRadixTree tree;
  tree.Insert("hello", "t1");
  tree.Insert("apple", "t2");
  tree.Insert("banana", "t3");
  struct Case {
    const char* query;
    size_t matched;
    size_t chars;
    const char* tenant;
  } cases[] = {
      {"hello", 5, 5, "t1"},        {"help", 3, 4, "t1"},   {"hello world", 5, 11, "t1"},
      {"apricot", 2, 7, "t2"},      {"apple", 5, 5, "t2"},  {"b", 1, 1, "t3"},
      {"cherry", 0, 6, ""},         {"", 0, 0, ""},         {"Hello", 0, 5, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.query);
    const auto m = tree.PrefixMatch(c.query);
    EXPECT_EQ(m.matched_chars, c.matched);
    EXPECT_EQ(m.text_chars, c.chars);
    EXPECT_EQ(m.tenant, c.tenant);
  }
  EXPECT_EQ(tree.NodeCount(), 3u);
  EXPECT_EQ(tree.Tenants(), (std::vector<std::string>{"t1", "t2", "t3"}));
  EXPECT_CONSISTENT(tree);
}

TEST(ApproxRadixTreeTest, SplitsInTheMiddleOfAnEdge) {
  ApproxRadixTree tree;
  tree.Insert("abcdef", "t1");
  tree.Insert("abcxyz", "t2");  // "abcdef" -> "abc" + {"def", "xyz"}
  EXPECT_EQ(tree.NodeCount(), 3u);
  EXPECT_EQ(tree.PrefixMatch("abcdef").tenant, "t1");
  EXPECT_EQ(tree.PrefixMatch("abcxyz").tenant, "t2");
  EXPECT_EQ(tree.PrefixMatch("abcd").matched_chars, 4u);
  EXPECT_EQ(tree.PrefixMatch("abcq").matched_chars, 3u);
  EXPECT_EQ(tree.PrefixMatch("abcq").tenant, "t2");  // both hold "abc"; t2 is more recent
  EXPECT_EQ(tree.TenantChars("t1"), 6u);
  EXPECT_EQ(tree.TenantChars("t2"), 6u);

  tree.Insert("ab", "t3");  // ends inside "abc": "ab" + "c"
  EXPECT_EQ(tree.NodeCount(), 4u);
  EXPECT_EQ(tree.TenantChars("t3"), 2u);
  EXPECT_EQ(tree.TenantChars("t1"), 6u);
  EXPECT_EQ(tree.PrefixMatch("abz").tenant, "t3");
  EXPECT_EQ(tree.PrefixMatch("abcz").tenant, "t2");  // t3 does not hold "abc"
  EXPECT_CONSISTENT(tree);
}

TEST(ApproxRadixTreeTest, TenantCharCountsFollowInsertsAndSplits) {
  // The sequence of SGLang's test_tenant_char_count, phase 1.
  ApproxRadixTree tree;
  tree.Insert("apple", "t1");
  tree.Insert("apricot", "t1");
  tree.Insert("banana", "t1");
  tree.Insert("amplify", "t2");
  tree.Insert("application", "t2");
  EXPECT_EQ(tree.TenantChars("t1"), 5u + 7 + 6 - 2);   // "ap" shared
  EXPECT_EQ(tree.TenantChars("t2"), 7u + 11 - 1);      // "a" shared
  EXPECT_CONSISTENT(tree);
  tree.Insert("apple", "t1");  // already held: no change
  EXPECT_EQ(tree.TenantChars("t1"), 16u);
  tree.Insert("zebra", "t1");
  tree.Insert("zebra", "t2");
  EXPECT_EQ(tree.TenantChars("t1"), 21u);
  EXPECT_EQ(tree.TenantChars("t2"), 22u);
  EXPECT_CONSISTENT(tree);
}

TEST(ApproxRadixTreeTest, MultiByteTextIsCountedInCodePoints) {
  ApproxRadixTree tree;
  tree.Insert("héllo wörld", "t1");
  EXPECT_EQ(tree.TenantChars("t1"), 11u);
  auto m = tree.PrefixMatch("héllo wèrld");
  EXPECT_EQ(m.matched_chars, 7u);  // "héllo w"
  EXPECT_EQ(m.text_chars, 11u);
  EXPECT_EQ(m.tenant, "t1");
  tree.Insert("héllo wèrld", "t2");
  EXPECT_EQ(tree.NodeCount(), 3u);
  EXPECT_EQ(tree.TenantChars("t2"), 11u);
  EXPECT_EQ(tree.PrefixMatch("héllo wèrld!").matched_chars, 11u);
  EXPECT_EQ(tree.PrefixMatch("héllo wèrld!").tenant, "t2");
  EXPECT_CONSISTENT(tree);
}

TEST(ApproxRadixTreeTest, NeverSplitsInsideAMultiByteSequence) {
  // Each pair shares leading bytes but not the first character after the common prefix:
  // é/è = C3 A9 / C3 A8, 😀/😁 = F0 9F 98 80 / 81, 中/丫 = E4 B8 AD / AB.
  struct Case {
    const char* name;
    std::string a, b, probe;
    size_t probe_matched;
  } cases[] = {
      {"latin", "xé", "xè", "xê", 1},
      {"emoji", "ok😀", "ok😁", "ok😂", 2},
      {"cjk", "你中", "你丫", "你丰", 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ApproxRadixTree tree;
    tree.Insert(c.a, "t1");
    tree.Insert(c.b, "t2");
    EXPECT_EQ(tree.NodeCount(), 3u);
    EXPECT_EQ(tree.TenantChars("t1"), Utf8Chars(c.a));
    EXPECT_EQ(tree.TenantChars("t2"), Utf8Chars(c.b));
    auto m = tree.PrefixMatch(c.probe);
    EXPECT_EQ(m.matched_chars, c.probe_matched);
    EXPECT_EQ(m.tenant, "t2");
    EXPECT_EQ(tree.PrefixMatch(c.a).tenant, "t1");
    EXPECT_EQ(tree.PrefixMatch(c.a).matched_chars, Utf8Chars(c.a));
    EXPECT_EQ(tree.PrefixMatch(c.b).tenant, "t2");
    EXPECT_CONSISTENT(tree);
  }
}

TEST(ApproxRadixTreeTest, CjkSequenceFromSglang) {
  ApproxRadixTree tree;
  const std::pair<std::string, std::string> pairs[] = {
      {"你好嗎", "t1"}, {"你好喔", "t2"}, {"你心情好嗎", "t3"}};
  for (const auto& [text, tenant] : pairs) tree.Insert(text, tenant);
  for (const auto& [text, tenant] : pairs) {
    SCOPED_TRACE(tenant);
    const auto m = tree.PrefixMatch(text);
    EXPECT_EQ(m.matched_chars, Utf8Chars(text));
    EXPECT_EQ(m.tenant, tenant);
  }
  EXPECT_EQ(tree.PrefixMatch("你好").tenant, "t2");
  EXPECT_EQ(tree.PrefixMatch("你").tenant, "t3");
  EXPECT_CONSISTENT(tree);
}

TEST(ApproxRadixTreeTest, InvalidUtf8BytesAreSingleCharacters) {
  ApproxRadixTree tree;
  tree.Insert("ab\xff\xfe", "t1");
  EXPECT_EQ(tree.TenantChars("t1"), 4u);
  EXPECT_EQ(tree.PrefixMatch("ab\xff" "z").matched_chars, 3u);
  EXPECT_EQ(tree.PrefixMatch("ab\xff\xfe").matched_chars, 4u);
  // A truncated sequence is two invalid characters, distinct from the whole character.
  tree.Insert("\xe4\xb8", "t2");
  EXPECT_EQ(tree.TenantChars("t2"), 2u);
  EXPECT_EQ(tree.PrefixMatch("\xe4\xb8\xad").matched_chars, 0u);  // 中
  EXPECT_EQ(tree.PrefixMatch("\xe4\xb8" "x").matched_chars, 2u);
  tree.Insert("\xe4\xb8\xad", "t3");
  EXPECT_EQ(tree.PrefixMatch("中文").matched_chars, 1u);
  EXPECT_EQ(tree.PrefixMatch("中文").tenant, "t3");
  // A lone lead byte followed by ASCII, and overlong forms, never equal a code point.
  tree.Insert("\xc3" "a", "t4");
  EXPECT_EQ(tree.PrefixMatch("é").matched_chars, 0u);
  EXPECT_EQ(tree.PrefixMatch("\xc3" "ab").matched_chars, 2u);
  tree.Insert("\xc0\xaf", "t5");
  EXPECT_EQ(tree.PrefixMatch("/").matched_chars, 0u);
  EXPECT_CONSISTENT(tree);
}

TEST(ApproxRadixTreeTest, MostRecentTenantWinsASharedPrefix) {
  ApproxRadixTree tree;
  tree.Insert("system prompt A", kPod1);
  tree.Insert("system prompt B", kPod2);
  auto m = tree.PrefixMatch("system prompt C");
  EXPECT_EQ(m.matched_chars, 14u);
  EXPECT_EQ(m.tenant, kPod2);
  tree.Insert("system prompt A", kPod1);  // refreshes kPod1 on the shared node
  EXPECT_EQ(tree.PrefixMatch("system prompt C").tenant, kPod1);
  // The deepest node decides: only kPod2 holds "system prompt B".
  EXPECT_EQ(tree.PrefixMatch("system prompt B and more").tenant, kPod2);
  // Matching does not change recency.
  for (int i = 0; i < 20; ++i) tree.PrefixMatch("system prompt B");
  EXPECT_EQ(tree.PrefixMatch("system prompt C").tenant, kPod1);
  EXPECT_CONSISTENT(tree);
}

TEST(ApproxRadixTreeTest, EqualEpochsBreakTiesLexicographically) {
  struct Case {
    const char* name;
    std::vector<std::pair<std::string, uint64_t>> tenants;  // inserted in this order
    std::string expected;
  } cases[] = {
      {"tie, larger inserted first", {{"10.0.0.2:80", 7}, {"10.0.0.1:80", 7}}, "10.0.0.1:80"},
      {"tie, smaller inserted first", {{"10.0.0.1:80", 7}, {"10.0.0.2:80", 7}}, "10.0.0.1:80"},
      {"three-way tie", {{"c", 3}, {"a", 3}, {"b", 3}}, "a"},
      {"newer epoch beats smaller name", {{"a", 3}, {"b", 4}}, "b"},
      {"newer epoch inserted first", {{"b", 9}, {"a", 4}}, "b"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ApproxRadixTree tree;
    for (const auto& [tenant, epoch] : c.tenants) {
      tree.InsertAtEpochForTest("shared", tenant, epoch);
    }
    const auto m = tree.PrefixMatch("shared prefix");
    EXPECT_EQ(m.matched_chars, 6u);
    EXPECT_EQ(m.tenant, c.expected);
    EXPECT_CONSISTENT(tree);
  }
}

TEST(ApproxRadixTreeTest, EvictionRemovesLeastRecentlyUsedFirst) {
  ApproxRadixTree tree;
  tree.Insert("aaaa1111", kPod1);
  tree.Insert("bbbb2222", kPod1);
  tree.Insert("cccc3333", kPod1);
  EXPECT_EQ(tree.TenantChars(kPod1), 24u);
  EXPECT_EQ(tree.EvictTenantsOver(24), 0u);  // at the limit: nothing to do
  EXPECT_EQ(tree.EvictTenantsOver(16), 8u);
  EXPECT_EQ(tree.TenantChars(kPod1), 16u);
  EXPECT_EQ(tree.PrefixMatch("aaaa1111").matched_chars, 0u);
  EXPECT_EQ(tree.PrefixMatch("bbbb2222").matched_chars, 8u);
  EXPECT_EQ(tree.PrefixMatch("cccc3333").matched_chars, 8u);
  // Re-inserting "bbbb2222" makes "cccc3333" the least recently used.
  tree.Insert("bbbb2222", kPod1);
  EXPECT_EQ(tree.EvictTenantsOver(10), 8u);
  EXPECT_EQ(tree.PrefixMatch("cccc3333").matched_chars, 0u);
  EXPECT_EQ(tree.PrefixMatch("bbbb2222").tenant, kPod1);
  EXPECT_EQ(tree.NodeCount(), 1u);
  EXPECT_EQ(tree.Tenants().size(), 1u);  // still registered
  EXPECT_EQ(tree.EvictTenantsOver(0), 8u);
  EXPECT_EQ(tree.TenantChars(kPod1), 0u);
  EXPECT_EQ(tree.NodeCount(), 0u);
  EXPECT_EQ(tree.Tenants().size(), 1u);
  EXPECT_CONSISTENT(tree);
}

TEST(ApproxRadixTreeTest, EvictionWalksUpFromLeavesToTheirParents) {
  ApproxRadixTree tree;
  tree.Insert("sys-prompt/q1", kPod1);  // "sys-prompt/q" + {"1", "2"}
  tree.Insert("sys-prompt/q2", kPod1);
  tree.Insert("other text", kPod1);
  EXPECT_EQ(tree.TenantChars(kPod1), 24u);
  EXPECT_EQ(tree.NodeCount(), 4u);
  // "1", "2" and then their parent (now a leaf stamped before "other text") go.
  EXPECT_EQ(tree.EvictTenantsOver(10), 14u);
  EXPECT_EQ(tree.NodeCount(), 1u);
  EXPECT_EQ(tree.PrefixMatch("other text").matched_chars, 10u);
  EXPECT_EQ(tree.PrefixMatch("sys-prompt/q1").matched_chars, 0u);
  // Only one leaf needs to go: the more recent sibling and the shared parent stay.
  ApproxRadixTree t2;
  t2.Insert("sys-prompt/q1", kPod1);
  t2.Insert("sys-prompt/q2", kPod1);
  EXPECT_EQ(t2.EvictTenantsOver(13), 1u);
  EXPECT_EQ(t2.PrefixMatch("sys-prompt/q2").matched_chars, 13u);
  EXPECT_EQ(t2.PrefixMatch("sys-prompt/q1").matched_chars, 12u);
  EXPECT_CONSISTENT(tree);
  EXPECT_CONSISTENT(t2);
}

TEST(ApproxRadixTreeTest, EvictionIsPerTenant) {
  ApproxRadixTree tree;
  tree.Insert("shared prefix one", kPod1);
  tree.Insert("shared prefix one", kPod2);
  tree.Insert("pod1 only text", kPod1);
  tree.Insert("pod1 more", kPod1);
  const size_t pod2_before = tree.TenantChars(kPod2);
  EXPECT_EQ(pod2_before, 17u);
  // kPod1 holds 17 + 14 + 9 - 5 ("pod1 " shared) = 35; its least recent leaf is the shared text.
  ASSERT_EQ(tree.TenantChars(kPod1), 35u);
  EXPECT_EQ(tree.EvictTenantsOver(20), 17u);
  EXPECT_EQ(tree.TenantChars(kPod1), 18u);
  EXPECT_LE(tree.TenantChars(kPod1), 20u);
  EXPECT_EQ(tree.TenantChars(kPod2), pod2_before);  // under the limit: untouched
  // The shared node survives for kPod2 even though kPod1 left it.
  auto m = tree.PrefixMatch("shared prefix one");
  EXPECT_EQ(m.matched_chars, 17u);
  EXPECT_EQ(m.tenant, kPod2);
  EXPECT_EQ(tree.PrefixMatch("pod1 more").matched_chars, 9u);  // more recent texts kept
  EXPECT_EQ(tree.PrefixMatch("pod1 only text").tenant, kPod1);
  EXPECT_CONSISTENT(tree);
}

TEST(ApproxRadixTreeTest, EvictionKeepsRecentTextMatchable) {
  ApproxRadixTree tree;
  std::vector<std::string> texts;
  for (int i = 0; i < 100; ++i) {
    texts.push_back("req-" + std::to_string(1000 + i) + "-payload");
    tree.Insert(texts.back(), kPod1);
  }
  const size_t before = tree.TenantChars(kPod1);
  const size_t evicted = tree.EvictTenantsOver(150);
  EXPECT_EQ(tree.TenantChars(kPod1), before - evicted);
  EXPECT_LE(tree.TenantChars(kPod1), 150u);
  EXPECT_GT(tree.TenantChars(kPod1), 100u);
  for (int i = 90; i < 100; ++i) {
    SCOPED_TRACE(texts[i]);
    EXPECT_EQ(tree.PrefixMatch(texts[i]).matched_chars, texts[i].size());
  }
  for (int i = 0; i < 50; ++i) {
    SCOPED_TRACE(texts[i]);
    EXPECT_LT(tree.PrefixMatch(texts[i]).matched_chars, texts[i].size());
  }
  EXPECT_CONSISTENT(tree);
}

TEST(ApproxRadixTreeTest, RemoveTenantRemovesItEverywhere) {
  ApproxRadixTree tree;
  tree.Insert("common prefix / alpha", kPod1);
  tree.Insert("common prefix / beta", kPod2);
  tree.Insert("pod1 private", kPod1);
  tree.Insert("common", kPod3);
  EXPECT_EQ(tree.NodeCount(), 5u);
  tree.RemoveTenant(kPod1);
  EXPECT_EQ(tree.Tenants(), (std::vector<std::string>{std::string(kPod2), std::string(kPod3)}));
  EXPECT_EQ(tree.TenantChars(kPod1), 0u);
  EXPECT_EQ(tree.NodeCount(), 3u);  // "common" + " prefix / " + "beta"
  EXPECT_EQ(tree.PrefixMatch("pod1 private").matched_chars, 0u);
  auto m = tree.PrefixMatch("common prefix / alpha");
  EXPECT_EQ(m.matched_chars, 16u);
  EXPECT_EQ(m.tenant, kPod2);
  EXPECT_EQ(tree.TenantChars(kPod2), 20u);
  EXPECT_CONSISTENT(tree);
  tree.RemoveTenant(kPod1);  // again: no-op
  // A new tenant may reuse the removed one's slot; it starts empty.
  tree.Insert("fresh", "10.0.0.4:8000");
  EXPECT_EQ(tree.TenantChars("10.0.0.4:8000"), 5u);
  EXPECT_EQ(tree.PrefixMatch("fresh").tenant, "10.0.0.4:8000");
  tree.RemoveTenant(kPod2);
  tree.RemoveTenant(kPod3);
  tree.RemoveTenant("10.0.0.4:8000");
  EXPECT_EQ(tree.NodeCount(), 0u);
  EXPECT_TRUE(tree.Tenants().empty());
  EXPECT_CONSISTENT(tree);
}

TEST(ApproxRadixTreeTest, DeepChainOfGrowingConversations) {
  // Each turn extends the previous one, so the tree is a chain as deep as the number of turns.
  ApproxRadixTree tree;
  std::string conversation;
  constexpr int kTurns = 2000;
  for (int i = 0; i < kTurns; ++i) {
    conversation += static_cast<char>('a' + i % 26);
    tree.Insert(conversation, i % 2 == 0 ? kPod1 : kPod2);
  }
  EXPECT_EQ(tree.NodeCount(), static_cast<size_t>(kTurns));
  EXPECT_EQ(tree.PrefixMatch(conversation + "?").matched_chars, static_cast<size_t>(kTurns));
  EXPECT_EQ(tree.PrefixMatch(conversation).tenant, kPod2);
  EXPECT_CONSISTENT(tree);
  tree.EvictTenantsOver(kTurns / 2);
  EXPECT_LE(tree.TenantChars(kPod1), static_cast<size_t>(kTurns / 2));
  EXPECT_CONSISTENT(tree);
  tree.RemoveTenant(kPod2);
  EXPECT_CONSISTENT(tree);
}

TEST(ApproxRadixTreeTest, ConcurrentInsertAndMatch) {
  ApproxRadixTree tree;
  constexpr int kThreads = 4;
  constexpr int kIters = 1500;
  std::atomic<int> bad{0};
  std::vector<std::string> last(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&tree, &bad, &last, t] {
      const std::string tenant = "10.0.0." + std::to_string(t) + ":8000";
      std::mt19937 rng(t);
      const std::string system = "You are a helpful assistant. 用户";
      for (int i = 0; i < kIters; ++i) {
        const std::string text = system + std::to_string(rng() % 50) + " thread " +
                                 std::to_string(t) + " turn " + std::to_string(i);
        tree.Insert(text, tenant);
        const auto m = tree.PrefixMatch(system + std::to_string(rng() % 60));
        if (m.matched_chars > m.text_chars || (m.matched_chars > 0) == m.tenant.empty()) ++bad;
        if (tree.PrefixMatch(text).matched_chars != Utf8Chars(text)) ++bad;
        if (i % 100 == 0 && tree.TenantChars(tenant) == 0) ++bad;
        last[t] = text;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_CONSISTENT(tree);
  EXPECT_EQ(tree.Tenants().size(), static_cast<size_t>(kThreads));
  for (int t = 0; t < kThreads; ++t) {
    const std::string tenant = "10.0.0." + std::to_string(t) + ":8000";
    const auto m = tree.PrefixMatch(last[t]);  // unique to this thread: only its tenant holds it
    EXPECT_EQ(m.matched_chars, Utf8Chars(last[t]));
    EXPECT_EQ(m.tenant, tenant);
  }
}

TEST(ApproxRadixTreeTest, ConcurrentInsertEvictAndRemove) {
  ApproxRadixTree tree;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&tree, t] {
      std::mt19937 rng(100 + t);
      for (int i = 0; i < 1500; ++i) {
        const std::string tenant = "pod" + std::to_string(rng() % 5);
        const std::string head = "prefix " + std::to_string(rng() % 30);
        tree.Insert(head + " / " + std::to_string(i * 7 + t), tenant);
        tree.PrefixMatch("prefix " + std::to_string(rng() % 30));
      }
    });
  }
  threads.emplace_back([&tree, &stop] {
    for (int i = 0; !stop.load(); ++i) {
      tree.EvictTenantsOver(200);
      if (i % 10 == 0) tree.RemoveTenant("pod" + std::to_string(i % 5));
      tree.Tenants();
      tree.NodeCount();
      std::this_thread::yield();
    }
  });
  for (int t = 0; t < 3; ++t) threads[t].join();
  stop = true;
  threads.back().join();
  EXPECT_CONSISTENT(tree);
  tree.EvictTenantsOver(200);
  for (const std::string& tenant : tree.Tenants()) EXPECT_LE(tree.TenantChars(tenant), 200u);
  EXPECT_CONSISTENT(tree);
}

// Random texts over an alphabet whose tokens are each exactly one character, chosen so that
// neighbours share leading bytes (é/è, 😀/😁, 中/丫) and invalid bytes appear.
const std::vector<std::string>& Alphabet() {
  static const auto* kTokens = new std::vector<std::string>{
      "a", "b", "c", " ", "é", "è", "中", "丫", "😀", "😁", "\xff", "\xc3"};
  return *kTokens;
}

using Tokens = std::vector<int>;

std::string Render(const Tokens& tokens) {
  std::string s;
  for (int t : tokens) s += Alphabet()[t];
  return s;
}

Tokens RandomTokens(std::mt19937& rng, size_t max_len) {
  // Skewed towards the first tokens so that texts share prefixes.
  std::geometric_distribution<int> token(0.35);
  Tokens out(rng() % (max_len + 1));
  for (int& t : out) t = std::min<int>(token(rng), static_cast<int>(Alphabet().size()) - 1);
  return out;
}

TEST(ApproxRadixTreeTest, RandomizedMatchesBruteForce) {
  ApproxRadixTree tree;
  std::vector<std::pair<Tokens, std::string>> inserted;  // (text, tenant) in insert order
  std::mt19937 rng(20260502);
  const std::vector<std::string> tenants = {"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80",
                                            "10.0.0.4:80", "10.0.0.5:80"};
  auto check = [&](const Tokens& query) {
    size_t best = 0;
    std::string best_tenant;
    for (const auto& [text, tenant] : inserted) {  // later inserts win ties: they stamp last
      size_t lcp = 0;
      while (lcp < text.size() && lcp < query.size() && text[lcp] == query[lcp]) ++lcp;
      if (lcp > 0 && lcp >= best) {
        best = lcp;
        best_tenant = tenant;
      }
    }
    const auto m = tree.PrefixMatch(Render(query));
    ASSERT_EQ(m.matched_chars, best) << Render(query);
    ASSERT_EQ(m.text_chars, query.size());
    ASSERT_EQ(m.tenant, best_tenant) << Render(query);
  };
  constexpr int kInserts = 10000;
  for (int i = 1; i <= kInserts; ++i) {
    Tokens text = RandomTokens(rng, 12);
    const std::string& tenant = tenants[rng() % tenants.size()];
    tree.Insert(Render(text), tenant);
    inserted.emplace_back(std::move(text), tenant);
    if (i % 100 == 0) {
      for (int q = 0; q < 10; ++q) {
        Tokens query;
        if (q % 2 == 0) {
          query = RandomTokens(rng, 14);
        } else {  // a stored text, cut and extended at random
          query = inserted[rng() % inserted.size()].first;
          query.resize(rng() % (query.size() + 1));
          Tokens tail = RandomTokens(rng, 4);
          query.insert(query.end(), tail.begin(), tail.end());
        }
        check(query);
        if (testing::Test::HasFatalFailure()) return;
      }
    }
    if (i % 2000 == 0) {
      ASSERT_EQ(tree.CheckInvariantsForTest(), "") << "after " << i << " inserts";
    }
  }
}

TEST(ApproxRadixTreeTest, RandomizedEvictionKeepsCountsExact) {
  ApproxRadixTree tree;
  std::mt19937 rng(7);
  constexpr size_t kLimit = 120;
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < 200; ++i) {
      tree.Insert(Render(RandomTokens(rng, 16)), "pod" + std::to_string(rng() % 4));
    }
    size_t total_before = 0;
    for (const auto& t : tree.Tenants()) total_before += tree.TenantChars(t);
    const size_t evicted = tree.EvictTenantsOver(kLimit);
    size_t total_after = 0;
    for (const auto& t : tree.Tenants()) {
      EXPECT_LE(tree.TenantChars(t), kLimit);
      total_after += tree.TenantChars(t);
    }
    EXPECT_EQ(total_before - total_after, evicted);
    ASSERT_EQ(tree.CheckInvariantsForTest(), "") << "round " << round;
    if (round % 5 == 4) {
      tree.RemoveTenant("pod" + std::to_string(round % 4));
      ASSERT_EQ(tree.CheckInvariantsForTest(), "") << "round " << round;
    }
  }
}

}  // namespace
}  // namespace epp::internal
