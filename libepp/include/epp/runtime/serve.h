// The EPP runtime: an endpoint pool kept current, and the server that puts a scheduler behind
// Envoy ext_proc with health checks and Prometheus metrics. `eppctl serve` and `pyepp.serve` are
// thin edges over these two classes.
//
// EndpointPool (an EndpointSource):
//   - where endpoints come from: an endpoints file (re-stat()ed by path every cycle, so both an
//     edit in place and a Kubernetes ConfigMap update, whose `..data` symlink swap makes the path
//     resolve to another inode, are seen), the --endpoint flags, or an EndpointLister (an
//     InferencePool's Ready Pods through the Kubernetes API) followed by the flags;
//   - the settle rule: a changed file is acted on once it looked the same on two consecutive
//     cycles (a half-written file is not loaded); a file that does not load keeps the set in use
//     and is logged once per version;
//   - departures: an endpoint that left, or whose origin changed (a new Pod with the IP of one
//     that went away), is reported to `on_departure` after the new snapshot is published, so the
//     scheduler forgets its prefix entries and in-flight load;
//   - the scrape thread reads every endpoint once per interval, each at its own phase
//     (StaggeredScraper through one persistent HttpClient: a trickle of transfers, each answer
//     parsed as it arrives), and publishes a copy of the endpoints every tenth of the interval
//     when something was read; picks read the last snapshot and never wait. An unreadable
//     endpoint keeps its last metrics, which age into staleness. The endpoints file is checked
//     once per interval. Discovery runs on a second thread and hands changed lists over.
//   RunCycle() does a whole round at once (every endpoint read concurrently, then published) and
//   RunDiscovery() one discovery round; tests drive the pool with them (with a ManualClock and a
//   fake EndpointLister), without threads or sleeps.
//
// EppServer: Start(ServeConfig) builds the scheduler, the pool, the ext_proc server (TLS optional),
// the grpc.health.v1 server and the /metrics HTTP server, in that order; Shutdown(drain) stops
// them in reverse. With a config file it also re-reads the config when the file changes (the same
// settle rule): a config that fails to build is logged and counted and the running scheduler
// stays; streams keep the scheduler they started with; plugins whose type, name and effective
// parameters did not change carry over with their state (the prefix index).
//
// Thread-safety: every method may be called from any thread, except that RunCycle/RunDiscovery
// must not be mixed with Start() (they are what its threads call).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "epp/runtime/endpoints.h"
#include "epp/runtime/decision_log.h"
#include "epp/runtime/redis_state.h"
#include "epp/runtime/tracing.h"
#include "epp/runtime/extproc.h"
#include "epp/runtime/kube.h"
#include "epp/runtime/leader_election.h"
#include "epp/runtime/metrics_auth.h"
#include "epp/runtime/logger.h"
#include "epp/scheduler.h"
#include "epp/status.h"

