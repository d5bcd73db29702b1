#include "worker/job_thread.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include "blockmgr/status.h"

namespace bm {

JobThread::JobThread(int notify_fd)
    : wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)), notify_fd_(notify_fd) {
  BM_CHECK(wake_fd_ >= 0);
  thread_ = std::thread([this] { Loop(); });
}

JobThread::~JobThread() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_one();
  thread_.join();
  finished_.clear();  // completions hold the loop's callbacks: dropped on the loop's thread
  close(wake_fd_);
}

void JobThread::Submit(Job job) {
  {
    MutexLock lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  work_ready_.notify_one();
}

size_t JobThread::RunCompletions() {
  uint64_t count;
  ssize_t got = read(wake_fd_, &count, sizeof(count));
  (void)got;  // EAGAIN: nothing signalled; the queue is checked anyway
  std::deque<Completion> finished;
  {
    MutexLock lock(mutex_);
    finished.swap(finished_);
  }
  for (Completion& done : finished) {
    if (done) done();
  }
  return finished.size();
}

void JobThread::Loop() {
  MutexLock lock(mutex_);
  while (true) {
    while (!stopping_ && jobs_.empty()) lock.Wait(work_ready_);
    if (jobs_.empty()) return;
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.Unlock();
    Completion completion = job();
    job = nullptr;  // what it captured goes now, on this thread, not under the lock
    lock.Lock();
    finished_.push_back(std::move(completion));
    if (!stopping_) {
      const uint64_t one = 1;
      ssize_t written = write(wake_fd_, &one, sizeof(one));
      (void)written;
      if (notify_fd_ >= 0) {
        written = write(notify_fd_, &one, sizeof(one));
        (void)written;
      }
    }
  }
}

}  // namespace bm
