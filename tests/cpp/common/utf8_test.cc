// common/utf8.h: which bytes are well-formed (Unicode's table 3-7 at its edges), the encoder
// against utf8proc's (the Jinja evaluator appended code points with utf8proc_encode_char before),
// and the small boundary helpers.
#include "common/utf8.h"

#include <string>
#include <string_view>

#include <gtest/gtest.h>

namespace epp::internal {
namespace {

TEST(Utf8Test, FirstInvalidAtTheEdgesOfWellFormed) {
  struct Case {
    std::string_view text;
    size_t bad;  // npos: well-formed
  };
  const Case cases[] = {
      {"", std::string_view::npos},
      {"plain ASCII text, longer than eight bytes", std::string_view::npos},
      {"caf\xC3\xA9", std::string_view::npos},
      {"\xE0\xA0\x80 \xED\x9F\xBF \xEE\x80\x80", std::string_view::npos},  // U+0800, U+D7FF, U+E000
      {"\xF0\x90\x80\x80\xF4\x8F\xBF\xBF", std::string_view::npos},        // U+10000, U+10FFFF
      {"ab\xC0\x80", 2},                                                   // overlong NUL
      {"\xC1\xBF", 0},                                                     // overlong U+007F
      {"x\xE0\x9F\xBF", 1},                                                // overlong U+07FF
      {"\xF0\x8F\xBF\xBF", 0},                                             // overlong U+FFFF
      {"12345678\xED\xA0\x80", 8},                                         // surrogate U+D800
      {"\xF4\x90\x80\x80", 0},                                             // U+110000
      {"\xF5\x80\x80\x80", 0},
      {"ok\x80", 2},                                                       // stray continuation
      {"\xE2\x82", 0},                                                     // truncated
      {"\xE2\x82\xAC\xE2\x28\xA1", 3},                                     // bad second byte
  };
  for (const Case& c : cases) EXPECT_EQ(FirstInvalidUtf8(c.text), c.bad) << testing::PrintToString(std::string(c.text));
}

TEST(Utf8Test, DecodeGivesLengthAndCodePointOrZero) {
  int32_t cp = 0;
  EXPECT_EQ(DecodeUtf8("\xE2\x82\xAC!", cp), 3u);
  EXPECT_EQ(cp, 0x20AC);
  EXPECT_EQ(DecodeUtf8("\xE2\x82", cp), 0u);
  EXPECT_EQ(cp, -1);
  EXPECT_EQ(DecodeUtf8("", cp), 0u);
  EXPECT_EQ(cp, -1);
}

TEST(Utf8Test, EncodeAsUtf8procAndRoundTrips) {
  for (int64_t v = -2; v <= 0x110002; ++v) {
    const auto cp = static_cast<int32_t>(v);
    char ours[4];
    utf8proc_uint8_t theirs[4];
    const size_t n = EncodeUtf8(static_cast<uint32_t>(cp), ours);
    ASSERT_EQ(static_cast<utf8proc_ssize_t>(n), utf8proc_encode_char(cp, theirs)) << v;
    ASSERT_EQ(std::string_view(ours, n), std::string_view(reinterpret_cast<const char*>(theirs), n)) << v;
    if (n == 0 || (cp >= 0xD800 && cp <= 0xDFFF)) continue;
    int32_t back = 0;
    ASSERT_EQ(DecodeUtf8(std::string_view(ours, n), back), n) << v;
    ASSERT_EQ(back, cp);
  }
  std::string out = "a";
  AppendUtf8(0x1F600, out);
  AppendUtf8(0x110000, out);
  EXPECT_EQ(out, "a\xF0\x9F\x98\x80");
}

TEST(Utf8Test, BoundariesAndCounts) {
  const std::string_view s = "a\xC3\xA9\xF0\x9F\x98\x80z";  // a, é, 😀, z
  EXPECT_EQ(Utf8CharStart(s, 0), 0u);
  EXPECT_EQ(Utf8CharStart(s, 2), 1u);
  EXPECT_EQ(Utf8CharStart(s, 6), 3u);
  EXPECT_EQ(Utf8CharStart(s, 7), 7u);
  EXPECT_EQ(Utf8CharStart("\x80\x80", 1), 0u);  // stops at the start
  EXPECT_EQ(Utf8SequenceLength('a'), 1u);
  EXPECT_EQ(Utf8SequenceLength(0xC3), 2u);
  EXPECT_EQ(Utf8SequenceLength(0xE2), 3u);
  EXPECT_EQ(Utf8SequenceLength(0xF0), 4u);
  EXPECT_TRUE(IsUtf8Continuation('\xA9'));
  EXPECT_FALSE(IsUtf8Continuation('\xC3'));
  EXPECT_EQ(CountUtf8Chars(s), 4u);
  EXPECT_EQ(CountUtf8Chars(""), 0u);
}

}  // namespace
}  // namespace epp::internal
