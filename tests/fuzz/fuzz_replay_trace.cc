// Replay traces (`eppctl replay --trace`, pyepp.replay) through LoadMooncakeTrace,
// LoadOpenAITrace, LoadAzureTrace, LoadBurstGptTrace and LoadReplayTrace (format detection). Both loaders read a path, so the input is written to a memory file
// (memfd_create) read back through /proc/self/fd; an optional first line "scale=X" sets the
// time scale. Small traces are also rendered and analysed as replay does. Invariants: requests
// come sorted by arrival, with arrival >= 0 and at least one prompt and one output token.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "epp/tools/replay.h"
#include "fuzz_util.h"

namespace {

// The path of a memory file holding `text` (the same file, rewritten, for every input).
const std::string& WriteTrace(std::string_view text) {
  static const int fd = ::memfd_create("epp-fuzz-trace", 0);
  static const std::string* const kPath = new std::string("/proc/self/fd/" + std::to_string(fd));
  EPP_FUZZ_CHECK(fd >= 0, "memfd_create failed");
  EPP_FUZZ_CHECK(::ftruncate(fd, 0) == 0, "ftruncate failed");
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::pwrite(fd, text.data() + done, text.size() - done, static_cast<off_t>(done));
    EPP_FUZZ_CHECK(n > 0, "pwrite failed");
    done += static_cast<size_t>(n);
  }
  return *kPath;
}

void Check(const absl::StatusOr<std::vector<epp::ReplayRequest>>& trace, const char* loader) {
  if (!trace.ok()) {
    EPP_FUZZ_CHECK(trace.status().code() == absl::StatusCode::kInvalidArgument, trace.status().ToString());
    return;
  }
  int64_t tokens = 0;
  for (size_t i = 0; i < trace->size(); ++i) {
    const epp::ReplayRequest& r = (*trace)[i];
    EPP_FUZZ_CHECK(r.arrival_us >= 0, loader);
    if (i > 0) EPP_FUZZ_CHECK(r.arrival_us >= (*trace)[i - 1].arrival_us, loader);
    EPP_FUZZ_CHECK(r.prompt_tokens >= 1 && r.output_tokens >= 1, loader);
    for (const epp::ReplaySegment& s : r.segments) EPP_FUZZ_CHECK(s.tokens >= 0, loader);
    tokens += r.text.empty() ? r.prompt_tokens : 0;
  }
  // Rendering costs 4 bytes per token: only small traces.
  if (tokens > (int64_t{1} << 16)) return;
  for (const epp::ReplayRequest& r : *trace) (void)epp::RenderReplayPrompt(r);
  (void)epp::AnalyzeTrace(*trace, /*pooled_capacity_blocks=*/64, 16, {epp::SimParams()});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = epp::fuzz::Text(data, size);
  double scale = 1.0;
  if (text.substr(0, 6) == "scale=") {
    auto [line, rest] = epp::fuzz::FirstLine(text);
    line.remove_prefix(6);
    if (!absl::SimpleAtod(absl::string_view(line.data(), line.size()), &scale)) scale = 1.0;
    text = rest;
  }
  const std::string& path = WriteTrace(text);
  Check(epp::LoadMooncakeTrace(path, scale), "mooncake");
  Check(epp::LoadOpenAITrace(path, scale), "openai");
  Check(epp::LoadAzureTrace(path, scale), "azure");
  Check(epp::LoadBurstGptTrace(path, scale), "burstgpt");
  Check(epp::LoadReplayTrace(path, epp::TraceFormat::kAuto, scale), "auto");
  return 0;
}
