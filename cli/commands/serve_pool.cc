#include "commands/serve_pool.h"

#include <sys/stat.h>

#include <algorithm>
#include <set>

namespace eppctl {
namespace {

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3fs", s);
  return buf;
}

}  // namespace

ServePool::FileSig ServePool::Stat(const std::string& path) {
  FileSig sig;
  struct stat st {};
  // stat(), not lstat(): a ConfigMap file is a symlink chain (endpoints.yaml -> ..data/... ->
  // ..2025_01_01_.../endpoints.yaml) and the swap shows as the path resolving to a new inode.
  if (::stat(path.c_str(), &st) != 0) return sig;
  sig.exists = true;
  sig.dev = st.st_dev;
  sig.ino = st.st_ino;
  sig.size = st.st_size;
  sig.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  sig.ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  return sig;
}

ServePool::ServePool(ServePoolOptions options, const epp::Scheduler& scheduler, epp::EndpointSnapshot& snapshot,
                     const ServeLog& log)
    : options_(std::move(options)), scheduler_(scheduler), snapshot_(snapshot), log_(log) {}

ServePool::~ServePool() { Stop(); }

absl::StatusOr<std::vector<epp::EndpointSpec>> ServePool::LoadSpecs() const {
  std::vector<epp::EndpointSpec> specs;
  if (!options_.endpoints_file.empty()) {
    EPP_ASSIGN_OR_RETURN(specs, epp::LoadEndpointsFile(options_.endpoints_file));
  }
  specs.insert(specs.end(), options_.flag_specs.begin(), options_.flag_specs.end());
  // An endpoints file may list none (yet): the pool starts empty and every pick is a 503 until
  // the file lists one, as the reference EPP does with a pool whose Pods are not Ready.
  if (specs.empty() && options_.endpoints_file.empty())
    return absl::InvalidArgumentError(
        "no endpoints: give --pool-name NAME, --endpoints FILE or --endpoint ADDR[=METRICS]");
  EPP_RETURN_IF_ERROR(epp::ValidateEndpointSpecs(specs));
  return specs;
}

epp::ResolveOptions ServePool::Resolve() {
  epp::ResolveOptions r = options_.resolve;
  r.clock = nullptr;  // the steady clock, as the scheduler's plugins use
  r.fail_on_metrics_error = false;
  r.http_client = &client_;
  return r;
}

std::string ServePool::PoolName() const {
  return "inferencepool " + options_.discovery->ns + "/" + options_.discovery->name;
}

absl::StatusOr<std::vector<epp::EndpointSpec>> ServePool::Discover() {
  const ServePoolDiscovery& d = *options_.discovery;
  // The pool is read each time: its selector and targetPorts may change.
  EPP_ASSIGN_OR_RETURN(epp::InferencePool pool, kube_->GetInferencePool(d.group, d.ns, d.name));
  {
    // Stop() waits for this thread: not a second request (up to KubeClientOptions::timeout) once
    // it was asked to stop.
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return absl::CancelledError("stopping");
  }
  return kube_->ListPoolEndpoints(pool);
}

absl::StatusOr<std::vector<epp::EndpointSpec>> ServePool::WithFlags(std::vector<epp::EndpointSpec> discovered) const {
  std::set<std::string> flagged;
  for (const epp::EndpointSpec& s : options_.flag_specs) flagged.insert(s.address);
  std::vector<epp::EndpointSpec> specs;
  for (epp::EndpointSpec& s : discovered)
    if (!flagged.count(s.address)) specs.push_back(std::move(s));
  specs.insert(specs.end(), options_.flag_specs.begin(), options_.flag_specs.end());
  EPP_RETURN_IF_ERROR(epp::ValidateEndpointSpecs(specs));
  return specs;
}

