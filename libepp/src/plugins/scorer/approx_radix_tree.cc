// ApproxRadixTree: see the header for the contract and the differences from SGLang's tree.rs.
//
// Storage: a node owns its fragment, its children (keyed by the fragment's first character) and a
// vector of (tenant id, epoch) sorted by id. Tenant ids index a registry of names and char counts.
// Deep nodes hold one or a few tenants and the shared-prefix nodes near the root at most the pool
// size, so a sorted vector (16 B per stamp, binary search) beats a hash map per node in memory.
// Traversals are iterative and teardown is too: a tree of long conversations can be as deep as a
// prompt is long, which recursion would turn into a stack overflow.
#include "plugins/scorer/approx_radix_tree.h"

#include <algorithm>
#include <mutex>
#include <queue>
#include <tuple>
#include <utility>

#include "absl/strings/string_view.h"

namespace epp::internal {
namespace {

// Bytes that are not well-formed UTF-8 are keyed above the Unicode range, so they never compare
// equal to a code point.
constexpr char32_t kInvalidByteKey = 0x110000;

struct Char {
  char32_t key;
  size_t len;  // bytes
};

// The character starting at byte `i` of `s` (REQUIRES: i < s.size()). Well-formed sequences follow
// Unicode Table 3-7; anything else is a one-byte invalid character. The result depends only on
// bytes from `i` on, and a valid sequence only on its own bytes, so decoding a fragment alone gives
// the same characters as decoding the whole text it was cut from at a character boundary.
Char DecodeAt(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {b0, 1};
  const size_t avail = s.size() - i;
  auto byte_in = [&](size_t k, unsigned lo, unsigned hi) {
    if (k >= avail) return false;
    const auto b = static_cast<unsigned char>(s[i + k]);
    return b >= lo && b <= hi;
  };
  auto low6 = [&](size_t k) {
    return static_cast<char32_t>(static_cast<unsigned char>(s[i + k]) & 0x3F);
  };
  const Char invalid{kInvalidByteKey + b0, 1};
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (!byte_in(1, 0x80, 0xBF)) return invalid;
    return {(static_cast<char32_t>(b0 & 0x1F) << 6) | low6(1), 2};
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    const unsigned lo = b0 == 0xE0 ? 0xA0 : 0x80;  // no overlong forms
    const unsigned hi = b0 == 0xED ? 0x9F : 0xBF;  // no surrogates
    if (!byte_in(1, lo, hi) || !byte_in(2, 0x80, 0xBF)) return invalid;
    return {(static_cast<char32_t>(b0 & 0x0F) << 12) | (low6(1) << 6) | low6(2), 3};
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    const unsigned lo = b0 == 0xF0 ? 0x90 : 0x80;  // no overlong forms
    const unsigned hi = b0 == 0xF4 ? 0x8F : 0xBF;  // nothing above U+10FFFF
    if (!byte_in(1, lo, hi) || !byte_in(2, 0x80, 0xBF) || !byte_in(3, 0x80, 0xBF)) return invalid;
    const char32_t high = (static_cast<char32_t>(b0 & 0x07) << 18) | (low6(1) << 12);
    return {high | (low6(2) << 6) | low6(3), 4};
  }
  return invalid;
}

char32_t FirstKey(std::string_view s) { return DecodeAt(s, 0).key; }

// Debian's Abseil has its own string_view type; its string-keyed maps look up only with that.
absl::string_view Key(std::string_view s) { return absl::string_view(s.data(), s.size()); }

struct Common {
  size_t bytes = 0;
  size_t chars = 0;
};

// The longest common prefix of `a` and `b` in whole characters. Equal keys imply equal bytes.
Common CommonPrefix(std::string_view a, std::string_view b) {
  Common c;
  const size_t n = std::min(a.size(), b.size());
  while (c.bytes < n) {
    const auto x = static_cast<unsigned char>(a[c.bytes]);
    const auto y = static_cast<unsigned char>(b[c.bytes]);
    if (x < 0x80 && x == y) {
      ++c.bytes;
      ++c.chars;
      continue;
    }
    if (x < 0x80 || y < 0x80) break;
    const Char ca = DecodeAt(a, c.bytes);
    if (ca.key != DecodeAt(b, c.bytes).key) break;
    c.bytes += ca.len;
    ++c.chars;
  }
  return c;
}

}  // namespace

