#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/storage_level.h"
#include "blockmgr/tier.h"
#include "common/core/worker_stats.h"
#include "master/lost_blocks.h"
#include "master/master_status.h"
#include "master/worker_registry.h"

namespace bm {

// One RDD as the storage page and /api/v1/rdds show it (Spark's RDDStorageInfo, summed).
struct RddStatus {
  uint64_t id = 0;
  std::string name;  // empty unless a dataset registered it
  StorageLevel level = StorageLevel::kMemoryOnly;
  uint64_t total_partitions = 0;  // 0 = unknown (not registered)
  uint64_t cached_partitions = 0;
  uint64_t memory_bytes = 0;
  uint64_t disk_bytes = 0;
  std::vector<std::string> workers;
};

// One shuffle as the storage page and /api/v1/shuffles show it.
struct ShuffleStatus {
  uint64_t id = 0;
  uint32_t maps = 0;
  uint32_t partitions = 0;
  StorageLevel level = StorageLevel::kMemoryAndDisk;
  uint32_t committed_maps = 0;
  uint64_t bytes = 0;  // committed, one copy
  std::vector<std::string> workers;
  uint64_t idle_ms = 0;
};

struct WorkerStatus {
  std::string id;
  std::string address;
  std::string host;
  std::string rack;
  WorkerState state = WorkerState::kActive;
  WorkerStats stats;
  uint64_t locations = 0;  // block copies the master's index places on it
  uint64_t last_heartbeat_age_ms = 0;
};

// The master's state summarised at one moment, small whatever the number of blocks (no
// per-block rows): published by the event loop and read by any number of HTTP threads.
// Immutable once built.
struct ClusterSnapshot {
  int64_t taken_unix_ms = 0;
  std::vector<RddStatus> rdds;          // by id
  std::vector<ShuffleStatus> shuffles;  // by id
  std::vector<WorkerStatus> workers;    // by id
  uint64_t block_count = 0;
  uint64_t under_replicated = 0;
  uint64_t copies_in_flight = 0;
  uint64_t leases_held = 0;
  bool journaled = false;
  MasterRole role;
  MasterCounters counters;
  std::vector<TenantUsage> tenants;  // by name
  // Blocks whose last copy was lost: how many are kept, the newest few (newest last), and how
  // many this master recorded lost since it started, by cause (LostCause's value).
  uint64_t lost_count = 0;
  std::vector<LostRecord> recent_lost;
  std::array<uint64_t, kLostCauseCount> lost_totals{};
};

// Builds the snapshot on the loop thread. Scans the RDD blocks once (RddSummaries), so callers
// bound how often it runs.
ClusterSnapshot BuildClusterSnapshot(const MasterView& view);

// ---- per-block queries, answered on the loop thread a page at a time ----

// The newest `limit` blocks whose last copy was lost, oldest first.
std::vector<LostRecord> QueryLostBlocks(const MasterView& view, size_t limit);

struct BlockCopy {
  std::string worker_id;
  std::string address;
  Tier tier = Tier::kMemory;
  uint64_t size = 0;
};

struct BlockRow {
  BlockId id = BlockId::Broadcast(0);
  StorageLevel level = StorageLevel::kMemoryOnly;
  std::vector<BlockCopy> copies;  // empty: no worker holds it
};

struct BlockPage {
  std::vector<BlockRow> rows;          // in BlockId order
  std::optional<BlockId> next_cursor;  // the last row's id when more may follow
};

// At most `limit` blocks after `cursor` (exclusive), of one RDD or of all blocks.
BlockPage QueryBlockPage(const MasterView& view, std::optional<uint64_t> rdd,
                         std::optional<BlockId> cursor, size_t limit);

// Where each block is (a row with no copies for an unknown one), in the order asked.
std::vector<BlockRow> QueryLocations(const MasterView& view, const std::vector<BlockId>& ids);

// How one RDD is spread over the workers (Spark's RDDDataDistribution).
struct RddDistribution {
  std::string worker_id;
  std::string address;
  uint64_t memory_bytes = 0;
  uint64_t disk_bytes = 0;
  uint64_t memory_remaining = 0;  // the worker's free memory
  uint64_t blocks = 0;
};

// The RDD's spread, by worker id; scans the RDD's blocks.
std::vector<RddDistribution> QueryRddDistribution(const MasterView& view, uint64_t rdd_id);

}  // namespace bm
