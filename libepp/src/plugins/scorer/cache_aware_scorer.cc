// cache-aware-scorer: SGLang Model Gateway's cache_aware routing decision as a scorer, so the
// two schools (GIE's block-hash index vs SGLang's character radix tree) run side by side.
//
// Per request (sgl-model-gateway src/policies/cache_aware.rs):
//   loads = requests this scheduler has in flight per candidate;
//   imbalanced iff max - min > balance_abs_threshold AND max > min * balance_rel_threshold
//     -> the least-loaded candidate;
//   else match the prompt in the model's radix tree: match_rate = matched chars / prompt chars;
//     match_rate > cache_threshold -> the tenant holding the match, else the least-loaded.
// The chosen endpoint scores 1, every other 0; after the pick the prompt is inserted under the
// endpoint actually picked. Defaults are the SGLang launcher's (cache_threshold 0.3,
// balance_abs_threshold 64, balance_rel_threshold 1.5, max_tree_size 2^26 characters).
// Deviation: eviction runs inline when a tenant exceeds max_tree_size, not on a 60 s timer, so
// results do not depend on wall time.
// Deviation: SGLang keeps one tree per model name, each under its own max_tree_size, and the
// model name is the client's: 80 made-up names held 80 trees (61 -> 133 MB, issue #41). Here
// max_tree_size bounds what one endpoint holds across every model's tree, and at most
// max_models trees are kept; past either bound the least recently used model's tree is dropped
// whole (then the current tree is evicted as SGLang does). Scoring a model without a tree
// creates none (an empty match).
#include <memory>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "epp/scheduling.h"
#include "plugins/scorer/scorer.h"
#include "plugins/scorer/approx_radix_tree.h"

namespace epp::plugins {
namespace {

using internal::ApproxRadixTree;
using internal::Num;

struct CacheAwareOptions {
  double cache_threshold = 0.3;
  int64_t balance_abs_threshold = 64;
  double balance_rel_threshold = 1.5;
  int64_t max_tree_size = int64_t{1} << 26;
  int64_t max_models = 256;  // epp only
};

// The names and defaults of SGLang's cache-aware router (snake_case, as its configs spell them).
const ParamTable<CacheAwareOptions>& Table() {
  static const auto* t =
      &(*new ParamTable<CacheAwareOptions>())
           .Number("cache_threshold", &CacheAwareOptions::cache_threshold, Range::Closed(0, 1),
                   "share of the prompt that must match for the holder to be chosen")
           .Int("balance_abs_threshold", &CacheAwareOptions::balance_abs_threshold, Range::AtLeast(0),
                "in-flight difference above which load decides (with balance_rel_threshold)")
           .Number("balance_rel_threshold", &CacheAwareOptions::balance_rel_threshold, Range::AtLeast(0),
                   "in-flight ratio above which load decides (with balance_abs_threshold)")
           .Int("max_tree_size", &CacheAwareOptions::max_tree_size, Range::Above(0),
                "characters one endpoint may hold in the prefix trees (all models together) before eviction")
           .Int("max_models", &CacheAwareOptions::max_models, Range::Above(0),
                "model names with a prefix tree at most (epp only); past it the least recently used tree goes");
  return *t;
}

class CacheAwareScorer : public Plugin, public Scorer, public RequestObserver, public EndpointState {
 public:
  CacheAwareScorer(TypedName tn, CacheAwareOptions o) : Plugin(std::move(tn)), o_(o) {}
  const Scorer* AsScorer() const override { return this; }
  PluginInputs Consumes() const override { return {PluginInput::kInflightLoad}; }
  const RequestObserver* AsRequestObserver() const override { return this; }
  ScorerCategory category() const override { return ScorerCategory::kAffinity; }
  Params EffectiveParams() const override { return Table().Effective(o_); }

  void Score(const SchedulingContext& ctx, Candidates candidates, std::span<double> scores) const override {
    const Decision d = Decide(ctx, candidates);
    for (size_t i = 0; i < candidates.size(); ++i) scores[i] = candidates[i] == d.chosen ? 1.0 : 0.0;
  }
  // Per endpoint: its load and whether it holds the longest tree match. (The decision itself
  // shows in the scores: 1 for the chosen endpoint.)
  std::string Explain(const SchedulingContext& ctx, const Endpoint& e) const override {
    const ApproxRadixTree::Match m = Match(ctx.request->model, ctx.request->prompt);
    const double rate = m.text_chars ? static_cast<double>(m.matched_chars) / static_cast<double>(m.text_chars) : 0.0;
    return absl::StrCat(ctx.InflightRequests(&e), " in flight",
                        m.tenant == e.address ? absl::StrCat("; holds the longest match (", Num(rate * 100), "%)") : "");
  }

