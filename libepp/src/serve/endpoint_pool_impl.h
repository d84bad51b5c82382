// Private: EndpointPool's state (epp/runtime/serve.h describes the behaviour).
//
// Threads: the scrape thread (RunCycle) owns specs, endpoints, last_error and the file watch;
// the discovery thread (RunDiscovery) owns discovered and discovery_state; `mu` guards what they
// hand each other and the counters. The published snapshot has its own lock.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "epp/runtime/http.h"
#include "epp/runtime/serve.h"
#include "serve/file_watch.h"

namespace epp {

struct EndpointPool::Impl {
  explicit Impl(EndpointPoolOptions o)
      : options(std::move(o)), log(options.log ? *options.log : NullLogger::Get()), watch(options.endpoints_file) {}

  EndpointPoolOptions options;
  const Logger& log;
  HttpClient client;  // the scrape thread's (and Create's), unless options.resolve.http_client
  EndpointSnapshot snapshot;

  // Scrape thread.
  std::vector<EndpointSpec> specs;
  std::vector<Endpoint> endpoints;
  std::vector<std::string> last_error;  // per endpoint: the state last logged (Track)
  internal::FileWatch watch;
  std::string rejected_state;  // the rejection of a discovered list last logged
  uint64_t generation = 0;     // bumped by Install: the threaded loop rebuilds its scraper

  // Discovery thread: the list last handed over; unset = hand the next one over whatever it is.
  std::optional<std::vector<EndpointSpec>> discovered;
  std::string discovery_state;  // the error last logged, "" = fine

  std::atomic<size_t> size{0};
  std::atomic<bool> stopping{false};
  mutable std::mutex mu;  // guards counters, stop, discovered_pending, discovered_rejected, published_specs
  std::vector<EndpointSpec> published_specs;  // a copy of `specs` for Specs()
  EndpointPoolCounters counters;
  std::optional<std::vector<EndpointSpec>> discovered_pending;
  // The scrape thread rejected a handed-over list: the discovery thread then forgets
  // `discovered`, so that the next list is handed over even if it is the same.
  bool discovered_rejected = false;
  bool stop = false;
  // SetScrapeOptions' settings with their resolved mappings, until the scrape thread takes them.
  std::optional<std::pair<ScrapeOptions, std::shared_ptr<const MetricMappings>>> pending_scrape;
  std::condition_variable cv;
  std::thread scrape_thread, discovery_thread;

  ResolveOptions Resolve();
  HttpClient& ClientInUse() { return options.resolve.http_client ? *options.resolve.http_client : client; }
  void ScrapeLoop();  // the scrape thread: a StaggeredScraper, published in slices
  absl::StatusOr<std::vector<EndpointSpec>> LoadSpecs() const;
  absl::StatusOr<std::vector<EndpointSpec>> WithFlags(std::vector<EndpointSpec> discovered) const;
  std::string ListerName() const { return options.lister ? options.lister->Describe() : std::string(); }
  void Install(std::vector<EndpointSpec> specs, std::vector<Endpoint> endpoints);
  bool Replace(absl::StatusOr<std::vector<EndpointSpec>> specs, const std::string& source);
  // Endpoints for `new_specs`: unchanged ones as they are, new or changed ones read now.
  absl::StatusOr<std::vector<Endpoint>> ResolveChanged(const std::vector<EndpointSpec>& new_specs);
  bool DiscoveredPending();  // a discovered list waits for the scrape thread
  void MaybeReload();
  void TakePendingScrape();  // the scrape thread: adopt SetScrapeOptions' settings
  void Refresh();
  void Track(size_t i, bool read);
  int64_t NowMicros() const;
};

}  // namespace epp
