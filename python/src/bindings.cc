// PYBIND11_MODULE(_pyepp): the private native half of pyepp. One Bind<Area>() per public libepp
// header, each a flat list of definitions; adapters live in shims.cc. Users import pyepp, never
// this module.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "epp/check.h"
#include "epp/endpoint.h"
#include "epp/metrics.h"
#include "epp/prefix_cache.h"
#include "epp/sim.h"
#include "epp/version.h"
#include "shims.h"

namespace pyepp {
namespace {

void BindEndpoint(py::module_& m) {
  py::class_<epp::LoraInfo>(m, "LoraInfo")
      .def_readonly("max_lora", &epp::LoraInfo::max_lora)
      .def_readonly("running", &epp::LoraInfo::running)
      .def_readonly("waiting", &epp::LoraInfo::waiting);
  py::class_<epp::EndpointMetrics>(m, "EndpointMetrics")
      .def_readonly("waiting_queue_size", &epp::EndpointMetrics::waiting_queue_size)
      .def_readonly("running_requests", &epp::EndpointMetrics::running_requests)
      .def_readonly("kv_cache_usage", &epp::EndpointMetrics::kv_cache_usage)
      .def_readonly("lora", &epp::EndpointMetrics::lora)
      .def_readonly("cache_block_size", &epp::EndpointMetrics::cache_block_size)
      .def_readonly("cache_num_blocks", &epp::EndpointMetrics::cache_num_blocks);
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
}
