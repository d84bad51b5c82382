// Private to libepp: the memory limit of the container (cgroup) this process runs in, so that
// bounds set in entries (the precise prefix index's block count) can be compared with it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace epp::internal {

// The cgroup memory limit in bytes: cgroup v2's memory.max under `cgroup_root`, else v1's
// memory/memory.limit_in_bytes. nullopt when neither is readable or there is no limit ("max", or
// v1's "unlimited" value of 2^63 rounded to pages).
std::optional<uint64_t> ContainerMemoryLimit(std::string_view cgroup_root = "/sys/fs/cgroup");

// A warning when an index of `max_blocks` blocks at about `bytes_per_block` each could take more
// than half of `limit`; empty when it fits or there is no limit. `where` names the setting.
std::string IndexBoundWarning(std::string_view where, uint64_t max_blocks, uint64_t bytes_per_block,
                              std::optional<uint64_t> limit);

}  // namespace epp::internal
