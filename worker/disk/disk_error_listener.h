#pragma once

#include <rocksdb/listener.h>
#include <rocksdb/status.h>

#include <atomic>
#include <string>

#include "common/core/mutex.h"

namespace bm::disk {

// Records RocksDB's background errors (a failed flush or compaction, or a failed write), which
// RocksDB reports on its own threads: the store's loop reads the flag before every write; and
// keeps RocksDB from recovering from them by itself.
class ErrorListener final : public rocksdb::EventListener {
 public:
  void OnBackgroundError(rocksdb::BackgroundErrorReason /*reason*/,
                         rocksdb::Status* error) override {
    MutexLock lock(mutex_);
    if (message_.empty()) message_ = error->ToString();
    failed_.store(true, std::memory_order_release);
  }
  // Recovery is the store's (a reopen in Maintain(), once the directory is known to be still
  // the one opened), never RocksDB's own. On a full disk RocksDB's SstFileManager would resume
  // writing into the database that reported the error by itself as soon as space shows up,
  // into whatever took the directory's place if the disk was unmounted (seen: a new log in a
  // replaced directory), and Debian's RocksDB asserts on writes after an error.
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason /*reason*/, rocksdb::Status bg_error,
                            bool* auto_recovery) override {
    bg_error.PermitUncheckedError();
    *auto_recovery = false;
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