namespace epp {

// ---- Endpoint pool ---------------------------------------------------------------------------

// Where discovery finds the model-server Pods (serve's --pool-*, --endpoint-selector,
// --endpoint-target-ports and --kube-* flags): an InferencePool's, or (standalone mode, GIE's
// --endpoint-selector) those a label selector matches, one endpoint per target port.
struct PoolDiscoveryOptions {
  std::string group = std::string(kInferencePoolGroupV1);
  std::string ns;  // required
  std::string name;  // the InferencePool; empty in standalone mode
  // Standalone mode: the Pods' label selector (ParseLabelSelector text) and 1-8 target ports.
  std::string selector;
  std::vector<int> target_ports;
  KubeClientOptions kube;
  // true: list once, then watch (NewInferencePoolWatcher); false: list every `interval`.
  bool watch = true;
  std::chrono::microseconds interval{2000000};  // between two lists when not watching
  PodMetricsOptions metrics;                    // where the Pods' metrics are read
};

// A source of discovered endpoints: each List() returns the whole current set.
class EndpointLister {
 public:
  virtual ~EndpointLister() = default;
  // The endpoints now. `cancel` turns true when the pool stops: a lister making several requests
  // returns kCancelled between them.
  virtual absl::StatusOr<std::vector<EndpointSpec>> List(const std::atomic<bool>& cancel) = 0;
  // What is listed, for log lines: "inferencepool NS/NAME".
  virtual std::string Describe() const = 0;
  // A watching lister's List() blocks until the set changes (or `cancel`), so the pool calls it
  // back to back instead of once per interval.
  virtual bool Watches() const { return false; }
  // Watch counters, for /metrics; nullopt for a lister that does not watch.
  virtual std::optional<KubeWatchStats> watch_stats() const { return std::nullopt; }
};

// Lists an InferencePool's Ready Pods (the pool is read each time: its selector and targetPorts
// may change), or in standalone mode the Pods the selector matches. Fails when the options do not
// make a client (no cluster, bad URL) or name nothing valid.
absl::StatusOr<std::unique_ptr<EndpointLister>> NewInferencePoolLister(const PoolDiscoveryOptions& options);

// The same endpoints kept by list-then-watch (docs/serve.md, "Discovery"): the InferencePool is
// watched by name and its Pods by its selector (the Pod watch restarts when the selector
// changes); in standalone mode the Pods alone. While the watches work nothing is listed again;
// a 410 Gone relists; other failures back off and re-watch, the last set staying in use. The
// first List() waits for the first lists (and fails as NewInferencePoolLister's would: no pool,
// no access); later calls block until the endpoint set or the watch's error changes. `log` (may
// be null) gets the watches' failures and recoveries.
absl::StatusOr<std::unique_ptr<EndpointLister>> NewInferencePoolWatcher(const PoolDiscoveryOptions& options,
                                                                        const Logger* log = nullptr);

// Where discovery finds an InferencePoolImport (serve's --pool-import, --clusters, --kube-*): the
// endpoints are the entries of the cluster directory (`clusters`, an endpoints file's specs whose
// `cluster_label` names a cluster) for the clusters the import lists as exporting, re-read every
// `interval`. An exporting cluster the directory lacks is logged (Warn) each time the set of such
// clusters changes; `log` may be null.
struct PoolImportDiscoveryOptions {
  std::string ns;  // required
  std::string name;
  KubeClientOptions kube;
  std::vector<EndpointSpec> clusters;
  std::string cluster_label = std::string(kClusterLabel);
  std::chrono::microseconds interval{2000000};
  const Logger* log = nullptr;
};

// Lists the cluster-level endpoints of an InferencePoolImport. Fails when the options do not make
// a client, the names are not DNS-1123, or no directory entry has the cluster label.
absl::StatusOr<std::unique_ptr<EndpointLister>> NewInferencePoolImportLister(const PoolImportDiscoveryOptions& options);

// The pool's InferenceObjectives and InferenceModelRewrites (llm-d.ai/v1alpha2 and
// inference.networking.x-k8s.io/v1alpha2), watched: those whose spec.poolRef.name is the pool's
// become the RequestPolicies every new stream reads (objective priorities, rewrite rules in the
// reference's precedence). A group whose CRDs are not installed, or that RBAC forbids, is logged
// and retried with backoff; the other keeps working.
struct PolicyWatchOptions {
  KubeClientOptions kube;
  std::string ns;
  std::string pool_name;
  const Logger* log = nullptr;
};

class RequestPolicyWatcher {
 public:
  static absl::StatusOr<std::unique_ptr<RequestPolicyWatcher>> Create(PolicyWatchOptions options);
  ~RequestPolicyWatcher();
  void Start();
  void Stop();
  // What streams read; updated on every change.
  std::shared_ptr<RequestPolicyHandle> handle() const;
  KubeWatchStats stats() const;

  struct Impl;

