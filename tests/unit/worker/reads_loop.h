#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "common/core/byte_size.h"
#include "common/core/protocol.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/worker/block_manager_sync.h"
#include "worker/block_manager.h"
#include "worker/disk/disk_store.h"
#include "worker/memory_store.h"
#include "worker/own_block_reads.h"

namespace bm::testing {

// A block manager over a real disk store and a OwnBlockReads, with the loop's part played by the
// test's thread (ServeReads) while another thread reads, as WorkerServer::Run does.
class ReadsLoop {
 public:
  ReadsLoop() {
    Result<std::unique_ptr<DiskStore>> disk = DiskStore::Open(dir_.Sub("db"), 0);
    BM_CHECK(disk.ok());
    manager_ = std::make_unique<BlockManager>(std::make_unique<MemoryStore>(64 * kKiB),
                                              std::move(disk).value());
  }

  BlockManager& manager() { return *manager_; }
  OwnBlockReads& reads() { return reads_; }

  Status Put(const BlockId& id, StorageLevel level, const std::vector<std::byte>& bytes) {
    BM_ASSIGN_OR_RETURN(BlockManager::UploadId upload, manager_->BeginPut(id, level, bytes.size()));
    std::vector<ChunkPtr> chunks;
    for (size_t pos = 0; pos < bytes.size(); pos += kChunkBytes) {
      chunks.push_back(
          MakeChunk(std::span(bytes).subspan(pos, std::min(kChunkBytes, bytes.size() - pos))));
    }
    BM_RETURN_IF_ERROR(AppendPut(*manager_, upload, std::move(chunks)));
    return CommitPut(*manager_, upload).status();
  }

  // Serves `count` reads queued by other threads, each to its answer.
  void ServeReads(int count) {
    for (int served = 0; served < count;) {
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return notified_ > 0; });
        served += notified_;
        notified_ = 0;
      }
      reads_.ServeQueued(*manager_);
      Settle(*manager_);
    }
  }

  // Waits until a read is queued, without serving it.
  void AwaitQueued() {
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return notified_ > 0; });
  }

 private:
  void Notify() {
    std::lock_guard lock(mutex_);
    ++notified_;
    wake_.notify_all();
  }

  TempDir dir_;
  std::unique_ptr<BlockManager> manager_;
  std::mutex mutex_;
  std::condition_variable wake_;
  int notified_ = 0;  // guarded by mutex_
  OwnBlockReads reads_{[this] { Notify(); }};
};

}  // namespace bm::testing
