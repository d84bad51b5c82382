// EndpointPool (epp/runtime/serve.h): the endpoint set behind a serving scheduler, kept current.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <set>

#include "endpoints/kube_internal.h"
#include "epp/runtime/kube.h"
#include "serve/endpoint_pool_impl.h"

namespace epp {
namespace {

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3fs", s);
  return buf;
}

// An InferencePool's Ready Pods through the Kubernetes API.
class InferencePoolLister final : public EndpointLister {
 public:
  InferencePoolLister(PoolDiscoveryOptions options, std::unique_ptr<KubeClient> kube, LabelSelector standalone)
      : options_(std::move(options)), kube_(std::move(kube)), standalone_(std::move(standalone)) {}

  absl::StatusOr<std::vector<EndpointSpec>> List(const std::atomic<bool>& cancel) override {
    LabelSelector selector = standalone_;
    std::vector<int> ports = options_.target_ports;
    if (!options_.name.empty()) {
      // The pool is read each time: its selector and targetPorts may change.
      EPP_ASSIGN_OR_RETURN(InferencePool pool, kube_->GetInferencePool(options_.group, options_.ns, options_.name));
      selector = MatchLabelsSelector(pool.selector);
      ports = pool.target_ports;
    }
    // Stop() waits for the discovery thread: not a second request (up to the client's timeout)
    // once it was asked to stop.
    if (cancel.load()) return absl::CancelledError("stopping");
    EPP_ASSIGN_OR_RETURN(std::string path, PodCollectionPath(options_.ns));
    // resourceVersion=0: served from the API server's watch cache rather than a quorum read.
    path += "?labelSelector=" + UrlQueryEscape(selector.String()) + "&resourceVersion=0";
    EPP_ASSIGN_OR_RETURN(std::string body, kube_->Get(path));
    EPP_ASSIGN_OR_RETURN(std::vector<PodInfo> pods,
                         ParsePodList(body, "GET " + kube_->options().api_server + path, options_.ns, selector));
    return PodEndpoints(pods, selector, ports, options_.metrics);
  }
  std::string Describe() const override {
    if (options_.name.empty()) return "pods of namespace " + options_.ns + " matching '" + standalone_.String() + "'";
    return "inferencepool " + options_.ns + "/" + options_.name;
  }

 private:
  PoolDiscoveryOptions options_;
  std::unique_ptr<KubeClient> kube_;  // one thread at a time (the discovery thread, or Create)
  LabelSelector standalone_;          // standalone mode's selector (options_.name empty)
};

// An InferencePoolImport's exporting clusters, looked up in the cluster directory.
class InferencePoolImportLister final : public EndpointLister {
 public:
  InferencePoolImportLister(PoolImportDiscoveryOptions options, std::unique_ptr<KubeClient> kube)
      : options_(std::move(options)), kube_(std::move(kube)) {}

  absl::StatusOr<std::vector<EndpointSpec>> List(const std::atomic<bool>&) override {
    EPP_ASSIGN_OR_RETURN(InferencePoolImport imp, kube_->GetInferencePoolImport(options_.ns, options_.name));
    std::vector<std::string> missing;
    std::vector<EndpointSpec> out = ImportEndpoints(imp, options_.clusters, options_.cluster_label, &missing);
    if (missing != missing_ && options_.log != nullptr && !missing.empty()) {
      std::string names;
      for (const std::string& c : missing) names += (names.empty() ? "" : ", ") + c;
      options_.log->Warn(Describe() + ": exporting cluster(s) " + names + " have no entry with label " +
                         options_.cluster_label + " in the cluster directory; they get no requests");
    }
    missing_ = std::move(missing);
    return out;
  }
  std::string Describe() const override { return "inferencepoolimport " + options_.ns + "/" + options_.name; }

 private:
  PoolImportDiscoveryOptions options_;
  std::unique_ptr<KubeClient> kube_;
  std::vector<std::string> missing_;  // the discovery thread's
};

}  // namespace

