// The KV-event subscriber: one ZeroMQ SUB socket per model server, all read by one thread, every
// batch decoded (kv/events.h) and applied to a KvBlockIndex (kv/index.h).
//
// Per endpoint it follows the sequence numbers (an engine's publisher numbers its batches from 0,
// +1 each, and a restarted engine counts from 0 again; its replay socket answers a start sequence
// with every buffered batch from there, byte for byte, then an end marker):
//   - with a replay address, a new subscription first replays the engine's buffer from 0, so a
//     subscriber that joins late (or a second EPP replica) still learns what the server holds;
//   - the first batch is applied as it comes; when the endpoint has a replay address and the
//     stream did not start at 0, the history is first replayed from 0;
//   - seq == last + 1 is applied; seq == last is a duplicate and skipped;
//   - any other seq (a gap, or a sequence that went back) is a discontinuity, and one message
//     alone never drops the endpoint's entries (anyone who can reach a central socket, or sits on
//     the path, could send it). With a replay address the engine is asked from `last`: when it
//     still buffers that batch with the same bytes, it did not restart: the replay fills a real
//     gap (the engine's own copies are applied, not the message), and a message the engine never
//     published (a sequence that went back, or one past what it buffers) is dropped (counted in
//     seq_rejected). When it answers nothing from `last` on, or another batch there, it
//     restarted: the entries are dropped (a reset) and its new history replayed from 0. When it
//     buffers only later batches, batches were lost: a reset, then those batches. Without a
//     replay address (or when the replay fails) the message is held, not applied: the next
//     batch confirms it (seq == held + 1: a restart or a gap, so a reset, then both are applied)
//     or the old stream goes on (seq == last + 1: the held one is dropped, counted). A restarted
//     engine thus resets at its second batch; a single forged message changes nothing;
//   - a message that is not [topic, 8-byte seq, payload], or whose payload does not decode, is
//     counted and skipped: the subscriber never stops for bad input.
// Central socket (KvSubscriberOptions::central_endpoint): a message goes to the subscription its
// topic names, and with verify_peer_address (the default) only when the TCP peer that sent it has
// that endpoint's IP address (an IPv4-mapped IPv6 peer counts as its IPv4 address; a hostname
// endpoint is resolved once, when subscribed); others are dropped before the index sees them,
// counted per reason (KvCentralStats) and logged at most once a minute per peer. On an ipc://
// socket there is no peer address: the file's permissions guard it. A per-endpoint subscription
// needs no check (the EPP chose whom to connect to); its messages count for its endpoint
// whatever their topic names (the topic only gives the model when the subscription has none).
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
  // kvEventsConfig.verifyPeerAddress (epp only): on the central socket, accept a message only
  // from the IP address of the endpoint its topic names. Off only where the engines' connections
  // arrive from another address (NAT, a proxy or service-mesh sidecar that re-originates them).
  bool verify_peer_address = true;
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
  // On the central socket (tcp://), drop a message whose sender's IP address is not the one of
  // the endpoint its topic names (see above; KvEventsBinding::verify_peer_address).
  bool verify_peer_address = true;
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
  int64_t peer_rejected = 0;      // central socket: messages naming it from another address
  int64_t seq_rejected = 0;       // messages dropped because their sequence did not continue
                                  // the engine's stream (see above)
  int64_t removed_unknown = 0;    // BlockRemoved hashes the index did not know
  int64_t last_seq = -1;          // last applied sequence number
  int64_t last_event_unix_us = 0; // wall clock when the last batch arrived (0: none)
  double last_lag_s = 0;          // arrival time minus the batch's ts (the engine's clock)
  double last_batch_ts = 0;       // the last batch's ts: when the engine published it (its clock)
  std::string last_error;
};

// The central socket's drops, by reason (each message counted once).
struct KvCentralStats {
  int64_t unknown_endpoint = 0;   // a topic naming no subscribed endpoint (or not kv@<ep>@<model>)
  int64_t peer_mismatch = 0;      // sent from an IP address that is not the named endpoint's
  int64_t peer_unverifiable = 0;  // no peer address to compare, or the endpoint's host did not resolve
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
  KvCentralStats central_stats() const;

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
