#include "worker/memory_store.h"

#include <algorithm>

#include "common/core/byte_size.h"

namespace bm {
namespace {

// What the eviction policy weighs: a MEMORY_AND_DISK block is spilled when evicted, any other
// is dropped.
EvictionCost EvictionCostOf(const MemoryBlock& block) {
  EvictionCost cost{.size = block.data.size,
                    .spilled_on_eviction = UsesMemory(block.level) && UsesDisk(block.level)};
  if (block.compute_cost_us > 0) {
    cost.compute_seconds = static_cast<double>(block.compute_cost_us) / 1e6;
  }
  return cost;
}

}  // namespace

MemoryStore::MemoryStore(uint64_t capacity_bytes, std::unique_ptr<EvictionPolicy> policy)
    : capacity_(capacity_bytes),
      policy_(policy != nullptr ? std::move(policy) : std::make_unique<LruEvictionPolicy>()) {}

bool MemoryStore::Evictable(const MemoryBlock& block, const BlockId& for_block) const {
  // Not a block a reader has mapped: its pages stay in use whatever the index says.
  if (pins_.contains(block.generation)) return false;
  // Not the block's own RDD (Spark's rule against cyclic replacement), nor an older version of
  // the block itself, which stays readable until its replacement commits.
  if (block.id == for_block) return false;
  const std::optional<uint64_t> rdd = for_block.rdd_id();
  if (rdd.has_value() && block.id.rdd_id() == rdd) return false;
  // Nor a block of another tenant's guaranteed share.
  return guard_ == nullptr || guard_->MayEvict(block.id, for_block);
}

Status MemoryStore::CanMakeRoom(const BlockId& for_block, uint64_t size) const {
  if (size > capacity_) {
    return OutOfSpaceError("block " + for_block.ToString() + " of " + FormatBytes(size) +
                           " is bigger than the whole memory budget of " + FormatBytes(capacity_));
  }
  if (size <= free_bytes()) return Status::Ok();
  const uint64_t needed = size - free_bytes();
  uint64_t evictable = 0;
  policy_->VisitInEvictionOrder([&](const BlockId& id) {
    const MemoryBlock& block = index_.at(id).block;
    if (Evictable(block, for_block)) evictable += block.data.size;
    return evictable < needed;
  });
  if (evictable >= needed) return Status::Ok();
  return OutOfSpaceError(
      "cannot make room for block " + for_block.ToString() + " of " + FormatBytes(size) +
      ": memory budget " + FormatBytes(capacity_) + ", " + FormatBytes(stored_bytes_) +
      " stored, " + FormatBytes(reserved_bytes_) + " reserved, only " + FormatBytes(evictable) +
      " evictable" +
      (pinned_bytes() > 0 ? ", " + FormatBytes(pinned_bytes()) + " mapped by readers" : "") +
      (for_block.rdd_id().has_value() ? " (blocks of the same RDD are not evicted)" : "") +
      (guard_ != nullptr ? " (nor other tenants' guaranteed shares)" : ""));
}

Result<std::vector<MemoryBlock>> MemoryStore::Reserve(const BlockId& for_block, uint64_t size) {
  // Evict only once it is known that the victims suffice: a failed claim evicts nothing.
  if (Status room = CanMakeRoom(for_block, size); !room.ok()) return room;
  const uint64_t needed = size > free_bytes() ? size - free_bytes() : 0;
  // The victims are chosen first and evicted after: the policy's order cannot change under
  // its own walk.
  std::vector<BlockId> victims;
  uint64_t freed = 0;
  if (needed > 0) {
    policy_->VisitInEvictionOrder([&](const BlockId& id) {
      const MemoryBlock& block = index_.at(id).block;
      if (Evictable(block, for_block)) {
        victims.push_back(id);
        freed += block.data.size;
      }
      return freed < needed;
    });
  }
  std::vector<MemoryBlock> evicted;
  evicted.reserve(victims.size());
  for (const BlockId& id : victims) {
    auto found = index_.find(id);
    policy_->Evicted(found->second.handle);
    stored_bytes_ -= found->second.block.data.size;
    evicted.push_back(std::move(found->second.block));
    index_.erase(found);
  }
  reserved_bytes_ += size;
  return evicted;
}

void MemoryStore::Release(uint64_t size) {
  BM_CHECK(size <= reserved_bytes_);
  reserved_bytes_ -= size;
}

void MemoryStore::Insert(MemoryBlock block) {
  BM_CHECK(!index_.contains(block.id));
  const uint64_t size = block.data.size;
  BM_CHECK(size <= reserved_bytes_);
  reserved_bytes_ -= size;
  stored_bytes_ += size;
  const EvictionPolicy::Handle handle = policy_->Add(block.id, EvictionCostOf(block));
  BlockId id = block.id;
  index_.emplace(std::move(id), Entry{std::move(block), handle});
}

const MemoryBlock* MemoryStore::Get(const BlockId& id) {
  auto found = index_.find(id);
  if (found == index_.end()) return nullptr;
  policy_->Touch(found->second.handle);
  return &found->second.block;
}

const MemoryBlock* MemoryStore::Peek(const BlockId& id) const {
  auto found = index_.find(id);
  return found == index_.end() ? nullptr : &found->second.block;
}

void MemoryStore::Prefetch(std::span<const BlockId> ids) const {
  for (const BlockId& id : ids) {
    auto found = index_.find(id);
    if (found != index_.end()) __builtin_prefetch(&found->second.block);
  }
}

bool MemoryStore::Contains(const BlockId& id) const { return index_.contains(id); }

std::optional<MemoryBlock> MemoryStore::Remove(const BlockId& id) {
  auto found = index_.find(id);
  if (found == index_.end()) return std::nullopt;
  policy_->Remove(found->second.handle);
  MemoryBlock block = std::move(found->second.block);
  index_.erase(found);
  stored_bytes_ -= block.data.size;
  if (auto pinned = pins_.find(block.generation); pinned != pins_.end()) {
    pinned->second.removed = true;
    pinned_stored_bytes_ -= pinned->second.bytes;
    detached_bytes_ += pinned->second.bytes;
  }
  return block;
}

Result<uint64_t> MemoryStore::Pin(const BlockId& id) {
  auto found = index_.find(id);
  if (found == index_.end()) return NotFoundError("block " + id.ToString() + " is not in memory");
  const MemoryBlock& block = found->second.block;
  PinnedVersion& pinned = pins_[block.generation];
  if (pinned.readers++ == 0) {
    pinned.bytes = block.data.size;
    pinned_stored_bytes_ += pinned.bytes;
  }
  return block.generation;
}

void MemoryStore::Unpin(uint64_t generation) {
  auto found = pins_.find(generation);
  if (found == pins_.end()) return;
  PinnedVersion& pinned = found->second;
  if (--pinned.readers > 0) return;
  (pinned.removed ? detached_bytes_ : pinned_stored_bytes_) -= pinned.bytes;
  pins_.erase(found);
}

bool MemoryStore::Hold(uint64_t bytes) {
  if (bytes > free_bytes()) return false;
  held_bytes_ += bytes;
  return true;
}

void MemoryStore::ReleaseHeld(uint64_t bytes) {
  BM_CHECK(bytes <= held_bytes_);
  held_bytes_ -= bytes;
}

Status MemoryStore::ReplaceBytes(const BlockId& id, BlockData data) {
  auto found = index_.find(id);
  if (found == index_.end()) return NotFoundError("block " + id.ToString() + " is not in memory");
  MemoryBlock& block = found->second.block;
  if (data.size != block.data.size) {
    return InvalidArgumentError("block " + id.ToString() + " holds " +
                                std::to_string(block.data.size) + " bytes, not " +
                                std::to_string(data.size));
  }
  block.data = std::move(data);
  return Status::Ok();
}

std::vector<BlockStatus> MemoryStore::List() const {
  std::vector<BlockStatus> blocks;
  blocks.reserve(index_.size());
  for (const auto& [id, entry] : index_) {
    const MemoryBlock& block = entry.block;
    blocks.push_back(
        {block.id, block.level, Tier::kMemory, block.data.size, block.version, block.block_digest});
  }
  std::sort(blocks.begin(), blocks.end(),
            [](const BlockStatus& a, const BlockStatus& b) { return a.id < b.id; });
  return blocks;
}

}  // namespace bm
