// BlockManager's side of eviction: blocks evicted from memory spilled to a disk (MEMORY_AND_DISK)
// or dropped, spills moved off a disk that failed, and their completions.

#include <spdlog/spdlog.h>

#include "worker/block_manager.h"

namespace bm {

void BlockManager::HandleEvicted(std::vector<MemoryBlock> evicted) {
  for (MemoryBlock& block : evicted) {
    ++evictions_;
    SpillOrDrop(std::move(block));
  }
}

void BlockManager::SpillOrDrop(MemoryBlock block, std::vector<DiskNo> refused_by) {
  // A put replacing the block is committing: it deletes what is on disk before it goes in, so
  // a copy of the old version written now would outlive it.
  if (!UsesDisk(block.level) || committing_.contains(block.id)) {
    RecordRemoved({block.id, block.level, Tier::kMemory, block.data.size, block.version});
    return;
  }
  Result<DiskNo> disk = ChooseDisk(block.id, block.data.size, "", refused_by);
  if (!disk.ok()) {
    // No disk takes it now: dropped, as a spill the disk refused would be.
    spdlog::warn("could not spill evicted block {} to disk, dropping it: {}", block.id.ToString(),
                 disk.status().ToString());
    RecordRemoved({block.id, block.level, Tier::kMemory, block.data.size, block.version});
    return;
  }
  // Stays readable from memory (Read, Find) until the spill commits.
  const uint64_t ticket = next_spill_ticket_++;
  const BlockId id = block.id;
  spill_backlog_bytes_ += block.data.size;
  // The bytes are checked against their digests on the way to disk (memory rot is caught
  // before it is made permanent).
  disks_->Submit(*disk,
                 [this, ticket, id, level = block.level, data = block.data, version = block.version,
                  digests = block.unit_digests](BlockStore& store) -> StorageThread::Completion {
                   Status written = store.Write(id, level, data, version, digests);
                   return [this, id, ticket, written] { SpillFinished(id, ticket, written); };
                 });
  spilling_.insert_or_assign(id, Spill{ticket, std::move(block), *disk, std::move(refused_by)});
}

void BlockManager::RespillFrom(DiskNo failed) {
  std::vector<MemoryBlock> stranded;
  for (auto spill = spilling_.begin(); spill != spilling_.end();) {
    if (spill->second.disk != failed) {
      ++spill;
      continue;
    }
    // A new ticket on the new disk: the old job's completion, if it ever comes, is ignored.
    OrphanSpill(spill->second);
    stranded.push_back(std::move(spill->second.block));
    spill = spilling_.erase(spill);
  }
  if (stranded.empty()) return;
  spdlog::warn("{} spills queued to the failed disk {} go to the other disks", stranded.size(),
               disks_->path(failed));
  for (MemoryBlock& block : stranded) SpillOrDrop(std::move(block));
}

void BlockManager::SpillFinished(const BlockId& id, uint64_t ticket, const Status& written) {
  if (auto orphan = orphaned_spills_.find(ticket); orphan != orphaned_spills_.end()) {
    orphaned_spill_bytes_ -= orphan->second;  // the job let go of the bytes
    orphaned_spills_.erase(orphan);
    return;
  }
  auto spill = spilling_.find(id);
  if (spill == spilling_.end() || spill->second.ticket != ticket) return;  // cancelled
  const MemoryBlock& block = spill->second.block;
  const DiskNo disk = spill->second.disk;
  disks_->NoteError(disk, written);
  // Written to a disk that has failed since, or refused by this one (an I/O error the check
  // has not judged yet, or a full store): the bytes are still here, so another disk takes them.
  // Never the same disk twice. (The job has returned: nothing is orphaned.)
  if (disks_->failed(disk) || (!written.ok() && written.code() != StatusCode::kDataLoss)) {
    spdlog::warn("could not spill evicted block {} to disk {}: {}; trying another disk",
                 id.ToString(), disks_->path(disk),
                 disks_->failed(disk) ? "the disk has failed" : written.ToString());
    MemoryBlock moved = std::move(spill->second.block);
    std::vector<DiskNo> refused_by = std::move(spill->second.refused_by);
    refused_by.push_back(disk);
    spill_backlog_bytes_ -= moved.data.size;
    spilling_.erase(spill);
    SpillOrDrop(std::move(moved), std::move(refused_by));
    return;
  }
  RecordRemoved({id, block.level, Tier::kMemory, block.data.size, block.version});
  if (written.ok()) {
    ++spills_;
    const BlockStatus status{
        id, block.level, Tier::kDisk, block.data.size, block.version, block.block_digest};
    IndexOnDisk(status, disk);
    RecordStored(status, /*fresh=*/false);
  } else {
    spdlog::warn("could not spill evicted block {} to disk, dropping it: {}", id.ToString(),
                 written.ToString());
    // Rot in RAM, caught by the spill's check: the copy is reported lost, so the master
    // restores the level from another copy now rather than at its next scan.
    if (written.code() == StatusCode::kDataLoss) {
      ++corrupt_spills_;
      lost_.push_back({id, "corrupt in memory, caught spilling it: " + written.message(),
                       LostCause::kCopyCorrupt, block.version});
    }
  }
  spill_backlog_bytes_ -= block.data.size;
  spilling_.erase(spill);
}

void BlockManager::CancelSpill(const BlockId& id) {
  auto spill = spilling_.find(id);
  if (spill == spilling_.end()) return;
  OrphanSpill(spill->second);
  spilling_.erase(spill);
}

void BlockManager::OrphanSpill(const Spill& spill) {
  const uint64_t bytes = spill.block.data.size;
  spill_backlog_bytes_ -= bytes;
  orphaned_spills_.emplace(spill.ticket, bytes);
  orphaned_spill_bytes_ += bytes;
}

}  // namespace bm
