// StderrLogger, NullLogger and log level names (epp/runtime/logger.h).
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <string>

#include "epp/runtime/logger.h"

#include "common/json_string.h"

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

bool LogLevelFromReference(int v, std::string_view zap, LogLevel& level) {
  if (!zap.empty()) {
    if (zap == "debug") level = LogLevel::kDebug;
    else if (zap == "info") level = LogLevel::kInfo;
    else if (zap == "warn") level = LogLevel::kWarn;
    else if (zap == "error" || zap == "dpanic" || zap == "panic" || zap == "fatal") level = LogLevel::kError;
    else {
      int n = 0;
      for (char c : zap) {
        if (c < '0' || c > '9' || n > 1000) return false;
        n = n * 10 + (c - '0');
      }
      v = n;
      level = v >= 4 ? LogLevel::kDebug : LogLevel::kInfo;
    }
    return true;
  }
  level = v >= 4 ? LogLevel::kDebug : LogLevel::kInfo;
  return true;
}


void StderrLogger::Write(LogLevel level, std::string_view message) const {
  static std::mutex mu;
  static constexpr const char* kNames[] = {"ERROR", "WARN ", "INFO ", "DEBUG"};
  static constexpr const char* kJsonNames[] = {"error", "warn", "info", "debug"};
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[80];
  std::snprintf(stamp, sizeof stamp, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  std::string line;
  if (format_ == LogFormat::kJson) {
    const auto since = now.time_since_epoch();
    std::string ts;
    switch (time_) {
      case LogTimeEncoding::kIso8601: ts = "\"" + std::string(stamp) + "\""; break;
      case LogTimeEncoding::kEpoch: {
        char buf[40];
        std::snprintf(buf, sizeof buf, "%.6f", std::chrono::duration<double>(since).count());
        ts = buf;
        break;
      }
      case LogTimeEncoding::kMillis:
        ts = std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(since).count());
        break;
      case LogTimeEncoding::kNanos:
        ts = std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(since).count());
        break;
    }
    line = std::string("{\"level\":\"") + kJsonNames[static_cast<int>(level)] + "\",\"ts\":" + ts +
           ",\"logger\":\"epp\",\"msg\":";
    internal::AppendJsonString(message, line);  // quoted and escaped
    line += "}\n";
  } else {
    line = std::string(stamp) + " " + kNames[static_cast<int>(level)] + " " + std::string(message) + "\n";
  }
  // One fwrite per line under a lock, so lines from different threads never interleave.
  std::lock_guard<std::mutex> lock(mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

const NullLogger& NullLogger::Get() {
  static const NullLogger logger;
  return logger;
}

}  // namespace epp
