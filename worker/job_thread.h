#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <thread>

#include "common/core/mutex.h"

namespace bm {

// A thread that runs the loop's jobs one at a time, in the order submitted, and hands each job's
// completion back to the loop: the loop submits a job, the job runs here and returns a
// completion, which runs on the loop in RunCompletions() once wake_fd() is readable, in the
// same order. The StorageThread (disk work) and the BlockManager's copies of blocks into shared
// regions each run on one. A job may touch only what it captured by value or shared
// ownership; a completion may touch the loop's state. Submit(), RunCompletions() and wake_fd()
// are for the one loop thread.
class JobThread {
 public:
  using Completion = std::function<void()>;
  using Job = std::function<Completion()>;

  // `notify_fd`: an eventfd the thread also signals with each finished job (-1: none), so one
  // owner of several threads can poll one fd; borrowed, it must outlive the thread.
  explicit JobThread(int notify_fd = -1);
  // Runs the jobs still queued (their completions are dropped, on this thread), then joins.
  ~JobThread();
  JobThread(const JobThread&) = delete;
  JobThread& operator=(const JobThread&) = delete;

  void Submit(Job job);
  // Runs the completions of the jobs finished so far, in order; returns how many ran.
  size_t RunCompletions();
  // Readable (eventfd) while completions wait to run.
  int wake_fd() const { return wake_fd_; }

 private:
  void Loop();

  const int wake_fd_;
  const int notify_fd_;
  Mutex mutex_;
  std::condition_variable work_ready_;  // with mutex_
  std::deque<Job> jobs_ BM_GUARDED_BY(mutex_);
  std::deque<Completion> finished_ BM_GUARDED_BY(mutex_);
  bool stopping_ BM_GUARDED_BY(mutex_) = false;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace bm
