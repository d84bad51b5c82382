// LeaderElector (epp/runtime/leader_election.h): client-go's Lease lock, one thread per elector.
#include "epp/runtime/leader_election.h"

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/json.h"

namespace epp {
namespace {

using json = nlohmann::json;
using SteadyTime = std::chrono::steady_clock;

// metav1.MicroTime: "2026-12-06T01:02:03.456789Z".
std::string MicroTimeNow() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];  // room for any int the format could print (GCC's -Wformat-truncation counts that)
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(us));
  return buf;
}

// What a candidate compares from one read to the next to know whether the holder is alive.
struct Record {
  std::string holder;
  int64_t lease_seconds = 0;
  std::string acquire_time, renew_time;
  int64_t transitions = 0;
  std::string resource_version;

  bool SameAs(const Record& o) const {
    return holder == o.holder && renew_time == o.renew_time && lease_seconds == o.lease_seconds &&
           transitions == o.transitions;
  }
};

std::string StringAt(const json& obj, const char* key) {
  const std::string* s = internal::JsonStringMember(obj, key);
  return s ? *s : std::string();
}

int64_t IntAt(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end()) return 0;
  return internal::JsonInt64(*it).value_or(0);
}

absl::StatusOr<Record> ParseLease(std::string_view body, const std::string& what) {
  absl::StatusOr<json> doc = internal::ParseJson(body);
  if (!doc.ok() || !doc->is_object()) return absl::InvalidArgumentError(what + ": the Lease is not a JSON object");
  Record r;
  auto meta = doc->find("metadata");
  if (meta != doc->end() && meta->is_object()) r.resource_version = StringAt(*meta, "resourceVersion");
  auto spec = doc->find("spec");
  if (spec != doc->end() && spec->is_object()) {
    r.holder = StringAt(*spec, "holderIdentity");
    r.lease_seconds = IntAt(*spec, "leaseDurationSeconds");
    r.acquire_time = StringAt(*spec, "acquireTime");
    r.renew_time = StringAt(*spec, "renewTime");
    r.transitions = IntAt(*spec, "leaseTransitions");
  }
  return r;
}

}  // namespace

std::string DefaultLeaseName(std::string_view ns, std::string_view pool) {
  return "epp-" + std::string(ns) + "-" + std::string(pool) + ".llm-d.ai";
}

std::string DefaultLeaderIdentity() {
  if (const char* pod = std::getenv("POD_NAME"); pod != nullptr && *pod != '\0') return pod;
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) == 0 && host[0] != '\0') return host;
  return "epp";
}

struct LeaderElector::Impl {
  LeaderElectionOptions options;
  std::function<void(bool)> on_change;
  std::unique_ptr<KubeClient> kube;  // the elector's thread (and Stop's release, after the join)
  const Logger& log;
  std::string path;  // the Lease's

  mutable std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  LeaderElectionStats stats;
  std::thread thread;

  // The elector's thread.
  std::optional<Record> observed;
  SteadyTime::time_point observed_at{};
  SteadyTime::time_point last_renew{};
  bool leading = false;
  std::mt19937_64 rng{std::random_device{}()};

  Impl(LeaderElectionOptions o, std::function<void(bool)> cb, std::unique_ptr<KubeClient> k)
      : options(std::move(o)), on_change(std::move(cb)), kube(std::move(k)),
        log(options.log ? *options.log : NullLogger::Get()) {
    path = "/apis/coordination.k8s.io/v1/namespaces/" + options.ns + "/leases/" + options.name;
  }

  std::string Describe() const { return "lease " + options.ns + "/" + options.name; }

  json LeaseJson(const Record& r) const {
    json spec = {{"holderIdentity", r.holder},
                 {"leaseDurationSeconds", r.lease_seconds},
                 {"renewTime", r.renew_time},
                 {"leaseTransitions", r.transitions}};
    if (!r.acquire_time.empty()) spec["acquireTime"] = r.acquire_time;
    json meta = {{"name", options.name}, {"namespace", options.ns}};
    if (!r.resource_version.empty()) meta["resourceVersion"] = r.resource_version;
    return {{"apiVersion", "coordination.k8s.io/v1"}, {"kind", "Lease"}, {"metadata", meta}, {"spec", spec}};
  }

  void CountFailure() {
    std::lock_guard<std::mutex> lock(mu);
    stats.attempts_failed++;
  }

