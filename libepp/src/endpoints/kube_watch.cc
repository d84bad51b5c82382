// NewInferencePoolWatcher (epp/runtime/serve.h): an InferencePool's Pods, or a label selector's,
// kept by list-then-watch (endpoints/informer.h) instead of a LIST every resync interval.
//
// Why: listing every Pod of a pool every 2 s is a steady LIST load on the API server that grows
// with Pods x EPP replicas, and a Pod that turns Ready waits up to the interval. GIE and llm-d keep
// an informer; so does this. The state kept per Pod is its PodInfo (labels, annotations, IP,
// readiness), not the object.
#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>

#include "common/json.h"
#include "endpoints/informer.h"
#include "endpoints/kube_internal.h"
#include "epp/runtime/serve.h"

namespace epp {
namespace {

using internal::Informer;
using internal::WatchEventType;
using json = nlohmann::json;

class PoolWatcher final : public EndpointLister {
 public:
  PoolWatcher(PoolDiscoveryOptions options, const Logger* log, LabelSelector standalone)
      : options_(std::move(options)), log_(log ? *log : NullLogger::Get()), standalone_(std::move(standalone)) {}

  ~PoolWatcher() override {
    // The pool's informer first: its thread is the one that restarts the Pods' informer.
    if (pool_informer_) pool_informer_->Stop();
    std::lock_guard<std::mutex> lock(restart_mu_);
    if (pods_informer_) pods_informer_->Stop();
  }

  absl::Status Start() {
    if (options_.name.empty()) return RestartPods(standalone_);
    EPP_ASSIGN_OR_RETURN(const std::string pool_path, InferencePoolPath(options_.group, options_.ns, options_.name));
    internal::InformerOptions io;
    io.kube = options_.kube;
    io.path = pool_path.substr(0, pool_path.rfind('/'));  // the collection
    io.query = "fieldSelector=" + UrlQueryEscape("metadata.name=" + options_.name);
    io.what = "inferencepool " + options_.ns + "/" + options_.name;
    io.log = &log_;
    Informer::Handler h;
    h.on_list = [this](std::vector<json>&& items) {
      std::optional<InferencePool> pool;
      for (const json& item : items) pool = ParsePool(item);
      SetPool(std::move(pool), true);
    };
    h.on_event = [this](WatchEventType type, const json& object) {
      if (type == WatchEventType::kDeleted) {
        SetPool(std::nullopt, true);
        return;
      }
      if (std::optional<InferencePool> pool = ParsePool(object)) SetPool(std::move(pool), false);
    };
    h.on_state = [this](const absl::Status& s) { SetError(pool_error_, s); };
    EPP_ASSIGN_OR_RETURN(pool_informer_, Informer::Create(std::move(io), std::move(h)));
    pool_informer_->Start();
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<EndpointSpec>> List(const std::atomic<bool>& cancel) override {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (cancel.load()) return absl::CancelledError("stopping");
      if (version_ != returned_) {
        const bool synced = pods_synced_ && (options_.name.empty() || pool_synced_);
        absl::Status error = !pool_error_.ok() ? pool_error_ : pods_error_;
        if (error.ok() && pool_synced_ && !pool_ && !options_.name.empty())
          error = absl::NotFoundError("inferencepool " + options_.ns + "/" + options_.name + " not found (watching for it)");
        if (!error.ok()) {
          returned_ = version_;
          return error;
        }
        if (synced) {
          returned_ = version_;
          return Endpoints();
        }
      }
      // Woken by every change; the timeout only bounds how late `cancel` is seen.
      cv_.wait_for(lock, std::chrono::milliseconds(50));
    }
  }

  std::string Describe() const override {
    if (!options_.name.empty()) return "inferencepool " + options_.ns + "/" + options_.name + " (watched)";
    return "pods of namespace " + options_.ns + " matching '" + standalone_.String() + "' (watched)";
  }
  bool Watches() const override { return true; }

  std::optional<KubeWatchStats> watch_stats() const override {
    KubeWatchStats out;
    out.synced = true;
    auto add = [&out](const Informer* informer) {
      if (informer == nullptr) {
        out.synced = false;
        return;
      }
      const internal::InformerStats s = informer->stats();
      internal::AddCounts(out, s);
      out.synced = out.synced && s.synced;
    };
    if (!options_.name.empty()) add(pool_informer_.get());
    std::lock_guard<std::mutex> lock(restart_mu_);
    add(pods_informer_.get());
    internal::AddCounts(out, retired_);  // informers replaced when the pool's selector changed
    return out;
  }

 private:
  std::optional<InferencePool> ParsePool(const json& object) {
    absl::StatusOr<InferencePool> pool =
        ParseInferencePool(internal::DumpJsonLossy(object), options_.group, "watch inferencepool " + options_.ns + "/" + options_.name);
    if (!pool.ok()) {
      // Kept as a failure of the watch (the endpoints in use stay) until a valid version comes.
      SetError(pool_error_, pool.status());
      return std::nullopt;
    }
    pool->ns = options_.ns;
    return *std::move(pool);
  }

