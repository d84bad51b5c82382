// llm-d's smaller profile handlers and the deprecated header plugins around P/D:
//   header-profile-handler         runs the one profile a request header names (llm-d's
//                                  coordinator calls the EPP once per stage this way).
//   data-parallel-profile-handler  (deprecated in llm-d) one profile; the pick goes to the chosen
//                                  pod's host at primaryPort, where llm-d's sidecar forwards to
//                                  the rank named by x-data-parallel-host-port.
//   disagg-headers-handler, prefill-header-handler  (deprecated in llm-d) set x-prefiller-host-port /
//                                  x-encoder-hosts-ports after scheduling; in epp the P/D profile
//                                  handler sets them itself, so these are accepted and do nothing.
#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "epp/scheduling.h"
#include "plugins/profile/profile.h"

namespace epp::plugins {
namespace {

struct HeaderHandlerOptions {
  std::string header = "EPP-Profile";
  std::string fallback = "decode";
};

const ParamTable<HeaderHandlerOptions>& HeaderHandlerTable() {
  static const auto* t = &(*new ParamTable<HeaderHandlerOptions>())
                              .String("headerName", &HeaderHandlerOptions::header,
                                      "the request header naming the profile to run (compared in lower case)")
                              .String("defaultProfile", &HeaderHandlerOptions::fallback,
                                      "the profile run when the header is absent");
  return *t;
}

struct DataParallelOptions {
  int primary_port = 8000;
};

const ParamTable<DataParallelOptions>& DataParallelTable() {
  static const auto* t = &(*new ParamTable<DataParallelOptions>())
                              .Int("primaryPort", &DataParallelOptions::primary_port, Range::Closed(1, 65535),
                                   "the port the pick goes to; the rank's own port travels in a header");
  return *t;
}

struct DisaggHeadersOptions {
  std::string prefill = "prefill";
  std::string encode = "encode";
};

const ParamTable<DisaggHeadersOptions>& DisaggHeadersTable() {
  static const auto* t =
      &(*new ParamTable<DisaggHeadersOptions>())
           .String("prefillProfile", &DisaggHeadersOptions::prefill, "the prefill profile (kept; the plugin does nothing)")
           .String("encodeProfile", &DisaggHeadersOptions::encode, "the encode profile (kept; the plugin does nothing)");
  return *t;
}

class HeaderProfileHandler : public Plugin, public ProfileHandler {
 public:
  HeaderProfileHandler(TypedName tn, std::string header, std::string fallback)
      : Plugin(std::move(tn)), header_(std::move(header)), default_(std::move(fallback)) {}
  const ProfileHandler* AsProfileHandler() const override { return this; }
  Params EffectiveParams() const override { return HeaderHandlerTable().Effective(HeaderHandlerOptions{header_, default_}); }

  ProfileStep PickProfiles(const SchedulingContext& ctx, std::span<const std::string> profiles,
                           std::span<const ProfileRun> results) const override {
    ProfileStep step;
    if (!results.empty() || profiles.empty()) return step;
    if (profiles.size() == 1) {  // as in llm-d: the only profile runs whatever the header says
      step.run.push_back({profiles.front(), "the only profile"});
      return step;
    }
    const auto [wanted, why] = Wanted(ctx);
    if (std::find(profiles.begin(), profiles.end(), wanted) != profiles.end()) step.run.push_back({wanted, why});
    return step;  // no such profile: ProcessResults says so
  }

  absl::StatusOr<ProfilesOutcome> ProcessResults(const SchedulingContext& ctx, std::span<const ProfileRun> results) const override {
    if (results.empty()) {
      const auto [wanted, why] = Wanted(ctx);
      if (wanted == default_ && !(ctx.request && ctx.request->header(header_)))  // the config's mistake, not the client's
        return absl::FailedPreconditionError(absl::StrCat("plugin '", name(), "' (", type(), "): defaultProfile '", default_,
                                                          "' is not a scheduling profile"));
      return absl::InvalidArgumentError(absl::StrCat("plugin '", name(), "' (", type(), "): ", why,
                                                     ", and no scheduling profile is named '", wanted, "'"));
    }
    if (results.size() != 1)
      return absl::FailedPreconditionError(absl::StrCat(type(), " runs one profile, got ", results.size()));
    return ProfilesOutcome{results.front().profile, {}, results.front().reason};
  }

