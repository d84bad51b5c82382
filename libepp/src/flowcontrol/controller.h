// Private: the flow-control layer (llm-d Router's FlowController): requests that find the pool
// saturated wait here, in priority bands, per-flow (tenant) queues within a band, and dispatch as
// capacity frees: strict priority across bands, the band's FairnessPolicy across its flows, the
// band's OrderingPolicy within a flow (policies.h). Capacity limits (global and per band, requests
// and bytes), queue-wait TTLs and shutdown answer with the reference's outcomes; AnswerFor maps an
// outcome to the HTTP status and x-llm-d-request-dropped-reason the reference sends.
//
// Asynchronous API. A caller (the ext_proc session) must not park a thread per queued request:
// Enqueue(request, callback) returns at once with a handle, and the callback is invoked exactly
// once with the outcome. Cancel(handle) takes a request out of the queue (client gone).
//
// Threading model.
//  - One mutex guards every queue. Enqueue, Cancel, dispatch and expiry hold it for O(log n)
//    work (n: queued requests; independent of the number of flows: fairness states index only
//    non-empty queues). Callbacks never run under it.
//  - Where callbacks run: a rejection at Enqueue, on the caller's thread before Enqueue returns
//    (the returned handle is then kNoHandle); a Cancel, on the caller's thread before Cancel
//    returns; Dispatched, TTL expiry and shutdown, on the dispatcher (or the thread calling
//    DispatchOnce / ExpireOnce / Shutdown).
//  - Dispatch is serialised: one dispatcher thread (Start()) runs dispatch cycles, woken by
//    Enqueue, by NotifyCapacity() (the scheduler released a request: capacity freed) and, while
//    anything is queued, every `poll_interval_us` (the reference polls every millisecond: a
//    scrape-based detector changes without any event here). Each cycle reads the pool's
//    saturation afresh, so the dispatch callback must account the dispatched request's load (run
//    the scheduler's Pick, which bumps the in-flight counts) before it returns; otherwise the
//    next cycle reads a stale saturation and dispatches too much. Set
//    `max_dispatches_per_wake` to 1 for callers that cannot (the reference's one per event).
//  - Tests run without the thread: DispatchOnce() and ExpireOnce() with a ManualClock, no sleeps.
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "epp/plugin.h"
#include "epp/request.h"
#include "flowcontrol/eviction.h"
#include "flowcontrol/policies.h"

