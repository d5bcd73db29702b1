#pragma once

// How bmctl prints results: aligned tables for people (sizes as FormatBytes gives them) and
// JSON documents for scripts. The JSON shapes are part of bmctl's interface; scripts and tests
// depend on them:
//   locations  [{"block", "locations": [{"worker", "address", "tier", "size"}]}]
//   blocks     [{"block", "level", "locations": [...as above...]}]
//   blocks --lost [{"block", "level", "size", "version", "lost_at_ms", "reason", "detail",
//                  "worker"}]; a lost block in `locations` has the same object as "lost"
//   workers    [{"id", "address", "memory_capacity", "memory_used", "disk_used", "blocks"}]
//   rdds       [{"rdd", "cached_partitions", "memory_bytes", "disk_bytes", "workers": [ids]}]
//   rm, rm-rdd {"removed"}
//   tenants    [{"tenant", "memory_bytes", "disk_bytes", "memory_quota", "disk_quota",
//                "reserved_bytes", "datasets"}]   (a quota of 0: none)
//   put        {"block", "worker", "tier", "size"}
// Sizes are numbers of bytes; tiers are "memory" / "disk"; levels are names like "MEMORY_ONLY".
// Keys keep the order above (ordered_json) so the output reads like this list.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/types.h"

namespace bm {

nlohmann::ordered_json LocationsToJson(const std::vector<BlockLocations>& blocks);
nlohmann::ordered_json BlocksToJson(const std::vector<BlockLocations>& blocks);
nlohmann::ordered_json WorkersToJson(const std::vector<WorkerInfo>& workers);
nlohmann::ordered_json LostBlockToJson(const LostBlockInfo& lost);
nlohmann::ordered_json LostBlocksToJson(const std::vector<LostBlockInfo>& blocks);
nlohmann::ordered_json RddsToJson(const std::vector<RddInfo>& rdds);
nlohmann::ordered_json RemovedToJson(uint64_t removed);
nlohmann::ordered_json TenantsToJson(const std::vector<TenantInfo>& tenants);
nlohmann::ordered_json VerifyToJson(const std::vector<CopyCheck>& checks);
nlohmann::ordered_json PutToJson(const BlockId& id, const PutResult& put);

// Tables: a header row, then one row per item, columns separated by two spaces, no trailing
// blanks, each ending with a newline.
std::string LocationsTable(const std::vector<BlockLocations>& blocks);
std::string BlocksTable(const std::vector<BlockLocations>& blocks);
std::string WorkersTable(const std::vector<WorkerInfo>& workers);
std::string LostBlocksTable(const std::vector<LostBlockInfo>& blocks);
std::string RddsTable(const std::vector<RddInfo>& rdds);
std::string TenantsTable(const std::vector<TenantInfo>& tenants);
// One line: "removed 3 blocks".
std::string RemovedText(uint64_t removed);
// One line per copy: block, worker, what its worker found.
std::string VerifyText(const std::vector<CopyCheck>& checks);
// One line: "stored rdd_1_0 (5.0 MiB) on w1 (tcp://...) in memory".
std::string PutText(const BlockId& id, const PutResult& put);

struct TableColumn {
  std::string title;
  bool right_aligned = false;  // for numbers
};
// Lays out `rows` under `columns`, each column as wide as its widest cell.
std::string FormatTable(const std::vector<TableColumn>& columns,
                        const std::vector<std::vector<std::string>>& rows);

}  // namespace bm
