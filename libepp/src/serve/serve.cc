// EppServer (epp/runtime/serve.h): a scheduler, its endpoint pool, and the ext_proc, health and metrics
// servers around them; the configuration file watch and reload.
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <set>
#include <thread>

#include "epp/config.h"
#include "epp/kv/subscriber.h"
#include "epp/params.h"
#include "epp/registry.h"
#include "epp/runtime/serve.h"
#include "epp/runtime/kv_redis.h"
#include "epp/version.h"
#include "flowcontrol/build.h"
#include "flowcontrol/controller.h"
#include "plugins/datalayer/datalayer.h"
#include "serve/file_watch.h"
#include "serve/serve_metrics.h"

namespace epp {
namespace {

// gRPC wants "[v6]:port".
std::string JoinHostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos && host.front() != '[') return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

// How an explicit staleness threshold reaches the scheduler. The saturation detector has its own
// `metricsStalenessThreshold` parameter (GIE: 200ms). The threshold sets it on the default
// utilization-detector when the configuration leaves it unset; when the configuration sets it, or
// names its own detector, the configuration governs. Returns what was decided, for the log.
std::string ApplyDetectorStaleness(EppConfig& config, std::optional<std::chrono::microseconds> staleness) {
  if (!staleness) return {};
  const std::string text = FormatDurationMicros(staleness->count());
  if (!config.saturation_detector_ref.empty()) {
    return "detector_staleness: the config's saturation detector '" + config.saturation_detector_ref +
           "' keeps its own metricsStalenessThreshold; metrics_staleness_threshold sets only the pool-average gauges";
  }
  for (const PluginSpec& p : config.plugins) {
    // BuildScheduler uses a plugin named utilization-detector as the default detector.
    if (p.name == "utilization-detector" && config.saturation_detector_params.is_null()) {
      return "detector_staleness: the config's plugin 'utilization-detector' keeps its own "
             "metricsStalenessThreshold; metrics_staleness_threshold sets only the pool-average gauges";
    }
  }
  Params& params = config.saturation_detector_params;
  if (params.is_map() && params.Has("metricsStalenessThreshold")) {
    return "detector_staleness: the config sets saturationDetector.metricsStalenessThreshold, which "
           "governs; metrics_staleness_threshold sets only the pool-average gauges";
  }
  if (params.is_null()) params = Params::Map("saturationDetector");
  if (!params.is_map()) return {};  // BuildScheduler reports the bad section
  params.Set("metricsStalenessThreshold", Params::String(text));
  return "detector_staleness=" + text + " applied to the saturation detector (metricsStalenessThreshold)";
}

}  // namespace

struct EppServer::Impl {
  explicit Impl(ServeConfig c)
      : config(std::move(c)), log(config.log ? *config.log : NullLogger::Get()), rng(config.seed) {}

  ServeConfig config;
  const Logger& log;
  SeededRng rng;  // shared by every scheduler built here (plugins keep a pointer to it)
  // --shared-state: the other replicas' prefix updates, in-flight counts and programs' attained
  // service. Declared before the schedulers and the flow-control layers (their prefix producers
  // and program-aware fairness policies subscribe to it): destroyed after them.
  std::unique_ptr<RedisSharedState> shared;
  PluginRegistry registry = BuiltinRegistry();
  std::unique_ptr<SchedulerHandle> handle;
  std::unique_ptr<EndpointPool> pool;
  const EndpointSource* endpoints = nullptr;  // the pool, or config.endpoint_source
  // The flow-control layer new streams wait in (featureGates: [flowControl]; empty otherwise).
  // A reload builds a new one; the previous layer stays (retired) while requests still wait in
  // it or streams still hold it, dispatching as capacity frees, and is stopped at a later reload
  // once idle. Declared after `pool` (its sampler reads it) and before `server` (whose streams
  // cancel into it), so that it is destroyed between them.
  std::shared_ptr<FlowControlHandle> flow = std::make_shared<FlowControlHandle>();
  std::vector<std::shared_ptr<flowcontrol::FlowController>> retired_flows;  // under mu
  // What the ext_proc port serves now (with TLS), and the files re-read into it (tls_thread, the
  // only writer after start; writes under tls_mu, which certificate_pem() reads under).
  mutable std::mutex tls_mu;
  std::string tls_cert_pem, tls_key_pem, tls_client_ca_pem;
  std::vector<internal::FileWatch> tls_watches;
  std::thread tls_thread;
  std::unique_ptr<ExtProcServer> server;
  std::unique_ptr<HealthServer> health;
  internal::AdminHttpStats metrics_http;  // the metrics port's counters (outlives `metrics`)
  std::unique_ptr<internal::MetricsHttpServer> metrics;
  std::shared_ptr<DecisionLog> decisions;
  std::shared_ptr<Tracer> tracer;
  std::string tls_mode = "plaintext h2c";

