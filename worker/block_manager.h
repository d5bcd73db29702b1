#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/chunk.h"
#include "blockmgr/status.h"
#include "blockmgr/storage_level.h"
#include "blockmgr/tier.h"
#include "common/core/worker_stats.h"
#include "common/net/sealed_region.h"
#include "worker/block_read.h"
#include "worker/block_status.h"
#include "worker/block_store.h"
#include "worker/disk_set.h"
#include "worker/job_thread.h"
#include "worker/memory_store.h"
#include "worker/read_ahead.h"
#include "worker/scrubber.h"
#include "worker/storage_thread.h"

namespace bm {

// A whole block in a sealed shared region, for a reader on this host (docs/storage.md "Same-host
// reads"), and what keeps it counted against the memory budget until the reader lets go.
struct SharedBlock {
  std::shared_ptr<const SealedRegion> region;
  BlockStatus status;
  uint64_t generation = 0;
  std::vector<uint64_t> unit_digests;
  // What ReleaseShared must give back: the pin of a memory block's version, or the bytes held
  // for a disk block read into a region of its own.
  struct Pin {
    Tier tier = Tier::kMemory;
    uint64_t generation = 0;  // memory: the pinned version
    uint64_t held_bytes = 0;  // disk: MemoryStore::Hold-ed bytes
  } pin;
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
  // The quota reservation the master admitted the put under (0 = none), passed on with the
  // block's report so the master counts its bytes as stored instead of reserved.
  uint64_t reservation = 0;
  // What the put said the block took to compute, in microseconds (0 = not stated); kept with a
  // memory copy for the eviction policy.
  uint64_t compute_cost_us = 0;
};

struct BlockManagerOptions {
  // How far the bytes held in RAM may run past the memory budget while evicted blocks wait to
  // be spilled: a put evicts at once (so it never waits for a disk to make room it was
  // promised), and its bytes then wait (TakesBytes) only while the spills behind it are more
  // than this many bytes behind. 0: a quarter of the memory budget, at least 64 MiB.
  uint64_t spill_backlog_bytes = 0;
  // The scrubber's rate (worker/scrubber.h), stepped on the storage thread with each
  // maintenance pass; 0: off.
  uint64_t scrub_bytes_per_second = 0;
  // Bytes of disk block ranges read ahead of their request (ReadAheadTable) at most; 0: none.
  uint64_t read_ahead_bytes = 4 * (uint64_t{16} << 20);
  // How each disk is checked (DiskSet): interval and timeout.
  std::chrono::milliseconds disk_check_interval{5000};
  std::chrono::milliseconds disk_check_timeout{10000};
};

// The worker's storage policy over its memory store (MemoryStore) and its disk store (a BlockStore:
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
// Several disks: each is a BlockStore of its own run by a StorageThread of its own (DiskSet,
// which also picks the disk for a new block and finds failed disks). A block lives on one disk;
// the index below says which, and routes every read, removal and check of it there. A new
// version of a block goes to the disk holding the old one when it has room (the replacement is
// then one commit in one store), else to the disk DiskSet chooses, and the old copy is deleted
// once the new one has committed. When a disk fails, every block on it is dropped from the
// index and reported lost (TakeLost, TakeChanges); a read of one then fails with kUnavailable
// naming the disk, and work still queued for the disk answers with the same error.
//
// Threads: the memory tier and the policy belong to the worker's event loop, which calls every
// method here. Each disk store belongs to a StorageThread: every disk read, write, removal,
// spill and maintenance pass runs there, and what the loop needs back arrives as a completion
// (RunCompletions(), when completion_fd() is readable). So the operations that may touch the
// disk (AppendPut, CommitPut, Read) answer through a callback, which runs at once for memory
// blocks and on a later RunCompletions() for disk blocks, always on the loop. The loop keeps its
// own index of the disk tier (updated as jobs complete) so Find, List and Stats never wait.
//
// An evicted MEMORY_AND_DISK block stays readable from memory while its spill is queued or
// running; the master hears "moved to disk" when the spill has committed.
class BlockManager {
 public:
  using UploadId = uint64_t;
  template <typename T>
  using Callback = std::function<void(T)>;

