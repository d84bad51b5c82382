// The flow-control layer: bands, flow queues (indexed binary heaps), the TTL list, dispatch and
// the dispatcher thread. controller.h has the contract and the threading model.
#include "flowcontrol/controller.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <utility>

namespace epp::flowcontrol {
namespace {

// llm-d's flow_control_request_queue_duration_seconds buckets.
constexpr double kWaitBoundsS[] = {0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1,
                                   0.25,   0.5,    1.0,   2.5,   5.0,  10.0,  30.0,  60.0};
constexpr size_t kWaitBuckets = sizeof(kWaitBoundsS) / sizeof(kWaitBoundsS[0]) + 1;

constexpr size_t Index(Outcome o) { return static_cast<size_t>(o); }

}  // namespace

std::string_view OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kDispatched: return "Dispatched";
    case Outcome::kRejectedCapacity: return "RejectedCapacity";
    case Outcome::kRejectedNoEndpoints: return "RejectedNoEndpoints";
    case Outcome::kRejectedShuttingDown: return "RejectedOther";
    case Outcome::kEvictedTTL: return "EvictedTTL";
    case Outcome::kEvictedNoEndpoints: return "EvictedNoEndpoints";
    case Outcome::kEvictedContextCancelled: return "EvictedContextCancelled";
    case Outcome::kEvictedShuttingDown: return "EvictedOther";
  }
  return "Unknown";
}

DropAnswer AnswerFor(Outcome outcome, bool pool_empty) {
  // The messages follow the reference's: its answer's prefix, then the error chain it wraps.
  constexpr std::string_view kTtlNoEndpoints =
      "request timed out in queue and no endpoints are available: request evicted from queue: request TTL expired";
  switch (outcome) {
    case Outcome::kDispatched: return {};
    case Outcome::kRejectedCapacity:
      return {429, "rejected-saturated", "request rejected pre-queue: queue at capacity"};
    case Outcome::kRejectedNoEndpoints:
      return {503, "rejected-no-endpoints", "no endpoints available: request rejected pre-queue: no endpoints available"};
    case Outcome::kEvictedNoEndpoints:
      return {503, "rejected-no-endpoints", std::string(kTtlNoEndpoints) + ": no endpoints available"};
    case Outcome::kEvictedTTL:
      if (pool_empty) return {503, "rejected-no-endpoints", std::string(kTtlNoEndpoints)};
      return {429, "rejected-ttl-expired", "request timed out in queue: request evicted from queue: request TTL expired"};
    case Outcome::kEvictedContextCancelled:
      return {503, "rejected-context-cancelled",
              "client disconnected: request evicted from queue: request context cancelled"};
    case Outcome::kRejectedShuttingDown:
      return {503, "rejected-shutting-down",
              "flow controller shutting down: request rejected pre-queue: flow controller is not running"};
    case Outcome::kEvictedShuttingDown:
      return {503, "rejected-shutting-down",
              "flow controller shutting down: request evicted from queue: flow controller is not running"};
  }
  return {500, "", "unhandled flow control outcome"};
}

DropAnswer EvictionAnswer(EvictionReason reason) {
  // The reference's ImmediateResponse for an evicted in-flight request is always 429.
  switch (reason) {
    case EvictionReason::kEvicted: return {429, "evicted", "request evicted by flow control"};
    case EvictionReason::kQueuePressure: return {429, "evicted-queue-pressure", "request evicted by flow control"};
    case EvictionReason::kPriority: return {429, "evicted-priority", "request evicted by flow control"};
  }
  return {429, "evicted", "request evicted by flow control"};
}

// ---- Items, flows, bands ----

struct FlowController::Item {
  QueuedItem q;  // q.flow_id views the flow's id
  OrderingKey key;
  Handle handle = kNoHandle;
  DoneCallback done;
  Flow* flow = nullptr;
  Band* band = nullptr;
  size_t heap_index = 0;
  Item* prev = nullptr;  // TTL list
  Item* next = nullptr;
  std::string request_id;
};

// One flow's queue: a binary min-heap on the ordering key that knows each item's position, so a
// cancelled item leaves in O(log n).
class FlowController::Flow final : public FlowQueue {
 public:
  Flow(std::string id, Band* band) : id_(std::move(id)), band_(band) {}
  std::string_view flow_id() const override { return id_; }
  size_t size() const override { return heap_.size(); }
  uint64_t bytes() const override { return bytes_; }
  const QueuedItem& head() const override { return heap_.front()->q; }
  OrderingKey head_key() const override { return heap_.front()->key; }