  std::mutex reload_mu;   // one reload at a time (the watch thread, ReloadConfig callers)
  mutable std::mutex mu;  // guards reloads, stop
  ConfigReloadCounters reloads;
  bool stop = false;
  bool shut_down = false;
  std::condition_variable cv;
  std::thread watch_thread;

  // KV events: a subscriber feeding the index of the scheduler's precise prefix producer
  // (RuntimeNeeds::kv_events). Kept in step by SyncKv, which runs when the pool installs an
  // endpoint set (EndpointPoolOptions::on_installed) and after a reload swaps the scheduler; it
  // reads the current scheduler and the last installed specs under kv_mu, so whichever of two
  // concurrent calls runs last leaves the subscriber matching both.
  std::unique_ptr<KvEventSubscriber> kv;
  std::shared_ptr<KvBlockIndex> kv_index;  // the index `kv` feeds (kept alive with it)
  std::unique_ptr<KvRedisMirror> kv_redis;  // redisConfig: the index's copy in Redis
  std::vector<KvSubscription> kv_subs;
  std::vector<EndpointSpec> kv_specs;  // the pool's last installed set
  mutable std::mutex kv_mu;            // guards the four above

  // Under kv_mu.
  void SyncKvLocked() {
    if (kv_stopped) return;
    const std::shared_ptr<const Scheduler> current = handle->Get();
    const KvEventsBinding* b = current->Needs().kv_events;
    if (!b) {
      if (kv) {
        kv->Stop();
        kv.reset();
        if (kv_redis) kv_redis->Stop();
        kv_redis.reset();
        kv_index.reset();
        kv_subs.clear();
      }
      return;
    }
    if (!kv || kv_index != b->index) {  // first time, or a reload built a new index
      if (kv) kv->Stop();
      kv.reset();
      if (kv_redis) kv_redis->Stop();
      kv_redis.reset();
      if (!b->redis_address.empty()) {
        // The copy in Redis first, so the index is warm before the first event and the first
        // stream; Redis away: the index starts cold and the copy catches up when it answers.
        KvRedisOptions ro;
        ro.address = b->redis_address;
        absl::StatusOr<std::unique_ptr<KvRedisMirror>> mirror = KvRedisMirror::Create(ro, b->index, &log);
        if (mirror.ok()) {
          kv_redis = *std::move(mirror);
          if (absl::StatusOr<size_t> n = kv_redis->Load(); !n.ok())
            log.Warn("kv index copy: not read (" + std::string(n.status().message()) + "); the index starts cold");
          kv_redis->Start();
        } else {
          log.Error("kv index copy: " + std::string(mirror.status().message()));
        }
      }
      KvSubscriberOptions ko;
      ko.topic_filter = b->topic_filter;
      ko.central_endpoint = b->central_endpoint;
      ko.verify_peer_address = b->verify_peer_address;
      ko.log = &log;
      kv_index = b->index;
      kv = std::make_unique<KvEventSubscriber>(kv_index.get(), ko);
      if (!kv->central_address().empty()) log.Info("kv events: central socket bound at " + kv->central_address());
      kv_subs.clear();
      kv->Start();
    }
    std::vector<KvSubscription> subs = KvSubscriptionsFor(*b, kv_specs);
    if (subs != kv_subs) {
      kv->SetSubscriptions(subs);
      kv_subs = std::move(subs);
    }
  }
  void SyncKv() {
    std::lock_guard<std::mutex> lock(kv_mu);
    SyncKvLocked();
  }
  void OnEndpointsInstalled(const std::vector<EndpointSpec>& specs) {
    std::lock_guard<std::mutex> lock(kv_mu);
    kv_specs = specs;
    SyncKvLocked();
  }
  void StopKv() {
    std::lock_guard<std::mutex> lock(kv_mu);
    kv_stopped = true;
    if (kv) kv->Stop();
    if (kv_redis) kv_redis->Stop();
  }
  bool kv_stopped = false;  // under kv_mu: Shutdown ran, no subscriber is started again

  // Readiness as the health services report it: the host's word (SetReady), and, with leader
  // election, leadership: a standby is alive but not ready, so the Service sends it nothing.
  std::atomic<bool> host_ready{false};
  std::atomic<bool> leader{true};
  std::unique_ptr<LeaderElector> elector;
  std::unique_ptr<RequestPolicyWatcher> policies;
  std::unique_ptr<MetricsAuthorizer> metrics_auth;
  void PublishHealth() {
    const bool ready = host_ready.load() && leader.load();
    if (health) health->SetReady(ready);
    if (server) server->SetServing(ready);
  }

