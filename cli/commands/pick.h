// `eppctl pick --trace TRACE.jsonl`: dry-run a stream of requests through the scheduler.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "commands/pool.h"

namespace eppctl {

struct PickCommandOptions {
  PoolOptions pool;
  std::string trace;        // JSONL; "-" = stdin
  std::string path;         // overrides every line's path when set
  int concurrency = 1;      // requests kept in flight (released N-1 picks later)
  std::string output = "text";  // text (summary) or jsonl
};

void SetupPickCommand(CLI::App& app, int& exit_code);
int RunPick(const PickCommandOptions& options);

}  // namespace eppctl