  // One disk, with no directory of its own to check (tests).
  BlockManager(std::unique_ptr<MemoryStore> memory, std::unique_ptr<BlockStore> disk,
               BlockManagerOptions options = {});
  // Several disks (at least one), in the order of the worker's --disk-dir flags.
  BlockManager(std::unique_ptr<MemoryStore> memory, std::vector<DiskSlot> disks,
               BlockManagerOptions options = {});
  // Aborts uploads in progress, lets the storage thread finish its queue, and joins it.
  ~BlockManager();

  // --- The loop's side of the storage thread.
  int completion_fd() const { return disks_->wake_fd(); }
  // Readable while copies into shared regions (ShareWhole) have finished; RunCompletions()
  // runs them too.
  int region_completion_fd() const { return region_copier_->wake_fd(); }
  // Applies finished disk work and region copies (and calls their callbacks). Returns how many
  // jobs finished. Run when completion_fd() or region_completion_fd() is readable.
  size_t RunCompletions();
  // Disk jobs submitted and not yet completed (spills, reads, writes, maintenance).
  size_t storage_jobs_outstanding() const { return disks_->outstanding(); }

  // --- Disks.
  size_t disk_count() const { return disks_->size(); }
  size_t failed_disk_count() const { return disks_->failed_count(); }

  // --- Uploads.
  // Starts an upload of `total_size` bytes: memory is claimed as its bytes arrive (AppendPut
  // evicts as needed), so a header alone evicts nothing; disk is claimed in full (the disk's
  // refusal, if any, arrives with the first AppendPut or the CommitPut). A memory put that
  // could never fit fails here, before any bytes are sent; one that finds the room taken by
  // another upload midway fails then (MEMORY_ONLY) or moves to disk (MEMORY_AND_DISK).
  Result<UploadId> BeginPut(const BlockId& id, StorageLevel level, uint64_t total_size,
                            PutVersion version = {});
  // False while `bytes` more arriving now would run the RAM held by the memory tier (stored
  // blocks, uploads' received bytes, evicted blocks awaiting their spill) past the budget by
  // more than the spill backlog allows: the caller holds the bytes back until a spill
  // completes (never false while no spill is pending, so nothing waits forever).
  bool TakesBytes(uint64_t bytes) const;
  // Adds the next bytes of the upload (kept as they are for memory blocks, without copying).
  // `checked_unit_digests`: the digests of the units these bytes complete, which the caller
  // computed and checked against the sender's (then they are stored as they are, not hashed
  // again; the chunks start on a unit boundary); empty: the manager digests the bytes itself.
  // Fails past the declared size or on a storage error; a failed upload is aborted.
  void AppendPut(UploadId upload, std::vector<ChunkPtr> chunks,
                 std::vector<uint64_t> checked_unit_digests, Callback<Status> done);
  // Makes the block visible and reports the tier it landed on. Fails if bytes are missing.
  // The upload is gone from HasUpload() at once.
  void CommitPut(UploadId upload, Callback<Result<Tier>> done);
  // Drops an upload and releases its space. Unknown ids are ignored.
  void AbortPut(UploadId upload);
  bool HasUpload(UploadId upload) const;

  // --- Reads and removals.
  // Reads a range of a block, clamped to the block and to `max_length`. A disk block's next
  // range ([offset + max_length, + max_length)) is then read ahead on the storage thread, so a
  // client reading the block range by range finds it ready (see ReadAheadTable).
  void Read(const BlockId& id, uint64_t offset, uint64_t max_length,
            Callback<Result<BlockRead>> done);
  std::optional<BlockStatus> Find(const BlockId& id) const;
  // The whole of a block held in RAM (stored, or waiting to be spilled), found with one probe
  // of the index and marked recently used; nullopt when it is not in RAM (then Find and Read,
  // which go to the disk tier). A multi-get of small blocks pays one probe per block this way
  // instead of two (Find, then Read): their cache misses showed in its profile.
  std::optional<BlockRead> ReadInMemory(const BlockId& id);
  // A read of the memory block `id` served from a copy elsewhere (a small-block arena): counts
  // for its recency as a read here would. False when it is not in memory.
  bool TouchInMemory(const BlockId& id) { return memory_->Get(id) != nullptr; }
  // MemoryStore::Prefetch, before ReadInMemory of many blocks.
  void PrefetchInMemory(std::span<const BlockId> ids) const { memory_->Prefetch(ids); }
  // See MemoryStore::set_eviction_guard.
  void set_eviction_guard(const EvictionGuard* guard) { memory_->set_eviction_guard(guard); }
  // Re-reads the stored copy and checks it against its digests (and, on disk, RocksDB's
  // checksums): a memory copy at once, a disk copy on the storage thread. A corrupt copy is
  // dropped and reported like a lost block (TakeChanges, TakeLost). kNotFound when the block
  // is not here.
  void Verify(const BlockId& id, Callback<Result<BlockCheck>> done);
  // Removes the block from whichever tier holds it: readers no longer find it from now on (a
  // disk copy is deleted by a job behind the reads already queued). kNotFound when absent, or
  // when `only_version` is not 0 and the block held is another version.
  Status Remove(const BlockId& id, uint64_t only_version = 0);

