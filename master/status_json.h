#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "master/cluster_snapshot.h"

namespace bm {

// The REST API's JSON (/api/v1/...). RDD fields are named as in Spark's REST API
// (RDDStorageInfo, RDDDataDistribution, RDDPartitionInfo), so Spark users recognise them; the
// rest follows the same camelCase style. Sizes are bytes.
nlohmann::ordered_json RddToJson(const RddStatus& rdd);
nlohmann::ordered_json RddsToJson(const ClusterSnapshot& snapshot);
// RDDStorageInfo with dataDistribution and one page of partitions.
nlohmann::ordered_json RddDetailToJson(
    const RddStatus& rdd, const std::optional<std::vector<RddDistribution>>& distribution,
    const BlockPage& partitions);
nlohmann::ordered_json WorkersToJson(const ClusterSnapshot& snapshot);
nlohmann::ordered_json ShufflesToJson(const ClusterSnapshot& snapshot);
nlohmann::ordered_json BlockPageToJson(const BlockPage& page);
nlohmann::ordered_json LocationsToJson(const std::vector<BlockRow>& rows);
nlohmann::ordered_json HealthToJson(const ClusterSnapshot& snapshot);
// {"blocks": [...lost blocks, oldest first...], "kept": n}: /api/v1/blocks?state=lost.
nlohmann::ordered_json LostBlockToJson(const LostRecord& record);
nlohmann::ordered_json LostBlocksToJson(const std::vector<LostRecord>& records, uint64_t kept);

}  // namespace bm
