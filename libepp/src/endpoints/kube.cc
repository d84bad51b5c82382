// Kubernetes API reads for pool discovery: InferencePool GET, Pod list, over epp::HttpClient.
#include "epp/runtime/kube.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json.h"
#include "endpoints/kube_internal.h"

namespace epp {
namespace {

using json = nlohmann::json;

std::string ReadSmallFile(const std::string& path, bool* ok) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *ok = false;
    return {};
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  *ok = static_cast<bool>(in) || in.eof();
  return ss.str();
}

std::string Trim(std::string s) {
  const char* ws = " \t\r\n";
  s.erase(0, s.find_first_not_of(ws));
  const size_t end = s.find_last_not_of(ws);
  s.erase(end == std::string::npos ? 0 : end + 1);
  return s;
}

bool FileExists(const std::string& path) {
  std::ifstream in(path);
  return static_cast<bool>(in);
}

const char* TypeName(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "object";
    case json::value_t::array: return "array";
    case json::value_t::string: return "string";
    case json::value_t::boolean: return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: return "number";
    default: return "value";
  }
}

// A JSON reader that names the path of what is wrong.
class Reader {
 public:
  explicit Reader(std::string_view source) : source_(source) {}

  absl::Status Error(const std::string& path, const std::string& message) const {
    return absl::InvalidArgumentError(source_ + ": " + path + ": " + message);
  }
  absl::Status WrongType(const std::string& path, const char* want, const json& got) const {
    return Error(path, std::string("expected ") + want + ", got " + TypeName(got));
  }

  absl::StatusOr<json> Parse(std::string_view text) const {
    absl::StatusOr<json> parsed = internal::ParseJson(text);
    if (!parsed.ok()) return absl::InvalidArgumentError(source_ + ": answer is not JSON: " + std::string(parsed.status().message()));
    json& doc = *parsed;
    if (!doc.is_object()) return WrongType("(root)", "an object", doc);
    return doc;
  }

  // Member `key` of object `obj`; nullptr when absent or null.
  static const json* Member(const json& obj, std::string_view key) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
  }

  absl::StatusOr<const json*> Object(const json& obj, std::string_view key, const std::string& path,
                                     bool required) const {
    const json* v = Member(obj, key);
    if (v == nullptr) {
      if (required) return Error(path, "missing");
      return static_cast<const json*>(nullptr);
    }
    if (!v->is_object()) return WrongType(path, "an object", *v);
    return v;
  }

  absl::StatusOr<std::string> String(const json& obj, std::string_view key, const std::string& path,
                                     bool required) const {
    const json* v = Member(obj, key);
    if (v == nullptr) {
      if (required) return Error(path, "missing");
      return std::string();
    }
    if (!v->is_string()) return WrongType(path, "a string", *v);
    return v->get<std::string>();
  }

  absl::StatusOr<std::map<std::string, std::string>> StringMap(const json& obj, std::string_view key,
                                                                const std::string& path) const {
    std::map<std::string, std::string> out;
    const json* v = Member(obj, key);
    if (v == nullptr) return out;
    if (!v->is_object()) return WrongType(path, "an object", *v);
    for (auto it = v->begin(); it != v->end(); ++it) {
      if (!it.value().is_string()) return WrongType(path + "." + it.key(), "a string", it.value());
      out[it.key()] = it.value().get<std::string>();
    }
    return out;
  }

  absl::StatusOr<int> Port(const json& v, const std::string& path) const {
    if (!v.is_number_integer() && !v.is_number_unsigned()) return WrongType(path, "an integer", v);
    const std::optional<int64_t> n = internal::JsonInt64(v);
    if (!n || *n < 1 || *n > 65535) return Error(path, "port " + internal::DumpJsonLossy(v) + " out of range 1..65535");
    return static_cast<int>(*n);
  }

 private:
  std::string source_;
};

bool IsDns1123Subdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.')) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  return alnum(s.front()) && alnum(s.back());
}

std::string UrlEncodeImpl(std::string_view s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
        c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

bool KnownEngine(std::string_view e) {
  return e == "vllm" || e == "sglang" || e == "trtllm-serve" || e == "triton-tensorrt-llm";
}

// "8000, 8002" -> {8000, 8002}; entries that are not ports are ignored.
std::set<int> ParsePortList(std::string_view text) {
  std::set<int> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    std::string item = Trim(std::string(text.substr(start, comma - start)));
    if (!item.empty() && item.size() <= 5 && std::all_of(item.begin(), item.end(), [](char c) {
          return c >= '0' && c <= '9';
        })) {
      const int p = std::atoi(item.c_str());
      if (p >= 1 && p <= 65535) out.insert(p);
    }
    start = comma + 1;
  }
  return out;
}

// A literal IPv4 or IPv6 address (no host name, no zone, no brackets).
bool IsIpLiteral(const std::string& ip) {
  unsigned char buf[sizeof(struct in6_addr)];
  return ::inet_pton(AF_INET, ip.c_str(), buf) == 1 || ::inet_pton(AF_INET6, ip.c_str(), buf) == 1;
}

