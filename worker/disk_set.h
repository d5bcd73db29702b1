#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/status.h"
#include "common/core/clock.h"
#include "common/core/worker_stats.h"
#include "worker/block_store.h"
#include "worker/disk/disk_directory.h"
#include "worker/scrubber.h"
#include "worker/storage_thread.h"

namespace bm {

// One `--disk-dir` flag: a directory and its optional limit ("/data1" or "/data1:200GiB").
struct DiskDirSpec {
  std::string path;
  uint64_t limit = 0;  // 0: as much as the filesystem has
};

// Parses "PATH" or "PATH:SIZE" (the size as ParseByteSize reads it, e.g. 200GiB). The limit is
// what follows the last ':'; kInvalidArgument naming the flag's text when the path is empty or
// the size is not one (a path that itself contains ':' cannot be given a limit-free form).
Result<DiskDirSpec> ParseDiskDir(std::string_view text);

// What the available-space choice knows of one disk.
struct DiskRoom {
  bool usable = true;  // false: failed, or read-only after a storage error (takes no block)
  uint64_t used = 0;
  uint64_t capacity = 0;  // what used could reach now (the limit, or less when the fs has less)
};

// HDFS's available-space policy: of the usable disks with room for `size` bytes, the one with
// the most free space relative to its capacity (ties: the lowest index, so one disk behaves as
// it always did). nullopt when none has room.
std::optional<size_t> ChooseDiskByAvailableSpace(std::span<const DiskRoom> disks, uint64_t size);

// The periodic check of a disk directory: first that it is still the directory `opened`
// recorded (CheckStillOpened: not moved away, replaced or unmounted, its store's lock file still
// there; skipped when nullopt), then writes a small file, fsyncs it, reads it back and compares,
// and deletes it. Without the first step the check of an unmounted disk would write into the
// bare mount point on the root filesystem, and pass. kOutOfSpace when the filesystem refused for
// lack of room (ENOSPC, EDQUOT: a full disk is not a failed one); kInternal naming what changed,
// or the step and errno, otherwise.
Status CheckDiskDirectory(const std::string& dir,
                          const std::optional<OpenedDirectory>& opened = std::nullopt);

// One disk as the worker's event loop wires it: where it is (empty for a store with no
// directory of its own, as in tests: then only the store's own errors and the timeout can fail
// it), its store, and the limit given for it (for display; the store enforces it).
struct DiskSlot {
  std::string path;
  std::unique_ptr<BlockStore> store;
  uint64_t limit = 0;
  // Why the disk could not be opened at start ("" when it was): it is then failed from the
  // start, with an UnopenedDisk as its store.
  std::string failed_at_start{};
};

// How many failed disks a worker with `disks` disks keeps serving with: `flag`
// (--failed-disks-tolerated) when given, else all but one.
inline size_t FailedDisksTolerated(std::optional<size_t> flag, size_t disks) {
  return flag.value_or(disks - 1);
}

struct DiskSetOptions {
  // How often each disk's directory is checked (CheckDiskDirectory, on the disk's storage
  // thread) and how long a check, or any storage job, may run before the disk counts as hung.
  std::chrono::milliseconds check_interval{5000};
  std::chrono::milliseconds check_timeout{10000};
  // The scrubber's rate on each disk (worker/scrubber.h); 0: off.
  uint64_t scrub_bytes_per_second = 0;
};

// The worker's disks: one BlockStore per disk, each run by a StorageThread of its own so a slow
// or hanging disk stalls only the work queued for it. It chooses the disk for a new block,
// routes work to a disk, and finds failed disks; the BlockManager keeps which block is on which
// disk and decides what a failure costs (its blocks, reported lost).
//
// Disk states: ok -> failed, or failed from the start (DiskSlot::failed_at_start: nothing of it
// is reported, since it holds nothing this run). A disk fails when its periodic check fails with
// anything but kOutOfSpace (its directory is no longer the one its store opened, as recorded when
// the DiskSet was made, or a write, fsync or read-back failed), when a check or any storage job
// runs longer than check_timeout, or when the owner reports an I/O error from it (NoteError;
// that triggers a check at once, and only the check decides, so a full disk is never failed).
// Failed is final for the run, as HDFS keeps a failed volume out until the DataNode restarts:
// the disk is never given work again, its store is never reopened (its maintenance, which
// reopens a read-only store, is skipped), and its store is closed by a last job behind the work
// already queued. The operator replaces the disk and restarts the worker. A disk whose thread hangs
// cannot be joined: at destruction its StorageThread (and its store and scrubber) are
// deliberately leaked, so the hung thread keeps valid memory if it ever returns; nothing it
// finishes then is ever run on the loop.
//
// Time is the steady clock's: the timeout measures real threads stuck in real system calls.
//
// Threads: everything here is for the worker's event loop, as StorageThread's loop side is.
class DiskSet {
 public:
  using DiskNo = size_t;

