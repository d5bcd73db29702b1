#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <unordered_map>

#include "blockmgr/block_id.h"

namespace bm {

// What the master remembers of block versions that are no longer current, so that a copy of
// an old version never comes back into the index: a late copy of a put that another put
// replaced meanwhile, a copy on a worker that was away while its block was replaced or
// removed. Versions are the writers' random tokens (BlockStatus.version); the master orders
// them by when it accepted them, so what it needs to remember is which ones it retired.
//
// Per block id it keeps the last few versions that were replaced or removed, and the version
// that was current when the block's last copy was lost (a worker dropped). It remembers at
// most `capacity` ids, forgetting the longest-remembered first; the capacity bounds the memory
// (about 100 bytes an id), and the decisions it supports are needed within seconds to minutes
// of a version's retirement (a late replica, a worker that comes back after a timeout).
//
// Not thread-safe: owned by the master's event loop (through BlockIndex).
class VersionHistory {
 public:
  explicit VersionHistory(size_t capacity) : capacity_(capacity) {}

  // `version` of `id` was replaced by another or removed: no copy of it is current again.
  void Retire(const BlockId& id, uint64_t version);
  // The last copy of `id` went while `version` was current (its worker was dropped, or it was
  // evicted): a copy of `version` may come back; a copy of any other version may not, unless
  // it is a new put.
  void Lost(const BlockId& id, uint64_t version);
  // Whether a copy of `version` of `id` must be refused: it was retired, or (`fresh` false and
  // `id` has no copy now) another version was current when its last copy was lost.
  bool IsStale(const BlockId& id, uint64_t version, bool fresh, bool tracked) const;

  size_t size() const { return records_.size(); }

 private:
  static constexpr size_t kRetiredPerId = 4;
  struct Record {
    std::array<uint64_t, kRetiredPerId> retired{};  // a ring; 0 = empty slot
    uint8_t next_retired = 0;
    uint64_t lost_current = 0;  // 0 = none
  };
  Record& RecordOf(const BlockId& id);

  const size_t capacity_;
  std::unordered_map<BlockId, Record> records_;
  std::deque<BlockId> order_;  // ids in the order they were first remembered
};

}  // namespace bm
