#pragma once

#include <cstdint>
#include <vector>

#include "blockmgr/chunk.h"
#include "blockmgr/storage_level.h"
#include "blockmgr/tier.h"

namespace bm {

// A range of a stored block, ready to send.
struct BlockRead {
  uint64_t total_size;
  uint64_t offset;
  uint64_t generation;
  Tier tier;
  StorageLevel level;
  std::vector<ChunkPtr> chunks;  // the bytes of the range, in order; no copies for memory blocks
  uint64_t version = 0;          // BlockStatus::version
  // Stored digests of the digest units the range overlaps, the first being unit
  // offset / kDigestUnitBytes; empty for a block stored without them.
  std::vector<uint64_t> unit_digests{};
};

}  // namespace bm
