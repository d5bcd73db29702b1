#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/status.h"
#include "blockmgr/storage_level.h"
#include "blockmgr/tier.h"
#include "master/u64_hash_map.h"
#include "master/version_history.h"

namespace bm {

// One copy of a block on a worker, as the master indexes it. (Not the client's BlockLocation,
// which carries the worker's address: two classes of one name would break the one definition
// rule in a binary that links both.)
struct IndexedLocation {
  std::string worker_id;
  Tier tier;
  uint64_t size;

  bool operator==(const IndexedLocation&) const = default;
};

// What the master knows about one block.
struct BlockInfo {
  BlockId id;
  StorageLevel level;
  std::vector<IndexedLocation> locations;  // never empty; memory before disk, then by worker id
  uint64_t digest = 0;  // the current version's block digest (BlockChange::digest); 0 = unknown
};

// One copy of a block as the index holds it, for lookups that copy nothing: `worker_id` is the
// index's own string, valid until the index next changes.
struct LocationRef {
  const std::string* worker_id;
  Tier tier;
  uint64_t size;
};

// One change a worker reported: the block is now held as (level, tier, size, version), or it
// is gone.
struct BlockChange {
  BlockId id;
  bool removed = false;
  StorageLevel level = StorageLevel::kMemoryOnly;
  Tier tier = Tier::kMemory;
  uint64_t size = 0;
  uint64_t version = 0;  // the writer's token (BlockStatus.version); 0 = unknown
  bool fresh = false;    // a put just committed it: it replaces every other version
  uint64_t lease = 0;    // the compute lease a fresh get-or-compute put stored it under
  // The copy's block digest (BlockStatus.digest: BlockDigestOf its unit digests); 0 = unknown.
  uint64_t digest = 0;
};

// A copy the index no longer lists because its version was replaced (or is stale): its worker
// must be told to remove that version.
struct RetiredCopy {
  std::string worker_id;
  BlockId id;
  uint64_t version;
};

// A block whose last location was just dropped: what the index knew of it.
struct GoneBlock {
  BlockId id;
  uint64_t version = 0;
  uint64_t size = 0;  // of the last copy
  StorageLevel level = StorageLevel::kMemoryOnly;
};

// What Apply() did with a change.
struct ApplyResult {
  // False when the change was a copy of a version that is no longer current (stale): it was
  // not recorded, and the worker that reported it should remove it.
  bool recorded = true;
  // A fresh version replaced the current one: the copies of the old version, dropped from the
  // index, whose workers must remove them.
  std::vector<RetiredCopy> replaced;
  // The change was a copy of the current version whose digest differs from the block's (both
  // known): its bytes are not the version's bytes (or its digest metadata is wrong). It was not
  // recorded (`recorded` is false), and the worker's earlier location of the block, if any, was
  // dropped. The copy is not stale: the worker is to verify it, not to remove it.
  bool digest_mismatch = false;
  uint64_t expected_digest = 0;  // with digest_mismatch: the version's digest
  // A removal that removed nothing: the worker held no listed copy of that version (another
  // version is current there, or none is listed). Nothing changed, so nothing is journaled: a
  // journaled removal deletes the worker's location whatever its version.
  bool removal_ignored = false;
  // The change dropped the block's last location (a removal, or a digest mismatch): the block
  // is no longer tracked. Whether that makes it lost is the caller's call (an eviction does
  // not; a copy its worker lost does).
  std::optional<GoneBlock> last_copy;
};

// The cached partitions of one RDD, summed over its blocks' locations.
struct RddSummary {
  uint64_t rdd_id = 0;
  uint64_t cached_partitions = 0;                  // blocks of the RDD held by at least one worker
  StorageLevel level = StorageLevel::kMemoryOnly;  // of its lowest-numbered cached partition
  uint64_t memory_bytes = 0;                       // sizes of all memory copies
  uint64_t disk_bytes = 0;                         // sizes of all disk copies
  std::vector<std::string> workers;                // sorted

