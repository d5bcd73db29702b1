#pragma once

// Where this client last saw blocks, so a read can go straight to a worker instead of asking
// the master first (one round trip instead of two).

#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "client/types.h"
#include "common/block_id.h"

namespace bm {

// A bounded map from block id to the locations a lookup or a put of this client found, least
// recently used entries dropped first. Entries are hints, never the truth: the workers are. A
// read from a cached location that the worker no longer holds (notFound) or cannot serve
// (unavailable) forgets the entry and asks the master, so a stale entry costs one extra round
// trip and never a wrong answer. Writes and removals made through this client update it.
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
    std::list<BlockId>::iterator recency;  // position in recency_
  };
  void Erase(std::unordered_map<BlockId, Entry>::iterator it);

  const size_t capacity_;
  std::unordered_map<BlockId, Entry> entries_;
  std::list<BlockId> recency_;  // most recently used first
};

}  // namespace bm
