// RegisterBuiltinPlugins(): the one list of in-tree plugin types.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "epp/registry.h"
#include "plugins/plugins.h"

namespace epp {

void RegisterBuiltinPlugins(PluginRegistry& registry) {
  using namespace plugins;  // NOLINT: the factory list reads better unqualified
  // type, factory, and the function giving its declared parameters (ParamTable::Schema());
  // every built-in declares them (registry_test.cc checks).
  struct Builtin {
    std::string_view type;
    PluginFactory factory;
    PluginSchema (*schema)();
  };
  const Builtin builtins[] = {
      {kQueueScorerType, CreateQueueScorer, NoParamsSchema},
      {kRunningRequestsScorerType, CreateRunningRequestsScorer, NoParamsSchema},
      {kKvCacheScorerType, CreateKvCacheScorer, NoParamsSchema},
      {kLoraAffinityScorerType, CreateLoraAffinityScorer, NoParamsSchema},
      {kTokenLoadScorerType, CreateTokenLoadScorer, TokenLoadScorerSchema},
      {kPrefixCacheScorerType, CreatePrefixCacheScorer, PrefixCacheScorerSchema},
      {kCacheAwareScorerType, CreateCacheAwareScorer, CacheAwareScorerSchema},
      {kNoHitLruScorerType, CreateNoHitLruScorer, NoHitLruScorerSchema},
      {kLoadAwareScorerType, CreateLoadAwareScorer, LoadAwareScorerSchema},
      {kActiveRequestScorerType, CreateActiveRequestScorer, ActiveRequestScorerSchema},
      {kEstimatedTtftScorerType, CreateEstimatedTtftScorer, EstimatedTtftScorerSchema},
      {kVllmLoadAwareScorerType, CreateVllmLoadAwareScorer, VllmLoadAwareScorerSchema},
      {kDynamoKvCostScorerType, CreateDynamoKvCostScorer, DynamoKvCostScorerSchema},
      {kProbabilisticAdmitterType, CreateProbabilisticAdmitter, ProbabilisticAdmitterSchema},
      {kLabelSelectorFilterType, CreateLabelSelectorFilter, LabelSelectorFilterSchema},
      {kByLabelSelectorFilterType, CreateLabelSelectorFilter, LabelSelectorFilterSchema},
      {kByLabelFilterType, CreateByLabelFilter, ByLabelFilterSchema},
      {kDecodeFilterType, CreateDecodeFilter, NoParamsSchema},
      {kPrefillFilterType, CreatePrefillFilter, NoParamsSchema},
      {kEncodeFilterType, CreateEncodeFilter, NoParamsSchema},
      {kPrefixAffinityFilterType, CreatePrefixAffinityFilter, PrefixAffinityFilterSchema},
      {kMaxScorePickerType, CreateMaxScorePicker, PickerSchema},
      {kRandomPickerType, CreateRandomPicker, PickerSchema},
      {kWeightedRandomPickerType, CreateWeightedRandomPicker, PickerSchema},
      {kRoundRobinPickerType, CreateRoundRobinPicker, PickerSchema},
      {kOrcaWrrPickerType, CreateOrcaWrrPicker, OrcaWrrPickerSchema},
      {kSoftmaxPickerType, CreateSoftmaxPicker, SoftmaxPickerSchema},
      {kSingleProfileHandlerType, CreateSingleProfileHandler, NoParamsSchema},
      {kDisaggProfileHandlerType, CreateDisaggProfileHandler, DisaggProfileHandlerSchema},
      {kPdProfileHandlerType, CreatePdProfileHandler, PdProfileHandlerSchema},
      {kSessionAffinityScorerType, CreateSessionAffinityScorer, SessionAffinityScorerSchema},
      {kSessionAffinityFilterType, CreateSessionAffinityFilter, SessionAffinityFilterSchema},
      {kHeaderProfileHandlerType, CreateHeaderProfileHandler, HeaderProfileHandlerSchema},
      {kDataParallelProfileHandlerType, CreateDataParallelProfileHandler, DataParallelProfileHandlerSchema},
      {kDisaggHeadersHandlerType, CreateDisaggHeadersHandler, DisaggHeadersHandlerSchema},
      {kPrefillHeaderHandlerType, CreateDisaggHeadersHandler, DisaggHeadersHandlerSchema},
      {kPrefixBasedPdDeciderType, CreatePrefixBasedPdDecider, PrefixBasedPdDeciderSchema},
      {kAlwaysDisaggPdDeciderType, CreateAlwaysDisaggPdDecider, NoParamsSchema},
      {kAlwaysDisaggMultimodalDeciderType, CreateAlwaysDisaggMultimodalDecider, NoParamsSchema},
      {kUtilizationDetectorType, CreateUtilizationDetector, UtilizationDetectorSchema},
      {kApproxPrefixProducerType, CreateApproxPrefixProducer, ApproxPrefixProducerSchema},
      {kPrecisePrefixProducerType, CreatePrecisePrefixProducer, PrecisePrefixProducerSchema},
      {kMmEmbeddingsCacheProducerType, CreateMmEmbeddingsCacheProducer, MmEmbeddingsCacheProducerSchema},
      {kMmEmbeddingsCacheScorerType, CreateMmEmbeddingsCacheScorer, MmEmbeddingsCacheScorerSchema},
      {kBurstPrefixProducerType, CreateBurstPrefixProducer, BurstPrefixProducerSchema},
      {kP2pSourceProducerType, CreateP2pSourceProducer, P2pSourceProducerSchema},
      {kDisaggregatedSetRolloutScreenerType, CreateDisaggregatedSetRolloutScreener,
       DisaggregatedSetRolloutScreenerSchema},
      {kPrecisePrefixScorerType, CreatePrecisePrefixScorer, PrecisePrefixProducerSchema},
      {kTokenProducerType, CreateTokenProducer, TokenProducerSchema},
      {kTokenizerType, CreateTokenProducer, TokenProducerSchema},
      {kEndpointNotificationSourceType, CreateEndpointNotificationSource, NoParamsSchema},
      {kMetricsDataSourceType, CreateMetricsDataSource, MetricsDataSourceSchema},
      {kCoreMetricsExtractorType, CreateCoreMetricsExtractor, CoreMetricsExtractorSchema},
      {kOpenAIParserType, CreateRequestParser<RequestParser::kOpenAI>, NoParamsSchema},
      {kAnthropicParserType, CreateRequestParser<RequestParser::kAnthropic>, NoParamsSchema},
      {kVllmHttpParserType, CreateRequestParser<RequestParser::kVllmHttp>, NoParamsSchema},
      {kSglangHttpParserType, CreateRequestParser<RequestParser::kSglangHttp>, NoParamsSchema},
      {kVertexAIParserType, CreateRequestParser<RequestParser::kVertexAI>, NoParamsSchema},
      {kVllmGrpcParserType, CreateRequestParser<RequestParser::kVllmGrpc>, NoParamsSchema},
      {kPassthroughParserType, CreateRequestParser<RequestParser::kPassthrough>, NoParamsSchema},
      {kTopologyExtractorType, CreateTopologyExtractor, TopologyExtractorSchema},
      {kDcgmDataSourceType, CreateDcgmDataSource, DcgmDataSourceSchema},
      {kDcgmExtractorType, CreateDcgmExtractor, NoParamsSchema},
      {kModelsDataSourceType, CreateModelsDataSource, ModelsDataSourceSchema},
      {kModelsDataExtractorType, CreateModelsDataExtractor, NoParamsSchema},
      {kMulticlusterMetricsDataSourceType, CreateMulticlusterMetricsDataSource, MulticlusterMetricsDataSourceSchema},
      {kMulticlusterMetricsExtractorType, CreateMulticlusterMetricsExtractor, MulticlusterMetricsExtractorSchema},
      {kFileDiscoveryType, CreateFileDiscovery, FileDiscoverySchema},
      {kMulticlusterFileDiscoveryType, CreateMulticlusterFileDiscovery, FileDiscoverySchema},
      {kK8sNotificationSourceType, CreateK8sNotificationSource, K8sNotificationSourceSchema},
      {kEndpointAttributeFilterType, CreateEndpointAttributeFilter, EndpointAttributeFilterSchema},
      {kEndpointAttributeScorerType, CreateEndpointAttributeScorer, EndpointAttributeScorerSchema},
      {kTopologyAffinityFilterType, CreateTopologyAffinityFilter, TopologyAffinityFilterSchema},
      {kTopologyAffinityScorerType, CreateTopologyAffinityScorer, TopologyAffinityScorerSchema},
      {kInflightLoadProducerType, CreateInflightLoadProducer, InflightLoadProducerSchema},
      {kRequestAttributeReporterType, CreateRequestAttributeReporter, RequestAttributeReporterSchema},
      {kCapacityFilterType, CreateCapacityFilter, CapacityPluginSchema},
      {kCapacityScorerType, CreateCapacityScorer, CapacityPluginSchema},
      {kRegionSpilloverFilterType, CreateRegionSpilloverFilter, RegionSpilloverFilterSchema},
      {kRegionRttScorerType, CreateRegionRttScorer, RegionRttScorerSchema},
      {kZonePreferenceScorerType, CreateZonePreferenceScorer, ZonePreferenceScorerSchema},
      {kContextLengthAwareType, CreateContextLengthAware, ContextLengthAwareSchema},
      {kHeaderLabelAffinityScorerType, CreateHeaderLabelAffinityScorer, HeaderLabelAffinityScorerSchema},
      {kUtilizationFilterType, CreateUtilizationFilter, UtilizationFilterSchema},
      {kSessionIdProducerType, CreateSessionIdProducer, SessionIdProducerSchema},
      {kAgentIdentityType, CreateAgentIdentity, AgentIdentitySchema},
      {kMultiClusterQueueScorerType, CreateMultiClusterQueueScorer, NoParamsSchema},
      {kMultiClusterKvCacheScorerType, CreateMultiClusterKvCacheScorer, NoParamsSchema},
      {kMultiClusterPrefixCacheScorerType, CreateMultiClusterPrefixCacheScorer, PrefixCacheScorerSchema},
      {kMultiClusterApproxPrefixProducerType, CreateMultiClusterApproxPrefixProducer, ApproxPrefixProducerSchema},
      {kMultiClusterSessionAffinityFilterType, CreateMultiClusterSessionAffinityFilter, SessionAffinityFilterSchema},
      {kConcurrencyDetectorType, CreateConcurrencyDetector, ConcurrencyDetectorSchema},
      {kGlobalStrictFairnessType, CreateGlobalStrictFairness, NoParamsSchema},
      {kRoundRobinFairnessType, CreateRoundRobinFairness, NoParamsSchema},
      {kProgramAwareFairnessType, CreateProgramAwareFairness, ProgramAwareFairnessSchema},
      {kFcfsOrderingType, CreateFcfsOrdering, NoParamsSchema},
      {kEdfOrderingType, CreateEdfOrdering, NoParamsSchema},
      {kSloDeadlineOrderingType, CreateSloDeadlineOrdering, NoParamsSchema},
      {kStaticUsageLimitType, CreateStaticUsageLimit, StaticUsageLimitSchema},
      {kPriorityHoldbackType, CreatePriorityHoldback, PriorityHoldbackSchema},
      {kSoftReflectiveCeilingType, CreateSoftReflectiveCeiling, NoParamsSchema},
      {kSheddableEvictionFilterType, CreateSheddableEvictionFilter, NoParamsSchema},
      {kPriorityThenTimeEvictionType, CreatePriorityThenTimeEviction, NoParamsSchema},
      {kPredictedLatencyProducerType, CreatePredictedLatencyProducer, PredictedLatencyProducerSchema},
      {kLatencyScorerType, CreateLatencyScorer, LatencyScorerSchema},
      {kSloHeadroomTierFilterType, CreateSloHeadroomTierFilter, SloHeadroomTierFilterSchema},
      {kLatencySloAdmitterType, CreateLatencySloAdmitter, LatencySloAdmitterSchema},
  };
  for (const Builtin& b : builtins) {
    // Registering into a fresh registry cannot collide; a user registry that already has the
    // type keeps its own factory.
    (void)registry.Register(std::string(b.type), b.factory, b.schema());
  }
}

PluginRegistry BuiltinRegistry() {
  PluginRegistry r;
  RegisterBuiltinPlugins(r);
  return r;
}

absl::Status PluginRegistry::Register(std::string type, PluginFactory factory, PluginSchema schema) {
  if (type.empty()) return absl::InvalidArgumentError("plugin type must not be empty");
  if (!factory) return absl::InvalidArgumentError(absl::StrCat("plugin type '", type, "': no factory"));
  if (factories_.count(type)) return absl::AlreadyExistsError(absl::StrCat("plugin type '", type, "' is already registered"));
  factories_.emplace(std::move(type), Entry{std::move(factory), std::move(schema)});
  return absl::OkStatus();
}

bool PluginRegistry::Has(std::string_view type) const { return factories_.find(type) != factories_.end(); }

const PluginSchema* PluginRegistry::Schema(std::string_view type) const {
  auto it = factories_.find(type);
  return it == factories_.end() ? nullptr : &it->second.schema;
}

std::vector<std::string> PluginRegistry::Types() const {
  std::vector<std::string> out;
  for (const auto& [t, f] : factories_) out.push_back(t);
  return out;
}

absl::StatusOr<std::unique_ptr<Plugin>> PluginRegistry::Create(const std::string& type, const std::string& name,
                                                               const Params& params, const PluginContext& context) const {
  auto it = factories_.find(type);
  if (it == factories_.end())
    return absl::NotFoundError(absl::StrCat("unknown plugin type '", type, "' (known: ", absl::StrJoin(Types(), ", "), ")"));
  // Types llm-d registers as deprecated (RegisterDeprecated: still loaded, a warning naming the
  // replacement) whose factories here do not already say so themselves.
  struct Deprecated {
    const char *type, *since, *use;
  };
  static constexpr Deprecated kDeprecated[] = {
      {"by-label-selector", "v0.9.0", "label-selector-filter"},
      {"by-label", "v0.9.0", "label-selector-filter"},
      {"tokenizer", "v0.9.0", "token-producer"},
  };
  if (context.warnings)
    for (const Deprecated& d : kDeprecated)
      if (type == d.type)
        context.warnings->push_back(absl::StrCat("plugin '", name, "': type '", type, "' is deprecated since llm-d ",
                                                 d.since, " (removed in v0.11.0); use '", d.use, "'"));
  absl::StatusOr<std::unique_ptr<Plugin>> p = it->second.factory(name, params, context);
  if (!p.ok())
    return absl::Status(p.status().code(), absl::StrCat("failed to create plugin '", name, "' (type: ", type,
                                                        "): ", p.status().message()));
  if (!*p) return absl::InternalError(absl::StrCat("failed to create plugin '", name, "' (type: ", type, "): factory returned null"));
  return p;
}

namespace {

// A table cell: pipes escaped (GitHub's tables split on them, even inside code spans), line
// breaks flattened.
std::string Cell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return out;
}

std::string Code(std::string_view text) { return text.empty() ? "" : absl::StrCat("`", Cell(text), "`"); }

}  // namespace

