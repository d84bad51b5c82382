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
  std::vector<std::string> PickProfiles(const SchedulingContext&, std::span<const std::string> profiles,
                                        std::span<const std::string> done) const override {
    if (!done.empty()) return {};
    return std::vector<std::string>(profiles.begin(), profiles.end());
  }
  absl::StatusOr<std::string> PrimaryProfile(std::span<const std::string> ran) const override {
    if (ran.size() != 1)
      return absl::InvalidArgumentError(
          absl::StrCat("single-profile-handler needs exactly one profile, got ", ran.size()));
    return ran.front();
  }
};

}  // namespace

PluginOr CreateSingleProfileHandler(const std::string& name, const Params& params, const PluginContext&) {
  EPP_RETURN_IF_ERROR(params.CheckKeys({}));
  return std::make_unique<SingleProfileHandler>(TN(kSingleProfileHandlerType, name));
}

}  // namespace epp::plugins
