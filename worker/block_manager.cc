#include "worker/block_manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/core/byte_size.h"
#include "common/core/digest.h"

namespace bm {

namespace {

// Memory generations carry the top bit; the disk store's never reach it. The two sequences are
// kept by different threads, and a generation must never name two versions of a block.
constexpr uint64_t kMemoryGenerationBit = uint64_t{1} << 63;

constexpr uint64_t kMinSpillBacklog = 64 << 20;

// `data` with the byte at `offset` flipped: the chunk holding it is replaced by a flipped copy,
// the others are shared. kInvalidArgument when offset is not inside the data.
Result<BlockData> WithByteFlipped(const BlockData& data, uint64_t offset) {
  if (offset >= data.size) {
    return InvalidArgumentError("offset " + std::to_string(offset) + " is not inside the block (" +
                                std::to_string(data.size) + " bytes)");
  }
  BlockData flipped;
  uint64_t pos = 0;
  for (const ChunkPtr& chunk : data.chunks) {
    if (offset >= pos && offset < pos + chunk->size()) {
      std::vector<std::byte> copy(chunk->bytes().begin(), chunk->bytes().end());
      copy[offset - pos] ^= std::byte{0xFF};
      flipped.Append(std::make_shared<VectorChunk>(std::move(copy)));
    } else {
      flipped.Append(chunk);
    }
    pos += chunk->size();
  }
  return flipped;
}

}  // namespace

// A disk upload's writer. Only storage jobs touch it; the loop holds it to hand it on to them.
struct BlockManager::DiskUpload {
  std::unique_ptr<DiskWriter> writer;
  Status failed;  // why there is no writer
};

// One block being uploaded, on `tier`: memory uploads claim room as their bytes arrive and
// collect the chunks as they are; disk uploads claim the whole block when they begin and stream
// the chunks to the storage thread. A MEMORY_AND_DISK upload that runs out of memory midway
// moves to disk (MoveUploadToDisk).
struct BlockManager::Upload {
  Upload(const BlockId& id, StorageLevel level, uint64_t total_size, PutVersion version)
      : id(id), level(level), total_size(total_size), version(version) {}

