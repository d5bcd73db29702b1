#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "blockmgr/chunk.h"
#include "blockmgr/status.h"
#include "common/net/local_socket.h"  // OwnedFd

namespace bm {

// One piece as a partition file keeps it: a fixed header, then the piece's bytes.
struct ShuffleRecord {
  uint32_t map = 0;
  uint32_t attempt = 0;
  uint32_t sequence = 0;
  uint64_t digest = 0;  // XXH3 of the bytes
  std::span<const std::byte> bytes;
};

// A piece found in a partition file at start-up: where its bytes lie in the file.
struct ShuffleFileRecord {
  uint32_t map = 0;
  uint32_t attempt = 0;
  uint32_t sequence = 0;
  uint32_t length = 0;
  uint64_t digest = 0;
  uint64_t offset = 0;  // of the bytes, past the header
};

// What a disk kept of a shuffle across a restart.
struct LoadedShufflePartition {
  uint32_t disk = 0;
  uint32_t partition = 0;
  std::vector<ShuffleFileRecord> records{};
  uint64_t file_bytes = 0;  // the end of the last whole record
};
struct LoadedShuffle {
  uint64_t id = 0;
  uint32_t maps = 0;
  std::string owner{};
  std::vector<LoadedShufflePartition> partitions{};
};

// The shuffle partitions a worker keeps on its disks (README "Shuffles"): under each disk
// directory, `shuffle/<id>/` holds a `meta` file (the shuffle's map count and owner) and one
// append-only file per partition, `<partition>.data`, of records (a 32-byte header: magic, map,
// attempt, sequence, length, digest; then the bytes). Records are written at offsets the
// caller chose, so a write that failed half-way is overwritten by the next one, and a file cut
// short by a crash loses only its torn last record (Load finds it by its header or digest and
// truncates it).
//
// The methods that touch files block on the disk: they run on the shuffle store's job thread,
// or before the worker serves (Load). Thread-safe: the object is constant.
class ShuffleFiles {
 public:
  static constexpr size_t kRecordHeaderBytes = 32;

  // One directory per disk; `shuffle/` is made in each when first needed.
  explicit ShuffleFiles(std::vector<std::string> disk_dirs);

  uint32_t disks() const { return static_cast<uint32_t>(roots_.size()); }
  std::string PartitionPath(uint32_t disk, uint64_t shuffle_id, uint32_t partition) const;

  // Writes `records` at `offset` of the partition's file (creating it, and the shuffle's meta
  // file, when missing). kOutOfSpace when the disk is full, kInternal naming the errno for
  // other failures.
  Status Append(uint32_t disk, uint64_t shuffle_id, uint32_t partition, uint32_t maps,
                const std::string& owner, uint64_t offset,
                std::span<const ShuffleRecord> records) const;
  // The partition's file opened read-only (for a reader on this host to map: written records
  // never change). kNotFound when it is gone.
  Result<OwnedFd> OpenForReading(uint32_t disk, uint64_t shuffle_id, uint32_t partition) const;
  // The bytes [offset, offset + length) of the partition's file, in one chunk.
  Result<ChunkPtr> Read(uint32_t disk, uint64_t shuffle_id, uint32_t partition, uint64_t offset,
                        uint64_t length) const;
  // Best effort (a missing file is already removed): logs what it cannot remove.
  void RemovePartition(uint32_t disk, uint64_t shuffle_id, uint32_t partition) const;
  void RemoveShuffle(uint64_t shuffle_id) const;  // from every disk

  // Everything the disks hold, torn last records truncated away; a shuffle directory without
  // a readable meta file is removed. A disk whose directory cannot be read is skipped (logged).
  std::vector<LoadedShuffle> Load() const;

 private:
  std::string ShuffleDir(uint32_t disk, uint64_t shuffle_id) const;
  Status WriteMeta(uint32_t disk, uint64_t shuffle_id, uint32_t maps,
                   const std::string& owner) const;
  // The records of one file, truncating it after the last whole one.
  LoadedShufflePartition ScanPartition(uint32_t disk, uint32_t partition,
                                       const std::string& path) const;

  const std::vector<std::string> roots_;  // <disk>/shuffle
};

}  // namespace bm
