#include "master/shuffle_service.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <utility>

namespace bm {
namespace {

std::string Named(uint64_t shuffle_id) { return "shuffle " + std::to_string(shuffle_id); }

std::string ShapeText(const ShuffleShape& shape) {
  return std::to_string(shape.maps) + " maps x " + std::to_string(shape.partitions) +
         " partitions, " + std::string(StorageLevelName(shape.level));
}

// How far apart two workers are for a partition's copies: 0 the same worker, 1 the same host,
// 2 another host, 3 another rack.
int Distance(const ShuffleCandidate& a, const ShuffleCandidate& b) {
  if (a.worker_id == b.worker_id) return 0;
  if (!a.rack.empty() && !b.rack.empty() && a.rack != b.rack) return 3;
  return a.host != b.host ? 2 : 1;
}

// The index of `worker` in the placement's workers, added at the end when it is not there
// (indexes held elsewhere stay valid: workers are only ever appended).
uint32_t IndexOf(ShufflePlacement& placement, const std::string& worker) {
  auto found = std::find(placement.workers.begin(), placement.workers.end(), worker);
  if (found != placement.workers.end()) {
    return static_cast<uint32_t>(found - placement.workers.begin());
  }
  placement.workers.push_back(worker);
  return static_cast<uint32_t>(placement.workers.size() - 1);
}

}  // namespace

std::vector<uint32_t> ShufflePlacement::StreamsOf(uint32_t partition) const {
  std::vector<uint32_t> streams{partition};
  for (const ShuffleSplitPlacement& split : splits) {
    if (split.partition == partition) streams.push_back(split.stream);
  }
  return streams;
}

std::optional<uint32_t> ShufflePlacement::PartitionOf(uint32_t stream) const {
  if (stream < primaries.size()) return stream;
  for (const ShuffleSplitPlacement& split : splits) {
    if (split.stream == stream) return split.partition;
  }
  return std::nullopt;
}

Result<const ShuffleService::Shuffle*> ShuffleService::Register(
    const ShuffleShape& shape, const std::string& owner,
    std::span<const ShuffleCandidate> candidates, ShuffleEffects& effects) {
  if (auto known = shuffles_.find(shape.id); known != shuffles_.end()) {
    // Every mapper of a job may register the shuffle it writes: the first one places it.
    if (known->second.shape != shape) {
      return InvalidArgumentError(Named(shape.id) + " is registered as " +
                                  ShapeText(known->second.shape) + ", not " + ShapeText(shape) +
                                  "; unregister it first (bmctl rm-shuffle " +
                                  std::to_string(shape.id) + ")");
    }
    known->second.touched = clock_.Now();
    return &known->second;
  }
  if (shape.maps == 0 || shape.partitions == 0) {
    return InvalidArgumentError(Named(shape.id) + " needs at least one map and one partition");
  }
  if (shape.maps > limits_.max_maps || shape.partitions > limits_.max_partitions) {
    return InvalidArgumentError(Named(shape.id) + " has " + ShapeText(shape) + "; at most " +
                                std::to_string(limits_.max_maps) + " maps and " +
                                std::to_string(limits_.max_partitions) + " partitions");
  }
  if (shuffles_.size() >= limits_.max_shuffles) {
    return OutOfSpaceError("the master already runs " + std::to_string(limits_.max_shuffles) +
                           " shuffles; unregister some first");
  }
  const size_t copies = static_cast<size_t>(ReplicationOf(shape.level));
  if (candidates.size() < copies) {
    return UnavailableError(Named(shape.id) + " at " + std::string(StorageLevelName(shape.level)) +
                            " needs " + std::to_string(copies) + " live workers; " +
                            std::to_string(candidates.size()) + " registered");
  }
  Shuffle shuffle{.shape = shape,
                  .placement = Place(shape, candidates),
                  .owner = owner,
                  .touched = clock_.Now()};
  AddLoad(shuffle.placement, +1);
  effects.recorded.push_back({shape, shuffle.placement, owner});
  auto [it, inserted] = shuffles_.emplace(shape.id, std::move(shuffle));
  for (ShuffleCommand& command : AssignCommands(it->second)) {
    effects.commands.push_back(std::move(command));
  }
  return &it->second;
}

ShufflePlacement ShuffleService::Place(const ShuffleShape& shape,
                                       std::span<const ShuffleCandidate> candidates) {
  // The most free space first; then, partition by partition, the least loaded of them.
  std::vector<size_t> order(candidates.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return candidates[a].free_bytes > candidates[b].free_bytes;
  });
  std::vector<uint64_t> load(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    auto known = load_.find(candidates[i].worker_id);
    load[i] = known == load_.end() ? 0 : known->second;
  }
  ShufflePlacement placement;
  std::vector<int64_t> index_of(candidates.size(), -1);  // candidate -> placement.workers
  auto index = [&](size_t candidate) {
    if (index_of[candidate] < 0) {
      index_of[candidate] = static_cast<int64_t>(placement.workers.size());
      placement.workers.push_back(candidates[candidate].worker_id);
    }
    return static_cast<uint32_t>(index_of[candidate]);
  };
  auto least_loaded = [&](std::span<const size_t> among) {
    size_t best = among.front();
    for (size_t candidate : among) {
      if (load[candidate] < load[best]) best = candidate;
    }
    return best;
  };
  const bool replicated = ReplicationOf(shape.level) > 1;
  placement.primaries.reserve(shape.partitions);
  if (replicated) placement.replicas.reserve(shape.partitions);
  for (uint32_t partition = 0; partition < shape.partitions; ++partition) {
    const size_t primary = least_loaded(order);
    ++load[primary];
    placement.primaries.push_back(index(primary));
    if (!replicated) continue;
    // Another rack, else another host, else another worker: the least loaded of the
    // farthest there are (HDFS's order, common/core/replica_spread.h).
    std::vector<size_t> farthest;
    int best_distance = 0;
    for (size_t candidate : order) {
      const int distance = Distance(candidates[primary], candidates[candidate]);
      if (distance < best_distance || distance == 0) continue;
      if (distance > best_distance) farthest.clear();
      best_distance = distance;
      farthest.push_back(candidate);
    }
    const size_t replica = least_loaded(farthest);
    ++load[replica];
    placement.replicas.push_back(index(replica));
  }
  return placement;
}

