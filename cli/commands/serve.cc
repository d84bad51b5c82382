// `eppctl serve`: wires libepp's ExtProcServer, HealthServer and scheduler to the endpoint pool
// (serve_pool.h), the /metrics server (serve_metrics.h) and the process's signals.
#include "commands/serve.h"

#include <malloc.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string_view>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "epp/extproc.h"
#include "commands/serve_log.h"
#include "commands/serve_metrics.h"
#include "commands/serve_pool.h"
#include "epp/config.h"
#include "epp/endpoints.h"
#include "epp/kube.h"
#include "epp/params.h"
#include "epp/registry.h"
#include "epp/scheduler.h"
#include "epp/version.h"
#include "output.h"

namespace eppctl {
namespace {

absl::StatusOr<int64_t> FlagDuration(const char* flag, const std::string& text, bool allow_zero) {
  absl::StatusOr<int64_t> us = epp::ParseDurationMicros(text);
  if (!us.ok()) return absl::InvalidArgumentError(std::string(flag) + ": " + std::string(us.status().message()));
  if (*us < 0 || (*us == 0 && !allow_zero))
    return absl::InvalidArgumentError(std::string(flag) + ": must be " + (allow_zero ? ">= 0" : "> 0") + ", got '" +
                                      text + "'");
  return *us;
}

std::string HumanDuration(int64_t us) {
  char buf[32];
  if (us % 1000000 == 0)
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(us / 1000000));
  else if (us % 1000 == 0)
    std::snprintf(buf, sizeof buf, "%lldms", static_cast<long long>(us / 1000));
  else
    std::snprintf(buf, sizeof buf, "%lldus", static_cast<long long>(us));
  return buf;
}

// "NAME=PRIORITY" values of --objective.
absl::Status ParseObjectives(const std::vector<std::string>& flags, std::map<std::string, int, std::less<>>& out) {
  for (const std::string& f : flags) {
    const size_t eq = f.rfind('=');
    const std::string name = eq == std::string::npos ? "" : f.substr(0, eq);
    int priority = 0;
    const char* begin = f.data() + (eq == std::string::npos ? f.size() : eq + 1);
    const char* end = f.data() + f.size();
    auto [ptr, ec] = std::from_chars(begin, end, priority);
    if (name.empty() || begin == end || ec != std::errc() || ptr != end)
      return absl::InvalidArgumentError("--objective '" + f +
                                        "': expected NAME=PRIORITY with an integer priority (negative = sheddable)");
    out[name] = priority;
  }
  return absl::OkStatus();
}

// gRPC wants "[v6]:port"; httplib a bare host.
std::string JoinHostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos && host.front() != '[') return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

// How --metrics-staleness-threshold reaches the scheduler. The saturation detector has its own
// `metricsStalenessThreshold` parameter (GIE: 200ms). An explicit flag sets it on the default
// utilization-detector when the configuration leaves it unset; when the configuration sets it, or
// names its own detector, the configuration governs. Returns what was decided, for the log.
std::string ApplyStalenessFlag(epp::EppConfig& config, const std::string& text, bool given) {
  if (!given) return {};
  if (!config.saturation_detector_ref.empty()) {
    return "--metrics-staleness-threshold: the config's saturation detector '" + config.saturation_detector_ref +
           "' keeps its own metricsStalenessThreshold; the flag sets only the pool-average gauges";
  }
  for (const epp::PluginSpec& p : config.plugins) {
    // BuildScheduler uses a plugin named utilization-detector as the default detector.
    if (p.name == "utilization-detector" && config.saturation_detector_params.is_null()) {
      return "--metrics-staleness-threshold: the config's plugin 'utilization-detector' keeps its own "
             "metricsStalenessThreshold; the flag sets only the pool-average gauges";
    }
  }
  epp::Params& params = config.saturation_detector_params;
  if (params.is_map() && params.Has("metricsStalenessThreshold")) {
    return "--metrics-staleness-threshold: the config sets saturationDetector.metricsStalenessThreshold, which "
           "governs; "
           "the flag sets only the pool-average gauges";
  }
  if (params.is_null()) params = epp::Params::Map("saturationDetector");
  if (!params.is_map()) return {};  // BuildScheduler reports the bad section
  params.Set("metricsStalenessThreshold", epp::Params::String(text));
  return "--metrics-staleness-threshold=" + text + " applied to the saturation detector (metricsStalenessThreshold)";
}

