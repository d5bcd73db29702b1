#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "blockmgr/chunk.h"
#include "blockmgr/status.h"
#include "common/core/clock.h"
#include "worker/shuffle_files.h"

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
// - With disks, pieces are also written to a file per partition (ShuffleFiles): the store
//   hands the loop batches to write (TakeFlushes) once a partition has `flush_bytes` waiting,
//   its oldest waiting piece is `flush_delay` old, or unwritten pieces take half the memory.
//   Written pieces stay in memory, read from there, until a push needs their room: then the
//   oldest written chunks are let go and reads of their pieces come from the file (a Page
//   names the range to read). So the bound holds unwritten pieces only back; a push is refused
//   only while those fill it. A partition whose write failed refuses pushes with the failure
//   (kOutOfSpace for a full disk) and is written again after `retry_delay`.
//
// Not thread-safe: owned by the worker's loop. It touches no file itself.
class ShuffleStore {
 public:
  struct Limits {
    uint64_t memory_bytes = uint64_t{256} << 20;
    uint32_t disks = 0;  // 0: memory only
    uint64_t flush_bytes = uint64_t{4} << 20;
    Duration flush_delay = std::chrono::milliseconds(200);
    Duration retry_delay = std::chrono::seconds(1);
    // A stream holding this many bytes takes no new pieces: the partition continues in a new
    // stream elsewhere (0: no limit).
    uint64_t split_bytes = uint64_t{256} << 20;
  };
  // One piece of a push; `bytes` is borrowed for the call. With `owner` (the received frame
  // the bytes lie in), a kept piece keeps the frame instead of a copy of its bytes.
  struct Piece {
    uint32_t partition = 0;
    uint32_t sequence = 0;
    // The first sequence the writer sends this worker for the piece's (attempt, partition):
    // where a worker holding nothing of it yet starts (PushedPiece.firstSequence).
    uint32_t first_sequence = 0;
    uint64_t digest = 0;
    std::span<const std::byte> bytes;
    ChunkPtr owner{};
  };
  // One piece of a read. In memory: `bytes` lie in `chunk`, which keeps them valid (and
  // unchanged) for as long as it is held, also after the shuffle is removed, so a reply can send
  // them without a copy. In the partition's file (Page::file set): `bytes` is empty and the
  // piece's `length` bytes start at `file_offset`.
  struct StoredPiece {
    uint32_t map = 0;
    uint32_t sequence = 0;
    uint64_t digest = 0;
    std::span<const std::byte> bytes{};
    ChunkPtr chunk{};
    uint64_t cursor = 0;  // where a read starting at this piece starts
    uint32_t length = 0;
    uint64_t file_offset = 0;
  };
  // The range of a partition file a page's pieces lie in.
  struct FileRange {
    uint32_t disk = 0;
    uint64_t offset = 0;
    uint64_t length = 0;
  };
  struct Page {
    std::vector<StoredPiece> pieces;
    uint64_t next_cursor = 0;
    bool end = false;
    std::optional<FileRange> file;  // set: every piece is read from this range of the file
  };
  // Pieces of a page whose bytes lie back to back in one chunk, sent as one slice of it.
  struct PieceRun {
    ChunkPtr bytes;  // null for pieces with no bytes
    size_t pieces = 0;
  };
  // What a partition holds, for status pages.
  struct PartitionStats {
    uint64_t pieces = 0;
    uint64_t bytes = 0;
    uint64_t bytes_on_disk = 0;
  };
  // A batch of one partition's pieces to write at `offset` of its file. Its records' bytes stay
  // valid while `hold` is held. Hand it back to Flushed with the write's result.
  struct Flush {
    uint64_t shuffle_id = 0;
    uint32_t partition = 0;
    uint32_t disk = 0;
    uint32_t maps = 0;
    std::string owner{};
    uint64_t offset = 0;
    std::vector<ShuffleRecord> records{};
    std::vector<ChunkPtr> hold{};
    // Which partition, entries and chunks the batch covers (for Flushed).
    uint64_t incarnation = 0;
    size_t entries_end = 0;
    uint64_t chunks_end = 0;
    uint64_t file_end = 0;
  };
  // A partition file no longer needed (its partition moved to another worker).
  struct DroppedFile {
    uint32_t disk = 0;
    uint32_t partition = 0;
  };

