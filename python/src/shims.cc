#include "shims.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <limits>

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
  epp::ScrapeOptions options;
  options.metric_overrides = metric_overrides;
  options.engine = engine;
  options.lenient = lenient;
  const epp::MetricMappings mappings = Unwrap(epp::MetricMappings::Create(options));
  epp::MetricsRead read = epp::ReadEndpointMetrics(text, mappings, engine);
  ThrowIfError(read.error);
  return {read.engine, std::move(read.extraction.metrics), std::move(read.extraction.checks)};
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
                                                            double drop_rate, int max_tokens_default, int threads,
                                                            const std::string& role, double kv_link_gbytes_per_s,
                                                            int64_t kv_bytes_per_token, const std::string& kv_events,
                                                            const std::string& kv_events_replay,
                                                            const std::string& tokenizer, bool render_endpoints) {
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
  o.role = role;
  o.kv_link_gbytes_per_s = kv_link_gbytes_per_s;
  o.kv_bytes_per_token = kv_bytes_per_token;
  o.kv_events_endpoint = kv_events;
  o.kv_events_replay_endpoint = kv_events_replay;
  o.tokenizer = tokenizer;
  o.render_endpoints = render_endpoints;
  absl::StatusOr<std::unique_ptr<epp::SimHttpServer>> server = [&] {
    py::gil_scoped_release release;
    return epp::SimHttpServer::Start(o);
  }();
  return std::shared_ptr<epp::SimHttpServer>(Unwrap(std::move(server)));
}

}  // namespace pyepp

// --- Scheduling ------------------------------------------------------------------------------

