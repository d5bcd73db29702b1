#include "worker/block_manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "common/digest.h"

namespace bm {

// One block being uploaded. Its space is claimed in `tier` from BeginPut on; memory uploads
// collect the received chunks as they are, disk uploads stream them through `writer`.
struct BlockManager::Upload {
  Upload(const BlockId& id, StorageLevel level, uint64_t total_size, PutVersion version)
      : id(id), level(level), total_size(total_size), version(version) {}

  const BlockId id;
  const StorageLevel level;
  const uint64_t total_size;
  const PutVersion version;
  Tier tier = Tier::kMemory;
  uint64_t received = 0;
  BlockData data;                      // tier == kMemory
  BlockDigester digester;              // tier == kMemory (the disk writer digests its own)
  std::unique_ptr<DiskWriter> writer;  // tier == kDisk
};

BlockManager::BlockManager(std::unique_ptr<MemoryStore> memory, std::unique_ptr<BlockStore> disk)
    : memory_(std::move(memory)), disk_(std::move(disk)) {
  BM_CHECK(memory_ != nullptr && disk_ != nullptr);
  next_generation_ = disk_->next_generation();
  // Lost before this run: the master learns of them with the registration, whose full block
  // report already leaves them out.
  CollectLost(/*report_removed=*/false);
}

BlockManager::~BlockManager() {
  // Writers borrow the disk store: drop them (and memory claims) first.
  while (!uploads_.empty()) AbortPut(uploads_.begin()->first);
}

Result<BlockManager::UploadId> BlockManager::BeginPut(const BlockId& id, StorageLevel level,
                                                      uint64_t total_size, PutVersion version) {
  auto upload = std::make_unique<Upload>(id, level, total_size, version);

  std::string memory_failure;
  if (UsesMemory(level)) {
    Result<std::vector<MemoryBlock>> evicted = memory_->Reserve(id, total_size);
    if (evicted.ok()) {
      upload->tier = Tier::kMemory;
      HandleEvicted(std::move(evicted).value());
    } else if (UsesDisk(level) && evicted.status().code() == StatusCode::kOutOfSpace) {
      memory_failure = evicted.status().message();
    } else {
      return evicted.status();
    }
  }
  if (!UsesMemory(level) || !memory_failure.empty()) {
    Result<std::unique_ptr<DiskWriter>> writer =
        disk_->BeginWrite(id, level, total_size, version.token);
    if (!writer.ok()) {
      if (memory_failure.empty()) return writer.status();
      return Status(writer.status().code(),
                    "memory: " + memory_failure + "; disk: " + writer.status().message());
    }
    upload->tier = Tier::kDisk;
    upload->writer = std::move(writer).value();
  }

  const UploadId upload_id = next_upload_id_++;
  uploads_.emplace(upload_id, std::move(upload));
  return upload_id;
}

Status BlockManager::AppendPut(UploadId upload_id, std::vector<ChunkPtr> chunks) {
  auto found = uploads_.find(upload_id);
  if (found == uploads_.end()) {
    return NotFoundError("upload " + std::to_string(upload_id) + " is not in progress");
  }
  Upload& upload = *found->second;
  uint64_t bytes = 0;
  for (const ChunkPtr& chunk : chunks) bytes += chunk->size();
  if (bytes > upload.total_size - upload.received) {
    std::string message = "upload of block " + upload.id.ToString() + " sent " +
                          std::to_string(upload.received + bytes) + " bytes, more than the " +
                          std::to_string(upload.total_size) + " declared";
    AbortPut(upload_id);
    return InvalidArgumentError(std::move(message));
  }
  for (ChunkPtr& chunk : chunks) {
    if (chunk->size() == 0) continue;
    if (upload.tier == Tier::kMemory) {
      upload.digester.Update(chunk->bytes());
      upload.data.Append(std::move(chunk));
    } else {
      Status s = upload.writer->Append(chunk->bytes());
      if (!s.ok()) {
        AbortPut(upload_id);
        return s;
      }
    }
  }
  upload.received += bytes;
  return Status::Ok();
}

Result<Tier> BlockManager::CommitPut(UploadId upload_id) {
  auto found = uploads_.find(upload_id);
  if (found == uploads_.end()) {
    return NotFoundError("upload " + std::to_string(upload_id) + " is not in progress");
  }
  Upload& upload = *found->second;
  if (upload.received != upload.total_size) {
    std::string message = "upload of block " + upload.id.ToString() + " ended after " +
                          std::to_string(upload.received) + " of " +
                          std::to_string(upload.total_size) + " bytes";
    AbortPut(upload_id);
    return InvalidArgumentError(std::move(message));
  }

  const BlockId id = upload.id;
  const std::optional<BlockStatus> old = Find(id);
  if (upload.tier == Tier::kMemory) {
    if (old.has_value() && old->tier == Tier::kDisk) {
      Status s = disk_->Remove(id);
      if (!s.ok()) {
        AbortPut(upload_id);
        return s;
      }
    }
    if (old.has_value() && old->tier == Tier::kMemory) {
      // Its bytes stay alive for in-flight sends holding its chunks.
      memory_->Remove(id);
    }
    memory_->Insert(MemoryBlock{id, upload.level, std::move(upload.data), NewMemoryGeneration(),
                                upload.version.token, upload.digester.Finish().units});
  } else {
    // Replaces a disk version atomically.
    Status s = upload.writer->Commit();
    if (!s.ok()) {
      AbortPut(upload_id);
      return s;
    }
    if (old.has_value() && old->tier == Tier::kMemory) memory_->Remove(id);
  }

  const Tier tier = upload.tier;
  if (old.has_value() && old->tier != tier) RecordRemoved(*old);
  RecordStored(BlockStatus{id, upload.level, tier, upload.total_size, upload.version.token},
               upload.version.fresh, upload.version.lease);
  uploads_.erase(found);
  return tier;
}

void BlockManager::AbortPut(UploadId upload_id) {
  auto found = uploads_.find(upload_id);
  if (found == uploads_.end()) return;
  if (found->second->tier == Tier::kMemory) memory_->Release(found->second->total_size);
  // Destroying an uncommitted writer deletes its chunks and releases its disk claim.
  uploads_.erase(found);
}

bool BlockManager::HasUpload(UploadId upload_id) const { return uploads_.contains(upload_id); }

Result<BlockRead> BlockManager::Read(const BlockId& id, uint64_t offset, uint64_t max_length) {
  if (const MemoryBlock* block = memory_->Get(id)) {
    const uint64_t size = block->data.size;
    if (offset > size) {
      return InvalidArgumentError("offset " + std::to_string(offset) +
                                  " is past the end of block " + id.ToString() + " (" +
                                  std::to_string(size) + " bytes)");
    }
    BlockRead read{size, offset, block->generation, Tier::kMemory, block->level, {},
                   block->version};
    const uint64_t end = offset + std::min(max_length, size - offset);
    if (!block->unit_digests.empty() && end > offset) {
      read.unit_digests.assign(
          block->unit_digests.begin() + static_cast<ptrdiff_t>(offset / kDigestUnitBytes),
          block->unit_digests.begin() + static_cast<ptrdiff_t>((end - 1) / kDigestUnitBytes) + 1);
    }
    uint64_t pos = 0;
    for (const ChunkPtr& chunk : block->data.chunks) {
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
  const std::optional<BlockStatus> on_disk = disk_->Find(id);
  if (!on_disk.has_value()) {
    return NotFoundError("block " + id.ToString() + " is not stored here");
  }
  ASSIGN_OR_RETURN(DiskRead disk_read, disk_->Read(id, offset, max_length));
  return BlockRead{disk_read.total_size, offset,          disk_read.generation,
                   Tier::kDisk,          disk_read.level, std::move(disk_read.chunks),
                   on_disk->version,     std::move(disk_read.unit_digests)};
}

Result<BlockCheck> BlockManager::Verify(const BlockId& id) {
  if (const MemoryBlock* block = memory_->Peek(id)) {
    BlockCheck check{Tier::kMemory, !block->unit_digests.empty(), Status::Ok()};
    std::vector<std::span<const std::byte>> pieces;
    for (const ChunkPtr& chunk : block->data.chunks) pieces.push_back(chunk->bytes());
    std::optional<uint64_t> bad =
        FirstBadUnit(pieces, 0, block->data.size, block->data.size, block->unit_digests);
    if (!bad.has_value()) return check;
    check.corrupt = DataLossError("block " + id.ToString() + " is corrupt in memory: unit " +
                                  std::to_string(*bad) + " does not match its digest");
    spdlog::error("{}; dropped, never served", check.corrupt.message());
    std::optional<MemoryBlock> dropped = memory_->Remove(id);
    RecordRemoved({id, dropped->level, Tier::kMemory, dropped->data.size, dropped->version});
    lost_.push_back(id);
    return check;
  }
  const std::optional<BlockStatus> on_disk = disk_->Find(id);
  if (!on_disk.has_value()) return NotFoundError("block " + id.ToString() + " is not stored here");
  BlockCheck check{Tier::kDisk, false, Status::Ok()};
  std::optional<uint64_t> generation;
  for (uint64_t offset = 0; offset < on_disk->size || !generation.has_value();) {
    Result<DiskRead> read = generation.has_value()
                                ? disk_->ReadGeneration(id, *generation, offset, kDigestUnitBytes)
                                : disk_->Read(id, offset, kDigestUnitBytes);
    if (!read.ok()) {
      if (read.status().code() != StatusCode::kDataLoss) return read.status();
      check.corrupt = read.status();  // the store dropped it
      break;
    }
    generation = read->generation;
    check.digested = !read->unit_digests.empty();
    std::vector<std::span<const std::byte>> pieces;
    uint64_t bytes = 0;
    for (const ChunkPtr& chunk : read->chunks) {
      pieces.push_back(chunk->bytes());
      bytes += chunk->size();
    }
    if (std::optional<uint64_t> bad =
            FirstBadUnit(pieces, offset, bytes, read->total_size, read->unit_digests)) {
      check.corrupt = disk_->ReportCorrupt(
          id, *generation, "chunk " + std::to_string(*bad) + " does not match its digest");
      break;
    }
    if (bytes == 0) break;
    offset += bytes;
  }
  CollectLost(/*report_removed=*/true);
  return check;
}

std::optional<BlockStatus> BlockManager::Find(const BlockId& id) const {
  if (const MemoryBlock* block = memory_->Peek(id)) {
    return BlockStatus{id, block->level, Tier::kMemory, block->data.size, block->version};
  }
  return disk_->Find(id);
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
  if (std::optional<BlockStatus> on_disk = disk_->Find(id)) {
    RETURN_IF_ERROR(disk_->Remove(id));
    RecordRemoved(*on_disk);
    removed = true;
  }
  if (!removed) return NotFoundError("block " + id.ToString() + " is not stored here");
  return Status::Ok();
}

std::vector<BlockStatus> BlockManager::List() const {
  std::vector<BlockStatus> blocks = memory_->List();
  std::vector<BlockStatus> on_disk = disk_->List();
  blocks.insert(blocks.end(), on_disk.begin(), on_disk.end());
  std::sort(blocks.begin(), blocks.end(),
            [](const BlockStatus& a, const BlockStatus& b) { return a.id < b.id; });
  return blocks;
}

WorkerStats BlockManager::Stats() const {
  return WorkerStats{memory_->capacity(),
                     memory_->used(),
                     disk_->used(),
                     disk_->capacity(),
                     memory_->block_count() + disk_->block_count(),
                     disk_->read_only()};
}

void BlockManager::Maintain() {
  disk_->Maintain();
  CollectLost(/*report_removed=*/true);
}

std::vector<BlockId> BlockManager::TakeLost() { return std::exchange(lost_, {}); }

void BlockManager::CollectLost(bool report_removed) {
  for (LostBlock& block : disk_->TakeLost()) {
    // The master knows only that this worker no longer has the block on disk.
    if (report_removed && memory_->Peek(block.id) == nullptr) {
      RecordRemoved({block.id, StorageLevel::kDiskOnly, Tier::kDisk, 0});
    }
    lost_.push_back(block.id);
  }
}

size_t BlockManager::memory_block_count() const { return memory_->block_count(); }

size_t BlockManager::disk_block_count() const { return disk_->block_count(); }

std::vector<BlockStatusChange> BlockManager::TakeChanges() { return std::exchange(changes_, {}); }

void BlockManager::RecordStored(const BlockStatus& status, bool fresh, uint64_t lease) {
  changes_.push_back({status, /*removed=*/false, fresh, lease});
}

void BlockManager::RecordRemoved(const BlockStatus& status) { changes_.push_back({status, true}); }

void BlockManager::HandleEvicted(std::vector<MemoryBlock> evicted) {
  for (MemoryBlock& block : evicted) {
    const BlockStatus was{block.id, block.level, Tier::kMemory, block.data.size, block.version};
    RecordRemoved(was);
    ++evictions_;
    if (!UsesDisk(block.level)) continue;
    Status s = disk_->Write(block.id, block.level, block.data, block.version, block.unit_digests);
    if (s.ok()) {
      ++spills_;
      RecordStored(BlockStatus{block.id, block.level, Tier::kDisk, block.data.size, block.version},
                   /*fresh=*/false);
    } else {
      spdlog::warn("could not spill evicted block {} to disk, dropping it: {}", block.id.ToString(),
                   s.ToString());
    }
  }
}

uint64_t BlockManager::NewMemoryGeneration() {
  const uint64_t generation = std::max(next_generation_, disk_->next_generation());
  next_generation_ = generation + 1;
  disk_->AdvanceGenerationTo(next_generation_);
  return generation;
}

}  // namespace bm
