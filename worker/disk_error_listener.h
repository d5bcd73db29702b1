#pragma once

#include <rocksdb/listener.h>
#include <rocksdb/status.h>

#include <atomic>
#include <string>

#include "common/mutex.h"

namespace bm::disk {

// Records RocksDB's background errors (a failed flush or compaction, or a failed write), which
// RocksDB reports on its own threads: the store's loop reads the flag before every write.
class ErrorListener final : public rocksdb::EventListener {
 public:
  void OnBackgroundError(rocksdb::BackgroundErrorReason /*reason*/,
                         rocksdb::Status* error) override {
    MutexLock lock(mutex_);
    if (message_.empty()) message_ = error->ToString();
    failed_.store(true, std::memory_order_release);
  }
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  std::string message() const {
    MutexLock lock(mutex_);
    return message_;
  }

 private:
  std::atomic<bool> failed_{false};
  mutable Mutex mutex_;
  std::string message_ BM_GUARDED_BY(mutex_);
};

}  // namespace bm::disk
