// eppctl lint (epp/tools/lint.h). The facts behind each rule (API fields and defaults, flag defaults,
// what each gateway does) are cited in docs/lint.md.
#include "epp/tools/lint.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/yaml_limits.h"
#include "common/yaml_load.h"
#include "common/yaml_where.h"
#include "epp/config.h"
#include "epp/registry.h"
#include "epp/scheduler.h"
#include "nlohmann/json.hpp"
#include "common/os_error.h"

namespace epp {

std::string_view LintSeverityName(LintSeverity s) {
  return s == LintSeverity::kError ? "error" : s == LintSeverity::kWarning ? "warning" : "info";
}

int LintReport::count(LintSeverity s) const {
  return static_cast<int>(std::count_if(findings.begin(), findings.end(), [&](const LintFinding& f) { return f.severity == s; }));
}

const std::vector<LintRule>& LintRules() {
  static const auto* rules = new std::vector<LintRule>{
      {"LINT001", LintSeverity::kError, "a file is not valid YAML"},
      {"IP001", LintSeverity::kWarning, "InferencePool uses the removed v1alpha2 API (inference.networking.x-k8s.io)"},
      {"IP002", LintSeverity::kError, "InferencePool v1 shape: selector.matchLabels, targetPorts, endpointPickerRef (not the v1alpha2 fields)"},
      {"IP003", LintSeverity::kError, "targetPorts: 1 to 8 unique port numbers in 1..65535"},
      {"IP004", LintSeverity::kError, "endpointPickerRef names a Service and its port"},
      {"IP005", LintSeverity::kWarning, "failureMode is decided: not left to its default, and FailOpen only where the gateway honours it"},
      {"IP006", LintSeverity::kError, "the pool selector matches the model servers' Pod template labels, and not the EPP's"},
      {"IP007", LintSeverity::kError, "targetPorts exist as container ports of the selected Pods"},
      {"IP008", LintSeverity::kError, "one EPP serves exactly one pool"},
      {"IP009", LintSeverity::kError, "the pool's endpointPickerRef port is a port of the EPP Service it names"},
      {"EPP001", LintSeverity::kError, "the EPP's --pool-name names an InferencePool of the bundle, in its namespace"},
      {"EPP002", LintSeverity::kError, "the pool's endpointPickerRef Service exists, selects the EPP Pods, and the targetPort of the pool's port is the EPP's gRPC port (a number, or a container port name of the EPP)"},
      {"EPP003", LintSeverity::kError, "health probes point at the EPP's health port"},
      {"EPP004", LintSeverity::kError, "boolean flags are written --flag=value (a separate \"false\" is ignored)"},
      {"EPP005", LintSeverity::kWarning, "TLS on the EPP while its Service says appProtocol kubernetes.io/h2c (cleartext)"},
      {"EPP006", LintSeverity::kError, "the EPP's configuration (inline or from a ConfigMap) passes `eppctl config validate`"},
      {"RBAC001", LintSeverity::kError, "the EPP's ServiceAccount may get, list and watch Pods and InferencePools"},
      {"RT001", LintSeverity::kError, "an HTTPRoute backendRef to a pool has group inference.networking.k8s.io (the pool's), kind InferencePool, and names a pool"},
      {"RT002", LintSeverity::kWarning, "an HTTPRoute backendRef to an InferencePool sets no port (it is ignored)"},
      {"GW001", LintSeverity::kError, "Envoy Gateway registers InferencePool under extensionManager.backendResources"},
      {"GW002", LintSeverity::kError, "Envoy Gateway refuses failOpen with the FullDuplexStreamed body mode the EPP needs"},
  };
  return *rules;
}

namespace {

using internal::YamlLine;

constexpr const char* kGroupV1 = "inference.networking.k8s.io";
constexpr const char* kGroupAlpha = "inference.networking.x-k8s.io";

struct Obj {
  std::string file;
  int line = 0;
  std::string api_version, kind, name, ns;
  YAML::Node node;
  std::string Label() const { return absl::StrCat(kind, " ", ns.empty() ? "" : ns + "/", name); }
  std::string Group() const {
    const size_t slash = api_version.find('/');
    return slash == std::string::npos ? "" : api_version.substr(0, slash);
  }
};

// A child that is never yaml-cpp's invalid "zombie" node (whose accessors throw): a missing key,
// or a lookup in something that is not a map, gives an undefined node.
YAML::Node Get(const YAML::Node& n, const std::string& key) {
  if (!n.IsDefined() || !n.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  for (const auto& kv : n)
    if (kv.first.IsScalar() && kv.first.Scalar() == key) return kv.second;
  return YAML::Node(YAML::NodeType::Undefined);
}

std::string Str(const YAML::Node& n) {
  if (!n.IsDefined() || !n.IsScalar()) return "";
  return n.Scalar();
}
std::optional<int64_t> Int(const YAML::Node& n) {
  if (!n.IsDefined() || !n.IsScalar()) return std::nullopt;
  try {
    return n.as<int64_t>();
  } catch (const YAML::Exception&) {
    return std::nullopt;
  }
}
YAML::Node At(const YAML::Node& n, std::initializer_list<const char*> path) {
  YAML::Node cur = n;
  // reset(), not operator=: yaml-cpp's assignment writes through to the node `cur` refers to,
  // which would rewrite the caller's document.
  for (const char* k : path) cur.reset(Get(cur, k));
  return cur;
}
std::map<std::string, std::string> StringMap(const YAML::Node& n) {
  std::map<std::string, std::string> m;
  if (n.IsDefined() && n.IsMap())
    for (const auto& kv : n) m[kv.first.Scalar()] = kv.second.IsScalar() ? kv.second.Scalar() : "";
  return m;
}
bool Selects(const std::map<std::string, std::string>& selector, const std::map<std::string, std::string>& labels) {
  if (selector.empty()) return false;
  for (const auto& [k, v] : selector) {
    auto it = labels.find(k);
    if (it == labels.end() || it->second != v) return false;
  }
  return true;
}
std::string Join(const std::map<std::string, std::string>& m) {
  std::string s;
  for (const auto& [k, v] : m) absl::StrAppend(&s, s.empty() ? "" : ", ", k, "=", v);
  return s;
}

// A workload's Pod template (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job) or a Pod.
struct Workload {
  const Obj* obj;
  YAML::Node pod_spec;
  std::map<std::string, std::string> labels;
};

// One EPP container: its flags.
struct Epp {
  const Workload* w;
  YAML::Node container;
  bool eppctl = false;                    // epp's own `eppctl serve`
  std::map<std::string, std::string> flags;  // --name -> value ("" for a bare flag)
  std::map<std::string, int> flag_lines;
  std::vector<std::pair<std::string, int>> split_booleans;  // --flag "false" written as two args
  std::string pool() const { auto it = flags.find("pool-name"); return it == flags.end() ? "" : it->second; }
  int Port(const char* flag, int dflt) const {
    auto it = flags.find(flag);
    if (it == flags.end()) return dflt;
    try {
      return std::stoi(it->second);
    } catch (...) {
      return dflt;
    }
  }
  bool Tls() const {
    auto it = flags.find("secure-serving");
    return it == flags.end() || (it->second != "false" && it->second != "0");
  }
};

class Linter {
 public:
  explicit Linter(LintReport& r) : r_(r) {}

  void Add(std::string_view text, const std::string& file) {
    std::vector<YAML::Node> docs;
    try {
      docs = internal::LoadAllDocuments(std::string(text));
    } catch (const YAML::Exception& e) {
      Emit("LINT001", LintSeverity::kError, file, YamlLine(e.mark), "", e.msg,
           "fix the YAML syntax (`kubectl apply --dry-run=client -f FILE` shows the same error)");
      return;
    }
    for (const YAML::Node& d : docs) {
      // Aliases are shared, not copied: a few hundred bytes can stand for millions of nodes
      // (or a cycle). Such a document is reported, not walked.
      if (absl::Status s = internal::CheckYamlExpansion(d, file); !s.ok()) {
        Emit("LINT001", LintSeverity::kError, file, YamlLine(d), "", std::string(s.message()), "remove the alias expansion");
        continue;
      }
      AddDoc(d, file);
    }
  }

  void Run() {
    for (auto& o : objs_) Classify(o);
    for (const Obj* p : pools_) CheckPool(*p);
    CheckOnePoolPerEpp();
    for (const Epp& e : epps_) CheckEpp(e);
    for (const Obj* rt : routes_) CheckRoute(*rt);
    CheckGateways();
  }

 private:
  void AddDoc(const YAML::Node& d, const std::string& file) {
    if (!d.IsDefined() || !d.IsMap()) return;
    if (Str(Get(d, "kind")) == "List" && Get(d, "items").IsSequence()) {
      for (const YAML::Node& item : Get(d, "items")) AddDoc(item, file);
      return;
    }
    if (Str(Get(d, "apiVersion")).empty() || Str(Get(d, "kind")).empty()) return;  // not a Kubernetes object
    Obj o;
    o.file = file;
    o.line = YamlLine(d);
    o.api_version = Str(Get(d, "apiVersion"));
    o.kind = Str(Get(d, "kind"));
    o.name = Str(At(d, {"metadata", "name"}));
    o.ns = Str(At(d, {"metadata", "namespace"}));
    o.node = d;
    objs_.push_back(std::move(o));
    ++r_.objects;
  }

  void Emit(std::string rule, LintSeverity sev, const std::string& file, int line, std::string object, std::string message,
            std::string fix, std::vector<std::string> gateways = {}) {
    LintFinding f;
    f.rule = std::move(rule);
    f.severity = sev;
    f.file = file;
    f.line = line;
    f.object = std::move(object);
    f.message = std::move(message);
    f.fix = std::move(fix);
    f.gateways = std::move(gateways);
    r_.findings.push_back(std::move(f));
  }
  void Emit(std::string rule, LintSeverity sev, const Obj& o, const YAML::Node& at, std::string message, std::string fix,
            std::vector<std::string> gateways = {}) {
    const int line = YamlLine(at) ? YamlLine(at) : o.line;
    Emit(std::move(rule), sev, o.file, line, o.Label(), std::move(message), std::move(fix), std::move(gateways));
  }

  // Namespaces: an object without one is in the namespace `kubectl apply -n` gives, the same for
  // every such object, so "" matches "".
  static bool SameNs(const std::string& a, const std::string& b) { return a == b || a.empty() || b.empty(); }

  void Classify(Obj& o) {
    const std::string& k = o.kind;
    if (k == "InferencePool") pools_.push_back(&o);
    else if (k == "HTTPRoute") routes_.push_back(&o);
    else if (k == "Service") services_.push_back(&o);
    else if (k == "ConfigMap") configmaps_.push_back(&o);
    else if (k == "Role" || k == "ClusterRole") roles_.push_back(&o);
    else if (k == "RoleBinding" || k == "ClusterRoleBinding") bindings_.push_back(&o);
    else if (k == "EnvoyExtensionPolicy") policies_.push_back(&o);
    else if (k == "EnvoyGateway") eg_configs_.push_back({&o, o.node});
    if (k == "ConfigMap") {  // Envoy Gateway's own configuration lives in a ConfigMap
      for (const auto& kv : Get(o.node, "data").IsMap() ? Get(o.node, "data") : YAML::Node()) {
        const std::string text = kv.second.IsScalar() ? kv.second.Scalar() : "";
        if (text.find("kind: EnvoyGateway") == std::string::npos) continue;
        try {
          eg_configs_.push_back({&o, YAML::Load(text)});
        } catch (const YAML::Exception&) {
        }
      }
    }
    YAML::Node spec;
    std::map<std::string, std::string> labels;
    if (k == "Pod") {
      spec.reset(Get(o.node, "spec"));
      labels = StringMap(At(o.node, {"metadata", "labels"}));
    } else if (k == "Deployment" || k == "StatefulSet" || k == "DaemonSet" || k == "ReplicaSet" || k == "Job") {
      spec.reset(At(o.node, {"spec", "template", "spec"}));
      labels = StringMap(At(o.node, {"spec", "template", "metadata", "labels"}));
    } else {
      return;
    }
    if (!spec.IsDefined()) return;
    workloads_.push_back(std::make_unique<Workload>(Workload{&o, spec, labels}));
    const Workload* w = workloads_.back().get();
    bool is_epp = false;
    if (Get(spec, "containers").IsSequence())
      for (const YAML::Node& c : Get(spec, "containers")) {
        std::optional<Epp> e = AsEpp(*w, c);
        if (e) {
          epps_.push_back(*std::move(e));
          is_epp = true;
        }
      }
    if (!is_epp && !IsKeyValueStore(spec)) model_servers_.push_back(w);
  }

  // A workload whose containers all run Redis or Valkey (by image or command): the store EPP
  // replicas share state through (--shared-state), never a model server a pool should select.
  static bool IsKeyValueStore(const YAML::Node& spec) {
    const YAML::Node containers = Get(spec, "containers");
    if (!containers.IsSequence() || containers.size() == 0) return false;
    for (const YAML::Node& c : containers) {
      std::string image = Get(c, "image").IsScalar() ? Get(c, "image").as<std::string>() : "";
      if (const size_t slash = image.rfind('/'); slash != std::string::npos) image = image.substr(slash + 1);
      std::string command;
      const YAML::Node cmd = Get(c, "command");
      if (cmd.IsSequence() && cmd.size() > 0 && cmd[0].IsScalar()) command = cmd[0].as<std::string>();
      if (const size_t slash = command.rfind('/'); slash != std::string::npos) command = command.substr(slash + 1);
      const bool store = image.rfind("redis", 0) == 0 || image.rfind("valkey", 0) == 0 ||
                         command == "redis-server" || command == "valkey-server";
      if (!store) return false;
    }
    return true;
  }

  // The boolean flags of `epp` / `eppctl serve` (the reference's and epp's own): written with a
  // separate "false" they take the value true and the "false" becomes a stray argument.
  static bool IsBooleanFlag(std::string_view name) {
    static const std::set<std::string_view> kBooleans = {
        "secure-serving", "metrics-endpoint-auth", "ha-enable-leader-election", "health-checking", "enable-pprof",
        "tracing", "enable-cert-reload", "enable-grpc-stream-metrics", "allow-experimental-plugins",
        "disable-endpoint-subset-filter", "emit-endpoint-scores", "model-server-metrics-https-insecure-skip-verify",
        "zap-devel", "pool-watch", "watch-objectives", "scrape-gzip", "decision-log-prompts"};
    return kBooleans.count(name) > 0;
  }

  static std::optional<Epp> AsEpp(const Workload& w, const YAML::Node& c) {
    std::vector<std::pair<std::string, int>> words;
    for (const char* key : {"command", "args"})
      if (Get(c, key).IsSequence())
        for (const YAML::Node& a : Get(c, key)) words.emplace_back(Str(a), YamlLine(a));
    Epp e{&w, c};
    const std::string image = Str(Get(c, "image"));
    bool serve = false, any_pool = false;
    for (size_t i = 0; i < words.size(); ++i) {
      const std::string& a = words[i].first;
      if (a.find("eppctl") != std::string::npos) e.eppctl = true;
      if (a == "serve") serve = true;
      if (a.rfind("--", 0) != 0) continue;
      std::string name = a.substr(2), value;
      if (size_t eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      } else if (i + 1 < words.size() && words[i + 1].first.rfind("-", 0) != 0) {
        value = words[i + 1].first;
        if (IsBooleanFlag(name)) e.split_booleans.emplace_back(name, words[i + 1].second);
        ++i;
      }
      if (name == "pool-name" || name == "endpoint-selector") any_pool = true;
      e.flags[name] = value;
      e.flag_lines[name] = words[i].second;
    }
    const bool reference_image = image.find("gateway-api-inference-extension/epp") != std::string::npos ||
                                 image.find("llm-d-router") != std::string::npos ||
                                 image.find("llm-d-inference-scheduler") != std::string::npos;
    if (any_pool || (e.eppctl && serve) || reference_image) return e;
    return std::nullopt;
  }

  // ---- InferencePool ----
  void CheckPool(const Obj& p) {
    const YAML::Node spec = Get(p.node, "spec");
    const bool alpha = p.Group() == kGroupAlpha;
    if (alpha)
      Emit("IP001", LintSeverity::kWarning, p, Get(p.node, "apiVersion"),
           "apiVersion inference.networking.x-k8s.io/v1alpha2: GIE removed this API in v1.5.0; the reference EPP (>= v1.5), "
           "Envoy AI Gateway (>= 0.4) and Istio read only inference.networking.k8s.io/v1 pools",
           "use apiVersion inference.networking.k8s.io/v1 (selector.matchLabels, targetPorts, endpointPickerRef); eppctl serve "
           "reads v1alpha2 only with --pool-group inference.networking.x-k8s.io");
    if (!spec.IsMap()) {
      Emit("IP002", LintSeverity::kError, p, p.node, "no spec", "give spec.selector, spec.targetPorts and spec.endpointPickerRef");
      return;
    }
    std::map<std::string, std::string> selector;
    if (!alpha) {
      for (const char* old : {"targetPortNumber", "extensionRef"})
        if (Get(spec, old).IsDefined())
          Emit("IP002", LintSeverity::kError, p, Get(spec, old), absl::StrCat("spec.", old, " is a v1alpha2 field; v1 has no such field"),
               std::string(old) == "extensionRef" ? "use spec.endpointPickerRef {name, port: {number}}" : "use spec.targetPorts: [{number: N}]");
      const YAML::Node ml = At(spec, {"selector", "matchLabels"});
      if (!ml.IsMap() || ml.size() == 0) {
        Emit("IP002", LintSeverity::kError, p, Get(spec, "selector").IsDefined() ? Get(spec, "selector") : spec,
             Get(spec, "selector").IsMap() && !ml.IsDefined() ? "spec.selector has no matchLabels (a plain label map is the v1alpha2 form)"
                                                         : "spec.selector.matchLabels is missing or empty",
             "spec.selector: {matchLabels: {app: MODEL-SERVER-LABEL}}");
      }
      selector = StringMap(ml);
    } else {
      selector = StringMap(Get(spec, "selector"));
    }
    // Target ports.
    std::vector<int64_t> ports;
    if (alpha) {
      if (auto n = Int(Get(spec, "targetPortNumber"))) ports.push_back(*n);
    } else if (Get(spec, "targetPorts").IsSequence()) {
      for (const YAML::Node& tp : Get(spec, "targetPorts")) {
        std::optional<int64_t> n = Int(Get(tp, "number"));
        if (!n || *n < 1 || *n > 65535) {
          Emit("IP003", LintSeverity::kError, p, tp, "a targetPorts entry without a port number in 1..65535", "targetPorts: [{number: 8000}]");
          continue;
        }
        if (std::find(ports.begin(), ports.end(), *n) != ports.end())
          Emit("IP003", LintSeverity::kError, p, tp, absl::StrCat("port ", *n, " is listed twice (the CRD requires unique ports)"), "list each port once");
        ports.push_back(*n);
      }
      if (Get(spec, "targetPorts").size() > 8)
        Emit("IP003", LintSeverity::kError, p, Get(spec, "targetPorts"), "more than 8 targetPorts (the CRD allows 1 to 8)", "keep at most 8");
    }
    if (ports.empty() && (alpha ? !Get(spec, "targetPortNumber").IsDefined() : !Get(spec, "targetPorts").IsSequence()))
      Emit("IP003", LintSeverity::kError, p, spec, alpha ? "spec.targetPortNumber is missing" : "spec.targetPorts is missing",
           alpha ? "targetPortNumber: 8000" : "targetPorts: [{number: 8000}]");
    // The EPP reference.
    const YAML::Node ref = alpha ? Get(spec, "extensionRef") : Get(spec, "endpointPickerRef");
    const char* ref_name = alpha ? "extensionRef" : "endpointPickerRef";
    if (!ref.IsMap()) {
      Emit("IP004", LintSeverity::kError, p, spec, absl::StrCat("spec.", ref_name, " is missing: no EPP is called for this pool"),
           absl::StrCat("spec.", ref_name, alpha ? ": {name: EPP-SERVICE, portNumber: 9002}" : ": {name: EPP-SERVICE, port: {number: 9002}}"));
    } else {
      const std::string kind = Str(Get(ref, "kind")).empty() ? "Service" : Str(Get(ref, "kind"));
      if (Str(Get(ref, "name")).empty())
        Emit("IP004", LintSeverity::kError, p, ref, absl::StrCat(ref_name, ".name is missing"), "name the EPP's Service");
      if (kind == "Service" && !alpha && !Int(At(ref, {"port", "number"})))
        Emit("IP004", LintSeverity::kError, p, ref,
             "endpointPickerRef.port.number is missing (the CRD requires it when kind is Service, as it defaults to)",
             "port: {number: 9002} (the Service port, not the container port)");
      if (Get(ref, "namespace").IsDefined())
        Emit("IP004", LintSeverity::kError, p, Get(ref, "namespace"),
             "endpointPickerRef has no namespace field (it is dropped): the EPP Service must be in the pool's namespace",
             "move the EPP Service into the pool's namespace and remove namespace");
      const YAML::Node fm = Get(ref, "failureMode");
      const std::string mode = Str(fm);
      if (!fm.IsDefined()) {
        Emit("IP005", LintSeverity::kWarning, p, ref,
             "failureMode is left to its default (FailClose: requests fail while the EPP is unreachable); nobody decided",
             "write failureMode: FailClose (placement matters) or FailOpen (availability matters, where the gateway supports it)");
      } else if (mode != "FailOpen" && mode != "FailClose") {
        Emit("IP005", LintSeverity::kError, p, fm, absl::StrCat("failureMode '", mode, "' is not FailOpen or FailClose"), "failureMode: FailClose");
      } else if (mode == "FailOpen") {
        Emit("IP005", LintSeverity::kWarning, p, fm,
             "failureMode FailOpen is not honoured everywhere: Envoy AI Gateway always fails closed; Envoy Gateway's "
             "EnvoyExtensionPolicy refuses failOpen with FULL_DUPLEX_STREAMED; on Envoy it helps only before the first body "
             "chunk reaches the EPP",
             "use FailClose unless your gateway documents FailOpen with full-duplex streaming",
             {"Envoy Gateway", "Envoy AI Gateway"});
      }
    }
    CheckPoolServicePort(p);
    // The model servers.
    if (selector.empty() || model_servers_.empty()) return;
    std::vector<const Workload*> selected;
    for (const Workload* w : model_servers_)
      if (SameNs(w->obj->ns, p.ns) && Selects(selector, w->labels)) selected.push_back(w);
    for (const Epp& e : epps_)
      if (SameNs(e.w->obj->ns, p.ns) && Selects(selector, e.w->labels))
        Emit("IP006", LintSeverity::kError, p, Get(spec, "selector"),
             absl::StrCat("the selector (", Join(selector), ") matches the EPP's own Pods (", e.w->obj->Label(), ")"),
             "select only the model servers' Pod labels");
    if (selected.empty()) {
      Emit("IP006", LintSeverity::kError, p, Get(spec, "selector"),
           absl::StrCat("the selector (", Join(selector), ") matches no Pod template of the ", model_servers_.size(),
                        " workload(s) in these files: the pool has no endpoints"),
           absl::StrCat("set matchLabels to the model servers' Pod template labels, e.g. ", Join(model_servers_[0]->labels)));
      return;
    }
    for (int64_t port : ports) {
      bool found = false, any_ports = false;
      for (const Workload* w : selected)
        if (Get(w->pod_spec, "containers").IsSequence())
          for (const YAML::Node& c : Get(w->pod_spec, "containers"))
            if (Get(c, "ports").IsSequence())
              for (const YAML::Node& cp : Get(c, "ports")) {
                any_ports = true;
                if (Int(Get(cp, "containerPort")) == port) found = true;
              }
      if (any_ports && !found)
        Emit("IP007", LintSeverity::kError, p, alpha ? Get(spec, "targetPortNumber") : Get(spec, "targetPorts"),
             absl::StrCat("target port ", port, " is not a containerPort of the selected Pods (", selected[0]->obj->Label(), ")"),
             "use the port the model server listens on");
    }
  }

  const Obj* FindService(const std::string& name, const std::string& ns) const {
    for (const Obj* s : services_)
      if (s->name == name && SameNs(s->ns, ns)) return s;
    return nullptr;
  }
  const Obj* FindPool(const std::string& name, const std::string& ns) const {
    for (const Obj* p : pools_)
      if (p->name == name && SameNs(p->ns, ns)) return p;
    return nullptr;
  }
  static YAML::Node PoolRef(const Obj& p) { return p.Group() == kGroupAlpha ? At(p.node, {"spec", "extensionRef"}) : At(p.node, {"spec", "endpointPickerRef"}); }
  static std::optional<int64_t> PoolRefPort(const Obj& p) {
    const YAML::Node ref = PoolRef(p);
    if (p.Group() == kGroupAlpha) {
      auto n = Int(Get(ref, "portNumber"));
      return n ? n : std::optional<int64_t>(9002);  // "SHOULD infer 9002"
    }
    return Int(At(ref, {"port", "number"}));
  }

  // The EPP of a pool: a container whose --pool-name names it, in its namespace.
  const Epp* EppOf(const Obj& pool) const {
    for (const Epp& e : epps_)
      if (e.pool() == pool.name && SameNs(e.w->obj->ns, pool.ns)) return &e;
    return nullptr;
  }
  // The container port a Service port's targetPort reaches in the EPP (a number, a container
  // port's name, or absent: the port itself); nullopt when a name matches no container port.
  static std::optional<int64_t> TargetPort(const YAML::Node& service_port, const Epp* e) {
    const YAML::Node tp = Get(service_port, "targetPort");
    if (!tp.IsDefined()) return Int(Get(service_port, "port"));
    if (auto n = Int(tp)) return n;
    if (e != nullptr && Get(e->container, "ports").IsSequence())
      for (const YAML::Node& cp : Get(e->container, "ports"))
        if (Str(Get(cp, "name")) == Str(tp)) return Int(Get(cp, "containerPort"));
    return std::nullopt;
  }
  // "9002 (grpc -> targetPort grpc), 9090 (metrics -> targetPort 9090)"
  static std::string DescribePorts(const YAML::Node& ports) {
    std::string out;
    for (const YAML::Node& sp : ports.IsSequence() ? ports : YAML::Node()) {
      const std::string name = Str(Get(sp, "name"));
      const YAML::Node tp = Get(sp, "targetPort");
      absl::StrAppend(&out, out.empty() ? "" : ", ", Str(Get(sp, "port")), " (", name.empty() ? "" : name + " ",
                      "-> targetPort ", tp.IsDefined() ? Str(tp) : Str(Get(sp, "port")), ")");
    }
    return out.empty() ? "none" : out;
  }

  // IP009: the port the pool's endpointPickerRef names is one of its Service's ports. Reported
  // at the pool (the Service may well be right: it is the pool that names a port it lacks).
  void CheckPoolServicePort(const Obj& p) {
    const bool alpha = p.Group() == kGroupAlpha;
    const YAML::Node ref = PoolRef(p);
    const std::string svc_name = Str(Get(ref, "name"));
    const std::optional<int64_t> ref_port = PoolRefPort(p);
    const Obj* svc = svc_name.empty() ? nullptr : FindService(svc_name, p.ns);
    if (svc == nullptr || !ref_port || Str(At(svc->node, {"spec", "type"})) == "ExternalName") return;
    const YAML::Node ports = At(svc->node, {"spec", "ports"});
    for (const YAML::Node& sp : ports.IsSequence() ? ports : YAML::Node())
      if (Int(Get(sp, "port")) == *ref_port) return;
    const YAML::Node at = alpha ? (Get(ref, "portNumber").IsDefined() ? Get(ref, "portNumber") : ref) : At(ref, {"port", "number"});
    const std::string subject = !alpha ? absl::StrCat("endpointPickerRef.port.number ", *ref_port)
                                : Get(ref, "portNumber").IsDefined()
                                    ? absl::StrCat("extensionRef.portNumber ", *ref_port)
                                    : absl::StrCat("the port ", *ref_port, " inferred for an absent extensionRef.portNumber");
    // The Service port the pool should name: the one leading to the EPP's gRPC port.
    const Epp* e = EppOf(p);
    const int grpc = e != nullptr ? e->Port("grpc-port", 9002) : 9002;
    std::vector<int64_t> leads;
    for (const YAML::Node& sp : ports.IsSequence() ? ports : YAML::Node())
      if (auto port = Int(Get(sp, "port")); port && TargetPort(sp, e) == grpc) leads.push_back(*port);
    std::string fix;
    if (leads.size() == 1)
      fix = absl::StrCat(alpha ? "extensionRef.portNumber: " : "endpointPickerRef.port: {number: ", leads[0], alpha ? "" : "}",
                         " (the Service port whose targetPort is the EPP's gRPC port ", grpc, "), or add port ", *ref_port,
                         " to the Service");
    else
      fix = absl::StrCat("name the Service port whose targetPort is the EPP's gRPC port ", grpc, ", or add port ", *ref_port,
                         " (targetPort ", grpc, ") to the Service");
    Emit("IP009", LintSeverity::kError, p, at,
         absl::StrCat(subject, " is not a port of Service '", svc_name, "' (", svc->file, ":", svc->line,
                      "), whose ports are ", DescribePorts(ports), ": the gateway dials a port nothing serves"),
         fix);
  }

  void CheckOnePoolPerEpp() {
    std::map<std::string, const Obj*> by_service;
    for (const Obj* p : pools_) {
      const std::string svc = Str(Get(PoolRef(*p), "name"));
      if (svc.empty()) continue;
      const std::string key = absl::StrCat(p->ns, "/", svc);
      if (auto it = by_service.find(key); it != by_service.end())
        Emit("IP008", LintSeverity::kError, *p, PoolRef(*p),
             absl::StrCat("this pool and ", it->second->Label(), " name the same EPP Service '", svc,
                          "': an EPP serves exactly one pool (its --pool-name)"),
             "deploy one EPP (Deployment + Service) per InferencePool");
      else
        by_service[key] = p;
    }
    std::map<std::string, const Epp*> by_pool;
    for (const Epp& e : epps_) {
      if (e.pool().empty()) continue;
      const std::string key = absl::StrCat(e.w->obj->ns, "/", e.pool());
      if (auto it = by_pool.find(key); it != by_pool.end() && it->second->w != e.w)
        Emit("IP008", LintSeverity::kError, *e.w->obj, e.container,
             absl::StrCat("this EPP and ", it->second->w->obj->Label(), " both serve pool '", e.pool(),
                          "': two pickers with separate state split the prefix-cache affinity"),
             "keep one EPP Deployment per pool (scale with replicas and leader election where the EPP supports it)");
      else
        by_pool[key] = &e;
    }
  }

  // ---- EPP ----
  void CheckEpp(const Epp& e) {
    const Obj& o = *e.w->obj;
    auto line_of = [&](const char* flag) {
      auto it = e.flag_lines.find(flag);
      return it == e.flag_lines.end() ? YamlLine(e.container) : it->second;
    };
    // EPP004: booleans as two args.
    for (const auto& [flag, line] : e.split_booleans)
      Emit("EPP004", LintSeverity::kError, o.file, line, o.Label(),
           absl::StrCat("--", flag, " is followed by a separate value: a boolean flag takes no next argument, so the value is "
                                    "ignored (and is a stray positional argument)"),
           absl::StrCat("write --", flag, "=", e.flags.at(flag)));
    // EPP001: the pool.
    const std::string pool_name = e.pool();
    const Obj* pool = nullptr;
    if (!pool_name.empty()) {
      std::string pool_ns = o.ns;
      if (auto it = e.flags.find("pool-namespace"); it != e.flags.end() && it->second.find("$(") == std::string::npos) pool_ns = it->second;
      pool = FindPool(pool_name, pool_ns);
      if (pool == nullptr && !pools_.empty()) {
        std::string names;
        for (const Obj* p : pools_) absl::StrAppend(&names, names.empty() ? "" : ", ", p->Label());
        Emit("EPP001", LintSeverity::kError, o.file, line_of("pool-name"), o.Label(),
             absl::StrCat("--pool-name=", pool_name, " names no InferencePool in these files (they have: ", names,
                          "); the EPP finds no endpoints"),
             absl::StrCat("set --pool-name to the pool's metadata.name"));
      }
    } else if (!e.flags.count("endpoint-selector") && !e.flags.count("endpoints") && !e.flags.count("pool-import")) {
      Emit("EPP001", LintSeverity::kError, o.file, YamlLine(e.container), o.Label(),
           "the EPP has no --pool-name (nor --endpoint-selector, an endpoints file or --pool-import)", "add --pool-name=POOL");
    }
    const int grpc = e.Port("grpc-port", 9002), health = e.Port("grpc-health-port", 9003);
    // EPP002: the Service the pool names reaches the gRPC port.
    const Obj* svc = nullptr;
    std::optional<int64_t> ref_port;
    if (pool != nullptr) {
      const std::string svc_name = Str(Get(PoolRef(*pool), "name"));
      ref_port = PoolRefPort(*pool);
      svc = FindService(svc_name, pool->ns);
      if (svc == nullptr && !svc_name.empty())
        Emit("EPP002", LintSeverity::kError, *pool, PoolRef(*pool),
             absl::StrCat("endpointPickerRef names Service '", svc_name, "', which is not in these files"),
             absl::StrCat("add the EPP's Service '", svc_name, "' (selecting the EPP Pods, port ", ref_port.value_or(9002), ")"));
    }
    if (svc != nullptr) {
      const std::map<std::string, std::string> sel = StringMap(At(svc->node, {"spec", "selector"}));
      if (Str(At(svc->node, {"spec", "type"})) == "ExternalName")
        Emit("EPP002", LintSeverity::kError, *svc, Get(svc->node, "spec"), "an ExternalName Service: implementations must not support it",
             "use a ClusterIP Service selecting the EPP Pods");
      else if (!Selects(sel, e.w->labels))
        Emit("EPP002", LintSeverity::kError, *svc, At(svc->node, {"spec", "selector"}),
             absl::StrCat("the Service's selector (", Join(sel), ") does not select the EPP Pods of ", o.Label(), " (labels ",
                          Join(e.w->labels), ")"),
             "set spec.selector to the EPP Pod template's labels");
      // The Service port the pool names (its absence is IP009, reported at the pool).
      std::optional<YAML::Node> port_entry;
      if (At(svc->node, {"spec", "ports"}).IsSequence())
        for (const YAML::Node& sp : At(svc->node, {"spec", "ports"}))
          if (ref_port && Int(Get(sp, "port")) == *ref_port) port_entry.emplace(sp);
      if (port_entry) {
        // targetPort: a number, a container port's name, or (absent) the port itself.
        const YAML::Node tp = Get(*port_entry, "targetPort");
        const std::optional<int64_t> target = TargetPort(*port_entry, &e);
        if (!target) {
          // A name the EPP's container does not declare. The fix names the container port that
          // is the gRPC port, when there is one.
          std::string declared, grpc_name;
          for (const YAML::Node& cp : Get(e.container, "ports").IsSequence() ? Get(e.container, "ports") : YAML::Node()) {
            const std::string name = Str(Get(cp, "name"));
            absl::StrAppend(&declared, declared.empty() ? "" : ", ", name.empty() ? "(no name)" : name, "=", Str(Get(cp, "containerPort")));
            if (!name.empty() && Int(Get(cp, "containerPort")) == grpc) grpc_name = name;
          }
          Emit("EPP002", LintSeverity::kError, *svc, tp,
               absl::StrCat("Service port ", *ref_port, " has targetPort '", Str(tp), "', which names no container port of the EPP ",
                            o.Label(), " (", declared.empty() ? "it declares no ports" : "it declares " + declared,
                            "): the Service leads nowhere"),
               grpc_name.empty() ? absl::StrCat("targetPort: ", grpc, " (the EPP's gRPC port)")
                                 : absl::StrCat("targetPort: ", grpc_name, " (the container port ", grpc, ", the EPP's gRPC port)"));
        } else if (*target != grpc) {
          Emit("EPP002", LintSeverity::kError, *svc, tp.IsDefined() ? tp : *port_entry,
               absl::StrCat("Service port ", *ref_port, " leads to container port ", *target, ", but the EPP ", o.Label(),
                            " serves ext_proc on ", grpc, e.flags.count("grpc-port") ? " (--grpc-port)" : " (the --grpc-port default)"),
               absl::StrCat("targetPort: ", grpc));
        }
        // EPP005: TLS on the EPP, cleartext declared.
        if (e.Tls() && Str(Get(*port_entry, "appProtocol")) == "kubernetes.io/h2c")
          Emit("EPP005", LintSeverity::kWarning, *svc, Get(*port_entry, "appProtocol"),
               "the EPP serves TLS (--secure-serving is on by default) but its Service port says appProtocol kubernetes.io/h2c "
               "(cleartext HTTP/2). Envoy Gateway and kgateway dial the EPP over TLS without verifying and ignore the field, "
               "so it works there; a gateway that honours appProtocol speaks cleartext to a TLS port and fails",
               "drop appProtocol (or set it to match), or run the EPP with --secure-serving=false for a cleartext gateway",
               {"Istio", "any gateway honouring appProtocol"});
      }
    }
    // EPP003: probes at the health port.
    for (const char* probe : {"livenessProbe", "readinessProbe", "startupProbe"}) {
      const YAML::Node pr = Get(e.container, probe);
      if (!pr.IsMap()) continue;
      std::optional<int64_t> port;
      std::string how;
      if (Get(pr, "grpc").IsMap()) {
        port = Int(Get(Get(pr, "grpc"), "port"));
        how = "grpc";
      } else if (Get(pr, "httpGet").IsMap() || Get(pr, "tcpSocket").IsMap()) {
        const YAML::Node p = Get(pr, "httpGet").IsMap() ? Get(Get(pr, "httpGet"), "port") : Get(Get(pr, "tcpSocket"), "port");
        port = Int(p);
        if (!port && Get(e.container, "ports").IsSequence())
          for (const YAML::Node& cp : Get(e.container, "ports"))
            if (Str(Get(cp, "name")) == Str(p)) port = Int(Get(cp, "containerPort"));
        how = Get(pr, "httpGet").IsMap() ? "httpGet" : "tcpSocket";
      }
      if (how == "grpc" && port && *port != health)
        Emit("EPP003", LintSeverity::kError, o.file, YamlLine(pr), o.Label(),
             absl::StrCat(probe, " probes gRPC port ", *port, ", but the EPP's health service is on ", health,
                          e.flags.count("grpc-health-port") ? " (--grpc-health-port)" : " (the --grpc-health-port default)"),
             absl::StrCat(probe, ": {grpc: {port: ", health, ", service: ", std::string_view(probe) == "livenessProbe" ? "liveness" : "readiness", "}}"));
      else if (how == "httpGet" && port && *port == grpc)
        Emit("EPP003", LintSeverity::kError, o.file, YamlLine(pr), o.Label(),
             absl::StrCat(probe, " sends HTTP/1.1 to the ext_proc gRPC port ", grpc, ": it always fails"),
             absl::StrCat("probe with grpc: {port: ", health, "}"));
    }
    CheckEppConfig(e);
    CheckRbac(e, pool);
  }

  void CheckEppConfig(const Epp& e) {
    const Obj& o = *e.w->obj;
    std::string text, source;
    int line = 0;
    std::string file = o.file;
    if (auto it = e.flags.find("config-text"); it != e.flags.end()) {
      text = it->second;
      source = absl::StrCat(o.file, ":", e.flag_lines.at("config-text"), " (--config-text)");
      line = e.flag_lines.at("config-text");
    } else {
      std::string path;
      for (const char* f : {"config", "config-file", "c"})
        if (auto it = e.flags.find(f); it != e.flags.end()) path = it->second;
      if (path.empty()) return;
      // The volume that holds it: a ConfigMap mounted at a parent directory.
      const YAML::Node mounts = Get(e.container, "volumeMounts");
      const YAML::Node volumes = Get(e.w->pod_spec, "volumes");
      if (!mounts.IsSequence() || !volumes.IsSequence()) return;
      for (const YAML::Node& m : mounts) {
        std::string dir = Str(Get(m, "mountPath"));
        if (dir.empty()) continue;
        if (dir.back() != '/') dir += '/';
        if (path.rfind(dir, 0) != 0) continue;
        const std::string key = Str(Get(m, "subPath")).empty() ? path.substr(dir.size()) : Str(Get(m, "subPath"));
        for (const YAML::Node& v : volumes) {
          if (Str(Get(v, "name")) != Str(Get(m, "name"))) continue;
          const std::string cm = Str(At(v, {"configMap", "name"}));
          for (const Obj* c : configmaps_)
            if (c->name == cm && SameNs(c->ns, o.ns) && Get(Get(c->node, "data"), key).IsScalar()) {
              text = Get(Get(c->node, "data"), key).Scalar();
              file = c->file;
              line = YamlLine(Get(Get(c->node, "data"), key));
              source = absl::StrCat(c->file, ":", line, " (ConfigMap ", cm, " key ", key, ")");
            }
        }
      }
      if (text.empty()) return;  // not in these files: nothing to check
    }
    absl::StatusOr<EppConfig> config = ParseConfig(text, source);
    absl::Status st = config.status();
    if (config.ok()) {
      auto s = BuildScheduler(*config, BuiltinRegistry());
      st = s.status();
    }
    if (!st.ok())
      Emit("EPP006", LintSeverity::kError, file, line, o.Label(),
           absl::StrCat("the EPP's configuration does not load: ", st.message()),
           "fix it until `eppctl config validate FILE` accepts it");
  }

  static bool Grants(const YAML::Node& rule, std::string_view group, std::string_view resource) {
    bool g = false, r = false;
    std::set<std::string> verbs;
    for (const YAML::Node& x : Get(rule, "apiGroups").IsSequence() ? Get(rule, "apiGroups") : YAML::Node()) g |= Str(x) == group || Str(x) == "*";
    for (const YAML::Node& x : Get(rule, "resources").IsSequence() ? Get(rule, "resources") : YAML::Node()) r |= Str(x) == resource || Str(x) == "*";
    for (const YAML::Node& x : Get(rule, "verbs").IsSequence() ? Get(rule, "verbs") : YAML::Node()) verbs.insert(Str(x));
    const bool all = verbs.count("*") > 0;
    return g && r && (all || (verbs.count("get") && verbs.count("list") && verbs.count("watch")));
  }

  void CheckRbac(const Epp& e, const Obj* pool) {
    if (roles_.empty() && bindings_.empty()) return;  // RBAC managed elsewhere: nothing to check
    const Obj& o = *e.w->obj;
    std::string sa = Str(Get(e.w->pod_spec, "serviceAccountName"));
    if (sa.empty()) sa = Str(Get(e.w->pod_spec, "serviceAccount"));
    if (sa.empty()) sa = "default";
    // What the EPP reads through the API: a pool's Pods, an InferencePoolImport (region-level
    // EPP), or nothing (an endpoints file without --pool-name).
    const bool import = e.flags.count("pool-import") > 0;
    if (!import && e.pool().empty() && !e.flags.count("endpoint-selector")) return;
    const std::string group = import ? "inference.networking.x-k8s.io" : pool ? pool->Group() : std::string(kGroupV1);
    const std::string resource = import ? "inferencepoolimports" : "inferencepools";
    bool pods = import, pools = false;
    for (const Obj* b : bindings_) {
      bool subject = false;
      for (const YAML::Node& s : Get(b->node, "subjects").IsSequence() ? Get(b->node, "subjects") : YAML::Node())
        if (Str(Get(s, "kind")) == "ServiceAccount" && Str(Get(s, "name")) == sa) {
          const std::string sns = Str(Get(s, "namespace")).empty() && b->kind == "RoleBinding" ? b->ns : Str(Get(s, "namespace"));
          subject |= SameNs(sns, o.ns);
        }
      if (!subject || (b->kind == "RoleBinding" && !SameNs(b->ns, o.ns))) continue;
      const std::string role_kind = Str(At(b->node, {"roleRef", "kind"})), role_name = Str(At(b->node, {"roleRef", "name"}));
      for (const Obj* r : roles_) {
        if (r->kind != role_kind || r->name != role_name || (r->kind == "Role" && !SameNs(r->ns, b->ns))) continue;
        for (const YAML::Node& rule : Get(r->node, "rules").IsSequence() ? Get(r->node, "rules") : YAML::Node()) {
          pods |= Grants(rule, "", "pods");
          pools |= Grants(rule, group, resource);
        }
      }
    }
    if (!pods || !pools)
      Emit("RBAC001", LintSeverity::kError, o.file, YamlLine(e.w->pod_spec), o.Label(),
           absl::StrCat("ServiceAccount '", sa, "' may not get, list and watch ", !pods ? "pods" : "",
                        !pods && !pools ? " and " : "", !pools ? absl::StrCat(group, " ", resource) : "",
                        " in the pool's namespace: the EPP fails at start (403 Forbidden)"),
           import ? absl::StrCat("bind a Role with the rule {apiGroups: [", group, "], resources: [", resource,
                                 "]}, verbs [get, list, watch], to ServiceAccount ", sa)
                  : absl::StrCat("bind a Role with rules {apiGroups: [\"\"], resources: [pods]} and {apiGroups: [", group,
                                 "], resources: [inferencepools]}, verbs [get, list, watch], to ServiceAccount ", sa));
  }

  // ---- HTTPRoute ----
  void CheckRoute(const Obj& rt) {
    const YAML::Node rules = At(rt.node, {"spec", "rules"});
    if (!rules.IsSequence()) return;
    for (const YAML::Node& rule : rules)
      for (const YAML::Node& b : Get(rule, "backendRefs").IsSequence() ? Get(rule, "backendRefs") : YAML::Node()) {
        const std::string kind = Str(Get(b, "kind")).empty() ? "Service" : Str(Get(b, "kind"));
        const std::string group = Str(Get(b, "group"));
        const std::string name = Str(Get(b, "name"));
        const std::string ns = Str(Get(b, "namespace")).empty() ? rt.ns : Str(Get(b, "namespace"));
        const Obj* pool = FindPool(name, ns);
        if (kind != "InferencePool") {
          if (pool != nullptr && FindService(name, ns) == nullptr)
            Emit("RT001", LintSeverity::kError, rt, b,
                 absl::StrCat("backendRef '", name, "' has kind ", kind, " but names the InferencePool ", pool->Label(),
                              ": the route goes to a Service of that name, not through the EPP"),
                 absl::StrCat("group: ", pool->Group(), ", kind: InferencePool, and no port"));
          continue;
        }
        if (group != kGroupV1 && group != kGroupAlpha)
          Emit("RT001", LintSeverity::kError, rt, b,
               absl::StrCat("backendRef to an InferencePool with group '", group, "': the route resolves nothing"),
               absl::StrCat("group: ", kGroupV1));
        else if (pool != nullptr && pool->Group() != group)
          Emit("RT001", LintSeverity::kError, rt, b,
               absl::StrCat("backendRef group ", group, " but the pool ", pool->Label(), " is ", pool->api_version),
               absl::StrCat("group: ", pool->Group()));
        if (pool == nullptr && !pools_.empty())
          Emit("RT001", LintSeverity::kError, rt, b, absl::StrCat("backendRef names InferencePool '", name, "', which is not in these files"),
               "name the pool's metadata.name");
        if (Get(b, "port").IsDefined())
          Emit("RT002", LintSeverity::kWarning, rt, Get(b, "port"),
               "a port on an InferencePool backendRef is ignored: the pool's targetPorts decide (GIE conformance)",
               "remove port");
      }
  }

  // ---- gateways ----
  void CheckGateways() {
    const bool uses_pools = !pools_.empty();
    for (const auto& [o, cfg] : eg_configs_) {
      bool registered = false;
      const YAML::Node br = At(cfg, {"extensionManager", "backendResources"});
      for (const YAML::Node& r : br.IsSequence() ? br : YAML::Node())
        registered |= Str(Get(r, "group")) == kGroupV1 && Str(Get(r, "kind")) == "InferencePool";
      if (uses_pools && !registered)
        Emit("GW001", LintSeverity::kError, *o, cfg,
             "Envoy Gateway's configuration does not list InferencePool under extensionManager.backendResources: routes to "
             "a pool are not resolved",
             "extensionManager: {backendResources: [{group: inference.networking.k8s.io, kind: InferencePool, version: v1}]} "
             "(Envoy AI Gateway's install does this)",
             {"Envoy Gateway"});
    }
    for (const Obj* p : policies_) {
      const YAML::Node ep = At(p->node, {"spec", "extProc"});
      for (const YAML::Node& x : ep.IsSequence() ? ep : YAML::Node()) {
        const bool fail_open = Str(Get(x, "failOpen")) == "true";
        const std::string body = Str(At(x, {"processingMode", "request", "body"}));
        if (fail_open && body == "FullDuplexStreamed")
          Emit("GW002", LintSeverity::kError, *p, Get(x, "failOpen"),
               "failOpen: true with request body mode FullDuplexStreamed: Envoy Gateway's validation refuses the policy",
               "set failOpen: false (the EPP needs FULL_DUPLEX_STREAMED)", {"Envoy Gateway"});
      }
    }
  }

  LintReport& r_;
  std::vector<Obj> objs_;
  std::vector<const Obj*> pools_, routes_, services_, configmaps_, roles_, bindings_, policies_;
  std::vector<std::pair<const Obj*, YAML::Node>> eg_configs_;
  std::vector<std::unique_ptr<Workload>> workloads_;
  std::vector<const Workload*> model_servers_;
  std::vector<Epp> epps_;
};

void Sort(LintReport& r) {
  std::stable_sort(r.findings.begin(), r.findings.end(), [](const LintFinding& a, const LintFinding& b) {
    return std::tie(a.file, a.line, a.rule) < std::tie(b.file, b.line, b.rule);
  });
}

}  // namespace

LintReport LintText(std::string_view yaml, std::string_view file) {
  LintReport r;
  r.files.emplace_back(file);
  Linter l(r);
  l.Add(yaml, std::string(file));
  l.Run();
  Sort(r);
  return r;
}

absl::StatusOr<LintReport> LintPaths(const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<std::string> found;
      for (auto it = fs::recursive_directory_iterator(p, ec); it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (ec) break;
        const std::string ext = it->path().extension().string();
        if (it->is_regular_file() && (ext == ".yaml" || ext == ".yml" || ext == ".json")) found.push_back(it->path().string());
      }
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::exists(p, ec) || p == "-") {
      files.push_back(p);
    } else {
      return absl::NotFoundError(absl::StrCat("no such file or directory: ", p));
    }
  }
  LintReport r;
  Linter l(r);
  for (const std::string& f : files) {
    std::string text;
    if (f == "-") {
      std::ostringstream ss;
      ss << std::cin.rdbuf();
      text = ss.str();
    } else {
      std::ifstream in(f, std::ios::binary);
      if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", f, ": ", internal::OsReason()));
      std::ostringstream ss;
      ss << in.rdbuf();
      text = ss.str();
    }
    r.files.push_back(f);
    l.Add(text, f);
  }
  l.Run();
  Sort(r);
  return r;
}

