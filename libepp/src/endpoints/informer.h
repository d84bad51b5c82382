// Informer: one Kubernetes collection kept in step by list-then-watch, as client-go's reflector
// does it. Private to libepp (its callbacks take parsed JSON).
//
//   LIST  PATH?QUERY&resourceVersion=0         the whole collection, from the API server's watch
//                                              cache; its metadata.resourceVersion is where the
//                                              watch starts
//   WATCH PATH?QUERY&watch=1&resourceVersion=RV&allowWatchBookmarks=true&timeoutSeconds=T
//         a stream of {"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...} lines; each
//         event moves RV. The server ends a watch after T seconds (T drawn from [min, 2*min) so
//         that replicas do not re-watch in step); the informer re-watches from RV at once, with no
//         LIST in between: while watches work, the collection is listed once.
//   410 Gone (as an HTTP status or an ERROR event): RV is older than the server keeps; list again
//         (a quorum read this time, resourceVersion unset) and watch from the new RV.
//   Other failures (the API server down, 5xx, a dropped stream): exponential backoff, 0.8 s
//   doubling to 30 s with jitter, then watch again from RV (list again if that fails with 410).
//   The handler keeps what it was told, so whoever reads from it keeps serving through an outage.
//
// Memory: one line of the stream at a time (a line over 16 MiB is an error and a re-watch) plus
// what the handler keeps; the informer keeps no objects itself.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "epp/runtime/http.h"
#include "epp/runtime/kube.h"
#include "epp/runtime/logger.h"
#include "epp/status.h"

namespace epp::internal {

enum class WatchEventType { kAdded, kModified, kDeleted };

struct InformerOptions {
  KubeClientOptions kube;
  std::string path;   // the collection: "/api/v1/namespaces/NS/pods"
  std::string query;  // URL-encoded selectors ("labelSelector=app%3Dx"), or empty
  std::string what;   // for log lines: "pods of inferencepool ns/pool"
  std::chrono::seconds min_watch_timeout{300};
  std::chrono::milliseconds backoff_initial{800};
  std::chrono::milliseconds backoff_max{30000};
  const Logger* log = nullptr;
};

// The informer's counters are those serve exports (KubeWatchStats): lists, watches, events,
// bookmarks, relists after 410, errors, and whether a list has been handed over.
using InformerStats = KubeWatchStats;

// Adds `s`'s counters to `into` (`synced` is left to the caller: it combines differently).
inline void AddCounts(KubeWatchStats& into, const KubeWatchStats& s) {
  into.lists += s.lists;
  into.watches += s.watches;
  into.events += s.events;
  into.bookmarks += s.bookmarks;
  into.relists_gone += s.relists_gone;
  into.errors += s.errors;
}

class Informer {
 public:
  struct Handler {
    // After each LIST, on the informer's thread: every object now (replaces what was told before).
    std::function<void(std::vector<nlohmann::json>&& items)> on_list;
    // Each change after it.
    std::function<void(WatchEventType type, const nlohmann::json& object)> on_event;
    // A failure the informer will retry (ok status: working again after one). Optional.
    std::function<void(const absl::Status& status)> on_state;
  };

  // Checks the options (the API server's URL, the token file) by making the client.
  static absl::StatusOr<std::unique_ptr<Informer>> Create(InformerOptions options, Handler handler);
  ~Informer();  // Stop()

  void Start();
  // Ends the watch stream at once and joins the thread (a LIST in flight finishes first, bounded
  // by the client's timeout). Idempotent.
  void Stop();
  InformerStats stats() const;

 private:
  Informer(InformerOptions options, Handler handler, std::unique_ptr<KubeClient> kube);
  void Run();
  // One LIST; true when it was handed over.
  bool List(bool quorum);
  // One WATCH from rv_; returns how it ended.
  enum class WatchEnd { kExpired, kGone, kFailed, kStopped };
  WatchEnd Watch();
  bool HandleLine(std::string_view line, WatchEnd& end);
  void Failed(const absl::Status& status);
  void Recovered();
  // Sleeps for the next backoff step (or until Stop()); false when stopping.
  bool Backoff();

  InformerOptions options_;
  Handler handler_;
  std::unique_ptr<KubeClient> kube_;  // the informer's thread only
  HttpStream stream_;
  std::string rv_;
  std::chrono::milliseconds backoff_{0};
  bool failing_ = false;  // the informer's thread: a failure was reported and not yet recovered
  uint64_t rng_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  InformerStats stats_;
  std::thread thread_;
};

}  // namespace epp::internal
