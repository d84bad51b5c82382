// Endpoint sets: the pool of model servers that `eppctl explain`, `pick` and `serve` schedule
// over. Describing it (LoadEndpointsFile, ParseEndpointsYaml, ParseEndpointFlag -> EndpointSpec)
// is strict and fails before any I/O; resolving it (ResolveEndpoints -> Endpoint) reads or
// scrapes the metrics, picks the engine mapping as `eppctl check` does and extracts
// EndpointMetrics. RefreshEndpointMetrics repeats the metrics part for every endpoint at once;
// StaggeredScraper does it one endpoint at a time, each at its own phase (serve's scrape loop).
//
// The endpoints file, YAML or JSON; a bare top-level list works too:
//   endpoints:
//     - address: 10.0.0.1:8000     # required; "ip:port", "[v6]:port" (quoted) or "host:port"
//       metrics: m/a.prom          # file (relative to this file), http(s) URL or "none";
//                                  # absent or "": scrape http://ADDRESS/metrics
//       labels: {role: prefill}    # optional, string -> string
//       engine: vllm               # optional; absent or "auto": detect from the metrics
//     - 10.0.0.2:8000              # shorthand for {address: 10.0.0.2:8000}
//     - address: gw-east.example:443   # a whole pool behind its gateway (docs/multicluster.md)
//       metrics: https://epp-east.example:9090/metrics   # the remote EPP's own /metrics
//       engine: epp                # read its pool aggregates
//       labels: {region: us-east, zone: us-east-1a}
//       capacity: {requestsPerSecond: 50, tokensPerSecond: 200000}   # optional ceilings
//       tls: {caFile: ca.pem, insecureSkipVerify: false}            # for an https metrics URL
//     - address: 10.8.3.4:8000     # a remote cluster's pod (Endpoint Mode, flat network)
//       labels: {cluster: west-1}
//       metricsStalenessAllowance: 300ms   # its metrics may be this much older before stale
// Unknown keys, duplicate keys, duplicate addresses and an empty list are errors.
//
// Thread-safety: the functions share no state; independent calls may run concurrently. A
// ResolveOptions::http_client serves one call at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "epp/endpoint.h"
#include "epp/runtime/http.h"
#include "epp/metrics.h"
#include "epp/plugin.h"
#include "epp/status.h"

namespace epp {

// The metrics value meaning "this endpoint publishes no metrics" (a file of that name: "./none").
inline constexpr std::string_view kNoMetrics = "none";

// One endpoint as a file or flag describes it, before anything is read.
struct EndpointSpec {
  std::string address;  // "ip:port", "[v6]:port" or "host:port" (ValidateEndpointAddress)
  // A file path, an http(s) URL (fetched as is), "none", or empty = scrape
  // "http://ADDRESS" + ScrapeOptions::metrics_path.
  std::string metrics;
  std::map<std::string, std::string> labels;
  // "" = ResolveOptions::scrape.engine (default "auto"); "auto" = detect; else a mapping name
  // (vllm, sglang, trtllm-serve, triton-tensorrt-llm or a custom one).
  std::string engine;
  // "endpoints.yaml:4" or "--endpoint #2", for messages; when empty they say "endpoints[i]".
  std::string origin;
  // Which server is behind the address, when the source knows: "NS/NAME" of the Pod for
  // discovered endpoints. Empty for files and flags, whose address is the identity (moving an
  // entry to another line is not a new server). The same address with another instance is a new
  // server: the serve pool forgets the old one's state.
  std::string instance;
  // Where the server publishes KV-cache events (endpoints file `kvEvents: tcp://HOST:PORT`) and
  // serves their replay (`kvEventsReplay`); empty: the precise prefix producer's convention
  // (kvEventsConfig.podDiscoveryConfig.socketPort on the endpoint's host), if any.
  std::string kv_events;
  std::string kv_events_replay;
  // The IP of the node the server runs on (a discovered Pod's status.hostIP); empty when unknown.
  // dcgm-data-source's useNodeAddress reads the node's DCGM exporter there.
  std::string node_address;
  // Ceilings capacity-filter enforces (endpoints file `capacity:`); unlimited when empty.
  EndpointCapacity capacity;
  // TLS for an https metrics URL (endpoints file `tls:`): a PEM CA bundle (relative to the file)
  // instead of the system store, or no verification at all. Empty = ScrapeOptions' settings.
  std::string tls_ca_file;
  bool tls_insecure_skip_verify = false;
  // Endpoint::metrics_staleness_allowance_us (endpoints file `metricsStalenessAllowance`, a Go
  // duration up to 1h).
  int64_t metrics_staleness_allowance_us = 0;