absl::StatusOr<std::unique_ptr<EndpointLister>> NewInferencePoolImportLister(const PoolImportDiscoveryOptions& options) {
  EPP_RETURN_IF_ERROR(InferencePoolImportPath(options.ns, options.name).status());
  bool labelled = false;
  for (const EndpointSpec& s : options.clusters) labelled = labelled || s.labels.contains(options.cluster_label);
  if (!labelled)
    return absl::InvalidArgumentError("pool import discovery: no entry of the cluster directory has the label '" +
                                      options.cluster_label + "' naming its cluster");
  auto kube = KubeClient::Create(options.kube);
  if (!kube.ok()) return absl::Status(kube.status().code(), "pool import discovery: " + std::string(kube.status().message()));
  return std::unique_ptr<EndpointLister>(new InferencePoolImportLister(options, *std::move(kube)));
}

absl::StatusOr<std::unique_ptr<EndpointLister>> NewInferencePoolLister(const PoolDiscoveryOptions& options) {
  LabelSelector standalone;
  if (options.name.empty()) {
    EPP_ASSIGN_OR_RETURN(standalone, internal::StandaloneSelector(options.selector, options.target_ports));
    EPP_RETURN_IF_ERROR(PodCollectionPath(options.ns).status());
  } else {
    EPP_RETURN_IF_ERROR(InferencePoolPath(options.group, options.ns, options.name).status());
  }
  auto kube = KubeClient::Create(options.kube);
  if (!kube.ok()) return absl::Status(kube.status().code(), "pool discovery: " + std::string(kube.status().message()));
  return std::unique_ptr<EndpointLister>(new InferencePoolLister(options, *std::move(kube), std::move(standalone)));
}

// ---- Impl ------------------------------------------------------------------------------------

int64_t EndpointPool::Impl::NowMicros() const {
  return options.resolve.clock ? options.resolve.clock->NowMicros() : SteadyClock::Get().NowMicros();
}

ResolveOptions EndpointPool::Impl::Resolve() {
  ResolveOptions r = options.resolve;
  r.fail_on_metrics_error = false;  // an endpoint that cannot be read stays, with its error
  if (r.http_client == nullptr) r.http_client = &client;
  return r;
}

absl::StatusOr<std::vector<EndpointSpec>> EndpointPool::Impl::LoadSpecs() const {
  std::vector<EndpointSpec> out;
  if (!options.endpoints_file.empty()) {
    EPP_ASSIGN_OR_RETURN(out, LoadEndpointsFile(options.endpoints_file));
  }
  out.insert(out.end(), options.flag_specs.begin(), options.flag_specs.end());
  EPP_RETURN_IF_ERROR(ValidateEndpointSpecs(out));
  return out;
}

absl::StatusOr<std::vector<EndpointSpec>> EndpointPool::Impl::WithFlags(std::vector<EndpointSpec> found) const {
  std::set<std::string> flagged;
  for (const EndpointSpec& s : options.flag_specs) flagged.insert(s.address);
  std::vector<EndpointSpec> out;
  for (EndpointSpec& s : found)
    if (!flagged.count(s.address)) out.push_back(std::move(s));
  out.insert(out.end(), options.flag_specs.begin(), options.flag_specs.end());
  EPP_RETURN_IF_ERROR(ValidateEndpointSpecs(out));
  return out;
}

