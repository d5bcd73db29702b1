#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "blockmgr/block_id.h"
#include "common/core/mutex.h"

namespace bm {

class MasterClient;

// Keeps a compute lease alive while the caller's compute function runs: a background thread
// sends renewCompute to the master every `interval` through its own MasterClient (the caller's
// Client is busy computing and is not thread-safe), which follows the leader through a
// failover like any master call. When the master answers that the lease is no longer held,
// renewing stops and lost() turns true; when no master answers, it keeps trying.
//
// Stops (and joins its thread) on destruction or Stop(): give `master` a leader wait no longer
// than `interval`, so stopping never waits long for a call in progress.
class LeaseRenewer {
 public:
  LeaseRenewer(std::unique_ptr<MasterClient> master, BlockId block, uint64_t token,
               std::chrono::milliseconds interval);
  ~LeaseRenewer();
  LeaseRenewer(const LeaseRenewer&) = delete;
  LeaseRenewer& operator=(const LeaseRenewer&) = delete;

  void Stop();
  // True once the master said the lease is no longer held by this token.
  bool lost() const { return lost_.load(); }

 private:
  void Run();

  const BlockId block_;
  const uint64_t token_;
  const std::chrono::milliseconds interval_;
  const std::unique_ptr<MasterClient> master_;  // used by the thread only
  std::atomic<bool> lost_{false};
  Mutex mutex_;
  std::condition_variable wake_;  // with mutex_
  bool stop_ BM_GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

}  // namespace bm
