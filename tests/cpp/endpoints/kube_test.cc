// Pool discovery against a fake Kubernetes API server on 127.0.0.1 (cpp-httplib, real sockets).
#include "epp/runtime/kube.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include <gtest/gtest.h>

#include "testing/test_server.h"

namespace epp {
namespace {

using epp::testing::TestServer;

constexpr char kPoolV1[] = R"({
  "apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
  "metadata": {"name": "llama", "namespace": "ns1", "resourceVersion": "42"},
  "spec": {"selector": {"matchLabels": {"app": "vllm", "tier": "a b"}},
           "targetPorts": [{"number": 8000}, {"number": 8002}],
           "endpointPickerRef": {"name": "epp", "port": {"number": 9002}}}})";

constexpr char kPoolV1Alpha2[] = R"({
  "apiVersion": "inference.networking.x-k8s.io/v1alpha2", "kind": "InferencePool",
  "metadata": {"name": "llama", "namespace": "ns1"},
  "spec": {"selector": {"app": "vllm"}, "targetPortNumber": 8000,
           "extensionRef": {"name": "epp"}}})";

std::string Pod(const std::string& name, const std::string& ip, bool ready, const std::string& extra_meta = "",
                const std::string& labels = R"({"app": "vllm", "tier": "a b"})") {
  std::string conditions = std::string(R"([{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": ")") +
                           (ready ? "True" : "False") + R"("}])";
  return R"({"metadata": {"name": ")" + name + R"(", "namespace": "ns1", "labels": )" + labels + extra_meta +
         R"(}, "status": {"phase": "Running", "podIP": ")" + ip + R"(", "conditions": )" + conditions + "}}";
}

std::string PodList(const std::vector<std::string>& pods) {
  std::string items;
  for (const std::string& p : pods) items += (items.empty() ? "" : ", ") + p;
  return R"({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"}, "items": [)" + items + "]}";
}

// The fake API server: fixed answers per path, records what was asked.
class FakeApi {
 public:
  FakeApi() {
    srv_.server().Get(R"(/.*)", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      targets_.push_back(req.target);
      auth_.push_back(req.get_header_value("Authorization"));
      label_selectors_.push_back(req.get_param_value("labelSelector"));
      resource_versions_.push_back(req.has_param("resourceVersion") ? req.get_param_value("resourceVersion") : "-");
      auto it = answers_.find(req.path);
      if (it == answers_.end()) {
        res.status = 404;
        res.set_content(R"({"kind":"Status","apiVersion":"v1","status":"Failure","message":"the server could not find )"
                        R"(the requested resource","reason":"NotFound","code":404})",
                        "application/json");
        return;
      }
      res.status = it->second.first;
      res.set_content(it->second.second, "application/json");
    });
    url_ = srv_.Start();
  }
  void Answer(const std::string& path, std::string body, int status = 200) {
    std::lock_guard<std::mutex> lock(mu_);
    answers_[path] = {status, std::move(body)};
  }
  std::vector<std::string> targets() {
    std::lock_guard<std::mutex> lock(mu_);
    return targets_;
  }
  std::vector<std::string> auth() {
    std::lock_guard<std::mutex> lock(mu_);
    return auth_;
  }
  std::vector<std::string> label_selectors() {
    std::lock_guard<std::mutex> lock(mu_);
    return label_selectors_;
  }
  std::vector<std::string> resource_versions() {  // "-" when the query has none
    std::lock_guard<std::mutex> lock(mu_);
    return resource_versions_;
  }
  const std::string& url() const { return url_; }

  std::unique_ptr<KubeClient> Client(KubeClientOptions o = {}) {
    o.api_server = url_;
    auto c = KubeClient::Create(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

 private:
  TestServer srv_;
  std::string url_;
  std::mutex mu_;
  std::map<std::string, std::pair<int, std::string>> answers_;
  std::vector<std::string> targets_, auth_, label_selectors_, resource_versions_;
};

constexpr char kV1Path[] = "/apis/inference.networking.k8s.io/v1/namespaces/ns1/inferencepools/llama";
constexpr char kV1Alpha2Path[] = "/apis/inference.networking.x-k8s.io/v1alpha2/namespaces/ns1/inferencepools/llama";
constexpr char kPodsPath[] = "/api/v1/namespaces/ns1/pods";

std::vector<std::string> Addresses(const std::vector<EndpointSpec>& specs) {
  std::vector<std::string> out;
  for (const EndpointSpec& s : specs) out.push_back(s.address);
  return out;
}

TEST(KubeTest, LabelSelectorQueryIsSortedAndEncoded) {
  EXPECT_EQ(LabelSelectorQuery({{"tier", "a b"}, {"app", "x"}}), "app%3Dx%2Ctier%3Da%20b");
  EXPECT_EQ(LabelSelectorQuery({{"app.kubernetes.io/name", "v_1.2"}}), "app.kubernetes.io%2Fname%3Dv_1.2");
  EXPECT_EQ(LabelSelectorQuery({}), "");
}

TEST(KubeTest, PoolPathsForBothGroups) {
  EXPECT_EQ(*InferencePoolPath(kInferencePoolGroupV1, "ns1", "llama"), kV1Path);
  EXPECT_EQ(*InferencePoolPath(kInferencePoolGroupV1Alpha2, "ns1", "llama"), kV1Alpha2Path);
  auto bad = InferencePoolPath("inference.example.com", "ns1", "llama");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("inference.networking.x-k8s.io (v1alpha2)"), std::string::npos)
      << bad.status();
  EXPECT_FALSE(InferencePoolPath(kInferencePoolGroupV1, "ns1", "Llama/../x").ok());
  EXPECT_FALSE(InferencePoolPath(kInferencePoolGroupV1, "a.b", "llama").ok());
}

