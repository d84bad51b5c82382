// `eppctl check TARGET...`: validate model servers (URLs) or captured metrics files.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace eppctl {

struct CheckCommandOptions {
  std::vector<std::string> targets;
  std::string engine = "auto";
  std::vector<std::string> metrics;  // FIELD=SPEC
  std::string metrics_config;        // YAML engine mappings
  std::string metrics_path = "/metrics";
  double timeout_s = 2.0;
  bool insecure = false;
  std::string bearer_token_file;
  std::vector<std::string> headers;  // K:V
  std::string model;
  bool lenient = false;
  bool no_api = false;
  std::string output = "text";
};

void SetupCheckCommand(CLI::App& app, int& exit_code);
int RunCheck(const CheckCommandOptions& options);

}  // namespace eppctl