absl::Status WriteReadyFile(const std::string& path, int grpc, int health, int metrics) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "{\"grpc\": " << grpc << ", \"health\": " << health << ", \"metrics\": " << metrics << "}\n";
    if (!out.flush()) return absl::UnavailableError("cannot write --ready-file " + path);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);  // readers never see a partial file
  if (ec) return absl::UnavailableError("cannot write --ready-file " + path + ": " + ec.message());
  return absl::OkStatus();
}

// Waits up to `timeout` for one of `set`'s signals; 0 when none came.
int WaitSignal(const sigset_t& set, std::chrono::milliseconds timeout) {
  timespec ts{static_cast<time_t>(timeout.count() / 1000), static_cast<long>(timeout.count() % 1000) * 1000000};
  for (;;) {
    const int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig > 0) return sig;
    if (errno != EINTR) return 0;
  }
}

// --pool-name without --endpoints: the pool's Ready Pods, read through the Kubernetes API.
absl::StatusOr<std::optional<ServePoolDiscovery>> PoolDiscovery(const ServeOptions& o) {
  if (!o.pool_name_given || !o.endpoints_file.empty()) return std::optional<ServePoolDiscovery>();
  ServePoolDiscovery d;
  d.name = o.pool_name;
  d.group = o.pool_group;
  d.ns = o.pool_namespace;
  if (const char* env = std::getenv("NAMESPACE"); d.ns.empty() && env != nullptr) d.ns = env;  // as GIE's EPP
  if (d.ns.empty()) d.ns = epp::InClusterNamespace();
  if (d.ns.empty()) d.ns = "default";
  EPP_RETURN_IF_ERROR(epp::InferencePoolPath(d.group, d.ns, d.name).status());
  EPP_ASSIGN_OR_RETURN(int64_t us, FlagDuration("--pool-resync-interval", o.pool_resync_interval, false));
  d.interval = std::chrono::microseconds(us);
  d.kube.api_server = o.kube_api_server;
  d.kube.token_file = o.kube_token_file;
  d.kube.ca_file = o.kube_ca_file;
  d.kube.insecure_skip_verify = o.kube_insecure_skip_verify;
  return std::optional<ServePoolDiscovery>(std::move(d));
}

const char* SignalName(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "signal"; }

}  // namespace

