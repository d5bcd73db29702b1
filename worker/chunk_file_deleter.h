#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <string>
#include <thread>

#include "common/mutex.h"

namespace rocksdb {
class FileSystem;
}  // namespace rocksdb

namespace bm::disk {

// Deletes the chunk files of removed and replaced block versions on a thread of its own, so the
// storage thread does not wait for them: freeing a large file's extents takes the file system
// a while (26 ms for 64 MiB here, where ext4 discards them synchronously), and a removal of an
// RDD of many large blocks held every get and put of the disk behind it (RocksDB deletes its
// obsolete files off the write path too, through its DeleteScheduler). A file is queued only
// once its meta is gone, so nothing reads it any more; one not deleted before a crash is swept
// by the next open as a file no block owns.
//
// Delete() and Drain() may be called from any thread; the destructor deletes what is queued,
// then joins.
class ChunkFileDeleter {
 public:
  // `fs` is borrowed and must outlive this.
  explicit ChunkFileDeleter(rocksdb::FileSystem* fs);
  ~ChunkFileDeleter();
  ChunkFileDeleter(const ChunkFileDeleter&) = delete;
  ChunkFileDeleter& operator=(const ChunkFileDeleter&) = delete;

  // Queues `path`, a file of `bytes` bytes, for deletion (a missing file is no error).
  void Delete(std::string path, uint64_t bytes);
  // Returns once every file queued before the call is deleted (or failed to be, which is
  // logged).
  void Drain();
  // The bytes of the files queued and not yet deleted: room the file system gives back soon.
  uint64_t pending_bytes() const { return pending_bytes_.load(std::memory_order_relaxed); }

 private:
  void Loop();

  rocksdb::FileSystem* const fs_;
  Mutex mutex_;
  std::condition_variable queued_;   // with mutex_: a path was queued, or stopping_ set
  std::condition_variable drained_;  // with mutex_: the queue emptied and no deletion runs
  struct Doomed {
    std::string path;
    uint64_t bytes;
  };
  std::deque<Doomed> queue_ BM_GUARDED_BY(mutex_);
  std::atomic<uint64_t> pending_bytes_{0};
  bool deleting_ BM_GUARDED_BY(mutex_) = false;
  bool stopping_ BM_GUARDED_BY(mutex_) = false;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace bm::disk
