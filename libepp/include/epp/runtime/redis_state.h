// State shared between active-active EPP replicas through Redis or Valkey (`eppctl serve
// --shared-state redis://HOST:PORT`, issue #39). What is shared:
//   - the approximate prefix index: each replica appends the blocks its approx-prefix-cache-
//     producer records to a Redis stream per producer (`<prefix>prefix:<producer>`, capped with
//     MAXLEN ~ stream_max_entries) and reads the other replicas' entries into its own index;
//     a replica that starts reads the stream from its start, so it starts warm;
//   - in-flight requests and tokens per endpoint: each replica writes its own counts to
//     `<prefix>load:<replica>` with an expiry (load_ttl) and reads the others', which its picks
//     add to their own (Scheduler::SetRemoteLoad); a replica that dies stops refreshing its key,
//     and its counts vanish after load_ttl;
//   - with flow control's program-aware-fairness, each flow's attained service, the same way
//     (`<prefix>service:<replica>`), so least attained service is over the pool's service.
// One background thread does all of it, one pipelined round trip per `interval`: the pick path
// never waits on Redis (Publish queues under a mutex, bounded). Staleness: another replica's pick
// is in this one's index about 2 x interval + one round trip after it was made (at the default
// 50 ms: ~100 ms); remote in-flight counts are as old as that.
// Redis down or slow (a round fails or passes `timeout`): the remote in-flight counts are
// dropped at once (each replica routes on its own counts), the prefix entries already learned are
// kept, updates queue up to max_pending (older ones dropped and counted), the state is on
// /metrics (epp_shared_state_*), logged once when it goes and once when it returns, and the
// thread reconnects with backoff and catches up from the streams.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "epp/runtime/redis.h"
#include "epp/shared_state.h"
#include "epp/status.h"

namespace epp {

class Scheduler;
class Logger;

struct SharedStateOptions {
  std::string address;        // redis://, rediss://, unix://, valkey(s):// or host:port (ParseRedisAddress)
  std::string password;       // when set, replaces the address's (--shared-state-password-file)
  std::string ca_file;        // rediss: CA bundle instead of the system's
  std::string key_prefix;     // every key starts with it; empty: "epp:default:"
  std::string replica_id;     // unique per replica; empty: "<hostname>-<pid>-<random>"
  std::chrono::milliseconds interval{50};
  std::chrono::milliseconds timeout{250};   // a connect or a round that takes longer fails
  std::chrono::milliseconds load_ttl{0};    // expiry of a replica's counts; 0: max(1 s, 20 x interval)
  int64_t stream_max_entries = 4096;        // MAXLEN ~ of each prefix stream (an entry: one round's updates)
  size_t max_pending = 8192;                // updates queued while Redis is slow or down
  size_t read_count = 512;                  // stream entries read per round (more: the next round at once)
  // One answer's bytes (the stream read's): past it the round fails, the read count halves and
  // the next round runs at once (a round past `timeout` halves it too, after the backoff); the
  // count returns to read_count once a read finds no backlog.
  size_t max_round_bytes = size_t{64} << 20;
};

struct SharedStateStats {
  bool up = false;                // the last round succeeded
  int64_t rounds = 0, errors = 0, reconnects = 0;
  int64_t published = 0;          // prefix updates sent
  int64_t applied = 0;            // other replicas' updates added to this replica's index
  int64_t ignored = 0;            // ... for endpoints not in this replica's pool
  int64_t dropped = 0;            // updates dropped from a full queue
  int64_t replicas = 0;           // replicas with live counts, this one included
  int64_t remote_requests = 0;    // other replicas' in-flight requests, summed
  int64_t bytes_sent = 0, bytes_received = 0;
  int64_t read_count = 0;         // stream entries the next read asks for (lower while a backlog is over budget)
  int64_t read_shrinks = 0;       // times it was halved (an answer over max_round_bytes, or a round past the timeout)
  double last_round_seconds = 0;  // duration of the last successful round
  std::string last_error;
};

class RedisSharedState final : public SharedPrefixBus {
 public:
  // Parses the address and fills the defaults; does not connect.
  static absl::StatusOr<std::unique_ptr<RedisSharedState>> Create(SharedStateOptions options);
  ~RedisSharedState() override;

  // Starts the thread. `scheduler` returns the one picks use now (it changes on reload);
  // `endpoints` the pool's addresses (updates for others are ignored); `log` may be null.
  void Start(std::function<std::shared_ptr<const Scheduler>()> scheduler,
             std::function<std::vector<std::string>()> endpoints, const Logger* log);
  // Stops the thread and deletes this replica's counts from Redis (best effort, one timeout).
  void Stop();
  // Runs one round now on the caller's thread (tests; not with Start).
  absl::Status RunRoundForTest();

  SharedStateStats stats() const;
  const SharedStateOptions& options() const;
  std::string redacted_address() const;

  // SharedPrefixBus
  void Publish(std::string_view producer, std::string_view endpoint, std::span<const uint64_t> hashes,
               int64_t capacity) override;
  uint64_t Subscribe(std::string_view producer, Sink sink) override;
  void Unsubscribe(uint64_t id) override;
  // Attained service per flow: each replica writes its own to `<prefix>service:<replica>` (a
  // line per flow, "policy<TAB>flow<TAB>service", at most 4096 flows per policy, the most served;
  // flow ids over 256 bytes or with a tab or newline are not shared) with the load key's expiry,
  // and reads the others' in the same round; down or alone, the sinks get an empty list.
  uint64_t ShareFlowService(std::string_view policy, ServiceSource source, ServiceSink sink) override;
  void UnshareFlowService(uint64_t id) override;

  struct Impl;

 private:
  explicit RedisSharedState(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The record a prefix stream entry carries (field "b"): updates as
//   [u32 endpoint length][endpoint][i64 capacity][u32 block count][block count x u64], little-endian.
// Decoding is bounded and errors name the byte offset (another replica's bytes are not trusted).
struct SharedPrefixUpdate {
  std::string endpoint;
  int64_t capacity = 0;
  std::vector<uint64_t> hashes;
};
void AppendSharedPrefixUpdate(std::string& out, std::string_view endpoint, std::span<const uint64_t> hashes,
                              int64_t capacity);
absl::StatusOr<std::vector<SharedPrefixUpdate>> DecodeSharedPrefixUpdates(std::string_view bytes);

}  // namespace epp