void SetupServeCommand(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "Run the Endpoint Picker: an Envoy ext_proc server (docs/serve.md)");
  cmd->add_option("--config,-c", o->config, "EndpointPickerConfig YAML (default: GIE's default profile)");
  cmd->add_option("--endpoints", o->endpoints_file,
                  "Endpoints file (YAML or JSON); re-read when it changes (ConfigMap updates included)");
  cmd->add_option("--endpoint,-e", o->endpoints,
                  "ADDR[=METRICS]: an endpoint and its metrics (file, URL or 'none'; default: scrape "
                  "http://ADDR/metrics); repeatable");
  cmd->add_option("--engine", o->engine,
                  "Metrics dialect of endpoints that name none: auto, vllm, sglang, trtllm-serve, triton-tensorrt-llm")
      ->capture_default_str();
  cmd->add_option("--grpc-port", o->grpc_port, "ext_proc gRPC port (0 picks a free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--grpc-health-port", o->grpc_health_port, "grpc.health.v1 port, plaintext (0 picks a free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--metrics-port", o->metrics_port, "Prometheus /metrics and /healthz port (0 picks a free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--listen-address", o->listen_address, "Address the three servers listen on")->capture_default_str();
  cmd->add_option("--refresh-metrics-interval", o->refresh_metrics_interval,
                  "How often endpoints' metrics are read (Go duration)")
      ->capture_default_str();
  CLI::Option* staleness = cmd->add_option("--metrics-staleness-threshold", o->metrics_staleness_threshold,
                                           "Metrics older than this are stale: pool-average gauges skip them; given "
                                           "explicitly, also the default saturation "
                                           "detector's metricsStalenessThreshold unless the config sets it")
                               ->capture_default_str();
  cmd->add_option("--scrape-timeout", o->scrape_timeout,
                  "Timeout of one metrics read; a hung endpoint delays the others' refresh by this much")
      ->capture_default_str();
  cmd->add_flag("--secure-serving,!--no-secure-serving", o->secure_serving,
                "Serve ext_proc over TLS (default true; --secure-serving=false for plaintext h2c)");
  cmd->add_option("--cert-path", o->cert_path,
                  "Directory with tls.crt and tls.key (default: a self-signed certificate made at start)");
  cmd->add_option("--max-request-bytes", o->max_request_bytes, "Largest request body accepted (larger: 413)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--drain-timeout", o->drain_timeout, "On SIGTERM/SIGINT, how long open streams may take to finish")
      ->capture_default_str();
  cmd->add_option("--shutdown-delay", o->shutdown_delay,
                  "On SIGTERM/SIGINT, keep accepting new streams this long after readiness turns NOT_SERVING")
      ->capture_default_str();
  cmd->add_option("--capture", o->capture_dir, "Write every stream's messages as protobuf JSON lines into DIR");
  cmd->add_option("--log-level", o->log_level, "error, warn, info or debug")
      ->check(CLI::IsMember({"error", "warn", "info", "debug"}))
      ->capture_default_str();
  cmd->add_option("--objective", o->objectives,
                  "NAME=PRIORITY: priority of requests whose x-gateway-inference-objective is NAME (negative = "
                  "sheddable); repeatable");
  cmd->add_flag("--disable-endpoint-subset-filter", o->disable_subset_filter,
                "Ignore the gateway's subset hint (GIE's flag)");
  cmd->add_option("--seed", o->seed, "Seed for tie-breaks and random pickers")->capture_default_str();
  cmd->add_option("--ready-file", o->ready_file,
                  "Once serving, write the bound ports here as JSON {\"grpc\":..,\"health\":..,\"metrics\":..}");
  CLI::Option* pool_name =
      cmd->add_option("--pool-name", o->pool_name,
                      "InferencePool whose Ready Pods are the endpoints (not with --endpoints: then only the "
                      "metrics label); `name` label of the inference_pool_* metrics")
          ->capture_default_str();
  cmd->add_option("--pool-namespace", o->pool_namespace,
                  "Namespace of the InferencePool (default: $NAMESPACE, else this Pod's namespace, else default)");
  cmd->add_option("--pool-group", o->pool_group,
                  "InferencePool API group: inference.networking.k8s.io (v1) or inference.networking.x-k8s.io "
                  "(v1alpha2)")
      ->capture_default_str()
      ->check(CLI::IsMember({std::string(epp::kInferencePoolGroupV1), std::string(epp::kInferencePoolGroupV1Alpha2)}));
  cmd->add_option("--pool-resync-interval", o->pool_resync_interval,
                  "How often the InferencePool and its Pods are listed (Go duration; no watch)")
      ->capture_default_str();
  cmd->add_option("--kube-api-server", o->kube_api_server,
                  "Kubernetes API server URL, http(s)://HOST:PORT (default: in-cluster configuration)");
  cmd->add_option("--kube-token-file", o->kube_token_file,
                  "Bearer token file, re-read every minute (default in cluster: the service account token)");
  cmd->add_option("--kube-ca-file", o->kube_ca_file,
                  "CA bundle verifying the API server (default in cluster: the service account ca.crt)");
  cmd->add_flag("--kube-insecure-skip-verify", o->kube_insecure_skip_verify,
                "Do not verify the API server's TLS certificate");
  cmd->callback([o, staleness, pool_name, &exit_code] {
    o->staleness_given = staleness->count() > 0;
    o->pool_name_given = pool_name->count() > 0;
    exit_code = RunServe(*o);
  });
}

