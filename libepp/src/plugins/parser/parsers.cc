// The request parser plugin types (parser.h). They hold no state: which one reads a request is
// decided by path through the ParserSet the scheduler builds from them (epp/request.h), and the
// reading itself is libepp's request library, so that the same code serves ext_proc, explain,
// pick and pyepp.
#include "plugins/parser/parser.h"

namespace epp::plugins {

PluginOr MakeRequestParser(RequestParser parser, const std::string& name, const Params& params) {
  EPP_RETURN_IF_ERROR(ReadNoParams(params));
  return std::make_unique<ParamsOnlyPlugin>(TN(RequestParserType(parser), name), Params::Map());
}

std::optional<RequestParser> ParserOf(const Plugin& plugin) { return RequestParserForType(plugin.type()); }

}  // namespace epp::plugins
