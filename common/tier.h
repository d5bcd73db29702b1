#pragma once

#include <string_view>

namespace bm {

// Where a worker holds a block.
enum class Tier { kMemory, kDisk };

inline std::string_view TierName(Tier tier) { return tier == Tier::kMemory ? "memory" : "disk"; }

}  // namespace bm
