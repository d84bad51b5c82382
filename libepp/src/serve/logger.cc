// StderrLogger, NullLogger and log level names (epp/runtime/logger.h).
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

#include "epp/runtime/logger.h"

namespace epp {

bool ParseLogLevel(std::string_view name, LogLevel& level) {
  if (name == "error")
    level = LogLevel::kError;
  else if (name == "warn" || name == "warning")
    level = LogLevel::kWarn;
  else if (name == "info")
    level = LogLevel::kInfo;
  else if (name == "debug")
    level = LogLevel::kDebug;
  else
    return false;
  return true;
}

void StderrLogger::Write(LogLevel level, std::string_view message) const {
  static std::mutex mu;
  static constexpr const char* kNames[] = {"ERROR", "WARN ", "INFO ", "DEBUG"};
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[80];
  std::snprintf(stamp, sizeof stamp, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  // One fwrite per line under a lock, so lines from different threads never interleave.
  std::string line = std::string(stamp) + " " + kNames[static_cast<int>(level)] + " " + std::string(message) + "\n";
  std::lock_guard<std::mutex> lock(mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

const NullLogger& NullLogger::Get() {
  static const NullLogger logger;
  return logger;
}

}  // namespace epp
