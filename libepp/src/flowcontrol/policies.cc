// The helpers of policies.h shared by the flow-control layer and the policy plugins.
#include "flowcontrol/policies.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <vector>

namespace epp::flowcontrol {
namespace {

std::string_view TrimAsciiSpace(std::string_view s) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// The reference bounds the value so that milliseconds converted to nanoseconds fit an int64.
constexpr int64_t kMaxSloMs = std::numeric_limits<int64_t>::max() / 1'000'000;

}  // namespace

namespace {

int64_t SloHeaderMs(const InferenceRequest& request, std::string_view name, std::string_view old_name) {
  // The current spelling wins whenever it is present, even empty (then the request has no SLO).
  std::optional<std::string_view> value = request.header(name);
  if (!value) value = request.header(old_name);
  if (!value) return -1;
  std::string_view text = TrimAsciiSpace(*value);
  // Go's ParseInt takes one optional sign; from_chars takes only '-'.
  if (text.size() > 1 && text.front() == '+' && text[1] != '-') text.remove_prefix(1);
  int64_t ms = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), ms);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || ms < 0 || ms > kMaxSloMs) return -1;
  return ms;
}

}  // namespace

int64_t SloTtftMs(const InferenceRequest& request) { return SloHeaderMs(request, kSloTtftHeader, kOldSloTtftHeader); }
int64_t SloTpotMs(const InferenceRequest& request) { return SloHeaderMs(request, kSloTpotHeader, kOldSloTpotHeader); }

double StageSaturation(const SaturationDetector& detector, const SchedulingContext& ctx, Candidates candidates,
                       double* prefill_out, double* decode_out) {
  std::vector<const Endpoint*> prefill, decode;
  for (const Endpoint* e : candidates) {
    auto it = e->labels.find("llm-d.ai/role");
    const std::string_view role = it == e->labels.end() ? std::string_view() : std::string_view(it->second);
    if (role == "prefill" || role == "encode-prefill") {
      prefill.push_back(e);
    } else if (role.empty() || role == "decode") {
      decode.push_back(e);
    } else if (role == "prefill-decode" || role == "both" || role == "encode-prefill-decode") {
      prefill.push_back(e);
      decode.push_back(e);
    }
    // Encode-only pods take no prefill or decode traffic, and pods of an unknown role take none at
    // all (every role filter rejects them): counting them would dilute the stage signal.
  }
  const double p = prefill.empty() ? -1 : detector.Saturation(ctx, prefill);
  const double d = decode.empty() ? -1 : detector.Saturation(ctx, decode);
  if (prefill_out != nullptr) *prefill_out = p;
  if (decode_out != nullptr) *decode_out = d;
  const double saturation = std::max(p, d);
  return saturation < 0 ? detector.Saturation(ctx, candidates) : saturation;
}

}  // namespace epp::flowcontrol
