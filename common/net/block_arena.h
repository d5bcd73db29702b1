#pragma once

// The small-block arena of same-host reads (docs/storage.md "Same-host reads"): one shared
// memory file per reader scope in which the worker keeps copies of small memory blocks that
// readers on its host have asked for, with an index, so a reader finds and copies a block
// without a round trip to the worker (Ray's plasma store keeps small objects the same way).
// A 4 KiB get through the local socket costs the worker four system calls and the reader two;
// through the arena it costs neither.
//
// One writer (the worker's loop), any number of readers (other processes, which map the file
// read-only). Each index slot is a sequence lock: the writer makes the slot's sequence odd
// before it changes the slot or overwrites bytes the slot names, and even again after; a reader
// copies the slot and its bytes, then reads the sequence again and keeps the copy only when it
// did not move. The bytes are also checked against the block's digest, which the slot holds: a
// reader never returns bytes that are not the block's. Every shared word is accessed through
// std::atomic_ref (the bytes as relaxed 8-byte words), so the protocol has no data race in the
// C++ memory model.
//
// The arena is a cache, not a store: a block is in it only while the worker holds the same
// version in memory (every change of a block, kept or removed, takes it out first), and it is
// written in a ring, the oldest copies overwritten first. A reader that finds nothing reads
// through the socket, as before.
//
// Who can write: the file is sealed against growing, shrinking and new writable mappings
// (F_SEAL_FUTURE_WRITE): only the worker's own mapping, made before the seals, can change it.
// A reader receives a descriptor opened read-only; it cannot map the file writable even by
// reopening it.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/chunk.h"
#include "blockmgr/status.h"
#include "blockmgr/storage_level.h"
#include "blockmgr/tier.h"
#include "common/net/local_socket.h"

namespace bm {

// What the arena keeps with a block's bytes (what a get reports of it).
struct ArenaBlockFacts {
  uint64_t version = 0;
  uint64_t generation = 0;
  Tier tier = Tier::kMemory;
  StorageLevel level = StorageLevel::kMemoryOnly;
  uint64_t digest = 0;  // the block's one unit digest (DigestOf its bytes)
};

// A block copied out of an arena.
struct ArenaBlock {
  ChunkPtr bytes;
  ArenaBlockFacts facts;
};

namespace arena_layout {
// The file: a header, the slots (a hash table probed linearly, kProbe slots from the id's
// hash), then the data ring. Every record in the ring is the block's bytes (padded to 8)
// followed by its id.
inline constexpr uint64_t kMagic = 0x31616e6572616d62ull;  // "bmarena1", little-endian
inline constexpr uint32_t kLayoutVersion = 1;
inline constexpr size_t kProbe = 8;
inline constexpr size_t kMaxIdBytes = 512;
struct ArenaHeader {
  uint64_t magic;
  uint32_t layout_version;
  uint32_t slot_count;  // a power of two
  uint64_t data_offset;
  uint64_t data_bytes;
  uint64_t max_block_bytes;
  // Readers use the arena only until then (steady_clock, in ns): the writer moves it on while
  // its loop runs, so a worker that stopped or died is asked (and found so) rather than read.
  uint64_t alive_until_ns;
  uint64_t reserved[2];
};
static_assert(sizeof(ArenaHeader) == 64);
// One slot: every field is read and written through std::atomic_ref.
struct alignas(64) ArenaSlot {
  uint64_t sequence;  // odd while the writer changes the slot or the bytes it names
  uint64_t id_hash;
  uint64_t record_offset;  // in the data ring
  uint64_t shape;          // size (32 bits), id length (16), tier (8), level (8); 0: empty
  uint64_t version;
  uint64_t generation;
  uint64_t digest;
  uint64_t reserved;
};
static_assert(sizeof(ArenaSlot) == 64);
}  // namespace arena_layout

// The worker's side: creates the file and keeps it. Not thread-safe: the worker's loop's.
class BlockArenaWriter {
 public:
  // `data_bytes` of ring for blocks of at most `max_block_bytes`; the index has a slot for
  // every 2 KiB of ring (at least 1024).
  static Result<std::unique_ptr<BlockArenaWriter>> Create(const std::string& name,
                                                          uint64_t data_bytes,
                                                          uint64_t max_block_bytes);
  ~BlockArenaWriter();
  BlockArenaWriter(const BlockArenaWriter&) = delete;
  BlockArenaWriter& operator=(const BlockArenaWriter&) = delete;

