#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "worker/block_store.h"

namespace bm::testing {

// A BlockStore that forwards to another (an InMemoryStore, or a DiskStore in a temporary
// directory) and injects the faults a disk has, on command: writes that fail, a disk that fills
// up part-way through a write, reads that are slow or held until released, and chunks that come
// back corrupted.
// The LevelDB Env idea: the code under test cannot tell it from a real disk.
//
// Ownership: owns the store it wraps. The block manager owns this store; a test keeps a
// borrowed pointer to flip the switches while the manager lives.
// Thread-safety: the switches may be flipped from any thread (the worker server's tests flip
// them while its loop uses the store); the store operations themselves are called by the one
// thread that owns the store, as for any BlockStore.
class FaultInjectingStore final : public BlockStore {
 public:
  explicit FaultInjectingStore(std::unique_ptr<BlockStore> base);
  ~FaultInjectingStore() override;

  // Every write (BeginWrite, Write, a writer's Append and Commit) fails with `status` until
  // cleared: an I/O error, say. An Ok status clears it.
  void FailWrites(Status status);
  // Writes succeed for `bytes` more bytes, then fail with kOutOfSpace ("disk full"), including
  // an upload's Append part-way through. nullopt: the disk has room again.
  void FillDiskAfter(std::optional<uint64_t> bytes);
  // Every read takes at least `delay` (a slow device).
  void SetReadDelay(std::chrono::milliseconds delay);
  // Reads wait (on the reading thread) until ReleaseReads(); reads_waiting() counts them.
  void HoldReads();
  void ReleaseReads();
  int reads_waiting() const;
  // Writes (BeginWrite, Write, Append, Commit) wait on the writing thread until
  // ReleaseWrites(): a device stalled for as long as a test needs. writes_waiting() counts them.
  void HoldWrites();
  void ReleaseWrites();
  int writes_waiting() const;
  // Reads of `id` return its bytes with the first byte of the first chunk flipped.
  void CorruptReadsOf(const BlockId& id);
  // Back to a healthy disk (releases held reads and writes).
  void ClearFaults();
  // Writes refused by an injected fault so far.
  uint64_t injected_write_failures() const;

  Result<std::unique_ptr<DiskWriter>> BeginWrite(const BlockId& id, StorageLevel level,
                                                 uint64_t total_size,
                                                 uint64_t version = 0) override;
  Status Write(const BlockId& id, StorageLevel level, const BlockData& data, uint64_t version = 0,
               std::span<const uint64_t> expected_unit_digests = {}) override;
  Result<DiskRead> Read(const BlockId& id, uint64_t offset, uint64_t max_length) override;
  Result<DiskRead> ReadGeneration(const BlockId& id, uint64_t generation, uint64_t offset,
                                  uint64_t max_length) override;
  std::optional<BlockStatus> Find(const BlockId& id) const override { return base_->Find(id); }
  Status Remove(const BlockId& id) override { return base_->Remove(id); }
  std::vector<BlockStatus> List() const override { return base_->List(); }
  size_t block_count() const override { return base_->block_count(); }
  uint64_t used() const override { return base_->used(); }
  uint64_t capacity() const override { return base_->capacity(); }
  bool read_only() const override { return base_->read_only(); }
  void Maintain() override { base_->Maintain(); }
  std::vector<LostBlock> TakeLost() override { return base_->TakeLost(); }
  uint64_t corrupt_count() const override { return base_->corrupt_count(); }
  Status ReportCorrupt(const BlockId& id, uint64_t generation, const std::string& what) override {
    return base_->ReportCorrupt(id, generation, what);
  }
  Status CorruptStoredByte(const BlockId& id, uint64_t offset) override {
    return base_->CorruptStoredByte(id, offset);
  }

 private:
  class Writer;

  // Ok, or the fault a write of `bytes` more bytes meets now (and counts it).
  Status CheckWrite(uint64_t bytes);
  // Waits out the read delay and any hold.
  void BeforeRead();
  Result<DiskRead> AfterRead(const BlockId& id, Result<DiskRead> read);

  const std::unique_ptr<BlockStore> base_;

  mutable std::mutex mutex_;
  std::condition_variable reads_released_;   // with mutex_
  std::condition_variable writes_released_;  // with mutex_
  // The switches, guarded by mutex_.
  Status write_failure_;
  std::optional<uint64_t> bytes_until_full_;
  std::chrono::milliseconds read_delay_{0};
  bool hold_reads_ = false;
  int reads_waiting_ = 0;
  bool hold_writes_ = false;
  int writes_waiting_ = 0;
  std::set<BlockId> corrupt_;
  uint64_t injected_write_failures_ = 0;
};

}  // namespace bm::testing