  // How metrics are read before the configuration has its say (the server's own settings).
  ScrapeOptions BaseScrape() const {
    ScrapeOptions o;
    o.engine = config.engine;
    o.metric_overrides = config.metric_overrides;
    o.insecure = config.metrics_insecure_skip_verify;
    o.timeout = std::chrono::milliseconds(
        std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::milliseconds>(config.scrape_timeout).count()));
    o.accept_gzip = config.scrape_gzip;
    return o;
  }
  // The scrape settings `s` asks for: the base, then its core-metrics-extractor.
  ScrapeOptions ScrapeFor(const Scheduler& s) const {
    ScrapeOptions o = BaseScrape();
    s.ConfigureScrape(o);
    return o;
  }

  PluginContext Context() {
    PluginContext c{&SteadyClock::Get(), &rng};
    c.region = config.region;
    c.zone = config.zone;
    c.shared_prefix = shared.get();
    return c;
  }

  // The flow-control layer `c` asks for over `scheduler`, not started; nullptr when the
  // feature gate is off.
  absl::StatusOr<std::shared_ptr<flowcontrol::FlowController>> BuildFlow(const EppConfig& c,
                                                                        std::shared_ptr<const Scheduler> scheduler) {
    if (!flowcontrol::FlowControlEnabled(c)) return std::shared_ptr<flowcontrol::FlowController>();
    EPP_ASSIGN_OR_RETURN(flowcontrol::ControllerConfig fc, flowcontrol::BuildControllerConfig(c, *scheduler, registry));
    flowcontrol::PoolSampler sampler = flowcontrol::MakePoolSampler(std::move(scheduler), *endpoints);
    return std::make_shared<flowcontrol::FlowController>(std::move(fc), std::move(sampler), SteadyClock::Get());
  }
  // Under mu: `next` (started here) serves new streams; the previous layer retires.
  void SwapFlow(std::shared_ptr<flowcontrol::FlowController> next) {
    if (next) next->Start();
    std::shared_ptr<flowcontrol::FlowController> previous = flow->Get();
    flow->Set(std::move(next));
    if (previous) retired_flows.push_back(std::move(previous));
    // A retired layer nobody holds (no stream can reach it any more) with nothing queued stops.
    for (auto it = retired_flows.begin(); it != retired_flows.end();) {
      if (it->use_count() == 1 && (*it)->queued() == 0) {
        (*it)->Shutdown();
        it = retired_flows.erase(it);
      } else {
        ++it;
      }
    }
  }

  // The configuration as the server builds it: loaded, with the detector staleness applied.
  absl::StatusOr<EppConfig> LoadConfig(std::string* note) const {
    EppConfig c = DefaultConfig();
    if (!config.config_file.empty()) {
      EPP_ASSIGN_OR_RETURN(c, LoadConfigFile(config.config_file));
    } else if (!config.config_yaml.empty()) {
      EPP_ASSIGN_OR_RETURN(c, ParseConfig(config.config_yaml, "<config>"));
    }
    *note = ApplyDetectorStaleness(c, config.detector_staleness);
    return c;
  }

  absl::Status Reload() {
    std::lock_guard<std::mutex> serial(reload_mu);
    std::string note;
    EppConfig loaded;
    absl::StatusOr<std::unique_ptr<Scheduler>> built = [&]() -> absl::StatusOr<std::unique_ptr<Scheduler>> {
      EPP_ASSIGN_OR_RETURN(loaded, LoadConfig(&note));
      return RebuildScheduler(loaded, registry, Context(), *handle->Get());
    }();
    std::shared_ptr<const Scheduler> next;
    absl::StatusOr<std::shared_ptr<flowcontrol::FlowController>> next_flow;
    if (built.ok()) {
      next = std::shared_ptr<const Scheduler>(*std::move(built));
      next_flow = BuildFlow(loaded, next);
      if (!next_flow.ok()) built = next_flow.status();
    }
    std::lock_guard<std::mutex> lock(mu);
    if (!built.ok()) {
      reloads.failed++;
      reloads.last_error = std::string(built.status().message());
      log.Error("config " + config.config_file + " not reloaded: " + reloads.last_error +
                "; the running scheduler stays");
      return built.status();
    }
    // The new configuration's scrape settings are checked before it replaces the running one:
    // a setting the pool refuses fails the reload as a bad config would.
    const Scheduler& previous = *handle->Get();
    if (pool && (next->Needs().scrape_settings || previous.Needs().scrape_settings)) {
      if (absl::Status s = pool->SetScrapeOptions(ScrapeFor(*next)); !s.ok()) {
        reloads.failed++;
        reloads.last_error = "metrics scrape settings: " + std::string(s.message());
        log.Error("config " + config.config_file + " not reloaded: " + reloads.last_error +
                  "; the running scheduler stays");
        return s;
      }
    }
    for (const std::string& w : next->warnings()) log.Warn("config: " + w);
    handle->Set(std::move(next));
    if (config.scheduler == nullptr) SwapFlow(*std::move(next_flow));
    SyncKv();  // a new precise producer's index, or none
    reloads.ok++;
    reloads.last_error.clear();
    log.Info("config " + config.config_file + " reloaded: new streams use it; open streams finish on the previous one");
    return absl::OkStatus();
  }

  // The config file as Start() read it: marked applied before the read, so that a change made
  // from then on (even before the watch thread first runs) is seen.
  std::unique_ptr<internal::FileWatch> config_watch;

  void Watch() {
    internal::FileWatch& watch = *config_watch;
    const auto interval = std::max(config.refresh_interval, std::chrono::microseconds(20000));
    std::unique_lock<std::mutex> lock(mu);
    while (!cv.wait_for(lock, interval, [this] { return stop; })) {
      lock.unlock();
      switch (watch.Poll()) {
        case internal::FileWatch::Change::kChanged:
          (void)Reload();  // counted and logged there
          break;
        case internal::FileWatch::Change::kGone:
          log.Warn("config " + config.config_file + " cannot be read; the running scheduler stays");
          break;
        default:
          break;
      }
      lock.lock();
    }
  }

  // Certificate rotation: the files are looked at every tls_reload_interval; once a change has
  // settled (every file looked the same twice in a row) all of them are read again and handed to
  // the server, which checks them before new handshakes use them.
  void WatchTls() {
    bool changed = false;
    std::unique_lock<std::mutex> lock(mu);
    while (!cv.wait_for(lock, config.tls_reload_interval, [this] { return stop; })) {
      lock.unlock();
      bool settling = false;
      for (internal::FileWatch& w : tls_watches) {
        const internal::FileWatch::Change change = w.Poll();
        settling |= change == internal::FileWatch::Change::kSettling;
        changed |= change == internal::FileWatch::Change::kChanged || change == internal::FileWatch::Change::kGone;
      }
      if (changed && !settling) {
        changed = false;
        ReloadTls();
      }
      lock.lock();
    }
  }

  void ReloadTls() {
    const ServeConfig& c = config;
    auto read = [](const std::string& path, std::string* out) {
      std::ifstream in(path, std::ios::binary);
      std::ostringstream text;
      text << in.rdbuf();
      *out = text.str();
      return static_cast<bool>(in);
    };
    std::string cert = tls_cert_pem, key = tls_key_pem, ca = tls_client_ca_pem;
    const bool certs = !c.reload_cert_file.empty();
    const bool cas = !c.reload_client_ca_file.empty();
    // Named by their settings (the CLI and pyepp show them as their own flags and keywords).
    std::string what = certs ? "cert_path " + c.tls_source : "";
    if (cas) what += (certs ? " and " : "") + std::string("client_ca ") + c.client_ca_source;
    for (const std::string* path : {&c.reload_cert_file, &c.reload_key_file, &c.reload_client_ca_file}) {
      if (path->empty()) continue;
      std::string* into = path == &c.reload_cert_file ? &cert : path == &c.reload_key_file ? &key : &ca;
      if (!read(*path, into)) {
        log.Warn("ext_proc TLS: " + *path + " cannot be read; new connections keep getting what was loaded before");
        tls_reloads_failed++;
        return;
      }
    }
    if (cert == tls_cert_pem && key == tls_key_pem && ca == tls_client_ca_pem) return;  // touched, same content
    if (absl::Status st = server->UpdateTls(cert, key, ca); !st.ok()) {
      log.Warn("ext_proc TLS: the changed " + what + (certs && cas ? " are" : " is") + " not used: " +
               std::string(st.message()) + "; new connections keep getting what was loaded before");
      tls_reloads_failed++;
      return;
    }
    std::string parts;
    if (cert != tls_cert_pem || key != tls_key_pem) parts = "a new certificate from cert_path " + c.tls_source;
    if (ca != tls_client_ca_pem) parts += (parts.empty() ? "" : " and ") + std::string("a new client CA bundle from client_ca ") + c.client_ca_source;
    {
      std::lock_guard<std::mutex> lock(tls_mu);
      tls_cert_pem = std::move(cert);
      tls_key_pem = std::move(key);
      tls_client_ca_pem = std::move(ca);
    }
    log.Info("ext_proc TLS: " + parts + " in use for new connections (open ones keep theirs)");
    tls_reloads++;
  }
  std::atomic<int64_t> tls_reloads{0}, tls_reloads_failed{0};  // epp_tls_reloads_total{result}

  internal::ServeMetricsSources Sources() const {
    internal::ServeMetricsSources s;
    s.stats = &server->stats();
    s.buffer_budget = &server->buffer_budget();
    if (!tls_watches.empty()) s.tls_reloads = std::make_pair(tls_reloads.load(), tls_reloads_failed.load());
    s.endpoints = endpoints;
    s.pool = pool.get();
    s.staleness_us = config.staleness.count();
    s.pool_name = config.pool_name;
    if (config.metrics_port >= 0) s.metrics_http = &metrics_http;
    {
      std::lock_guard<std::mutex> kv_lock(kv_mu);
      if (kv_redis) s.kv_redis = kv_redis->stats();
      if (kv) {
        s.kv_endpoints = kv->Stats();
        s.kv_index = kv_index->Stats();
        if (!kv->central_address().empty() || !kv->central_error().empty()) s.kv_central = kv->central_stats();
        s.kv_holdings = kv_index->Endpoints();
      }
    }
    if (elector) {
      s.lease_name = elector->options().name;
      s.leader = elector->stats();
    }
    if (policies) s.policy_watch = policies->stats();
    if (std::shared_ptr<flowcontrol::FlowController> f = flow->Get()) s.flow_control = f->Stats();
    if (tracer) s.tracing = tracer->stats();
    if (shared) s.shared_state = shared->stats();
    std::lock_guard<std::mutex> lock(mu);
    s.config_reloads = reloads;
    return s;
  }
  std::string Render() const {
    internal::ServeMetricsSources s = Sources();
    const std::shared_ptr<const Scheduler> current = handle->Get();
    s.scheduler = current.get();
    return internal::RenderServeMetrics(s, SteadyClock::Get().NowMicros());
  }
};

