// request-attribute-reporter's expressions (a config's text) through UsageExpression::Compile and
// Evaluate over three usages (empty, typical, with cached tokens).
// Invariants: a failure is kInvalidArgument with a message, at compile and at evaluation alike;
// a compiled expression evaluates to the same value twice (no hidden state).
#include <string>
#include <string_view>

#include "plugins/response/usage_expr.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = epp::fuzz::Text(data, size);
  const absl::StatusOr<epp::UsageExpression> e = epp::UsageExpression::Compile(text);
  if (!e.ok()) {
    EPP_FUZZ_CHECK(e.status().code() == absl::StatusCode::kInvalidArgument, e.status().ToString());
    EPP_FUZZ_CHECK(!e.status().message().empty(), "an error without a message");
    return 0;
  }
  epp::ResponseUsage typical;
  typical.prompt_tokens = 32;
  typical.completion_tokens = 10;
  typical.total_tokens = 42;
  epp::ResponseUsage cached = typical;
  cached.cached_tokens = 16;
  for (const epp::ResponseUsage& u : {epp::ResponseUsage{}, typical, cached}) {
    const absl::StatusOr<epp::UsageValue> a = e->Evaluate(u), b = e->Evaluate(u);
    EPP_FUZZ_CHECK(a.ok() == b.ok(), "evaluation is deterministic");
    if (!a.ok()) {
      EPP_FUZZ_CHECK(a.status().code() == absl::StatusCode::kInvalidArgument, a.status().ToString());
      continue;
    }
    // NaN is the one value unequal to itself (0/0 is refused, but inf - inf is not).
    const bool nan = std::holds_alternative<double>(*a) && std::get<double>(*a) != std::get<double>(*a);
    EPP_FUZZ_CHECK(nan || *a == *b, "the same value twice");
  }
  return 0;
}
