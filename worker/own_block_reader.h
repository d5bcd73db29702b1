#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/chunk.h"
#include "blockmgr/status.h"
#include "worker/own_block_reads.h"

namespace bm {

// Reads one of this worker's own blocks for a copy to other workers, range by range through
// the loop (OwnBlockReads), handing out its chunks as they are stored (no copy).
//
// Every range is checked against the block's unit digests before its chunks are handed out:
// the disk tier leaves that check to its reader (BlockStore::ReadForCheckingReader), and a copy
// must not spread a rotten block. A mismatch fails with kDataLoss (the loop then verifies its
// copy and drops it when corrupt). All ranges come from the version the first one read: a
// block replaced meanwhile fails the copy with kAborted.
//
// Borrows `reads`, which must outlive it. Not thread-safe: used by one thread other than the
// loop (the Replicator's), which it blocks while a range is read.
class OwnBlockReader {
 public:
  OwnBlockReader(OwnBlockReads& reads, const BlockId& id);

  // Reads the first range: after it, total() and version() are known.
  Status Start();
  uint64_t total() const { return total_; }
  // The version of the block being read (BlockStatus::version).
  uint64_t version() const { return version_; }
  // The next chunk of the block, in order; null once every byte was handed out.
  Result<ChunkPtr> NextChunk();

 private:
  // Reads and checks the range at offset_.
  Status ReadRange();

  OwnBlockReads& reads_;
  const BlockId id_;
  uint64_t total_ = 0;
  uint64_t version_ = 0;
  std::optional<uint64_t> generation_;  // of the first range
  uint64_t offset_ = 0;                 // where the next range starts
  std::vector<ChunkPtr> chunks_;        // of the range read last, checked
  size_t next_ = 0;                     // the next of chunks_ to hand out
};

}  // namespace bm