  Band* band() const { return band_; }
  Item* front() const { return heap_.front(); }

  void Push(Item* item) {
    item->heap_index = heap_.size();
    heap_.push_back(item);
    bytes_ += item->q.bytes;
    Up(item->heap_index);
  }
  void Remove(Item* item) {
    const size_t i = item->heap_index;
    assert(i < heap_.size() && heap_[i] == item);
    bytes_ -= item->q.bytes;
    Item* last = heap_.back();
    heap_.pop_back();
    if (last == item) return;
    heap_[i] = last;
    last->heap_index = i;
    Up(i);
    Down(last->heap_index);
  }

 private:
  bool Less(size_t a, size_t b) const { return heap_[a]->key < heap_[b]->key; }
  void Swap(size_t a, size_t b) {
    std::swap(heap_[a], heap_[b]);
    heap_[a]->heap_index = a;
    heap_[b]->heap_index = b;
  }
  void Up(size_t i) {
    while (i > 0) {
      const size_t parent = (i - 1) / 2;
      if (!Less(i, parent)) break;
      Swap(i, parent);
      i = parent;
    }
  }
  void Down(size_t i) {
    for (;;) {
      const size_t l = 2 * i + 1, r = l + 1;
      size_t best = i;
      if (l < heap_.size() && Less(l, best)) best = l;
      if (r < heap_.size() && Less(r, best)) best = r;
      if (best == i) return;
      Swap(i, best);
      i = best;
    }
  }

  std::string id_;
  Band* band_;
  std::vector<Item*> heap_;
  uint64_t bytes_ = 0;
};

struct FlowController::Band {
  BandConfig config;
  std::unique_ptr<FairnessState> fairness;
  // Non-empty flows only: a flow's queue is destroyed when it empties, so nothing here grows with
  // the number of tenants ever seen.
  absl::flat_hash_map<std::string_view, std::unique_ptr<Flow>> flows;
  size_t queued = 0;
  uint64_t bytes = 0;
  double ceiling = 1;
  std::array<uint64_t, kNumOutcomes> outcomes{};
};

// ---- FlowController ----

FlowController::FlowController(ControllerConfig config, PoolSampler pool, const Clock& clock)
    : clock_(clock), pool_(std::move(pool)), config_(std::move(config)) {
  for (WaitHistogram& h : waits_) h.buckets.assign(kWaitBuckets, 0);
  if (config_.enable_eviction && config_.eviction_filter != nullptr && config_.eviction_order != nullptr) {
    EvictionConfig e;
    e.filter = config_.eviction_filter;
    e.order = config_.eviction_order;
    e.max_revocations_per_decision = config_.max_revocations_per_decision;
    e.grace_us = config_.eviction_confirmation_grace_us;
    e.timeout_us = config_.eviction_confirmation_timeout_us;
    evictor_ = std::make_unique<InflightEvictor>(e, clock_);
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const BandConfig& b : config_.bands) BandFor(b.priority);
  BandFor(0);  // the reference always has band 0 (from the default template when not configured)
}

FlowController::~FlowController() { Shutdown(); }

FlowController::Band& FlowController::BandFor(int priority) {
  auto it = bands_.find(priority);
  if (it != bands_.end()) return *it->second;
  BandConfig cfg = config_.default_band;
  if (priority < 0 && config_.default_negative_band) cfg = *config_.default_negative_band;
  for (const BandConfig& b : config_.bands) {
    if (b.priority == priority) cfg = b;
  }
  cfg.priority = priority;
  assert(cfg.fairness != nullptr && cfg.ordering != nullptr);
  auto band = std::make_unique<Band>();
  band->fairness = cfg.fairness->NewBandState(priority);
  band->config = cfg;
  Band& ref = *band;
  bands_.emplace(priority, std::move(band));
  priorities_.clear();
  for (const auto& [p, b] : bands_) priorities_.push_back(p);
  ceilings_.assign(priorities_.size(), 1.0);
  return ref;
}

