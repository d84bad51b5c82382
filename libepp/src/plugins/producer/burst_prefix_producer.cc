// burst-prefix-cache-producer (llm-d Router): co-locates bursts of requests that share a prompt.
//
// When many requests with one prompt arrive together (the n samples of an RL rollout step), no
// server holds the prompt yet, so a cache-state producer matches nothing, load balancing spreads
// them, and the prompt is prefilled on several servers. This producer holds each request for a
// short window (windowDurationMs, real time: requests really wait) and places the window's
// requests jointly:
//   - requests with an identical prompt (every hashed block equal) form a group, placed whole on
//     one server (or maxPerReplica per server, spilling to the next least-loaded one);
//   - with minColocateBlocks > 0, a lone request that shares at least that many leading blocks
//     with another request of the window is placed too, and every placed unit prefers a server
//     already given a unit sharing >= minColocateBlocks leading blocks while that server is under
//     its fair share of the window (ceil(total / servers)); otherwise the least-loaded server;
//   - groups before lone requests, each tier longest prompt first; load is counted in requests
//     (balanceBy: requests) or in blocks a server must still prefill (balanceBy: tokens);
//     ties go to fewer running requests (the server's metric), then the lower address.
// It fills SchedulingContext::prefix like the other prefix producers: a full match on the server
// chosen for the request and none elsewhere, so prefix-cache-scorer (prefixMatchInfoProducerName
// naming this producer) steers the request there. A request overlapping no other one gets no
// affinity and is left to the other scorers.
//
// Differences from llm-d, on purpose: the prompt is hashed as the approximate prefix producer
// hashes it (the canonical prompt text in blocks of blockSizeTokens * 4 characters) rather than
// from the token-producer's tokens, so no tokenizer is needed; and a window that is full
// (maxBatchSize) gives the request no affinity instead of an error, which is what llm-d's
// director makes of the error. epp keeps one prefix producer per scheduler, so this one does not
// run beside the approximate or precise producer (llm-d lets them run side by side).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "absl/strings/str_cat.h"
#include "epp/prefix_cache.h"
#include "epp/scheduling.h"
#include "plugins/producer/producer.h"

namespace epp::plugins {
namespace {

constexpr int kUnlimited = -1;
// Leading blocks that form a group key when maxPrefixTokensToMatch is 0 (llm-d's default cap).
constexpr int64_t kDefaultMaxPrefixBlocks = 2048;

struct BurstOptions {
  int64_t window_ms = 100;
  int64_t max_per_replica = kUnlimited;
  int64_t block_size_tokens = 64;
  int64_t max_prefix_tokens = 0;
  int64_t min_colocate_blocks = 0;
  int64_t max_batch_size = 1000;
  std::string balance_by = "requests";
};

const ParamTable<BurstOptions>& Table() {
  static const auto* t =
      &(*new ParamTable<BurstOptions>())
           .Int("windowDurationMs", &BurstOptions::window_ms, Range::Closed(1, 10000),
                "batch window in milliseconds: every request waits up to this long for others to join")
           .Int("maxPerReplica", &BurstOptions::max_per_replica, Range::AtLeast(-1),
                "requests of one group placed on one server before spilling to the next; -1: unlimited")
           .Int("blockSizeTokens", &BurstOptions::block_size_tokens, Range::Closed(1, 65536),
                "tokens per hashed prompt block")
           .Int("maxPrefixTokensToMatch", &BurstOptions::max_prefix_tokens, Range::AtLeast(0),
                "prompt tokens hashed; 0: up to 2048 blocks")
           .Int("minColocateBlocks", &BurstOptions::min_colocate_blocks, Range::AtLeast(0),
                "leading blocks distinct prompts must share to be co-located (and a lone request to get an "
                "affinity); 0: only identical prompts are placed")
           .Int("maxBatchSize", &BurstOptions::max_batch_size, Range::AtLeast(-1),
                "requests one window may hold (later ones get no affinity); -1: unlimited")
           .String("balanceBy", &BurstOptions::balance_by,
                   "what is balanced across servers within a window: request counts, or the prompt blocks each "
                   "server must still prefill",
                   {"requests", "tokens"});
  return *t;
}

struct Replica {
  std::string address;
  double running = 0;  // running_requests metric, 0 when unknown
};

// One request of a window.
struct Entry {
  std::vector<uint64_t> hashes;
  std::vector<Replica> replicas;  // its candidates when it joined
  std::string assigned;           // the chosen server; empty: no affinity
};

struct Batch {
  std::vector<Entry*> entries;
  bool sealed = false;
};

// Replicas holding each block of the units placed so far in a window. A whole prompt is added
// at once, so holding block i means holding blocks 0..i.
class BatchIndex {
 public:
  void Add(const std::vector<uint64_t>& hashes, const std::string& replica) {
    for (uint64_t h : hashes) holders_[h].insert(replica);
  }
  // Per replica: the leading blocks of `hashes` it holds.
  std::map<std::string, int64_t> LongestPrefix(const std::vector<uint64_t>& hashes) const {
    std::map<std::string, int64_t> out;
    for (uint64_t h : hashes) {
      auto it = holders_.find(h);
      if (it == holders_.end() || it->second.empty()) break;
      for (const std::string& r : it->second) ++out[r];
    }
    return out;
  }

