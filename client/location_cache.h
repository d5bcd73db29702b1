#pragma once

// Where this client last saw blocks, so a read can go straight to a worker instead of asking
// the master first (one round trip instead of two).

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/types.h"

namespace bm {

// A bounded map from block id to the locations a lookup or a put of this client found, least
// recently used entries dropped first (when it is full, the least recently used eighth goes at
// once). Entries are hints, never the truth: the workers are. A read from a cached location
// that the worker no longer holds (notFound) or cannot serve (unavailable) forgets the entry
// and asks the master, so a stale entry costs one extra round trip and never a wrong answer.
// Writes and removals made through this client update it.
class LocationCache {
 public:
  // `capacity` 0 disables the cache: Find() never hits and Remember() keeps nothing.
  explicit LocationCache(size_t capacity) : capacity_(capacity) {}

  // The locations remembered for `id` (marking it recently used), or null. The pointer is
  // valid until the next call that changes the cache.
  const std::vector<BlockLocation>* Find(const BlockId& id);
  // Remembers `locations` for `id`, replacing what was there; an empty list forgets `id`.
  void Remember(const BlockId& id, std::vector<BlockLocation> locations);
  void Forget(const BlockId& id);
  // Forgets every block of RDD `rdd_id`.
  void ForgetRdd(uint64_t rdd_id);
  // Forgets every location on the worker at `address` (a worker that failed).
  void ForgetWorker(const std::string& address);

  size_t size() const { return entries_.size(); }
  size_t capacity() const { return capacity_; }

 private:
  struct Entry {
    std::vector<BlockLocation> locations;
    uint64_t last_used = 0;  // the clock_ of the last Find or Remember
  };
  // Drops the least recently used eighth of the entries (at least one).
  void DropLeastRecentlyUsed();

  const size_t capacity_;
  std::unordered_map<BlockId, Entry> entries_;
  // Recency is a counter stamped on each use rather than a list kept in order: a lookup then
  // touches its own entry only, not the list nodes around it, and a remembered block costs no
  // list node (a fresh client's fetch of 10,000 small blocks measured faster and lighter).
  // Dropping an eighth at a time keeps the selection that needs rare.
  uint64_t clock_ = 0;
};

}  // namespace bm
