#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/status.h"
#include "master/removal_coordinator.h"
#include "master/replication_planner.h"
#include "master/worker_links.h"

namespace bm {

// The commands the master sends to workers (schema/PROTOCOL.md, "Master to worker"), encoded
// and handed to a WorkerSender. Each returns what the sender returned: kNotFound when the
// master has no link to the worker, another error when the send failed.

// removeBlocks: the command's blocks, with their versions when it names them.
Status SendRemoveBlocks(WorkerSender& sender, const RemovalCoordinator::Command& command);

// replicateBlock to the copy's source; `target_keys` holds the CURVE key of each target, in
// order (empty strings with keys off).
Status SendReplicateBlock(WorkerSender& sender, uint64_t request_id,
                          const ReplicationPlanner::CopyCommand& command,
                          const std::vector<std::string>& target_keys);

// verifyBlock of a copy reported with a digest other than its version's (reportedBad).
Status SendVerifyBlock(WorkerSender& sender, std::string_view worker_id, uint64_t request_id,
                       const BlockId& block);

// decommission: the worker takes no new blocks while its blocks are copied elsewhere.
Status SendDecommission(WorkerSender& sender, std::string_view worker_id);

// shutdown: a drained worker exits.
Status SendShutdown(WorkerSender& sender, std::string_view worker_id);

}  // namespace bm
