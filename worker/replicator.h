#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/types.h"
#include "common/block_id.h"
#include "common/curve_keys.h"
#include "common/status.h"
#include "common/storage_level.h"

namespace zmq {
class context_t;
}

namespace bm {

// Copies this worker's blocks to other workers when the master asks (replicateBlock): to
// restore replication after a worker died, and to drain a decommissioning worker.
//
// The copies run on the replicator's own thread, so the loop never waits on a copy: it reads
// the block back from this very worker over its data port (a RangeReader, so the server loop
// keeps sole ownership of the stores) and sends it to the targets through a BlockCopier. Finished
// copies are queued for the loop, which is woken by `notify` and collects them with TakeFinished().
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

  // `own_address` is this worker's data port and `keys` its CURVE keypair (empty with keys
  // off), which the copies are made with. `notify` is called (on the replicator's thread) after
  // each finished copy. `context` must outlive the replicator.
  Replicator(zmq::context_t& context, std::string own_address, CurveKeys keys,
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

  const std::string own_address_;
  const CurveKeys keys_;
  const std::function<void()> notify_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> jobs_;            // guarded by mutex_
  std::vector<Finished> finished_;  // guarded by mutex_
  size_t outstanding_ = 0;          // guarded by mutex_
  bool stop_ = false;               // guarded by mutex_
  std::thread thread_;
};

}  // namespace bm
