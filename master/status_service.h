#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "blockmgr/status.h"
#include "common/core/loop_queries.h"
#include "common/core/mutex.h"
#include "master/cluster_snapshot.h"
#include "master/master_status.h"

namespace bm {

// The bridge between HTTP threads and the master's event loop. HTTP threads read the latest
// ClusterSnapshot, or ask a bounded query (a page of blocks) that the loop answers in Serve()
// (LoopQueries). Nothing the HTTP side does can block the loop: it only ever takes a mutex for a
// queue push or a pointer copy.
//
// Snapshots are built on demand: only when someone asks and the last one is older than the
// refresh interval (250 ms, or ten times the last build's duration on a large index, so
// summarising takes at most about a tenth of the loop's time).
//
// Thread-safety: Snapshot() and Ask() from any thread; Serve() from the loop only.
class MasterStatusService final : public MasterStatusHook {
 public:
  static Result<std::unique_ptr<MasterStatusService>> Create();

  int wake_fd() const override { return queries_->wake_fd(); }
  void Serve(const MasterView& view) override { queries_->Serve(view); }

  // The latest snapshot, refreshed first if it is stale. Null when the loop has not answered.
  std::shared_ptr<const ClusterSnapshot> Snapshot();

  template <typename T>
  Result<T> Ask(std::function<T(const MasterView&)> query) {
    return queries_->template Ask<T>(std::move(query));
  }

 private:
  static constexpr std::chrono::milliseconds kMinRefresh{250};

  explicit MasterStatusService(std::unique_ptr<LoopQueries<MasterView>> queries)
      : queries_(std::move(queries)) {}

  const std::unique_ptr<LoopQueries<MasterView>> queries_;

  Mutex mutex_;
  std::shared_ptr<const ClusterSnapshot> snapshot_ BM_GUARDED_BY(mutex_);
  std::chrono::steady_clock::time_point snapshot_time_ BM_GUARDED_BY(mutex_);
  std::chrono::steady_clock::duration refresh_interval_ BM_GUARDED_BY(mutex_) = kMinRefresh;
  bool refreshing_ BM_GUARDED_BY(mutex_) = false;
};

}  // namespace bm
