// Endpoint sets: parsing endpoints files and --endpoint flags, and resolving them into Endpoints.
// yaml-cpp throws; ParseEndpointsYaml() is the one place its exceptions are caught.
#include "epp/runtime/endpoints.h"

#include <arpa/inet.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <functional>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>

#include "common/strings.h"
#include "common/yaml_limits.h"
#include "epp/params.h"
#include "common/yaml_where.h"

namespace epp {
namespace {

enum class SourceKind { kDefault, kNone, kFile, kUrl };

bool IsUrl(std::string_view s) { return s.rfind("http://", 0) == 0 || s.rfind("https://", 0) == 0; }

SourceKind KindOf(std::string_view metrics) {
  if (metrics.empty()) return SourceKind::kDefault;
  if (metrics == kNoMetrics) return SourceKind::kNone;
  if (IsUrl(metrics)) return SourceKind::kUrl;
  return SourceKind::kFile;
}

// An empty string when `metrics` is an acceptable value, else why not.
std::string MetricsProblem(std::string_view metrics) {
  if (!IsUrl(metrics) && metrics.find("://") != std::string_view::npos) {
    return "'" + std::string(metrics) + "': only http:// and https:// URLs, file paths or 'none'";
  }
  return "";
}

bool IsDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// RFC 1123 host names: dot-separated labels of letters, digits and '-', no label starting or
// ending with '-'. Underscores are rejected: Kubernetes Service and Pod DNS names never have them.
bool IsHostName(std::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  size_t start = 0;
  while (true) {
    const size_t dot = host.find('.', start);
    const std::string_view label = host.substr(start, dot == std::string_view::npos ? host.npos : dot - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') return false;
    for (char c : label) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
      if (!ok) return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

std::string Where(const EndpointSpec& spec, size_t i) {
  return spec.origin.empty() ? "endpoints[" + std::to_string(i) + "]" : spec.origin;
}

// The prefix of per-endpoint metrics messages, independent of where the spec was written.
std::string Who(const EndpointSpec& spec, size_t i) {
  return "endpoints[" + std::to_string(i) + "] (" + spec.address + "): ";
}

// Reads a whole file with stdio, whose errno is reliable (std::ifstream's is not specified).
absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  errno = 0;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  auto fail = [](int err) {
    const std::string msg = std::strerror(err);
    if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(msg);
    if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
    return absl::UnavailableError(msg);
  };
  if (f == nullptr) return fail(errno);
  std::string out;
  char buf[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    if (out.size() + n > max_bytes) {
      std::fclose(f);
      return absl::ResourceExhaustedError("larger than the cap of " + std::to_string(max_bytes) + " bytes");
    }
    out.append(buf, n);
  }
  const int err = std::ferror(f) ? errno : 0;  // a directory fails here with EISDIR
  std::fclose(f);
  if (err != 0) return fail(err);
  return out;
}


// ---- YAML ----------------------------------------------------------------------------------

std::string LineOf(std::string_view source, const YAML::Node& node) {
  std::string out(source);
  if (node.Mark().line >= 0) out += ":" + std::to_string(node.Mark().line + 1);
  return out;
}

absl::Status YamlError(std::string_view source, const YAML::Node& node, const std::string& path,
                       const std::string& message) {
  return absl::InvalidArgumentError(LineOf(source, node) + ": " + path + ": " + message);
}

// A scalar value as a string; an error naming `path` for maps, lists and nulls. A null value
// carries the mark of the token after it (often the next line), so nulls are placed at `key`.
absl::StatusOr<std::string> ScalarAt(std::string_view source, const YAML::Node& key, const YAML::Node& node,
                                     const std::string& path) {
  if (node.IsScalar()) return node.Scalar();
  if (node.IsNull()) return YamlError(source, key, path, "expected a string");
  if (node.IsSequence() && path.ends_with("].address")) {
    // An unquoted [::1]:8000 is a YAML flow list.
    return YamlError(source, node, path, "expected a string (quote IPv6 addresses: \"[::1]:8000\")");
  }
  return YamlError(source, node, path, "expected a string");
}

// A positive finite number at `path`.
absl::StatusOr<double> PositiveAt(std::string_view source, const YAML::Node& key, const YAML::Node& node,
                                  const std::string& path) {
  EPP_ASSIGN_OR_RETURN(std::string text, ScalarAt(source, key, node, path));
  double v = 0;
  size_t used = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !std::isfinite(v) || !(v > 0))
    return YamlError(source, node, path, "expected a number > 0, got '" + text + "'");
  return v;
}

// capacity: {requestsPerSecond: N, tokensPerSecond: M}; at least one of them.
absl::Status ParseCapacity(std::string_view source, const YAML::Node& node, const std::string& path,
                           EndpointCapacity& out) {
  if (!node.IsMap() || node.size() == 0)
    return YamlError(source, node, path, "expected a map with requestsPerSecond and/or tokensPerSecond");
  for (const auto& kv : node) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
    const std::string kpath = path + "." + key;
    std::optional<double>* target = key == "requestsPerSecond" ? &out.requests_per_second
                                    : key == "tokensPerSecond" ? &out.tokens_per_second
                                                               : nullptr;
    if (target == nullptr) return YamlError(source, kv.first, kpath, "unknown key (expected requestsPerSecond or tokensPerSecond)");
    if (target->has_value()) return YamlError(source, kv.first, kpath, "duplicate key");
    EPP_ASSIGN_OR_RETURN(double v, PositiveAt(source, kv.first, kv.second, kpath));
    *target = v;
  }
  return absl::OkStatus();
}

// tls: {caFile: PATH, insecureSkipVerify: BOOL}.
absl::Status ParseTls(std::string_view source, const YAML::Node& node, const std::string& path, const std::string& base_dir,
                      EndpointSpec& spec) {
  if (!node.IsMap()) return YamlError(source, node, path, "expected a map with caFile and/or insecureSkipVerify");
  std::set<std::string> keys;
  for (const auto& kv : node) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
    const std::string kpath = path + "." + key;
    if (!keys.insert(key).second) return YamlError(source, kv.first, kpath, "duplicate key");
    EPP_ASSIGN_OR_RETURN(std::string text, ScalarAt(source, kv.first, kv.second, kpath));
    if (key == "caFile") {
      if (text.empty()) return YamlError(source, kv.second, kpath, "expected a file path");
      spec.tls_ca_file = (!base_dir.empty() && std::filesystem::path(text).is_relative())
                             ? (std::filesystem::path(base_dir) / text).lexically_normal().string()
                             : text;
    } else if (key == "insecureSkipVerify") {
      if (text != "true" && text != "false") return YamlError(source, kv.second, kpath, "expected true or false");
      spec.tls_insecure_skip_verify = text == "true";
    } else {
      return YamlError(source, kv.first, kpath, "unknown key (expected caFile or insecureSkipVerify)");
    }
  }
  return absl::OkStatus();
}

absl::Status ParseEntry(std::string_view source, const YAML::Node& entry, const std::string& path,
                        const std::string& base_dir, EndpointSpec& spec, YAML::Node& address_node) {
  spec.origin = LineOf(source, entry);
  // reset() rebinds; operator= on a bound yaml-cpp Node would overwrite the node it points to.
  address_node.reset(entry);
  if (entry.IsScalar()) {
    spec.address = entry.Scalar();
  } else if (entry.IsMap()) {
    std::set<std::string> keys;
    for (const auto& kv : entry) {
      if (!kv.first.IsScalar()) return YamlError(source, kv.first, path, "keys must be strings");
      const std::string key = kv.first.Scalar();
      const std::string kpath = path + "." + key;
      if (!keys.insert(key).second) return YamlError(source, kv.first, kpath, "duplicate key");
      if (key == "address") {
        EPP_ASSIGN_OR_RETURN(spec.address, ScalarAt(source, kv.first, kv.second, kpath));
        address_node.reset(kv.second);
      } else if (key == "metrics") {
        EPP_ASSIGN_OR_RETURN(spec.metrics, ScalarAt(source, kv.first, kv.second, kpath));
        if (std::string p = MetricsProblem(spec.metrics); !p.empty()) return YamlError(source, kv.second, kpath, p);
      } else if (key == "engine") {
        EPP_ASSIGN_OR_RETURN(spec.engine, ScalarAt(source, kv.first, kv.second, kpath));
      } else if (key == "kvEvents" || key == "kvEventsReplay") {
        EPP_ASSIGN_OR_RETURN(std::string zmq, ScalarAt(source, kv.first, kv.second, kpath));
        if (zmq.rfind("tcp://", 0) != 0 && zmq.rfind("ipc://", 0) != 0)
          return YamlError(source, kv.second, kpath, "expected a ZeroMQ address such as tcp://10.0.0.1:5557");
        (key == "kvEvents" ? spec.kv_events : spec.kv_events_replay) = std::move(zmq);
      } else if (key == "labels") {
        if (kv.second.IsNull()) continue;  // `labels:` with nothing under it
        if (!kv.second.IsMap()) return YamlError(source, kv.second, kpath, "expected a map of label names to values");
        for (const auto& label : kv.second) {
          if (!label.first.IsScalar() || label.first.Scalar().empty()) {
            return YamlError(source, label.first, kpath, "label names must be non-empty strings");
          }
          const std::string name = label.first.Scalar();
          EPP_ASSIGN_OR_RETURN(std::string value, ScalarAt(source, label.first, label.second, kpath + "." + name));
          if (!spec.labels.emplace(name, std::move(value)).second) {
            return YamlError(source, label.first, kpath + "." + name, "duplicate key");
          }
        }
      } else if (key == "capacity") {
        EPP_RETURN_IF_ERROR(ParseCapacity(source, kv.second, kpath, spec.capacity));
      } else if (key == "tls") {
        EPP_RETURN_IF_ERROR(ParseTls(source, kv.second, kpath, base_dir, spec));
      } else if (key == "metricsStalenessAllowance") {
        EPP_ASSIGN_OR_RETURN(std::string d, ScalarAt(source, kv.first, kv.second, kpath));
        absl::StatusOr<int64_t> us = ParseDurationMicros(d);
        if (!us.ok() || *us < 0 || *us > int64_t{3600} * 1000000)
          return YamlError(source, kv.second, kpath, "expected a duration from 0s to 1h such as 300ms, got '" + d + "'");
        spec.metrics_staleness_allowance_us = *us;
      } else {
        return YamlError(source, kv.first, kpath,
                         "unknown key (expected address, metrics, labels, engine, kvEvents, kvEventsReplay, capacity, "
                         "tls or metricsStalenessAllowance)");
      }
    }
    if (!keys.contains("address")) return YamlError(source, entry, path, "missing 'address'");
  } else {
    return YamlError(source, entry, path, "expected a map or an address string");
  }
  if (absl::Status s = ValidateEndpointAddress(spec.address); !s.ok()) {
    return YamlError(source, address_node, path + ".address", std::string(s.message()));
  }
  if (KindOf(spec.metrics) == SourceKind::kFile && !base_dir.empty() &&
      std::filesystem::path(spec.metrics).is_relative()) {
    spec.metrics = (std::filesystem::path(base_dir) / spec.metrics).lexically_normal().string();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<EndpointSpec>> ParseYamlOrThrow(std::string_view text, std::string_view source,
                                                          const std::string& base_dir) {
  const YAML::Node root = YAML::Load(std::string(text));
  EPP_RETURN_IF_ERROR(internal::CheckYamlExpansion(root, source));
  YAML::Node list;
  YAML::Node list_key;  // where to report a null list
  if (root.IsMap()) {
    bool found = false;
    for (const auto& kv : root) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
      if (key != "endpoints") return YamlError(source, kv.first, key.empty() ? "(root)" : key, "unknown key (expected 'endpoints')");
      if (found) return YamlError(source, kv.first, key, "duplicate key");
      found = true;
      list.reset(kv.second);
      list_key.reset(kv.first);
    }
    if (!found) return YamlError(source, root, "endpoints", "missing");
  } else if (root.IsSequence()) {
    list.reset(root);
    list_key.reset(root);
  } else {
    return absl::InvalidArgumentError(LineOf(source, root) +
                                      ": expected a map with 'endpoints' or a list of endpoints");
  }
  if (!list.IsSequence()) {
    return YamlError(source, list.IsNull() ? list_key : list, "endpoints", "expected a list of endpoints");
  }
  // An empty list is a pool with no endpoints yet (as a Kubernetes pool before its Pods are
  // Ready); commands that need one say so themselves.

  std::vector<EndpointSpec> specs;
  std::map<std::string, std::pair<size_t, std::string>> seen;  // address -> (index, line)
  size_t i = 0;
  for (auto entry = list.begin(); entry != list.end(); ++entry, ++i) {
    const std::string path = "endpoints[" + std::to_string(i) + "]";
    EndpointSpec spec;
    YAML::Node address_node;
    EPP_RETURN_IF_ERROR(ParseEntry(source, *entry, path, base_dir, spec, address_node));
    auto [it, inserted] = seen.emplace(spec.address, std::make_pair(i, LineOf(source, address_node)));
    if (!inserted) {
      return YamlError(source, address_node, path + ".address",
                       "duplicate address '" + spec.address + "' (first at " + it->second.second + ", endpoints[" +
                           std::to_string(it->second.first) + "])");
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

// ---- Resolving -----------------------------------------------------------------------------

// What every endpoint of one call needs, computed (and validated) before any I/O.
struct Plan {
  ScrapeOptions scrape;                            // normalised
  std::shared_ptr<const MetricMappings> mappings;  // the caller's (built once), or built here
  std::vector<std::string> engine;                 // per spec: "auto" or an engine name
};

// The engine the first of options.engine_labels names on the endpoint, when that names a mapping
// (built-in or custom); empty otherwise (an unknown value leaves the default to decide).
std::string LabelledEngine(const EndpointSpec& spec, const ScrapeOptions& options) {
  for (const std::string& label : options.engine_labels) {
    auto it = spec.labels.find(label);
    if (it == spec.labels.end() || it->second.empty()) continue;
    for (const MetricMapping& m : options.custom_mappings)
      if (m.engine == it->second) return it->second;
    if (MetricMapping::BuiltIn(it->second).ok()) return it->second;
  }
  return {};
}

absl::StatusOr<Plan> MakePlan(std::span<const EndpointSpec> specs, const ResolveOptions& options) {
  EPP_RETURN_IF_ERROR(ValidateEndpointSpecs(specs));
  Plan plan;
  plan.scrape = options.scrape;
  EPP_RETURN_IF_ERROR(NormalizeScrapeOptions(plan.scrape));
  std::vector<std::string> named;
  for (size_t i = 0; i < specs.size(); ++i) {
    std::string e = specs[i].engine.empty() ? LabelledEngine(specs[i], plan.scrape) : specs[i].engine;
    if (e.empty()) e = plan.scrape.engine;
    if (e.empty()) e = "auto";
    plan.engine.push_back(e);
    if (e != "auto") named.push_back(std::move(e));
  }
  plan.mappings = options.mappings;
  bool complete = plan.mappings != nullptr;
  for (const std::string& e : named) complete = complete && plan.mappings->Find(e) != nullptr;
  if (complete) return plan;
  // Resolved one engine at a time so that an unknown one is blamed on the spec that named it (a
  // default engine is the caller's option).
  for (size_t i = 0; i < specs.size(); ++i) {
    if (plan.engine[i] == "auto") continue;
    absl::Status s = ResolveMapping(plan.engine[i], plan.scrape).status();
    if (!s.ok()) {
      const std::string where =
          specs[i].engine.empty() ? "engine '" + plan.engine[i] + "'" : Where(specs[i], i) + ": engine";
      return absl::Status(s.code(), where + ": " + std::string(s.message()));
    }
  }
  EPP_ASSIGN_OR_RETURN(MetricMappings built, MetricMappings::Create(plan.scrape, named));
  plan.mappings = std::make_shared<const MetricMappings>(std::move(built));
  return plan;
}

// The result of reading one endpoint's metrics.
struct Outcome {
  bool read = false;             // text obtained, parsed and matched to an engine
  std::string engine;            // the engine used (or configured); empty when unknown
  EndpointMetrics metrics;
  absl::Status error;            // why the metrics were not read, or failed extraction checks
  bool unreachable = false;      // the scrape of the endpoint's own address was refused
  // The data-layer sources' answers: (index into ScrapeOptions::attribute_sources, answer).
  std::vector<std::pair<size_t, absl::StatusOr<HttpResponse>>> attribute_reads;
};

// Whether the data-layer sources read this endpoint: only a live server, whose metrics are scraped
// over HTTP (a metrics file or "none" names no server to ask).
bool ReadsAttributes(const EndpointSpec& spec) {
  const SourceKind k = KindOf(spec.metrics);
  return k == SourceKind::kDefault || k == SourceKind::kUrl;
}

// Source k's request for `spec`, with the scrape's timeout.
absl::StatusOr<HttpRequest> AttributeRequest(const ScrapeOptions& o, size_t k, const EndpointSpec& spec) {
  absl::StatusOr<HttpRequest> r = o.attribute_sources[k]->Request(spec);
  if (r.ok()) r->timeout = o.timeout;
  return r;
}

void ApplyAttributeReads(const ScrapeOptions& o, Outcome& out, const EndpointSpec& spec, EndpointAttributes& attributes) {
  for (const auto& [k, response] : out.attribute_reads)
    ApplyAttributeSourceResponse(*o.attribute_sources[k], response, spec, attributes);
  out.attribute_reads.clear();
}

// `what` names the source in a parse error ("metrics from URL"); built only then. `families` is
// the caller's parse buffer, kept from one read to the next.
template <typename What>
void Process(std::string_view text, What what, size_t i, const EndpointSpec& spec, const Plan& plan,
             std::string_view known_engine, MetricFamilies& families, Outcome& out) {
  MetricsRead r = ReadEndpointMetricsInto(text, *plan.mappings, plan.engine[i], known_engine, families);
  if (!r.parsed) {
    out.error = absl::InvalidArgumentError(Who(spec, i) + "cannot parse " + what() + ": " + std::string(r.error.message()));
    return;
  }
  if (!r.error.ok()) {
    out.error = absl::Status(r.error.code(), Who(spec, i) + std::string(r.error.message()));
    return;
  }
  out.engine = r.engine;
  // The scrape succeeded even if some values failed validation: the values that passed are fresh,
  // so the caller stamps them, and the failures travel in `error`.
  out.read = true;
  out.metrics = std::move(r.extraction.metrics);
  std::string failed;
  for (const CheckResult& c : r.extraction.checks) {
    if (c.status == CheckStatus::kFail) failed += (failed.empty() ? "" : "; ") + c.id + ": " + c.message;
  }
  if (!failed.empty()) out.error = absl::FailedPreconditionError(Who(spec, i) + failed);
}

HttpRequest MakeRequest(const ScrapeOptions& o, std::string url) {
  HttpRequest r;
  r.url = std::move(url);
  r.timeout = o.timeout;
  r.insecure = o.insecure;
  r.max_body_bytes = o.max_body_bytes;
  r.accept_gzip = o.accept_gzip;
  r.headers = o.headers;
  if (!o.bearer_token.empty()) r.headers.push_back("Authorization: Bearer " + o.bearer_token);
  return r;
}

// An outcome before the read: the engine the plan names for spec i, if it names one.
Outcome NewOutcome(const Plan& plan, size_t i) {
  Outcome o;
  if (plan.engine[i] != "auto") o.engine = plan.engine[i];
  return o;
}

// The request that reads a spec's metrics over HTTP; nullopt for a file or "none".
std::optional<HttpRequest> RequestFor(const EndpointSpec& spec, const Plan& plan) {
  switch (KindOf(spec.metrics)) {
    case SourceKind::kUrl: {
      HttpRequest r = MakeRequest(plan.scrape, spec.metrics);
      if (!spec.tls_ca_file.empty()) r.ca_file = spec.tls_ca_file;
      if (spec.tls_insecure_skip_verify) r.insecure = true;
      return r;
    }
    case SourceKind::kDefault:
      return MakeRequest(plan.scrape, "http://" + spec.address + plan.scrape.metrics_path);
    case SourceKind::kNone:
    case SourceKind::kFile:
      break;
  }
  return std::nullopt;
}

// Reads a spec's metrics file into `out`.
void ReadFileOutcome(const EndpointSpec& spec, size_t i, const Plan& plan, std::string_view known,
                     MetricFamilies& families, Outcome& out) {
  auto text = ReadFile(spec.metrics, plan.scrape.max_body_bytes);
  if (!text.ok()) {
    out.error = absl::Status(text.status().code(), Who(spec, i) + "metrics file '" + spec.metrics +
                                                       "' cannot be read: " + std::string(text.status().message()));
    return;
  }
  Process(*text, [&] { return "metrics file '" + spec.metrics + "'"; }, i, spec, plan, known, families, out);
}

// Turns the answer to `request` (a spec's scrape) into `out`.
void ResponseOutcome(const absl::StatusOr<HttpResponse>& r, const HttpRequest& request, const EndpointSpec& spec,
                     size_t i, const Plan& plan, std::string_view known, MetricFamilies& families, Outcome& out) {
  if (!r.ok()) {
    // Refused at the endpoint's own address (not at a separate metrics host): the server is gone.
    // A pool behind a gateway (engine epp) is gone when its own EPP refuses the scrape.
    out.unreachable = IsConnectionRefused(r.status()) &&
                      (request.url.find("//" + spec.address + "/") != std::string::npos || spec.engine == kPoolEngine);
    out.error = absl::Status(r.status().code(), Who(spec, i) + std::string(r.status().message()));
  } else if (r->status < 200 || r->status > 299) {
    out.error = absl::UnavailableError(Who(spec, i) + "GET " + request.url + ": HTTP " + std::to_string(r->status) +
                                       ": " + internal::BodySnippet(r->body));
  } else {
    Process(r->body, [&] { return "metrics from " + request.url; }, i, spec, plan, known, families, out);
  }
}

// Updates an endpoint that already exists from one read of its metrics, stamped `now` when read.
void ApplyOutcome(Outcome& o, const EndpointSpec& spec, Endpoint& ep, int64_t now, const ScrapeOptions& scrape) {
  ApplyAttributeReads(scrape, o, spec, ep.attributes);
  if (!o.engine.empty()) ep.engine = o.engine;
  if (o.read) {
    ep.metrics = std::move(o.metrics);
    ep.metrics_time_us = now;
  }
  ep.metrics_error = std::string(o.error.message());
  ep.unreachable = o.unreachable;
  ep.capacity = spec.capacity;
  ep.metrics_staleness_allowance_us = spec.metrics_staleness_allowance_us;
}

// Reads every endpoint's metrics: files one by one, then all URLs in one concurrent round.
// `known_engines` (empty, or one per spec) are engines already detected for auto specs.
std::vector<Outcome> Collect(std::span<const EndpointSpec> specs, const Plan& plan, const ResolveOptions& options,
                             std::span<const std::string> known_engines) {
  std::vector<Outcome> out;
  out.reserve(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) out.push_back(NewOutcome(plan, i));
  std::vector<HttpRequest> requests;
  std::vector<size_t> owner;  // requests[k] belongs to specs[owner[k]]
  constexpr size_t kMetrics = SIZE_MAX;
  std::vector<size_t> source;  // requests[k] reads source[k] of attribute_sources, or the metrics
  auto known = [&](size_t i) { return known_engines.empty() ? std::string_view() : std::string_view(known_engines[i]); };
  MetricFamilies families;  // one parse buffer for every read of the call
  for (size_t i = 0; i < specs.size(); ++i) {
    const EndpointSpec& spec = specs[i];
    if (ReadsAttributes(spec)) {
      for (size_t k = 0; k < plan.scrape.attribute_sources.size(); ++k) {
        absl::StatusOr<HttpRequest> r = AttributeRequest(plan.scrape, k, spec);
        if (!r.ok()) {
          out[i].attribute_reads.emplace_back(k, r.status());
          continue;
        }
        requests.push_back(*std::move(r));
        owner.push_back(i);
        source.push_back(k);
      }
    }
    if (std::optional<HttpRequest> r = RequestFor(spec, plan)) {
      requests.push_back(*std::move(r));
      owner.push_back(i);
      source.push_back(kMetrics);
    } else if (KindOf(spec.metrics) == SourceKind::kFile) {
      ReadFileOutcome(spec, i, plan, known(i), families, out[i]);
    }
  }
  if (requests.empty()) return out;
  std::vector<absl::StatusOr<HttpResponse>> responses =
      options.http_client != nullptr ? options.http_client->FetchAll(requests) : HttpFetchAll(requests);
  for (size_t k = 0; k < responses.size(); ++k) {
    const size_t i = owner[k];
    if (source[k] != kMetrics) {
      out[i].attribute_reads.emplace_back(source[k], std::move(responses[k]));
      continue;
    }
    ResponseOutcome(responses[k], requests[k], specs[i], i, plan, known(i), families, out[i]);
  }
  return out;
}

int64_t Now(const ResolveOptions& options) {
  return options.clock != nullptr ? options.clock->NowMicros() : SteadyClock::Get().NowMicros();
}

}  // namespace

void ApplyAttributeSourceResponse(const AttributeSource& source, const absl::StatusOr<HttpResponse>& response,
                                  const EndpointSpec& spec, EndpointAttributes& attributes) {
  absl::Status s;
  if (!response.ok()) {
    s = response.status();
  } else if (response->status < 200 || response->status > 299) {
    s = absl::UnavailableError("HTTP " + std::to_string(response->status) + ": " + internal::BodySnippet(response->body));
  } else {
    s = source.Apply(response->body, spec, attributes);
  }
  auto& errors = attributes.errors;
  auto it = std::find_if(errors.begin(), errors.end(), [&](const auto& e) { return e.first == source.name(); });
  if (s.ok()) {
    if (it != errors.end()) errors.erase(it);
    return;
  }
  std::string message(s.message());
  if (it != errors.end()) it->second = std::move(message);
  else errors.emplace_back(source.name(), std::move(message));
}

absl::Status ValidateEndpointAddress(std::string_view address) {
  const std::string q = "'" + std::string(address) + "'";
  if (address.empty()) return absl::InvalidArgumentError("address is empty");
  for (char c : address) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) {
      return absl::InvalidArgumentError(q + " contains whitespace or a control character");
    }
  }
  std::string_view host, port;
  if (address.front() == '[') {
    const size_t close = address.find(']');
    if (close == std::string_view::npos) return absl::InvalidArgumentError(q + " has no closing ']'");
    host = address.substr(1, close - 1);
    const std::string_view rest = address.substr(close + 1);
    if (rest.empty()) return absl::InvalidArgumentError(q + " has no port");
    if (rest.front() != ':') return absl::InvalidArgumentError(q + ": expected ':PORT' after ']'");
    port = rest.substr(1);
    in6_addr v6;
    if (::inet_pton(AF_INET6, std::string(host).c_str(), &v6) != 1) {
      return absl::InvalidArgumentError(q + " has an invalid IPv6 address '" + std::string(host) + "'");
    }
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string_view::npos) return absl::InvalidArgumentError(q + " has no port");
    if (address.find(':') != colon) {
      return absl::InvalidArgumentError(q + ": write an IPv6 address in brackets, as in '[::1]:8000'");
    }
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
    if (host.empty()) return absl::InvalidArgumentError(q + " has no host");
    if (host.find_first_not_of("0123456789.") == std::string_view::npos) {
      in_addr v4;
      if (::inet_pton(AF_INET, std::string(host).c_str(), &v4) != 1) {
        return absl::InvalidArgumentError(q + " has an invalid IPv4 address '" + std::string(host) + "'");
      }
    } else if (!IsHostName(host)) {
      return absl::InvalidArgumentError(q + " has an invalid host name '" + std::string(host) + "'");
    }
  }
  if (port.empty()) return absl::InvalidArgumentError(q + " has no port");
  if (!IsDigits(port)) return absl::InvalidArgumentError(q + " has a non-numeric port '" + std::string(port) + "'");
  if (port.size() > 1 && port.front() == '0') {
    return absl::InvalidArgumentError(q + " has a port with a leading zero");
  }
  if (port.size() > 5 || std::stoi(std::string(port)) < 1 || std::stoi(std::string(port)) > 65535) {
    return absl::InvalidArgumentError(q + " has port " + std::string(port) + "; expected 1..65535");
  }
  return absl::OkStatus();
}

absl::Status ValidateEndpointSpecs(std::span<const EndpointSpec> specs) {
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < specs.size(); ++i) {
    const EndpointSpec& spec = specs[i];
    if (absl::Status s = ValidateEndpointAddress(spec.address); !s.ok()) {
      return absl::InvalidArgumentError(Where(spec, i) + ": address: " + std::string(s.message()));
    }
    auto [it, inserted] = seen.emplace(spec.address, i);
    if (!inserted) {
      return absl::InvalidArgumentError(Where(spec, i) + ": address: duplicate address '" + spec.address +
                                        "' (first at " + Where(specs[it->second], it->second) + ")");
    }
    if (std::string p = MetricsProblem(spec.metrics); !p.empty()) {
      return absl::InvalidArgumentError(Where(spec, i) + ": metrics: " + p);
    }
    for (const auto& [name, value] : spec.labels) {
      if (name.empty()) return absl::InvalidArgumentError(Where(spec, i) + ": labels: empty label name");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<EndpointSpec>> ParseEndpointsYaml(std::string_view text, std::string_view source,
                                                             const std::string& base_dir) {
  try {
    return ParseYamlOrThrow(text, source, base_dir);
  } catch (const YAML::Exception& e) {
    if (e.msg.find("flow not found") != std::string::npos) return internal::YamlExceptionError(source, e, text);
    std::string where(source);
    if (e.mark.line >= 0) where += ":" + std::to_string(e.mark.line + 1);
    return absl::InvalidArgumentError(where + ": " + e.msg);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(std::string(source) + ": " + e.what());
  }
}

absl::StatusOr<std::vector<EndpointSpec>> LoadEndpointsFile(const std::string& path) {
  // Endpoints files are hand-written lists; 16 MiB is far beyond any real pool.
  auto text = ReadFile(path, kDefaultMaxBodyBytes);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        "cannot read endpoints file '" + path + "': " + std::string(text.status().message()));
  }
  return ParseEndpointsYaml(*text, path, std::filesystem::path(path).parent_path().string());
}

absl::StatusOr<EndpointSpec> ParseEndpointFlag(std::string_view flag, int index) {
  EndpointSpec spec;
  spec.origin = "--endpoint #" + std::to_string(index);
  const size_t eq = flag.find('=');  // addresses never hold '='; URLs may, after it
  spec.address = std::string(flag.substr(0, eq));
  if (absl::Status s = ValidateEndpointAddress(spec.address); !s.ok()) {
    return absl::InvalidArgumentError(spec.origin + ": " + std::string(s.message()));
  }
  if (eq != std::string_view::npos) {
    spec.metrics = std::string(flag.substr(eq + 1));
    if (spec.metrics.empty()) {
      return absl::InvalidArgumentError(spec.origin + ": expected METRICS (a file, an http(s) URL or 'none') after '='");
    }
    if (std::string p = MetricsProblem(spec.metrics); !p.empty()) {
      return absl::InvalidArgumentError(spec.origin + ": metrics: " + p);
    }
  }
  return spec;
}

absl::StatusOr<std::vector<Endpoint>> ResolveEndpoints(std::span<const EndpointSpec> specs,
                                                       const ResolveOptions& options) {
  EPP_ASSIGN_OR_RETURN(Plan plan, MakePlan(specs, options));
  std::vector<Outcome> outcomes = Collect(specs, plan, options, {});
  // One stamp after all I/O: the scrapes ran concurrently, and staleness is judged per call.
  const int64_t now = Now(options);
  std::vector<Endpoint> endpoints(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    Outcome& o = outcomes[i];
    if (options.fail_on_metrics_error && !o.error.ok()) return o.error;
    Endpoint& ep = endpoints[i];
    ep.address = specs[i].address;
    ep.labels = specs[i].labels;
    ep.engine = o.engine;
    if (o.read) {
      ep.metrics = std::move(o.metrics);
      ep.metrics_time_us = now;
    }
    ep.metrics_error = std::string(o.error.message());
    ep.unreachable = o.unreachable;
    ep.capacity = specs[i].capacity;
    ep.metrics_staleness_allowance_us = specs[i].metrics_staleness_allowance_us;
    ApplyAttributeReads(plan.scrape, o, specs[i], ep.attributes);
  }
  return endpoints;
}

absl::Status RefreshEndpointMetrics(std::span<const EndpointSpec> specs, std::span<Endpoint> endpoints,
                                    const ResolveOptions& options) {
  if (specs.size() != endpoints.size()) {
    return absl::InvalidArgumentError("refresh: " + std::to_string(specs.size()) + " specs for " +
                                      std::to_string(endpoints.size()) + " endpoints");
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].address != endpoints[i].address) {
      return absl::InvalidArgumentError("refresh: endpoints[" + std::to_string(i) + "] is '" + endpoints[i].address +
                                        "' but its spec says '" + specs[i].address + "'");
    }
  }
  EPP_ASSIGN_OR_RETURN(Plan plan, MakePlan(specs, options));
  std::vector<std::string> known(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) known[i] = endpoints[i].engine;
  std::vector<Outcome> outcomes = Collect(specs, plan, options, known);
  const int64_t now = Now(options);
  absl::Status first = absl::OkStatus();
  for (size_t i = 0; i < specs.size(); ++i) {
    if (options.fail_on_metrics_error && first.ok()) first = outcomes[i].error;
    ApplyOutcome(outcomes[i], specs[i], endpoints[i], now, plan.scrape);
  }
  return first;
}

