// Checks: what a pick says. The Protocol's Destination Endpoint section is the heart of the EPP
// contract: the endpoint goes both in the x-gateway-destination-endpoint header and in the
// envoy.lb dynamic metadata (gateways read one or the other), with the same value, formatted as
// ip:port or a comma list with fallbacks after the primary, and, with no subset hint, always an
// endpoint of the pool.
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"

#include "conformance/conformance_impl.h"

namespace epp::internal::conformance {

namespace {

// ip:port, [v6]:port (no spaces, a port in 1..65535).
bool ValidHostPort(std::string_view s) {
  size_t colon = s.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  std::string_view host = s.substr(0, colon), port = s.substr(colon + 1);
  int p = 0;
  if (!absl::SimpleAtoi(absl::string_view(port.data(), port.size()), &p) || p < 1 || p > 65535) return false;
  if (host.front() == '[') return host.back() == ']' && host.size() > 2;
  for (char c : host)
    if (!(absl::ascii_isalnum(c) || c == '.' || c == '-')) return false;
  return true;
}

}  // namespace

std::vector<ConformanceCase> Suite::DestinationCases() {
  return {
      {{"destination-header-and-metadata",
        "a pick sets header x-gateway-destination-endpoint and envoy.lb dynamic metadata with the same value",
        "Protocol, Destination Endpoint: the EPP MUST communicate the endpoint both as the header and as the "
        "envoy.lb/x-gateway-destination-endpoint dynamic metadata, with identical values"},
       [](Suite& s) { return s.DestinationHeaderAndMetadata(); }},
      {{"destination-value-format", "the destination is ip:port or a comma-separated list of distinct ip:port, set once",
        "Protocol, Destination Endpoint and Fallback: the value is <ip:port> or <ip:port>,<ip:port>,... (primary first, "
        "fallbacks after it)"},
       [](Suite& s) { return s.DestinationValueFormat(); }},
      {{"pick-within-pool", "every endpoint named (primary and fallbacks) belongs to the pool",
        "Protocol, Endpoint Subset: without a subset hint the EPP picks from the InferencePool's endpoints"},
       [](Suite& s) { return s.PickWithinPool(); }},
  };
}

Outcome Suite::DestinationHeaderAndMetadata() {
  RequestAnswer a = Request(Basic());
  if (!a.problem.empty()) return Fail(a.problem);
  if (a.immediate) return Fail(absl::StrCat("ImmediateResponse ", a.immediate_status, " (", a.immediate_body, ")"));
  auto d = a.Destination();
  if (!d) return Fail("no x-gateway-destination-endpoint in the request_headers response's header_mutation");
  if (!a.metadata_destination) return Fail(absl::StrCat("header says ", *d, " but dynamic_metadata has no envoy.lb/x-gateway-destination-endpoint"));
  if (*a.metadata_destination != *d)
    return Fail(absl::StrCat("header '", *d, "' differs from envoy.lb metadata '", *a.metadata_destination, "'"));
  return Pass(absl::StrCat("both say ", *d));
}

Outcome Suite::DestinationValueFormat() {
  for (int i = 0; i < 5; ++i) {
    RequestAnswer a = Request(Basic(absl::StrCat("format probe ", i)));
    if (!a.problem.empty()) return Fail(a.problem);
    auto v = a.Header(kDestinationEndpointHeader);
    if (v.empty()) return Fail("no destination header");
    if (v.size() > 1) return Fail(absl::StrCat("x-gateway-destination-endpoint set ", v.size(), " times"));
    std::set<std::string> seen;
    for (absl::string_view e : absl::StrSplit(v[0], ',')) {
      if (!ValidHostPort(std::string_view(e.data(), e.size()))) return Fail(absl::StrCat("'", v[0], "': entry '", e, "' is not ip:port (no spaces allowed)"));
      if (!seen.insert(std::string(e)).second) return Fail(absl::StrCat("'", v[0], "': ", e, " is listed twice"));
    }
  }
  return Pass("5 picks, each ip:port[,ip:port...]");
}

Outcome Suite::PickWithinPool() {
  std::map<std::string, int> counts;
  for (int i = 0; i < 30; ++i) {
    RequestAnswer a = Request(Basic(absl::StrCat("pool probe ", i, ": tell me about the number ", i * 7919)));
    std::string why = CheckPick(a, pool_set_);
    if (!why.empty()) return Fail(absl::StrCat("request ", i + 1, ": ", why));
    counts[Primary(*a.Destination())]++;
  }
  std::vector<std::string> parts;
  for (const auto& [k, n] : counts) parts.push_back(absl::StrCat(k, " x", n));
  return Pass(absl::StrCat("30 picks in the pool: ", absl::StrJoin(parts, ", ")));
}

}  // namespace epp::internal::conformance
