#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "common/block_id.h"
#include "worker/block_store.h"
#include "worker/disk_index.h"

namespace bm::disk {

// What comparing the commit journal with what the database recovered decided.
struct JournalVerdict {
  // Blocks the journal says were removed (while the store was read-only, before a restart)
  // that the index still holds: to delete.
  std::vector<BlockId> removed_earlier;
  // Committed versions the store did not recover, with the reason, in id order.
  std::vector<LostBlock> lost;
  // Of the lost, those recovered only as an older version: to delete rather than serve.
  std::vector<BlockId> stale;
  // Of the lost, those whose records the start-up scan could not read (corrupt on disk).
  uint64_t corrupt = 0;
};

// Compares `committed` (the journal's committed generation of each block, or what the store
// served before a reopen) and `removed` (the journal's removals) with `index`, the versions
// recovered; `unreadable_generations` are the ranges the start-up scan could not read
// (DiskScan). A pure function: the disk store applies the verdict (on the storage thread).
JournalVerdict CheckJournal(
    const std::map<BlockId, uint64_t>& committed, const std::map<BlockId, uint64_t>& removed,
    const DiskIndex& index,
    const std::vector<std::pair<uint64_t, uint64_t>>& unreadable_generations);

}  // namespace bm::disk