  // One try (client-go's tryAcquireOrRenew): true when this candidate holds the Lease after it.
  bool TryAcquireOrRenew() {
    const int64_t lease_s = std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::seconds>(options.lease_duration).count());
    const std::string now = MicroTimeNow();
    absl::StatusOr<std::string> got = kube->Get(path);
    if (!got.ok() && got.status().code() == absl::StatusCode::kNotFound) {
      Record mine{options.identity, lease_s, now, now, 0, ""};
      absl::StatusOr<std::string> created =
          kube->Send("POST", "/apis/coordination.k8s.io/v1/namespaces/" + options.ns + "/leases", LeaseJson(mine).dump());
      if (!created.ok()) {
        if (log.Enabled(LogLevel::kDebug)) log.Debug(Describe() + ": create failed: " + std::string(created.status().message()));
        CountFailure();
        return false;
      }
      absl::StatusOr<Record> r = ParseLease(*created, Describe());
      observed = r.ok() ? *r : mine;
      observed_at = SteadyTime::now();
      return true;
    }
    if (!got.ok()) {
      if (log.Enabled(LogLevel::kDebug)) log.Debug(Describe() + ": read failed: " + std::string(got.status().message()));
      CountFailure();
      return false;
    }
    absl::StatusOr<Record> current = ParseLease(*got, Describe());
    if (!current.ok()) {
      CountFailure();
      return false;
    }
    // The holder is alive as long as its record keeps changing; the lease duration counts from
    // when this candidate saw it change (client-go's observedTime), not from renewTime, so clock
    // skew between nodes does not matter.
    if (!observed || !observed->SameAs(*current)) {
      observed = *current;
      observed_at = SteadyTime::now();
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      stats.holder = current->holder;
    }
    const auto held_for = std::chrono::seconds(current->lease_seconds > 0 ? current->lease_seconds : lease_s);
    if (!current->holder.empty() && current->holder != options.identity && SteadyTime::now() < observed_at + held_for)
      return false;  // someone else holds a valid lease
    Record mine = *current;
    const bool renewal = current->holder == options.identity;
    mine.holder = options.identity;
    mine.lease_seconds = lease_s;
    mine.renew_time = now;
    if (!renewal) {
      mine.acquire_time = now;
      mine.transitions = current->transitions + 1;
    }
    absl::StatusOr<std::string> updated = kube->Send("PUT", path, LeaseJson(mine).dump());
    if (!updated.ok()) {
      // 409: another candidate wrote first; it holds the lease now.
      if (log.Enabled(LogLevel::kDebug)) log.Debug(Describe() + ": update failed: " + std::string(updated.status().message()));
      CountFailure();
      return false;
    }
    absl::StatusOr<Record> r = ParseLease(*updated, Describe());
    observed = r.ok() ? *r : mine;
    observed_at = SteadyTime::now();
    return true;
  }

  void SetLeading(bool now_leading, bool asked) {
    if (leading == now_leading) return;
    leading = now_leading;
    {
      std::lock_guard<std::mutex> lock(mu);
      stats.leading = now_leading;
      if (now_leading) stats.acquired++;
      if (!now_leading && !asked) stats.lost++;
      if (now_leading) stats.holder = options.identity;
    }
    if (now_leading) {
      log.Info(Describe() + ": " + options.identity + " is the leader; readiness follows the server");
    } else if (!asked) {
      log.Warn(Describe() + ": " + options.identity + " could not renew for " +
               std::to_string(options.renew_deadline.count()) + " ms: no longer the leader (readiness NOT_SERVING); "
               "trying again");
    }
    if (on_change) on_change(now_leading);
  }

  void Run() {
    for (;;) {
      const bool held = TryAcquireOrRenew();
      if (held) {
        last_renew = SteadyTime::now();
        SetLeading(true, false);
      } else if (leading && SteadyTime::now() - last_renew >= options.renew_deadline) {
        SetLeading(false, false);
      }
      // Candidates spread their tries (client-go's JitterUntil, factor 1.2); the leader renews on
      // the period.
      auto wait = options.retry_period;
      if (!leading) {
        std::uniform_real_distribution<double> jitter(1.0, 1.2);
        wait = std::chrono::milliseconds(static_cast<int64_t>(static_cast<double>(wait.count()) * jitter(rng)));
      }
      std::unique_lock<std::mutex> lock(mu);
      if (cv.wait_for(lock, wait, [this] { return stop; })) return;
    }
  }

  void Release() {
    if (!leading || !observed) return;
    // As client-go's release: holder cleared, a one-second lease; the resourceVersion read last,
    // so a lease another candidate took meanwhile is not overwritten.
    Record r = *observed;
    r.holder.clear();
    r.lease_seconds = 1;
    r.renew_time = MicroTimeNow();
    absl::StatusOr<std::string> put = kube->Send("PUT", path, LeaseJson(r).dump());
    if (put.ok()) {
      log.Info(Describe() + ": released by " + options.identity);
    } else {
      log.Warn(Describe() + ": release failed (standbys take over after the lease duration): " +
               std::string(put.status().message()));
    }
  }
};

absl::StatusOr<std::unique_ptr<LeaderElector>> LeaderElector::Create(LeaderElectionOptions options,
                                                                     std::function<void(bool)> on_change) {
  if (options.name.empty() || options.ns.empty() || options.identity.empty())
    return absl::InvalidArgumentError("leader election: the Lease's namespace and name and this replica's identity are required");
  if (!(options.retry_period.count() > 0 && options.retry_period < options.renew_deadline &&
        options.renew_deadline < options.lease_duration))
    return absl::InvalidArgumentError(
        "leader election: expected 0 < retry period < renew deadline < lease duration, got " +
        std::to_string(options.retry_period.count()) + " ms, " + std::to_string(options.renew_deadline.count()) +
        " ms, " + std::to_string(options.lease_duration.count()) + " ms");
  EPP_ASSIGN_OR_RETURN(std::unique_ptr<KubeClient> kube, KubeClient::Create(options.kube));
  auto impl = std::make_unique<Impl>(std::move(options), std::move(on_change), std::move(kube));
  return std::unique_ptr<LeaderElector>(new LeaderElector(std::move(impl)));
}

LeaderElector::LeaderElector(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LeaderElector::~LeaderElector() { Stop(false); }

void LeaderElector::Start() {
  if (impl_->thread.joinable()) return;
  impl_->thread = std::thread([this] { impl_->Run(); });
}

void LeaderElector::Stop(bool release) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stop && !impl_->thread.joinable()) return;
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
  if (release) impl_->Release();
  impl_->SetLeading(false, true);
}

bool LeaderElector::leading() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats.leading;
}

LeaderElectionStats LeaderElector::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

const LeaderElectionOptions& LeaderElector::options() const { return impl_->options; }

}  // namespace epp
