// file-discovery and multicluster-file-discovery (datalayer.h): the endpoints from a file in
// llm-d's format, listed through the endpoint pool's discovery machinery. Facts: llm-d-router's
// datalayer/discovery/file (plugin.go, multicluster.go, README.md) and docs/discovery.md.
//
// The file: {endpoints: [{name, namespace (default "default"), address, port (1-65535, a string in
// llm-d; a YAML number is taken too), labels}]}, YAML or JSON, at most 1 MiB. An invalid entry is
// skipped and logged; a file that cannot be read or parsed fails the load (at start: serve does
// not start; on a reload: the last set stays). watchFile: false reads the file once.
#include <arpa/inet.h>
#include <yaml-cpp/yaml.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/yaml_limits.h"
#include "plugins/datalayer/datalayer.h"
#include "scheduling/scheduler_impl.h"
#include "serve/file_watch.h"

namespace epp::plugins {
namespace {

constexpr size_t kMaxFileBytes = size_t{1} << 20;  // llm-d's cap

struct FileDiscoveryOptions {
  std::string path;
  bool watch_file = false;
};

const ParamTable<FileDiscoveryOptions>& Table() {
  static const auto* t =
      &(*new ParamTable<FileDiscoveryOptions>())
           .String("path", &FileDiscoveryOptions::path, "the endpoints file, YAML or JSON (required)")
           .Bool("watchFile", &FileDiscoveryOptions::watch_file,
                 "reload when the file changes (an edit, a rename, a ConfigMap's symlink swap); false: read once");
  return *t;
}

bool IsIpv4(const std::string& s) {
  in_addr a;
  return ::inet_pton(AF_INET, s.c_str(), &a) == 1;
}
bool IsIpv6(const std::string& s) {
  in6_addr a;
  return ::inet_pton(AF_INET6, s.c_str(), &a) == 1;
}
// RFC 1123 subdomain, as Kubernetes' IsDNS1123Subdomain: lower-case labels of [a-z0-9-], dots.
bool IsDns1123Subdomain(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (true) {
    const size_t dot = s.find('.', start);
    const std::string label = s.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (label.empty() || label.front() == '-' || label.back() == '-') return false;
    for (char c : label)
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
    if (dot == std::string::npos) return true;
    start = dot + 1;
  }
}

std::string Scalar(const YAML::Node& n) { return n.IsDefined() && n.IsScalar() ? n.Scalar() : std::string(); }

class FileDiscovery final : public Plugin, public EndpointDiscoverySource {
 public:
  FileDiscovery(TypedName tn, FileDiscoveryOptions o, bool multicluster)
      : Plugin(std::move(tn)), o_(std::move(o)), multicluster_(multicluster) {}
  Params EffectiveParams() const override { return Table().Effective(o_); }
  // Selected by the config's dataLayer section: a reload builds a new instance.
  bool HasReferences() const override { return true; }
  void Select() override { selected_ = true; }
  bool selected() const override { return selected_; }
  const FileDiscoveryOptions& options() const { return o_; }

  absl::StatusOr<std::vector<EndpointSpec>> Load(std::vector<std::string>* skipped) const override {
    std::FILE* f = std::fopen(o_.path.c_str(), "rb");
    if (f == nullptr) return absl::NotFoundError(absl::StrCat("reading ", o_.path, ": ", std::strerror(errno)));
    std::string text;
    char buf[1 << 16];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && text.size() <= kMaxFileBytes) text.append(buf, n);
    std::fclose(f);
    if (text.size() > kMaxFileBytes) return absl::InvalidArgumentError(absl::StrCat("endpoints file ", o_.path, " exceeds 1 MiB"));
    try {
      return Parse(text, skipped);
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(absl::StrCat("parsing ", o_.path, ":", e.mark.line + 1, ": ", e.msg));
    }
  }

