#include "epp/params.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace epp {
namespace {

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

// A parameters map the way the loader builds it: one member `key` with the given scalar text.
Params One(const std::string& text, bool quoted = false) {
  Params p = Params::Map("plugins[3].parameters");
  p.Set("v", Params::Scalar(text, quoted));
  return p;
}

TEST(ParamsTest, DefaultIsNullAndFindsNothing) {
  Params p;
  EXPECT_TRUE(p.is_null());
  EXPECT_EQ(p.kind(), Params::Kind::kNull);
  EXPECT_EQ(p.Find("a"), nullptr);
  EXPECT_FALSE(p.Has("a"));
  EXPECT_EQ(p.ToJson(), "null");
  EXPECT_EQ(*p.GetDouble("a", 1.5), 1.5);
}

TEST(ParamsTest, SetKeepsPositionAndReHomesChildren) {
  Params p = Params::Map("plugins[0].parameters");
  p.Set("a", Params::Int(1)).Set("b", Params::List()).Set("a", Params::Int(2));
  ASSERT_EQ(p.entries().size(), 2u);
  EXPECT_EQ(p.entries()[0].first, "a");
  EXPECT_EQ(p.entries()[0].second.text(), "2");
  EXPECT_EQ(p.Find("a")->path(), "plugins[0].parameters.a");
  Params list = Params::List();
  list.Append(Params::String("x")).Append(Params::Map().Set("k", Params::Bool(true)));
  p.Set("b", list);
  EXPECT_EQ(p.Find("b")->items()[1].path(), "plugins[0].parameters.b[1]");
  EXPECT_EQ(p.Find("b")->items()[1].Find("k")->path(), "plugins[0].parameters.b[1].k");
  p.SetPath("x");
  EXPECT_EQ(p.Find("b")->items()[0].path(), "x.b[0]");
  EXPECT_TRUE(p.Has("b"));
  EXPECT_FALSE(p.Has("c"));
}

TEST(ParamsTest, NullBecomesMapOrListOnFirstBuild) {
  Params m;
  m.Set("a", Params::Int(1));
  EXPECT_TRUE(m.is_map());
  Params l;
  l.Append(Params::Int(1));
  EXPECT_EQ(l.kind(), Params::Kind::kList);
}

TEST(ParamsTest, GetDouble) {
  struct Case {
    const char* text;
    bool ok;
    double want;
  } cases[] = {
      {"0.8", true, 0.8}, {"1e3", true, 1000}, {"-2", true, -2},   {"+1.5", true, 1.5}, {".5", true, 0.5},
      {"1.", true, 1},    {"7", true, 7},      {"high", false, 0}, {"1_000", false, 0}, {"0x10", false, 0},
      {"inf", false, 0},  {".inf", false, 0},  {"nan", false, 0},  {"1e999", false, 0}, {"", false, 0},
      {" 1", false, 0},   {"1.5x", false, 0},  {"--1", false, 0},  {"1e", false, 0},    {".", false, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    auto v = One(c.text).GetDouble("v", -1);
    ASSERT_EQ(v.ok(), c.ok) << v.status();
    if (c.ok) {
      EXPECT_DOUBLE_EQ(*v, c.want);
    } else {
      EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(Msg(v.status()), "plugins[3].parameters.v: expected a number, got '" + std::string(c.text) + "'");
    }
  }
  // Quoting does not matter to the getters.
  EXPECT_DOUBLE_EQ(*One("0.25", /*quoted=*/true).GetDouble("v", 0), 0.25);
}

TEST(ParamsTest, ErrorNamesThePath) {
  Params p = Params::Map("plugins[3].parameters");
  p.Set("kvCacheUtilThreshold", Params::Scalar("high"));
  auto v = p.GetDouble("kvCacheUtilThreshold", 0.8);
  EXPECT_EQ(Msg(v.status()), "plugins[3].parameters.kvCacheUtilThreshold: expected a number, got 'high'");
  // Without paths, the key still names the value.
  Params bare;
  bare.Set("x", Params::Scalar("high"));
  EXPECT_EQ(Msg(bare.GetDouble("x", 0).status()), "x: expected a number, got 'high'");
  Params nested = Params::Map("p");
  nested.Set("m", Params::Map());
  EXPECT_EQ(Msg(nested.GetDouble("m", 0).status()), "p.m: expected a number, got a map");
}

TEST(ParamsTest, GetInt) {
  struct Case {
    const char* text;
    bool ok;
    int64_t want;
  } cases[] = {
      {"16", true, 16},
      {"1e3", true, 1000},
      {"-7", true, -7},
      {"+3", true, 3},
      {"16.0", true, 16},
      {"9223372036854775807", true, std::numeric_limits<int64_t>::max()},
      {"-9223372036854775808", true, std::numeric_limits<int64_t>::min()},
      {"1.5", false, 0},
      {"9223372036854775808", false, 0},
      {"1e19", false, 0},
      {"abc", false, 0},
      {"0x10", false, 0},
      {"", false, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    auto v = One(c.text).GetInt("v", -1);
    ASSERT_EQ(v.ok(), c.ok) << v.status();
    if (c.ok) {
      EXPECT_EQ(*v, c.want);
    } else {
      EXPECT_EQ(Msg(v.status()), "plugins[3].parameters.v: expected an integer, got '" + std::string(c.text) + "'");
    }
  }
}

TEST(ParamsTest, GetBoolAndString) {
  for (const char* t : {"true", "True", "TRUE"}) EXPECT_TRUE(*One(t).GetBool("v", false)) << t;
  for (const char* t : {"false", "False", "FALSE"}) EXPECT_FALSE(*One(t).GetBool("v", true)) << t;
  for (const char* t : {"yes", "1", "on", ""}) {
    auto v = One(t).GetBool("v", false);
    ASSERT_FALSE(v.ok()) << t;
    EXPECT_EQ(Msg(v.status()),
              "plugins[3].parameters.v: expected a boolean (true or false), got '" + std::string(t) + "'");
  }
  EXPECT_EQ(*One("hf-repo/model").GetString("v", ""), "hf-repo/model");
  EXPECT_EQ(*One("123").GetString("v", ""), "123");
  Params p = Params::Map("x");
  p.Set("l", Params::List());
  EXPECT_EQ(Msg(p.GetString("l", "").status()), "x.l: expected a string, got a list");
}

TEST(ParamsTest, AbsentOrNullGivesDefault) {
  Params p = Params::Map("x");
  p.Set("n", Params());
  EXPECT_EQ(*p.GetDouble("n", 2.5), 2.5);
  EXPECT_EQ(*p.GetInt("missing", 7), 7);
  EXPECT_EQ(*p.GetBool("n", true), true);
  EXPECT_EQ(*p.GetString("n", "d"), "d");
  EXPECT_EQ(*p.GetDurationMicros("n", 42), 42);
}

TEST(ParamsTest, AsScalarsOnly) {
  EXPECT_EQ(*Params::Scalar("3").AsInt(), 3);
  EXPECT_EQ(*Params::Scalar("abc").AsString(), "abc");
  EXPECT_FALSE(Params().AsString().ok());
  EXPECT_EQ(Msg(Params::List("p.l").AsDouble().status()), "p.l: expected a number, got a list");
  EXPECT_EQ(Msg(Params().AsBool().status()), "expected a boolean (true or false), got null");
}

TEST(ParamsTest, ParseDurationMicros) {
  struct Case {
    const char* text;
    bool ok;
    int64_t want;
  } cases[] = {
      {"200ms", true, 200'000},
      {"1.5s", true, 1'500'000},
      {"1m30s", true, 90'000'000},
      {"100us", true, 100},
      {"250\xC2\xB5s", true, 250},
      {"250\xCE\xBCs", true, 250},
      {"1000ns", true, 1},
      {"0", true, 0},
      {"0s", true, 0},
      {"-0", true, 0},
      {"5", true, 5'000'000},
      {"1.5", true, 1'500'000},
      {"2h", true, 7'200'000'000},
      {"+1s", true, 1'000'000},
      {".5s", true, 500'000},
      {"1.s", true, 1'000'000},
      {"1h2m3.5s", true, 3'723'500'000},
      {"1.1s", true, 1'100'000},
      {"-1s", false, 0},
      {"-5", false, 0},
      {"", false, 0},
      {"s", false, 0},
      {"1x", false, 0},
      {"1.5.3s", false, 0},
      {"ms", false, 0},
      {"1m30", false, 0},
      {"abc", false, 0},
      {" 1s", false, 0},
      {"1 s", false, 0},
      {"--1", false, 0},
      {".s", false, 0},
      {"99999999999999h", false, 0},
      {"2562047h47m16.9s", false, 0},  // just above Go's largest duration
      {"2562047h47m16.854775807s", true, 9'223'372'036'854'775},
      {"1ns", true, 0},  // truncated like Go's Duration.Microseconds()
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    auto v = ParseDurationMicros(c.text);
    ASSERT_EQ(v.ok(), c.ok) << v.status();
    if (c.ok) {
      EXPECT_EQ(*v, c.want);
    } else {
      EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
  EXPECT_EQ(Msg(ParseDurationMicros("-1s").status()), "expected a non-negative duration, got '-1s'");
  EXPECT_EQ(Msg(ParseDurationMicros("soon").status()),
            "expected a duration such as 200ms, 1.5s or 1m30s (or a number of seconds), got 'soon'");
}

TEST(ParamsTest, GetDurationMicros) {
  Params p = Params::Map("saturationDetector");
  p.Set("metricsStalenessThreshold", Params::Scalar("150ms"));
  p.Set("bad", Params::Scalar("-1s"));
  p.Set("list", Params::List());
  EXPECT_EQ(*p.GetDurationMicros("metricsStalenessThreshold", 0), 150'000);
  EXPECT_EQ(Msg(p.GetDurationMicros("bad", 0).status()),
            "saturationDetector.bad: expected a non-negative duration, got '-1s'");
  EXPECT_EQ(Msg(p.GetDurationMicros("list", 0).status()), "saturationDetector.list: expected a duration, got a list");
}

TEST(ParamsTest, CheckKeys) {
  Params p = Params::Map("plugins[2].parameters");
  p.Set("blockSizeTokens", Params::Int(16)).Set("blokSize", Params::Int(4));
  EXPECT_EQ(Msg(p.CheckKeys({"blockSizeTokens", "autoTune"})),
            "plugins[2].parameters: unknown parameter 'blokSize' (known: blockSizeTokens, autoTune)");
  EXPECT_TRUE(p.CheckKeys({"blockSizeTokens", "blokSize"}).ok());
  EXPECT_EQ(Msg(p.CheckKeys({})),
            "plugins[2].parameters: unknown parameter 'blockSizeTokens' (this plugin takes no parameters)");
  EXPECT_TRUE(Params().CheckKeys({"a"}).ok());
  EXPECT_TRUE(Params::Map().CheckKeys({}).ok());
  EXPECT_EQ(Msg(Params::List("plugins[0].parameters").CheckKeys({"a"})),
            "plugins[0].parameters: expected a map of parameters, got a list");
  EXPECT_EQ(Msg(Params::Scalar("x", false, "p").CheckKeys({"a"})), "p: expected a map of parameters, got 'x'");
}

TEST(ParamsTest, ToJsonScalars) {
  struct Case {
    Params value;
    const char* want;
  } cases[] = {
      {Params::Scalar("1"), "1"},
      {Params::Scalar("1", /*quoted=*/true), "\"1\""},
      {Params::Scalar("-0.5e3"), "-0.5e3"},
      {Params::Scalar(".5"), "0.5"},
      {Params::Scalar("+1"), "1"},
      {Params::Scalar("1."), "1"},
      {Params::Scalar("007"), "7"},
      {Params::Scalar("0x10"), "\"0x10\""},
      {Params::Scalar("true"), "true"},
      {Params::Scalar("False"), "false"},
      {Params::Scalar("true", true), "\"true\""},
      {Params::Scalar("null"), "null"},
      {Params::Scalar("~"), "null"},
      {Params::Scalar("~", true), "\"~\""},
      {Params::Scalar("200ms"), "\"200ms\""},
      {Params::Scalar("q\"b\\s\n\t\x01/\xC3\xA9"), "\"q\\\"b\\\\s\\n\\t\\u0001/\xC3\xA9\""},
      {Params::Number(0.25), "0.25"},
      {Params::Number(3), "3"},
      {Params::Int(-12), "-12"},
      {Params::Bool(false), "false"},
      {Params::String("1"), "\"1\""},
      {Params(), "null"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.want);
    EXPECT_EQ(c.value.ToJson(), c.want);
  }
}

TEST(ParamsTest, ToJsonKeepsSourceOrder) {
  Params p = Params::Map();
  Params list = Params::List();
  list.Append(Params::Scalar("1.5")).Append(Params::Scalar("two")).Append(Params());
  p.Set("z", Params::Scalar("1")).Set("a\"k", list).Set("m", Params::Map()).Set("l", Params::List());
  EXPECT_EQ(p.ToJson(), "{\"z\":1,\"a\\\"k\":[1.5,\"two\",null],\"m\":{},\"l\":[]}");
}

}  // namespace
}  // namespace epp
