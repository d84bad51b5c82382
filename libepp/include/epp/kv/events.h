// KV-cache events: what model servers publish about the prefix blocks they store and evict
// (vLLM's `--kv-events-config`, SGLang's equivalent), and the index the precise prefix producer
// builds from them.
//
// Wire format (vLLM `vllm/distributed/kv_events.py`, SGLang `srt/disaggregation/kv_events.py`):
//   - ZeroMQ PUB socket, one message per batch, three frames: topic (UTF-8, vLLM's `topic`,
//     llm-d's convention "kv@<ip:port>@<model>"), sequence number (8 bytes, big-endian, from 0,
//     +1 per batch), payload (msgpack).
//   - payload: an array [ts (float seconds), events, data_parallel_rank (int or nil)]; very old
//     engines send [ts, events]. A map {ts, events, data_parallel_rank} is accepted too.
//   - each event either a tagged array ["BlockStored", field, field, ...] (SGLang, vLLM before
//     0.26) or a tagged map {"type": "BlockStored", "block_hashes": ..., ...} (vLLM 0.26 on);
//     fields in declaration order, trailing ones optional:
//       BlockStored: block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
//                    lora_name, extra_keys, group_idx, kv_cache_spec_kind,
//                    kv_cache_spec_sliding_window, ... (later fields ignored)
//       BlockRemoved: block_hashes, medium, group_idx, ... (later fields ignored)
//       AllBlocksCleared: no fields
//   - block hashes are ints (vLLM: the low 64 bits of a sha256; SGLang: signed int64) or bytes
//     (vLLM with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0: the last 8 bytes, big-endian).
//   - replay (vLLM's `replay_endpoint`, a ROUTER socket): a DEALER sends [empty, start seq (8
//     bytes BE)] and receives [empty, topic, seq, payload] per buffered batch with seq >= start
//     (older engines omit the topic frame), then an end marker [empty, (empty topic,) seq
//     0xFFFFFFFFFFFFFFFF, empty payload].
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace epp {

// ---- Events ----------------------------------------------------------------------------------

struct KvBlockStored {
  std::vector<uint64_t> block_hashes;          // one per full block stored
  std::optional<uint64_t> parent_block_hash;   // the block before the first one; nullopt: none
  std::vector<uint32_t> token_ids;             // the stored blocks' tokens (may be empty: location-only)
  int64_t block_size = 0;                      // tokens per engine block
  std::optional<int64_t> lora_id;
  std::string medium;                          // as sent ("GPU", "CPU", "CPU_PINNED", ...); "" when nil
  std::string lora_name;                       // "" when nil or absent
  std::optional<int64_t> group_idx;            // KV-cache group (hybrid models); nullopt when absent
  std::string kv_cache_spec_kind;              // "full_attention", "sliding_window", ...; "" when absent
  bool operator==(const KvBlockStored&) const = default;
};

struct KvBlockRemoved {
  std::vector<uint64_t> block_hashes;
  std::string medium;
  std::optional<int64_t> group_idx;
  bool operator==(const KvBlockRemoved&) const = default;
};

struct KvAllBlocksCleared {
  bool operator==(const KvAllBlocksCleared&) const = default;
};

using KvEvent = std::variant<KvBlockStored, KvBlockRemoved, KvAllBlocksCleared>;

struct KvEventBatch {
  double ts = 0;  // seconds since the epoch, the engine's clock
  std::vector<KvEvent> events;
  std::optional<int64_t> data_parallel_rank;
  bool operator==(const KvEventBatch&) const = default;
};

// How events are written: kArray = tagged positional arrays (SGLang, vLLM before 0.26), kMap =
// tagged maps (vLLM 0.26 on). The batch is always the 3-element array.
enum class KvEventEncoding { kArray, kMap };

// Decodes one payload. Missing trailing fields take their defaults (nil), unknown trailing fields
// and unknown map keys are ignored, array and map events may be mixed. Token ids must be ints in
// [0, 2^32); hashes ints (negative ones reinterpreted as uint64) or 1-32 bytes. kInvalidArgument
// naming the place, e.g. "events[2].block_hashes[0]: expected an int or bytes, got str", for
// anything else (not msgpack, trailing bytes, an unknown event tag, nesting deeper than 64,
// more than 2^24 elements in one array).
absl::StatusOr<KvEventBatch> DecodeKvEventBatch(std::string_view payload);

// Encodes as the engines do. Hashes are always written as 64-bit msgpack ints (0xcf), since
// llm-d's decoder rejects shorter forms; nil for a missing parent.
std::string EncodeKvEventBatch(const KvEventBatch& batch, KvEventEncoding encoding = KvEventEncoding::kMap);

// llm-d's topic convention "kv@<pod>@<model>": exactly three '@'-separated parts, the first
// "kv". nullopt for anything else (engines may publish any topic, "" by default).
struct KvTopic {
  std::string endpoint;  // "ip:port"
  std::string model;
};
std::optional<KvTopic> ParseKvTopic(std::string_view topic);
std::string FormatKvTopic(std::string_view endpoint, std::string_view model);

// The 8-byte big-endian sequence frame; nullopt unless exactly 8 bytes.
std::optional<uint64_t> DecodeKvSequence(std::string_view frame);
std::string EncodeKvSequence(uint64_t seq);
inline constexpr uint64_t kKvReplayEndSequence = ~uint64_t{0};  // the replay's end marker (-1)

}  // namespace epp
