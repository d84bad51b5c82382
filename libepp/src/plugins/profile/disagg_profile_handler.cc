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
  // pd-profile-handler's primaryPort (0: off): the decode pick goes to its host at this port,
  // with x-data-parallel-host-port naming the rank (data-parallel-profile-handler's rewrite).
  int primary_port = 0;
};

const ProfileRun* Find(std::span<const ProfileRun> results, const std::string& profile) {
  for (const ProfileRun& r : results)
    if (r.profile == profile) return &r;
  return nullptr;
}

class DisaggProfileHandler : public Plugin, public ProfileHandler {
 public:
  DisaggProfileHandler(TypedName tn, DisaggOptions o) : Plugin(std::move(tn)), o_(std::move(o)) {}

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

  Params EffectiveParams() const override {
    Params p = Params::Map();
    p.Set("profiles", Params::Map()
                          .Set("decode", Params::String(o_.decode))
                          .Set("prefill", Params::String(o_.prefill))
                          .Set("encode", Params::String(o_.encode)));
    Params deciders = Params::Map();
    if (!o_.prefill_decider.empty()) deciders.Set("prefill", Params::String(o_.prefill_decider));
    if (!o_.encode_decider.empty()) deciders.Set("encode", Params::String(o_.encode_decider));
    p.Set("deciders", std::move(deciders));
    p.Set("stageOrder", Params::String(o_.order == StageOrder::kDecodeFirst ? "decode-first" : "prefill-first"));
    if (o_.legacy_threshold_chars) p.Set("threshold", Params::Int(*o_.legacy_threshold_chars));
    return p;
  }

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
  bool has_prefill_ = false, has_encode_ = false;
  const Decider* prefill_decider_ = nullptr;
  const Decider* encode_decider_ = nullptr;
  const Plugin* prefill_decider_plugin_ = nullptr;
  const Plugin* encode_decider_plugin_ = nullptr;
};

absl::StatusOr<std::string> OptString(const Params& params, std::string_view key, std::string def) {
  return params.GetString(key, std::move(def));
}

absl::StatusOr<StageOrder> ParseStageOrder(const Params& params) {
  EPP_ASSIGN_OR_RETURN(std::string s, params.GetString("stageOrder", ""));
  std::string norm;
  for (char c : s)
    if (c != '-' && c != '_') norm += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (norm.empty() || norm == "decodefirst" || norm == "decode") return StageOrder::kDecodeFirst;
  if (norm == "prefillfirst" || norm == "prefill") return StageOrder::kPrefillFirst;
  return absl::InvalidArgumentError(
      absl::StrCat(params.path(), ".stageOrder: expected decode-first or prefill-first, got '", s, "'"));
}

void Warn(const PluginContext& ctx, std::string message) {
  if (ctx.warnings != nullptr) ctx.warnings->push_back(std::move(message));
}

}  // namespace

