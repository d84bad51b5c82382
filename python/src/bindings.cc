// PYBIND11_MODULE(_pyepp): the private native half of pyepp. One Bind<Area>() per public libepp
// header, each a flat list of definitions; adapters live in shims.cc. Users import pyepp, never
// this module.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "epp/check.h"
#include "epp/endpoint.h"
#include "epp/metrics.h"
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

}  // namespace
}  // namespace pyepp

PYBIND11_MODULE(_pyepp, m) {
  m.doc() = "Private native module of pyepp; import pyepp instead.";
  m.attr("__version__") = EPP_VERSION_STRING;
  pyepp::RegisterStatusTranslator();
  pyepp::BindEndpoint(m);
  pyepp::BindMetrics(m);
  pyepp::BindCheck(m);
}
