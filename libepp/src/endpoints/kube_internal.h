// What kube.cc shares with the watches (kube_watch.cc, informer.cc): Pod parsing over an already
// parsed object, so that a watch event is read by the same code as a Pod of a list.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "epp/runtime/kube.h"

namespace epp::internal {

// One Pod object; `at` is its JSON path for messages ("items[3]", "object"), `source` the request.
// A missing namespace is `default_ns`. kInvalidArgument naming the field otherwise.
absl::StatusOr<PodInfo> ParsePodJson(const nlohmann::json& pod, const std::string& at, std::string_view source,
                                     std::string_view default_ns);

// Whether the Pod is an endpoint of `selector` (Ready, with an IP, not being deleted, selected).
bool PodCounts(const PodInfo& pod, const LabelSelector& selector);

// Standalone mode's selector (--endpoint-selector) and ports, checked: a non-empty selector and 1
// to 8 target ports. kInvalidArgument naming what is wrong ("pod discovery: ...").
absl::StatusOr<LabelSelector> StandaloneSelector(const std::string& selector, const std::vector<int>& target_ports);

}  // namespace epp::internal
