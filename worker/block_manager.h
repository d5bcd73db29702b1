#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/block_id.h"
#include "common/chunk.h"
#include "common/status.h"
#include "common/storage_level.h"
#include "common/tier.h"
#include "common/worker_stats.h"
#include "worker/block_status.h"
#include "worker/block_store.h"
#include "worker/memory_store.h"

namespace bm {

// A range of a stored block, ready to send.
struct BlockRead {
  uint64_t total_size;
  uint64_t offset;
  uint64_t generation;
  Tier tier;
  StorageLevel level;
  std::vector<ChunkPtr> chunks;  // the bytes of the range, in order; no copies for memory blocks
  uint64_t version = 0;          // BlockStatus::version
  // Stored digests of the digest units the range overlaps, the first being unit
  // offset / kDigestUnitBytes; empty for a block stored without them.
  std::vector<uint64_t> unit_digests{};
};

// What re-reading a stored copy found.
struct BlockCheck {
  Tier tier = Tier::kMemory;
  bool digested = false;  // false: stored without digests; only RocksDB's checksums apply
  Status corrupt;         // Ok: intact; else kDataLoss saying what was wrong (copy dropped)
};

// The version an upload stores: `token` is kept with the block (BlockStatus::version); `fresh`
// says the upload is a new put, which replaces every other version of the block in the cluster
// (the master arbitrates), rather than a copy of an existing version.
struct PutVersion {
  uint64_t token = 0;
  bool fresh = false;
  // The compute lease a get-or-compute put stores under (0 = none), passed on to the master
  // with the block's report so it can refuse a block stored under a lost lease.
  uint64_t lease = 0;
};

// The worker's storage policy over its memory store (the LRU) and its disk store (a BlockStore:
// RocksDB in production, a fault-injecting wrapper in tests): where a block of each level
// goes, what eviction spills or drops, and the list of changes the master must hear about.
//
// Placement by level:
//   MEMORY_ONLY      memory; if room cannot be made (see MemoryStore), kOutOfSpace.
//   MEMORY_AND_DISK  memory; if room cannot be made, straight to disk. When evicted later it is
//                    spilled to disk.
//   DISK_ONLY        disk.
//   (_2 forms behave like their one-copy forms here.)
// A put of an existing id replaces the old version once the new one is committed; until then
// readers see the old one.
//
// Not thread-safe: owned by the worker's event loop.
class BlockManager {
 public:
  using UploadId = uint64_t;

  BlockManager(std::unique_ptr<MemoryStore> memory, std::unique_ptr<BlockStore> disk);
  ~BlockManager();

  // Starts an upload of `total_size` bytes; claims its space up front (memory or disk by the
  // level rules above), so a put that cannot fit fails before any bytes are sent.
  Result<UploadId> BeginPut(const BlockId& id, StorageLevel level, uint64_t total_size,
                            PutVersion version = {});
  // Adds the next bytes of the upload (chunks are kept as they are for memory blocks, without
  // copying). Fails past the declared size; a failed upload is aborted.
  Status AppendPut(UploadId upload, std::vector<ChunkPtr> chunks);
  // Makes the block visible; returns the tier it landed on. Fails if bytes are missing.
  Result<Tier> CommitPut(UploadId upload);
  // Drops an upload and releases its space. Unknown ids are ignored.
  void AbortPut(UploadId upload);
  bool HasUpload(UploadId upload) const;

  // Reads a range of a block, clamped to the block and to `max_length`.
  Result<BlockRead> Read(const BlockId& id, uint64_t offset, uint64_t max_length);
  std::optional<BlockStatus> Find(const BlockId& id) const;
  // Re-reads the stored copy and checks it against its digests (and, on disk, RocksDB's
  // checksums). A corrupt copy is dropped, and reported like a lost block (TakeChanges,
  // TakeLost). kNotFound when the block is not here.
  Result<BlockCheck> Verify(const BlockId& id);
  // Removes the block from whichever tier holds it. kNotFound when absent, or when
  // `only_version` is not 0 and the block held is another version.
  Status Remove(const BlockId& id, uint64_t only_version = 0);

  std::vector<BlockStatus> List() const;
  WorkerStats Stats() const;
  // For metrics: blocks per tier, and blocks evicted from memory (spilled to disk or dropped).
  size_t memory_block_count() const;
  size_t disk_block_count() const;
  uint64_t evictions() const { return evictions_; }
  uint64_t spills() const { return spills_; }
  // The disk tier, for the scrubber, which verifies it in the background (what it finds bad the
  // store reports lost, and Maintain() passes on).
  BlockStore& disk_store() { return *disk_; }
  uint64_t corrupt_disk_blocks() const { return disk_->corrupt_count(); }

  // Off the hot path (every second or so): lets the disk store recover from a storage error
  // and give back removed blocks' space; blocks it finds lost become removals in TakeChanges()
  // and ids in TakeLost().
  void Maintain();
  // Blocks committed to disk that did not survive (a restart or a storage error), since the
  // last call, for the master: it re-replicates them from other copies.
  std::vector<BlockId> TakeLost();

  // Every change since the last call, in the order it happened (stored, moved tier, removed),
  // for the master. A block that changes tier (spilled on eviction, or replaced by a version on
  // the other tier) yields "removed from the old tier" followed by "stored on the new tier", so
  // the last change for an id always describes its current state.
  std::vector<BlockStatusChange> TakeChanges();

 private:
  struct Upload;

  void RecordStored(const BlockStatus& status, bool fresh, uint64_t lease = 0);
  void RecordRemoved(const BlockStatus& status);
  // Takes the disk store's lost blocks into lost_ (and the changes, when `report_removed`).
  void CollectLost(bool report_removed);
  // Spills MEMORY_AND_DISK blocks evicted from memory to disk and records every change.
  void HandleEvicted(std::vector<MemoryBlock> evicted);
  // A generation for a new memory version, from the sequence the disk store draws from too.
  uint64_t NewMemoryGeneration();

  std::unique_ptr<MemoryStore> memory_;
  std::unique_ptr<BlockStore> disk_;
  std::unordered_map<UploadId, std::unique_ptr<Upload>> uploads_;
  UploadId next_upload_id_ = 1;
  uint64_t next_generation_ = 1;
  std::vector<BlockStatusChange> changes_;
  std::vector<BlockId> lost_;
  uint64_t evictions_ = 0;
  uint64_t spills_ = 0;
};

}  // namespace bm
