// Reading model-server metrics: the Prometheus text parser, metric specs, engine mappings and
// extraction of EndpointMetrics. Fetching over HTTP is in http.h; `eppctl check` is in check.h.
//
// The three steps are pure functions of their inputs and safe to call from many threads:
//   ParsePrometheusText(text)            -> MetricFamilies   (the whole text exposition format)
//   DetectEngine(families)               -> engine name      (which dialect the server speaks)
//   ExtractMetrics(families, mapping)    -> MetricsExtraction (values + validation findings)
//
// Family grouping follows the Prometheus text parsers (Go's expfmt and Python's prometheus_client):
// `# TYPE x histogram` groups x_bucket, x_sum and x_count; `summary` groups x, x_sum and x_count;
// a sample whose name fits no open family forms its own untyped family. Counter families are
// named without their `_total` suffix, as prometheus_client names them.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "epp/endpoint.h"
#include "epp/runtime/http.h"
#include "epp/status.h"

namespace epp {

enum class MetricType { kCounter, kGauge, kHistogram, kSummary, kUntyped };

// "counter", "gauge", "histogram", "summary", "untyped".
std::string_view MetricTypeName(MetricType type);

struct Label {
  std::string_view name;
  std::string_view value;  // unescaped
};

struct Sample {
  std::string_view name;
  std::span<const Label> labels;     // in source order
  double value = 0;
  std::optional<int64_t> timestamp_ms;

  // The value of label `name`, or nullopt.
  std::optional<std::string_view> label(std::string_view name) const;
};

struct MetricFamily {
  std::string_view name;  // TYPE/HELP name; counters without `_total`
  MetricType type = MetricType::kUntyped;
  std::string_view help;  // unescaped; empty when absent
  std::span<const Sample> samples;
};

// The parsed text. Owns every byte its views point to; movable, not copyable. All views stay
// valid for the object's lifetime (moves included).
class MetricFamilies {
 public:
  MetricFamilies();
  ~MetricFamilies();
  MetricFamilies(MetricFamilies&&) noexcept;
  MetricFamilies& operator=(MetricFamilies&&) noexcept;

  std::span<const MetricFamily> families() const;
  size_t sample_count() const;
  // Lines skipped in lenient mode (0 in strict mode).
  int skipped_lines() const;
  // Line numbers (1-based) of the skipped lines and why, for reports.
  const std::vector<std::pair<int, std::string>>& skipped() const;

  // The families holding samples named exactly `sample_name` (usually one).
  std::vector<const MetricFamily*> FindBySampleName(std::string_view sample_name) const;
  // Every sample named `sample_name`, with the family it belongs to.
  std::vector<std::pair<const MetricFamily*, const Sample*>> SamplesNamed(
      std::string_view sample_name) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  friend absl::Status ParsePrometheusTextInto(std::string_view, const struct ParseOptions&, MetricFamilies&);
};

struct ParseOptions {
  // Skip lines that are not exposition (and count them) instead of failing on the first one.
  bool lenient = false;
};

// Parses the Prometheus text exposition format (0.0.4, plus the OpenMetrics `# EOF` terminator).
// Errors are kInvalidArgument "line L, column C: <what>"; in lenient mode malformed lines are
// skipped and counted instead.
absl::StatusOr<MetricFamilies> ParsePrometheusText(std::string_view text,
                                                   const ParseOptions& options = {});

// The same, reusing `out`'s buffers (a scraper parsing each endpoint every 50 ms allocates
// nothing in steady state). On error `out` holds no families.
absl::Status ParsePrometheusTextInto(std::string_view text, const ParseOptions& options, MetricFamilies& out);

// A PromQL-style instant selector: `name` or `name{label=value,label2="value2"}`. Unquoted values
// are accepted (as GIE does); only `=` matchers; `__`-prefixed pseudo-labels are dropped.
struct MetricSpec {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;

