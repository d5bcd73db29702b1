#include "master/cluster_snapshot.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <queue>

#include "master/block_index.h"
#include "master/worker_registry.h"

namespace bm {
namespace {

uint64_t AgeMillis(TimePoint now, TimePoint then) {
  return static_cast<uint64_t>(std::max<int64_t>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(now - then).count()));
}

BlockRow ToRow(const BlockInfo& info, const WorkerRegistry& registry) {
  BlockRow row;
  row.id = info.id;
  row.level = info.level;
  for (const BlockLocation& location : info.locations) {
    const WorkerRecord* worker = registry.Find(location.worker_id);
    row.copies.push_back(BlockCopy{location.worker_id, worker ? worker->address : std::string(),
                                   location.tier, location.size});
  }
  return row;
}

}  // namespace

ClusterSnapshot BuildClusterSnapshot(const MasterView& view) {
  ClusterSnapshot snapshot;
  snapshot.taken_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
  std::map<uint64_t, RddStatus> rdds;
  for (RddSummary& summary : view.index.RddSummaries()) {
    RddStatus& rdd = rdds[summary.rdd_id];
    rdd.id = summary.rdd_id;
    rdd.level = summary.level;
    rdd.cached_partitions = summary.cached_partitions;
    rdd.memory_bytes = summary.memory_bytes;
    rdd.disk_bytes = summary.disk_bytes;
    rdd.workers = std::move(summary.workers);
  }
  for (const auto& [rdd_id, description] : view.rdds) {
    RddStatus& rdd = rdds[rdd_id];
    rdd.id = rdd_id;
    rdd.name = description.name;
    rdd.level = description.level;
    rdd.total_partitions = description.total_partitions;
  }
  snapshot.rdds.reserve(rdds.size());
  for (auto& [id, rdd] : rdds) snapshot.rdds.push_back(std::move(rdd));

  for (const WorkerRecord& record : view.registry.List()) {
    snapshot.workers.push_back(WorkerStatus{
        .id = record.id,
        .address = record.address,
        .host = record.labels.host,
        .rack = record.labels.rack,
        .state = std::string(WorkerStateName(record.state)),
        .stats = record.stats,
        .locations = view.index.LocationCount(record.id),
        .last_heartbeat_age_ms = AgeMillis(view.now, record.last_seen),
    });
  }
  snapshot.block_count = view.index.block_count();
  snapshot.under_replicated = view.under_replicated;
  snapshot.copies_in_flight = view.copies_in_flight;
  snapshot.leases_held = view.leases_held;
  snapshot.journaled = view.journaled;
  snapshot.counters = view.counters;
  return snapshot;
}

BlockPage QueryBlockPage(const MasterView& view, std::optional<uint64_t> rdd,
                         std::optional<BlockId> cursor, size_t limit) {
  BlockPage page;
  if (limit == 0) return page;
  std::vector<BlockInfo> chosen;
  if (rdd) {
    std::vector<BlockInfo> blocks = view.index.ListRdd(*rdd);  // sorted
    auto first = blocks.begin();
    if (cursor) {
      first = std::upper_bound(blocks.begin(), blocks.end(), *cursor,
                               [](const BlockId& id, const BlockInfo& info) { return id < info.id; });
    }
    const auto last = first + std::min<ptrdiff_t>(limit, blocks.end() - first);
    chosen.assign(std::make_move_iterator(first), std::make_move_iterator(last));
    if (last != blocks.end()) page.next_cursor = chosen.back().id;
  } else {
    // The `limit` smallest ids after the cursor, kept in a max-heap while everything is scanned.
    // TODO(scale): a scan of the whole index per page; an ordered index would make it O(limit).
    auto larger_id = [](const BlockInfo& a, const BlockInfo& b) { return a.id < b.id; };
    std::priority_queue<BlockInfo, std::vector<BlockInfo>, decltype(larger_id)> heap(larger_id);
    bool more = false;
    view.index.ForEach([&](const BlockInfo& info) {
      if (cursor && !(*cursor < info.id)) return;
      if (heap.size() < limit) {
        heap.push(info);
      } else if (info.id < heap.top().id) {
        heap.pop();
        heap.push(info);
        more = true;
      } else {
        more = true;
      }
    });
    chosen.reserve(heap.size());
    for (; !heap.empty(); heap.pop()) chosen.push_back(heap.top());
    std::reverse(chosen.begin(), chosen.end());
    if (more) page.next_cursor = chosen.back().id;
  }
  page.rows.reserve(chosen.size());
  for (const BlockInfo& info : chosen) page.rows.push_back(ToRow(info, view.registry));
  return page;
}

std::vector<BlockRow> QueryLocations(const MasterView& view, const std::vector<BlockId>& ids) {
  std::vector<BlockRow> rows;
  rows.reserve(ids.size());
  for (const BlockId& id : ids) {
    std::optional<BlockInfo> info = view.index.Find(id);
    if (info) {
      rows.push_back(ToRow(*info, view.registry));
    } else {
      BlockRow row;
      row.id = id;
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

std::vector<RddDistribution> QueryRddDistribution(const MasterView& view, uint64_t rdd_id) {
  std::map<std::string, RddDistribution> by_worker;
  for (const BlockInfo& info : view.index.ListRdd(rdd_id)) {
    for (const BlockLocation& location : info.locations) {
      RddDistribution& entry = by_worker[location.worker_id];
      entry.worker_id = location.worker_id;
      (location.tier == Tier::kMemory ? entry.memory_bytes : entry.disk_bytes) += location.size;
      ++entry.blocks;
    }
  }
  std::vector<RddDistribution> out;
  out.reserve(by_worker.size());
  for (auto& [id, entry] : by_worker) {
    if (const WorkerRecord* worker = view.registry.Find(id)) {
      entry.address = worker->address;
      entry.memory_remaining = worker->stats.memory_capacity > worker->stats.memory_used
                                   ? worker->stats.memory_capacity - worker->stats.memory_used
                                   : 0;
    }
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace bm