namespace pyepp {

epp::InferenceRequest InferenceRequest_ParseOpenAIShim(const std::string& path, const std::string& body) {
  return Unwrap(epp::ParseOpenAIRequest(path, body));
}

epp::InferenceRequest InferenceRequest_ParseCaptureShim(const std::string& text, const std::string& path_override) {
  return Unwrap(epp::ParseCaptureEnvelope(text, path_override));
}

std::pair<epp::InferenceRequest, std::string> InferenceRequest_ParseCaptureWithBodyShim(const std::string& text,
                                                                                       const std::string& path_override) {
  std::string body;
  epp::InferenceRequest r = Unwrap(epp::ParseCaptureEnvelope(text, path_override, &body));
  return {std::move(r), std::move(body)};
}

epp::InferenceRequest InferenceRequest_ParseShim(const std::string& path, const std::string& body,
                                                 const std::vector<std::string>& parsers) {
  if (parsers.empty()) return Unwrap(epp::ParseRequest(path, body));
  std::vector<epp::RequestParser> list;
  for (const std::string& t : parsers) {
    std::optional<epp::RequestParser> p = epp::RequestParserForType(t);
    if (!p) ThrowIfError(absl::InvalidArgumentError("parsers: '" + t + "' is not a request parser type"));
    list.push_back(*p);
  }
  return Unwrap(epp::ParseRequest(path, body, epp::ParserSet(list)));
}

std::string InferenceRequest_ParserShim(const epp::InferenceRequest& request) {
  return std::string(epp::RequestParserType(request.parser));
}

std::string AnthropicToChatShim(const std::string& body) { return Unwrap(epp::AnthropicToChatCompletions(body)); }

std::optional<std::tuple<double, double, double, std::optional<double>>> ResponseUsage_ParseShim(
    const epp::InferenceRequest& request, const std::string& body, bool event_stream) {
  std::optional<epp::ResponseUsage> u = epp::ParseResponseUsage(request.parser, request.api, body, event_stream);
  if (!u) return std::nullopt;
  return std::make_tuple(u->prompt_tokens, u->completion_tokens, u->total_tokens, u->cached_tokens);
}

std::string InferenceRequest_ApiShim(const epp::InferenceRequest& request) {
  return std::string(epp::ApiKindName(request.api));
}

void Endpoint_ValidateAddressShim(const std::string& address) { ThrowIfError(epp::ValidateEndpointAddress(address)); }

void EndpointMetrics_ValidateShim(const epp::EndpointMetrics& metrics) { ThrowIfError(epp::ValidateEndpointMetrics(metrics)); }

std::vector<epp::Endpoint> Endpoints_LoadShim(const std::string& path, const epp::CheckOptions& check,
                                              bool fail_on_metrics_error, const SchedulerHolder* scheduler) {
  const std::vector<epp::EndpointSpec> specs = Unwrap(epp::LoadEndpointsFile(path));
  // A clock stopped at 0 stamps what was read as "fresh at the pick" (shims.h, Time).
  epp::ManualClock clock(0);
  epp::ResolveOptions options;
  options.scrape = check;
  options.clock = &clock;
  options.fail_on_metrics_error = fail_on_metrics_error;
  if (scheduler != nullptr) scheduler->scheduler->ConfigureScrape(options.scrape);
  return Unwrap(epp::ResolveEndpoints(specs, options));
}

epp::EppConfig EppConfig_ParseShim(const std::string& yaml, const std::string& source) {
  return Unwrap(epp::ParseConfig(yaml, source));
}

epp::EppConfig EppConfig_LoadFileShim(const std::string& path) { return Unwrap(epp::LoadConfigFile(path)); }

std::shared_ptr<epp::PluginRegistry> PluginRegistry_CreateShim() {
  return std::make_shared<epp::PluginRegistry>(epp::BuiltinRegistry());
}

std::string PluginRegistry_SchemaJsonShim(const epp::PluginRegistry& registry, const std::string& type) {
  const epp::PluginSchema* schema = registry.Schema(type);
  if (schema == nullptr) ThrowIfError(absl::NotFoundError("unknown plugin type '" + type + "'"));
  return schema->ToParams().ToJson();
}

namespace {

// A Python object shared by C++ copies (std::function copies, plugins on request threads): the
// last owner drops the reference holding the GIL, whichever thread it runs on.
using SharedObject = std::shared_ptr<py::object>;

SharedObject Share(py::object object) {
  return SharedObject(new py::object(std::move(object)), [](py::object* p) {
    if (Py_IsInitialized()) {
      py::gil_scoped_acquire gil;
      delete p;
    } else {
      p->release();  // the interpreter is gone: nothing left to decrement
      delete p;
    }
  });
}

// "ValueError: boom". REQUIRES: the GIL.
std::string ErrorText(const py::error_already_set& e) {
  std::string type = "Exception";
  std::string message;
  try {
    type = py::str(e.type().attr("__name__")).cast<std::string>();
    message = py::str(e.value()).cast<std::string>();
  } catch (...) {  // an exception whose str() raises
    message = e.what();
  }
  return message.empty() ? type : type + ": " + message;
}

// The first failure of a plugin goes to the "pyepp" logger, so errors are seen without explain.
// REQUIRES: the GIL.
void LogOnce(std::atomic<bool>& logged, const std::string& message) {
  if (logged.exchange(true)) return;
  try {
    py::module_::import("logging").attr("getLogger")("pyepp").attr("warning")(message);
  } catch (py::error_already_set&) {  // logging must not turn a degraded pick into a crash
  }
}

// Native copies of the request and candidates for a Python call, metrics times relative to the
// pick (shims.h, Time). REQUIRES: the GIL.
py::object RequestArg(const epp::SchedulingContext& ctx) { return py::cast(*ctx.request); }

py::list EndpointsArg(const epp::SchedulingContext& ctx, epp::Candidates candidates) {
  py::list out;
  for (const epp::Endpoint* e : candidates) {
    epp::Endpoint copy = *e;
    epp::ShiftMetricsTimes({&copy, 1}, -ctx.now_us);
    out.append(py::cast(std::move(copy)));
  }
  return out;
}

py::object EndpointArg(const epp::SchedulingContext& ctx, const epp::Endpoint& e) {
  epp::Endpoint copy = e;
  epp::ShiftMetricsTimes({&copy, 1}, -ctx.now_us);
  return py::cast(std::move(copy));
}

// The error of a Python plugin's last call on this thread, so Explain() (called right after
// Score() by the same thread, for the same cycle) can report it. Keyed by plugin and cycle.
struct CallError {
  const void* plugin = nullptr;
  const epp::SchedulingContext* ctx = nullptr;
  std::string text;
};
thread_local std::vector<CallError> t_call_errors;

void SetCallError(const void* plugin, const epp::SchedulingContext& ctx, std::string text) {
  // Only failed calls keep an entry, so the list stays as short as the plugins failing now.
  auto it = std::find_if(t_call_errors.begin(), t_call_errors.end(), [&](const CallError& e) { return e.plugin == plugin; });
  if (text.empty()) {
    if (it != t_call_errors.end()) t_call_errors.erase(it);
  } else if (it != t_call_errors.end()) {
    it->ctx = &ctx;
    it->text = std::move(text);
  } else {
    t_call_errors.push_back({plugin, &ctx, std::move(text)});
  }
}

const std::string* GetCallError(const void* plugin, const epp::SchedulingContext& ctx) {
  for (const CallError& e : t_call_errors)
    if (e.plugin == plugin && e.ctx == &ctx && !e.text.empty()) return &e.text;
  return nullptr;
}

class PythonPlugin : public epp::Plugin {
 public:
  PythonPlugin(epp::TypedName typed_name, epp::Params params, SharedObject impl)
      : Plugin(std::move(typed_name)), params_(std::move(params)), impl_(std::move(impl)) {}
  epp::Params EffectiveParams() const override { return params_.is_null() ? epp::Params::Map() : params_; }

