// `eppctl explain --request FILE`: why a request picks the endpoint it picks, score by score.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "commands/pool.h"

namespace eppctl {

struct ExplainCommandOptions {
  PoolOptions pool;
  std::string request;                 // capture envelope or bare body; "-" = stdin
  std::string ext_proc;                // an ext_proc capture (serve --capture) to replay
  std::string path;                    // overrides the request's path
  std::string history;                 // JSONL of requests routed first
  std::vector<std::string> subset;     // subset hint entries (comma lists allowed)
  bool subset_given = false;
  int priority = 0;
  std::string output = "text";
};

void SetupExplainCommand(CLI::App& app, int& exit_code);
int RunExplain(const ExplainCommandOptions& options);

}  // namespace eppctl