TEST(KubeTest, V1PoolSelectorBecomesLabelSelectorAndReadinessFilters) {
  FakeApi api;
  api.Answer(kV1Path, kPoolV1);
  api.Answer(kPodsPath, PodList({
                            Pod("vllm-b", "10.0.0.2", true),
                            Pod("vllm-a", "10.0.0.1", true, R"(, "annotations": {"x": "y"})",
                                R"({"app": "vllm", "tier": "a b", "inference.networking.k8s.io/engine-type": "sglang"})"),
                            Pod("vllm-notready", "10.0.0.3", false),
                            Pod("vllm-deleting", "10.0.0.4", true, R"(, "deletionTimestamp": "2025-01-01T00:00:00Z")"),
                            Pod("vllm-noip", "", true),
                            Pod("vllm-oneport", "10.0.0.5", true,
                                R"(, "annotations": {"inference.networking.k8s.io/active-ports": "8002"})"),
                            Pod("vllm-v6", "fd00::7", true),
                            // A pod the selector does not match (a server ignoring labelSelector).
                            Pod("other", "10.0.0.9", true, "", R"({"app": "other"})"),
                            R"({"metadata": {"name": "pending", "labels": {"app": "vllm"}}})",
                        }));
  auto client = api.Client();
  ASSERT_NE(client, nullptr);
  auto pool = client->GetInferencePool(kInferencePoolGroupV1, "ns1", "llama");
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ(pool->selector, (std::map<std::string, std::string>{{"app", "vllm"}, {"tier", "a b"}}));
  EXPECT_EQ(pool->target_ports, (std::vector<int>{8000, 8002}));
  EXPECT_EQ(pool->resource_version, "42");
  EXPECT_EQ(pool->ns, "ns1");

  auto specs = client->ListPoolEndpoints(*pool);
  ASSERT_TRUE(specs.ok()) << specs.status();
  EXPECT_EQ(Addresses(*specs), (std::vector<std::string>{"10.0.0.1:8000", "10.0.0.1:8002", "10.0.0.2:8000",
                                                         "10.0.0.2:8002", "10.0.0.5:8002", "[fd00::7]:8000",
                                                         "[fd00::7]:8002"}));
  const EndpointSpec& a = (*specs)[0];
  EXPECT_EQ(a.metrics, "");  // scrape http://ADDRESS/metrics
  EXPECT_EQ(a.engine, "sglang");
  EXPECT_EQ(a.origin, "pod ns1/vllm-a");
  EXPECT_EQ(a.labels.at("app"), "vllm");
  EXPECT_EQ((*specs)[2].engine, "");
  EXPECT_TRUE(ValidateEndpointSpecs(*specs).ok());

  const std::vector<std::string> targets = api.targets();
  ASSERT_EQ(targets.size(), 2u);
  EXPECT_EQ(targets[0], kV1Path);
  // resourceVersion=0: the API server answers from its watch cache, no quorum read of etcd.
  EXPECT_EQ(targets[1], std::string(kPodsPath) + "?labelSelector=app%3Dvllm%2Ctier%3Da%20b&resourceVersion=0");
  EXPECT_EQ(api.label_selectors()[1], "app=vllm,tier=a b");  // as the server decodes it
  EXPECT_EQ(api.resource_versions()[1], "0");
  EXPECT_EQ(api.resource_versions()[0], "-");  // the pool GET is a plain read
  EXPECT_EQ(api.auth()[0], "");                             // no token file: no Authorization
}