// ---- StaggeredScraper ----------------------------------------------------------------------

struct StaggeredScraper::Impl {
  using Clock = std::chrono::steady_clock;
  std::vector<EndpointSpec> specs;
  ResolveOptions options;
  Plan plan;
  HttpClient* client = nullptr;
  Clock::duration interval{};
  Clock::time_point t0;
  std::vector<Clock::duration> phase;  // per spec, in [0, interval)
  std::vector<size_t> order;           // spec indices by phase
  std::vector<std::optional<HttpRequest>> request;  // per spec: its request, or none (file, none)
  std::vector<uint64_t> in_flight;     // per spec: the transfer's id, 0 when none
  std::vector<Clock::time_point> due_of;  // per spec: when the running scrape fell due
  static constexpr size_t kMetrics = SIZE_MAX;
  // transfer id -> (spec index, attribute source index or kMetrics)
  std::unordered_map<uint64_t, std::pair<size_t, size_t>> owner;
  // The data-layer sources (ScrapeOptions::attribute_sources): each read every `every[k]` rounds;
  // per spec and source the request (nullopt: the endpoint is not read by sources) and the
  // transfer in flight (0: none).
  std::vector<int64_t> every;
  std::vector<std::vector<std::optional<absl::StatusOr<HttpRequest>>>> source_request;
  std::vector<std::vector<uint64_t>> source_in_flight;
  MetricFamilies families;                     // the parse buffer, reused by every read
  size_t cursor = 0;   // order[cursor] is the next slot
  int64_t round = 0;   // the next slot is in round `round`
  double round_lag = 0;
  Stats stats;

