#include "shims.h"

#include <array>

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

}  // namespace pyepp