 private:
  explicit RequestPolicyWatcher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The objects as the watcher reads them (JSON text of one object). nullopt: the object belongs to
// another pool (spec.poolRef.name). kInvalidArgument naming the object and the JSON path of what
// is malformed ("inferencemodelrewrite ns/x: spec.rules[0].targets[1].weight: expected an
// integer in [1, 1000000]"); the watcher skips such an object with a warning.
struct ObjectivePolicy {
  std::string name;
  int priority = 0;  // spec.priority; unset is 0
};
absl::StatusOr<std::optional<ObjectivePolicy>> ParseInferenceObjective(std::string_view json, std::string_view pool_name);
struct RewritePolicy {
  std::string source;   // "NS/NAME"
  std::string created;  // metadata.creationTimestamp (RFC 3339: orders as text)
  std::vector<ModelRewriteRule> rules;
};
absl::StatusOr<std::optional<RewritePolicy>> ParseInferenceModelRewrite(std::string_view json, std::string_view pool_name);
// The policies of these objects: rewrites oldest resource first (then by name), rules in list
// order (RequestPolicies::RuleFor then applies the reference's precedence).
RequestPolicies MergeRequestPolicies(const std::vector<ObjectivePolicy>& objectives, std::vector<RewritePolicy> rewrites);

struct EndpointPoolOptions {
  std::string endpoints_file;            // empty: nothing to watch
  std::vector<EndpointSpec> flag_specs;  // appended after the file's (or the lister's) endpoints
  // How metrics are read (mappings, engine, timeout, headers). `clock` stamps metrics (nullptr:
  // the steady clock); `http_client` nullptr: the pool's own persistent client.
  ResolveOptions resolve;
  std::chrono::microseconds interval{50000};  // scrape cycle, start to start
  // Discovery: when set, the endpoints are lister's followed by flag_specs (a flag naming a
  // discovered address replaces it); endpoints_file must then be empty.
  std::shared_ptr<EndpointLister> lister;
  std::chrono::microseconds discovery_interval{2000000};
  const Logger* log = nullptr;  // nullptr: NullLogger
  // Each endpoint that left or changed origin, after the snapshot without it is published
  // (called on the thread that installed the new set).
  std::function<void(const std::string& address)> on_departure;
  // Every endpoint set installed (Create's first one included), with its specs, after its
  // snapshot is published, on the installing thread: how the server keeps its KV-event
  // subscriptions in step with the pool without polling it.
  std::function<void(const std::vector<EndpointSpec>& specs)> on_installed;
};

struct EndpointPoolCounters {
  // RunCycle(): cycles run and the last one's duration. The threads (Start()): intervals completed
  // by the staggered scrape loop and the longest time from a scrape falling due to its metrics
  // being applied over the last completed one (under the interval: every endpoint was refreshed
  // within one interval).
  int64_t scrape_cycles = 0;
  double last_scrape_seconds = 0;
  int64_t scrape_reads = 0;     // the threads: scrapes finished and applied (read or failed)
  int64_t scrape_overruns = 0;  // the threads: slots skipped, the endpoint's last scrape still running
  int64_t reloads_ok = 0;      // endpoint sets installed after the first (file or discovery)
  int64_t reloads_failed = 0;  // sets rejected (the set in use kept)
  std::map<std::string, int64_t> scrape_errors;  // per current endpoint address, cumulative
  int64_t discovery_ok = 0;
  int64_t discovery_errors = 0;
  int64_t scrape_settings_applied = 0;  // SetScrapeOptions calls the scrape loop has taken up
  std::optional<KubeWatchStats> watch;  // a watching lister's counters
};

class EndpointPool final : public EndpointSource {
 public:
  // Loads the specs (file or lister, then flags), validates them and resolves them once: every
  // endpoint is read or found unreadable (kept, with metrics_error). An empty file or an empty
  // discovered list is a pool with no endpoints (every pick 503). kInvalidArgument / kNotFound
  // for a bad file or specs, no source at all, or a first discovery that fails.
  static absl::StatusOr<std::unique_ptr<EndpointPool>> Create(EndpointPoolOptions options);
  ~EndpointPool() override;
  EndpointPool(const EndpointPool&) = delete;
  EndpointPool& operator=(const EndpointPool&) = delete;

  std::shared_ptr<const std::vector<Endpoint>> Snapshot() const override;

  void Start();  // the scrape thread (and the discovery thread with a lister)
  void Stop();   // joins them; idempotent

  // One cycle of the scrape thread: install a settled endpoints-file change or a handed-over
  // discovered list, then re-read every endpoint's metrics and publish them.
  void RunCycle();
  // One round of the discovery thread: list, and hand a changed list to the next RunCycle().
  void RunDiscovery();

  // Replaces how metrics are read (engine, mappings, engine labels: what a reloaded config's
  // core-metrics-extractor says). The mappings are resolved here, so a bad setting is the call's
  // kInvalidArgument and the settings in use stay; the scrape loop (or the next RunCycle) reads
  // with the new ones from its next slice on. Transport settings (timeout, headers) are replaced
  // too.
  absl::Status SetScrapeOptions(ScrapeOptions scrape);

  size_t size() const;
  // The specs of the endpoints in use (file, discovery and flags), in snapshot order.
  std::vector<EndpointSpec> Specs() const;
  EndpointPoolCounters counters() const;
  // Where the endpoints come from, for the start-up line: "pool.yaml (watched) + 2 --endpoint flags".
  std::string Describe() const;

  struct Impl;

