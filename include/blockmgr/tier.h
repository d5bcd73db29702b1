#pragma once

#include <cstdint>
#include <string_view>

namespace bm {

// Where a worker holds a block.
enum class Tier { kMemory, kDisk };

inline std::string_view TierName(Tier tier) { return tier == Tier::kMemory ? "memory" : "disk"; }

// Bytes on each tier.
struct TierBytes {
  uint64_t memory = 0;
  uint64_t disk = 0;
  uint64_t& on(Tier tier) { return tier == Tier::kMemory ? memory : disk; }
  uint64_t on(Tier tier) const { return tier == Tier::kMemory ? memory : disk; }
  bool operator==(const TierBytes&) const = default;
};

}  // namespace bm
