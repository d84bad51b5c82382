#include "commands/pool.h"

#include <iostream>

#include "epp/config.h"
#include "epp/runtime/endpoints.h"
#include "epp/registry.h"

namespace eppctl {

void AddPoolFlags(CLI::App* cmd, PoolOptions& o) {
  cmd->add_option("--config,-c", o.config, "EndpointPickerConfig YAML (default: GIE's default profile)");
  cmd->add_option("--endpoints", o.endpoints_file, "Endpoints file (YAML or JSON: endpoints: [{address, metrics, labels, engine}])");
  cmd->add_option("--endpoint,-e", o.endpoints,
                  "ADDR[=METRICS]: an endpoint and its metrics (file, URL or 'none'; default: scrape http://ADDR/metrics); repeatable");
  cmd->add_option("--seed", o.seed, "Seed for tie-breaks and random pickers")->capture_default_str();
  cmd->add_option("--engine", o.engine, "Metrics dialect of endpoints that name none: auto, vllm, sglang, trtllm-serve, triton-tensorrt-llm")
      ->capture_default_str();
  cmd->add_option("--timeout", o.timeout_s, "Scrape timeout in seconds")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_flag("--insecure", o.insecure, "Skip TLS verification when scraping");
  cmd->add_option("--region", o.region, "Region the EPP runs in (home region of the locality plugins), as serve's");
  cmd->add_option("--zone", o.zone, "Zone of the gateway (zone-preference-scorer's default), as serve's");
}

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(start, end - start);
    const size_t a = item.find_first_not_of(" \t"), b = item.find_last_not_of(" \t");
    if (a != std::string::npos) out.push_back(item.substr(a, b - a + 1));
    start = end + 1;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Pool>> BuildPool(const PoolOptions& o) {
  auto pool = std::make_unique<Pool>();
  pool->rng = std::make_unique<epp::SeededRng>(o.seed);
  epp::EppConfig config = epp::DefaultConfig();
  if (!o.config.empty()) {
    EPP_ASSIGN_OR_RETURN(config, epp::LoadConfigFile(o.config));
  }
  epp::PluginContext context{&pool->clock, pool->rng.get()};
  context.region = o.region;
  context.zone = o.zone;
  EPP_ASSIGN_OR_RETURN(pool->scheduler, epp::BuildScheduler(config, epp::BuiltinRegistry(), context));
  for (const std::string& w : pool->scheduler->warnings()) std::cerr << "warning: " << w << "\n";

  std::vector<epp::EndpointSpec> specs;
  if (!o.endpoints_file.empty()) {
    EPP_ASSIGN_OR_RETURN(specs, epp::LoadEndpointsFile(o.endpoints_file));
  }
  for (size_t i = 0; i < o.endpoints.size(); ++i) {
    EPP_ASSIGN_OR_RETURN(epp::EndpointSpec spec, epp::ParseEndpointFlag(o.endpoints[i], static_cast<int>(i + 1)));
    specs.push_back(std::move(spec));
  }
  if (specs.empty()) return absl::InvalidArgumentError("no endpoints: give --endpoints FILE or --endpoint ADDR[=METRICS]");
  EPP_RETURN_IF_ERROR(epp::ValidateEndpointSpecs(specs));
  epp::ResolveOptions ro;
  ro.scrape.engine = o.engine;
  ro.scrape.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  ro.scrape.insecure = o.insecure;
  ro.clock = &pool->clock;
  pool->scheduler->ConfigureScrape(ro.scrape);
  EPP_ASSIGN_OR_RETURN(pool->endpoints, epp::ResolveEndpoints(specs, ro));
  for (const epp::Endpoint& e : pool->endpoints)
    if (!e.metrics_error.empty()) std::cerr << "warning: " << e.metrics_error << "\n";
  // A scorer reading a metric no endpoint has scores 0 everywhere without saying so per pick.
  for (const epp::MissingInput& m : pool->scheduler->MissingInputs(pool->endpoints))
    std::cerr << "warning: " << m.ToString() << "\n";
  // A precise prefix producer: learn what the servers hold from their KV-event replay buffers.
  if (const epp::KvEventsBinding* kv = pool->scheduler->KvEvents()) {
    pool->kv = epp::LoadKvHistory(*kv, specs, std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000)));
    for (const epp::KvEndpointStats& s : pool->kv)
      if (!s.last_error.empty()) std::cerr << "warning: kv events " << s.endpoint << ": " << s.last_error << "\n";
  }
  return pool;
}

}  // namespace eppctl