EppServer::EppServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EppServer::~EppServer() { Shutdown(std::chrono::milliseconds(0)); }

absl::StatusOr<std::unique_ptr<EppServer>> EppServer::Start(ServeConfig config) {
  if (!config.endpoints_file.empty() && (config.discovery || config.import_discovery || config.lister))
    return absl::InvalidArgumentError("pool discovery and an endpoints file cannot be combined");
  if (config.discovery && config.import_discovery)
    return absl::InvalidArgumentError("InferencePool and InferencePoolImport discovery cannot be combined");
  const std::pair<const char*, std::chrono::microseconds> durations[] = {{"refresh interval", config.refresh_interval},
                                                                         {"scrape timeout", config.scrape_timeout},
                                                                         {"staleness threshold", config.staleness}};
  for (const auto& [name, d] : durations)
    if (d.count() <= 0) return absl::InvalidArgumentError(std::string(name) + " must be > 0");
  auto impl = std::make_unique<Impl>(std::move(config));
  Impl& m = *impl;
  const ServeConfig& c = m.config;
  for (const std::string& n : c.notices) m.log.Warn(n);
  {
    // Every Kubernetes client serve starts, each warning said once.
    std::vector<const KubeClientOptions*> kubes;
    if (c.discovery) kubes.push_back(&c.discovery->kube);
    if (c.import_discovery) kubes.push_back(&c.import_discovery->kube);
    if (c.policy_watch) kubes.push_back(&c.policy_watch->kube);
    if (c.metrics_auth) kubes.push_back(&c.metrics_auth->kube);
    if (c.leader_election) kubes.push_back(&c.leader_election->kube);
    std::set<std::string> said;
    for (const KubeClientOptions* k : kubes)
      for (const std::string& w : KubeClientWarnings(*k))
        if (said.insert(w).second) m.log.Warn(w);
  }
  if (c.shared_state) {
    EPP_ASSIGN_OR_RETURN(m.shared, RedisSharedState::Create(*c.shared_state));
  }

  // Configuration and scheduler.
  std::optional<EppConfig> loaded_config;  // for the flow-control layer, built once the pool is
  if (c.scheduler) {
    if (!c.config_file.empty() || !c.config_yaml.empty())
      return absl::InvalidArgumentError("give a scheduler or a configuration, not both");
    m.handle = std::make_unique<SchedulerHandle>(c.scheduler);
  } else {
    std::string note;
    if (!c.config_file.empty() && c.watch_config) {
      m.config_watch = std::make_unique<internal::FileWatch>(c.config_file);
      m.config_watch->MarkApplied();
    }
    EPP_ASSIGN_OR_RETURN(EppConfig loaded, m.LoadConfig(&note));
    loaded_config = loaded;
    EPP_ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> scheduler, BuildScheduler(loaded, m.registry, m.Context()));
    for (const std::string& w : scheduler->warnings()) m.log.Warn("config: " + w);
    if (!note.empty()) m.log.Info(note);
    m.handle = std::make_unique<SchedulerHandle>(std::shared_ptr<const Scheduler>(std::move(scheduler)));
  }
  if (c.refresh_interval + c.scrape_timeout >= c.staleness) {
    m.log.Warn("refresh_metrics_interval (" + FormatDurationMicros(c.refresh_interval.count()) + ") + scrape_timeout (" +
               FormatDurationMicros(c.scrape_timeout.count()) + ") >= metrics_staleness_threshold (" +
               FormatDurationMicros(c.staleness.count()) +
               "): metrics may count as stale between scrapes, and stale endpoints count as saturated for sheddable "
               "requests");
  }

  // Endpoints: resolved once (every endpoint read or found unreadable) before serving.
  Impl* raw = &m;
  if (c.endpoint_source) {
    if (!c.endpoints_file.empty() || !c.endpoints.empty() || c.discovery || c.import_discovery || c.lister)
      return absl::InvalidArgumentError("give an endpoint source or endpoints to read, not both");
    m.endpoints = c.endpoint_source.get();
  } else {
    EndpointPoolOptions po;
    po.endpoints_file = c.endpoints_file;
    po.flag_specs = c.endpoints;
    // The configuration's core-metrics-extractor (engineConfigs, customMetrics, engineLabelKey,
    // defaultEngine) over the server's settings; a reload applies its own (Reload).
    po.resolve.scrape = m.ScrapeFor(*m.handle->Get());
    po.interval = c.refresh_interval;
    po.log = &m.log;
    po.lister = c.lister;
    // The configuration's dataLayer.discovery (file-discovery): where it lists the endpoints,
    // unless the command line names them.
    if (std::shared_ptr<EndpointLister> d = plugins::ConfiguredDiscovery(*m.handle->Get(), &m.log)) {
      if (po.lister || c.discovery || c.import_discovery || !c.endpoints_file.empty())
        m.log.Warn("config: dataLayer.discovery (" + d->Describe() + ") not used: the endpoints come from the command line");
      else
        po.lister = std::move(d);
    }
    if (!po.lister && c.discovery) {
      EPP_ASSIGN_OR_RETURN(std::unique_ptr<EndpointLister> lister,
                           c.discovery->watch ? NewInferencePoolWatcher(*c.discovery, &m.log)
                                              : NewInferencePoolLister(*c.discovery));
      po.lister = std::move(lister);
      po.discovery_interval = c.discovery->interval;
    }
    if (!po.lister && c.import_discovery) {
      PoolImportDiscoveryOptions d = *c.import_discovery;
      if (d.log == nullptr) d.log = &m.log;
      EPP_ASSIGN_OR_RETURN(std::unique_ptr<EndpointLister> lister, NewInferencePoolImportLister(d));
      po.lister = std::move(lister);
      po.discovery_interval = d.interval;
    }
    // Departed endpoints are forgotten by the scheduler new streams use; plugins carried over a
    // reload are shared, so their state is forgotten too.
    po.on_departure = [raw](const std::string& address) { raw->handle->Get()->ForgetEndpoint(address); };
    po.on_installed = [raw](const std::vector<EndpointSpec>& specs) { raw->OnEndpointsInstalled(specs); };
    EPP_ASSIGN_OR_RETURN(m.pool, EndpointPool::Create(std::move(po)));
    m.endpoints = m.pool.get();
  }

  // Flow control (featureGates: [flowControl]): requests wait in the layer while the pool is
  // saturated. A caller's scheduler comes without a configuration: no layer.
  if (loaded_config) {
    EPP_ASSIGN_OR_RETURN(std::shared_ptr<flowcontrol::FlowController> flow, m.BuildFlow(*loaded_config, m.handle->Get()));
    if (flow) m.log.Info("flow control on: requests wait in the flow-control layer while the pool is saturated");
    std::lock_guard<std::mutex> lock(m.mu);
    m.SwapFlow(std::move(flow));
  }

  // Servers: ext_proc (TLS material first), health, metrics.
  ExtProcServerOptions so;
  so.session = c.session;
  so.session.flow_control = m.flow;
  if (c.decision_log.capacity > 0) {
    m.decisions = std::make_shared<DecisionLog>(c.decision_log);
    so.session.decision_log = m.decisions;
  }
  if (so.session.tracer) {
    m.tracer = so.session.tracer;
  } else if (c.tracing && c.tracing->exporter != TracingOptions::Exporter::kNone) {
    EPP_ASSIGN_OR_RETURN(std::unique_ptr<Tracer> tracer, Tracer::Start(*c.tracing));
    m.tracer = std::move(tracer);
    so.session.tracer = m.tracer;
  }
  if (m.tracer) m.log.Info("tracing: " + m.tracer->options().Describe());
  so.capture_dir = c.capture_dir;
  so.capture_max_bytes = c.capture_max_bytes;
  so.max_buffered_bytes = c.max_buffered_bytes;
  so.max_streams = c.max_streams;
  so.max_streams_per_connection = c.max_streams_per_connection;
  so.listen = JoinHostPort(c.listen_address, c.grpc_port);
  so.health_checking = c.health_checking;
  if (c.policy_watch) {
    PolicyWatchOptions pw = *c.policy_watch;
    if (pw.log == nullptr) pw.log = &m.log;
    EPP_ASSIGN_OR_RETURN(m.policies, RequestPolicyWatcher::Create(std::move(pw)));
    so.session.policies = m.policies->handle();
  }
  so.max_receive_message_bytes = c.grpc_max_recv_bytes;
  so.max_send_message_bytes = c.grpc_max_send_bytes;
  if (c.tls) {
    so.tls = true;
    if (c.cert_pem.empty() != c.key_pem.empty())
      return absl::InvalidArgumentError("TLS serving needs both a certificate and a key");
    if (c.cert_pem.empty()) {
      if (!c.reload_cert_file.empty() || !c.reload_key_file.empty())
        return absl::InvalidArgumentError("certificate files to reload need the certificate they hold (cert_pem, key_pem)");
      EPP_ASSIGN_OR_RETURN(PemKeyPair pair, GenerateSelfSignedCertificate());
      so.cert_pem = pair.cert_pem;
      so.key_pem = pair.key_pem;
      // Made in memory: nothing a gateway could pin or verify survives a restart.
      m.tls_mode = "TLS, self-signed certificate, new at every start";
    } else {
      so.cert_pem = c.cert_pem;
      so.key_pem = c.key_pem;
      m.tls_mode = c.tls_source.empty() ? "TLS" : "TLS, certificate from " + c.tls_source;
      if (!c.reload_cert_file.empty()) m.tls_mode += ", reloaded when it changes";
    }
    so.client_ca_pem = c.client_ca_pem;
    if (!c.client_ca_pem.empty()) {
      m.tls_mode += ", client certificates required";
      if (!c.client_ca_source.empty()) m.tls_mode += " (CA " + c.client_ca_source + ")";
    }
    m.tls_cert_pem = so.cert_pem;
    m.tls_key_pem = so.key_pem;
    m.tls_client_ca_pem = so.client_ca_pem;
    if (c.tls_reload_interval.count() <= 0) return absl::InvalidArgumentError("tls_reload_interval must be > 0");
    for (const std::string* path : {&c.reload_cert_file, &c.reload_key_file, &c.reload_client_ca_file}) {
      if (path->empty()) continue;
      // Not marked applied: the first looks count as a change, so that a rotation between the
      // read at start and now is not missed (same content: nothing happens).
      m.tls_watches.emplace_back(*path);
    }
  } else if (!c.client_ca_pem.empty()) {
    return absl::InvalidArgumentError(
        "client_ca: client certificates are checked in the TLS handshake, and secure_serving is off");
  }
  EPP_ASSIGN_OR_RETURN(m.server, ExtProcServer::Start(*m.handle, *m.endpoints, so));
  m.server->SetServing(false);
  if (c.health_port >= 0) {
    EPP_ASSIGN_OR_RETURN(m.health, HealthServer::Start(JoinHostPort(c.listen_address, c.health_port)));
  }
  if (c.metrics_port >= 0) {
    internal::MetricsHttpServer::DebugHandler decisions;
    if (m.decisions) decisions = [log = m.decisions](const std::map<std::string, std::string>& q, std::string* body) {
      return internal::ServeDecisions(*log, q, body);
    };
    internal::MetricsHttpServer::Authorize authorize;
    if (c.metrics_auth) {
      MetricsAuthOptions ao = *c.metrics_auth;
      if (ao.log == nullptr) ao.log = &m.log;
      EPP_ASSIGN_OR_RETURN(m.metrics_auth, MetricsAuthorizer::Create(std::move(ao)));
      authorize = [raw](std::string_view authorization, std::string_view path) {
        MetricsAuthorizer::Verdict v = raw->metrics_auth->Check(authorization, path);
        return std::make_pair(v.status, v.reason);
      };
    }
    EPP_ASSIGN_OR_RETURN(m.metrics, internal::MetricsHttpServer::Start(c.listen_address, c.metrics_port,
                                                                       [raw] { return raw->Render(); }, decisions,
                                                                       authorize, &m.metrics_http));
  }
  if (c.leader_election) {
    // A standby until the Lease is ours: alive, warm, not ready.
    m.leader = false;
    LeaderElectionOptions lo = *c.leader_election;
    if (lo.log == nullptr) lo.log = &m.log;
    EPP_ASSIGN_OR_RETURN(m.elector, LeaderElector::Create(std::move(lo), [raw](bool leading) {
                           raw->leader = leading;
                           raw->PublishHealth();
                         }));
  }
  if (m.pool) m.pool->Start();
  if (m.shared) {
    // Redis need not answer now: serving starts on local state and sharing joins when it does.
    const EndpointSource* source = m.endpoints;
    m.shared->Start([raw] { return raw->handle->Get(); },
                    [source] {
                      // Held for the loop: `*source->Snapshot()` in the range would free the
                      // vector under it when the scrape loop installs the next one.
                      const std::shared_ptr<const std::vector<Endpoint>> pool = source->Snapshot();
                      std::vector<std::string> out;
                      for (const Endpoint& e : *pool) out.push_back(e.address);
                      return out;
                    },
                    &m.log);
    m.log.Info("shared state: " + m.shared->redacted_address() + " as replica " + m.shared->options().replica_id +
               ", every " + std::to_string(m.shared->options().interval.count()) + " ms");
  }
  if (m.policies) m.policies->Start();
  if (m.elector) m.elector->Start();
  if (m.config_watch) m.watch_thread = std::thread([raw] { raw->Watch(); });
  if (!m.tls_watches.empty()) m.tls_thread = std::thread([raw] { raw->WatchTls(); });
  m.SyncKv();  // subscribed before the first stream (the pool's first set came in Create)
  return std::unique_ptr<EppServer>(new EppServer(std::move(impl)));
}

