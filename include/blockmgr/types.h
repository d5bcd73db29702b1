#pragma once

// Plain results of Client calls: value types with no Cap'n Proto or ZeroMQ inside, so they can
// be kept, copied and printed after the call returns.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/storage_level.h"
#include "blockmgr/tier.h"
#include "blockmgr/worker_state.h"

namespace bm {

// One master as it describes itself (masterInfo), or why it could not be asked.
struct MasterInfo {
  std::string address;  // where it was asked
  std::string error;    // empty when it answered
  std::string id;
  bool leader = false;
  uint64_t epoch = 0;             // the leader's epoch it knows (its own when it leads)
  std::string leader_address;     // whom it takes for the leader
  uint64_t journal_sequence = 0;  // journal records written (leader) or applied (standby)
  bool in_sync = false;           // standby: holds every record the leader acknowledged
};

// One disk (--disk-dir) of a worker.
struct WorkerDiskInfo {
  std::string path;
  uint64_t used = 0;
  uint64_t capacity = 0;  // what used could reach now; 0 once failed
  uint64_t limit = 0;     // as configured; 0 = as much as the filesystem has
  std::string state;      // "ok", "read-only" (full after a storage error) or "failed"
  std::string reason;     // why it failed
};

// One live worker as the master last heard of it.
struct WorkerInfo {
  std::string id;
  std::string address;  // the worker's data port, e.g. tcp://10.0.0.5:7701
  uint64_t memory_capacity = 0;
  uint64_t memory_used = 0;
  uint64_t disk_used = 0;
  uint64_t disk_capacity = 0;   // 0 = unlimited
  bool disk_read_only = false;  // after a storage error (a full disk): takes no disk blocks
  uint64_t block_count = 0;
  uint64_t last_heartbeat_age_ms = 0;
  std::string host;  // placement label; empty when the worker declared none
  std::string rack;  // placement label; empty when the worker declared none
  WorkerState state = WorkerState::kActive;
  std::string public_key{};  // CURVE key (Z85) the master vouches for; empty with keys off
  // Of memory_used: bytes readers on the worker's host keep mapped (docs/storage.md "Same-host
  // reads").
  uint64_t memory_pinned = 0;
  // Each of its disks, in the order of its --disk-dir flags (empty from an older worker).
  std::vector<WorkerDiskInfo> disks{};

