#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "blockmgr/block_id.h"
#include "common/core/clock.h"
#include "master/block_index.h"
#include "master/replication_planner.h"
#include "master/worker_registry.h"
#include "master/worker_request_ids.h"

namespace bm {

// Runs the ReplicationPlanner for the master's loop: gives each copy the planner asks for a
// request id, remembers the replicateBlock commands in flight until their source answers (or
// is dropped), and logs how many blocks are short of copies when that changes. The planner
// decides, the driver keeps the books, the loop sends (as for RemovalCoordinator). It also
// trims copies beyond their block's level.
//
// Not thread-safe: owned by the master's loop. The clock and the request ids are borrowed and
// must outlive it.
class ReplicationDriver {
 public:
  // A replicateBlock to send to command.source.
  struct Copy {
    uint64_t request_id = 0;
    ReplicationPlanner::CopyCommand command;
  };

  ReplicationDriver(const Clock& clock, WorkerRequestIds& request_ids, size_t max_in_flight,
                    Duration copy_timeout)
      : planner_(clock, max_in_flight, copy_timeout), request_ids_(request_ids) {}

  // Something changed that may leave blocks short of copies (a lost block, a drain started):
  // the next Plan() scans every block.
  void MarkAllForCheck() { planner_.MarkAllForCheck(); }

  // The copies to start now.
  std::vector<Copy> Plan(const BlockIndex& index, const WorkerRegistry& registry);

  // A worker's reply to `request_id`: true when it answered a copy command, whose slot is then
  // free (the copy itself lands through the targets' block reports).
  bool CopyAnswered(uint64_t request_id);

  // The worker was dropped with `locations` block copies: its blocks may now be short of
  // copies, and copies it was making will not be answered.
  void WorkerGone(const std::string& worker_id, size_t locations);

  // See ReplicationPlanner.
  std::vector<std::string> DrainedWorkers(const BlockIndex& index,
                                          const WorkerRegistry& registry) const {
    return planner_.DrainedWorkers(index, registry);
  }

  // Copies beyond their block's level (a worker came back after its blocks were copied
  // elsewhere): drops the extra copies of these blocks from the index, keeping memory copies
  // and copies on distinct racks and hosts first (ReplicationPlanner::ExtraCopies), and returns
  // them for the loop to journal and remove from their workers.
  std::vector<RetiredCopy> TrimExtraCopies(BlockIndex& index, const WorkerRegistry& registry,
                                           const std::vector<BlockId>& ids) const;
  size_t under_replicated() const { return planner_.under_replicated(); }
  size_t in_flight() const { return planner_.in_flight(); }

 private:
  struct InFlight {
    std::string source;
    BlockId block;
  };

  ReplicationPlanner planner_;
  WorkerRequestIds& request_ids_;
  std::unordered_map<uint64_t, InFlight> copies_;  // by request id
  size_t last_reported_short_ = 0;
};

}  // namespace bm