int EppServer::grpc_port() const { return impl_->server->port(); }
int EppServer::health_port() const { return impl_->health ? impl_->health->port() : -1; }
int EppServer::metrics_port() const { return impl_->metrics ? impl_->metrics->port() : -1; }
void EppServer::SetReady(bool ready) {
  impl_->host_ready = ready;
  impl_->PublishHealth();
}

bool EppServer::leading() const { return impl_->leader.load(); }

void EppServer::StepDown() {
  if (impl_->elector) impl_->elector->Stop(/*release=*/true);
}

void EppServer::BeginDrain() {
  if (impl_->server) impl_->server->BeginDrain();
}

void EppServer::Shutdown(std::chrono::milliseconds drain) {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (m.shut_down) return;
    m.shut_down = true;
    m.stop = true;
  }
  m.cv.notify_all();
  m.host_ready = false;
  m.PublishHealth();
  // The Lease goes first (GIE's and llm-d's order): a standby takes over within a retry period
  // while this replica drains what it has.
  if (m.elector) m.elector->Stop(/*release=*/true);
  if (m.server) m.server->BeginDrain();
  if (m.server) m.server->Shutdown(drain);
  if (m.watch_thread.joinable()) m.watch_thread.join();
  if (m.tls_thread.joinable()) m.tls_thread.join();
  {
    // Every stream has ended (and left its queue); the dispatchers stop.
    std::lock_guard<std::mutex> lock(m.mu);
    if (std::shared_ptr<flowcontrol::FlowController> f = m.flow->Get()) f->Shutdown();
    for (const auto& f : m.retired_flows) f->Shutdown();
  }
  if (m.pool) m.pool->Stop();  // no endpoint set is installed after this
  if (m.policies) m.policies->Stop();
  if (m.shared) m.shared->Stop();  // after the streams: its key goes, the others stop counting ours
  m.StopKv();
  if (m.metrics) m.metrics->Stop();
  if (m.health) m.health->Shutdown();
}

