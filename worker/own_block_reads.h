#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/status.h"
#include "common/core/mutex.h"
#include "worker/block_read.h"

namespace bm {

class BlockManager;

// Reads of this worker's own blocks for a thread other than the event loop (the Replicator's),
// served by the loop through its BlockManager the way it serves getBlock: a memory block's
// range at once, a disk block's on the storage thread, the answer being shared immutable
// chunks (no copy of the bytes).
//
// Threads: Read() is for any thread but the loop, and waits for the answer. The loop is woken
// by `notify`, starts what is queued with ServeQueued() and never waits on a reader. Close()
// (the loop, when it stops) answers every read not yet answered, and every later one, with
// kAborted, so no reader waits on a loop that has stopped.
//
// Owned by the loop; destroyed only after the threads that call Read() have stopped.
class OwnBlockReads {
 public:
  // `notify` is called (on the reading thread) after each request is queued.
  explicit OwnBlockReads(std::function<void()> notify) : notify_(std::move(notify)) {}
  ~OwnBlockReads() { Close(); }
  OwnBlockReads(const OwnBlockReads&) = delete;
  OwnBlockReads& operator=(const OwnBlockReads&) = delete;

  // Reads [offset, offset + max_length) of the block, clamped to it (BlockManager::Read).
  // Blocks the calling thread until the loop answers. Not for the loop's own thread.
  Result<BlockRead> Read(const BlockId& id, uint64_t offset, uint64_t max_length);

  // Loop: starts the reads queued since the last call; each is answered when it completes
  // (for a disk block, when the loop runs the storage thread's completions).
  void ServeQueued(BlockManager& blocks);
  // Loop: answers every unanswered read, and every later one, with kAborted.
  void Close();

 private:
  // One read's answer; `answered` is the loop's (a read may be answered by Close first, and
  // its completion must then leave the promise alone).
  struct Answer {
    std::promise<Result<BlockRead>> promise;
    bool answered = false;
    void Set(Result<BlockRead> read);
  };
  struct Request {
    BlockId id;
    uint64_t offset;
    uint64_t max_length;
    std::shared_ptr<Answer> answer;
  };

  const std::function<void()> notify_;
  Mutex mutex_;
  std::deque<Request> queued_ BM_GUARDED_BY(mutex_);
  bool closed_ BM_GUARDED_BY(mutex_) = false;
  // The loop's: reads started and maybe not answered yet (answered ones are pruned).
  std::vector<std::shared_ptr<Answer>> started_;
};

}  // namespace bm
