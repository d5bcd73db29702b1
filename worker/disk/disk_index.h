#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "blockmgr/block_id.h"
#include "worker/block_status.h"
#include "worker/disk/disk_format.h"

namespace bm::disk {

// a + b, or UINT64_MAX when that does not fit: a counter fed by sizes never wraps.
inline uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  return b > UINT64_MAX - a ? UINT64_MAX : a + b;
}

// Generations [first, end) whose records a start-up scan could not read (a table block failed
// RocksDB's checksum): versions committed there lost their index records.
struct UnreadableGenerations {
  uint64_t first = 0;
  uint64_t end = 0;  // UINT64_MAX: to the end
  // The damaged table file and RocksDB's error ("index table 000012.sst was damaged (...)"),
  // for the reason of the blocks lost there; may be empty.
  std::string damage{};
};

// The disk store's committed versions, one per block, and the bytes they hold: what the store
// serves. Built by the start-up scan (ScanDiskStore) and kept in step with every commit and
// removal by DiskStore. Not thread-safe: part of the DiskStore, on the storage thread.
class DiskIndex {
 public:
  const Meta* Find(const BlockId& id) const;
  // Adds the version, or replaces the block's current one, which it returns.
  std::optional<Meta> Put(const BlockId& id, Meta meta);
  // Takes the block out; returns its version, nullopt when it is absent.
  std::optional<Meta> Erase(const BlockId& id);
  void Clear();

  size_t size() const { return versions_.size(); }
  uint64_t committed_bytes() const { return committed_bytes_; }
  const std::map<BlockId, Meta>& versions() const { return versions_; }
  std::optional<BlockStatus> StatusOf(const BlockId& id) const;
  // Sorted by id.
  std::vector<BlockStatus> List() const;
  // The committed generation of every block (what the commit journal records).
  std::map<BlockId, uint64_t> Generations() const;

 private:
  std::map<BlockId, Meta> versions_;
  uint64_t committed_bytes_ = 0;  // sum of versions_' sizes
};

}  // namespace bm::disk