  bool operator==(const RddSummary&) const = default;
};

// Where every block is: for each block its storage level, its current version with its digest,
// and the workers holding it (with tier and size). Invariant: a block is tracked exactly while
// at least one worker holds it; the last removed location erases it.
//
// One version per block id (PROTOCOL.md, "One version per block id"): every location of a
// block holds its current version. A fresh put of another version replaces it (the old copies
// are dropped and returned to the caller to remove); a copy of any other version that is not a
// fresh put is refused as stale, as is a copy of a version retired earlier (VersionHistory).
//
// Digests: the current version's block digest is set by the first copy reported with one (the
// put's own commit; or, when the version was first reported without one, the first copy that
// has one) and goes with the version. A copy of the current version reported with another
// non-zero digest is not listed (ApplyResult::digest_mismatch).
//
// Sorted results are in BlockId order (kind, then numerically: rdd_1_2 before rdd_1_10).
//
// Memory: the index is sized for millions of blocks. Workers are interned to small slot
// numbers, a block's first location is stored inline (more copies go to a small heap array),
// and RDD blocks are keyed by partition under their RDD in a flat table (U64HashMap), so one
// RDD block costs well under 100 bytes at 10M blocks (bench workload 5 measures it) and a lookup
// about one cache miss; other blocks cost a little more. Queries that list or summarise sort or
// scan on demand rather than keeping extra per-block indexes.
//
// Not thread-safe: owned by the master's event loop.
class BlockIndex {
 public:
  BlockIndex();
  ~BlockIndex();
  BlockIndex(const BlockIndex&) = delete;
  BlockIndex& operator=(const BlockIndex&) = delete;

  // Records a worker's change. A stored block sets (or replaces) that worker's location and the
  // block's level, after the version rules above; a removal drops the worker's location, and
  // the block with its last one.
  ApplyResult Apply(std::string_view worker_id, const BlockChange& change);
  // The current version of every id in `ids` that is tracked is retired (a user removal): no
  // copy of it is accepted again, while a new put of the id is.
  void RetireVersions(std::span<const BlockId> ids);
  // Retires one version of `id` (a removal the journal remembered across a restart).
  void RetireVersion(const BlockId& id, uint64_t version);
  // The block's current version; nullopt when not tracked.
  std::optional<uint64_t> VersionOf(const BlockId& id) const;

  // Drops every location on the worker (it was dropped or re-registered). Returns how many
  // locations went. With `last_copies`, appends the blocks whose last location that was.
  size_t RemoveWorker(std::string_view worker_id, std::vector<GoneBlock>* last_copies = nullptr);

  std::optional<BlockInfo> Find(const BlockId& id) const;
  // Find() without copies, for the master's lookup path: the block's level, and its locations
  // in BlockInfo's order in `out` (cleared first; reusing it allocates nothing). nullopt, and
  // `out` empty, when the block is not tracked.
  // With `digest`, also the block's digest (0 when unknown or not tracked).
  std::optional<StorageLevel> FindLocations(const BlockId& id, std::vector<LocationRef>* out,
                                            uint64_t* digest = nullptr) const;
  // A hint that `id` will be looked up soon: starts fetching its entry from memory. Lookups of
  // many ids (getLocations of 100) prefetch a few ids ahead to overlap their cache misses.
  void Prefetch(const BlockId& id) const;
  // Every block, sorted by id.
  std::vector<BlockInfo> List() const;
  // One page of the list: the first `limit` blocks with ids after `after` (all when nullopt),
  // of one RDD or all, sorted by id. One pass over the index keeping `limit` ids, so a page of
  // a huge index costs memory for the page only.
  std::vector<BlockInfo> ListPage(std::optional<uint64_t> rdd_id,
                                  const std::optional<BlockId>& after, size_t limit) const;
  // Calls `visit` for every block, in no particular order, without materialising the list.
  void ForEach(const std::function<void(const BlockInfo&)>& visit) const;
  // The blocks of one RDD, sorted by id.
  std::vector<BlockInfo> ListRdd(uint64_t rdd_id) const;
  // The ids of one RDD's blocks, sorted.
  std::vector<BlockId> RddBlockIds(uint64_t rdd_id) const;
  // One summary per RDD with at least one cached block, sorted by RDD id.
  std::vector<RddSummary> RddSummaries() const;
  // The sizes of all copies of one RDD's blocks, by tier: a running total, so a tenant's
  // admission (TenantService) costs a lookup per RDD, not a pass over its blocks.
  TierBytes RddBytes(uint64_t rdd_id) const;
  // Ids of the RDDs with cached blocks, in no particular order (one visit per RDD, not block).
  std::vector<uint64_t> RddIds() const;
  // Visits the blocks that are not RDD blocks (broadcast, shuffle), in no particular order.
  void ForEachNonRdd(const std::function<void(const BlockInfo&)>& visit) const;
  // For each worker holding any of `ids`, the ids it holds, in the order given. Ids not tracked
  // are skipped.
  std::map<std::string, std::vector<BlockId>> Holders(std::span<const BlockId> ids) const;

