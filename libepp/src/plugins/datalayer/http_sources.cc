// llm-d's HTTP data sources: dcgm-data-source, models-data-source and
// multicluster-metrics-data-source (datalayer.h). Each is a ScrapeSettingsSource: it hands the
// endpoint pool an AttributeSource, so its reads run in the pool's scrape loop (same schedule,
// same connections, same staggering) instead of a second scraper. Facts: llm-d-router's
// datalayer/source/{dcgm,models,metrics/multicluster.go} and source/http.
#include <algorithm>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "plugins/datalayer/datalayer.h"

namespace epp::plugins {
namespace {

enum class SourceKind { kDcgm, kModels, kMulticluster };

struct HttpSourceOptions {
  std::string scheme = "http";
  std::string path = "/metrics";
  int64_t port = 0;  // dcgm-data-source: the exporter's port; others: the endpoint's own
  bool insecure_skip_verify = true;
  bool use_node_address = false;
  std::string ca_cert_path, client_cert_path, client_key_path;
  int64_t interval_us = 0;  // 0: every scrape interval
};

// Each source's own defaults (llm-d's), so that Schema(), which reads a default-constructed
// struct, shows them.
struct DcgmOptions : HttpSourceOptions {
  DcgmOptions() { port = 9400; }
};
struct ModelsOptions : HttpSourceOptions {
  ModelsOptions() { path = "/v1/models"; }
};
struct MulticlusterOptions : HttpSourceOptions {
  // https and verified: a cross-cluster scrape crosses a trust boundary.
  MulticlusterOptions() {
    scheme = "https";
    insecure_skip_verify = false;
  }
};

template <class O>
ParamTable<O>& Common(ParamTable<O>& t, const char* path_doc) {
  return t.String("scheme", &O::scheme, "http or https", {"http", "https"}).String("path", &O::path, path_doc);
}

template <class O>
ParamTable<O>& Tls(ParamTable<O>& t) {
  return t.String("caCertPath", &O::ca_cert_path, "PEM CA bundle verifying the server (https)")
      .OmitEmpty()
      .String("clientCertPath", &O::client_cert_path, "client certificate for mTLS (not supported by epp: an error when set)")
      .OmitEmpty()
      .String("clientKeyPath", &O::client_key_path, "client key for mTLS (not supported by epp: an error when set)")
      .OmitEmpty();
}

template <class O>
ParamTable<O>& Interval(ParamTable<O>& t) {
  return t.Duration("interval", &O::interval_us, Range::AtLeast(0),
                    "read period, rounded to whole scrape intervals; 0 or absent: every scrape interval");
}

template <class O>
const ParamTable<O>& TableFor();

template <>
const ParamTable<DcgmOptions>& TableFor<DcgmOptions>() {
  static const auto* t = [] {
    auto* t = new ParamTable<DcgmOptions>();
    Common(*t, "the exporter's metrics path")
        .template Int<int64_t>("port", &DcgmOptions::port, Range::Closed(1, 65535), "the DCGM exporter's port")
        .Bool("insecureSkipVerify", &DcgmOptions::insecure_skip_verify, "skip TLS verification (https)")
        .Bool("useNodeAddress", &DcgmOptions::use_node_address,
              "read the exporter on the Pod's node (DaemonSet) instead of the Pod's own address (sidecar)");
    Interval(*t);
    return t;
  }();
  return *t;
}

template <>
const ParamTable<ModelsOptions>& TableFor<ModelsOptions>() {
  static const auto* t = [] {
    auto* t = new ParamTable<ModelsOptions>();
    Common(*t, "the model list's path")
        .Bool("insecureSkipVerify", &ModelsOptions::insecure_skip_verify, "skip TLS verification (https)");
    Tls(*t);
    Interval(*t);
    return t;
  }();
  return *t;
}

template <>
const ParamTable<MulticlusterOptions>& TableFor<MulticlusterOptions>() {
  static const auto* t = [] {
    auto* t = new ParamTable<MulticlusterOptions>();
    Common(*t, "the peer EPP's metrics path")
        .Bool("insecureSkipVerify", &MulticlusterOptions::insecure_skip_verify,
              "skip TLS verification (off by default: the scrape crosses a cluster boundary)");
    Tls(*t);
    Interval(*t);
    return t;
  }();
  return *t;
}

// "host:port" -> (host with IPv6 brackets kept, port).
std::pair<std::string, std::string> SplitHostPort(std::string_view authority) {
  const size_t colon = authority.rfind(':');
  if (colon == std::string_view::npos || authority.back() == ']') return {std::string(authority), ""};
  return {std::string(authority.substr(0, colon)), std::string(authority.substr(colon + 1))};
}

// The authority of an http(s) URL ("http://10.0.0.1:9090/metrics" -> "10.0.0.1:9090").
std::string UrlAuthority(std::string_view url) {
  const size_t start = url.find("://");
  if (start == std::string_view::npos) return {};
  const std::string_view rest = url.substr(start + 3);
  return std::string(rest.substr(0, rest.find('/')));
}

class HttpAttributeSource final : public AttributeSource {
 public:
  HttpAttributeSource(std::string name, SourceKind kind, HttpSourceOptions o,
                      std::vector<std::pair<std::string, std::shared_ptr<const DataExtractor>>> extractors)
      : name_(std::move(name)), kind_(kind), o_(std::move(o)), extractors_(std::move(extractors)) {}

