#include "commands/lint.h"

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "epp/tools/lint.h"
#include "output.h"

namespace eppctl {

void SetupLintCommand(CLI::App& app, int& exit_code) {
  struct Options {
    std::vector<std::string> paths;
    std::string output = "text";
    bool warnings_as_errors = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "lint", "Check InferencePool deployment manifests (YAML files or directories, '-' = stdin) for wiring mistakes");
  cmd->add_option("paths", o->paths, "Files or directories (kustomize build / helm template output included)")->required();
  cmd->add_option("-o,--output", o->output, "text, json or sarif")
      ->check(CLI::IsMember({"text", "json", "sarif"}))
      ->capture_default_str();
  cmd->add_flag("--strict", o->warnings_as_errors, "Exit 1 on warnings too");
  cmd->callback([o, &exit_code] {
    absl::StatusOr<epp::LintReport> r = epp::LintPaths(o->paths);
    if (!r.ok()) {
      exit_code = PrintError(r.status());
      return;
    }
    if (o->output == "json") std::cout << epp::FormatLintJson(*r);
    else if (o->output == "sarif") std::cout << epp::FormatLintSarif(*r);
    else std::cout << epp::FormatLintText(*r);
    const bool fail = r->count(epp::LintSeverity::kError) > 0 || (o->warnings_as_errors && r->count(epp::LintSeverity::kWarning) > 0);
    exit_code = fail ? 1 : kExitOk;
  });
}

}  // namespace eppctl
