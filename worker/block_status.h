#pragma once

#include <cstdint>

#include "common/block_id.h"
#include "common/storage_level.h"
#include "common/tier.h"

namespace bm {

// A block as this worker holds it.
struct BlockStatus {
  BlockId id;
  StorageLevel level;
  Tier tier;
  uint64_t size;
};

// One change to report to the master: the block is now held as `status`, or it is gone.
struct BlockStatusChange {
  BlockStatus status;
  bool removed;
};

}  // namespace bm