std::string FormatLintText(const LintReport& r) {
  std::string out;
  for (const LintFinding& f : r.findings) {
    absl::StrAppend(&out, f.file, f.line ? absl::StrCat(":", f.line) : "", ": ", std::string(LintSeverityName(f.severity)), " ", f.rule, ": ",
                    f.object.empty() ? "" : f.object + ": ", f.message, "\n");
    if (!f.gateways.empty()) {
      std::string g;
      for (const std::string& x : f.gateways) absl::StrAppend(&g, g.empty() ? "" : ", ", x);
      absl::StrAppend(&out, "    affects: ", g, "\n");
    }
    if (!f.fix.empty()) absl::StrAppend(&out, "    fix: ", f.fix, "\n");
  }
  absl::StrAppend(&out, r.files.size(), " file(s), ", r.objects, " object(s): ", r.count(LintSeverity::kError), " error(s), ",
                  r.count(LintSeverity::kWarning), " warning(s), ", r.count(LintSeverity::kInfo), " note(s)\n");
  return out;
}

std::string FormatLintJson(const LintReport& r) {
  nlohmann::ordered_json j;
  j["files"] = r.files;
  j["objects"] = r.objects;
  j["findings"] = nlohmann::ordered_json::array();
  for (const LintFinding& f : r.findings) {
    nlohmann::ordered_json x;
    x["rule"] = f.rule;
    x["severity"] = std::string(LintSeverityName(f.severity));
    x["file"] = f.file;
    x["line"] = f.line;
    x["object"] = f.object;
    x["message"] = f.message;
    x["fix"] = f.fix;
    x["gateways"] = f.gateways;
    j["findings"].push_back(std::move(x));
  }
  j["summary"] = {{"errors", r.count(LintSeverity::kError)},
                  {"warnings", r.count(LintSeverity::kWarning)},
                  {"notes", r.count(LintSeverity::kInfo)}};
  return j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

std::string FormatLintSarif(const LintReport& r) {
  nlohmann::ordered_json rules = nlohmann::ordered_json::array();
  for (const LintRule& rule : LintRules())
    rules.push_back({{"id", rule.id},
                     {"shortDescription", {{"text", rule.summary}}},
                     {"helpUri", "docs/lint.md#" + rule.id},
                     {"defaultConfiguration", {{"level", rule.severity == LintSeverity::kError ? "error" : rule.severity == LintSeverity::kWarning ? "warning" : "note"}}}});
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  for (const LintFinding& f : r.findings) {
    nlohmann::ordered_json loc = {{"physicalLocation", {{"artifactLocation", {{"uri", f.file}}}}}};
    if (f.line > 0) loc["physicalLocation"]["region"] = {{"startLine", f.line}};
    std::string text = f.object.empty() ? f.message : f.object + ": " + f.message;
    if (!f.fix.empty()) text += " Fix: " + f.fix;
    results.push_back({{"ruleId", f.rule},
                       {"level", f.severity == LintSeverity::kError ? "error" : f.severity == LintSeverity::kWarning ? "warning" : "note"},
                       {"message", {{"text", text}}},
                       {"locations", nlohmann::ordered_json::array({loc})}});
  }
  nlohmann::ordered_json j;
  j["$schema"] = "https://json.schemastore.org/sarif-2.1.0.json";
  j["version"] = "2.1.0";
  j["runs"] = nlohmann::ordered_json::array(
      {{{"tool", {{"driver", {{"name", "eppctl lint"}, {"informationUri", "docs/lint.md"}, {"rules", rules}}}}}, {"results", results}}});
  return j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace epp