void ShuffleService::AddLoad(const ShufflePlacement& placement, int64_t sign) {
  auto add = [&](uint32_t worker) {
    uint64_t& load = load_[placement.workers[worker]];
    load = sign > 0 ? load + 1 : (load > 0 ? load - 1 : 0);
  };
  for (uint32_t worker : placement.primaries) add(worker);
  for (uint32_t worker : placement.replicas) add(worker);
  for (const ShuffleSplitPlacement& split : placement.splits) {
    add(split.primary);
    if (!placement.replicas.empty()) add(split.replica);
  }
  std::erase_if(load_, [](const auto& entry) { return entry.second == 0; });
}

std::vector<ShuffleCommand> ShuffleService::AssignCommands(const Shuffle& shuffle) const {
  const ShufflePlacement& placement = shuffle.placement;
  std::vector<ShuffleCommand> commands(placement.workers.size());
  for (size_t worker = 0; worker < placement.workers.size(); ++worker) {
    commands[worker] = ShuffleCommand{.kind = ShuffleCommand::Kind::kAssign,
                                      .worker_id = placement.workers[worker],
                                      .shuffle_id = shuffle.shape.id,
                                      .maps = shuffle.shape.maps,
                                      .owner = shuffle.owner,
                                      .level = shuffle.shape.level};
  }
  for (uint32_t partition = 0; partition < placement.primaries.size(); ++partition) {
    commands[placement.primaries[partition]].partitions.push_back(partition);
  }
  for (uint32_t partition = 0; partition < placement.replicas.size(); ++partition) {
    commands[placement.replicas[partition]].partitions.push_back(partition);
    commands[placement.primaries[partition]].forwards.emplace_back(
        partition, placement.workers[placement.replicas[partition]]);
  }
  for (const ShuffleSplitPlacement& split : placement.splits) {
    commands[split.primary].partitions.push_back(split.stream);
    if (placement.replicas.empty()) continue;
    commands[split.replica].partitions.push_back(split.stream);
    commands[split.primary].forwards.emplace_back(split.stream, placement.workers[split.replica]);
  }
  for (ShuffleCommand& command : commands) {
    std::sort(command.partitions.begin(), command.partitions.end());
  }
  return commands;
}

Result<const ShuffleService::Shuffle*> ShuffleService::Find(uint64_t shuffle_id) {
  auto known = shuffles_.find(shuffle_id);
  if (known == shuffles_.end()) {
    return NotFoundError(Named(shuffle_id) + " is not registered");
  }
  known->second.touched = clock_.Now();
  return &known->second;
}