  static absl::StatusOr<MetricSpec> Parse(std::string_view text);
  std::string ToString() const;
  bool Matches(const Sample& sample) const;  // name equal and every label matcher equal
  bool operator==(const MetricSpec&) const = default;
};

// The engine of an endpoint that is a whole pool behind its gateway: its metrics are the pool
// aggregates that pool's own EPP publishes (GIE's inference_pool_average_queue_size and
// _kv_cache_utilization, llm-d's llm_d_epp_average_* names, inference_pool_ready_pods as the
// custom attribute kReadyPodsAttribute). queue-scorer, kv-cache-utilization-scorer and the
// saturation checks then read pool averages unchanged (docs/multicluster.md).
inline constexpr std::string_view kPoolEngine = "epp";
inline constexpr std::string_view kReadyPodsAttribute = "ready_pods";

// Which metrics carry the Model Server Protocol values for one engine. Each field lists
// candidate specs in order of preference: the first one present in a scrape is used (so vLLM's
// `vllm:kv_cache_usage_perc` falls back to the older `vllm:gpu_cache_usage_perc`).
struct MetricMapping {
  std::string engine;
  std::vector<MetricSpec> queue;       // gauge: requests waiting
  std::vector<MetricSpec> running;     // gauge: requests running
  std::vector<MetricSpec> kv_usage;    // gauge: fraction of KV cache used
  std::vector<MetricSpec> lora;        // gauge whose labels describe LoRA adapters
  // One series per adapter in memory, labels adapter_name and level (gpu|cpu): vLLM's
  // vllm:lora_adapter_loaded, read beside `lora` when the server has it (LoraInfo::loaded).
  std::vector<MetricSpec> lora_loaded;
  std::vector<MetricSpec> cache_info;  // info gauge whose labels carry block size / count
  std::string cache_block_size_label = "block_size";
  std::string cache_num_blocks_label = "num_gpu_blocks";
  std::vector<MetricSpec> cache_block_size;  // alternatively: a gauge whose value is the size
  std::vector<MetricSpec> cache_num_blocks;  // alternatively: a gauge whose value is the count
  // llm-d's customMetrics: (attribute key, spec); the matching series with the latest timestamp
  // (the first one when none has a timestamp) becomes EndpointMetrics::custom[key].
  std::vector<std::pair<std::string, MetricSpec>> custom;

