#include "epp/runtime/endpoints.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "epp/plugin.h"
#include "epp/tools/sim.h"
#include "testing/test_server.h"

namespace epp {
namespace {

using epp::testing::ClosedPort;
using epp::testing::TestServer;

const std::string kDataDir = std::string(EPP_SOURCE_DIR) + "/tests/data/endpoints";
const std::string kVllmProm = kDataDir + "/metrics/vllm.prom";
const std::string kSglangProm = kDataDir + "/metrics/sglang.prom";

constexpr const char* kVllmText =
    "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 1\n"
    "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 2\n"
    "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.5\n";
constexpr const char* kSglangText =
    "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs 6\n"
    "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 3\n"
    "# TYPE sglang:token_usage gauge\nsglang:token_usage 0.75\n";

EndpointSpec Spec(std::string address, std::string metrics, std::string engine = "") {
  EndpointSpec s;
  s.address = std::move(address);
  s.metrics = std::move(metrics);
  s.engine = std::move(engine);
  return s;
}

// The values metrics/vllm.prom was written with.
void ExpectVllmFileMetrics(const EndpointMetrics& m) {
  EXPECT_EQ(m.waiting_queue_size, 5.0);  // 4 + 1 over two models
  EXPECT_EQ(m.running_requests, 9.0);    // 7 + 2
  ASSERT_TRUE(m.kv_cache_usage.has_value());
  EXPECT_NEAR(*m.kv_cache_usage, 0.625, 1e-12);
  ASSERT_TRUE(m.lora.has_value());
  EXPECT_EQ(m.lora->max_lora, 2);
  EXPECT_EQ(m.lora->running, (std::vector<std::string>{"adapter-x", "adapter-y"}));  // newest series
  EXPECT_EQ(m.lora->waiting, (std::vector<std::string>{"adapter-z"}));
  EXPECT_EQ(m.cache_block_size, 32);
  EXPECT_EQ(m.cache_num_blocks, 5000);
}

void ExpectSglangFileMetrics(const EndpointMetrics& m) {
  EXPECT_EQ(m.waiting_queue_size, 2.0);  // 2 + 0 over two ranks
  EXPECT_EQ(m.running_requests, 11.0);   // 5 + 6
  ASSERT_TRUE(m.kv_cache_usage.has_value());
  EXPECT_NEAR(*m.kv_cache_usage, 0.25, 1e-12);  // the larger rank
  EXPECT_FALSE(m.lora.has_value());
}

// ---- ValidateEndpointAddress ---------------------------------------------------------------

TEST(ValidateEndpointAddressTest, AcceptsIpv4Ipv6AndHostNames) {
  for (const char* a : {"10.0.0.1:8000", "127.0.0.1:1", "[::1]:8000", "[fd00::3]:65535", "localhost:8000",
                        "pod-4.vllm.default.svc:8000", "a:1", "[2001:db8::1]:443"}) {
    SCOPED_TRACE(a);
    EXPECT_TRUE(ValidateEndpointAddress(a).ok()) << ValidateEndpointAddress(a);
  }
}

TEST(ValidateEndpointAddressTest, RejectsBadAddressesWithReason) {
  struct Case {
    const char* address;
    const char* message;
  };
  const Case cases[] = {
      {"", "address is empty"},
      {"10.0.0.1", "'10.0.0.1' has no port"},
      {"10.0.0.1:", "'10.0.0.1:' has no port"},
      {"10.0.0.1:0", "'10.0.0.1:0' has port 0; expected 1..65535"},
      {"10.0.0.1:70000", "'10.0.0.1:70000' has port 70000; expected 1..65535"},
      {"10.0.0.1:65536", "has port 65536; expected 1..65535"},
      {"10.0.0.1:1234567", "has port 1234567; expected 1..65535"},
      {"10.0.0.1:http", "has a non-numeric port 'http'"},
      {"10.0.0.1:-1", "has a non-numeric port '-1'"},
      {"10.0.0.1:08000", "has a port with a leading zero"},
      {"::1:8000", "write an IPv6 address in brackets, as in '[::1]:8000'"},
      {"[::1]", "'[::1]' has no port"},
      {"[::1]:", "'[::1]:' has no port"},
      {"[::1]8000", "expected ':PORT' after ']'"},
      {"[::1:8000", "has no closing ']'"},
      {"[::g]:80", "has an invalid IPv6 address '::g'"},
      {"[10.0.0.1]:80", "has an invalid IPv6 address '10.0.0.1'"},
      {"256.0.0.1:80", "has an invalid IPv4 address '256.0.0.1'"},
      {"1.2.3:80", "has an invalid IPv4 address '1.2.3'"},
      {"bad_host:80", "has an invalid host name 'bad_host'"},
      {"-pod:80", "has an invalid host name '-pod'"},
      {"a..b:80", "has an invalid host name 'a..b'"},
      {":8000", "':8000' has no host"},
      {"10.0.0.1 :80", "contains whitespace"},
      {"http://10.0.0.1:80", "write an IPv6 address in brackets"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.address);
    absl::Status s = ValidateEndpointAddress(c.address);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(c.message), absl::string_view::npos) << s;
  }
}

// ---- ParseEndpointFlag ---------------------------------------------------------------------

TEST(ValidateEndpointMetricsTest, NamesTheFieldAndTheValue) {
  EXPECT_TRUE(ValidateEndpointMetrics(EndpointMetrics{}).ok()) << "every field absent is valid";
  EndpointMetrics good;
  good.waiting_queue_size = 0;
  good.running_requests = 12.5;
  good.kv_cache_usage = 1.0;
  good.cache_block_size = 16;
  good.cache_num_blocks = 0;
  good.lora = LoraInfo{2, {"a"}, {}};
  EXPECT_TRUE(ValidateEndpointMetrics(good).ok());

  struct Case {
    void (*mutate)(EndpointMetrics&);
    std::string error;
  } cases[] = {
      {[](EndpointMetrics& m) { m.kv_cache_usage = 44; }, "metrics.kv_cache_usage: must be in [0, 1], got 44"},
      {[](EndpointMetrics& m) { m.kv_cache_usage = std::nan(""); }, "metrics.kv_cache_usage: must be in [0, 1], got nan"},
      {[](EndpointMetrics& m) { m.waiting_queue_size = -1; }, "metrics.waiting_queue_size: must be a finite number >= 0, got -1"},
      {[](EndpointMetrics& m) { m.running_requests = HUGE_VAL; }, "metrics.running_requests: must be a finite number >= 0, got inf"},
      {[](EndpointMetrics& m) { m.cache_block_size = -16; }, "metrics.cache_block_size: must be >= 0, got -16"},
      {[](EndpointMetrics& m) { m.cache_num_blocks = -1; }, "metrics.cache_num_blocks: must be >= 0, got -1"},
      {[](EndpointMetrics& m) { m.lora->max_lora = -2; }, "metrics.lora.max_lora: must be >= 0, got -2"},
      {[](EndpointMetrics& m) { m.lora->waiting = {"x", ""}; }, "metrics.lora.waiting[1]: an adapter name must not be empty"},
  };
  for (const Case& c : cases) {
    EndpointMetrics m = good;
    c.mutate(m);
    const absl::Status s = ValidateEndpointMetrics(m);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.error;
    EXPECT_EQ(s.message(), c.error);
  }
}

TEST(MetricsAgeTest, RelativeTimesBecomeClockTimesAndBack) {
  std::vector<Endpoint> eps(3);
  eps[0].metrics_time_us = 0;           // read at the pick
  eps[1].metrics_time_us = -5'000'000;  // five seconds before it
  // eps[2]: never read
  ShiftMetricsTimes(eps, 100'000'000);
  EXPECT_EQ(eps[0].metrics_time_us, 100'000'000);
  EXPECT_EQ(eps[1].metrics_time_us, 95'000'000);
  EXPECT_FALSE(eps[2].metrics_time_us.has_value());
  EXPECT_EQ(MetricsAgeMicros(eps[1], 100'000'000), 5'000'000);
  EXPECT_FALSE(MetricsAgeMicros(eps[2], 100'000'000).has_value());
  EXPECT_FALSE(MetricsStale(eps[1], 100'000'000, 5'000'000)) << "exactly at the threshold is fresh";
  EXPECT_TRUE(MetricsStale(eps[1], 100'000'001, 5'000'000));
  EXPECT_TRUE(MetricsStale(eps[2], 100'000'000, 1'000'000'000)) << "never read is stale";
  ShiftMetricsTimes(eps, -100'000'000);
  EXPECT_EQ(eps[1].metrics_time_us, -5'000'000);
}

TEST(ParseEndpointFlagTest, AddressAloneScrapesTheDefaultUrl) {
  auto spec = ParseEndpointFlag("10.0.0.1:8000", 1);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->address, "10.0.0.1:8000");
  EXPECT_EQ(spec->metrics, "");
  EXPECT_EQ(spec->engine, "");
  EXPECT_TRUE(spec->labels.empty());
  EXPECT_EQ(spec->origin, "--endpoint #1");
}

TEST(ParseEndpointFlagTest, MetricsAfterTheFirstEquals) {
  struct Case {
    const char* flag;
    const char* address;
    const char* metrics;
  };
  const Case cases[] = {
      {"10.0.0.1:8000=m/a.prom", "10.0.0.1:8000", "m/a.prom"},
      {"10.0.0.1:8000=none", "10.0.0.1:8000", "none"},
      {"[::1]:8000=http://127.0.0.1:9/metrics?a=b", "[::1]:8000", "http://127.0.0.1:9/metrics?a=b"},
      {"host-1:8000=https://h/m", "host-1:8000", "https://h/m"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.flag);
    auto spec = ParseEndpointFlag(c.flag, 2);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->address, c.address);
    EXPECT_EQ(spec->metrics, c.metrics);
    EXPECT_EQ(spec->origin, "--endpoint #2");
  }
}

TEST(ParseEndpointFlagTest, ErrorsNameTheFlag) {
  struct Case {
    const char* flag;
    const char* message;
  };
  const Case cases[] = {
      {"10.0.0.1=m.prom", "--endpoint #3: '10.0.0.1' has no port"},
      {"10.0.0.1:0", "--endpoint #3: '10.0.0.1:0' has port 0; expected 1..65535"},
      {"10.0.0.1:8000=", "--endpoint #3: expected METRICS (a file, an http(s) URL or 'none') after '='"},
      {"10.0.0.1:8000=ftp://h/m", "--endpoint #3: metrics: 'ftp://h/m': only http:// and https:// URLs"},
      {"", "--endpoint #3: address is empty"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.flag);
    auto spec = ParseEndpointFlag(c.flag, 3);
    ASSERT_FALSE(spec.ok());
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(spec.status().message().find(c.message), absl::string_view::npos) << spec.status();
  }
}

// ---- ValidateEndpointSpecs -----------------------------------------------------------------

TEST(ValidateEndpointSpecsTest, DuplicateAcrossFlagsNamesBoth) {
  std::vector<EndpointSpec> specs = {*ParseEndpointFlag("10.0.0.1:8000", 1),
                                     *ParseEndpointFlag("10.0.0.2:8000", 2),
                                     *ParseEndpointFlag("10.0.0.1:8000=none", 3)};
  absl::Status s = ValidateEndpointSpecs(specs);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--endpoint #3: address: duplicate address '10.0.0.1:8000' (first at --endpoint #1)");
}

TEST(ValidateEndpointSpecsTest, SpecsBuiltInCodeAreNamedByIndex) {
  std::vector<EndpointSpec> specs = {Spec("10.0.0.1:8000", "none"), Spec("10.0.0.2", "none")};
  absl::Status s = ValidateEndpointSpecs(specs);
  EXPECT_EQ(s.message(), "endpoints[1]: address: '10.0.0.2' has no port");
  specs[1] = Spec("10.0.0.2:8000", "gopher://x");
  EXPECT_NE(ValidateEndpointSpecs(specs).message().find("endpoints[1]: metrics: 'gopher://x'"), absl::string_view::npos);
  specs[1] = Spec("10.0.0.2:8000", "none");
  specs[1].labels[""] = "x";
  EXPECT_EQ(ValidateEndpointSpecs(specs).message(), "endpoints[1]: labels: empty label name");
  specs[1].labels.clear();
  EXPECT_TRUE(ValidateEndpointSpecs(specs).ok());
}

// ---- Endpoints files -----------------------------------------------------------------------

TEST(LoadEndpointsFileTest, YamlWithLabelsEnginesAndRelativePaths) {
  const std::string path = kDataDir + "/pool.yaml";
  auto specs = LoadEndpointsFile(path);
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 4u);
  const auto& s = *specs;
  EXPECT_EQ(s[0].address, "10.0.0.1:8000");
  EXPECT_EQ(s[0].metrics, kVllmProm);  // resolved against the file's directory
  EXPECT_EQ(s[0].labels, (std::map<std::string, std::string>{{"role", "decode"}, {"zone", "a"}}));
  EXPECT_EQ(s[0].engine, "");
  EXPECT_EQ(s[0].origin, path + ":3");
  EXPECT_EQ(s[1].address, "10.0.0.2:8000");
  EXPECT_EQ(s[1].metrics, kSglangProm);
  EXPECT_EQ(s[1].engine, "auto");
  EXPECT_EQ(s[1].origin, path + ":8");
  EXPECT_EQ(s[2].address, "[fd00::3]:8000");
  EXPECT_EQ(s[2].engine, "vllm");
  EXPECT_EQ(s[3].address, "pod-4.vllm.default.svc:8000");
  EXPECT_EQ(s[3].metrics, "none");  // not a path
  EXPECT_EQ(s[3].labels, (std::map<std::string, std::string>{{"role", "prefill"}}));
}

