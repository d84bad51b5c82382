#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "epp/metrics.h"

namespace epp {
namespace {

MetricFamilies MustParse(std::string_view text) {
  auto r = ParsePrometheusText(text);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : MetricFamilies();
}

TEST(PrometheusParserTest, GaugeWithHelpAndType) {
  auto f = MustParse(
      "# HELP q Queue length.\n"
      "# TYPE q gauge\n"
      "q{model_name=\"m\"} 3\n");
  ASSERT_EQ(f.families().size(), 1u);
  const MetricFamily& fam = f.families()[0];
  EXPECT_EQ(fam.name, "q");
  EXPECT_EQ(fam.type, MetricType::kGauge);
  EXPECT_EQ(fam.help, "Queue length.");
  ASSERT_EQ(fam.samples.size(), 1u);
  EXPECT_EQ(fam.samples[0].value, 3);
  EXPECT_EQ(fam.samples[0].label("model_name"), "m");
  EXPECT_FALSE(fam.samples[0].timestamp_ms.has_value());
}

TEST(PrometheusParserTest, LabelEscapesAndSpecialCharacters) {
  auto f = MustParse(
      "# TYPE m gauge\n"
      "m{a=\"x\\\\y\",b=\"say \\\"hi\\\"\",c=\"l1\\nl2\", d=\"1,2\",e=\"{x=y}\"} 1\n");
  const Sample& s = f.families()[0].samples[0];
  EXPECT_EQ(s.label("a"), "x\\y");
  EXPECT_EQ(s.label("b"), "say \"hi\"");
  EXPECT_EQ(s.label("c"), "l1\nl2");
  EXPECT_EQ(s.label("d"), "1,2");
  EXPECT_EQ(s.label("e"), "{x=y}");
  ASSERT_EQ(s.labels.size(), 5u);
  EXPECT_EQ(s.labels[3].name, "d");  // source order kept
}

TEST(PrometheusParserTest, SpecialValuesExponentsAndTimestamps) {
  auto f = MustParse(
      "# TYPE a gauge\n"
      "a{k=\"nan\"} NaN\n"
      "a{k=\"pinf\"} +Inf\n"
      "a{k=\"ninf\"} -Inf\n"
      "a{k=\"exp\"} 1.790053209e+09\n"
      "a{k=\"neg\"} -2.5E-3 1700000000123\n");
  auto samples = f.families()[0].samples;
  ASSERT_EQ(samples.size(), 5u);
  EXPECT_TRUE(std::isnan(samples[0].value));
  EXPECT_EQ(samples[1].value, INFINITY);
  EXPECT_EQ(samples[2].value, -INFINITY);
  EXPECT_DOUBLE_EQ(samples[3].value, 1790053209.0);
  EXPECT_DOUBLE_EQ(samples[4].value, -0.0025);
  ASSERT_TRUE(samples[4].timestamp_ms.has_value());
  EXPECT_EQ(*samples[4].timestamp_ms, 1700000000123);
}

TEST(PrometheusParserTest, HistogramGroupsBucketSumCount) {
  auto f = MustParse(
      "# TYPE ttft histogram\n"
      "ttft_bucket{le=\"0.1\"} 1\n"
      "ttft_bucket{le=\"+Inf\"} 2\n"
      "ttft_sum 0.3\n"
      "ttft_count 2\n"
      "other 5\n");
  ASSERT_EQ(f.families().size(), 2u);
  EXPECT_EQ(f.families()[0].type, MetricType::kHistogram);
  EXPECT_EQ(f.families()[0].samples.size(), 4u);
  EXPECT_EQ(f.families()[1].name, "other");
  EXPECT_EQ(f.families()[1].type, MetricType::kUntyped);
}

TEST(PrometheusParserTest, CreatedSeriesFormTheirOwnUntypedFamily) {
  // As in expfmt and prometheus_client: text format 0.0.4 has no _created member.
  auto f = MustParse(
      "# TYPE req histogram\n"
      "req_bucket{le=\"+Inf\"} 1\n"
      "req_sum 1\n"
      "req_count 1\n"
      "req_created 1.7e9\n");
  ASSERT_EQ(f.families().size(), 2u);
  EXPECT_EQ(f.families()[1].name, "req_created");
  EXPECT_EQ(f.families()[1].type, MetricType::kUntyped);
}

TEST(PrometheusParserTest, SummaryAcceptsBareQuantileSamples) {
  auto f = MustParse(
      "# TYPE lat summary\n"
      "lat{quantile=\"0.5\"} 0.1\n"
      "lat_sum 3\n"
      "lat_count 9\n");
  ASSERT_EQ(f.families().size(), 1u);
  EXPECT_EQ(f.families()[0].type, MetricType::kSummary);
  EXPECT_EQ(f.families()[0].samples.size(), 3u);
}

TEST(PrometheusParserTest, CounterNamesFollowPrometheusClient) {
  auto f = MustParse(
      "# TYPE tokens_total counter\n"
      "tokens_total 5\n"
      "# TYPE reqs counter\n"
      "reqs 7\n");
  ASSERT_EQ(f.families().size(), 2u);
  EXPECT_EQ(f.families()[0].name, "tokens");
  EXPECT_EQ(f.families()[0].samples[0].name, "tokens_total");
  EXPECT_EQ(f.families()[1].name, "reqs");
  EXPECT_EQ(f.families()[1].samples[0].name, "reqs_total");
  EXPECT_EQ(f.SamplesNamed("tokens_total").size(), 1u);
  EXPECT_EQ(f.FindBySampleName("reqs").size(), 1u);  // found by family name too
}

TEST(PrometheusParserTest, CounterRenamingKeepsEachSampleName) {
  // Two TYPE lines for one name (not valid exposition, but prometheus_client accepts it): the
  // counter's samples each get `_total` appended to their own name.
  auto f = MustParse("# TYPE m histogram\nm_count 1\n# TYPE m counter\nm 2\n");
  ASSERT_EQ(f.families().size(), 1u);
  EXPECT_EQ(f.families()[0].samples[0].name, "m_count_total");
  EXPECT_EQ(f.families()[0].samples[1].name, "m_total");
}

TEST(PrometheusParserTest, ReuseParsesIntoTheSameObject) {
  MetricFamilies f;
  ASSERT_TRUE(ParsePrometheusTextInto("# TYPE a gauge\na{x=\"1\"} 1\n", {}, f).ok());
  ASSERT_TRUE(ParsePrometheusTextInto("# TYPE b_total counter\nb_total 2\n", {}, f).ok());
  ASSERT_EQ(f.families().size(), 1u);
  EXPECT_EQ(f.families()[0].name, "b");
  EXPECT_TRUE(f.FindBySampleName("a").empty());
  EXPECT_FALSE(ParsePrometheusTextInto("oops here", {}, f).ok());
  EXPECT_EQ(f.families().size(), 0u);
}

TEST(PrometheusParserTest, NumbersParseExactlyOnTheFastPath) {
  auto f = MustParse(
      "a 0.1\na 8.128902e+06\na 1e22\na 123456789012345\na 1234567890123456789\na 1.5E-3\na 7e-23\n");
  std::vector<double> want = {0.1, 8.128902e+06, 1e22, 123456789012345.0, 1234567890123456789.0, 1.5e-3, 7e-23};
  ASSERT_EQ(f.sample_count(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(f.families()[i].samples[0].value, want[i]) << i;
}

TEST(PrometheusParserTest, SamplesWithoutTypeAreUntypedSingletons) {
  auto f = MustParse("foo 1\nfoo{a=\"b\"} 2\n");
  ASSERT_EQ(f.families().size(), 2u);
  EXPECT_EQ(f.families()[0].type, MetricType::kUntyped);
  EXPECT_EQ(f.SamplesNamed("foo").size(), 2u);
}

TEST(PrometheusParserTest, CrlfBlankLinesCommentsAndEof) {
  auto f = MustParse(
      "# a free comment\r\n"
      "\r\n"
      "# HELP g Help with \\\\ and \\n escapes\r\n"
      "# TYPE g gauge\r\n"
      "   g 1   \r\n"
      "# EOF\n"
      "this is ignored after EOF\n");
  ASSERT_EQ(f.families().size(), 1u);
  EXPECT_EQ(f.families()[0].help, "Help with \\ and \n escapes");
  EXPECT_EQ(f.families()[0].samples[0].value, 1);
}

TEST(PrometheusParserTest, EmptyInputHasNoFamilies) {
  EXPECT_EQ(MustParse("").families().size(), 0u);
  EXPECT_EQ(MustParse("\n\n# just a comment\n").families().size(), 0u);
}

TEST(PrometheusParserTest, ViewsSurviveMoves) {
  MetricFamilies moved;
  {
    auto f = MustParse("# TYPE s gauge\ns{a=\"v\\\"q\"} 1\n");
    moved = std::move(f);
  }
  EXPECT_EQ(moved.families()[0].name, "s");
  EXPECT_EQ(moved.families()[0].samples[0].label("a"), "v\"q");
}

struct BadCase {
  const char* name;
  const char* text;
  const char* expected;  // substring of the error
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class PrometheusParserErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(PrometheusParserErrorTest, StrictFailsWithLineAndColumn) {
  const BadCase& c = GetParam();
  auto r = ParsePrometheusText(c.text);
  ASSERT_FALSE(r.ok()) << c.name;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(r.status().message()).find(c.expected), std::string::npos) << r.status();
}

TEST_P(PrometheusParserErrorTest, LenientSkipsAndCounts) {
  const BadCase& c = GetParam();
  std::string text = std::string("# TYPE ok gauge\nok 1\n") + c.text + "\n# TYPE ok2 gauge\nok2 2\n";
  auto r = ParsePrometheusText(text, {.lenient = true});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->skipped_lines(), 1);
  EXPECT_EQ(r->SamplesNamed("ok2").size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PrometheusParserErrorTest,
    ::testing::Values(
        BadCase{"ellipsis", "...", "line 1, column 1: expected a metric name"},
        BadCase{"no value", "m{a=\"b\"}", "line 1, column 9: expected a value"},
        BadCase{"bad value", "m 12abc", "line 1, column 3: invalid sample value"},
        BadCase{"unterminated value", "m{a=\"b} 1", "unterminated label value"},
        BadCase{"missing brace", "m{a=\"b\" 1", "expected ',' or '}'"},
        BadCase{"bad escape", "m{a=\"\\t\"} 1", "invalid escape"},
        BadCase{"unquoted label", "m{a=b} 1", "line 1, column 5: expected '\"'"},
        BadCase{"bad timestamp", "m 1 12.5", "invalid timestamp"},
        BadCase{"trailing text", "m 1 12 extra", "unexpected text after the timestamp"},
        BadCase{"bad type", "# TYPE m gaugey", "unknown metric type"},
        BadCase{"type without type", "# TYPE m", "TYPE line without a type"},
        BadCase{"help without name", "# HELP", "HELP line without a metric name"}),
    [](const ::testing::TestParamInfo<BadCase>& info) {
      std::string n = info.param.name;
      for (char& ch : n) {
        if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return n;
    });

TEST(PrometheusParserTest, ErrorLineNumbersCountFromOne) {
  auto r = ParsePrometheusText("# TYPE a gauge\na 1\n\n  a{x=\"1\"} nope\n");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("line 4, column 12"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace epp