std::string PluginParametersMarkdown(const PluginRegistry& registry) {
  std::string out;
  for (const std::string& type : registry.Types()) {
    const PluginSchema& schema = *registry.Schema(type);
    absl::StrAppend(&out, "### `", type, "`\n\n");
    if (!schema.declared) {
      out += "Parameters not declared.\n\n";
      continue;
    }
    if (schema.params.empty() && schema.other_keys.empty()) {
      out += "No parameters.\n\n";
      continue;
    }
    if (!schema.params.empty()) {
      out += "| Parameter | Type | Default | Allowed | Description |\n| --- | --- | --- | --- | --- |\n";
      for (const ParamInfo& p : schema.params) {
        std::string allowed;
        if (!p.choices.empty()) {
          std::vector<std::string> codes;
          for (const std::string& c : p.choices) codes.push_back(Code(c));
          allowed = absl::StrJoin(codes, ", ");
        } else if (p.range.bounded()) {
          allowed = Cell(p.RangeText());
        }
        std::string doc = p.deprecated ? absl::StrCat("Deprecated. ", p.doc) : p.doc;
        if (!p.aliases.empty()) {
          std::vector<std::string> codes;
          for (const std::string& a : p.aliases) codes.push_back(Code(a));
          if (!doc.empty() && doc.back() != '.') doc += '.';
          absl::StrAppend(&doc, doc.empty() ? "" : " ", "Older spelling: ", absl::StrJoin(codes, ", "), ".");
        }
        absl::StrAppend(&out, "| ", Code(p.name), " | ", std::string(ParamTypeName(p.type)), " | ", Code(p.default_text), " | ", allowed,
                        " | ", Cell(doc), " |\n");
      }
      out += "\n";
    }
    if (!schema.other_keys.empty()) absl::StrAppend(&out, "Other keys: ", Cell(schema.other_keys), "\n\n");
  }
  return out;
}

}  // namespace epp