  ShuffleStore(std::string worker_id, Limits limits, const Clock& clock)
      : worker_id_(std::move(worker_id)), limits_(limits), clock_(clock) {}

  // The master's shuffleAssigned: the partitions of the shuffle this worker holds from now on
  // (their pieces are kept; partitions no longer listed are dropped, and their files returned
  // for removal), its map count and the tenant that owns it (empty: any sender may push).
  // `write_soon`: its level has a disk, so its pieces are written as they fall due; otherwise
  // only when unwritten pieces take half the memory (and not on `all`).
  std::vector<DroppedFile> Assign(uint64_t shuffle_id, uint32_t maps,
                                  std::vector<uint32_t> partitions, std::string owner,
                                  bool write_soon = true);
  // The master's removeShuffle: drops the shuffle's pieces (the caller removes its files).
  // Unknown shuffles are ignored.
  void Remove(uint64_t shuffle_id);
  // What the disks kept across a restart (before the worker serves; the master's next
  // shuffleAssigned confirms the partitions or drops them).
  void Restore(const LoadedShuffle& loaded);

  // Appends the pieces of one map attempt. `tenant` is the sender's (empty: not restricted).
  // kUnavailable: the shuffle is not (yet) assigned here, or memory is full (retry later);
  // kInvalidArgument: a partition not held here, a map out of range, a sequence gap;
  // kPermissionDenied: another tenant's shuffle; kDataLoss: a piece whose bytes do not match
  // its digest (damaged on the way: push it again); the failure of the partition's last write
  // to disk (kOutOfSpace: the disk is full) until a write succeeds. The new pieces of streams
  // already holding `split_bytes` are not taken: those streams are added to `full` (sorted),
  // and the rest of the push is.
  Status Push(uint64_t shuffle_id, uint32_t map, uint32_t attempt, std::span<const Piece> pieces,
              const std::string& tenant, std::vector<uint32_t>* full = nullptr);

  // The in-memory `pieces`' bytes as slices of their chunks (no copy), in order: adjacent
  // pieces of one chunk share a slice of at most `max_run_bytes` (a longer piece has its own).
  static std::vector<PieceRun> RunsOf(std::span<const StoredPiece> pieces, size_t max_run_bytes);

  // The pieces of `partition` from `cursor` on whose (map, attempt) is in `attempts` (map ->
  // its committed attempt), about `max_bytes` of them (at least one when there is one), all in
  // memory or all in the file; of pieces in memory, at most `max_memory_bytes` (a page sent in
  // one packet). kNotFound when the shuffle or partition is not held here.
  Result<Page> Read(uint64_t shuffle_id, uint32_t partition,
                    const std::unordered_map<uint32_t, uint32_t>& attempts, uint64_t cursor,
                    uint64_t max_bytes, uint64_t max_memory_bytes = UINT64_MAX) const;

  // The partitions due to be written (all that have pieces waiting, with `all`), as batches;
  // none while memory only. A partition has one batch in flight at a time.
  std::vector<Flush> TakeFlushes(bool all = false);
  // The write of `flush` finished with `result`. A partition removed meanwhile is ignored.
  void Flushed(const Flush& flush, const Status& result);
  // When the next partition falls due by age (nullopt: none waits).
  std::optional<TimePoint> NextFlush() const;

  uint64_t memory_used() const { return memory_used_; }
  // Of memory_used(): pieces written to their files, let go when room is needed.
  uint64_t memory_written() const { return clean_bytes_; }
  // Pieces and bytes appended since the store started (repeated pieces not counted).
  uint64_t pieces_kept() const { return pieces_kept_; }
  uint64_t bytes_kept() const { return bytes_kept_; }
  uint64_t bytes_flushed() const { return bytes_flushed_; }
  size_t shuffle_count() const { return shuffles_.size(); }
  std::vector<uint64_t> ShuffleIds() const;
  Result<PartitionStats> Stats(uint64_t shuffle_id, uint32_t partition) const;