  uint64_t memory_free() const {
    return memory_capacity > memory_used ? memory_capacity - memory_used : 0;
  }
};

// One copy of a block: which worker holds it, on which tier, how big.
struct BlockLocation {
  std::string worker_id;
  std::string address;
  Tier tier = Tier::kMemory;
  uint64_t size = 0;
  // The block's digest as the master keeps it (BlockLocations::digest), carried with each copy
  // so that a reader of this copy can check the digests the worker sends against it.
  uint64_t block_digest = 0;
};

// What a worker found when it re-read its copy of a block (Client::VerifyCopies).
struct CopyCheck {
  enum class State { kIntact, kCorrupt, kGone, kUnreachable };
  BlockId block;
  std::string worker_id;
  State state = State::kIntact;
  Tier tier = Tier::kMemory;
  bool digested = false;  // false: stored without digests; only RocksDB's checksums were checked
  std::string message{};  // what was wrong (kCorrupt, kUnreachable)
};

// What the master recorded of a block whose last copy was lost (PROTOCOL.md, "Lost blocks";
// bmctl blocks --lost).
struct LostBlockInfo {
  BlockId block;
  uint64_t version = 0;  // the lost version's token; 0 = unknown
  uint64_t size = 0;
  StorageLevel level = StorageLevel::kMemoryOnly;
  uint64_t lost_at_ms = 0;  // when the master recorded it, ms since the Unix epoch
  std::string reason;       // "worker dropped", "copy corrupt", "disk failed", "lost at start-up",
                            // "worker restarted", "storage error"
  std::string detail{};     // what the worker (or the master) saw
  std::string worker_id{};  // held the last copy
};

// The status a read of a lost block fails with: kDataLoss, its message starting "lost: " with
// when and why ("lost: 2026-12-04 10:41:07 UTC, copy corrupt (...); block rdd_1_2 ...").
std::string LostBlockMessage(const LostBlockInfo& lost);

// Where a block is stored. `locations` lists memory copies before disk copies and is empty when
// no live worker holds the block.
struct BlockLocations {
  BlockId block;
  StorageLevel level = StorageLevel::kMemoryAndDisk;
  std::vector<BlockLocation> locations;
  // The block's digest (the XXH3-64 of its unit digests, common/core/digest.h BlockDigestOf) as the
  // master keeps it for the current version; 0 = unknown.
  uint64_t digest = 0;
  // Set (and `locations` empty) when the block's last copy was lost: what the master recorded.
  // Unset for a block never stored, or removed.
  std::optional<LostBlockInfo> lost{};
};

// A cached or persisted RDD, summed over its blocks (what Spark's Storage tab shows).
struct RddInfo {
  uint64_t rdd_id = 0;
  std::string name;                                // empty unless a dataset registered it
  StorageLevel level = StorageLevel::kMemoryOnly;  // registered, else that of its blocks
  uint64_t total_partitions = 0;                   // 0 = unknown (not registered)
  uint64_t cached_partitions = 0;
  uint64_t memory_bytes = 0;
  uint64_t disk_bytes = 0;
  std::vector<std::string> workers;  // ids of the workers holding at least one of its blocks
};

// A tenant's bytes and quotas (docs/security.md "Tenants, shares and quotas"): every copy counted.
struct TenantInfo {
  std::string tenant;
  uint64_t memory_bytes = 0;
  uint64_t disk_bytes = 0;
  uint64_t memory_quota = 0;    // 0 = none
  uint64_t disk_quota = 0;      // 0 = none
  uint64_t reserved_bytes = 0;  // admitted puts not stored yet
  uint64_t datasets = 0;        // owned
};

// Where a Put stored the block. The first copy's worker, address and tier, and every copy's
// worker.
struct PutResult {
  std::string worker_id;
  std::string address;
  Tier tier = Tier::kMemory;
  uint64_t size = 0;
  std::vector<std::string> replicas{};  // workers holding a copy, `worker_id` first
  uint32_t copies_wanted = 1;           // less than replicas.size() when too few workers could
};

struct PutOptions {
  // Store the block on this worker instead of letting the client choose (see Client::Put).
  std::optional<std::string> worker_id;
  // Copies to store on distinct workers; 0 = as the level says (2 for the _2 levels, else 1).
  uint32_t replication = 0;
  // Try workers on this client's own host first while they have room (see
  // ClientOptions::local_hosts and ChooseWorkers in client/placement.h), then the others, as
  // Spark caches into the executor's own BlockManager: a computation then reads its blocks
  // where it runs. false: the cluster-wide order alone (most free memory first), which spreads
  // the puts of one client over every worker, e.g. for a loader filling the cache from one
  // machine. Replicated levels keep only the first copy local; the others spread over hosts.
  bool prefer_local = true;
  // Get-or-compute sets this to the compute lease its result is stored under (0 = none): the
  // master refuses the block, and the put fails (kAborted), when that lease is no longer held.
  uint64_t compute_lease = 0;
  // What the block took to compute (0 = not stated). The worker keeps it with a memory copy and,
  // with the cost-aware eviction policy (docs/eviction.md "Eviction"), evicts blocks that are cheap
  // to recompute per byte before expensive ones. GetOrCompute sets it to the wall time its compute
  // function took.
  std::chrono::microseconds compute_cost{0};
};

// What a client's get-or-compute calls did, counted since the client was created (or since
// its counters were last taken). Every GetOrCompute call counts as exactly one hit or miss.
struct CacheCounters {
  uint64_t local_hits = 0;      // found cached, read from a worker on this host
  uint64_t remote_hits = 0;     // found cached, read from a worker on another host
  uint64_t misses = 0;          // not readable from the cache when asked
  uint64_t computes = 0;        // compute functions this client ran (misses it computed)
  uint64_t waits = 0;           // misses served by another client's compute
  uint64_t bytes_fetched = 0;   // block bytes read from workers, by any read of this client
  uint64_t store_failures = 0;  // computed blocks that could not be stored (returned anyway)

  uint64_t hits() const { return local_hits + remote_hits; }
  CacheCounters& operator+=(const CacheCounters& other);
  bool operator==(const CacheCounters&) const = default;
};

}  // namespace bm
