#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/block_id.h"
#include "common/chunk.h"
#include "common/status.h"
#include "common/storage_level.h"
#include "worker/block_status.h"

namespace bm {

// A block held in memory: immutable chunks plus what the worker knows of it.
struct MemoryBlock {
  BlockId id;
  StorageLevel level;
  BlockData data;
  uint64_t generation;   // unique per stored version of a block on this worker
  uint64_t version = 0;  // which put wrote it, cluster-wide (BlockStatus::version)
  // Digests of its units (common/digest.h), computed from the bytes as they arrived, checked by
  // readers and before a spill to disk.
  std::vector<uint64_t> unit_digests{};
  // BlockDigestOf(unit_digests), kept so reports do not hash them again; 0 = no digests.
  uint64_t block_digest = 0;
};

// A byte-budgeted LRU of in-memory blocks.
//
// Room is claimed (Reserve, as an upload's bytes arrive), then the block is inserted (Insert) or
// the claim released (Release). Making room evicts least recently used blocks, but never blocks of
// the RDD being inserted (Spark's rule against cyclic replacement within one RDD); if room
// cannot be made that way nothing is evicted. Evicted blocks are handed back to the caller,
// which spills MEMORY_AND_DISK ones to disk and reports every change.
//
// Not thread-safe: owned by the worker's event loop.
class MemoryStore {
 public:
  explicit MemoryStore(uint64_t capacity_bytes);

  // Claims `size` bytes for a block with id `for_block`, evicting as needed. Returns the evicted
  // blocks in eviction order. kOutOfSpace when the block is bigger than the whole budget or when
  // evicting every eligible block would still not make room (then nothing is evicted).
  Result<std::vector<MemoryBlock>> Reserve(const BlockId& for_block, uint64_t size);
  // Whether Reserve(for_block, size) would succeed now (its kOutOfSpace otherwise), evicting
  // nothing: an upload checks its whole size up front and claims as its bytes arrive.
  Status CanMakeRoom(const BlockId& for_block, uint64_t size) const;
  // Gives back a claim that will not be used.
  void Release(uint64_t size);
  // Stores a block whose room was claimed with Reserve(data.size). Replaces nothing: the caller
  // removes an older version first. Becomes the most recently used block.
  void Insert(MemoryBlock block);

  // The block, marked most recently used; nullptr when absent. The pointer is valid until the
  // next non-const call.
  const MemoryBlock* Get(const BlockId& id);
  // The block without touching its recency; nullptr when absent. Valid until the next non-const
  // call.
  const MemoryBlock* Peek(const BlockId& id) const;
  // Asks the CPU to fetch the index entries and blocks of `ids` into cache, in one tight pass
  // whose cache misses overlap, before a loop that reads them one by one.
  void Prefetch(std::span<const BlockId> ids) const;
  bool Contains(const BlockId& id) const;
  // Removes and returns the block.
  std::optional<MemoryBlock> Remove(const BlockId& id);
  // Swaps the block's bytes for `data` of the same size, leaving its recency, generation and
  // digests as they were: for fault injection (a copy with a byte flipped). kNotFound when
  // absent; kInvalidArgument when the size differs.
  Status ReplaceBytes(const BlockId& id, BlockData data);

  std::vector<BlockStatus> List() const;
  uint64_t capacity() const { return capacity_; }
  // Bytes held by stored blocks plus outstanding reservations.
  uint64_t used() const { return stored_bytes_ + reserved_bytes_; }
  uint64_t stored_bytes() const { return stored_bytes_; }
  size_t block_count() const { return index_.size(); }

 private:
  using LruList = std::list<MemoryBlock>;  // front = least recently used

  // Whether `block` may be evicted to make room for `for_block` (the rule Reserve and
  // CanMakeRoom share).
  static bool Evictable(const MemoryBlock& block, const BlockId& for_block);

  const uint64_t capacity_;
  uint64_t stored_bytes_ = 0;
  uint64_t reserved_bytes_ = 0;
  // Every stored block once, ordered by last use; index_ maps each id to its list node.
  LruList lru_;
  std::unordered_map<BlockId, LruList::iterator> index_;
};

}  // namespace bm