absl::Status StatusForHttp(long code, const std::string& what) {
  if (code == 404) return absl::NotFoundError(what);
  if (code == 401 || code == 403) return absl::PermissionDeniedError(what);
  return absl::UnavailableError(what);
}

}  // namespace

absl::StatusOr<KubeClientOptions> ResolveKubeClientOptions(KubeClientOptions options) {
  const std::string dir = options.service_account_dir;
  const bool in_cluster = options.api_server.empty();
  if (in_cluster) {
    const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
    const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
    if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0') {
      return absl::FailedPreconditionError(
          "not running in a Kubernetes Pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set; "
          "give the API server's URL (--kube-api-server)");
    }
    std::string h = host;
    if (h.find(':') != std::string::npos) h = "[" + h + "]";
    options.api_server = "https://" + h + ":" + port;
    if (options.token_file.empty() && FileExists(dir + "/token")) options.token_file = dir + "/token";
    if (options.ca_file.empty() && FileExists(dir + "/ca.crt")) options.ca_file = dir + "/ca.crt";
  }
  while (!options.api_server.empty() && options.api_server.back() == '/') options.api_server.pop_back();
  const std::string& url = options.api_server;
  if (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0) {
    return absl::InvalidArgumentError("Kubernetes API server '" + url + "': expected http://HOST:PORT or https://HOST:PORT");
  }
  const size_t host_start = url.find("://") + 3;
  if (host_start >= url.size() || url.find('/', host_start) != std::string::npos || url.find('?') != std::string::npos) {
    return absl::InvalidArgumentError("Kubernetes API server '" + url + "': expected a scheme and HOST[:PORT], no path");
  }
  if (!options.token_file.empty()) {
    bool ok = true;
    (void)ReadSmallFile(options.token_file, &ok);
    if (!ok) return absl::NotFoundError("Kubernetes token file " + options.token_file + " cannot be read");
  }
  if (!options.ca_file.empty() && !FileExists(options.ca_file)) {
    return absl::NotFoundError("Kubernetes CA file " + options.ca_file + " cannot be read");
  }
  return options;
}

std::vector<std::string> KubeClientWarnings(const KubeClientOptions& options) {
  std::vector<std::string> out;
  absl::StatusOr<KubeClientOptions> r = ResolveKubeClientOptions(options);
  if (!r.ok()) return out;
  const bool https = r->api_server.rfind("https://", 0) == 0;
  if (https && r->insecure_skip_verify)
    out.push_back("Kubernetes API server " + r->api_server +
                  ": its certificate is not verified (--kube-insecure-skip-verify); anyone on the path can "
                  "impersonate it and read the token");
  if (!https && !r->token_file.empty())
    out.push_back("Kubernetes API server " + r->api_server + ": the bearer token from " + r->token_file +
                  " is sent in clear text (http://); use https://");
  return out;
}

std::string InClusterNamespace(std::string_view service_account_dir) {
  bool ok = true;
  std::string ns = Trim(ReadSmallFile(std::string(service_account_dir) + "/namespace", &ok));
  return ok ? ns : std::string();
}

std::string PoolNamespace(std::string_view given, std::string_view service_account_dir) {
  if (!given.empty()) return std::string(given);
  if (const char* env = std::getenv("NAMESPACE"); env != nullptr && *env != '\0') return env;
  std::string ns = InClusterNamespace(service_account_dir);
  return ns.empty() ? "default" : ns;
}

absl::StatusOr<std::string> InferencePoolVersion(std::string_view group) {
  if (group == kInferencePoolGroupV1) return std::string("v1");
  if (group == kInferencePoolGroupV1Alpha2) return std::string("v1alpha2");
  return absl::InvalidArgumentError("InferencePool API group '" + std::string(group) + "': expected " +
                                    std::string(kInferencePoolGroupV1) + " (v1) or " +
                                    std::string(kInferencePoolGroupV1Alpha2) + " (v1alpha2)");
}

absl::StatusOr<std::string> InferencePoolPath(std::string_view group, std::string_view ns, std::string_view name) {
  EPP_ASSIGN_OR_RETURN(std::string version, InferencePoolVersion(group));
  if (!IsDns1123Subdomain(ns) || ns.size() > 63 || ns.find('.') != std::string_view::npos) {
    return absl::InvalidArgumentError("namespace '" + std::string(ns) +
                                      "': expected a DNS-1123 label (lower-case letters, digits, '-')");
  }
  if (!IsDns1123Subdomain(name)) {
    return absl::InvalidArgumentError("InferencePool name '" + std::string(name) +
                                      "': expected a DNS-1123 subdomain (lower-case letters, digits, '-', '.')");
  }
  return "/apis/" + std::string(group) + "/" + version + "/namespaces/" + std::string(ns) + "/inferencepools/" +
         std::string(name);
}

