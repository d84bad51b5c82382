// ParamTable (epp/param_table.h): reading parameters into an options struct through one
// declaration, writing them back, and describing them.
#include "epp/param_table.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace epp {
namespace {

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

struct Opts {
  int block = 16;
  int64_t big = 0;
  double weight = 0.5;
  bool on = false;
  std::string mode = "fast";
  std::string ref;
  int64_t wait_us = 200'000;
  std::vector<std::string> tags;
  std::string nested;  // from a Custom map {inner: ...}
  Params rest;
};

const ParamTable<Opts>& Table() {
  static const auto* t =
      &(*new ParamTable<Opts>())
           .Int("blockSizeTokens", &Opts::block, Range::Closed(1, 65536), "tokens per block")
           .Alias("blockSize", "blockSizeTokens")
           .Int("big", &Opts::big, Range::AtLeast(0), "a count")
           .Number("weight", &Opts::weight, Range::OpenClosed(0, 1), "a share")
           .Bool("on", &Opts::on, "a switch")
           .String("mode", &Opts::mode, "how", {"fast", "slow"})
           .String("ref", &Opts::ref, "another plugin")
           .OmitEmpty()
           .Duration("wait", &Opts::wait_us, Range::Above(0), "how long")
           .StringList("tags", &Opts::tags, "labels")
           .Custom("nested", ParamType::kMap, "{inner}",
                   [](const Params& v, Opts& o) -> absl::Status {
                     EPP_RETURN_IF_ERROR(v.CheckKeys({"inner"}));
                     EPP_ASSIGN_OR_RETURN(o.nested, v.GetString("inner", ""));
                     return absl::OkStatus();
                   },
                   [](const Opts& o) {
                     return o.nested.empty() ? Params() : Params::Map().Set("inner", Params::String(o.nested));
                   })
           .Ignored("legacy", ParamType::kString, "accepted, unused")
           .Custom("old", ParamType::kInt, "an old knob", nullptr, nullptr)
           .Deprecated();
  return *t;
}

Params Given(const std::string& path = "plugins[3].parameters") { return Params::Map(path); }

TEST(ParamTableTest, AbsentParametersKeepTheDefaults) {
  auto o = Table().Read(Params());
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->block, 16);
  EXPECT_EQ(o->mode, "fast");
  EXPECT_EQ(o->wait_us, 200'000);
  // Defaults other than the struct's come in through the second argument (a runtime's region).
  Opts d;
  d.mode = "slow";
  EXPECT_EQ(Table().Read(Params::Map(), d)->mode, "slow");
  // A null value is an absent one.
  EXPECT_EQ(Table().Read(Given().Set("blockSizeTokens", Params()))->block, 16);
}

TEST(ParamTableTest, ReadsEveryKind) {
  Params p = Given();
  p.Set("blockSizeTokens", Params::Scalar("32"))
      .Set("weight", Params::Scalar("1"))
      .Set("on", Params::Scalar("true"))
      .Set("mode", Params::String("slow"))
      .Set("wait", Params::String("1.5s"))
      .Set("tags", Params::List().Append(Params::String("a")).Append(Params::String("b")))
      .Set("nested", Params::Map().Set("inner", Params::String("x")))
      .Set("legacy", Params::String("ignored"));
  auto o = Table().Read(p);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->block, 32);
  EXPECT_EQ(o->weight, 1.0);
  EXPECT_TRUE(o->on);
  EXPECT_EQ(o->mode, "slow");
  EXPECT_EQ(o->wait_us, 1'500'000);
  EXPECT_EQ(o->tags, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(o->nested, "x");
  // A single string is a list of one; a bare number is seconds.
  EXPECT_EQ(Table().Read(Given().Set("tags", Params::String("solo")))->tags, std::vector<std::string>{"solo"});
  EXPECT_EQ(Table().Read(Given().Set("wait", Params::Scalar("2")))->wait_us, 2'000'000);
}

TEST(ParamTableTest, RangesNameThePathTheBoundsAndTheValue) {
  auto bad = [](const char* key, Params v) { return Msg(Table().Read(Given().Set(key, std::move(v))).status()); };
  EXPECT_EQ(bad("blockSizeTokens", Params::Scalar("0")), "plugins[3].parameters.blockSizeTokens: must be in [1, 65536], got 0");
  EXPECT_EQ(bad("blockSizeTokens", Params::Scalar("70000")),
            "plugins[3].parameters.blockSizeTokens: must be in [1, 65536], got 70000");
  EXPECT_EQ(bad("big", Params::Scalar("-1")), "plugins[3].parameters.big: must be >= 0, got -1");
  EXPECT_EQ(bad("weight", Params::Scalar("0")), "plugins[3].parameters.weight: must be in (0, 1], got 0");
  EXPECT_TRUE(Table().Read(Given().Set("weight", Params::Scalar("1"))).ok()) << "closed at 1";
  EXPECT_EQ(bad("wait", Params::String("0s")), "plugins[3].parameters.wait: must be > 0s, got 0s");
  // Conversion errors are Params' own.
  EXPECT_EQ(bad("blockSizeTokens", Params::String("lots")),
            "plugins[3].parameters.blockSizeTokens: expected an integer, got 'lots'");
  EXPECT_EQ(bad("wait", Params::String("soon")),
            "plugins[3].parameters.wait: expected a duration such as 200ms, 1.5s or 1m30s (or a number of seconds), got 'soon'");
  // Choices.
  EXPECT_EQ(bad("mode", Params::String("warp")), "plugins[3].parameters.mode: expected fast or slow, got 'warp'");
  // An int member narrower than int64 rejects what does not fit even without a declared range.
  struct Small {
    int x = 0;
  };
  ParamTable<Small> t;
  t.Int("x", &Small::x, Range::Any(), "");
  EXPECT_FALSE(t.Read(Given().Set("x", Params::Scalar("4294967296"))).ok());
  // Params built in code, without paths: the message names the parameter.
  EXPECT_EQ(Msg(Table().Read(Params::Map().Set("big", Params::Int(-2))).status()), "big: must be >= 0, got -2");
}

TEST(ParamTableTest, UnknownKeysAreErrorsWithTheConfigPath) {
  auto s = Table().Read(Given().Set("blokSize", Params::Int(4))).status();
  EXPECT_EQ(Msg(s),
            "plugins[3].parameters: unknown parameter 'blokSize' (known: blockSizeTokens, blockSize, big, weight, on, mode, ref, "
            "wait, tags, nested, legacy, old)");
  EXPECT_EQ(Msg(NoParamsTable().Read(Given().Set("x", Params::Int(1))).status()),
            "plugins[3].parameters: unknown parameter 'x' (this plugin takes no parameters)");
  EXPECT_TRUE(NoParamsTable().Read(Params()).ok());
  EXPECT_TRUE(NoParamsTable().Read(Params::Map()).ok());
  EXPECT_EQ(Msg(Table().Read(Params::List("plugins[3].parameters")).status()),
            "plugins[3].parameters: expected a map of parameters, got a list");
}

TEST(ParamTableTest, AliasesReadIntoTheSameFieldAndTheCurrentNameWins) {
  EXPECT_EQ(Table().Read(Given().Set("blockSize", Params::Int(8)))->block, 8);
  EXPECT_EQ(Table().Read(Given().Set("blockSize", Params::Int(8)).Set("blockSizeTokens", Params::Int(4)))->block, 4);
  // The alias is range-checked under its own path.
  EXPECT_EQ(Msg(Table().Read(Given().Set("blockSize", Params::Int(0))).status()),
            "plugins[3].parameters.blockSize: must be in [1, 65536], got 0");
}

TEST(ParamTableTest, CustomReadersSeeTheValueWithItsPath) {
  EXPECT_EQ(Msg(Table().Read(Given().Set("nested", Params::Map().Set("outer", Params::Int(1)))).status()),
            "plugins[3].parameters.nested: unknown parameter 'outer' (known: inner)");
  // Without a reader the parameter is accepted and ignored.
  EXPECT_TRUE(Table().Read(Given().Set("old", Params::Int(3))).ok());
}

TEST(ParamTableTest, EffectiveWritesEveryParameterWithAWriterAndReadsBack) {
  Opts o;
  o.block = 64;
  o.tags = {"x"};
  o.nested = "n";
  const Params eff = Table().Effective(o);
  EXPECT_EQ(eff.ToJson(),
            R"({"blockSizeTokens":64,"big":0,"weight":0.5,"on":false,"mode":"fast","wait":"200ms","tags":["x"],)"
            R"("nested":{"inner":"n"}})");
  // ref is empty (OmitEmpty), legacy and old have no writer.
  EXPECT_EQ(eff.Find("ref"), nullptr);
  auto again = Table().Read(eff);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Table().Effective(*again).ToJson(), eff.ToJson());
  // Durations that are not whole milliseconds stay exact.
  o.wait_us = 1500;
  EXPECT_EQ(Table().Effective(o).Find("wait")->text(), "1500us");
  o.ref = "p";
  EXPECT_EQ(Table().Effective(o).Find("ref")->text(), "p");
}

