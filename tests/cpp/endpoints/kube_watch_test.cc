// Discovery by watch (NewInferencePoolWatcher) against a Kubernetes API server on 127.0.0.1
// (cpp-httplib, real sockets, chunked watch streams), and the pieces it is made of: label
// selectors and Pod endpoints.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>

#include <gtest/gtest.h>

#include "epp/runtime/kube.h"
#include "epp/runtime/serve.h"
#include "testing/test_server.h"

namespace epp {
namespace {

using epp::testing::TestServer;

// ---- Label selectors ----------------------------------------------------------------------------

TEST(LabelSelectorTest, ParsesEveryOperatorAndPrintsCanonically) {
  absl::StatusOr<LabelSelector> s = ParseLabelSelector(" tier notin (b, a),app=vllm ,env in (prod),!legacy,gpu,x!=y");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->String(), "app=vllm,env in (prod),gpu,!legacy,tier notin (a,b),x!=y");
  // The canonical text parses back to the same selector.
  EXPECT_EQ(*ParseLabelSelector(s->String()), *s);
  EXPECT_EQ(ParseLabelSelector("app==vllm")->String(), "app=vllm");
  EXPECT_TRUE(ParseLabelSelector("")->empty());
  EXPECT_EQ(ParseLabelSelector("example.com/role=prefill")->String(), "example.com/role=prefill");
  // An empty value in a set (Kubernetes takes "(,a)" as {"", "a"}) keeps its place when printed;
  // it was dropped, so the text named another selector (found by fuzz_kube_policies).
  const LabelSelector empty_value = *ParseLabelSelector("env in (,staging),!legacy");
  EXPECT_EQ(empty_value.String(), "env in (,staging),!legacy");
  EXPECT_EQ(*ParseLabelSelector(empty_value.String()), empty_value);
  EXPECT_TRUE(empty_value.Matches({{"env", ""}}));
  EXPECT_EQ(ParseLabelSelector("env in ()")->String(), "env in ()");
  // Requirements on one key with one operator are ordered by value too: the same selector
  // whatever order they came in (they had kept the sort's arbitrary order).
  const LabelSelector ab = *ParseLabelSelector("app=b,x,app=a,app=c");
  EXPECT_EQ(ab.String(), "app=a,app=b,app=c,x");
  EXPECT_EQ(*ParseLabelSelector("app=c,app=a,x,app=b"), ab);
}

TEST(LabelSelectorTest, MatchesAsKubernetesDoes) {
  const LabelSelector s = *ParseLabelSelector("app=vllm,env in (prod,staging),!legacy,tier!=frontend");
  EXPECT_TRUE(s.Matches({{"app", "vllm"}, {"env", "prod"}}));
  EXPECT_TRUE(s.Matches({{"app", "vllm"}, {"env", "staging"}, {"tier", "backend"}}));
  EXPECT_FALSE(s.Matches({{"app", "vllm"}, {"env", "dev"}}));
  EXPECT_FALSE(s.Matches({{"app", "vllm"}, {"env", "prod"}, {"legacy", ""}}));
  EXPECT_FALSE(s.Matches({{"app", "vllm"}, {"env", "prod"}, {"tier", "frontend"}}));
  EXPECT_FALSE(s.Matches({{"env", "prod"}}));
  // An absent label is "not in" and "not equal".
  const LabelSelector n = *ParseLabelSelector("a notin (x),b!=y");
  EXPECT_TRUE(n.Matches({}));
  EXPECT_TRUE(ParseLabelSelector("gpu")->Matches({{"gpu", ""}}));
  EXPECT_FALSE(ParseLabelSelector("gpu")->Matches({}));
}

TEST(LabelSelectorTest, ErrorsNameThePosition) {
  const std::pair<const char*, const char*> bad[] = {
      {"app in (a", "label selector 'app in (a': at 10: expected ',' or ')'"},
      {"app=", ""},  // an empty value is valid
      {"=x", "at 1: expected a label key"},
      {"app=vllm,", "expected a label key"},
      {"app ~ x", "at 5: expected '=', '==', '!=', 'in' or 'notin'"},
      {"a b", "expected '=', '==', '!=', 'in' or 'notin'"},
      {"-bad=x", "'-bad' is not a valid label key"},
      {"app=bad value", "expected ',' or the end"},
      {"Example.com/x=y", "'Example.com/x' is not a valid label key"},
  };
  for (const auto& [text, want] : bad) {
    absl::StatusOr<LabelSelector> s = ParseLabelSelector(text);
    if (std::string(want).empty()) {
      EXPECT_TRUE(s.ok()) << text << ": " << s.status();
      continue;
    }
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(s.status().message()).find(want), std::string::npos) << s.status();
  }
}