  // --- Same-host reads (docs/storage.md "Same-host reads"; worker/local_read_server.h).
  // The whole block as a sealed region, pinned for one reader until ReleaseShared. A memory
  // block is moved into a region on its first such read (copied on a JobThread of its own, its
  // digests checked); the region then replaces its chunks, so its bytes are held once and TCP
  // reads send the same pages. kAborted when the block changed during that copy. A block over
  // 64 MiB is copied in the background instead, while this reader hears kUnavailable (and reads
  // over TCP this once). A disk block is
  // read into a new region on the storage thread (checked against its digests), counted in the
  // memory budget while the reader holds it; kOutOfSpace when the budget has no room for it as it
  // is (the reader reads over TCP instead). kNotFound when the block is not here; kUnavailable
  // while it waits for its spill to disk. Answers through `done`, at once for memory blocks.
  void ShareWhole(const BlockId& id, Callback<Result<SharedBlock>> done);
  void ReleaseShared(const SharedBlock::Pin& pin);
  // Whether `pin` still holds `id`'s current version in memory, so the reader's region of it
  // can be read again without a new one; counts as a read of the block (its recency).
  bool ReadAgainShared(const BlockId& id, const SharedBlock::Pin& pin);
  // Bytes readers keep mapped (MemoryStore::pinned_bytes).
  uint64_t pinned_bytes() const { return memory_->pinned_bytes(); }
  // Called on the loop with the id of every block stored, replaced, moved between tiers,
  // removed, lost or corrupted (tests), before any read can see the change: for copies kept
  // elsewhere (the small-block arena of same-host reads) to go. One listener; empty: none.
  void set_block_changed(std::function<void(const BlockId&)> listener) {
    block_changed_ = std::move(listener);
  }

  // Test-only fault injection (the worker's corruptBlock): flips the byte at `offset` of the
  // copy held on `tier`, leaving its digests, so readers and verifyBlock find it corrupt as
  // they would a copy that rotted. In memory the chunk holding the byte is replaced by a
  // flipped copy (chunks are shared with in-flight sends, which keep the bytes they hold); on
  // disk the storage thread rewrites the chunk in the store. kNotFound when the block is not
  // held on that tier; kInvalidArgument when offset is not inside it.
  void CorruptStoredByte(const BlockId& id, Tier tier, uint64_t offset, Callback<Status> done);

  std::vector<BlockStatus> List() const;
  WorkerStats Stats() const;
  // For metrics: blocks per tier, and blocks evicted from memory (spilled to disk or dropped).
  size_t memory_block_count() const;
  size_t disk_block_count() const { return disk_index_.size(); }
  uint64_t evictions() const { return evictions_; }
  uint64_t spills() const { return spills_; }
  // Evicted blocks whose memory copy failed its digests on the way to disk (not spilled).
  uint64_t corrupt_spills() const { return corrupt_spills_; }
  // Evicted blocks whose spill has not committed yet, and their bytes.
  size_t spills_pending() const { return spilling_.size(); }
  uint64_t spill_backlog_bytes() const { return spill_backlog_bytes_; }
  // Bytes of spills taken from jobs that still hold them (cancelled, or moved off a failed
  // disk whose job has not returned): memory in use, which TakesBytes counts.
  uint64_t orphaned_spill_bytes() const { return orphaned_spill_bytes_; }
  // Disk blocks found corrupt (and dropped) since the store opened, as of the last job.
  uint64_t corrupt_disk_blocks() const { return disks_->corrupt_blocks(); }
  // Disk bytes the scrubber has re-read and verified, as of the last maintenance pass.
  uint64_t scrubbed_bytes() const { return disks_->scrubbed_bytes(); }
  // Reads answered from a range read ahead, and the bytes read ahead held or coming.
  uint64_t read_ahead_hits() const { return read_ahead_.hits(); }
  uint64_t read_ahead_bytes() const { return read_ahead_.bytes(); }