void EndpointPool::Impl::Install(std::vector<EndpointSpec> new_specs, std::vector<Endpoint> new_endpoints) {
  // Departed: addresses that left, and addresses now of another instance (a new Pod with the IP
  // of one that went away): the old Pod's prefix entries and in-flight load must not carry over.
  std::map<std::string, std::string> kept;  // address -> instance
  for (const EndpointSpec& s : new_specs) kept.emplace(s.address, s.instance);
  std::vector<std::string> departed;
  for (const EndpointSpec& s : specs) {
    auto it = kept.find(s.address);
    if (it == kept.end() || it->second != s.instance) departed.push_back(s.address);
  }
  std::map<std::string, std::string> old_errors;
  for (size_t i = 0; i < specs.size() && i < last_error.size(); ++i) old_errors[specs[i].address] = last_error[i];

  specs = std::move(new_specs);
  endpoints = std::move(new_endpoints);
  ++generation;
  last_error.assign(specs.size(), std::string());
  {
    std::lock_guard<std::mutex> lock(mu);
    published_specs = specs;
    std::map<std::string, int64_t> errors;
    for (const EndpointSpec& s : specs) {
      auto it = counters.scrape_errors.find(s.address);
      errors[s.address] = it == counters.scrape_errors.end() ? 0 : it->second;
    }
    counters.scrape_errors = std::move(errors);
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    auto it = old_errors.find(specs[i].address);
    if (it != old_errors.end()) last_error[i] = it->second;
    // The resolve just done read (or failed to read) every endpoint once.
    Track(i, endpoints[i].metrics_time_us.has_value() || specs[i].metrics == kNoMetrics);
  }
  size = endpoints.size();
  snapshot.Set(endpoints);
  // Only after the new snapshot is published, so that no pick sees the endpoint again.
  if (options.on_departure)
    for (const std::string& address : departed) options.on_departure(address);
  if (options.on_installed) options.on_installed(specs);
}

void EndpointPool::Impl::TakePendingScrape() {
  std::optional<std::pair<ScrapeOptions, std::shared_ptr<const MetricMappings>>> taken;
  {
    std::lock_guard<std::mutex> lock(mu);
    taken.swap(pending_scrape);
    if (!taken) return;
    counters.scrape_settings_applied++;
  }
  options.resolve.scrape = std::move(taken->first);
  options.resolve.mappings = std::move(taken->second);
  ++generation;  // the threaded loop rebuilds its scraper with the new mappings
}

void EndpointPool::Impl::Track(size_t i, bool read) {
  const Endpoint& e = endpoints[i];
  if (specs[i].metrics == kNoMetrics) return;
  if (!read) {
    std::lock_guard<std::mutex> lock(mu);
    counters.scrape_errors[e.address]++;
  }
  // What is compared from one round to the next: a transport error's text varies ("after 3 ms"),
  // so an unreadable endpoint is one state; a partial read is keyed by its (stable) check list.
  const std::string state = !read ? std::string(e.unreachable ? "unreachable" : "unreadable") : e.metrics_error;
  std::string& last = last_error[i];
  if (state == last) {
    if (!read && log.Enabled(LogLevel::kDebug)) log.Debug("endpoint " + e.address + ": scrape failed again: " + e.metrics_error);
    return;
  }
  if (state.empty()) {
    log.Info("endpoint " + e.address + ": metrics read again");
  } else if (!read) {
    std::string age = "never read";
    if (const std::optional<int64_t> us = MetricsAgeMicros(e, NowMicros())) age = "last read " + Seconds(*us / 1e6) + " ago";
    log.Warn("endpoint " + e.address + ": metrics cannot be read (" + age +
             (e.unreachable ? "; connection refused: picks pass it over while other endpoints remain): "
                            : "; picks use the last metrics read): ") +
             e.metrics_error);
  } else {
    log.Warn("endpoint " + e.address + ": metrics read but incomplete: " + e.metrics_error);
  }
  last = state;
}