TEST(LoadEndpointsFileTest, Json) {
  auto specs = LoadEndpointsFile(kDataDir + "/pool.json");
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 3u);
  EXPECT_EQ((*specs)[0].address, "10.0.1.1:8000");
  EXPECT_EQ((*specs)[0].metrics, kVllmProm);
  EXPECT_EQ((*specs)[0].labels.at("role"), "decode");
  EXPECT_EQ((*specs)[1].engine, "sglang");
  EXPECT_EQ((*specs)[1].origin, kDataDir + "/pool.json:4");
  EXPECT_EQ((*specs)[2].metrics, "none");
}

TEST(LoadEndpointsFileTest, BareListAndAddressShorthand) {
  auto specs = LoadEndpointsFile(kDataDir + "/bare_list.yaml");
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 2u);
  EXPECT_EQ((*specs)[0].address, "10.0.2.1:8000");
  EXPECT_EQ((*specs)[0].metrics, "");
  EXPECT_EQ((*specs)[0].origin, kDataDir + "/bare_list.yaml:2");
  EXPECT_EQ((*specs)[1].address, "10.0.2.2:8000");
  EXPECT_EQ((*specs)[1].metrics, "none");
}

TEST(LoadEndpointsFileTest, UnknownKeyNamesFileLineAndPath) {
  const std::string path = kDataDir + "/invalid_unknown_key.yaml";
  auto specs = LoadEndpointsFile(path);
  ASSERT_FALSE(specs.ok());
  EXPECT_EQ(specs.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(specs.status().message(),
            path + ":5: endpoints[1].metric: unknown key (expected address, metrics, labels, engine, kvEvents, kvEventsReplay, capacity, tls or metricsStalenessAllowance)");
}

TEST(LoadEndpointsFileTest, MissingFileIsNotFound) {
  auto specs = LoadEndpointsFile(kDataDir + "/no-such-pool.yaml");
  ASSERT_FALSE(specs.ok());
  EXPECT_EQ(specs.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(specs.status().message(),
            "cannot read endpoints file '" + kDataDir + "/no-such-pool.yaml': No such file or directory");
}

TEST(ParseEndpointsYamlTest, RelativePathsStayWhenBaseDirIsEmpty) {
  auto specs = ParseEndpointsYaml("endpoints:\n  - {address: 'a:1', metrics: m/a.prom}\n"
                                  "  - {address: 'b:2', metrics: /abs/b.prom}\n"
                                  "  - {address: 'c:3', metrics: 'http://c:3/metrics'}\n",
                                  "t.yaml", "");
  ASSERT_TRUE(specs.ok()) << specs.status();
  EXPECT_EQ((*specs)[0].metrics, "m/a.prom");
  EXPECT_EQ((*specs)[1].metrics, "/abs/b.prom");
  EXPECT_EQ((*specs)[2].metrics, "http://c:3/metrics");
  auto based = ParseEndpointsYaml("- {address: 'a:1', metrics: ../m/a.prom}\n- {address: 'b:2', metrics: /abs/b.prom}\n",
                                  "t.yaml", "/srv/pool");
  ASSERT_TRUE(based.ok()) << based.status();
  EXPECT_EQ((*based)[0].metrics, "/srv/m/a.prom");
  EXPECT_EQ((*based)[1].metrics, "/abs/b.prom");
}

TEST(ParseEndpointsYamlTest, QuotedIpv6AndEmptyLabels) {
  auto specs = ParseEndpointsYaml("endpoints:\n  - address: \"[::1]:8000\"\n    labels:\n  - '[fd00::1]:9000'\n",
                                  "t.yaml", "");
  ASSERT_TRUE(specs.ok()) << specs.status();
  EXPECT_EQ((*specs)[0].address, "[::1]:8000");
  EXPECT_TRUE((*specs)[0].labels.empty());
  EXPECT_EQ((*specs)[1].address, "[fd00::1]:9000");
}

TEST(ParseEndpointsYamlTest, StrictErrorsCarryLineAndPath) {
  struct Case {
    const char* name;
    const char* text;
    const char* message;  // exact unless `substring`
    bool substring = false;
  };
  const Case cases[] = {
      {"unknown top key", "pool:\n  - 10.0.0.1:8000\n", "t.yaml:1: pool: unknown key (expected 'endpoints')"},
      {"duplicate top key", "endpoints: ['a:1']\nendpoints: ['b:2']\n", "t.yaml:2: endpoints: duplicate key"},
      {"unknown entry key", "endpoints:\n  - address: 10.0.0.1:8000\n    engien: vllm\n",
       "t.yaml:3: endpoints[0].engien: unknown key (expected address, metrics, labels, engine, kvEvents, kvEventsReplay, capacity, tls or metricsStalenessAllowance)"},
      {"missing address", "endpoints:\n  - metrics: none\n", "t.yaml:2: endpoints[0]: missing 'address'"},
      {"no port",
       "endpoints:\n  - address: 10.0.0.1:8000\n  - address: 10.0.0.3:8000\n\n  - address: 10.0.0.1\n",
       "t.yaml:5: endpoints[2].address: '10.0.0.1' has no port"},
      {"port 0", "- address: 10.0.0.1:0\n", "t.yaml:1: endpoints[0].address: '10.0.0.1:0' has port 0; expected 1..65535"},
      {"port 70000", "- 10.0.0.1:70000\n", "t.yaml:1: endpoints[0].address: '10.0.0.1:70000' has port 70000; expected 1..65535"},
      {"duplicate address", "endpoints:\n  - address: 10.0.0.1:8000\n  - address: 10.0.0.2:8000\n  - 10.0.0.1:8000\n",
       "t.yaml:4: endpoints[2].address: duplicate address '10.0.0.1:8000' (first at t.yaml:2, endpoints[0])"},
      {"duplicate entry key", "- address: 10.0.0.1:8000\n  address: 10.0.0.2:8000\n",
       "t.yaml:2: endpoints[0].address: duplicate key"},
      {"duplicate label", "- address: a:1\n  labels: {x: 1, x: 2}\n", "t.yaml:2: endpoints[0].labels.x: duplicate key"},
      {"labels not a map", "- address: a:1\n  labels: [x]\n",
       "t.yaml:2: endpoints[0].labels: expected a map of label names to values"},
      {"label value null", "- address: a:1\n  labels:\n    role:\n",
       "t.yaml:3: endpoints[0].labels.role: expected a string"},
      {"address null", "- address:\n  metrics: none\n", "t.yaml:1: endpoints[0].address: expected a string"},
      {"address a map", "- address: {host: a}\n", "t.yaml:1: endpoints[0].address: expected a string"},
      {"unquoted ipv6 list", "- address: [::1]\n",
       "t.yaml:1: endpoints[0].address: expected a string (quote IPv6 addresses: \"[::1]:8000\")"},
      {"metrics scheme", "- address: a:1\n  metrics: ftp://h/m\n",
       "t.yaml:2: endpoints[0].metrics: 'ftp://h/m': only http:// and https:// URLs, file paths or 'none'"},
      {"engine a list", "- address: a:1\n  engine: [vllm]\n", "t.yaml:2: endpoints[0].engine: expected a string"},
      {"entry a list", "endpoints:\n  - [a:1]\n", "t.yaml:2: endpoints[0]: expected a map or an address string"},
      {"self alias", "endpoints: &a [*a]\n", "t.yaml:1: endpoints[0]: expected a map or an address string"},
      {"null list", "endpoints:\n", "t.yaml:1: endpoints: expected a list of endpoints"},
      {"scalar root", "10.0.0.1:8000\n", "t.yaml:1: expected a map with 'endpoints' or a list of endpoints"},
      {"empty text", "", "t.yaml: expected a map with 'endpoints' or a list of endpoints"},
      {"syntax error", "endpoints: [\n", "t.yaml:1:12: this '[' is never closed", true},
      {"json unknown key", "{\"endpoints\": [\n  {\"address\": \"a:1\",\n   \"bogus\": 1}]}\n",
       "t.yaml:3: endpoints[0].bogus: unknown key (expected address, metrics, labels, engine, kvEvents, kvEventsReplay, capacity, tls or metricsStalenessAllowance)"},
      {"json bad port", "{\"endpoints\": [{\"address\": \"a:1\"},\n {\"address\": \"b:99999\"}]}",
       "t.yaml:2: endpoints[1].address: 'b:99999' has port 99999; expected 1..65535"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto specs = ParseEndpointsYaml(c.text, "t.yaml", "");
    ASSERT_FALSE(specs.ok());
    EXPECT_EQ(specs.status().code(), absl::StatusCode::kInvalidArgument);
    if (c.substring) {
      EXPECT_EQ(specs.status().message().rfind(c.message, 0), 0u) << specs.status();
    } else {
      EXPECT_EQ(std::string(specs.status().message()), c.message);
    }
  }
}

TEST(ParseEndpointsYamlTest, EmptyListIsAPoolWithNoEndpointsYet) {
  for (const char* text : {"endpoints: []\n", "[]\n"}) {
    auto specs = ParseEndpointsYaml(text, "t.yaml", "");
    ASSERT_TRUE(specs.ok()) << text << ": " << specs.status();
    EXPECT_TRUE(specs->empty());
  }
}

TEST(ParseEndpointsYamlTest, AliasExpansionIsBoundedAndNamed) {
  std::string text = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (char level = 'b'; level <= 'g'; ++level) {
    text += std::string(1, level) + ": &" + level + " [";
    for (int i = 0; i < 10; ++i) text += std::string(i ? ", " : "") + "*" + static_cast<char>(level - 1);
    text += "]\n";
  }
  text += "endpoints: [*g]\n";
  auto specs = ParseEndpointsYaml(text, "t.yaml", "");
  ASSERT_FALSE(specs.ok());
  EXPECT_NE(std::string(specs.status().message()).find("expands to more than 250000 nodes"), std::string::npos)
      << specs.status();
}

// ---- ResolveEndpoints over files -----------------------------------------------------------

TEST(ResolveEndpointsTest, ResolvesPoolFile) {
  auto specs = LoadEndpointsFile(kDataDir + "/pool.yaml");
  ASSERT_TRUE(specs.ok()) << specs.status();
  ManualClock clock(1'000'000);
  ResolveOptions options;
  options.clock = &clock;
  auto eps = ResolveEndpoints(*specs, options);
  ASSERT_TRUE(eps.ok()) << eps.status();
  ASSERT_EQ(eps->size(), 4u);
  const auto& e = *eps;

  EXPECT_EQ(e[0].address, "10.0.0.1:8000");
  EXPECT_EQ(e[0].labels, (*specs)[0].labels);
  EXPECT_EQ(e[0].engine, "vllm");  // auto-detected
  EXPECT_EQ(e[0].metrics_time_us, 1'000'000);
  EXPECT_EQ(e[0].metrics_error, "");
  ExpectVllmFileMetrics(e[0].metrics);

  EXPECT_EQ(e[1].engine, "sglang");  // "auto" written out
  EXPECT_EQ(e[1].metrics_time_us, 1'000'000);
  EXPECT_EQ(e[1].metrics_error, "");
  ExpectSglangFileMetrics(e[1].metrics);

  EXPECT_EQ(e[2].address, "[fd00::3]:8000");
  EXPECT_EQ(e[2].engine, "vllm");  // explicit
  ExpectVllmFileMetrics(e[2].metrics);

  EXPECT_EQ(e[3].address, "pod-4.vllm.default.svc:8000");
  EXPECT_EQ(e[3].engine, "");
  EXPECT_EQ(e[3].metrics, EndpointMetrics{});  // "none": nothing read, nothing wrong
  EXPECT_FALSE(e[3].metrics_time_us.has_value());
  EXPECT_EQ(e[3].metrics_error, "");
  EXPECT_EQ(e[3].labels.at("role"), "prefill");
}

TEST(ResolveEndpointsTest, EmptySpecListGivesNoEndpoints) {
  auto eps = ResolveEndpoints({}, {});
  ASSERT_TRUE(eps.ok()) << eps.status();
  EXPECT_TRUE(eps->empty());
}

TEST(ResolveEndpointsTest, DefaultClockStampsTime) {
  std::vector<EndpointSpec> specs = {Spec("10.0.0.1:8000", kVllmProm)};
  auto eps = ResolveEndpoints(specs, {});
  ASSERT_TRUE(eps.ok()) << eps.status();
  EXPECT_TRUE((*eps)[0].metrics_time_us.has_value());
}

TEST(ResolveEndpointsTest, EngineFromSpecOverridesTheDefaultEngine) {
  std::vector<EndpointSpec> specs = {Spec("10.0.0.1:8000", kVllmProm),          // inherits check.engine
                                     Spec("10.0.0.2:8000", kSglangProm, "auto"),  // detects
                                     Spec("10.0.0.3:8000", "none")};              // configured engine, no metrics
  ResolveOptions options;
  options.scrape.engine = "vllm";
  auto eps = ResolveEndpoints(specs, options);
  ASSERT_TRUE(eps.ok()) << eps.status();
  EXPECT_EQ((*eps)[0].engine, "vllm");
  ExpectVllmFileMetrics((*eps)[0].metrics);
  EXPECT_EQ((*eps)[1].engine, "sglang");
  ExpectSglangFileMetrics((*eps)[1].metrics);
  EXPECT_EQ((*eps)[2].engine, "vllm");
}

TEST(ResolveEndpointsTest, WrongExplicitEngineReportsFailedExtraction) {
  std::vector<EndpointSpec> specs = {Spec("10.0.0.1:8000", kVllmProm, "sglang")};
  ManualClock clock(5);
  ResolveOptions options;
  options.clock = &clock;
  auto eps = ResolveEndpoints(specs, options);
  ASSERT_TRUE(eps.ok()) << eps.status();
  const Endpoint& e = (*eps)[0];
  EXPECT_EQ(e.engine, "sglang");
  EXPECT_EQ(e.metrics_time_us, 5);  // the scrape happened; its values are just absent
  EXPECT_FALSE(e.metrics.waiting_queue_size.has_value());
  EXPECT_EQ(e.metrics_error.rfind("endpoints[0] (10.0.0.1:8000): metrics.queue: ", 0), 0u) << e.metrics_error;
  EXPECT_NE(e.metrics_error.find("metrics.kv_cache: "), std::string::npos) << e.metrics_error;

  options.fail_on_metrics_error = true;
  auto strict = ResolveEndpoints(specs, options);
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(strict.status().message(), e.metrics_error);
}

TEST(ResolveEndpointsTest, UnknownEngineIsAConfigurationError) {
  std::vector<EndpointSpec> specs = {*ParseEndpointFlag("10.0.0.1:8000=none", 1)};
  specs[0].engine = "tgi";
  auto eps = ResolveEndpoints(specs, {});  // fails even without fail_on_metrics_error
  ASSERT_FALSE(eps.ok());
  EXPECT_EQ(eps.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(eps.status().message().rfind("--endpoint #1: engine: ", 0), 0u) << eps.status();
  EXPECT_NE(eps.status().message().find("vllm"), absl::string_view::npos) << eps.status();

  specs[0].engine = "";
  ResolveOptions options;
  options.scrape.engine = "tgi";
  eps = ResolveEndpoints(specs, options);
  ASSERT_FALSE(eps.ok());
  EXPECT_EQ(eps.status().message().rfind("engine 'tgi': ", 0), 0u) << eps.status();
}

TEST(ResolveEndpointsTest, InvalidInputsFailBeforeAnyIo) {
  std::vector<EndpointSpec> dup = {Spec("10.0.0.1:8000", "none"), Spec("10.0.0.1:8000", "none")};
  auto eps = ResolveEndpoints(dup, {});
  EXPECT_EQ(eps.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(eps.status().message(), "endpoints[1]: address: duplicate address '10.0.0.1:8000' (first at endpoints[0])");

  std::vector<EndpointSpec> one = {Spec("10.0.0.1:8000", "none")};
  ResolveOptions options;
  options.scrape.timeout = std::chrono::milliseconds(0);
  EXPECT_EQ(ResolveEndpoints(one, options).status().code(), absl::StatusCode::kInvalidArgument);
  options = {};
  options.scrape.metric_overrides = {{"queue-length", "x"}};
  EXPECT_EQ(ResolveEndpoints(one, options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ResolveEndpointsTest, CustomMappingByNameAndByDetection) {
  MetricMapping acme;
  acme.engine = "acme";
  acme.queue = {*MetricSpec::Parse("acme_queue_depth")};
  acme.running = {*MetricSpec::Parse("acme_active_requests")};
  acme.kv_usage = {*MetricSpec::Parse("acme_kv_fraction")};
  ResolveOptions options;
  options.scrape.custom_mappings = {acme};
  const std::string custom = kDataDir + "/metrics/custom.prom";
  std::vector<EndpointSpec> specs = {Spec("10.0.0.1:8000", custom, "acme"), Spec("10.0.0.2:8000", custom)};
  auto eps = ResolveEndpoints(specs, options);
  ASSERT_TRUE(eps.ok()) << eps.status();
  for (const Endpoint& e : *eps) {
    SCOPED_TRACE(e.address);
    EXPECT_EQ(e.engine, "acme");
    EXPECT_EQ(e.metrics.waiting_queue_size, 3.0);
    EXPECT_EQ(e.metrics.running_requests, 1.0);
    EXPECT_EQ(e.metrics.kv_cache_usage, 0.5);
    EXPECT_EQ(e.metrics_error, "");
  }
}

TEST(ResolveEndpointsTest, MetricOverridesApplyToTheChosenMapping) {
  ResolveOptions options;
  options.scrape.metric_overrides = {{"queue", "vllm:num_requests_waiting{model_name=base-b}"}};
  std::vector<EndpointSpec> specs = {Spec("10.0.0.1:8000", kVllmProm)};
  auto eps = ResolveEndpoints(specs, options);
  ASSERT_TRUE(eps.ok()) << eps.status();
  EXPECT_EQ((*eps)[0].metrics.waiting_queue_size, 1.0);  // only base-b's series
}

TEST(ResolveEndpointsTest, MissingFileKeepsErrorOrFails) {
  auto specs = LoadEndpointsFile(kDataDir + "/missing_metrics.yaml");
  ASSERT_TRUE(specs.ok()) << specs.status();
  const std::string missing = kDataDir + "/metrics/does-not-exist.prom";
  const std::string expected =
      "endpoints[1] (10.0.3.2:8000): metrics file '" + missing + "' cannot be read: No such file or directory";
  ManualClock clock(42);
  ResolveOptions options;
  options.clock = &clock;
  auto eps = ResolveEndpoints(*specs, options);
  ASSERT_TRUE(eps.ok()) << eps.status();
  EXPECT_EQ((*eps)[0].metrics_time_us, 42);
  EXPECT_EQ((*eps)[0].metrics_error, "");
  ExpectVllmFileMetrics((*eps)[0].metrics);
  EXPECT_EQ((*eps)[1].metrics_error, expected);
  EXPECT_FALSE((*eps)[1].metrics_time_us.has_value());  // counts as stale
  EXPECT_EQ((*eps)[1].metrics, EndpointMetrics{});
  EXPECT_EQ((*eps)[1].engine, "");

  options.fail_on_metrics_error = true;
  auto strict = ResolveEndpoints(*specs, options);
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(strict.status().message(), expected);
}

TEST(ResolveEndpointsTest, DirectoryAsMetricsFileIsAnError) {
  std::vector<EndpointSpec> specs = {Spec("10.0.0.1:8000", kDataDir + "/metrics")};
  auto eps = ResolveEndpoints(specs, {});
  ASSERT_TRUE(eps.ok()) << eps.status();
  EXPECT_NE((*eps)[0].metrics_error.find("cannot be read: Is a directory"), std::string::npos)
      << (*eps)[0].metrics_error;
}

TEST(ResolveEndpointsTest, NoKnownEngineIsAMetricsError) {
  const std::string path = kDataDir + "/metrics/unknown_engine.prom";
  std::vector<EndpointSpec> specs = {Spec("10.0.0.1:8000", path)};
  auto eps = ResolveEndpoints(specs, {});
  ASSERT_TRUE(eps.ok()) << eps.status();
  EXPECT_EQ((*eps)[0].metrics_error.rfind("endpoints[0] (10.0.0.1:8000): no known engine's metrics found", 0), 0u)
      << (*eps)[0].metrics_error;
  EXPECT_FALSE((*eps)[0].metrics_time_us.has_value());

  ResolveOptions options;
  options.fail_on_metrics_error = true;
  EXPECT_EQ(ResolveEndpoints(specs, options).status().code(), absl::StatusCode::kNotFound);
}

TEST(ResolveEndpointsTest, MalformedMetricsStrictAndLenient) {
  const std::string path = kDataDir + "/metrics/malformed.prom";
  std::vector<EndpointSpec> specs = {Spec("10.0.0.1:8000", path)};
  auto eps = ResolveEndpoints(specs, {});
  ASSERT_TRUE(eps.ok()) << eps.status();
  EXPECT_EQ((*eps)[0].metrics_error.rfind("endpoints[0] (10.0.0.1:8000): cannot parse metrics file '" + path +
                                              "': line 3",
                                          0),
            0u)
      << (*eps)[0].metrics_error;
  EXPECT_FALSE((*eps)[0].metrics_time_us.has_value());

  ResolveOptions lenient;
  lenient.scrape.lenient = true;
  eps = ResolveEndpoints(specs, lenient);
  ASSERT_TRUE(eps.ok()) << eps.status();
  EXPECT_EQ((*eps)[0].engine, "vllm");
  EXPECT_EQ((*eps)[0].metrics.waiting_queue_size, 1.0);
  EXPECT_EQ((*eps)[0].metrics.running_requests, 2.0);
  EXPECT_TRUE((*eps)[0].metrics_time_us.has_value());

  ResolveOptions strict;
  strict.fail_on_metrics_error = true;
  EXPECT_EQ(ResolveEndpoints(specs, strict).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ResolveEndpointsTest, FileLargerThanTheCapIsAnError) {
  ResolveOptions options;
  options.scrape.max_body_bytes = 64;
  std::vector<EndpointSpec> specs = {Spec("10.0.0.1:8000", kVllmProm)};
  auto eps = ResolveEndpoints(specs, options);
  ASSERT_TRUE(eps.ok()) << eps.status();
  EXPECT_NE((*eps)[0].metrics_error.find("larger than the cap of 64 bytes"), std::string::npos)
      << (*eps)[0].metrics_error;
}

// ---- ResolveEndpoints over HTTP (127.0.0.1 only) -------------------------------------------

TEST(ResolveEndpointsHttpTest, ScrapesDefaultAndExplicitUrls) {
  TestServer srv;
  std::mutex mu;
  std::vector<std::string> auth;
  srv.server().Get("/metrics", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    auth.push_back(req.get_header_value("Authorization"));
    res.set_content(kVllmText, "text/plain");
  });
  srv.server().Get("/sg/metrics", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kSglangText, "text/plain");
  });
  srv.Start();
  const std::string local = "127.0.0.1:" + std::to_string(srv.port());
  std::vector<EndpointSpec> specs = {Spec(local, ""), Spec("10.0.0.9:8000", srv.url() + "/sg/metrics")};
  ManualClock clock(77);
  ResolveOptions options;
  options.clock = &clock;
  options.scrape.bearer_token = "s3cret";
  options.scrape.timeout = std::chrono::milliseconds(5000);
  auto eps = ResolveEndpoints(specs, options);
  ASSERT_TRUE(eps.ok()) << eps.status();
  EXPECT_EQ((*eps)[0].engine, "vllm");
  EXPECT_EQ((*eps)[0].metrics.waiting_queue_size, 1.0);
  EXPECT_EQ((*eps)[0].metrics.kv_cache_usage, 0.5);
  EXPECT_EQ((*eps)[0].metrics_time_us, 77);
  EXPECT_EQ((*eps)[0].metrics_error, "");
  EXPECT_EQ((*eps)[1].engine, "sglang");
  EXPECT_EQ((*eps)[1].metrics.waiting_queue_size, 6.0);
  EXPECT_EQ((*eps)[1].metrics.kv_cache_usage, 0.75);
  EXPECT_EQ((*eps)[1].metrics_time_us, 77);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(auth, (std::vector<std::string>{"Bearer s3cret"}));
}

TEST(ResolveEndpointsHttpTest, MetricsPathOption) {
  TestServer srv;
  srv.server().Get("/custom/prom", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kSglangText, "text/plain");
  });
  srv.Start();
  std::vector<EndpointSpec> specs = {Spec("127.0.0.1:" + std::to_string(srv.port()), "")};
  ResolveOptions options;
  options.scrape.metrics_path = "custom/prom";  // normalised to /custom/prom
  options.scrape.timeout = std::chrono::milliseconds(5000);
  auto eps = ResolveEndpoints(specs, options);
  ASSERT_TRUE(eps.ok()) << eps.status();
  EXPECT_EQ((*eps)[0].engine, "sglang");
  EXPECT_EQ((*eps)[0].metrics_error, "");
}

TEST(ResolveEndpointsHttpTest, ConnectionRefused) {
  const int port = ClosedPort();
  const std::string address = "127.0.0.1:" + std::to_string(port);
  std::vector<EndpointSpec> specs = {Spec(address, ""), Spec("10.0.0.1:8000", kVllmProm)};
  ManualClock clock(9);
  ResolveOptions options;
  options.clock = &clock;
  options.scrape.timeout = std::chrono::milliseconds(3000);
  const auto start = std::chrono::steady_clock::now();
  auto eps = ResolveEndpoints(specs, options);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  ASSERT_TRUE(eps.ok()) << eps.status();
  const std::string prefix = "endpoints[0] (" + address + "): GET http://" + address + "/metrics: connection refused";
  EXPECT_EQ((*eps)[0].metrics_error.rfind(prefix, 0), 0u) << (*eps)[0].metrics_error;
  EXPECT_FALSE((*eps)[0].metrics_time_us.has_value());
  EXPECT_EQ((*eps)[1].metrics_time_us, 9);  // the other endpoint is unaffected

  options.fail_on_metrics_error = true;
  auto strict = ResolveEndpoints(specs, options);
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(strict.status().message().rfind(prefix, 0), 0u) << strict.status();
}

TEST(ResolveEndpointsHttpTest, NonSuccessStatusIsAnError) {
  TestServer srv;
  srv.server().Get("/metrics", [](const httplib::Request&, httplib::Response& res) {
    res.status = 503;
    res.set_content("warming up\n", "text/plain");
  });
  srv.Start();
  const std::string address = "127.0.0.1:" + std::to_string(srv.port());
  std::vector<EndpointSpec> specs = {Spec(address, "")};
  ResolveOptions options;
  options.scrape.timeout = std::chrono::milliseconds(5000);
  auto eps = ResolveEndpoints(specs, options);
  ASSERT_TRUE(eps.ok()) << eps.status();
  EXPECT_EQ((*eps)[0].metrics_error,
            "endpoints[0] (" + address + "): GET http://" + address + "/metrics: HTTP 503: warming up ");
  options.fail_on_metrics_error = true;
  EXPECT_EQ(ResolveEndpoints(specs, options).status().code(), absl::StatusCode::kUnavailable);
}

// Each handler waits (bounded) until both requests have arrived, so a sequential scraper would
// see the first one answer 503; concurrent scraping answers both with metrics.
TEST(ResolveEndpointsHttpTest, ScrapesConcurrently) {
  TestServer srv;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  srv.server().Get(R"(/m/(\d+))", [&](const httplib::Request&, httplib::Response& res) {
    std::unique_lock<std::mutex> lock(mu);
    ++arrived;
    cv.notify_all();
    if (!cv.wait_for(lock, std::chrono::seconds(2), [&] { return arrived >= 2; })) {
      res.status = 503;
      return;
    }
    res.set_content(kVllmText, "text/plain");
  });
  srv.Start();
  std::vector<EndpointSpec> specs = {Spec("10.0.0.1:8000", srv.url() + "/m/1"),
                                     Spec("10.0.0.2:8000", srv.url() + "/m/2")};
  ResolveOptions options;
  options.scrape.timeout = std::chrono::milliseconds(5000);
  auto eps = ResolveEndpoints(specs, options);
  ASSERT_TRUE(eps.ok()) << eps.status();
  for (const Endpoint& e : *eps) {
    SCOPED_TRACE(e.address);
    EXPECT_EQ(e.metrics_error, "");
    EXPECT_EQ(e.metrics.running_requests, 2.0);
  }
}

TEST(ResolveEndpointsHttpTest, SimulatorEndpointsAreDetected) {
  SimHttpOptions sim_options;
  sim_options.params.engine = "sglang";
  sim_options.threads = 4;
  auto sim = SimHttpServer::Start(sim_options);
  ASSERT_TRUE(sim.ok()) << sim.status();
  std::vector<EndpointSpec> specs = {Spec("127.0.0.1:" + std::to_string((*sim)->port()), "")};
  ResolveOptions options;
  options.scrape.timeout = std::chrono::milliseconds(5000);
  auto eps = ResolveEndpoints(specs, options);
  ASSERT_TRUE(eps.ok()) << eps.status();
  EXPECT_EQ((*eps)[0].engine, "sglang");
  EXPECT_EQ((*eps)[0].metrics.waiting_queue_size, 0.0);
  EXPECT_EQ((*eps)[0].metrics.running_requests, 0.0);
  EXPECT_EQ((*eps)[0].metrics.kv_cache_usage, 0.0);
  EXPECT_EQ((*eps)[0].metrics_error, "");
  (*sim)->Stop();
}

// ---- RefreshEndpointMetrics ----------------------------------------------------------------

class RefreshTest : public ::testing::Test {
 protected:
  void SetUp() override {
    srv_.server().Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      res.status = status_;
      res.set_content(text_, "text/plain");
    });
    srv_.Start();
    address_ = "127.0.0.1:" + std::to_string(srv_.port());
    options_.clock = &clock_;
    options_.scrape.timeout = std::chrono::milliseconds(5000);
  }
  void Serve(int status, std::string text) {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = status;
    text_ = std::move(text);
  }

  TestServer srv_;
  std::mutex mu_;
  int status_ = 200;
  std::string text_ = kVllmText;
  std::string address_;
  ManualClock clock_{1000};
  ResolveOptions options_;
};

TEST_F(RefreshTest, UpdatesInPlaceAndKeepsLastGoodMetricsOnFailure) {
  std::vector<EndpointSpec> specs = {Spec(address_, ""), Spec("10.0.0.2:8000", kSglangProm),
                                     Spec("10.0.0.3:8000", "none")};
  specs[1].labels["role"] = "prefill";
  auto eps = ResolveEndpoints(specs, options_);
  ASSERT_TRUE(eps.ok()) << eps.status();
  EXPECT_EQ((*eps)[0].metrics.waiting_queue_size, 1.0);
  EXPECT_EQ((*eps)[0].metrics_time_us, 1000);

  std::string seven = kVllmText;
  seven.replace(seven.find("vllm:num_requests_waiting 1"), 27, "vllm:num_requests_waiting 7");
  Serve(200, seven);
  clock_.Set(2000);
  ASSERT_TRUE(RefreshEndpointMetrics(specs, *eps, options_).ok());
  EXPECT_EQ((*eps)[0].metrics.waiting_queue_size, 7.0);
  EXPECT_EQ((*eps)[0].metrics_time_us, 2000);
  EXPECT_EQ((*eps)[1].metrics_time_us, 2000);
  EXPECT_EQ((*eps)[1].labels.at("role"), "prefill");  // untouched
  EXPECT_FALSE((*eps)[2].metrics_time_us.has_value());

  Serve(500, "boom");
  clock_.Set(3000);
  ASSERT_TRUE(RefreshEndpointMetrics(specs, *eps, options_).ok());
  EXPECT_EQ((*eps)[0].metrics.waiting_queue_size, 7.0);  // last good values, aging
  EXPECT_EQ((*eps)[0].metrics_time_us, 2000);
  EXPECT_NE((*eps)[0].metrics_error.find("HTTP 500: boom"), std::string::npos) << (*eps)[0].metrics_error;
  EXPECT_EQ((*eps)[0].engine, "vllm");
  EXPECT_EQ((*eps)[1].metrics_time_us, 3000);

  options_.fail_on_metrics_error = true;
  clock_.Set(4000);
  absl::Status s = RefreshEndpointMetrics(specs, *eps, options_);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), (*eps)[0].metrics_error);
  EXPECT_EQ((*eps)[1].metrics_time_us, 4000);  // the others were still refreshed

  Serve(200, kVllmText);
  clock_.Set(5000);
  ASSERT_TRUE(RefreshEndpointMetrics(specs, *eps, options_).ok());
  EXPECT_EQ((*eps)[0].metrics_error, "");  // recovered
  EXPECT_EQ((*eps)[0].metrics_time_us, 5000);
}