Status ShuffleService::Commit(JournaledMapCommit commit, ShuffleEffects& effects) {
  auto known = shuffles_.find(commit.shuffle_id);
  if (known == shuffles_.end()) {
    return NotFoundError(Named(commit.shuffle_id) + " is not registered");
  }
  Shuffle& shuffle = known->second;
  shuffle.touched = clock_.Now();
  if (commit.map >= shuffle.shape.maps) {
    return InvalidArgumentError(Named(commit.shuffle_id) + " has maps 0.." +
                                std::to_string(shuffle.shape.maps - 1) + "; there is no map " +
                                std::to_string(commit.map));
  }
  std::sort(commit.pieces.begin(), commit.pieces.end(),
            [](const PiecesInPartition& a, const PiecesInPartition& b) {
              return a.partition < b.partition;
            });
  uint64_t bytes = 0;
  for (size_t i = 0; i < commit.pieces.size(); ++i) {
    const PiecesInPartition& pieces = commit.pieces[i];
    if (!shuffle.placement.PartitionOf(pieces.partition)) {
      return InvalidArgumentError(Named(commit.shuffle_id) + " has no partition or stream " +
                                  std::to_string(pieces.partition));
    }
    if (i > 0 && commit.pieces[i - 1].partition == pieces.partition) {
      return InvalidArgumentError("the commit of map " + std::to_string(commit.map) +
                                  " lists partition " + std::to_string(pieces.partition) +
                                  " twice");
    }
    bytes += pieces.bytes;
  }
  if (auto committed = shuffle.commits.find(commit.map); committed != shuffle.commits.end()) {
    if (committed->second.attempt == commit.attempt) {
      if (committed->second.pieces == commit.pieces) return Status::Ok();  // a retry
      return InvalidArgumentError("attempt " + std::to_string(commit.attempt) + " of map " +
                                  std::to_string(commit.map) + " of " + Named(commit.shuffle_id) +
                                  " was committed with other piece counts");
    }
    return AbortedError("map " + std::to_string(commit.map) + " of " + Named(commit.shuffle_id) +
                        " was committed by attempt " + std::to_string(committed->second.attempt) +
                        "; the pieces of attempt " + std::to_string(commit.attempt) +
                        " are never read");
  }
  shuffle.committed_bytes += bytes;
  effects.committed.push_back(commit);
  shuffle.commits.emplace(commit.map, std::move(commit));
  return Status::Ok();
}

Result<std::vector<uint32_t>> ShuffleService::ForgetLostMaps(uint64_t shuffle_id,
                                                             uint32_t partition,
                                                             std::span<const uint32_t> maps,
                                                             ShuffleEffects& effects) {
  auto known = shuffles_.find(shuffle_id);
  if (known == shuffles_.end()) return NotFoundError(Named(shuffle_id) + " is not registered");
  Shuffle& shuffle = known->second;
  shuffle.touched = clock_.Now();
  if (partition >= shuffle.shape.partitions) {
    return InvalidArgumentError(Named(shuffle_id) + " has no partition " +
                                std::to_string(partition));
  }
  std::vector<uint32_t> dropped;
  for (uint32_t map : maps) {
    auto committed = shuffle.commits.find(map);
    if (committed == shuffle.commits.end()) continue;
    const std::vector<PiecesInPartition>& pieces = committed->second.pieces;
    const bool wrote_here =
        std::any_of(pieces.begin(), pieces.end(), [&](const PiecesInPartition& p) {
          return p.pieces > 0 && shuffle.placement.PartitionOf(p.partition) == partition;
        });
    if (!wrote_here) continue;
    for (const PiecesInPartition& p : pieces) shuffle.committed_bytes -= p.bytes;
    shuffle.commits.erase(committed);
    effects.uncommitted.emplace_back(shuffle_id, map);
    dropped.push_back(map);
  }
  return dropped;
}

bool ShuffleService::Unregister(uint64_t shuffle_id, ShuffleEffects& effects) {
  auto known = shuffles_.find(shuffle_id);
  if (known == shuffles_.end()) return false;
  AddLoad(known->second.placement, -1);
  for (const std::string& worker : known->second.placement.workers) {
    effects.commands.push_back(ShuffleCommand{
        .kind = ShuffleCommand::Kind::kRemove, .worker_id = worker, .shuffle_id = shuffle_id});
  }
  effects.forgotten.push_back(shuffle_id);
  shuffles_.erase(known);
  return true;
}

std::vector<uint64_t> ShuffleService::Expire(ShuffleEffects& effects) {
  const TimePoint now = clock_.Now();
  std::vector<uint64_t> idle;
  for (const auto& [id, shuffle] : shuffles_) {
    if (now - shuffle.touched >= limits_.ttl) idle.push_back(id);
  }
  for (uint64_t id : idle) Unregister(id, effects);
  return idle;
}