// ---- Pod endpoints ---------------------------------------------------------------------------------

PodInfo ReadyPod(std::string name, std::string ip, std::map<std::string, std::string> labels = {{"app", "vllm"}}) {
  PodInfo p;
  p.ns = "ns1";
  p.name = std::move(name);
  p.ip = std::move(ip);
  p.ready = true;
  p.labels = std::move(labels);
  return p;
}

TEST(PodEndpointsTest, OneEndpointPerPortWithMetricsUrlsAndBothActivePortsAnnotations) {
  std::vector<PodInfo> pods = {ReadyPod("b", "10.0.0.2"), ReadyPod("a", "10.0.0.1"), ReadyPod("c", "fd00::3")};
  pods[0].annotations["llm-d.ai/active-ports"] = "8001";
  pods[1].annotations["inference.networking.k8s.io/active-ports"] = "8000, 8001";
  const std::vector<int> ports = {8000, 8001};
  const LabelSelector app = *ParseLabelSelector("app=vllm");
  std::vector<EndpointSpec> plain = PodEndpoints(pods, app, ports);
  ASSERT_EQ(plain.size(), 5u);
  EXPECT_EQ(plain[0].address, "10.0.0.1:8000");  // name order: a, b, c
  EXPECT_EQ(plain[2].address, "10.0.0.2:8001");  // b: only its active port
  EXPECT_EQ(plain[3].address, "[fd00::3]:8000");
  EXPECT_EQ(plain[0].metrics, "");  // the default scrape: http://ADDRESS/metrics
  EXPECT_EQ(plain[0].instance, "ns1/a");
  PodMetricsOptions m;
  m.scheme = "https";
  m.port = 9400;
  m.path = "/custom";
  std::vector<EndpointSpec> custom = PodEndpoints(pods, app, ports, m);
  EXPECT_EQ(custom[0].metrics, "https://10.0.0.1:9400/custom");
  EXPECT_EQ(custom[3].metrics, "https://[fd00::3]:9400/custom");
  m.port = 0;  // the target port
  EXPECT_EQ(PodEndpoints(pods, app, ports, m)[1].metrics, "https://10.0.0.1:8001/custom");
  // Not selected, not ready, deleting, no IP: no endpoint.
  pods.push_back(ReadyPod("d", "10.0.0.4", {{"app", "other"}}));
  pods.push_back(ReadyPod("e", "10.0.0.5"));
  pods.back().ready = false;
  pods.push_back(ReadyPod("f", "10.0.0.6"));
  pods.back().deleting = true;
  pods.push_back(ReadyPod("g", ""));
  EXPECT_EQ(PodEndpoints(pods, app, ports).size(), 5u);
}

// ---- The watcher against a loopback API server ---------------------------------------------------

std::string PodJson(const std::string& name, const std::string& ip, bool ready, int rv) {
  return R"({"metadata": {"name": ")" + name + R"(", "namespace": "ns1", "resourceVersion": ")" + std::to_string(rv) +
         R"(", "labels": {"app": "vllm"}}, "status": {"podIP": ")" + ip +
         R"(", "conditions": [{"type": "Ready", "status": ")" + (ready ? "True" : "False") + R"("}]}})";
}

