// Kubernetes discovery of an InferencePool's endpoints, as GIE's EPP does it: read the
// InferencePool, list the Pods its selector matches in its namespace, and keep one endpoint per
// Ready Pod and target port (`podIP:port`, metrics scraped at http://podIP:port/metrics).
//
// A minimal API client over HTTP GET and JSON (no watch: callers list again periodically, which is
// what `eppctl serve --pool-name` does every --pool-resync-interval). It talks to the API server
// in the Pod's own service account context (in-cluster) or to an explicit server URL, including a
// plain-HTTP one on loopback (tests, `kubectl proxy`).
//
// The two InferencePool API versions GIE has shipped:
//   inference.networking.k8s.io/v1 (default):    spec.selector.matchLabels{}, spec.targetPorts[].number
//   inference.networking.x-k8s.io/v1alpha2:      spec.selector{}, spec.targetPortNumber
// A Pod counts when it has status.podIP, condition Ready=True and no metadata.deletionTimestamp.
// Its annotation inference.networking.k8s.io/active-ports (comma list), when present, limits which
// target ports are endpoints; its label inference.networking.k8s.io/engine-type (vllm, sglang,
// trtllm-serve, triton-tensorrt-llm) names the metrics dialect. Pod labels become endpoint labels.
//
// Errors are absl::Status naming the request and the JSON path:
//   "GET http://127.0.0.1:8080/api/v1/namespaces/ns/pods?labelSelector=app%3Dx&resourceVersion=0:
//    items[2].status.podIP: expected a string, got number"
//   "GET https://10.96.0.1:443/apis/...: HTTP 403 (Forbidden): inferencepools ... is forbidden: ..."
// HTTP 404 is kNotFound, 401/403 kPermissionDenied, other statuses kUnavailable; transport errors
// are those of HttpClient: a timeout kDeadlineExceeded, an answer over the 64 MiB body cap
// kResourceExhausted, others (refused, dropped, TLS) kUnavailable; JSON that is not what the API
// returns kInvalidArgument.
//
// Thread-safety: the free functions share no state; a KubeClient serves one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "epp/runtime/endpoints.h"
#include "epp/runtime/http.h"
#include "epp/status.h"

