#pragma once

// A mutex that Clang's thread-safety analysis understands (-Wthread-safety; see
// tests/tools/thread_safety_check.py). libstdc++'s std::mutex carries no capability
// attributes, so state guarded by one cannot be checked; state guarded by a bm::Mutex can:
//
//   mutable Mutex mutex_;
//   std::deque<Job> jobs_ BM_GUARDED_BY(mutex_);
//
//   void Submit(Job job) {
//     MutexLock lock(mutex_);
//     jobs_.push_back(std::move(job));
//   }
//
// Waiting on a condition: loop on the condition in the locked scope, so the analysis sees every
// read of guarded state under the lock (a predicate lambda would hide it):
//
//   MutexLock lock(mutex_);
//   while (jobs_.empty() && !stop_) lock.Wait(wake_);

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "common/core/thread_annotations.h"

namespace bm {

class BM_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() BM_ACQUIRE() { mutex_.lock(); }
  void unlock() BM_RELEASE() { mutex_.unlock(); }

 private:
  friend class MutexLock;
  std::mutex mutex_;
};

// Holds a Mutex for its scope, and waits on condition variables with it.
class BM_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mutex) BM_ACQUIRE(mutex) : lock_(mutex.mutex_) {}
  ~MutexLock() BM_RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Releases the mutex while blocked on `cv`; holds it again on return (which may be spurious).
  void Wait(std::condition_variable& cv) { cv.wait(lock_); }
  // As Wait, returning by `deadline` at the latest; false when it returned because of it.
  bool WaitUntil(std::condition_variable& cv, std::chrono::steady_clock::time_point deadline) {
    return cv.wait_until(lock_, deadline) == std::cv_status::no_timeout;
  }
  // Lets go of the mutex for a stretch of the scope (work that must not hold it) ...
  void Unlock() BM_RELEASE() { lock_.unlock(); }
  // ... and takes it again.
  void Lock() BM_ACQUIRE() { lock_.lock(); }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace bm
