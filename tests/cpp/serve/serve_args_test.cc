// BuildServeConfig, the one function eppctl serve and pyepp.serve build the server's settings
// with: the defaults it fills in, the checks (each error names its setting), the discovery modes,
// and RenameServeSettings, which each edge uses to speak its own names.
#include "epp/runtime/serve_args.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace epp {
namespace {

namespace fs = std::filesystem;

TEST(BuildServeConfigTest, DefaultsAreTheReferenceRunnersAndTheServersOwn) {
  ServeArgs a;
  a.endpoint_flags = {"10.0.0.1:8000"};
  absl::StatusOr<ServeConfig> c = BuildServeConfig(a);
  ASSERT_TRUE(c.ok()) << c.status();
  const ServeConfig d;  // what EppServer would run with when given nothing
  EXPECT_EQ(c->grpc_port, 9002);
  EXPECT_EQ(c->health_port, 9003);
  EXPECT_EQ(c->metrics_port, 9090);
  EXPECT_TRUE(c->tls);
  EXPECT_EQ(c->listen_address, "0.0.0.0");
  EXPECT_EQ(c->refresh_interval, std::chrono::milliseconds(50));
  EXPECT_EQ(c->refresh_interval, d.refresh_interval) << "one default, not two";
  EXPECT_EQ(c->scrape_timeout, std::chrono::milliseconds(100));
  EXPECT_EQ(c->staleness, std::chrono::milliseconds(200));
  EXPECT_FALSE(c->detector_staleness.has_value());
  EXPECT_EQ(c->session.max_request_bytes, kDefaultMaxRequestBytes);
  EXPECT_EQ(c->session.request_timeout, std::chrono::seconds(60));
  EXPECT_EQ(c->session.idle_timeout, std::chrono::minutes(15));
  EXPECT_EQ(c->session.handshake_timeout, std::chrono::seconds(10));
  EXPECT_EQ(c->decision_log.capacity, 0u);
  EXPECT_EQ(c->decision_log.max_per_second, 50);
  EXPECT_EQ(c->pool_name, "default");
  EXPECT_EQ(c->log, nullptr) << "the logger is the caller's";
  ASSERT_EQ(c->endpoints.size(), 1u);
  EXPECT_EQ(c->endpoints[0].address, "10.0.0.1:8000");
  EXPECT_FALSE(c->discovery.has_value());
  EXPECT_FALSE(c->import_discovery.has_value());
}

TEST(BuildServeConfigTest, SettingsAreCarriedOver) {
  ServeArgs a;
  a.pool_name = "pool-a";
  a.pool_namespace = "team";
  a.pool_resync_interval = "5s";
  a.refresh_metrics_interval = "1.5s";
  a.detector_staleness = "250ms";
  a.stream_idle_timeout = "0s";
  a.objective_flags = {"chat=2", "batch=-1", "a=b=3"};
  a.decision_log = 100;
  a.grpc_health_port = -1;
  a.secure_serving = false;
  absl::StatusOr<ServeConfig> c = BuildServeConfig(a);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->discovery.has_value());
  EXPECT_EQ(c->discovery->name, "pool-a");
  EXPECT_EQ(c->discovery->ns, "team");
  EXPECT_EQ(c->discovery->interval, std::chrono::seconds(5));
  EXPECT_EQ(c->pool_name, "pool-a") << "the gauges' name label follows the pool";
  EXPECT_EQ(c->refresh_interval, std::chrono::milliseconds(1500));
  EXPECT_EQ(c->detector_staleness, std::chrono::milliseconds(250));
  EXPECT_EQ(c->session.idle_timeout, std::chrono::milliseconds(0)) << "0s: no limit";
  EXPECT_EQ(c->session.objective_priorities.at("chat"), 2);
  EXPECT_EQ(c->session.objective_priorities.at("batch"), -1);
  EXPECT_EQ(c->session.objective_priorities.at("a=b"), 3) << "the last '=' splits";
  EXPECT_EQ(c->decision_log.capacity, 100u);
  EXPECT_EQ(c->health_port, -1);
  EXPECT_FALSE(c->tls);