bool EndpointPool::Impl::Replace(absl::StatusOr<std::vector<EndpointSpec>> new_specs, const std::string& source) {
  const std::string keep = "; keeping the " + std::to_string(endpoints.size()) + " endpoints in use";
  absl::StatusOr<std::vector<Endpoint>> resolved =
      new_specs.ok() ? ResolveChanged(*new_specs) : absl::StatusOr<std::vector<Endpoint>>(new_specs.status());
  if (!resolved.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu);
      counters.reloads_failed++;
    }
    const std::string message(resolved.status().message());
    // A rejected discovered list is handed over again every round: log it once per message.
    if (!options.lister || message != rejected_state) {
      log.Error(source + " not loaded: " + message + keep);
    } else if (log.Enabled(LogLevel::kDebug)) {
      log.Debug(source + " not loaded again: " + message);
    }
    if (options.lister) rejected_state = message;
    return false;
  }
  rejected_state.clear();
  std::map<std::string, const EndpointSpec*> before, after;  // by address
  for (const EndpointSpec& s : specs) before.emplace(s.address, &s);
  for (const EndpointSpec& s : *new_specs) after.emplace(s.address, &s);
  std::string added, removed, replaced;
  for (const auto& [a, spec] : after) {
    auto it = before.find(a);
    if (it == before.end()) {
      added += (added.empty() ? "" : ", ") + a;
    } else if (it->second->instance != spec->instance) {  // e.g. a new Pod with the IP of one that went away
      replaced += (replaced.empty() ? "" : ", ") + a + " (" + it->second->origin + " -> " + spec->origin + ")";
    }
  }
  for (const auto& [a, spec] : before)
    if (!after.count(a)) removed += (removed.empty() ? "" : ", ") + a;
  Install(*std::move(new_specs), *std::move(resolved));
  {
    std::lock_guard<std::mutex> lock(mu);
    counters.reloads_ok++;
  }
  log.Info(source + " reloaded: " + std::to_string(endpoints.size()) + " endpoints; added: " +
           (added.empty() ? "none" : added) + "; removed: " + (removed.empty() ? "none" : removed) +
           (replaced.empty() ? "" : "; replaced (state forgotten): " + replaced));
  return true;
}

absl::StatusOr<std::vector<Endpoint>> EndpointPool::Impl::ResolveChanged(const std::vector<EndpointSpec>& new_specs) {
  // An endpoint whose spec did not change keeps its Endpoint (metrics, their age, its errors):
  // only new or changed specs are read now. A watch hands over one Pod's change at a time; at a
  // thousand Pods, reading every endpoint again for each would cost a scrape of the whole pool
  // per event and hold the new Pod back until the slowest answered.
  std::map<std::string, size_t> old_index;
  for (size_t i = 0; i < specs.size() && i < endpoints.size(); ++i) old_index.emplace(specs[i].address, i);
  std::vector<EndpointSpec> fresh;
  std::vector<size_t> fresh_at;
  for (size_t i = 0; i < new_specs.size(); ++i) {
    auto it = old_index.find(new_specs[i].address);
    if (it == old_index.end() || !(specs[it->second] == new_specs[i])) {
      fresh.push_back(new_specs[i]);
      fresh_at.push_back(i);
    }
  }
  std::vector<Endpoint> out(new_specs.size());
  if (!fresh.empty()) {
    EPP_RETURN_IF_ERROR(ValidateEndpointSpecs(new_specs));
    EPP_ASSIGN_OR_RETURN(std::vector<Endpoint> read, ResolveEndpoints(fresh, Resolve()));
    for (size_t k = 0; k < fresh_at.size(); ++k) out[fresh_at[k]] = std::move(read[k]);
  }
  for (size_t i = 0, k = 0; i < new_specs.size(); ++i) {
    if (k < fresh_at.size() && fresh_at[k] == i) {
      ++k;
      continue;
    }
    out[i] = endpoints[old_index.at(new_specs[i].address)];
  }
  return out;
}

bool EndpointPool::Impl::DiscoveredPending() {
  std::lock_guard<std::mutex> lock(mu);
  return discovered_pending.has_value();
}

