#include "tests/unit/worker/in_memory_store.h"

#include <algorithm>

#include "common/core/digest.h"

namespace bm::testing {
namespace {

// What capacity() says without a limit: more than any test writes.
constexpr uint64_t kUnlimited = uint64_t{1} << 50;

Status NotStored(const BlockId& id) {
  return NotFoundError("block " + id.ToString() + " is not on disk here");
}

}  // namespace

// Collects a block's bytes in digest units until Commit hands them to the store. Borrows the
// store; gives back its claimed space when destroyed.
class InMemoryStore::Writer final : public DiskWriter {
 public:
  Writer(InMemoryStore* store, const BlockId& id, StorageLevel level, uint64_t total_size,
         uint64_t generation, uint64_t version)
      : store_(store),
        id_(id),
        level_(level),
        total_size_(total_size),
        generation_(generation),
        version_(version) {}
  ~Writer() override {
    if (claim_held_) store_->Release(total_size_);
  }

  Status Append(std::span<const std::byte> bytes) override {
    if (!open_) return InvalidArgumentError("the write of " + id_.ToString() + " is not open");
    if (bytes.size() > total_size_ - appended_) {
      open_ = false;
      return InvalidArgumentError(
          "block " + id_.ToString() + ": " + std::to_string(appended_ + bytes.size()) +
          " bytes appended, more than the declared " + std::to_string(total_size_));
    }
    appended_ += bytes.size();
    digester_.Update(bytes);
    while (!bytes.empty()) {
      const size_t n = std::min<size_t>(kDigestUnitBytes - unit_.size(), bytes.size());
      unit_.insert(unit_.end(), bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n));
      bytes = bytes.subspan(n);
      if (unit_.size() == kDigestUnitBytes) FlushUnit();
    }
    return Status::Ok();
  }

  void AdoptUnitDigests(std::span<const uint64_t> digests) override {
    digester_.AdoptUnits(digests);
  }

  Status Commit() override {
    if (!open_) return InvalidArgumentError("the write of " + id_.ToString() + " is not open");
    open_ = false;
    if (appended_ != total_size_) {
      return InvalidArgumentError("block " + id_.ToString() + ": only " +
                                  std::to_string(appended_) + " of " + std::to_string(total_size_) +
                                  " bytes were written");
    }
    if (!unit_.empty()) FlushUnit();
    store_->Release(total_size_);
    claim_held_ = false;
    store_->Commit(id_, Stored{level_, total_size_, generation_, version_, std::move(units_),
                               digester_.Finish().units});
    return Status::Ok();
  }

 private:
  void FlushUnit() {
    units_.push_back(MakeChunk(unit_));
    unit_.clear();
  }

  InMemoryStore* const store_;
  const BlockId id_;
  const StorageLevel level_;
  const uint64_t total_size_;
  const uint64_t generation_;
  const uint64_t version_;
  bool open_ = true;
  bool claim_held_ = true;  // total_size_ counts in the store's used() until Commit
  uint64_t appended_ = 0;
  BlockDigester digester_;
  std::vector<ChunkPtr> units_;
  std::vector<std::byte> unit_;  // the unit being filled
};

InMemoryStore::InMemoryStore(uint64_t limit) : limit_(limit) {}

InMemoryStore::~InMemoryStore() = default;

Result<std::unique_ptr<DiskWriter>> InMemoryStore::BeginWrite(const BlockId& id, StorageLevel level,
                                                              uint64_t total_size,
                                                              uint64_t version) {
  const uint64_t in_use = used();
  if (total_size > capacity() - std::min(in_use, capacity())) {
    return OutOfSpaceError("block " + id.ToString() + " of " + std::to_string(total_size) +
                           " bytes does not fit: " + std::to_string(in_use) + " of the " +
                           std::to_string(capacity()) + " bytes in use");
  }
  claimed_bytes_ += total_size;
  return std::unique_ptr<DiskWriter>(
      std::make_unique<Writer>(this, id, level, total_size, next_generation_++, version));
}

Status InMemoryStore::Write(const BlockId& id, StorageLevel level, const BlockData& data,
                            uint64_t version, std::span<const uint64_t> expected_unit_digests) {
  if (!expected_unit_digests.empty()) {
    std::vector<std::span<const std::byte>> pieces;
    for (const ChunkPtr& chunk : data.chunks) pieces.push_back(chunk->bytes());
    if (std::optional<uint64_t> bad =
            FirstBadUnit(pieces, 0, data.size, data.size, expected_unit_digests)) {
      return DataLossError("block " + id.ToString() + " is corrupt in memory: bytes " +
                           std::to_string(*bad * kDigestUnitBytes) +
                           " on do not match their digest; not written");
    }
  }
  BM_ASSIGN_OR_RETURN(std::unique_ptr<DiskWriter> writer,
                      BeginWrite(id, level, data.size, version));
  writer->AdoptUnitDigests(expected_unit_digests);
  for (const ChunkPtr& chunk : data.chunks) BM_RETURN_IF_ERROR(writer->Append(chunk->bytes()));
  return writer->Commit();
}

