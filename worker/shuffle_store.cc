#include "worker/shuffle_store.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/digest.h"

namespace bm {
namespace {

// Pieces are copied into chunks that double from the first size to the last (a piece larger
// than a chunk gets one of its own), so a partition of many small pieces costs few
// allocations, a small partition little memory, and no piece ever moves.
constexpr size_t kFirstChunkBytes = size_t{64} << 10;
constexpr size_t kLastChunkBytes = size_t{1} << 20;

uint64_t AttemptKey(uint32_t map, uint32_t attempt) { return (uint64_t{map} << 32) | attempt; }

std::string Named(uint64_t shuffle_id) { return "shuffle " + std::to_string(shuffle_id); }

}  // namespace

class ShuffleStore::AppendChunk final : public Chunk {
 public:
  explicit AppendChunk(size_t capacity)
      : data_(std::make_unique_for_overwrite<std::byte[]>(capacity)), capacity_(capacity) {}
  // The whole buffer; holders only ever look at bytes already appended.
  std::span<const std::byte> bytes() const override { return {data_.get(), capacity_}; }
  std::byte* data() { return data_.get(); }

 private:
  std::unique_ptr<std::byte[]> data_;
  size_t capacity_;
};

void ShuffleStore::Assign(uint64_t shuffle_id, uint32_t maps, std::vector<uint32_t> partitions,
                          std::string owner) {
  Shuffle& shuffle = shuffles_[shuffle_id];
  shuffle.maps = maps;
  shuffle.owner = std::move(owner);
  std::sort(partitions.begin(), partitions.end());
  for (auto it = shuffle.partitions.begin(); it != shuffle.partitions.end();) {
    if (std::binary_search(partitions.begin(), partitions.end(), it->first)) {
      ++it;
      continue;
    }
    memory_used_ -= it->second.bytes;
    it = shuffle.partitions.erase(it);
  }
  for (uint32_t partition : partitions) shuffle.partitions.try_emplace(partition);
}

void ShuffleStore::Remove(uint64_t shuffle_id) {
  auto known = shuffles_.find(shuffle_id);
  if (known == shuffles_.end()) return;
  memory_used_ -= BytesOf(known->second);
  shuffles_.erase(known);
}

uint64_t ShuffleStore::BytesOf(const Shuffle& shuffle) const {
  uint64_t bytes = 0;
  for (const auto& [id, partition] : shuffle.partitions) bytes += partition.bytes;
  return bytes;
}

Status ShuffleStore::Push(uint64_t shuffle_id, uint32_t map, uint32_t attempt,
                          std::span<const Piece> pieces, const std::string& tenant) {
  auto known = shuffles_.find(shuffle_id);
  if (known == shuffles_.end()) {
    // The master tells a worker its partitions as it registers the shuffle; a push may beat
    // that message here by a moment.
    return UnavailableError(Named(shuffle_id) + " has no partitions on worker " + worker_id_ +
                            " (not registered, or not told yet)");
  }
  Shuffle& shuffle = known->second;
  if (!tenant.empty() && !shuffle.owner.empty() && tenant != shuffle.owner) {
    return PermissionDeniedError(Named(shuffle_id) + " belongs to tenant '" + shuffle.owner +
                                 "'; tenant '" + tenant + "' may not push to it");
  }
  if (map >= shuffle.maps) {
    return InvalidArgumentError(Named(shuffle_id) + " has maps 0.." +
                                std::to_string(shuffle.maps - 1) + "; there is no map " +
                                std::to_string(map));
  }
  // Check everything before anything is appended.
  uint64_t new_bytes = 0;
  std::unordered_map<uint32_t, uint32_t> expected;  // partition -> next sequence in this push
  std::vector<bool> keep(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& piece = pieces[i];
    auto held = shuffle.partitions.find(piece.partition);
    if (held == shuffle.partitions.end()) {
      return InvalidArgumentError("partition " + std::to_string(piece.partition) + " of " +
                                  Named(shuffle_id) + " is not held by worker " + worker_id_);
    }
    auto [next, first] = expected.try_emplace(piece.partition, 0);
    if (first) {
      auto stored = held->second.next_sequence.find(AttemptKey(map, attempt));
      next->second = stored == held->second.next_sequence.end() ? 0 : stored->second;
    }
    if (piece.sequence < next->second) continue;  // held already: a repeated push
    if (piece.sequence > next->second) {
      return InvalidArgumentError("piece " + std::to_string(piece.sequence) + " of map " +
                                  std::to_string(map) + " attempt " + std::to_string(attempt) +
                                  " for partition " + std::to_string(piece.partition) + " of " +
                                  Named(shuffle_id) + " comes before piece " +
                                  std::to_string(next->second) + ": push in order");
    }
    if (DigestOf(piece.bytes) != piece.digest) {
      return DataLossError("piece " + std::to_string(piece.sequence) + " of map " +
                           std::to_string(map) + " for partition " +
                           std::to_string(piece.partition) + " of " + Named(shuffle_id) +
                           " does not match its digest (damaged on the way): push it again");
    }
    ++next->second;
    keep[i] = true;
    new_bytes += piece.bytes.size();
  }
  if (memory_used_ + new_bytes > limits_.memory_bytes) {
    return UnavailableError("worker " + worker_id_ + " holds " + std::to_string(memory_used_) +
                            " bytes of shuffle pieces of at most " +
                            std::to_string(limits_.memory_bytes) + ": push again later");
  }
  uint64_t still_to_come = new_bytes;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (!keep[i]) continue;
    const Piece& piece = pieces[i];
    Partition& partition = shuffle.partitions.at(piece.partition);
    still_to_come -= piece.bytes.size();
    const std::byte* data = nullptr;
    uint32_t chunk = 0;
    if (piece.owner != nullptr) {
      // Kept in the frame it arrived in: no copy, counted by its bytes.
      if (partition.chunks.empty() || partition.chunks.back() != piece.owner) {
        partition.chunks.push_back(piece.owner);
      }
      data = piece.bytes.data();
      chunk = static_cast<uint32_t>(partition.chunks.size() - 1);
      partition.bytes += piece.bytes.size();
      memory_used_ += piece.bytes.size();
    } else {
      // A new chunk may take what the bound leaves once the rest of the push has its room.
      data = Append(partition, piece.bytes, limits_.memory_bytes - memory_used_ - still_to_come);
      chunk = partition.open_index;
    }
    partition.entries.push_back(Entry{map, attempt, piece.sequence, piece.digest, data,
                                      static_cast<uint32_t>(piece.bytes.size()), chunk});
    partition.next_sequence[AttemptKey(map, attempt)] = piece.sequence + 1;
    ++pieces_kept_;
    bytes_kept_ += piece.bytes.size();
  }
  return Status::Ok();
}

