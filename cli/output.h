// Shared output helpers for eppctl commands: exit codes, error printing, colour detection.
#pragma once

#include <string>

#include "epp/status.h"

namespace eppctl {

// Exit codes, the same for every command (docs/cli.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the job ran and found a failure
inline constexpr int kExitUsage = 2;    // usage or configuration error

// Prints "error: <message>" on stderr and returns the exit code for `status`.
int PrintError(const absl::Status& status);
// The exit code PrintError returns for `status`, without printing it.
int ExitCodeFor(const absl::Status& status);

// True when stdout is a terminal and NO_COLOR is unset.
bool UseColor();

// Reads a whole file; kNotFound naming the path when it cannot be read.
absl::StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace eppctl