  const std::string& name() const override { return name_; }
  std::chrono::microseconds interval() const override { return std::chrono::microseconds(o_.interval_us); }

  absl::StatusOr<HttpRequest> Request(const EndpointSpec& spec) const override {
    // llm-d reads the endpoint's metrics host (its address, or the metrics URL's host for a peer
    // cluster). models-data-source asks the serving address even when the metrics are read
    // elsewhere (--model-server-metrics-port): /v1/models is served beside the inference API.
    std::string authority = spec.address;
    if (kind_ == SourceKind::kMulticluster && spec.metrics.find("://") != std::string::npos)
      authority = UrlAuthority(spec.metrics);
    auto [host, port] = SplitHostPort(authority);
    if (o_.use_node_address) {
      if (spec.node_address.empty())
        return absl::FailedPreconditionError(
            "useNodeAddress: the endpoint's node address is unknown (only Pods discovered in Kubernetes have one)");
      host = spec.node_address.find(':') != std::string::npos ? "[" + spec.node_address + "]" : spec.node_address;
    }
    if (o_.port > 0) port = std::to_string(o_.port);
    HttpRequest r;
    r.url = absl::StrCat(o_.scheme, "://", host, port.empty() ? "" : ":", port, o_.path);
    r.insecure = o_.insecure_skip_verify;
    r.ca_file = o_.ca_cert_path;
    // A peer cluster is across a trust boundary: its answer is capped (llm-d reads 8 MiB).
    if (kind_ == SourceKind::kMulticluster) r.max_body_bytes = size_t{8} << 20;
    r.accept_gzip = false;
    return r;
  }

  absl::Status Apply(std::string_view body, const EndpointSpec& spec, EndpointAttributes& attributes) const override {
    return kind_ == SourceKind::kModels ? ApplyModels(body, attributes) : ApplyMetrics(body, spec, attributes);
  }

 private:
  absl::Status ApplyMetrics(std::string_view body, const EndpointSpec& spec, EndpointAttributes& attributes) const {
    absl::StatusOr<MetricFamilies> families = ParsePrometheusText(body);
    if (!families.ok()) return absl::InvalidArgumentError(absl::StrCat("cannot parse the metrics: ", families.status().message()));
    std::vector<std::string> errors;
    for (const auto& [producer, extractor] : extractors_) {
      std::vector<EndpointAttributes::Value> got;
      // What an extractor failed to read keeps its last value (llm-d: no Put on that key).
      if (absl::Status s = extractor->ExtractMetrics(*families, spec, got); !s.ok())
        errors.push_back(absl::StrCat(producer, ": ", s.message()));
      Put(got, producer, attributes);
    }
    if (!errors.empty()) return absl::NotFoundError(absl::StrJoin(errors, "; "));
    return absl::OkStatus();
  }

  // Puts each value (llm-d's AttributeMap.Put): a key already read from this producer is replaced,
  // the producer's other keys keep their values.
  void Put(std::vector<EndpointAttributes::Value>& got, const std::string& producer, EndpointAttributes& attributes) const {
    for (EndpointAttributes::Value& v : got) {
      v.producer = producer;
      v.source = name_;
      auto it = std::find_if(attributes.values.begin(), attributes.values.end(),
                             [&](const EndpointAttributes::Value& x) { return x.key == v.key && x.producer == producer; });
      if (it != attributes.values.end()) *it = std::move(v);
      else attributes.values.push_back(std::move(v));
    }
  }