// Lists and watches the Pods of ns1. Events are queued by Push(); a watch stream sends those after
// its resourceVersion, then waits for more; Gone() makes the next watch (or the open one) 410.
class WatchApi {
 public:
  WatchApi() {
    srv_.server().Get("/api/v1/namespaces/ns1/pods", [this](const httplib::Request& req, httplib::Response& res) {
      std::unique_lock<std::mutex> lock(mu_);
      if (req.get_param_value("watch") != "1") {
        lists_.push_back(req.has_param("resourceVersion") ? req.get_param_value("resourceVersion") : "(none)");
        std::string items;
        for (const auto& [name, json] : pods_) items += (items.empty() ? "" : ",") + json;
        res.set_content(R"({"kind": "PodList", "metadata": {"resourceVersion": ")" + std::to_string(rv_) +
                            R"("}, "items": [)" + items + "]}",
                        "application/json");
        return;
      }
      watches_++;
      const int since = std::stoi(req.get_param_value("resourceVersion"));
      if (since < compacted_) {
        res.status = 410;
        res.set_content(R"({"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"})", "application/json");
        return;
      }
      auto sent = std::make_shared<int>(since);
      res.set_chunked_content_provider("application/json", [this, sent](size_t, httplib::DataSink& sink) {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, std::chrono::milliseconds(50));
        if (stopping_ || !sink.is_writable()) return false;
        if (*sent < compacted_) {
          const std::string e = R"({"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}})" "\n";
          sink.write(e.data(), e.size());
          sink.done();
          return true;
        }
        for (const auto& [rv, line] : events_) {
          if (rv <= *sent) continue;
          *sent = rv;
          sink.write(line.data(), line.size());
        }
        return true;
      });
    });
    url_ = srv_.Start();
  }
  ~WatchApi() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    srv_.Stop();
  }
  const std::string& url() const { return url_; }

  void Put(const std::string& name, const std::string& ip, bool ready) {
    std::lock_guard<std::mutex> lock(mu_);
    const bool exists = pods_.count(name) > 0;
    pods_[name] = PodJson(name, ip, ready, ++rv_);
    events_.emplace_back(rv_, std::string(R"({"type": ")") + (exists ? "MODIFIED" : "ADDED") + R"(", "object": )" +
                                  pods_[name] + "}\n");
    cv_.notify_all();
  }
  void Gone() {
    std::lock_guard<std::mutex> lock(mu_);
    compacted_ = ++rv_;
    events_.clear();
    cv_.notify_all();
  }
  std::vector<std::string> lists() {
    std::lock_guard<std::mutex> lock(mu_);
    return lists_;
  }
  int watches() {
    std::lock_guard<std::mutex> lock(mu_);
    return watches_;
  }

 private:
  TestServer srv_;
  std::string url_;
  std::mutex mu_;
  std::condition_variable cv_;
  int rv_ = 10;
  int compacted_ = 0;
  bool stopping_ = false;
  std::map<std::string, std::string> pods_;
  std::deque<std::pair<int, std::string>> events_;
  std::vector<std::string> lists_;  // the resourceVersion each LIST asked for
  int watches_ = 0;
};

PoolDiscoveryOptions Standalone(const std::string& url) {
  PoolDiscoveryOptions o;
  o.ns = "ns1";
  o.selector = "app=vllm";
  o.target_ports = {8000};
  o.kube.api_server = url;
  o.kube.timeout = std::chrono::milliseconds(2000);
  return o;
}

std::vector<std::string> Addresses(const std::vector<EndpointSpec>& specs) {
  std::vector<std::string> out;
  for (const EndpointSpec& s : specs) out.push_back(s.address);
  return out;
}

TEST(PoolWatcherTest, ListsOnceThenFollowsEventsAndRelistsAfterGone) {
  WatchApi api;
  api.Put("a", "10.0.0.1", true);
  api.Put("b", "10.0.0.2", false);
  absl::StatusOr<std::unique_ptr<EndpointLister>> w = NewInferencePoolWatcher(Standalone(api.url()));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE((*w)->Watches());
  std::atomic<bool> cancel{false};
  absl::StatusOr<std::vector<EndpointSpec>> first = (*w)->List(cancel);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(Addresses(*first), std::vector<std::string>{"10.0.0.1:8000"});

  // b turns Ready: the next List() returns when its event arrives.
  api.Put("b", "10.0.0.2", true);
  absl::StatusOr<std::vector<EndpointSpec>> second = (*w)->List(cancel);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(Addresses(*second), (std::vector<std::string>{"10.0.0.1:8000", "10.0.0.2:8000"}));
  EXPECT_EQ(api.lists(), std::vector<std::string>{"0"});  // one LIST, from the watch cache

  // History forgotten: the open watch gets an ERROR 410 event, the informer lists again (a quorum
  // read) and watches from there; a change after it arrives.
  api.Gone();
  api.Put("c", "10.0.0.3", true);
  absl::StatusOr<std::vector<EndpointSpec>> third = (*w)->List(cancel);
  ASSERT_TRUE(third.ok()) << third.status();
  if (third->size() == 2) third = (*w)->List(cancel);  // the relist before c's event
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->size(), 3u);
  std::vector<std::string> lists = api.lists();
  ASSERT_GE(lists.size(), 2u);
  EXPECT_EQ(lists[1], "(none)");
  std::optional<KubeWatchStats> stats = (*w)->watch_stats();
  ASSERT_TRUE(stats.has_value());
  EXPECT_TRUE(stats->synced);
  EXPECT_GE(stats->relists_gone, 1);
  EXPECT_GE(stats->events, 1);  // b's MODIFIED (c came with the relist or as an event)
}

