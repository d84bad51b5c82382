// single-profile-handler: runs the one profile and makes it primary (GIE's default handler).
#include "absl/strings/str_cat.h"
#include "epp/scheduling.h"
#include "plugins/profile/profile.h"

namespace epp::plugins {
namespace {

class SingleProfileHandler : public Plugin, public ProfileHandler {
 public:
  using Plugin::Plugin;
  const ProfileHandler* AsProfileHandler() const override { return this; }
  ProfileStep PickProfiles(const SchedulingContext&, std::span<const std::string> profiles,
                           std::span<const ProfileRun> results) const override {
    ProfileStep step;
    if (!results.empty()) return step;
    for (const std::string& p : profiles) step.run.push_back({p, ""});
    return step;
  }
  absl::StatusOr<ProfilesOutcome> ProcessResults(const SchedulingContext&, std::span<const ProfileRun> results) const override {
    if (results.size() != 1)
      return absl::FailedPreconditionError(absl::StrCat("single-profile-handler needs exactly one profile, got ", results.size()));
    return ProfilesOutcome{results.front().profile, {}, ""};
  }
};

}  // namespace

PluginOr CreateSingleProfileHandler(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(ReadNoParams(params));
  return std::make_unique<SingleProfileHandler>(TN(kSingleProfileHandlerType, name));
}

}  // namespace epp::plugins