TEST(ParamTableTest, OtherKeysAreKeptVerbatim) {
  struct Open {
    bool on = false;
    Params rest;
  };
  ParamTable<Open> t;
  t.Bool("on", &Open::on, "").OtherKeys(&Open::rest, "anything else");
  auto o = t.Read(Given().Set("on", Params::Bool(true)).Set("scheme", Params::String("https")));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->on);
  EXPECT_EQ(t.Effective(*o).ToJson(), R"({"on":true,"scheme":"https"})");
  EXPECT_EQ(t.Schema().other_keys, "anything else");
  EXPECT_FALSE(t.Read(Params::List("p")).ok());
}

TEST(ParamTableTest, SchemaDescribesTheDeclaration) {
  const PluginSchema s = Table().Schema();
  EXPECT_TRUE(s.declared);
  ASSERT_EQ(s.params.size(), 11u);
  const ParamInfo* block = s.Find("blockSizeTokens");
  ASSERT_NE(block, nullptr);
  EXPECT_EQ(block->type, ParamType::kInt);
  EXPECT_EQ(block->default_text, "16");
  EXPECT_EQ(block->RangeText(), "[1, 65536]");
  EXPECT_EQ(block->aliases, std::vector<std::string>{"blockSize"});
  EXPECT_EQ(s.Find("wait")->RangeText(), "> 0s");
  EXPECT_EQ(s.Find("wait")->default_text, "200ms");
  EXPECT_EQ(s.Find("mode")->choices, (std::vector<std::string>{"fast", "slow"}));
  EXPECT_EQ(s.Find("ref")->default_text, "") << "an omitted empty string has no default";
  EXPECT_EQ(s.Find("tags")->default_text, "[]");
  EXPECT_TRUE(s.Find("old")->deprecated);
  EXPECT_FALSE(s.Find("legacy")->deprecated);
  EXPECT_EQ(s.Find("blockSize"), nullptr) << "aliases are not parameters of their own";

  const std::string json = s.ToParams().ToJson();
  EXPECT_NE(json.find(R"({"name":"blockSizeTokens","type":"int","default":"16","range":"[1, 65536]",)"
                      R"("aliases":["blockSize"],"doc":"tokens per block"})"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find(R"({"name":"old","type":"int","deprecated":true,"doc":"an old knob"})"), std::string::npos) << json;
  EXPECT_EQ(PluginSchema{}.ToParams().ToJson(), R"({"declared":false,"params":[]})");
  EXPECT_EQ(NoParamsTable().Schema().ToParams().ToJson(), R"({"declared":true,"params":[]})");
}

TEST(ParamTableTest, RangeText) {
  EXPECT_EQ(Range::Closed(1, 65536).Text(), "[1, 65536]");
  EXPECT_EQ(Range::OpenClosed(0, 1).Text(), "(0, 1]");
  EXPECT_EQ(Range::AtLeast(0).Text(), ">= 0");
  EXPECT_EQ(Range::Above(0.5).Text(), "> 0.5");
  EXPECT_EQ(Range::AtMost(3).Text(), "<= 3");
  EXPECT_EQ(Range::Any().Text(), "any");
  EXPECT_FALSE(Range::Closed(0, 1).Contains(std::nan("")));
  EXPECT_TRUE(Range::Any().Contains(-1e300));
}

}  // namespace
}  // namespace epp