 private:
  std::map<uint64_t, std::set<std::string>> holders_;
};

// The window's placement (see the file comment). Fills Entry::assigned.
class Assigner {
 public:
  explicit Assigner(const BurstOptions& o) : k_(o.max_per_replica), min_colocate_(o.min_colocate_blocks), by_tokens_(o.balance_by == "tokens") {}

  void Run(const std::vector<Entry*>& entries) {
    std::map<std::vector<uint64_t>, size_t> key_index;
    for (Entry* e : entries) {
      if (e->hashes.empty()) continue;  // nothing to share
      auto [it, fresh] = key_index.emplace(e->hashes, groups_.size());
      if (fresh) groups_.emplace_back();
      groups_[it->second].push_back(e);
      if (replicas_.empty()) replicas_ = e->replicas;
    }
    if (replicas_.empty()) return;
    const std::vector<bool> shared = SharedPrefixGroups();
    std::vector<size_t> group_units, single_units;
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (groups_[g].size() >= 2) group_units.push_back(g);
      else if (shared[g]) single_units.push_back(g);
    }
    auto longest_first = [&](size_t a, size_t b) { return Blocks(a) > Blocks(b); };
    std::stable_sort(group_units.begin(), group_units.end(), longest_first);
    std::stable_sort(single_units.begin(), single_units.end(), longest_first);
    int64_t total = 0;
    for (const auto* units : {&group_units, &single_units})
      for (size_t g : *units) total += by_tokens_ ? Blocks(g) : static_cast<int64_t>(groups_[g].size());
    const int64_t n = static_cast<int64_t>(replicas_.size());
    max_share_ = (total + n - 1) / n;
    for (size_t g : group_units) Place(g);
    for (size_t g : single_units) Place(g);
  }

 private:
  int64_t Blocks(size_t g) const { return static_cast<int64_t>(groups_[g][0]->hashes.size()); }

  // Groups whose prompt shares its first minColocateBlocks blocks with another request of the
  // window (the gate for a lone request to be placed at all).
  std::vector<bool> SharedPrefixGroups() const {
    std::vector<bool> shared(groups_.size(), false);
    if (min_colocate_ <= 0) return shared;
    std::map<std::vector<uint64_t>, int64_t> count;
    std::vector<std::vector<uint64_t>> sig(groups_.size());
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (Blocks(g) < min_colocate_) continue;
      const auto& h = groups_[g][0]->hashes;
      sig[g].assign(h.begin(), h.begin() + min_colocate_);
      count[sig[g]] += static_cast<int64_t>(groups_[g].size());
    }
    for (size_t g = 0; g < groups_.size(); ++g) shared[g] = !sig[g].empty() && count[sig[g]] >= 2;
    return shared;
  }