size_t Utf8Chars(std::string_view s) {
  size_t chars = 0;
  for (size_t i = 0; i < s.size(); ++chars) {
    i += static_cast<unsigned char>(s[i]) < 0x80 ? 1 : DecodeAt(s, i).len;
  }
  return chars;
}

struct ApproxRadixTree::Node {
  struct Stamp {
    uint32_t tenant;
    uint64_t epoch;
  };

  std::string text;  // non-empty except at the root
  size_t chars = 0;  // Utf8Chars(text)
  Node* parent = nullptr;
  absl::flat_hash_map<char32_t, std::unique_ptr<Node>> children;
  std::vector<Stamp> stamps;  // sorted by tenant id

  static bool Before(const Stamp& s, uint32_t t) { return s.tenant < t; }
  std::vector<Stamp>::iterator LowerBound(uint32_t t) {
    return std::lower_bound(stamps.begin(), stamps.end(), t, Before);
  }
  const Stamp* Find(uint32_t t) const {
    auto it = std::lower_bound(stamps.begin(), stamps.end(), t, Before);
    return it != stamps.end() && it->tenant == t ? &*it : nullptr;
  }
  bool Has(uint32_t t) const { return Find(t) != nullptr; }
  bool ChildHas(uint32_t t) const {
    for (const auto& [key, child] : children) {
      if (child->Has(t)) return true;
    }
    return false;
  }
  // Sets t's epoch; returns true when t was not stamped here before.
  bool SetStamp(uint32_t t, uint64_t epoch) {
    auto it = LowerBound(t);
    if (it != stamps.end() && it->tenant == t) {
      it->epoch = epoch;
      return false;
    }
    stamps.insert(it, {t, epoch});
    return true;
  }
  void Erase(uint32_t t) {
    auto it = LowerBound(t);
    if (it != stamps.end() && it->tenant == t) stamps.erase(it);
  }
};

ApproxRadixTree::ApproxRadixTree() : root_(std::make_unique<Node>()) {}

ApproxRadixTree::~ApproxRadixTree() {
  std::vector<std::unique_ptr<Node>> pending;
  pending.push_back(std::move(root_));
  while (!pending.empty()) {
    std::unique_ptr<Node> n = std::move(pending.back());
    pending.pop_back();
    for (auto& [key, child] : n->children) pending.push_back(std::move(child));
  }
}

uint32_t ApproxRadixTree::InternLocked(std::string_view tenant) {
  if (auto it = tenant_ids_.find(Key(tenant)); it != tenant_ids_.end()) return it->second;
  uint32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<uint32_t>(tenants_.size());
    tenants_.emplace_back();
  }
  tenants_[id] = TenantInfo{std::string(tenant), 0, true};
  tenant_ids_.emplace(std::string(tenant), id);
  return id;
}

void ApproxRadixTree::Insert(std::string_view text, std::string_view tenant) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  InsertLocked(text, tenant, ++epoch_);
}

void ApproxRadixTree::InsertAtEpochForTest(std::string_view text, std::string_view tenant,
                                           uint64_t epoch) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  InsertLocked(text, tenant, epoch);
}