Result<DiskRead> InMemoryStore::Read(const BlockId& id, uint64_t offset, uint64_t max_length) {
  auto found = blocks_.find(id);
  if (found == blocks_.end()) return NotStored(id);
  return ReadGeneration(id, found->second.generation, offset, max_length);
}

Result<DiskRead> InMemoryStore::ReadGeneration(const BlockId& id, uint64_t generation,
                                               uint64_t offset, uint64_t max_length) {
  auto found = blocks_.find(id);
  if (found == blocks_.end()) {
    return AbortedError("block " + id.ToString() + " generation " + std::to_string(generation) +
                        " was removed");
  }
  const Stored& stored = found->second;
  if (stored.generation != generation) {
    return AbortedError("block " + id.ToString() + " generation " + std::to_string(generation) +
                        " was replaced by generation " + std::to_string(stored.generation));
  }
  if (offset > stored.size) {
    return InvalidArgumentError("offset " + std::to_string(offset) + " is past the end of block " +
                                id.ToString() + " (" + std::to_string(stored.size) + " bytes)");
  }
  DiskRead read{stored.size, stored.generation, stored.level, {}, {}};
  const uint64_t length = std::min(max_length, stored.size - offset);
  if (length == 0) return read;
  const uint64_t end = offset + length;
  const uint64_t first = offset / kDigestUnitBytes;
  const uint64_t last = (end - 1) / kDigestUnitBytes;
  for (uint64_t i = first; i <= last; ++i) {
    const uint64_t unit_start = i * kDigestUnitBytes;
    const ChunkPtr& unit = stored.units[i];
    const uint64_t from = std::max(offset, unit_start) - unit_start;
    const uint64_t to = std::min(end, unit_start + unit->size()) - unit_start;
    read.chunks.push_back(SliceChunk(unit, from, to - from));
  }
  if (!stored.unit_digests.empty()) {
    read.unit_digests.assign(stored.unit_digests.begin() + static_cast<ptrdiff_t>(first),
                             stored.unit_digests.begin() + static_cast<ptrdiff_t>(last) + 1);
  }
  return read;
}

std::optional<BlockStatus> InMemoryStore::Find(const BlockId& id) const {
  auto found = blocks_.find(id);
  if (found == blocks_.end()) return std::nullopt;
  return StatusOf(id, found->second);
}

Status InMemoryStore::Remove(const BlockId& id) {
  auto found = blocks_.find(id);
  if (found == blocks_.end()) return NotStored(id);
  committed_bytes_ -= found->second.size;
  blocks_.erase(found);
  return Status::Ok();
}

std::vector<BlockStatus> InMemoryStore::List() const {
  std::vector<BlockStatus> list;
  list.reserve(blocks_.size());
  for (const auto& [id, stored] : blocks_) list.push_back(StatusOf(id, stored));
  return list;
}

uint64_t InMemoryStore::capacity() const { return limit_ != 0 ? limit_ : kUnlimited; }

std::vector<LostBlock> InMemoryStore::TakeLost() { return std::exchange(lost_, {}); }

Status InMemoryStore::ReportCorrupt(const BlockId& id, uint64_t generation,
                                    const std::string& what) {
  auto found = blocks_.find(id);
  if (found == blocks_.end() || found->second.generation != generation) {
    return DataLossError("block " + id.ToString() + " generation " + std::to_string(generation) +
                         " was corrupt (" + what + "); it is no longer stored");
  }
  committed_bytes_ -= found->second.size;
  blocks_.erase(found);
  lost_.push_back({id, "generation " + std::to_string(generation) + " is corrupt: " + what,
                   LostCause::kCopyCorrupt});
  ++corrupt_count_;
  return DataLossError("block " + id.ToString() + " is corrupt in this store (" + what + ")");
}

Status InMemoryStore::CorruptStoredByte(const BlockId& id, uint64_t offset) {
  auto found = blocks_.find(id);
  if (found == blocks_.end()) return NotStored(id);
  Stored& stored = found->second;
  if (offset >= stored.size) {
    return InvalidArgumentError("offset " + std::to_string(offset) + " is not inside block " +
                                id.ToString() + " (" + std::to_string(stored.size) + " bytes)");
  }
  // A new chunk: readers holding the old one keep the bytes they read.
  ChunkPtr& unit = stored.units[offset / kDigestUnitBytes];
  std::vector<std::byte> bytes(unit->bytes().begin(), unit->bytes().end());
  bytes[offset % kDigestUnitBytes] ^= std::byte{0xFF};
  unit = MakeChunk(bytes);
  return Status::Ok();
}

BlockStatus InMemoryStore::StatusOf(const BlockId& id, const Stored& stored) const {
  return BlockStatus{id,          stored.level,   Tier::kDisk,
                     stored.size, stored.version, BlockDigestOf(stored.unit_digests)};
}

void InMemoryStore::Commit(const BlockId& id, Stored stored) {
  auto old = blocks_.find(id);
  if (old != blocks_.end()) committed_bytes_ -= old->second.size;
  committed_bytes_ += stored.size;
  blocks_.insert_or_assign(id, std::move(stored));
}

}  // namespace bm::testing
