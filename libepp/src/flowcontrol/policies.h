// Private: the policy interfaces of flow control (llm-d Router's queues held in the EPP, dispatched
// by priority as capacity frees). The layer that owns the queues calls these; the plugins of
// src/plugins/flowcontrol/ implement them, and IndexCapabilities-style lookup in
// plugins/capabilities.h finds them on a Plugin (FlowControlPoliciesOf).
//
// The dispatch hierarchy is the reference's: (1) priority bands, highest first, each gated by its
// usage-limit ceiling against the pool's saturation; (2) within a band, a FairnessPolicy picks the
// flow (tenant) queue to serve; (3) within that queue, the band's OrderingPolicy decides the head.
// In-flight requests that may be evicted to reclaim capacity pass an EvictionFilter and are
// ordered by an EvictionOrder.
//
// Where the reference compares items through an interface call per comparison (Less(a, b)),
// ordering here is a key computed once per item when it is queued: every input of every ordering
// the reference has (enqueue time, TTL, receive time, the SLO header) is fixed by then, so queues
// and fairness policies compare plain integers and a queue can be a heap or an ordered set.
//
// Thread-safety: a policy object (the plugin) is shared by every band and thread and is safe to
// call concurrently. A FairnessState belongs to one band and is called under that band's lock.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <tuple>

#include "epp/request.h"
#include "epp/scheduling.h"

