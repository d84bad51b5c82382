// `eppctl serve`: flags to an epp::ServeConfig, then epp::EppServer (epp/runtime/serve.h) does the work.
// What stays here is process policy: the allocator and Abseil settings, the stop signals, the
// ready file and the drain timing.
#include "commands/serve.h"

#include <cerrno>
#include <cstring>
#include <malloc.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "epp/runtime/kube.h"
#include "epp/params.h"
#include "epp/runtime/serve.h"
#include "epp/runtime/serve_args.h"
#include "epp/version.h"
#include "output.h"

namespace eppctl {
namespace {

absl::StatusOr<std::chrono::microseconds> FlagDuration(const char* flag, const std::string& text, bool allow_zero) {
  absl::StatusOr<int64_t> us = epp::ParseDurationMicros(text);
  if (!us.ok()) return absl::InvalidArgumentError(std::string(flag) + ": " + std::string(us.status().message()));
  if (*us < 0 || (*us == 0 && !allow_zero))
    return absl::InvalidArgumentError(std::string(flag) + ": must be " + (allow_zero ? ">= 0" : "> 0") + ", got '" +
                                      text + "'");
  return std::chrono::microseconds(*us);
}

absl::Status WriteReadyFile(const std::string& path, int grpc, int health, int metrics) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "{\"grpc\": " << grpc << ", \"health\": " << health << ", \"metrics\": " << metrics << "}\n";
    if (!out.flush()) return absl::UnavailableError("cannot write --ready-file " + path + ": " + std::string(std::strerror(errno)));
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

const char* SignalName(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "signal"; }

// ServeArgs' setting names (in libepp's messages and log lines) as this command's flags.
const std::map<std::string, std::string, std::less<>>& FlagNames() {
  static const std::map<std::string, std::string, std::less<>> names = [] {
    std::map<std::string, std::string, std::less<>> m;
    for (std::string_view setting : epp::ServeSettingNames()) {
      std::string flag = "--" + std::string(setting);
      for (char& ch : flag)
        if (ch == '_') ch = '-';
      m.emplace(std::string(setting), flag);
    }
    const std::pair<const char*, const char*> renamed[] = {
        {"config_file", "--config"},       {"endpoints_file", "--endpoints"},
        {"endpoint_flags", "--endpoint"},  {"clusters_file", "--clusters"},
        {"objective_flags", "--objective"}, {"capture_dir", "--capture"}, {"enable_tracing", "--tracing"},
        {"detector_staleness", "--metrics-staleness-threshold"}, {"metrics_pool_name", "--pool-name"}};
    for (const auto& [setting, flag] : renamed) m[setting] = flag;
    return m;
  }();
  return names;
}

// A logger that writes libepp's setting names as this command's flags.
class FlagNamingLogger final : public epp::Logger {
 public:
  explicit FlagNamingLogger(const epp::Logger& inner) : inner_(inner) {}
  bool Enabled(epp::LogLevel level) const override { return inner_.Enabled(level); }
  void Write(epp::LogLevel level, std::string_view message) const override {
    inner_.Write(level, epp::RenameServeSettings(message, FlagNames()));
  }

