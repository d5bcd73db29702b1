#include "master/replication_driver.h"

#include <spdlog/spdlog.h>

#include <utility>

namespace bm {

std::vector<ReplicationDriver::Copy> ReplicationDriver::Plan(const BlockIndex& index,
                                                             const WorkerRegistry& registry) {
  std::vector<Copy> copies;
  for (ReplicationPlanner::CopyCommand& command : planner_.Plan(index, registry)) {
    const uint64_t request_id = request_ids_.Next();
    spdlog::info("copying {} from {} to {} more worker(s)", command.block.ToString(),
                 command.source, command.targets.size());
    copies_.emplace(request_id, InFlight{command.source, command.block});
    copies.push_back(Copy{request_id, std::move(command)});
  }
  if (planner_.under_replicated() != last_reported_short_) {
    last_reported_short_ = planner_.under_replicated();
    spdlog::info("re-replication: {} blocks short of copies, {} copies in flight",
                 last_reported_short_, planner_.in_flight());
  }
  return copies;
}

bool ReplicationDriver::CopyAnswered(uint64_t request_id) {
  auto copy = copies_.find(request_id);
  if (copy == copies_.end()) return false;
  planner_.CopyFinished(copy->second.block);
  copies_.erase(copy);
  return true;
}

void ReplicationDriver::WorkerGone(const std::string& worker_id, size_t locations) {
  if (locations > 0) planner_.MarkAllForCheck();
  std::erase_if(copies_, [&](const auto& entry) { return entry.second.source == worker_id; });
}

std::vector<RetiredCopy> ReplicationDriver::TrimExtraCopies(BlockIndex& index,
                                                            const WorkerRegistry& registry,
                                                            const std::vector<BlockId>& ids) const {
  std::vector<RetiredCopy> extra;
  for (const BlockId& id : ids) {
    std::optional<BlockInfo> info = index.Find(id);
    if (!info || info->locations.size() <= 1) continue;
    std::vector<IndexedLocation> copies = planner_.ExtraCopies(*info, registry);
    if (copies.empty()) continue;
    const uint64_t version = index.VersionOf(id).value_or(0);
    for (const IndexedLocation& copy : copies) {
      BlockChange removal{id};
      removal.removed = true;
      removal.version = version;
      index.Apply(copy.worker_id, removal);
      extra.push_back(RetiredCopy{copy.worker_id, id, version});
    }
  }
  if (!extra.empty()) spdlog::info("removing {} copies beyond their blocks' levels", extra.size());
  return extra;
}

}  // namespace bm