TEST_F(RefreshTest, RefusedScrapeOfTheOwnAddressMarksTheEndpointUnreachableUntilItAnswers) {
  // A port that was just free: nothing listens there (connection refused).
  TestServer gone;
  gone.Start();
  const std::string gone_address = "127.0.0.1:" + std::to_string(gone.port());
  gone.Stop();
  std::vector<EndpointSpec> specs = {Spec(address_, ""), Spec(gone_address, ""),
                                     Spec("10.0.0.9:8000", "http://" + gone_address + "/metrics")};
  auto eps = ResolveEndpoints(specs, options_);
  ASSERT_TRUE(eps.ok()) << eps.status();
  EXPECT_FALSE((*eps)[0].unreachable);
  EXPECT_TRUE((*eps)[1].unreachable) << (*eps)[1].metrics_error;
  EXPECT_NE((*eps)[1].metrics_error.find("connection refused"), std::string::npos) << (*eps)[1].metrics_error;
  // Refused at a separate metrics address says nothing about the inference port.
  EXPECT_FALSE((*eps)[2].unreachable) << (*eps)[2].metrics_error;
  EXPECT_FALSE((*eps)[2].metrics_error.empty());
  // An HTTP error is an answer: reachable.
  Serve(500, "boom");
  ASSERT_TRUE(RefreshEndpointMetrics(specs, *eps, options_).ok());
  EXPECT_FALSE((*eps)[0].unreachable);
  EXPECT_TRUE((*eps)[1].unreachable);
  // A server answers at the address (here: another one, the spec and endpoint renamed to it): the
  // next scrape clears the mark.
  TestServer back;
  back.server().Get("/metrics", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kVllmText, "text/plain");
  });
  back.Start();
  const std::string back_address = "127.0.0.1:" + std::to_string(back.port());
  specs[1] = Spec(back_address, "");
  (*eps)[1].address = back_address;
  Serve(200, kVllmText);
  ASSERT_TRUE(RefreshEndpointMetrics(specs, *eps, options_).ok());
  EXPECT_FALSE((*eps)[1].unreachable);
  EXPECT_EQ((*eps)[1].metrics_error, "");
}