TEST(KubeTest, V1Alpha2PoolUsesPlainSelectorAndTargetPortNumber) {
  FakeApi api;
  api.Answer(kV1Alpha2Path, kPoolV1Alpha2);
  api.Answer(kPodsPath, PodList({Pod("p0", "10.0.0.1", true, "", R"({"app": "vllm"})")}));
  auto client = api.Client();
  ASSERT_NE(client, nullptr);
  auto pool = client->GetInferencePool(kInferencePoolGroupV1Alpha2, "ns1", "llama");
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ(pool->selector, (std::map<std::string, std::string>{{"app", "vllm"}}));
  EXPECT_EQ(pool->target_ports, (std::vector<int>{8000}));
  auto specs = client->ListPoolEndpoints(*pool);
  ASSERT_TRUE(specs.ok()) << specs.status();
  EXPECT_EQ(Addresses(*specs), (std::vector<std::string>{"10.0.0.1:8000"}));
  EXPECT_EQ(api.targets()[1], std::string(kPodsPath) + "?labelSelector=app%3Dvllm&resourceVersion=0");

  // A v1 object read as v1alpha2 (and the reverse) is an error naming the field.
  auto wrong = ParseInferencePool(kPoolV1, kInferencePoolGroupV1Alpha2, "src");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("src: apiVersion: expected inference.networking.x-k8s.io/v1alpha2"),
            std::string::npos)
      << wrong.status();
  auto wrong2 = ParseInferencePool(
      R"({"metadata": {"name": "x"}, "spec": {"selector": {"app": "vllm"}, "targetPortNumber": 8000}})",
      kInferencePoolGroupV1, "src");
  ASSERT_FALSE(wrong2.ok());
  EXPECT_EQ(wrong2.status().message(), "src: spec.selector.matchLabels: missing or empty")
      << wrong2.status();
}

TEST(KubeTest, PoolFieldErrorsNameTheJsonPath) {
  struct Case {
    std::string json, want;
  };
  const std::vector<Case> cases = {
      {R"({"metadata": {}, "spec": {"selector": {"matchLabels": {"app": "x"}}, "targetPorts": [{"number": 0}]}})",
       "s: spec.targetPorts[0].number: port 0 out of range 1..65535"},
      {R"({"metadata": {}, "spec": {"selector": {"matchLabels": {"app": "x"}}, "targetPorts": [{"number": "80"}]}})",
       "s: spec.targetPorts[0].number: expected an integer, got string"},
      {R"({"metadata": {}, "spec": {"selector": {"matchLabels": {"app": "x"}},
            "targetPorts": [{"number": 80}, {"number": 80}]}})",
       "s: spec.targetPorts[1].number: duplicate port 80"},
      {R"({"metadata": {}, "spec": {"selector": {"matchLabels": {}}, "targetPorts": [{"number": 80}]}})",
       "s: spec.selector.matchLabels: missing or empty"},
      {R"({"metadata": {}, "spec": {"selector": {"matchLabels": {"app": 1}}, "targetPorts": [{"number": 80}]}})",
       "s: spec.selector.matchLabels.app: expected a string, got number"},
      {R"({"metadata": {}, "spec": {"selector": {"matchLabels": {"app": "x"}}}})", "s: spec.targetPorts: missing"},
      {R"({"metadata": {}, "spec": {"selector": {"matchLabels": {"app": "x"}}, "targetPorts": []}})",
       "s: spec.targetPorts: expected 1 to 8 ports, got 0"},
      // The size is checked before any item (nor its duplicates) is looked at.
      {R"({"metadata": {}, "spec": {"selector": {"matchLabels": {"app": "x"}}, "targetPorts": [
            {"number": 1}, {"number": 1}, {"number": 3}, {"number": 4}, {"number": 5}, {"number": 6},
            {"number": 7}, {"number": 8}, {"number": 0}]}})",
       "s: spec.targetPorts: expected 1 to 8 ports, got 9"},
      {R"({"metadata": {}})", "s: spec: missing"},
      {R"([1])", "s: (root): expected an object, got array"},
      {R"({"kind": "Service", "metadata": {}, "spec": {}})", "s: kind: expected InferencePool, got Service"},
  };
  for (const Case& c : cases) {
    auto p = ParseInferencePool(c.json, kInferencePoolGroupV1, "s");
    ASSERT_FALSE(p.ok()) << c.json;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(p.status().message(), c.want);
  }
}