absl::StatusOr<std::string> InferencePoolImportPath(std::string_view ns, std::string_view name) {
  // The same name rules as the pool's (the import is named after the exported pool).
  EPP_RETURN_IF_ERROR(InferencePoolPath(kInferencePoolGroupV1, ns, name).status());
  return "/apis/" + std::string(kInferencePoolImportGroup) + "/" + std::string(kInferencePoolImportVersion) +
         "/namespaces/" + std::string(ns) + "/inferencepoolimports/" + std::string(name);
}

absl::StatusOr<InferencePoolImport> ParseInferencePoolImport(std::string_view text, std::string_view source) {
  Reader r(source);
  EPP_ASSIGN_OR_RETURN(json doc, r.Parse(text));
  if (!doc.is_object()) return r.WrongType("(root)", "an object", doc);
  InferencePoolImport imp;
  EPP_ASSIGN_OR_RETURN(std::string kind, r.String(doc, "kind", "kind", false));
  if (!kind.empty() && kind != "InferencePoolImport") return r.Error("kind", "expected InferencePoolImport, got " + kind);
  EPP_ASSIGN_OR_RETURN(std::string api_version, r.String(doc, "apiVersion", "apiVersion", false));
  const std::string want = std::string(kInferencePoolImportGroup) + "/" + std::string(kInferencePoolImportVersion);
  if (!api_version.empty() && api_version != want) return r.Error("apiVersion", "expected " + want + ", got " + api_version);
  EPP_ASSIGN_OR_RETURN(const json* meta, r.Object(doc, "metadata", "metadata", true));
  EPP_ASSIGN_OR_RETURN(imp.name, r.String(*meta, "name", "metadata.name", false));
  EPP_ASSIGN_OR_RETURN(imp.ns, r.String(*meta, "namespace", "metadata.namespace", false));
  EPP_ASSIGN_OR_RETURN(imp.resource_version, r.String(*meta, "resourceVersion", "metadata.resourceVersion", false));
  EPP_ASSIGN_OR_RETURN(const json* status, r.Object(doc, "status", "status", false));
  if (status == nullptr) return imp;
  const json* controllers = Reader::Member(*status, "controllers");
  if (controllers == nullptr || controllers->is_null()) return imp;
  if (!controllers->is_array()) return r.WrongType("status.controllers", "an array", *controllers);
  std::set<std::string> clusters;
  for (size_t i = 0; i < controllers->size(); ++i) {
    const std::string path = "status.controllers[" + std::to_string(i) + "]";
    const json& c = (*controllers)[i];
    if (!c.is_object()) return r.WrongType(path, "an object", c);
    EPP_ASSIGN_OR_RETURN(std::string name, r.String(c, "name", path + ".name", true));
    imp.controllers.push_back(std::move(name));
    const json* exporting = Reader::Member(c, "exportingClusters");
    if (exporting == nullptr || exporting->is_null()) continue;
    if (!exporting->is_array()) return r.WrongType(path + ".exportingClusters", "an array", *exporting);
    for (size_t k = 0; k < exporting->size(); ++k) {
      const std::string epath = path + ".exportingClusters[" + std::to_string(k) + "]";
      const json& e = (*exporting)[k];
      if (!e.is_object()) return r.WrongType(epath, "an object", e);
      EPP_ASSIGN_OR_RETURN(std::string cluster, r.String(e, "name", epath + ".name", true));
      if (cluster.empty()) return r.Error(epath + ".name", "empty cluster name");
      clusters.insert(std::move(cluster));
    }
  }
  imp.exporting_clusters.assign(clusters.begin(), clusters.end());
  return imp;
}

std::vector<EndpointSpec> ImportEndpoints(const InferencePoolImport& import, std::span<const EndpointSpec> directory,
                                          std::string_view cluster_label, std::vector<std::string>* missing) {
  std::vector<EndpointSpec> out;
  std::set<std::string> found;
  const std::set<std::string> exporting(import.exporting_clusters.begin(), import.exporting_clusters.end());
  for (const EndpointSpec& spec : directory) {
    auto it = spec.labels.find(std::string(cluster_label));
    if (it == spec.labels.end() || !exporting.contains(it->second)) continue;
    EndpointSpec s = spec;
    s.origin = "inferencepoolimport " + import.ns + "/" + import.name + ", cluster " + it->second;
    found.insert(it->second);
    out.push_back(std::move(s));
  }
  if (missing != nullptr) {
    missing->clear();
    for (const std::string& c : import.exporting_clusters)
      if (!found.contains(c)) missing->push_back(c);
  }
  return out;
}

