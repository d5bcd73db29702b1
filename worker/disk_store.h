#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/block_id.h"
#include "common/chunk.h"
#include "common/status.h"
#include "common/storage_level.h"
#include "worker/block_status.h"

namespace rocksdb {
class DB;
}

namespace bm {

class DiskStore;

// Streams one block into the disk store in ~1 MiB chunks, so a block of any size passes
// through a fixed amount of memory. Until Commit() the block is invisible to readers and a
// previous version (if any) stays readable. Destroying an uncommitted writer discards what
// it wrote. Borrows its store, which must outlive it.
class DiskWriter {
 public:
  virtual ~DiskWriter() = default;
  // Appends bytes; fails (and the write is then abandoned) past the declared total size or on
  // a storage error.
  virtual Status Append(std::span<const std::byte> bytes) = 0;
  // Makes the block visible, replacing any previous version atomically. Fails if fewer bytes
  // than declared were appended.
  virtual Status Commit() = 0;
};

// What a read of a block range returns.
struct DiskRead {
  uint64_t total_size;
  uint64_t generation;
  StorageLevel level;
  std::vector<ChunkPtr> chunks;  // the requested range, in order
};

// How chunk values are laid out in RocksDB. Measured side by side (bm-bench row "4s", RocksDB
// 7.8, 1 MiB chunks, in-process): plain values were read 3.5-4.5x faster than blob files
// (~2.5 GB/s against ~0.6 GB/s) and written about as fast (~140 MB/s both), so kPlain is the
// default; kBlobFiles stays selectable so the two can be measured again. Either format reads a
// database written in the other (RocksDB reads existing blob files whatever the setting).
enum class DiskValueFormat { kPlain, kBlobFiles };

// Blocks on disk in RocksDB under one directory. A block is a metadata record plus its bytes
// as chunks of about kChunkBytes under keys that carry the block's generation, so a reader
// never mixes two versions and a crash mid-write leaves only garbage that Open() sweeps away.
// Honours a byte limit (0 = none); space is claimed when a write begins.
//
// Not thread-safe: owned by the worker's event loop.
class DiskStore {
 public:
  static Result<std::unique_ptr<DiskStore>> Open(const std::string& dir, uint64_t limit_bytes,
                                                 DiskValueFormat format = DiskValueFormat::kPlain);
  ~DiskStore();

  // kOutOfSpace (with the numbers) when total_size would pass the limit. `version` is stored
  // with the block (BlockStatus::version).
  Result<std::unique_ptr<DiskWriter>> BeginWrite(const BlockId& id, StorageLevel level,
                                                 uint64_t total_size, uint64_t version = 0);
  // Writes a whole block held in memory (used when spilling an evicted block).
  Status Write(const BlockId& id, StorageLevel level, const BlockData& data,
               uint64_t version = 0);

  // Reads [offset, offset + max_length) (clamped to the block). kNotFound when absent;
  // kInvalidArgument when offset is past the end (offset == size reads zero bytes).
  Result<DiskRead> Read(const BlockId& id, uint64_t offset, uint64_t max_length);
  // As Read, but only from version `generation`: kAborted when the block was replaced or removed
  // since (a reader continuing a ranged read gets no mix of two versions).
  Result<DiskRead> ReadGeneration(const BlockId& id, uint64_t generation, uint64_t offset,
                                  uint64_t max_length);
  std::optional<BlockStatus> Find(const BlockId& id) const;
  // Removes the block. kNotFound when absent.
  Status Remove(const BlockId& id);

  // Sorted by id.
  std::vector<BlockStatus> List() const;
  size_t block_count() const;
  uint64_t limit() const { return limit_; }
  // Bytes of committed blocks plus space claimed by writes in progress.
  uint64_t used() const;

  // Generations come from one increasing sequence, above every generation found on disk. The
  // block manager draws memory blocks' generations from the same sequence (AdvanceGenerationTo
  // after taking some), so a generation never names two versions of a block on this worker.
  uint64_t next_generation() const;
  void AdvanceGenerationTo(uint64_t generation);

 private:
  friend class RocksDiskWriter;
  DiskStore(std::unique_ptr<rocksdb::DB> db, uint64_t limit);
  // Loads every committed block's metadata and deletes chunks that belong to no committed
  // version (writes cut short by a crash).
  Status LoadIndex();

  struct Impl;
  std::unique_ptr<rocksdb::DB> db_;
  const uint64_t limit_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bm