void ApproxRadixTree::InsertLocked(std::string_view text, std::string_view tenant, uint64_t epoch) {
  const uint32_t t = InternLocked(tenant);
  size_t& tenant_chars = tenants_[t].chars;
  Node* cur = root_.get();
  std::string_view rest = text;
  while (!rest.empty()) {
    auto it = cur->children.find(FirstKey(rest));
    if (it == cur->children.end()) {
      auto leaf = std::make_unique<Node>();
      leaf->text.assign(rest);  // the only copy of inserted text: linear in the new suffix
      leaf->chars = Utf8Chars(rest);
      leaf->parent = cur;
      leaf->SetStamp(t, epoch);
      tenant_chars += leaf->chars;
      cur->children.emplace(FirstKey(rest), std::move(leaf));
      ++node_count_;
      return;
    }
    Node* child = it->second.get();
    const Common common = CommonPrefix(rest, child->text);  // at least the first character
    if (common.bytes < child->text.size()) {
      // Split: a new node takes the shared head and the old node keeps the tail. Both carry the
      // old tenants, whose char counts are therefore unchanged.
      auto head = std::make_unique<Node>();
      head->text.assign(child->text, 0, common.bytes);
      head->chars = common.chars;
      head->parent = cur;
      head->stamps = child->stamps;
      child->text.erase(0, common.bytes);
      child->text.shrink_to_fit();  // else every split would leave the head's bytes as slack
      child->chars -= common.chars;
      child->parent = head.get();
      head->children.emplace(FirstKey(child->text), std::move(it->second));
      it->second = std::move(head);
      child = it->second.get();
      ++node_count_;
    }
    if (child->SetStamp(t, epoch)) tenant_chars += child->chars;
    cur = child;
    rest.remove_prefix(common.bytes);
  }
}

ApproxRadixTree::Match ApproxRadixTree::PrefixMatch(std::string_view text) const {
  Match m;
  m.text_chars = Utf8Chars(text);
  std::shared_lock<std::shared_mutex> lock(mu_);
  const Node* cur = root_.get();
  const Node* deepest = nullptr;
  std::string_view rest = text;
  while (!rest.empty()) {
    auto it = cur->children.find(FirstKey(rest));
    if (it == cur->children.end()) break;
    const Node* child = it->second.get();
    const Common common = CommonPrefix(rest, child->text);
    m.matched_chars += common.chars;
    deepest = child;
    if (common.bytes < child->text.size()) break;  // the match ends inside this fragment
    cur = child;
    rest.remove_prefix(common.bytes);
  }
  if (deepest == nullptr) return m;
  const Node::Stamp* best = nullptr;
  for (const Node::Stamp& s : deepest->stamps) {
    if (best == nullptr || s.epoch > best->epoch ||
        (s.epoch == best->epoch && tenants_[s.tenant].name < tenants_[best->tenant].name)) {
      best = &s;
    }
  }
  if (best != nullptr) m.tenant = tenants_[best->tenant].name;
  return m;
}

size_t ApproxRadixTree::EvictTenantsOver(size_t max_chars_per_tenant) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  auto over = [&](uint32_t t) { return tenants_[t].chars > max_chars_per_tenant; };
  bool any = false;
  for (uint32_t t = 0; t < tenants_.size(); ++t) any = any || (tenants_[t].live && over(t));
  if (!any) return 0;

  // One min-heap of (epoch, tenant, node) leaf entries for all over-limit tenants, as tree.rs does;
  // each tenant stops being evicted on its own once it is within the limit.
  struct Entry {
    uint64_t epoch;
    uint32_t tenant;
    Node* node;
  };
  auto later = [](const Entry& a, const Entry& b) {
    return std::tie(a.epoch, a.tenant) > std::tie(b.epoch, b.tenant);
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(later)> heap(later);
  std::vector<Node*> stack;
  std::vector<uint32_t> child_tenants;
  for (auto& [key, child] : root_->children) stack.push_back(child.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    child_tenants.clear();
    for (auto& [key, child] : n->children) {
      stack.push_back(child.get());
      for (const Node::Stamp& s : child->stamps) child_tenants.push_back(s.tenant);
    }
    std::sort(child_tenants.begin(), child_tenants.end());
    for (const Node::Stamp& s : n->stamps) {
      const bool leaf =
          !std::binary_search(child_tenants.begin(), child_tenants.end(), s.tenant);
      if (leaf && over(s.tenant)) {
        heap.push({s.epoch, s.tenant, n});
      }
    }
  }

  size_t evicted = 0;
  // Deleted nodes are parked until the end so that no heap entry can dangle.
  std::vector<std::unique_ptr<Node>> deleted;
  while (!heap.empty()) {
    const Entry e = heap.top();
    heap.pop();
    Node* n = e.node;
    if (!over(e.tenant) || !n->Has(e.tenant) || n->ChildHas(e.tenant)) continue;
    n->Erase(e.tenant);
    tenants_[e.tenant].chars -= n->chars;
    evicted += n->chars;
    Node* parent = n->parent;
    if (n->stamps.empty() && n->children.empty()) {
      auto it = parent->children.find(FirstKey(n->text));
      deleted.push_back(std::move(it->second));
      parent->children.erase(it);
      --node_count_;
    }
    if (parent != root_.get()) {
      const Node::Stamp* s = parent->Find(e.tenant);
      if (s != nullptr && !parent->ChildHas(e.tenant)) heap.push({s->epoch, e.tenant, parent});
    }
  }
  return evicted;
}

