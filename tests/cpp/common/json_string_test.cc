// common/json_string.h: the string form of Python's json.dumps(ensure_ascii=False), which the
// Jinja evaluator's tojson and the prompt's canonical JSON both write.
#include "common/json_string.h"

#include <string>

#include <gtest/gtest.h>

namespace epp::internal {
namespace {

TEST(JsonStringTest, EscapesAsPythonJsonDumpsWithoutEnsureAscii) {
  std::string controls;
  for (int c = 0; c < 0x20; ++c) controls += static_cast<char>(c);
  std::string out = "x";
  AppendJsonString(controls + "\"\\\x7f/caf\xC3\xA9", out);
  // Python: json.dumps("".join(map(chr, range(32))) + '"\\\x7f/café', ensure_ascii=False)
  EXPECT_EQ(out,
            "x\"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u000b\\f\\r\\u000e\\u000f"
            "\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018\\u0019\\u001a\\u001b\\u001c\\u001d"
            "\\u001e\\u001f\\\"\\\\\x7f/caf\xC3\xA9\"");
}

TEST(JsonStringTest, PlainTextAndEmpty) {
  std::string out;
  AppendJsonString("", out);
  AppendJsonString("plain text", out);
  EXPECT_EQ(out, "\"\"\"plain text\"");
}

}  // namespace
}  // namespace epp::internal
