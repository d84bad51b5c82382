// `eppctl conformance`: the black-box ext_proc suite for any Endpoint Picker (epp/tools/conformance.h).
#pragma once

#include <CLI/CLI.hpp>

namespace eppctl {

void SetupConformanceCommand(CLI::App& app, int& exit_code);

}  // namespace eppctl
