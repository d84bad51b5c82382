// The precise prefix index: which prompt blocks each model server really holds, built from the
// KV-cache events it publishes (kv/events.h), and the token ids those blocks are keyed by.
//
// Block keys are our own: XXH3 chained over token ids, block by block, from a root that mixes the
// hash seed, the block size and the LoRA adapter (vLLM keys an adapter's blocks apart from the
// base model's). An engine's own block hashes are kept only as the names a later BlockRemoved or
// a child's parent_block_hash uses, per endpoint and medium. Each block key lists its holders
// (endpoint, medium); Lookup walks the request's keys from the first and gives every endpoint
// its run of consecutive blocks held, each block weighted by the best medium it is held on
// (GPU 1.0, CPU 0.8 by default, as llm-d weighs them; any other medium 1.0).
//
// Keys are computed at the block size the engine reports in each BlockStored; a request is
// looked up at every block size present (normally one), so the index needs no configured size.
//
// Memory is bounded by max_blocks: past it, the least recently stored blocks are dropped with
// their holders (as an engine would evict them). Measured (bench/kv_index_bench.cc): about 800
// bytes for a block held by one endpoint (the key's hash-map slot, its LRU node, two small holder
// arrays, the engine-hash entry), and about 70 for each further endpoint holding the same block
// (see docs/benchmarks.md).
//
// Engine hashes: each holder has one current name (the hash it was last stored under), counted
// with the holder. A block stored again under another hash by the same endpoint and medium (the
// same tokens under another cache_salt or multimodal input; or a flood of re-hashed stores)
// leaves the older name as an alias, still resolving a later BlockRemoved or a child's parent.
// Aliases are bounded per endpoint by max_engine_hash_aliases, the oldest forgotten first, so no
// stream of events grows the index past max_blocks blocks plus that many names per endpoint; a
// BlockRemoved naming a forgotten (or never seen) hash is counted in removed_unknown, a child
// naming one as its parent is skipped.
//
// Thread-safety: every method may be called from any thread (one writer lock, readers shared).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "epp/kv/events.h"

namespace epp {

// llm-d's `estimate` tokenizer: the bytes zero-padded to a multiple of 4, each 4 bytes one token
// (little-endian uint32). Not the model's tokens, but the same text always gives the same ids;
// `eppctl sim` tokenizes with it, so the EPP's estimate matches the simulator exactly.
std::vector<uint32_t> EstimateTokenIds(std::string_view text);

struct KvIndexOptions {
  std::string hash_seed;  // tokenProcessorConfig.hashSeed; any value works, both sides use it
  size_t max_blocks = size_t{1} << 22;  // block keys kept (about 3.3 GiB if each had one holder)
  // Per endpoint, engine hashes kept beyond one per block held (aliases, see above); about 60
  // bytes each. 0: none (a re-stored block keeps only its newest name).
  size_t max_engine_hash_aliases = 16384;
  // Weight of a block held on a medium (compared lower-case); a medium not listed weighs 1.0.
  std::map<std::string, double> medium_weights = {{"gpu", 1.0}, {"cpu", 0.8}};
};

// One endpoint's prefix match for a request.
struct KvPrefixMatch {
  int block_size = 0;         // tokens per block of the matched keys (0: nothing matched)
  int64_t blocks = 0;         // consecutive blocks held from the first
  double weighted_blocks = 0; // the same, each block weighted by its best medium
  int64_t tokens() const { return blocks * block_size; }
};

// What one Apply() did.
struct KvApplyResult {
  int64_t stored = 0;      // blocks added (or a holder added to a known block)
  int64_t removed = 0;     // holders removed
  int64_t removed_unknown = 0;  // BlockRemoved hashes the index does not know (never stored,
                                // evicted, or an alias forgotten for max_engine_hash_aliases)
  int64_t cleared = 0;     // AllBlocksCleared events
  int64_t skipped = 0;     // events skipped (see `last_skip`)
  std::string last_skip;   // why the last one was: "BlockStored parent 0x... unknown", ...
};

struct KvEndpointSummary {
  std::string endpoint;
  int64_t blocks = 0;                    // block keys it holds (events only)
  std::map<std::string, int64_t> media;  // holders per medium as sent ("GPU": 120)
  int64_t speculative = 0;               // blocks predicted at pick time, not yet confirmed
};

struct KvIndexStats {
  int64_t blocks = 0;          // distinct block keys
  int64_t holders = 0;         // (block, endpoint, medium) entries, speculative ones included
  int64_t evicted = 0;         // blocks dropped for max_blocks since the start
  int64_t approx_bytes = 0;    // estimate of the memory held (engine hashes and aliases included)
  int64_t engine_hashes = 0;   // engine-hash names kept, every endpoint (one per holder + aliases)
  int64_t engine_hash_aliases = 0;          // of those, aliases (max_engine_hash_aliases per endpoint)
  int64_t engine_hash_aliases_dropped = 0;  // aliases forgotten for that bound since the start
  int64_t speculative = 0;            // speculative holders now
  int64_t speculative_confirmed = 0;  // replaced by the engine's BlockStored since the start
  int64_t speculative_expired = 0;    // dropped at their TTL unconfirmed since the start
};

// The medium name speculative holders are listed under (weight 1.0 unless medium_weights says).
inline constexpr std::string_view kSpeculativeMedium = "speculative";

// One holder as the index keeps it (a block key held by an endpoint on a medium, under the
// engine's hash for it): what a copy of the index elsewhere needs to rebuild it
// (epp/runtime/kv_redis.h keeps one in Redis).
struct KvHolderRecord {
  std::string endpoint;
  std::string medium;        // as the engine sent it ("GPU")
  uint64_t key = 0;          // the block key
  uint64_t engine_hash = 0;  // the endpoint's name for the block on that medium
  int block_size = 0;        // tokens per block of the key
  bool operator==(const KvHolderRecord&) const = default;
};

// A holder stored (or stored again under another engine hash) or removed, by an event, a clear or
// an eviction.
struct KvHolderChange {
  bool stored = true;
  KvHolderRecord holder;
};

class KvBlockIndex {
 public:
  explicit KvBlockIndex(KvIndexOptions options = {});
  ~KvBlockIndex();
  KvBlockIndex(const KvBlockIndex&) = delete;
  KvBlockIndex& operator=(const KvBlockIndex&) = delete;