  // Off the hot path (every second or so): queues a pass in which each disk store recovers from
  // a storage error and gives back removed blocks' space; blocks it finds lost become removals
  // in TakeChanges() and ids in TakeLost() when the pass completes. Also checks the disks
  // (DiskSet::Tick) and drops the blocks of a disk found failed.
  void Maintain();
  // Blocks committed to disk that did not survive (a restart or a storage error), since the
  // last call, for the master: it re-replicates them from other copies.
  std::vector<LostBlock> TakeLost();

  // Every change since the last call, in the order it happened (stored, moved tier, removed),
  // for the master. A block that changes tier (spilled on eviction, or replaced by a version on
  // the other tier) yields "removed from the old tier" followed by "stored on the new tier", so
  // the last change for an id always describes its current state.
  std::vector<BlockStatusChange> TakeChanges();

 private:
  struct Upload;
  struct DiskUpload;
  using DiskNo = DiskSet::DiskNo;
  // An evicted MEMORY_AND_DISK block between its eviction and its spill's completion.
  struct Spill {
    uint64_t ticket;
    MemoryBlock block;
    DiskNo disk;
    // Disks that refused this block's spill, or failed under it: never chosen for it again.
    std::vector<DiskNo> refused_by{};
  };
  // A block on disk, and which disk.
  struct DiskBlock {
    BlockStatus status;
    DiskNo disk;
  };

  // Indexes the block as stored on `disk`; a copy left on another disk (an older version) is
  // deleted there.
  void IndexOnDisk(const BlockStatus& status, DiskNo disk);
  // Drops the blocks of the disks found failed since the last call (reported lost), aborts the
  // uploads going to them and closes their stores.
  void HandleFailedDisks();
  // The disk a new block goes to (see DiskSet::Choose); kOutOfSpace naming `memory_failure`
  // too, if any.
  Result<DiskNo> ChooseDisk(const BlockId& id, uint64_t total_size,
                            const std::string& memory_failure,
                            std::span<const DiskNo> avoid = {}) const;

  void RecordStored(const BlockStatus& status, bool fresh, uint64_t lease = 0,
                    uint64_t reservation = 0);
  void RecordRemoved(const BlockStatus& status);
  // Takes blocks the disk store lost into lost_ (and the changes, when `report_removed`).
  void CollectLost(std::vector<LostBlock> blocks, bool report_removed);
  // SpillOrDrop() of each block evicted from memory.
  void HandleEvicted(std::vector<MemoryBlock> evicted);
  // Queues the spill of `block`, which leaves memory, to the disk with the most room (of those
  // not in `refused_by`); drops it when its level keeps no disk copy, a put replacing it is
  // committing, or no disk takes it.
  void SpillOrDrop(MemoryBlock block, std::vector<DiskNo> refused_by = {});
  // Spills queued to `failed` would wait behind its hung job or fail with it: their bytes are
  // still in memory, so they are queued again on the other disks.
  void RespillFrom(DiskNo failed);
  void SpillFinished(const BlockId& id, uint64_t ticket, const Status& written);
  // Forgets a queued spill (the block was removed or replaced): its completion changes nothing.
  void CancelSpill(const BlockId& id);
  // A spill taken from its job (cancelled, or moved off a failed disk) while the job still
  // holds the bytes: counted (orphaned_spill_bytes_) until the job returns, which on a hung
  // disk may be never.
  void OrphanSpill(const Spill& spill);
  // Queues the deletion of `id`'s copy on `disk` (behind every job already queued for it).
  void RemoveFromDisk(const BlockId& id, DiskNo disk);
  // Makes `upload` a disk upload on `disk` and queues the start of its writer.
  void StartDiskWrite(Upload& upload, DiskNo disk, const std::string& memory_failure);
  // A MEMORY_AND_DISK upload that found no memory for its next bytes goes on on disk: its
  // memory claim is given back and the bytes it holds are written first. kOutOfSpace (nothing
  // changed) when the disk has no room either.
  Status MoveUploadToDisk(Upload& upload, const std::string& memory_failure);
  // On the storage thread: appends to a disk upload's writer; a failure drops the writer.
  static Status AppendToDisk(DiskUpload& disk, const std::vector<ChunkPtr>& chunks,
                             std::span<const uint64_t> checked_unit_digests);
  // What an upload's client is told of a disk's failed write or commit: an error of the disk
  // itself (kInternal: an I/O error, a file that cannot be created) is kUnavailable naming the
  // disk, as when the disk has failed, since the check it triggers (DiskSet::NoteError) may not
  // have failed it yet: the client puts the block elsewhere. Refusals pass unchanged.
  Status DiskUploadError(DiskNo disk, const Status& error) const;
  // A read's failure: noted with the disk's check (DiskSet::NoteError), and returned as the
  // reader is to hear it: an error of the disk itself as kUnavailable naming the disk (the
  // reader reads another copy), before and after the check fails the disk alike; a copy found
  // corrupt (kDataLoss) and the rest unchanged.
  Status NoteDiskReadError(DiskNo disk, const BlockId& id, const Status& error);
  // The memory commit, once any disk copy it replaces is gone.
  void FinishMemoryCommit(Upload& upload, Callback<Result<Tier>> done);
  // `digest`: the committed block's digest (BlockStatus::digest).
  void FinishDiskCommit(const Upload& upload, const Status& committed, uint64_t digest,
                        Callback<Result<Tier>> done);
  // A range of an in-memory block's bytes.
  static Result<BlockRead> SliceMemoryBlock(const MemoryBlock& block, uint64_t offset,
                                            uint64_t max_length);
  uint64_t NewMemoryGeneration();
  // ShareWhole of a block in the memory index.
  void ShareInMemory(const BlockId& id, Callback<Result<SharedBlock>> done);
  // Pins the memory block `id`, whose bytes are `region`, for one reader.
  Result<SharedBlock> PinShared(const BlockId& id, std::shared_ptr<const SealedRegion> region);
  // ShareWhole of a disk block.
  void ShareFromDisk(const BlockStatus& status, DiskNo disk, Callback<Result<SharedBlock>> done);
  // A range of a disk block, read on the storage thread for a reader that checks it against
  // the unit digests (a client, or the replicator's OwnBlockReader).
  static Result<BlockRead> ReadFromDisk(BlockStore& store, const BlockId& id, uint64_t offset,
                                        uint64_t max_length);

