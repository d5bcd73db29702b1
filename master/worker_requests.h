#pragma once

// What workers send the master (PROTOCOL.md, "Workers"), read into the loop's terms so the loop
// only routes it: a registration, and a reply to one of the master's commands. Every field is
// read and checked before the loop changes any state.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "blockmgr/status.h"
#include "common/core/clock.h"
#include "common/core/protocol.h"
#include "common/net/transport.h"
#include "master/block_index.h"
#include "master/loss_tracker.h"
#include "master/worker_registry.h"

namespace bm {

// A registerWorker request, checked.
struct WorkerRegistration {
  std::string id;
  std::string address;  // tcp:// or ipc://
  WorkerLabels labels;
  WorkerStats stats;
  std::vector<BlockChange> blocks;  // everything it holds; `fresh` marks its unreported puts
  std::vector<WorkerLoss> losses;
  bool started_now = false;        // its first registration since its process started
  uint64_t follow_ups = 0;         // blocks of its full report still to come in reports
  std::vector<uint64_t> shuffles;  // the shuffles it holds partitions of
};
Result<WorkerRegistration> DecodeRegistration(proto::RegisterWorker::Reader request);

// The registered reply: how often the worker heartbeats (a quarter of the master's timeout,
// not below a floor) and the leader's epoch.
void EncodeRegistered(Duration heartbeat_timeout, uint64_t epoch,
                      proto::RegisterReply::Builder out);

// A worker's reply to a command (removeBlocks, replicateBlock, verifyBlock; decommission and
// datasetAccess are sent without an id).
struct WorkerReply {
  uint64_t id = 0;       // the command's request id
  bool removed = false;  // a removeBlocks' answer
  // A verifyBlock's answer, as a sentence for the log.
  std::optional<std::string> verified;
  // The command failed (an error reply), or the reply was none of the above.
  Status failure;

  // Nothing waits for it: a command sent without an id, answered ok.
  bool unawaited() const { return id == 0 && failure.ok() && !removed && !verified; }
};
// kInvalidArgument (or another read error) when the message cannot be read as a reply.
Result<WorkerReply> DecodeWorkerReply(IncomingMessage& message);

}  // namespace bm
