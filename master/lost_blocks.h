#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/storage_level.h"
#include "common/core/lost_cause.h"

namespace bm {

// What the master remembers of one block whose last copy was lost (PROTOCOL.md, "Lost
// blocks").
struct LostRecord {
  BlockId id;
  uint64_t version = 0;  // the lost version (BlockChange::version); 0 = unknown
  uint64_t size = 0;
  StorageLevel level = StorageLevel::kMemoryOnly;
  uint64_t lost_at_ms = 0;  // wall clock, milliseconds since the Unix epoch
  LostCause cause = LostCause::kStorageError;
  std::string detail;     // the worker's words, or the master's ("no heartbeat for 10 s")
  std::string worker_id;  // held the last copy
  // Set by LostBlocks: the records' order (oldest lowest), kept in the journal so a restarted
  // master forgets the same records first.
  uint64_t order = 0;

  bool operator==(const LostRecord&) const = default;
};

// The blocks whose last copy was lost, so that a get says "lost" (and why) rather than "not
// found", and operators can list them (bmctl blocks --lost), as HDFS's fsck lists missing
// blocks. Bounded: at most `capacity` records, the oldest dropped first (bm-master
// --lost-blocks-kept). A record goes when its id is stored again (a put, or a copy that came
// back) or removed.
//
// Knows no journal: every call that changes the records returns what changed, for the loop to
// journal (MasterJournal::RecordLost) so that a restarted or promoted master knows them too.
//
// Not thread-safe: owned by the master's event loop.
class LostBlocks {
 public:
  explicit LostBlocks(size_t capacity) : capacity_(capacity) {}

  // What a call changed: records written (new or updated) and ids forgotten.
  struct Changes {
    std::vector<LostRecord> recorded;
    std::vector<BlockId> forgotten;
    bool empty() const { return recorded.empty() && forgotten.empty(); }
  };

  // Blocks lost now, in order: each replaces any record of its id and counts in totals().
  // Beyond the capacity the oldest records are forgotten (among them, possibly, some of these).
  Changes Add(std::vector<LostRecord> records);
  // A worker named why it lost `id` after the master had recorded the block lost for a reason
  // of its own (the worker was dropped, then came back and reported the copy lost at start-up):
  // the record takes the worker's cause and detail. Nothing when there is no record of `id`, or
  // it is of another version (both known).
  Changes Refine(const BlockId& id, uint64_t version, LostCause cause, const std::string& detail);
  // The id was stored again or removed: its record goes.
  Changes Clear(const BlockId& id);
  // The RDD was removed: the records of its blocks go.
  Changes ClearRdd(uint64_t rdd_id);
  // Records read back from the journal, with their `order` (not counted in totals()). Beyond
  // the capacity (lowered since) the oldest are forgotten.
  Changes Restore(std::vector<LostRecord> records);

  const LostRecord* Find(const BlockId& id) const;
  // Oldest first.
  std::vector<LostRecord> List() const;
  // The newest `limit`, oldest first.
  std::vector<LostRecord> Newest(size_t limit) const;
  size_t size() const { return by_id_.size(); }
  size_t capacity() const { return capacity_; }
  // Blocks recorded lost by this master since it started, by cause (LostCause's value).
  const std::array<uint64_t, kLostCauseCount>& totals() const { return totals_; }

 private:
  struct Entry {
    LostRecord record;  // record.order is its key in order_
  };
  // Files the record under its `order`.
  void Insert(LostRecord record);
  Changes Trim();
  void Erase(std::unordered_map<BlockId, Entry>::iterator it);

  const size_t capacity_;
  std::unordered_map<BlockId, Entry> by_id_;
  std::map<uint64_t, BlockId> order_;  // by seq: oldest first
  uint64_t next_seq_ = 0;
  std::array<uint64_t, kLostCauseCount> totals_{};
};

}  // namespace bm
