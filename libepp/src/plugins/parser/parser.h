// Private: llm-d Router's request parsers (requestHandler.parsers; epp/request.h reads the
// bodies). A parser plugin has no scheduling hook: the configuration's list of them (or llm-d's
// default list) becomes the scheduler's ParserSet (Scheduler::Parsers), which the ext_proc
// session, eppctl explain and eppctl pick resolve each request's path through.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "epp/request.h"
#include "plugins/plugin_util.h"

namespace epp::plugins {

inline constexpr std::string_view kOpenAIParserType = "openai-parser";
inline constexpr std::string_view kAnthropicParserType = "anthropic-parser";
inline constexpr std::string_view kVllmHttpParserType = "vllmhttp-parser";
inline constexpr std::string_view kSglangHttpParserType = "sglanghttp-parser";
inline constexpr std::string_view kVertexAIParserType = "vertexai-parser";
inline constexpr std::string_view kVllmGrpcParserType = "vllmgrpc-parser";
// Claims no path: the fallback; routes without reading the body.
inline constexpr std::string_view kPassthroughParserType = "passthrough-parser";

// A parser plugin of `parser`'s type; none takes parameters, as in llm-d.
PluginOr MakeRequestParser(RequestParser parser, const std::string& name, const Params& params);

// The registry's factory for each parser type.
template <RequestParser P>
PluginOr CreateRequestParser(const std::string& name, const Params& params, const PluginContext&) {
  return MakeRequestParser(P, name, params);
}

// The parser a plugin is, or nullopt when it is not a parser plugin.
std::optional<RequestParser> ParserOf(const Plugin& plugin);

}  // namespace epp::plugins