  const BlockId id;
  const StorageLevel level;
  const uint64_t total_size;
  const PutVersion version;
  Tier tier = Tier::kMemory;
  uint64_t received = 0;
  uint64_t claimed = 0;              // tier == kMemory: memory claimed so far (AppendPut)
  BlockData data;                    // tier == kMemory
  BlockDigester digester;            // tier == kMemory (the disk writer digests its own)
  std::shared_ptr<DiskUpload> disk;  // tier == kDisk
  DiskSet::DiskNo disk_no = 0;       // tier == kDisk: the disk it is written to
};

namespace {

std::vector<DiskSlot> OneDisk(std::unique_ptr<BlockStore> disk) {
  std::vector<DiskSlot> disks;
  disks.push_back(DiskSlot{"", std::move(disk), 0});
  return disks;
}

}  // namespace

BlockManager::BlockManager(std::unique_ptr<MemoryStore> memory, std::unique_ptr<BlockStore> disk,
                           BlockManagerOptions options)
    : BlockManager(std::move(memory), OneDisk(std::move(disk)), options) {}

BlockManager::BlockManager(std::unique_ptr<MemoryStore> memory, std::vector<DiskSlot> disks,
                           BlockManagerOptions options)
    : options_(options), memory_(std::move(memory)), read_ahead_(options.read_ahead_bytes) {
  BM_CHECK(memory_ != nullptr && !disks.empty());
  // Past every generation the last run of this worker handed out (a client may still hold one
  // from before a restart), with no disk write to remember it: microseconds since the epoch.
  next_memory_generation_ =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  // Still this thread's: the index starts as what the stores hold.
  std::vector<std::pair<BlockId, DiskNo>> duplicates;
  for (DiskNo i = 0; i < disks.size(); ++i) {
    BM_CHECK(disks[i].store != nullptr);
    for (const BlockStatus& status : disks[i].store->List()) {
      // A block lives on one disk; a second copy is an older version whose deletion a crash
      // cut short (the newer one is kept: the higher version token, else the first disk).
      auto [it, inserted] = disk_index_.emplace(status.id, DiskBlock{status, i});
      if (inserted) continue;
      if (status.version > it->second.status.version) {
        duplicates.emplace_back(status.id, it->second.disk);
        it->second = DiskBlock{status, i};
      } else {
        duplicates.emplace_back(status.id, i);
      }
    }
    // Lost before this run: the master learns of them with the registration, whose full block
    // report already leaves them out.
    CollectLost(disks[i].store->TakeLost(), /*report_removed=*/false);
  }
  disks_ = std::make_unique<DiskSet>(
      std::move(disks), DiskSetOptions{options_.disk_check_interval, options_.disk_check_timeout,
                                       options_.scrub_bytes_per_second});
  for (const auto& [id, disk] : duplicates) {
    spdlog::warn("block {} is on two disks; deleting the older copy on {}", id.ToString(),
                 disks_->path(disk));
    RemoveFromDisk(id, disk);
  }
}

BlockManager::~BlockManager() {
  // Writers belong to the storage thread: their uploads are dropped there, before it stops.
  while (!uploads_.empty()) AbortPut(uploads_.begin()->first);
  disks_.reset();
}

size_t BlockManager::RunCompletions() {
  const size_t ran = disks_->RunCompletions() + region_copier_->RunCompletions();
  HandleFailedDisks();  // a disk check that just finished may have failed its disk
  return ran;
}

Result<BlockManager::UploadId> BlockManager::BeginPut(const BlockId& id, StorageLevel level,
                                                      uint64_t total_size, PutVersion version) {
  auto upload = std::make_unique<Upload>(id, level, total_size, version);

  std::string memory_failure;
  if (UsesMemory(level)) {
    // Room is claimed (and made) as the bytes arrive (AppendPut): a header whose bytes never
    // come costs no other block its place. Here only whether it could be made.
    Status room = memory_->CanMakeRoom(id, total_size);
    if (room.ok()) {
      upload->tier = Tier::kMemory;
    } else if (UsesDisk(level) && room.code() == StatusCode::kOutOfSpace) {
      memory_failure = room.message();
    } else {
      return room;
    }
  }
  if (!UsesMemory(level) || !memory_failure.empty()) {
    BM_ASSIGN_OR_RETURN(DiskNo disk, ChooseDisk(id, total_size, memory_failure));
    StartDiskWrite(*upload, disk, memory_failure);
  }

  const UploadId upload_id = next_upload_id_++;
  uploads_.emplace(upload_id, std::move(upload));
  return upload_id;
}

Result<BlockManager::DiskNo> BlockManager::ChooseDisk(const BlockId& id, uint64_t total_size,
                                                      const std::string& memory_failure,
                                                      std::span<const DiskNo> avoid) const {
  // What the loop last heard of the disks' room refuses a block that cannot fit at once; the
  // store's own check, on the storage thread, has the last word.
  std::optional<DiskNo> holder;
  if (auto on_disk = disk_index_.find(id); on_disk != disk_index_.end()) {
    holder = on_disk->second.disk;
  }
  Result<DiskNo> chosen = disks_->Choose(id, total_size, holder, avoid);
  if (chosen.ok() || memory_failure.empty()) return chosen;
  return Status(chosen.status().code(),
                "memory: " + memory_failure + "; disk: " + chosen.status().message());
}

void BlockManager::StartDiskWrite(Upload& upload, DiskNo disk_no,
                                  const std::string& memory_failure) {
  upload.tier = Tier::kDisk;
  upload.disk = std::make_shared<DiskUpload>();
  upload.disk_no = disk_no;
  disks_->Submit(
      disk_no,
      [disk = upload.disk, id = upload.id, level = upload.level, total_size = upload.total_size,
       token = upload.version.token,
       memory_failure](BlockStore& store) -> StorageThread::Completion {
        Result<std::unique_ptr<DiskWriter>> writer = store.BeginWrite(id, level, total_size, token);
        if (writer.ok()) {
          disk->writer = std::move(writer).value();
        } else if (memory_failure.empty()) {
          disk->failed = writer.status();
        } else {
          disk->failed = Status(writer.status().code(), "memory: " + memory_failure +
                                                            "; disk: " + writer.status().message());
        }
        return nullptr;
      });
}

Status BlockManager::MoveUploadToDisk(Upload& upload, const std::string& memory_failure) {
  BM_ASSIGN_OR_RETURN(DiskNo disk, ChooseDisk(upload.id, upload.total_size, memory_failure));
  spdlog::debug("upload of {} moves to disk after {}: {}", upload.id.ToString(),
                FormatBytes(upload.received), memory_failure);
  memory_->Release(upload.claimed);
  memory_upload_bytes_ -= upload.received;
  upload.claimed = 0;
  std::vector<ChunkPtr> received = std::move(upload.data.chunks);
  upload.data = {};
  upload.digester = {};
  StartDiskWrite(upload, disk, memory_failure);
  // The bytes that came so far go first, behind the writer's start (the writer digests them; a
  // piece with checked digests starts on a unit boundary, so theirs follow as they are).
  disks_->Submit(disk,
                 [disk = upload.disk,
                  received = std::move(received)](BlockStore&) -> StorageThread::Completion {
                   // A failure stays in disk->failed: the append queued next (this piece's) reports
                   // it.
                   static_cast<void>(AppendToDisk(*disk, received, {}));
                   return nullptr;
                 });
  return Status::Ok();
}

Status BlockManager::AppendToDisk(DiskUpload& disk, const std::vector<ChunkPtr>& chunks,
                                  std::span<const uint64_t> checked_unit_digests) {
  Status appended = disk.failed;
  if (disk.writer == nullptr && appended.ok()) appended = AbortedError("the upload was abandoned");
  if (appended.ok() && !checked_unit_digests.empty()) {
    disk.writer->AdoptUnitDigests(checked_unit_digests);
  }
  for (const ChunkPtr& chunk : chunks) {
    if (!appended.ok()) break;
    if (chunk->size() > 0) appended = disk.writer->Append(chunk->bytes());
  }
  // A failed writer is dropped here, where it lives: its chunks are deleted now. An append or
  // commit already queued behind this one reports the same failure.
  if (!appended.ok()) {
    disk.writer.reset();
    disk.failed = appended;
  }
  return appended;
}

bool BlockManager::TakesBytes(uint64_t bytes) const {
  if (spill_backlog_bytes_ == 0) return true;
  const uint64_t allowance = options_.spill_backlog_bytes != 0
                                 ? options_.spill_backlog_bytes
                                 : std::max<uint64_t>(kMinSpillBacklog, memory_->capacity() / 4);
  const uint64_t held =
      memory_->stored_bytes() + memory_upload_bytes_ + spill_backlog_bytes_ + orphaned_spill_bytes_;
  return held + bytes <= memory_->capacity() + allowance;
}

void BlockManager::AppendPut(UploadId upload_id, std::vector<ChunkPtr> chunks,
                             std::vector<uint64_t> checked_unit_digests, Callback<Status> done) {
  auto found = uploads_.find(upload_id);
  if (found == uploads_.end()) {
    done(NotFoundError("upload " + std::to_string(upload_id) + " is not in progress"));
    return;
  }
  Upload& upload = *found->second;
  uint64_t bytes = 0;
  for (const ChunkPtr& chunk : chunks) bytes += chunk->size();
  if (bytes > upload.total_size - upload.received) {
    std::string message = "upload of block " + upload.id.ToString() + " sent " +
                          std::to_string(upload.received + bytes) + " bytes, more than the " +
                          std::to_string(upload.total_size) + " declared";
    AbortPut(upload_id);
    done(InvalidArgumentError(std::move(message)));
    return;
  }
  if (upload.tier == Tier::kMemory && bytes > 0) {
    // Claimed now, for the bytes that came. Another upload may have taken the room since
    // BeginPut: then a MEMORY_AND_DISK upload goes on on disk, and any other fails (the client
    // puts it elsewhere).
    Result<std::vector<MemoryBlock>> evicted = memory_->Reserve(upload.id, bytes);
    if (evicted.ok()) {
      upload.claimed += bytes;
      HandleEvicted(std::move(evicted).value());
    } else {
      Status moved = UsesDisk(upload.level) ? MoveUploadToDisk(upload, evicted.status().message())
                                            : evicted.status();
      if (!moved.ok()) {
        AbortPut(upload_id);
        done(moved);
        return;
      }
    }
  }
  upload.received += bytes;
  if (upload.tier == Tier::kMemory) {
    if (!checked_unit_digests.empty()) upload.digester.AdoptUnits(checked_unit_digests);
    for (ChunkPtr& chunk : chunks) {
      if (chunk->size() == 0) continue;
      upload.digester.Update(chunk->bytes());
      upload.data.Append(std::move(chunk));
    }
    memory_upload_bytes_ += bytes;
    done(Status::Ok());
    return;
  }
  const DiskNo disk_no = upload.disk_no;
  disks_->Submit(disk_no,
                 [this, upload_id, disk_no, disk = upload.disk, chunks = std::move(chunks),
                  digests = std::move(checked_unit_digests),
                  done = std::move(done)](BlockStore&) mutable -> StorageThread::Completion {
                   Status appended = AppendToDisk(*disk, chunks, digests);
                   return [this, upload_id, disk_no, appended, done = std::move(done)] {
                     disks_->NoteError(disk_no, appended);
                     if (disks_->failed(disk_no)) {
                       AbortPut(upload_id);  // gone already when the failure was handled
                       done(UnavailableError(
                           "the disk " + disks_->path(disk_no) +
                           " this upload was written to has failed: " + disks_->failure(disk_no)));
                       return;
                     }
                     if (!appended.ok()) AbortPut(upload_id);
                     done(DiskUploadError(disk_no, appended));
                   };
                 });
}

Status BlockManager::DiskUploadError(DiskNo disk, const Status& error) const {
  if (error.code() != StatusCode::kInternal) return error;
  return UnavailableError("the disk " + disks_->path(disk) +
                          " could not take this upload: " + error.message());
}

Status BlockManager::NoteDiskReadError(DiskNo disk, const BlockId& id, const Status& error) {
  disks_->NoteError(disk, error);
  if (error.code() != StatusCode::kInternal) return error;
  return UnavailableError("the disk " + disks_->path(disk) + " could not read block " +
                          id.ToString() + ": " + error.message());
}

void BlockManager::CommitPut(UploadId upload_id, Callback<Result<Tier>> done) {
  auto found = uploads_.find(upload_id);
  if (found == uploads_.end()) {
    done(NotFoundError("upload " + std::to_string(upload_id) + " is not in progress"));
    return;
  }
  if (found->second->received != found->second->total_size) {
    const Upload& upload = *found->second;
    std::string message = "upload of block " + upload.id.ToString() + " ended after " +
                          std::to_string(upload.received) + " of " +
                          std::to_string(upload.total_size) + " bytes";
    AbortPut(upload_id);
    done(InvalidArgumentError(std::move(message)));
    return;
  }
  std::unique_ptr<Upload> upload = std::move(found->second);
  uploads_.erase(found);
  const BlockId id = upload->id;

  if (upload->tier == Tier::kMemory) {
    memory_upload_bytes_ -= upload->received;
    if (!disk_index_.contains(id) && !spilling_.contains(id) && !committing_.contains(id)) {
      FinishMemoryCommit(*upload, std::move(done));
      return;
    }
    // A disk copy (or one on its way there: the spill queued before runs first) is deleted
    // before the memory copy goes in; until then readers see the old version.
    committing_.insert(id);
    std::shared_ptr<Upload> shared(std::move(upload));
    std::optional<DiskNo> holder;
    auto spill = spilling_.find(id);
    auto on_disk = disk_index_.find(id);
    if (spill != spilling_.end()) holder = spill->second.disk;
    if (on_disk != disk_index_.end()) {
      if (holder.has_value() && *holder != on_disk->second.disk) {
        RemoveFromDisk(id, on_disk->second.disk);
      } else {
        holder = on_disk->second.disk;
      }
    }
    auto finish = [this, shared, done = std::move(done)]() mutable {
      const BlockId id = shared->id;
      committing_.erase(committing_.find(id));
      if (auto spill = spilling_.find(id); spill != spilling_.end()) {
        const MemoryBlock& block = spill->second.block;
        RecordRemoved({id, block.level, Tier::kMemory, block.data.size, block.version});
        CancelSpill(id);
      }
      if (auto on_disk = disk_index_.find(id); on_disk != disk_index_.end()) {
        RecordRemoved(on_disk->second.status);
        disk_index_.erase(on_disk);
      }
      FinishMemoryCommit(*shared, std::move(done));
    };
    if (!holder.has_value() || disks_->failed(*holder)) {
      finish();  // the disk copy went with its disk
      return;
    }
    disks_->Submit(
        *holder,
        [id, finish = std::move(finish)](BlockStore& store) mutable -> StorageThread::Completion {
          Status removed = store.Remove(id);
          if (!removed.ok() && removed.code() != StatusCode::kNotFound) {
            spdlog::warn("could not delete the disk copy of {} replaced by a memory copy: {}",
                         id.ToString(), removed.ToString());
          }
          return std::move(finish);
        });
    return;
  }

  committing_.insert(id);
  std::shared_ptr<Upload> shared(std::move(upload));
  disks_->Submit(shared->disk_no,
                 [this, shared,
                  done = std::move(done)](BlockStore& store) mutable -> StorageThread::Completion {
                   DiskUpload& disk = *shared->disk;
                   Status committed = disk.failed;
                   if (committed.ok()) {
                     committed = disk.writer != nullptr ? disk.writer->Commit()
                                                        : AbortedError("the upload was abandoned");
                   }
                   disk.writer.reset();  // committed, or its chunks deleted
                   // The block's digest, from the unit digests the commit stored (once, for every
                   // report).
                   std::optional<BlockStatus> stored =
                       committed.ok() ? store.Find(shared->id) : std::nullopt;
                   const uint64_t digest = stored ? stored->digest : 0;
                   return [this, shared, committed, digest, done = std::move(done)]() mutable {
                     FinishDiskCommit(*shared, committed, digest, std::move(done));
                   };
                 });
}

void BlockManager::FinishMemoryCommit(Upload& upload, Callback<Result<Tier>> done) {
  const BlockId id = upload.id;
  on_failed_disk_.erase(id);
  // The old version's bytes stay alive for in-flight sends holding its chunks; on the same tier,
  // the stored change below supersedes it for the master.
  memory_->Remove(id);
  BlockDigests digests = upload.digester.Finish();
  memory_->Insert(MemoryBlock{id, upload.level, std::move(upload.data), NewMemoryGeneration(),
                              upload.version.token, std::move(digests.units), digests.block,
                              upload.version.compute_cost_us});
  RecordStored(BlockStatus{id, upload.level, Tier::kMemory, upload.total_size, upload.version.token,
                           digests.block},
               upload.version.fresh, upload.version.lease, upload.version.reservation);
  done(Tier::kMemory);
}

void BlockManager::FinishDiskCommit(const Upload& upload, const Status& committed, uint64_t digest,
                                    Callback<Result<Tier>> done) {
  committing_.erase(committing_.find(upload.id));
  disks_->NoteError(upload.disk_no, committed);
  if (committed.ok() && disks_->failed(upload.disk_no)) {
    // Committed to a store that is closed now: its blocks were reported lost, this one too.
    done(UnavailableError(
        "the disk " + disks_->path(upload.disk_no) +
        " this block was written to has failed: " + disks_->failure(upload.disk_no)));
    return;
  }
  if (!committed.ok()) {
    done(DiskUploadError(upload.disk_no, committed));
    return;
  }
  const BlockId& id = upload.id;
  // The memory copy it replaces (or one evicted and waiting for a spill, which was never
  // queued: see committing_).
  CancelSpill(id);
  if (std::optional<MemoryBlock> old = memory_->Remove(id)) {
    RecordRemoved({id, old->level, Tier::kMemory, old->data.size, old->version});
  }
  const BlockStatus status{
      id, upload.level, Tier::kDisk, upload.total_size, upload.version.token, digest};
  IndexOnDisk(status, upload.disk_no);
  RecordStored(status, upload.version.fresh, upload.version.lease, upload.version.reservation);
  done(Tier::kDisk);
}

void BlockManager::AbortPut(UploadId upload_id) {
  auto found = uploads_.find(upload_id);
  if (found == uploads_.end()) return;
  Upload& upload = *found->second;
  if (upload.tier == Tier::kMemory) {
    memory_->Release(upload.claimed);
    memory_upload_bytes_ -= upload.received;
  } else {
    // Destroying an uncommitted writer deletes its chunks and releases its disk claim, on the
    // thread that owns the store.
    disks_->Submit(upload.disk_no, [disk = upload.disk](BlockStore&) -> StorageThread::Completion {
      disk->writer.reset();
      return nullptr;
    });
  }
  uploads_.erase(found);
}

bool BlockManager::HasUpload(UploadId upload_id) const { return uploads_.contains(upload_id); }

Result<BlockRead> BlockManager::SliceMemoryBlock(const MemoryBlock& block, uint64_t offset,
                                                 uint64_t max_length) {
  const uint64_t size = block.data.size;
  if (offset > size) {
    return InvalidArgumentError("offset " + std::to_string(offset) + " is past the end of block " +
                                block.id.ToString() + " (" + std::to_string(size) + " bytes)");
  }
  BlockRead read{size, offset, block.generation, Tier::kMemory, block.level, {}, block.version};
  const uint64_t end = offset + std::min(max_length, size - offset);
  if (!block.unit_digests.empty() && end > offset) {
    read.unit_digests.assign(
        block.unit_digests.begin() + static_cast<ptrdiff_t>(offset / kDigestUnitBytes),
        block.unit_digests.begin() + static_cast<ptrdiff_t>((end - 1) / kDigestUnitBytes) + 1);
  }
  uint64_t pos = 0;
  for (const ChunkPtr& chunk : block.data.chunks) {
    if (pos >= end) break;
    const uint64_t chunk_end = pos + chunk->size();
    if (chunk_end > offset && chunk->size() > 0) {
      const uint64_t from = std::max(offset, pos) - pos;
      const uint64_t to = std::min(end, chunk_end) - pos;
      read.chunks.push_back(SliceChunk(chunk, from, to - from));
    }
    pos = chunk_end;
  }
  return read;
}

void BlockManager::Read(const BlockId& id, uint64_t offset, uint64_t max_length,
                        Callback<Result<BlockRead>> done) {
  if (const MemoryBlock* block = memory_->Get(id)) {
    done(SliceMemoryBlock(*block, offset, max_length));
    return;
  }
  if (auto spill = spilling_.find(id); spill != spilling_.end()) {
    done(SliceMemoryBlock(spill->second.block, offset, max_length));
    return;
  }
  auto on_disk = disk_index_.find(id);
  if (on_disk == disk_index_.end()) {
    if (auto failed = on_failed_disk_.find(id); failed != on_failed_disk_.end()) {
      done(disks_->FailedError(failed->second, id));
      return;
    }
    done(NotFoundError("block " + id.ToString() + " is not stored here"));
    return;
  }
  const uint64_t size = on_disk->second.status.size;
  const DiskNo disk = on_disk->second.disk;
  if (!read_ahead_.Take(id, offset, max_length, done)) {
    disks_->Submit(disk,
                   [this, disk, id, offset, max_length, done = std::move(done)](
                       BlockStore& store) mutable -> StorageThread::Completion {
                     return [this, disk, id, result = ReadFromDisk(store, id, offset, max_length),
                             done = std::move(done)]() mutable {
                       if (!result.ok()) result = NoteDiskReadError(disk, id, result.status());
                       done(std::move(result));
                     };
                   });
  }
  // The next range, read while this one is sent. Queued right behind this read, so it reads the
  // same version; a change to the block after this makes the table forget it.
  if (max_length == 0 || offset >= size || size - offset <= max_length) return;
  const uint64_t next = offset + max_length;
  const std::optional<uint64_t> ticket =
      read_ahead_.Start(id, next, max_length, std::min(max_length, size - next));
  if (!ticket) return;
  disks_->Submit(disk,
                 [this, disk, id, next, max_length,
                  ticket = *ticket](BlockStore& store) -> StorageThread::Completion {
                   return [this, disk, id, ticket,
                           result = ReadFromDisk(store, id, next, max_length)]() mutable {
                     if (!result.ok()) result = NoteDiskReadError(disk, id, result.status());
                     read_ahead_.Complete(ticket, std::move(result));
                   };
                 });
}

Result<BlockRead> BlockManager::ReadFromDisk(BlockStore& store, const BlockId& id, uint64_t offset,
                                             uint64_t max_length) {
  // Every reader of these bytes (a client, OwnBlockReader) checks them against the unit digests.
  Result<DiskRead> read = store.ReadForCheckingReader(id, offset, max_length);
  if (!read.ok()) return read.status();
  const std::optional<BlockStatus> status = store.Find(id);
  return BlockRead{read->total_size,
                   offset,
                   read->generation,
                   Tier::kDisk,
                   read->level,
                   std::move(read->chunks),
                   status ? status->version : 0,
                   std::move(read->unit_digests)};
}

void BlockManager::Verify(const BlockId& id, Callback<Result<BlockCheck>> done) {
  const MemoryBlock* block = memory_->Peek(id);
  if (block == nullptr) {
    if (auto spill = spilling_.find(id); spill != spilling_.end()) block = &spill->second.block;
  }
  if (block != nullptr) {
    BlockCheck check{Tier::kMemory, !block->unit_digests.empty(), Status::Ok()};
    std::vector<std::span<const std::byte>> pieces;
    for (const ChunkPtr& chunk : block->data.chunks) pieces.push_back(chunk->bytes());
    std::optional<uint64_t> bad =
        FirstBadUnit(pieces, 0, block->data.size, block->data.size, block->unit_digests);
    if (bad.has_value()) {
      check.corrupt = DataLossError("block " + id.ToString() + " is corrupt in memory: unit " +
                                    std::to_string(*bad) + " does not match its digest");
      spdlog::error("{}; dropped, never served", check.corrupt.message());
      const uint64_t version = block->version;
      Status removed = Remove(id);
      (void)removed;  // it was found just now
      lost_.push_back({id, check.corrupt.message(), LostCause::kCopyCorrupt, version});
    }
    done(std::move(check));
    return;
  }
  auto on_disk = disk_index_.find(id);
  if (on_disk == disk_index_.end()) {
    done(NotFoundError("block " + id.ToString() + " is not stored here"));
    return;
  }
  disks_->Submit(
      on_disk->second.disk,
      [this, id, size = on_disk->second.status.size,
       done = std::move(done)](BlockStore& store) mutable -> StorageThread::Completion {
        Result<BlockCheck> result = BlockCheck{Tier::kDisk, false, Status::Ok()};
        std::optional<uint64_t> generation;
        for (uint64_t offset = 0; offset < size || !generation.has_value();) {
          Result<DiskRead> read =
              generation.has_value()
                  ? store.ReadGeneration(id, *generation, offset, kDigestUnitBytes)
                  : store.Read(id, offset, kDigestUnitBytes);
          if (!read.ok()) {
            if (read.status().code() != StatusCode::kDataLoss) {
              result = read.status();
            } else {
              result->corrupt = read.status();  // the store dropped it
            }
            break;
          }
          generation = read->generation;
          result->digested = !read->unit_digests.empty();
          std::vector<std::span<const std::byte>> pieces;
          uint64_t bytes = 0;
          for (const ChunkPtr& chunk : read->chunks) {
            pieces.push_back(chunk->bytes());
            bytes += chunk->size();
          }
          if (std::optional<uint64_t> bad =
                  FirstBadUnit(pieces, offset, bytes, read->total_size, read->unit_digests)) {
            result->corrupt = store.ReportCorrupt(
                id, *generation, "chunk " + std::to_string(*bad) + " does not match its digest");
            break;
          }
          if (bytes == 0) break;
          offset += bytes;
        }
        return [this, result = std::move(result), lost = store.TakeLost(),
                done = std::move(done)]() mutable {
          CollectLost(std::move(lost), /*report_removed=*/true);
          done(std::move(result));
        };
      });
}

std::optional<BlockRead> BlockManager::ReadInMemory(const BlockId& id) {
  const MemoryBlock* block = memory_->Get(id);
  if (block == nullptr) {
    auto spill = spilling_.find(id);
    if (spill == spilling_.end()) return std::nullopt;
    block = &spill->second.block;
  }
  // From offset 0, which is never past the end.
  return std::move(SliceMemoryBlock(*block, 0, block->data.size)).value();
}

std::optional<BlockStatus> BlockManager::Find(const BlockId& id) const {
  if (const MemoryBlock* block = memory_->Peek(id)) {
    return BlockStatus{
        id, block->level, Tier::kMemory, block->data.size, block->version, block->block_digest};
  }
  if (auto spill = spilling_.find(id); spill != spilling_.end()) {
    const MemoryBlock& block = spill->second.block;
    return BlockStatus{
        id, block.level, Tier::kMemory, block.data.size, block.version, block.block_digest};
  }
  if (auto on_disk = disk_index_.find(id); on_disk != disk_index_.end()) {
    return on_disk->second.status;
  }
  return std::nullopt;
}

Status BlockManager::Remove(const BlockId& id, uint64_t only_version) {
  if (only_version != 0) {
    std::optional<BlockStatus> held = Find(id);
    if (held.has_value() && held->version != only_version) {
      return NotFoundError("block " + id.ToString() + " is stored here in another version");
    }
  }
  bool removed = false;
  if (std::optional<MemoryBlock> block = memory_->Remove(id)) {
    RecordRemoved({id, block->level, Tier::kMemory, block->data.size, block->version});
    removed = true;
  }
  if (auto spill = spilling_.find(id); spill != spilling_.end()) {
    const MemoryBlock& block = spill->second.block;
    RecordRemoved({id, block.level, Tier::kMemory, block.data.size, block.version});
    const DiskNo disk = spill->second.disk;
    CancelSpill(id);
    RemoveFromDisk(id, disk);  // after the spill, which may already be writing
    removed = true;
  }
  if (auto on_disk = disk_index_.find(id); on_disk != disk_index_.end()) {
    RecordRemoved(on_disk->second.status);
    const DiskNo disk = on_disk->second.disk;
    disk_index_.erase(on_disk);
    RemoveFromDisk(id, disk);
    removed = true;
  }
  if (on_failed_disk_.erase(id) > 0 && !removed) return Status::Ok();
  if (!removed) return NotFoundError("block " + id.ToString() + " is not stored here");
  return Status::Ok();
}

void BlockManager::CorruptStoredByte(const BlockId& id, Tier tier, uint64_t offset,
                                     Callback<Status> done) {
  if (tier == Tier::kMemory) {
    MemoryBlock* spilling = nullptr;
    if (auto spill = spilling_.find(id); spill != spilling_.end()) spilling = &spill->second.block;
    const MemoryBlock* block = spilling != nullptr ? spilling : memory_->Peek(id);
    if (block == nullptr) {
      done(NotFoundError("block " + id.ToString() + " is not in memory here"));
      return;
    }
    Result<BlockData> flipped = WithByteFlipped(block->data, offset);
    if (!flipped.ok()) {
      done(flipped.status());
      return;
    }
    // Copies made of the intact bytes (the small-block arena) go: readers meet the rot.
    if (block_changed_) block_changed_(id);
    // An evicted block waiting for its spill: the spill already holds the bytes it writes.
    if (spilling != nullptr) {
      spilling->data = std::move(flipped).value();
      done(Status::Ok());
      return;
    }
    done(memory_->ReplaceBytes(id, std::move(flipped).value()));
    return;
  }
  auto on_disk = disk_index_.find(id);
  if (on_disk == disk_index_.end()) {
    done(NotFoundError("block " + id.ToString() + " is not on disk here"));
    return;
  }
  disks_->Submit(
      on_disk->second.disk,
      [id, offset, done = std::move(done)](BlockStore& store) mutable -> StorageThread::Completion {
        Status corrupted = store.CorruptStoredByte(id, offset);
        return [corrupted, done = std::move(done)] { done(corrupted); };
      });
}

void BlockManager::RemoveFromDisk(const BlockId& id, DiskNo disk) {
  if (disks_->failed(disk)) return;  // the copy went with its disk
  disks_->Submit(disk, [id](BlockStore& store) -> StorageThread::Completion {
    Status removed = store.Remove(id);
    if (!removed.ok() && removed.code() != StatusCode::kNotFound) {
      // The store turns read-only on a storage error; its maintenance pass recovers it. The
      // copy left behind is an old version the master no longer lists.
      spdlog::warn("could not delete the disk copy of {}: {}", id.ToString(), removed.ToString());
    }
    return nullptr;
  });
}

std::vector<BlockStatus> BlockManager::List() const {
  std::vector<BlockStatus> blocks = memory_->List();
  blocks.reserve(blocks.size() + spilling_.size() + disk_index_.size());
  for (const auto& [id, spill] : spilling_) {
    const MemoryBlock& block = spill.block;
    blocks.push_back(
        {id, block.level, Tier::kMemory, block.data.size, block.version, block.block_digest});
  }
  for (const auto& [id, on_disk] : disk_index_) blocks.push_back(on_disk.status);
  std::sort(blocks.begin(), blocks.end(),
            [](const BlockStatus& a, const BlockStatus& b) { return a.id < b.id; });
  return blocks;
}

WorkerStats BlockManager::Stats() const {
  WorkerStats stats{.memory_capacity = memory_->capacity(),
                    .memory_used = memory_->used(),
                    .block_count = memory_block_count() + disk_index_.size(),
                    .memory_pinned = memory_->pinned_bytes()};
  disks_->FillStats(stats);
  return stats;
}

size_t BlockManager::memory_block_count() const {
  return memory_->block_count() + spilling_.size();
}

void BlockManager::Maintain() {
  read_ahead_.Age();
  disks_->Tick([this](DiskNo, std::vector<LostBlock> lost) {
    CollectLost(std::move(lost), /*report_removed=*/true);
  });
  HandleFailedDisks();
}

void BlockManager::HandleFailedDisks() {
  for (const DiskNo disk : disks_->TakeNewlyFailed()) {
    const std::string reason = "disk failed: " + disks_->path(disk) + ": " + disks_->failure(disk);
    // Uploads going to it end here; their writers are dropped on its thread before its store
    // closes (the client hears the failure with its next piece and puts the block elsewhere).
    std::vector<UploadId> doomed;
    for (const auto& [upload_id, upload] : uploads_) {
      if (upload->tier == Tier::kDisk && upload->disk_no == disk) doomed.push_back(upload_id);
    }
    for (const UploadId upload_id : doomed) AbortPut(upload_id);
    std::vector<LostBlock> lost;
    for (const auto& [id, on_disk] : disk_index_) {
      if (on_disk.disk == disk) {
        lost.push_back(LostBlock{id, reason, LostCause::kDiskFailed, on_disk.status.version});
      }
    }
    for (const LostBlock& block : lost) on_failed_disk_.insert_or_assign(block.id, disk);
    spdlog::error("{} blocks on the failed disk {} are reported lost{}", lost.size(),
                  disks_->path(disk), doomed.empty() ? "" : "; uploads to it aborted");
    CollectLost(std::move(lost), /*report_removed=*/true);
    RespillFrom(disk);
    disks_->Close(disk);
  }
}

void BlockManager::IndexOnDisk(const BlockStatus& status, DiskNo disk) {
  auto [it, inserted] = disk_index_.try_emplace(status.id, DiskBlock{status, disk});
  if (!inserted) {
    if (it->second.disk != disk) RemoveFromDisk(status.id, it->second.disk);
    it->second = DiskBlock{status, disk};
  }
  on_failed_disk_.erase(status.id);
}

std::vector<LostBlock> BlockManager::TakeLost() { return std::exchange(lost_, {}); }

void BlockManager::CollectLost(std::vector<LostBlock> blocks, bool report_removed) {
  for (LostBlock& block : blocks) {
    auto on_disk = disk_index_.find(block.id);
    if (on_disk != disk_index_.end()) {
      // The master knows only that this worker no longer has the block on disk.
      if (report_removed) RecordRemoved(on_disk->second.status);
      if (block.version == 0) block.version = on_disk->second.status.version;
      disk_index_.erase(on_disk);
    }
    lost_.push_back(std::move(block));
  }
}

std::vector<BlockStatusChange> BlockManager::TakeChanges() { return std::exchange(changes_, {}); }

// Every change to a block passes here: the ranges read ahead of its old version are forgotten,
// and the listener hears of it.
void BlockManager::RecordStored(const BlockStatus& status, bool fresh, uint64_t lease,
                                uint64_t reservation) {
  read_ahead_.Forget(status.id);
  if (block_changed_) block_changed_(status.id);
  changes_.push_back({status, /*removed=*/false, fresh, lease, reservation});
}

void BlockManager::RecordRemoved(const BlockStatus& status) {
  read_ahead_.Forget(status.id);
  if (block_changed_) block_changed_(status.id);
  changes_.push_back({status, true});
}

uint64_t BlockManager::NewMemoryGeneration() {
  return kMemoryGenerationBit | next_memory_generation_++;
}

}  // namespace bm
