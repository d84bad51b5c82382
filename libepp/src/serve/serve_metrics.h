// Private to libepp's serve runtime: EppServer's Prometheus /metrics (text format 0.0.4) and the
// small HTTP server (our own, serve/admin_http.h) that serves it with /healthz and
// /debug/decisions. docs/serve.md lists every metric.
#pragma once

#include <optional>
#include "epp/kv/subscriber.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "epp/runtime/decision_log.h"
#include "epp/runtime/extproc.h"
#include "epp/scheduler.h"
#include "epp/runtime/kv_redis.h"
#include "epp/runtime/leader_election.h"
#include "epp/runtime/serve.h"
#include "epp/runtime/tracing.h"
#include "epp/status.h"
#include "flowcontrol/controller.h"
#include "serve/admin_http.h"

namespace epp::internal {

struct ServeMetricsSources {
  const ExtProcStats* stats = nullptr;
  const BufferBudget* buffer_budget = nullptr;  // the ext_proc server's
  // Certificate / client-CA reloads (applied, failed); nullopt when nothing is watched.
  std::optional<std::pair<int64_t, int64_t>> tls_reloads;
  const Scheduler* scheduler = nullptr;  // the one new streams use
  const EndpointSource* endpoints = nullptr;
  const EndpointPool* pool = nullptr;  // its counters; nullptr: a caller-kept source (all zero)
  ConfigReloadCounters config_reloads;
  int64_t staleness_us = 200000;  // endpoints with older metrics are left out of the pool averages
  std::string pool_name;          // `name` label of the GIE-compatible inference_pool_* gauges
  // The metrics port's own HTTP server (connections, refusals); nullptr without one.
  const AdminHttpStats* metrics_http = nullptr;
  // KV events (a precise prefix producer configured): per endpoint subscription figures and the
  // index's size; empty / nullopt without one.
  std::vector<KvEndpointStats> kv_endpoints;
  std::optional<KvIndexStats> kv_index;
  std::optional<KvCentralStats> kv_central;  // the central socket's drops (zmqEndpoint); nullopt: none
  std::vector<KvEndpointSummary> kv_holdings;
  // Leader election (--ha-enable-leader-election): the Lease's name and this replica's state.
  std::string lease_name;
  std::optional<LeaderElectionStats> leader;
  // The InferenceObjective / InferenceModelRewrite watches, when on.
  std::optional<KubeWatchStats> policy_watch;
  // The flow-control layer new streams wait in (featureGates: [flowControl]).
  std::optional<flowcontrol::ControllerStats> flow_control;
  // The OpenTelemetry exporter (--tracing with an exporter configured).
  std::optional<TracerStats> tracing;
  // --shared-state.
  std::optional<SharedStateStats> shared_state;
  // The precise index's copy in Redis (redisConfig).
  std::optional<KvRedisStats> kv_redis;
};

// The exposition at `now_us` (the clock the pool stamps metrics with).
std::string RenderServeMetrics(const ServeMetricsSources& sources, int64_t now_us);

// /debug/decisions over `log`: ?limit=N (default 50, at most the capacity) &after=ID (only newer
// ones) lists summaries; ?id=N one decision with its explain trace (404 when no longer held).
// 400 naming the parameter for a value that is not a whole number.
int ServeDecisions(const DecisionLog& log, const std::map<std::string, std::string>& query, std::string* body);

class MetricsHttpServer {
 public:
  // GET /debug/decisions: the query parameters in, the HTTP status out and the JSON body.
  using DebugHandler = std::function<int(const std::map<std::string, std::string>& query, std::string* body)>;
  // Serves GET /metrics (render()), GET /healthz ("ok") and GET /debug/decisions (`decisions`;
  // 404 naming the flag without one) on host:port; port 0 picks a free one. Returns once the
  // server accepts connections. HEAD too; any other method 405, any other path 404. The limits
  // are AdminHttpServer's defaults (admin_http.h); `stats` (optional, must outlive the server)
  // receives its counters. /healthz is answered on the event loop, the others on its workers.
  // Decides whether a request may read a path: the Authorization header in, (HTTP status, reason)
  // out, 200 to serve it. /healthz is never checked (kubelet probes carry no token).
  using Authorize = std::function<std::pair<int, std::string>(std::string_view authorization, std::string_view path)>;
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& host, int port,
                                                                  std::function<std::string()> render,
                                                                  DebugHandler decisions = {}, Authorize authorize = {},
                                                                  AdminHttpStats* stats = nullptr);
  ~MetricsHttpServer();
  int port() const;
  const AdminHttpStats& stats() const;
  void Stop();

  struct Impl;

 private:
  explicit MetricsHttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace epp::internal
