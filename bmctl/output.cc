#include "bmctl/output.h"

#include <algorithm>
#include <ctime>

#include "common/core/byte_size.h"
#include "common/core/digest.h"
#include "common/core/utc_time.h"

namespace bm {
namespace {

using json = nlohmann::ordered_json;

json LocationListToJson(const std::vector<BlockLocation>& locations) {
  json out = json::array();
  for (const BlockLocation& location : locations) {
    out.push_back({{"worker", location.worker_id},
                   {"address", location.address},
                   {"tier", std::string(TierName(location.tier))},
                   {"size", location.size}});
  }
  return out;
}

// A block's digest as tables show it: hex, "-" when unknown.
std::string DigestCell(uint64_t digest) { return digest == 0 ? "-" : DigestHex(digest); }

// ... and as JSON: hex, null when unknown.
json DigestJson(uint64_t digest) { return digest == 0 ? json(nullptr) : json(DigestHex(digest)); }

std::string Join(const std::vector<std::string>& parts, const std::string& separator) {
  std::string out;
  for (const std::string& part : parts) {
    if (!out.empty()) out += separator;
    out += part;
  }
  return out;
}

}  // namespace

json LostBlockToJson(const LostBlockInfo& lost) {
  return {{"block", lost.block.ToString()},
          {"level", std::string(StorageLevelName(lost.level))},
          {"size", lost.size},
          {"version", lost.version},
          {"lost_at_ms", lost.lost_at_ms},
          {"reason", lost.reason},
          {"detail", lost.detail},
          {"worker", lost.worker_id}};
}

json LostBlocksToJson(const std::vector<LostBlockInfo>& blocks) {
  json out = json::array();
  for (const LostBlockInfo& lost : blocks) out.push_back(LostBlockToJson(lost));
  return out;
}

std::string LostBlocksTable(const std::vector<LostBlockInfo>& blocks) {
  std::vector<std::vector<std::string>> rows;
  for (const LostBlockInfo& lost : blocks) {
    rows.push_back({lost.block.ToString(), std::string(StorageLevelName(lost.level)),
                    FormatBytes(lost.size), FormatUtcTime(lost.lost_at_ms), lost.reason,
                    lost.worker_id.empty() ? "-" : lost.worker_id, lost.detail});
  }
  // The detail last: it holds spaces.
  return FormatTable(
      {{"BLOCK"}, {"LEVEL"}, {"SIZE", true}, {"LOST AT"}, {"REASON"}, {"WORKER"}, {"DETAIL"}},
      rows);
}

json LocationsToJson(const std::vector<BlockLocations>& blocks) {
  json out = json::array();
  for (const BlockLocations& block : blocks) {
    json entry = {{"block", block.block.ToString()},
                  {"locations", LocationListToJson(block.locations)},
                  {"digest", DigestJson(block.digest)}};
    if (block.lost) entry["lost"] = LostBlockToJson(*block.lost);
    out.push_back(std::move(entry));
  }
  return out;
}

json BlocksToJson(const std::vector<BlockLocations>& blocks) {
  json out = json::array();
  for (const BlockLocations& block : blocks) {
    out.push_back({{"block", block.block.ToString()},
                   {"level", std::string(StorageLevelName(block.level))},
                   {"copies_wanted", ReplicationOf(block.level)},
                   {"locations", LocationListToJson(block.locations)},
                   {"digest", DigestJson(block.digest)}});
  }
  return out;
}

static json DisksToJson(const std::vector<WorkerDiskInfo>& disks) {
  json out = json::array();
  for (const WorkerDiskInfo& disk : disks) {
    out.push_back({{"path", disk.path},
                   {"used", disk.used},
                   {"capacity", disk.capacity},
                   {"limit", disk.limit},
                   {"state", disk.state},
                   {"reason", disk.reason}});
  }
  return out;
}

json WorkersToJson(const std::vector<WorkerInfo>& workers) {
  json out = json::array();
  for (const WorkerInfo& worker : workers) {
    out.push_back({{"id", worker.id},
                   {"address", worker.address},
                   {"memory_capacity", worker.memory_capacity},
                   {"memory_used", worker.memory_used},
                   {"memory_pinned", worker.memory_pinned},
                   {"disk_used", worker.disk_used},
                   {"disk_capacity", worker.disk_capacity},
                   {"disk_read_only", worker.disk_read_only},
                   {"blocks", worker.block_count},
                   {"host", worker.host},
                   {"rack", worker.rack},
                   {"state", WorkerStateName(worker.state)},
                   {"disks", DisksToJson(worker.disks)}});
  }
  return out;
}

json RddsToJson(const std::vector<RddInfo>& rdds) {
  json out = json::array();
  for (const RddInfo& rdd : rdds) {
    out.push_back({{"rdd", rdd.rdd_id},
                   {"name", rdd.name},
                   {"level", std::string(StorageLevelName(rdd.level))},
                   {"cached_partitions", rdd.cached_partitions},
                   {"total_partitions", rdd.total_partitions},
                   {"memory_bytes", rdd.memory_bytes},
                   {"disk_bytes", rdd.disk_bytes},
                   {"workers", rdd.workers}});
  }
  return out;
}

json RemovedToJson(uint64_t removed) { return {{"removed", removed}}; }

namespace {

std::string_view CheckStateName(CopyCheck::State state) {
  switch (state) {
    case CopyCheck::State::kIntact:
      return "intact";
    case CopyCheck::State::kCorrupt:
      return "corrupt";
    case CopyCheck::State::kGone:
      return "gone";
    case CopyCheck::State::kUnreachable:
      return "unreachable";
  }
  return "unknown";
}

}  // namespace

json VerifyToJson(const std::vector<CopyCheck>& checks) {
  json out = json::array();
  for (const CopyCheck& check : checks) {
    out.push_back({{"block", check.block.ToString()},
                   {"worker", check.worker_id},
                   {"state", CheckStateName(check.state)},
                   {"tier", TierName(check.tier)},
                   {"digested", check.digested},
                   {"message", check.message}});
  }
  return out;
}

json PutToJson(const BlockId& id, const PutResult& put) {
  return {{"block", id.ToString()},
          {"worker", put.worker_id},
          {"tier", std::string(TierName(put.tier))},
          {"size", put.size},
          {"replicas", put.replicas},
          {"copies_wanted", put.copies_wanted}};
}

std::string FormatTable(const std::vector<TableColumn>& columns,
                        const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths(columns.size());
  for (size_t c = 0; c < columns.size(); ++c) widths[c] = columns[c].title.size();
  for (const std::vector<std::string>& row : rows) {
    for (size_t c = 0; c < columns.size() && c < row.size(); ++c) {
      widths[c] = std::max(widths[c], row[c].size());
    }
  }
  auto format_row = [&](auto cell_of) {
    std::string line;
    for (size_t c = 0; c < columns.size(); ++c) {
      const std::string cell = cell_of(c);
      const std::string pad(widths[c] - cell.size(), ' ');
      if (c > 0) line += "  ";
      line += columns[c].right_aligned ? pad + cell : cell + pad;
    }
    line.erase(line.find_last_not_of(' ') + 1);
    return line + "\n";
  };
  std::string out = format_row([&](size_t c) { return columns[c].title; });
  for (const std::vector<std::string>& row : rows) {
    out += format_row([&](size_t c) { return c < row.size() ? row[c] : std::string(); });
  }
  return out;
}

std::string LocationsTable(const std::vector<BlockLocations>& blocks) {
  std::vector<std::vector<std::string>> rows;
  for (const BlockLocations& block : blocks) {
    if (block.lost) {
      rows.push_back(
          {block.block.ToString(), "-",
           "(lost " + FormatUtcTime(block.lost->lost_at_ms) + ": " + block.lost->reason + ")", "",
           "", ""});
    } else if (block.locations.empty()) {
      rows.push_back({block.block.ToString(), "-", "(not stored on any live worker)", "", "", ""});
    }
    for (const BlockLocation& location : block.locations) {
      rows.push_back({block.block.ToString(), location.worker_id, location.address,
                      std::string(TierName(location.tier)), FormatBytes(location.size),
                      DigestCell(block.digest)});
    }
  }
  return FormatTable({{"BLOCK"}, {"WORKER"}, {"ADDRESS"}, {"TIER"}, {"SIZE", true}, {"DIGEST"}},
                     rows);
}

std::string BlocksTable(const std::vector<BlockLocations>& blocks) {
  std::vector<std::vector<std::string>> rows;
  size_t short_of_copies = 0;
  for (const BlockLocations& block : blocks) {
    std::vector<std::string> where;
    for (const BlockLocation& location : block.locations) {
      where.push_back(location.worker_id + ":" + std::string(TierName(location.tier)));
    }
    const std::string size =
        block.locations.empty() ? "-" : FormatBytes(block.locations.front().size);
    const size_t wanted = static_cast<size_t>(ReplicationOf(block.level));
    if (!block.locations.empty() && block.locations.size() < wanted) ++short_of_copies;
    rows.push_back({block.block.ToString(), std::string(StorageLevelName(block.level)), size,
                    std::to_string(block.locations.size()) + "/" + std::to_string(wanted),
                    where.empty() ? "-" : Join(where, ", "), DigestCell(block.digest)});
  }
  // The digest last: LOCATIONS holds spaces, so scripts that split on them keep working.
  std::string table = FormatTable(
      {{"BLOCK"}, {"LEVEL"}, {"SIZE", true}, {"COPIES", true}, {"LOCATIONS"}, {"DIGEST"}}, rows);
  // Re-replication's progress: blocks that lost a copy and have not got it back yet.
  if (short_of_copies > 0) {
    table += std::to_string(short_of_copies) + " of " + std::to_string(blocks.size()) +
             " blocks are under-replicated\n";
  }
  return table;
}

// Each worker's disks, under the workers' table: only when some worker has several or one is
// not ok (one healthy disk per worker says nothing the table does not).
static std::string DisksTable(const std::vector<WorkerInfo>& workers) {
  bool worth_showing = false;
  for (const WorkerInfo& worker : workers) {
    for (const WorkerDiskInfo& disk : worker.disks) {
      worth_showing = worth_showing || worker.disks.size() > 1 || disk.state != "ok";
    }
  }
  if (!worth_showing) return "";
  std::vector<std::vector<std::string>> rows;
  for (const WorkerInfo& worker : workers) {
    for (const WorkerDiskInfo& disk : worker.disks) {
      rows.push_back({worker.id, disk.path, disk.state, FormatBytes(disk.used),
                      disk.limit == 0 ? "-" : FormatBytes(disk.limit), FormatBytes(disk.capacity),
                      disk.reason.empty() ? "-" : disk.reason});
    }
  }
  return "\n" + FormatTable({{"WORKER"},
                             {"DISK"},
                             {"STATE"},
                             {"USED", true},
                             {"LIMIT", true},
                             {"CAPACITY", true},
                             {"REASON"}},
                            rows);
}

std::string WorkersTable(const std::vector<WorkerInfo>& workers) {
  std::vector<std::vector<std::string>> rows;
  for (const WorkerInfo& worker : workers) {
    rows.push_back({worker.id, worker.address, WorkerStateName(worker.state),
                    worker.host.empty() ? "-" : worker.host,
                    worker.rack.empty() ? "-" : worker.rack, FormatBytes(worker.memory_used),
                    FormatBytes(worker.memory_capacity), FormatBytes(worker.memory_pinned),
                    FormatBytes(worker.disk_used),
                    worker.disk_read_only       ? "read-only"
                    : worker.disk_capacity == 0 ? "unlimited"
                                                : FormatBytes(worker.disk_capacity),
                    std::to_string(worker.block_count),
                    std::to_string(worker.last_heartbeat_age_ms) + " ms ago"});
  }
  return FormatTable({{"WORKER"},
                      {"ADDRESS"},
                      {"STATE"},
                      {"HOST"},
                      {"RACK"},
                      {"MEM USED", true},
                      {"MEM CAPACITY", true},
                      {"MEM PINNED", true},
                      {"DISK USED", true},
                      {"DISK LIMIT", true},
                      {"BLOCKS", true},
                      {"HEARTBEAT", true}},
                     rows) +
         DisksTable(workers);
}

std::string RddsTable(const std::vector<RddInfo>& rdds) {
  std::vector<std::vector<std::string>> rows;
  for (const RddInfo& rdd : rdds) {
    // Cached of total partitions, as Spark's Storage tab shows them; the total is known only
    // for RDDs a dataset registered.
    std::string cached = std::to_string(rdd.cached_partitions);
    if (rdd.total_partitions > 0) cached += "/" + std::to_string(rdd.total_partitions);
    rows.push_back({std::to_string(rdd.rdd_id), rdd.name.empty() ? "-" : rdd.name,
                    std::string(StorageLevelName(rdd.level)), cached, FormatBytes(rdd.memory_bytes),
                    FormatBytes(rdd.disk_bytes),
                    rdd.workers.empty() ? "-" : Join(rdd.workers, ", ")});
  }
  return FormatTable({{"RDD", true},
                      {"NAME"},
                      {"LEVEL"},
                      {"CACHED", true},
                      {"MEMORY", true},
                      {"DISK", true},
                      {"WORKERS"}},
                     rows);
}

json TenantsToJson(const std::vector<TenantInfo>& tenants) {
  json out = json::array();
  for (const TenantInfo& tenant : tenants) {
    out.push_back({{"tenant", tenant.tenant},
                   {"memory_bytes", tenant.memory_bytes},
                   {"disk_bytes", tenant.disk_bytes},
                   {"memory_quota", tenant.memory_quota},
                   {"disk_quota", tenant.disk_quota},
                   {"reserved_bytes", tenant.reserved_bytes},
                   {"datasets", tenant.datasets}});
  }
  return out;
}

std::string TenantsTable(const std::vector<TenantInfo>& tenants) {
  std::vector<std::vector<std::string>> rows;
  auto quota = [](uint64_t bytes) { return bytes == 0 ? std::string("-") : FormatBytes(bytes); };
  for (const TenantInfo& tenant : tenants) {
    rows.push_back({tenant.tenant, std::to_string(tenant.datasets),
                    FormatBytes(tenant.memory_bytes), quota(tenant.memory_quota),
                    FormatBytes(tenant.disk_bytes), quota(tenant.disk_quota),
                    FormatBytes(tenant.reserved_bytes)});
  }
  return FormatTable({{"TENANT"},
                      {"DATASETS", true},
                      {"MEMORY", true},
                      {"MEM QUOTA", true},
                      {"DISK", true},
                      {"DISK QUOTA", true},
                      {"RESERVED", true}},
                     rows);
}

std::string VerifyText(const std::vector<CopyCheck>& checks) {
  std::string text;
  for (const CopyCheck& check : checks) {
    text += check.block.ToString() + "  " + (check.worker_id.empty() ? "-" : check.worker_id) +
            "  " + std::string(CheckStateName(check.state));
    switch (check.state) {
      case CopyCheck::State::kIntact:
        text += " (" + std::string(TierName(check.tier)) +
                (check.digested ? ", digests checked)"
                                : ", stored without digests: RocksDB's checksums checked)");
        break;
      case CopyCheck::State::kCorrupt:
        text += ": " + check.message + "; dropped, the master restores it from a good copy";
        break;
      case CopyCheck::State::kGone:
        text += check.worker_id.empty() ? ": no live worker holds it" : ": no longer there";
        break;
      case CopyCheck::State::kUnreachable:
        text += ": " + check.message;
        break;
    }
    text += "\n";
  }
  return text;
}

std::string RemovedText(uint64_t removed) {
  return "removed " + std::to_string(removed) + (removed == 1 ? " block\n" : " blocks\n");
}

std::string PutText(const BlockId& id, const PutResult& put) {
  std::string text = "stored " + id.ToString() + " (" + FormatBytes(put.size) + ") on " +
                     put.worker_id + " (" + put.address + ") " +
                     (put.tier == Tier::kMemory ? "in memory" : "on disk");
  if (put.replicas.size() > 1 || put.copies_wanted > 1) {
    text += "; " + std::to_string(put.replicas.size()) + " of " +
            std::to_string(put.copies_wanted) + " copies: " + Join(put.replicas, ", ");
  }
  return text + "\n";
}

}  // namespace bm