 private:
  // The profile the request asks for, and how it asked.
  std::pair<std::string, std::string> Wanted(const SchedulingContext& ctx) const {
    std::optional<std::string_view> v = ctx.request ? ctx.request->header(header_) : std::nullopt;
    const std::string value =
        v ? std::string(absl::StripAsciiWhitespace(absl::string_view(v->data(), v->size()))) : std::string();
    if (value.empty()) return {default_, absl::StrCat("no ", header_, " header: defaultProfile '", default_, "'")};
    return {value, absl::StrCat("header ", header_, ": ", value)};
  }

  std::string header_, default_;
};

class DataParallelProfileHandler : public Plugin, public ProfileHandler {
 public:
  DataParallelProfileHandler(TypedName tn, int primary_port) : Plugin(std::move(tn)), primary_port_(primary_port) {}
  const ProfileHandler* AsProfileHandler() const override { return this; }
  std::vector<std::string> OwnedHeaders() const override { return {std::string(kDataParallelHostPortHeader)}; }
  Params EffectiveParams() const override { return DataParallelTable().Effective(DataParallelOptions{primary_port_}); }
  ProfileStep PickProfiles(const SchedulingContext&, std::span<const std::string> profiles,
                           std::span<const ProfileRun> results) const override {
    ProfileStep step;
    if (results.empty() && profiles.size() == 1) step.run.push_back({profiles.front(), ""});
    return step;
  }
  absl::StatusOr<ProfilesOutcome> ProcessResults(const SchedulingContext&, std::span<const ProfileRun> results) const override {
    if (results.size() != 1)
      return absl::FailedPreconditionError(
          absl::StrCat(type(), " needs exactly one scheduling profile (llm-d's rule), got ", results.size()));
    ProfilesOutcome out{results.front().profile, {}, ""};
    if (!results.front().picked.empty()) {
      out.headers.emplace_back(kDataParallelHostPortHeader, results.front().picked.front()->address);
      out.destination_port = primary_port_;
      out.reason = absl::StrCat("rank ", results.front().picked.front()->address, " via its sidecar at port ", primary_port_);
    }
    return out;
  }

 private:
  int primary_port_;
};

}  // namespace

PluginOr CreateHeaderProfileHandler(const std::string& name, const Params& params, const PluginContext&) {
  EPP_ASSIGN_OR_RETURN(HeaderHandlerOptions o, HeaderHandlerTable().Read(params));
  std::string header = absl::AsciiStrToLower(absl::StripAsciiWhitespace(o.header));
  std::string fallback = std::string(absl::StripAsciiWhitespace(o.fallback));
  if (header.empty()) return absl::InvalidArgumentError(absl::StrCat(params.path(), ".headerName: must not be empty"));
  return std::make_unique<HeaderProfileHandler>(TN(kHeaderProfileHandlerType, name), std::move(header), std::move(fallback));
}

PluginOr CreateDataParallelProfileHandler(const std::string& name, const Params& params, const PluginContext& ctx) {
  EPP_ASSIGN_OR_RETURN(DataParallelOptions o, DataParallelTable().Read(params));
  if (ctx.warnings)
    ctx.warnings->push_back(absl::StrCat("plugin '", name, "' (", std::string(kDataParallelProfileHandlerType),
                                         "): deprecated in llm-d (single-profile-handler with Istio >= 1.28.1 reaches the "
                                         "ranks directly)"));
  return std::make_unique<DataParallelProfileHandler>(TN(kDataParallelProfileHandlerType, name), o.primary_port);
}

PluginOr CreateDisaggHeadersHandler(const std::string& name, const Params& params, const PluginContext& ctx) {
  EPP_ASSIGN_OR_RETURN(DisaggHeadersOptions o, DisaggHeadersTable().Read(params));
  if (ctx.warnings)
    ctx.warnings->push_back(absl::StrCat("plugin '", name, "' (", std::string(kDisaggHeadersHandlerType),
                                         "): deprecated in llm-d; epp's disagg-profile-handler sets ",
                                         std::string(kPrefillerHostPortHeader), " and ", std::string(kEncoderHostsPortsHeader),
                                         " itself, so this plugin does nothing"));
  return std::make_unique<ParamsOnlyPlugin>(TN(kDisaggHeadersHandlerType, name), DisaggHeadersTable().Effective(o));
}

PluginSchema HeaderProfileHandlerSchema() { return HeaderHandlerTable().Schema(); }
PluginSchema DataParallelProfileHandlerSchema() { return DataParallelTable().Schema(); }
PluginSchema DisaggHeadersHandlerSchema() { return DisaggHeadersTable().Schema(); }

}  // namespace epp::plugins