  // A new state of the pool (nullopt: absent). `listed`: from a LIST or a deletion, where absence
  // is news; an invalid MODIFIED leaves the previous pool.
  void SetPool(std::optional<InferencePool> pool, bool listed) {
    std::optional<LabelSelector> restart;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!pool && !listed) return;
      const bool selector_changed =
          pool && (!pool_ || pool_->selector != pool->selector);
      if (pool && pool_error_.code() == absl::StatusCode::kInvalidArgument) pool_error_ = absl::OkStatus();
      pool_ = std::move(pool);
      pool_synced_ = true;
      if (selector_changed) {
        restart = MatchLabelsSelector(pool_->selector);
        pods_.clear();
        pods_synced_ = false;
      }
      ++version_;
    }
    cv_.notify_all();
    if (restart) {
      if (absl::Status s = RestartPods(*restart); !s.ok()) SetError(pods_error_, s);
    }
  }

  absl::Status RestartPods(const LabelSelector& selector) {
    EPP_ASSIGN_OR_RETURN(std::string path, PodCollectionPath(options_.ns));
    internal::InformerOptions io;
    io.kube = options_.kube;
    io.path = std::move(path);
    if (!selector.empty()) io.query = "labelSelector=" + UrlQueryEscape(selector.String());
    io.what = "pods of " + (options_.name.empty() ? "namespace " + options_.ns : "inferencepool " + options_.ns + "/" + options_.name) +
              " (" + selector.String() + ")";
    io.log = &log_;
    uint64_t generation;
    {
      std::lock_guard<std::mutex> lock(mu_);
      generation = ++pods_generation_;
    }
    Informer::Handler h;
    h.on_list = [this, generation, selector](std::vector<json>&& items) {
      std::map<std::string, PodInfo> pods;
      for (size_t i = 0; i < items.size(); ++i) {
        if (std::optional<PodInfo> p = ParsePod(items[i], "items[" + std::to_string(i) + "]")) pods[p->name] = *std::move(p);
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (generation != pods_generation_) return;  // an informer being replaced
      pods_ = std::move(pods);
      pods_synced_ = true;
      ++version_;
      cv_.notify_all();
    };
    h.on_event = [this, generation](WatchEventType type, const json& object) {
      std::optional<PodInfo> p = ParsePod(object, "object");
      if (!p) return;
      std::lock_guard<std::mutex> lock(mu_);
      if (generation != pods_generation_) return;
      if (type == WatchEventType::kDeleted) {
        if (pods_.erase(p->name) == 0) return;
      } else {
        auto it = pods_.find(p->name);
        if (it != pods_.end() && it->second == *p) return;
        pods_[p->name] = *std::move(p);
      }
      ++version_;
      cv_.notify_all();
    };
    h.on_state = [this](const absl::Status& s) { SetError(pods_error_, s); };
    EPP_ASSIGN_OR_RETURN(std::unique_ptr<Informer> informer, Informer::Create(std::move(io), std::move(h)));
    std::lock_guard<std::mutex> lock(restart_mu_);
    if (pods_informer_) {
      pods_informer_->Stop();
      internal::AddCounts(retired_, pods_informer_->stats());
    }
    pods_informer_ = std::move(informer);
    pods_informer_->Start();
    return absl::OkStatus();
  }

  std::optional<PodInfo> ParsePod(const json& object, const std::string& at) {
    absl::StatusOr<PodInfo> p = internal::ParsePodJson(object, at, "watch pods in " + options_.ns, options_.ns);
    if (!p.ok()) {
      log_.Warn(std::string(p.status().message()) + "; the Pod is skipped");
      return std::nullopt;
    }
    return *std::move(p);
  }

  void SetError(absl::Status& slot, const absl::Status& s) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (slot == s) return;
      slot = s;
      ++version_;
    }
    cv_.notify_all();
  }

  // Under mu_.
  std::vector<EndpointSpec> Endpoints() const {
    std::vector<PodInfo> pods;
    pods.reserve(pods_.size());
    for (const auto& [name, p] : pods_) pods.push_back(p);
    if (options_.name.empty()) return PodEndpoints(pods, standalone_, options_.target_ports, options_.metrics);
    return PodEndpoints(pods, MatchLabelsSelector(pool_->selector), pool_->target_ports, options_.metrics);
  }

  const PoolDiscoveryOptions options_;
  const Logger& log_;
  const LabelSelector standalone_;

  mutable std::mutex mu_;  // guards the state below
  std::condition_variable cv_;
  uint64_t version_ = 0;   // bumped by every change of the state below
  uint64_t returned_ = 0;  // the version List() returned last (0: none yet; version_ starts at 0 too)
  std::optional<InferencePool> pool_;
  bool pool_synced_ = false;
  std::map<std::string, PodInfo> pods_;  // by name (one namespace)
  bool pods_synced_ = false;
  uint64_t pods_generation_ = 0;  // the Pods' informer whose callbacks count (under mu_)
  absl::Status pool_error_, pods_error_;

  mutable std::mutex restart_mu_;  // guards pods_informer_ and retired_
  std::unique_ptr<Informer> pool_informer_;
  std::unique_ptr<Informer> pods_informer_;
  internal::InformerStats retired_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<EndpointLister>> NewInferencePoolWatcher(const PoolDiscoveryOptions& options,
                                                                        const Logger* log) {
  LabelSelector standalone;
  if (options.name.empty()) {
    EPP_ASSIGN_OR_RETURN(standalone, internal::StandaloneSelector(options.selector, options.target_ports));
  }
  EPP_RETURN_IF_ERROR(PodCollectionPath(options.ns).status());
  auto watcher = std::make_unique<PoolWatcher>(options, log, std::move(standalone));
  if (absl::Status s = watcher->Start(); !s.ok())
    return absl::Status(s.code(), "pod discovery: " + std::string(s.message()));
  return std::unique_ptr<EndpointLister>(std::move(watcher));
}

}  // namespace epp