void FlowController::Finish(Band& band, Outcome outcome, int64_t waited_us) {
  ++band.outcomes[Index(outcome)];
  ++outcomes_[Index(outcome)];
  WaitHistogram& h = waits_[Index(outcome)];
  const double s = static_cast<double>(std::max<int64_t>(waited_us, 0)) / 1e6;
  size_t b = 0;
  while (b < kWaitBuckets - 1 && s > kWaitBoundsS[b]) ++b;
  ++h.buckets[b];
  h.sum_s += s;
  ++h.count;
}

Handle FlowController::Enqueue(EnqueueRequest request, DoneCallback done) {
  Completion rejected;
  Handle queued = kNoHandle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Read under the lock: arrival order must be enqueue-time order for the TTL list.
    const int64_t now = clock_.NowMicros();
    Band& band = BandFor(request.priority);
    rejected.priority = request.priority;
    if (shutting_down_) {
      rejected.outcome = Outcome::kRejectedShuttingDown;
    } else {
      // The reference's hasCapacity: global limits (0: none), then the band's.
      const uint64_t b = request.bytes;
      const bool full = (config_.max_bytes > 0 && bytes_ + b > config_.max_bytes) ||
                        (config_.max_requests > 0 && queued_ + 1 > config_.max_requests) ||
                        (band.config.max_bytes > 0 && band.bytes + b > band.config.max_bytes) ||
                        (band.config.max_requests > 0 && band.queued + 1 > band.config.max_requests);
      if (full) rejected.outcome = pool_empty_ ? Outcome::kRejectedNoEndpoints : Outcome::kRejectedCapacity;
    }
    if (rejected.outcome == Outcome::kDispatched) {
      auto owned = std::make_unique<Item>();
      Item* item = owned.get();
      item->handle = next_handle_++;
      item->done = std::move(done);
      item->request_id = std::move(request.request_id);
      item->band = &band;
      std::string flow_id = request.fairness_id.empty() ? std::string(kDefaultFlowId) : std::move(request.fairness_id);
      auto fit = band.flows.find(std::string_view(flow_id));
      if (fit == band.flows.end()) {
        auto flow = std::make_unique<Flow>(std::move(flow_id), &band);
        const std::string_view key = flow->flow_id();
        fit = band.flows.emplace(key, std::move(flow)).first;
      }
      Flow* flow = fit->second.get();
      item->flow = flow;
      QueuedItem& q = item->q;
      q.seq = next_seq_++;
      q.enqueue_us = now;
      q.received_us = request.received_us >= 0 ? request.received_us : now;
      q.ttl_us = config_.default_request_ttl_us;
      q.slo_ttft_ms = request.slo_ttft_ms;
      q.priority = request.priority;
      q.bytes = request.bytes;
      q.flow_id = flow->flow_id();
      item->key = band.config.ordering->Key(q);
      const bool was_empty = flow->size() == 0;
      const OrderingKey old_head = was_empty ? OrderingKey{} : flow->head_key();
      flow->Push(item);
      if (was_empty || item->key < old_head) band.fairness->HeadChanged(*flow);
      ++band.queued;
      band.bytes += q.bytes;
      ++queued_;
      bytes_ += q.bytes;
      // Arrival order is TTL-deadline order: every item has the same budget in a regime.
      item->prev = ttl_tail_;
      (ttl_tail_ ? ttl_tail_->next : ttl_head_) = item;
      ttl_tail_ = item;
      items_.emplace(item->handle, owned.release());
      queued = item->handle;
    } else {
      Finish(band, rejected.outcome, 0);
    }
  }
  if (queued != kNoHandle) {
    NotifyCapacity();  // wakes the dispatcher: a cycle runs for every arrival, as in the reference
    return queued;
  }
  if (done) done(rejected);
  return kNoHandle;
}

void FlowController::Unlink(Item* item) {
  Flow* flow = item->flow;
  Band& band = *item->band;
  const bool was_head = flow->front() == item;
  flow->Remove(item);
  if (was_head) band.fairness->HeadChanged(*flow);  // also when it emptied
  --band.queued;
  band.bytes -= item->q.bytes;
  --queued_;
  bytes_ -= item->q.bytes;
  (item->prev ? item->prev->next : ttl_head_) = item->next;
  (item->next ? item->next->prev : ttl_tail_) = item->prev;
  item->prev = item->next = nullptr;
  items_.erase(item->handle);
  if (flow->size() == 0) band.flows.erase(band.flows.find(flow->flow_id()));  // destroys the flow
  item->flow = nullptr;
}