 protected:
  // Calls impl.method(args...) and converts the result to T; on any failure returns nullopt and
  // sets `error`. REQUIRES: the GIL.
  template <typename T, typename... Args>
  std::optional<T> Call(const char* method, std::string& error, Args&&... args) const {
    try {
      return impl_->attr(method)(std::forward<Args>(args)...).template cast<T>();
    } catch (py::error_already_set& e) {
      error = ErrorText(e);
    } catch (const py::cast_error&) {
      error = std::string(method) + "() returned a value of the wrong type";
    } catch (const std::exception& e) {
      error = e.what();
    }
    return std::nullopt;
  }
  void Failed(const std::string& what, const std::string& error) const {
    LogOnce(logged_, "python " + what + " '" + name() + "' (type: " + type() + ") failed: " + error);
  }

  epp::Params params_;
  SharedObject impl_;
  mutable std::atomic<bool> logged_{false};
};

class PythonScorer final : public PythonPlugin, public epp::Scorer {
 public:
  using PythonPlugin::PythonPlugin;
  const epp::Scorer* AsScorer() const override { return this; }
  epp::ScorerCategory category() const override { return epp::ScorerCategory::kDistribution; }

  void Score(const epp::SchedulingContext& ctx, epp::Candidates candidates, std::span<double> scores) const override {
    std::string error;
    {
      py::gil_scoped_acquire gil;
      std::optional<std::vector<double>> values =
          Call<std::vector<double>>("score", error, RequestArg(ctx), EndpointsArg(ctx, candidates));
      if (values && values->size() != candidates.size()) {
        error = "score() returned " + std::to_string(values->size()) + " scores for " +
                std::to_string(candidates.size()) + " endpoints";
      } else if (values) {
        std::copy(values->begin(), values->end(), scores.begin());
      }
      if (!error.empty()) Failed("scorer", error);
    }
    if (!error.empty()) std::fill(scores.begin(), scores.end(), 0.0);  // degrade: score 0 for all
    SetCallError(this, ctx, std::move(error));
  }

  std::string Explain(const epp::SchedulingContext& ctx, const epp::Endpoint& e) const override {
    if (const std::string* error = GetCallError(this, ctx)) return "python error: " + *error;
    py::gil_scoped_acquire gil;
    std::string error;
    std::optional<std::string> text = Call<std::string>("explain", error, RequestArg(ctx), EndpointArg(ctx, e));
    return text ? *text : "python error in explain(): " + error;
  }
};

class PythonFilter final : public PythonPlugin, public epp::Filter {
 public:
  using PythonPlugin::PythonPlugin;
  const epp::Filter* AsFilter() const override { return this; }

  std::vector<const epp::Endpoint*> Apply(const epp::SchedulingContext& ctx,
                                          epp::Candidates candidates) const override {
    std::string error;
    std::optional<std::vector<bool>> keep;
    {
      py::gil_scoped_acquire gil;
      keep = Call<std::vector<bool>>("filter", error, RequestArg(ctx), EndpointsArg(ctx, candidates));
      if (keep && keep->size() != candidates.size()) {
        error = "filter() returned " + std::to_string(keep->size()) + " flags for " +
                std::to_string(candidates.size()) + " endpoints";
      }
      if (!error.empty()) Failed("filter", error);
    }
    std::vector<const epp::Endpoint*> out;
    for (size_t i = 0; i < candidates.size(); ++i)
      if (!error.empty() || (*keep)[i]) out.push_back(candidates[i]);  // degrade: keep all
    return out;
  }

