#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "worker/block_store.h"
#include "worker/job_thread.h"

namespace bm {

// What the loop knows of the disk tier's space, as of the last finished job.
struct DiskTierStats {
  uint64_t used = 0;
  uint64_t capacity = 0;
  bool read_only = false;
  uint64_t corrupt_blocks = 0;  // BlockStore::corrupt_count
};

// Runs the disk tier's work on a thread of its own, so the worker's event loop never waits on a
// disk: a RocksDB write stall, a 16 MiB read or a spill of a few GiB costs the loop nothing.
//
// The loop submits jobs; each job is a function of the store, runs on the storage thread, and
// returns a completion, which runs back on the loop when the loop calls RunCompletions() (after
// wake_fd() turns readable). Jobs run one at a time in the order submitted, and completions run
// in the same order, so a removal submitted after a write runs after it, and the loop sees the
// results of its jobs in the order it asked for them.
//
// The thread runs at the process's priority: a put whose bytes wait for spills (see
// BlockManager::TakesBytes) waits on it, so a lower one would invert priorities on a busy
// machine (seen: pieces waiting seconds for a niced storage thread under load).
//
// Ownership and threads: owns the store, which only the storage thread touches once the
// StorageThread exists. A job must touch nothing but the store and what it captured by value
// (or shared ownership); a completion may touch the loop's state. Submit(), RunCompletions() and
// the accessors are for the one loop thread. The thread is a JobThread; this adds the store and
// what the loop knows of it.
class StorageThread {
 public:
  using Completion = std::function<void()>;
  using Job = std::function<Completion(BlockStore&)>;

  // `notify_fd`: see JobThread (DiskSet polls one fd for all its disks).
  explicit StorageThread(std::unique_ptr<BlockStore> store, int notify_fd = -1);
  // Runs the jobs still queued (their completions are dropped, not run), then joins.
  ~StorageThread() = default;
  StorageThread(const StorageThread&) = delete;
  StorageThread& operator=(const StorageThread&) = delete;

  void Submit(Job job);
  // Runs the completions of the jobs finished so far, in order; returns how many ran.
  size_t RunCompletions() { return thread_->RunCompletions(); }
  // Readable (eventfd) while completions wait to run.
  int wake_fd() const { return thread_->wake_fd(); }
  // Jobs submitted whose completions have not run yet.
  size_t outstanding() const { return outstanding_; }
  // As of the last completion run.
  const DiskTierStats& stats() const { return stats_; }

  // Since when the job running now has run (nullopt while the thread is idle): the loop's
  // watchdog on a disk that hangs (DiskSet).
  std::optional<std::chrono::steady_clock::time_point> busy_since() const;
  // Queues the closing of the store, behind every job queued so far (DiskSet, when the disk has
  // failed). No job may be submitted after it.
  void Close();

 private:
  // Reset by Close(), on the storage thread.
  std::unique_ptr<BlockStore> store_;
  // Written by the storage thread, read by the loop: steady-clock ticks when the running job
  // started, 0 while idle.
  std::atomic<int64_t> busy_since_{0};

  // The loop's.
  size_t outstanding_ = 0;
  DiskTierStats stats_;

  // Last: joined first, so no job outlives the store it uses.
  const std::unique_ptr<JobThread> thread_;
};

}  // namespace bm
