// llm-d's disaggregation deciders (llm-d-router profilehandler/disagg/*_decider.go): plugins a
// disagg-profile-handler names under `deciders`, asked whether the request's prefill (or encode)
// stage runs on a separate server.
#include "absl/strings/str_cat.h"
#include "epp/prefix_cache.h"
#include "plugins/profile/profile.h"

namespace epp::plugins {
namespace {

// prefix-based-pd-decider: prefill runs separately when the prompt's tokens the chosen decode
// server does not hold reach `nonCachedTokens` (0 = never) and the prompt has at least
// `promptTokens` (0 = no gate). Cached tokens are the decode endpoint's matched prefix blocks
// times the producer's block size; prompt tokens are the request's estimate (kCharsPerToken).
struct PrefixDeciderOptions {
  int64_t non_cached = 0;
  int64_t prompt = 0;
};

const ParamTable<PrefixDeciderOptions>& PrefixDeciderTable() {
  static const auto* t =
      &(*new ParamTable<PrefixDeciderOptions>())
           .Int("nonCachedTokens", &PrefixDeciderOptions::non_cached, Range::AtLeast(0),
                "uncached prompt tokens on the decode endpoint from which prefill runs apart; 0: never")
           .Int("promptTokens", &PrefixDeciderOptions::prompt, Range::AtLeast(0),
                "shorter prompts never disaggregate; 0: no minimum");
  return *t;
}

class PrefixBasedPdDecider : public Plugin, public Decider {
 public:
  PrefixBasedPdDecider(TypedName tn, PrefixDeciderOptions o)
      : Plugin(std::move(tn)), non_cached_(o.non_cached), prompt_(o.prompt) {}
  Params EffectiveParams() const override {
    return PrefixDeciderTable().Effective(PrefixDeciderOptions{non_cached_, prompt_});
  }
  PluginInputs Consumes() const override { return {PluginInput::kPrefixMatch}; }

  bool Disaggregate(const SchedulingContext& ctx, const Endpoint* decode, std::string& why) const override {
    if (non_cached_ == 0) {
      why = "nonCachedTokens is 0: never disaggregates";
      return false;
    }
    const int64_t tokens = ctx.request ? ctx.request->prompt_tokens : 0;
    if (prompt_ > 0 && tokens < prompt_) {
      why = absl::StrCat(tokens, " prompt tokens < promptTokens ", prompt_);
      return false;
    }
    if (decode == nullptr) {
      why = "no decode endpoint to measure the cached prefix against";
      return false;
    }
    const int64_t cached = static_cast<int64_t>(ctx.PrefixMatchBlocks(decode)) * ctx.prefix.block_size_tokens;
    const int64_t uncached = tokens - cached;
    const bool split = uncached >= non_cached_;
    why = absl::StrCat(uncached, " of ", tokens, " prompt tokens not cached on ", decode->address, split ? " >= " : " < ",
                       "nonCachedTokens ", non_cached_);
    return split;
  }

 private:
  int64_t non_cached_;
  int64_t prompt_;
};

class AlwaysDisaggPdDecider : public Plugin, public Decider {
 public:
  using Plugin::Plugin;
  bool Disaggregate(const SchedulingContext&, const Endpoint*, std::string& why) const override {
    why = "always-disagg-pd-decider: always";
    return true;
  }
};

// True for requests with media parts (images, audio, video), which an encode stage handles.
class AlwaysDisaggMultimodalDecider : public Plugin, public Decider {
 public:
  using Plugin::Plugin;
  bool Disaggregate(const SchedulingContext& ctx, const Endpoint*, std::string& why) const override {
    const int media = ctx.request ? ctx.request->media_parts : 0;
    why = media > 0 ? absl::StrCat("the request has ", media, " media part", media == 1 ? "" : "s")
                    : "the request has no media parts";
    return media > 0;
  }
};

}  // namespace

PluginOr CreatePrefixBasedPdDecider(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(PrefixDeciderOptions o, PrefixDeciderTable().Read(params));
  return std::make_unique<PrefixBasedPdDecider>(TN(kPrefixBasedPdDeciderType, name), o);
}

PluginOr CreateAlwaysDisaggPdDecider(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(ReadNoParams(params));
  return std::make_unique<AlwaysDisaggPdDecider>(TN(kAlwaysDisaggPdDeciderType, name));
}

PluginOr CreateAlwaysDisaggMultimodalDecider(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(ReadNoParams(params));
  return std::make_unique<AlwaysDisaggMultimodalDecider>(TN(kAlwaysDisaggMultimodalDeciderType, name));
}

PluginSchema PrefixBasedPdDeciderSchema() { return PrefixDeciderTable().Schema(); }

}  // namespace epp::plugins