  std::string WhyRemoved(const epp::SchedulingContext& ctx, const epp::Endpoint& e) const override {
    py::gil_scoped_acquire gil;
    std::string error;
    std::optional<std::string> text = Call<std::string>("why_removed", error, RequestArg(ctx), EndpointArg(ctx, e));
    if (!text) return "python error in why_removed(): " + error;
    return text->empty() ? "removed by python filter '" + name() + "'" : *text;
  }
};

}  // namespace

void PluginRegistry_RegisterPythonShim(epp::PluginRegistry& registry, const std::string& type, const std::string& kind,
                                       py::object factory) {
  if (kind != "scorer" && kind != "filter")
    ThrowIfError(absl::InvalidArgumentError("plugin kind must be 'scorer' or 'filter', got '" + kind + "'"));
  const char* method = kind == "scorer" ? "score" : "filter";
  epp::PluginFactory native = [type, kind, method, factory = Share(std::move(factory))](
                                  const std::string& name, const epp::Params& params,
                                  const epp::PluginContext&) -> absl::StatusOr<std::unique_ptr<epp::Plugin>> {
    py::gil_scoped_acquire gil;
    py::object impl;
    try {
      impl = (*factory)(name, params.is_null() ? std::string("{}") : params.ToJson());
    } catch (py::error_already_set& e) {
      return absl::InvalidArgumentError("python error: " + ErrorText(e));
    }
    if (!py::hasattr(impl, method))
      return absl::InvalidArgumentError("the factory returned an object without a " + std::string(method) + "() method");
    epp::TypedName typed_name{type, name};
    if (kind == "scorer") return std::make_unique<PythonScorer>(std::move(typed_name), params, Share(std::move(impl)));
    return std::make_unique<PythonFilter>(std::move(typed_name), params, Share(std::move(impl)));
  };
  ThrowIfError(registry.Register(type, std::move(native)));
}

std::shared_ptr<SchedulerHolder> Scheduler_BuildShim(const epp::EppConfig& config, const epp::PluginRegistry& registry,
                                                     uint64_t seed, const std::string& region, const std::string& zone) {
  auto holder = std::make_shared<SchedulerHolder>();
  holder->rng = std::make_unique<epp::SeededRng>(seed);
  holder->clock = &epp::SteadyClock::Get();
  epp::PluginContext context{holder->clock, holder->rng.get()};
  context.region = region;
  context.zone = zone;
  holder->scheduler = Unwrap(epp::BuildScheduler(config, registry, context));
  return holder;
}

PickOutcome Scheduler_PickShim(const SchedulerHolder& holder, epp::InferenceRequest request,
                               std::vector<epp::Endpoint> endpoints, std::optional<std::vector<std::string>> subset,
                               bool record, bool trace, const std::string& body) {
  epp::ShiftMetricsTimes(endpoints, holder.clock->NowMicros());  // relative -> the scheduler's clock
  epp::PickOptions options;
  options.subset = std::move(subset);
  options.record = record;
  options.trace = trace;
  request.body = body;  // for a token-producer that sends it on; only during the pick
  epp::PickResult result = holder.scheduler->Pick(request, endpoints, options);
  request.body = {};
  PickOutcome outcome{std::move(result), std::move(request)};
  return outcome;
}

void Scheduler_ReleaseShim(const SchedulerHolder& holder, const PickOutcome& outcome) {
  holder.scheduler->Release(outcome.result);
}

void Scheduler_ObserveFirstTokenShim(const SchedulerHolder& holder, const PickOutcome& outcome) {
  const epp::PickResult& r = outcome.result;
  if (r.status == 200 && !r.endpoints.empty()) holder.scheduler->ObserveFirstToken(r.pick_id, r.endpoints.front());
}

void Scheduler_ObserveCompletionShim(const SchedulerHolder& holder, const PickOutcome& outcome, double prompt_tokens,
                                     double completion_tokens, int64_t chunks, bool streamed) {
  const epp::PickResult& r = outcome.result;
  if (r.status != 200 || r.endpoints.empty()) return;
  epp::ResponseCompletion done;
  done.usage.prompt_tokens = prompt_tokens;
  done.usage.completion_tokens = completion_tokens;
  done.usage.total_tokens = prompt_tokens + completion_tokens;
  done.chunks = chunks;
  done.streamed = streamed;
  holder.scheduler->ObserveCompletion(r.pick_id, r.endpoints.front(), done);
}

std::string Scheduler_EffectiveConfigShim(const SchedulerHolder& holder) {
  return holder.scheduler->EffectiveConfigYaml();
}

std::vector<std::string> Scheduler_WarningsShim(const SchedulerHolder& holder) { return holder.scheduler->warnings(); }

std::vector<std::string> Scheduler_ProfileNamesShim(const SchedulerHolder& holder) {
  return holder.scheduler->ProfileNames();
}

size_t Scheduler_PrefixIndexEntriesShim(const SchedulerHolder& holder) {
  return holder.scheduler->PrefixIndexEntries();
}

std::pair<int64_t, int64_t> Scheduler_InflightShim(const SchedulerHolder& holder, const std::string& endpoint) {
  return holder.scheduler->Inflight(endpoint);
}

namespace {
py::list MissingInputsList(const std::vector<epp::MissingInput>& missing) {
  py::list out;
  for (const epp::MissingInput& m : missing) {
    py::dict d;
    d["plugin"] = m.plugin;
    d["type"] = m.type;
    d["input"] = std::string(epp::PluginInputName(m.input));
    d["why"] = m.why;
    d["message"] = m.ToString();
    out.append(std::move(d));
  }
  return out;
}
}  // namespace

py::list Scheduler_MissingInputsEngineShim(const SchedulerHolder& holder, const std::string& engine) {
  const epp::MetricMapping mapping = Unwrap(epp::ResolveMapping(engine, epp::ScrapeOptions()));
  return MissingInputsList(holder.scheduler->MissingInputs(mapping));
}

py::list Scheduler_MissingInputsEndpointsShim(const SchedulerHolder& holder, const std::vector<epp::Endpoint>& endpoints) {
  return MissingInputsList(holder.scheduler->MissingInputs(endpoints));
}

std::vector<epp::PluginTiming> Scheduler_PluginTimingsShim(const SchedulerHolder& holder) {
  return holder.scheduler->PluginTimings();
}

epp::DurationHistogram Scheduler_CycleTimingShim(const SchedulerHolder& holder) {
  return holder.scheduler->CycleTiming();
}

std::string PickOutcome_ToJsonShim(const PickOutcome& outcome, int indent) {
  return epp::PickResultToJson(outcome.has_request ? &outcome.request : nullptr, outcome.result, indent);
}

std::string PickOutcome_ToTextShim(const PickOutcome& outcome, bool color) {
  return epp::PickResultToText(outcome.has_request ? &outcome.request : nullptr, outcome.result, color);
}

}  // namespace pyepp

