// `eppctl sim`: run one or more simulated model servers until SIGINT/SIGTERM.
#pragma once

#include <CLI/CLI.hpp>

namespace eppctl {

void SetupSimCommand(CLI::App& app, int& exit_code);

}  // namespace eppctl