void EndpointPool::Impl::MaybeReload() {
  if (options.lister) {
    std::optional<std::vector<EndpointSpec>> handed;
    {
      std::lock_guard<std::mutex> lock(mu);
      handed.swap(discovered_pending);
    }
    if (handed && !Replace(WithFlags(*std::move(handed)), ListerName())) {
      std::lock_guard<std::mutex> lock(mu);
      discovered_rejected = true;  // hand the next list over even if it is the same
    }
    return;
  }
  if (options.endpoints_file.empty()) return;
  switch (watch.Poll()) {
    case internal::FileWatch::Change::kNone:
    case internal::FileWatch::Change::kSettling:
      return;
    case internal::FileWatch::Change::kGone:
      log.Warn("endpoints file " + options.endpoints_file + " cannot be read; keeping the " +
               std::to_string(endpoints.size()) + " endpoints in use");
      return;
    case internal::FileWatch::Change::kChanged:
      Replace(LoadSpecs(), "endpoints file " + options.endpoints_file);
      return;
  }
}

void EndpointPool::Impl::Refresh() {
  std::vector<std::optional<int64_t>> before(endpoints.size());
  for (size_t i = 0; i < endpoints.size(); ++i) before[i] = endpoints[i].metrics_time_us;
  absl::Status s = RefreshEndpointMetrics(specs, endpoints, Resolve());
  if (!s.ok()) {
    log.Error("metrics refresh: " + std::string(s.message()));
    return;
  }
  for (size_t i = 0; i < endpoints.size(); ++i) {
    const bool read = endpoints[i].metrics_time_us.has_value() && endpoints[i].metrics_time_us != before[i];
    Track(i, read);
  }
  snapshot.Set(endpoints);
}

// ---- EndpointPool ----------------------------------------------------------------------------

EndpointPool::EndpointPool(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EndpointPool::~EndpointPool() { Stop(); }

absl::StatusOr<std::unique_ptr<EndpointPool>> EndpointPool::Create(EndpointPoolOptions options) {
  if (options.lister && !options.endpoints_file.empty())
    return absl::InvalidArgumentError("pool discovery and an endpoints file cannot be combined");
  if (!options.lister && options.endpoints_file.empty() && options.flag_specs.empty())
    return absl::InvalidArgumentError(
        "no endpoints: give pool_name NAME, endpoints_file FILE or endpoint_flags ADDR[=METRICS]");
  if (options.interval.count() <= 0 || (options.lister && options.discovery_interval.count() <= 0))
    return absl::InvalidArgumentError("endpoint pool: intervals must be > 0");
  // The mappings are resolved once for the pool's life, not at every scrape cycle.
  if (!options.resolve.mappings) {
    EPP_ASSIGN_OR_RETURN(MetricMappings mappings, MetricMappings::Create(options.resolve.scrape));
    options.resolve.mappings = std::make_shared<const MetricMappings>(std::move(mappings));
  }
  auto impl = std::make_unique<Impl>(std::move(options));
  Impl& m = *impl;
  std::vector<EndpointSpec> specs;
  if (m.options.lister) {
    auto found = m.options.lister->List(m.stopping);
    if (!found.ok())
      return absl::Status(found.status().code(), m.ListerName() + ": " + std::string(found.status().message()));
    m.discovered = *found;
    EPP_ASSIGN_OR_RETURN(specs, m.WithFlags(*std::move(found)));
    if (specs.empty()) m.log.Warn(m.ListerName() + " has no Ready Pods yet: every pick is answered 503 until one is");
    std::lock_guard<std::mutex> lock(m.mu);
    m.counters.discovery_ok++;
  } else {
    // Marked before reading, so that a change made while loading is seen on the first polls.
    if (!m.options.endpoints_file.empty()) m.watch.MarkApplied();
    EPP_ASSIGN_OR_RETURN(specs, m.LoadSpecs());
    // An endpoints file may list none (yet): the pool starts empty and every pick is a 503 until
    // the file lists one, as the reference EPP does with a pool whose Pods are not Ready.
    if (specs.empty())
      m.log.Warn("endpoints file " + m.options.endpoints_file +
                 " lists no endpoints yet: every pick is answered 503 until it does");
  }
  EPP_ASSIGN_OR_RETURN(std::vector<Endpoint> endpoints, ResolveEndpoints(specs, m.Resolve()));
  m.Install(std::move(specs), std::move(endpoints));
  return std::unique_ptr<EndpointPool>(new EndpointPool(std::move(impl)));
}

std::shared_ptr<const std::vector<Endpoint>> EndpointPool::Snapshot() const { return impl_->snapshot.Snapshot(); }
size_t EndpointPool::size() const { return impl_->size.load(); }

std::vector<EndpointSpec> EndpointPool::Specs() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->published_specs;
}