absl::StatusOr<std::unique_ptr<ServePool>> ServePool::Create(ServePoolOptions options, const epp::Scheduler& scheduler,
                                                             epp::EndpointSnapshot& snapshot, const ServeLog& log) {
  std::unique_ptr<ServePool> pool(new ServePool(std::move(options), scheduler, snapshot, log));
  if (pool->options_.discovery) {
    if (!pool->options_.endpoints_file.empty())
      return absl::InvalidArgumentError("pool discovery and an endpoints file cannot be combined");
    auto kube = epp::KubeClient::Create(pool->options_.discovery->kube);
    if (!kube.ok()) return absl::Status(kube.status().code(), "pool discovery: " + std::string(kube.status().message()));
    pool->kube_ = *std::move(kube);
    auto discovered = pool->Discover();
    if (!discovered.ok()) {
      return absl::Status(discovered.status().code(),
                          pool->PoolName() + ": " + std::string(discovered.status().message()));
    }
    pool->discovered_ = *discovered;
    EPP_ASSIGN_OR_RETURN(std::vector<epp::EndpointSpec> specs, pool->WithFlags(*std::move(discovered)));
    if (specs.empty()) log.Warn(pool->PoolName() + " has no Ready Pods yet: every pick is answered 503 until one is");
    EPP_ASSIGN_OR_RETURN(std::vector<epp::Endpoint> endpoints, epp::ResolveEndpoints(specs, pool->Resolve()));
    {
      std::lock_guard<std::mutex> lock(pool->mu_);
      pool->counters_.discovery_ok++;
    }
    pool->Install(std::move(specs), std::move(endpoints));
    return pool;
  }
  // Stat before reading, so that a change made while loading is seen on the first poll.
  if (!pool->options_.endpoints_file.empty()) pool->applied_ = Stat(pool->options_.endpoints_file);
  EPP_ASSIGN_OR_RETURN(std::vector<epp::EndpointSpec> specs, pool->LoadSpecs());
  if (specs.empty())
    log.Warn("endpoints file " + pool->options_.endpoints_file +
             " lists no endpoints yet: every pick is answered 503 until it does");
  EPP_ASSIGN_OR_RETURN(std::vector<epp::Endpoint> endpoints, epp::ResolveEndpoints(specs, pool->Resolve()));
  pool->Install(std::move(specs), std::move(endpoints));
  return pool;
}

void ServePool::Install(std::vector<epp::EndpointSpec> specs, std::vector<epp::Endpoint> endpoints) {
  // Forgotten: addresses that left, and addresses now of another origin (a new Pod with the IP
  // of one that went away): the old Pod's prefix entries and in-flight load must not carry over.
  std::map<std::string, std::string> kept;  // address -> origin
  for (const epp::EndpointSpec& s : specs) kept.emplace(s.address, s.origin);
  std::vector<std::string> removed;
  for (const epp::EndpointSpec& s : specs_) {
    auto it = kept.find(s.address);
    if (it == kept.end() || it->second != s.origin) removed.push_back(s.address);
  }
  std::map<std::string, std::string> old_errors;
  for (size_t i = 0; i < specs_.size() && i < last_error_.size(); ++i) old_errors[specs_[i].address] = last_error_[i];

  specs_ = std::move(specs);
  endpoints_ = std::move(endpoints);
  last_error_.assign(specs_.size(), std::string());
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::map<std::string, int64_t> errors;
    for (const epp::EndpointSpec& s : specs_) {
      auto it = counters_.scrape_errors.find(s.address);
      errors[s.address] = it == counters_.scrape_errors.end() ? 0 : it->second;
    }
    counters_.scrape_errors = std::move(errors);
  }
  for (size_t i = 0; i < specs_.size(); ++i) {
    auto it = old_errors.find(specs_[i].address);
    if (it != old_errors.end()) last_error_[i] = it->second;
    // The resolve just done read (or failed to read) every endpoint once.
    Track(i, endpoints_[i].metrics_time_us.has_value() || specs_[i].metrics == epp::kNoMetrics);
  }
  size_ = endpoints_.size();
  snapshot_.Set(endpoints_);
  // Only after the new snapshot is published, so no pick sees the endpoint again.
  for (const std::string& address : removed) scheduler_.ForgetEndpoint(address);
}

