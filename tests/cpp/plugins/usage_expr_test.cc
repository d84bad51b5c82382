// The CEL subset of request-attribute-reporter (usage_expr.h): every expression its README,
// sample config and tests use, the rest of the subset, and errors naming the construct.
#include <gtest/gtest.h>

#include "plugins/response/usage_expr.h"

namespace epp {
namespace {

double Num(std::string_view text, const ResponseUsage& u) {
  auto e = UsageExpression::Compile(text);
  EXPECT_TRUE(e.ok()) << text << ": " << e.status();
  if (!e.ok()) return -12345;
  auto v = e->Evaluate(u);
  EXPECT_TRUE(v.ok()) << text << ": " << v.status();
  if (!v.ok() || !std::holds_alternative<double>(*v)) return -12345;
  return std::get<double>(*v);
}

bool Bool(std::string_view text, const ResponseUsage& u) {
  auto e = UsageExpression::Compile(text);
  EXPECT_TRUE(e.ok()) << text << ": " << e.status();
  auto v = e->Evaluate(u);
  EXPECT_TRUE(v.ok() && std::holds_alternative<bool>(*v)) << text;
  return v.ok() && std::holds_alternative<bool>(*v) && std::get<bool>(*v);
}

TEST(UsageExpressionTest, TheExpressionsLlmdConfigsUse) {
  ResponseUsage u;
  u.prompt_tokens = 32;
  u.completion_tokens = 10;
  u.total_tokens = 42;
  EXPECT_EQ(Num("usage.completion_tokens", u), 10);
  EXPECT_EQ(Num("usage.prompt_tokens + usage.completion_tokens", u), 42);
  EXPECT_EQ(Num("(has(usage.prompt_tokens) ? usage.prompt_tokens : 0) + (has(usage.completion_tokens) ? usage.completion_tokens : 0)", u), 42);
  EXPECT_TRUE(Bool("has(usage.prompt_tokens) && has(usage.completion_tokens)", u));
  EXPECT_TRUE(Bool("usage.completion_tokens > 0", u));
  // prompt_tokens_details only when sent.
  EXPECT_FALSE(Bool("has(usage.prompt_tokens_details)", u));
  u.cached_tokens = 16;
  EXPECT_TRUE(Bool("has(usage.prompt_tokens_details.cached_tokens)", u));
  EXPECT_EQ(Num("usage.prompt_tokens - usage.prompt_tokens_details.cached_tokens * 0.9", u), 32 - 16 * 0.9);
}

TEST(UsageExpressionTest, OperatorsPrecedenceAndTypes) {
  ResponseUsage u;
  u.prompt_tokens = 7;
  u.completion_tokens = 3;
  EXPECT_EQ(Num("1 + 2 * 3 - -4 / 2", u), 9);
  EXPECT_EQ(Num("(1 + 2) * 3 % 4", u), 1);
  EXPECT_EQ(Num("usage.prompt_tokens > usage.completion_tokens ? 1 : 2", u), 1);
  EXPECT_EQ(Num("true ? false ? 1 : 2 : 3", u), 2);
  EXPECT_TRUE(Bool("!(usage.prompt_tokens == 3) || 1 / 0 == 1", u));  // short-circuit
  EXPECT_TRUE(Bool("'a' + \"b\" == 'ab'", u));
  // Runtime errors: a missing field without has(), mixed types, division by zero.
  for (std::string_view bad : {"usage.non_existent_field", "usage.prompt_tokens_details.cached_tokens", "1 + 'a'",
                               "'a' == 1", "1 / 0", "!1", "-'x'", "1 ? 2 : 3", "usage.prompt_tokens && true"}) {
    auto e = UsageExpression::Compile(bad);
    ASSERT_TRUE(e.ok()) << bad << ": " << e.status();
    EXPECT_FALSE(e->Evaluate(u).ok()) << bad;
  }
}

TEST(UsageExpressionTest, OutsideTheSubsetFailsAtCompileNamingTheConstruct) {
  const std::pair<const char*, const char*> bad[] = {
      {"usage.prompt_tokens + -", "ends too early"},
      {"usage.prompt_tokens > ", "ends too early"},
      {"request.headers", "unknown variable 'request'"},
      {"size(usage)", "function size()"},
      {"usage.prompt_tokens.exists(x, x)", "method calls"},
      {"[1, 2]", "lists"},
      {"usage['prompt_tokens']", "lists, maps and indexing"},
      {"'unterminated", "does not end"},
      {"1 @ 2", "unexpected character '@'"},
      {"has(usage)", "has() needs a field"},
      {"1 2", "unexpected '2'"},
      {"1.2.3", "does not parse"},
      {"1..5", "does not parse"},
  };
  for (const auto& [text, needle] : bad) {
    auto e = UsageExpression::Compile(text);
    ASSERT_FALSE(e.ok()) << text;
    EXPECT_NE(e.status().message().find(needle), std::string::npos) << text << ": " << e.status().message();
    EXPECT_NE(e.status().message().find("at offset"), std::string::npos) << e.status().message();
  }
  EXPECT_FALSE(UsageExpression::Compile(std::string(300, '(') + "1" + std::string(300, ')')).ok());  // too deep, no crash
}

}  // namespace
}  // namespace epp