  bool Less(const Replica& a, const Replica& b) const {
    const int64_t la = Load(a.address), lb = Load(b.address);
    if (la != lb) return la < lb;
    if (a.running != b.running) return a.running < b.running;
    return a.address < b.address;
  }
  int64_t Load(const std::string& r) const {
    auto it = load_.find(r);
    return it == load_.end() ? 0 : it->second;
  }
  static int64_t Get(const std::map<std::string, int64_t>& m, const std::string& r) {
    auto it = m.find(r);
    return it == m.end() ? 0 : it->second;
  }

  const Replica* LeastLoaded(const std::map<std::string, int64_t>& per_replica) const {
    const Replica* best = nullptr;
    for (const Replica& r : replicas_) {
      if (k_ != kUnlimited && Get(per_replica, r.address) >= k_) continue;
      if (!best || Less(r, *best)) best = &r;
    }
    if (best) return best;
    for (const Replica& r : replicas_)  // every replica at the cap: overflow to the least loaded
      if (!best || Less(r, *best)) best = &r;
    return best;
  }

  const Replica* Pick(const std::map<std::string, int64_t>& per_replica, const std::map<std::string, int64_t>& matches,
                      bool prefer_match) const {
    if (prefer_match) {
      const Replica* best = nullptr;
      int64_t best_match = 0;
      for (const Replica& r : replicas_) {
        if (k_ != kUnlimited && Get(per_replica, r.address) >= k_) continue;
        if (Load(r.address) >= max_share_) continue;  // at its fair share of the window
        const int64_t m = Get(matches, r.address);
        if (m < min_colocate_) continue;
        if (!best || m > best_match || (m == best_match && Less(r, *best))) best = &r, best_match = m;
      }
      if (best) return best;
    }
    return LeastLoaded(per_replica);
  }

  void Place(size_t g) {
    std::vector<Entry*>& members = groups_[g];
    const std::vector<uint64_t>& hashes = members[0]->hashes;
    bool prefer_match = min_colocate_ > 0;
    std::map<std::string, int64_t> matches;
    if (prefer_match || by_tokens_) matches = index_.LongestPrefix(hashes);
    std::map<std::string, int64_t> per_replica;
    size_t i = 0;
    while (i < members.size()) {
      const Replica* target = Pick(per_replica, matches, prefer_match);
      const std::string& name = target->address;
      size_t run = members.size() - i;
      if (k_ != kUnlimited) {
        const int64_t cap_left = std::max<int64_t>(1, k_ - Get(per_replica, name));
        run = std::min(run, static_cast<size_t>(cap_left));
      }
      for (size_t j = 0; j < run; ++j) members[i + j]->assigned = name;
      const bool first_touch = Get(per_replica, name) == 0;
      per_replica[name] += static_cast<int64_t>(run);
      if (!by_tokens_) load_[name] += static_cast<int64_t>(run);
      else if (first_touch) load_[name] += std::max<int64_t>(0, Blocks(g) - Get(matches, name));
      i += run;
      prefer_match = false;  // only the first server of a unit gets the prefix preference
    }
    for (const Entry* m : members) index_.Add(hashes, m->assigned);
  }

  int64_t k_;
  int64_t min_colocate_;
  bool by_tokens_;
  int64_t max_share_ = 0;
  std::vector<std::vector<Entry*>> groups_;  // first-appearance order
  std::vector<Replica> replicas_;
  std::map<std::string, int64_t> load_;
  BatchIndex index_;
};

class BurstPrefixProducer : public Plugin, public DataProducer {
 public:
  BurstPrefixProducer(TypedName tn, BurstOptions o)
      : Plugin(std::move(tn)),
        o_(std::move(o)),
        max_blocks_(o_.max_prefix_tokens > 0 ? o_.max_prefix_tokens / o_.block_size_tokens : kDefaultMaxPrefixBlocks) {}
  const DataProducer* AsDataProducer() const override { return this; }
  Params EffectiveParams() const override { return Table().Effective(o_); }

