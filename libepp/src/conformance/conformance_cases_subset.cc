// Checks: the subset hint. A gateway or an upstream router may narrow the pick to some endpoints
// (envoy.lb.subset_hint/x-gateway-destination-endpoint-subset, Protocol, Endpoint Subset): the
// EPP MUST pick within the hint, whether it arrives as a list or, written by a header-to-metadata
// filter, as one comma-separated string (GIE's lightweight EPP accepts both), and MUST answer 503
// when no endpoint of the hint is eligible rather than fall back to the whole pool.
#include <string>
#include <vector>

#include "conformance/conformance_impl.h"

namespace epp::internal::conformance {

std::vector<ConformanceCase> Suite::SubsetCases() {
  return {
      {{"subset-hint-list", "a subset hint given as a list restricts the pick to its entries",
        "Protocol, Endpoint Subset: envoy.lb.subset_hint/x-gateway-destination-endpoint-subset as a list; the EPP "
        "MUST pick from it"},
       [](Suite& s) { return s.SubsetHint(false); }},
      {{"subset-hint-string", "a subset hint given as one comma-separated string restricts the pick to its entries",
        "Protocol, Endpoint Subset (the same hint written by a header-to-metadata filter as a string; GIE's "
        "lightweight EPP accepts both forms)"},
       [](Suite& s) { return s.SubsetHint(true); }},
      {{"subset-empty-503", "an empty subset hint is answered with ImmediateResponse 503",
        "Protocol, Endpoint Subset: an empty list or no eligible endpoint in it MUST be answered with 503"},
       [](Suite& s) { return s.SubsetEmpty(); }},
      {{"subset-unmatched-503", "a subset hint naming no pool endpoint is answered with ImmediateResponse 503",
        "Protocol, Endpoint Subset: no eligible endpoint among the listed ones MUST be answered with 503"},
       [](Suite& s) { return s.SubsetUnmatched(); }},
  };
}

Outcome Suite::SubsetHint(bool as_string) {
  std::vector<std::vector<std::string>> subsets;
  for (const std::string& e : pool_) subsets.push_back({e});
  subsets.push_back({pool_[1], pool_[0]});
  int n = 0;
  for (const auto& subset : subsets) {
    for (int rep = 0; rep < 3; ++rep, ++n) {
      HttpRequestCapture c = Basic(absl::StrCat("subset probe ", n));
      c.subset = subset;
      c.subset_as_string = as_string;
      RequestAnswer a = Request(c);
      std::string why = CheckPick(a, {subset.begin(), subset.end()});
      if (!why.empty()) return Fail(absl::StrCat("subset ", as_string ? "\"" : "[", absl::StrJoin(subset, ","), as_string ? "\"" : "]", ": ", why));
    }
  }
  return Pass(absl::StrCat(n, " requests, each picked within its subset"));
}

Outcome Suite::SubsetEmpty() {
  HttpRequestCapture c = Basic();
  c.subset = std::vector<std::string>{};
  std::string why = ExpectImmediate(Request(c), 503);
  return why.empty() ? Pass("503") : Fail(why);
}

Outcome Suite::SubsetUnmatched() {
  HttpRequestCapture c = Basic();
  c.subset = std::vector<std::string>{"127.0.0.2:9", "127.0.0.3:9"};
  std::string why = ExpectImmediate(Request(c), 503);
  return why.empty() ? Pass("503 for [127.0.0.2:9, 127.0.0.3:9]") : Fail(why);
}

}  // namespace epp::internal::conformance