TEST(PoolWatcherTest, CancelEndsAWaitingListAndTheWatcherStopsPromptly) {
  WatchApi api;
  api.Put("a", "10.0.0.1", true);
  auto w = NewInferencePoolWatcher(Standalone(api.url()));
  ASSERT_TRUE(w.ok()) << w.status();
  std::atomic<bool> cancel{false};
  ASSERT_TRUE((*w)->List(cancel).ok());
  std::thread waiter([&] {
    absl::StatusOr<std::vector<EndpointSpec>> r = (*w)->List(cancel);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);
  });
  cancel = true;
  waiter.join();
  w->reset();  // ends the open watch stream (HttpStream::Cancel), no wait for its timeout
}

TEST(PoolWatcherTest, AnEventOverTheLineCapEndsTheWatchAndKeepsTheSet) {
  // A watch stream that sends one "event" of 17 MiB without a line end: the informer stops
  // reading at the 16 MiB cap (an error, then backoff and a re-watch) instead of buffering it.
  TestServer srv;
  std::atomic<int> watches{0};
  srv.server().Get("/api/v1/namespaces/ns1/pods", [&](const httplib::Request& req, httplib::Response& res) {
    if (req.get_param_value("watch") != "1") {
      res.set_content(R"({"kind": "PodList", "metadata": {"resourceVersion": "5"}, "items": [)" +
                          PodJson("a", "10.0.0.1", true, 5) + "]}",
                      "application/json");
      return;
    }
    watches++;
    auto sent = std::make_shared<size_t>(0);
    res.set_chunked_content_provider("application/json", [sent](size_t, httplib::DataSink& sink) {
      if (*sent >= (size_t{17} << 20) || !sink.is_writable()) {
        sink.done();
        return true;
      }
      const std::string chunk(size_t{1} << 20, 'x');
      *sent += chunk.size();
      return sink.write(chunk.data(), chunk.size());
    });
  });
  const std::string url = srv.Start();
  auto w = NewInferencePoolWatcher(Standalone(url));
  ASSERT_TRUE(w.ok()) << w.status();
  std::atomic<bool> cancel{false};
  absl::StatusOr<std::vector<EndpointSpec>> first = (*w)->List(cancel);
  ASSERT_TRUE(first.ok()) << first.status();
  // The failure is reported as the lister's error state (the pool keeps the set in use).
  absl::StatusOr<std::vector<EndpointSpec>> next = (*w)->List(cancel);
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), absl::StatusCode::kResourceExhausted) << next.status();
  EXPECT_NE(std::string(next.status().message()).find("an event over 16 MiB"), std::string::npos) << next.status();
  EXPECT_GE((*w)->watch_stats()->errors, 1);
  w->reset();
  srv.Stop();
}

TEST(PoolWatcherTest, FirstListFailsWhenTheApiServerIsDown) {
  PoolDiscoveryOptions o = Standalone("http://127.0.0.1:" + std::to_string(epp::testing::ClosedPort()));
  auto w = NewInferencePoolWatcher(o);
  ASSERT_TRUE(w.ok()) << w.status();
  std::atomic<bool> cancel{false};
  absl::StatusOr<std::vector<EndpointSpec>> r = (*w)->List(cancel);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_NE(std::string(r.status().message()).find("connection refused"), std::string::npos) << r.status();
}

