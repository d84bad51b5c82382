// Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics (what GIE's and
// llm-d's EPP get from controller-runtime with --ha-enable-leader-election):
//
//   - every retry_period a candidate reads the Lease; it takes it when there is none (create), when
//     it has no holder, or when the holder's record has not changed for the lease duration as this
//     candidate observed it (its own clock measures from when it saw the record change, so clocks
//     of different nodes never need to agree); a take is an update with the read resourceVersion,
//     so of two candidates only one succeeds (the other gets 409 Conflict);
//   - the leader renews every retry_period; when it has not renewed for renew_deadline (the API
//     server unreachable), it stops leading: it cannot know that another replica has not taken
//     over. controller-runtime exits the process then; epp becomes a standby again (readiness
//     NOT_SERVING) and goes on trying, so a leader cut off from the API server comes back without a
//     restart;
//   - Stop(release=true) gives a held Lease up (holder cleared, as ReleaseOnCancel does), so a
//     standby takes over at its next try instead of after the lease duration.
//
// The Lease record: spec.holderIdentity, leaseDurationSeconds, acquireTime, renewTime
// (RFC 3339 with microseconds), leaseTransitions (incremented when the holder changes).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "epp/runtime/kube.h"
#include "epp/runtime/logger.h"
#include "epp/status.h"

namespace epp {

struct LeaderElectionOptions {
  KubeClientOptions kube;
  std::string ns;        // the Lease's namespace
  std::string name;      // the Lease's name
  std::string identity;  // this candidate (a Pod name)
  std::chrono::milliseconds lease_duration{15000};
  std::chrono::milliseconds renew_deadline{10000};
  std::chrono::milliseconds retry_period{2000};
  const Logger* log = nullptr;
};

struct LeaderElectionStats {
  bool leading = false;
  std::string holder;            // the holder last observed ("" when none)
  int64_t acquired = 0;          // times this candidate became the leader
  int64_t lost = 0;              // times it stopped leading without being asked to
  int64_t attempts_failed = 0;   // reads or writes of the Lease that failed (conflicts included)
};

// "epp-NS-NAME.llm-d.ai": the Lease llm-d Router's EPP uses for pool NS/NAME.
std::string DefaultLeaseName(std::string_view ns, std::string_view pool);
// $POD_NAME, else the host name, else "epp".
std::string DefaultLeaderIdentity();

class LeaderElector {
 public:
  // Checks the options (durations: retry < renew deadline < lease duration, names, the API
  // server) without any request. `on_change` is called on the elector's thread when this candidate
  // starts (true) or stops (false) leading.
  static absl::StatusOr<std::unique_ptr<LeaderElector>> Create(LeaderElectionOptions options,
                                                               std::function<void(bool leading)> on_change);
  ~LeaderElector();  // Stop(false)

  void Start();
  // Stops trying; with `release`, a held Lease is given up first (one request, bounded by the
  // client's timeout). on_change(false) is called if this candidate was leading. Idempotent.
  void Stop(bool release);
  bool leading() const;
  LeaderElectionStats stats() const;
  const LeaderElectionOptions& options() const;

  struct Impl;

 private:
  explicit LeaderElector(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace epp
