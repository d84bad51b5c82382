// The KV-event subscriber: one ZeroMQ SUB socket per model server, all read by one thread, every
// batch decoded (kv/events.h) and applied to a KvBlockIndex (kv/index.h).
//
// Per endpoint it follows the sequence numbers:
//   - with a replay address, a new subscription first replays the engine's buffer from 0, so a
//     subscriber that joins late (or a second EPP replica) still learns what the server holds;
//   - the first batch, or one after a reconnect, is applied as it comes; when the endpoint has a
//     replay address and the stream did not start at 0, the history is first replayed from 0;
//   - a gap (seq > last + 1): replay from last + 1 when a replay address is set; without one, or
//     when the replay fails, the endpoint's entries are dropped (they may name blocks whose
//     removal was missed) and the stream goes on from the new batch (counted as a reset);
//   - seq <= last: the engine restarted (a new publisher counts from 0 again): the endpoint's
//     entries are dropped, then the batch applied; seq == last is a duplicate and skipped;
//   - a message that is not [topic, 8-byte seq, payload], or whose payload does not decode, is
//     counted and skipped: the subscriber never stops for bad input.
// libzmq reconnects by itself (100 ms, backing off to 5 s). An endpoint removed from the set
// drops its entries. Replays run on the subscriber thread, bounded by `replay_timeout`.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <span>

#include "epp/runtime/endpoints.h"
#include "epp/kv/index.h"

namespace epp {

class Logger;

// What a precise prefix producer (precise-prefix-cache-producer) asks of the runtime: the index
// to feed and how to find each endpoint's publisher (llm-d's kvEventsConfig). An endpoint's
// explicit `kvEvents` address wins; otherwise, with discover_pods, tcp://<its host>:<socket_port>
// (and replay on replay_socket_port when > 0).
struct KvEventsBinding {
  std::shared_ptr<KvBlockIndex> index;
  std::string topic_filter;
  // kvEventsConfig.zmqEndpoint: one SUB socket epp binds ("tcp://0.0.0.0:5557") that the engines
  // connect to; each message's topic (kv@<ip:port>@<model>) says which endpoint sent it.
  std::string central_endpoint;
  bool discover_pods = true;
  int socket_port = 5557;
  int replay_socket_port = 0;  // 0: no replay
  // indexerConfig.kvBlockIndexConfig.redisConfig.address: a copy of the index kept in this Redis
  // (epp/runtime/kv_redis.h); empty: none.
  std::string redis_address;
};

struct KvSubscription {
  std::string endpoint;        // the endpoint's address ("ip:port"), the index's name for it
  std::string address;         // ZeroMQ address of its PUB socket: "tcp://10.0.0.1:5557";
                               // empty: its events come through the central socket
  std::string replay_address;  // its ROUTER replay socket; empty: none
  std::string model;           // base model it serves; "" = taken from the topic "kv@<ep>@<model>"
  bool operator==(const KvSubscription&) const = default;
};

struct KvSubscriberOptions {
  std::string topic_filter;  // ZeroMQ subscription prefix ("": every topic, the engines' default)
  // Bind one more SUB socket here (KvEventsBinding::central_endpoint): a message on it goes to
  // the subscription whose endpoint its topic names, and to none when no such subscription
  // exists (counted in central_unknown).
  std::string central_endpoint;
  std::chrono::milliseconds replay_timeout{2000};
  const Logger* log = nullptr;
};

struct KvEndpointStats {
  std::string endpoint;
  std::string address;
  int64_t batches = 0;            // applied
  int64_t events = 0;             // in applied batches
  int64_t malformed = 0;          // messages or payloads skipped
  int64_t skipped_events = 0;     // events the index skipped (unknown parent, token count)
  int64_t gaps = 0;               // sequence gaps seen
  int64_t replays = 0;            // replays completed
  int64_t replay_failures = 0;
  int64_t resets = 0;             // times the endpoint's entries were dropped (gap, restart, clear)
  int64_t last_seq = -1;          // last applied sequence number
  int64_t last_event_unix_us = 0; // wall clock when the last batch arrived (0: none)
  double last_lag_s = 0;          // arrival time minus the batch's ts (the engine's clock)
  double last_batch_ts = 0;       // the last batch's ts: when the engine published it (its clock)
  std::string last_error;
};

class KvEventSubscriber {
 public:
  // `index` must outlive the subscriber.
  KvEventSubscriber(KvBlockIndex* index, KvSubscriberOptions options = {});
  ~KvEventSubscriber();  // Stop()
  KvEventSubscriber(const KvEventSubscriber&) = delete;
  KvEventSubscriber& operator=(const KvEventSubscriber&) = delete;

  // The whole set: new ones are connected, missing ones closed and their entries dropped,
  // changed ones reconnected. Takes effect on the subscriber thread within its poll interval.
  void SetSubscriptions(std::vector<KvSubscription> subscriptions);
  void Start();
  void Stop();  // joins the thread; idempotent

  // Runs one poll round on the calling thread (tests, without Start): waits up to `wait` for
  // messages and handles what arrived. Not with Start().
  void PollOnce(std::chrono::milliseconds wait);

  std::vector<KvEndpointStats> Stats() const;
  KvBlockIndex* index() const;
  // Central socket: the bound address ("" without one or when the bind failed, see
  // central_error), and messages whose topic named no subscribed endpoint.
  std::string central_address() const;
  std::string central_error() const;
  int64_t central_unknown() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The subscriptions a binding calls for over these endpoints: an endpoint's own `kvEvents` /
// `kvEventsReplay`, else (discover_pods) tcp://<its host>:<socket_port> and, with
// replay_socket_port > 0, its replay, else (a central endpoint) one fed by the central socket;
// an endpoint with none of these gets none.
std::vector<KvSubscription> KvSubscriptionsFor(const KvEventsBinding& binding, std::span<const EndpointSpec> specs);

// For one-shot tools (eppctl explain, pick): fills the binding's index with what every endpoint's
// engine still buffers (a replay from 0 where a replay address is known; otherwise whatever
// arrives live within `timeout`) and returns the per-endpoint figures. Each replay is bounded by
// `timeout`.
std::vector<KvEndpointStats> LoadKvHistory(const KvEventsBinding& binding, std::span<const EndpointSpec> specs,
                                           std::chrono::milliseconds timeout, const Logger* log = nullptr);

// What the index holds per endpoint next to its subscription figures, for explain: text lines
// ("kv events  10.0.0.1:8000  120 blocks (GPU 120)  last batch 0.4 s ago  via tcp://...") and JSON
// ({"endpoint", "blocks", "media", "batches", "last_event_age_s", "address", "replays", "resets",
// "malformed", "error"}). `now_unix_us`: the wall clock.
std::string KvHoldingsText(const KvBlockIndex& index, std::span<const KvEndpointStats> stats, int64_t now_unix_us);
std::string KvHoldingsJson(const KvBlockIndex& index, std::span<const KvEndpointStats> stats, int64_t now_unix_us);

}  // namespace epp