absl::StatusOr<InferencePool> ParseInferencePool(std::string_view text, std::string_view group,
                                                 std::string_view source) {
  EPP_ASSIGN_OR_RETURN(std::string version, InferencePoolVersion(group));
  Reader r(source);
  EPP_ASSIGN_OR_RETURN(json doc, r.Parse(text));
  InferencePool pool;
  pool.group = std::string(group);
  EPP_ASSIGN_OR_RETURN(std::string kind, r.String(doc, "kind", "kind", false));
  if (!kind.empty() && kind != "InferencePool") return r.Error("kind", "expected InferencePool, got " + kind);
  EPP_ASSIGN_OR_RETURN(std::string api_version, r.String(doc, "apiVersion", "apiVersion", false));
  const std::string want = std::string(group) + "/" + version;
  if (!api_version.empty() && api_version != want) {
    return r.Error("apiVersion", "expected " + want + ", got " + api_version);
  }
  EPP_ASSIGN_OR_RETURN(const json* meta, r.Object(doc, "metadata", "metadata", true));
  EPP_ASSIGN_OR_RETURN(pool.name, r.String(*meta, "name", "metadata.name", false));
  EPP_ASSIGN_OR_RETURN(pool.ns, r.String(*meta, "namespace", "metadata.namespace", false));
  EPP_ASSIGN_OR_RETURN(pool.resource_version, r.String(*meta, "resourceVersion", "metadata.resourceVersion", false));
  EPP_ASSIGN_OR_RETURN(const json* spec, r.Object(doc, "spec", "spec", true));

  if (version == "v1") {
    EPP_ASSIGN_OR_RETURN(const json* selector, r.Object(*spec, "selector", "spec.selector", true));
    EPP_ASSIGN_OR_RETURN(pool.selector, r.StringMap(*selector, "matchLabels", "spec.selector.matchLabels"));
    if (Reader::Member(*selector, "matchExpressions") != nullptr) {
      return r.Error("spec.selector.matchExpressions", "not supported (InferencePool v1 selects by matchLabels only)");
    }
    if (pool.selector.empty()) return r.Error("spec.selector.matchLabels", "missing or empty");
    const json* ports = Reader::Member(*spec, "targetPorts");
    if (ports == nullptr) return r.Error("spec.targetPorts", "missing");
    if (!ports->is_array()) return r.WrongType("spec.targetPorts", "an array", *ports);
    // The size first: the duplicate search below is then over at most 8 ports.
    if (ports->empty() || ports->size() > 8) {
      return r.Error("spec.targetPorts", "expected 1 to 8 ports, got " + std::to_string(ports->size()));
    }
    for (size_t i = 0; i < ports->size(); ++i) {
      const std::string path = "spec.targetPorts[" + std::to_string(i) + "]";
      const json& p = (*ports)[i];
      if (!p.is_object()) return r.WrongType(path, "an object", p);
      const json* number = Reader::Member(p, "number");
      if (number == nullptr) return r.Error(path + ".number", "missing");
      EPP_ASSIGN_OR_RETURN(int port, r.Port(*number, path + ".number"));
      if (std::find(pool.target_ports.begin(), pool.target_ports.end(), port) != pool.target_ports.end()) {
        return r.Error(path + ".number", "duplicate port " + std::to_string(port));
      }
      pool.target_ports.push_back(port);
    }
  } else {
    EPP_ASSIGN_OR_RETURN(pool.selector, r.StringMap(*spec, "selector", "spec.selector"));
    if (pool.selector.empty()) return r.Error("spec.selector", "missing or empty");
    const json* number = Reader::Member(*spec, "targetPortNumber");
    if (number == nullptr) return r.Error("spec.targetPortNumber", "missing");
    EPP_ASSIGN_OR_RETURN(int port, r.Port(*number, "spec.targetPortNumber"));
    pool.target_ports.push_back(port);
  }
  return pool;
}

std::string UrlQueryEscape(std::string_view text) { return UrlEncodeImpl(text); }

std::string LabelSelectorQuery(const std::map<std::string, std::string>& selector) {
  std::string plain;
  for (const auto& [k, v] : selector) plain += (plain.empty() ? "" : ",") + k + "=" + v;
  return UrlQueryEscape(plain);
}

std::string PodListPath(const InferencePool& pool) {
  // resourceVersion=0: served from the API server's watch cache (possibly a little behind)
  // rather than a quorum read of etcd on every resync.
  return "/api/v1/namespaces/" + pool.ns + "/pods?labelSelector=" + LabelSelectorQuery(pool.selector) +
         "&resourceVersion=0";
}

