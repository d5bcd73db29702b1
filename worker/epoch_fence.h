#pragma once

#include <cstdint>
#include <string>

#include "blockmgr/status.h"

namespace bm {

// Fencing a deposed leader (PROTOCOL.md, "Standby masters"): the highest leader epoch this
// worker has seen, kept in a small file, and the rule that a command from an older epoch is
// refused. A master that paused (a long GC, SIGSTOP, a partition) past its ZooKeeper session
// may wake believing it still leads; its commands carry its old epoch, and once the worker
// has heard from the new leader (a registration reply or a command) they are refused, so the
// old leader cannot remove, copy or shut down anything.
//
// Epoch 0 is "no election": commands of a master running alone, and requests from clients,
// carry 0 and are never fenced.
//
// The file is replaced (write, rename) without fsync: it survives the worker being killed,
// and a change of epoch happens once per failover, so the loop that owns the fence writes it
// in place rather than on the storage thread. After a machine crash the fence may be older;
// the worker then hears the new epoch again when it registers.
//
// Not thread-safe: owned by the worker's loop.
class EpochFence {
 public:
  // Reads the epoch kept in `path` (a missing file is epoch 0; an empty path keeps the fence
  // in memory only). kInternal when the file cannot be read or is not a number.
  static Result<EpochFence> Open(std::string path);

  uint64_t highest() const { return highest_; }
  // The epoch of a leader this worker heard from: raises the fence (kept on disk) when newer.
  // A write that fails is returned; the fence is raised in memory all the same.
  Status Raise(uint64_t epoch);
  // A command carrying `epoch`: OK when it may act (0, or not older than the fence; a newer
  // one raises it), kPermissionDenied naming both epochs otherwise.
  Status Admit(uint64_t epoch, const char* command);

 private:
  explicit EpochFence(std::string path, uint64_t highest)
      : path_(std::move(path)), highest_(highest) {}

  std::string path_;
  uint64_t highest_ = 0;
};

}  // namespace bm