bool FlowController::Cancel(Handle handle) {
  std::unique_ptr<Item> item;
  Completion c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = items_.find(handle);
    if (it == items_.end()) return false;
    item.reset(it->second);
    const int64_t waited = clock_.NowMicros() - item->q.enqueue_us;
    Unlink(item.get());
    c = {Outcome::kEvictedContextCancelled, waited, item->q.priority};
    Finish(*item->band, c.outcome, waited);
  }
  if (item->done) item->done(c);
  return true;
}

bool FlowController::DispatchOnce() {
  PoolSample pool;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queued_ == 0) return false;
  }
  // Outside the lock: the detector reads the scheduler's state and may take its own locks.
  if (pool_) pool = pool_();
  std::unique_ptr<Item> item;
  Completion c;
  std::optional<Blocked> blocked;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = clock_.NowMicros();
    ++dispatch_cycles_;
    last_pool_ = pool;
    if (pool.empty != pool_empty_) {
      pool_empty_ = pool.empty;
      regime_since_us_ = now;
    }
    if (queued_ == 0) return false;
    std::fill(ceilings_.begin(), ceilings_.end(), 1.0);
    if (config_.usage_limit != nullptr) config_.usage_limit->ComputeLimits(pool.saturation, priorities_, ceilings_);
    size_t i = 0;
    Flow* flow = nullptr;
    for (auto& [priority, band] : bands_) {
      band->ceiling = ceilings_[i++];
      if (flow != nullptr) continue;  // ceilings of the rest still refresh, for Stats
      // Head-of-line blocking: the first gated band stops the cycle (ceilings never increase
      // down the list), as in the reference's dispatch cycle. With eviction, the break may revoke
      // in-flight lower-priority work (MaybeReclaim, outside the lock).
      if (Gated(pool.saturation, band->ceiling)) {
        if (evictor_) {
          Blocked b;
          b.saturation = pool.saturation;
          b.priorities = priorities_;
          b.ceilings = ceilings_;
          b.brk = i - 1;
          for (const auto& [p, bd] : bands_) b.queued.push_back(bd->queued);
          blocked = std::move(b);
        }
        break;
      }
      if (band->queued == 0) continue;
      const FlowQueue* picked = band->fairness->Pick(now);
      if (picked == nullptr) continue;
      flow = static_cast<Flow*>(const_cast<FlowQueue*>(picked));
    }
    if (flow == nullptr) {
      if (!blocked) return false;
    } else {
      item.reset(flow->front());
      Band& band = *item->band;
      band.config.fairness->Dispatched(item->q, now);  // before Unlink: q.flow_id views the flow
      const int64_t waited = now - item->q.enqueue_us;
      Unlink(item.get());
      c = {Outcome::kDispatched, waited, item->q.priority};
      Finish(band, c.outcome, waited);
    }
  }
  if (!item) {
    MaybeReclaim(*blocked);
    return false;
  }
  if (item->done) item->done(c);
  return true;
}

void FlowController::MaybeReclaim(const Blocked& b) {
  if (!evictor_->GateOpen(clock_.NowMicros())) return;  // stop-and-wait: a decision is in flight
  const std::optional<int> victim = evictor_->VictimPriority();
  if (!victim) return;  // nothing evictable
  for (size_t j = b.brk; j < b.priorities.size(); ++j) {
    if (b.priorities[j] <= *victim) return;  // no queued work outranks the best victim
    // A zero ceiling says the band must not dispatch whatever the load: reclaiming cannot help.
    if (b.ceilings[j] <= 0) continue;
    if (b.saturation < b.ceilings[j]) continue;  // not blocked: it dispatches on a later cycle
    if (b.queued[j] == 0) continue;
    evictor_->Reclaim(b.saturation, b.ceilings[j], b.priorities[j]);
    return;
  }
}

Handle FlowController::TrackInflight(std::string request_id, int priority, std::string endpoint,
                                     InflightEvictor::EvictFn evict) {
  if (!evictor_) return kNoHandle;
  return evictor_->Track(std::move(request_id), priority, std::move(endpoint), std::move(evict));
}

void FlowController::UntrackInflight(Handle handle) {
  if (evictor_ && handle != kNoHandle) evictor_->Untrack(handle);
}

