#include "master/master_status.h"

#include <chrono>

namespace bm {

std::string_view MasterOpName(MasterOp op) {
  switch (op) {
    case MasterOp::kRegisterWorker:
      return "register_worker";
    case MasterOp::kHeartbeat:
      return "heartbeat";
    case MasterOp::kReportBlocks:
      return "report_blocks";
    case MasterOp::kGetLocations:
      return "get_locations";
    case MasterOp::kListWorkers:
      return "list_workers";
    case MasterOp::kListBlocks:
      return "list_blocks";
    case MasterOp::kListRdds:
      return "list_rdds";
    case MasterOp::kRemoveBlocks:
      return "remove_blocks";
    case MasterOp::kRemoveRdd:
      return "remove_rdd";
    case MasterOp::kRegisterRdd:
      return "register_rdd";
    case MasterOp::kAcquireCompute:
      return "acquire_compute";
    case MasterOp::kRenewCompute:
      return "renew_compute";
    case MasterOp::kReleaseCompute:
      return "release_compute";
    case MasterOp::kDecommission:
      return "decommission";
    case MasterOp::kPing:
      return "ping";
    case MasterOp::kOther:
      return "other";
  }
  return "other";
}

void MasterCounters::RecordRequest(MasterOp op, bool ok, Duration elapsed) {
  PerOp& counters = ops[static_cast<size_t>(op)];
  ++(ok ? counters.ok : counters.errors);
  counters.latency.Observe(elapsed);
}

void MasterCounters::RecordWorkerEvent(std::string worker_id, std::string what) {
  const int64_t unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  recent_events.push_back(WorkerEvent{unix_ms, std::move(worker_id), std::move(what)});
  while (recent_events.size() > kMaxEvents) recent_events.pop_front();
}

}  // namespace bm