namespace internal {

absl::StatusOr<PodInfo> ParsePodJson(const nlohmann::json& pod, const std::string& at, std::string_view source,
                                     std::string_view default_ns) {
  Reader r(source);
  if (!pod.is_object()) return r.WrongType(at, "an object", pod);
  PodInfo p;
  EPP_ASSIGN_OR_RETURN(const json* meta, r.Object(pod, "metadata", at + ".metadata", true));
  EPP_ASSIGN_OR_RETURN(p.name, r.String(*meta, "name", at + ".metadata.name", true));
  EPP_ASSIGN_OR_RETURN(p.ns, r.String(*meta, "namespace", at + ".metadata.namespace", false));
  if (p.ns.empty()) p.ns = std::string(default_ns);
  EPP_ASSIGN_OR_RETURN(p.labels, r.StringMap(*meta, "labels", at + ".metadata.labels"));
  EPP_ASSIGN_OR_RETURN(p.annotations, r.StringMap(*meta, "annotations", at + ".metadata.annotations"));
  EPP_ASSIGN_OR_RETURN(p.resource_version, r.String(*meta, "resourceVersion", at + ".metadata.resourceVersion", false));
  EPP_ASSIGN_OR_RETURN(std::string deleting,
                       r.String(*meta, "deletionTimestamp", at + ".metadata.deletionTimestamp", false));
  p.deleting = !deleting.empty();
  EPP_ASSIGN_OR_RETURN(const json* status, r.Object(pod, "status", at + ".status", false));
  if (status == nullptr) return p;  // not scheduled yet
  EPP_ASSIGN_OR_RETURN(p.ip, r.String(*status, "podIP", at + ".status.podIP", false));
  if (const json* conds = Reader::Member(*status, "conditions"); conds != nullptr) {
    if (!conds->is_array()) return r.WrongType(at + ".status.conditions", "an array", *conds);
    for (size_t c = 0; c < conds->size(); ++c) {
      const std::string cat = at + ".status.conditions[" + std::to_string(c) + "]";
      const json& cond = (*conds)[c];
      if (!cond.is_object()) return r.WrongType(cat, "an object", cond);
      EPP_ASSIGN_OR_RETURN(std::string type, r.String(cond, "type", cat + ".type", true));
      EPP_ASSIGN_OR_RETURN(std::string value, r.String(cond, "status", cat + ".status", true));
      if (type == "Ready") p.ready = value == "True";
    }
  }
  return p;
}

absl::StatusOr<LabelSelector> StandaloneSelector(const std::string& selector, const std::vector<int>& target_ports) {
  EPP_ASSIGN_OR_RETURN(LabelSelector parsed, ParseLabelSelector(selector));
  if (parsed.empty()) return absl::InvalidArgumentError("pod discovery: the endpoint selector must not be empty");
  if (target_ports.empty() || target_ports.size() > 8)
    return absl::InvalidArgumentError("pod discovery: expected 1 to 8 target ports, got " +
                                      std::to_string(target_ports.size()));
  return parsed;
}

bool PodCounts(const PodInfo& p, const LabelSelector& selector) {
  return !p.ip.empty() && p.ready && !p.deleting && selector.Matches(p.labels);
}

}  // namespace internal

std::vector<EndpointSpec> PodEndpoints(std::span<const PodInfo> pods, const LabelSelector& selector,
                                       std::span<const int> target_ports, const PodMetricsOptions& metrics) {
  struct Found {
    const PodInfo* pod;
    int port;
  };
  std::vector<const PodInfo*> counted;
  std::set<std::string> ips;
  for (const PodInfo& p : pods) {
    // hostNetwork Pods on one node share an IP: the first selected one (in the caller's order) is
    // kept. Only selected Pods are recorded, so an unselected Pod never hides a selected one.
    if (internal::PodCounts(p, selector) && IsIpLiteral(p.ip) && ips.insert(p.ip).second) counted.push_back(&p);
  }
  std::sort(counted.begin(), counted.end(), [](const PodInfo* a, const PodInfo* b) {
    return a->name != b->name ? a->name < b->name : a->ns < b->ns;
  });
  std::vector<EndpointSpec> out;
  const bool default_metrics = metrics.scheme == "http" && metrics.port == 0 && metrics.path == "/metrics";
  for (const PodInfo* p : counted) {
    std::set<int> active;
    bool restrict = false;
    // GIE's annotation, then llm-d's spelling of it.
    for (std::string_view key : {kActivePortsAnnotation, std::string_view("llm-d.ai/active-ports")}) {
      if (auto a = p->annotations.find(std::string(key)); a != p->annotations.end()) {
        restrict = true;
        active = ParsePortList(a->second);
        break;
      }
    }
    std::string engine;
    if (auto e = p->labels.find(std::string(kEngineTypeLabel)); e != p->labels.end() && KnownEngine(e->second)) {
      engine = e->second;
    }
    const std::string host = p->ip.find(':') != std::string::npos ? "[" + p->ip + "]" : p->ip;
    const std::string pod_name = p->ns + "/" + p->name;
    for (int port : target_ports) {
      if (restrict && !active.count(port)) continue;
      EndpointSpec spec;
      spec.address = host + ":" + std::to_string(port);
      if (!default_metrics)
        spec.metrics = metrics.scheme + "://" + host + ":" + std::to_string(metrics.port ? metrics.port : port) +
                       metrics.path;
      spec.labels = p->labels;
      spec.engine = engine;
      spec.origin = "pod " + pod_name;
      spec.instance = pod_name;
      out.push_back(std::move(spec));
    }
  }
  return out;
}

