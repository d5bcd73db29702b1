#include "master/status_service.h"

#include <algorithm>

namespace bm {

Result<std::unique_ptr<MasterStatusService>> MasterStatusService::Create() {
  BM_ASSIGN_OR_RETURN(std::unique_ptr<LoopQueries<MasterView>> queries,
                      LoopQueries<MasterView>::Create());
  return std::unique_ptr<MasterStatusService>(new MasterStatusService(std::move(queries)));
}

std::shared_ptr<const ClusterSnapshot> MasterStatusService::Snapshot() {
  const auto now = std::chrono::steady_clock::now();
  {
    MutexLock lock(mutex_);
    const bool fresh = snapshot_ && now - snapshot_time_ < refresh_interval_;
    // Another thread is refreshing: its result is at most one interval newer than ours.
    if (fresh || (refreshing_ && snapshot_)) return snapshot_;
    refreshing_ = true;
  }
  struct Built {
    std::shared_ptr<const ClusterSnapshot> snapshot;
    std::chrono::steady_clock::duration took;
  };
  Result<Built> built = Ask<Built>([](const MasterView& view) {
    const auto start = std::chrono::steady_clock::now();
    auto snapshot = std::make_shared<const ClusterSnapshot>(BuildClusterSnapshot(view));
    return Built{std::move(snapshot), std::chrono::steady_clock::now() - start};
  });
  MutexLock lock(mutex_);
  refreshing_ = false;
  if (built.ok()) {
    snapshot_ = std::move(built->snapshot);
    snapshot_time_ = std::chrono::steady_clock::now();
    refresh_interval_ =
        std::max<std::chrono::steady_clock::duration>(kMinRefresh, built->took * 10);
  }
  return snapshot_;
}

}  // namespace bm
