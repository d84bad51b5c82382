// disagg-profile-handler (llm-d's P/D and E/P/D handler) and the deprecated pd-profile-handler.
//
// Stages run one profile per PickProfiles call. Default order (decode-first): decode; then, if
// an encode profile exists and its decider says so for the chosen decode endpoint, encode; then
// prefill the same way. prefill-first runs prefill unconditionally, then encode, then decode. A
// stage its decider declines is recorded as skipped, with the decider's reason (explain shows
// it). The decode profile is primary; a prefill pick becomes x-prefiller-host-port, encode picks
// x-encoder-hosts-ports, for the decode pod's sidecar. A failed prefill or encode profile does
// not fail the request: it is served decode-only, as llm-d does.
#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "epp/prefix_cache.h"
#include "plugins/profile/profile.h"

namespace epp::plugins {
namespace {

enum class StageOrder { kDecodeFirst, kPrefillFirst };

struct DisaggOptions {
  std::string decode = "decode", prefill = "prefill", encode = "encode";
  std::string prefill_decider, encode_decider;  // plugin names; empty = the stage never runs
  StageOrder order = StageOrder::kDecodeFirst;
  std::string params_path;  // for reference errors
  // pd-profile-handler's legacy `threshold` rule (characters; 0 = always prefill), used instead
  // of a decider when `threshold` is given.
  std::optional<int64_t> legacy_threshold_chars;
  // pd-profile-handler given neither threshold nor deciderPluginName: llm-d <= v0.5 read that as
  // threshold 0 (prefill always), v0.6 on as the decider named prefix-based-pd-decider. The
  // latter when the config has that plugin, else the former (Resolve).
  bool decider_defaulted = false;
  // pd-profile-handler's primaryPort (0: off): the decode pick goes to its host at this port,
  // with x-data-parallel-host-port naming the rank (data-parallel-profile-handler's rewrite).
  int primary_port = 0;
};

const ProfileRun* Find(std::span<const ProfileRun> results, const std::string& profile) {
  for (const ProfileRun& r : results)
    if (r.profile == profile) return &r;
  return nullptr;
}

const ParamTable<DisaggOptions>& PdTable();

class DisaggProfileHandler : public Plugin, public ProfileHandler {
 public:
  // `effective`: the options written out by the type's own table (the two types spell them apart).
  DisaggProfileHandler(TypedName tn, DisaggOptions o, Params effective)
      : Plugin(std::move(tn)), o_(std::move(o)), effective_(std::move(effective)) {}

  const ProfileHandler* AsProfileHandler() const override { return this; }
  bool HasReferences() const override { return true; }
  std::vector<std::string> OwnedHeaders() const override {
    std::vector<std::string> h = {std::string(kPrefillerHostPortHeader), std::string(kEncoderHostsPortsHeader)};
    if (o_.primary_port != 0) h.emplace_back(kDataParallelHostPortHeader);
    return h;
  }
  // The deciders' inputs: a prefix-based decider makes the prefix producer necessary.
  PluginInputs Consumes() const override {
    PluginInputs in;
    for (const Plugin* d : {prefill_decider_plugin_, encode_decider_plugin_})
      if (d != nullptr) in = in | d->Consumes();
    if (o_.legacy_threshold_chars.value_or(0) > 0) in = in | PluginInputs{PluginInput::kPrefixMatch};
    return in;
  }

  Params EffectiveParams() const override { return effective_; }

