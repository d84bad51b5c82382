// The precise prefix index's copy in Redis (llm-d's `indexerConfig.kvBlockIndexConfig.redisConfig`,
// issue #39). llm-d looks blocks up in Redis on every request; epp keeps its index in memory (a
// pick never waits on the network) and keeps this copy so that a replica that starts, or starts
// again, is warm at once instead of knowing only the blocks the engines store after it subscribed.
//
// Layout, the shape of llm-d's Redis index: one HASH per block key, named by the key in decimal
// (after `key_prefix`, empty as llm-d's: give the index its own database), one field per holder,
// the holder as llm-d encodes a PodEntry (JSON {"PodIdentifier","DeviceTier","Speculative",
// "HasGroup","GroupIdx"}), the value "<block size>:<engine hash>" (epp's index needs both to go on
// applying the engine's events; llm-d writes an empty value and reads only the fields). epp does
// not write llm-d's `engine:<hash>` sets: the engine hash is in the value. Block keys are epp's
// own (kv/index.h), so an llm-d EPP and epp on one Redis do not share entries.
//
// Every replica applies every engine's events, so all write the same entries (idempotent HSET /
// HDEL). Writes are queued by the index's change observer and sent by one thread, pipelined, every
// `interval`; Redis down: the queue holds up to max_pending changes (then drops, counted) and the
// copy lags until those blocks change again.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "epp/kv/index.h"
#include "epp/status.h"

namespace epp {

class Logger;

struct KvRedisOptions {
  std::string address;  // redisConfig.address (ParseRedisAddress)
  std::string key_prefix;
  std::chrono::milliseconds interval{100};
  std::chrono::milliseconds timeout{1000};      // a connect or round trip
  std::chrono::milliseconds load_timeout{10000};  // all of Load()
  size_t max_pending = size_t{1} << 20;         // changes queued while Redis is away
  size_t scan_count = 1000;                     // keys per SCAN step of Load()
};

struct KvRedisStats {
  bool up = false;
  int64_t loaded = 0;   // holders restored by Load()
  int64_t written = 0;  // changes sent (HSET or HDEL)
  int64_t dropped = 0;  // changes dropped from a full queue
  int64_t errors = 0;   // failed connects or rounds
  int64_t rounds = 0;
  std::string last_error;
};

class KvRedisMirror {
 public:
  // Parses the address; does not connect. `index` must outlive the mirror.
  static absl::StatusOr<std::unique_ptr<KvRedisMirror>> Create(KvRedisOptions options, std::shared_ptr<KvBlockIndex> index,
                                                              const Logger* log);
  ~KvRedisMirror();

  // Reads the copy into the index (SCAN, then HGETALL per key, pipelined), within load_timeout;
  // malformed entries are skipped (counted in the error text). Returns the holders restored.
  // Run before Start() and before the index gets events.
  absl::StatusOr<size_t> Load();
  // Observes the index's changes and starts the writer thread.
  void Start();
  // Sends what is queued (one round, within the timeout) and stops.
  void Stop();
  KvRedisStats stats() const;
  std::string redacted_address() const;

  // The field and value of a holder, as written (tests, tools).
  static std::string Field(const KvHolderRecord& h);
  static std::string Value(const KvHolderRecord& h);
  // A holder from a key's name (after the prefix), a field and a value; nullopt when malformed.
  static std::optional<KvHolderRecord> Parse(std::string_view key, std::string_view field, std::string_view value);

  struct Impl;

 private:
  explicit KvRedisMirror(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace epp
