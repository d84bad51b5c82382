// In-flight eviction (eviction.h has the contract).
#include "flowcontrol/eviction.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "flowcontrol/controller.h"

namespace epp::flowcontrol {
namespace {

// llm-d's flow_control_revocation_confirmation_seconds buckets.
constexpr double kConfirmationBoundsS[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
constexpr size_t kConfirmationBuckets = sizeof(kConfirmationBoundsS) / sizeof(kConfirmationBoundsS[0]) + 1;

}  // namespace

InflightEvictor::InflightEvictor(EvictionConfig config, const Clock& clock)
    : config_(config), clock_(clock), confirmation_buckets_(kConfirmationBuckets, 0) {}

InflightEvictor::Handle InflightEvictor::Track(std::string request_id, int priority, std::string endpoint, EvictFn evict) {
  std::lock_guard<std::mutex> lock(mu_);
  const Handle h = next_++;
  Entry& e = tracked_[h];
  e.request_id = std::move(request_id);
  e.endpoint = std::move(endpoint);
  e.priority = priority;
  e.dispatch_us = clock_.NowMicros();
  e.evict = std::move(evict);
  const InflightItem item{e.request_id, e.priority, e.dispatch_us, e.endpoint};
  e.evictable = config_.filter->Accept(item);
  if (e.evictable) {
    e.key = {config_.order->Key(item), h};
    queue_.insert(e.key);
  }
  return h;
}

void InflightEvictor::Untrack(Handle handle) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = tracked_.find(handle); it != tracked_.end()) {
    if (it->second.evictable) queue_.erase(it->second.key);
    tracked_.erase(it);
    return;
  }
  // An evicted request's stream ended: its revocation is confirmed and starts cooling.
  if (auto it = outstanding_.find(handle); it != outstanding_.end()) {
    const int64_t now = clock_.NowMicros();
    RecordConfirmationLocked(static_cast<double>(now - it->second.issued_us) / 1e6);
    ++confirmed_;
    CoolLocked(it->second, now);
    outstanding_.erase(it);
  }
}

void InflightEvictor::RecordConfirmationLocked(double seconds) {
  size_t b = 0;
  while (b < kConfirmationBuckets - 1 && seconds > kConfirmationBoundsS[b]) ++b;
  ++confirmation_buckets_[b];
  confirmation_sum_s_ += seconds;
  ++confirmation_count_;
}

void InflightEvictor::CoolLocked(const Revocation& r, int64_t now_us) {
  cooling_.push_back({r.credit, now_us + config_.grace_us});
}

void InflightEvictor::SweepLocked(int64_t now_us) {
  for (auto it = outstanding_.begin(); it != outstanding_.end();) {
    if (now_us - it->second.issued_us < config_.timeout_us) {
      ++it;
      continue;
    }
    ++timed_out_;
    CoolLocked(it->second, now_us);
    outstanding_.erase(it++);
  }
  auto kept = std::remove_if(cooling_.begin(), cooling_.end(), [&](const Cooling& c) {
    if (now_us < c.expires_us) return false;
    pending_reclaim_ -= c.credit;
    return true;
  });
  cooling_.erase(kept, cooling_.end());
  // Nothing outstanding or cooling: nothing pending (no floating-point residue either).
  if (pending_reclaim_ < 0 || (outstanding_.empty() && cooling_.empty())) pending_reclaim_ = 0;
}

bool InflightEvictor::GateOpen(int64_t now_us) {
  std::lock_guard<std::mutex> lock(mu_);
  SweepLocked(now_us);
  return outstanding_.empty() && cooling_.empty();
}

std::optional<int> InflightEvictor::VictimPriority() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_.empty()) return std::nullopt;
  return tracked_.at(queue_.begin()->second).priority;
}

int InflightEvictor::Reclaim(double saturation, double ceiling, int demand_priority) {
  std::vector<EvictFn> victims;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t in_flight = tracked_.size(), evictable = queue_.size();
    if (in_flight == 0 || evictable == 0) return 0;
    const double credit = saturation / static_cast<double>(in_flight);
    if (!(credit > 0) || !std::isfinite(credit)) return 0;
    reclaim_target_ = saturation - ceiling;
    const double net = reclaim_target_ - pending_reclaim_;
    if (net < 0 || (net == 0 && pending_reclaim_ > 0)) return 0;
    // The gate is saturation >= ceiling: reclaim strictly more than the deficit, at least one.
    int n = std::max(1, static_cast<int>(std::ceil(net / credit)));
    n = std::min({n, std::max(1, config_.max_revocations_per_decision), static_cast<int>(evictable)});
    const int64_t now = clock_.NowMicros();
    for (int i = 0; i < n && !queue_.empty(); ++i) {
      const Handle h = queue_.begin()->second;
      auto it = tracked_.find(h);
      if (it->second.priority >= demand_priority) break;  // only lower-priority work is revoked
      queue_.erase(queue_.begin());
      victims.push_back(std::move(it->second.evict));
      tracked_.erase(it);
      outstanding_[h] = {credit, now};
      pending_reclaim_ += credit;
    }
    if (!victims.empty()) issued_[demand_priority] += victims.size();
  }
  const DropAnswer answer = EvictionAnswer(EvictionReason::kEvicted);
  for (EvictFn& evict : victims)
    if (evict) evict(answer);
  return static_cast<int>(victims.size());
}

EvictionStats InflightEvictor::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  EvictionStats s;
  s.in_flight = tracked_.size();
  s.evictable = queue_.size();
  s.outstanding = outstanding_.size();
  s.pending_reclaim = pending_reclaim_;
  s.reclaim_target = reclaim_target_;
  s.issued = issued_;
  s.confirmed = confirmed_;
  s.timed_out = timed_out_;
  s.confirmation_buckets = confirmation_buckets_;
  s.confirmation_bounds_s.assign(std::begin(kConfirmationBoundsS), std::end(kConfirmationBoundsS));
  s.confirmation_sum_s = confirmation_sum_s_;
  s.confirmation_count = confirmation_count_;
  return s;
}

}  // namespace epp::flowcontrol
