#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/storage_level.h"
#include "common/core/clock.h"
#include "worker/block_manager.h"

namespace bm {

// Uploads in progress on a worker, keyed by who sends them: the client's ZeroMQ routing id and
// the uploadId it chose. Two clients may pick the same uploadId; they never collide.
//
// An entry lives from the first piece (offset 0) until the last piece commits, a piece fails,
// the client aborts it or its connection closes, or it sits idle too long. The table only keeps the
// bookkeeping; the caller owns the matching BlockManager uploads and aborts them when it erases
// entries.
//
// Not thread-safe: owned by the worker's event loop.
class UploadTable {
 public:
  // (routing id bytes, client-chosen uploadId)
  using Key = std::pair<std::string, uint64_t>;

  struct Entry {
    BlockManager::UploadId upload;  // the BlockManager's handle
    BlockId block;
    StorageLevel level;
    uint64_t total_size;
    uint64_t next_offset;  // bytes received so far; the next piece must start here
    TimePoint last_activity;
    // The sender's public key (keys on; empty without): uploads are limited per key.
    std::string owner{};
    // The client connection it arrives on (PeerMonitor::SourceFd); -1 when unknown.
    int connection = -1;
    // A piece was refused as corrupted in transit: the pieces the client sent after it (a
    // window) are refused without ending the upload until the resend arrives at next_offset.
    bool awaiting_resend = false;
  };

  Entry* Find(const Key& key);
  // Adds an upload; the key must not be present.
  void Insert(Key key, Entry entry);
  // Removes and returns the upload, if present.
  std::optional<Entry> Erase(const Key& key);

  // Removes and returns every upload with no activity since `cutoff`.
  std::vector<Entry> TakeIdleSince(TimePoint cutoff);
  // Removes and returns every upload that arrived on `connection`.
  std::vector<Entry> TakeFromConnection(int connection);
  // Removes and returns every upload.
  std::vector<Entry> TakeAll();
  // The earliest last_activity, if any upload is in progress.
  std::optional<TimePoint> OldestActivity() const;

  size_t size() const { return entries_.size(); }
  // Uploads in progress whose Entry::owner is `owner`.
  size_t CountOwnedBy(const std::string& owner) const;

 private:
  void Forget(const Entry& entry);

  std::map<Key, Entry> entries_;
  std::map<std::string, size_t, std::less<>> per_owner_;  // counts of entries_ by owner
};

}  // namespace bm