  Clock::time_point NextDue() const { return t0 + round * interval + phase[order[cursor]]; }

  void Apply(size_t i, Outcome& o, Clock::time_point due, std::span<Endpoint> endpoints, std::vector<Applied>& applied) {
    ApplyOutcome(o, specs[i], endpoints[i], Now(options), plan.scrape);
    applied.push_back({i, o.read});
    stats.reads++;
    round_lag = std::max(round_lag, std::chrono::duration<double>(Clock::now() - due).count());
  }

  // Starts (or, for a file, performs) the scrape of slot `cursor`, then moves to the next slot.
  void StartSlot(Clock::time_point now, std::span<Endpoint> endpoints, std::vector<Applied>& applied) {
    const Clock::time_point due = NextDue();
    const size_t i = order[cursor];
    const int64_t slot_round = round;
    if (++cursor == order.size()) {
      cursor = 0;
      ++round;
      stats.rounds++;
      stats.last_round_lag_seconds = round_lag;
      round_lag = 0;
    }
    // A slot whose next one has also passed (the thread was held up) is skipped, not repeated.
    if (due + interval <= now) {
      stats.overruns++;
      return;
    }
    StartSources(i, slot_round, endpoints, applied);
    if (in_flight[i] != 0) {
      stats.overruns++;
      return;
    }
    const std::string_view known = endpoints[i].engine;
    if (request[i]) {
      in_flight[i] = client->Start(*request[i]);
      due_of[i] = due;
      owner.emplace(in_flight[i], std::make_pair(i, kMetrics));
      return;
    }
    Outcome o = NewOutcome(plan, i);
    if (KindOf(specs[i].metrics) == SourceKind::kFile) ReadFileOutcome(specs[i], i, plan, known, families, o);
    Apply(i, o, due, endpoints, applied);
  }