 private:
  explicit EndpointPool(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ---- The server ------------------------------------------------------------------------------

struct ServeConfig {
  // Scheduling. config_file empty: GIE's default profile (config_yaml, when set, is used instead
  // and not watched).
  std::string config_file;
  std::string config_yaml;
  bool watch_config = true;  // re-read config_file when it changes
  // When set (serve's explicit --metrics-staleness-threshold): the default utilization-detector's
  // metricsStalenessThreshold, unless the config sets one or names its own detector.
  std::optional<std::chrono::microseconds> detector_staleness;
  uint64_t seed = 0;  // tie-breaks and random pickers
  // Instead of a configuration: a scheduler the caller built (pyepp, with Python plugins). It is
  // shared, never reloaded, and its plugins use the caller's clock and randomness.
  std::shared_ptr<const Scheduler> scheduler;

  // Endpoints.
  std::string endpoints_file;
  std::vector<EndpointSpec> endpoints;
  std::optional<PoolDiscoveryOptions> discovery;  // not with endpoints_file
  // Cluster-level endpoints from an InferencePoolImport (not with endpoints_file or discovery).
  std::optional<PoolImportDiscoveryOptions> import_discovery;
  std::shared_ptr<EndpointLister> lister;         // instead of discovery (tests, embedders)
  // Instead of all of the above: endpoints the caller keeps current (pyepp's static pools). No
  // scrape runs; /metrics shows what the source holds.
  std::shared_ptr<const EndpointSource> endpoint_source;
  std::string engine = "auto";                    // metrics dialect of endpoints that name none
  std::chrono::microseconds refresh_interval{50000};
  std::chrono::microseconds scrape_timeout{100000};
  bool scrape_gzip = false;  // ask model servers for gzip-compressed metrics (ScrapeOptions)
  // Metrics older than this count as stale in the pool-average gauges.
  std::chrono::microseconds staleness{200000};

  // Servers. Port 0 picks a free one; health_port or metrics_port -1: no such server.
  std::string listen_address = "0.0.0.0";
  int grpc_port = 9002;
  int health_port = 9003;
  int metrics_port = 9090;
  bool tls = true;
  std::string cert_pem, key_pem;  // with tls; both empty: a self-signed certificate made at start
  std::string tls_source;         // how the certificate came, for the start-up line
  // With tls, non-empty: the ext_proc port requires client certificates that these CAs (a PEM
  // bundle) signed (ExtProcServerOptions::client_ca_pem); client_ca_source says where it came
  // from, for the start-up line.
  std::string client_ca_pem, client_ca_source;
  // With tls: files re-read while serving (empty: not reloaded), each looked at every
  // tls_reload_interval. Once changed files look the same on two looks in a row they are read and
  // checked (ExtProcServer::UpdateTls): new connections get them, open ones keep theirs; files that
  // fail the checks (unreadable, unparsable, a key that does not match) leave the previous
  // material in place, with a warning.
  std::string reload_cert_file, reload_key_file, reload_client_ca_file;
  std::chrono::milliseconds tls_reload_interval{1000};
  ExtProcOptions session;         // request limits, objectives, subset hint handling
  std::string capture_dir;
  uint64_t capture_max_bytes = uint64_t{1} << 30;  // all capture files together (ExtProcServerOptions)
  // The ext_proc port's memory budgets (ExtProcServerOptions' fields of the same names).
  uint64_t max_buffered_bytes = kDefaultMaxBufferedBytes;
  int64_t max_streams = 10000;
  uint32_t max_streams_per_connection = 0;
  // The live decision log (epp/runtime/decision_log.h): decision_log.capacity > 0 keeps that many recent
  // decisions with their explain trace, served on the metrics port at /debug/decisions.
  DecisionLogOptions decision_log{0, 50, false};
  // OpenTelemetry traces (--tracing with an exporter in the OTEL_* variables): a Tracer started
  // with these options serves every stream (session.tracer, when already set, is used as is).
  std::optional<TracingOptions> tracing;
  // --shared-state: prefix updates and in-flight counts shared with the other replicas through
  // Redis or Valkey (epp/runtime/redis_state.h).
  std::optional<SharedStateOptions> shared_state;
  std::string pool_name = "default";  // `name` label of the inference_pool_* metrics
  // Where this EPP runs (--region, --zone): PluginContext::region / zone of its plugins, the home
  // region and gateway zone of the locality plugins (docs/multicluster.md).
  std::string region, zone;

  // GIE's --health-checking: the ext_proc port answers grpc.health.v1 too, as readiness does.
  bool health_checking = false;
  // Largest gRPC message received / sent on the ext_proc port; 0: max(4 MiB, max_request_bytes + 1 MiB).
  size_t grpc_max_recv_bytes = 0, grpc_max_send_bytes = 0;
  // GIE's --model-server-metrics-https-insecure-skip-verify: https metrics are read unverified.
  bool metrics_insecure_skip_verify = false;
  // Field overrides of every engine mapping (GIE's metric-spec flags): {"queue", spec}, ...
  std::vector<std::pair<std::string, std::string>> metric_overrides;
  // --metrics-endpoint-auth: /metrics and /debug/decisions answer only scrapers whose token the
  // API server authenticates and authorizes (epp/runtime/metrics_auth.h).
  std::optional<MetricsAuthOptions> metrics_auth;
  // The pool's InferenceObjectives and InferenceModelRewrites, watched (RequestPolicyWatcher):
  // their priorities and rewrites apply to new streams as they change.
  std::optional<PolicyWatchOptions> policy_watch;
  // Leader election (GIE's --ha-enable-leader-election): readiness SERVING only while this replica
  // holds the Lease; every replica keeps its pool and scheduler warm. Shutdown releases the Lease
  // first, so a standby takes over within a retry period.
  std::optional<LeaderElectionOptions> leader_election;
  // Lines Start() logs as warnings once: reference flags given that epp accepts without doing
  // what they ask, and why (BuildServeConfig fills it).
  std::vector<std::string> notices;

  const Logger* log = nullptr;  // nullptr: NullLogger
};

struct ConfigReloadCounters {
  int64_t ok = 0;
  int64_t failed = 0;
  std::string last_error;  // of the last attempt; empty after a success
};

class EppServer {
 public:
  // Everything listens (readiness still NOT_SERVING: SetReady(true) when the host is ready) and
  // the pool's threads run. kInvalidArgument for a bad config or endpoints, kUnavailable when a
  // port cannot be bound.
  static absl::StatusOr<std::unique_ptr<EppServer>> Start(ServeConfig config);
  ~EppServer();  // Shutdown(0)
  EppServer(const EppServer&) = delete;
  EppServer& operator=(const EppServer&) = delete;

  int grpc_port() const;
  int health_port() const;   // -1 without a health server
  int metrics_port() const;  // -1 without a metrics server
  // The host's readiness; with leader election, readiness is SERVING only while also leading.
  void SetReady(bool ready);
  // Without leader election: true. With it: whether this replica holds the Lease now.
  bool leading() const;
  // Gives the Lease up now (readiness NOT_SERVING on this replica; a standby takes over) and
  // stops competing for it: what SIGTERM does first. No-op without leader election.
  void StepDown();
  // New ext_proc streams are refused (UNAVAILABLE) from now on; open ones go on. Shutdown does
  // this first; serve calls it when readiness turns NOT_SERVING with no --shutdown-delay, so no
  // stream can slip in between the two.
  void BeginDrain();
  // Stops accepting streams, lets open ones finish for up to `drain`, cancels the rest, then stops
  // the config watch, the pool, the metrics and health servers. Idempotent.
  void Shutdown(std::chrono::milliseconds drain);

  // Re-reads the config file now (what the watch does on a settled change). The error is also
  // counted and logged; the running scheduler stays.
  absl::Status ReloadConfig();
  ConfigReloadCounters config_reloads() const;

  std::shared_ptr<const Scheduler> scheduler() const;  // the one new streams use
  const EndpointPool* pool() const;                    // nullptr with ServeConfig::endpoint_source
  const EndpointSource& endpoints() const;             // the pool, or the caller's source
  // The ext_proc server's certificate (PEM; the self-signed one when none was given), "" without
  // TLS: what a client pins to trust the server. The one new connections get now: after a
  // certificate reload (reload_cert_file), the reloaded one.
  std::string certificate_pem() const;
  ExtProcStats& stats();
  // The decision log, nullptr unless ServeConfig::decision_log.capacity > 0.
  const DecisionLog* decision_log() const;
  std::string RenderMetrics() const;  // the /metrics exposition now
  // "ext_proc 0.0.0.0:9002 (TLS, self-signed certificate), health ..., metrics ...; 3 endpoints
  // from ...; config ...": the start-up line.
  std::string Describe() const;

  struct Impl;

 private:
  explicit EppServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace epp