void ServePool::Track(size_t i, bool read) {
  const epp::Endpoint& e = endpoints_[i];
  if (specs_[i].metrics == epp::kNoMetrics) return;
  if (!read) {
    std::lock_guard<std::mutex> lock(mu_);
    counters_.scrape_errors[e.address]++;
  }
  // What is compared from one round to the next: a transport error's text varies ("after 3 ms"),
  // so an unreadable endpoint is one state; a partial read is keyed by its (stable) check list.
  const std::string state = !read ? std::string("unreadable") : e.metrics_error;
  std::string& last = last_error_[i];
  if (state == last) {
    if (!read && log_.Enabled(LogLevel::kDebug))
      log_.Debug("endpoint " + e.address + ": scrape failed again: " + e.metrics_error);
    return;
  }
  if (state.empty()) {
    log_.Info("endpoint " + e.address + ": metrics read again");
  } else if (!read) {
    std::string age = "never read";
    if (e.metrics_time_us) {
      age = "last read " + Seconds((epp::SteadyClock::Get().NowMicros() - *e.metrics_time_us) / 1e6) + " ago";
    }
    log_.Warn("endpoint " + e.address + ": metrics cannot be read (" + age +
              "; picks use the last metrics read): " + e.metrics_error);
  } else {
    log_.Warn("endpoint " + e.address + ": metrics read but incomplete: " + e.metrics_error);
  }
  last = state;
}

void ServePool::Start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { Run(); });
  if (options_.discovery) discovery_thread_ = std::thread([this] { RunDiscovery(); });
}

void ServePool::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // At most one API request (KubeClientOptions::timeout) late: Discover() checks stop_ between
  // its two requests (the pool GET and the Pod LIST).
  if (discovery_thread_.joinable()) discovery_thread_.join();
}

void ServePool::RunDiscovery() {
  using Clock = std::chrono::steady_clock;
  auto next = Clock::now() + options_.discovery->interval;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_until(lock, next, [this] { return stop_; })) return;
    }
    absl::StatusOr<std::vector<epp::EndpointSpec>> specs = Discover();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;  // a list cut short (kCancelled) or one nobody will install
      (specs.ok() ? counters_.discovery_ok : counters_.discovery_errors)++;
      if (discovered_rejected_) {  // the scrape thread did not install what it was handed: again
        discovered_.reset();
        discovered_rejected_ = false;
      }
      if (specs.ok() && *specs != discovered_) {
        discovered_pending_ = *specs;  // the newest list wins
        discovered_ = *specs;
      }
    }
    if (!specs.ok()) {
      const std::string message(specs.status().message());
      if (message != discovery_state_) {
        log_.Error(PoolName() + ": discovery failed: " + message + "; keeping the endpoints in use");
        discovery_state_ = message;
      } else if (log_.Enabled(LogLevel::kDebug)) {
        log_.Debug(PoolName() + ": discovery failed again: " + message);
      }
    } else {
      if (!discovery_state_.empty()) log_.Info(PoolName() + ": discovery works again");
      discovery_state_.clear();
    }
    next += options_.discovery->interval;
    if (next < Clock::now()) next = Clock::now();
  }
}

ServePoolCounters ServePool::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

void ServePool::Run() {
  using Clock = std::chrono::steady_clock;
  auto next = Clock::now();
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_until(lock, next, [this] { return stop_; })) return;
    }
    const auto start = Clock::now();
    MaybeReload();
    Refresh();
    const double took = std::chrono::duration<double>(Clock::now() - start).count();
    {
      std::lock_guard<std::mutex> lock(mu_);
      counters_.scrape_cycles++;
      counters_.last_scrape_seconds = took;
    }
    // Start to start; a cycle that overran the interval is followed at once by the next.
    next += options_.interval;
    if (next < Clock::now()) next = Clock::now();
  }
}

