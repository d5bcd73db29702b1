#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <thread>

#include "common/mutex.h"

namespace bm {

// Copies memory blocks into shared regions for same-host readers (BlockManager::ShareWhole) on
// a thread of its own: a 1 GiB block takes the better part of a second to copy and check,
// which neither the loop nor the storage thread (whose spills a put may be waiting on, and
// behind which a copy would wait seconds) should pay.
//
// As StorageThread without a store: the loop submits jobs, each returns a completion that runs
// back on the loop in RunCompletions() once wake_fd() is readable. Jobs run one at a time, so
// at most one block is held twice while it is copied. A job may touch only what it captured
// by value or shared ownership (the chunks of a block are immutable and shared).
class RegionCopier {
 public:
  using Completion = std::function<void()>;
  using Job = std::function<Completion()>;

  RegionCopier();
  // Runs the jobs still queued (their completions are dropped), then joins.
  ~RegionCopier();
  RegionCopier(const RegionCopier&) = delete;
  RegionCopier& operator=(const RegionCopier&) = delete;

  void Submit(Job job);
  size_t RunCompletions();
  int wake_fd() const { return wake_fd_; }

 private:
  void Loop();

  const int wake_fd_;
  Mutex mutex_;
  std::condition_variable work_ready_;  // with mutex_
  std::deque<Job> jobs_ BM_GUARDED_BY(mutex_);
  std::deque<Completion> finished_ BM_GUARDED_BY(mutex_);
  bool stopping_ BM_GUARDED_BY(mutex_) = false;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace bm