  // The built-in mapping for "vllm", "sglang", "trtllm-serve" or "triton-tensorrt-llm";
  // kNotFound (listing the known names) otherwise.
  static absl::StatusOr<MetricMapping> BuiltIn(std::string_view engine);
  static std::vector<std::string> BuiltInEngines();
};

// Overrides applied on top of a mapping: a field name ("queue", "running", "kv", "lora",
// "cache-info", "cache-block-size", "cache-num-blocks") and a spec. A spec replaces the field's
// candidate list. An unknown field is kInvalidArgument.
absl::Status ApplyMetricOverride(MetricMapping& mapping, std::string_view field,
                                 std::string_view spec);

// Sets one field of an engine config entry (GIE/llm-d core-metrics-extractor vocabulary):
// queuedRequestsSpec, runningRequestsSpec, kvUsageSpec, loraSpec, cacheInfoSpec,
// cacheBlockSizeLabelName, cacheNumBlocksLabelName, cacheBlockSizeSpec, cacheNumBlocksSpec (an
// empty spec disables the field). kNotFound for another key, kInvalidArgument for a bad spec.
absl::Status SetMappingField(MetricMapping& mapping, std::string_view key, std::string_view value);
// Adds one customMetrics entry; kInvalidArgument for an empty or repeated key or a bad spec.
absl::Status AddCustomMetric(MetricMapping& mapping, std::string_view attribute_key, std::string_view spec);

// Engine mappings loaded from YAML: either a list of entries or a map with `engineConfigs:`
// (the parameters of GIE's core-metrics-extractor). Each entry: name, the fields of
// SetMappingField, and customMetrics (a list of {attributeKey, metricSpec}). An entry named like
// a built-in engine replaces it whole. Errors name the file, line and key.
absl::StatusOr<std::vector<MetricMapping>> LoadMetricMappingsYaml(std::string_view yaml,
                                                                  std::string_view source_name);

// Auto-detection: for each candidate mapping, counts how many of its queue, running and
// KV-usage metric names (all fallbacks included) occur in the scrape. The mapping with the
// highest count wins; ties go to the earlier candidate (built-ins are ordered vllm, sglang,
// trtllm-serve, triton-tensorrt-llm). nullopt when no candidate has any of its names present.
std::optional<std::string> DetectEngine(const MetricFamilies& families,
                                        std::span<const MetricMapping> candidates);
// The same over the built-in mappings.
std::optional<std::string> DetectEngine(const MetricFamilies& families);

enum class CheckStatus { kPass, kWarn, kFail, kSkip };
std::string_view CheckStatusName(CheckStatus status);  // "pass", "warn", "fail", "skip"
// The worse of two statuses (fail > warn > pass > skip).
CheckStatus WorseStatus(CheckStatus a, CheckStatus b);

// One validation finding with a stable id such as "metrics.queue".
struct CheckResult {
  std::string id;
  CheckStatus status = CheckStatus::kSkip;
  std::string message;
};

struct MetricsExtraction {
  EndpointMetrics metrics;             // only values that passed validation
  std::vector<CheckResult> checks;     // metrics.queue, .running, .kv_cache, .lora, .cache_info
};

// Reads the Model Server Protocol values per `mapping` and validates them:
//  - required gauges (queue, running, kv) present, with TYPE gauge (a counter or histogram is a
//    failure naming both types; an untyped family is a warning);
//  - several series for one spec (one per model_name, say) are summed for counts; for KV the
//    largest is taken; the message says how many series were read;
//  - counts finite and >= 0; KV a fraction in [0,1] (a value in (1,100] "looks like a percent");
//  - LoRA: of the matching series the one with the largest value (a timestamp) wins; adapter
//    lists split on commas, trimmed, empties dropped; max_lora an integer. Absent = warning;
//  - cache info: block size and count as positive integers. Absent = warning.
// describe = false: checks that passed or warned carry no message (a scrape loop reads only the
// failures; the messages cost more than the extraction).
MetricsExtraction ExtractMetrics(const MetricFamilies& families, const MetricMapping& mapping, bool describe = true);

// ---- Reading an endpoint's metrics: the one path `eppctl check`, the endpoint pool and pyepp take

struct EndpointSpec;  // epp/runtime/endpoints.h

// A data source read from every endpoint beside its own metrics (llm-d's data layer: a
// dcgm-data-source with its dcgm-extractor, a models-data-source with its models-data-extractor).
// The scrape loop fetches Request(spec) on the endpoint's schedule, once every `interval` (rounded
// to whole scrape intervals, at least one), with the same connections as the metrics, and hands
// each answer to Apply. Only endpoints whose metrics are scraped over HTTP are read (a metrics
// file or "none" names no live server). Implementations are immutable and shared across threads.
class AttributeSource {
 public:
  virtual ~AttributeSource() = default;
  // The data source's plugin name: errors and EndpointAttributes name it.
  virtual const std::string& name() const = 0;
  // The request reading this endpoint; an error saying why it cannot be read (recorded as the
  // source's error on the endpoint).
  virtual absl::StatusOr<HttpRequest> Request(const EndpointSpec& spec) const = 0;
  virtual std::chrono::microseconds interval() const = 0;  // 0: every scrape
  // Turns one answer (HTTP 2xx) into the endpoint's attributes: replaces the values this source
  // produced before. An error leaves `attributes` as it was.
  virtual absl::Status Apply(std::string_view body, const EndpointSpec& spec, EndpointAttributes& attributes) const = 0;
};

// Applies one answer of `source` for an endpoint (a transport error, an HTTP error or a body) and
// records the outcome in attributes.errors; the scrape loop and ResolveEndpoints share it.
void ApplyAttributeSourceResponse(const AttributeSource& source, const absl::StatusOr<HttpResponse>& response,
                                  const EndpointSpec& spec, EndpointAttributes& attributes);

// Which dialect an endpoint's metrics are read in, and how they are fetched.
struct ScrapeOptions {
  std::string engine = "auto";  // "auto" or an engine name (built-in or custom)
  // (field, spec) overrides applied to the chosen mapping, e.g. {"queue", "my_queue{pool=a}"}.
  std::vector<std::pair<std::string, std::string>> metric_overrides;
  std::vector<MetricMapping> custom_mappings;  // replace built-ins of the same name
  // Endpoint labels naming an endpoint's engine when neither it nor `engine` names one: the first
  // of these labels whose value names a known mapping wins (GIE's and llm-d's label by default;
  // core-metrics-extractor's engineLabelKey replaces them).
  std::vector<std::string> engine_labels = {"inference.networking.k8s.io/engine-type", "llm-d.ai/engine-type"};
  std::string metrics_path = "/metrics";
  std::chrono::milliseconds timeout = kDefaultHttpTimeout;
  bool insecure = false;
  std::string bearer_token;          // sent as "Authorization: Bearer <token>" when non-empty
  std::vector<std::string> headers;  // extra "Name: value" headers
  bool lenient = false;              // skip malformed metric lines instead of failing
  size_t max_body_bytes = kDefaultMaxBodyBytes;
  // Ask for gzip-compressed metrics (Accept-Encoding: gzip). Off by default: on a cluster network
  // the bytes saved are few (a 3 KB vLLM page is 0.7 KB gzipped) while inflating costs the EPP
  // three times the parse and compressing costs the model server's front end each scrape; worth
  // it across slow links (a remote region's pods).
  bool accept_gzip = false;
  // The config's data-layer sources (Scheduler::ConfigureScrape adds them), read from every endpoint
  // scraped over HTTP into Endpoint::attributes.
  std::vector<std::shared_ptr<const AttributeSource>> attribute_sources;
};

// Checks and normalises options in place: timeout >= 1 ms, max_body_bytes > 0, metrics_path
// starting with '/', headers of the form "Name: value" (spaces around the colon trimmed), a
// bearer token without surrounding whitespace (a blank one is an error). kInvalidArgument naming
// the option otherwise.
absl::Status NormalizeScrapeOptions(ScrapeOptions& options);

// The mapping for `engine` (no detection): built-in or custom, then the overrides.
absl::StatusOr<MetricMapping> ResolveMapping(std::string_view engine, const ScrapeOptions& options);

// Every mapping auto-detection considers: the built-ins (custom entries of the same name replace
// them), then the other custom engines, each with the overrides applied.
absl::StatusOr<std::vector<MetricMapping>> CandidateMappings(const ScrapeOptions& options);

// The mappings reads use, resolved once (overrides applied): the auto-detection candidates and
// every engine a caller names. Cheap to share; immutable.
class MetricMappings {
 public:
  // Resolves options.engine and `engines` ("auto" entries ignored) and the candidates.
  // kNotFound for an unknown engine, kInvalidArgument for a bad override.
  static absl::StatusOr<MetricMappings> Create(const ScrapeOptions& options, std::span<const std::string> engines = {});
  // A named engine or a candidate; nullptr when neither.
  const MetricMapping* Find(std::string_view engine) const;
  std::span<const MetricMapping> candidates() const { return candidates_; }
  bool lenient() const { return lenient_; }
  // "no known engine's metrics found (looked for vllm, sglang, ...; use --engine or --metric)".
  std::string NoEngineMessage() const;

