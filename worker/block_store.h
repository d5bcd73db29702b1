#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/chunk.h"
#include "blockmgr/status.h"
#include "blockmgr/storage_level.h"
#include "common/core/lost_cause.h"
#include "worker/block_status.h"

namespace bm {

// Streams one block into a store in ~1 MiB chunks, so a block of any size passes through a
// fixed amount of memory. Until Commit() the block is invisible to readers and a previous
// version (if any) stays readable. Destroying an uncommitted writer discards what it wrote.
// Borrows its store, which must outlive it.
class DiskWriter {
 public:
  virtual ~DiskWriter() = default;
  // Appends bytes; fails (and the write is then abandoned) past the declared total size or on
  // a storage error.
  virtual Status Append(std::span<const std::byte> bytes) = 0;
  // The digests of the units the next appends complete, computed and checked by the caller as
  // the bytes arrived (BlockDigester::AdoptUnits): the writer stores them without hashing those
  // bytes again. Called at a unit boundary.
  virtual void AdoptUnitDigests(std::span<const uint64_t> digests) = 0;
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
  // The stored digests of the digest units the range overlaps, the first being unit
  // offset / kDigestUnitBytes (common/core/digest.h); empty for a block stored without digests.
  std::vector<uint64_t> unit_digests;
};

// A block the store had committed that did not survive (named by the commit journal, a
// checksum, a failed disk), and why: `cause` is what the master records and shows,
// `reason` the details.
struct LostBlock {
  BlockId id;
  std::string reason;
  LostCause cause = LostCause::kStorageError;
  uint64_t version = 0;  // BlockStatus::version of the lost copy; 0 = unknown
};

// The persistent tier under the block manager's level policy: blocks written in a stream or
// whole, read in ranges, removed, listed, with space accounting and the storage errors a disk
// has. DiskStore (RocksDB) is the implementation; tests wrap it in a FaultInjectingStore
// (failed writes, a full disk, slow reads, corrupted chunks) the way LevelDB tests run through
// an Env. The memory tier (MemoryStore) keeps an interface of its own: its reads are zero-copy
// views of the stored chunks and its evictions are the policy's input, which a byte-stream
// store has no counterpart for.
//
// Implementations are not thread-safe: one thread owns a store (the worker's storage thread,
// see StorageThread).
class BlockStore {
 public:
  virtual ~BlockStore() = default;

  // kOutOfSpace (with the numbers) when total_size does not fit, or when the store is
  // read-only. `version` is stored with the block (BlockStatus::version).
  virtual Result<std::unique_ptr<DiskWriter>> BeginWrite(const BlockId& id, StorageLevel level,
                                                         uint64_t total_size,
                                                         uint64_t version = 0) = 0;
  // Writes a whole block held in memory (used when spilling an evicted block). When
  // `expected_unit_digests` are given, the bytes are checked against them first: kDataLoss, and
  // nothing written, when they differ (the memory copy rotted).
  virtual Status Write(const BlockId& id, StorageLevel level, const BlockData& data,
                       uint64_t version = 0,
                       std::span<const uint64_t> expected_unit_digests = {}) = 0;

  // Reads [offset, offset + max_length) (clamped to the block). kNotFound when absent;
  // kInvalidArgument when offset is past the end (offset == size reads zero bytes).
  virtual Result<DiskRead> Read(const BlockId& id, uint64_t offset, uint64_t max_length) = 0;
  // As Read, but only from version `generation`: kAborted when the block was replaced or removed
  // since (a reader continuing a ranged read gets no mix of two versions).
  virtual Result<DiskRead> ReadGeneration(const BlockId& id, uint64_t generation, uint64_t offset,
                                          uint64_t max_length) = 0;
  // As Read, for bytes on their way to a reader that checks every digest unit against the
  // block's unit digests and reports a mismatch back (every client does, and the replicator's
  // OwnBlockReader): the store may leave its own check of them to that reader. Never wrong
  // bytes unnoticed, only noticed one step later: the reader's report has the copy verified
  // (BlockManager::Verify, which reads with Read) and dropped. By default, the same as Read.
  virtual Result<DiskRead> ReadForCheckingReader(const BlockId& id, uint64_t offset,
                                                 uint64_t max_length) {
    return Read(id, offset, max_length);
  }
  virtual std::optional<BlockStatus> Find(const BlockId& id) const = 0;
  // Removes the block. kNotFound when absent.
  virtual Status Remove(const BlockId& id) = 0;

  // Sorted by id.
  virtual std::vector<BlockStatus> List() const = 0;
  virtual size_t block_count() const = 0;
  // Bytes of committed blocks plus space claimed by writes in progress.
  virtual uint64_t used() const = 0;
  // What used() could reach now.
  virtual uint64_t capacity() const = 0;
  virtual bool read_only() const = 0;

  // Off the hot path, every second or so: recovery from storage errors, space reclaim.
  virtual void Maintain() = 0;
  // Blocks found lost since the last call.
  virtual std::vector<LostBlock> TakeLost() = 0;
  // Blocks found corrupt (failed a checksum on a read or a scrub, or in the start-up scan) since
  // the store was opened; each was dropped and is among the lost.
  virtual uint64_t corrupt_count() const = 0;
  // A reader found version `generation` of the block corrupt (`what`): when it is still the
  // stored version, it is dropped and reported lost like one the store found itself. Returns
  // the kDataLoss a read of it fails with.
  virtual Status ReportCorrupt(const BlockId& id, uint64_t generation, const std::string& what) = 0;

  // Test-only fault injection (bm-worker --enable-fault-injection): rewrites the stored bytes
  // of `id` with the byte at `offset` flipped, leaving its digests and its generation as they
  // were, so it reads back exactly as a copy that rotted on the device. kNotFound when absent,
  // kInvalidArgument when offset is not inside the block.
  virtual Status CorruptStoredByte(const BlockId& id, uint64_t offset) = 0;
};

}  // namespace bm