namespace epp {

inline constexpr std::string_view kInferencePoolGroupV1 = "inference.networking.k8s.io";          // v1
inline constexpr std::string_view kInferencePoolGroupV1Alpha2 = "inference.networking.x-k8s.io";  // v1alpha2
inline constexpr std::string_view kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";
inline constexpr std::string_view kActivePortsAnnotation = "inference.networking.k8s.io/active-ports";
inline constexpr std::string_view kEngineTypeLabel = "inference.networking.k8s.io/engine-type";

// How to reach the API server.
struct KubeClientOptions {
  // "https://HOST:PORT" or "http://HOST:PORT" (no path). Empty = in cluster: the
  // KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT environment of every Pod.
  std::string api_server;
  // File holding a bearer token, re-read every token_reload (service account tokens are rotated).
  // Empty: in cluster SA_DIR/token; with an explicit api_server, no Authorization header.
  std::string token_file;
  // PEM bundle that verifies the server. Empty: in cluster SA_DIR/ca.crt; else the system's CAs.
  std::string ca_file;
  bool insecure_skip_verify = false;
  std::chrono::milliseconds timeout{5000};  // per request
  std::chrono::seconds token_reload{60};
  // Where the in-cluster token, ca.crt and namespace live.
  std::string service_account_dir = std::string(kServiceAccountDir);
};

// Fills what `options` leaves empty from the in-cluster environment: api_server from
// KUBERNETES_SERVICE_HOST/PORT (IPv6 hosts bracketed), token_file and ca_file from the service
// account directory when those files exist. kFailedPrecondition when no api_server is given and
// the environment has none ("not running in a Kubernetes Pod: ... give --kube-api-server").
absl::StatusOr<KubeClientOptions> ResolveKubeClientOptions(KubeClientOptions options);

// What an operator should hear about `options` once resolved (ResolveKubeClientOptions): TLS
// verification of the API server turned off (https:// with insecure_skip_verify), a bearer token
// sent over plain http://. Empty when there is nothing to say or the options do not resolve (the
// client's Create reports that).
std::vector<std::string> KubeClientWarnings(const KubeClientOptions& options);

// The namespace of the Pod this runs in (SA_DIR/namespace, trimmed); "" when it cannot be read.
std::string InClusterNamespace(std::string_view service_account_dir = kServiceAccountDir);

// The namespace to find the InferencePool in, as GIE's EPP chooses it: `given` when not empty,
// else $NAMESPACE, else the Pod's own namespace (InClusterNamespace), else "default".
std::string PoolNamespace(std::string_view given, std::string_view service_account_dir = kServiceAccountDir);

// An InferencePool as discovery needs it.
struct InferencePool {
  std::string group;  // kInferencePoolGroupV1 or kInferencePoolGroupV1Alpha2
  std::string ns;
  std::string name;
  std::map<std::string, std::string> selector;  // matchLabels (v1) or selector (v1alpha2)
  std::vector<int> target_ports;                // 1..8 ports, in the pool's order
  std::string resource_version;
};

// "v1" for kInferencePoolGroupV1, "v1alpha2" for kInferencePoolGroupV1Alpha2; kInvalidArgument
// naming both for any other group.
absl::StatusOr<std::string> InferencePoolVersion(std::string_view group);

// "/apis/GROUP/VERSION/namespaces/NS/inferencepools/NAME" (names are checked, not escaped:
// kInvalidArgument for a name that is not a DNS-1123 subdomain).
absl::StatusOr<std::string> InferencePoolPath(std::string_view group, std::string_view ns, std::string_view name);

// Parses an InferencePool object of `group`'s version. `source` prefixes messages ("GET URL").
// kInvalidArgument "SOURCE: spec.targetPorts[1].number: port 0 out of range 1..65535".
absl::StatusOr<InferencePool> ParseInferencePool(std::string_view json, std::string_view group,
                                                 std::string_view source);

// `text` percent-encoded for a URL query value (unreserved characters kept): "app=x,y" ->
// "app%3Dx%2Cy".
std::string UrlQueryEscape(std::string_view text);

// The selector as a labelSelector query value, keys sorted and URL-encoded:
// {app: x, tier: "a b"} -> "app%3Dx%2Ctier%3Da%20b".
std::string LabelSelectorQuery(const std::map<std::string, std::string>& selector);

// "/api/v1/namespaces/NS/pods?labelSelector=...&resourceVersion=0" for the pool: resourceVersion=0
// lets the API server answer from its watch cache instead of a quorum read of etcd.
std::string PodListPath(const InferencePool& pool);

// Endpoints of a PodList: one per counted Pod (see the top) and target port, sorted by Pod name
// then port; address "podIP:port" ("[v6]:port"); metrics empty (scrape http://ADDRESS/metrics);
// labels = the Pod's labels; engine from the engine-type label when it is a built-in engine;
// origin "pod NS/NAME". A Pod whose IP another counted Pod already has is skipped (hostNetwork);
// Pods the selector does not match are ignored first, so they never hide a selected one.
// Malformed Pods fail the whole list, kInvalidArgument
// "SOURCE: items[3].metadata.labels.app: expected a string, got number"; so does a counted Pod
// whose status.podIP is not a literal IPv4/IPv6 address:
// "SOURCE: items[1].status.podIP: pod NS/NAME: 'foo' is not an IPv4 or IPv6 address".
absl::StatusOr<std::vector<EndpointSpec>> ParsePodListEndpoints(std::string_view json, const InferencePool& pool,
                                                                std::string_view source);

// ---- InferencePoolImport (multi-cluster, GIE proposal 1374) -----------------------------------
//
// inference.networking.x-k8s.io/v1alpha1 InferencePoolImport, namespaced, status only: the import
// of the same name as the exported InferencePool lists, per controller, the clusters exporting it
// (status.controllers[].exportingClusters[].name) and the local parents that route to it. It
// carries no addresses: which gateway and which EPP /metrics stand for a cluster comes from a
// cluster directory (an endpoints file whose entries carry the cluster's name in a label), and
// the import says which of those clusters serve the pool now (Parent Mode: the endpoints are the
// exporting clusters' gateways; docs/multicluster.md).
inline constexpr std::string_view kInferencePoolImportGroup = "inference.networking.x-k8s.io";
inline constexpr std::string_view kInferencePoolImportVersion = "v1alpha1";
inline constexpr std::string_view kClusterLabel = "cluster";  // the directory's default label

struct InferencePoolImport {
  std::string ns;
  std::string name;
  std::vector<std::string> controllers;         // status.controllers[].name, in order
  std::vector<std::string> exporting_clusters;  // union over controllers, sorted, unique
  std::string resource_version;
};

// "/apis/inference.networking.x-k8s.io/v1alpha1/namespaces/NS/inferencepoolimports/NAME"; names
// are checked as InferencePoolPath checks them.
absl::StatusOr<std::string> InferencePoolImportPath(std::string_view ns, std::string_view name);

// Parses an InferencePoolImport; errors name the JSON path ("SOURCE: status.controllers[0].
// exportingClusters[1].name: expected a string, got number"). An import without status (not yet
// reconciled) has no exporting clusters.
absl::StatusOr<InferencePoolImport> ParseInferencePoolImport(std::string_view json, std::string_view source);

// The cluster-level endpoints an import stands for: the entries of `directory` whose label
// `cluster_label` names one of its exporting clusters, in directory order, each with origin
// "inferencepoolimport NS/NAME, cluster C". Exporting clusters without an entry go to `missing`
// (sorted), when given.
std::vector<EndpointSpec> ImportEndpoints(const InferencePoolImport& import, std::span<const EndpointSpec> directory,
                                          std::string_view cluster_label, std::vector<std::string>* missing = nullptr);

// ---- Label selectors ---------------------------------------------------------------------------
//
// Kubernetes' label selector text, as `kubectl -l` and GIE's --endpoint-selector take it:
// comma-separated requirements, all of which must hold:
//   key=value  key==value  key!=value  key in (a,b)  key notin (a,b)  key  !key
// Keys are [prefix/]name (name up to 63 characters of [A-Za-z0-9._-], starting and ending
// alphanumeric; prefix a DNS subdomain); values up to 63 such characters, or empty.
struct LabelRequirement {
  enum class Op { kEquals, kNotEquals, kIn, kNotIn, kExists, kDoesNotExist };
  std::string key;
  Op op = Op::kEquals;
  std::vector<std::string> values;  // sorted, unique; one for kEquals / kNotEquals