namespace epp::flowcontrol {

// A deadline that never comes: items without one sort after every item that has one.
inline constexpr int64_t kNoDeadline = std::numeric_limits<int64_t>::max();

// The flow id of requests that name no fairness id (llm-d's metadata.DefaultFairnessID).
inline constexpr std::string_view kDefaultFlowId = "default-flow";

// llm-d's TTFT SLO header (milliseconds) and its deprecated spelling, read when the first is absent.
inline constexpr std::string_view kSloTtftHeader = "x-llm-d-slo-ttft-ms";
inline constexpr std::string_view kOldSloTtftHeader = "x-slo-ttft-ms";

// A queued request as the policies see it; fixed while it is queued.
struct QueuedItem {
  uint64_t seq = 0;         // order of arrival at the layer: the last tie-break, so keys are unique
  int64_t enqueue_us = 0;   // when flow control accepted it (the reference's EnqueueTime)
  int64_t received_us = 0;  // when the EPP received the request (ReceivedTimestamp): the SLO base
  int64_t ttl_us = 0;       // the queue-wait budget while the pool has endpoints; <= 0: none
  int64_t slo_ttft_ms = -1;  // SloTtftMs() of the request: -1 when absent or invalid
  int priority = 0;
  uint64_t bytes = 0;
  std::string_view flow_id;  // the fairness id; kDefaultFlowId when the request named none
};

// The request's TTFT SLO in milliseconds from kSloTtftHeader (else kOldSloTtftHeader), or -1 when
// the header is absent, empty, not a base-10 integer, negative, or too large to add to a time in
// nanoseconds (the reference's bound).
int64_t SloTtftMs(const InferenceRequest& request);
// The same for the TPOT SLO: x-llm-d-slo-tpot-ms, else x-slo-tpot-ms.
inline constexpr std::string_view kSloTpotHeader = "x-llm-d-slo-tpot-ms";
inline constexpr std::string_view kOldSloTpotHeader = "x-slo-tpot-ms";
int64_t SloTpotMs(const InferenceRequest& request);

// ---- Ordering: which request of a flow's queue goes next ----

// Queues serve the smallest key first (lexicographic).
struct OrderingKey {
  int64_t primary = 0;
  int64_t secondary = 0;
  uint64_t seq = 0;
  friend bool operator<(const OrderingKey& a, const OrderingKey& b) {
    return std::tie(a.primary, a.secondary, a.seq) < std::tie(b.primary, b.secondary, b.seq);
  }
  friend bool operator==(const OrderingKey& a, const OrderingKey& b) = default;
};

class OrderingPolicy {
 public:
  virtual ~OrderingPolicy() = default;
  // The item's place in its queue, computed once when it is queued. Keys of one policy compare
  // meaningfully; keys of two policies do not, so a band uses one ordering for all its queues
  // (the reference's global-strict policy fails on a band that mixes them).
  virtual OrderingKey Key(const QueuedItem& item) const = 0;
};

// ---- Fairness: which flow of a band goes next ----

// One flow's queue within a band, as fairness policies see it. The layer owns the queues; a
// queue's address is stable while it exists (the layer's queue type derives from this one, so
// the layer gets its own type back from Pick with a static_cast).
class FlowQueue {
 public:
  virtual ~FlowQueue() = default;
  virtual std::string_view flow_id() const = 0;
  virtual size_t size() const = 0;
  virtual uint64_t bytes() const = 0;
  // The next item by the band's ordering, and its key; REQUIRES: size() > 0.
  virtual const QueuedItem& head() const = 0;
  virtual OrderingKey head_key() const = 0;
};

// A fairness policy's mutable state for one band (the reference's NewState / PolicyState). It
// tracks the band's non-empty queues itself, told by the layer, so Pick costs O(log n) in the
// number of non-empty queues (program-aware: O(n), as its score needs every candidate's range).
class FairnessState {
 public:
  virtual ~FairnessState() = default;
  // `queue` became non-empty, its head changed (dispatched, expired, cancelled, or a better item
  // arrived), or it emptied (size() == 0). The layer calls this after every such change and
  // before the queue is destroyed (emptied first).
  virtual void HeadChanged(const FlowQueue& queue) = 0;
  // The queue to serve next, or nullptr when every queue is empty. May advance the state (a
  // round-robin cursor): call it only to dispatch.
  virtual const FlowQueue* Pick(int64_t now_us) = 0;
};

class FairnessPolicy {
 public:
  virtual ~FairnessPolicy() = default;
  virtual std::unique_ptr<FairnessState> NewBandState(int priority) const = 0;
  // Request lifecycle: an item left its queue for the scheduler, and a dispatched request of
  // `flow_id` finished with `usage`. Policies that learn from service (program-aware) override.
  virtual void Dispatched(const QueuedItem& /*item*/, int64_t /*now_us*/) const {}
  virtual void Completed(std::string_view /*flow_id*/, const ResponseUsage& /*usage*/, int64_t /*now_us*/) const {}
};

// ---- Usage limits: how much of the pool a band may use ----

class UsageLimitPolicy {
 public:
  virtual ~UsageLimitPolicy() = default;
  // Called once per dispatch cycle with the active priorities, highest first, and as many
  // ceilings, which the caller sets to 1.0 first (an entry not written fails open). A band is
  // gated while Gated(saturation, its ceiling); ceilings never increase down the list, since
  // dispatch stops at the first gated band.
  virtual void ComputeLimits(double saturation, std::span<const int> priorities, std::span<double> ceilings) const = 0;
};

// The reference's rule: a band dispatches only while saturation is below its ceiling.
inline bool Gated(double saturation, double ceiling) { return saturation >= ceiling; }

// ---- Eviction of in-flight requests ----

// A dispatched request that may be evicted to reclaim capacity.
struct InflightItem {
  std::string_view request_id;
  int priority = 0;
  int64_t dispatch_us = 0;
  std::string_view endpoint;  // the address serving it
};

class EvictionFilter {
 public:
  virtual ~EvictionFilter() = default;
  // True when the request may be evicted (enters the eviction queue).
  virtual bool Accept(const InflightItem& item) const = 0;
};

// The eviction queue evicts the smallest key first.
struct EvictionKey {
  int64_t primary = 0;
  int64_t secondary = 0;
  friend bool operator<(const EvictionKey& a, const EvictionKey& b) {
    return std::tie(a.primary, a.secondary) < std::tie(b.primary, b.secondary);
  }
  friend bool operator==(const EvictionKey& a, const EvictionKey& b) = default;
};

class EvictionOrder {
 public:
  virtual ~EvictionOrder() = default;
  virtual EvictionKey Key(const InflightItem& item) const = 0;
};

// ---- Saturation by stage ----

// The pool's saturation as the reference's flow controller measures it: with llm-d roles, the
// larger of the prefill stage's and the decode stage's saturation (pods labelled prefill /
// encode-prefill count for prefill; decode, unlabelled or empty-role pods for decode; both /
// prefill-decode / encode-prefill-decode pods for both; encode-only and unknown roles for
// neither); over all candidates when neither stage has any.
// `prefill` / `decode`, when given, receive each stage's saturation, or -1 for a stage without
// endpoints (the reference's per-stage pool_saturation gauges: unlabelled endpoints are decode).
double StageSaturation(const SaturationDetector& detector, const SchedulingContext& ctx, Candidates candidates,
                       double* prefill = nullptr, double* decode = nullptr);

}  // namespace epp::flowcontrol
