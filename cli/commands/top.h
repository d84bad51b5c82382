// `eppctl top --target HOST:PORT`: a live terminal view of a running EPP (epp/tools/top.h).
#pragma once

#include <CLI/CLI.hpp>

namespace eppctl {

void SetupTopCommand(CLI::App& app, int& exit_code);

}  // namespace eppctl