EndpointPoolCounters EndpointPool::counters() const {
  EndpointPoolCounters out;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    out = impl_->counters;
  }
  if (impl_->options.lister) out.watch = impl_->options.lister->watch_stats();
  return out;
}

std::string EndpointPool::Describe() const {
  const EndpointPoolOptions& o = impl_->options;
  std::string source = o.endpoints_file.empty() ? "" : o.endpoints_file + " (watched)";
  if (o.lister) {
    char every[32];
    std::snprintf(every, sizeof every, "%gs", static_cast<double>(o.discovery_interval.count()) / 1e6);
    source = o.lister->Watches() ? o.lister->Describe() : o.lister->Describe() + " (listed every " + every + ")";
  }
  if (!o.flag_specs.empty())
    source += (source.empty() ? "" : " + ") + std::to_string(o.flag_specs.size()) + " --endpoint flag" +
              (o.flag_specs.size() > 1 ? "s" : "");
  return source;
}

absl::Status EndpointPool::SetScrapeOptions(ScrapeOptions scrape) {
  EPP_RETURN_IF_ERROR(NormalizeScrapeOptions(scrape));
  EPP_ASSIGN_OR_RETURN(MetricMappings mappings, MetricMappings::Create(scrape));
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->pending_scrape.emplace(std::move(scrape), std::make_shared<const MetricMappings>(std::move(mappings)));
  return absl::OkStatus();
}

void EndpointPool::RunCycle() {
  Impl& m = *impl_;
  const auto start = std::chrono::steady_clock::now();
  m.TakePendingScrape();
  m.MaybeReload();
  m.Refresh();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard<std::mutex> lock(m.mu);
  m.counters.scrape_cycles++;
  m.counters.last_scrape_seconds = took;
}

void EndpointPool::RunDiscovery() {
  Impl& m = *impl_;
  if (!m.options.lister) return;
  absl::StatusOr<std::vector<EndpointSpec>> found = m.options.lister->List(m.stopping);
  bool handed = false;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (m.stop) return;  // a list cut short (kCancelled) or one nobody will install
    (found.ok() ? m.counters.discovery_ok : m.counters.discovery_errors)++;
    if (m.discovered_rejected) {  // the scrape thread did not install what it was handed: again
      m.discovered.reset();
      m.discovered_rejected = false;
    }
    if (found.ok() && *found != m.discovered) {
      m.discovered_pending = *found;  // the newest list wins
      m.discovered = *found;
      handed = true;
    }
  }
  // The scrape loop installs it at once rather than at its next reload check (up to an interval
  // later): a Pod that turned Ready is picked within milliseconds of its watch event.
  if (handed) m.ClientInUse().Wakeup();
  if (!found.ok()) {
    const std::string message(found.status().message());
    if (message != m.discovery_state) {
      m.log.Error(m.ListerName() + ": discovery failed: " + message + "; keeping the endpoints in use");
      m.discovery_state = message;
    } else if (m.log.Enabled(LogLevel::kDebug)) {
      m.log.Debug(m.ListerName() + ": discovery failed again: " + message);
    }
  } else {
    if (!m.discovery_state.empty()) m.log.Info(m.ListerName() + ": discovery works again");
    m.discovery_state.clear();
  }
}