 private:
  const epp::Logger& inner_;
};

// Process-wide settings for a server under load (docs/serve.md, "Process settings").
void ApplyProcessPolicy() {
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
}

}  // namespace

// The reference EPP's runner flags that `eppctl serve` did not have under these names (GIE's
// cmd/epp runner options, LWEPP's, llm-d Router's additions, controller-runtime's zap flags), with
// the reference's meaning and defaults. docs/serve.md has the table.
void AddReferenceFlags(CLI::App* cmd, ServeOptions& o) {
  const std::string ref = "Reference flags (GIE / llm-d Router / LWEPP)";
  auto group = [&ref](CLI::Option* opt) { return opt->group(ref); };
  group(cmd->add_option("--endpoint-selector", o.args.endpoint_selector,
                        "Standalone mode, no InferencePool: the Pods this label selector matches in --pool-namespace "
                        "are the endpoints ('app=vllm,env in (a,b)')"));
  group(cmd->add_option("--endpoint-target-ports", o.args.endpoint_target_ports,
                        "With --endpoint-selector: 1-8 target ports, comma-separated; each Pod is one endpoint per port")
            ->delimiter(','));
  group(cmd->add_option("--model-server-metrics-scheme", o.args.model_server_metrics_scheme,
                        "Scheme of discovered Pods' metrics: http or https")
            ->capture_default_str()
            ->check(CLI::IsMember({"http", "https"})));
  group(cmd->add_option("--model-server-metrics-path", o.args.model_server_metrics_path,
                        "Path of discovered Pods' metrics")
            ->capture_default_str());
  group(cmd->add_option("--model-server-metrics-port", o.args.model_server_metrics_port,
                        "Port of discovered Pods' metrics (0: the endpoint's target port)")
            ->capture_default_str());
  group(cmd->add_flag("--model-server-metrics-https-insecure-skip-verify", o.args.model_server_metrics_https_insecure_skip_verify,
                      "With --model-server-metrics-scheme=https: do not verify the servers' certificates (default true)"));
  const std::pair<const char*, std::string*> specs[] = {
      {"--total-queued-requests-metric", &o.args.total_queued_requests_metric},
      {"--total-running-requests-metric", &o.args.total_running_requests_metric},
      {"--kv-cache-usage-percentage-metric", &o.args.kv_cache_usage_percentage_metric},
      {"--lora-info-metric", &o.args.lora_info_metric},
      {"--cache-info-metric", &o.args.cache_info_metric}};
  for (const auto& [flag, dst] : specs) {
    group(cmd->add_option(flag, *dst,
                          "Metric spec (name{label=value}) overriding this field of every engine's mapping (default: "
                          "the mapping's own; the reference's default is vLLM's name)"));
  }
  group(cmd->add_option("--refresh-prometheus-metrics-interval", o.args.refresh_prometheus_metrics_interval,
                        "Accepted: epp computes /metrics when scraped, nothing is flushed periodically"));
  group(cmd->add_flag("--health-checking", o.args.health_checking,
                      "Also answer grpc.health.v1 on the ext_proc port, following readiness"));
  group(cmd->add_option("--grpc-max-recv-msg-size", o.args.grpc_max_recv_msg_size,
                        "Largest gRPC message received on the ext_proc port (10MiB, 25MB, ...)"));
  group(cmd->add_option("--grpc-max-send-msg-size", o.args.grpc_max_send_msg_size,
                        "Largest gRPC message sent on the ext_proc port"));
  group(cmd->add_option("--config-text", o.args.config_text, "The EndpointPickerConfig as text, instead of --config-file"));
  group(cmd->add_flag("--ha-enable-leader-election", o.args.ha_enable_leader_election,
                      "Leader election on a coordination.k8s.io Lease: only the leader reports readiness"));
  cmd->add_option("--leader-election-id", o.args.leader_election_id,
                  "Name of the leader Lease (default: epp-NAMESPACE-POOL.llm-d.ai)");
  cmd->add_option("--leader-election-namespace", o.args.leader_election_namespace,
                  "Namespace of the leader Lease (default: the pool's)");
  cmd->add_option("--leader-election-identity", o.args.leader_election_identity,
                  "This replica's identity in the Lease (default: $POD_NAME, else the host name)");
  cmd->add_option("--leader-election-lease-duration", o.args.leader_election_lease_duration,
                  "How long a Lease not renewed stays valid for the standbys (controller-runtime's default)")
      ->capture_default_str();
  cmd->add_option("--leader-election-renew-deadline", o.args.leader_election_renew_deadline,
                  "The leader stops leading when it could not renew for this long")
      ->capture_default_str();
  cmd->add_option("--leader-election-retry-period", o.args.leader_election_retry_period,
                  "How often candidates try and the leader renews")
      ->capture_default_str();
  cmd->add_option("--shared-state", o.args.shared_state,
                  "Share prefix-index updates and in-flight counts with the other replicas through this Redis or "
                  "Valkey (redis://HOST:PORT, rediss://, unix://PATH; docs/serve.md, Shared state)");
  cmd->add_option("--shared-state-password-file", o.args.shared_state_password_file,
                  "File holding the Redis password (else $EPP_SHARED_STATE_PASSWORD, else the URL's)");
  cmd->add_option("--shared-state-ca-file", o.args.shared_state_ca_file,
                  "CA bundle that signs the Redis server's certificate (rediss://; default: the system's)");
  cmd->add_option("--shared-state-key-prefix", o.args.shared_state_key_prefix,
                  "Prefix of every Redis key (default: epp:POOL:)");
  cmd->add_option("--shared-state-replica-id", o.args.shared_state_replica_id,
                  "This replica's name in the shared state (default: $POD_NAME, else host-pid-random)");
  cmd->add_option("--shared-state-interval", o.args.shared_state_interval,
                  "How often updates are sent and the others' read (staleness is about twice this)")
      ->capture_default_str();
  cmd->add_option("--shared-state-timeout", o.args.shared_state_timeout,
                  "A connect or round trip slower than this fails; the replica routes on its own state meanwhile")
      ->capture_default_str();
  const std::pair<const char*, const char*> optional[] = {
      {"--tracing",
       "OpenTelemetry spans per request over OTLP (default on; sent only when OTEL_EXPORTER_OTLP_ENDPOINT or "
       "OTEL_TRACES_EXPORTER names an exporter; docs/serve.md, Tracing)"},
      {"--enable-pprof", "Accepted; epp has no Go pprof handlers (a notice says so when true)"},
      {"--enable-cert-reload",
       "Re-read --cert-path's files and --client-ca when they change (default true here, false in the reference); "
       "=false reads them once at start"},
      {"--metrics-endpoint-auth",
       "/metrics and /debug/decisions answer only a bearer token the API server authenticates and authorizes "
       "(TokenReview, SubjectAccessReview); default: on whenever serve uses a Kubernetes API"},
      {"--enable-grpc-stream-metrics", "Accepted; epp's ext_proc stream metrics are always exported"},
      {"--allow-experimental-plugins", "Accepted; every epp plugin type is always allowed"}};
  for (const auto& [flag, help] : optional) group(cmd->add_flag(flag, help));
  group(cmd->add_option("--tls-min-version", o.args.tls_min_version, "Accepted; gRPC's TLS defaults apply (notice)"));
  group(cmd->add_option("--tls-cipher-suites", o.args.tls_cipher_suites, "Accepted; gRPC's TLS defaults apply (notice)")
            ->delimiter(','));
  group(cmd->add_option("--metrics-client-ca-file", o.args.metrics_client_ca_file, "Accepted; /metrics is plain HTTP (notice)"));
  group(cmd->add_option("--metrics-cert-dir", o.args.metrics_cert_dir, "Accepted; /metrics is plain HTTP (notice)"));
  group(cmd->add_option("-v,--v", o.verbosity, "Log verbosity as the reference counts it: 4 and above logs debug lines")
            ->capture_default_str());
  group(cmd->add_option("--zap-encoder", o.zap_encoder, "Log line format: console (default) or json")
            ->check(CLI::IsMember({"console", "json"})));
  group(cmd->add_option("--zap-log-level", o.zap_log_level, "Log level: debug, info, error, panic or a verbosity number"));
  group(cmd->add_option("--zap-time-encoding", o.zap_time_encoding,
                        "Time format of JSON log lines: iso8601 (default), rfc3339, rfc3339nano, epoch, millis, nano")
            ->check(CLI::IsMember({"iso8601", "rfc3339", "rfc3339nano", "epoch", "millis", "nano"})));
  group(cmd->add_option("--zap-stacktrace-level", o.zap_stacktrace_level, "Accepted; epp logs no stack traces"));
  group(cmd->add_flag("--zap-devel", o.zap_devel, "Accepted; the console format is epp's default"));
}

void AddServeFlags(CLI::App* cmd, ServeOptions& o, std::function<void()>& finish) {
  cmd->add_option("--config,-c,--config-file", o.args.config_file, "EndpointPickerConfig YAML (default: GIE's default profile)");
  cmd->add_option("--endpoints", o.args.endpoints_file,
                  "Endpoints file (YAML or JSON); re-read when it changes (ConfigMap updates included)");
  cmd->add_option("--endpoint,-e", o.args.endpoint_flags,
                  "ADDR[=METRICS]: an endpoint and its metrics (file, URL or 'none'; default: scrape "
                  "http://ADDR/metrics); repeatable");
  cmd->add_option("--engine", o.args.engine,
                  "Metrics dialect of endpoints that name none: auto, vllm, sglang, trtllm-serve, triton-tensorrt-llm")
      ->capture_default_str();
  cmd->add_option("--grpc-port", o.args.grpc_port, "ext_proc gRPC port (0 picks a free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--grpc-health-port", o.args.grpc_health_port, "grpc.health.v1 port, plaintext (0 picks a free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--metrics-port", o.args.metrics_port, "Prometheus /metrics and /healthz port (0 picks a free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--listen-address", o.args.listen_address, "Address the three servers listen on")->capture_default_str();
  cmd->add_option("--refresh-metrics-interval", o.args.refresh_metrics_interval,
                  "How often endpoints' metrics are read (Go duration)")
      ->capture_default_str();
  cmd->add_option("--metrics-staleness-threshold", o.args.metrics_staleness_threshold,
                                           "Metrics older than this are stale: pool-average gauges skip them; given "
                                           "explicitly, also the default saturation "
                                           "detector's metricsStalenessThreshold unless the config sets it")
                               ->capture_default_str();
  cmd->add_option("--scrape-timeout", o.args.scrape_timeout,
                  "Timeout of one metrics read; a hung endpoint delays the others' refresh by this much")
      ->capture_default_str();
  cmd->add_flag("--scrape-gzip", o.args.scrape_gzip,
                "Ask model servers for gzip-compressed metrics: fewer bytes, more CPU on both sides (for slow "
                "links, such as pods of a remote region)");
  cmd->add_flag("--secure-serving", o.args.secure_serving,
                "Serve ext_proc over TLS. Default: on; --secure-serving=false (or --no-secure-serving) for plaintext h2c");
  cmd->add_flag_callback("--no-secure-serving", [&o] { o.args.secure_serving = false; },
                         "Plaintext h2c: the same as --secure-serving=false");
  cmd->add_option("--cert-path", o.args.cert_path,
                  "Directory with tls.crt and tls.key, re-read when they change (default: a self-signed certificate "
                  "made at start)");
  cmd->add_option("--client-ca", o.args.client_ca,
                  "PEM CA bundle: the ext_proc port requires a client certificate one of them signed (the gateway's) "
                  "and refuses other TLS handshakes; re-read when it changes. Needs TLS");
  cmd->add_option("--max-request-bytes", o.args.max_request_bytes, "Largest request body accepted (larger: 413)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-buffered-request-bytes", o.args.max_buffered_request_bytes,
                  "What all ext_proc streams may hold buffered at once (request bodies until their pick, kept "
                  "response parts; 256Mi, 1Gi, ...; 0: no limit); a body past it is answered 429")
      ->capture_default_str();
  cmd->add_option("--max-streams", o.args.max_streams,
                  "Open ext_proc streams at most (0: no limit); a stream past it is answered 429")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-streams-per-connection", o.args.max_streams_per_connection,
                  "HTTP/2 streams one gateway connection may open at once (0: gRPC's default)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--drain-timeout", o.drain_timeout, "On SIGTERM/SIGINT, how long open streams may take to finish")
      ->capture_default_str();
  cmd->add_option("--shutdown-delay", o.shutdown_delay,
                  "On SIGTERM/SIGINT, keep accepting new streams this long after readiness turns NOT_SERVING")
      ->capture_default_str();
  cmd->add_option("--stream-request-timeout", o.args.stream_request_timeout,
                  "End a stream whose request body has not ended this long after it opened (0: never)")
      ->capture_default_str();
  cmd->add_option("--stream-idle-timeout", o.args.stream_idle_timeout,
                  "After the pick, end a stream that gets no message from the gateway for this long (0: never)")
      ->capture_default_str();
  cmd->add_option("--handshake-timeout", o.args.handshake_timeout,
                  "Close an ext_proc connection whose TLS/HTTP2 handshake has not completed this long after it was accepted")
      ->capture_default_str();
  cmd->add_option("--capture", o.args.capture_dir,
                  "Write every stream's messages as protobuf JSON lines into DIR (files 0600, credential headers "
                  "redacted)");
  cmd->add_option("--capture-max-bytes", o.args.capture_max_bytes,
                  "What all capture files together may hold (1Gi, 500MiB, ...); then streams are no longer captured")
      ->capture_default_str();
  cmd->add_option("--decision-log", o.args.decision_log,
                  "Keep the last N decisions with their explain trace, served at /debug/decisions on the metrics "
                  "port (request metadata: sensitive; 0 = off)")
      ->capture_default_str();
  cmd->add_option("--decision-log-rate", o.args.decision_log_rate, "Decisions kept per second at most (the rest are counted)")
      ->capture_default_str();
  cmd->add_flag("--decision-log-prompts", o.args.decision_log_prompts,
                "Also keep each logged request's prompt text (first 4 KiB): off by default");
  cmd->add_option("--log-level", o.log_level, "error, warn, info or debug (default: from --v, info)")
      ->check(CLI::IsMember({"error", "warn", "info", "debug"}));
  cmd->add_option("--objective", o.args.objective_flags,
                  "NAME=PRIORITY: priority of requests whose x-gateway-inference-objective is NAME (negative = "
                  "sheddable); repeatable");
  cmd->add_flag("--disable-endpoint-subset-filter", o.args.disable_endpoint_subset_filter,
                "Ignore the gateway's subset hint (GIE's flag)");
  cmd->add_option("--trust-objective-header", o.args.trust_objective_header,
                  "Let the request's x-llm-d-inference-objective / x-gateway-inference-objective choose its "
                  "priority (false: ignored, priority 0; set false unless the gateway sets or strips them)")
      ->capture_default_str();
  cmd->add_option("--trust-model-rewrite-header", o.args.trust_model_rewrite_header,
                  "Let the request's x-llm-d-model-name-rewrite / x-gateway-model-name-rewrite rewrite its model "
                  "(false: ignored; only the cluster's InferenceModelRewrites rewrite)")
      ->capture_default_str();
  cmd->add_flag("--emit-endpoint-scores", o.args.emit_endpoint_scores,
                "Also put every candidate's total score (primary profile) in envoy.lb metadata as "
                "x-gateway-destination-endpoint-scores (llm-d's flag)");
  cmd->add_option("--seed", o.args.seed, "Seed for tie-breaks and random pickers")->capture_default_str();
  cmd->add_option("--ready-file", o.ready_file,
                  "Once serving, write the bound ports here as JSON {\"grpc\":..,\"health\":..,\"metrics\":..}");
  cmd->add_option("--region", o.args.region,
                  "Region this EPP runs in: the home region of region-spillover-filter and region-rtt-scorer "
                  "when their homeRegion is not set (docs/multicluster.md)");
  cmd->add_option("--zone", o.args.zone,
                  "Zone of the gateway this EPP serves: zone-preference-scorer's default when the request "
                  "carries no zone header");
  // No "=default" in the help: there is no default pool (without this flag, --endpoints or
  // --endpoint, serve has no endpoints); "default" is only the metrics label then.
  cmd->add_option("--pool-name", o.pool_name,
                  "InferencePool whose Ready Pods are the endpoints (with --endpoints: only the metrics label); the "
                  "`name` label of the inference_pool_* metrics (\"default\" without it). No default pool");
  cmd->add_option("--pool-import", o.args.pool_import,
                  "InferencePoolImport (inference.networking.x-k8s.io/v1alpha1) whose exporting clusters are the "
                  "endpoints: a region-level EPP in Parent Mode (docs/multicluster.md); needs --clusters");
  cmd->add_option("--clusters", o.args.clusters_file,
                  "Cluster directory for --pool-import: an endpoints file with one entry per cluster (its gateway "
                  "address, its EPP's metrics URL with engine: epp, labels with --cluster-label naming the cluster)");
  cmd->add_option("--cluster-label", o.args.cluster_label, "Label of a --clusters entry naming its cluster")->capture_default_str();
  cmd->add_option("--pool-namespace", o.args.pool_namespace,
                  "Namespace of the InferencePool (default: $NAMESPACE, else this Pod's namespace, else default)");
  cmd->add_option("--pool-group", o.args.pool_group,
                  "InferencePool API group: inference.networking.k8s.io (v1) or inference.networking.x-k8s.io "
                  "(v1alpha2)")
      ->capture_default_str()
      ->check(CLI::IsMember({std::string(epp::kInferencePoolGroupV1), std::string(epp::kInferencePoolGroupV1Alpha2)}));
  cmd->add_option("--pool-resync-interval", o.args.pool_resync_interval,
                  "With --no-pool-watch: how often the InferencePool and its Pods are listed (Go duration)")
      ->capture_default_str();
  cmd->add_flag("--watch-objectives", o.args.watch_objectives,
                "With --pool-name: watch the pool's InferenceObjectives and InferenceModelRewrites (llm-d.ai and "
                "inference.networking.x-k8s.io v1alpha2). Default: on");
  cmd->add_flag_callback("--no-watch-objectives", [&o] { o.args.watch_objectives = false; },
                         "Do not watch InferenceObjectives and InferenceModelRewrites");
  cmd->add_flag("--pool-watch", o.args.pool_watch,
                "Watch the InferencePool and its Pods (list once, then watch). Default: on");
  cmd->add_flag_callback("--no-pool-watch", [&o] { o.args.pool_watch = false; },
                         "List the InferencePool and its Pods every --pool-resync-interval instead of watching");
  cmd->add_option("--kube-api-server", o.args.kube_api_server,
                  "Kubernetes API server URL, http(s)://HOST:PORT (default: in-cluster configuration)");
  cmd->add_option("--kube-token-file", o.args.kube_token_file,
                  "Bearer token file, re-read every minute (default in cluster: the service account token)");
  cmd->add_option("--kube-ca-file", o.args.kube_ca_file,
                  "CA bundle verifying the API server (default in cluster: the service account ca.crt)");
  cmd->add_flag("--kube-insecure-skip-verify", o.args.kube_insecure_skip_verify,
                "Do not verify the API server's TLS certificate");
  AddReferenceFlags(cmd, o);
  // As Go's flag package has it: a flag given twice keeps its last value (charts append flags to
  // a default list). Repeatable flags (--endpoint, --objective) still collect every value.
  for (CLI::Option* opt : cmd->get_options())
    if (opt->get_expected_max() <= 1) opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  CLI::Option* staleness = cmd->get_option("--metrics-staleness-threshold");
  CLI::Option* pool_name = cmd->get_option("--pool-name");
  finish = [&o, staleness, pool_name, cmd] {
    if (staleness->count() > 0) o.args.detector_staleness = o.args.metrics_staleness_threshold;
    if (pool_name->count() > 0) o.args.pool_name = o.pool_name;
    // Tri-state reference flags: set only when given.
    const std::pair<const char*, std::optional<bool>*> optional[] = {
        {"--tracing", &o.args.enable_tracing},
        {"--enable-pprof", &o.args.enable_pprof},
        {"--enable-cert-reload", &o.args.enable_cert_reload},
        {"--metrics-endpoint-auth", &o.args.metrics_endpoint_auth},
        {"--enable-grpc-stream-metrics", &o.args.enable_grpc_stream_metrics},
        {"--allow-experimental-plugins", &o.args.allow_experimental_plugins}};
    for (const auto& [name, dst] : optional) {
      CLI::Option* opt = cmd->get_option(name);
      if (opt->count() > 0) *dst = opt->as<bool>();
    }
  };
}

