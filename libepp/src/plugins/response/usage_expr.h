// The expressions of llm-d's request-attribute-reporter: a subset of CEL over one variable,
// `usage`, the token usage of a model server's response.
//
// The subset is what those configs use, and what a number over usage needs:
//   literals     1, 2.5, 'text', "text", true, false
//   fields       usage.prompt_tokens, usage.completion_tokens, usage.total_tokens,
//                usage.prompt_tokens_details.cached_tokens
//   has()        has(usage.prompt_tokens_details), has(usage.completion_tokens)
//   operators    + - * / % (numbers; + also joins strings), unary - and !, == != < <= > >=,
//                && ||, the conditional a ? b : c, parentheses
// Numbers are doubles, as in llm-d (usage becomes a protobuf Struct there). As there, the three
// token counts are always present (0 when the server did not send them), while
// prompt_tokens_details is present only when it was sent. Anything outside the subset (another
// variable, a function or macro, an index, a list) fails at Compile with kInvalidArgument naming
// the construct and its offset; a field the usage lacks fails at Evaluate ("no such field").
// Private to the plugin: the plugin contract (scheduling.h) hands ResponseMetadataSources a
// ResponseUsage (request.h) and knows nothing of the expressions.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "epp/request.h"
#include "epp/status.h"

namespace epp {

using UsageValue = std::variant<double, bool, std::string>;

class UsageExpression {
 public:
  static absl::StatusOr<UsageExpression> Compile(std::string_view text);
  absl::StatusOr<UsageValue> Evaluate(const ResponseUsage& usage) const;
  const std::string& text() const { return text_; }

  struct Node;
  UsageExpression(const UsageExpression&) = default;
  UsageExpression& operator=(const UsageExpression&) = default;
  UsageExpression(UsageExpression&&) = default;
  UsageExpression& operator=(UsageExpression&&) = default;
  ~UsageExpression();

 private:
  UsageExpression(std::string text, std::shared_ptr<const Node> root);
  std::string text_;
  std::shared_ptr<const Node> root_;
};

}  // namespace epp
