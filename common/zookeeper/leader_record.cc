#include "common/zookeeper/leader_record.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace bm {

std::string EncodeLeaderRecord(const LeaderRecord& record) {
  return nlohmann::json{{"id", record.id}, {"address", record.address}, {"epoch", record.epoch}}
      .dump();
}

Result<LeaderRecord> ParseLeaderRecord(const std::string& data) {
  // Whatever sits in ZooKeeper may have been written by anyone: check every field.
  nlohmann::json json = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("id") || !json["id"].is_string() ||
      !json.contains("address") || !json["address"].is_string() || !json.contains("epoch") ||
      !json["epoch"].is_number_unsigned()) {
    return InvalidArgumentError("malformed leader znode: '" + data.substr(0, 200) + "'");
  }
  LeaderRecord record{json["id"].get<std::string>(), json["address"].get<std::string>(),
                      json["epoch"].get<uint64_t>()};
  if (record.id.empty() || record.epoch == 0) {
    return InvalidArgumentError("leader znode without an id or epoch: '" + data.substr(0, 200) +
                                "'");
  }
  return record;
}

bool InSyncRecord::Eligible(const std::string& id) const {
  return id == leader || std::find(standbys.begin(), standbys.end(), id) != standbys.end();
}

std::string EncodeInSyncRecord(const InSyncRecord& record) {
  return nlohmann::json{
      {"epoch", record.epoch}, {"leader", record.leader}, {"in_sync", record.standbys}}
      .dump();
}

Result<InSyncRecord> ParseInSyncRecord(const std::string& data) {
  nlohmann::json json = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  const auto bad = [&] {
    return InvalidArgumentError("malformed in-sync znode: '" + data.substr(0, 200) + "'");
  };
  if (!json.is_object() || !json.contains("epoch") || !json["epoch"].is_number_unsigned() ||
      !json.contains("leader") || !json["leader"].is_string() || !json.contains("in_sync") ||
      !json["in_sync"].is_array()) {
    return bad();
  }
  InSyncRecord record{json["epoch"].get<uint64_t>(), json["leader"].get<std::string>(), {}};
  for (const nlohmann::json& id : json["in_sync"]) {
    if (!id.is_string()) return bad();
    record.standbys.push_back(id.get<std::string>());
  }
  if (record.leader.empty()) return bad();
  return record;
}

std::string EncodeCandidateRecord(const std::string& id, const std::string& address) {
  return nlohmann::json{{"id", id}, {"address", address}}.dump();
}

Result<CandidateRecord> ParseCandidateRecord(const std::string& data) {
  nlohmann::json json = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("id") || !json["id"].is_string() ||
      !json.contains("address") || !json["address"].is_string() ||
      json["id"].get<std::string>().empty()) {
    return InvalidArgumentError("malformed candidate znode: '" + data.substr(0, 200) + "'");
  }
  return CandidateRecord{json["id"].get<std::string>(), json["address"].get<std::string>()};
}

int64_t CandidateSequence(const std::string& name) {
  if (name.size() < 10) return -1;
  std::string digits = name.substr(name.size() - 10);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(digits);
}

Result<uint64_t> ParseEpoch(const std::string& data) {
  if (data.empty() || data.size() > 19 ||
      data.find_first_not_of("0123456789") != std::string::npos) {
    return InvalidArgumentError("malformed epoch znode: '" + data.substr(0, 40) + "'");
  }
  return std::stoull(data);
}

}  // namespace bm
