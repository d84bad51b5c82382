// PYBIND11_MODULE(_pyepp): the private native half of pyepp. One Bind<Area>() per public libepp
// header, each a flat list of definitions; adapters live in shims.cc. Users import pyepp, never
// this module.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "epp/tools/check.h"
#include "epp/config.h"
#include "epp/endpoint.h"
#include "epp/runtime/endpoints.h"
#include "epp/runtime/extproc.h"
#include "epp/metrics.h"
#include "epp/prefix_cache.h"
#include "epp/registry.h"
#include "epp/tools/replay.h"
#include "epp/request.h"
#include "epp/scheduler.h"
#include "epp/tools/sim.h"
#include "epp/text/chat_template.h"
#include "epp/tools/conformance.h"
#include "epp/tools/lint.h"
#include "epp/version.h"
#include "epp/text/tokenizer.h"
#include "shims.h"

namespace pyepp {
namespace {

void BindEndpoint(py::module_& m) {
  py::class_<epp::LoraInfo>(m, "LoraInfo")
      .def(py::init<>())
      .def_readwrite("max_lora", &epp::LoraInfo::max_lora)
      .def_readwrite("running", &epp::LoraInfo::running)
      .def_readwrite("waiting", &epp::LoraInfo::waiting)
      .def_readwrite("loaded", &epp::LoraInfo::loaded)
      .def_readwrite("loaded_cpu", &epp::LoraInfo::loaded_cpu)
      .def("slots_in_use", &epp::LoraInfo::SlotsInUse,
           "Distinct adapters of running, waiting and loaded: the slots the scorer counts as used");
  py::class_<epp::EndpointMetrics>(m, "EndpointMetrics")
      .def(py::init<>())
      .def_readwrite("waiting_queue_size", &epp::EndpointMetrics::waiting_queue_size)
      .def_readwrite("running_requests", &epp::EndpointMetrics::running_requests)
      .def_readwrite("kv_cache_usage", &epp::EndpointMetrics::kv_cache_usage)
      .def_readwrite("lora", &epp::EndpointMetrics::lora)
      .def_readwrite("cache_block_size", &epp::EndpointMetrics::cache_block_size)
      .def_readwrite("cache_num_blocks", &epp::EndpointMetrics::cache_num_blocks)
      .def_readwrite("custom", &epp::EndpointMetrics::custom);
  py::class_<epp::Endpoint>(m, "Endpoint")
      .def(py::init<>())
      .def_readwrite("address", &epp::Endpoint::address)
      .def_readwrite("labels", &epp::Endpoint::labels)
      .def_readwrite("engine", &epp::Endpoint::engine)
      .def_readwrite("metrics", &epp::Endpoint::metrics)
      .def_readwrite("metrics_time_us", &epp::Endpoint::metrics_time_us)
      .def_readwrite("metrics_error", &epp::Endpoint::metrics_error)
      .def_readwrite("unreachable", &epp::Endpoint::unreachable)
      .def_readwrite("capacity", &epp::Endpoint::capacity);
  py::class_<epp::EndpointCapacity>(m, "EndpointCapacity")
      .def(py::init<>())
      .def_readwrite("requests_per_second", &epp::EndpointCapacity::requests_per_second)
      .def_readwrite("tokens_per_second", &epp::EndpointCapacity::tokens_per_second);
}

void BindEndpoints(py::module_& m) {
  m.def("validate_endpoint_address", &Endpoint_ValidateAddressShim, py::arg("address"));
  m.def("validate_endpoint_metrics", &EndpointMetrics_ValidateShim, py::arg("metrics"));
  m.def("load_endpoints", &Endpoints_LoadShim, py::arg("path"), py::arg("check"), py::arg("fail_on_metrics_error"),
        py::arg("scheduler").none(true), py::call_guard<py::gil_scoped_release>());
}

void BindRequest(py::module_& m) {
  py::class_<epp::InferenceRequest>(m, "InferenceRequest")
      .def_property_readonly("api", &InferenceRequest_ApiShim)
      .def_readonly("path", &epp::InferenceRequest::path)
      .def_readonly("model", &epp::InferenceRequest::model)
      .def_readonly("stream", &epp::InferenceRequest::stream)
      .def_readonly("cache_salt", &epp::InferenceRequest::cache_salt)
      .def_readonly("prompt", &epp::InferenceRequest::prompt)
      .def_readonly("prompt_tokens", &epp::InferenceRequest::prompt_tokens)
      .def_readonly("headers", &epp::InferenceRequest::headers)
      .def_property_readonly("parser", &InferenceRequest_ParserShim)
      .def_readonly("token_ids", &epp::InferenceRequest::token_ids)
      .def_readonly("media_parts", &epp::InferenceRequest::media_parts)
      .def_readwrite("priority", &epp::InferenceRequest::priority);
  m.def("infer_request_path", [](const std::string& body) { return std::string(epp::InferRequestPath(body)); },
        py::arg("body"), "The path a request body implies without one (messages: chat, input: responses, ...)");
  m.def("parse_openai_request", &InferenceRequest_ParseOpenAIShim, py::arg("path"), py::arg("body"),
        py::call_guard<py::gil_scoped_release>());
  // pybind11 gives a std::string parameter the bytes of a bytes argument (a gRPC frame) unchanged.
  m.def("parse_request", &InferenceRequest_ParseShim, py::arg("path"), py::arg("body"), py::arg("parsers"),
        py::call_guard<py::gil_scoped_release>());
  m.def("anthropic_to_chat_completions", &AnthropicToChatShim, py::arg("body"), py::call_guard<py::gil_scoped_release>());
  m.def("parse_response_usage", &ResponseUsage_ParseShim, py::arg("request"), py::arg("body"), py::arg("event_stream"),
        py::call_guard<py::gil_scoped_release>());
  m.def("parse_capture_envelope", &InferenceRequest_ParseCaptureShim, py::arg("text"), py::arg("path_override"),
        py::call_guard<py::gil_scoped_release>());
  m.def("parse_capture_envelope_with_body", &InferenceRequest_ParseCaptureWithBodyShim, py::arg("text"),
        py::arg("path_override"), py::call_guard<py::gil_scoped_release>());
}

void BindConfig(py::module_& m) {
  py::class_<epp::EppConfig>(m, "EppConfig")
      .def_readonly("source", &epp::EppConfig::source)
      .def_readonly("warnings", &epp::EppConfig::warnings);
  m.def("parse_config", &EppConfig_ParseShim, py::arg("yaml"), py::arg("source"));
  m.def("load_config_file", &EppConfig_LoadFileShim, py::arg("path"));
  m.def("default_config", &epp::DefaultConfig);
}

void BindRegistry(py::module_& m) {
  py::class_<epp::PluginRegistry, std::shared_ptr<epp::PluginRegistry>>(m, "PluginRegistry")
      .def(py::init(&PluginRegistry_CreateShim))
      .def("types", &epp::PluginRegistry::Types)
      .def("has", &epp::PluginRegistry::Has, py::arg("type"))
      .def("schema_json", &PluginRegistry_SchemaJsonShim, py::arg("type"))
      .def("register_python", &PluginRegistry_RegisterPythonShim, py::arg("type"), py::arg("kind"), py::arg("factory"));
}

void BindScheduler(py::module_& m) {
  py::class_<epp::ProfilePick>(m, "ProfilePick")
      .def_readonly("profile", &epp::ProfilePick::profile)
      .def_readonly("ran", &epp::ProfilePick::ran)
      .def_readonly("endpoints", &epp::ProfilePick::endpoints)
      .def_readonly("reason", &epp::ProfilePick::reason)
      .def_readonly("error", &epp::ProfilePick::error);
  py::class_<epp::PickResult>(m, "PickResult")
      .def_readonly("status", &epp::PickResult::status)
      .def_readonly("endpoints", &epp::PickResult::endpoints)
      .def_readonly("reason", &epp::PickResult::reason)
      .def_readonly("primary_profile", &epp::PickResult::primary_profile)
      .def_readonly("profile_picks", &epp::PickResult::profile_picks)
      .def_readonly("headers", &epp::PickResult::headers)
      .def_readonly("response_headers", &epp::PickResult::response_headers)
      .def_readonly("profiles_reason", &epp::PickResult::profiles_reason)
      .def_readonly("saturation", &epp::PickResult::saturation)
      .def_readonly("load_tokens", &epp::PickResult::load_tokens)
      .def_readonly("pick_id", &epp::PickResult::pick_id)
      .def_readonly("candidates", &epp::PickResult::candidates)
      .def_readonly("unreachable", &epp::PickResult::unreachable)
      .def_readonly("prefix_block_size_tokens", &epp::PickResult::prefix_block_size_tokens)
      .def_readonly("prefix_blocks", &epp::PickResult::prefix_blocks)
      .def_readonly("prefix_match_blocks", &epp::PickResult::prefix_match_blocks)
      .def_readonly("tokens", &epp::PickResult::tokens)
      .def_readonly("tokens_source", &epp::PickResult::tokens_source)
      .def_readonly("tokens_note", &epp::PickResult::tokens_note)
      .def_readonly("predicted_ttft_ms", &epp::PickResult::predicted_ttft_ms)
      .def_readonly("predicted_tpot_ms", &epp::PickResult::predicted_tpot_ms)
      .def_readonly("slo_ttft_ms", &epp::PickResult::slo_ttft_ms)
      .def_readonly("slo_tpot_ms", &epp::PickResult::slo_tpot_ms);
  py::class_<PickOutcome>(m, "PickOutcome")
      .def_readonly("result", &PickOutcome::result)
      .def_readonly("request", &PickOutcome::request)
      .def_readonly("has_request", &PickOutcome::has_request)
      .def("to_json", &PickOutcome_ToJsonShim, py::arg("indent"))
      .def("to_text", &PickOutcome_ToTextShim, py::arg("color"));
  py::class_<epp::DurationHistogram>(m, "DurationHistogram")
      .def_readonly("count", &epp::DurationHistogram::count)
      .def_readonly("sum_seconds", &epp::DurationHistogram::sum_seconds)
      .def_readonly("bucket_counts", &epp::DurationHistogram::bucket_counts);
  py::class_<epp::PluginTiming>(m, "PluginTiming")
      .def_readonly("extension_point", &epp::PluginTiming::extension_point)
      .def_readonly("plugin_type", &epp::PluginTiming::plugin_type)
      .def_readonly("plugin_name", &epp::PluginTiming::plugin_name)
      .def_readonly("count", &epp::PluginTiming::count)
      .def_readonly("sum_seconds", &epp::PluginTiming::sum_seconds)
      .def_readonly("bucket_counts", &epp::PluginTiming::bucket_counts);
  m.attr("timing_bucket_bounds_seconds") = py::cast(epp::kTimingBucketBoundsSeconds);
  py::class_<SchedulerHolder, std::shared_ptr<SchedulerHolder>>(m, "Scheduler")
      .def(py::init(&Scheduler_BuildShim), py::arg("config"), py::arg("registry"), py::arg("seed"), py::arg("region") = "",
           py::arg("zone") = "")
      .def("pick", &Scheduler_PickShim, py::arg("request"), py::arg("endpoints"), py::arg("subset"), py::arg("record"),
           py::arg("trace"), py::arg("body") = "", py::call_guard<py::gil_scoped_release>())
      .def("release", &Scheduler_ReleaseShim, py::arg("outcome"), py::call_guard<py::gil_scoped_release>())
      .def("observe_first_token", &Scheduler_ObserveFirstTokenShim, py::arg("outcome"),
           py::call_guard<py::gil_scoped_release>())
      .def("observe_completion", &Scheduler_ObserveCompletionShim, py::arg("outcome"), py::arg("prompt_tokens"),
           py::arg("completion_tokens"), py::arg("chunks"), py::arg("streamed"), py::call_guard<py::gil_scoped_release>())
      .def("effective_config_yaml", &Scheduler_EffectiveConfigShim)
      .def_property_readonly("warnings", &Scheduler_WarningsShim)
      .def_property_readonly("profile_names", &Scheduler_ProfileNamesShim)
      .def("prefix_index_entries", &Scheduler_PrefixIndexEntriesShim, py::call_guard<py::gil_scoped_release>())
      .def("inflight", &Scheduler_InflightShim, py::arg("endpoint"), py::call_guard<py::gil_scoped_release>())
      .def("plugin_timings", &Scheduler_PluginTimingsShim, py::call_guard<py::gil_scoped_release>())
      .def("missing_inputs_for_engine", &Scheduler_MissingInputsEngineShim, py::arg("engine"))
      .def("missing_inputs_for_endpoints", &Scheduler_MissingInputsEndpointsShim, py::arg("endpoints"))
      .def("cycle_timing", &Scheduler_CycleTimingShim, py::call_guard<py::gil_scoped_release>());
}

void BindMetrics(py::module_& m) {
  py::class_<epp::CheckResult>(m, "CheckResult")
      .def_readonly("id", &epp::CheckResult::id)
      .def_property_readonly("status", &CheckResult_StatusShim)
      .def_readonly("message", &epp::CheckResult::message);
  py::class_<epp::MetricMapping>(m, "MetricMapping")
      .def_readonly("engine", &epp::MetricMapping::engine);
  m.def("parse_prometheus", &MetricFamilies_ParseShim, py::arg("text"), py::arg("lenient"));
  m.def("extract_metrics", &EndpointMetrics_ExtractShim, py::arg("text"), py::arg("engine"), py::arg("lenient"),
        py::arg("metric_overrides"), py::call_guard<py::gil_scoped_release>());
  m.def("builtin_engines", &epp::MetricMapping::BuiltInEngines);
  m.def("load_metric_mappings_yaml", &MetricMapping_LoadYamlShim, py::arg("yaml"), py::arg("source_name"));
}

void BindCheck(py::module_& m) {
  py::class_<epp::CheckOptions>(m, "CheckOptions")
      .def(py::init<>())
      .def_readwrite("engine", &epp::CheckOptions::engine)
      .def_readwrite("metric_overrides", &epp::CheckOptions::metric_overrides)
      .def_readwrite("custom_mappings", &epp::CheckOptions::custom_mappings)
      .def_readwrite("metrics_path", &epp::CheckOptions::metrics_path)
      .def_readwrite("timeout", &epp::CheckOptions::timeout)
      .def_readwrite("insecure", &epp::CheckOptions::insecure)
      .def_readwrite("bearer_token", &epp::CheckOptions::bearer_token)
      .def_readwrite("headers", &epp::CheckOptions::headers)
      .def_readwrite("model", &epp::CheckOptions::model)
      .def_readwrite("lenient", &epp::CheckOptions::lenient)
      .def_readwrite("api", &epp::CheckOptions::api)
      .def_readwrite("max_body_bytes", &epp::CheckOptions::max_body_bytes);
  m.def("run_checks_json", &CheckReport_RunToJsonShim, py::arg("targets"), py::arg("options"),
        py::call_guard<py::gil_scoped_release>());
}

void BindPrefix(py::module_& m) {
  m.def("prefix_seed", &PrefixSeedShim, py::arg("model"), py::arg("cache_salt"));
  m.def("chained_block_hashes", &ChainedBlockHashesShim, py::arg("text"), py::arg("block_chars"), py::arg("seed"),
        py::arg("max_blocks"));
  m.def("approx_tokens", &epp::ApproxTokens, py::arg("chars"));
}

void BindTokenizer(py::module_& m) {
  py::class_<epp::Tokenizer, std::shared_ptr<epp::Tokenizer>>(m, "Tokenizer")
      .def_static(
          "from_path",
          [](const std::string& path) {
            return std::const_pointer_cast<epp::Tokenizer>(Unwrap(epp::Tokenizer::FromPath(path)));
          },
          py::arg("path"), py::call_guard<py::gil_scoped_release>())
      .def(
          "encode",
          [](const epp::Tokenizer& t, const std::string& text, bool add_special_tokens) {
            return Unwrap(t.Encode(text, add_special_tokens));
          },
          py::arg("text"), py::arg("add_special_tokens"), py::call_guard<py::gil_scoped_release>())
      .def("decode",
           [](const epp::Tokenizer& t, const std::vector<uint32_t>& ids) { return py::bytes(Unwrap(t.Decode(ids))); },
           py::arg("ids"))
      .def("token_id", &epp::Tokenizer::TokenId, py::arg("token"))
      .def_property_readonly("vocab_size", &epp::Tokenizer::vocab_size)
      .def_property_readonly("source", &epp::Tokenizer::source)
      .def(
          "tokenize_request",
          [](const epp::Tokenizer& t, const std::string& path, const std::string& body,
             const std::shared_ptr<epp::ChatTemplate>& chat) {
            epp::TokenizedPrompt p = Unwrap(epp::TokenizeRequestBody(t, path, body, chat.get()));
            return std::make_tuple(p.text, p.ids, p.ids_given);
          },
          py::arg("path"), py::arg("body"), py::arg("chat") = nullptr, py::call_guard<py::gil_scoped_release>());

  auto options = [](const std::string& content_format, int64_t now) {
    epp::ChatTemplateOptions o;
    if (content_format == "string" || content_format == "openai") {
      o.content_format_set = true;
      o.content_format = content_format == "openai" ? epp::ChatContentFormat::kOpenAI : epp::ChatContentFormat::kString;
    } else if (content_format != "auto") {
      throw py::value_error("content_format must be auto, string or openai");
    }
    o.now = static_cast<std::time_t>(now);
    return o;
  };
  py::class_<epp::ChatTemplate, std::shared_ptr<epp::ChatTemplate>>(m, "ChatTemplate")
      .def_static(
          "from_path",
          [options](const std::string& path, const std::string& content_format, int64_t now) {
            return std::const_pointer_cast<epp::ChatTemplate>(Unwrap(epp::ChatTemplate::FromPath(path, options(content_format, now))));
          },
          py::arg("path"), py::arg("content_format") = "auto", py::arg("now") = 0)
      .def_static(
          "from_source",
          [options](const std::string& source, const std::string& name, const std::string& special, const std::string& content_format,
                    int64_t now) {
            return std::const_pointer_cast<epp::ChatTemplate>(
                Unwrap(epp::ChatTemplate::FromSource(source, name, special, options(content_format, now))));
          },
          py::arg("source"), py::arg("name") = "chat template", py::arg("special_tokens") = "", py::arg("content_format") = "auto",
          py::arg("now") = 0)
      .def("render", [](const epp::ChatTemplate& t, const std::string& vars) { return Unwrap(t.Render(vars)); }, py::arg("variables"),
           py::call_guard<py::gil_scoped_release>())
      .def("request_variables", [](const epp::ChatTemplate& t, const std::string& body) { return Unwrap(t.RequestVariables(body)); },
           py::arg("body"), py::call_guard<py::gil_scoped_release>())
      .def("render_request", [](const epp::ChatTemplate& t, const std::string& body) { return Unwrap(t.RenderRequest(body)); },
           py::arg("body"), py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("content_format",
                             [](const epp::ChatTemplate& t) { return std::string(epp::ChatContentFormatName(t.content_format())); })
      .def_property_readonly("source", &epp::ChatTemplate::source)
      .def_property_readonly("variables", &epp::ChatTemplate::variables);
}

void BindLint(py::module_& m) {
  m.def(
      "lint_paths",
      [](const std::vector<std::string>& paths, const std::string& format) {
        epp::LintReport r = Unwrap(epp::LintPaths(paths));
        return format == "sarif" ? epp::FormatLintSarif(r) : format == "text" ? epp::FormatLintText(r) : epp::FormatLintJson(r);
      },
      py::arg("paths"), py::arg("format") = "json", py::call_guard<py::gil_scoped_release>());
  m.def(
      "lint_text",
      [](const std::string& yaml, const std::string& file) { return epp::FormatLintJson(epp::LintText(yaml, file)); },
      py::arg("yaml"), py::arg("file"), py::call_guard<py::gil_scoped_release>());
}

void BindConformance(py::module_& m) {
  m.def(
      "conformance_run",
      [](const std::string& launch, const std::string& target, const std::string& endpoints_out, const std::string& health,
         bool tls, int simulators, const std::string& sheddable_objective, const std::vector<std::string>& only,
         const std::vector<std::string>& skip, double startup_timeout_s, double stream_timeout_s, const std::string& work_dir) {
        epp::ConformanceOptions o;
        o.launch = launch;
        o.target = target;
        o.endpoints_out = endpoints_out;
        o.health_target = health;
        o.tls = tls;
        o.simulators = simulators;
        o.sheddable_objective = sheddable_objective;
        o.only = only;
        o.skip = skip;
        o.startup_timeout = std::chrono::milliseconds(static_cast<int64_t>(startup_timeout_s * 1000));
        o.stream_timeout = std::chrono::milliseconds(static_cast<int64_t>(stream_timeout_s * 1000));
        o.work_dir = work_dir;
        epp::ConformanceReport r = Unwrap(epp::RunConformance(o));
        return std::vector<std::string>{epp::FormatConformanceJson(r), epp::FormatConformanceText(r),
                                        epp::FormatConformanceJUnit(r)};
      },
      py::arg("launch"), py::arg("target"), py::arg("endpoints_out"), py::arg("health"), py::arg("tls"),
      py::arg("simulators"), py::arg("sheddable_objective"), py::arg("only"), py::arg("skip"),
      py::arg("startup_timeout_s"), py::arg("stream_timeout_s"), py::arg("work_dir"),
      py::call_guard<py::gil_scoped_release>());
  m.def("conformance_checks", [] {
    std::vector<std::vector<std::string>> out;
    for (const auto& c : epp::ConformanceChecks()) out.push_back({c.id, c.title, c.cites});
    return out;
  });
}

void BindSim(py::module_& m) {
  py::class_<epp::SimParams>(m, "SimParams")
      .def(py::init<>())
      .def_readwrite("engine", &epp::SimParams::engine)
      .def_readwrite("models", &epp::SimParams::models)
      .def_readwrite("loras", &epp::SimParams::loras)
      .def_readwrite("max_loras", &epp::SimParams::max_loras)
      .def_readwrite("max_running", &epp::SimParams::max_running)
      .def_readwrite("kv_blocks", &epp::SimParams::kv_blocks)
      .def_readwrite("block_size", &epp::SimParams::block_size)
      .def_readwrite("prefill_tokens_per_s", &epp::SimParams::prefill_tokens_per_s)
      .def_readwrite("decode_step_ms", &epp::SimParams::decode_step_ms)
      .def_readwrite("decode_ms_per_seq", &epp::SimParams::decode_ms_per_seq)
      .def_readwrite("lora_load_ms", &epp::SimParams::lora_load_ms)
      .def_readwrite("lora_loaded_metric", &epp::SimParams::lora_loaded_metric)
      .def_readwrite("seed", &epp::SimParams::seed);
  py::class_<epp::SimRequestResult>(m, "SimRequestResult")
      .def_readonly("id", &epp::SimRequestResult::id)
      .def_readonly("arrival_us", &epp::SimRequestResult::arrival_us)
      .def_readonly("admitted_us", &epp::SimRequestResult::admitted_us)
      .def_readonly("first_token_us", &epp::SimRequestResult::first_token_us)
      .def_readonly("finish_us", &epp::SimRequestResult::finish_us)
      .def_readonly("prompt_tokens", &epp::SimRequestResult::prompt_tokens)
      .def_readonly("cached_tokens", &epp::SimRequestResult::cached_tokens)
      .def_readonly("output_tokens", &epp::SimRequestResult::output_tokens)
      .def_readonly("rejected", &epp::SimRequestResult::rejected);
  py::class_<epp::SimServer, std::shared_ptr<epp::SimServer>>(m, "SimServer")
      .def(py::init(&SimServer_CreateShim), py::arg("params"))
      .def_property_readonly("now_us", &epp::SimServer::now_us)
      .def("submit", &SimServer_SubmitShim, py::arg("id"), py::arg("prompt_tokens"), py::arg("output_tokens"),
           py::arg("block_hashes"), py::arg("adapter"), py::arg("t_us"))
      .def("advance_to", &SimServer_AdvanceToShim, py::arg("t_us"))
      .def("next_event_time", &SimServer_NextEventTimeShim)
      .def("progress", &epp::SimServer::Progress, py::arg("id"))
      .def("take_result", &epp::SimServer::TakeResult, py::arg("id"))
      .def("cached_prefix_blocks", &SimServer_CachedPrefixBlocksShim, py::arg("block_hashes"))
      .def("snapshot", &SimServer_SnapshotShim)
      .def("metrics_text", &SimServer_MetricsTextShim, py::arg("wall_time_s"));
  py::class_<epp::SimHttpServer, std::shared_ptr<epp::SimHttpServer>>(m, "SimHttpServer")
      .def(py::init(&SimHttpServer_StartShim), py::arg("params"), py::arg("host"), py::arg("port"),
           py::arg("time_scale"), py::arg("fail_rate"), py::arg("metrics_delay_ms"), py::arg("metrics_malformed"),
           py::arg("drop_rate"), py::arg("max_tokens_default"), py::arg("threads"), py::arg("role") = "both",
           py::arg("kv_link_gbytes_per_s") = 25.0, py::arg("kv_bytes_per_token") = 131072, py::arg("kv_events") = "",
           py::arg("kv_events_replay") = "", py::arg("tokenizer") = "estimate", py::arg("render_endpoints") = true)
      .def_property_readonly("port", &epp::SimHttpServer::port)
      .def_property_readonly("url", &epp::SimHttpServer::url)
      .def_property_readonly("kv_events_endpoint", &epp::SimHttpServer::kv_events_endpoint)
      .def_property_readonly("kv_events_replay_endpoint", &epp::SimHttpServer::kv_events_replay_endpoint)
      .def("stop", &epp::SimHttpServer::Stop, py::call_guard<py::gil_scoped_release>());
}

void BindExtProc(py::module_& m) {
  py::class_<epp::ExtProcOptions>(m, "ExtProcOptions")
      .def(py::init<>())
      .def_readwrite("max_request_bytes", &epp::ExtProcOptions::max_request_bytes)
      .def_readwrite("objective_priorities", &epp::ExtProcOptions::objective_priorities)
      .def_readwrite("ignore_subset_hint", &epp::ExtProcOptions::ignore_subset_hint)
      .def_readwrite("emit_endpoint_scores", &epp::ExtProcOptions::emit_endpoint_scores)
      .def_property(
          "request_timeout_ms", [](const epp::ExtProcOptions& o) { return o.request_timeout.count(); },
          [](epp::ExtProcOptions& o, int64_t ms) { o.request_timeout = std::chrono::milliseconds(ms); })
      .def_property(
          "idle_timeout_ms", [](const epp::ExtProcOptions& o) { return o.idle_timeout.count(); },
          [](epp::ExtProcOptions& o, int64_t ms) { o.idle_timeout = std::chrono::milliseconds(ms); })
      .def_property(
          "handshake_timeout_ms", [](const epp::ExtProcOptions& o) { return o.handshake_timeout.count(); },
          [](epp::ExtProcOptions& o, int64_t ms) { o.handshake_timeout = std::chrono::milliseconds(ms); })
      .def_readwrite("trace", &epp::ExtProcOptions::trace);
  m.def("requests_from_capture", &CaptureRequests_BuildShim, py::arg("capture_json"), py::arg("path_override"),
        py::arg("subset"), py::arg("subset_as_string"), py::arg("chunk_bytes"));
  m.def("build_response_messages", &ResponseMessages_BuildShim, py::arg("status"), py::arg("headers"), py::arg("body"),
        py::arg("served_endpoint"));
  m.def("processing_request_to_json", &ProcessingRequest_ToJsonShim, py::arg("bytes"));
  m.def("processing_response_to_json", &ProcessingResponse_ToJsonShim, py::arg("bytes"));
  m.def("processing_request_from_json", &ProcessingRequest_FromJsonShim, py::arg("json"));
  py::class_<SessionHolder, std::shared_ptr<SessionHolder>>(m, "ExtProcSession")
      .def(py::init(&ExtProcSession_CreateShim), py::arg("scheduler"), py::arg("endpoints"), py::arg("options"))
      .def("send", &ExtProcSession_SendShim, py::arg("message"))
      .def_property_readonly("finished", &ExtProcSession_FinishedShim)
      .def_property_readonly("result", &ExtProcSession_ResultShim)
      .def_property_readonly("served", &ExtProcSession_ServedShim);
  // epp::ServeArgs as pyepp.serve fills it (serve_args.h: Go duration text, ADDR[=METRICS], NAME=PRIORITY).
  py::class_<epp::ServeArgs>(m, "ServeArgs")
      .def(py::init<>())
      .def_readwrite("config_file", &epp::ServeArgs::config_file)
      .def_readwrite("watch_config", &epp::ServeArgs::watch_config)
      .def_readwrite("seed", &epp::ServeArgs::seed)
      .def_readwrite("endpoints_file", &epp::ServeArgs::endpoints_file)
      .def_readwrite("endpoint_flags", &epp::ServeArgs::endpoint_flags)
      .def_readwrite("pool_name", &epp::ServeArgs::pool_name)
      .def_readwrite("pool_namespace", &epp::ServeArgs::pool_namespace)
      .def_readwrite("pool_group", &epp::ServeArgs::pool_group)
      .def_readwrite("pool_resync_interval", &epp::ServeArgs::pool_resync_interval)
      .def_readwrite("pool_watch", &epp::ServeArgs::pool_watch)
      .def_readwrite("endpoint_selector", &epp::ServeArgs::endpoint_selector)
      .def_readwrite("endpoint_target_ports", &epp::ServeArgs::endpoint_target_ports)
      .def_readwrite("watch_objectives", &epp::ServeArgs::watch_objectives)
      .def_readwrite("pool_import", &epp::ServeArgs::pool_import)
      .def_readwrite("clusters_file", &epp::ServeArgs::clusters_file)
      .def_readwrite("cluster_label", &epp::ServeArgs::cluster_label)
      .def_readwrite("kube_api_server", &epp::ServeArgs::kube_api_server)
      .def_readwrite("kube_token_file", &epp::ServeArgs::kube_token_file)
      .def_readwrite("kube_ca_file", &epp::ServeArgs::kube_ca_file)
      .def_readwrite("kube_insecure_skip_verify", &epp::ServeArgs::kube_insecure_skip_verify)
      .def_readwrite("engine", &epp::ServeArgs::engine)
      .def_readwrite("refresh_metrics_interval", &epp::ServeArgs::refresh_metrics_interval)
      .def_readwrite("scrape_timeout", &epp::ServeArgs::scrape_timeout)
      .def_readwrite("scrape_gzip", &epp::ServeArgs::scrape_gzip)
      .def_readwrite("metrics_staleness_threshold", &epp::ServeArgs::metrics_staleness_threshold)
      .def_readwrite("detector_staleness", &epp::ServeArgs::detector_staleness)
      .def_readwrite("metrics_pool_name", &epp::ServeArgs::metrics_pool_name)
      .def_readwrite("model_server_metrics_scheme", &epp::ServeArgs::model_server_metrics_scheme)
      .def_readwrite("model_server_metrics_path", &epp::ServeArgs::model_server_metrics_path)
      .def_readwrite("model_server_metrics_port", &epp::ServeArgs::model_server_metrics_port)
      .def_readwrite("model_server_metrics_https_insecure_skip_verify", &epp::ServeArgs::model_server_metrics_https_insecure_skip_verify)
      .def_readwrite("total_queued_requests_metric", &epp::ServeArgs::total_queued_requests_metric)
      .def_readwrite("total_running_requests_metric", &epp::ServeArgs::total_running_requests_metric)
      .def_readwrite("kv_cache_usage_percentage_metric", &epp::ServeArgs::kv_cache_usage_percentage_metric)
      .def_readwrite("lora_info_metric", &epp::ServeArgs::lora_info_metric)
      .def_readwrite("cache_info_metric", &epp::ServeArgs::cache_info_metric)
      .def_readwrite("listen_address", &epp::ServeArgs::listen_address)
      .def_readwrite("grpc_port", &epp::ServeArgs::grpc_port)
      .def_readwrite("grpc_health_port", &epp::ServeArgs::grpc_health_port)
      .def_readwrite("metrics_port", &epp::ServeArgs::metrics_port)
      .def_readwrite("secure_serving", &epp::ServeArgs::secure_serving)
      .def_readwrite("cert_path", &epp::ServeArgs::cert_path)
      .def_readwrite("client_ca", &epp::ServeArgs::client_ca)
      .def_readwrite("enable_cert_reload", &epp::ServeArgs::enable_cert_reload)
      .def_readwrite("health_checking", &epp::ServeArgs::health_checking)
      .def_readwrite("grpc_max_recv_msg_size", &epp::ServeArgs::grpc_max_recv_msg_size)
      .def_readwrite("grpc_max_send_msg_size", &epp::ServeArgs::grpc_max_send_msg_size)
      .def_readwrite("max_request_bytes", &epp::ServeArgs::max_request_bytes)
      .def_readwrite("stream_request_timeout", &epp::ServeArgs::stream_request_timeout)
      .def_readwrite("stream_idle_timeout", &epp::ServeArgs::stream_idle_timeout)
      .def_readwrite("handshake_timeout", &epp::ServeArgs::handshake_timeout)
      .def_readwrite("objective_flags", &epp::ServeArgs::objective_flags)
      .def_readwrite("disable_endpoint_subset_filter", &epp::ServeArgs::disable_endpoint_subset_filter)
      .def_readwrite("trust_objective_header", &epp::ServeArgs::trust_objective_header)
      .def_readwrite("trust_model_rewrite_header", &epp::ServeArgs::trust_model_rewrite_header)
      .def_readwrite("emit_endpoint_scores", &epp::ServeArgs::emit_endpoint_scores)
      .def_readwrite("capture_dir", &epp::ServeArgs::capture_dir)
      .def_readwrite("max_buffered_request_bytes", &epp::ServeArgs::max_buffered_request_bytes)
      .def_readwrite("max_streams", &epp::ServeArgs::max_streams)
      .def_readwrite("max_streams_per_connection", &epp::ServeArgs::max_streams_per_connection)
      .def_readwrite("decision_log", &epp::ServeArgs::decision_log)
      .def_readwrite("decision_log_rate", &epp::ServeArgs::decision_log_rate)
      .def_readwrite("decision_log_prompts", &epp::ServeArgs::decision_log_prompts)
      .def_readwrite("region", &epp::ServeArgs::region)
      .def_readwrite("zone", &epp::ServeArgs::zone)
      .def_readwrite("config_text", &epp::ServeArgs::config_text)
      .def_readwrite("ha_enable_leader_election", &epp::ServeArgs::ha_enable_leader_election)
      .def_readwrite("leader_election_id", &epp::ServeArgs::leader_election_id)
      .def_readwrite("leader_election_namespace", &epp::ServeArgs::leader_election_namespace)
      .def_readwrite("leader_election_identity", &epp::ServeArgs::leader_election_identity)
      .def_readwrite("leader_election_lease_duration", &epp::ServeArgs::leader_election_lease_duration)
      .def_readwrite("leader_election_renew_deadline", &epp::ServeArgs::leader_election_renew_deadline)
      .def_readwrite("leader_election_retry_period", &epp::ServeArgs::leader_election_retry_period)
      .def_readwrite("shared_state", &epp::ServeArgs::shared_state)
      .def_readwrite("shared_state_password_file", &epp::ServeArgs::shared_state_password_file)
      .def_readwrite("shared_state_ca_file", &epp::ServeArgs::shared_state_ca_file)
      .def_readwrite("shared_state_key_prefix", &epp::ServeArgs::shared_state_key_prefix)
      .def_readwrite("shared_state_replica_id", &epp::ServeArgs::shared_state_replica_id)
      .def_readwrite("shared_state_interval", &epp::ServeArgs::shared_state_interval)
      .def_readwrite("shared_state_timeout", &epp::ServeArgs::shared_state_timeout)
      .def_readwrite("enable_tracing", &epp::ServeArgs::enable_tracing)
      .def_readwrite("enable_pprof", &epp::ServeArgs::enable_pprof)
      .def_readwrite("metrics_endpoint_auth", &epp::ServeArgs::metrics_endpoint_auth)
      .def_readwrite("enable_grpc_stream_metrics", &epp::ServeArgs::enable_grpc_stream_metrics)
      .def_readwrite("allow_experimental_plugins", &epp::ServeArgs::allow_experimental_plugins)
      .def_readwrite("refresh_prometheus_metrics_interval", &epp::ServeArgs::refresh_prometheus_metrics_interval)
      .def_readwrite("tls_min_version", &epp::ServeArgs::tls_min_version)
      .def_readwrite("metrics_client_ca_file", &epp::ServeArgs::metrics_client_ca_file)
      .def_readwrite("metrics_cert_dir", &epp::ServeArgs::metrics_cert_dir)
      .def_readwrite("tls_cipher_suites", &epp::ServeArgs::tls_cipher_suites);
  py::class_<ServeHolder, std::shared_ptr<ServeHolder>>(m, "ExtProcServer")
      .def(py::init(&ExtProcServer_StartShim), py::arg("scheduler"), py::arg("endpoints"), py::arg("args"),
           py::call_guard<py::gil_scoped_release>())
      .def_static("start_runtime", &EppServer_StartShim, py::arg("args"), py::arg("log_level"),
                  py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("port", &ExtProcServer_PortShim)
      .def_property_readonly("health_port", &ExtProcServer_HealthPortShim)
      .def_property_readonly("metrics_port", &ExtProcServer_MetricsPortShim)
      .def_property_readonly("leading", &ExtProcServer_LeadingShim)
      .def_property_readonly("cert_pem", &ExtProcServer_CertPemShim)
      .def("set_endpoints", &ExtProcServer_SetEndpointsShim, py::arg("endpoints"))
      .def("set_ready", &ExtProcServer_SetReadyShim, py::arg("ready"))
      .def("close", &ExtProcServer_CloseShim, py::arg("drain_s"), py::call_guard<py::gil_scoped_release>())
      .def("stats", &ExtProcServer_StatsShim)
      .def("metrics_text", &ExtProcServer_MetricsTextShim)
      .def("reload_config", &ExtProcServer_ReloadConfigShim)
      .def("config_reloads", &ExtProcServer_ConfigReloadsShim)
      .def("endpoints", &ExtProcServer_EndpointsShim)
      .def("describe", &ExtProcServer_DescribeShim)
      .def("decisions", &ExtProcServer_DecisionsShim, py::arg("limit"), py::arg("after"), py::arg("id"));
}

void BindReplay(py::module_& m) {
  py::class_<epp::SharedPrefixWorkload>(m, "SharedPrefixWorkload")
      .def(py::init<>())
      .def_readwrite("groups", &epp::SharedPrefixWorkload::groups)
      .def_readwrite("prompts_per_group", &epp::SharedPrefixWorkload::prompts_per_group)
      .def_readwrite("system_len", &epp::SharedPrefixWorkload::system_len)
      .def_readwrite("question_len", &epp::SharedPrefixWorkload::question_len)
      .def_readwrite("output_len", &epp::SharedPrefixWorkload::output_len)
      .def_readwrite("multi_turn", &epp::SharedPrefixWorkload::multi_turn)
      .def_readwrite("shared_system_prompt", &epp::SharedPrefixWorkload::shared_system_prompt)
      .def_readwrite("rate", &epp::SharedPrefixWorkload::rate)
      .def_readwrite("poisson", &epp::SharedPrefixWorkload::poisson)
      .def_readwrite("duration_s", &epp::SharedPrefixWorkload::duration_s)
      .def_readwrite("seed", &epp::SharedPrefixWorkload::seed)
      .def_readwrite("model", &epp::SharedPrefixWorkload::model);
  m.def("gie_benchmark_workload", &SharedPrefix_GieShim, py::arg("name"));
  py::class_<ReplayTrace, std::shared_ptr<ReplayTrace>>(m, "ReplayTrace")
      .def("__len__", &ReplayTrace_LenShim);
  m.def("load_replay_trace", &ReplayTrace_LoadShim, py::arg("format"), py::arg("path"), py::arg("time_scale"),
        py::call_guard<py::gil_scoped_release>());
  m.def("load_replay_trace_at_rate", &ReplayTrace_LoadAtRateShim, py::arg("format"), py::arg("path"), py::arg("time_scale"),
        py::arg("rate"), py::arg("poisson"), py::arg("seed"), py::call_guard<py::gil_scoped_release>());
  m.def("generate_shared_prefix", &ReplayTrace_SharedPrefixShim, py::arg("workload"),
        py::call_guard<py::gil_scoped_release>());
  m.def("mix_tenants", &ReplayTrace_MixTenantsShim, py::arg("trace"), py::arg("tenants"), py::arg("priorities"),
        py::arg("seed"));
  m.def("attach_slos", &ReplayTrace_AttachSlosShim, py::arg("trace"), py::arg("ttft_ms"), py::arg("tpot_ms"));
  py::class_<epp::ReplayPolicy>(m, "ReplayPolicy")
      .def(py::init<>())
      .def_readwrite("name", &epp::ReplayPolicy::name)
      .def_readwrite("config", &epp::ReplayPolicy::config);
  m.def("named_replay_policy", &ReplayPolicy_NamedShim, py::arg("name"));
  m.def("named_replay_policies", &epp::NamedReplayPolicies);
  m.def("resolve_replay_policy", &ReplayPolicy_ResolveShim, py::arg("spec"), py::arg("index"));
  m.def("unique_policy_names", &ReplayPolicy_UniqueNamesShim, py::arg("policies"));
  py::class_<epp::ReplayOptions>(m, "ReplayOptions")
      .def(py::init<>())
      .def_readwrite("servers", &epp::ReplayOptions::servers)
      .def_readwrite("server", &epp::ReplayOptions::server)
      .def_readwrite("per_server", &epp::ReplayOptions::per_server)
      .def_readwrite("scrape_interval_us", &epp::ReplayOptions::scrape_interval_us)
      .def_readwrite("seed", &epp::ReplayOptions::seed)
      .def_readwrite("timeline_buckets", &epp::ReplayOptions::timeline_buckets)
      .def_readwrite("prefill_servers", &epp::ReplayOptions::prefill_servers)
      .def_readwrite("decode_servers", &epp::ReplayOptions::decode_servers)
      .def_readwrite("kv_link_gbytes_per_s", &epp::ReplayOptions::kv_link_gbytes_per_s)
      .def_readwrite("kv_bytes_per_token", &epp::ReplayOptions::kv_bytes_per_token)
      .def_readwrite("epp_replicas", &epp::ReplayOptions::epp_replicas)
      .def_readwrite("kv_event_delay_us", &epp::ReplayOptions::kv_event_delay_us)
      .def_readwrite("shared_state", &epp::ReplayOptions::shared_state)
      .def_readwrite("shared_state_delay_us", &epp::ReplayOptions::shared_state_delay_us);
  py::class_<epp::Percentiles>(m, "Percentiles")
      .def(py::init<>())
      .def_readwrite("p50", &epp::Percentiles::p50)
      .def_readwrite("p90", &epp::Percentiles::p90)
      .def_readwrite("p99", &epp::Percentiles::p99)
      .def_readwrite("mean", &epp::Percentiles::mean);
  py::class_<epp::ReplayTraceInfo>(m, "ReplayTraceInfo")
      .def(py::init<>())
      .def_readwrite("requests", &epp::ReplayTraceInfo::requests)
      .def_readwrite("blocks", &epp::ReplayTraceInfo::blocks)
      .def_readwrite("prompt_tokens", &epp::ReplayTraceInfo::prompt_tokens)
      .def_readwrite("duration_s", &epp::ReplayTraceInfo::duration_s)
      .def_readwrite("upper_bound_block_hit_rate", &epp::ReplayTraceInfo::upper_bound_block_hit_rate)
      .def_readwrite("pooled_cache_bound_block_hit_rate", &epp::ReplayTraceInfo::pooled_cache_bound_block_hit_rate)
      .def_readwrite("ttft_bound_s", &epp::ReplayTraceInfo::ttft_bound_s)
      .def_readwrite("ttft_bound_samples_s", &epp::ReplayTraceInfo::ttft_bound_samples_s);
  py::class_<epp::ReplayFlag>(m, "ReplayFlag")
      .def(py::init<>())
      .def_readwrite("code", &epp::ReplayFlag::code)
      .def_readwrite("message", &epp::ReplayFlag::message);
  py::class_<epp::ReplayGroupReport>(m, "ReplayGroupReport")
      .def(py::init<>())
      .def_readwrite("name", &epp::ReplayGroupReport::name)
      .def_readwrite("requests", &epp::ReplayGroupReport::requests)
      .def_readwrite("completed", &epp::ReplayGroupReport::completed)
      .def_readwrite("dropped", &epp::ReplayGroupReport::dropped)
      .def_readwrite("ttft_s", &epp::ReplayGroupReport::ttft_s)
      .def_readwrite("wait_s", &epp::ReplayGroupReport::wait_s)
      .def_readwrite("served_rps", &epp::ReplayGroupReport::served_rps)
      .def_readwrite("demand_rps", &epp::ReplayGroupReport::demand_rps);
  py::class_<epp::ReplayPolicyReport>(m, "ReplayPolicyReport")
      .def(py::init<>())
      .def_readwrite("name", &epp::ReplayPolicyReport::name)
      .def_readwrite("completed", &epp::ReplayPolicyReport::completed)
      .def_readwrite("failed", &epp::ReplayPolicyReport::failed)
      .def_readwrite("shed", &epp::ReplayPolicyReport::shed)
      .def_readwrite("block_hit_rate", &epp::ReplayPolicyReport::block_hit_rate)
      .def_readwrite("token_hit_rate", &epp::ReplayPolicyReport::token_hit_rate)
      .def_readwrite("ttft_s", &epp::ReplayPolicyReport::ttft_s)
      .def_readwrite("e2e_s", &epp::ReplayPolicyReport::e2e_s)
      .def_readwrite("queue_s", &epp::ReplayPolicyReport::queue_s)
      .def_readwrite("itl_s", &epp::ReplayPolicyReport::itl_s)
      .def_readwrite("disaggregated_pool", &epp::ReplayPolicyReport::disaggregated_pool)
      .def_readwrite("precise", &epp::ReplayPolicyReport::precise)
      .def_readwrite("disaggregated", &epp::ReplayPolicyReport::disaggregated)
      .def_readwrite("kv_transfer_s_mean", &epp::ReplayPolicyReport::kv_transfer_s_mean)
      .def_readwrite("server_roles", &epp::ReplayPolicyReport::server_roles)
      .def_readwrite("throughput_rps", &epp::ReplayPolicyReport::throughput_rps)
      .def_readwrite("load_max_over_mean", &epp::ReplayPolicyReport::load_max_over_mean)
      .def_readwrite("prediction_error_rate", &epp::ReplayPolicyReport::prediction_error_rate)
      .def_readwrite("requests_per_server", &epp::ReplayPolicyReport::requests_per_server)
      .def_readwrite("kv_usage_mean_per_server", &epp::ReplayPolicyReport::kv_usage_mean_per_server)
      .def_readwrite("ttft_samples_s", &epp::ReplayPolicyReport::ttft_samples_s)
      .def_readwrite("hit_rate_timeline", &epp::ReplayPolicyReport::hit_rate_timeline)
      .def_readwrite("ttft_over_bound", &epp::ReplayPolicyReport::ttft_over_bound)
      .def_readwrite("flags", &epp::ReplayPolicyReport::flags)
      .def_readwrite("flow_control", &epp::ReplayPolicyReport::flow_control)
      .def_readwrite("flow_wait_s", &epp::ReplayPolicyReport::flow_wait_s)
      .def_readwrite("drops", &epp::ReplayPolicyReport::drops)
      .def_readwrite("bands", &epp::ReplayPolicyReport::bands)
      .def_readwrite("tenants", &epp::ReplayPolicyReport::tenants)
      .def_readwrite("jain_fairness", &epp::ReplayPolicyReport::jain_fairness)
      .def_readwrite("slo_requests", &epp::ReplayPolicyReport::slo_requests)
      .def_readwrite("slo_ttft_attainment", &epp::ReplayPolicyReport::slo_ttft_attainment)
      .def_readwrite("slo_tpot_attainment", &epp::ReplayPolicyReport::slo_tpot_attainment)
      .def_readwrite("slo_attainment", &epp::ReplayPolicyReport::slo_attainment)
      .def_readwrite("goodput_rps", &epp::ReplayPolicyReport::goodput_rps)
      .def_readwrite("wall_s", &epp::ReplayPolicyReport::wall_s);
  py::class_<epp::ReplayReport>(m, "ReplayReport")
      .def(py::init<>())
      .def_readwrite("trace", &epp::ReplayReport::trace)
      .def_readwrite("policies", &epp::ReplayReport::policies);
  m.def("run_replay", &ReplayReport_RunShim, py::arg("trace"), py::arg("policies"), py::arg("options"),
        py::call_guard<py::gil_scoped_release>());
  m.def("replay_report_to_json", &epp::ReplayReportToJson, py::arg("report"), py::arg("indent"));
  m.def("replay_report_to_text", &epp::ReplayReportToText, py::arg("report"));
  m.def("replay_report_to_html", &epp::ReplayReportToHtml, py::arg("report"), py::arg("title"));
  py::class_<epp::ReplayRegion>(m, "ReplayRegion")
      .def(py::init<>())
      .def_readwrite("name", &epp::ReplayRegion::name)
      .def_readwrite("servers", &epp::ReplayRegion::servers)
      .def_readwrite("arrival_share", &epp::ReplayRegion::arrival_share)
      .def_readwrite("capacity_rps", &epp::ReplayRegion::capacity_rps);
  py::class_<epp::MultiRegionOptions>(m, "MultiRegionOptions")
      .def(py::init<>())
      .def_readwrite("regions", &epp::MultiRegionOptions::regions)
      .def_readwrite("rtt_ms", &epp::MultiRegionOptions::rtt_ms)
      .def_readwrite("server", &epp::MultiRegionOptions::server)
      .def_readwrite("scrape_interval_us", &epp::MultiRegionOptions::scrape_interval_us)
      .def_readwrite("seed", &epp::MultiRegionOptions::seed)
      .def_readwrite("global_region", &epp::MultiRegionOptions::global_region)
      .def_readwrite("saturation_queue", &epp::MultiRegionOptions::saturation_queue)
      .def_readwrite("saturation_kv", &epp::MultiRegionOptions::saturation_kv);
  py::class_<epp::MultiRegionReport>(m, "MultiRegionReport");
  m.def("parse_replay_regions", &ReplayRegions_ParseShim, py::arg("text"));
  m.def("mixed_speed_servers", &MixedSpeedServers_Shim, py::arg("base"), py::arg("servers"), py::arg("speeds"));
  m.def("parse_rtt_matrix", &RttMatrix_ParseShim, py::arg("text"));
  m.def("run_multi_region_replay", &MultiRegion_RunShim, py::arg("trace"), py::arg("policy"), py::arg("options"),
        py::call_guard<py::gil_scoped_release>());
  m.def("multi_region_report_to_json", &epp::MultiRegionReportToJson, py::arg("report"), py::arg("indent"));
  m.def("multi_region_report_to_text", &epp::MultiRegionReportToText, py::arg("report"));
}

}  // namespace
}  // namespace pyepp

PYBIND11_MODULE(_pyepp, m) {
  m.doc() = "Private native module of pyepp; import pyepp instead.";
  m.attr("__version__") = EPP_VERSION_STRING;
  pyepp::RegisterStatusTranslator();
  pyepp::BindEndpoint(m);
  pyepp::BindMetrics(m);
  pyepp::BindCheck(m);
  pyepp::BindPrefix(m);
  pyepp::BindSim(m);
  pyepp::BindTokenizer(m);
  pyepp::BindLint(m);
  pyepp::BindConformance(m);
  pyepp::BindEndpoints(m);
  pyepp::BindRequest(m);
  pyepp::BindConfig(m);
  pyepp::BindRegistry(m);
  pyepp::BindScheduler(m);
  pyepp::BindExtProc(m);
  pyepp::BindReplay(m);
}
