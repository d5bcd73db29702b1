#pragma once

#include <cstdint>

#include "blockmgr/block_id.h"
#include "blockmgr/storage_level.h"
#include "blockmgr/tier.h"

namespace bm {

// A block as this worker holds it.
struct BlockStatus {
  BlockId id;
  StorageLevel level;
  Tier tier;
  uint64_t size;
  // Which put wrote it (the master's version token, schema BlockStatus.version); 0 = unknown.
  uint64_t version = 0;
  // The block's digest (BlockDigestOf its unit digests, common/core/digest.h), computed once when
  // the block was stored or loaded; 0 = stored without digests.
  uint64_t digest = 0;
};

// One change to report to the master: the block is now held as `status`, or it is gone.
struct BlockStatusChange {
  BlockStatus status;
  bool removed;
  // A put committed this version just now: it replaces other versions cluster-wide.
  bool fresh = false;
  // The compute lease the put stored it under (PutVersion::lease); 0 = none.
  uint64_t lease = 0;
  // The quota reservation of the put (PutVersion::reservation); 0 = none.
  uint64_t reservation = 0;
};

}  // namespace bm