std::optional<TimePoint> ShuffleService::NextExpiry() const {
  std::optional<TimePoint> next;
  for (const auto& [id, shuffle] : shuffles_) {
    const TimePoint expiry = shuffle.touched + limits_.ttl;
    if (!next || expiry < *next) next = expiry;
  }
  return next;
}

Result<const ShuffleService::Shuffle*> ShuffleService::Split(
    uint64_t shuffle_id, uint32_t stream, std::span<const ShuffleCandidate> candidates,
    ShuffleEffects& effects) {
  auto known = shuffles_.find(shuffle_id);
  if (known == shuffles_.end()) return NotFoundError(Named(shuffle_id) + " is not registered");
  Shuffle& shuffle = known->second;
  shuffle.touched = clock_.Now();
  ShufflePlacement& placement = shuffle.placement;
  const std::optional<uint32_t> partition = placement.PartitionOf(stream);
  if (!partition) {
    return InvalidArgumentError(Named(shuffle_id) + " has no partition or stream " +
                                std::to_string(stream));
  }
  const std::vector<uint32_t> streams = placement.StreamsOf(*partition);
  if (streams.back() != stream) return &shuffle;  // split already, by another writer
  const uint64_t next = *partition + uint64_t{streams.size()} * shuffle.shape.partitions;
  if (placement.splits.size() >= limits_.max_splits || next > UINT32_MAX) {
    return InvalidArgumentError(Named(shuffle_id) + " has " +
                                std::to_string(placement.splits.size()) +
                                " splits, as many as it may have");
  }
  // The new stream goes to workers holding none of the partition's streams when there are
  // enough of them, so a large partition spreads over the cluster.
  std::set<std::string> holding;
  const bool replicated = !placement.replicas.empty();
  for (uint32_t held : streams) {
    if (held < placement.primaries.size()) {
      holding.insert(placement.workers[placement.primaries[held]]);
      if (replicated) holding.insert(placement.workers[placement.replicas[held]]);
    }
  }
  for (const ShuffleSplitPlacement& split : placement.splits) {
    if (split.partition != *partition) continue;
    holding.insert(placement.workers[split.primary]);
    if (replicated) holding.insert(placement.workers[split.replica]);
  }
  std::vector<ShuffleCandidate> fresh;
  for (const ShuffleCandidate& candidate : candidates) {
    if (!holding.contains(candidate.worker_id)) fresh.push_back(candidate);
  }
  const size_t copies = static_cast<size_t>(ReplicationOf(shuffle.shape.level));
  std::span<const ShuffleCandidate> among =
      fresh.size() >= copies ? std::span<const ShuffleCandidate>(fresh) : candidates;
  if (among.size() < copies) {
    return UnavailableError(Named(shuffle_id) + " needs " + std::to_string(copies) +
                            " live workers to split partition " + std::to_string(*partition));
  }
  const ShufflePlacement placed =
      Place({.id = shuffle_id, .maps = 1, .partitions = 1, .level = shuffle.shape.level}, among);
  auto index_of = [&](const std::string& worker) { return IndexOf(placement, worker); };
  ShuffleSplitPlacement split{.stream = static_cast<uint32_t>(next), .partition = *partition};
  split.primary = index_of(placed.workers[placed.primaries[0]]);
  ++load_[placement.workers[split.primary]];
  std::set<uint32_t> told{split.primary};
  if (replicated) {
    split.replica = index_of(placed.workers[placed.replicas[0]]);
    ++load_[placement.workers[split.replica]];
    told.insert(split.replica);
  }
  placement.splits.push_back(split);
  effects.recorded.push_back({shuffle.shape, placement, shuffle.owner});
  for (ShuffleCommand& command : AssignCommands(shuffle)) {
    const auto at =
        std::find(placement.workers.begin(), placement.workers.end(), command.worker_id);
    if (told.contains(static_cast<uint32_t>(at - placement.workers.begin()))) {
      effects.commands.push_back(std::move(command));
    }
  }
  return &shuffle;
}

void ShuffleService::WorkerRegistered(const std::string& worker_id, std::span<const uint64_t> held,
                                      ShuffleEffects& effects) const {
  std::set<uint64_t> assigned;
  for (const auto& [id, shuffle] : shuffles_) {
    const std::vector<std::string>& workers = shuffle.placement.workers;
    if (std::find(workers.begin(), workers.end(), worker_id) == workers.end()) continue;
    for (ShuffleCommand& command : AssignCommands(shuffle)) {
      if (command.worker_id != worker_id) continue;
      assigned.insert(id);
      effects.commands.push_back(std::move(command));
    }
  }
  // What it kept of shuffles since unregistered or expired, or whose partitions moved away
  // while it was gone (their maps ran again elsewhere), is dropped.
  for (uint64_t id : std::set<uint64_t>(held.begin(), held.end())) {
    if (assigned.count(id) != 0) continue;
    effects.commands.push_back(ShuffleCommand{
        .kind = ShuffleCommand::Kind::kRemove, .worker_id = worker_id, .shuffle_id = id});
  }
}

