#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "blockmgr/block_id.h"
#include "common/core/clock.h"
#include "worker/block_store.h"

namespace bm {

// What the scrubber has done since it started.
struct ScrubStats {
  uint64_t bytes_verified = 0;
  uint64_t blocks_verified = 0;  // read to the end without an error
  uint64_t corrupt_found = 0;    // reads that failed with kDataLoss (the store dropped them)
  uint64_t passes = 0;           // passes over every block finished
};

// Re-reads the disk store's blocks in the background at a bounded rate so that a copy that rots
// on disk is found before a reader needs it. A read of the store verifies what it reads
// (RocksDB's checksums, and the stored digests where the block has them); a bad copy is dropped
// by the store and reported through BlockStore::TakeLost, like every other lost block, so the
// master restores the replication level from a good copy.
//
// Work is done in bounded steps: each Step() reads what the rate allows for the time since the
// last step (at most one second's worth), a digest unit at a time, and goes on next time where
// it stopped. A pass lists the blocks once and walks them in id order; blocks replaced or
// removed meanwhile are skipped.
//
// Not thread-safe: owned by the thread that owns the store. Borrows the store, which must
// outlive it.
class Scrubber {
 public:
  // `bytes_per_second` 0: off (Step does nothing).
  Scrubber(BlockStore& store, uint64_t bytes_per_second);

  void Step(TimePoint now);
  const ScrubStats& stats() const { return stats_; }
  bool enabled() const { return rate_ > 0; }

 private:
  // Reads the next piece of the current block (starting a pass when needed); returns the bytes
  // read, or nullopt when there is nothing to scrub.
  std::optional<uint64_t> ScrubNextPiece();
  void NextBlock();
  void FinishPass();

  BlockStore& store_;
  const uint64_t rate_;
  std::optional<TimePoint> last_step_;
  double budget_ = 0;  // bytes that may be read now; negative after reading ahead of the rate
  std::vector<BlockId> pass_;
  size_t next_block_ = 0;
  uint64_t offset_ = 0;                 // in pass_[next_block_]
  std::optional<uint64_t> generation_;  // of the version being read, after its first piece
  ScrubStats stats_;
  uint64_t corrupt_before_pass_ = 0;
};

}  // namespace bm