// --- ext_proc --------------------------------------------------------------------------------

namespace pyepp {

namespace {

py::list BytesList(const std::vector<std::string>& messages) {
  py::list out;
  for (const std::string& m : messages) out.append(py::bytes(m));
  return out;
}

}  // namespace

PythonEndpointSource::PythonEndpointSource(std::vector<epp::Endpoint> endpoints, const epp::Clock* clock)
    : relative_(std::move(endpoints)), clock_(clock) {}

std::shared_ptr<const std::vector<epp::Endpoint>> PythonEndpointSource::Snapshot() const {
  auto stamped = std::make_shared<std::vector<epp::Endpoint>>(*relative_.Snapshot());
  epp::ShiftMetricsTimes(*stamped, clock_->NowMicros());  // relative -> the scheduler's clock
  return stamped;
}

py::list CaptureRequests_BuildShim(const std::string& capture_json, const std::string& path_override,
                                   std::optional<std::vector<std::string>> subset, bool subset_as_string,
                                   size_t chunk_bytes) {
  epp::HttpRequestCapture capture = Unwrap(epp::CaptureToHttpRequest(capture_json, path_override));
  capture.subset = std::move(subset);
  capture.subset_as_string = subset_as_string;
  capture.chunk_bytes = chunk_bytes;
  return BytesList(epp::BuildProcessingRequests(capture));
}

py::list ResponseMessages_BuildShim(int status, const std::vector<std::pair<std::string, std::string>>& headers,
                                    const std::string& body, const std::string& served_endpoint) {
  return BytesList(epp::BuildResponseMessages(status, headers, body, served_endpoint));
}

std::string ProcessingRequest_ToJsonShim(const std::string& bytes) { return Unwrap(epp::ProcessingRequestToJson(bytes)); }

std::string ProcessingResponse_ToJsonShim(const std::string& bytes) {
  return Unwrap(epp::ProcessingResponseToJson(bytes));
}

py::bytes ProcessingRequest_FromJsonShim(const std::string& json) {
  return py::bytes(Unwrap(epp::ProcessingRequestFromJson(json)));
}

std::shared_ptr<SessionHolder> ExtProcSession_CreateShim(std::shared_ptr<SchedulerHolder> scheduler,
                                                         std::vector<epp::Endpoint> endpoints,
                                                         const epp::ExtProcOptions& options) {
  auto holder = std::make_shared<SessionHolder>();
  holder->endpoints = std::make_unique<PythonEndpointSource>(std::move(endpoints), scheduler->clock);
  holder->scheduler = std::move(scheduler);
  holder->options = options;
  holder->session = std::make_unique<epp::ExtProcSession>(*holder->scheduler->scheduler, *holder->endpoints,
                                                          holder->options);
  return holder;
}

py::list ExtProcSession_SendShim(SessionHolder& holder, const std::string& message) {
  std::vector<std::string> responses;
  absl::Status status;
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(holder.mu);
    status = holder.session->OnMessage(message, responses);
  }
  ThrowIfError(status);
  return BytesList(responses);
}

bool ExtProcSession_FinishedShim(SessionHolder& holder) {
  py::gil_scoped_release release;  // send() may hold `mu` while a Python plugin waits for the GIL
  std::lock_guard<std::mutex> lock(holder.mu);
  return holder.session->finished();
}

std::optional<PickOutcome> ExtProcSession_ResultShim(SessionHolder& holder) {
  py::gil_scoped_release release;  // send() may hold `mu` while a Python plugin waits for the GIL
  std::lock_guard<std::mutex> lock(holder.mu);
  const epp::PickResult* result = holder.session->result();
  if (result == nullptr) return std::nullopt;
  PickOutcome outcome{*result, {}, false};
  if (const epp::InferenceRequest* request = holder.session->request()) {
    outcome.request = *request;
    outcome.has_request = true;
  }
  return outcome;
}

std::string ExtProcSession_ServedShim(SessionHolder& holder) {
  py::gil_scoped_release release;  // send() may hold `mu` while a Python plugin waits for the GIL
  std::lock_guard<std::mutex> lock(holder.mu);
  return holder.session->served();
}

ServeHolder::~ServeHolder() {
  if (Py_IsInitialized() && PyGILState_Check()) {
    py::gil_scoped_release release;
    Close(std::chrono::milliseconds(0));
  } else {
    Close(std::chrono::milliseconds(0));
  }
}