PluginOr CreateDisaggProfileHandler(const std::string& name, const Params& params, const PluginContext& ctx) {
  DisaggOptions o;
  o.params_path = params.path();
  const bool nested = params.Has("profiles") || params.Has("deciders");
  const bool flat = params.Has("decodeProfile") || params.Has("prefillProfile") || params.Has("encodeProfile") ||
                    params.Has("prefillDeciderPluginName") || params.Has("deciderPluginName") ||
                    params.Has("encodeDeciderPluginName");
  if (nested && flat)
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ": mixes the nested form (profiles, deciders) with the "
                                                   "deprecated flat one (decodeProfile, prefillDeciderPluginName, ...)"));
  if (flat) {
    EPP_RETURN_IF_ERROR(params.CheckKeys({"decodeProfile", "prefillProfile", "encodeProfile", "prefillDeciderPluginName",
                                          "deciderPluginName", "encodeDeciderPluginName", "stageOrder"}));
    EPP_ASSIGN_OR_RETURN(o.decode, OptString(params, "decodeProfile", o.decode));
    EPP_ASSIGN_OR_RETURN(o.prefill, OptString(params, "prefillProfile", o.prefill));
    EPP_ASSIGN_OR_RETURN(o.encode, OptString(params, "encodeProfile", o.encode));
    EPP_ASSIGN_OR_RETURN(std::string legacy, OptString(params, "deciderPluginName", ""));
    EPP_ASSIGN_OR_RETURN(o.prefill_decider, OptString(params, "prefillDeciderPluginName", legacy));
    EPP_ASSIGN_OR_RETURN(o.encode_decider, OptString(params, "encodeDeciderPluginName", ""));
    Warn(ctx, absl::StrCat(params.path(), ": the flat parameters (decodeProfile, prefillDeciderPluginName, ...) are "
                                          "deprecated in llm-d; use profiles.{decode,prefill,encode} and deciders.{prefill,encode}"));
  } else {
    EPP_RETURN_IF_ERROR(params.CheckKeys({"profiles", "deciders", "stageOrder"}));
    if (const Params* profiles = params.Find("profiles"); profiles && !profiles->is_null()) {
      EPP_RETURN_IF_ERROR(profiles->CheckKeys({"decode", "prefill", "encode"}));
      EPP_ASSIGN_OR_RETURN(o.decode, OptString(*profiles, "decode", o.decode));
      EPP_ASSIGN_OR_RETURN(o.prefill, OptString(*profiles, "prefill", o.prefill));
      EPP_ASSIGN_OR_RETURN(o.encode, OptString(*profiles, "encode", o.encode));
    }
    if (const Params* deciders = params.Find("deciders"); deciders && !deciders->is_null()) {
      EPP_RETURN_IF_ERROR(deciders->CheckKeys({"prefill", "encode"}));
      EPP_ASSIGN_OR_RETURN(o.prefill_decider, OptString(*deciders, "prefill", ""));
      EPP_ASSIGN_OR_RETURN(o.encode_decider, OptString(*deciders, "encode", ""));
    }
  }
  EPP_ASSIGN_OR_RETURN(o.order, ParseStageOrder(params));
  if (o.decode.empty()) return absl::InvalidArgumentError(absl::StrCat(params.path(), ".profiles.decode: must not be empty"));
  if (o.order == StageOrder::kPrefillFirst && !o.prefill_decider.empty())
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ": stageOrder prefill-first always runs prefill; it takes no "
                                                   "deciders.prefill ('", o.prefill_decider, "')"));
  return std::make_unique<DisaggProfileHandler>(TN(kDisaggProfileHandlerType, name), std::move(o));
}

PluginOr CreatePdProfileHandler(const std::string& name, const Params& params, const PluginContext& ctx) {
  EPP_RETURN_IF_ERROR(params.CheckKeys({"decodeProfile", "prefillProfile", "deciderPluginName", "primaryPort",
                                        "prefixMatchInfoProducerName", "prefixPluginType", "prefixPluginName", "threshold",
                                        "hashBlockSize"}));
  DisaggOptions o;
  o.params_path = params.path();
  EPP_ASSIGN_OR_RETURN(o.decode, OptString(params, "decodeProfile", o.decode));
  EPP_ASSIGN_OR_RETURN(o.prefill, OptString(params, "prefillProfile", o.prefill));
  o.encode.clear();
  EPP_ASSIGN_OR_RETURN(int64_t primary_port, params.GetInt("primaryPort", 0));
  if (primary_port < 0 || primary_port > 65535)
    return absl::InvalidArgumentError(absl::StrCat(params.path(), ".primaryPort: must be in [0, 65535] (0: off), got ", primary_port));
  o.primary_port = static_cast<int>(primary_port);
  std::string what = absl::StrCat(params.path(), ": pd-profile-handler is deprecated in llm-d; read as disagg-profile-handler");
  if (params.Has("threshold")) {
    // The form before deciders (llm-d-inference-scheduler samples): threshold in characters.
    EPP_ASSIGN_OR_RETURN(int64_t threshold, params.GetInt("threshold", 0));
    if (threshold < 0) return absl::InvalidArgumentError(absl::StrCat(params.path(), ".threshold: must be >= 0, got ", threshold));
    if (params.Has("deciderPluginName"))
      return absl::InvalidArgumentError(absl::StrCat(params.path(), ": give threshold (the old form) or deciderPluginName, not both"));
    o.legacy_threshold_chars = threshold;
    absl::StrAppend(&what, " with its old threshold rule (", threshold == 0 ? "0: prefill always runs" : "uncached characters >= threshold",
                    "; prefix-based-pd-decider's nonCachedTokens is the current form, in tokens, and 0 there means never)");
    if (params.Has("hashBlockSize"))
      absl::StrAppend(&what, "; hashBlockSize is ignored: cached characters come from the prefix producer's block size");
  } else {
    EPP_ASSIGN_OR_RETURN(o.prefill_decider, OptString(params, "deciderPluginName", std::string(kPrefixBasedPdDeciderType)));
    if (params.Has("hashBlockSize"))
      return absl::InvalidArgumentError(absl::StrCat(params.path(), ".hashBlockSize: only meaningful with threshold (the old form)"));
  }
  Warn(ctx, std::move(what));
  return std::make_unique<DisaggProfileHandler>(TN(kPdProfileHandlerType, name), std::move(o));
}

}  // namespace epp::plugins
