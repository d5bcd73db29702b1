#include "master/replication_planner.h"

#include <algorithm>

#include "common/core/replica_spread.h"

namespace bm {
namespace {

bool Stays(const WorkerRecord* worker) {
  return worker != nullptr && worker->state != WorkerState::kDecommissioning;
}

bool DiskHasRoom(const WorkerStats& stats, uint64_t size) {
  if (stats.disk_read_only) return false;
  return stats.disk_capacity == 0 ||
         (stats.disk_capacity > stats.disk_used && stats.disk_capacity - stats.disk_used >= size);
}

uint64_t FreeMemory(const WorkerStats& stats) {
  return stats.memory_capacity > stats.memory_used ? stats.memory_capacity - stats.memory_used : 0;
}

// Active workers without a copy that can take `size` bytes at `level`, best first: for levels
// using memory, those with the most free memory that fits it, then (MEMORY_AND_DISK) those
// with disk room; for DISK_ONLY, the least disk used with room.
std::vector<WorkerRecord> Candidates(const BlockInfo& info, const WorkerRegistry& registry) {
  const uint64_t size = info.locations.front().size;
  const bool memory = UsesMemory(info.level);
  const bool disk = UsesDisk(info.level);
  std::vector<WorkerRecord> fits_memory, fits_disk;
  for (WorkerRecord& worker : registry.List()) {
    if (worker.state != WorkerState::kActive) continue;
    const bool holds =
        std::any_of(info.locations.begin(), info.locations.end(),
                    [&](const IndexedLocation& l) { return l.worker_id == worker.id; });
    if (holds) continue;
    if (memory && FreeMemory(worker.stats) >= size) {
      fits_memory.push_back(std::move(worker));
    } else if (disk && DiskHasRoom(worker.stats, size)) {
      fits_disk.push_back(std::move(worker));
    }
  }
  std::stable_sort(fits_memory.begin(), fits_memory.end(), [](const auto& a, const auto& b) {
    return FreeMemory(a.stats) > FreeMemory(b.stats);
  });
  std::stable_sort(fits_disk.begin(), fits_disk.end(), [](const auto& a, const auto& b) {
    return a.stats.disk_used < b.stats.disk_used;
  });
  fits_memory.insert(fits_memory.end(), std::make_move_iterator(fits_disk.begin()),
                     std::make_move_iterator(fits_disk.end()));
  return fits_memory;
}

ReplicaSite SiteOf(const WorkerRecord& worker) {
  return {worker.id, worker.labels.host.empty() ? worker.address : worker.labels.host,
          worker.labels.rack};
}

}  // namespace

int ReplicationPlanner::Missing(const BlockInfo& info, const WorkerRegistry& registry) {
  int staying = 0;
  for (const IndexedLocation& location : info.locations) {
    if (Stays(registry.Find(location.worker_id))) ++staying;
  }
  return std::max(1, ReplicationOf(info.level)) - staying;
}

std::vector<IndexedLocation> ReplicationPlanner::ExtraCopies(const BlockInfo& info,
                                                             const WorkerRegistry& registry) const {
  if (copying_.contains(info.id)) return {};
  const size_t wanted = static_cast<size_t>(std::max(1, ReplicationOf(info.level)));
  // Locations are memory first already: SpreadReplicas keeps the first of equals.
  std::vector<const IndexedLocation*> active;
  std::vector<ReplicaSite> sites;
  for (const IndexedLocation& location : info.locations) {
    const WorkerRecord* worker = registry.Find(location.worker_id);
    if (worker == nullptr || worker->state != WorkerState::kActive) continue;
    active.push_back(&location);
    sites.push_back(SiteOf(*worker));
  }
  if (active.size() <= wanted) return {};
  std::vector<size_t> order = SpreadReplicas(sites, {}, wanted);
  std::vector<bool> keep(active.size(), false);
  for (size_t i = 0; i < std::min(order.size(), wanted); ++i) keep[order[i]] = true;
  std::vector<IndexedLocation> extra;
  for (size_t i = 0; i < active.size(); ++i) {
    if (!keep[i]) extra.push_back(*active[i]);
  }
  return extra;
}

std::vector<ReplicationPlanner::CopyCommand> ReplicationPlanner::Plan(
    const BlockIndex& index, const WorkerRegistry& registry) {
  const TimePoint now = clock_.Now();
  // A command whose source was dropped will not be answered: plan the block again now rather
  // than after the timeout.
  std::erase_if(copying_, [&](const auto& entry) {
    return entry.second.deadline <= now || !registry.Contains(entry.second.source);
  });
  // A block can reach a draining worker after the drain started (a put already under way when
  // it was told): it is short of copies, and no other event would have it scanned.
  const std::vector<WorkerRecord> workers = registry.List();
  const bool draining = std::any_of(workers.begin(), workers.end(), [](const WorkerRecord& w) {
    return w.state == WorkerState::kDecommissioning;
  });
  if (scan_needed_ || draining) {
    scan_needed_ = false;
    index.ForEach([&](const BlockInfo& info) {
      if (Missing(info, registry) > 0) short_.insert(info.id);
    });
  }
  std::vector<CopyCommand> commands;
  for (auto it = short_.begin(); it != short_.end() && copying_.size() < max_in_flight_;) {
    if (copying_.contains(*it)) {
      ++it;
      continue;
    }
    std::optional<BlockInfo> info = index.Find(*it);
    const int missing = info ? Missing(*info, registry) : 0;
    if (missing <= 0) {  // gone, or back at its level
      it = short_.erase(it);
      continue;
    }
    std::vector<WorkerRecord> candidates = Candidates(*info, registry);
    std::vector<ReplicaSite> sites, holders;
    for (const WorkerRecord& candidate : candidates) sites.push_back(SiteOf(candidate));
    for (const IndexedLocation& location : info->locations) {
      if (const WorkerRecord* holder = registry.Find(location.worker_id); Stays(holder)) {
        holders.push_back(SiteOf(*holder));
      }
    }
    std::vector<size_t> order = SpreadReplicas(sites, holders, static_cast<size_t>(missing));
    order.resize(std::min(order.size(), static_cast<size_t>(missing)));
    if (order.empty()) {  // no worker can take it now; try again later
      ++it;
      continue;
    }
    // Read from a copy that stays when there is one, memory before disk (locations are in
    // that order already).
    const IndexedLocation* source = &info->locations.front();
    for (const IndexedLocation& location : info->locations) {
      if (Stays(registry.Find(location.worker_id))) {
        source = &location;
        break;
      }
    }
    CopyCommand command{*it, info->level, source->worker_id, {}};
    for (size_t i : order) command.targets.push_back(candidates[i]);
    copying_[*it] = InFlight{now + copy_timeout_, source->worker_id};
    commands.push_back(std::move(command));
    ++it;
  }
  return commands;
}

void ReplicationPlanner::CopyFinished(const BlockId& block) { copying_.erase(block); }

std::vector<std::string> ReplicationPlanner::DrainedWorkers(const BlockIndex& index,
                                                            const WorkerRegistry& registry) const {
  std::set<std::string> draining;
  for (const WorkerRecord& worker : registry.List()) {
    if (worker.state == WorkerState::kDecommissioning) draining.insert(worker.id);
  }
  if (draining.empty()) return {};
  // A block needs its level's copies on the workers that stay, or as many as there are such
  // workers when they are fewer (a drain must not wait for copies that cannot exist).
  size_t staying = 0;
  for (const WorkerRecord& worker : registry.List()) {
    if (worker.state != WorkerState::kDecommissioning) ++staying;
  }
  std::set<std::string> busy;  // still hold a block that needs them
  index.ForEach([&](const BlockInfo& info) {
    const int missing = Missing(info, registry);
    const int wanted = std::max(1, ReplicationOf(info.level));
    const int reachable = std::min<int>(wanted, static_cast<int>(staying));
    if (missing <= 0 || (staying > 0 && wanted - missing >= reachable)) return;
    for (const IndexedLocation& location : info.locations) {
      if (draining.contains(location.worker_id)) busy.insert(location.worker_id);
    }
  });
  std::vector<std::string> drained;
  for (const std::string& id : draining) {
    if (!busy.contains(id)) drained.push_back(id);
  }
  return drained;
}

}  // namespace bm