absl::Status EppServer::ReloadConfig() {
  if (impl_->config.config_file.empty())
    return absl::FailedPreconditionError("no configuration file to reload (the server runs on an embedded config)");
  return impl_->Reload();
}

ConfigReloadCounters EppServer::config_reloads() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->reloads;
}

std::shared_ptr<const Scheduler> EppServer::scheduler() const { return impl_->handle->Get(); }
const EndpointPool* EppServer::pool() const { return impl_->pool.get(); }
const EndpointSource& EppServer::endpoints() const { return *impl_->endpoints; }
std::string EppServer::certificate_pem() const {
  std::lock_guard<std::mutex> lock(impl_->tls_mu);
  return impl_->tls_cert_pem;
}
ExtProcStats& EppServer::stats() { return impl_->server->stats(); }
const DecisionLog* EppServer::decision_log() const { return impl_->decisions.get(); }
std::string EppServer::RenderMetrics() const { return impl_->Render(); }

std::string EppServer::Describe() const {
  const Impl& m = *impl_;
  const ServeConfig& c = m.config;
  const size_t n = m.endpoints->Snapshot()->size();
  std::string out = "ext_proc " + JoinHostPort(c.listen_address, grpc_port()) + " (" + m.tls_mode + ")";
  if (m.health) out += ", health " + JoinHostPort(c.listen_address, health_port()) + " (grpc.health.v1, plaintext)";
  if (m.metrics) out += ", metrics http://" + JoinHostPort(c.listen_address, metrics_port()) + "/metrics";
  out += "; " + std::to_string(n) + (n == 1 ? " endpoint from " : " endpoints from ") +
         (m.pool ? m.pool->Describe() : std::string("the caller"));
  std::string config = c.config_file.empty() ? "<default: GIE's default profile>" : c.config_file;
  if (!c.config_file.empty() && c.watch_config) config += " (watched)";
  if (c.config_file.empty() && !c.config_yaml.empty()) config = "<embedded>";
  if (c.scheduler) config = "<the caller's scheduler>";
  out += "; config " + config;
  if (c.leader_election)
    out += "; leader election on lease " + c.leader_election->ns + "/" + c.leader_election->name + " as " +
           c.leader_election->identity;
  if (c.metrics_auth) out += "; /metrics needs a token the API server authorizes";
  if (m.shared) out += "; shared state " + m.shared->redacted_address() + " as " + m.shared->options().replica_id;
  out += "; refresh " + FormatDurationMicros(c.refresh_interval.count()) + ", staleness " + FormatDurationMicros(c.staleness.count());
  return out;
}

}  // namespace epp