TEST(KubeTest, NumbersBeyondTheDoubleRangeAreAnErrorNotAnAbort) {
  // `1e407` overflows a double: the position re-parse used to throw out_of_range past a catch of
  // parse_error only, which aborted Pod discovery.
  for (const char* json : {"1e407", R"({"metadata": {"name": 1e407}})", R"({"spec": {"x": -1e999}})"}) {
    SCOPED_TRACE(json);
    auto p = ParseInferencePool(json, kInferencePoolGroupV1, "s");
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(p.status().message()).rfind("s: answer is not JSON: ", 0), 0u) << p.status();
    EXPECT_NE(p.status().message().find("number overflow"), std::string::npos) << p.status();
  }
  // A port number above INT64_MAX is named, not wrapped.
  auto big = ParseInferencePool(
      R"({"metadata": {}, "spec": {"selector": {"matchLabels": {"app": "x"}}, "targetPorts": [{"number": 18446744073709551615}]}})",
      kInferencePoolGroupV1, "s");
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(std::string(big.status().message()), "s: spec.targetPorts[0].number: port 18446744073709551615 out of range 1..65535");
}

TEST(KubeTest, MalformedJsonNamesTheUrl) {
  FakeApi api;
  api.Answer(kV1Path, kPoolV1);
  api.Answer(kPodsPath, R"({"kind": "PodList", "items": [)");
  auto client = api.Client();
  ASSERT_NE(client, nullptr);
  auto pool = client->GetInferencePool(kInferencePoolGroupV1, "ns1", "llama");
  ASSERT_TRUE(pool.ok()) << pool.status();
  auto specs = client->ListPoolEndpoints(*pool);
  ASSERT_FALSE(specs.ok());
  EXPECT_EQ(specs.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(specs.status().message());
  EXPECT_EQ(msg.rfind("GET " + api.url() + kPodsPath +
                          "?labelSelector=app%3Dvllm%2Ctier%3Da%20b&resourceVersion=0: answer is not JSON: byte ",
                      0),
            0u)
      << msg;

  // A field of the wrong type: the JSON path of the item.
  api.Answer(kPodsPath, PodList({Pod("p0", "10.0.0.1", true), R"({"metadata": {"name": "p1"}, "status": {"podIP": 7}})"}));
  specs = client->ListPoolEndpoints(*pool);
  ASSERT_FALSE(specs.ok());
  EXPECT_NE(specs.status().message().find("pods?labelSelector=app%3Dvllm%2Ctier%3Da%20b&resourceVersion=0: "
                                          "items[1].status.podIP: expected a string, got number"),
            std::string::npos)
      << specs.status();
  api.Answer(kPodsPath, PodList({R"({"metadata": {"name": "p1"}, "status": {"conditions": [{"type": "Ready"}]}})"}));
  specs = client->ListPoolEndpoints(*pool);
  ASSERT_FALSE(specs.ok());
  EXPECT_NE(specs.status().message().find(": items[0].status.conditions[0].status: missing"), std::string::npos)
      << specs.status();
}

TEST(KubeTest, UnselectedPodSharingAnIpDoesNotHideASelectedOne) {
  FakeApi api;
  api.Answer(kV1Path, kPoolV1);
  // A server that ignores labelSelector lists an unselected hostNetwork Pod first, on the IP of a
  // selected one; then two selected Pods sharing an IP (the first listed is kept).
  api.Answer(kPodsPath, PodList({
                            Pod("aaa-other", "10.0.0.1", true, "", R"({"app": "other"})"),
                            Pod("vllm-x", "10.0.0.1", true),
                            Pod("vllm-z", "10.0.0.2", true),
                            Pod("vllm-y", "10.0.0.2", true),
                        }));
  auto client = api.Client();
  ASSERT_NE(client, nullptr);
  auto pool = client->GetInferencePool(kInferencePoolGroupV1, "ns1", "llama");
  ASSERT_TRUE(pool.ok()) << pool.status();
  auto specs = client->ListPoolEndpoints(*pool);
  ASSERT_TRUE(specs.ok()) << specs.status();
  EXPECT_EQ(Addresses(*specs),
            (std::vector<std::string>{"10.0.0.1:8000", "10.0.0.1:8002", "10.0.0.2:8000", "10.0.0.2:8002"}));
  EXPECT_EQ((*specs)[0].origin, "pod ns1/vllm-x");
  EXPECT_EQ((*specs)[2].origin, "pod ns1/vllm-z");
}

TEST(KubeTest, PodIpThatIsNotAnAddressFailsTheList) {
  FakeApi api;
  api.Answer(kV1Path, kPoolV1);
  auto client = api.Client();
  ASSERT_NE(client, nullptr);
  auto pool = client->GetInferencePool(kInferencePoolGroupV1, "ns1", "llama");
  ASSERT_TRUE(pool.ok()) << pool.status();
  // A host name passes ValidateEndpointAddress but is no Pod IP: the list fails like any other
  // malformed Pod (discovery keeps the set in use), naming the Pod and the JSON path.
  for (const std::string bad : {"foo", "10.0.0.256", "[fd00::1]", "fe80::1%eth0", "10.0.0.1:80"}) {
    api.Answer(kPodsPath, PodList({Pod("vllm-a", "10.0.0.1", true), Pod("vllm-bad", bad, true)}));
    auto specs = client->ListPoolEndpoints(*pool);
    ASSERT_FALSE(specs.ok()) << bad;
    EXPECT_EQ(specs.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string want =
        "&resourceVersion=0: items[1].status.podIP: pod ns1/vllm-bad: '" + bad + "' is not an IPv4 or IPv6 address";
    const std::string msg(specs.status().message());
    EXPECT_EQ(msg.size() >= want.size() ? msg.substr(msg.size() - want.size()) : msg, want);
  }
  // Not checked for Pods that do not count (not Ready, not selected): they are skipped as before.
  api.Answer(kPodsPath, PodList({Pod("vllm-a", "10.0.0.1", true), Pod("vllm-bad", "foo", false),
                                 Pod("other", "bar", true, "", R"({"app": "other"})")}));
  auto specs = client->ListPoolEndpoints(*pool);
  ASSERT_TRUE(specs.ok()) << specs.status();
  EXPECT_EQ(Addresses(*specs), (std::vector<std::string>{"10.0.0.1:8000", "10.0.0.1:8002"}));
}

TEST(KubeTest, HttpErrorsCarryStatusAndKubernetesMessage) {
  FakeApi api;
  auto client = api.Client();
  ASSERT_NE(client, nullptr);
  // 404: no such pool (the fake answers NotFound for unknown paths).
  auto pool = client->GetInferencePool(kInferencePoolGroupV1, "ns1", "llama");
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(pool.status().message(), "GET " + api.url() + kV1Path +
                                         ": HTTP 404 (NotFound): the server could not find the requested resource");

  // 403: RBAC.
  api.Answer(kV1Path,
             R"({"kind":"Status","apiVersion":"v1","status":"Failure","message":"inferencepools.inference.networking.k8s.io )"
             R"(\"llama\" is forbidden: User \"system:serviceaccount:ns1:epp\" cannot get resource \"inferencepools\"",)"
             R"("reason":"Forbidden","code":403})",
             403);
  pool = client->GetInferencePool(kInferencePoolGroupV1, "ns1", "llama");
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kPermissionDenied);
  const std::string msg(pool.status().message());
  EXPECT_EQ(msg.rfind("GET " + api.url() + kV1Path + ": HTTP 403 (Forbidden): inferencepools.inference.networking.k8s.io "
                      "\"llama\" is forbidden: User \"system:serviceaccount:ns1:epp\"",
                      0),
            0u)
      << msg;
  EXPECT_NE(msg.find("Role"), std::string::npos) << msg;

  // 500 with a body that is not a Status.
  api.Answer(kV1Path, "etcd is down\n", 500);
  pool = client->GetInferencePool(kInferencePoolGroupV1, "ns1", "llama");
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(pool.status().message(), "GET " + api.url() + kV1Path + ": HTTP 500: etcd is down");
}

