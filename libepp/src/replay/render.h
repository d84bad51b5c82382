// Prompt rendering for replay (private). A segment's text is a deterministic character stream
// seeded by its id; a segment of T tokens is the first T * kCharsPerToken characters of it, so a
// shorter rendering is always a prefix of a longer one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "epp/tools/replay.h"

namespace epp::replay_internal {

// LoadOpenAITrace, or with `require_arrival` false a trace whose lines may lack an arrival time:
// each request's arrival_us is then its line number (file order), for AssignArrivals to replace.
absl::StatusOr<std::vector<ReplayRequest>> LoadOpenAITraceLines(const std::string& path, double time_scale,
                                                                bool require_arrival);

// Writes the first `chars` characters of segment `id`'s stream to `out`.
void RenderSegment(uint64_t id, size_t chars, char* out);

// RenderReplayPrompt with a cache of rendered segments: system prompts, Mooncake blocks and
// conversation turns recur across requests (and across policies), so most of a prompt is
// copied rather than generated. Not thread-safe.
// p50/p90/p99 (interpolated between nearest ranks) and mean of `v`, sorting it in place; zeros
// when empty.
Percentiles Summarize(std::vector<double>& v);

// A policy's TTFT over the bound at p50 / p90 / p99, as the text and HTML reports show it:
// "1.31/1.67/2.35x", or "-" when the trace has no bound.
std::string RatioToBound(const Percentiles& over_bound);

class PromptRenderer {
 public:
  // The prompt of `request`; valid until the next call.
  std::string_view Render(const ReplayRequest& request);

 private:
  static constexpr size_t kMaxCachedBytes = size_t{256} << 20;  // then the cache starts over
  std::string buf_;
  absl::flat_hash_map<uint64_t, std::string> segments_;  // id -> the longest rendering so far
  size_t cached_bytes_ = 0;
};

}  // namespace epp::replay_internal
