// RegisterBuiltinPlugins(): the one list of in-tree plugin types.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "epp/registry.h"
#include "plugins/plugins.h"

namespace epp {

void RegisterBuiltinPlugins(PluginRegistry& registry) {
  using namespace plugins;  // NOLINT: the factory list reads better unqualified
  const std::pair<std::string_view, PluginFactory> builtins[] = {
      {kQueueScorerType, CreateQueueScorer},
      {kRunningRequestsScorerType, CreateRunningRequestsScorer},
      {kKvCacheScorerType, CreateKvCacheScorer},
      {kLoraAffinityScorerType, CreateLoraAffinityScorer},
      {kTokenLoadScorerType, CreateTokenLoadScorer},
      {kPrefixCacheScorerType, CreatePrefixCacheScorer},
      {kCacheAwareScorerType, CreateCacheAwareScorer},
      {kNoHitLruScorerType, CreateNoHitLruScorer},
      {kLoadAwareScorerType, CreateLoadAwareScorer},
      {kActiveRequestScorerType, CreateActiveRequestScorer},
      {kEstimatedTtftScorerType, CreateEstimatedTtftScorer},
      {kVllmLoadAwareScorerType, CreateVllmLoadAwareScorer},
      {kDynamoKvCostScorerType, CreateDynamoKvCostScorer},
      {kProbabilisticAdmitterType, CreateProbabilisticAdmitter},
      {kLabelSelectorFilterType, CreateLabelSelectorFilter},
      {kByLabelSelectorFilterType, CreateLabelSelectorFilter},
      {kByLabelFilterType, CreateByLabelFilter},
      {kDecodeFilterType, CreateDecodeFilter},
      {kPrefillFilterType, CreatePrefillFilter},
      {kEncodeFilterType, CreateEncodeFilter},
      {kPrefixAffinityFilterType, CreatePrefixAffinityFilter},
      {kMaxScorePickerType, CreateMaxScorePicker},
      {kRandomPickerType, CreateRandomPicker},
      {kWeightedRandomPickerType, CreateWeightedRandomPicker},
      {kRoundRobinPickerType, CreateRoundRobinPicker},
      {kOrcaWrrPickerType, CreateOrcaWrrPicker},
      {kSoftmaxPickerType, CreateSoftmaxPicker},
      {kSingleProfileHandlerType, CreateSingleProfileHandler},
      {kDisaggProfileHandlerType, CreateDisaggProfileHandler},
      {kPdProfileHandlerType, CreatePdProfileHandler},
      {kSessionAffinityScorerType, CreateSessionAffinityScorer},
      {kSessionAffinityFilterType, CreateSessionAffinityFilter},
      {kHeaderProfileHandlerType, CreateHeaderProfileHandler},
      {kDataParallelProfileHandlerType, CreateDataParallelProfileHandler},
      {kDisaggHeadersHandlerType, CreateDisaggHeadersHandler},
      {kPrefillHeaderHandlerType, CreateDisaggHeadersHandler},
      {kPrefixBasedPdDeciderType, CreatePrefixBasedPdDecider},
      {kAlwaysDisaggPdDeciderType, CreateAlwaysDisaggPdDecider},
      {kAlwaysDisaggMultimodalDeciderType, CreateAlwaysDisaggMultimodalDecider},
      {kUtilizationDetectorType, CreateUtilizationDetector},
      {kApproxPrefixProducerType, CreateApproxPrefixProducer},
      {kPrecisePrefixProducerType, CreatePrecisePrefixProducer},
      {kPrecisePrefixScorerType, CreatePrecisePrefixScorer},
      {kTokenProducerType, CreateTokenProducer},
      {kTokenizerType, CreateTokenProducer},
      {kEndpointNotificationSourceType, CreateEndpointNotificationSource},
      {kMetricsDataSourceType, CreateMetricsDataSource},
      {kCoreMetricsExtractorType, CreateCoreMetricsExtractor},
      {kOpenAIParserType, CreateOpenAIParser},
      {kPassthroughParserType, CreatePassthroughParser},
      {kTopologyExtractorType, CreateTopologyExtractor},
      {kEndpointAttributeFilterType, CreateEndpointAttributeFilter},
      {kEndpointAttributeScorerType, CreateEndpointAttributeScorer},
      {kTopologyAffinityFilterType, CreateTopologyAffinityFilter},
      {kTopologyAffinityScorerType, CreateTopologyAffinityScorer},
      {kInflightLoadProducerType, CreateInflightLoadProducer},
      {kRequestAttributeReporterType, CreateRequestAttributeReporter},
      {kCapacityFilterType, CreateCapacityFilter},
      {kCapacityScorerType, CreateCapacityScorer},
      {kRegionSpilloverFilterType, CreateRegionSpilloverFilter},
      {kRegionRttScorerType, CreateRegionRttScorer},
      {kZonePreferenceScorerType, CreateZonePreferenceScorer},
  };
  for (const auto& [type, factory] : builtins) {
    // Registering into a fresh registry cannot collide; a user registry that already has the
    // type keeps its own factory.
    (void)registry.Register(std::string(type), factory);
  }
}

PluginRegistry BuiltinRegistry() {
  PluginRegistry r;
  RegisterBuiltinPlugins(r);
  return r;
}

absl::Status PluginRegistry::Register(std::string type, PluginFactory factory) {
  if (type.empty()) return absl::InvalidArgumentError("plugin type must not be empty");
  if (!factory) return absl::InvalidArgumentError(absl::StrCat("plugin type '", type, "': no factory"));
  if (factories_.count(type)) return absl::AlreadyExistsError(absl::StrCat("plugin type '", type, "' is already registered"));
  factories_.emplace(std::move(type), std::move(factory));
  return absl::OkStatus();
}

bool PluginRegistry::Has(std::string_view type) const { return factories_.find(type) != factories_.end(); }

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
  absl::StatusOr<std::unique_ptr<Plugin>> p = it->second(name, params, context);
  if (!p.ok())
    return absl::Status(p.status().code(), absl::StrCat("failed to create plugin '", name, "' (type: ", type,
                                                        "): ", p.status().message()));
  if (!*p) return absl::InternalError(absl::StrCat("failed to create plugin '", name, "' (type: ", type, "): factory returned null"));
  return p;
}

}  // namespace epp
