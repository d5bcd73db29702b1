#include "worker/shuffle_store.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/core/digest.h"

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

ShuffleStore::Partition& ShuffleStore::NewPartition(Shuffle& shuffle, uint64_t shuffle_id,
                                                    uint32_t partition_id) {
  Partition& partition = shuffle.partitions[partition_id];
  partition.incarnation = next_incarnation_++;
  // Spread over the disks by shuffle and partition.
  if (limits_.disks > 0) {
    partition.disk =
        static_cast<uint32_t>((shuffle_id * 0x9E3779B97F4A7C15ull + partition_id) % limits_.disks);
  }
  return partition;
}

void ShuffleStore::Drop(uint64_t shuffle_id, uint32_t partition_id, const Partition& partition) {
  memory_used_ -= partition.bytes;
  clean_bytes_ -= partition.clean_bytes;
  waiting_.erase({shuffle_id, partition_id});
  waiting_for_room_.erase({shuffle_id, partition_id});
  clean_.erase({shuffle_id, partition_id});
}

void ShuffleStore::Evict(uint64_t needed) {
  uint64_t freed = 0;
  for (auto it = clean_.begin(); it != clean_.end() && freed < needed;) {
    Partition& partition = shuffles_.at(it->first).partitions.at(it->second);
    while (freed < needed && !partition.chunks.empty() &&
           partition.first_chunk < partition.clean_chunks_end) {
      const uint64_t counted = partition.chunks.front().counted;
      partition.chunks.pop_front();
      ++partition.first_chunk;
      partition.bytes -= counted;
      partition.clean_bytes -= counted;
      memory_used_ -= counted;
      clean_bytes_ -= counted;
      freed += counted;
    }
    if (partition.first_chunk >= partition.clean_chunks_end) {
      it = clean_.erase(it);
    } else {
      ++it;
    }
  }
}

bool ShuffleStore::InMemory(const Partition& partition, size_t i) {
  const Entry& entry = partition.entries[i];
  return entry.data != nullptr && entry.chunk >= partition.first_chunk;
}

std::vector<ShuffleStore::DroppedFile> ShuffleStore::Assign(uint64_t shuffle_id, uint32_t maps,
                                                            std::vector<uint32_t> partitions,
                                                            std::string owner, bool write_soon) {
  Shuffle& shuffle = shuffles_[shuffle_id];
  shuffle.maps = maps;
  shuffle.write_soon = write_soon;
  shuffle.owner = std::move(owner);
  std::sort(partitions.begin(), partitions.end());
  std::vector<DroppedFile> dropped;
  for (auto it = shuffle.partitions.begin(); it != shuffle.partitions.end();) {
    if (std::binary_search(partitions.begin(), partitions.end(), it->first)) {
      ++it;
      continue;
    }
    if (it->second.handed > 0) dropped.push_back({it->second.disk, it->first});
    Drop(shuffle_id, it->first, it->second);
    it = shuffle.partitions.erase(it);
  }
  for (uint32_t partition : partitions) {
    if (shuffle.partitions.count(partition) == 0) NewPartition(shuffle, shuffle_id, partition);
  }
  return dropped;
}

void ShuffleStore::Remove(uint64_t shuffle_id) {
  auto known = shuffles_.find(shuffle_id);
  if (known == shuffles_.end()) return;
  for (const auto& [id, partition] : known->second.partitions) Drop(shuffle_id, id, partition);
  shuffles_.erase(known);
}

void ShuffleStore::Restore(const LoadedShuffle& loaded) {
  Shuffle& shuffle = shuffles_[loaded.id];
  shuffle.maps = loaded.maps;
  shuffle.owner = loaded.owner;
  for (const LoadedShufflePartition& kept : loaded.partitions) {
    if (shuffle.partitions.count(kept.partition) != 0) continue;  // one file per partition
    Partition& partition = NewPartition(shuffle, loaded.id, kept.partition);
    partition.disk = kept.disk;
    partition.entries.reserve(kept.records.size());
    for (const ShuffleFileRecord& record : kept.records) {
      partition.entries.push_back(Entry{record.map, record.attempt, record.sequence, record.length,
                                        record.digest, nullptr, 0, record.offset});
      uint32_t& next = partition.next_sequence[AttemptKey(record.map, record.attempt)];
      next = std::max(next, record.sequence + 1);
      partition.stream_bytes += record.length;
    }
    partition.flushed = partition.handed = partition.entries.size();
    partition.file_end = kept.file_bytes;
  }
}

