// Private to `eppctl serve`: the endpoint set behind the ext_proc server, kept current by one
// scrape thread.
//
// Every interval the thread re-reads the metrics of every endpoint (RefreshEndpointMetrics on its
// own copy, through one persistent HttpClient so connections are reused) and publishes the copy
// with EndpointSnapshot::Set. Picks read the last published snapshot and never wait for a scrape;
// an endpoint that cannot be read keeps its last metrics, which age into staleness.
//
// The endpoints file is re-stat()ed by path on every cycle, so both an edit in place (mtime, size)
// and a Kubernetes ConfigMap update (the `..data` symlink swapped to a new directory: the path
// now resolves to another inode) are seen. A change is acted on once the file looked the same on
// two consecutive polls (a half-written file is not loaded). The new list is loaded, validated
// and resolved before it replaces the old one; endpoints that left are forgotten by the
// scheduler (prefix index, in-flight counters). A file that does not load keeps the old set and
// is logged once.
//
// With discovery (eppctl serve --pool-name), the endpoints are the Ready Pods of an InferencePool
// instead (epp/kube.h), plus the --endpoint flags. A second thread reads the pool and lists its
// Pods every discovery interval (no watch) and hands a changed list to the scrape thread, which
// installs it exactly as a reloaded file. A discovery error keeps the set in use and is logged
// once (again at debug level); picks never wait for discovery. A list the scrape thread rejects
// (validation or resolve failed) is handed over again at the next list even when unchanged;
// the rejection is logged once per message (again at debug level).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "commands/serve_log.h"
#include "epp/endpoints.h"
#include "epp/extproc.h"
#include "epp/http.h"
#include "epp/kube.h"
#include "epp/scheduler.h"

namespace eppctl {

// Where discovery finds the pool (serve's --pool-* and --kube-* flags).
struct ServePoolDiscovery {
  std::string group = std::string(epp::kInferencePoolGroupV1);
  std::string ns;
  std::string name;
  epp::KubeClientOptions kube;
  std::chrono::microseconds interval{2000000};  // between two lists of the pool's Pods
};

struct ServePoolOptions {
  std::string endpoints_file;                 // empty: only flag endpoints, nothing to watch
  std::vector<epp::EndpointSpec> flag_specs;  // --endpoint values, appended after the file's
  epp::ResolveOptions resolve;                // check settings; clock and http_client are the pool's
  std::chrono::microseconds interval{50000};
  // Set: the endpoints are the pool's Ready Pods followed by flag_specs (a flag naming a
  // discovered address replaces it); endpoints_file must be empty. An empty pool is allowed.
  std::optional<ServePoolDiscovery> discovery;
};

// Counters for /metrics.
struct ServePoolCounters {
  int64_t scrape_cycles = 0;
  int64_t reloads_ok = 0;
  int64_t reloads_failed = 0;
  double last_scrape_seconds = 0;
  std::map<std::string, int64_t> scrape_errors;  // per current endpoint address, cumulative
  // Discovery: pool reads that succeeded / failed (a failed one keeps the set in use).
  int64_t discovery_ok = 0;
  int64_t discovery_errors = 0;
};

class ServePool {
 public:
  // Loads the specs (file, then flags), validates them and resolves them once: every endpoint is
  // scraped or found unreadable (kept, with metrics_error). The result is published to `snapshot`.
  // kInvalidArgument / kNotFound for a bad file, bad specs or no endpoints at all.
  static absl::StatusOr<std::unique_ptr<ServePool>> Create(ServePoolOptions options, const epp::Scheduler& scheduler,
                                                           epp::EndpointSnapshot& snapshot, const ServeLog& log);
  ~ServePool();

  void Start();  // the scrape thread
  void Stop();   // joins it; idempotent

  size_t size() const { return size_.load(); }
  ServePoolCounters counters() const;

 private:
  struct FileSig {
    bool exists = false;
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    int64_t mtime_ns = 0, ctime_ns = 0;
    bool operator==(const FileSig&) const = default;
  };
  static FileSig Stat(const std::string& path);

  ServePool(ServePoolOptions options, const epp::Scheduler& scheduler, epp::EndpointSnapshot& snapshot,
            const ServeLog& log);
  absl::StatusOr<std::vector<epp::EndpointSpec>> LoadSpecs() const;
  // Discovery: the pool's Pods now (kube_, one thread at a time), and those merged with the flags.
  absl::StatusOr<std::vector<epp::EndpointSpec>> Discover();
  absl::StatusOr<std::vector<epp::EndpointSpec>> WithFlags(std::vector<epp::EndpointSpec> discovered) const;
  std::string PoolName() const;  // "inferencepool NS/NAME"
  void RunDiscovery();           // the discovery thread
  epp::ResolveOptions Resolve();
  // Installs a resolved set (initial load or reload): snapshot, counters, forgotten endpoints.
  void Install(std::vector<epp::EndpointSpec> specs, std::vector<epp::Endpoint> endpoints);
  void Run();
  void Refresh();
  void MaybeReload();
  void Reload();
  // Installs `specs` (resolved here) in place of the current set, or logs why not; `source`
  // names where they came from in the log. false when the set was not installed.
  bool Replace(absl::StatusOr<std::vector<epp::EndpointSpec>> specs, const std::string& source);
  // Logs state changes of endpoint i's metrics (unreadable, partial, recovered); `read` = this
  // round produced metrics.
  void Track(size_t i, bool read);

  ServePoolOptions options_;
  const epp::Scheduler& scheduler_;
  epp::EndpointSnapshot& snapshot_;
  const ServeLog& log_;
  epp::HttpClient client_;  // scrape thread only (and Create before Start)

  // Owned by the scrape thread once started.
  std::vector<epp::EndpointSpec> specs_;
  std::vector<epp::Endpoint> endpoints_;
  std::vector<std::string> last_error_;  // per endpoint: the state last logged (Track)
  FileSig applied_;                      // the file as last loaded (or rejected)
  std::optional<FileSig> pending_;       // a change seen once, waiting to settle

  // Discovery.
  std::unique_ptr<epp::KubeClient> kube_;  // discovery thread only (and Create)
  // Discovery thread: the list last handed over; unset = hand the next one over whatever it is.
  std::optional<std::vector<epp::EndpointSpec>> discovered_;
  std::string discovery_state_;  // discovery thread: the error last logged, "" = fine
  std::string rejected_state_;   // scrape thread: the rejection of a discovered list last logged
  std::optional<std::vector<epp::EndpointSpec>> discovered_pending_;  // guarded by mu_
  // Guarded by mu_: the scrape thread rejected a handed-over list; the discovery thread then
  // forgets discovered_, so that the next list is handed over even if it is the same.
  bool discovered_rejected_ = false;
  std::thread discovery_thread_;

  std::atomic<size_t> size_{0};
  mutable std::mutex mu_;  // guards counters_, stop_, discovered_pending_ and discovered_rejected_
  ServePoolCounters counters_;
  bool stop_ = false;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace eppctl
