// Private: the profile handlers (single_profile_handler.cc, disagg_profile_handler.cc,
// header_handlers.cc) and the
// disaggregation deciders they consult (deciders.cc).
#pragma once

#include <string>
#include <string_view>

#include "epp/scheduling.h"
#include "plugins/plugin_util.h"

namespace epp::plugins {

inline constexpr std::string_view kSingleProfileHandlerType = "single-profile-handler";
inline constexpr std::string_view kDisaggProfileHandlerType = "disagg-profile-handler";
inline constexpr std::string_view kPdProfileHandlerType = "pd-profile-handler";  // deprecated in llm-d
inline constexpr std::string_view kHeaderProfileHandlerType = "header-profile-handler";
inline constexpr std::string_view kDataParallelProfileHandlerType = "data-parallel-profile-handler";  // deprecated
inline constexpr std::string_view kDisaggHeadersHandlerType = "disagg-headers-handler";              // deprecated
inline constexpr std::string_view kPrefillHeaderHandlerType = "prefill-header-handler";              // its alias
inline constexpr std::string_view kPrefixBasedPdDeciderType = "prefix-based-pd-decider";
inline constexpr std::string_view kAlwaysDisaggPdDeciderType = "always-disagg-pd-decider";
inline constexpr std::string_view kAlwaysDisaggMultimodalDeciderType = "always-disagg-multimodal-decider";

// llm-d's request headers for the decode pod's sidecar: the prefill server ("ip:port") and the
// encode servers ("ip:port,ip:port").
inline constexpr std::string_view kPrefillerHostPortHeader = "x-prefiller-host-port";
inline constexpr std::string_view kEncoderHostsPortsHeader = "x-encoder-hosts-ports";
// llm-d's data-parallel sidecar: the rank ("ip:port") it forwards to.
inline constexpr std::string_view kDataParallelHostPortHeader = "x-data-parallel-host-port";

// Whether a disaggregated stage (prefill, encode) runs for the request. `decode` is the endpoint
// the decode profile chose, or nullptr when the stage runs before decode. `why` gets one line for
// explain ("24 uncached tokens >= nonCachedTokens 16").
class Decider {
 public:
  virtual ~Decider() = default;
  virtual bool Disaggregate(const SchedulingContext& ctx, const Endpoint* decode, std::string& why) const = 0;
};

inline const Decider* AsDecider(const Plugin* p) { return dynamic_cast<const Decider*>(p); }

PluginOr CreateSingleProfileHandler(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateDisaggProfileHandler(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreatePdProfileHandler(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateHeaderProfileHandler(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateDataParallelProfileHandler(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateDisaggHeadersHandler(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreatePrefixBasedPdDecider(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateAlwaysDisaggPdDecider(const std::string& name, const Params& params, const PluginContext& ctx);
PluginOr CreateAlwaysDisaggMultimodalDecider(const std::string& name, const Params& params, const PluginContext& ctx);

// Declared parameters (ParamTable::Schema()); the others use NoParamsSchema().
PluginSchema DisaggProfileHandlerSchema();
PluginSchema PdProfileHandlerSchema();
PluginSchema HeaderProfileHandlerSchema();
PluginSchema DataParallelProfileHandlerSchema();
PluginSchema DisaggHeadersHandlerSchema();
PluginSchema PrefixBasedPdDeciderSchema();

}  // namespace epp::plugins
