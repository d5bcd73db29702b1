#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace bm {

// Why the last copy of a block was lost (schema/messages.capnp LostCause; PROTOCOL.md "Lost
// blocks"). The worker names the cause of the copies it lost itself; the master names the
// causes only it can see (a worker dropped, a worker that came back without the block).
// Values are journaled and sent: append new ones, never renumber.
enum class LostCause : uint8_t {
  kStorageError = 0,     // the store failed to keep it (an I/O or RocksDB error)
  kWorkerDropped = 1,    // its worker stopped heartbeating (died, or was cut off) and was dropped
  kCopyCorrupt = 2,      // its copy failed its checksum (a read, a scrub, a spill's check)
  kDiskFailed = 3,       // the disk holding it failed
  kLostAtStartUp = 4,    // the worker's start-up check (commit journal, table files) lost it
  kWorkerRestarted = 5,  // its worker restarted and no longer had it (a memory block)
};
inline constexpr int kLostCauseCount = 6;

// "worker dropped", "copy corrupt", ...: as bmctl, the status pages and the metrics say it.
inline std::string_view LostCauseName(LostCause cause) {
  switch (cause) {
    case LostCause::kStorageError:
      return "storage error";
    case LostCause::kWorkerDropped:
      return "worker dropped";
    case LostCause::kCopyCorrupt:
      return "copy corrupt";
    case LostCause::kDiskFailed:
      return "disk failed";
    case LostCause::kLostAtStartUp:
      return "lost at start-up";
    case LostCause::kWorkerRestarted:
      return "worker restarted";
  }
  return "storage error";
}

// The metric label: "worker_dropped", "copy_corrupt", ...
inline std::string_view LostCauseLabel(LostCause cause) {
  switch (cause) {
    case LostCause::kStorageError:
      return "storage_error";
    case LostCause::kWorkerDropped:
      return "worker_dropped";
    case LostCause::kCopyCorrupt:
      return "copy_corrupt";
    case LostCause::kDiskFailed:
      return "disk_failed";
    case LostCause::kLostAtStartUp:
      return "lost_at_start_up";
    case LostCause::kWorkerRestarted:
      return "worker_restarted";
  }
  return "storage_error";
}

// nullopt for a value this build does not know (a newer peer's, or a corrupt record).
inline std::optional<LostCause> LostCauseFromNumber(uint64_t value) {
  if (value >= static_cast<uint64_t>(kLostCauseCount)) return std::nullopt;
  return static_cast<LostCause>(value);
}

}  // namespace bm
