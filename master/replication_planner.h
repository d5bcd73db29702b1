#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/storage_level.h"
#include "common/core/clock.h"
#include "master/block_index.h"
#include "master/worker_registry.h"

namespace bm {

// Keeps every block at the number of copies its storage level promises (two for the _2
// levels, one otherwise), without a client asking: after a worker is dropped, its blocks that
// still have a copy are copied to other workers; while a worker is decommissioning, its copies
// do not count, so each of its blocks is copied elsewhere first.
//
// The planner decides what to copy, from where and to where; the master's loop sends the
// commands (replicateBlock to the source worker) and reports their answers. A block has at
// most one copy command in flight; a command not answered within `copy_timeout`, or whose
// source worker is gone, is forgotten and the block is planned again. Copies land through the
// targets' ordinary block reports.
//
// While a worker is decommissioning every Plan() scans every block (as DrainedWorkers() does),
// so blocks that reach it after the drain started are copied too.
//
// Not thread-safe: owned by the master's loop.
class ReplicationPlanner {
 public:
  struct CopyCommand {
    BlockId block;
    StorageLevel level;
    std::string source;                 // a worker holding the block
    std::vector<WorkerRecord> targets;  // where the copies go
  };

  ReplicationPlanner(const Clock& clock, size_t max_in_flight, Duration copy_timeout)
      : clock_(clock), max_in_flight_(max_in_flight), copy_timeout_(copy_timeout) {}

  // Something changed that may leave blocks short of copies (a worker was dropped, a drain
  // started): the next Plan() scans every block.
  void MarkAllForCheck() { scan_needed_ = true; }

  // Copy commands to send now (at most max_in_flight in flight overall).
  std::vector<CopyCommand> Plan(const BlockIndex& index, const WorkerRegistry& registry);
  // A copy command was answered (either way); the block is checked again by the next Plan().
  void CopyFinished(const BlockId& block);

  // Decommissioning workers none of whose blocks still needs their copy: they can go.
  std::vector<std::string> DrainedWorkers(const BlockIndex& index,
                                          const WorkerRegistry& registry) const;

  // The copies of a block beyond its level, to remove: a worker that was away came back after
  // its blocks were copied elsewhere. Copies on decommissioning or unconfirmed workers neither
  // count nor go. Keeps memory copies first, then copies on distinct racks and hosts (as
  // SpreadReplicas places them); empty while a copy of the block is in flight.
  std::vector<IndexedLocation> ExtraCopies(const BlockInfo& info,
                                           const WorkerRegistry& registry) const;

  // Blocks known to be short of copies (as of the last Plan()), and copies in flight.
  size_t under_replicated() const { return short_.size(); }
  size_t in_flight() const { return copying_.size(); }

 private:
  // Copies the block lacks: the level's count minus its copies on workers that stay.
  static int Missing(const BlockInfo& info, const WorkerRegistry& registry);

  const Clock& clock_;
  const size_t max_in_flight_;
  const Duration copy_timeout_;
  bool scan_needed_ = false;
  std::set<BlockId> short_;  // blocks lacking copies
  struct InFlight {
    TimePoint deadline;
    std::string source;
  };
  std::unordered_map<BlockId, InFlight> copying_;  // copy commands sent, by block
};

}  // namespace bm