int RunServe(const ServeOptions& o) {
  LogLevel level = LogLevel::kInfo;
  if (!ParseLogLevel(o.log_level, level))
    return PrintError(absl::InvalidArgumentError("--log-level: unknown level '" + o.log_level + "'"));
  ServeLog log(level);
  auto fail = [&log](const absl::Status& s) {
    log.Error(std::string(s.message()));
    return PrintError(s);
  };

  // Flags.
  auto interval = FlagDuration("--refresh-metrics-interval", o.refresh_metrics_interval, false);
  if (!interval.ok()) return fail(interval.status());
  auto staleness = FlagDuration("--metrics-staleness-threshold", o.metrics_staleness_threshold, false);
  if (!staleness.ok()) return fail(staleness.status());
  auto scrape_timeout = FlagDuration("--scrape-timeout", o.scrape_timeout, false);
  if (!scrape_timeout.ok()) return fail(scrape_timeout.status());
  auto drain = FlagDuration("--drain-timeout", o.drain_timeout, true);
  if (!drain.ok()) return fail(drain.status());
  auto shutdown_delay = FlagDuration("--shutdown-delay", o.shutdown_delay, true);
  if (!shutdown_delay.ok()) return fail(shutdown_delay.status());
  auto discovery = PoolDiscovery(o);
  if (!discovery.ok()) return fail(discovery.status());
  epp::ExtProcServerOptions server_options;
  server_options.session.max_request_bytes = o.max_request_bytes;
  server_options.session.ignore_subset_hint = o.disable_subset_filter;
  if (absl::Status s = ParseObjectives(o.objectives, server_options.session.objective_priorities); !s.ok())
    return fail(s);
  std::vector<epp::EndpointSpec> flag_specs;
  for (size_t i = 0; i < o.endpoints.size(); ++i) {
    auto spec = epp::ParseEndpointFlag(o.endpoints[i], static_cast<int>(i + 1));
    if (!spec.ok()) return fail(spec.status());
    flag_specs.push_back(*std::move(spec));
  }
  if (!o.capture_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.capture_dir, ec);
    if (ec) return fail(absl::InvalidArgumentError("--capture " + o.capture_dir + ": " + ec.message()));
    server_options.capture_dir = o.capture_dir;
  }

  // glibc's allocator, by default, serves blocks from 128 KiB up (raised dynamically up to 32 MiB)
  // with mmap and trims freed heap back to the kernel: with request bodies of hundreds of KiB
  // every request then faults its buffers in again (page faults were 17% of serve's CPU at 220 KiB
  // prompts). Keep freed memory instead; docs/benchmarks.md ("ext_proc load") has the measurements.
  // A GLIBC_TUNABLES malloc setting given by the operator wins.
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables == nullptr || std::string_view(tunables).find("glibc.malloc.") == std::string_view::npos) {
    mallopt(M_MMAP_THRESHOLD, 16 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
  }

  // Abseil as Debian builds it checks every Mutex acquisition for lock-order cycles (a debug
  // aid that keeps a global graph under a lock); gRPC's mutexes are absl::Mutex, and the check
  // was ~3.5% of serve's CPU under load. Production servers run without it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  // The stop signals are taken by sigwait below: block them before any thread starts.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  // Configuration and scheduler.
  epp::EppConfig config = epp::DefaultConfig();
  if (!o.config.empty()) {
    auto loaded = epp::LoadConfigFile(o.config);
    if (!loaded.ok()) return fail(loaded.status());
    config = *std::move(loaded);
  }
  const std::string staleness_note = ApplyStalenessFlag(config, o.metrics_staleness_threshold, o.staleness_given);
  epp::SeededRng rng(o.seed);
  auto scheduler =
      epp::BuildScheduler(config, epp::BuiltinRegistry(), epp::PluginContext{&epp::SteadyClock::Get(), &rng});
  if (!scheduler.ok()) return fail(scheduler.status());
  for (const std::string& w : (*scheduler)->warnings()) log.Warn("config: " + w);
  if (!staleness_note.empty()) log.Info(staleness_note);
  if (*interval + *scrape_timeout >= *staleness) {
    log.Warn(
        "--refresh-metrics-interval (" + HumanDuration(*interval) + ") + --scrape-timeout (" +
        HumanDuration(*scrape_timeout) + ") >= --metrics-staleness-threshold (" + HumanDuration(*staleness) +
        "): metrics may count as stale between scrapes, and stale endpoints count as saturated for sheddable requests");
  }

  // Endpoints: resolved once (every endpoint read or found unreadable) before serving.
  epp::EndpointSnapshot snapshot;
  ServePoolOptions pool_options;
  pool_options.endpoints_file = o.endpoints_file;
  pool_options.flag_specs = std::move(flag_specs);
  pool_options.resolve.check.engine = o.engine;
  pool_options.resolve.check.timeout = std::chrono::milliseconds(std::max<int64_t>(1, *scrape_timeout / 1000));
  pool_options.interval = std::chrono::microseconds(*interval);
  pool_options.discovery = *discovery;
  if (o.pool_name_given && !o.endpoints_file.empty())
    log.Info("--pool-name " + o.pool_name + " with --endpoints: the endpoints come from the file; the InferencePool "
             "is not read (--pool-name names the metrics only)");
  auto pool = ServePool::Create(std::move(pool_options), **scheduler, snapshot, log);
  if (!pool.ok()) return fail(pool.status());

  // TLS material.
  std::string tls_mode = "plaintext h2c";
  if (o.secure_serving) {
    server_options.tls = true;
    if (!o.cert_path.empty()) {
      auto cert = ReadFile(o.cert_path + "/tls.crt");
      if (!cert.ok()) return fail(cert.status());
      auto key = ReadFile(o.cert_path + "/tls.key");
      if (!key.ok()) return fail(key.status());
      server_options.cert_pem = *std::move(cert);
      server_options.key_pem = *std::move(key);
      tls_mode = "TLS, certificate from " + o.cert_path;
    } else {
      auto pair = epp::GenerateSelfSignedCertificate();
      if (!pair.ok()) return fail(pair.status());
      server_options.cert_pem = pair->cert_pem;
      server_options.key_pem = pair->key_pem;
      tls_mode = "TLS, self-signed certificate";
    }
  }

  // Servers: ext_proc, health, metrics.
  server_options.listen = JoinHostPort(o.listen_address, o.grpc_port);
  auto server = epp::ExtProcServer::Start(**scheduler, snapshot, server_options);
  if (!server.ok()) return fail(server.status());
  auto health = epp::HealthServer::Start(JoinHostPort(o.listen_address, o.grpc_health_port));
  if (!health.ok()) return fail(health.status());
  ServeMetricsSources sources;
  sources.stats = &(*server)->stats();
  sources.scheduler = scheduler->get();
  sources.endpoints = &snapshot;
  sources.pool = pool->get();
  sources.staleness_us = *staleness;
  sources.pool_name = o.pool_name;
  auto metrics = MetricsHttpServer::Start(o.listen_address, o.metrics_port, [&sources] {
    return RenderServeMetrics(sources, epp::SteadyClock::Get().NowMicros());
  });
  if (!metrics.ok()) return fail(metrics.status());
  (*pool)->Start();
  (*health)->SetReady(true);
  if (!o.ready_file.empty()) {
    if (absl::Status s = WriteReadyFile(o.ready_file, (*server)->port(), (*health)->port(), (*metrics)->port());
        !s.ok())
      return fail(s);
  }
  std::string source = o.endpoints_file.empty() ? "" : o.endpoints_file + " (watched)";
  if (*discovery)
    source = "inferencepool " + (*discovery)->ns + "/" + (*discovery)->name + " (" + (*discovery)->group +
             ", Pods listed every " + HumanDuration((*discovery)->interval.count()) + ")";
  if (!o.endpoints.empty())
    source += (source.empty() ? "" : " + ") + std::to_string(o.endpoints.size()) + " --endpoint flag" +
              (o.endpoints.size() > 1 ? "s" : "");
  log.Info("eppctl serve " EPP_VERSION_STRING " serving: ext_proc " +
           JoinHostPort(o.listen_address, (*server)->port()) + " (" + tls_mode + "), health " +
           JoinHostPort(o.listen_address, (*health)->port()) + " (grpc.health.v1, plaintext), metrics http://" +
           JoinHostPort(o.listen_address, (*metrics)->port()) + "/metrics; " + std::to_string((*pool)->size()) +
           ((*pool)->size() == 1 ? " endpoint from " : " endpoints from ") + source + "; config " +
           (o.config.empty() ? "<default: GIE's default profile>" : o.config) + "; refresh " +
           HumanDuration(*interval) + ", staleness " + HumanDuration(*staleness) + ", drain " + HumanDuration(*drain));

  // Run until SIGTERM / SIGINT.
  int sig = 0;
  while (sig == 0) sig = WaitSignal(stop, std::chrono::hours(24));
  log.Info(std::string("received ") + SignalName(sig) + ": readiness NOT_SERVING; draining open streams for up to " +
           HumanDuration(*drain) + " (a second signal exits at once)");
  (*health)->SetReady(false);
  auto quit_now = [&log](int s) {
    log.Warn(std::string("received ") + SignalName(s) + " again: exiting without waiting for open streams");
    std::fflush(stderr);
    std::_Exit(kExitFailure);
  };
  if (*shutdown_delay > 0) {
    if (int again = WaitSignal(stop, std::chrono::milliseconds(*shutdown_delay / 1000)); again != 0) quit_now(again);
  }
  const int64_t open_streams = (*server)->stats().streams_active.load();
  const auto drain_start = std::chrono::steady_clock::now();
  std::atomic<bool> drained{false};
  std::thread drainer([&] {
    (*server)->Shutdown(std::chrono::milliseconds(*drain / 1000));
    drained = true;
  });
  while (!drained.load()) {
    if (int again = WaitSignal(stop, std::chrono::milliseconds(50)); again != 0) quit_now(again);
  }
  drainer.join();
  const double drain_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - drain_start).count();
  (*pool)->Stop();
  (*metrics)->Stop();
  (*health)->Shutdown();
  if (!o.ready_file.empty()) std::remove(o.ready_file.c_str());
  char took[32];
  std::snprintf(took, sizeof took, "%.3fs", drain_s);
  log.Info("stopped: " + std::to_string(open_streams) + " streams were open at the signal; drain took " + took);
  return kExitOk;
}

}  // namespace eppctl
