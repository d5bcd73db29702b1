#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "blockmgr/status.h"
#include "blockmgr/storage_level.h"
#include "common/core/clock.h"

namespace bm {

// A shuffle's shape as registerShuffle gives it.
struct ShuffleShape {
  uint64_t id = 0;
  uint32_t maps = 0;
  uint32_t partitions = 0;
  StorageLevel level = StorageLevel::kMemoryAndDisk;
  bool operator==(const ShuffleShape&) const = default;
};

// How many pieces (and bytes) one map attempt pushed into one partition.
struct PiecesInPartition {
  uint32_t partition = 0;
  uint32_t pieces = 0;
  uint64_t bytes = 0;
  bool operator==(const PiecesInPartition&) const = default;
};

// A partition continued past its split size in another stream (PROTOCOL.md, "Shuffles"):
// stream `stream` on workers[primary] (and workers[replica] for _2 levels).
struct ShuffleSplitPlacement {
  uint32_t stream = 0;
  uint32_t partition = 0;
  uint32_t primary = 0;
  uint32_t replica = 0;
  bool operator==(const ShuffleSplitPlacement&) const = default;
};

// Where a shuffle's partitions live: partition p on workers[primaries[p]], and for _2 levels a
// second copy on workers[replicas[p]] (empty for one copy); a split partition continues in
// the streams of `splits` with its id, in order.
struct ShufflePlacement {
  std::vector<std::string> workers;
  std::vector<uint32_t> primaries;
  std::vector<uint32_t> replicas;
  std::vector<ShuffleSplitPlacement> splits{};
  bool operator==(const ShufflePlacement&) const = default;

  // The streams of `partition` in order: the partition's own id, then its splits'.
  std::vector<uint32_t> StreamsOf(uint32_t partition) const;
  // The partition `stream` belongs to; nullopt for a stream the shuffle does not have.
  std::optional<uint32_t> PartitionOf(uint32_t stream) const;
};

// A shuffle as the master journals it (key "s" + id), and a map's committed attempt (key "s" +
// id + map).
struct JournaledShuffle {
  ShuffleShape shape;
  ShufflePlacement placement;
  std::string owner;
  bool operator==(const JournaledShuffle&) const = default;
};
struct JournaledMapCommit {
  uint64_t shuffle_id = 0;
  uint32_t map = 0;
  uint32_t attempt = 0;
  std::vector<PiecesInPartition> pieces{};  // by partition, partitions without pieces left out
  bool operator==(const JournaledMapCommit&) const = default;
};

// A worker the service may place partitions on.
struct ShuffleCandidate {
  std::string worker_id;
  std::string host;
  std::string rack;
  uint64_t free_bytes = 0;  // memory and disk the worker has free
};

// What the master must tell a worker: the partitions of a shuffle it holds, or that a shuffle
// is gone.
struct ShuffleCommand {
  enum class Kind { kAssign, kRemove };
  Kind kind = Kind::kAssign;
  std::string worker_id;
  uint64_t shuffle_id = 0;
  uint32_t maps = 0;                                  // kAssign
  std::vector<uint32_t> partitions{};                 // kAssign: the worker's, primary or replica
  std::string owner{};                                // kAssign
  StorageLevel level = StorageLevel::kMemoryAndDisk;  // kAssign
  // kAssign, _2 levels: the streams the worker is the primary of, with their replica's
  // worker id: it forwards each push there (ShuffleAssigned.forwards).
  std::vector<std::pair<uint32_t, std::string>> forwards{};
};

// What an event came to, for the master's loop to carry out: journal records (written before
// the answer goes, so a standby that takes over has them) and worker commands.
struct ShuffleEffects {
  std::vector<JournaledShuffle> recorded;
  std::vector<JournaledMapCommit> committed;
  std::vector<std::pair<uint64_t, uint32_t>> uncommitted;  // (shuffle, map)
  std::vector<uint64_t> forgotten;
  std::vector<ShuffleCommand> commands;
};

// The shuffles the cluster runs (PROTOCOL.md, "Shuffles"): their shapes, where each reduce
// partition lives (Celeborn's slots: spread over the workers by load and free space, a _2
// level's replica on another host, then rack, when there is one), and which attempt of each map
// committed. The first attempt of a map to commit is its output; pieces of any other attempt
// are never handed to a reader, because readers ask workers for committed attempts only.
//
// A component of the master's loop: it owns its state and answers each event with its effects
// (ShuffleEffects) and its reply data, and touches no socket or journal itself, so it is tested
// without either. Not thread-safe: owned by the loop's thread.
class ShuffleService {
 public:
  struct Limits {
    uint32_t max_maps = 1u << 20;
    uint32_t max_partitions = 1u << 16;
    size_t max_shuffles = 10000;
    // Splits of one shuffle's partitions, over all of them.
    size_t max_splits = 1u << 16;
    // A shuffle nobody registered, read or committed to for this long is removed.
    Duration ttl = std::chrono::hours(24);
  };

