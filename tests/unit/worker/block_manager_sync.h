#pragma once

#include <poll.h>

#include <optional>

#include "blockmgr/status.h"
#include "worker/block_manager.h"

namespace bm::testing {

// Runs the block manager's completions until the storage thread has nothing outstanding: the
// loop's part of the worker server, for tests that call the block manager directly.
inline void Settle(BlockManager& manager) {
  while (manager.storage_jobs_outstanding() > 0) {
    pollfd fd{manager.completion_fd(), POLLIN, 0};
    ::poll(&fd, 1, 1000);
    manager.RunCompletions();
  }
}

// The asynchronous operations, waited for (and settled, so spills they caused are done).
inline Status AppendPut(BlockManager& manager, BlockManager::UploadId upload,
                        std::vector<ChunkPtr> chunks,
                        std::vector<uint64_t> checked_unit_digests = {}) {
  std::optional<Status> result;
  manager.AppendPut(upload, std::move(chunks), std::move(checked_unit_digests),
                    [&](Status s) { result = std::move(s); });
  Settle(manager);
  BM_CHECK(result.has_value());
  return *result;
}

inline Result<Tier> CommitPut(BlockManager& manager, BlockManager::UploadId upload) {
  std::optional<Result<Tier>> result;
  manager.CommitPut(upload, [&](Result<Tier> tier) { result = std::move(tier); });
  Settle(manager);
  BM_CHECK(result.has_value());
  return *result;
}

inline Result<BlockRead> Read(BlockManager& manager, const BlockId& id, uint64_t offset,
                              uint64_t max_length) {
  std::optional<Result<BlockRead>> result;
  manager.Read(id, offset, max_length, [&](Result<BlockRead> read) { result = std::move(read); });
  Settle(manager);
  BM_CHECK(result.has_value());
  return std::move(*result);
}

inline Result<BlockCheck> Verify(BlockManager& manager, const BlockId& id) {
  std::optional<Result<BlockCheck>> result;
  manager.Verify(id, [&](Result<BlockCheck> check) { result = std::move(check); });
  Settle(manager);
  BM_CHECK(result.has_value());
  return std::move(*result);
}

}  // namespace bm::testing
