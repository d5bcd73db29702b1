// BlockManager's side of same-host reads: blocks handed to readers on this host as sealed
// shared regions (docs/storage.md "Same-host reads").

#include <spdlog/spdlog.h>

#include <cstring>

#include "common/core/digest.h"
#include "common/core/protocol.h"
#include "worker/block_manager.h"

namespace bm {
namespace {

// A block up to this size is copied into its region while its first local reader waits; a
// bigger one is copied in the background while that reader reads over TCP.
constexpr uint64_t kWaitForCopyBytes = 64 << 20;

// Copies `chunks` into `out` (exactly their size).
void CopyChunks(const std::vector<ChunkPtr>& chunks, std::span<std::byte> out) {
  size_t at = 0;
  for (const ChunkPtr& chunk : chunks) {
    const std::span<const std::byte> bytes = chunk->bytes();
    std::memcpy(out.data() + at, bytes.data(), bytes.size());
    at += bytes.size();
  }
}

// Fills a new region with `chunks` and checks it against `unit_digests`: a copy that went bad
// where it was kept is never handed out (kDataLoss).
Result<std::shared_ptr<const SealedRegion>> RegionOf(const BlockId& id, uint64_t size,
                                                     const std::vector<ChunkPtr>& chunks,
                                                     const std::vector<uint64_t>& unit_digests) {
  return SealedRegion::Create(
      "bm-block " + id.ToString(), size, [&](std::span<std::byte> out) -> Status {
        CopyChunks(chunks, out);
        const std::optional<uint64_t> bad =
            FirstBadUnit({std::span<const std::byte>(out)}, 0, size, size, unit_digests);
        if (bad.has_value()) {
          return DataLossError("block " + id.ToString() + " is corrupt: unit " +
                               std::to_string(*bad) + " does not match its digest");
        }
        return Status::Ok();
      });
}

// The block's one chunk when it already is a whole sealed region.
std::shared_ptr<const SealedRegion> RegionHeldBy(const BlockData& data) {
  if (data.chunks.size() != 1) return nullptr;
  const auto* region = dynamic_cast<const SealedRegionChunk*>(data.chunks.front().get());
  return region != nullptr ? region->region() : nullptr;
}

}  // namespace

void BlockManager::ShareWhole(const BlockId& id, Callback<Result<SharedBlock>> done) {
  if (memory_->Contains(id)) {
    ShareInMemory(id, std::move(done));
    return;
  }
  if (spilling_.contains(id)) {
    done(UnavailableError("block " + id.ToString() + " is being spilled to disk"));
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
  ShareFromDisk(on_disk->second.status, on_disk->second.disk, std::move(done));
}

Result<SharedBlock> BlockManager::PinShared(const BlockId& id,
                                            std::shared_ptr<const SealedRegion> region) {
  const MemoryBlock* block = memory_->Peek(id);
  BM_CHECK(block != nullptr);
  SharedBlock shared{
      std::move(region),
      {id, block->level, Tier::kMemory, block->data.size, block->version, block->block_digest},
      block->generation,
      block->unit_digests,
      {}};
  BM_ASSIGN_OR_RETURN(shared.pin.generation, memory_->Pin(id));
  shared.pin.tier = Tier::kMemory;
  return shared;
}

void BlockManager::ShareInMemory(const BlockId& id, Callback<Result<SharedBlock>> done) {
  const MemoryBlock* block = memory_->Get(id);  // a read: most recently used now
  BM_CHECK(block != nullptr);
  if (std::shared_ptr<const SealedRegion> region = RegionHeldBy(block->data)) {
    done(PinShared(id, std::move(region)));
    return;
  }
  // A big block's reader does not wait for its copy (a second or more for a GiB, far more on a
  // loaded or instrumented build): it reads over TCP this once while the copy runs, and maps the
  // block from its next read on.
  const bool reader_waits = block->data.size <= kWaitForCopyBytes;
  const Status not_yet = UnavailableError("block " + id.ToString() +
                                          " is being moved into shared memory; read it over TCP");
  const bool already_copying = !sharing_.insert(block->generation).second;
  if (!reader_waits) {
    done(not_yet);
    if (already_copying) return;
    done = [](Result<SharedBlock>) {};  // nobody waits for this copy
  }
  // The copy runs on the region copier's thread (a 1 GiB block takes the better part of a
  // second, which the loop must not stall for, and behind spills on the storage thread it would
  // wait seconds); the chunks are immutable and shared, so it reads them there safely. Until
  // it completes the block is held twice: one block at a time, as the copier runs one job at
  // a time.
  region_copier_->Submit([id, generation = block->generation, size = block->data.size,
                          chunks = block->data.chunks, digests = block->unit_digests, reader_waits,
                          done = std::move(done), this]() mutable -> JobThread::Completion {
    Result<std::shared_ptr<const SealedRegion>> moved = RegionOf(id, size, chunks, digests);
    chunks.clear();
    return [this, id, generation, reader_waits, moved = std::move(moved),
            done = std::move(done)]() mutable {
      sharing_.erase(generation);
      const MemoryBlock* now = memory_->Peek(id);
      if (now == nullptr || now->generation != generation) {
        // Evicted, removed or replaced meanwhile: the reader reads over TCP.
        done(AbortedError("block " + id.ToString() + " changed while it was shared"));
        return;
      }
      if (!moved.ok()) {
        // A copy failing its digests is never handed out; the reader reports it (verifyBlock,
        // as for a corrupt TCP read), which drops it and has it restored from a good copy.
        done(moved.status());
        return;
      }
      std::shared_ptr<const SealedRegion> region = RegionHeldBy(now->data);
      if (region == nullptr) {  // not moved by another reader's copy meanwhile
        region = *moved;
        BlockData shared;
        shared.Append(std::make_shared<SealedRegionChunk>(region));
        // The old chunks go once in-flight sends of them finish: the bytes are then held once.
        const Status replaced = memory_->ReplaceBytes(id, std::move(shared));
        BM_CHECK(replaced.ok());
      }
      if (!reader_waits) return;  // moved for the next reader; nobody to pin it for now
      done(PinShared(id, std::move(region)));
    };
  });
}

void BlockManager::ShareFromDisk(const BlockStatus& status, DiskNo disk,
                                 Callback<Result<SharedBlock>> done) {
  if (!memory_->Hold(status.size)) {
    done(OutOfSpaceError("no memory to map disk block " + status.id.ToString() + " for a reader"));
    return;
  }
  const BlockId id = status.id;
  const uint64_t size = status.size;
  disks_->Submit(
      disk,
      [id, size, status, done = std::move(done),
       this](BlockStore& store) mutable -> StorageThread::Completion {
        Result<SharedBlock> shared = [&]() -> Result<SharedBlock> {
          SharedBlock block{nullptr, status, 0, {}, {}};
          // Range by range straight into the region, so a big block is never held twice.
          BM_ASSIGN_OR_RETURN(
              block.region,
              SealedRegion::Create(
                  "bm-block " + id.ToString(), size, [&](std::span<std::byte> out) -> Status {
                    for (uint64_t offset = 0; offset < size; offset += kMaxPieceBytes) {
                      BM_ASSIGN_OR_RETURN(BlockRead read,
                                          ReadFromDisk(store, id, offset, kMaxPieceBytes));
                      if (read.total_size != size ||
                          (offset > 0 && read.generation != block.generation)) {
                        return AbortedError("block " + id.ToString() +
                                            " changed while it was read");
                      }
                      block.generation = read.generation;
                      block.status.version = read.version;
                      block.unit_digests.insert(block.unit_digests.end(), read.unit_digests.begin(),
                                                read.unit_digests.end());
                      uint64_t at = offset;
                      for (const ChunkPtr& chunk : read.chunks) {
                        std::memcpy(out.data() + at, chunk->bytes().data(), chunk->size());
                        at += chunk->size();
                      }
                    }
                    const std::optional<uint64_t> bad = FirstBadUnit(
                        {std::span<const std::byte>(out)}, 0, size, size, block.unit_digests);
                    if (bad.has_value()) {
                      return DataLossError("block " + id.ToString() + " is corrupt on disk: unit " +
                                           std::to_string(*bad) + " does not match its digest");
                    }
                    return Status::Ok();
                  }));
          return block;
        }();
        return [this, size, shared = std::move(shared), done = std::move(done)]() mutable {
          if (!shared.ok()) {
            memory_->ReleaseHeld(size);
          } else {
            shared->pin = {Tier::kDisk, 0, size};
          }
          done(std::move(shared));
        };
      });
}

void BlockManager::ReleaseShared(const SharedBlock::Pin& pin) {
  if (pin.tier == Tier::kMemory) {
    memory_->Unpin(pin.generation);
  } else {
    memory_->ReleaseHeld(pin.held_bytes);
  }
}

bool BlockManager::ReadAgainShared(const BlockId& id, const SharedBlock::Pin& pin) {
  if (pin.tier != Tier::kMemory) return false;  // a disk block's region is one reader's copy
  const MemoryBlock* block = memory_->Peek(id);
  if (block == nullptr || block->generation != pin.generation) return false;
  memory_->Get(id);  // a read: most recently used now
  return true;
}

}  // namespace bm
