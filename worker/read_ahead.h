#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/status.h"
#include "worker/block_read.h"

namespace bm {

// Ranges of disk blocks read before they are asked for: when a client reads a large block range
// by range, the storage thread reads the next range while the last one is being sent, and the
// client's request for it finds it here (BlockManager::Read). This table is the bookkeeping; the
// reads themselves are storage jobs the BlockManager queues.
//
// An entry is pending (its read queued; requests for it wait on it) -> ready (the bytes held)
// -> taken; or dropped: evicted to make room, unused for two Age() passes, or forgotten because
// its block changed (removed, replaced, spilled, lost). A forgotten pending read still answers
// the request already waiting on it: that request came while the old version was still the
// visible one, and gets a range of that version whole (the client checks that every range of
// a get is of one generation).
//
// Memory: pending and ready entries together hold at most `max_bytes` (a read-ahead that does
// not fit, once ready entries are evicted oldest first, is not started).
//
// Not thread-safe: owned by the worker's event loop.
class ReadAheadTable {
 public:
  using Done = std::function<void(Result<BlockRead>)>;

  explicit ReadAheadTable(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  // The range [offset, offset + length) of `id`, if read ahead: `done` runs with it now when it
  // is ready, or from Complete() when its read finishes. False (and `done` untouched) if absent.
  bool Take(const BlockId& id, uint64_t offset, uint64_t length, Done& done);
  // Registers a read-ahead of the range (`bytes`: what it will hold, the length clamped to the
  // block), unless one exists or it does not fit: the ticket to pass to Complete() when the
  // read finishes, or nullopt (then nothing is to be read).
  std::optional<uint64_t> Start(const BlockId& id, uint64_t offset, uint64_t length,
                                uint64_t bytes);
  // The read of `ticket` finished: its waiters get the result, or it is held for a request.
  void Complete(uint64_t ticket, Result<BlockRead> result);
  // `id` changed: none of its ranges read so far is served to a later request.
  void Forget(const BlockId& id);
  // Drops ready entries that have waited through a whole pass since the last call (called
  // about once a second): an abandoned read gives its memory back.
  void Age();

  uint64_t bytes() const { return bytes_; }
  uint64_t hits() const { return hits_; }

 private:
  struct Entry {
    uint64_t ticket;
    BlockId id;
    uint64_t offset;
    uint64_t length;
    uint64_t bytes;
    bool wanted = true;  // false once forgotten: never handed to a new request
    std::optional<Result<BlockRead>> result{};  // set when ready
    Done waiter{};                              // the request waiting for it, if any
    uint64_t ready_pass = 0;                    // Age() passes when it became ready
  };
  using Entries = std::list<Entry>;  // oldest first

  Entries::iterator Find(const BlockId& id, uint64_t offset, uint64_t length);
  void Erase(Entries::iterator entry);

  const uint64_t max_bytes_;
  Entries entries_;
  std::unordered_map<uint64_t, Entries::iterator> by_ticket_;
  uint64_t next_ticket_ = 1;
  uint64_t bytes_ = 0;  // of the entries in entries_
  uint64_t hits_ = 0;
  uint64_t pass_ = 0;
};

}  // namespace bm
