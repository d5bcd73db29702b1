#include "worker/storage_thread.h"

#include <utility>

#include "common/status.h"

namespace bm {

namespace {

DiskTierStats Measure(const BlockStore& store) {
  return DiskTierStats{store.used(), store.capacity(), store.read_only(), store.corrupt_count()};
}

}  // namespace

StorageThread::StorageThread(std::unique_ptr<BlockStore> store)
    : store_(std::move(store)), thread_(std::make_unique<JobThread>()) {
  BM_CHECK(store_ != nullptr);
  stats_ = Measure(*store_);
}

void StorageThread::Submit(Job job) {
  ++outstanding_;
  thread_->Submit([this, job = std::move(job)]() mutable -> JobThread::Completion {
    Completion completion = job(*store_);
    job = nullptr;  // what it captured goes now, on the storage thread
    return [this, completion = std::move(completion), stats = Measure(*store_)] {
      --outstanding_;
      stats_ = stats;
      if (completion) completion();
    };
  });
}

}  // namespace bm
