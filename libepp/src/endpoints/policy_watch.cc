// RequestPolicyWatcher (epp/runtime/serve.h): the pool's InferenceObjectives and
// InferenceModelRewrites, kept by informers (endpoints/informer.h) in both API groups that have
// shipped them, merged into the RequestPolicies streams read.
#include <algorithm>
#include <map>
#include <mutex>

#include "common/json.h"
#include "endpoints/informer.h"
#include "epp/runtime/serve.h"

namespace epp {
namespace {

using internal::Informer;
using internal::WatchEventType;
using json = nlohmann::json;

// The groups, newest first: llm-d.ai's object wins over the older group's of the same name.
constexpr std::string_view kGroups[] = {"llm-d.ai", "inference.networking.x-k8s.io"};

const json* Member(const json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

struct Named {
  std::string ns, name, created;
};

absl::StatusOr<Named> Meta(const json& doc, std::string_view kind) {
  const json* meta = Member(doc, "metadata");
  const std::string* name = meta ? internal::JsonStringMember(*meta, "name") : nullptr;
  if (name == nullptr) return absl::InvalidArgumentError(std::string(kind) + ": metadata.name: missing");
  Named n;
  n.name = *name;
  if (const std::string* ns = internal::JsonStringMember(*meta, "namespace")) n.ns = *ns;
  if (const std::string* c = internal::JsonStringMember(*meta, "creationTimestamp")) n.created = *c;
  return n;
}

// spec.poolRef.name == pool (a poolRef naming another kind than InferencePool never matches).
absl::StatusOr<bool> OfPool(const json& doc, std::string_view pool, const std::string& what) {
  const json* spec = Member(doc, "spec");
  const json* ref = spec ? Member(*spec, "poolRef") : nullptr;
  const std::string* name = ref ? internal::JsonStringMember(*ref, "name") : nullptr;
  if (name == nullptr) return absl::InvalidArgumentError(what + ": spec.poolRef.name: missing");
  if (const std::string* kind = internal::JsonStringMember(*ref, "kind"); kind != nullptr && *kind != "InferencePool")
    return false;
  return *name == pool;
}

absl::StatusOr<json> Parse(std::string_view text, std::string_view kind) {
  absl::StatusOr<json> doc = internal::ParseJson(text);
  if (!doc.ok() || !doc->is_object()) return absl::InvalidArgumentError(std::string(kind) + ": not a JSON object");
  return doc;
}

}  // namespace

absl::StatusOr<std::optional<ObjectivePolicy>> ParseInferenceObjective(std::string_view text, std::string_view pool) {
  EPP_ASSIGN_OR_RETURN(json doc, Parse(text, "inferenceobjective"));
  EPP_ASSIGN_OR_RETURN(Named n, Meta(doc, "inferenceobjective"));
  const std::string what = "inferenceobjective " + n.ns + "/" + n.name;
  EPP_ASSIGN_OR_RETURN(bool ours, OfPool(doc, pool, what));
  if (!ours) return std::optional<ObjectivePolicy>();
  ObjectivePolicy o;
  o.name = n.name;
  if (const json* p = Member(*Member(doc, "spec"), "priority"); p != nullptr) {
    const std::optional<int64_t> v = internal::JsonInt64(*p);
    if (!v || *v < INT32_MIN || *v > INT32_MAX)
      return absl::InvalidArgumentError(what + ": spec.priority: expected a 32-bit integer, got " + internal::DumpJsonLossy(*p));
    o.priority = static_cast<int>(*v);
  }
  return std::optional<ObjectivePolicy>(std::move(o));
}

absl::StatusOr<std::optional<RewritePolicy>> ParseInferenceModelRewrite(std::string_view text, std::string_view pool) {
  EPP_ASSIGN_OR_RETURN(json doc, Parse(text, "inferencemodelrewrite"));
  EPP_ASSIGN_OR_RETURN(Named n, Meta(doc, "inferencemodelrewrite"));
  const std::string what = "inferencemodelrewrite " + n.ns + "/" + n.name;
  EPP_ASSIGN_OR_RETURN(bool ours, OfPool(doc, pool, what));
  if (!ours) return std::optional<RewritePolicy>();
  RewritePolicy p;
  p.source = n.ns + "/" + n.name;
  p.created = n.created;
  const json* rules = Member(*Member(doc, "spec"), "rules");
  if (rules == nullptr || !rules->is_array()) return absl::InvalidArgumentError(what + ": spec.rules: expected a list");
  for (size_t i = 0; i < rules->size(); ++i) {
    const std::string at = what + ": spec.rules[" + std::to_string(i) + "]";
    const json& r = (*rules)[i];
    ModelRewriteRule rule;
    rule.source = p.source;
    if (const json* matches = Member(r, "matches")) {
      if (!matches->is_array()) return absl::InvalidArgumentError(at + ".matches: expected a list");
      for (size_t m = 0; m < matches->size(); ++m) {
        const json* model = Member((*matches)[m], "model");
        const std::string* value = model ? internal::JsonStringMember(*model, "value") : nullptr;
        if (value == nullptr || value->empty())
          return absl::InvalidArgumentError(at + ".matches[" + std::to_string(m) + "].model.value: missing");
        const std::string* type = internal::JsonStringMember(*model, "type");
        if (type != nullptr && *type != "Exact")
          return absl::InvalidArgumentError(at + ".matches[" + std::to_string(m) + "].model.type: '" + *type +
                                            "' is not supported (Exact)");
        rule.models.push_back(*value);
      }
    }
    const json* targets = Member(r, "targets");
    if (targets == nullptr || !targets->is_array() || targets->empty())
      return absl::InvalidArgumentError(at + ".targets: expected at least one target");
    for (size_t t = 0; t < targets->size(); ++t) {
      const std::string tat = at + ".targets[" + std::to_string(t) + "]";
      const std::string* model = internal::JsonStringMember((*targets)[t], "modelRewrite");
      if (model == nullptr || model->empty()) return absl::InvalidArgumentError(tat + ".modelRewrite: missing");
      ModelRewriteTarget target{*model, 0};
      if (const json* w = Member((*targets)[t], "weight")) {
        const std::optional<int64_t> v = internal::JsonInt64(*w);
        if (!v || *v < 1 || *v > 1000000)
          return absl::InvalidArgumentError(tat + ".weight: expected an integer in [1, 1000000], got " +
                                            internal::DumpJsonLossy(*w));
        target.weight = static_cast<int>(*v);
      }
      rule.targets.push_back(std::move(target));
    }
    p.rules.push_back(std::move(rule));
  }
  return std::optional<RewritePolicy>(std::move(p));
}

RequestPolicies MergeRequestPolicies(const std::vector<ObjectivePolicy>& objectives, std::vector<RewritePolicy> rewrites) {
  RequestPolicies out;
  for (const ObjectivePolicy& o : objectives) out.objective_priorities.emplace(o.name, o.priority);  // first wins
  std::stable_sort(rewrites.begin(), rewrites.end(), [](const RewritePolicy& a, const RewritePolicy& b) {
    return a.created != b.created ? a.created < b.created : a.source < b.source;
  });
  for (RewritePolicy& r : rewrites)
    for (ModelRewriteRule& rule : r.rules) out.rewrites.push_back(std::move(rule));
  return out;
}

struct RequestPolicyWatcher::Impl {
  PolicyWatchOptions options;
  const Logger& log;
  std::shared_ptr<RequestPolicyHandle> handle = std::make_shared<RequestPolicyHandle>();
  std::mutex mu;
  // Per (group index, kind): objects by name, kept parsed; nullopt entries belong to other pools.
  std::map<std::string, ObjectivePolicy> objectives[2];
  std::map<std::string, RewritePolicy> rewrites[2];
  std::vector<std::unique_ptr<Informer>> informers;

