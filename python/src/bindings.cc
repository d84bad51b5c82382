// PYBIND11_MODULE(_pyepp): the private native half of pyepp. One Bind<Area>() per public libepp
// header, each a flat list of definitions; adapters live in shims.cc. Users import pyepp, never
// this module.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "epp/check.h"
#include "epp/config.h"
#include "epp/endpoint.h"
#include "epp/endpoints.h"
#include "epp/metrics.h"
#include "epp/prefix_cache.h"
#include "epp/registry.h"
#include "epp/request.h"
#include "epp/scheduler.h"
#include "epp/sim.h"
#include "epp/version.h"
#include "shims.h"

namespace pyepp {
namespace {

void BindEndpoint(py::module_& m) {
  py::class_<epp::LoraInfo>(m, "LoraInfo")
      .def(py::init<>())
      .def_readwrite("max_lora", &epp::LoraInfo::max_lora)
      .def_readwrite("running", &epp::LoraInfo::running)
      .def_readwrite("waiting", &epp::LoraInfo::waiting);
  py::class_<epp::EndpointMetrics>(m, "EndpointMetrics")
      .def(py::init<>())
      .def_readwrite("waiting_queue_size", &epp::EndpointMetrics::waiting_queue_size)
      .def_readwrite("running_requests", &epp::EndpointMetrics::running_requests)
      .def_readwrite("kv_cache_usage", &epp::EndpointMetrics::kv_cache_usage)
      .def_readwrite("lora", &epp::EndpointMetrics::lora)
      .def_readwrite("cache_block_size", &epp::EndpointMetrics::cache_block_size)
      .def_readwrite("cache_num_blocks", &epp::EndpointMetrics::cache_num_blocks);
  py::class_<epp::Endpoint>(m, "Endpoint")
      .def(py::init<>())
      .def_readwrite("address", &epp::Endpoint::address)
      .def_readwrite("labels", &epp::Endpoint::labels)
      .def_readwrite("engine", &epp::Endpoint::engine)
      .def_readwrite("metrics", &epp::Endpoint::metrics)
      .def_readwrite("metrics_time_us", &epp::Endpoint::metrics_time_us)
      .def_readwrite("metrics_error", &epp::Endpoint::metrics_error);
}

void BindEndpoints(py::module_& m) {
  m.def("validate_endpoint_address", &Endpoint_ValidateAddressShim, py::arg("address"));
  m.def("load_endpoints", &Endpoints_LoadShim, py::arg("path"), py::arg("check"), py::arg("fail_on_metrics_error"),
        py::call_guard<py::gil_scoped_release>());
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
      .def_readwrite("priority", &epp::InferenceRequest::priority);
  m.def("parse_openai_request", &InferenceRequest_ParseOpenAIShim, py::arg("path"), py::arg("body"),
        py::call_guard<py::gil_scoped_release>());
  m.def("parse_capture_envelope", &InferenceRequest_ParseCaptureShim, py::arg("text"), py::arg("path_override"),
        py::call_guard<py::gil_scoped_release>());
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
      .def("register_python", &PluginRegistry_RegisterPythonShim, py::arg("type"), py::arg("kind"), py::arg("factory"));
}

void BindScheduler(py::module_& m) {
  py::class_<epp::PickResult>(m, "PickResult")
      .def_readonly("status", &epp::PickResult::status)
      .def_readonly("endpoints", &epp::PickResult::endpoints)
      .def_readonly("reason", &epp::PickResult::reason)
      .def_readonly("primary_profile", &epp::PickResult::primary_profile)
      .def_readonly("saturation", &epp::PickResult::saturation)
      .def_readonly("load_tokens", &epp::PickResult::load_tokens)
      .def_readonly("candidates", &epp::PickResult::candidates)
      .def_readonly("prefix_block_size_tokens", &epp::PickResult::prefix_block_size_tokens)
      .def_readonly("prefix_blocks", &epp::PickResult::prefix_blocks)
      .def_readonly("prefix_match_blocks", &epp::PickResult::prefix_match_blocks);
  py::class_<PickOutcome>(m, "PickOutcome")
      .def_readonly("result", &PickOutcome::result)
      .def_readonly("request", &PickOutcome::request)
      .def("to_json", &PickOutcome_ToJsonShim, py::arg("indent"))
      .def("to_text", &PickOutcome_ToTextShim, py::arg("color"));
  py::class_<SchedulerHolder, std::shared_ptr<SchedulerHolder>>(m, "Scheduler")
      .def(py::init(&Scheduler_BuildShim), py::arg("config"), py::arg("registry"), py::arg("seed"))
      .def("pick", &Scheduler_PickShim, py::arg("request"), py::arg("endpoints"), py::arg("subset"), py::arg("record"),
           py::arg("trace"), py::call_guard<py::gil_scoped_release>())
      .def("release", &Scheduler_ReleaseShim, py::arg("outcome"), py::call_guard<py::gil_scoped_release>())
      .def("effective_config_yaml", &Scheduler_EffectiveConfigShim)
      .def_property_readonly("warnings", &Scheduler_WarningsShim)
      .def_property_readonly("profile_names", &Scheduler_ProfileNamesShim)
      .def("prefix_index_entries", &Scheduler_PrefixIndexEntriesShim, py::call_guard<py::gil_scoped_release>())
      .def("inflight", &Scheduler_InflightShim, py::arg("endpoint"), py::call_guard<py::gil_scoped_release>());
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
           py::arg("drop_rate"), py::arg("max_tokens_default"), py::arg("threads"))
      .def_property_readonly("port", &epp::SimHttpServer::port)
      .def_property_readonly("url", &epp::SimHttpServer::url)
      .def("stop", &epp::SimHttpServer::Stop, py::call_guard<py::gil_scoped_release>());
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
  pyepp::BindEndpoints(m);
  pyepp::BindRequest(m);
  pyepp::BindConfig(m);
  pyepp::BindRegistry(m);
  pyepp::BindScheduler(m);
}