  // With an endpoints file the pool name only labels the gauges: no discovery.
  a.endpoints_file = "pool.yaml";
  c = BuildServeConfig(a);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->discovery.has_value());
  EXPECT_EQ(c->endpoints_file, "pool.yaml");
  EXPECT_EQ(c->pool_name, "pool-a");
}

// Each bad value: its error starts with the setting's name.
TEST(BuildServeConfigTest, ErrorsNameTheSetting) {
  struct Case {
    const char* setting;
    void (*set)(ServeArgs&);
  };
  const Case cases[] = {
      {"refresh_metrics_interval", [](ServeArgs& a) { a.refresh_metrics_interval = "0s"; }},
      {"scrape_timeout", [](ServeArgs& a) { a.scrape_timeout = "fast"; }},
      {"metrics_staleness_threshold", [](ServeArgs& a) { a.metrics_staleness_threshold = "-1s"; }},
      {"detector_staleness", [](ServeArgs& a) { a.detector_staleness = "0"; }},
      {"pool_resync_interval", [](ServeArgs& a) { a.pool_name = "p"; a.pool_resync_interval = "soon"; }},
      {"pool_group", [](ServeArgs& a) { a.pool_group = "example.com"; }},
      {"grpc_port", [](ServeArgs& a) { a.grpc_port = 70000; }},
      {"grpc_health_port", [](ServeArgs& a) { a.grpc_health_port = -2; }},
      {"metrics_port", [](ServeArgs& a) { a.metrics_port = 65536; }},
      {"listen_address", [](ServeArgs& a) { a.listen_address.clear(); }},
      {"cert_path", [](ServeArgs& a) { a.cert_path = "/nonexistent-epp-certs"; }},
      {"client_ca", [](ServeArgs& a) { a.secure_serving = false; a.client_ca = "/etc/ca.pem"; }},
      {"max_request_bytes", [](ServeArgs& a) { a.max_request_bytes = 0; }},
      {"stream_request_timeout", [](ServeArgs& a) { a.stream_request_timeout = "-5s"; }},
      {"handshake_timeout", [](ServeArgs& a) { a.handshake_timeout = "0s"; }},
      {"objective_flags", [](ServeArgs& a) { a.objective_flags = {"chat=high"}; }},
      {"decision_log", [](ServeArgs& a) { a.decision_log = kMaxDecisionLog + 1; }},
      {"decision_log_rate", [](ServeArgs& a) { a.decision_log_rate = 0; }},
      {"pool_import", [](ServeArgs& a) { a.pool_import = "imp"; }},
      {"clusters_file", [](ServeArgs& a) { a.clusters_file = "clusters.yaml"; }},
      {"endpoint_selector", [](ServeArgs& a) { a.endpoint_selector = "app in (x"; a.endpoint_target_ports = {8000}; }},
      {"endpoint_target_ports", [](ServeArgs& a) { a.endpoint_selector = "app=x"; }},
      {"endpoint_target_ports", [](ServeArgs& a) { a.endpoint_target_ports = {8000}; }},
      {"model_server_metrics_scheme", [](ServeArgs& a) { a.pool_name = "p"; a.model_server_metrics_scheme = "ftp"; }},
      {"model_server_metrics_path", [](ServeArgs& a) { a.pool_name = "p"; a.model_server_metrics_path = "metrics"; }},
      {"total_queued_requests_metric", [](ServeArgs& a) { a.total_queued_requests_metric = "q{"; }},
      {"grpc_max_recv_msg_size", [](ServeArgs& a) { a.grpc_max_recv_msg_size = "10 parsecs"; }},
      {"refresh_prometheus_metrics_interval", [](ServeArgs& a) { a.refresh_prometheus_metrics_interval = "often"; }},
      {"config_file", [](ServeArgs& a) { a.config_file = "c.yaml"; a.config_text = "x: 1"; }},
  };
  for (const Case& k : cases) {
    ServeArgs a;
    a.endpoint_flags = {"10.0.0.1:8000"};
    k.set(a);
    absl::StatusOr<ServeConfig> c = BuildServeConfig(a);
    ASSERT_FALSE(c.ok()) << k.setting;
    EXPECT_EQ(c.status().message().substr(0, std::string_view(k.setting).size()), k.setting) << c.status();
    const bool missing_file = std::string_view(k.setting) == "cert_path";
    EXPECT_EQ(c.status().code(), missing_file ? absl::StatusCode::kNotFound : absl::StatusCode::kInvalidArgument)
        << c.status();
    bool listed = false;
    for (std::string_view n : ServeSettingNames()) listed = listed || n == k.setting;
    EXPECT_TRUE(listed) << k.setting << " is not in ServeSettingNames()";
  }
}

