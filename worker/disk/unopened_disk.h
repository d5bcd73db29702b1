#pragma once

#include <string>

#include "worker/block_store.h"

namespace bm {

// The store in the place of a disk that could not be opened when the worker started (its
// directory missing or unwritable, its database unrecoverable): it holds nothing and refuses
// every read and write with the reason, so the worker serves from its other disks (as HDFS
// starts a DataNode without a volume that fails at start, within
// dfs.datanode.failed.volumes.tolerated). The DiskSet shows the disk as failed from the start
// (DiskSlot::failed_at_start); a restart with the disk replaced opens it again.
class UnopenedDisk final : public BlockStore {
 public:
  explicit UnopenedDisk(std::string why) : why_(std::move(why)) {}

  Result<std::unique_ptr<DiskWriter>> BeginWrite(const BlockId&, StorageLevel, uint64_t,
                                                 uint64_t) override {
    return Refused();
  }
  Status Write(const BlockId&, StorageLevel, const BlockData&, uint64_t,
               std::span<const uint64_t>) override {
    return Refused();
  }
  Result<DiskRead> Read(const BlockId&, uint64_t, uint64_t) override { return Refused(); }
  Result<DiskRead> ReadGeneration(const BlockId&, uint64_t, uint64_t, uint64_t) override {
    return Refused();
  }
  std::optional<BlockStatus> Find(const BlockId&) const override { return std::nullopt; }
  Status Remove(const BlockId& id) override {
    return NotFoundError("block " + id.ToString() + " is not on a disk that was never opened");
  }
  std::vector<BlockStatus> List() const override { return {}; }
  size_t block_count() const override { return 0; }
  uint64_t used() const override { return 0; }
  uint64_t capacity() const override { return 0; }
  bool read_only() const override { return true; }
  void Maintain() override {}
  std::vector<LostBlock> TakeLost() override { return {}; }
  uint64_t corrupt_count() const override { return 0; }
  Status ReportCorrupt(const BlockId&, uint64_t, const std::string&) override { return Refused(); }
  Status CorruptStoredByte(const BlockId&, uint64_t) override { return Refused(); }

 private:
  Status Refused() const { return UnavailableError("the disk could not be opened: " + why_); }

  const std::string why_;
};

}  // namespace bm
