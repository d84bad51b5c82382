#include "common/container_memory.h"

#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace epp::internal {
namespace {

std::optional<std::string> ReadLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return std::string(absl::StripAsciiWhitespace(line));
}

}  // namespace

std::optional<uint64_t> ContainerMemoryLimit(std::string_view cgroup_root) {
  const std::string root(cgroup_root);
  uint64_t bytes = 0;
  if (std::optional<std::string> v2 = ReadLine(root + "/memory.max")) {
    if (*v2 == "max" || !absl::SimpleAtoi(*v2, &bytes) || bytes == 0) return std::nullopt;
    return bytes;
  }
  if (std::optional<std::string> v1 = ReadLine(root + "/memory/memory.limit_in_bytes")) {
    // v1 says "no limit" with a huge number (LONG_MAX rounded down to a page).
    if (!absl::SimpleAtoi(*v1, &bytes) || bytes == 0 || bytes >= (uint64_t{1} << 60)) return std::nullopt;
    return bytes;
  }
  return std::nullopt;
}

std::string IndexBoundWarning(std::string_view where, uint64_t max_blocks, uint64_t bytes_per_block,
                              std::optional<uint64_t> limit) {
  if (!limit || bytes_per_block == 0) return "";
  const uint64_t need = max_blocks * bytes_per_block;
  if (need <= *limit / 2) return "";
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  return absl::StrCat(std::string(where), ": ", max_blocks, " blocks may take about ", need / kMiB, " MiB (about ",
                      bytes_per_block, " bytes a block), more than half of this container's memory limit (",
                      *limit / kMiB, " MiB); set it to at most ", *limit / 4 / bytes_per_block,
                      " to keep the index within a quarter of it");
}

}  // namespace epp::internal
