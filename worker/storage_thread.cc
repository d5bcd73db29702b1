#include "worker/storage_thread.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <utility>

#include "common/status.h"

namespace bm {

namespace {

DiskTierStats Measure(const BlockStore& store) {
  return DiskTierStats{store.used(), store.capacity(), store.read_only(), store.corrupt_count()};
}

}  // namespace

StorageThread::StorageThread(std::unique_ptr<BlockStore> store)
    : store_(std::move(store)), wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  BM_CHECK(store_ != nullptr);
  BM_CHECK(wake_fd_ >= 0);
  stats_ = Measure(*store_);
  thread_ = std::thread([this] { Loop(); });
}

StorageThread::~StorageThread() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_one();
  thread_.join();
  // Completions may hold the loop's callbacks; they are dropped here, on the loop's thread.
  finished_.clear();
  close(wake_fd_);
}

void StorageThread::Submit(Job job) {
  ++outstanding_;
  {
    MutexLock lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  work_ready_.notify_one();
}

size_t StorageThread::RunCompletions() {
  uint64_t count;
  ssize_t got = read(wake_fd_, &count, sizeof(count));
  (void)got;  // EAGAIN: nothing signalled; the queue is checked anyway
  std::deque<Finished> finished;
  {
    MutexLock lock(mutex_);
    finished.swap(finished_);
  }
  for (Finished& done : finished) {
    --outstanding_;
    stats_ = done.stats;
    if (done.completion) done.completion();
  }
  return finished.size();
}

void StorageThread::Loop() {
  MutexLock lock(mutex_);
  while (true) {
    while (!stopping_ && jobs_.empty()) lock.Wait(work_ready_);
    if (jobs_.empty()) return;  // stopping, and every job has run
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.Unlock();
    Completion completion = job(*store_);
    job = nullptr;  // what it captured goes now, on this thread, not under the lock
    Finished done{std::move(completion), Measure(*store_)};
    lock.Lock();
    finished_.push_back(std::move(done));
    if (!stopping_) {
      const uint64_t one = 1;
      ssize_t written = write(wake_fd_, &one, sizeof(one));
      (void)written;
    }
  }
}

}  // namespace bm