 private:
  std::vector<MetricMapping> candidates_;
  std::vector<MetricMapping> named_;
  bool lenient_ = false;
};

// What reading one metrics text found.
struct MetricsRead {
  // Why nothing was extracted: kInvalidArgument when the text is not Prometheus exposition (the
  // parser's message with the line), kNotFound when no engine's metrics are in it
  // (MetricMappings::NoEngineMessage). OK otherwise, even when some values failed validation:
  // those are failed checks in `extraction`.
  absl::Status error;
  bool parsed = false;    // the text was Prometheus exposition (error, if any, is then kNotFound)
  std::string engine;     // the mapping used; empty when none
  bool detected = false;  // the engine came from auto-detection (or from `known_engine`)
  size_t families = 0, samples = 0;
  std::vector<std::pair<int, std::string>> skipped;  // lenient: (line, reason) of lines skipped
  MetricsExtraction extraction;                      // metrics.queue ... metrics.cache_info
};

// Parses `text`, chooses the mapping (`engine` an engine name, or "auto": `known_engine` when it
// is a candidate, which keeps an endpoint's engine stable from one scrape to the next, else
// DetectEngine over the candidates), extracts and validates. `engine` must be one the mappings
// were created with. Never throws or fails: every problem is in the result.
MetricsRead ReadEndpointMetrics(std::string_view text, const MetricMappings& mappings, std::string_view engine = "auto",
                                std::string_view known_engine = {});

// The scrape loop's variant: parses into `families` (kept by the caller from one call to the
// next, so that the parse allocates nothing in steady state) and extracts without describing the
// checks that pass (ExtractMetrics' describe = false). Same result otherwise.
MetricsRead ReadEndpointMetricsInto(std::string_view text, const MetricMappings& mappings, std::string_view engine,
                                    std::string_view known_engine, MetricFamilies& families);

// The engine a read of these families would use: options.engine when it is not "auto", otherwise
// DetectEngine over CandidateMappings(); kNotFound naming the candidates when none fits.
absl::StatusOr<std::string> ResolveEngine(const MetricFamilies& families, const ScrapeOptions& options);

}  // namespace epp