TEST(BuildServeConfigTest, PoolImportReadsItsClusterDirectory) {
  const fs::path dir = fs::path(::testing::TempDir()) / "serve-args-import";
  fs::create_directories(dir);
  const std::string clusters = (dir / "clusters.yaml").string();
  std::ofstream(clusters, std::ios::trunc) << "endpoints:\n- address: 10.1.0.1:80\n  metrics: none\n  labels: {cluster: east}\n";
  ServeArgs a;
  a.pool_import = "imp";
  a.clusters_file = clusters;
  absl::StatusOr<ServeConfig> c = BuildServeConfig(a);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->import_discovery.has_value());
  EXPECT_EQ(c->import_discovery->name, "imp");
  EXPECT_EQ(c->import_discovery->clusters.size(), 1u);
  EXPECT_EQ(c->import_discovery->cluster_label, "cluster");
  a.pool_name = "p";
  EXPECT_EQ(BuildServeConfig(a).status().message(), "pool_import and pool_name cannot be combined");
}

TEST(RenameServeSettingsTest, WholeWordsOnlyAndNeverInsidePaths) {
  const std::map<std::string, std::string, std::less<>> flags = {{"refresh_metrics_interval", "--refresh-metrics-interval"},
                                                                {"config_file", "--config"}};
  EXPECT_EQ(RenameServeSettings("refresh_metrics_interval: must be > 0, got '0s'", flags),
            "--refresh-metrics-interval: must be > 0, got '0s'");
  EXPECT_EQ(RenameServeSettings("config_file /etc/epp/config_file.yaml: x; my_config_file stays", flags),
            "--config /etc/epp/config_file.yaml: x; my_config_file stays");
  const absl::Status renamed = RenameServeSettings(absl::InvalidArgumentError("config_file: bad"), flags);
  EXPECT_EQ(renamed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(renamed.message(), "--config: bad");
  EXPECT_TRUE(RenameServeSettings(absl::OkStatus(), flags).ok());
}

TEST(BuildServeConfigTest, StandaloneModeAndTheReferencesMetricFlags) {
  ServeArgs a;
  a.endpoint_selector = "app=vllm,env in (prod)";
  a.endpoint_target_ports = {8000, 8001, 8000};
  a.pool_namespace = "team";
  a.model_server_metrics_scheme = "https";
  a.model_server_metrics_port = 9400;
  a.total_queued_requests_metric = "my_queue{pool=\"a\"}";
  a.kv_cache_usage_percentage_metric = "my_kv";
  a.health_checking = true;
  a.grpc_max_recv_msg_size = "25MB";
  a.config_text = "apiVersion: x\n";
  absl::StatusOr<ServeConfig> c = BuildServeConfig(a);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->discovery.has_value());
  EXPECT_TRUE(c->discovery->name.empty());
  EXPECT_EQ(c->discovery->selector, "app=vllm,env in (prod)");
  EXPECT_EQ(c->discovery->target_ports, (std::vector<int>{8000, 8001}));  // duplicates dropped, order kept
  EXPECT_EQ(c->discovery->ns, "team");
  EXPECT_TRUE(c->discovery->watch);
  EXPECT_EQ(c->discovery->metrics.scheme, "https");
  EXPECT_EQ(c->discovery->metrics.port, 9400);
  EXPECT_TRUE(c->metrics_insecure_skip_verify);  // the reference's default with https
  ASSERT_EQ(c->metric_overrides.size(), 2u);
  EXPECT_EQ(c->metric_overrides[0], (std::pair<std::string, std::string>{"queue", "my_queue{pool=\"a\"}"}));
  EXPECT_EQ(c->metric_overrides[1].first, "kv");
  EXPECT_TRUE(c->health_checking);
  EXPECT_EQ(c->grpc_max_recv_bytes, 25000000u);
  EXPECT_EQ(c->config_yaml, "apiVersion: x\n");
  EXPECT_TRUE(c->notices.empty());
}