  const BlockManagerOptions options_;
  std::unique_ptr<MemoryStore> memory_;
  std::unordered_map<UploadId, std::unique_ptr<Upload>> uploads_;
  UploadId next_upload_id_ = 1;
  uint64_t next_memory_generation_ = 1;
  std::vector<BlockStatusChange> changes_;
  std::vector<LostBlock> lost_;
  uint64_t corrupt_spills_ = 0;
  uint64_t evictions_ = 0;
  uint64_t spills_ = 0;

  // The loop's index of the disk tier: every block whose disk write has completed and whose
  // removal has not been queued.
  std::unordered_map<BlockId, DiskBlock> disk_index_;
  // Blocks that were on a disk that failed, and which disk: a read of one names the failure.
  // Forgotten when a new version is stored.
  std::unordered_map<BlockId, DiskNo> on_failed_disk_;
  std::unordered_map<BlockId, Spill> spilling_;
  uint64_t spill_backlog_bytes_ = 0;
  // Tickets of orphaned spills (OrphanSpill) and their bytes, until their jobs return. Counted
  // as held memory by TakesBytes, but never waited for: a hung disk's job may never return.
  std::unordered_map<uint64_t, uint64_t> orphaned_spills_;
  uint64_t orphaned_spill_bytes_ = 0;
  uint64_t next_spill_ticket_ = 1;
  // Bytes received so far by memory uploads (claimed in full by MemoryStore, held as they come).
  uint64_t memory_upload_bytes_ = 0;
  // Ids with a commit queued on the storage thread: an evicted older version of one is dropped,
  // not spilled, so its spill cannot land on top of the newer version.
  std::unordered_multiset<BlockId> committing_;
  ReadAheadTable read_ahead_;

  // Generations of memory blocks being copied into shared regions (ShareInMemory).
  std::unordered_set<uint64_t> sharing_;
  std::function<void(const BlockId&)> block_changed_;

  // Destroyed before everything above, so no job outlives what its completion would touch.
  std::unique_ptr<JobThread> region_copier_ = std::make_unique<JobThread>();
  // Last: destroyed first, so no job outlives what its completion would touch.
  std::unique_ptr<DiskSet> disks_;
};

}  // namespace bm
