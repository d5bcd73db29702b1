#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/chunk.h"
#include "blockmgr/status.h"
#include "blockmgr/storage_level.h"
#include "worker/block_status.h"
#include "worker/eviction_policy.h"
#include "worker/guaranteed_shares.h"

namespace bm {

// A block held in memory: immutable chunks plus what the worker knows of it.
struct MemoryBlock {
  BlockId id;
  StorageLevel level;
  BlockData data;
  uint64_t generation;   // unique per stored version of a block on this worker
  uint64_t version = 0;  // which put wrote it, cluster-wide (BlockStatus::version)
  // Digests of its units (common/core/digest.h), computed from the bytes as they arrived, checked
  // by readers and before a spill to disk.
  std::vector<uint64_t> unit_digests{};
  // BlockDigestOf(unit_digests), kept so reports do not hash them again; 0 = no digests.
  uint64_t block_digest = 0;
  // The wall time its put said it took to compute, in microseconds (PutBlock.computeCostUs);
  // 0 = not stated. Weighed by the cost-aware eviction policy.
  uint64_t compute_cost_us = 0;
};

// A byte-budgeted store of in-memory blocks, evicting in the order of its EvictionPolicy
// (worker/eviction_policy.h: least recently used, or GreedyDual-Size-Frequency by cost).
//
// Room is claimed (Reserve, as an upload's bytes arrive), then the block is inserted (Insert) or
// the claim released (Release). Making room evicts blocks in the policy's order, but never blocks
// of the RDD being inserted (Spark's rule against cyclic replacement within one RDD); if room
// cannot be made that way nothing is evicted. Evicted blocks are handed back to the caller,
// which spills MEMORY_AND_DISK ones to disk and reports every change.
//
// Not thread-safe: owned by the worker's event loop.
class MemoryStore {
 public:
  // `policy`: the order of eviction; nullptr = least recently used first.
  explicit MemoryStore(uint64_t capacity_bytes, std::unique_ptr<EvictionPolicy> policy = nullptr);

  // Asks `guard` (borrowed, may be null: none) about every victim too: tenants' guaranteed
  // shares (worker/guaranteed_shares.h). It must outlive the store or be unset first.
  void set_eviction_guard(const EvictionGuard* guard) { guard_ = guard; }

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
  // removes an older version first. Becomes the most recently used block (the policy's Add).
  void Insert(MemoryBlock block);

  // The block, marked read (most recently used; the policy's Touch); nullptr when absent. The
  // pointer is valid until the next non-const call.
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
  // digests as they were: the same bytes moved into a shared region for same-host readers, or
  // (fault injection) a copy with a byte flipped. kNotFound when absent; kInvalidArgument when
  // the size differs.
  Status ReplaceBytes(const BlockId& id, BlockData data);

  // --- Pins: blocks a reader on this host has mapped (docs/storage.md "Same-host reads").
  // Pins the stored version of `id` for one more reader and returns its generation: eviction
  // skips it while pinned. Removing it (a removal, an overwrite) takes it out of the index at
  // once, but its bytes stay counted in used() until its last pin is released, because the
  // readers' mappings keep its pages. kNotFound when absent.
  Result<uint64_t> Pin(const BlockId& id);
  // Releases one pin of the version `generation` (unknown generations are ignored).
  void Unpin(uint64_t generation);
  // Counts `bytes` that readers hold outside the index (a disk block read into a region for
  // one) in used() until ReleaseHeld; false, counting nothing, when they do not fit in the
  // budget as it is (nothing is evicted for them: the reader reads over TCP instead).
  bool Hold(uint64_t bytes);
  void ReleaseHeld(uint64_t bytes);
  // Bytes readers keep mapped: pinned blocks (stored or already removed) plus held bytes.
  uint64_t pinned_bytes() const { return pinned_stored_bytes_ + detached_bytes_ + held_bytes_; }

  std::vector<BlockStatus> List() const;
  uint64_t capacity() const { return capacity_; }
  // Bytes held by stored blocks, outstanding reservations, and what readers keep mapped beyond
  // the stored blocks (pinned blocks already removed, held bytes).
  uint64_t used() const { return stored_bytes_ + reserved_bytes_ + detached_bytes_ + held_bytes_; }
  uint64_t stored_bytes() const { return stored_bytes_; }
  size_t block_count() const { return index_.size(); }
  const EvictionPolicy& policy() const { return *policy_; }

 private:
  struct Entry {
    MemoryBlock block;
    EvictionPolicy::Handle handle;
  };

  // Whether `block` may be evicted to make room for `for_block` (the rule Reserve and
  // CanMakeRoom share).
  bool Evictable(const MemoryBlock& block, const BlockId& for_block) const;
  uint64_t free_bytes() const { return used() >= capacity_ ? 0 : capacity_ - used(); }

  struct PinnedVersion {
    uint64_t bytes = 0;
    uint64_t readers = 0;
    bool removed = false;  // out of the index; its bytes are in detached_bytes_
  };

  const uint64_t capacity_;
  const EvictionGuard* guard_ = nullptr;
  uint64_t stored_bytes_ = 0;
  uint64_t reserved_bytes_ = 0;
  // Every stored block once, with its slot in the policy, which orders them for eviction.
  std::unordered_map<BlockId, Entry> index_;
  std::unique_ptr<EvictionPolicy> policy_;
  // Pinned versions by generation.
  std::unordered_map<uint64_t, PinnedVersion> pins_;
  uint64_t pinned_stored_bytes_ = 0;  // pinned versions still in the index
  uint64_t detached_bytes_ = 0;       // pinned versions removed from the index
  uint64_t held_bytes_ = 0;
};

}  // namespace bm