void ShuffleService::WorkerLost(const std::string& worker_id,
                                std::span<const ShuffleCandidate> candidates,
                                ShuffleEffects& effects) {
  std::vector<ShuffleCandidate> others;
  for (const ShuffleCandidate& candidate : candidates) {
    if (candidate.worker_id != worker_id) others.push_back(candidate);
  }
  if (others.empty()) return;  // nowhere to go: the placement stays until workers come back
  for (auto& [id, shuffle] : shuffles_) {
    ShufflePlacement& placement = shuffle.placement;
    auto lost = std::find(placement.workers.begin(), placement.workers.end(), worker_id);
    if (lost == placement.workers.end()) continue;
    const auto lost_index = static_cast<uint32_t>(lost - placement.workers.begin());
    AddLoad(placement, -1);
    std::set<uint32_t> gained;  // workers whose streams changed: told their assignment again
    auto index_of = [&](const std::string& worker) { return IndexOf(placement, worker); };
    std::unordered_map<std::string, uint64_t> added;  // partitions moved here so far
    auto load_of = [&](const std::string& worker) {
      auto known = load_.find(worker);
      return (known == load_.end() ? uint64_t{0} : known->second) + added[worker];
    };
    const bool replicated = !placement.replicas.empty();
    // Moves a stream's copy off the lost worker; for _2 the survivor becomes the primary.
    auto move = [&](uint32_t& primary, uint32_t* replica) {
      const bool primary_lost = primary == lost_index;
      const bool replica_lost = replica != nullptr && *replica == lost_index;
      if (!primary_lost && !replica_lost) return;
      // The survivor (for _2) is the one the new copy must not share a worker with.
      const std::string survivor =
          replica == nullptr ? std::string() : placement.workers[primary_lost ? *replica : primary];
      const ShuffleCandidate* best = nullptr;
      int best_distance = -1;
      for (const ShuffleCandidate& candidate : others) {
        if (candidate.worker_id == survivor) continue;
        int distance = 0;
        if (!survivor.empty()) {
          auto site = std::find_if(others.begin(), others.end(), [&](const ShuffleCandidate& c) {
            return c.worker_id == survivor;
          });
          distance = site == others.end() ? 2 : Distance(*site, candidate);
        }
        if (best == nullptr || distance > best_distance ||
            (distance == best_distance &&
             load_of(candidate.worker_id) < load_of(best->worker_id))) {
          best = &candidate;
          best_distance = distance;
        }
      }
      if (best == nullptr) return;  // no other worker than the survivor
      const uint32_t fresh = index_of(best->worker_id);
      ++added[best->worker_id];
      gained.insert(fresh);
      if (replica == nullptr) {
        primary = fresh;
      } else {
        primary = index_of(survivor);
        *replica = fresh;
        gained.insert(primary);  // it forwards to its new replica from now on
      }
    };
    for (uint32_t partition = 0; partition < placement.primaries.size(); ++partition) {
      move(placement.primaries[partition], replicated ? &placement.replicas[partition] : nullptr);
    }
    for (ShuffleSplitPlacement& split : placement.splits) {
      move(split.primary, replicated ? &split.replica : nullptr);
    }
    AddLoad(placement, +1);
    if (gained.empty()) continue;
    effects.recorded.push_back({shuffle.shape, placement, shuffle.owner});
    for (ShuffleCommand& command : AssignCommands(shuffle)) {
      const uint32_t index = index_of(command.worker_id);
      if (gained.contains(index)) effects.commands.push_back(std::move(command));
    }
  }
}

void ShuffleService::Restore(const JournaledShuffle& journaled) {
  Shuffle shuffle{.shape = journaled.shape,
                  .placement = journaled.placement,
                  .owner = journaled.owner,
                  .touched = clock_.Now()};
  AddLoad(shuffle.placement, +1);
  shuffles_.insert_or_assign(journaled.shape.id, std::move(shuffle));
}

void ShuffleService::RestoreCommit(const JournaledMapCommit& commit) {
  auto known = shuffles_.find(commit.shuffle_id);
  if (known == shuffles_.end()) return;  // written and deleted in the same batches
  for (const PiecesInPartition& pieces : commit.pieces) {
    known->second.committed_bytes += pieces.bytes;
  }
  known->second.commits.insert_or_assign(commit.map, commit);
}

}  // namespace bm
