// Plugin parameters: a small read-only tree (map, list, scalar, null) that knows where in the
// configuration it came from.
//
// The config loader turns each `plugins[i].parameters` YAML node into a Params, so plugin
// factories never see yaml-cpp. Scalars keep their text ("0.8", "200ms", "true"); the typed
// getters convert on demand and fail with kInvalidArgument naming the config path:
//   "plugins[3].parameters.kvCacheUtilThreshold: expected a number, got 'high'"
// A factory starts from its defaults, overlays what the params set, and calls CheckKeys() so a
// misspelt parameter is an error rather than silently ignored.
//
// Params are also built in code (Map/Set/Scalar) to report a plugin's *effective* parameters
// (`eppctl config effective`, explain output). Values are immutable once built; copying is cheap
// enough for configuration-time use. Thread-safe for concurrent reads.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "epp/status.h"

namespace epp {

class Params {
 public:
  enum class Kind { kNull, kScalar, kList, kMap };

  Params() = default;  // null
  static Params Map(std::string path = {});
  static Params List(std::string path = {});
  static Params Scalar(std::string text, bool quoted = false, std::string path = {});
  static Params Number(double value);
  static Params Int(int64_t value);
  static Params Bool(bool value);
  static Params String(std::string value);

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::kNull; }
  bool is_map() const { return kind_ == Kind::kMap; }
  // Where this value sits in the configuration ("plugins[2].parameters.blockSizeTokens").
  const std::string& path() const { return path_; }
  // 1-based line in the source file, 0 when unknown.
  int line() const { return line_; }
  void set_line(int line) { line_ = line; }

  // Scalars: the text as written, and whether it was quoted (a quoted "1" is a string).
  const std::string& text() const { return text_; }
  bool quoted() const { return quoted_; }
  // Lists: the items. Maps: the entries in source order.
  const std::vector<Params>& items() const { return items_; }
  const std::vector<std::pair<std::string, Params>>& entries() const { return entries_; }

  // Maps: the member named `key`, or nullptr (also for a null or non-map value).
  const Params* Find(std::string_view key) const;
  bool Has(std::string_view key) const { return Find(key) != nullptr; }

  // Builders (maps and lists only). Set replaces an existing key, keeping its position.
  Params& Set(std::string key, Params value);
  Params& Append(Params value);

  // Typed getters for map members: the default when the key is absent or null, the converted
  // value when it converts, kInvalidArgument naming path and value otherwise.
  absl::StatusOr<double> GetDouble(std::string_view key, double default_value) const;
  absl::StatusOr<int64_t> GetInt(std::string_view key, int64_t default_value) const;
  absl::StatusOr<bool> GetBool(std::string_view key, bool default_value) const;
  absl::StatusOr<std::string> GetString(std::string_view key, std::string default_value) const;
  // Durations as Go writes them ("200ms", "1.5s", "2m", "100us"), or a bare number of seconds.
  // Result in microseconds.
  absl::StatusOr<int64_t> GetDurationMicros(std::string_view key, int64_t default_value) const;

  // The value itself as a number / bool / string (scalars only).
  absl::StatusOr<double> AsDouble() const;
  absl::StatusOr<int64_t> AsInt() const;
  absl::StatusOr<bool> AsBool() const;
  absl::StatusOr<std::string> AsString() const;
  absl::StatusOr<int64_t> AsDurationMicros() const;  // see GetDurationMicros

  // kInvalidArgument when this map has a key outside `known`:
  //   "plugins[2].parameters: unknown parameter 'blokSize' (known: blockSizeTokens, autoTune)"
  // A null value (no parameters given) passes; a non-map value is an error.
  absl::Status CheckKeys(std::initializer_list<std::string_view> known) const;
  absl::Status CheckKeys(const std::vector<std::string_view>& known) const;

  // JSON rendering: unquoted scalars that look like numbers or booleans become JSON numbers or
  // booleans, others strings; maps keep source order.
  std::string ToJson() const;

  // Re-homes this value (and its children) under a new path; used by the loader.
  void SetPath(std::string path);

 private:
  Kind kind_ = Kind::kNull;
  std::string path_;
  int line_ = 0;
  std::string text_;
  bool quoted_ = false;
  std::vector<Params> items_;
  std::vector<std::pair<std::string, Params>> entries_;
};

// Parses a Go-style duration ("200ms", "1.5s", "1m30s", "250us", "0") or a bare number of
// seconds into microseconds. kInvalidArgument on anything else or a negative value.
absl::StatusOr<int64_t> ParseDurationMicros(std::string_view text);
// The shortest exact spelling ParseDurationMicros reads back: "2s", "50ms", "150us".
std::string FormatDurationMicros(int64_t micros);

}  // namespace epp