absl::StatusOr<std::vector<PodInfo>> ParsePodList(std::string_view text, std::string_view source,
                                                  std::string_view default_ns, const LabelSelector& selector) {
  Reader r(source);
  EPP_ASSIGN_OR_RETURN(json doc, r.Parse(text));
  EPP_ASSIGN_OR_RETURN(std::string kind, r.String(doc, "kind", "kind", false));
  if (!kind.empty() && kind != "PodList") return r.Error("kind", "expected PodList, got " + kind);
  const json* items = Reader::Member(doc, "items");
  std::vector<PodInfo> pods;
  if (items == nullptr) return pods;
  if (!items->is_array()) return r.WrongType("items", "an array", *items);
  for (size_t i = 0; i < items->size(); ++i) {
    const std::string at = "items[" + std::to_string(i) + "]";
    EPP_ASSIGN_OR_RETURN(PodInfo p, internal::ParsePodJson((*items)[i], at, source, default_ns));
    // A counted Pod whose IP is not a literal is malformed like a field of the wrong type: the
    // list fails (the set in use is kept).
    if (internal::PodCounts(p, selector) && !IsIpLiteral(p.ip))
      return r.Error(at + ".status.podIP", "pod " + p.ns + "/" + p.name + ": '" + p.ip + "' is not an IPv4 or IPv6 address");
    pods.push_back(std::move(p));
  }
  return pods;
}

absl::StatusOr<std::vector<EndpointSpec>> ParsePodListEndpoints(std::string_view text, const InferencePool& pool,
                                                                std::string_view source) {
  // The selector is checked again here: a server that ignores labelSelector must not widen the pool.
  const LabelSelector selector = MatchLabelsSelector(pool.selector);
  EPP_ASSIGN_OR_RETURN(std::vector<PodInfo> pods, ParsePodList(text, source, pool.ns, selector));
  return PodEndpoints(pods, selector, pool.target_ports);
}

absl::StatusOr<std::string> PodCollectionPath(std::string_view ns) {
  if (!IsDns1123Subdomain(ns) || ns.size() > 63 || ns.find('.') != std::string_view::npos) {
    return absl::InvalidArgumentError("namespace '" + std::string(ns) +
                                      "': expected a DNS-1123 label (lower-case letters, digits, '-')");
  }
  return "/api/v1/namespaces/" + std::string(ns) + "/pods";
}

// ---- Label selectors ---------------------------------------------------------------------------

namespace {

// A label name or value part: up to 63 of [A-Za-z0-9._-], alphanumeric at both ends.
bool IsLabelName(std::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  for (char c : s)
    if (!alnum(c) && c != '-' && c != '_' && c != '.') return false;
  return alnum(s.front()) && alnum(s.back());
}

bool IsLabelKey(std::string_view key) {
  const size_t slash = key.find('/');
  if (slash == std::string_view::npos) return IsLabelName(key);
  const std::string_view prefix = key.substr(0, slash);
  return IsDns1123Subdomain(prefix) && IsLabelName(key.substr(slash + 1));
}

bool IsLabelValue(std::string_view v) { return v.empty() || IsLabelName(v); }

class SelectorParser {
 public:
  explicit SelectorParser(std::string_view text) : text_(text) {}

  absl::StatusOr<LabelSelector> Parse() {
    LabelSelector out;
    SkipSpace();
    if (pos_ == text_.size()) return out;  // the empty selector selects everything
    for (;;) {
      EPP_ASSIGN_OR_RETURN(LabelRequirement req, Requirement());
      out.requirements.push_back(std::move(req));
      SkipSpace();
      if (pos_ == text_.size()) break;
      if (text_[pos_] != ',') return Error("expected ',' or the end");
      ++pos_;
    }
    // A total order (key, operator, values): requirements that tie on key and operator
    // ("app=a,app=b") otherwise kept whatever order the sort left them in, and the canonical text
    // was not canonical (found by fuzz_kube_policies).
    std::sort(out.requirements.begin(), out.requirements.end(), [](const LabelRequirement& a, const LabelRequirement& b) {
      return std::tie(a.key, a.op, a.values) < std::tie(b.key, b.op, b.values);
    });
    return out;
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError("label selector '" + std::string(text_) + "': at " + std::to_string(pos_ + 1) +
                                      ": " + what);
  }
  void SkipSpace() {
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
  }
  // Characters of a key or value: up to a space, ',', '=', '!', '(' or ')'.
  std::string_view Word() {
    const size_t start = pos_;
    while (pos_ < text_.size() && std::string_view(" ,=!()").find(text_[pos_]) == std::string_view::npos) ++pos_;
    return text_.substr(start, pos_ - start);
  }
  absl::StatusOr<std::string> Key() {
    SkipSpace();
    const size_t at = pos_;
    const std::string_view key = Word();
    if (!IsLabelKey(key)) {
      pos_ = at;
      return Error(key.empty() ? "expected a label key" : "'" + std::string(key) + "' is not a valid label key");
    }
    return std::string(key);
  }
  absl::StatusOr<std::string> Value() {
    SkipSpace();
    const size_t at = pos_;
    const std::string_view v = Word();
    if (!IsLabelValue(v)) {
      pos_ = at;
      return Error("'" + std::string(v) + "' is not a valid label value");
    }
    return std::string(v);
  }
  bool Keyword(std::string_view word) {
    SkipSpace();
    if (text_.substr(pos_, word.size()) != word) return false;
    const size_t after = pos_ + word.size();
    if (after < text_.size() && text_[after] != ' ' && text_[after] != '(') return false;
    pos_ = after;
    return true;
  }

