#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/status.h"
#include "blockmgr/storage_level.h"
#include "blockmgr/types.h"
#include "transfer/block_upload.h"
#include "transfer/piece_source.h"
#include "transfer/worker_channels.h"

namespace bm {

// Copies blocks a worker holds to other workers, when the master asks it to restore a block's
// replication or to drain a decommissioning worker (replicateBlock). The copying side feeds
// the block's bytes as a PieceSource; they go to every target at once through a BlockUpload,
// as more copies of the source's version, not as a new put.
//
// Borrows the channels, which must outlive it. Not thread-safe: the thread owning the
// channels (the worker's replicator thread) uses it.
class BlockCopier {
 public:
  explicit BlockCopier(WorkerChannels& channels);
  BlockCopier(const BlockCopier&) = delete;
  BlockCopier& operator=(const BlockCopier&) = delete;

  // Copies block `id`, whose bytes `source` hands out, to each of `targets` at `level`,
  // trusting the CURVE key each target carries (the master vouched for it). `version` is the
  // source copy's version (0: a copy from before versions; the targets then pick one).
  // Returns how many copies were committed; fails only when none was (with the last target's
  // error, or the source's).
  Result<uint32_t> CopyToWorkers(const BlockId& id, PieceSource& source,
                                 const std::vector<WorkerInfo>& targets, StorageLevel level,
                                 uint64_t version);

 private:
  WorkerChannels& channels_;
  std::mt19937_64 upload_ids_;
};

}  // namespace bm