  bool operator==(const LabelRequirement&) const = default;
};

struct LabelSelector {
  std::vector<LabelRequirement> requirements;  // sorted by key, then operator, then values

  bool empty() const { return requirements.empty(); }
  bool Matches(const std::map<std::string, std::string>& labels) const;
  // The canonical text ("app=vllm,env in (a,b),!legacy"), which the API server's labelSelector
  // parameter takes (URL-encode it).
  std::string String() const;
  bool operator==(const LabelSelector&) const = default;
};

// kInvalidArgument naming the position: "label selector 'app in (a': at 9: expected ')'".
absl::StatusOr<LabelSelector> ParseLabelSelector(std::string_view text);
// key=value for each entry (an InferencePool's matchLabels).
LabelSelector MatchLabelsSelector(const std::map<std::string, std::string>& match_labels);

// ---- Pods ------------------------------------------------------------------------------------------

// A Pod as discovery needs it (what a watch keeps per Pod: a few hundred bytes, not the object).
struct PodInfo {
  std::string ns, name;
  std::map<std::string, std::string> labels, annotations;
  std::string ip;        // status.podIP ("" until scheduled)
  bool ready = false;    // condition Ready=True
  bool deleting = false; // metadata.deletionTimestamp set
  std::string resource_version;

  bool operator==(const PodInfo&) const = default;
};

// How discovered Pods' metrics are read (GIE's --model-server-metrics-{scheme,port,path}): port 0
// is the endpoint's own target port. The defaults scrape http://ADDRESS/metrics.
struct PodMetricsOptions {
  std::string scheme = "http";
  int port = 0;
  std::string path = "/metrics";
};

// One endpoint per counted Pod and target port, as ParsePodListEndpoints describes (Ready, with an
// IP literal, not deleting, matching `selector`, active-ports annotation, engine-type label, one Pod
// per IP), sorted by Pod name then port. Pods whose IP is not a literal are skipped (callers that
// must report them check first).
std::vector<EndpointSpec> PodEndpoints(std::span<const PodInfo> pods, const LabelSelector& selector,
                                       std::span<const int> target_ports, const PodMetricsOptions& metrics = {});

// The Pods of a PodList answer (namespace `default_ns` where an item names none). kInvalidArgument
// naming the JSON path of what is malformed; a Pod that would count (Ready, selected by
// `selector`) with an IP that is not a literal address is malformed too.
absl::StatusOr<std::vector<PodInfo>> ParsePodList(std::string_view json, std::string_view source,
                                                  std::string_view default_ns, const LabelSelector& selector);

// What a watch did (serve's /metrics: epp_kube_watch_*): requests, events and failures summed
// over the collections watched.
struct KubeWatchStats {
  int64_t lists = 0;         // LIST answers (one per collection while its watch works)
  int64_t watches = 0;       // WATCH requests started
  int64_t events = 0;        // ADDED, MODIFIED, DELETED events
  int64_t bookmarks = 0;
  int64_t relists_gone = 0;  // lists made because the watch's resourceVersion expired (410)
  int64_t errors = 0;        // failed requests and broken streams
  bool synced = false;       // every collection listed at least once
};

// "/api/v1/namespaces/NS/pods" (the namespace checked as InferencePoolPath checks it).
absl::StatusOr<std::string> PodCollectionPath(std::string_view ns);

class KubeClient {
 public:
  // Resolves `options` (ResolveKubeClientOptions) and checks the server URL.
  static absl::StatusOr<std::unique_ptr<KubeClient>> Create(KubeClientOptions options);
  ~KubeClient();