 private:
  // A buffer pieces are appended to: the bytes a piece took never change again, so the chunk
  // is immutable as far as any holder of a piece's bytes can tell.
  class AppendChunk;
  struct Entry {
    uint32_t map;
    uint32_t attempt;
    uint32_t sequence;
    uint32_t length;
    uint64_t digest;
    const std::byte* data;  // while in memory
    uint64_t chunk;         // the id of the chunk `data` lies in
    uint64_t file_offset;   // of its bytes in the file, once handed to a write
  };
  struct HeldChunk {
    ChunkPtr chunk;
    uint64_t counted;  // bytes it counts against the bound
  };
  // A partition's stream: the entries in arrival order; the first `flushed` are in the file,
  // the rest in chunks that never move.
  struct Partition {
    uint64_t incarnation = 0;
    std::vector<Entry> entries;
    // Chunks with ids below this hold written pieces only: they may be let go (Evict).
    uint64_t clean_chunks_end = 0;
    uint64_t clean_bytes = 0;  // what those still held count
    // The chunks the entries not yet written lie in, oldest first: ones pieces are copied
    // into, and frames kept whole. chunks[i] has the id first_chunk + i.
    std::deque<HeldChunk> chunks;
    uint64_t first_chunk = 0;
    std::shared_ptr<AppendChunk> open;  // the chunk copies go into (id open_chunk), or none
    uint64_t open_chunk = 0;
    size_t chunk_used = 0;      // bytes used of `open`
    size_t chunk_capacity = 0;  // its size
    uint64_t bytes = 0;         // counted against the bound: chunks allocated, frames' pieces
    uint64_t stream_bytes = 0;  // of all its pieces, in memory and on disk (the split size)
    // The next sequence expected of each map attempt: (map << 32 | attempt) -> sequence.
    std::unordered_map<uint64_t, uint32_t> next_sequence;
    // On disk.
    uint32_t disk = 0;
    size_t flushed = 0;     // entries in the file
    size_t handed = 0;      // entries in the file or in the write in flight
    uint64_t file_end = 0;  // where the next write goes
    bool writing = false;
    uint64_t waiting_bytes = 0;  // of entries [handed, end)
    std::optional<TimePoint> waiting_since;
    Status failed;
    TimePoint retry_at{};
  };
  struct Shuffle {
    uint32_t maps = 0;
    bool write_soon = true;
    std::string owner;
    std::map<uint32_t, Partition> partitions;  // the ones held here
  };
  using PartitionKey = std::pair<uint64_t, uint32_t>;  // (shuffle, partition)

  // Copies `bytes` into the partition's open chunk (the piece's chunk is then open_chunk); a
  // new chunk takes at most `room` (at least the piece).
  const std::byte* Append(Partition& partition, std::span<const std::byte> bytes, uint64_t room);
  Partition& NewPartition(Shuffle& shuffle, uint64_t shuffle_id, uint32_t partition);
  void Drop(uint64_t shuffle_id, uint32_t partition_id, const Partition& partition);
  // Lets go of written chunks, oldest first per partition, until `needed` bytes are free or
  // none is left to let go.
  void Evict(uint64_t needed);
  // Whether entries[i] can be read from memory.
  static bool InMemory(const Partition& partition, size_t i);
  bool Due(const Shuffle& shuffle, const Partition& partition, TimePoint now, bool all) const;
  Flush Hand(uint64_t shuffle_id, const Shuffle& shuffle, uint32_t partition_id,
             Partition& partition);
  Result<Page> ReadFile(const Partition& partition,
                        const std::unordered_map<uint32_t, uint32_t>& attempts, uint64_t cursor,
                        uint64_t max_bytes) const;

  const std::string worker_id_;
  const Limits limits_;
  const Clock& clock_;
  std::unordered_map<uint64_t, Shuffle> shuffles_;
  // Partitions with entries not handed to a write: of shuffles written soon, and of
  // memory-only ones (looked at only when room is needed, so a loop turn does not scan them).
  std::set<PartitionKey> waiting_;
  std::set<PartitionKey> waiting_for_room_;
  std::set<PartitionKey>& WaitingSet(const Shuffle& shuffle) {
    return shuffle.write_soon ? waiting_ : waiting_for_room_;
  }
  // Partitions holding written chunks (clean_bytes > 0), and what those count in all.
  std::set<PartitionKey> clean_;
  uint64_t clean_bytes_ = 0;
  uint64_t next_incarnation_ = 1;
  uint64_t memory_used_ = 0;
  uint64_t pieces_kept_ = 0;
  uint64_t bytes_kept_ = 0;
  uint64_t bytes_flushed_ = 0;
};

}  // namespace bm
