#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace bm {

// A disk of a worker: ok, read-only after a storage error (full: it takes no new block until
// space is freed), or failed (an I/O error or a hang; its blocks were reported lost).
enum class DiskState { kOk, kReadOnly, kFailed };
inline const char* DiskStateName(DiskState state) {
  switch (state) {
    case DiskState::kReadOnly:
      return "read-only";
    case DiskState::kFailed:
      return "failed";
    case DiskState::kOk:
      break;
  }
  return "ok";
}

// Disks a reader of a worker's stats keeps at most (more from a sender are dropped).
inline constexpr size_t kMaxDisksShown = 256;

// One of a worker's disks (`--disk-dir`), as its stats show it.
struct DiskStats {
  std::string path;
  uint64_t used = 0;
  uint64_t capacity = 0;  // what used could reach now (0 once failed)
  uint64_t limit = 0;     // as given; 0 = as much as the filesystem has
  DiskState state = DiskState::kOk;
  std::string reason;  // why it failed ("" otherwise)

  bool operator==(const DiskStats&) const = default;
};

// A worker's storage use, as the worker measures it and the master and clients see it.
struct WorkerStats {
  uint64_t memory_capacity = 0;
  uint64_t memory_used = 0;
  uint64_t disk_used = 0;
  uint64_t disk_capacity = 0;  // 0 = unlimited
  uint64_t block_count = 0;
  // The disk store is read-only after a storage error (a full disk): no disk block fits.
  bool disk_read_only = false;
  // Of memory_used: bytes readers on the worker's host keep mapped (docs/storage.md "Same-host
  // reads").
  uint64_t memory_pinned = 0;
  // Each disk, in the order of the worker's --disk-dir flags; disk_used and disk_capacity above
  // sum the disks that have not failed. Empty from a worker that predates several disks.
  std::vector<DiskStats> disks{};

  bool operator==(const WorkerStats&) const = default;
};

}  // namespace bm