TEST(KubeTest, ConnectionRefusedIsUnavailable) {
  KubeClientOptions o;
  o.api_server = "http://127.0.0.1:" + std::to_string(epp::testing::ClosedPort());
  o.timeout = std::chrono::milliseconds(2000);
  auto client = KubeClient::Create(o);
  ASSERT_TRUE(client.ok()) << client.status();
  auto pool = (*client)->GetInferencePool(kInferencePoolGroupV1, "ns1", "llama");
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(pool.status().message().find(o.api_server + kV1Path), std::string::npos) << pool.status();
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/epp-kube-test-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string Write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ + "/" + name, std::ios::trunc) << text;
    return path_ + "/" + name;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(KubeTest, TokenIsSentAndReRead) {
  FakeApi api;
  api.Answer(kV1Path, kPoolV1);
  TempDir dir;
  KubeClientOptions o;
  o.token_file = dir.Write("token", "tok-1\n");
  o.token_reload = std::chrono::seconds(0);  // re-read on every request
  auto client = api.Client(o);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->GetInferencePool(kInferencePoolGroupV1, "ns1", "llama").ok());
  dir.Write("token", "tok-2");
  ASSERT_TRUE(client->GetInferencePool(kInferencePoolGroupV1, "ns1", "llama").ok());
  EXPECT_EQ(api.auth(), (std::vector<std::string>{"Bearer tok-1", "Bearer tok-2"}));

  o.token_file = dir.path() + "/missing";
  o.api_server = api.url();
  auto bad = KubeClient::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("missing cannot be read"), std::string::npos) << bad.status();
}

