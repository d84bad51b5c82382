#include "commands/config.h"

#include <iostream>
#include <memory>

#include "epp/config.h"
#include "epp/registry.h"
#include "epp/scheduler.h"
#include "output.h"

namespace eppctl {
namespace {

// Loads and builds; the scheduler proves every plugin was created and every rule holds.
absl::StatusOr<std::unique_ptr<epp::Scheduler>> Build(const std::string& file) {
  epp::EppConfig config = epp::DefaultConfig();
  if (!file.empty()) {
    EPP_ASSIGN_OR_RETURN(config, epp::LoadConfigFile(file));
  }
  return epp::BuildScheduler(config, epp::BuiltinRegistry());
}

}  // namespace

void SetupConfigCommand(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand("config", "Validate EndpointPickerConfig files and show them after defaults");
  cmd->require_subcommand(1);

  auto file = std::make_shared<std::string>();
  CLI::App* validate = cmd->add_subcommand("validate", "Load FILE as the EPP would; exit 0 when valid, 2 otherwise");
  validate->add_option("file", *file, "EndpointPickerConfig YAML")->required();
  validate->callback([file, &exit_code] {
    auto s = Build(*file);
    if (!s.ok()) {
      exit_code = PrintError(s.status());
      return;
    }
    for (const std::string& w : (*s)->warnings()) std::cerr << "warning: " << w << "\n";
    std::cout << *file << ": valid (profiles: ";
    const auto names = (*s)->ProfileNames();
    for (size_t i = 0; i < names.size(); ++i) std::cout << (i ? ", " : "") << names[i];
    std::cout << ")\n";
    exit_code = kExitOk;
  });

  auto efile = std::make_shared<std::string>();
  CLI::App* effective = cmd->add_subcommand("effective", "Print the configuration after defaults (GIE's default when no FILE)");
  effective->add_option("file", *efile, "EndpointPickerConfig YAML");
  effective->callback([efile, &exit_code] {
    auto s = Build(*efile);
    if (!s.ok()) {
      exit_code = PrintError(s.status());
      return;
    }
    for (const std::string& w : (*s)->warnings()) std::cerr << "warning: " << w << "\n";
    std::cout << (*s)->EffectiveConfigYaml();
    exit_code = kExitOk;
  });

  CLI::App* plugins = cmd->add_subcommand("plugins", "List the plugin types epp implements");
  plugins->callback([&exit_code] {
    for (const std::string& t : epp::BuiltinRegistry().Types()) std::cout << t << "\n";
    exit_code = kExitOk;
  });
}

}  // namespace eppctl