  absl::Status Resolve(const PluginReferences& refs) override {
    auto has_profile = [&](const std::string& n) { return std::find(refs.profiles.begin(), refs.profiles.end(), n) != refs.profiles.end(); };
    if (!has_profile(o_.decode))
      return absl::InvalidArgumentError(absl::StrCat(o_.params_path, ".profiles.decode: no profile named '", o_.decode,
                                                     "' (profiles: ", absl::StrJoin(refs.profiles, ", "), ")"));
    has_prefill_ = has_profile(o_.prefill);
    has_encode_ = has_profile(o_.encode);
    auto decider = [&](const std::string& name, const char* key, const Decider*& out, const Plugin*& plugin) -> absl::Status {
      if (name.empty()) return absl::OkStatus();
      const Plugin* p = refs.plugin(name);
      if (p == nullptr)
        return absl::InvalidArgumentError(absl::StrCat(o_.params_path, ".deciders.", key, ": no plugin named '", name, "'"));
      out = AsDecider(p);
      if (out == nullptr)
        return absl::InvalidArgumentError(absl::StrCat(o_.params_path, ".deciders.", key, ": plugin '", name, "' (type: ",
                                                       p->type(), ") is not a disaggregation decider"));
      plugin = p;
      return absl::OkStatus();
    };
    if (o_.decider_defaulted && refs.plugin(o_.prefill_decider) == nullptr) {
      o_.prefill_decider.clear();
      o_.legacy_threshold_chars = 0;
      effective_ = PdTable().Effective(o_);
      if (refs.warnings != nullptr)
        refs.warnings->push_back(absl::StrCat(
            o_.params_path, ": no deciderPluginName and no plugin named '", std::string(kPrefixBasedPdDeciderType),
            "': read as llm-d v0.5's pd-profile-handler, which always ran prefill (threshold 0); declare an "
            "always-disagg-pd-decider (or a prefix-based-pd-decider) and name it in disagg-profile-handler's deciders.prefill"));
    }
    EPP_RETURN_IF_ERROR(decider(o_.prefill_decider, "prefill", prefill_decider_, prefill_decider_plugin_));
    EPP_RETURN_IF_ERROR(decider(o_.encode_decider, "encode", encode_decider_, encode_decider_plugin_));
    return absl::OkStatus();
  }

  ProfileStep PickProfiles(const SchedulingContext& ctx, std::span<const std::string>,
                           std::span<const ProfileRun> results) const override {
    ProfileStep step;
    if (o_.order == StageOrder::kPrefillFirst) {
      if (has_prefill_ && !Find(results, o_.prefill)) {
        step.run.push_back({o_.prefill, "stageOrder prefill-first: prefill runs first"});
        return step;
      }
      if (has_encode_ && !Find(results, o_.encode)) {
        if (AskEncode(ctx, nullptr, step)) return step;
      }
      if (!Find(results, o_.decode)) {
        // llm-d publishes the prefill pick as the peer of the later profiles.
        const ProfileRun* prefill = Find(results, o_.prefill);
        const Endpoint* peer = prefill && !prefill->picked.empty() ? prefill->picked.front() : nullptr;
        step.run.push_back({o_.decode, "decode runs last (stageOrder prefill-first)", peer});
      }
      return step;
    }
    const ProfileRun* decode = Find(results, o_.decode);
    if (decode == nullptr) {
      step.run.push_back({o_.decode, "decode runs first (stageOrder decode-first)"});
      return step;
    }
    if (decode->picked.empty()) return step;  // the request fails in ProcessResults
    const Endpoint* chosen = decode->picked.front();
    if (has_encode_ && !Find(results, o_.encode) && AskEncode(ctx, chosen, step)) return step;
    if (has_prefill_ && !Find(results, o_.prefill)) {
      std::string why;
      if (ShouldPrefill(ctx, chosen, why))
        step.run.push_back({o_.prefill, std::move(why), chosen});  // the decode pick is the peer
      else
        step.skip.push_back({o_.prefill, std::move(why)});
    }
    return step;
  }

  absl::StatusOr<ProfilesOutcome> ProcessResults(const SchedulingContext&, std::span<const ProfileRun> results) const override {
    const ProfileRun* decode = Find(results, o_.decode);
    if (decode == nullptr || decode->picked.empty())
      return absl::UnavailableError(absl::StrCat("no eligible endpoint: failed to find available decode workers",
                                                 decode && !decode->error.empty() ? ": " + decode->error : std::string()));
    ProfilesOutcome out;
    out.primary = o_.decode;
    const ProfileRun* prefill = Find(results, o_.prefill);
    const ProfileRun* encode = Find(results, o_.encode);
    const bool used_prefill = prefill && prefill->ran && !prefill->picked.empty() && has_prefill_;
    const bool used_encode = encode && encode->ran && !encode->picked.empty() && has_encode_;
    if (used_encode) {
      std::vector<std::string> hosts;
      for (const Endpoint* e : encode->picked) hosts.push_back(e->address);
      out.headers.emplace_back(kEncoderHostsPortsHeader, absl::StrJoin(hosts, ","));
    }
    if (used_prefill) out.headers.emplace_back(kPrefillerHostPortHeader, prefill->picked.front()->address);
    if (o_.primary_port != 0) {
      out.headers.emplace_back(kDataParallelHostPortHeader, decode->picked.front()->address);
      out.destination_port = o_.primary_port;
    }
    // llm-d's decision names (llm_d_epp_disagg_decision_total{decision_type}).
    out.reason = used_encode ? (used_prefill ? "encode-prefill-decode" : "encode-decode") : (used_prefill ? "prefill-decode" : "decode-only");
    if (prefill && prefill->ran && prefill->picked.empty())
      absl::StrAppend(&out.reason, " (prefill profile failed: ", prefill->error, ")");
    return out;
  }

