// docs/scheduling.md's plugin index is the registry: every built-in type is listed once with the
// extension points it implements and what it reads (Plugin::Consumes), and nothing else is
// listed. A plugin added, renamed or changed in what it reads fails here until the table says so.
// Also: Scheduler::MissingInputs over an engine's mapping and over endpoints as read.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "epp/config.h"
#include "epp/registry.h"
#include "epp/scheduler.h"
#include "epp/scheduling.h"
#include "plugins/profile/profile.h"

namespace epp {
namespace {

// The few types that cannot be built without parameters.
Params MinimalParams(std::string_view type) {
  Params p = Params::Map("parameters");
  if (type == "label-selector-filter" || type == "by-label-selector")
    p.Set("matchLabels", Params::Map().Set("zone", Params::String("a")));
  if (type == "by-label") p.Set("label", Params::String("zone"));
  if (type == "header-label-affinity-scorer") p.Set("headerName", Params::String("x-zone")).Set("labelKey", Params::String("zone"));
  if (type == "session-id-producer") p.Set("headerName", Params::String("x-session-id"));
  if (type == "utilization-filter")
    p.Set("conditions", Params::List().Append(Params::Map().Set("metric", Params::String("active-requests")).Set("maxValue", Params::Int(4))));
  if (type == "priority-holdback-policy") p.Set("minCeiling", Params::Number(0.5));
  if (type == "file-discovery" || type == "multicluster-file-discovery") p.Set("path", Params::String("/etc/epp/endpoints.yaml"));
  if (type == "k8s-notification-source") p.Set("version", Params::String("v1")).Set("kind", Params::String("Pod"));
  if (type == "disaggregatedset-rollout-screener")
    p.Set("scope", Params::Map().Set("labelSelector", Params::String("app=set")))
        .Set("revisionGating", Params::Map().Set("mode", Params::String("disabled")));
  if (type == "request-attribute-reporter") {
    Params key = Params::Map();
    key.Set("name", Params::String("cost"));
    Params attr = Params::Map();
    attr.Set("key", std::move(key));
    attr.Set("expression", Params::String("usage.completion_tokens"));
    Params list = Params::List();
    list.Append(std::move(attr));
    p.Set("attributes", std::move(list));
  }
  if (type == "endpoint-attribute-filter" || type == "endpoint-attribute-scorer") {
    const bool filter = type == "endpoint-attribute-filter";
    p.Set(filter ? "attribute" : "attributeKey", Params::String("gpu.util"));
    Params alg = Params::Map();
    alg.Set("type", Params::String(filter ? "threshold" : "linear_lower_is_better"));
    if (filter) alg.Set("threshold", Params::Map().Set("operator", Params::String("LessThan")).Set("value", Params::Number(1)));
    p.Set("algorithm", std::move(alg));
  }
  return p;
}

std::string Points(const Plugin& p) {
  std::string out;
  auto add = [&](bool has, const char* name) {
    if (has) out += (out.empty() ? "" : ", ") + std::string(name);
  };
  add(p.AsFilter() != nullptr, "filter");
  add(p.AsScorer() != nullptr, "scorer");
  add(p.AsPicker() != nullptr, "picker");
  add(p.AsProfileHandler() != nullptr, "profile handler");
  add(p.AsSaturationDetector() != nullptr, "saturation detector");
  add(p.AsDataProducer() != nullptr, "data producer");
  add(p.AsRequestObserver() != nullptr, "request observer");
  add(p.AsAdmitter() != nullptr, "admitter");
  add(p.AsRequestHeaderProcessor() != nullptr, "request-header processor");
  add(p.AsScreener() != nullptr, "screener");
  add(p.AsRequestHeaderSource() != nullptr, "request-header source");
  add(plugins::AsDecider(&p) != nullptr, "decider");  // asked by disagg-profile-handler
  return out.empty() ? "-" : out;
}

std::string Cell(std::string s) {
  while (!s.empty() && s.front() == ' ') s.erase(0, 1);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  if (s.size() >= 2 && s.front() == '`' && s.back() == '`') s = s.substr(1, s.size() - 2);
  return s;
}

TEST(PluginIndexTest, DocsTableEqualsTheRegistry) {
  std::ifstream in(std::string(EPP_SOURCE_DIR) + "/docs/scheduling.md");
  ASSERT_TRUE(in) << "docs/scheduling.md";
  std::map<std::string, std::pair<std::string, std::string>> documented;  // type -> (points, reads)
  std::string line;
  bool in_index = false;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) in_index = line == "## Plugin index";
    if (!in_index || line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    std::string cell;
    while (std::getline(ss, cell, '|')) cells.push_back(Cell(cell));
    ASSERT_GE(cells.size(), 3u) << line;
    EXPECT_TRUE(documented.emplace(cells[0], std::make_pair(cells[1], cells[2])).second) << "listed twice: " << cells[0];
  }
  const PluginRegistry registry = BuiltinRegistry();
  SeededRng rng(1);
  for (const std::string& type : registry.Types()) {
    SCOPED_TRACE(type);
    auto p = registry.Create(type, type, MinimalParams(type), PluginContext{&SteadyClock::Get(), &rng});
    ASSERT_TRUE(p.ok()) << p.status();
    const std::string reads = (*p)->Consumes().empty() ? "-" : (*p)->Consumes().ToString();
    auto it = documented.find(type);
    if (it == documented.end()) {
      ADD_FAILURE() << "not in the plugin index; its row: | `" << type << "` | " << Points(**p) << " | " << reads << " |";
      continue;
    }
    EXPECT_EQ(it->second.first, Points(**p));
    EXPECT_EQ(it->second.second, reads);
    documented.erase(it);
  }
  for (const auto& [type, _] : documented) ADD_FAILURE() << "documented but not registered: " << type;
}

TEST(PluginIndexTest, MissingInputsOverAMappingAndOverEndpoints) {
  auto config = ParseConfig(
      "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
      "- type: lora-affinity-scorer\n- type: queue-scorer\n- type: token-load-scorer\n",
      "c.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  auto s = BuildScheduler(*config, BuiltinRegistry());
  ASSERT_TRUE(s.ok()) << s.status();
  // SGLang exposes no LoRA metric; vLLM does. In-flight load is epp's own: never missing.
  auto sglang = (*s)->MissingInputs(*MetricMapping::BuiltIn("sglang"));
  ASSERT_EQ(sglang.size(), 1u);
  EXPECT_EQ(sglang[0].plugin, "lora-affinity-scorer");
  EXPECT_EQ(sglang[0].input, PluginInput::kLora);
  EXPECT_EQ(sglang[0].ToString(),
            "plugin 'lora-affinity-scorer' (lora-affinity-scorer) reads lora, but engine sglang has no metric for lora: "
            "it cannot use it");
  EXPECT_TRUE((*s)->MissingInputs(*MetricMapping::BuiltIn("vllm")).empty());

  Endpoint a, b;
  a.address = "10.0.0.1:8000";
  b.address = "10.0.0.2:8000";
  a.metrics.waiting_queue_size = 2;
  std::vector<Endpoint> endpoints = {a, b};
  auto over = (*s)->MissingInputs(endpoints);
  std::vector<std::string> what;
  for (const MissingInput& m : over) what.push_back(m.plugin + ":" + std::string(PluginInputName(m.input)) + ":" + m.why);
  // One endpoint reporting the queue is enough; neither reports LoRA, nor what the default
  // saturation detector reads besides the queue.
  EXPECT_EQ(what, (std::vector<std::string>{"lora-affinity-scorer:lora:none of the 2 endpoints reported lora",
                                            "utilization-detector:kv_cache_usage:none of the 2 endpoints reported "
                                            "kv_cache_usage"}));
  EXPECT_TRUE((*s)->MissingInputs(std::span<const Endpoint>()).empty());
}

}  // namespace
}  // namespace epp
