#pragma once

// Plain results of Client calls: value types with no Cap'n Proto or ZeroMQ inside, so they can
// be kept, copied and printed after the call returns.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/block_id.h"
#include "common/storage_level.h"
#include "common/tier.h"

namespace bm {

// One live worker as the master last heard of it.
struct WorkerInfo {
  std::string id;
  std::string address;  // the worker's data port, e.g. tcp://10.0.0.5:7701
  uint64_t memory_capacity = 0;
  uint64_t memory_used = 0;
  uint64_t disk_used = 0;
  uint64_t disk_capacity = 0;  // 0 = unlimited
  uint64_t block_count = 0;
  uint64_t last_heartbeat_age_ms = 0;

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
};

// Where a block is stored. `locations` lists memory copies before disk copies and is empty when
// no live worker holds the block.
struct BlockLocations {
  BlockId block;
  StorageLevel level = StorageLevel::kMemoryAndDisk;
  std::vector<BlockLocation> locations;
};

// A cached RDD, summed over its blocks.
struct RddInfo {
  uint64_t rdd_id = 0;
  uint64_t cached_partitions = 0;
  uint64_t memory_bytes = 0;
  uint64_t disk_bytes = 0;
  std::vector<std::string> workers;  // ids of the workers holding at least one of its blocks
};

// Where a Put stored the block.
struct PutResult {
  std::string worker_id;
  std::string address;
  Tier tier = Tier::kMemory;
  uint64_t size = 0;
};

struct PutOptions {
  // Store the block on this worker instead of letting the client choose (see Client::Put).
  std::optional<std::string> worker_id;
};

}  // namespace bm
