#include "worker/chunk_file_deleter.h"

#include <rocksdb/file_system.h>
#include <spdlog/spdlog.h>

namespace bm::disk {

ChunkFileDeleter::ChunkFileDeleter(rocksdb::FileSystem* fs) : fs_(fs) {
  thread_ = std::thread([this] { Loop(); });
}

ChunkFileDeleter::~ChunkFileDeleter() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  queued_.notify_one();
  thread_.join();
}

void ChunkFileDeleter::Delete(std::string path, uint64_t bytes) {
  pending_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  {
    MutexLock lock(mutex_);
    queue_.push_back(Doomed{std::move(path), bytes});
  }
  queued_.notify_one();
}

void ChunkFileDeleter::Drain() {
  MutexLock lock(mutex_);
  while (!queue_.empty() || deleting_) lock.Wait(drained_);
}

void ChunkFileDeleter::Loop() {
  MutexLock lock(mutex_);
  while (true) {
    while (!stopping_ && queue_.empty()) lock.Wait(queued_);
    // Stopping deletes what is queued first: a file left behind would wait for the next open.
    if (queue_.empty()) return;
    const Doomed doomed = std::move(queue_.front());
    queue_.pop_front();
    deleting_ = true;
    lock.Unlock();
    rocksdb::IOStatus s = fs_->DeleteFile(doomed.path, rocksdb::IOOptions(), nullptr);
    if (!s.ok() && !s.IsPathNotFound() && !s.IsNotFound()) {
      spdlog::warn("could not delete chunk file {} (the next open deletes it): {}", doomed.path,
                   s.ToString());
    }
    pending_bytes_.fetch_sub(doomed.bytes, std::memory_order_relaxed);
    lock.Lock();
    deleting_ = false;
    if (queue_.empty()) drained_.notify_all();
  }
}

}  // namespace bm::disk