  void PreRequest(const SchedulingContext& ctx, const Endpoint& picked) const override {
    const std::string& key = Key(ctx.request->model);
    std::shared_ptr<ApproxRadixTree> tree = Tree(key, /*create=*/true);
    tree->Insert(ctx.request->prompt, picked.address);
    Bound(key, *tree, picked.address);
  }
  void ForgetEndpoint(std::string_view endpoint) const override {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [model, slot] : trees_) slot.tree->RemoveTenant(endpoint);
  }

 private:
  struct Decision {
    const Endpoint* chosen = nullptr;
    std::string why;
  };

  Decision Decide(const SchedulingContext& ctx, Candidates candidates) const {
    Decision d;
    if (candidates.empty()) return d;
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    const Endpoint* least = nullptr;
    for (const Endpoint* e : candidates) {
      const int64_t l = ctx.InflightRequests(e);
      if (l < lo) least = e;
      lo = std::min(lo, l);
      hi = std::max(hi, l);
    }
    const bool imbalanced = hi - lo > o_.balance_abs_threshold &&
                            static_cast<double>(hi) > static_cast<double>(lo) * o_.balance_rel_threshold;
    if (imbalanced) {
      d.chosen = least;
      d.why = absl::StrCat("load imbalanced (in flight ", lo, "..", hi, "): least loaded ", least->address);
      return d;
    }
    const ApproxRadixTree::Match m = Match(ctx.request->model, ctx.request->prompt);
    const double rate = m.text_chars ? static_cast<double>(m.matched_chars) / static_cast<double>(m.text_chars) : 0.0;
    if (rate > o_.cache_threshold) {
      for (const Endpoint* e : candidates) {
        if (e->address == m.tenant) {
          d.chosen = e;
          d.why = absl::StrCat("cache hit: ", Num(rate * 100), "% of the prompt matched at ", e->address,
                               " (> cache_threshold ", Num(o_.cache_threshold), ")");
          return d;
        }
      }
    }
    d.chosen = least;
    d.why = absl::StrCat("cache miss (best match ", Num(rate * 100), "% <= ", Num(o_.cache_threshold * 100),
                         "% or holder not a candidate): least loaded ", least->address);
    return d;
  }

  // SGLang keys trees by model, "default" for an empty model id.
  static const std::string& Key(const std::string& model) { return model.empty() ? kDefaultKey : model; }

  ApproxRadixTree::Match Match(const std::string& model, std::string_view prompt) const {
    std::shared_ptr<ApproxRadixTree> tree = Tree(Key(model), /*create=*/false);
    return tree ? tree->PrefixMatch(prompt) : ApproxRadixTree::Match{};  // no tree: no match
  }

  // The model's tree (its use stamped), created when asked; nullptr when absent and not created.
  // Shared: a tree dropped by Bound stays valid for a caller still using it.
  std::shared_ptr<ApproxRadixTree> Tree(const std::string& key, bool create) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = trees_.find(key);
    if (it == trees_.end()) {
      if (!create) return nullptr;
      it = trees_.emplace(key, Slot{std::make_shared<ApproxRadixTree>(), 0}).first;
    }
    it->second.used = ++clock_;
    return it->second.tree;
  }

  // After an insert into `key`'s tree for `tenant`: at most max_models trees, and at most
  // max_tree_size characters for the tenant over all of them. Older models' trees go whole first,
  // least recently used first; then the current tree is evicted as SGLang does.
  void Bound(const std::string& key, ApproxRadixTree& current, std::string_view tenant) const {
    const size_t cap = static_cast<size_t>(o_.max_tree_size);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto drop_oldest = [&] {
        auto oldest = trees_.end();
        for (auto it = trees_.begin(); it != trees_.end(); ++it)
          if (it->first != key && (oldest == trees_.end() || it->second.used < oldest->second.used)) oldest = it;
        if (oldest == trees_.end()) return false;
        trees_.erase(oldest);
        return true;
      };
      while (trees_.size() > static_cast<size_t>(o_.max_models) && drop_oldest()) {
      }
      if (trees_.size() > 1) {
        for (;;) {
          size_t total = 0;
          for (const auto& [k, slot] : trees_) total += slot.tree->TenantChars(tenant);
          if (total <= cap || !drop_oldest()) break;
        }
      }
    }
    if (current.TenantChars(tenant) > cap) current.EvictTenantsOver(cap);
  }

  struct Slot {
    std::shared_ptr<ApproxRadixTree> tree;
    uint64_t used = 0;  // clock_ at the last use
  };
  inline static const std::string kDefaultKey = "default";
  CacheAwareOptions o_;
  mutable std::mutex mu_;
  mutable absl::flat_hash_map<std::string, Slot> trees_;
  mutable uint64_t clock_ = 0;
};

}  // namespace

PluginOr CreateCacheAwareScorer(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(CacheAwareOptions o, Table().Read(params));
  return std::make_unique<CacheAwareScorer>(TypedName{std::string(kCacheAwareScorerType), name}, o);
}

PluginSchema CacheAwareScorerSchema() { return Table().Schema(); }

}  // namespace epp::plugins
