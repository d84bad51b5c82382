// ApproxRadixTree: the approximate multi-tenant radix tree behind SGLang Model Gateway's
// `cache_aware` routing policy (private to libepp).
//
// It reproduces `Tree` from sgl-project/sglang `sgl-model-gateway/src/policies/tree.rs`: ONE radix
// tree over request texts is shared by every tenant (an endpoint address "ip:port"), i.e. "the
// overlap of one radix tree per endpoint". Each node holds a text fragment and, per tenant that
// holds the fragment, the epoch of that tenant's last insert through the node. Edges are keyed by
// the first character of the child's fragment; inserting a text that diverges inside a fragment
// splits the node there. Characters are UTF-8 code points, as in Rust's `str::chars()`: the tree
// never splits inside a multi-byte sequence. Recency is a per-tree counter (one new epoch per
// Insert), not wall time. Each tenant's character count (the total length of the fragments it is
// stamped on) drives size-based LRU eviction of that tenant's leaf fragments.
//
// Invariant: a tenant stamped on a node is stamped on every ancestor of that node, so the tenants
// of a node hold the whole text from the root to the end of that node's fragment.
//
// Deliberate differences from tree.rs (as read in 2026):
// - Insert stamps EVERY node on the path with the new epoch. tree.rs stamps only the last node and
//   gives intermediate nodes epoch 0 when the tenant first joins them; the older
//   sgl-router/src/tree.rs stamped the whole path (with wall-clock ms). Stamping the path keeps
//   eviction in LRU order when a parent becomes a leaf.
// - PrefixMatch is read-only and deterministic: among the tenants of the deepest matched node it
//   returns the one with the most recent epoch, ties -> lexicographically smallest. tree.rs
//   returns a cached "last tenant" or an arbitrary DashMap entry and bumps that tenant's epoch on
//   1 match in 8. The cache_aware policy inserts the routed text right after matching, which
//   refreshes the path anyway. With no match the tenant is empty (tree.rs: "empty" or a root
//   tenant).
// - The epoch counter is per tree instead of process-global; only the order matters.
// - The tenant registry: Insert registers a tenant (even for empty text) and it stays listed, with
//   possibly 0 chars after eviction, until RemoveTenant (as tree.rs's tenant_char_count entry).
// - Bytes that are not well-formed UTF-8 count as one character each (Rust strings cannot hold
//   them); such a byte never equals a valid code point.
//
// Thread-safety: all methods may be called concurrently. One reader-writer lock: PrefixMatch,
// TenantChars, Tenants and NodeCount share it; Insert, EvictTenantsOver and RemoveTenant take it
// exclusively (tree.rs uses per-node locks; one lock is simpler and linearizable).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace epp::internal {

// Number of UTF-8 code points in `s`. Each byte that does not start a well-formed sequence (stray
// continuation, overlong form, surrogate, > U+10FFFF, truncated sequence) counts as one character.
size_t Utf8Chars(std::string_view s);

class ApproxRadixTree {
 public:
  ApproxRadixTree();
  ~ApproxRadixTree();
  ApproxRadixTree(const ApproxRadixTree&) = delete;
  ApproxRadixTree& operator=(const ApproxRadixTree&) = delete;

  // Records that `tenant` now holds `text`: inserts the text (splitting a node where the text
  // diverges inside its fragment) and stamps `tenant` with one new epoch on every node of the path.
  // Registers `tenant` even when `text` is empty.
  void Insert(std::string_view text, std::string_view tenant);

  struct Match {
    size_t matched_chars = 0;  // characters of `text` matched from its start
    size_t text_chars = 0;     // characters in `text` (Utf8Chars)
    std::string tenant;        // holds the whole matched prefix; empty iff matched_chars == 0
  };
  // The longest prefix of `text` present in the tree (it may end inside a node's fragment) and the
  // tenant of the deepest node reached with the most recent epoch there, ties -> lexicographically
  // smallest. Does not change LRU state.
  Match PrefixMatch(std::string_view text) const;

  // For every tenant holding more than `max_chars_per_tenant` characters, removes the tenant from
  // its least-recently-stamped leaf fragments (nodes where no child holds it) until it holds at
  // most that many; a node left with no tenant and no child is deleted (no merging). A fragment is
  // removed whole, so a tenant may end below the limit. Returns the characters evicted (summed
  // over tenants). SGLang's `evict_tenant_by_size`.
  size_t EvictTenantsOver(size_t max_chars_per_tenant);

  // Removes `tenant` from every node (deleting nodes left empty) and from the registry. No-op for
  // an unknown tenant.
  void RemoveTenant(std::string_view tenant);

  // Characters of the fragments `tenant` is stamped on; 0 for an unknown tenant.
  size_t TenantChars(std::string_view tenant) const;
  // Registered tenants, sorted.
  std::vector<std::string> Tenants() const;
  // Nodes in the tree, not counting the (empty) root; 0 for an empty tree.
  size_t NodeCount() const;

  // Test hooks. InsertAtEpochForTest is Insert with a caller-chosen epoch (the only way to create
  // equal epochs, to exercise tie-breaks); it does not advance the counter.
  // CheckInvariantsForTest walks the tree and returns "" when every structural invariant holds
  // (keys, parents, non-empty fragments, tenants subset of the parent's, char counts), else a
  // description of the first violation.
  void InsertAtEpochForTest(std::string_view text, std::string_view tenant, uint64_t epoch);
  std::string CheckInvariantsForTest() const;

 private:
  struct Node;
  struct TenantInfo {
    std::string name;
    size_t chars = 0;
    bool live = false;
  };

  void InsertLocked(std::string_view text, std::string_view tenant, uint64_t epoch);
  uint32_t InternLocked(std::string_view tenant);

  mutable std::shared_mutex mu_;
  std::unique_ptr<Node> root_;
  uint64_t epoch_ = 0;  // last epoch handed out; the first Insert gets 1
  size_t node_count_ = 0;
  absl::flat_hash_map<std::string, uint32_t> tenant_ids_;
  std::vector<TenantInfo> tenants_;  // by id; ids of removed tenants are reused
  std::vector<uint32_t> free_ids_;
};

}  // namespace epp::internal