 private:
  // Asks the encode decider; true when it added a step (run or skip).
  bool AskEncode(const SchedulingContext& ctx, const Endpoint* decode, ProfileStep& step) const {
    if (encode_decider_ == nullptr) return false;
    std::string why;
    if (encode_decider_->Disaggregate(ctx, decode, why))
      step.run.push_back({o_.encode, std::move(why)});
    else
      step.skip.push_back({o_.encode, std::move(why)});
    return true;
  }

  bool ShouldPrefill(const SchedulingContext& ctx, const Endpoint* decode, std::string& why) const {
    if (prefill_decider_ != nullptr) {
      const bool yes = prefill_decider_->Disaggregate(ctx, decode, why);
      why = absl::StrCat(prefill_decider_plugin_->name(), ": ", why);
      return yes;
    }
    if (o_.legacy_threshold_chars) {
      // pd-profile-handler before deciders: threshold 0 = always; else the uncached part of the
      // prompt, in characters, must reach the threshold.
      const int64_t threshold = *o_.legacy_threshold_chars;
      if (threshold == 0) {
        why = "threshold 0: always prefill";
        return true;
      }
      const int64_t chars = ctx.request ? static_cast<int64_t>(ctx.request->prompt.size()) : 0;
      const int64_t cached = static_cast<int64_t>(ctx.PrefixMatchBlocks(decode)) * ctx.prefix.block_size_tokens * kCharsPerToken;
      const int64_t uncached = std::max<int64_t>(0, chars - cached);
      why = absl::StrCat(uncached, " uncached prompt characters", uncached >= threshold ? " >= " : " < ", "threshold ", threshold);
      return uncached >= threshold;
    }
    why = "no prefill decider configured";
    return false;
  }

