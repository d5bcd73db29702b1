#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "worker/block_store.h"

namespace bm::testing {

// A BlockStore that keeps its blocks in memory: what the block manager's and the worker
// server's tests run the disk tier on when they test the policy above the store, not the
// store (tests/unit/worker/disk_store_test.cc tests DiskStore itself). It has the semantics
// the interface states: a block written in a stream is invisible until Commit and replaces
// the previous version atomically; every version gets a new generation; reads are in ranges
// with the unit digests the bytes were stored with; space is accounted against a limit.
// Nothing survives its destruction, so a "restart" needs a DiskStore.
//
// Owns its blocks; a writer borrows the store, which must outlive it. Not thread-safe: one
// thread owns a store, as for any BlockStore.
class InMemoryStore final : public BlockStore {
 public:
  // `limit`: the bytes it may hold (committed plus claimed by writes in progress); 0: no limit.
  explicit InMemoryStore(uint64_t limit = 0);
  ~InMemoryStore() override;

  Result<std::unique_ptr<DiskWriter>> BeginWrite(const BlockId& id, StorageLevel level,
                                                 uint64_t total_size,
                                                 uint64_t version = 0) override;
  Status Write(const BlockId& id, StorageLevel level, const BlockData& data, uint64_t version = 0,
               std::span<const uint64_t> expected_unit_digests = {}) override;
  Result<DiskRead> Read(const BlockId& id, uint64_t offset, uint64_t max_length) override;
  Result<DiskRead> ReadGeneration(const BlockId& id, uint64_t generation, uint64_t offset,
                                  uint64_t max_length) override;
  std::optional<BlockStatus> Find(const BlockId& id) const override;
  Status Remove(const BlockId& id) override;
  std::vector<BlockStatus> List() const override;
  size_t block_count() const override { return blocks_.size(); }
  uint64_t used() const override { return committed_bytes_ + claimed_bytes_; }
  uint64_t capacity() const override;
  bool read_only() const override { return false; }
  void Maintain() override {}
  std::vector<LostBlock> TakeLost() override;
  uint64_t corrupt_count() const override { return corrupt_count_; }
  Status ReportCorrupt(const BlockId& id, uint64_t generation, const std::string& what) override;
  Status CorruptStoredByte(const BlockId& id, uint64_t offset) override;

 private:
  class Writer;

  // One committed version of a block.
  struct Stored {
    StorageLevel level;
    uint64_t size;
    uint64_t generation;
    uint64_t version;
    std::vector<ChunkPtr> units;  // the bytes, one chunk per digest unit
    std::vector<uint64_t> unit_digests;
  };

  BlockStatus StatusOf(const BlockId& id, const Stored& stored) const;
  // Makes `stored` the block's version (the writer's Commit).
  void Commit(const BlockId& id, Stored stored);
  // Gives back the space a writer claimed.
  void Release(uint64_t claimed) { claimed_bytes_ -= claimed; }

  const uint64_t limit_;
  std::map<BlockId, Stored> blocks_;
  uint64_t committed_bytes_ = 0;
  uint64_t claimed_bytes_ = 0;  // by writes in progress
  uint64_t next_generation_ = 1;
  std::vector<LostBlock> lost_;  // since the last TakeLost
  uint64_t corrupt_count_ = 0;
};

}  // namespace bm::testing
