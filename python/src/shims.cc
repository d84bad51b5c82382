#include "shims.h"

#include <array>

#include <pybind11/stl.h>

namespace pyepp {

StatusError::StatusError(absl::Status status)
    : status_(std::move(status)), what_(std::string(status_.message())) {}

void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw StatusError(status);
}

namespace {

struct ErrorClass {
  absl::StatusCode code;
  std::string_view name;
};

// The one table from Status codes to Python exception classes (DESIGN section 10). The classes
// live in pyepp/errors.py rather than being created here: ConfigError and NotFoundError also
// derive from ValueError and KeyError, and NotFoundError must undo KeyError's quoting of its
// message, which is a one-line method in Python.
constexpr std::array<ErrorClass, 3> kErrorClasses = {{
    {absl::StatusCode::kInvalidArgument, "ConfigError"},
    {absl::StatusCode::kNotFound, "NotFoundError"},
    {absl::StatusCode::kUnavailable, "UnavailableError"},
}};

void RaiseStatus(const absl::Status& status) {
  // Importing here (a sys.modules lookup after the first time) keeps no Python object in a C++
  // static, which could outlive the interpreter.
  py::object errors = py::module_::import("pyepp.errors");
  py::object cls = errors.attr(std::string(ErrorClassName(status.code())).c_str());
  py::object exc = cls(std::string(status.message()));
  exc.attr("code") = absl::StatusCodeToString(status.code());
  PyErr_SetObject(cls.ptr(), exc.ptr());
}

py::str Str(std::string_view s) { return py::str(s.data(), s.size()); }

}  // namespace

std::string_view ErrorClassName(absl::StatusCode code) {
  for (const ErrorClass& e : kErrorClasses) {
    if (e.code == code) return e.name;
  }
  return "EppError";
}

void RegisterStatusTranslator() {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      RaiseStatus(e.status());
    }
  });
}

py::tuple MetricFamilies_ParseShim(const std::string& text, bool lenient) {
  epp::ParseOptions options;
  options.lenient = lenient;
  absl::StatusOr<epp::MetricFamilies> parsed = [&] {
    py::gil_scoped_release release;
    return epp::ParsePrometheusText(text, options);
  }();
  const epp::MetricFamilies families = Unwrap(std::move(parsed));

  py::list out_families;
  for (const epp::MetricFamily& f : families.families()) {
    py::list samples;
    // Consecutive samples mostly share a name (x_bucket, x_bucket, ...): reuse the str object.
    std::string_view last_name;
    py::str name;
    for (const epp::Sample& s : f.samples) {
      if (s.name != last_name) {  // sample names are never empty
        name = Str(s.name);
        last_name = s.name;
      }
      py::dict labels;
      for (const epp::Label& l : s.labels) labels[Str(l.name)] = Str(l.value);
      py::object timestamp = s.timestamp_ms ? py::object(py::int_(*s.timestamp_ms)) : py::object(py::none());
      samples.append(py::make_tuple(name, std::move(labels), s.value, std::move(timestamp)));
    }
    out_families.append(py::make_tuple(Str(f.name), Str(epp::MetricTypeName(f.type)), Str(f.help), std::move(samples)));
  }
  py::list skipped;
  for (const auto& [line, reason] : families.skipped()) skipped.append(py::make_tuple(line, reason));
  return py::make_tuple(std::move(out_families), std::move(skipped));
}

std::tuple<std::string, epp::EndpointMetrics, std::vector<epp::CheckResult>> EndpointMetrics_ExtractShim(
    const std::string& text, const std::string& engine, bool lenient,
    const std::vector<std::pair<std::string, std::string>>& metric_overrides) {
  epp::ParseOptions parse_options;
  parse_options.lenient = lenient;
  const epp::MetricFamilies families = Unwrap(epp::ParsePrometheusText(text, parse_options));
  epp::CheckOptions options;
  options.metric_overrides = metric_overrides;
  options.engine = engine;
  const std::string name = Unwrap(epp::ResolveEngine(families, options));
  const epp::MetricMapping mapping = Unwrap(epp::ResolveMapping(name, options));
  epp::MetricsExtraction extraction = epp::ExtractMetrics(families, mapping);
  return {name, std::move(extraction.metrics), std::move(extraction.checks)};
}

std::vector<epp::MetricMapping> MetricMapping_LoadYamlShim(const std::string& yaml, const std::string& source_name) {
  return Unwrap(epp::LoadMetricMappingsYaml(yaml, source_name));
}

std::string CheckResult_StatusShim(const epp::CheckResult& result) {
  return std::string(epp::CheckStatusName(result.status));
}

std::string CheckReport_RunToJsonShim(const std::vector<std::string>& targets, const epp::CheckOptions& options) {
  return epp::CheckReportToJson(Unwrap(epp::RunChecks(targets, options)), /*indent=*/-1);
}

uint64_t PrefixSeedShim(const std::string& model, const std::string& cache_salt) {
  return epp::PrefixSeed(model, cache_salt);
}

