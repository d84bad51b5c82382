// Private to `eppctl serve`: leveled log lines on stderr, safe to call from any thread.
//   2025-06-01T12:00:00.123Z INFO  serving: ext_proc :9002 (TLS, self-signed), ...
#pragma once

#include <string>
#include <string_view>

namespace eppctl {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// "error", "warn", "info", "debug" -> level; false for anything else.
bool ParseLogLevel(std::string_view name, LogLevel& level);

class ServeLog {
 public:
  explicit ServeLog(LogLevel level = LogLevel::kInfo) : level_(level) {}
  bool Enabled(LogLevel level) const { return level <= level_; }
  void Log(LogLevel level, std::string_view message) const;
  void Error(std::string_view m) const { Log(LogLevel::kError, m); }
  void Warn(std::string_view m) const { Log(LogLevel::kWarn, m); }
  void Info(std::string_view m) const { Log(LogLevel::kInfo, m); }
  void Debug(std::string_view m) const { Log(LogLevel::kDebug, m); }

 private:
  LogLevel level_;
};

}  // namespace eppctl