  DisaggOptions o_;
  Params effective_;
  bool has_prefill_ = false, has_encode_ = false;
  const Decider* prefill_decider_ = nullptr;
  const Decider* encode_decider_ = nullptr;
  const Plugin* prefill_decider_plugin_ = nullptr;
  const Plugin* encode_decider_plugin_ = nullptr;
};

absl::StatusOr<std::string> OptString(const Params& params, std::string_view key, std::string def) {
  return params.GetString(key, std::move(def));
}

absl::Status ReadStageOrder(const Params& v, DisaggOptions& o) {
  EPP_ASSIGN_OR_RETURN(std::string s, v.AsString());
  std::string norm;
  for (char c : s)
    if (c != '-' && c != '_') norm += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (norm.empty() || norm == "decodefirst" || norm == "decode") {
    o.order = StageOrder::kDecodeFirst;
  } else if (norm == "prefillfirst" || norm == "prefill") {
    o.order = StageOrder::kPrefillFirst;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(v.path(), ": expected decode-first or prefill-first, got '", s, "'"));
  }
  return absl::OkStatus();
}

// A string read into `field` with no writer: the flat spellings, written out in nested form.
ParamTable<DisaggOptions>::Reader Into(std::string DisaggOptions::*field) {
  return [field](const Params& v, DisaggOptions& o) -> absl::Status {
    EPP_ASSIGN_OR_RETURN(o.*field, v.AsString());
    return absl::OkStatus();
  };
}

// llm-d's nested form (profiles, deciders) is current; the flat one is read for old configs and
// written out nested. The factory rejects a mix of the two.
const ParamTable<DisaggOptions>& DisaggTable() {
  static const auto* t =
      &(*new ParamTable<DisaggOptions>())
           .Custom("profiles", ParamType::kMap, "{decode, prefill, encode}: the profile run for each stage",
                   [](const Params& v, DisaggOptions& o) -> absl::Status {
                     EPP_RETURN_IF_ERROR(v.CheckKeys({"decode", "prefill", "encode"}));
                     EPP_ASSIGN_OR_RETURN(o.decode, OptString(v, "decode", o.decode));
                     EPP_ASSIGN_OR_RETURN(o.prefill, OptString(v, "prefill", o.prefill));
                     EPP_ASSIGN_OR_RETURN(o.encode, OptString(v, "encode", o.encode));
                     return absl::OkStatus();
                   },
                   [](const DisaggOptions& o) {
                     return Params::Map()
                         .Set("decode", Params::String(o.decode))
                         .Set("prefill", Params::String(o.prefill))
                         .Set("encode", Params::String(o.encode));
                   })
           .Custom("deciders", ParamType::kMap,
                   "{prefill, encode}: the decider plugin asked before each stage; a stage without one never runs",
                   [](const Params& v, DisaggOptions& o) -> absl::Status {
                     EPP_RETURN_IF_ERROR(v.CheckKeys({"prefill", "encode"}));
                     EPP_ASSIGN_OR_RETURN(o.prefill_decider, OptString(v, "prefill", ""));
                     EPP_ASSIGN_OR_RETURN(o.encode_decider, OptString(v, "encode", ""));
                     return absl::OkStatus();
                   },
                   [](const DisaggOptions& o) {
                     Params deciders = Params::Map();
                     if (!o.prefill_decider.empty()) deciders.Set("prefill", Params::String(o.prefill_decider));
                     if (!o.encode_decider.empty()) deciders.Set("encode", Params::String(o.encode_decider));
                     return deciders;
                   })
           .Custom("stageOrder", ParamType::kString, "decode-first (decode, then the stages its deciders ask for) or prefill-first",
                   ReadStageOrder,
                   [](const DisaggOptions& o) {
                     return Params::String(o.order == StageOrder::kDecodeFirst ? "decode-first" : "prefill-first");
                   })
           .Custom("decodeProfile", ParamType::kString, "flat form of profiles.decode", Into(&DisaggOptions::decode), nullptr)
           .Deprecated()
           .Custom("prefillProfile", ParamType::kString, "flat form of profiles.prefill", Into(&DisaggOptions::prefill), nullptr)
           .Deprecated()
           .Custom("encodeProfile", ParamType::kString, "flat form of profiles.encode", Into(&DisaggOptions::encode), nullptr)
           .Deprecated()
           .Custom("prefillDeciderPluginName", ParamType::kString, "flat form of deciders.prefill",
                   Into(&DisaggOptions::prefill_decider), nullptr)
           .Alias("deciderPluginName", "prefillDeciderPluginName")
           .Deprecated()
           .Custom("encodeDeciderPluginName", ParamType::kString, "flat form of deciders.encode",
                   Into(&DisaggOptions::encode_decider), nullptr)
           .Deprecated();
  return *t;
}

// pd-profile-handler (deprecated in llm-d): read as a disagg-profile-handler without encode.
const ParamTable<DisaggOptions>& PdTable() {
  static const auto* t =
      &(*new ParamTable<DisaggOptions>())
           .String("decodeProfile", &DisaggOptions::decode, "the decode profile")
           .String("prefillProfile", &DisaggOptions::prefill, "the prefill profile")
           .Custom("deciderPluginName", ParamType::kString,
                   "the decider asked before prefill (default prefix-based-pd-decider; not with threshold)",
                   Into(&DisaggOptions::prefill_decider),
                   [](const DisaggOptions& o) {
                     return o.legacy_threshold_chars ? Params() : Params::String(o.prefill_decider);
                   })
           .Int("primaryPort", &DisaggOptions::primary_port, Range::Closed(0, 65535),
                "0: off; else the decode pick goes to this port, the rank named in x-data-parallel-host-port")
           .Custom("threshold", ParamType::kInt,
                   "the old rule instead of a decider: prefill when uncached characters >= threshold (0: always)",
                   [](const Params& v, DisaggOptions& o) -> absl::Status {
                     EPP_ASSIGN_OR_RETURN(int64_t threshold, v.AsInt());
                     if (threshold < 0) return absl::InvalidArgumentError(absl::StrCat(v.path(), ": must be >= 0, got ", threshold));
                     o.legacy_threshold_chars = threshold;
                     return absl::OkStatus();
                   },
                   [](const DisaggOptions& o) {
                     return o.legacy_threshold_chars ? Params::Int(*o.legacy_threshold_chars) : Params();
                   })
           .Deprecated()
           .Ignored("hashBlockSize", ParamType::kInt, "with threshold only; ignored (the prefix producer's block size counts)")
           .Ignored("prefixMatchInfoProducerName", ParamType::kString, "ignored: the prefix producer in use is read")
           .Ignored("prefixPluginType", ParamType::kString, "ignored: the prefix producer in use is read")
           .Ignored("prefixPluginName", ParamType::kString, "ignored: the prefix producer in use is read");
  return *t;
}

void Warn(const PluginContext& ctx, std::string message) {
  if (ctx.warnings != nullptr) ctx.warnings->push_back(std::move(message));
}

}  // namespace