std::vector<uint64_t> ChainedBlockHashesShim(const std::string& text, size_t block_chars, uint64_t seed,
                                             size_t max_blocks) {
  if (block_chars == 0) ThrowIfError(absl::InvalidArgumentError("block_chars must be > 0"));
  return epp::ChainedBlockHashes(text, block_chars, seed, max_blocks);
}

namespace {

py::list EventsToList(const std::vector<epp::SimEvent>& events) {
  py::list out;
  for (const epp::SimEvent& e : events) {
    const char* kind = e.kind == epp::SimEvent::Kind::kFirstToken ? "first_token"
                       : e.kind == epp::SimEvent::Kind::kFinished ? "finished"
                                                                   : "rejected";
    out.append(py::make_tuple(kind, e.id, e.time_us));
  }
  return out;
}

py::dict HistogramToDict(const epp::SimHistogram& h) {
  py::dict d;
  d["bounds"] = h.bounds;
  d["counts"] = h.counts;
  d["count"] = h.count;
  d["sum"] = h.sum;
  return d;
}

}  // namespace

std::shared_ptr<epp::SimServer> SimServer_CreateShim(const epp::SimParams& params) {
  return std::shared_ptr<epp::SimServer>(Unwrap(epp::SimServer::Create(params)));
}

py::list SimServer_SubmitShim(epp::SimServer& server, uint64_t id, int64_t prompt_tokens, int64_t output_tokens,
                              std::vector<uint64_t> block_hashes, const std::string& adapter, int64_t t_us) {
  epp::SimRequest r;
  r.id = id;
  r.prompt_tokens = prompt_tokens;
  r.output_tokens = output_tokens;
  r.block_hashes = std::move(block_hashes);
  r.adapter = adapter;
  std::vector<epp::SimEvent> events;
  ThrowIfError(server.Submit(r, t_us, &events));
  return EventsToList(events);
}

py::list SimServer_AdvanceToShim(epp::SimServer& server, int64_t t_us) {
  if (t_us < server.now_us()) ThrowIfError(absl::InvalidArgumentError("time cannot move backwards"));
  std::vector<epp::SimEvent> events;
  server.AdvanceTo(t_us, &events);
  return EventsToList(events);
}

py::object SimServer_NextEventTimeShim(const epp::SimServer& server) {
  const int64_t t = server.NextEventTime();
  if (t == std::numeric_limits<int64_t>::max()) return py::none();
  return py::int_(t);
}

int64_t SimServer_CachedPrefixBlocksShim(const epp::SimServer& server, const std::vector<uint64_t>& hashes) {
  return server.CachedPrefixBlocks(hashes);
}

py::dict SimServer_SnapshotShim(const epp::SimServer& server) {
  const epp::SimSnapshot s = server.Snapshot();
  py::dict d;
  d["now_us"] = s.now_us;
  d["waiting"] = s.waiting;
  d["running"] = s.running;
  d["kv_blocks_used"] = s.kv_blocks_used;
  d["kv_usage"] = s.kv_usage;
  d["cached_blocks"] = s.cached_blocks;
  d["running_adapters"] = s.running_adapters;
  d["waiting_adapters"] = s.waiting_adapters;
  d["resident_adapters"] = s.resident_adapters;
  d["requests_finished"] = s.requests_finished;
  d["requests_rejected"] = s.requests_rejected;
  d["prompt_tokens_total"] = s.prompt_tokens_total;
  d["generation_tokens_total"] = s.generation_tokens_total;
  d["prefix_query_tokens_total"] = s.prefix_query_tokens_total;
  d["prefix_hit_tokens_total"] = s.prefix_hit_tokens_total;
  d["ttft_s"] = HistogramToDict(s.ttft_s);
  d["e2e_s"] = HistogramToDict(s.e2e_s);
  d["queue_s"] = HistogramToDict(s.queue_s);
  return d;
}

std::string SimServer_MetricsTextShim(const epp::SimServer& server, double wall_time_s) {
  return epp::RenderSimMetrics(server.params(), server.Snapshot(), wall_time_s);
}

std::shared_ptr<epp::SimHttpServer> SimHttpServer_StartShim(const epp::SimParams& params, const std::string& host,
                                                            int port, double time_scale, double fail_rate,
                                                            int metrics_delay_ms, bool metrics_malformed,
                                                            double drop_rate, int max_tokens_default, int threads) {
  epp::SimHttpOptions o;
  o.params = params;
  o.host = host;
  o.port = port;
  o.time_scale = time_scale;
  o.fail_rate = fail_rate;
  o.metrics_delay_ms = metrics_delay_ms;
  o.metrics_malformed = metrics_malformed;
  o.drop_rate = drop_rate;
  o.max_tokens_default = max_tokens_default;
  o.threads = threads;
  absl::StatusOr<std::unique_ptr<epp::SimHttpServer>> server = [&] {
    py::gil_scoped_release release;
    return epp::SimHttpServer::Start(o);
  }();
  return std::shared_ptr<epp::SimHttpServer>(Unwrap(std::move(server)));
}

}  // namespace pyepp
