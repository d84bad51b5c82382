// `eppctl config validate FILE`, `eppctl config effective [FILE]`, `eppctl config plugins`.
#pragma once

#include <CLI/CLI.hpp>

namespace eppctl {

void SetupConfigCommand(CLI::App& app, int& exit_code);

}  // namespace eppctl