TEST(BuildServeConfigTest, UnimplementedReferenceFlagsGetOneNoticeEachWhenTheyAskForSomething) {
  ServeArgs a;
  a.endpoint_flags = {"10.0.0.1:8000"};
  a.enable_tracing = false;  // asks for nothing epp does not do
  a.enable_pprof = true;
  a.metrics_cert_dir = "/certs";
  a.tls_cipher_suites = {"TLS_AES_128_GCM_SHA256"};
  absl::StatusOr<ServeConfig> c = BuildServeConfig(a);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->notices.size(), 3u);
  EXPECT_EQ(c->notices[0].rfind("enable_pprof is accepted but not implemented: ", 0), 0u) << c->notices[0];
  EXPECT_EQ(c->notices[1].rfind("tls_cipher_suites", 0), 0u) << c->notices[1];
  EXPECT_EQ(c->notices[2].rfind("metrics_cert_dir", 0), 0u) << c->notices[2];
}

TEST(ParseByteQuantityTest, KubernetesQuantitiesAsTheReferenceReadsThem) {
  EXPECT_EQ(*ParseByteQuantity("s", "4194304"), 4194304u);
  EXPECT_EQ(*ParseByteQuantity("s", "10MiB"), size_t{10} << 20);
  EXPECT_EQ(*ParseByteQuantity("s", "10Mi"), size_t{10} << 20);
  EXPECT_EQ(*ParseByteQuantity("s", "25MB"), 25000000u);
  EXPECT_EQ(*ParseByteQuantity("s", "1Gi"), size_t{1} << 30);
  EXPECT_EQ(*ParseByteQuantity("s", "2k"), 2000u);
  for (const char* bad : {"", "MiB", "1.5Mi", "-1", "10 MiB", "10Ti", "99999999999Gi"}) {
    absl::StatusOr<size_t> r = ParseByteQuantity("grpc_max_recv_msg_size", bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().message().substr(0, 22), "grpc_max_recv_msg_size") << r.status();
  }
}

TEST(BuildServeConfigTest, MetricsEndpointAuthIsOnWhereAKubernetesApiIs) {
  ServeArgs files;
  files.endpoint_flags = {"10.0.0.1:8000"};
  EXPECT_FALSE(BuildServeConfig(files)->metrics_auth.has_value());  // no API server to ask
  ServeArgs pool;
  pool.pool_name = "p";
  pool.kube_api_server = "http://127.0.0.1:1";
  absl::StatusOr<ServeConfig> c = BuildServeConfig(pool);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->metrics_auth.has_value());  // the reference's default
  EXPECT_EQ(c->metrics_auth->kube.api_server, "http://127.0.0.1:1");
  pool.metrics_endpoint_auth = false;
  EXPECT_FALSE(BuildServeConfig(pool)->metrics_auth.has_value());
  files.metrics_endpoint_auth = true;
  files.kube_api_server = "http://127.0.0.1:1";
  EXPECT_TRUE(BuildServeConfig(files)->metrics_auth.has_value());
}

}  // namespace
}  // namespace epp