TEST(KubeTest, InClusterOptionsFromEnvironmentAndServiceAccountDir) {
  TempDir dir;
  dir.Write("token", "sa-token");
  dir.Write("ca.crt", "-----BEGIN CERTIFICATE-----\n");
  dir.Write("namespace", "inference\n");
  EXPECT_EQ(InClusterNamespace(dir.path()), "inference");
  EXPECT_EQ(InClusterNamespace(dir.path() + "/nowhere"), "");

  const char* old_host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* old_port = std::getenv("KUBERNETES_SERVICE_PORT");
  const std::string saved_host = old_host ? old_host : "", saved_port = old_port ? old_port : "";
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  KubeClientOptions o;
  o.service_account_dir = dir.path();
  auto none = ResolveKubeClientOptions(o);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("--kube-api-server"), std::string::npos);

  ::setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  auto in = ResolveKubeClientOptions(o);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(in->api_server, "https://[fd00::1]:443");
  EXPECT_EQ(in->token_file, dir.path() + "/token");
  EXPECT_EQ(in->ca_file, dir.path() + "/ca.crt");

  // An explicit server: nothing taken from the service account directory.
  o.api_server = "http://127.0.0.1:8001/";
  auto ex = ResolveKubeClientOptions(o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_EQ(ex->api_server, "http://127.0.0.1:8001");
  EXPECT_EQ(ex->token_file, "");
  o.api_server = "127.0.0.1:8001";
  EXPECT_EQ(ResolveKubeClientOptions(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.api_server = "http://127.0.0.1:8001/api";
  EXPECT_EQ(ResolveKubeClientOptions(o).status().code(), absl::StatusCode::kInvalidArgument);

  if (old_host) ::setenv("KUBERNETES_SERVICE_HOST", saved_host.c_str(), 1); else ::unsetenv("KUBERNETES_SERVICE_HOST");
  if (old_port) ::setenv("KUBERNETES_SERVICE_PORT", saved_port.c_str(), 1); else ::unsetenv("KUBERNETES_SERVICE_PORT");
}

// Issue #41: an unverified API server and a token over http:// used to pass without a word.
TEST(KubeTest, WarningsNameAnUnverifiedServerAndATokenInClearText) {
  TempDir dir;
  dir.Write("token", "t");
  KubeClientOptions o;
  o.api_server = "https://10.0.0.1:6443";
  EXPECT_TRUE(KubeClientWarnings(o).empty());
  o.insecure_skip_verify = true;
  auto w = KubeClientWarnings(o);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("--kube-insecure-skip-verify"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("https://10.0.0.1:6443"), std::string::npos) << w[0];
  o.insecure_skip_verify = false;
  o.api_server = "http://10.0.0.1:8080";
  EXPECT_TRUE(KubeClientWarnings(o).empty());  // no token: nothing leaks
  o.token_file = dir.path() + "/token";
  w = KubeClientWarnings(o);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("clear text"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find(o.token_file), std::string::npos) << w[0];
  o.api_server = "10.0.0.1";  // does not resolve: Create reports it, no warning here
  EXPECT_TRUE(KubeClientWarnings(o).empty());
}

}  // namespace
}  // namespace epp

