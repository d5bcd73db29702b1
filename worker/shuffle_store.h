#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/chunk.h"
#include "common/status.h"

namespace bm {

// The shuffle partitions this worker holds (PROTOCOL.md, "Shuffles"): for each partition the
// master assigned it, one stream of the pieces mappers pushed, in arrival order, each with its
// map, attempt, sequence number and digest.
//
// - A piece pushed again (the same map attempt, partition and sequence: a retried push) is
//   kept once; a piece after a gap in its sequence is refused, so a pusher resends in order.
// - A push is all or nothing: checked whole, then appended.
// - Reads return the pieces of the map attempts the reader names (the committed ones, which
//   the master knows), so an attempt that never committed or lost the race to commit is never
//   read; each piece's bytes are checked against its digest on the way in.
// - Memory is bounded: a push that would pass `memory_bytes` is refused as unavailable (the
//   pusher backs off and retries), never stored past the bound.
//
// Not thread-safe: owned by the worker's loop.
class ShuffleStore {
 public:
  struct Limits {
    uint64_t memory_bytes = uint64_t{256} << 20;
  };
  // One piece of a push; `bytes` is borrowed for the call. With `owner` (the received frame
  // the bytes lie in), a kept piece keeps the frame instead of a copy of its bytes.
  struct Piece {
    uint32_t partition = 0;
    uint32_t sequence = 0;
    uint64_t digest = 0;
    std::span<const std::byte> bytes;
    ChunkPtr owner{};
  };
  // One piece of a read: `bytes` lie in `chunk`, which keeps them valid (and unchanged) for as
  // long as it is held, also after the shuffle is removed, so a reply can send them without a
  // copy.
  struct StoredPiece {
    uint32_t map = 0;
    uint32_t sequence = 0;
    uint64_t digest = 0;
    std::span<const std::byte> bytes;
    ChunkPtr chunk;
    uint64_t cursor = 0;  // where a read starting at this piece starts
  };
  struct Page {
    std::vector<StoredPiece> pieces;
    uint64_t next_cursor = 0;
    bool end = false;
  };
  // What a partition holds, for status pages.
  struct PartitionStats {
    uint64_t pieces = 0;
    uint64_t bytes = 0;
  };

  ShuffleStore(std::string worker_id, Limits limits)
      : worker_id_(std::move(worker_id)), limits_(limits) {}

  // The master's shuffleAssigned: the partitions of the shuffle this worker holds from now on
  // (their pieces are kept; partitions no longer listed are dropped), its map count and the
  // tenant that owns it (empty: any sender may push).
  void Assign(uint64_t shuffle_id, uint32_t maps, std::vector<uint32_t> partitions,
              std::string owner);
  // The master's removeShuffle: drops the shuffle's pieces. Unknown shuffles are ignored.
  void Remove(uint64_t shuffle_id);

  // Appends the pieces of one map attempt. `tenant` is the sender's (empty: not restricted).
  // kUnavailable: the shuffle is not (yet) assigned here, or memory is full (retry later);
  // kInvalidArgument: a partition not held here, a map out of range, a sequence gap;
  // kPermissionDenied: another tenant's shuffle; kDataLoss: a piece whose bytes do not match
  // its digest (damaged on the way: push it again).
  Status Push(uint64_t shuffle_id, uint32_t map, uint32_t attempt, std::span<const Piece> pieces,
              const std::string& tenant);

  // The pieces of `partition` from `cursor` on whose (map, attempt) is in `attempts` (map ->
  // its committed attempt), about `max_bytes` of them (at least one when there is one).
  // kNotFound when the shuffle or partition is not held here.
  Result<Page> Read(uint64_t shuffle_id, uint32_t partition,
                    const std::unordered_map<uint32_t, uint32_t>& attempts, uint64_t cursor,
                    uint64_t max_bytes) const;

  uint64_t memory_used() const { return memory_used_; }
  // Pieces and bytes appended since the store started (repeated pieces not counted).
  uint64_t pieces_kept() const { return pieces_kept_; }
  uint64_t bytes_kept() const { return bytes_kept_; }
  size_t shuffle_count() const { return shuffles_.size(); }
  Result<PartitionStats> Stats(uint64_t shuffle_id, uint32_t partition) const;

 private:
  // A partition's stream: the entries in arrival order, their bytes in chunks that never move.
  // A buffer pieces are appended to: the bytes a piece took never change again, so the chunk
  // is immutable as far as any holder of a piece's bytes can tell.
  class AppendChunk;
  struct Entry {
    uint32_t map;
    uint32_t attempt;
    uint32_t sequence;
    uint64_t digest;
    const std::byte* data;
    uint32_t length;
    uint32_t chunk;  // index into Partition::chunks
  };
  struct Partition {
    std::vector<Entry> entries;
    // The chunks its pieces lie in: ones pieces are copied into, and frames kept whole.
    std::vector<ChunkPtr> chunks;
    std::shared_ptr<AppendChunk> open;  // the chunk copies go into; chunks[open_index]
    uint32_t open_index = 0;
    size_t chunk_used = 0;      // bytes used of `open`
    size_t chunk_capacity = 0;  // its size
    uint64_t bytes = 0;         // counted against the bound: chunks allocated, frames' pieces
    // The next sequence expected of each map attempt: (map << 32 | attempt) -> sequence.
    std::unordered_map<uint64_t, uint32_t> next_sequence;
  };
  struct Shuffle {
    uint32_t maps = 0;
    std::string owner;
    std::map<uint32_t, Partition> partitions;  // the ones held here
  };

  // Copies `bytes` into the partition's open chunk (its index is then the piece's); a new
  // chunk takes at most `room` (at least the piece).
  const std::byte* Append(Partition& partition, std::span<const std::byte> bytes, uint64_t room);
  uint64_t BytesOf(const Shuffle& shuffle) const;

  const std::string worker_id_;
  const Limits limits_;
  std::unordered_map<uint64_t, Shuffle> shuffles_;
  uint64_t memory_used_ = 0;
  uint64_t pieces_kept_ = 0;
  uint64_t bytes_kept_ = 0;
};

}  // namespace bm