  absl::Status ApplyModels(std::string_view body, EndpointAttributes& attributes) const {
    // The OpenAI list: {"object": "list", "data": [{"id": ..., "parent": ...}, ...]}.
    const nlohmann::json doc = nlohmann::json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) return absl::InvalidArgumentError("the model list is not JSON");
    auto data = doc.is_object() ? doc.find("data") : doc.end();
    if (data == doc.end() || !data->is_array()) return absl::InvalidArgumentError("the model list has no 'data' array");
    std::vector<ServedModel> models;
    for (size_t i = 0; i < data->size(); ++i) {
      const nlohmann::json& m = (*data)[i];
      auto id = m.is_object() ? m.find("id") : m.end();
      if (id == m.end() || !id->is_string() || id->get<std::string>().empty())
        return absl::InvalidArgumentError(absl::StrCat("data[", i, "].id: expected a non-empty string"));
      ServedModel sm{id->get<std::string>(), ""};
      if (auto parent = m.find("parent"); parent != m.end() && parent->is_string()) sm.parent = parent->get<std::string>();
      models.push_back(std::move(sm));
    }
    for (const auto& [producer, extractor] : extractors_) {
      EPP_RETURN_IF_ERROR(extractor->ExtractModels(models, attributes));
      attributes.models_source = name_;
    }
    return absl::OkStatus();
  }

  std::string name_;
  SourceKind kind_;
  HttpSourceOptions o_;
  std::vector<std::pair<std::string, std::shared_ptr<const DataExtractor>>> extractors_;
};

class HttpDataSource final : public Plugin, public ScrapeSettingsSource, public DataSourcePlugin {
 public:
  HttpDataSource(TypedName tn, SourceKind kind, HttpSourceOptions o, Params effective)
      : Plugin(std::move(tn)), kind_(kind), o_(std::move(o)), effective_(std::move(effective)) {}
  Params EffectiveParams() const override { return effective_; }
  // Wired by the config's dataLayer section: a reload builds a new instance.
  bool HasReferences() const override { return true; }

  DataPayload Provides() const override { return kind_ == SourceKind::kModels ? DataPayload::kModels : DataPayload::kPrometheus; }
  void AddExtractor(std::string name, std::shared_ptr<const DataExtractor> extractor) override {
    extractors_.emplace_back(std::move(name), std::move(extractor));
  }

  void ConfigureScrape(ScrapeOptions& options) const override {
    if (extractors_.empty()) return;  // not in dataLayer.sources, or no extractor: nothing to read
    options.attribute_sources.push_back(std::make_shared<HttpAttributeSource>(name(), kind_, o_, extractors_));
  }
  bool DeclaresAttribute(std::string_view) const override { return false; }

 private:
  SourceKind kind_;
  HttpSourceOptions o_;
  Params effective_;
  std::vector<std::pair<std::string, std::shared_ptr<const DataExtractor>>> extractors_;
};

template <class O>
PluginOr CreateSource(SourceKind kind, std::string_view type, const std::string& name, const Params& params) {
  EPP_ASSIGN_OR_RETURN(O o, TableFor<O>().Read(params));
  if (o.path.empty() || o.path.front() != '/')
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ".path: must start with '/', got '", o.path, "'"));
  // epp's HTTP client (libcurl through HttpRequest) presents no client certificate yet; refusing
  // the parameters beats scraping without the identity the peer expects.
  for (const auto& [key, value] : {std::pair<const char*, const std::string*>{"clientCertPath", &o.client_cert_path},
                                   {"clientKeyPath", &o.client_key_path}})
    if (!value->empty())
      return absl::UnimplementedError(absl::StrCat(params.path(), ".", key, ": mTLS client certificates are not supported by epp"));
  Params effective = TableFor<O>().Effective(o);
  return std::make_unique<HttpDataSource>(TN(type, name), kind, static_cast<HttpSourceOptions>(o), std::move(effective));
}

}  // namespace

const char* DataPayloadName(DataPayload p) {
  switch (p) {
    case DataPayload::kPrometheus: return "Prometheus metrics";
    case DataPayload::kModels: return "/v1/models";
    case DataPayload::kKubeObjects: break;
  }
  return "Kubernetes objects";
}

PluginOr CreateDcgmDataSource(const std::string& name, const Params& params, const PluginContext&) {
  return CreateSource<DcgmOptions>(SourceKind::kDcgm, kDcgmDataSourceType, name, params);
}
PluginOr CreateModelsDataSource(const std::string& name, const Params& params, const PluginContext&) {
  return CreateSource<ModelsOptions>(SourceKind::kModels, kModelsDataSourceType, name, params);
}
PluginOr CreateMulticlusterMetricsDataSource(const std::string& name, const Params& params, const PluginContext&) {
  return CreateSource<MulticlusterOptions>(SourceKind::kMulticluster, kMulticlusterMetricsDataSourceType, name, params);
}

PluginSchema DcgmDataSourceSchema() { return TableFor<DcgmOptions>().Schema(); }
PluginSchema ModelsDataSourceSchema() { return TableFor<ModelsOptions>().Schema(); }
PluginSchema MulticlusterMetricsDataSourceSchema() { return TableFor<MulticlusterOptions>().Schema(); }

}  // namespace epp::plugins