size_t FlowController::ExpireOnce(int64_t now_us) {
  std::vector<std::unique_ptr<Item>> expired;
  Outcome outcome;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t budget = pool_empty_ ? config_.no_endpoint_request_ttl_us : config_.default_request_ttl_us;
    outcome = pool_empty_ ? Outcome::kEvictedNoEndpoints : Outcome::kEvictedTTL;
    if (budget <= 0) return 0;
    // The budget is charged from the later of enqueue and the last regime change; arrival order
    // is deadline order, so expiry stops at the first item still within its budget.
    while (ttl_head_ != nullptr && now_us >= std::max(ttl_head_->q.enqueue_us, regime_since_us_) + budget) {
      Item* item = ttl_head_;
      Band& band = *item->band;
      Unlink(item);
      Finish(band, outcome, now_us - item->q.enqueue_us);
      expired.emplace_back(item);
    }
  }
  for (auto& item : expired) {
    if (item->done) item->done({outcome, now_us - item->q.enqueue_us, item->q.priority});
  }
  return expired.size();
}

void FlowController::Completed(int priority, std::string_view flow_id, const ResponseUsage& usage) {
  const FairnessPolicy* policy = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    policy = BandFor(priority).config.fairness;
  }
  policy->Completed(flow_id.empty() ? kDefaultFlowId : flow_id, usage, clock_.NowMicros());
}

void FlowController::Start() {
  std::lock_guard<std::mutex> lock(wake_mu_);
  if (thread_.joinable() || stop_) return;
  thread_ = std::thread([this] { Run(); });
}

void FlowController::NotifyCapacity() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    wake_ = true;
  }
  wake_cv_.notify_one();
}

void FlowController::Run() {
  for (;;) {
    int dispatched = 0;
    while (DispatchOnce()) {
      if (config_.max_dispatches_per_wake > 0 && ++dispatched >= config_.max_dispatches_per_wake) break;
    }
    ExpireOnce(clock_.NowMicros());
    const bool busy = queued() > 0;
    std::unique_lock<std::mutex> lock(wake_mu_);
    if (stop_) return;
    // While requests wait, re-check on a timer: a scrape-based detector frees capacity without
    // telling anyone, and TTLs run out. Idle, sleep until an Enqueue.
    if (busy) {
      wake_cv_.wait_for(lock, std::chrono::microseconds(std::max<int64_t>(config_.poll_interval_us, 1)),
                        [this] { return wake_ || stop_; });
    } else {
      wake_cv_.wait(lock, [this] { return wake_ || stop_; });
    }
    if (stop_) return;
    wake_ = false;
  }
}

void FlowController::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    stop_ = true;
  }
  wake_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::vector<std::unique_ptr<Item>> drained;
  const int64_t now = clock_.NowMicros();
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
    while (ttl_head_ != nullptr) {
      Item* item = ttl_head_;
      Band& band = *item->band;
      Unlink(item);
      Finish(band, Outcome::kEvictedShuttingDown, now - item->q.enqueue_us);
      drained.emplace_back(item);
    }
  }
  for (auto& item : drained) {
    if (item->done) item->done({Outcome::kEvictedShuttingDown, now - item->q.enqueue_us, item->q.priority});
  }
}

size_t FlowController::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_;
}

ControllerStats FlowController::Stats() const {
  ControllerStats s;
  std::lock_guard<std::mutex> lock(mu_);
  s.queued = queued_;
  s.bytes = bytes_;
  s.max_requests = config_.max_requests;
  s.max_bytes = config_.max_bytes;
  s.outcomes = outcomes_;
  s.wait_bounds_s.assign(std::begin(kWaitBoundsS), std::end(kWaitBoundsS));
  s.waits = waits_;
  s.pool = last_pool_;
  s.dispatch_cycles = dispatch_cycles_;
  if (evictor_) s.eviction = evictor_->Stats();
  for (const auto& [priority, band] : bands_) {
    s.bands.push_back({priority, band->queued, band->bytes, band->config.max_requests, band->config.max_bytes,
                       band->ceiling, band->outcomes});
    const size_t first = s.flows.size();
    for (const auto& [id, flow] : band->flows) s.flows.push_back({std::string(id), priority, flow->size(), flow->bytes()});
    std::sort(s.flows.begin() + static_cast<std::ptrdiff_t>(first), s.flows.end(),
              [](const FlowStats& a, const FlowStats& b) { return a.flow_id < b.flow_id; });
  }
  return s;
}

}  // namespace epp::flowcontrol