void ServePool::Refresh() {
  std::vector<std::optional<int64_t>> before(endpoints_.size());
  for (size_t i = 0; i < endpoints_.size(); ++i) before[i] = endpoints_[i].metrics_time_us;
  absl::Status s = epp::RefreshEndpointMetrics(specs_, endpoints_, Resolve());
  if (!s.ok()) {
    log_.Error("metrics refresh: " + std::string(s.message()));
    return;
  }
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    const bool read = endpoints_[i].metrics_time_us.has_value() && endpoints_[i].metrics_time_us != before[i];
    Track(i, read);
  }
  snapshot_.Set(endpoints_);
}

void ServePool::MaybeReload() {
  if (options_.discovery) {
    std::optional<std::vector<epp::EndpointSpec>> discovered;
    {
      std::lock_guard<std::mutex> lock(mu_);
      discovered.swap(discovered_pending_);
    }
    if (discovered && !Replace(WithFlags(*std::move(discovered)), PoolName())) {
      std::lock_guard<std::mutex> lock(mu_);
      discovered_rejected_ = true;  // hand the next list over even if it is the same
    }
    return;
  }
  if (options_.endpoints_file.empty()) return;
  const FileSig sig = Stat(options_.endpoints_file);
  if (sig == applied_) {
    pending_.reset();
    return;
  }
  if (!pending_ || !(*pending_ == sig)) {  // first sight of this version: let it settle one poll
    pending_ = sig;
    return;
  }
  pending_.reset();
  applied_ = sig;
  if (!sig.exists) {
    log_.Warn("endpoints file " + options_.endpoints_file + " cannot be read; keeping the " +
              std::to_string(endpoints_.size()) + " endpoints in use");
    return;
  }
  Reload();
}

void ServePool::Reload() { Replace(LoadSpecs(), "endpoints file " + options_.endpoints_file); }

bool ServePool::Replace(absl::StatusOr<std::vector<epp::EndpointSpec>> specs, const std::string& source) {
  const std::string keep = "; keeping the " + std::to_string(endpoints_.size()) + " endpoints in use";
  absl::StatusOr<std::vector<epp::Endpoint>> endpoints =
      specs.ok() ? epp::ResolveEndpoints(*specs, Resolve())
                 : absl::StatusOr<std::vector<epp::Endpoint>>(specs.status());
  if (!endpoints.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      counters_.reloads_failed++;
    }
    const std::string message(endpoints.status().message());
    // A rejected discovered list is handed over again every interval: log it once per message.
    if (!options_.discovery || message != rejected_state_) {
      log_.Error(source + " not loaded: " + message + keep);
    } else if (log_.Enabled(LogLevel::kDebug)) {
      log_.Debug(source + " not loaded again: " + message);
    }
    if (options_.discovery) rejected_state_ = message;
    return false;
  }
  rejected_state_.clear();
  std::map<std::string, std::string> before, after;  // address -> origin
  for (const epp::EndpointSpec& s : specs_) before.emplace(s.address, s.origin);
  for (const epp::EndpointSpec& s : *specs) after.emplace(s.address, s.origin);
  std::string added, removed, replaced;
  for (const auto& [a, origin] : after) {
    auto it = before.find(a);
    if (it == before.end()) {
      added += (added.empty() ? "" : ", ") + a;
    } else if (it->second != origin) {  // e.g. a new Pod with the IP of one that went away
      replaced += (replaced.empty() ? "" : ", ") + a + " (" + it->second + " -> " + origin + ")";
    }
  }
  for (const auto& [a, origin] : before)
    if (!after.count(a)) removed += (removed.empty() ? "" : ", ") + a;
  Install(*std::move(specs), *std::move(endpoints));
  {
    std::lock_guard<std::mutex> lock(mu_);
    counters_.reloads_ok++;
  }
  log_.Info(source + " reloaded: " + std::to_string(endpoints_.size()) + " endpoints; added: " +
            (added.empty() ? "none" : added) + "; removed: " + (removed.empty() ? "none" : removed) +
            (replaced.empty() ? "" : "; replaced (state forgotten): " + replaced));
  return true;
}

}  // namespace eppctl