TEST_F(RefreshTest, DetectsEngineLateAndKeepsItOnceKnown) {
  std::vector<EndpointSpec> specs = {Spec(address_, "")};
  Serve(503, "starting");
  auto eps = ResolveEndpoints(specs, options_);
  ASSERT_TRUE(eps.ok()) << eps.status();
  EXPECT_EQ((*eps)[0].engine, "");
  Serve(200, kVllmText);
  ASSERT_TRUE(RefreshEndpointMetrics(specs, *eps, options_).ok());
  EXPECT_EQ((*eps)[0].engine, "vllm");
  // The server now speaks another dialect: the known engine stays, and extraction says why.
  Serve(200, kSglangText);
  ASSERT_TRUE(RefreshEndpointMetrics(specs, *eps, options_).ok());
  EXPECT_EQ((*eps)[0].engine, "vllm");
  EXPECT_NE((*eps)[0].metrics_error.find("metrics.queue"), std::string::npos) << (*eps)[0].metrics_error;
}

TEST_F(RefreshTest, ReusesAnHttpClient) {
  HttpClient client;
  options_.http_client = &client;
  std::vector<EndpointSpec> specs = {Spec(address_, "")};
  auto eps = ResolveEndpoints(specs, options_);
  ASSERT_TRUE(eps.ok()) << eps.status();
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(50'000);
    ASSERT_TRUE(RefreshEndpointMetrics(specs, *eps, options_).ok());
    EXPECT_EQ((*eps)[0].metrics_time_us, clock_.NowMicros());
    EXPECT_EQ((*eps)[0].metrics_error, "");
  }
}

TEST(RefreshEndpointMetricsTest, SpecsMustMatchEndpoints) {
  std::vector<EndpointSpec> specs = {Spec("10.0.0.1:8000", "none"), Spec("10.0.0.2:8000", "none")};
  auto eps = ResolveEndpoints(specs, {});
  ASSERT_TRUE(eps.ok()) << eps.status();
  std::span<const EndpointSpec> first(specs.data(), 1);
  EXPECT_EQ(RefreshEndpointMetrics(first, *eps, {}).code(), absl::StatusCode::kInvalidArgument);
  std::swap(specs[0], specs[1]);
  absl::Status s = RefreshEndpointMetrics(specs, *eps, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "refresh: endpoints[0] is '10.0.0.1:8000' but its spec says '10.0.0.2:8000'");
}

}  // namespace
}  // namespace epp
