// State shared between EPP replicas (issue #39). Independent replicas behind one gateway each
// learn only their own picks: the approximate prefix index holds a fraction of the truth and the
// in-flight counts are undercounted by the number of replicas. A SharedPrefixBus carries the
// blocks each replica's approx-prefix-cache-producer records to the others' producers (and, with
// Redis, program-aware-fairness's attained service per flow); the scheduler adds the other
// replicas' in-flight counts to its own (Scheduler::SetRemoteLoad).
//
// Two carriers: RedisSharedState (epp/runtime/redis_state.h) for `eppctl serve --shared-state`,
// and PrefixBusHub below, in process and in the caller's time, which replay uses to model
// replicas that share state with a propagation delay. The pick path never waits on either:
// Publish only queues, and remote updates arrive on the carrier's own thread (or the caller's).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace epp {

class SharedPrefixBus {
 public:
  virtual ~SharedPrefixBus() = default;
  // A producer named `producer` recorded `hashes` on `endpoint` after this replica's pick
  // (`capacity`: its per-endpoint bound, 0 for the producer's default). Queues; never blocks
  // on the network.
  virtual void Publish(std::string_view producer, std::string_view endpoint, std::span<const uint64_t> hashes,
                       int64_t capacity) = 0;
  // Updates from the other replicas for producers named `producer` reach `sink` until
  // Unsubscribe(id), which waits for a delivery in progress. The sink is called from the
  // carrier's thread and must be thread-safe (PrefixIndex::Add is).
  using Sink = std::function<void(std::string_view endpoint, std::span<const uint64_t> hashes, int64_t capacity)>;
  virtual uint64_t Subscribe(std::string_view producer, Sink sink) = 0;
  virtual void Unsubscribe(uint64_t id) = 0;

  // Attained service per flow, for flow control's program-aware-fairness (least attained service
  // over the pool, not over this replica's share of it). `source` returns this replica's service
  // per flow id under policy name `policy`, decayed to now; `sink` receives the other live
  // replicas' services summed per flow id for the same policy name (empty when there are none or
  // the carrier is down). The carrier calls both from its own thread, once per round;
  // UnshareFlowService(id) waits for a call in progress. A carrier that does not share them
  // (replay's hub) returns 0 and never calls either.
  using FlowServices = std::vector<std::pair<std::string, double>>;
  using ServiceSource = std::function<FlowServices()>;
  using ServiceSink = std::function<void(const FlowServices& others)>;
  virtual uint64_t ShareFlowService(std::string_view /*policy*/, ServiceSource /*source*/, ServiceSink /*sink*/) {
    return 0;
  }
  virtual void UnshareFlowService(uint64_t /*id*/) {}
};

// Delivery to the subscribers of one bus, shared by the carriers: a registry of sinks by
// producer name, safe to call from any thread.
class PrefixSinks {
 public:
  uint64_t Add(std::string_view producer, SharedPrefixBus::Sink sink);
  void Remove(uint64_t id);
  // Calls every sink of `producer`; returns how many there were.
  size_t Deliver(std::string_view producer, std::string_view endpoint, std::span<const uint64_t> hashes,
                 int64_t capacity) const;

 private:
  struct Entry {
    uint64_t id;
    std::string producer;
    SharedPrefixBus::Sink sink;
  };
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
  uint64_t next_id_ = 1;
};

// In-process replicas that share their prefix updates after `delay_us` of the caller's time
// (replay's `--epp-replicas N --shared-state`): Member(r) is replica r's bus; an update r
// publishes at time t reaches every other member when DeliverDue(now) runs with now >= t + delay.
// Not thread-safe across DeliverDue and Publish (replay is single-threaded); the time comes
// from `now`, a function the hub calls at Publish.
class PrefixBusHub {
 public:
  PrefixBusHub(int replicas, int64_t delay_us, std::function<int64_t()> now);
  ~PrefixBusHub();
  PrefixBusHub(const PrefixBusHub&) = delete;
  PrefixBusHub& operator=(const PrefixBusHub&) = delete;

  SharedPrefixBus* Member(int replica);
  // Delivers every queued update due by `now_us`, oldest first.
  void DeliverDue(int64_t now_us);
  size_t pending() const { return queue_.size() - head_; }
  int64_t delivered() const { return delivered_; }

 private:
  class MemberBus;
  struct Update {
    int64_t due_us;
    int from;
    std::string producer, endpoint;
    std::vector<uint64_t> hashes;
    int64_t capacity;
  };
  void Enqueue(int from, std::string_view producer, std::string_view endpoint, std::span<const uint64_t> hashes,
               int64_t capacity);
  int64_t delay_us_;
  std::function<int64_t()> now_;
  std::vector<std::unique_ptr<MemberBus>> members_;
  std::vector<Update> queue_;  // due times ascending (one delay, published in time order)
  size_t head_ = 0;
  int64_t delivered_ = 0;
};

}  // namespace epp
