// eppctl: the command-line front of libepp. Each subcommand lives in commands/<name>.cc.
#include <CLI/CLI.hpp>

#include "commands/check.h"
#include "commands/config.h"
#include "commands/explain.h"
#include "commands/pick.h"
#include "commands/replay.h"
#include "commands/serve.h"
#include "commands/sim.h"
#include "commands/tokenize.h"
#include "commands/conformance.h"
#include "commands/lint.h"
#include "commands/top.h"
#include "epp/version.h"
#include "output.h"

int main(int argc, char** argv) {
  CLI::App app{"eppctl: Endpoint Picker toolkit for LLM inference gateways"};
  app.set_version_flag("--version", EPP_VERSION_STRING);
  app.require_subcommand(1);
  int exit_code = 0;
  eppctl::SetupCheckCommand(app, exit_code);
  eppctl::SetupSimCommand(app, exit_code);
  eppctl::SetupExplainCommand(app, exit_code);
  eppctl::SetupPickCommand(app, exit_code);
  eppctl::SetupReplayCommand(app, exit_code);
  eppctl::SetupConfigCommand(app, exit_code);
  eppctl::SetupServeCommand(app, exit_code);
  eppctl::SetupTokenizeCommand(app, exit_code);
  eppctl::SetupLintCommand(app, exit_code);
  eppctl::SetupConformanceCommand(app, exit_code);
  eppctl::SetupTopCommand(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return eppctl::kExitUsage;
  }
  return exit_code;
}
