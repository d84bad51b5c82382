// The one checked path for nlohmann_json on untrusted data (private to libepp).
//
// nlohmann's non-throwing parse (`parse(text, nullptr, false)`) only covers parsing: `dump()`
// still throws on strings that are not UTF-8, `get<int64_t>()` on a double outside the int64
// range is undefined behaviour, and a second, throwing parse to learn the error position throws
// `out_of_range` (not `parse_error`) for a number beyond the double range such as `1e407`. Every
// read of request bodies, response bodies, Kubernetes answers and trace files goes through these
// helpers instead, so none of that can escape as an exception or a wild conversion.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace epp::internal {

// Parses `text` as one JSON document. Never throws; the error names the byte offset and nlohmann's
// reason without its "[json.exception...]" prefix, e.g. "byte 7: syntax error while parsing value".
template <class Json = nlohmann::json>
absl::StatusOr<Json> ParseJson(std::string_view text) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 2: syntax error ..."
    if (const size_t colon = what.find(": "); colon != std::string::npos) what = what.substr(colon + 2);
    return absl::InvalidArgumentError("byte " + std::to_string(e.byte) + ": " + what);
  } catch (const nlohmann::json::exception& e) {
    // out_of_range.406 ("number overflow parsing '1e407'") and anything else the parser throws.
    std::string what = e.what();
    if (const size_t bracket = what.find("] "); bracket != std::string::npos) what = what.substr(bracket + 2);
    return absl::InvalidArgumentError(what);
  }
}

// Like ParseJson, for callers that only want a value or nothing (a discarded value on error).
// (nlohmann's non-throwing mode, which is safe for parsing itself and costs no exception.)
template <class Json = nlohmann::json>
Json ParseJsonOrDiscarded(std::string_view text) {
  return Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

// Serializes `j` compactly. Fails (instead of throwing) when a string in it is not valid UTF-8.
template <class Json>
absl::StatusOr<std::string> DumpJson(const Json& j, int indent = -1) {
  try {
    return j.dump(indent);
  } catch (const nlohmann::json::exception& e) {
    std::string what = e.what();
    if (const size_t bracket = what.find("] "); bracket != std::string::npos) what = what.substr(bracket + 2);
    return absl::InvalidArgumentError(what);
  }
}

// Serializes `j`, replacing bytes that are not UTF-8 with U+FFFD: for diagnostics only, where the
// text is shown to a human and a lossy rendering beats no rendering.
template <class Json>
std::string DumpJsonLossy(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

// `v` as an int64 when it is a JSON number with an integral value inside the int64 range (an
// unsigned above INT64_MAX, a fraction, NaN or a double beyond 2^63 give nullopt).
template <class Json>
std::optional<int64_t> JsonInt64(const Json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.template get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.template get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.template get<double>();
    // [-2^63, 2^63): both bounds are exact doubles.
    if (!std::isfinite(d) || d != std::floor(d) || d < -9223372036854775808.0 || d >= 9223372036854775808.0)
      return std::nullopt;
    return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

// `v` as a finite double when it is a JSON number.
template <class Json>
std::optional<double> JsonDouble(const Json& v) {
  if (!v.is_number()) return std::nullopt;
  const double d = v.template get<double>();
  if (!std::isfinite(d)) return std::nullopt;
  return d;
}

// The string member `key` of object `obj`; nullptr when `obj` is not an object, or the member is
// absent or not a string.
template <class Json>
const std::string* JsonStringMember(const Json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) return nullptr;
  return it->template get_ptr<const std::string*>();
}

}  // namespace epp::internal
