#pragma once

#include <cstdint>

namespace bm {

// A worker's storage use, as the worker measures it and the master and clients see it.
struct WorkerStats {
  uint64_t memory_capacity = 0;
  uint64_t memory_used = 0;
  uint64_t disk_used = 0;
  uint64_t disk_capacity = 0;  // 0 = unlimited
  uint64_t block_count = 0;
  // The disk store is read-only after a storage error (a full disk): no disk block fits.
  bool disk_read_only = false;
  // Of memory_used: bytes readers on the worker's host keep mapped (README "Same-host reads").
  uint64_t memory_pinned = 0;

  bool operator==(const WorkerStats&) const = default;
};

}  // namespace bm