void ServeHolder::Close(std::chrono::milliseconds drain) {
  std::lock_guard<std::mutex> lock(mu);
  if (server) server->Shutdown(drain);
}

namespace {

// ServeArgs' setting names as pyepp.serve's keyword arguments (its errors and log lines).
const std::map<std::string, std::string, std::less<>>& KeywordNames() {
  static const std::map<std::string, std::string, std::less<>> names = {
      {"config_file", "config"},
      {"endpoint_flags", "endpoint"},
      {"pool_resync_interval", "pool_resync_interval_s"},
      {"refresh_metrics_interval", "refresh_interval_s"},
      {"scrape_timeout", "scrape_timeout_s"},
      {"metrics_staleness_threshold", "staleness_s"},
      {"detector_staleness", "detector_staleness_s"},
      {"listen_address", "host"},
      {"grpc_port", "port"},
      {"grpc_health_port", "health_port"},
      {"secure_serving", "tls"},
      {"stream_request_timeout", "request_timeout_s"},
      {"stream_idle_timeout", "idle_timeout_s"},
      {"handshake_timeout", "handshake_timeout_s"},
      {"objective_flags", "objective_priorities"},
      {"disable_endpoint_subset_filter", "ignore_subset_hint"},
      {"leader_election_lease_duration", "leader_election_lease_duration_s"},
      {"leader_election_renew_deadline", "leader_election_renew_deadline_s"},
      {"leader_election_retry_period", "leader_election_retry_period_s"},
      {"shared_state_interval", "shared_state_interval_s"},
      {"shared_state_timeout", "shared_state_timeout_s"},
  };
  return names;
}

class KeywordNamingLogger final : public epp::Logger {
 public:
  explicit KeywordNamingLogger(epp::LogLevel level) : inner_(level) {}
  bool Enabled(epp::LogLevel level) const override { return inner_.Enabled(level); }
  void Write(epp::LogLevel level, std::string_view message) const override {
    inner_.Write(level, epp::RenameServeSettings(message, KeywordNames()));
  }

 private:
  epp::StderrLogger inner_;
};

epp::ServeConfig BuildConfig(const epp::ServeArgs& args) {
  absl::StatusOr<epp::ServeConfig> c = epp::BuildServeConfig(args);
  if (!c.ok()) ThrowIfError(epp::RenameServeSettings(c.status(), KeywordNames()));
  return *std::move(c);
}

std::shared_ptr<ServeHolder> Run(std::shared_ptr<ServeHolder> holder, epp::ServeConfig config) {
  absl::StatusOr<std::unique_ptr<epp::EppServer>> started = epp::EppServer::Start(std::move(config));
  if (!started.ok()) ThrowIfError(epp::RenameServeSettings(started.status(), KeywordNames()));
  holder->server = *std::move(started);
  holder->server->SetReady(true);
  return holder;
}

}  // namespace

std::shared_ptr<ServeHolder> ExtProcServer_StartShim(std::shared_ptr<SchedulerHolder> scheduler,
                                                     std::vector<epp::Endpoint> endpoints, const epp::ServeArgs& args) {
  auto holder = std::make_shared<ServeHolder>();
  holder->endpoints = std::make_shared<PythonEndpointSource>(std::move(endpoints), scheduler->clock);
  holder->scheduler = std::move(scheduler);
  epp::ServeArgs servers = args;  // what static mode takes: the servers and the streams
  servers.config_file.clear();
  servers.endpoints_file.clear();
  servers.endpoint_flags.clear();
  servers.pool_name.reset();
  servers.pool_import.clear();
  servers.clusters_file.clear();
  servers.endpoint_selector.clear();
  servers.endpoint_target_ports.clear();
  servers.config_text.clear();
  epp::ServeConfig c = BuildConfig(servers);
  // Shares the holder's ownership: the scheduler lives while the server does.
  c.scheduler = std::shared_ptr<const epp::Scheduler>(holder->scheduler, holder->scheduler->scheduler.get());
  c.endpoint_source = holder->endpoints;
  return Run(std::move(holder), std::move(c));
}

std::shared_ptr<ServeHolder> EppServer_StartShim(const epp::ServeArgs& args, const std::string& log_level) {
  auto holder = std::make_shared<ServeHolder>();
  epp::LogLevel level = epp::LogLevel::kWarn;
  if (!epp::ParseLogLevel(log_level, level))
    ThrowIfError(absl::InvalidArgumentError("log_level must be error, warn, info or debug, not '" + log_level + "'"));
  holder->log = std::make_unique<KeywordNamingLogger>(level);
  epp::ServeConfig c = BuildConfig(args);
  c.log = holder->log.get();
  return Run(std::move(holder), std::move(c));
}