  size_t block_count() const { return block_count_; }
  // Locations currently recorded on the worker.
  size_t LocationCount(std::string_view worker_id) const;

 private:
  using Slot = uint32_t;

  // One block: its level, version, digest and locations, in 40 bytes. The first location lives
  // inline; further copies (rare: replicas, or the same id put on several workers) live in an
  // exact-size heap array. At most one location per worker, and at most kMaxLocations in all (more
  // are not recorded).
  class Entry {
   public:
    struct Location {
      uint64_t size;
      Slot worker;
      Tier tier;
    };

    static constexpr size_t kMaxLocations = UINT16_MAX;

    // Declared noexcept by hand: PartitionMap below asks whether an Entry is nothrow
    // constructible while BlockIndex is still incomplete, before the member initializers are
    // parsed (Clang rejects that; GCC defers it).
    Entry() noexcept {}

    size_t count() const { return count_; }
    Location at(size_t i) const;
    StorageLevel level() const { return static_cast<StorageLevel>(level_); }
    void set_level(StorageLevel level) { level_ = static_cast<uint8_t>(level); }
    uint64_t version() const { return version_; }
    void set_version(uint64_t version) { version_ = version; }
    uint64_t digest() const { return digest_; }
    void set_digest(uint64_t digest) { digest_ = digest; }
    // Sets the worker's location. Returns true if the worker had none before (and one was
    // added: false also when kMaxLocations is reached and the location was not recorded).
    bool Set(Slot worker, Tier tier, uint64_t size);
    // Drops the worker's location; returns false if it had none.
    bool Remove(Slot worker);
    // The worker's location, if it has one.
    std::optional<Location> Find(Slot worker) const;

   private:
    uint64_t first_size_ = 0;
    uint64_t version_ = 0;
    uint64_t digest_ = 0;
    Slot first_worker_ = 0;
    uint8_t first_tier_ = 0;
    uint8_t level_ = 0;
    uint16_t count_ = 0;
    std::unique_ptr<Location[]> extra_;  // count_ - 1 locations after the first
  };
  // An RDD's blocks by partition, flat: a lookup is about one cache miss (see U64HashMap).
  using PartitionMap = U64HashMap<Entry>;

  Slot Intern(std::string_view worker_id);
  std::optional<Slot> SlotOf(std::string_view worker_id) const;
  // One location on the slot's worker went; frees the slot when it was the last.
  void ReleaseLocation(Slot slot);
  void FreeSlotIfUnused(Slot slot);
  Entry* FindEntry(const BlockId& id);
  const Entry* FindEntry(const BlockId& id) const;
  Entry& FindOrAddEntry(const BlockId& id);
  void EraseEntry(const BlockId& id);
  // Entry::Set and Entry::Remove, keeping the RDD's running byte totals (rdd_bytes_) in step.
  // Every location of an RDD block is set and removed through these.
  bool SetLocation(const BlockId& id, Entry& entry, Slot worker, Tier tier, uint64_t size);
  bool RemoveLocation(const BlockId& id, Entry& entry, Slot worker);
  void CountRddBytes(const BlockId& id, std::optional<Entry::Location> was,
                     std::optional<Entry::Location> now);
  BlockInfo MakeInfo(const BlockId& id, const Entry& entry) const;
  // The entry's locations, memory before disk, then by worker id.
  void SortedLocations(const Entry& entry, std::vector<LocationRef>* out) const;

  // RDD blocks by RDD id, then partition; other blocks (broadcast, shuffle) by id.
  // Flat too: with thousands of RDDs a node-based map cost a second cache miss per lookup.
  U64HashMap<PartitionMap> rdds_;
  std::unordered_map<BlockId, Entry> others_;
  size_t block_count_ = 0;
  // Per RDD, the sizes of its blocks' copies by tier (RddBytes); an RDD whose totals are zero
  // has no entry.
  U64HashMap<TierBytes> rdd_bytes_;

  // Interned workers. A slot is in use while its worker holds at least one location; freed
  // slots are reused.
  std::vector<std::string> slot_names_;
  std::vector<size_t> slot_locations_;
  std::vector<Slot> free_slots_;
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view name) const { return std::hash<std::string_view>{}(name); }
  };
  std::unordered_map<std::string, Slot, NameHash, std::equal_to<>> slots_;
  // Versions retired or lost, so their copies are not taken back (bounded; see its comment).
  VersionHistory history_{kRememberedRetiredIds};

 public:
  // How many block ids VersionHistory remembers (~100 bytes each).
  static constexpr size_t kRememberedRetiredIds = 1 << 18;
};

}  // namespace bm
