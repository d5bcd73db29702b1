#include "worker/storage_thread.h"

#include <utility>

#include "blockmgr/status.h"

namespace bm {

namespace {

DiskTierStats Measure(const BlockStore& store) {
  return DiskTierStats{store.used(), store.capacity(), store.read_only(), store.corrupt_count()};
}

}  // namespace

StorageThread::StorageThread(std::unique_ptr<BlockStore> store, int notify_fd)
    : store_(std::move(store)), thread_(std::make_unique<JobThread>(notify_fd)) {
  BM_CHECK(store_ != nullptr);
  stats_ = Measure(*store_);
}

void StorageThread::Submit(Job job) {
  ++outstanding_;
  thread_->Submit([this, job = std::move(job)]() mutable -> JobThread::Completion {
    BM_CHECK(store_ != nullptr);  // nothing is submitted after Close()
    busy_since_.store(std::chrono::steady_clock::now().time_since_epoch().count());
    Completion completion = job(*store_);
    job = nullptr;  // what it captured goes now, on the storage thread
    busy_since_.store(0);
    return [this, completion = std::move(completion), stats = Measure(*store_)] {
      --outstanding_;
      stats_ = stats;
      if (completion) completion();
    };
  });
}

}  // namespace bm

namespace bm {

std::optional<std::chrono::steady_clock::time_point> StorageThread::busy_since() const {
  const int64_t ticks = busy_since_.load();
  if (ticks == 0) return std::nullopt;
  return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(ticks));
}

void StorageThread::Close() {
  ++outstanding_;
  thread_->Submit([this]() -> JobThread::Completion {
    store_.reset();
    return [this] { --outstanding_; };
  });
}

}  // namespace bm