  // Keeps a copy of `id`'s bytes (the chunks, in order) in place of any older one; false when
  // it does not fit (too big, an id too long).
  bool Put(const BlockId& id, const ArenaBlockFacts& facts, std::span<const ChunkPtr> chunks,
           uint64_t size);
  // Takes `id` out, if it is in.
  void Erase(const BlockId& id);
  // Readers may use the arena until `until` (ArenaHeader::alive_until_ns); from Create on, 3 s.
  void KeepAlive(std::chrono::steady_clock::time_point until);
  bool Contains(const BlockId& id) const { return by_id_.contains(id); }

  // A descriptor of the file opened read-only, owned here: pass it with SCM_RIGHTS.
  int read_only_fd() const { return read_only_fd_.get(); }
  uint64_t file_bytes() const { return file_bytes_; }
  uint64_t max_block_bytes() const { return max_block_bytes_; }
  size_t blocks() const { return by_id_.size(); }
  uint64_t bytes_written() const { return bytes_written_; }

 private:
  BlockArenaWriter() = default;
  arena_layout::ArenaSlot& SlotAt(size_t index) const;
  // Empties slot `index` (its record's bytes may be overwritten once this returns).
  void EmptySlot(size_t index);
  // Empties the slots of the records overlapping [offset, offset + length) of the ring.
  void EvictRange(uint64_t offset, uint64_t length);
  // A slot for `hash`: a free one in its probe window, else the window's first, emptied.
  size_t ChooseSlot(uint64_t hash);

  std::byte* base_ = nullptr;  // the writable mapping of the whole file
  uint64_t file_bytes_ = 0;
  uint64_t data_offset_ = 0;
  uint64_t data_bytes_ = 0;
  uint64_t max_block_bytes_ = 0;
  size_t slot_count_ = 0;
  OwnedFd read_only_fd_;
  uint64_t head_ = 0;  // where the ring's next record goes
  uint64_t bytes_written_ = 0;

  struct Entry {
    size_t slot;
    uint64_t record_offset;
    uint64_t record_bytes;
  };
  std::unordered_map<BlockId, Entry> by_id_;
  // Each used slot's id (the key of by_id_), and the slots' records by ring offset.
  std::vector<const BlockId*> slot_ids_;
  std::map<uint64_t, size_t> records_;  // ring offset -> slot
};

// A reader's mapping of an arena (from the descriptor a worker sent). Thread-safe: Find only
// reads the mapping.
class BlockArenaReader {
 public:
  // Maps `fd` (taken) read-only, after checking its seals, size and header: kDataLoss for a
  // file that is not an arena, or that the sender could still resize or map writable.
  static Result<std::unique_ptr<BlockArenaReader>> Map(OwnedFd fd, uint64_t expected_bytes);
  ~BlockArenaReader();
  BlockArenaReader(const BlockArenaReader&) = delete;
  BlockArenaReader& operator=(const BlockArenaReader&) = delete;

  // A copy of `id`'s bytes and facts, or nullopt when the arena does not hold it now (or it
  // changed under every try, or the writer has not kept the arena alive): the caller asks the
  // worker.
  std::optional<ArenaBlock> Find(const BlockId& id) const;
  uint64_t max_block_bytes() const { return max_block_bytes_; }

 private:
  BlockArenaReader() = default;
  // One try at slot `index`: the block, kMiss (not this id), or kRetry (it moved meanwhile).
  enum class Attempt { kFound, kMiss, kRetry };
  Attempt TryRead(size_t index, uint64_t hash, std::string_view id, ArenaBlock& out) const;

  const std::byte* base_ = nullptr;
  uint64_t file_bytes_ = 0;
  uint64_t data_offset_ = 0;
  uint64_t data_bytes_ = 0;
  uint64_t max_block_bytes_ = 0;
  size_t slot_count_ = 0;
};

}  // namespace bm