  struct Shuffle {
    ShuffleShape shape;
    ShufflePlacement placement;
    std::string owner;
    std::map<uint32_t, JournaledMapCommit> commits{};  // by map
    uint64_t committed_bytes = 0;
    TimePoint touched{};
  };

  ShuffleService(const Clock& clock, Limits limits) : clock_(clock), limits_(limits) {}

  // Registers the shuffle, placing its partitions on `candidates` (any order), or returns the
  // one registered under its id when the shape is the same (a retried or second registration);
  // kInvalidArgument for another shape under the id or a shape over the limits, kUnavailable
  // when there are fewer workers than copies, kOutOfSpace at max_shuffles.
  Result<const Shuffle*> Register(const ShuffleShape& shape, const std::string& owner,
                                  std::span<const ShuffleCandidate> candidates,
                                  ShuffleEffects& effects);
  // The shuffle, marked as used now; kNotFound naming it when it is not registered.
  Result<const Shuffle*> Find(uint64_t shuffle_id);
  // Records the map attempt as the map's output. The same attempt again is Ok (a retried
  // commit); another attempt of a committed map is kAborted naming the one that won.
  Status Commit(JournaledMapCommit commit, ShuffleEffects& effects);
  // A reader found the pieces of these committed maps gone from `partition` on every copy:
  // their commits are dropped, so the maps run again as new attempts. Maps that are not
  // committed, or wrote nothing into the partition, are left as they are (a stale or hostile
  // report cannot drop a commit the partition does not depend on). Returns the maps dropped.
  Result<std::vector<uint32_t>> ForgetLostMaps(uint64_t shuffle_id, uint32_t partition,
                                               std::span<const uint32_t> maps,
                                               ShuffleEffects& effects);
  // Forgets the shuffle and tells its workers to drop its data. False when it was not
  // registered (nothing to do).
  bool Unregister(uint64_t shuffle_id, ShuffleEffects& effects);
  // Unregisters the shuffles idle past the TTL; returns their ids.
  std::vector<uint64_t> Expire(ShuffleEffects& effects);
  std::optional<TimePoint> NextExpiry() const;
  // Pushes to `stream` were refused as past the split size: its partition continues in a new
  // stream placed as a partition is (another worker than the partition's streams so far when
  // there is one), journaled, and its workers told. A stream that is not its partition's last
  // (another writer split it first) changes nothing. kInvalidArgument for a stream the shuffle
  // does not have or past max_splits; kUnavailable without a worker to take it.
  Result<const Shuffle*> Split(uint64_t shuffle_id, uint32_t stream,
                               std::span<const ShuffleCandidate> candidates,
                               ShuffleEffects& effects);
  // A worker registered (again), holding data of the shuffles `held` (kept on its disks across
  // a restart): it is told the partitions it holds now, and to remove the shuffles in `held` it
  // holds none of (unregistered meanwhile, or its partitions moved away while it was gone).
  void WorkerRegistered(const std::string& worker_id, std::span<const uint64_t> held,
                        ShuffleEffects& effects) const;

  // A worker was dropped: the partitions it held move to `candidates` (the live workers; for
  // a _2 level the surviving copy becomes the primary and the new worker its replica), the
  // new placement is journaled and the new holders told, so new attempts have somewhere to
  // push. What the worker held is gone: readers of a partition it alone held report the loss,
  // and those maps run again.
  void WorkerLost(const std::string& worker_id, std::span<const ShuffleCandidate> candidates,
                  ShuffleEffects& effects);

  // Loads the journal's records (before the loop runs).
  void Restore(const JournaledShuffle& shuffle);
  void RestoreCommit(const JournaledMapCommit& commit);

  const std::map<uint64_t, Shuffle>& shuffles() const { return shuffles_; }
  size_t size() const { return shuffles_.size(); }

 private:
  ShufflePlacement Place(const ShuffleShape& shape, std::span<const ShuffleCandidate> candidates);
  // The partitions each worker of `shuffle` holds, as commands.
  std::vector<ShuffleCommand> AssignCommands(const Shuffle& shuffle) const;
  void AddLoad(const ShufflePlacement& placement, int64_t sign);

  const Clock& clock_;
  const Limits limits_;
  std::map<uint64_t, Shuffle> shuffles_;
  // Partition copies per worker over the registered shuffles: where the next ones go.
  std::unordered_map<std::string, uint64_t> load_;
};

}  // namespace bm