  // GET api_server + path_and_query with the bearer token; the body of a 2xx answer, else the
  // error described at the top (the message of a Kubernetes Status answer included).
  absl::StatusOr<std::string> Get(std::string_view path_and_query);
  // METHOD (POST, PUT, PATCH, DELETE) with a JSON body, the same way. HTTP 409 is kAlreadyExists
  // for a POST (the object exists) and kAborted otherwise (a resourceVersion conflict).
  absl::StatusOr<std::string> Send(std::string_view method, std::string_view path_and_query, std::string body);
  // The request Get() and Send() make (URL, token, CA, timeout), for callers that perform it
  // themselves (watch streams through HttpStream).
  absl::StatusOr<HttpRequest> NewRequest(std::string_view method, std::string_view path_and_query);
  // The error for a non-2xx answer to `request`, as Get() reports it.
  absl::Status AnswerError(const HttpRequest& request, long status, std::string_view body);

  absl::StatusOr<InferencePool> GetInferencePool(std::string_view group, std::string_view ns, std::string_view name);
  // Lists the pool's Pods (PodListPath) and converts them (ParsePodListEndpoints).
  absl::StatusOr<std::vector<EndpointSpec>> ListPoolEndpoints(const InferencePool& pool);
  absl::StatusOr<InferencePoolImport> GetInferencePoolImport(std::string_view ns, std::string_view name);

  const KubeClientOptions& options() const { return options_; }

 private:
  explicit KubeClient(KubeClientOptions options);
  absl::StatusOr<std::string> Token();

  KubeClientOptions options_;
  HttpClient http_;
  std::string token_;
  bool token_read_ = false;
  std::chrono::steady_clock::time_point token_time_{};
};

}  // namespace epp