namespace epp::flowcontrol {

// The reference's QueueOutcome, with its two "Other" outcomes narrowed to the one cause they
// carry in practice (the controller is shutting down).
enum class Outcome : uint8_t {
  kDispatched,
  kRejectedCapacity,        // capacity limits met at Enqueue
  kRejectedNoEndpoints,     // capacity limits met while the pool has no endpoints
  kRejectedShuttingDown,    // reference: RejectedOther wrapping ErrFlowControllerNotRunning
  kEvictedTTL,              // queue-wait budget (defaultRequestTTL) spent
  kEvictedNoEndpoints,      // queue-wait budget (noEndpointRequestTTL) spent while the pool was empty
  kEvictedContextCancelled, // Cancel(): the client went away
  kEvictedShuttingDown,     // reference: EvictedOther wrapping ErrFlowControllerNotRunning
};
inline constexpr size_t kNumOutcomes = 8;

// The reference's QueueOutcome.String() (its metrics' `outcome` label): the shutdown outcomes are
// "RejectedOther" / "EvictedOther" there.
std::string_view OutcomeName(Outcome outcome);

// What the EPP answers for an outcome: `status` 0 for kDispatched (the request goes on), else the
// HTTP status of the ImmediateResponse, the x-llm-d-request-dropped-reason value and a message.
struct DropAnswer {
  int status = 0;
  std::string_view reason;
  std::string message;
};
// translateFlowControlOutcome of llm-d's admission: 429 is backpressure (capacity exists but is
// contended), 503 is unavailability. `pool_empty` is asked only for kEvictedTTL: the reference
// probes the pool then and answers 503 rejected-no-endpoints when it has emptied.
DropAnswer AnswerFor(Outcome outcome, bool pool_empty = false);

// Why a dispatched (in-flight) request was evicted; the reference answers 429 with these reasons.
enum class EvictionReason : uint8_t { kEvicted, kQueuePressure, kPriority };
DropAnswer EvictionAnswer(EvictionReason reason);

inline constexpr std::string_view kDroppedReasonHeader = "x-llm-d-request-dropped-reason";

// The reference's defaults (controller/config.go, registry/config.go).
inline constexpr int64_t kDefaultRequestTtlUs = 60'000'000;
inline constexpr uint64_t kDefaultBandMaxBytes = 1'000'000'000;
inline constexpr uint64_t kDefaultBandMaxRequests = 5000;

struct BandConfig {
  int priority = 0;
  const FairnessPolicy* fairness = nullptr;  // required
  const OrderingPolicy* ordering = nullptr;  // required
  uint64_t max_bytes = kDefaultBandMaxBytes;      // > 0: per-band limits are always bounded
  uint64_t max_requests = kDefaultBandMaxRequests;
};

struct ControllerConfig {
  uint64_t max_bytes = 0;     // global; 0: no limit
  uint64_t max_requests = 0;  // global; 0: no limit
  // Queue-wait budgets; 0 disables expiry in that regime.
  int64_t default_request_ttl_us = kDefaultRequestTtlUs;
  int64_t no_endpoint_request_ttl_us = kDefaultRequestTtlUs;
  // Configured bands; band 0 is added from `default_band` when absent (as the reference does).
  std::vector<BandConfig> bands;
  // Templates for priorities no band names, provisioned on first use. Negative priorities use
  // `default_negative_band` when set.
  BandConfig default_band;
  std::optional<BandConfig> default_negative_band;
  const UsageLimitPolicy* usage_limit = nullptr;  // null: no gating below saturation 1
  // In-flight eviction (enableEviction): requests registered with TrackInflight may be evicted
  // to reclaim capacity for queued higher-priority work (eviction.h). The reference fixes the
  // filter and the order (sheddable-eviction-filter, priority-then-time-eviction-order-policy);
  // BuildControllerConfig resolves them. Without both, eviction stays off.
  bool enable_eviction = false;
  const EvictionFilter* eviction_filter = nullptr;
  const EvictionOrder* eviction_order = nullptr;
  int max_revocations_per_decision = 2;
  int64_t eviction_confirmation_grace_us = 500'000;
  int64_t eviction_confirmation_timeout_us = 10'000'000;
  int64_t poll_interval_us = 1000;
  int max_dispatches_per_wake = 0;  // 0: dispatch while the pool has capacity
  // Policy plugins the config owns (defaults the builder created); keeps the pointers above alive.
  std::vector<std::shared_ptr<const void>> owned;
};

// The pool as the dispatcher sees it at the start of a cycle.
struct PoolSample {
  double saturation = 0;  // effective: the worse stage (StageSaturation)
  double prefill = -1;    // per stage, -1 when the stage has no endpoints
  double decode = -1;
  bool empty = false;     // the candidate pool has no endpoints
};
using PoolSampler = std::function<PoolSample()>;

struct EnqueueRequest {
  std::string request_id;
  std::string fairness_id;  // empty: kDefaultFlowId
  int priority = 0;
  uint64_t bytes = 0;
  int64_t received_us = -1;  // when the EPP received it (the SLO base); < 0: now
  int64_t slo_ttft_ms = -1;  // SloTtftMs() of the request
};

struct Completion {
  Outcome outcome = Outcome::kDispatched;
  int64_t waited_us = 0;  // time in the layer, enqueue to outcome
  int priority = 0;       // the band it waited in
};
using DoneCallback = std::function<void(const Completion&)>;

using Handle = uint64_t;
inline constexpr Handle kNoHandle = 0;

// A snapshot for /metrics and `eppctl top` (llm-d's flow-control metrics).
struct FlowStats {
  std::string flow_id;
  int priority = 0;
  size_t queued = 0;
  uint64_t bytes = 0;
};
struct BandStats {
  int priority = 0;
  size_t queued = 0;
  uint64_t bytes = 0;
  uint64_t max_requests = 0;
  uint64_t max_bytes = 0;
  double ceiling = 1;  // the usage-limit policy's last ceiling for the band
  std::array<uint64_t, kNumOutcomes> outcomes{};
};
struct WaitHistogram {
  std::vector<uint64_t> buckets;
  double sum_s = 0;
  uint64_t count = 0;
};
struct ControllerStats {
  size_t queued = 0;
  uint64_t bytes = 0;
  uint64_t max_requests = 0;  // global limits; 0: none
  uint64_t max_bytes = 0;
  std::vector<BandStats> bands;  // highest priority first
  std::vector<FlowStats> flows;  // non-empty flows, by band then flow id
  std::array<uint64_t, kNumOutcomes> outcomes{};
  // Time in the layer (enqueue to outcome) by outcome, as llm-d's
  // flow_control_request_queue_duration_seconds: per-bucket (not cumulative) counts by upper
  // bound in seconds; buckets has wait_bounds_s.size() + 1 entries (the last is +Inf).
  std::vector<double> wait_bounds_s;
  std::array<WaitHistogram, kNumOutcomes> waits{};
  PoolSample pool;  // the last cycle's sample
  uint64_t dispatch_cycles = 0;
  std::optional<EvictionStats> eviction;  // with enableEviction
};

class FlowController {
 public:
  // REQUIRES: every band (and the templates) names a fairness and an ordering policy.
  FlowController(ControllerConfig config, PoolSampler pool, const Clock& clock);
  ~FlowController();  // Shutdown()
  FlowController(const FlowController&) = delete;
  FlowController& operator=(const FlowController&) = delete;

