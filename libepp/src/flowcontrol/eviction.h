// Private: in-flight eviction for the flow-control layer (llm-d Router's enableEviction: its
// eviction queue, request evictor and reclamation controller). Dispatched requests are tracked
// while they run; those the EvictionFilter accepts wait in an eviction queue in EvictionOrder.
// When a dispatch cycle stops at a gated band that has queued work of a higher priority than the
// best victim, Reclaim revokes enough victims to bring saturation under that band's ceiling:
//
//   reclaim target = saturation - ceiling          credit = saturation / tracked in-flight requests
//   n = max(1, ceil((target - pending reclaim) / credit)), at most max_revocations_per_decision
//       and the evictable count; victims only while their priority is below the demand's.
//
// Pacing is stop-and-wait, as the reference's: after a decision, no other runs until every
// revocation is confirmed (the evicted stream ended: Untrack) or timed out, and then `grace_us`
// has passed (the engine aborting, KV freed, the next scrape seeing it). A revocation's credit is
// "pending reclaim" until its grace ends.
//
// Thread-safety: one mutex; evict callbacks run outside it, on the thread that called Reclaim.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "flowcontrol/policies.h"

namespace epp::flowcontrol {

struct DropAnswer;

struct EvictionConfig {
  const EvictionFilter* filter = nullptr;  // required
  const EvictionOrder* order = nullptr;    // required
  int max_revocations_per_decision = 2;    // the reference's default
  int64_t grace_us = 500'000;              // after confirmation (10 ms for the concurrency detector)
  int64_t timeout_us = 10'000'000;         // an unconfirmed revocation counts as confirmed after this
};

struct EvictionStats {
  size_t in_flight = 0;   // tracked (dispatched, not ended, not evicted)
  size_t evictable = 0;   // of those, accepted by the filter
  size_t outstanding = 0; // evicted, stream not ended yet
  double pending_reclaim = 0;
  double reclaim_target = 0;  // the last decision's
  std::map<int, uint64_t> issued;  // revocations by the demand band's priority
  uint64_t confirmed = 0, timed_out = 0;
  std::vector<uint64_t> confirmation_buckets;  // per bucket (not cumulative), bounds below
  std::vector<double> confirmation_bounds_s;
  double confirmation_sum_s = 0;
  uint64_t confirmation_count = 0;
};

class InflightEvictor {
 public:
  using Handle = uint64_t;
  // Called once for an evicted request, with the answer to send (429 "evicted").
  using EvictFn = std::function<void(const DropAnswer&)>;

  InflightEvictor(EvictionConfig config, const Clock& clock);

  Handle Track(std::string request_id, int priority, std::string endpoint, EvictFn evict);
  // The request's stream ended (response complete, client gone, or after its eviction: that
  // confirms the revocation). Unknown handles are ignored.
  void Untrack(Handle handle);

  // Stop-and-wait pacing: no revocation outstanding and none cooling at `now_us`.
  bool GateOpen(int64_t now_us);
  // The priority of the next victim, if any request is evictable.
  std::optional<int> VictimPriority() const;
  // One decision (see the file comment); returns how many were evicted.
  int Reclaim(double saturation, double ceiling, int demand_priority);

  EvictionStats Stats() const;

 private:
  struct Entry {
    std::string request_id, endpoint;
    int priority = 0;
    int64_t dispatch_us = 0;
    EvictFn evict;
    bool evictable = false;
    std::pair<EvictionKey, uint64_t> key;  // place in queue_ (with the handle as a tie-break)
  };
  struct Revocation {
    double credit = 0;
    int64_t issued_us = 0;
  };
  struct Cooling {
    double credit = 0;
    int64_t expires_us = 0;
  };
  void SweepLocked(int64_t now_us);
  void CoolLocked(const Revocation& r, int64_t now_us);
  void RecordConfirmationLocked(double seconds);

  EvictionConfig config_;
  const Clock& clock_;
  mutable std::mutex mu_;
  Handle next_ = 1;
  absl::flat_hash_map<Handle, Entry> tracked_;
  std::set<std::pair<EvictionKey, uint64_t>> queue_;  // evictable, best victim first
  absl::flat_hash_map<Handle, Revocation> outstanding_;
  std::vector<Cooling> cooling_;
  double pending_reclaim_ = 0;
  double reclaim_target_ = 0;
  std::map<int, uint64_t> issued_;
  uint64_t confirmed_ = 0, timed_out_ = 0;
  std::vector<uint64_t> confirmation_buckets_;
  double confirmation_sum_s_ = 0;
  uint64_t confirmation_count_ = 0;
};

}  // namespace epp::flowcontrol