PluginOr CreateDisaggProfileHandler(const std::string& name, const Params& params, const PluginContext& ctx) {
  const bool nested = params.Has("profiles") || params.Has("deciders");
  const bool flat = params.Has("decodeProfile") || params.Has("prefillProfile") || params.Has("encodeProfile") ||
                    params.Has("prefillDeciderPluginName") || params.Has("deciderPluginName") ||
                    params.Has("encodeDeciderPluginName");
  if (nested && flat)
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ": mixes the nested form (profiles, deciders) with the "
                                                   "deprecated flat one (decodeProfile, prefillDeciderPluginName, ...)"));
  EPP_ASSIGN_OR_RETURN(DisaggOptions o, DisaggTable().Read(params));
  o.params_path = params.path();
  if (flat)
    Warn(ctx, absl::StrCat(params.path(), ": the flat parameters (decodeProfile, prefillDeciderPluginName, ...) are "
                                          "deprecated in llm-d; use profiles.{decode,prefill,encode} and deciders.{prefill,encode}"));
  if (o.decode.empty()) return absl::InvalidArgumentError(absl::StrCat(params.path(), ".profiles.decode: must not be empty"));
  if (o.order == StageOrder::kPrefillFirst && !o.prefill_decider.empty())
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ": stageOrder prefill-first always runs prefill; it takes no "
                                                   "deciders.prefill ('", o.prefill_decider, "')"));
  Params effective = DisaggTable().Effective(o);
  return std::make_unique<DisaggProfileHandler>(TN(kDisaggProfileHandlerType, name), std::move(o), std::move(effective));
}

PluginOr CreatePdProfileHandler(const std::string& name, const Params& params, const PluginContext& ctx) {
  DisaggOptions defaults;
  defaults.encode.clear();
  defaults.prefill_decider = std::string(kPrefixBasedPdDeciderType);
  EPP_ASSIGN_OR_RETURN(DisaggOptions o, PdTable().Read(params, defaults));
  o.params_path = params.path();
  std::string what = absl::StrCat(params.path(), ": pd-profile-handler is deprecated in llm-d; read as disagg-profile-handler");
  if (o.legacy_threshold_chars) {
    // The form before deciders (llm-d-inference-scheduler samples): threshold in characters.
    const int64_t threshold = *o.legacy_threshold_chars;
    if (params.Has("deciderPluginName"))
      return absl::InvalidArgumentError(absl::StrCat(params.path(), ": give threshold (the old form) or deciderPluginName, not both"));
    o.prefill_decider.clear();
    absl::StrAppend(&what, " with its old threshold rule (", threshold == 0 ? "0: prefill always runs" : "uncached characters >= threshold",
                    "; prefix-based-pd-decider's nonCachedTokens is the current form, in tokens, and 0 there means never)");
    if (params.Has("hashBlockSize"))
      absl::StrAppend(&what, "; hashBlockSize is ignored: cached characters come from the prefix producer's block size");
  } else if (params.Has("hashBlockSize")) {
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ".hashBlockSize: only meaningful with threshold (the old form)"));
  } else if (!params.Has("deciderPluginName")) {
    o.decider_defaulted = true;
  }
  Warn(ctx, std::move(what));
  Params effective = PdTable().Effective(o);
  return std::make_unique<DisaggProfileHandler>(TN(kPdProfileHandlerType, name), std::move(o), std::move(effective));
}

PluginSchema DisaggProfileHandlerSchema() { return DisaggTable().Schema(); }
PluginSchema PdProfileHandlerSchema() { return PdTable().Schema(); }

}  // namespace epp::plugins
