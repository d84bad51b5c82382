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
//
// With kJson, one JSON object per line as zap's JSON encoder writes them (GIE's and llm-d's
// --zap-encoder=json), so log pipelines built for the reference parse epp's lines unchanged:
//   {"level":"info","ts":"2025-06-01T12:00:00.123Z","logger":"epp","msg":"..."}
// `ts` follows the time encoding: ISO 8601 (default), or epoch seconds / millis / nanos as numbers.
enum class LogFormat { kText, kJson };
enum class LogTimeEncoding { kIso8601, kEpoch, kMillis, kNanos };

class StderrLogger final : public Logger {
 public:
  explicit StderrLogger(LogLevel level = LogLevel::kInfo, LogFormat format = LogFormat::kText,
                        LogTimeEncoding time = LogTimeEncoding::kIso8601)
      : level_(level), format_(format), time_(time) {}
  bool Enabled(LogLevel level) const override { return level <= level_; }
  void Write(LogLevel level, std::string_view message) const override;

 private:
  LogLevel level_;
  LogFormat format_;
  LogTimeEncoding time_;
};

// The reference's logging flags as a level: `zap_log_level` (debug, info, error, panic, or an
// integer N meaning verbosity N) when not empty, else verbosity `v` (GIE: 2 default, 3 verbose,
// 4 debug, 5 trace): 4 and above is kDebug, else kInfo. false for a level zap does not know.
bool LogLevelFromReference(int v, std::string_view zap_log_level, LogLevel& level);

// Logs nothing.
class NullLogger final : public Logger {
 public:
  bool Enabled(LogLevel) const override { return false; }
  void Write(LogLevel, std::string_view) const override {}
  static const NullLogger& Get();
};

}  // namespace epp