  // Queues the request, or answers it at once (capacity, shutdown: the callback runs before this
  // returns and the handle is kNoHandle).
  Handle Enqueue(EnqueueRequest request, DoneCallback done);
  // Removes a queued request at once and answers it kEvictedContextCancelled. False when it was
  // already answered (dispatched, expired) or the handle is unknown.
  bool Cancel(Handle handle);

  // One dispatch cycle: samples the pool, computes the bands' ceilings and dispatches at most one
  // request. True when one was dispatched. One caller at a time (the dispatcher, or a test).
  bool DispatchOnce();
  // Expires requests whose queue-wait budget is spent at `now_us`; returns how many.
  size_t ExpireOnce(int64_t now_us);

  // A dispatched request of `flow_id` finished: the band's fairness policy learns its usage.
  void Completed(int priority, std::string_view flow_id, const ResponseUsage& usage);

  // In-flight eviction. A dispatched request that now runs on `endpoint`: with eviction on it may
  // be chosen as a victim, and `evict` is then called once (on the dispatcher's thread, no lock
  // of the layer held) with the answer to send; its stream must end and UntrackInflight follow.
  // kNoHandle (nothing tracked) when eviction is off.
  Handle TrackInflight(std::string request_id, int priority, std::string endpoint, InflightEvictor::EvictFn evict);
  // The request's stream ended (response complete, client gone, or evicted). kNoHandle: no-op.
  void UntrackInflight(Handle handle);
  bool eviction_enabled() const { return evictor_ != nullptr; }

  // The dispatcher thread.
  void Start();
  void NotifyCapacity();  // capacity freed (a request released): run a cycle now
  // Stops the dispatcher, answers every queued request kEvictedShuttingDown, and every later
  // Enqueue kRejectedShuttingDown. Idempotent.
  void Shutdown();

  ControllerStats Stats() const;
  size_t queued() const;

 private:
  struct Item;
  class Flow;
  struct Band;

  Band& BandFor(int priority);  // REQUIRES: mu_
  void Unlink(Item* item);      // out of its flow, band and TTL list; REQUIRES: mu_
  void Finish(Band& band, Outcome outcome, int64_t waited_us);  // counters; REQUIRES: mu_
  void Run();
  // The reference's maybeReclaim at a head-of-line break at band `brk` (eviction on).
  struct Blocked {
    double saturation = 0;
    std::vector<int> priorities;
    std::vector<double> ceilings;
    std::vector<size_t> queued;
    size_t brk = 0;
  };
  void MaybeReclaim(const Blocked& b);

  const Clock& clock_;
  PoolSampler pool_;
  ControllerConfig config_;

  mutable std::mutex mu_;
  std::map<int, std::unique_ptr<Band>, std::greater<int>> bands_;  // highest priority first
  std::vector<int> priorities_;                                     // keys of bands_, in order
  std::vector<double> ceilings_;
  absl::flat_hash_map<Handle, Item*> items_;
  Item* ttl_head_ = nullptr;  // queued items in arrival order: their TTL deadlines are in this order
  Item* ttl_tail_ = nullptr;
  Handle next_handle_ = 1;
  uint64_t next_seq_ = 1;
  size_t queued_ = 0;
  uint64_t bytes_ = 0;
  bool shutting_down_ = false;
  // Whether the pool had endpoints at the last cycle, and since when (a regime change restarts
  // the queue-wait budget, as in the reference).
  bool pool_empty_ = false;
  int64_t regime_since_us_ = 0;
  PoolSample last_pool_;
  uint64_t dispatch_cycles_ = 0;
  std::array<uint64_t, kNumOutcomes> outcomes_{};
  std::array<WaitHistogram, kNumOutcomes> waits_{};

  // Dispatcher.
  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  bool wake_ = false;
  bool stop_ = false;
  std::thread thread_;

  std::unique_ptr<InflightEvictor> evictor_;  // with enableEviction
};

}  // namespace epp::flowcontrol
