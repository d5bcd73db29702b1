#pragma once

#include <cstdint>
#include <vector>

#include "client/types.h"
#include "common/storage_level.h"

namespace bm {

// Chooses where a new block of `size` bytes at `level` should go, as an ordered list of
// candidates: the client tries the first and moves on to the next when a worker is unavailable
// or turns out to be full (the stats the master reports lag behind the workers a little).
//
//   1. Levels using memory: the workers whose free memory (capacity - used) holds the block,
//      most free memory first.
//   2. Then, for levels using disk (and for DISK_ONLY, only these): the remaining workers with
//      room on disk (disk capacity 0 = unlimited), least disk used first.
//   3. MEMORY_ONLY blocks never go to disk: the remaining workers whose whole memory could hold
//      the block (they would evict least recently used blocks to make room), most free memory
//      first.
//
// Workers that cannot hold the block at all are left out, so the list may be empty. Ties are
// broken round-robin: among equal workers the one at position `round_robin % n` of `workers`
// (and those after it, wrapping around) comes first, so a caller incrementing `round_robin`
// for every put spreads consecutive puts over identical workers. Pure; `workers` is usually
// the master's list, sorted by id.
std::vector<WorkerInfo> ChooseWorkers(const std::vector<WorkerInfo>& workers, uint64_t size,
                                      StorageLevel level, uint64_t round_robin);

}  // namespace bm
