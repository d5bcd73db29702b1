#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "blockmgr/block_id.h"
#include "worker/block_store.h"
#include "worker/disk/disk_index.h"

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
  // Of the lost, those whose records the start-up scan could not read, or were in a table file
  // set aside (corrupt on disk).
  uint64_t corrupt = 0;
};

// Compares `committed` (the journal's committed generation of each block, or what the store
// served before a reopen) and `removed` (the journal's removals) with `index`, the versions
// recovered; `unreadable_generations` are the ranges the start-up scan could not read
// (DiskScan). `set_aside_tables` describes the table files the open set aside as unreadable
// ("index table 000012.sst was damaged (...)", disk_repair.h), empty when none: the versions
// missing were lost with them, not with the write-ahead log. A pure function: the disk store
// applies the verdict (on the storage thread).
JournalVerdict CheckJournal(const std::map<BlockId, uint64_t>& committed,
                            const std::map<BlockId, uint64_t>& removed, const DiskIndex& index,
                            const std::vector<UnreadableGenerations>& unreadable_generations,
                            const std::string& set_aside_tables = "");

}  // namespace bm::disk