TEST(PoolWatcherTest, BadOptionsAreRejectedBeforeAnyRequest) {
  PoolDiscoveryOptions o = Standalone("http://127.0.0.1:1");
  o.target_ports = {};
  EXPECT_EQ(NewInferencePoolWatcher(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Standalone("http://127.0.0.1:1");
  o.selector = "app in (";
  EXPECT_EQ(NewInferencePoolWatcher(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Standalone("http://127.0.0.1:1");
  o.ns = "Bad_NS";
  EXPECT_EQ(NewInferencePoolWatcher(o).status().code(), absl::StatusCode::kInvalidArgument);
}

// ---- InferenceObjective / InferenceModelRewrite ----------------------------------------------------

TEST(RequestPoliciesTest, ObjectivesAndRewritesOfThePoolWithTheReferencesPrecedence) {
  auto obj = ParseInferenceObjective(
      R"({"metadata": {"name": "batch", "namespace": "ns1"}, "spec": {"priority": -2, "poolRef": {"name": "p"}}})", "p");
  ASSERT_TRUE(obj.ok()) << obj.status();
  ASSERT_TRUE(obj->has_value());
  EXPECT_EQ((*obj)->priority, -2);
  auto other = ParseInferenceObjective(R"({"metadata": {"name": "x"}, "spec": {"poolRef": {"name": "q"}}})", "p");
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->has_value());  // another pool's
  auto unset = ParseInferenceObjective(R"({"metadata": {"name": "y"}, "spec": {"poolRef": {"name": "p"}}})", "p");
  EXPECT_EQ((*unset)->priority, 0);

  auto young = ParseInferenceModelRewrite(R"({"metadata": {"name": "young", "namespace": "ns1",
      "creationTimestamp": "2026-12-02T00:00:00Z"}, "spec": {"poolRef": {"name": "p"}, "rules": [
      {"matches": [{"model": {"value": "a"}}], "targets": [{"modelRewrite": "a-young"}]}]}})", "p");
  auto old = ParseInferenceModelRewrite(R"({"metadata": {"name": "old", "namespace": "ns1",
      "creationTimestamp": "2026-11-01T00:00:00Z"}, "spec": {"poolRef": {"name": "p"}, "rules": [
      {"targets": [{"modelRewrite": "generic"}]},
      {"matches": [{"model": {"value": "b"}}, {"model": {"type": "Exact", "value": "a"}}],
       "targets": [{"modelRewrite": "ab-old", "weight": 3}, {"modelRewrite": "ab-old-2", "weight": 1}]}]}})", "p");
  ASSERT_TRUE(young.ok() && old.ok()) << young.status() << old.status();
  RequestPolicies p = MergeRequestPolicies({**obj}, {**young, **old});
  EXPECT_EQ(p.objective_priorities.at("batch"), -2);
  // Exact before generic (even the older resource's generic rule loses to it); among exact
  // matches, the oldest resource.
  ASSERT_NE(p.RuleFor("a"), nullptr);
  EXPECT_EQ(p.RuleFor("a")->source, "ns1/old");
  EXPECT_EQ(p.RuleFor("a")->targets[0].model, "ab-old");
  EXPECT_EQ(p.RuleFor("zzz")->targets[0].model, "generic");
  // Weighted choice: 3:1 over u in [0, 1).
  const ModelRewriteRule& ab = *p.RuleFor("b");
  EXPECT_EQ(PickRewriteTarget(ab, 0.0), "ab-old");
  EXPECT_EQ(PickRewriteTarget(ab, 0.74), "ab-old");
  EXPECT_EQ(PickRewriteTarget(ab, 0.76), "ab-old-2");
  EXPECT_EQ(PickRewriteTarget(ab, 0.999999), "ab-old-2");
  // Unweighted: even; mixed: the unweighted target is never chosen (as the reference).
  ModelRewriteRule even{"s", {}, {{"x", 0}, {"y", 0}}};
  EXPECT_EQ(PickRewriteTarget(even, 0.2), "x");
  EXPECT_EQ(PickRewriteTarget(even, 0.7), "y");
  ModelRewriteRule mixed{"s", {}, {{"x", 0}, {"y", 5}}};
  for (double u : {0.0, 0.5, 0.99}) EXPECT_EQ(PickRewriteTarget(mixed, u), "y");
}

TEST(RequestPoliciesTest, MalformedObjectsNameTheField) {
  const std::pair<const char*, const char*> bad[] = {
      {R"({"metadata": {"name": "r", "namespace": "n"}, "spec": {"poolRef": {"name": "p"},
          "rules": [{"targets": [{"modelRewrite": "x", "weight": 0}]}]}})",
       "inferencemodelrewrite n/r: spec.rules[0].targets[0].weight: expected an integer in [1, 1000000], got 0"},
      {R"({"metadata": {"name": "r", "namespace": "n"}, "spec": {"poolRef": {"name": "p"}, "rules": [{}]}})",
       "spec.rules[0].targets: expected at least one target"},
      {R"({"metadata": {"name": "r", "namespace": "n"}, "spec": {"poolRef": {"name": "p"},
          "rules": [{"matches": [{"model": {"type": "Prefix", "value": "a"}}], "targets": [{"modelRewrite": "x"}]}]}})",
       "matches[0].model.type: 'Prefix' is not supported"},
      {R"({"metadata": {"name": "r"}, "spec": {}})", "spec.poolRef.name: missing"},
      {R"([1])", "not a JSON object"},
  };
  for (const auto& [json, want] : bad) {
    auto r = ParseInferenceModelRewrite(json, "p");
    ASSERT_FALSE(r.ok()) << json;
    EXPECT_NE(std::string(r.status().message()).find(want), std::string::npos) << r.status();
  }
  auto o = ParseInferenceObjective(R"({"metadata": {"name": "o"}, "spec": {"priority": "high", "poolRef": {"name": "p"}}})", "p");
  ASSERT_FALSE(o.ok());
  EXPECT_NE(std::string(o.status().message()).find("spec.priority: expected a 32-bit integer"), std::string::npos);
}

}  // namespace
}  // namespace epp
