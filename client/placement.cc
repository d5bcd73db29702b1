#include "client/placement.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "client/local_hosts.h"

namespace bm {
namespace {

bool FitsInFreeMemory(const WorkerInfo& w, uint64_t size) { return w.memory_free() >= size; }

bool FitsOnDisk(const WorkerInfo& w, uint64_t size) {
  if (w.disk_read_only) return false;
  if (w.disk_capacity == 0) return true;
  return w.disk_used <= w.disk_capacity && w.disk_capacity - w.disk_used >= size;
}

}  // namespace

std::vector<WorkerInfo> ChooseWorkers(const std::vector<WorkerInfo>& workers, uint64_t size,
                                      StorageLevel level, uint64_t round_robin,
                                      const std::function<bool(const WorkerInfo&)>& is_local) {
  const size_t n = workers.size();
  if (n == 0) return {};
  const size_t start = round_robin % n;
  // Position in round-robin order: the worker at `start` first, wrapping around.
  auto rotation = [&](size_t i) { return (i + n - start) % n; };

  // A candidate's sort key: (group, remote, primary key, rotation). Lower sorts first.
  struct Candidate {
    int group;
    bool remote;  // not on the caller's host (always false without `is_local`)
    uint64_t key;
    size_t rotation;
    size_t index;
  };
  std::vector<Candidate> candidates;
  for (size_t i = 0; i < n; ++i) {
    const WorkerInfo& w = workers[i];
    // Listed with zero stats until it registers: a full worker it is not.
    if (w.state == WorkerState::kUnconfirmed) continue;
    const bool remote = is_local && !is_local(w);
    // Most free memory first: sort by the negated free memory.
    const uint64_t by_free_memory = UINT64_MAX - w.memory_free();
    if (UsesMemory(level) && FitsInFreeMemory(w, size)) {
      candidates.push_back({0, remote, by_free_memory, rotation(i), i});
    } else if (UsesDisk(level)) {
      if (FitsOnDisk(w, size)) candidates.push_back({1, remote, w.disk_used, rotation(i), i});
    } else if (w.memory_capacity >= size) {
      candidates.push_back({2, remote, by_free_memory, rotation(i), i});
    }
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(a.group, a.remote, a.key, a.rotation) <
           std::tie(b.group, b.remote, b.key, b.rotation);
  });
  std::vector<WorkerInfo> ordered;
  ordered.reserve(candidates.size());
  for (const Candidate& c : candidates) ordered.push_back(workers[c.index]);
  return ordered;
}

bool AwaitsUnconfirmedWorkers(const std::vector<WorkerInfo>& workers, uint64_t size,
                              StorageLevel level, uint32_t copies) {
  const bool any_unconfirmed = std::any_of(workers.begin(), workers.end(), [](const WorkerInfo& w) {
    return w.state == WorkerState::kUnconfirmed;
  });
  if (!any_unconfirmed) return false;
  const std::vector<WorkerInfo> confirmed_with_room = ChooseWorkers(workers, size, level, 0);
  return std::count_if(confirmed_with_room.begin(), confirmed_with_room.end(),
                       [](const WorkerInfo& w) {
                         return w.state != WorkerState::kDecommissioning;
                       }) < static_cast<std::ptrdiff_t>(copies);
}

std::vector<std::string> PreferredHostsOf(const std::vector<BlockLocation>& copies) {
  std::vector<std::string> hosts;
  for (const Tier tier : {Tier::kMemory, Tier::kDisk}) {
    for (const BlockLocation& copy : copies) {
      if (copy.tier != tier) continue;
      std::string host = HostOfAddress(copy.address);
      if (host.empty() || std::find(hosts.begin(), hosts.end(), host) != hosts.end()) continue;
      hosts.push_back(std::move(host));
    }
  }
  return hosts;
}

const std::vector<WorkerInfo>* KeptWorkerList::Find(Clock::time_point now) const {
  if (workers_.empty() || now - kept_at_ >= ttl_) return nullptr;
  return &workers_;
}

void KeptWorkerList::Keep(std::vector<WorkerInfo> workers, Clock::time_point now) {
  workers_ = std::move(workers);
  kept_at_ = now;
}

void KeptWorkerList::CountPlacedCopy(const std::string& worker_id, Tier tier, uint64_t size) {
  for (WorkerInfo& worker : workers_) {
    if (worker.id != worker_id) continue;
    (tier == Tier::kMemory ? worker.memory_used : worker.disk_used) += size;
    ++worker.block_count;
    return;
  }
}

}  // namespace bm
