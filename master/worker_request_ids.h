#pragma once

#include <cstdint>

namespace bm {

// Ids of the requests the master sends to workers (removeBlocks, replicateBlock, verifyBlock).
// One sequence serves them all, so that a worker's reply, which echoes the id, matches exactly
// one request whichever component sent it.
//
// Not thread-safe: owned by the master's loop.
class WorkerRequestIds {
 public:
  uint64_t Next() { return next_++; }

 private:
  uint64_t next_ = 1;
};

}  // namespace bm
