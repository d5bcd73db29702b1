#include "tests/unit/worker/fault_injecting_store.h"

#include <thread>
#include <utility>
#include <vector>

namespace bm::testing {

// A writer of the wrapped store whose appends and commit meet the injected faults first.
class FaultInjectingStore::Writer final : public DiskWriter {
 public:
  Writer(FaultInjectingStore& store, std::unique_ptr<DiskWriter> base)
      : store_(store), base_(std::move(base)) {}

  Status Append(std::span<const std::byte> bytes) override {
    BM_RETURN_IF_ERROR(store_.CheckWrite(bytes.size()));
    return base_->Append(bytes);
  }
  void AdoptUnitDigests(std::span<const uint64_t> digests) override {
    base_->AdoptUnitDigests(digests);
  }
  Status Commit() override {
    BM_RETURN_IF_ERROR(store_.CheckWrite(0));
    return base_->Commit();
  }

 private:
  FaultInjectingStore& store_;
  std::unique_ptr<DiskWriter> base_;
};

FaultInjectingStore::FaultInjectingStore(std::unique_ptr<BlockStore> base)
    : base_(std::move(base)) {}

FaultInjectingStore::~FaultInjectingStore() = default;

void FaultInjectingStore::FailWrites(Status status) {
  std::lock_guard lock(mutex_);
  write_failure_ = std::move(status);
}

void FaultInjectingStore::FillDiskAfter(std::optional<uint64_t> bytes) {
  std::lock_guard lock(mutex_);
  bytes_until_full_ = bytes;
}

void FaultInjectingStore::SetReadDelay(std::chrono::milliseconds delay) {
  std::lock_guard lock(mutex_);
  read_delay_ = delay;
}

void FaultInjectingStore::HoldReads() {
  std::lock_guard lock(mutex_);
  hold_reads_ = true;
}

// Held reads and writes are released under the lock (here and below): a released operation may
// be the failed disk's last, after which its owner destroys this store, condition variables
// included, while a notify made after the unlock could still be running.
void FaultInjectingStore::ReleaseReads() {
  std::lock_guard lock(mutex_);
  hold_reads_ = false;
  reads_released_.notify_all();
}

int FaultInjectingStore::reads_waiting() const {
  std::lock_guard lock(mutex_);
  return reads_waiting_;
}

void FaultInjectingStore::CorruptReadsOf(const BlockId& id) {
  std::lock_guard lock(mutex_);
  corrupt_.insert(id);
}

void FaultInjectingStore::ClearFaults() {
  std::lock_guard lock(mutex_);
  write_failure_ = Status::Ok();
  bytes_until_full_.reset();
  read_delay_ = std::chrono::milliseconds{0};
  hold_reads_ = false;
  hold_writes_ = false;
  corrupt_.clear();
  reads_released_.notify_all();
  writes_released_.notify_all();
}

uint64_t FaultInjectingStore::injected_write_failures() const {
  std::lock_guard lock(mutex_);
  return injected_write_failures_;
}

void FaultInjectingStore::HoldWrites() {
  std::lock_guard lock(mutex_);
  hold_writes_ = true;
}

void FaultInjectingStore::ReleaseWrites() {
  std::lock_guard lock(mutex_);
  hold_writes_ = false;
  writes_released_.notify_all();
}

int FaultInjectingStore::writes_waiting() const {
  std::lock_guard lock(mutex_);
  return writes_waiting_;
}

Status FaultInjectingStore::CheckWrite(uint64_t bytes) {
  std::unique_lock lock(mutex_);
  ++writes_waiting_;
  writes_released_.wait(lock, [this] { return !hold_writes_; });
  --writes_waiting_;
  if (!write_failure_.ok()) {
    ++injected_write_failures_;
    return write_failure_;
  }
  if (bytes_until_full_.has_value()) {
    if (bytes > *bytes_until_full_) {
      ++injected_write_failures_;
      return OutOfSpaceError("disk full (injected): no room for " + std::to_string(bytes) +
                             " more bytes");
    }
    *bytes_until_full_ -= bytes;
  }
  return Status::Ok();
}

Result<std::unique_ptr<DiskWriter>> FaultInjectingStore::BeginWrite(const BlockId& id,
                                                                    StorageLevel level,
                                                                    uint64_t total_size,
                                                                    uint64_t version) {
  BM_RETURN_IF_ERROR(CheckWrite(0));
  BM_ASSIGN_OR_RETURN(std::unique_ptr<DiskWriter> writer,
                      base_->BeginWrite(id, level, total_size, version));
  return std::unique_ptr<DiskWriter>(std::make_unique<Writer>(*this, std::move(writer)));
}

Status FaultInjectingStore::Write(const BlockId& id, StorageLevel level, const BlockData& data,
                                  uint64_t version,
                                  std::span<const uint64_t> expected_unit_digests) {
  BM_RETURN_IF_ERROR(CheckWrite(data.size));
  return base_->Write(id, level, data, version, expected_unit_digests);
}

void FaultInjectingStore::BeforeRead() {
  std::chrono::milliseconds delay;
  {
    std::unique_lock lock(mutex_);
    ++reads_waiting_;
    reads_released_.wait(lock, [this] { return !hold_reads_; });
    --reads_waiting_;
    delay = read_delay_;
  }
  // The simulated device's latency, not a wait for another thread.
  if (delay.count() > 0) std::this_thread::sleep_for(delay);
}

Result<DiskRead> FaultInjectingStore::AfterRead(const BlockId& id, Result<DiskRead> read) {
  if (!read.ok()) return read;
  {
    std::lock_guard lock(mutex_);
    if (!corrupt_.contains(id)) return read;
  }
  for (ChunkPtr& chunk : read->chunks) {
    if (chunk->size() == 0) continue;
    std::vector<std::byte> bytes(chunk->bytes().begin(), chunk->bytes().end());
    bytes[0] = ~bytes[0];
    chunk = MakeChunk(bytes);
    break;
  }
  return read;
}

Result<DiskRead> FaultInjectingStore::Read(const BlockId& id, uint64_t offset,
                                           uint64_t max_length) {
  BeforeRead();
  return AfterRead(id, base_->Read(id, offset, max_length));
}

Result<DiskRead> FaultInjectingStore::ReadGeneration(const BlockId& id, uint64_t generation,
                                                     uint64_t offset, uint64_t max_length) {
  BeforeRead();
  return AfterRead(id, base_->ReadGeneration(id, generation, offset, max_length));
}

}  // namespace bm::testing
