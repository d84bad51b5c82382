// Reading an endpoint's metrics text into EndpointMetrics (epp/metrics.h): scrape options, the
// mapping set resolved once, and ReadEndpointMetrics, the one path `eppctl check`, the endpoint
// pool (ResolveEndpoints / RefreshEndpointMetrics) and pyepp's extract take.
#include "common/strings.h"
#include "epp/metrics.h"

namespace epp {

absl::Status NormalizeScrapeOptions(ScrapeOptions& o) {
  if (o.timeout.count() < 1) return absl::InvalidArgumentError("timeout must be at least 1 ms");
  if (o.max_body_bytes == 0) return absl::InvalidArgumentError("max_body_bytes must be > 0");
  if (o.metrics_path.empty() || o.metrics_path[0] != '/') o.metrics_path = "/" + o.metrics_path;
  if (!o.bearer_token.empty()) {
    o.bearer_token = std::string(internal::TrimSpace(o.bearer_token));  // token files end in a newline
    if (o.bearer_token.empty()) return absl::InvalidArgumentError("bearer token is blank");
  }
  for (std::string& h : o.headers) {
    const size_t colon = h.find(':');
    std::string name =
        colon == std::string::npos ? "" : std::string(internal::TrimSpace(std::string_view(h).substr(0, colon)));
    if (name.empty()) return absl::InvalidArgumentError("header '" + h + "': expected 'Name: value'");
    if (h.find_first_of("\r\n") != std::string::npos) {
      return absl::InvalidArgumentError("header '" + name + "': expected 'Name: value' on one line");
    }
    h = name + ": " + std::string(internal::TrimSpace(std::string_view(h).substr(colon + 1)));
  }
  return absl::OkStatus();
}

absl::StatusOr<MetricMapping> ResolveMapping(std::string_view engine, const ScrapeOptions& options) {
  MetricMapping mapping;
  bool found = false;
  for (const MetricMapping& m : options.custom_mappings) {
    if (m.engine == engine) {
      mapping = m;
      found = true;
    }
  }
  if (!found) {
    auto builtin = MetricMapping::BuiltIn(engine);
    if (!builtin.ok()) {
      std::string msg(builtin.status().message());
      for (const MetricMapping& m : options.custom_mappings) msg += ", " + m.engine;
      return absl::NotFoundError(msg);
    }
    mapping = *builtin;
  }
  for (const auto& [field, spec] : options.metric_overrides) {
    EPP_RETURN_IF_ERROR(ApplyMetricOverride(mapping, field, spec));
  }
  return mapping;
}

absl::StatusOr<std::vector<MetricMapping>> CandidateMappings(const ScrapeOptions& options) {
  std::vector<MetricMapping> candidates;
  for (const std::string& name : MetricMapping::BuiltInEngines()) {
    EPP_ASSIGN_OR_RETURN(MetricMapping m, ResolveMapping(name, options));
    candidates.push_back(std::move(m));
  }
  for (const MetricMapping& m : options.custom_mappings) {
    bool builtin = false;
    for (const MetricMapping& c : candidates) builtin |= c.engine == m.engine;
    if (!builtin) {
      EPP_ASSIGN_OR_RETURN(MetricMapping r, ResolveMapping(m.engine, options));
      candidates.push_back(std::move(r));
    }
  }
  return candidates;
}

absl::StatusOr<MetricMappings> MetricMappings::Create(const ScrapeOptions& options,
                                                      std::span<const std::string> engines) {
  MetricMappings out;
  out.lenient_ = options.lenient;
  EPP_ASSIGN_OR_RETURN(out.candidates_, CandidateMappings(options));
  auto name = [&](const std::string& engine) -> absl::Status {
    if (engine.empty() || engine == "auto" || out.Find(engine) != nullptr) return absl::OkStatus();
    EPP_ASSIGN_OR_RETURN(MetricMapping m, ResolveMapping(engine, options));
    out.named_.push_back(std::move(m));
    return absl::OkStatus();
  };
  EPP_RETURN_IF_ERROR(name(options.engine));
  for (const std::string& e : engines) EPP_RETURN_IF_ERROR(name(e));
  return out;
}

const MetricMapping* MetricMappings::Find(std::string_view engine) const {
  for (const MetricMapping& m : named_)
    if (m.engine == engine) return &m;
  for (const MetricMapping& m : candidates_)
    if (m.engine == engine) return &m;
  return nullptr;
}

std::string MetricMappings::NoEngineMessage() const {
  std::string names;
  for (const MetricMapping& m : candidates_) names += (names.empty() ? "" : ", ") + m.engine;
  return "no known engine's metrics found (looked for " + names + "; use --engine or --metric)";
}

namespace {

MetricsRead ReadInto(std::string_view text, const MetricMappings& mappings, std::string_view engine,
                     std::string_view known_engine, MetricFamilies& fams, bool describe) {
  MetricsRead out;
  ParseOptions po;
  po.lenient = mappings.lenient();
  if (absl::Status parsed = ParsePrometheusTextInto(text, po, fams); !parsed.ok()) {
    out.error = std::move(parsed);
    return out;
  }
  out.parsed = true;
  out.families = fams.families().size();
  out.samples = fams.sample_count();
  out.skipped = fams.skipped();
  const MetricMapping* mapping = nullptr;
  if (!engine.empty() && engine != "auto") {
    mapping = mappings.Find(engine);
    if (mapping == nullptr) {
      out.error = absl::NotFoundError("engine '" + std::string(engine) + "' was not among the mappings resolved");
      return out;
    }
  } else {
    out.detected = true;
    // An engine detected earlier is kept: a server whose metrics fit two mappings cannot flap
    // between them from one scrape to the next.
    if (!known_engine.empty()) {
      for (const MetricMapping& m : mappings.candidates())
        if (m.engine == known_engine) mapping = &m;
    }
    if (mapping == nullptr) {
      if (std::optional<std::string> found = DetectEngine(fams, mappings.candidates())) mapping = mappings.Find(*found);
    }
    if (mapping == nullptr) {
      out.error = absl::NotFoundError(mappings.NoEngineMessage());
      return out;
    }
  }
  out.engine = mapping->engine;
  out.extraction = ExtractMetrics(fams, *mapping, describe);
  return out;
}

}  // namespace

MetricsRead ReadEndpointMetrics(std::string_view text, const MetricMappings& mappings, std::string_view engine,
                                std::string_view known_engine) {
  MetricFamilies fams;
  return ReadInto(text, mappings, engine, known_engine, fams, true);
}

MetricsRead ReadEndpointMetricsInto(std::string_view text, const MetricMappings& mappings, std::string_view engine,
                                    std::string_view known_engine, MetricFamilies& families) {
  return ReadInto(text, mappings, engine, known_engine, families, false);
}

absl::StatusOr<std::string> ResolveEngine(const MetricFamilies& families, const ScrapeOptions& options) {
  if (options.engine != "auto") {
    EPP_RETURN_IF_ERROR(ResolveMapping(options.engine, options).status());
    return options.engine;
  }
  EPP_ASSIGN_OR_RETURN(MetricMappings mappings, MetricMappings::Create(options));
  if (std::optional<std::string> engine = DetectEngine(families, mappings.candidates())) return *engine;
  return absl::NotFoundError(mappings.NoEngineMessage());
}

}  // namespace epp