  void Prepare(SchedulingContext& ctx, Candidates candidates) const override {
    const InferenceRequest& r = *ctx.request;
    PrefixState& st = ctx.prefix;
    st.computed = true;
    st.producer = name();
    st.block_size_tokens = static_cast<int>(o_.block_size_tokens);
    st.hashes = ChainedBlockHashes(r.prompt, static_cast<size_t>(o_.block_size_tokens) * kCharsPerToken,
                                   PrefixSeed(r.model, r.cache_salt), static_cast<size_t>(max_blocks_));
    st.match_blocks.assign(ctx.endpoints.size(), 0);
    if (candidates.empty()) return;
    Entry entry;
    entry.hashes = st.hashes;
    for (const Endpoint* e : candidates) entry.replicas.push_back({e->address, e->metrics.running_requests.value_or(0)});
    if (!Join(entry)) return;
    if (entry.assigned.empty()) return;
    // The endpoint set may have changed while the window filled: no match when the chosen
    // server is no longer a candidate.
    for (const Endpoint* e : candidates)
      if (e->address == entry.assigned) st.match_blocks[ctx.IndexOf(e)] = static_cast<int>(st.hashes.size());
  }

  // Windows sealed and requests refused for a full window, since the producer was built (tests).
  std::pair<int64_t, int64_t> Counters() const {
    std::lock_guard<std::mutex> lock(mu_);
    return {windows_, refused_};
  }

 private:
  // Adds the request to the open window (opening one when there is none) and returns once the
  // window is sealed and placed; false when the window is full. The request that opens a window
  // waits it out and seals it, so no timer thread is needed.
  bool Join(Entry& entry) const {
    std::unique_lock<std::mutex> lock(mu_);
    const bool leader = batch_ == nullptr;
    if (leader) batch_ = std::make_shared<Batch>();
    std::shared_ptr<Batch> b = batch_;
    if (o_.max_batch_size != kUnlimited && static_cast<int64_t>(b->entries.size()) >= o_.max_batch_size) {
      ++refused_;
      return false;
    }
    b->entries.push_back(&entry);
    if (!leader) {
      sealed_.wait(lock, [&] { return b->sealed; });
      return true;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(o_.window_ms);
    // Nothing else wakes the leader before its deadline; the loop absorbs spurious wake-ups.
    while (std::chrono::steady_clock::now() < deadline) sealed_.wait_until(lock, deadline);
    batch_.reset();  // later requests open a new window
    ++windows_;
    std::vector<Entry*> entries = b->entries;
    lock.unlock();
    Assigner assigner(o_);
    assigner.Run(entries);
    lock.lock();
    b->sealed = true;
    sealed_.notify_all();
    return true;
  }

  BurstOptions o_;
  int64_t max_blocks_;
  mutable std::mutex mu_;
  mutable std::condition_variable sealed_;
  mutable std::shared_ptr<Batch> batch_;
  mutable int64_t windows_ = 0;
  mutable int64_t refused_ = 0;
};

}  // namespace

PluginSchema BurstPrefixProducerSchema() { return Table().Schema(); }

PluginOr CreateBurstPrefixProducer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(BurstOptions o, Table().Read(params));
  const std::string at = params.path().empty() ? std::string("parameters") : std::string(params.path());
  if (o.max_per_replica == 0)
    return absl::InvalidArgumentError(absl::StrCat(at, ".maxPerReplica: must be -1 (unlimited) or >= 1, got 0"));
  if (o.max_batch_size == 0)
    return absl::InvalidArgumentError(absl::StrCat(at, ".maxBatchSize: must be -1 (unlimited) or >= 1, got 0"));
  if (o.max_prefix_tokens > 0 && o.max_prefix_tokens < o.block_size_tokens)
    return absl::InvalidArgumentError(absl::StrCat(at, ".maxPrefixTokensToMatch: must be 0 or >= blockSizeTokens (",
                                                   o.block_size_tokens, "), got ", o.max_prefix_tokens,
                                                   ": a smaller value hashes no block"));
  return std::make_unique<BurstPrefixProducer>(TN(kBurstPrefixProducerType, name), std::move(o));
}

}  // namespace epp::plugins