 private:
  absl::StatusOr<std::vector<EndpointSpec>> Parse(const std::string& text, std::vector<std::string>* skipped) const {
    const YAML::Node root = YAML::Load(text);
    EPP_RETURN_IF_ERROR(internal::CheckYamlExpansion(root, o_.path));
    std::vector<EndpointSpec> out;
    if (root.IsNull()) return out;
    if (!root.IsMap()) return absl::InvalidArgumentError(absl::StrCat(o_.path, ": expected a map with 'endpoints'"));
    const YAML::Node list = root["endpoints"];
    if (!list || list.IsNull()) return out;
    if (!list.IsSequence()) return absl::InvalidArgumentError(absl::StrCat(o_.path, ": endpoints: expected a list"));
    std::set<std::string> addresses;
    auto skip = [&](const std::string& name, const std::string& why) {
      if (skipped) skipped->push_back(absl::StrCat("endpoint \"", name, "\": ", why));
    };
    for (const YAML::Node& e : list) {
      if (!e.IsMap()) {
        skip("", "expected a map");
        continue;
      }
      const std::string name = Scalar(e["name"]);
      std::string ns = Scalar(e["namespace"]);
      if (ns.empty()) ns = "default";
      const std::string address = Scalar(e["address"]);
      const std::string port = Scalar(e["port"]);
      if (multicluster_ ? !(IsIpv4(address) || IsIpv6(address) || IsDns1123Subdomain(address)) : !IsIpv4(address)) {
        skip(name, absl::StrCat(multicluster_ ? "invalid host \"" : "invalid IPv4 address \"", address, "\""));
        continue;
      }
      int p = 0;
      if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
          (p = std::stoi(port)) < 1 || p > 65535) {
        skip(name, absl::StrCat("invalid port \"", port, "\""));
        continue;
      }
      EndpointSpec spec;
      spec.address = absl::StrCat(IsIpv6(address) ? "[" + address + "]" : address, ":", port);
      if (!addresses.insert(spec.address).second) {
        // epp identifies an endpoint by its address; llm-d by namespace/name.
        skip(name, absl::StrCat("address ", spec.address, " listed twice"));
        continue;
      }
      if (const YAML::Node labels = e["labels"]; labels && labels.IsMap())
        for (const auto& kv : labels) spec.labels[Scalar(kv.first)] = Scalar(kv.second);
      spec.instance = ns + "/" + name;
      spec.origin = absl::StrCat(std::string(type()), " ", o_.path, " (", ns, "/", name, ")");
      if (multicluster_) {
        // A peer may publish its pool metrics apart from its gateway (labels metricsAddress and
        // metricsPort, the endpoint's port by default): the metrics are read there.
        auto addr = spec.labels.find("metricsAddress");
        if (addr != spec.labels.end() && !addr->second.empty()) {
          auto mport = spec.labels.find("metricsPort");
          const std::string host = IsIpv6(addr->second) ? "[" + addr->second + "]" : addr->second;
          spec.metrics = absl::StrCat("http://", host, ":", mport != spec.labels.end() ? mport->second : port, "/metrics");
        }
      }
      out.push_back(std::move(spec));
    }
    return out;
  }

  FileDiscoveryOptions o_;
  bool multicluster_;
  bool selected_ = false;
};

// The pool's lister over a FileDiscovery: the first List() reads the file; then, with watchFile,
// each List() returns once the file changed and settled (FileWatch, polled every 100 ms), and
// without it List() waits for the pool to stop (the set never changes).
class FileDiscoveryLister final : public EndpointLister {
 public:
  FileDiscoveryLister(std::shared_ptr<const Plugin> plugin, const FileDiscovery& d, const Logger* log)
      : plugin_(std::move(plugin)), d_(d), watch_(d.options().path), log_(log) {}

  absl::StatusOr<std::vector<EndpointSpec>> List(const std::atomic<bool>& cancel) override {
    if (first_) {
      first_ = false;
      watch_.MarkApplied();
      return Read();
    }
    while (!cancel.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (!d_.options().watch_file) continue;
      switch (watch_.Poll()) {
        case internal::FileWatch::Change::kChanged:
          watch_.MarkApplied();
          if (log_) log_->Info(Describe() + ": endpoints file changed, reloading");
          return Read();
        case internal::FileWatch::Change::kGone:
          if (log_) log_->Warn(Describe() + ": the endpoints file cannot be read; keeping the endpoints in use");
          break;
        default:
          break;
      }
    }
    return absl::CancelledError("stopping");
  }
  std::string Describe() const override { return absl::StrCat(plugin_->type(), " ", d_.options().path); }
  bool Watches() const override { return true; }

 private:
  absl::StatusOr<std::vector<EndpointSpec>> Read() {
    std::vector<std::string> skipped;
    absl::StatusOr<std::vector<EndpointSpec>> specs = d_.Load(&skipped);
    if (log_)
      for (const std::string& s : skipped) log_->Warn(Describe() + ": skipped " + s);
    return specs;
  }

  std::shared_ptr<const Plugin> plugin_;  // keeps d_ alive past a config reload
  const FileDiscovery& d_;
  internal::FileWatch watch_;
  const Logger* log_;
  bool first_ = true;
};

PluginOr Create(std::string_view type, const std::string& name, const Params& params, bool multicluster) {
  EPP_ASSIGN_OR_RETURN(FileDiscoveryOptions o, Table().Read(params));
  if (o.path.empty()) return absl::InvalidArgumentError(absl::StrCat(params.path(), ".path: required"));
  return std::make_unique<FileDiscovery>(TN(type, name), std::move(o), multicluster);
}

}  // namespace

PluginOr CreateFileDiscovery(const std::string& name, const Params& params, const PluginContext&) {
  return Create(kFileDiscoveryType, name, params, false);
}
PluginOr CreateMulticlusterFileDiscovery(const std::string& name, const Params& params, const PluginContext&) {
  return Create(kMulticlusterFileDiscoveryType, name, params, true);
}
PluginSchema FileDiscoverySchema() { return Table().Schema(); }

std::shared_ptr<EndpointLister> ConfiguredDiscovery(const Scheduler& scheduler, const Logger* log) {
  for (const std::shared_ptr<Plugin>& p : scheduler.impl().plugins)
    if (auto* d = dynamic_cast<const FileDiscovery*>(p.get()); d != nullptr && d->selected())
      return std::make_shared<FileDiscoveryLister>(p, *d, log);
  return nullptr;
}

}  // namespace epp::plugins
