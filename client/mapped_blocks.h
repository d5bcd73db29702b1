#pragma once

// The regions one local-read connection holds mapped (docs/storage.md "Same-host reads"), by block.
// Internal to the client library.
//
// Every caller reading the same version at once shares one mapping, and a mapping is kept for
// a while after its last caller lets go, as HDFS short-circuit readers keep a cache of block
// mappings: reading a block again then costs one round trip to confirm its version
// (LocalRequest.mapped), not a new region. Mapping a 64 MiB region and unmapping it sets up and
// tears down 16384 page-table entries, which costs a 64 MiB get about a third of its speed.
//
// An idle mapping keeps its pin, so the worker keeps counting its bytes and does not evict
// the block: idle mappings are bounded in bytes per connection (the oldest dropped first) and
// dropped after `idle_lifetime` by the reaper (IdleMappingReaper), or at once when a get finds
// a newer version. A dropped mapping is unmapped, which tells the worker (release).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/chunk.h"
#include "blockmgr/storage_level.h"
#include "blockmgr/tier.h"
#include "common/core/mutex.h"
#include "common/net/sealed_region.h"

namespace bm {

struct IdleMappingLimits {
  uint64_t bytes = 256ull << 20;  // per connection; 0: no idle mappings kept
  std::chrono::milliseconds lifetime{10'000};
};

// One mapped region of a block's version, pinned under `pin` on the connection.
struct MappedBlock {
  explicit MappedBlock(BlockId block) : id(std::move(block)) {}

  BlockId id;
  uint64_t pin = 0;
  uint64_t generation = 0;
  std::shared_ptr<const MappedRegion> region;  // unmapping it releases the pin
  // What the worker said of the version when it mapped it.
  Tier tier = Tier::kMemory;
  StorageLevel level = StorageLevel::kMemoryOnly;
  uint64_t version = 0;
  std::vector<uint64_t> unit_digests;

  // The owner's (MappedBlocks), under its mutex.
  uint64_t users = 0;   // callers holding a view, and requests offering the pin
  bool current = true;  // still the entry for its id
  bool idle = false;    // no users, kept: in the owner's idle list at idle_at
  std::list<MappedBlock*>::iterator idle_at;
  std::chrono::steady_clock::time_point idle_since{};
};

class IdleMappingReaper;

class MappedBlocks : public std::enable_shared_from_this<MappedBlocks> {
 public:
  using Clock = std::chrono::steady_clock;
  // `reaper` is told when a mapping goes idle (it may be gone by then: the Client closed).
  MappedBlocks(IdleMappingLimits limits, std::weak_ptr<IdleMappingReaper> reaper)
      : limits_(limits), reaper_(std::move(reaper)) {}
  ~MappedBlocks();
  MappedBlocks(const MappedBlocks&) = delete;
  MappedBlocks& operator=(const MappedBlocks&) = delete;

  // The mapping of `id` to offer the worker (its pin) for one request, held for it until
  // View() or Unreserve(); null when there is none.
  std::shared_ptr<MappedBlock> Reserve(const BlockId& id);
  void Unreserve(const std::shared_ptr<MappedBlock>& block);
  // A chunk over `block`'s region for the caller that holds one of its uses (a reservation
  // or Add's); the use ends when the chunk is dropped, on any thread.
  ChunkPtr View(std::shared_ptr<MappedBlock> block);
  // Records a newly mapped version as its id's mapping, with one use for its first caller. The
  // mapping it replaces is dropped once no caller holds it.
  void Add(const std::shared_ptr<MappedBlock>& block);
  // The worker no longer serves `block`'s version under its pin (it answered a get that
  // offered it with something else): dropped once no caller holds it, never offered again.
  void Forget(const std::shared_ptr<MappedBlock>& block);