  absl::StatusOr<LabelRequirement> Requirement() {
    LabelRequirement req;
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == '!') {
      ++pos_;
      EPP_ASSIGN_OR_RETURN(req.key, Key());
      req.op = LabelRequirement::Op::kDoesNotExist;
      return req;
    }
    EPP_ASSIGN_OR_RETURN(req.key, Key());
    SkipSpace();
    if (pos_ == text_.size() || text_[pos_] == ',') {
      req.op = LabelRequirement::Op::kExists;
      return req;
    }
    if (text_.substr(pos_, 2) == "==" || text_.substr(pos_, 2) == "!=" || text_[pos_] == '=') {
      req.op = text_[pos_] == '!' ? LabelRequirement::Op::kNotEquals : LabelRequirement::Op::kEquals;
      pos_ += text_.substr(pos_, 2) == "==" || text_[pos_] == '!' ? 2 : 1;
      EPP_ASSIGN_OR_RETURN(std::string v, Value());
      req.values.push_back(std::move(v));
      return req;
    }
    if (Keyword("notin")) {
      req.op = LabelRequirement::Op::kNotIn;
    } else if (Keyword("in")) {
      req.op = LabelRequirement::Op::kIn;
    } else {
      return Error("expected '=', '==', '!=', 'in' or 'notin'");
    }
    SkipSpace();
    if (pos_ == text_.size() || text_[pos_] != '(') return Error("expected '('");
    ++pos_;
    std::set<std::string> values;
    for (;;) {
      EPP_ASSIGN_OR_RETURN(std::string v, Value());
      values.insert(std::move(v));
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == ')') {
        ++pos_;
        break;
      }
      return Error("expected ',' or ')'");
    }
    req.values.assign(values.begin(), values.end());
    return req;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<LabelSelector> ParseLabelSelector(std::string_view text) { return SelectorParser(text).Parse(); }

LabelSelector MatchLabelsSelector(const std::map<std::string, std::string>& match_labels) {
  LabelSelector s;
  for (const auto& [k, v] : match_labels) s.requirements.push_back({k, LabelRequirement::Op::kEquals, {v}});
  return s;
}

bool LabelSelector::Matches(const std::map<std::string, std::string>& labels) const {
  for (const LabelRequirement& r : requirements) {
    auto it = labels.find(r.key);
    const bool has = it != labels.end();
    const bool listed = has && std::binary_search(r.values.begin(), r.values.end(), it->second);
    switch (r.op) {
      case LabelRequirement::Op::kEquals:
      case LabelRequirement::Op::kIn:
        if (!listed) return false;
        break;
      case LabelRequirement::Op::kNotEquals:
      case LabelRequirement::Op::kNotIn:
        if (listed) return false;  // an absent label is "not equal", as Kubernetes has it
        break;
      case LabelRequirement::Op::kExists:
        if (!has) return false;
        break;
      case LabelRequirement::Op::kDoesNotExist:
        if (has) return false;
        break;
    }
  }
  return true;
}

std::string LabelSelector::String() const {
  std::string out;
  for (const LabelRequirement& r : requirements) {
    if (!out.empty()) out += ",";
    // Joined with a comma after every value but the last: an empty value (Kubernetes allows
    // "in (,a)") keeps its place, so "(,a)" prints back as "(,a)", not "(a)".
    auto list = [&r] { return absl::StrCat("(", absl::StrJoin(r.values, ","), ")"); };
    switch (r.op) {
      case LabelRequirement::Op::kEquals: out += r.key + "=" + r.values.front(); break;
      case LabelRequirement::Op::kNotEquals: out += r.key + "!=" + r.values.front(); break;
      case LabelRequirement::Op::kIn: out += r.key + " in " + list(); break;
      case LabelRequirement::Op::kNotIn: out += r.key + " notin " + list(); break;
      case LabelRequirement::Op::kExists: out += r.key; break;
      case LabelRequirement::Op::kDoesNotExist: out += "!" + r.key; break;
    }
  }
  return out;
}

KubeClient::KubeClient(KubeClientOptions options) : options_(std::move(options)) {}
KubeClient::~KubeClient() = default;

absl::StatusOr<std::unique_ptr<KubeClient>> KubeClient::Create(KubeClientOptions options) {
  EPP_ASSIGN_OR_RETURN(KubeClientOptions resolved, ResolveKubeClientOptions(std::move(options)));
  return std::unique_ptr<KubeClient>(new KubeClient(std::move(resolved)));
}

absl::StatusOr<std::string> KubeClient::Token() {
  if (options_.token_file.empty()) return std::string();
  const auto now = std::chrono::steady_clock::now();
  if (!token_read_ || now - token_time_ >= options_.token_reload) {
    bool ok = true;
    std::string token = Trim(ReadSmallFile(options_.token_file, &ok));
    if (!ok) {
      // A rotation in progress: keep the token read last, if any.
      if (!token_read_) return absl::UnavailableError("Kubernetes token file " + options_.token_file + " cannot be read");
    } else {
      token_ = std::move(token);
      token_read_ = true;
      token_time_ = now;
    }
  }
  return token_;
}

absl::StatusOr<HttpRequest> KubeClient::NewRequest(std::string_view method, std::string_view path_and_query) {
  HttpRequest req;
  req.method = std::string(method);
  req.url = options_.api_server + std::string(path_and_query);
  req.timeout = options_.timeout;
  req.insecure = options_.insecure_skip_verify;
  req.ca_file = options_.ca_file;
  req.max_body_bytes = size_t{64} << 20;
  req.headers.push_back("Accept: application/json");
  if (method != "GET" && method != "DELETE") req.headers.push_back("Content-Type: application/json");
  EPP_ASSIGN_OR_RETURN(std::string token, Token());
  if (!token.empty()) req.headers.push_back("Authorization: Bearer " + token);
  return req;
}

absl::Status KubeClient::AnswerError(const HttpRequest& req, long code, std::string_view body) {
  if (code == 401) token_read_ = false;  // re-read the token on the next call
  // Kubernetes answers errors with a Status object: {"kind":"Status","reason":"Forbidden","message":...}.
  std::string what = req.method + " " + req.url + ": HTTP " + std::to_string(code);
  const json status = internal::ParseJsonOrDiscarded(body);
  if (status.is_object()) {
    if (const std::string* reason = internal::JsonStringMember(status, "reason")) what += " (" + *reason + ")";
    if (const std::string* message = internal::JsonStringMember(status, "message")) what += ": " + *message;
  } else if (!body.empty()) {
    what += ": " + std::string(body.substr(0, 200));
    while (!what.empty() && (what.back() == '\n' || what.back() == '\r')) what.pop_back();
  }
  if (code == 401) what += " (is the token valid? --kube-token-file)";
  if (code == 403) what += " (does the ServiceAccount's Role grant this verb on this resource?)";
  if (code == 409) return req.method == "POST" ? absl::AlreadyExistsError(what) : absl::AbortedError(what);
  if (code == 410) return absl::FailedPreconditionError(what);  // a resourceVersion too old to watch from
  return StatusForHttp(code, what);
}

absl::StatusOr<std::string> KubeClient::Get(std::string_view path_and_query) {
  return Send("GET", path_and_query, std::string());
}

absl::StatusOr<std::string> KubeClient::Send(std::string_view method, std::string_view path_and_query, std::string body) {
  EPP_ASSIGN_OR_RETURN(HttpRequest req, NewRequest(method, path_and_query));
  req.body = std::move(body);
  std::vector<absl::StatusOr<HttpResponse>> got = http_.FetchAll(std::span<const HttpRequest>(&req, 1));
  if (!got.front().ok()) return got.front().status();
  HttpResponse& resp = *got.front();
  if (resp.status >= 200 && resp.status < 300) return std::move(resp.body);
  return AnswerError(req, resp.status, resp.body);
}

absl::StatusOr<InferencePool> KubeClient::GetInferencePool(std::string_view group, std::string_view ns,
                                                           std::string_view name) {
  EPP_ASSIGN_OR_RETURN(std::string path, InferencePoolPath(group, ns, name));
  EPP_ASSIGN_OR_RETURN(std::string body, Get(path));
  EPP_ASSIGN_OR_RETURN(InferencePool pool, ParseInferencePool(body, group, "GET " + options_.api_server + path));
  pool.ns = std::string(ns);
  if (pool.name.empty()) pool.name = std::string(name);
  return pool;
}

absl::StatusOr<InferencePoolImport> KubeClient::GetInferencePoolImport(std::string_view ns, std::string_view name) {
  EPP_ASSIGN_OR_RETURN(std::string path, InferencePoolImportPath(ns, name));
  EPP_ASSIGN_OR_RETURN(std::string body, Get(path));
  EPP_ASSIGN_OR_RETURN(InferencePoolImport imp, ParseInferencePoolImport(body, "GET " + options_.api_server + path));
  imp.ns = std::string(ns);
  if (imp.name.empty()) imp.name = std::string(name);
  return imp;
}

absl::StatusOr<std::vector<EndpointSpec>> KubeClient::ListPoolEndpoints(const InferencePool& pool) {
  const std::string path = PodListPath(pool);
  EPP_ASSIGN_OR_RETURN(std::string body, Get(path));
  return ParsePodListEndpoints(body, pool, "GET " + options_.api_server + path);
}

}  // namespace epp