std::string ExtProcServer_DecisionsShim(ServeHolder& holder, size_t limit, uint64_t after, uint64_t id) {
  const epp::DecisionLog* log = holder.server->decision_log();
  if (!log) ThrowIfError(absl::FailedPreconditionError("the decision log is off: serve(..., decision_log=N)"));
  if (id > 0) return log->DecisionJson(id).value_or("");
  return log->ListJson(limit, after);
}

int ExtProcServer_PortShim(const ServeHolder& holder) { return holder.server->grpc_port(); }

py::bytes ExtProcServer_CertPemShim(const ServeHolder& holder) { return py::bytes(holder.server->certificate_pem()); }

std::optional<int> ExtProcServer_HealthPortShim(const ServeHolder& holder) {
  const int p = holder.server->health_port();
  return p < 0 ? std::nullopt : std::optional<int>(p);
}

std::optional<int> ExtProcServer_MetricsPortShim(const ServeHolder& holder) {
  const int p = holder.server->metrics_port();
  return p < 0 ? std::nullopt : std::optional<int>(p);
}

bool ExtProcServer_LeadingShim(const ServeHolder& holder) { return holder.server->leading(); }

void ExtProcServer_SetEndpointsShim(ServeHolder& holder, std::vector<epp::Endpoint> endpoints) {
  if (!holder.endpoints)
    ThrowIfError(absl::FailedPreconditionError(
        "set_endpoints: this server reads its endpoints itself (endpoints_file, endpoint or pool_name)"));
  holder.endpoints->Set(std::move(endpoints));
}

void ExtProcServer_SetReadyShim(ServeHolder& holder, bool ready) {
  if (holder.server->health_port() < 0)
    ThrowIfError(absl::FailedPreconditionError("no health server: start with health_port"));
  py::gil_scoped_release release;  // close() may hold `mu` while draining streams that need the GIL
  std::lock_guard<std::mutex> lock(holder.mu);
  holder.server->SetReady(ready);
}

void ExtProcServer_CloseShim(ServeHolder& holder, double drain_s) {
  if (!(drain_s >= 0)) ThrowIfError(absl::InvalidArgumentError("drain_s must be >= 0"));
  holder.Close(std::chrono::milliseconds(static_cast<int64_t>(std::llround(drain_s * 1000.0))));
}

std::string ExtProcServer_MetricsTextShim(ServeHolder& holder) {
  py::gil_scoped_release release;  // rendering reads the scheduler, whose plugins may be Python
  return holder.server->RenderMetrics();
}

void ExtProcServer_ReloadConfigShim(ServeHolder& holder) {
  absl::Status s;
  {
    py::gil_scoped_release release;
    s = holder.server->ReloadConfig();
  }
  ThrowIfError(s);
}

py::dict ExtProcServer_ConfigReloadsShim(ServeHolder& holder) {
  const epp::ConfigReloadCounters c = holder.server->config_reloads();
  py::dict d;
  d["ok"] = c.ok;
  d["failed"] = c.failed;
  d["last_error"] = c.last_error;
  return d;
}

std::vector<epp::Endpoint> ExtProcServer_EndpointsShim(ServeHolder& holder) {
  std::vector<epp::Endpoint> out = *holder.server->endpoints().Snapshot();
  if (holder.endpoints) return out;  // static mode: already in pyepp's relative time
  // Runtime mode: the pool stamps metrics with the steady clock; pyepp's Endpoint keeps them
  // relative to now (shims.h, Time), so metrics_age_s is the age of the last read.
  epp::ShiftMetricsTimes(out, -epp::SteadyClock::Get().NowMicros());
  return out;
}

std::string ExtProcServer_DescribeShim(ServeHolder& holder) { return holder.server->Describe(); }

py::dict ExtProcServer_StatsShim(ServeHolder& holder) {
  const epp::ExtProcStats& s = holder.server->stats();
  py::dict d;
  d["streams_total"] = s.streams_total.load();
  d["streams_active"] = s.streams_active.load();
  d["requests_in_flight"] = s.requests_in_flight.load();
  d["outcome_200"] = s.outcome_200.load();
  d["outcome_400"] = s.outcome_400.load();
  d["outcome_413"] = s.outcome_413.load();
  d["outcome_429"] = s.outcome_429.load();
  d["outcome_503"] = s.outcome_503.load();
  d["outcome_500"] = s.outcome_500.load();
  d["served_mismatch"] = s.served_mismatch.load();
  d["timeouts_request"] = s.timeouts_request.load();
  d["timeouts_idle"] = s.timeouts_idle.load();
  d["prompt_tokens"] = s.prompt_tokens.load();
  d["completion_tokens"] = s.completion_tokens.load();
  d["cached_tokens"] = s.cached_tokens.load();
  d["prefix_blocks"] = s.prefix_blocks.load();
  d["prefix_match_blocks"] = s.prefix_match_blocks.load();
  py::list bounds, counts;
  int64_t total = 0;
  for (size_t i = 0; i < epp::ExtProcStats::kLatencyBuckets; ++i) bounds.append(epp::ExtProcStats::kLatencyBucketsUs[i]);
  for (size_t i = 0; i <= epp::ExtProcStats::kLatencyBuckets; ++i) {
    const int64_t n = s.latency_count[i].load();
    counts.append(n);
    total += n;
  }
  d["latency_bucket_bounds_us"] = bounds;
  d["latency_bucket_counts"] = counts;
  d["latency_count"] = total;
  d["latency_sum_us"] = s.latency_sum_us.load();
  return d;
}

