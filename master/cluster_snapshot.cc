#include "master/cluster_snapshot.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <queue>

#include "master/block_index.h"
#include "master/shuffle_service.h"
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
  for (const IndexedLocation& location : info.locations) {
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
  if (view.tenants) snapshot.tenants = view.tenants();
  if (view.shuffles != nullptr) {
    for (const auto& [id, shuffle] : view.shuffles->shuffles()) {
      snapshot.shuffles.push_back(ShuffleStatus{
          .id = id,
          .maps = shuffle.shape.maps,
          .partitions = shuffle.shape.partitions,
          .level = shuffle.shape.level,
          .committed_maps = static_cast<uint32_t>(shuffle.commits.size()),
          .bytes = shuffle.committed_bytes,
          .workers = shuffle.placement.workers,
          .idle_ms = static_cast<uint64_t>(std::max<int64_t>(
              0, std::chrono::duration_cast<std::chrono::milliseconds>(view.now - shuffle.touched)
                     .count()))});
    }
  }

  for (const WorkerRecord& record : view.registry.List()) {
    snapshot.workers.push_back(WorkerStatus{
        .id = record.id,
        .address = record.address,
        .host = record.labels.host,
        .rack = record.labels.rack,
        .state = record.state,
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
  snapshot.role = view.role;
  snapshot.counters = view.counters;
  if (view.lost != nullptr) {
    constexpr size_t kRecentLost = 20;
    snapshot.lost_count = view.lost->size();
    snapshot.recent_lost = view.lost->Newest(kRecentLost);
    snapshot.lost_totals = view.lost->totals();
  }
  return snapshot;
}

std::vector<LostRecord> QueryLostBlocks(const MasterView& view, size_t limit) {
  if (view.lost == nullptr) return {};
  return view.lost->Newest(limit);
}

namespace {

// Partitions a page of a registered RDD looks up at most: bounds the loop's work for an RDD
// with few of its partitions cached (the page then ends early, with a cursor to go on from).
constexpr uint64_t kMaxProbesPerPage = 100000;

// Blocks for one page, and where the next page starts.
struct Gathered {
  std::vector<BlockInfo> blocks;        // in BlockId order
  std::optional<BlockId> resume_after;  // set when more may follow
};

// Up to `room` blocks of RDD `rdd_id` after partition `after` (from the first when nullopt).
// A registered RDD (total_partitions > 0) is read by looking its partitions up in order, so a
// page costs O(room) lookups however big the RDD is; Spark writes no partition past the
// registered count. Any other RDD is listed whole (O(its blocks)).
void GatherRdd(const BlockIndex& index, uint64_t rdd_id, uint64_t total_partitions,
               std::optional<uint64_t> after, size_t room, Gathered* out) {
  if (total_partitions > 0) {
    uint64_t partition = after ? *after + 1 : 0;
    uint64_t probes = 0;
    size_t taken = 0;
    for (; partition < total_partitions && taken < room && probes < kMaxProbesPerPage;
         ++partition, ++probes) {
      std::optional<BlockInfo> info = index.Find(BlockId::Rdd(rdd_id, partition));
      if (!info) continue;
      out->blocks.push_back(std::move(*info));
      ++taken;
    }
    if (partition < total_partitions && partition > 0) {
      out->resume_after = BlockId::Rdd(rdd_id, partition - 1);
    }
    return;
  }
  std::vector<BlockInfo> blocks = index.ListRdd(rdd_id);  // sorted
  auto first = blocks.begin();
  if (after) {
    first = std::partition_point(blocks.begin(), blocks.end(), [&](const BlockInfo& info) {
      return info.id.partition() <= *after;
    });
  }
  const auto last = first + std::min<ptrdiff_t>(room, blocks.end() - first);
  out->blocks.insert(out->blocks.end(), std::make_move_iterator(first),
                     std::make_move_iterator(last));
  if (last != blocks.end() && !out->blocks.empty()) out->resume_after = out->blocks.back().id;
}

// Up to `room` broadcast and shuffle blocks after `cursor`, the smallest kept in a max-heap
// while all of them are visited.
// TODO(scale): O(non-RDD blocks) per page; an ordered index of them would make it O(room).
void GatherNonRdd(const BlockIndex& index, const std::optional<BlockId>& cursor, size_t room,
                  Gathered* out) {
  auto larger_id = [](const BlockInfo& a, const BlockInfo& b) { return a.id < b.id; };
  std::priority_queue<BlockInfo, std::vector<BlockInfo>, decltype(larger_id)> heap(larger_id);
  bool more = false;
  index.ForEachNonRdd([&](const BlockInfo& info) {
    if (cursor && !(*cursor < info.id)) return;
    if (heap.size() < room) {
      heap.push(info);
      return;
    }
    more = true;
    if (room > 0 && info.id < heap.top().id) {
      heap.pop();
      heap.push(info);
    }
  });
  std::vector<BlockInfo> chosen;
  chosen.reserve(heap.size());
  for (; !heap.empty(); heap.pop()) chosen.push_back(heap.top());
  std::reverse(chosen.begin(), chosen.end());
  out->blocks.insert(out->blocks.end(), std::make_move_iterator(chosen.begin()),
                     std::make_move_iterator(chosen.end()));
  if (more && !out->blocks.empty()) out->resume_after = out->blocks.back().id;
}

uint64_t RegisteredPartitions(const MasterView& view, uint64_t rdd_id) {
  auto it = view.rdds.find(rdd_id);
  return it == view.rdds.end() ? 0 : it->second.total_partitions;
}

}  // namespace

BlockPage QueryBlockPage(const MasterView& view, std::optional<uint64_t> rdd,
                         std::optional<BlockId> cursor, size_t limit) {
  Gathered gathered;
  if (rdd) {
    std::optional<uint64_t> after;
    if (cursor && cursor->is_rdd() && *cursor->rdd_id() == *rdd) after = cursor->partition();
    const bool past_this_rdd = cursor && (!cursor->is_rdd() || *cursor->rdd_id() > *rdd);
    if (!past_this_rdd) {
      GatherRdd(view.index, *rdd, RegisteredPartitions(view, *rdd), after, limit, &gathered);
    }
  } else {
    // RDD blocks sort first (by RDD, then partition), then broadcast and shuffle blocks.
    if (!cursor || cursor->is_rdd()) {
      std::vector<uint64_t> rdd_ids = view.index.RddIds();
      for (const auto& [rdd_id, description] : view.rdds) rdd_ids.push_back(rdd_id);
      std::sort(rdd_ids.begin(), rdd_ids.end());
      rdd_ids.erase(std::unique(rdd_ids.begin(), rdd_ids.end()), rdd_ids.end());
      auto it = rdd_ids.begin();
      if (cursor) it = std::lower_bound(rdd_ids.begin(), rdd_ids.end(), *cursor->rdd_id());
      for (; it != rdd_ids.end(); ++it) {
        const size_t room = limit - gathered.blocks.size();
        std::optional<uint64_t> after;
        if (cursor && *cursor->rdd_id() == *it) after = cursor->partition();
        gathered.resume_after.reset();
        GatherRdd(view.index, *it, RegisteredPartitions(view, *it), after, room, &gathered);
        if (gathered.resume_after) break;  // the page is full, or this RDD's probes ran out
        if (gathered.blocks.size() == limit) {
          // Full at the end of this RDD: the next page starts after its last partition.
          gathered.resume_after = gathered.blocks.back().id;
          break;
        }
      }
    }
    if (!gathered.resume_after && gathered.blocks.size() < limit) {
      GatherNonRdd(view.index, cursor, limit - gathered.blocks.size(), &gathered);
    } else if (!gathered.resume_after && gathered.blocks.size() == limit) {
      gathered.resume_after = gathered.blocks.back().id;
    }
  }
  BlockPage page;
  page.next_cursor = gathered.resume_after;
  page.rows.reserve(gathered.blocks.size());
  for (const BlockInfo& info : gathered.blocks) page.rows.push_back(ToRow(info, view.registry));
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
    for (const IndexedLocation& location : info.locations) {
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