  // Starts the reads of the data-layer sources due for endpoint i in round `r` (one still running
  // is not doubled); a source that cannot read the endpoint records why at once.
  void StartSources(size_t i, int64_t r, std::span<Endpoint> endpoints, std::vector<Applied>& applied) {
    for (size_t k = 0; k < every.size(); ++k) {
      if (!source_request[i][k] || r % every[k] != 0 || source_in_flight[i][k] != 0) continue;
      const absl::StatusOr<HttpRequest>& req = *source_request[i][k];
      if (!req.ok()) {
        ApplyAttributeSourceResponse(*plan.scrape.attribute_sources[k], req.status(), specs[i], endpoints[i].attributes);
        applied.push_back({i, false, true});
        continue;
      }
      source_in_flight[i][k] = client->Start(*req);
      owner.emplace(source_in_flight[i][k], std::make_pair(i, k));
    }
  }
};

absl::StatusOr<std::unique_ptr<StaggeredScraper>> StaggeredScraper::Create(std::vector<EndpointSpec> specs,
                                                                           ResolveOptions options,
                                                                           std::chrono::microseconds interval,
                                                                           HttpClient& client) {
  if (interval.count() <= 0) return absl::InvalidArgumentError("scrape interval must be > 0");
  options.http_client = &client;
  auto m = std::make_unique<Impl>();
  EPP_ASSIGN_OR_RETURN(m->plan, MakePlan(specs, options));
  m->specs = std::move(specs);
  m->options = std::move(options);
  m->client = &client;
  m->interval = std::chrono::duration_cast<Impl::Clock::duration>(interval);
  m->t0 = Impl::Clock::now();
  const size_t n = m->specs.size();
  m->phase.resize(n);
  m->request.resize(n);
  m->in_flight.assign(n, 0);
  m->due_of.resize(n);
  const size_t sources = m->plan.scrape.attribute_sources.size();
  for (size_t k = 0; k < sources; ++k) {
    // llm-d rounds a source's interval to the nearest multiple of the base tick.
    const double ratio = static_cast<double>(m->plan.scrape.attribute_sources[k]->interval().count()) /
                         static_cast<double>(interval.count());
    m->every.push_back(std::max<int64_t>(1, static_cast<int64_t>(std::llround(ratio))));
  }
  m->source_request.resize(n);
  m->source_in_flight.assign(n, std::vector<uint64_t>(sources, 0));
  for (size_t i = 0; i < n; ++i) {
    const EndpointSpec& spec = m->specs[i];
    // A hash of the address, not the index: an endpoint keeps its phase when others come or go.
    const uint64_t h = std::hash<std::string>{}(spec.address) * 0x9E3779B97F4A7C15ull;
    m->phase[i] = Impl::Clock::duration(static_cast<Impl::Clock::rep>(
        static_cast<double>(h >> 11) / static_cast<double>(uint64_t{1} << 53) * static_cast<double>(m->interval.count())));
    m->request[i] = RequestFor(spec, m->plan);
    m->source_request[i].resize(sources);
    if (ReadsAttributes(spec))
      for (size_t k = 0; k < sources; ++k) m->source_request[i][k] = AttributeRequest(m->plan.scrape, k, spec);
  }
  m->order.resize(n);
  for (size_t i = 0; i < n; ++i) m->order[i] = i;
  std::sort(m->order.begin(), m->order.end(), [&](size_t a, size_t b) { return m->phase[a] < m->phase[b]; });
  // Enough idle connections for every endpoint: fewer would close and reopen some each round.
  client.set_max_idle_connections(n + 16);
  return std::unique_ptr<StaggeredScraper>(new StaggeredScraper(std::move(m)));
}

