// Logging for the runtime: a Logger interface the server, the pool and the KV subscriber write
// through, a stderr logger that keeps lines of different threads whole, and a logger that writes
// nothing. Embedders pass their own Logger to route epp's lines into their logging.
#pragma once

#include <string_view>

namespace epp {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// "error", "warn" (or "warning"), "info", "debug" -> level; false for anything else.
bool ParseLogLevel(std::string_view name, LogLevel& level);

class Logger {
 public:
  virtual ~Logger() = default;
  virtual bool Enabled(LogLevel level) const = 0;
  // Called only when Enabled(level); may be called from any thread.
  virtual void Write(LogLevel level, std::string_view message) const = 0;

  void Log(LogLevel level, std::string_view m) const {
    if (Enabled(level)) Write(level, m);
  }
  void Error(std::string_view m) const { Log(LogLevel::kError, m); }
  void Warn(std::string_view m) const { Log(LogLevel::kWarn, m); }
  void Info(std::string_view m) const { Log(LogLevel::kInfo, m); }
  void Debug(std::string_view m) const { Log(LogLevel::kDebug, m); }
};

// One line per message on stderr, "2025-06-01T12:00:00.123Z INFO  message", written whole under a
// lock so lines of different threads never interleave.
class StderrLogger final : public Logger {
 public:
  explicit StderrLogger(LogLevel level = LogLevel::kInfo) : level_(level) {}
  bool Enabled(LogLevel level) const override { return level <= level_; }
  void Write(LogLevel level, std::string_view message) const override;

 private:
  LogLevel level_;
};

// Logs nothing.
class NullLogger final : public Logger {
 public:
  bool Enabled(LogLevel) const override { return false; }
  void Write(LogLevel, std::string_view) const override {}
  static const NullLogger& Get();
};

}  // namespace epp