  // The client removed these blocks: their mappings are dropped (unmapped once no caller holds
  // them), so the worker's pins go at once instead of after the idle lifetime.
  void ForgetBlocks(const std::function<bool(const BlockId&)>& removed);
  // The client replaces `id` (a put of it): its mapping of the old version is dropped the
  // same way.
  void ForgetBlock(const BlockId& id);
  // Drops the idle mappings older than the lifetime; when the next one will be, if any.
  std::optional<Clock::time_point> DropExpired(Clock::time_point now);
  // Drops every idle mapping, and from now on every mapping once unused (the connection is
  // closing).
  void Close();

  uint64_t idle_bytes() const;
  size_t idle_count() const;

 private:
  // One use of `block` ended.
  void Release(const std::shared_ptr<MappedBlock>& block);
  // Takes `block` out of the idle list (under mutex_).
  void Unidle(MappedBlock& block) BM_REQUIRES(mutex_);
  using ById = std::unordered_map<BlockId, std::shared_ptr<MappedBlock>>;
  // Takes the entry at `at` out (no longer current, no longer idle) into `dropped`, unmapped
  // once the caller lets go of the lock and no caller holds it; returns the next entry.
  ById::iterator Drop(ById::iterator at, std::vector<std::shared_ptr<MappedBlock>>& dropped)
      BM_REQUIRES(mutex_);
  // Drop() of the mapping idle longest.
  void DropOldestIdle(std::vector<std::shared_ptr<MappedBlock>>& dropped) BM_REQUIRES(mutex_);

  const IdleMappingLimits limits_;
  const std::weak_ptr<IdleMappingReaper> reaper_;
  mutable Mutex mutex_;
  ById by_id_ BM_GUARDED_BY(mutex_);
  std::list<MappedBlock*> idle_ BM_GUARDED_BY(mutex_);  // front = idle longest
  uint64_t idle_bytes_ BM_GUARDED_BY(mutex_) = 0;
  bool closed_ BM_GUARDED_BY(mutex_) = false;
};

// A mapping offered to the worker for one request (MappedBlocks::Reserve): held until the
// reply is taken (Take, then View) or the offer is dropped.
class MappingOffer {
 public:
  MappingOffer() = default;
  MappingOffer(std::shared_ptr<MappedBlocks> owner, std::shared_ptr<MappedBlock> block)
      : owner_(std::move(owner)), block_(std::move(block)) {}
  MappingOffer(MappingOffer&&) = default;
  MappingOffer& operator=(MappingOffer&& other) noexcept {
    Drop();
    owner_ = std::move(other.owner_);
    block_ = std::move(other.block_);
    return *this;
  }
  ~MappingOffer() { Drop(); }

  const MappedBlock* get() const { return block_.get(); }
  uint64_t pin() const { return block_ ? block_->pin : 0; }
  // The worker confirmed the mapping: a chunk over it for the caller.
  ChunkPtr Take() { return owner_->View(std::move(block_)); }
  // The worker answered otherwise: the mapping is stale (MappedBlocks::Forget).
  void Forget() {
    if (block_) owner_->Forget(block_);
    Drop();
  }

 private:
  void Drop() {
    if (block_) owner_->Unreserve(block_);
    block_.reset();
  }
  std::shared_ptr<MappedBlocks> owner_;
  std::shared_ptr<MappedBlock> block_;
};

// Drops the idle mappings of a client's connections when their lifetime ends, on a thread of
// its own, so a client that stops reading does not keep the worker's memory pinned.
class IdleMappingReaper {
 public:
  IdleMappingReaper();
  ~IdleMappingReaper();
  IdleMappingReaper(const IdleMappingReaper&) = delete;
  IdleMappingReaper& operator=(const IdleMappingReaper&) = delete;

  void Watch(std::weak_ptr<MappedBlocks> blocks);
  // A mapping went idle: look again by `at`.
  void WakeBy(MappedBlocks::Clock::time_point at);

 private:
  void Run();

  Mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::weak_ptr<MappedBlocks>> watched_ BM_GUARDED_BY(mutex_);
  std::optional<MappedBlocks::Clock::time_point> next_ BM_GUARDED_BY(mutex_);
  bool stopping_ BM_GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

}  // namespace bm