void SetupServeCommand(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<ServeOptions>();
  auto finish = std::make_shared<std::function<void()>>();
  CLI::App* cmd = app.add_subcommand("serve", "Run the Endpoint Picker: an Envoy ext_proc server (docs/serve.md)");
  AddServeFlags(cmd, *o, *finish);
  cmd->callback([o, finish, &exit_code] {
    (*finish)();
    exit_code = RunServe(*o);
  });
}

int RunServe(const ServeOptions& o) {
  epp::LogLevel level = epp::LogLevel::kInfo;
  if (!o.log_level.empty() ? !epp::ParseLogLevel(o.log_level, level)
                           : !epp::LogLevelFromReference(o.verbosity, o.zap_log_level, level))
    return PrintError(absl::InvalidArgumentError(!o.log_level.empty() ? "--log-level: unknown level '" + o.log_level + "'"
                                                                      : "--zap-log-level: unknown level '" + o.zap_log_level + "'"));
  epp::LogTimeEncoding time = epp::LogTimeEncoding::kIso8601;
  if (o.zap_time_encoding == "epoch") time = epp::LogTimeEncoding::kEpoch;
  if (o.zap_time_encoding == "millis") time = epp::LogTimeEncoding::kMillis;
  if (o.zap_time_encoding == "nano") time = epp::LogTimeEncoding::kNanos;
  epp::StderrLogger log(level, o.zap_encoder == "json" ? epp::LogFormat::kJson : epp::LogFormat::kText, time);
  if (!o.zap_stacktrace_level.empty())
    log.Info("--zap-stacktrace-level is accepted: epp logs no stack traces");
  const FlagNamingLogger flag_log(log);  // libepp's log lines name this command's flags
  // Once: as a JSON log line for log collectors (--zap-encoder json), else as eppctl's "error:"
  // line (the text log would repeat it on the same stderr).
  const bool json_log = o.zap_encoder == "json";
  auto fail = [&log, json_log](const absl::Status& s) {
    if (!json_log) return PrintError(s);
    log.Error(std::string(s.message()));
    return ExitCodeFor(s);
  };
  absl::StatusOr<std::chrono::microseconds> drain = FlagDuration("--drain-timeout", o.drain_timeout, true);
  if (!drain.ok()) return fail(drain.status());
  absl::StatusOr<std::chrono::microseconds> shutdown_delay = FlagDuration("--shutdown-delay", o.shutdown_delay, true);
  if (!shutdown_delay.ok()) return fail(shutdown_delay.status());
  absl::StatusOr<epp::ServeConfig> config = epp::BuildServeConfig(o.args);
  if (!config.ok()) return fail(epp::RenameServeSettings(config.status(), FlagNames()));
  config->log = &flag_log;
  if (o.args.pool_name && !o.args.endpoints_file.empty())
    log.Info("--pool-name " + o.pool_name + " with --endpoints: the endpoints come from the file; the InferencePool "
             "is not read (--pool-name names the metrics only)");
  ApplyProcessPolicy();

  // The stop signals are taken by sigwait below: block them before any thread starts.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<std::unique_ptr<epp::EppServer>> started = epp::EppServer::Start(*std::move(config));
  if (!started.ok()) return fail(epp::RenameServeSettings(started.status(), FlagNames()));
  epp::EppServer& server = **started;
  server.SetReady(true);
  const auto ms = [](std::chrono::microseconds us) { return std::chrono::duration_cast<std::chrono::milliseconds>(us); };
  // Logged before the ready file appears, so that whoever waits for the file finds the line.
  log.Info(o.program + " " EPP_VERSION_STRING " serving: " + server.Describe() + ", drain " + o.drain_timeout);
  if (!o.ready_file.empty()) {
    if (absl::Status s = WriteReadyFile(o.ready_file, server.grpc_port(), server.health_port(), server.metrics_port());
        !s.ok())
      return fail(s);
  }

  // Run until SIGTERM / SIGINT; then readiness NOT_SERVING, the shutdown delay, the drain.
  int sig = 0;
  while (sig == 0) sig = WaitSignal(stop, std::chrono::hours(24));
  log.Info(std::string("received ") + SignalName(sig) + ": readiness NOT_SERVING; draining open streams for up to " +
           o.drain_timeout + " (a second signal exits at once)");
  // Without a shutdown delay, new streams are refused from the moment readiness turns
  // NOT_SERVING (before it, so none slips in between); with one, they are accepted until it ends.
  if (shutdown_delay->count() == 0) server.BeginDrain();
  server.SetReady(false);
  // The Lease goes at the signal, not after the shutdown delay: a standby is ready within a
  // retry period while this replica still accepts what the load balancer sends it.
  server.StepDown();
  auto quit_now = [&log](int s) {
    log.Warn(std::string("received ") + SignalName(s) + " again: exiting without waiting for open streams");
    std::fflush(stderr);
    std::_Exit(kExitFailure);
  };
  if (shutdown_delay->count() > 0) {
    if (int again = WaitSignal(stop, ms(*shutdown_delay)); again != 0) quit_now(again);
  }
  const int64_t open_streams = server.stats().streams_active.load();
  const auto drain_start = std::chrono::steady_clock::now();
  std::atomic<bool> drained{false};
  std::thread drainer([&] {
    server.Shutdown(ms(*drain));
    drained = true;
  });
  while (!drained.load()) {
    if (int again = WaitSignal(stop, std::chrono::milliseconds(50)); again != 0) quit_now(again);
  }
  drainer.join();
  const double drain_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - drain_start).count();
  if (!o.ready_file.empty()) std::remove(o.ready_file.c_str());
  char took[32];
  std::snprintf(took, sizeof took, "%.3fs", drain_s);
  log.Info("stopped: " + std::to_string(open_streams) + " streams were open at the signal; drain took " + took);
  return kExitOk;
}

int RunEppMain(int argc, char** argv) {
  // Go's flag syntax: -flag and --flag are the same flag, -v=4 included. CLI11 reads long flags
  // with two dashes only, so every single-dash flag becomes a double-dash one (-v is also --v).
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.size() >= 2 && a[0] == '-' && a[1] != '-' && !std::isdigit(static_cast<unsigned char>(a[1]))) a = "-" + a;
    args.push_back(std::move(a));
  }
  std::reverse(args.begin(), args.end());  // CLI11's parse(vector) takes them last first
  CLI::App app{"epp: the Endpoint Picker, with the reference EPP's command line (eppctl serve; docs/serve.md)"};
  app.set_version_flag("--version", EPP_VERSION_STRING);
  ServeOptions o;
  o.program = "epp";
  std::function<void()> finish;
  AddServeFlags(&app, o, finish);
  try {
    app.parse(args);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  finish();
  return RunServe(o);
}

}  // namespace eppctl