  // Applies `endpoint`'s batch. `base_model` is the model the endpoint serves (from the topic;
  // may be empty): a BlockStored whose lora_name is empty or equal to it keys under the base.
  // A BlockStored whose parent is unknown, or whose token count is not block_size x hashes, is
  // skipped (and counted); a token-less one adds the medium to blocks already known by hash.
  KvApplyResult Apply(std::string_view endpoint, std::string_view base_model, const KvEventBatch& batch);
  // Drops everything `endpoint` holds (it left the pool, restarted, or its stream had a gap),
  // speculative entries included.
  void ClearEndpoint(std::string_view endpoint);

  // Speculative indexing (llm-d's speculativeIndexing): right after a pick, the request's blocks
  // are entered for the endpoint it went to, before the engine has stored them, so that the
  // requests that follow within the event delay see them. `tokens` are keyed at `block_size` as
  // a request for `model` (a LoRA adapter where the endpoint's base model differs). An entry goes
  // when the engine's BlockStored names the same block for that endpoint (confirmed), when its
  // expiry (`expires_us`, on the caller's clock) passes unconfirmed (ExpireSpeculative), or with
  // the endpoint. Blocks the endpoint already holds by its events are not entered again.
  void AddSpeculative(std::string_view endpoint, std::span<const uint32_t> tokens, std::string_view model,
                      int block_size, int64_t expires_us);
  // Drops the speculative entries whose expiry is at or before `now_us`. Cheap when none is due
  // (an atomic read, no lock).
  void ExpireSpeculative(int64_t now_us);

  // Chained block keys of `tokens` (full blocks only) at `block_size` under `lora` ("" = base).
  std::vector<uint64_t> BlockKeys(std::span<const uint32_t> tokens, int block_size, std::string_view lora = "") const;

  // For `tokens` of a request for `model`: per endpoint (out[i] for endpoints[i]) its run of
  // consecutive held blocks from the first. A request for a model other than the endpoint's base
  // model is looked up as that LoRA adapter. Endpoints the index does not know match nothing.
  // `base_keys`, when given, are BlockKeys(tokens, base_keys_block_size) already computed by the
  // caller: used instead of hashing again where that block size is looked up for the base model.
  void Lookup(std::span<const uint32_t> tokens, std::string_view model, std::span<const std::string> endpoints,
              std::vector<KvPrefixMatch>& out, std::span<const uint64_t> base_keys = {},
              int base_keys_block_size = 0) const;

  // Every holder the events stored (speculative ones left out), for a copy elsewhere.
  std::vector<KvHolderRecord> Holders() const;
  // Adds holders read back from a copy, as the events that stored them would have (the block,
  // its holder, the engine hash as the endpoint's name for it); the LRU bound applies. Records
  // with a block size out of range or an empty endpoint are skipped. Returns the holders added.
  size_t Restore(std::span<const KvHolderRecord> holders);
  // Called with the holders each Apply, ClearEndpoint or eviction changed (speculative ones left
  // out), under the index's writer lock: queue them and return. Empty function: none.
  void SetChangeObserver(std::function<void(std::span<const KvHolderChange>)> observer);

  std::vector<KvEndpointSummary> Endpoints() const;
  KvIndexStats Stats() const;
  const KvIndexOptions& options() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace epp
