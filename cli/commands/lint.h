// `eppctl lint FILE|DIR...`: InferencePool deployment manifests checked for wiring mistakes (epp/tools/lint.h).
#pragma once

#include <CLI/CLI.hpp>

namespace eppctl {

void SetupLintCommand(CLI::App& app, int& exit_code);

}  // namespace eppctl
