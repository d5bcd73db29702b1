#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/core/clock.h"

namespace bm {

// The leader's side of journal replication to its standbys (PROTOCOL.md, "Standby masters"):
// the journal's recent write batches, numbered 0, 1, 2... within the leader's epoch; the
// position each standby has confirmed (a fetch from N confirms it holds every record before N);
// and which standbys are in sync. It answers the question the loop asks before sending an
// acknowledgement: do all in-sync standbys hold the records it depends on?
//
// A standby is in sync from the fetch that confirms every record appended so far until it is
// silent for `standby_timeout`: then it is dropped (logged by the caller), and what waited on
// it goes. A standby that is not in sync delays nothing, and must not take over as a hot
// leader (it catches up first, or leads from what it has: PROTOCOL.md lists the cases).
//
// Not thread-safe: owned by the master's loop.
class JournalFeed {
 public:
  struct Options {
    // Recent batches kept for fetches; a standby further behind gets a snapshot.
    size_t max_kept_bytes = 64 << 20;
    Duration standby_timeout = std::chrono::milliseconds(1000);
  };
  JournalFeed(const Clock& clock, uint64_t epoch, Options options);

  uint64_t epoch() const { return epoch_; }
  // Records appended in this epoch: the sequence the next one gets.
  uint64_t next_sequence() const { return next_sequence_; }
  // Appends the batch the journal just wrote.
  void Append(std::string_view batch);

  // What a fetch from `from` in `epoch` gets: the kept batches from there (up to about
  // `max_bytes`, at least one), or that the standby needs a snapshot (another epoch's
  // position, or one no longer kept). Records the standby's confirmed position.
  struct Fetched {
    bool snapshot = false;
    uint64_t first = 0;  // the first batch's sequence
    std::vector<std::shared_ptr<const std::string>> batches;
  };
  Fetched Fetch(const std::string& standby, uint64_t epoch, uint64_t from, size_t max_bytes);
  // A standby asks for the next page of a snapshot as of `from` in `epoch`: true while the
  // records from there are still kept (they make the pages read since consistent), false when
  // it must start over. Records the fetch (the standby is not silent).
  bool ContinueSnapshot(const std::string& standby, uint64_t epoch, uint64_t from);
  // The records a parked fetch from `from` could take now (false while it is caught up).
  bool HasRecordsFrom(uint64_t from) const { return from < next_sequence_; }

  // Every in-sync standby holds the records before this (next_sequence() when none is in
  // sync): acknowledgements that depend on nothing later may go. With `published` (the
  // standbys ZooKeeper lists as in sync, who may lead next), those are waited for too until a
  // publication without them: a standby is dropped from the wait only once it may no longer
  // take over.
  uint64_t ConfirmedSequence(const std::vector<std::string>* published = nullptr) const;
  // The standbys in sync now, sorted: what the election should publish.
  std::vector<std::string> InSyncIds() const;
  // Takes standbys silent for standby_timeout out of sync, returning their ids.
  std::vector<std::string> ExpireSilent();
  // When the next in-sync standby would expire, if any.
  std::optional<TimePoint> NextExpiry() const;

  struct StandbyStatus {
    std::string id;
    uint64_t confirmed = 0;
    bool in_sync = false;
    TimePoint last_fetch{};
  };
  std::vector<StandbyStatus> Standbys() const;
  size_t in_sync_count() const;

 private:
  struct Standby {
    uint64_t confirmed = 0;
    bool in_sync = false;
    TimePoint last_fetch{};
  };
  struct Kept {
    uint64_t sequence;
    std::shared_ptr<const std::string> batch;
  };

  const Clock& clock_;
  const uint64_t epoch_;
  const Options options_;
  uint64_t next_sequence_ = 0;
  std::deque<Kept> kept_;  // consecutive sequences, the newest last
  size_t kept_bytes_ = 0;
  std::map<std::string, Standby> standbys_;
};

}  // namespace bm