std::vector<uint64_t> ShuffleStore::ShuffleIds() const {
  std::vector<uint64_t> ids;
  ids.reserve(shuffles_.size());
  for (const auto& [id, shuffle] : shuffles_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

Status ShuffleStore::Push(uint64_t shuffle_id, uint32_t map, uint32_t attempt,
                          std::span<const Piece> pieces, const std::string& tenant,
                          std::vector<uint32_t>* full) {
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
  std::set<uint32_t> refused;                       // streams past the split size
  std::vector<bool> keep(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& piece = pieces[i];
    auto held = shuffle.partitions.find(piece.partition);
    if (held == shuffle.partitions.end()) {
      return InvalidArgumentError("partition " + std::to_string(piece.partition) + " of " +
                                  Named(shuffle_id) + " is not held by worker " + worker_id_);
    }
    if (!held->second.failed.ok()) {
      return Status(held->second.failed.code(), "partition " + std::to_string(piece.partition) +
                                                    " of " + Named(shuffle_id) +
                                                    " cannot be kept on worker " + worker_id_ +
                                                    "'s disk: " + held->second.failed.message());
    }
    auto [next, first] = expected.try_emplace(piece.partition, 0);
    if (first) {
      auto stored = held->second.next_sequence.find(AttemptKey(map, attempt));
      // Holding nothing of the attempt yet: a worker that took the partition over from a lost
      // one starts where the writer says; anything later is a piece that went missing.
      next->second =
          stored == held->second.next_sequence.end() ? piece.first_sequence : stored->second;
    }
    if (piece.sequence < next->second) continue;  // held already: a repeated push
    if (refused.contains(piece.partition)) continue;
    if (limits_.split_bytes > 0 && held->second.stream_bytes >= limits_.split_bytes) {
      refused.insert(piece.partition);  // full: its pieces go to the partition's next stream
      continue;
    }
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
  if (full != nullptr) full->assign(refused.begin(), refused.end());
  if (memory_used_ + new_bytes > limits_.memory_bytes) {
    Evict(memory_used_ + new_bytes - limits_.memory_bytes);  // written pieces make room
  }
  if (memory_used_ + new_bytes > limits_.memory_bytes) {
    return UnavailableError("worker " + worker_id_ + " holds " + std::to_string(memory_used_) +
                            " bytes of shuffle pieces in memory of at most " +
                            std::to_string(limits_.memory_bytes) + ": push again later");
  }
  const TimePoint now = clock_.Now();
  uint64_t still_to_come = new_bytes;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (!keep[i]) continue;
    const Piece& piece = pieces[i];
    Partition& partition = shuffle.partitions.at(piece.partition);
    still_to_come -= piece.bytes.size();
    const std::byte* data = nullptr;
    uint64_t chunk = 0;
    if (piece.owner != nullptr) {
      // Kept in the frame it arrived in: no copy, counted by its bytes.
      if (partition.chunks.empty() || partition.chunks.back().chunk != piece.owner) {
        partition.chunks.push_back(HeldChunk{piece.owner, 0});
      }
      partition.chunks.back().counted += piece.bytes.size();
      data = piece.bytes.data();
      chunk = partition.first_chunk + partition.chunks.size() - 1;
      partition.bytes += piece.bytes.size();
      memory_used_ += piece.bytes.size();
    } else {
      // A new chunk may take what the bound leaves once the rest of the push has its room.
      data = Append(partition, piece.bytes, limits_.memory_bytes - memory_used_ - still_to_come);
      chunk = partition.open_chunk;
    }
    partition.entries.push_back(Entry{map, attempt, piece.sequence,
                                      static_cast<uint32_t>(piece.bytes.size()), piece.digest, data,
                                      chunk, 0});
    partition.next_sequence[AttemptKey(map, attempt)] = piece.sequence + 1;
    partition.stream_bytes += piece.bytes.size();
    if (limits_.disks > 0) {
      partition.waiting_bytes += piece.bytes.size();
      if (!partition.waiting_since) partition.waiting_since = now;
      WaitingSet(shuffle).insert({shuffle_id, piece.partition});
    }
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
    partition.open_chunk = partition.first_chunk + partition.chunks.size();
    partition.chunks.push_back(HeldChunk{partition.open, size});
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

bool ShuffleStore::Due(const Shuffle& shuffle, const Partition& partition, TimePoint now,
                       bool all) const {
  if (partition.writing || partition.handed == partition.entries.size()) return false;
  if (!partition.failed.ok() && now < partition.retry_at) return false;
  if ((memory_used_ - clean_bytes_) * 2 >= limits_.memory_bytes) return true;  // room needed
  if (!shuffle.write_soon) return false;  // memory only: written when room is needed
  return all || partition.waiting_bytes >= limits_.flush_bytes ||
         (partition.waiting_since && now - *partition.waiting_since >= limits_.flush_delay);
}

ShuffleStore::Flush ShuffleStore::Hand(uint64_t shuffle_id, const Shuffle& shuffle,
                                       uint32_t partition_id, Partition& partition) {
  Flush flush{.shuffle_id = shuffle_id,
              .partition = partition_id,
              .disk = partition.disk,
              .maps = shuffle.maps,
              .owner = shuffle.owner,
              .offset = partition.file_end,
              .incarnation = partition.incarnation};
  uint64_t at = partition.file_end;
  flush.records.reserve(partition.entries.size() - partition.handed);
  for (size_t i = partition.handed; i < partition.entries.size(); ++i) {
    Entry& entry = partition.entries[i];
    entry.file_offset = at + ShuffleFiles::kRecordHeaderBytes;
    at = entry.file_offset + entry.length;
    flush.records.push_back(ShuffleRecord{entry.map, entry.attempt, entry.sequence, entry.digest,
                                          std::span<const std::byte>(entry.data, entry.length)});
  }
  for (const HeldChunk& held : partition.chunks) flush.hold.push_back(held.chunk);
  // Later copies go to a new chunk, so every chunk the batch covers holds written pieces only
  // once it is written.
  partition.open.reset();
  flush.entries_end = partition.entries.size();
  flush.chunks_end = partition.first_chunk + partition.chunks.size();
  flush.file_end = at;
  partition.handed = partition.entries.size();
  partition.writing = true;
  partition.waiting_bytes = 0;
  partition.waiting_since.reset();
  return flush;
}

std::vector<ShuffleStore::Flush> ShuffleStore::TakeFlushes(bool all) {
  std::vector<Flush> flushes;
  if (limits_.disks == 0) return flushes;
  const TimePoint now = clock_.Now();
  const bool room_needed = (memory_used_ - clean_bytes_) * 2 >= limits_.memory_bytes;
  for (std::set<PartitionKey>* waiting : {&waiting_, &waiting_for_room_}) {
    if (waiting == &waiting_for_room_ && !room_needed) break;
    for (auto it = waiting->begin(); it != waiting->end();) {
      Shuffle& shuffle = shuffles_.at(it->first);
      Partition& partition = shuffle.partitions.at(it->second);
      if (!Due(shuffle, partition, now, all)) {
        ++it;
        continue;
      }
      flushes.push_back(Hand(it->first, shuffle, it->second, partition));
      it = waiting->erase(it);
    }
  }
  return flushes;
}

void ShuffleStore::Flushed(const Flush& flush, const Status& result) {
  auto known = shuffles_.find(flush.shuffle_id);
  if (known == shuffles_.end()) return;
  auto held = known->second.partitions.find(flush.partition);
  if (held == known->second.partitions.end() || held->second.incarnation != flush.incarnation) {
    return;  // dropped meanwhile (its file is removed after this write)
  }
  Partition& partition = held->second;
  partition.writing = false;
  if (!result.ok()) {
    // Its pieces stay in memory and are handed again, to the same offsets, after a pause.
    partition.failed = result;
    partition.retry_at = clock_.Now() + limits_.retry_delay;
    partition.handed = partition.flushed;
    partition.waiting_bytes = 0;
    for (size_t i = partition.flushed; i < partition.entries.size(); ++i) {
      partition.waiting_bytes += partition.entries[i].length;
    }
    partition.waiting_since = clock_.Now();
    WaitingSet(known->second).insert({flush.shuffle_id, flush.partition});
    return;
  }
  partition.failed = Status::Ok();
  partition.flushed = flush.entries_end;
  partition.file_end = flush.file_end;
  bytes_flushed_ += flush.file_end - flush.offset;
  // Its chunks stay, read from, until their room is needed.
  for (uint64_t id = std::max(partition.first_chunk, partition.clean_chunks_end);
       id < flush.chunks_end; ++id) {
    const uint64_t counted = partition.chunks[id - partition.first_chunk].counted;
    partition.clean_bytes += counted;
    clean_bytes_ += counted;
  }
  partition.clean_chunks_end = std::max(partition.clean_chunks_end, flush.chunks_end);
  if (partition.clean_bytes > 0) clean_.insert({flush.shuffle_id, flush.partition});
}

std::optional<TimePoint> ShuffleStore::NextFlush() const {
  std::optional<TimePoint> next;
  for (const auto& [shuffle_id, partition_id] : waiting_) {
    const Shuffle& shuffle = shuffles_.at(shuffle_id);
    const Partition& partition = shuffle.partitions.at(partition_id);
    if (partition.writing || !partition.waiting_since) continue;
    TimePoint due = *partition.waiting_since + limits_.flush_delay;
    if (!partition.failed.ok()) due = std::max(due, partition.retry_at);
    if (!next || due < *next) next = due;
  }
  return next;
}

Result<ShuffleStore::Page> ShuffleStore::Read(
    uint64_t shuffle_id, uint32_t partition_id,
    const std::unordered_map<uint32_t, uint32_t>& attempts, uint64_t cursor, uint64_t max_bytes,
    uint64_t max_memory_bytes) const {
  auto known = shuffles_.find(shuffle_id);
  if (known == shuffles_.end()) {
    return NotFoundError(Named(shuffle_id) + " has no partitions on worker " + worker_id_);
  }
  auto held = known->second.partitions.find(partition_id);
  if (held == known->second.partitions.end()) {
    return NotFoundError("partition " + std::to_string(partition_id) + " of " + Named(shuffle_id) +
                         " is not held by worker " + worker_id_);
  }
  const Partition& partition = held->second;
  if (cursor < partition.flushed && !InMemory(partition, cursor)) {
    return ReadFile(partition, attempts, cursor, max_bytes);
  }
  max_bytes = std::min(max_bytes, max_memory_bytes);
  const std::vector<Entry>& entries = partition.entries;
  Page page;
  uint64_t bytes = 0;
  uint64_t at = std::min<uint64_t>(cursor, entries.size());
  for (; at < entries.size(); ++at) {
    if (at < partition.flushed && !InMemory(partition, at)) break;  // from the file: next page
    const Entry& entry = entries[at];
    auto committed = attempts.find(entry.map);
    if (committed == attempts.end() || committed->second != entry.attempt) continue;
    if (!page.pieces.empty() && bytes + entry.length > max_bytes) break;
    page.pieces.push_back({.map = entry.map,
                           .sequence = entry.sequence,
                           .digest = entry.digest,
                           .bytes = std::span<const std::byte>(entry.data, entry.length),
                           .chunk = partition.chunks[entry.chunk - partition.first_chunk].chunk,
                           .cursor = at,
                           .length = entry.length});
    bytes += entry.length;
  }
  page.next_cursor = at;
  page.end = at == entries.size();
  return page;
}

std::vector<ShuffleStore::PieceRun> ShuffleStore::RunsOf(std::span<const StoredPiece> pieces,
                                                         size_t max_run_bytes) {
  std::vector<PieceRun> runs;
  const StoredPiece* start = nullptr;  // the first piece of the last run with bytes
  size_t run_bytes = 0;
  auto close = [&] {
    if (start == nullptr) return;
    const size_t offset = static_cast<size_t>(start->bytes.data() - start->chunk->bytes().data());
    runs.back().bytes = SliceChunk(start->chunk, offset, run_bytes);
  };
  for (const StoredPiece& piece : pieces) {
    if (piece.bytes.empty()) {
      if (runs.empty()) runs.emplace_back();
      ++runs.back().pieces;
      continue;
    }
    const bool continues = start != nullptr && piece.chunk == start->chunk &&
                           start->bytes.data() + run_bytes == piece.bytes.data() &&
                           run_bytes + piece.bytes.size() <= max_run_bytes;
    if (!continues) {
      close();
      runs.emplace_back();
      start = &piece;
      run_bytes = 0;
    }
    run_bytes += piece.bytes.size();
    ++runs.back().pieces;
  }
  close();
  return runs;
}

Result<ShuffleStore::Page> ShuffleStore::ReadFile(
    const Partition& partition, const std::unordered_map<uint32_t, uint32_t>& attempts,
    uint64_t cursor, uint64_t max_bytes) const {
  const std::vector<Entry>& entries = partition.entries;
  Page page;
  uint64_t bytes = 0;
  uint64_t first = 0;  // file offset of the first piece's bytes
  uint64_t last = 0;   // and the end of the last one's
  uint64_t at = cursor;
  for (; at < partition.flushed; ++at) {
    const Entry& entry = entries[at];
    // The range read also carries the headers and the pieces of other attempts between:
    // bounded too.
    if (!page.pieces.empty() && (entry.file_offset + entry.length - first > 2 * max_bytes)) {
      break;
    }
    auto committed = attempts.find(entry.map);
    if (committed == attempts.end() || committed->second != entry.attempt) continue;
    if (!page.pieces.empty() && bytes + entry.length > max_bytes) break;
    if (page.pieces.empty()) first = entry.file_offset;
    last = entry.file_offset + entry.length;
    page.pieces.push_back({.map = entry.map,
                           .sequence = entry.sequence,
                           .digest = entry.digest,
                           .cursor = at,
                           .length = entry.length,
                           .file_offset = entry.file_offset});
    bytes += entry.length;
  }
  page.next_cursor = at;
  page.end = at == entries.size();
  if (!page.pieces.empty()) {
    page.file = FileRange{.disk = partition.disk, .offset = first, .length = last - first};
  }
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
  stats.bytes_on_disk = held->second.file_end;
  return stats;
}

}  // namespace bm
