// Error handling for libepp: absl::Status / absl::StatusOr<T> everywhere, no exceptions
// across the API. This header adds the two propagation macros and the string-view bridge.
//
// Debian's Abseil (20220623) builds absl::string_view as its own type, not std::string_view.
// libepp's own APIs take std::string_view; ToAbsl() converts at the few places an Abseil
// function needs one. Nothing else in the project converts by hand.
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace epp {

// Views the same bytes as an absl::string_view (no copy).
inline absl::string_view ToAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace epp

#define EPP_STATUS_CONCAT_INNER_(a, b) a##b
#define EPP_STATUS_CONCAT_(a, b) EPP_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define EPP_RETURN_IF_ERROR(expr)                  \
  do {                                             \
    ::absl::Status epp_status_ = (expr);           \
    if (!epp_status_.ok()) return epp_status_;     \
  } while (0)

// `lhs = value of expr` when expr (an absl::StatusOr) is OK; returns its status otherwise.
#define EPP_ASSIGN_OR_RETURN(lhs, expr) \
  EPP_ASSIGN_OR_RETURN_IMPL_(EPP_STATUS_CONCAT_(epp_statusor_, __LINE__), lhs, expr)
#define EPP_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