const std::byte* ShuffleStore::Append(Partition& partition, std::span<const std::byte> bytes,
                                      uint64_t room) {
  if (partition.open == nullptr || partition.chunk_capacity - partition.chunk_used < bytes.size()) {
    const size_t wanted =
        std::clamp(partition.chunk_capacity * 2, kFirstChunkBytes, kLastChunkBytes);
    const size_t size = std::max<size_t>(bytes.size(), std::min<uint64_t>(wanted, room));
    // Counted whole when allocated: the bound is on memory taken, not on bytes stored.
    partition.open = std::make_shared<AppendChunk>(size);
    partition.open_index = static_cast<uint32_t>(partition.chunks.size());
    partition.chunks.push_back(partition.open);
    partition.chunk_capacity = size;
    partition.chunk_used = 0;
    partition.bytes += size;
    memory_used_ += size;
  }
  std::byte* at = partition.open->data() + partition.chunk_used;
  if (!bytes.empty()) std::memcpy(at, bytes.data(), bytes.size());
  partition.chunk_used += bytes.size();
  return at;
}

Result<ShuffleStore::Page> ShuffleStore::Read(
    uint64_t shuffle_id, uint32_t partition_id,
    const std::unordered_map<uint32_t, uint32_t>& attempts, uint64_t cursor,
    uint64_t max_bytes) const {
  auto known = shuffles_.find(shuffle_id);
  if (known == shuffles_.end()) {
    return NotFoundError(Named(shuffle_id) + " has no partitions on worker " + worker_id_);
  }
  auto held = known->second.partitions.find(partition_id);
  if (held == known->second.partitions.end()) {
    return NotFoundError("partition " + std::to_string(partition_id) + " of " + Named(shuffle_id) +
                         " is not held by worker " + worker_id_);
  }
  const std::vector<Entry>& entries = held->second.entries;
  Page page;
  uint64_t bytes = 0;
  uint64_t at = std::min<uint64_t>(cursor, entries.size());
  for (; at < entries.size(); ++at) {
    const Entry& entry = entries[at];
    auto committed = attempts.find(entry.map);
    if (committed == attempts.end() || committed->second != entry.attempt) continue;
    if (!page.pieces.empty() && bytes + entry.length > max_bytes) break;
    page.pieces.push_back({entry.map, entry.sequence, entry.digest,
                           std::span<const std::byte>(entry.data, entry.length),
                           held->second.chunks[entry.chunk], at});
    bytes += entry.length;
  }
  page.next_cursor = at;
  page.end = at == entries.size();
  return page;
}

Result<ShuffleStore::PartitionStats> ShuffleStore::Stats(uint64_t shuffle_id,
                                                         uint32_t partition_id) const {
  auto known = shuffles_.find(shuffle_id);
  if (known == shuffles_.end()) return NotFoundError(Named(shuffle_id) + " is not held here");
  auto held = known->second.partitions.find(partition_id);
  if (held == known->second.partitions.end()) {
    return NotFoundError("partition " + std::to_string(partition_id) + " is not held here");
  }
  PartitionStats stats;
  stats.pieces = held->second.entries.size();
  for (const Entry& entry : held->second.entries) stats.bytes += entry.length;
  return stats;
}

}  // namespace bm
