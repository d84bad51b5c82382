// A KV-event publisher that speaks the engines' wire format (kv/events.h): a ZeroMQ PUB socket
// sending [topic, 8-byte sequence, msgpack batch], and optionally a ROUTER replay socket serving
// the last `buffer_steps` batches as vLLM's does. `eppctl sim --kv-events` publishes through it;
// tests use it as a model server's publisher, with fault options to exercise subscribers: drop
// batches (numbered and buffered, not sent: a gap), delay them, answer replays in the older
// layout without the topic frame, or send raw frames.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "epp/kv/events.h"

namespace epp {

struct KvPublisherOptions {
  // Addresses to bind: "tcp://127.0.0.1:5557"; port 0 or '*' picks a free one (see endpoint()).
  std::string endpoint = "tcp://127.0.0.1:0";
  std::string replay_endpoint;  // "" = no replay socket
  // Connect the PUB socket to `endpoint` instead of binding it (vLLM connects to an address
  // without '*': an EPP's central socket, kvEventsConfig.zmqEndpoint).
  bool connect = false;
  std::string topic;            // vLLM's default is ""; llm-d's convention "kv@<ip:port>@<model>"
  size_t buffer_steps = 10000;  // batches kept for replay (vLLM's default)
  KvEventEncoding encoding = KvEventEncoding::kMap;
  std::optional<int64_t> data_parallel_rank = 0;
  // Faults: the share of batches numbered and buffered but not sent (receivers see a gap), a
  // delay before each batch is sent, replays answered without the topic frame (vLLM < 0.26,
  // SGLang).
  double drop_rate = 0;
  std::chrono::milliseconds delay{0};
  bool legacy_replay = false;
  uint64_t seed = 0;
};

struct KvPublisherStats {
  uint64_t batches = 0;  // numbered (the next sequence number)
  uint64_t sent = 0;
  uint64_t dropped = 0;
  uint64_t replays = 0;  // replay requests answered
};

class KvEventPublisher {
 public:
  // Binds the sockets and starts the sending thread. kInvalidArgument for bad options,
  // kUnavailable when an address cannot be bound.
  static absl::StatusOr<std::unique_ptr<KvEventPublisher>> Start(const KvPublisherOptions& options);
  ~KvEventPublisher();  // Stop()
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  std::string endpoint() const;         // the bound PUB address, "tcp://127.0.0.1:40123"
  std::string replay_endpoint() const;  // "" without one

  // Queues one batch (ts = now) with the next sequence number. Thread-safe, never blocks on the
  // network. An empty `events` is a valid (empty) batch.
  void Publish(std::vector<KvEvent> events);
  // Queues raw frames to send as one message, outside the numbering (malformed-input tests).
  void PublishRaw(std::vector<std::string> frames);
  // Waits until everything queued so far has been handed to ZeroMQ (or `timeout` passed).
  bool Flush(std::chrono::milliseconds timeout = std::chrono::milliseconds(2000));

  KvPublisherStats stats() const;
  void Stop();  // idempotent

  struct Impl;

 private:
  explicit KvEventPublisher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace epp