  DiskSet(std::vector<DiskSlot> disks, DiskSetOptions options);
  ~DiskSet();
  DiskSet(const DiskSet&) = delete;
  DiskSet& operator=(const DiskSet&) = delete;

  size_t size() const { return disks_.size(); }
  // The disk's directory (or "disk #N" when it has none), as logs and stats name it.
  const std::string& path(DiskNo disk) const { return disks_[disk].path; }
  bool failed(DiskNo disk) const { return !disks_[disk].failure.empty(); }
  // Why the disk failed ("" while it is ok).
  const std::string& failure(DiskNo disk) const { return disks_[disk].failure; }
  size_t failed_count() const;

  // The disk a new block of `size` bytes goes to: `holder` (the disk holding the block's current
  // version, so a replacement commits in one store) when it is usable and has room, else the
  // available-space choice, never one of `avoid` (disks that refused this block already).
  // kOutOfSpace naming each disk's room when none has room for it; kUnavailable when every disk
  // has failed.
  Result<DiskNo> Choose(const BlockId& id, uint64_t size, std::optional<DiskNo> holder,
                        std::span<const DiskNo> avoid = {}) const;

  // Queues a job on the disk's storage thread. Work is never queued on a failed disk (callers
  // check failed() first and answer with FailedError()), except the cleanup of its writers
  // before Close(), after which nothing may be queued.
  void Submit(DiskNo disk, StorageThread::Job job);
  // Closes a failed disk's store, behind the work already queued (whose completions still run
  // and answer their callers). A hung thread never gets to it: the store then stays open until
  // the process exits.
  void Close(DiskNo disk);
  // The error for work meant for a failed disk.
  Status FailedError(DiskNo disk, const BlockId& id) const;

  // Readable while any disk has completions to run.
  int wake_fd() const { return wake_fd_; }
  // Runs every disk's finished completions; returns how many ran.
  size_t RunCompletions();
  size_t outstanding() const;

  // Off the hot path: queues each ok disk's maintenance job (the store's Maintain, a scrub
  // step) unless one is still queued, starts the directory checks that are due and fails the
  // disks whose job has run past the timeout. `maintained` runs on the loop with each disk's
  // lost blocks when its maintenance job completes.
  void Tick(const std::function<void(DiskNo, std::vector<LostBlock>)>& maintained);
  // An error came back from the disk: a check runs at once (a failed read or write with an
  // I/O error fails the disk through it; an out-of-space refusal does not).
  void NoteError(DiskNo disk, const Status& status);
  // The disks that failed since the last call (each once).
  std::vector<DiskNo> TakeNewlyFailed() { return std::exchange(newly_failed_, {}); }

  // As of the last completion run on each disk.
  const DiskTierStats& stats(DiskNo disk) const { return disks_[disk].thread->stats(); }
  // The disks' used and capacity summed over the ok disks; read_only when no ok disk takes
  // writes; the per-disk view in `disks`.
  void FillStats(WorkerStats& stats) const;
  uint64_t corrupt_blocks() const;
  uint64_t scrubbed_bytes() const;

 private:
  struct Disk {
    std::string path;  // the directory, or "disk #N" for a store without one
    std::string dir;   // the directory checked ("" for none)
    uint64_t limit = 0;
    std::unique_ptr<StorageThread> thread;
    // Touched only by storage jobs (borrows the store); kept alive as long as the thread.
    std::unique_ptr<Scrubber> scrubber;
    // What the directory was at the start (nullopt without one, or failed at start).
    std::optional<OpenedDirectory> opened;
    // Set with `failure`, read by the disk's maintenance job on the storage thread, so a job
    // queued before the failure does not reopen the store. Kept alive as long as the thread.
    std::unique_ptr<std::atomic<bool>> failed_flag;
    std::string failure;  // "" while ok
    bool closed = false;
    bool maintenance_queued = false;
    bool check_queued = false;
    TimePoint next_check{};
    bool check_now = false;
    uint64_t scrubbed_bytes = 0;
  };

  void StartCheck(DiskNo disk, TimePoint now);
  // Marks the disk failed (once) and logs it; the owner then closes it (TakeNewlyFailed).
  void Fail(DiskNo disk, const std::string& why);

  const DiskSetOptions options_;
  // Every disk's StorageThread signals this one eventfd too, so the loop polls one fd however
  // many disks there are.
  const int wake_fd_;
  std::vector<Disk> disks_;
  std::vector<DiskNo> newly_failed_;
  bool abandoned_threads_ = false;
};

}  // namespace bm