namespace epp {
namespace {

TEST(InferencePoolImportTest, ExportingClustersAreTheUnionOverControllersAndPickDirectoryEntries) {
  const std::string json = R"({"apiVersion":"inference.networking.x-k8s.io/v1alpha1","kind":"InferencePoolImport",
    "metadata":{"name":"llama","namespace":"ns1","resourceVersion":"7"},
    "status":{"controllers":[{"name":"a.example/mcs","exportingClusters":[{"name":"west"},{"name":"east"}]},
                             {"name":"b.example/gw","exportingClusters":[{"name":"east"},{"name":"eu"}]},
                             {"name":"c.example/none"}]}})";
  auto imp = ParseInferencePoolImport(json, "GET x");
  ASSERT_TRUE(imp.ok()) << imp.status();
  EXPECT_EQ(imp->name, "llama");
  EXPECT_EQ(imp->ns, "ns1");
  EXPECT_EQ(imp->controllers, (std::vector<std::string>{"a.example/mcs", "b.example/gw", "c.example/none"}));
  EXPECT_EQ(imp->exporting_clusters, (std::vector<std::string>{"east", "eu", "west"}));
  std::vector<EndpointSpec> dir(3);
  dir[0].address = "gw-west:443", dir[0].labels["cluster"] = "west";
  dir[1].address = "gw-mars:443", dir[1].labels["cluster"] = "mars";
  dir[2].address = "gw-east:443", dir[2].labels["cluster"] = "east";
  std::vector<std::string> missing;
  const std::vector<EndpointSpec> out = ImportEndpoints(*imp, dir, "cluster", &missing);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].address, "gw-west:443");  // directory order
  EXPECT_EQ(out[1].address, "gw-east:443");
  EXPECT_EQ(out[1].origin, "inferencepoolimport ns1/llama, cluster east");
  EXPECT_EQ(missing, std::vector<std::string>{"eu"});
  // Not reconciled yet: no status, no clusters.
  auto bare = ParseInferencePoolImport(R"({"kind":"InferencePoolImport","metadata":{"name":"x"}})", "GET x");
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_TRUE(bare->exporting_clusters.empty());
  EXPECT_EQ(*InferencePoolImportPath("ns1", "llama"),
            "/apis/inference.networking.x-k8s.io/v1alpha1/namespaces/ns1/inferencepoolimports/llama");
  EXPECT_FALSE(InferencePoolImportPath("NS", "llama").ok());
}

TEST(InferencePoolImportTest, ErrorsNameTheJsonPath) {
  struct Case {
    const char* json;
    const char* want;
  } cases[] = {
      {R"({"kind":"InferencePool","metadata":{}})", "GET x: kind: expected InferencePoolImport, got InferencePool"},
      {R"({"apiVersion":"inference.networking.x-k8s.io/v1","metadata":{}})",
       "apiVersion: expected inference.networking.x-k8s.io/v1alpha1"},
      {R"({"metadata":{},"status":{"controllers":{}}})", "status.controllers: expected an array"},
      {R"({"metadata":{},"status":{"controllers":[{"exportingClusters":[]}]}})", "status.controllers[0].name"},
      {R"({"metadata":{},"status":{"controllers":[{"name":"c","exportingClusters":[{"name":3}]}]}})",
       "status.controllers[0].exportingClusters[0].name: expected a string, got number"},
      {R"({"metadata":{},"status":{"controllers":[{"name":"c","exportingClusters":[{"name":""}]}]}})",
       "status.controllers[0].exportingClusters[0].name: empty cluster name"},
      {"[1]", "expected an object"},
  };
  for (const Case& c : cases) {
    auto imp = ParseInferencePoolImport(c.json, "GET x");
    ASSERT_FALSE(imp.ok()) << c.json;
    EXPECT_EQ(imp.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(imp.status().message().find(c.want), std::string::npos) << imp.status();
  }
}

}  // namespace
}  // namespace epp
