#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "common/core/mutex.h"

namespace rocksdb {
class FileSystem;
}  // namespace rocksdb

namespace bm::disk {

// Deletes the chunk files of removed and replaced block versions on a thread of its own, so the
// storage thread does not wait for them: freeing a large file's extents takes the file system
// a while (tens of ms for 64 MiB where ext4 discards them synchronously), and a removal of an
// RDD of many large blocks held every get and put of the disk behind it (RocksDB deletes its
// obsolete files off the write path too, through its DeleteScheduler). A file is queued only
// once its meta is gone, so nothing reads it any more; one not deleted before a crash is swept
// by the next open as a file no block owns.
//
// Delete() and Drain() may be called from any thread. The destructor deletes what is queued,
// then joins; but a deletion stuck past `hang_timeout` (an unlink on a disk that hangs) is not
// waited for: the thread is abandoned, as DiskSet abandons a hung storage thread, so the
// worker's shutdown never hangs on it. What it would have deleted next is left to the next
// open's sweep. The state the thread uses is shared with it, so it stays valid if the thread
// ever returns.
class ChunkFileDeleter {
 public:
  // `fs` is borrowed and must outlive this (and an abandoned thread: the process's default
  // file system does).
  explicit ChunkFileDeleter(rocksdb::FileSystem* fs,
                            std::chrono::milliseconds hang_timeout = std::chrono::seconds(10));
  ~ChunkFileDeleter();
  ChunkFileDeleter(const ChunkFileDeleter&) = delete;
  ChunkFileDeleter& operator=(const ChunkFileDeleter&) = delete;

  // Queues `path`, a file of `bytes` bytes, for deletion (a missing file is no error).
  void Delete(std::string path, uint64_t bytes);
  // Returns once every file queued before the call is deleted (or failed to be, which is
  // logged).
  void Drain();
  // The bytes of the files queued and not yet deleted: room the file system gives back soon.
  uint64_t pending_bytes() const { return state_->pending_bytes.load(std::memory_order_relaxed); }

 private:
  // Shared by the owner and the thread: the thread holds it too, so an abandoned thread never
  // touches freed memory.
  struct State {
    explicit State(rocksdb::FileSystem* fs) : fs(fs) {}
    rocksdb::FileSystem* const fs;
    Mutex mutex;
    std::condition_variable queued;   // with mutex: a path was queued, or stopping set
    std::condition_variable drained;  // with mutex: the queue emptied and no deletion runs
    struct Doomed {
      std::string path;
      uint64_t bytes;
    };
    std::deque<Doomed> queue BM_GUARDED_BY(mutex);
    std::atomic<uint64_t> pending_bytes{0};
    // Since when the deletion running now has run; nullopt while none does.
    std::optional<std::chrono::steady_clock::time_point> deleting_since BM_GUARDED_BY(mutex);
    bool stopping BM_GUARDED_BY(mutex) = false;
  };
  static void Loop(const std::shared_ptr<State>& state);

  const std::chrono::milliseconds hang_timeout_;
  std::shared_ptr<State> state_;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace bm::disk
