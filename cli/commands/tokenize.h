// `eppctl tokenize`: a text or a request body through an in-process tokenizer (tokenizer.json).
#pragma once

#include <CLI/CLI.hpp>

namespace eppctl {

void SetupTokenizeCommand(CLI::App& app, int& exit_code);

}  // namespace eppctl
