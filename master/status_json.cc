#include "master/status_json.h"

namespace bm {
namespace {

using json = nlohmann::ordered_json;

json CopiesToJson(const std::vector<BlockCopy>& copies) {
  json out = json::array();
  for (const BlockCopy& copy : copies) {
    out.push_back({{"worker", copy.worker_id},
                   {"address", copy.address},
                   {"tier", std::string(TierName(copy.tier))},
                   {"size", copy.size}});
  }
  return out;
}

// Spark's RDDPartitionInfo, with the copies spelled out.
json PartitionToJson(const BlockRow& row) {
  uint64_t memory = 0;
  uint64_t disk = 0;
  json executors = json::array();
  for (const BlockCopy& copy : row.copies) {
    (copy.tier == Tier::kMemory ? memory : disk) += copy.size;
    executors.push_back(copy.worker_id);
  }
  return {{"blockName", row.id.ToString()},
          {"storageLevel", std::string(StorageLevelName(row.level))},
          {"memoryUsed", memory},
          {"diskUsed", disk},
          {"executors", std::move(executors)},
          {"copies", row.copies.size()},
          {"copiesWanted", ReplicationOf(row.level)},
          {"locations", CopiesToJson(row.copies)}};
}

json CursorToJson(const std::optional<BlockId>& cursor) {
  return cursor ? json(cursor->ToString()) : json(nullptr);
}

}  // namespace

json RddToJson(const RddStatus& rdd) {
  return {{"id", rdd.id},
          {"name", rdd.name},
          {"numPartitions", rdd.total_partitions},
          {"numCachedPartitions", rdd.cached_partitions},
          {"storageLevel", std::string(StorageLevelName(rdd.level))},
          {"memoryUsed", rdd.memory_bytes},
          {"diskUsed", rdd.disk_bytes},
          {"executors", rdd.workers}};
}

json ShufflesToJson(const ClusterSnapshot& snapshot) {
  json out = json::array();
  for (const ShuffleStatus& shuffle : snapshot.shuffles) {
    out.push_back({{"id", shuffle.id},
                   {"maps", shuffle.maps},
                   {"partitions", shuffle.partitions},
                   {"storageLevel", std::string(StorageLevelName(shuffle.level))},
                   {"committedMaps", shuffle.committed_maps},
                   {"committedBytes", shuffle.bytes},
                   {"executors", shuffle.workers},
                   {"idleMs", shuffle.idle_ms}});
  }
  return out;
}

json RddsToJson(const ClusterSnapshot& snapshot) {
  json out = json::array();
  for (const RddStatus& rdd : snapshot.rdds) out.push_back(RddToJson(rdd));
  return out;
}

json RddDetailToJson(const RddStatus& rdd,
                     const std::optional<std::vector<RddDistribution>>& distribution,
                     const BlockPage& partitions) {
  json out = RddToJson(rdd);
  json spread = distribution ? json::array() : json(nullptr);  // null: too big to sum up
  for (const RddDistribution& entry : distribution.value_or(std::vector<RddDistribution>{})) {
    spread.push_back({{"executor", entry.worker_id},
                      {"address", entry.address},
                      {"memoryUsed", entry.memory_bytes},
                      {"memoryRemaining", entry.memory_remaining},
                      {"diskUsed", entry.disk_bytes},
                      {"blocks", entry.blocks}});
  }
  out["dataDistribution"] = std::move(spread);
  json rows = json::array();
  for (const BlockRow& row : partitions.rows) rows.push_back(PartitionToJson(row));
  out["partitions"] = std::move(rows);
  out["nextCursor"] = CursorToJson(partitions.next_cursor);
  return out;
}

namespace {

json DisksToJson(const std::vector<DiskStats>& disks) {
  json out = json::array();
  for (const DiskStats& disk : disks) {
    out.push_back({{"path", disk.path},
                   {"used", disk.used},
                   {"capacity", disk.capacity},
                   {"limit", disk.limit},
                   {"state", DiskStateName(disk.state)},
                   {"reason", disk.reason}});
  }
  return out;
}

}  // namespace

json WorkersToJson(const ClusterSnapshot& snapshot) {
  json out = json::array();
  for (const WorkerStatus& worker : snapshot.workers) {
    out.push_back({{"id", worker.id},
                   {"address", worker.address},
                   {"host", worker.host},
                   {"rack", worker.rack},
                   {"state", std::string(WorkerStateName(worker.state))},
                   {"memoryUsed", worker.stats.memory_used},
                   {"memoryCapacity", worker.stats.memory_capacity},
                   {"diskUsed", worker.stats.disk_used},
                   {"diskCapacity", worker.stats.disk_capacity},
                   {"blocks", worker.stats.block_count},
                   {"locations", worker.locations},
                   {"lastHeartbeatAgeMs", worker.last_heartbeat_age_ms},
                   {"disks", DisksToJson(worker.stats.disks)}});
  }
  return out;
}

json BlockPageToJson(const BlockPage& page) {
  json rows = json::array();
  for (const BlockRow& row : page.rows) rows.push_back(PartitionToJson(row));
  return {{"blocks", std::move(rows)}, {"nextCursor", CursorToJson(page.next_cursor)}};
}

json LocationsToJson(const std::vector<BlockRow>& rows) {
  json out = json::array();
  for (const BlockRow& row : rows) {
    out.push_back({{"blockName", row.id.ToString()}, {"locations", CopiesToJson(row.copies)}});
  }
  return out;
}

json LostBlockToJson(const LostRecord& record) {
  return {{"blockName", record.id.ToString()},
          {"version", record.version},
          {"size", record.size},
          {"storageLevel", std::string(StorageLevelName(record.level))},
          {"lostAt", record.lost_at_ms},
          {"reason", std::string(LostCauseName(record.cause))},
          {"detail", record.detail},
          {"worker", record.worker_id}};
}

json LostBlocksToJson(const std::vector<LostRecord>& records, uint64_t kept) {
  json rows = json::array();
  for (const LostRecord& record : records) rows.push_back(LostBlockToJson(record));
  return {{"blocks", std::move(rows)}, {"kept", kept}};
}

json HealthToJson(const ClusterSnapshot& snapshot) {
  json events = json::array();
  for (const WorkerEvent& event : snapshot.counters.recent_events) {
    events.push_back({{"time", event.unix_ms}, {"worker", event.worker_id}, {"event", event.what}});
  }
  json draining = json::array();
  for (const WorkerStatus& worker : snapshot.workers) {
    if (worker.state == WorkerState::kDecommissioning) {
      draining.push_back({{"worker", worker.id}, {"blocksLeft", worker.locations}});
    }
  }
  const MasterRole& role = snapshot.role;
  return {{"role", role.leader ? "leader" : "standby"},
          {"epoch", role.epoch},
          {"leaderAddress", role.leader_address},
          {"standbysInSync", role.standbys_in_sync},
          {"blocks", snapshot.block_count},
          {"underReplicatedBlocks", snapshot.under_replicated},
          {"copiesInFlight", snapshot.copies_in_flight},
          {"copiesStarted", snapshot.counters.copies_started},
          {"decommissioning", std::move(draining)},
          {"blocksLost", snapshot.counters.blocks_lost},
          {"workersDropped", snapshot.counters.workers_dropped},
          {"journalFailures", snapshot.counters.journal_failures},
          {"digestMismatchReports", snapshot.counters.digest_mismatch_reports},
          // Block checksums are not verified yet; the count appears once they are.
          {"checksumFailures", nullptr},
          {"recentWorkerEvents", std::move(events)}};
}

}  // namespace bm