void EndpointPool::Impl::ScrapeLoop() {
  using Clock = std::chrono::steady_clock;
  // Picks see new metrics once per slice: a tenth of the interval (1-100 ms), so that a read
  // waits little for publication while the snapshot (a copy of every endpoint) is made at most
  // ten times per interval.
  const auto slice = std::clamp<Clock::duration>(options.interval / 10, std::chrono::milliseconds(1),
                                                 std::chrono::milliseconds(100));
  std::unique_ptr<StaggeredScraper> scraper;
  uint64_t built_for = 0;
  StaggeredScraper::Stats before;  // the stats of scrapers replaced since the start
  std::vector<StaggeredScraper::Applied> applied;
  auto next_reload = Clock::now() + options.interval;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (stop) return;
    }
    TakePendingScrape();
    if (!scraper || built_for != generation) {
      if (scraper) {
        before.reads += scraper->stats().reads;
        before.overruns += scraper->stats().overruns;
        before.rounds += scraper->stats().rounds;
      }
      scraper.reset();  // cancels its transfers
      auto made = StaggeredScraper::Create(specs, Resolve(), options.interval, ClientInUse());
      built_for = generation;
      if (made.ok()) {
        scraper = *std::move(made);
      } else {
        // Retried every interval; a reload (below) may replace the set that could not be built.
        log.Error("metrics refresh: " + std::string(made.status().message()));
        std::unique_lock<std::mutex> lock(mu);
        cv.wait_for(lock, options.interval, [this] { return stop; });
      }
    }
    if (scraper) {
      applied.clear();
      scraper->RunUntil(endpoints, Clock::now() + slice, applied);
      if (!applied.empty()) {
        for (const StaggeredScraper::Applied& a : applied)
          if (!a.attributes) Track(a.index, a.read);
        snapshot.Set(endpoints);
      }
      const StaggeredScraper::Stats& st = scraper->stats();
      std::lock_guard<std::mutex> lock(mu);
      counters.scrape_cycles = before.rounds + st.rounds;
      counters.scrape_reads = before.reads + st.reads;
      counters.scrape_overruns = before.overruns + st.overruns;
      if (st.rounds > 0) counters.last_scrape_seconds = st.last_round_lag_seconds;
    }
    if (Clock::now() >= next_reload || (options.lister && DiscoveredPending())) {
      MaybeReload();
      next_reload = Clock::now() + options.interval;
    }
  }
}

void EndpointPool::Start() {
  Impl& m = *impl_;
  if (m.scrape_thread.joinable()) return;
  using Clock = std::chrono::steady_clock;
  // Each loop runs start to start; a round that overran its interval is followed at once by the
  // next. Waiting on the condition variable lets Stop() end a wait at once.
  auto loop = [&m](std::chrono::microseconds interval, bool first_at_once, auto body) {
    auto next = Clock::now() + (first_at_once ? Clock::duration::zero() : interval);
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(m.mu);
        if (m.cv.wait_until(lock, next, [&m] { return m.stop; })) return;
      }
      body();
      next += interval;
      if (next < Clock::now()) next = Clock::now();
    }
  };
  m.scrape_thread = std::thread([&m] { m.ScrapeLoop(); });
  if (m.options.lister && m.options.lister->Watches()) {
    // List() blocks until something changed: call it back to back. A failing watch backs off
    // inside the lister, so this does not spin.
    m.discovery_thread = std::thread([this, &m] {
      while (!m.stopping.load()) RunDiscovery();
    });
  } else if (m.options.lister) {
    m.discovery_thread =
        std::thread([this, loop, &m] { loop(m.options.discovery_interval, false, [this] { RunDiscovery(); }); });
  }
}

void EndpointPool::Stop() {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.stop = true;
  }
  m.stopping = true;
  m.cv.notify_all();
  m.ClientInUse().Wakeup();  // ends the scrape loop's wait
  if (m.scrape_thread.joinable()) m.scrape_thread.join();
  // At most one API request late: the lister checks `stopping` between its requests.
  if (m.discovery_thread.joinable()) m.discovery_thread.join();
}

}  // namespace epp