void ApproxRadixTree::RemoveTenant(std::string_view tenant) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  auto id_it = tenant_ids_.find(Key(tenant));
  if (id_it == tenant_ids_.end()) return;
  const uint32_t t = id_it->second;
  // By the invariant only the subtrees of nodes holding t hold t. Pre-order lists every node after
  // its parent, so walking it backwards deletes children before their parents.
  std::vector<Node*> order;
  std::vector<Node*> stack = {root_.get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    order.push_back(n);
    for (auto& [key, child] : n->children) {
      if (child->Has(t)) stack.push_back(child.get());
    }
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* n = *it;
    if (n == root_.get()) continue;
    n->Erase(t);
    if (n->stamps.empty() && n->children.empty()) {
      n->parent->children.erase(FirstKey(n->text));  // frees n
      --node_count_;
    }
  }
  tenant_ids_.erase(id_it);
  tenants_[t] = TenantInfo{};
  free_ids_.push_back(t);
}

size_t ApproxRadixTree::TenantChars(std::string_view tenant) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  auto it = tenant_ids_.find(Key(tenant));
  return it == tenant_ids_.end() ? 0 : tenants_[it->second].chars;
}

std::vector<std::string> ApproxRadixTree::Tenants() const {
  std::vector<std::string> out;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    out.reserve(tenant_ids_.size());
    for (const auto& [name, id] : tenant_ids_) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

size_t ApproxRadixTree::NodeCount() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return node_count_;
}

std::string ApproxRadixTree::CheckInvariantsForTest() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  const Node* root = root_.get();
  if (!root->text.empty() || !root->stamps.empty() || root->parent != nullptr) return "bad root";
  std::vector<size_t> chars(tenants_.size(), 0);
  size_t nodes = 0;
  std::vector<const Node*> stack = {root};
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    for (const auto& [key, child] : n->children) {
      const Node* c = child.get();
      ++nodes;
      stack.push_back(c);
      if (c->text.empty()) return "empty fragment";
      if (c->parent != n) return "wrong parent of '" + c->text + "'";
      if (FirstKey(c->text) != key) return "wrong key of '" + c->text + "'";
      if (c->chars != Utf8Chars(c->text)) return "wrong char count of '" + c->text + "'";
      if (c->stamps.empty()) return "no tenant on '" + c->text + "'";
      for (size_t i = 0; i < c->stamps.size(); ++i) {
        const uint32_t t = c->stamps[i].tenant;
        if (i > 0 && c->stamps[i - 1].tenant >= t) return "unsorted stamps on '" + c->text + "'";
        if (t >= tenants_.size() || !tenants_[t].live) return "dead tenant on '" + c->text + "'";
        if (n != root && !n->Has(t)) {
          return "tenant " + tenants_[t].name + " on '" + c->text + "' but not on its parent";
        }
        chars[t] += c->chars;
      }
    }
  }
  if (nodes != node_count_) {
    return "node count " + std::to_string(node_count_) + " != " + std::to_string(nodes);
  }
  size_t live = 0;
  for (uint32_t t = 0; t < tenants_.size(); ++t) {
    if (!tenants_[t].live) continue;
    ++live;
    auto it = tenant_ids_.find(tenants_[t].name);
    if (it == tenant_ids_.end() || it->second != t) {
      return "registry mismatch for " + tenants_[t].name;
    }
    if (chars[t] != tenants_[t].chars) {
      return "tenant " + tenants_[t].name + " counts " + std::to_string(tenants_[t].chars) +
             " chars but holds " + std::to_string(chars[t]);
    }
  }
  if (live != tenant_ids_.size()) return "registry size mismatch";
  return "";
}

}  // namespace epp::internal
