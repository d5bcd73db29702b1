#include "worker/wire.h"

#include "common/protocol.h"

namespace bm {

void FillBlockStatus(const BlockStatus& status, proto::BlockStatus::Builder out) {
  out.setBlockId(status.id.ToString());
  out.setTier(ToProto(status.tier));
  out.setSize(status.size);
  out.setLevel(ToProto(status.level));
}

void FillWorkerStats(const StoreStats& stats, proto::WorkerStats::Builder out) {
  out.setMemoryCapacity(stats.memory_capacity);
  out.setMemoryUsed(stats.memory_used);
  out.setDiskUsed(stats.disk_used);
  out.setDiskCapacity(stats.disk_limit);
  out.setBlockCount(stats.block_count);
}

}  // namespace bm
