// Params as block-style YAML: the effective configuration eppctl config prints, and the identity
// of a plugin's parameters when a config reload compares instances.
#pragma once

#include <string>

#include "epp/params.h"

namespace epp {

// Scalars are quoted where plain style would change their meaning (a string "true", a key with
// a colon); numbers and booleans written unquoted in the source stay unquoted.
std::string ParamsYaml(const Params& params);

}  // namespace epp
