#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/status.h"
#include "blockmgr/storage_level.h"
#include "blockmgr/types.h"
#include "common/core/mutex.h"
#include "common/security/curve_keys.h"
#include "worker/own_block_reads.h"

namespace zmq {
class context_t;
}

namespace bm {

// Copies this worker's blocks to other workers when the master asks (replicateBlock): to
// restore replication after a worker died, and to drain a decommissioning worker.
//
// The copies run on the replicator's own thread, so the loop never waits on a copy. The thread
// reads the block range by range through the loop (OwnBlockReads, OwnBlockReader: the loop keeps
// sole ownership of the memory store, the storage thread of the disk store, and the ranges
// come as the stored chunks), waiting for each answer, and sends it to the targets through a
// BlockCopier. Finished copies are queued for the loop, which is woken by `notify` and
// collects them with TakeFinished().
class Replicator {
 public:
  struct Job {
    uint64_t ticket = 0;  // the loop's handle for the request to answer
    BlockId block;
    StorageLevel level;
    std::vector<WorkerInfo> targets;
  };
  struct Finished {
    uint64_t ticket = 0;
    Result<uint32_t> copies;  // copies made, or why none was
  };

  // `keys` is this worker's CURVE keypair (empty with keys off), which the copies are made
  // with; `reads` is how the copies read the blocks (served by the loop). `notify` is called
  // (on the replicator's thread) after each finished copy. `context` and `reads` must outlive
  // the replicator, and the loop must keep serving `reads` (or Close() it) until the
  // replicator is destroyed.
  Replicator(zmq::context_t& context, CurveKeys keys, OwnBlockReads& reads,
             std::function<void()> notify);
  ~Replicator();
  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  void Submit(Job job);
  std::vector<Finished> TakeFinished();
  // Jobs submitted and not yet taken back as finished.
  size_t outstanding() const;

 private:
  void Run(zmq::context_t& context);

  const CurveKeys keys_;
  OwnBlockReads& reads_;
  const std::function<void()> notify_;
  mutable Mutex mutex_;
  std::condition_variable wake_;  // with mutex_
  std::deque<Job> jobs_ BM_GUARDED_BY(mutex_);
  std::vector<Finished> finished_ BM_GUARDED_BY(mutex_);
  size_t outstanding_ BM_GUARDED_BY(mutex_) = 0;
  bool stop_ BM_GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

}  // namespace bm
