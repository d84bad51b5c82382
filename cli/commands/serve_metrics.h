// Private to `eppctl serve`: its own Prometheus /metrics (text format 0.0.4) and the small HTTP
// server (cpp-httplib) that serves it with /healthz. docs/serve.md lists every metric.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "commands/serve_pool.h"
#include "epp/extproc.h"
#include "epp/scheduler.h"
#include "epp/status.h"

namespace eppctl {

struct ServeMetricsSources {
  epp::ExtProcStats* stats = nullptr;
  const epp::Scheduler* scheduler = nullptr;
  const epp::EndpointSource* endpoints = nullptr;
  const ServePool* pool = nullptr;
  int64_t staleness_us = 200000;  // endpoints with older metrics are left out of the pool averages
  std::string pool_name;          // `name` label of the GIE-compatible inference_pool_* gauges
};

// The exposition at `now_us` (the steady clock the scrape stamps metrics with).
std::string RenderServeMetrics(const ServeMetricsSources& sources, int64_t now_us);

class MetricsHttpServer {
 public:
  // Serves GET /metrics (render()) and GET /healthz ("ok") on host:port; port 0 picks a free one.
  // Returns once the server accepts connections.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& host, int port,
                                                                  std::function<std::string()> render);
  ~MetricsHttpServer();
  int port() const;
  void Stop();

  struct Impl;

 private:
  explicit MetricsHttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace eppctl