  bool operator==(const EndpointSpec&) const = default;
};

// Reads an endpoints file; relative metrics paths resolve against its directory. kNotFound when
// it cannot be read, kInvalidArgument "FILE:LINE: endpoints[2].address: message" otherwise.
absl::StatusOr<std::vector<EndpointSpec>> LoadEndpointsFile(const std::string& path);

// The same over text: `source` names it in messages and origins; relative metrics paths are
// joined onto `base_dir` (kept as written when it is empty). A duplicate names both places.
absl::StatusOr<std::vector<EndpointSpec>> ParseEndpointsYaml(std::string_view text, std::string_view source,
                                                             const std::string& base_dir);

// One `--endpoint ADDR[=METRICS]` value (METRICS: file relative to the working directory, URL or
// "none"); `index` (1-based) gives the origin "--endpoint #N". kInvalidArgument naming it.
absl::StatusOr<EndpointSpec> ParseEndpointFlag(std::string_view flag, int index);

// "a.b.c.d:port", "[v6]:port" or "hostname:port" (RFC 1123 labels), port 1..65535 in decimal
// without a leading zero. kInvalidArgument saying what is wrong: "'10.0.0.1' has no port".
absl::Status ValidateEndpointAddress(std::string_view address);

// What ResolveEndpoints() checks before any I/O: valid and unique addresses, metrics of a known
// kind (no ftp://), non-empty label names. kInvalidArgument naming the spec's origin.
absl::Status ValidateEndpointSpecs(std::span<const EndpointSpec> specs);

struct ResolveOptions {
  // Mappings (custom ones, overrides, the default engine) and scrape settings (metrics_path,
  // timeout, insecure, headers, bearer_token, lenient; max_body_bytes also caps files).
  ScrapeOptions scrape;
  // The mappings, built once from `scrape` (MetricMappings::Create) by a caller that reads the
  // same endpoints again and again (the serve pool); nullptr: built for each call.
  std::shared_ptr<const MetricMappings> mappings;
  Clock* clock = nullptr;  // stamps metrics_time_us; nullptr = SteadyClock::Get()
  // false: an endpoint whose metrics cannot be used keeps metrics_error (its metrics are stale);
  // true: the first such problem in spec order is the call's error.
  bool fail_on_metrics_error = false;
  // When set, scrapes reuse this client's connections (one caller at a time).
  HttpClient* http_client = nullptr;
};

// One Endpoint per spec, in spec order: address and labels copied; metrics read from files and
// scraped from URLs (all URLs concurrently); engine = the spec's, else options.scrape.engine,
// "auto" detecting as `eppctl check` does; EndpointMetrics extracted with that mapping.
//  - metrics "none": no metrics, no error, no metrics_time_us;
//  - read: metrics_time_us = the clock after all I/O of the call; metrics_error lists failed
//    extraction checks ("metrics.queue: ..."), empty when every required value was read;
//  - not read (unreadable file, transport error, HTTP non-2xx, parse error, no engine found):
//    no metrics and no metrics_time_us; metrics_error = "endpoints[0] (10.0.0.1:8000): metrics
//    file 'x.prom' cannot be read: No such file or directory". With fail_on_metrics_error that
//    is the call's error instead, and so is a failed extraction check.
// Invalid specs or options, an unknown engine or a bad override fail the call before any I/O.
absl::StatusOr<std::vector<Endpoint>> ResolveEndpoints(std::span<const EndpointSpec> specs,
                                                       const ResolveOptions& options);

// Re-reads the metrics of endpoints that ResolveEndpoints() built from `specs` (same order and
// addresses, else kInvalidArgument), updating metrics, metrics_time_us, metrics_error and engine
// in place. An endpoint that cannot be read keeps its last metrics and time (they age into
// staleness). An auto-detected engine is kept once known. All endpoints are updated even when
// fail_on_metrics_error makes the call fail.
absl::Status RefreshEndpointMetrics(std::span<const EndpointSpec> specs, std::span<Endpoint> endpoints,
                                    const ResolveOptions& options);

// Reads endpoints' metrics on a staggered schedule, for a long-running scrape thread (the serve
// pool's): each endpoint is scraped once per interval at its own phase, spread over the interval
// by a hash of its address (stable across reloads), so that a pool of 1,000 servers is read as a
// steady trickle instead of a burst of 1,000 transfers followed by 1,000 parses. Each answer is
// parsed as soon as it arrives, while the others are still in flight, and applied to its
// endpoint as RefreshEndpointMetrics() does (stamped when applied). A scrape still running when
// its endpoint falls due again is not doubled: the slot is an overrun. The requests are built
// once; every transfer goes through one HttpClient, whose connections are kept for reuse.
class StaggeredScraper {
 public:
  struct Stats {
    int64_t reads = 0;      // scrapes finished and applied (read or failed)
    int64_t overruns = 0;   // slots skipped because the endpoint's previous scrape still ran
    int64_t rounds = 0;     // intervals completed since Create
    // The longest time from a scrape falling due to its result being applied, over the scrapes
    // applied in the last completed round: under the interval, every endpoint was refreshed
    // within one interval.
    double last_round_lag_seconds = 0;
  };
  struct Applied {
    size_t index;  // into the specs / endpoints
    bool read;     // metrics (and metrics_time_us) were replaced
    // Only Endpoint::attributes changed: a data-layer source's answer (ScrapeOptions::
    // attribute_sources), which says nothing about the metrics.
    bool attributes = false;
  };

  // Validates as RefreshEndpointMetrics(); `client` must outlive the scraper, which cancels its
  // own transfers when destroyed. `options.http_client` is ignored (`client` is used).
  static absl::StatusOr<std::unique_ptr<StaggeredScraper>> Create(std::vector<EndpointSpec> specs,
                                                                  ResolveOptions options,
                                                                  std::chrono::microseconds interval,
                                                                  HttpClient& client);
  ~StaggeredScraper();
  StaggeredScraper(const StaggeredScraper&) = delete;
  StaggeredScraper& operator=(const StaggeredScraper&) = delete;

  // Runs until `until` or until client.Wakeup() is called: starts the scrapes that fall due and
  // applies each that finishes to endpoints[i] (the endpoints of the specs, in order), appending
  // it to `applied`.
  void RunUntil(std::span<Endpoint> endpoints, std::chrono::steady_clock::time_point until,
                std::vector<Applied>& applied);

  const Stats& stats() const;
  // When spec i falls due within each interval, counted from Create.
  std::chrono::microseconds Phase(size_t i) const;

  struct Impl;

 private:
  explicit StaggeredScraper(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace epp