  explicit Impl(PolicyWatchOptions o) : options(std::move(o)), log(options.log ? *options.log : NullLogger::Get()) {}

  // Under mu: publish the merge of every store (llm-d.ai's objects first).
  void Publish() {
    std::vector<ObjectivePolicy> objs;
    std::vector<RewritePolicy> rws;
    for (int g = 0; g < 2; ++g) {
      for (const auto& [name, o] : objectives[g]) objs.push_back(o);
      for (const auto& [name, r] : rewrites[g]) rws.push_back(r);
    }
    handle->Set(std::make_shared<const RequestPolicies>(MergeRequestPolicies(objs, std::move(rws))));
  }

  template <class T, class ParseFn>
  Informer::Handler Handler(std::map<std::string, T>& store, ParseFn parse) {
    Informer::Handler h;
    auto read = [this, parse](const json& object) -> std::optional<T> {
      absl::StatusOr<std::optional<T>> p = parse(internal::DumpJsonLossy(object), options.pool_name);
      if (!p.ok()) {
        log.Warn(std::string(p.status().message()) + "; the object is ignored until it is fixed");
        return std::nullopt;
      }
      return *std::move(p);
    };
    auto name_of = [](const json& object) {
      const json* meta = Member(object, "metadata");
      const std::string* n = meta ? internal::JsonStringMember(*meta, "name") : nullptr;
      return n ? *n : std::string();
    };
    h.on_list = [this, &store, read, name_of](std::vector<json>&& items) {
      std::lock_guard<std::mutex> lock(mu);
      store.clear();
      for (const json& item : items)
        if (std::optional<T> v = read(item)) store[name_of(item)] = *std::move(v);
      Publish();
    };
    h.on_event = [this, &store, read, name_of](WatchEventType type, const json& object) {
      std::lock_guard<std::mutex> lock(mu);
      const std::string name = name_of(object);
      if (type == WatchEventType::kDeleted) {
        store.erase(name);
      } else if (std::optional<T> v = read(object)) {
        store[name] = *std::move(v);
      } else {
        store.erase(name);  // another pool's now, or invalid
      }
      Publish();
    };
    return h;
  }
};

absl::StatusOr<std::unique_ptr<RequestPolicyWatcher>> RequestPolicyWatcher::Create(PolicyWatchOptions options) {
  if (options.pool_name.empty()) return absl::InvalidArgumentError("request policy watch: the pool's name is required");
  EPP_RETURN_IF_ERROR(PodCollectionPath(options.ns).status());  // checks the namespace
  auto impl = std::make_unique<Impl>(std::move(options));
  for (int g = 0; g < 2; ++g) {
    for (const char* plural : {"inferenceobjectives", "inferencemodelrewrites"}) {
      internal::InformerOptions io;
      io.kube = impl->options.kube;
      io.path = "/apis/" + std::string(kGroups[g]) + "/v1alpha2/namespaces/" + impl->options.ns + "/" + plural;
      io.what = std::string(plural) + " (" + std::string(kGroups[g]) + ") of namespace " + impl->options.ns;
      io.log = &impl->log;
      Informer::Handler h = std::string_view(plural) == "inferenceobjectives"
                                ? impl->Handler(impl->objectives[g], ParseInferenceObjective)
                                : impl->Handler(impl->rewrites[g], ParseInferenceModelRewrite);
      EPP_ASSIGN_OR_RETURN(std::unique_ptr<Informer> informer, Informer::Create(std::move(io), std::move(h)));
      impl->informers.push_back(std::move(informer));
    }
  }
  return std::unique_ptr<RequestPolicyWatcher>(new RequestPolicyWatcher(std::move(impl)));
}

RequestPolicyWatcher::RequestPolicyWatcher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RequestPolicyWatcher::~RequestPolicyWatcher() { Stop(); }

void RequestPolicyWatcher::Start() {
  for (auto& i : impl_->informers) i->Start();
}

void RequestPolicyWatcher::Stop() {
  for (auto& i : impl_->informers) i->Stop();
}

std::shared_ptr<RequestPolicyHandle> RequestPolicyWatcher::handle() const { return impl_->handle; }

KubeWatchStats RequestPolicyWatcher::stats() const {
  KubeWatchStats out;
  out.synced = true;
  for (const auto& i : impl_->informers) {
    const internal::InformerStats s = i->stats();
    internal::AddCounts(out, s);
    out.synced = out.synced && s.synced;
  }
  return out;
}

}  // namespace epp