// --- Replay ----------------------------------------------------------------------------------

size_t ReplayTrace_LenShim(const ReplayTrace& trace) { return trace.requests.size(); }

std::shared_ptr<ReplayTrace> ReplayTrace_LoadShim(const std::string& format, const std::string& path, double time_scale) {
  auto trace = std::make_shared<ReplayTrace>();
  const absl::StatusOr<epp::TraceFormat> parsed = epp::ParseTraceFormat(format);
  if (!parsed.ok())
    ThrowIfError(absl::InvalidArgumentError("trace_format must be 'mooncake', 'openai', 'azure', 'burstgpt' or None, got '" + format + "'"));
  trace->requests = Unwrap(epp::LoadReplayTrace(path, *parsed, time_scale));
  return trace;
}

std::shared_ptr<ReplayTrace> ReplayTrace_LoadAtRateShim(const std::string& format, const std::string& path, double time_scale,
                                                        double rate, bool poisson, uint64_t seed) {
  auto trace = std::make_shared<ReplayTrace>();
  const absl::StatusOr<epp::TraceFormat> parsed = epp::ParseTraceFormat(format);
  if (!parsed.ok())
    ThrowIfError(absl::InvalidArgumentError("trace_format must be 'mooncake', 'openai', 'azure', 'burstgpt' or None, got '" + format + "'"));
  epp::TraceArrivals arrivals;
  arrivals.rate = rate;
  arrivals.poisson = poisson;
  arrivals.seed = seed;
  trace->requests = Unwrap(epp::LoadReplayTrace(path, *parsed, time_scale, arrivals));
  return trace;
}

std::shared_ptr<ReplayTrace> ReplayTrace_SharedPrefixShim(const epp::SharedPrefixWorkload& workload) {
  auto trace = std::make_shared<ReplayTrace>();
  trace->requests = Unwrap(epp::GenerateSharedPrefix(workload));
  return trace;
}

void ReplayTrace_MixTenantsShim(ReplayTrace& trace, const std::string& tenants, const std::string& priorities, uint64_t seed) {
  epp::MixTenants(trace.requests, Unwrap(epp::ParseTenantMix(tenants, priorities, seed)));
}

void ReplayTrace_AttachSlosShim(ReplayTrace& trace, int64_t ttft_ms, int64_t tpot_ms) {
  epp::AttachSlos(trace.requests, ttft_ms, tpot_ms);
}

epp::SharedPrefixWorkload SharedPrefix_GieShim(const std::string& name) {
  return Unwrap(epp::GieBenchmarkWorkload(name));
}

epp::ReplayPolicy ReplayPolicy_NamedShim(const std::string& name) { return Unwrap(epp::NamedReplayPolicy(name)); }

epp::ReplayPolicy ReplayPolicy_ResolveShim(const std::string& spec, size_t index) {
  return Unwrap(epp::ResolveReplayPolicy(spec, index));
}

std::vector<epp::ReplayPolicy> ReplayPolicy_UniqueNamesShim(std::vector<epp::ReplayPolicy> policies) {
  epp::MakePolicyNamesUnique(policies);
  return policies;
}

epp::ReplayReport ReplayReport_RunShim(const ReplayTrace& trace, const std::vector<epp::ReplayPolicy>& policies,
                                       const epp::ReplayOptions& options) {
  return Unwrap(epp::RunReplay(trace.requests, policies, options));
}

epp::MultiRegionReport MultiRegion_RunShim(const ReplayTrace& trace, const epp::ReplayPolicy& policy,
                                           const epp::MultiRegionOptions& options) {
  return Unwrap(epp::RunMultiRegionReplay(trace.requests, policy, options));
}

std::vector<epp::ReplayRegion> ReplayRegions_ParseShim(const std::string& text) { return Unwrap(epp::ParseReplayRegions(text)); }

std::vector<epp::SimParams> MixedSpeedServers_Shim(const epp::SimParams& base, int servers, const std::vector<double>& speeds) {
  return Unwrap(epp::MixedSpeedServers(base, servers, speeds));
}

std::map<std::pair<std::string, std::string>, double> RttMatrix_ParseShim(const std::string& text) {
  return Unwrap(epp::ParseRttMatrix(text));
}

}  // namespace pyepp