StaggeredScraper::StaggeredScraper(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StaggeredScraper::~StaggeredScraper() {
  for (const auto& [id, slot] : impl_->owner) impl_->client->Cancel(id);
}

const StaggeredScraper::Stats& StaggeredScraper::stats() const { return impl_->stats; }

std::chrono::microseconds StaggeredScraper::Phase(size_t i) const {
  return std::chrono::duration_cast<std::chrono::microseconds>(impl_->phase.at(i));
}

void StaggeredScraper::RunUntil(std::span<Endpoint> endpoints, std::chrono::steady_clock::time_point until,
                                std::vector<Applied>& applied) {
  Impl& m = *impl_;
  using Clock = Impl::Clock;
  for (;;) {
    Clock::time_point now = Clock::now();
    while (!m.order.empty() && m.NextDue() <= now) m.StartSlot(now, endpoints, applied);
    if (now >= until) return;
    const Clock::time_point next = m.order.empty() ? until : std::min(until, m.NextDue());
    std::vector<HttpClient::Finished> finished = m.client->Wait(next);
    for (HttpClient::Finished& f : finished) {
      auto it = m.owner.find(f.id);
      if (it == m.owner.end()) continue;
      const auto [i, k] = it->second;
      m.owner.erase(it);
      if (k != Impl::kMetrics) {
        m.source_in_flight[i][k] = 0;
        ApplyAttributeSourceResponse(*m.plan.scrape.attribute_sources[k], f.response, m.specs[i], endpoints[i].attributes);
        applied.push_back({i, false, true});
        continue;
      }
      m.in_flight[i] = 0;
      Outcome o = NewOutcome(m.plan, i);
      ResponseOutcome(f.response, *m.request[i], m.specs[i], i, m.plan, endpoints[i].engine, m.families, o);
      m.Apply(i, o, m.due_of[i], endpoints, applied);
    }
    // Nothing finished and neither the next slot nor `until` has come: woken up.
    if (finished.empty() && Clock::now() < next) return;
  }
}

}  // namespace epp
