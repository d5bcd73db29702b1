#pragma once

#include <capnp/message.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "blockmgr/status.h"
#include "common/core/clock.h"
#include "common/core/protocol.h"
#include "master/journal.h"
#include "master/journal_feed.h"
#include "master/journal_follower.h"
#include "master/master_server.h"
#include "master/master_status.h"

namespace bm {

// A reply the loop sends for the standby service: to `client` (its routing id) the message,
// whose id is set, with `frames` as its payload.
struct StandbyReply {
  zmq::message_t client;
  std::unique_ptr<capnp::MallocMessageBuilder> message;
  std::vector<zmq::message_t> frames;
};

// Standby masters (PROTOCOL.md, "Standby masters"). A master in an election starts as a
// standby: it answers requests meant for the leader with notLeader, and its JournalFollower
// keeps its journal a copy of the leader's. Elected, it loads that journal (the loop does) and
// leads, feeding its own standbys (JournalFeed: fetches answered at once or parked until
// records come) and holding each acknowledgement until every in-sync standby holds what it
// acknowledges. A leader that loses the lead stops at once (demoted()).
//
//   standby --elected--> (loop loads the journal) --Lead()--> leader --lost the lead--> demoted
//   standby --elected, journal unreadable: StepDown()--> demoted
//
// Without an election (options.leadership null) the master leads from the start, with no feed.
//
// A component of the master's loop: it owns the role, the feed, the follower (whose thread
// owns the journal until the follower stops), the parked fetches and the held replies; it
// borrows the journal (null without --state-dir) and the election, and hands the replies it
// makes to the loop to send. Not thread-safe: owned by the loop's thread.
class StandbyService {
 public:
  StandbyService(const Clock& clock, zmq::context_t& context, const MasterOptions& options,
                 MasterJournal* journal);

  // Follows the election: the epoch to lead when this standby was elected (the loop loads the
  // journal, then calls Lead()); a leader that lost the lead is demoted. A standby follows the
  // leader's journal meanwhile.
  std::optional<uint64_t> Follow();
  // Stops following (the journal is the loop's again), before the loop loads it.
  void StopFollowing(uint64_t epoch);
  // Leads `epoch`, feeding the standbys from the journal's writes.
  void Lead(uint64_t epoch);
  // Elected, but cannot lead (the journal cannot be read).
  void StepDown() { demoted_ = true; }

  bool leading() const { return role_ == Role::kLeader; }
  bool demoted() const { return demoted_; }
  uint64_t epoch() const { return epoch_; }  // this leader's (0: no election)
  // The journal records written in this epoch (0 without a feed): an answer given after more
  // were written depends on them.
  uint64_t journal_head() const { return feed_ ? feed_->next_sequence() : 0; }

  // This master's role, for status pages and metrics; `advertised` is where clients reach it.
  MasterRole StatusRole(const std::string& advertised) const;
  // What a standby answers to requests meant for the leader.
  void AnswerNotLeader(proto::Reply::Builder reply) const;
  void AnswerMasterInfo(const std::string& advertised, proto::Reply::Builder reply) const;

  // A standby's fetch: answered now with records (or a snapshot page), or parked until records
  // come or its wait ends. Appends what to send to `replies`.
  Status FetchJournal(proto::FetchJournal::Reader request, const zmq::message_t& client,
                      uint64_t request_id, std::vector<StandbyReply>& replies);
  // Answers the parked fetches that have records to take, or whose wait is over; drops silent
  // standbys; releases the acknowledgements every in-sync standby now holds. In order.
  std::vector<StandbyReply> Serve();
  // An acknowledgement that depends on the journal records before `depends_on`: false when it
  // may go now; else it is copied and held (Serve() releases it, in order).
  bool Hold(const zmq::message_t& client, capnp::MallocMessageBuilder& message,
            uint64_t depends_on);
  // When a parked fetch's wait ends or a standby falls silent, if any.
  std::optional<TimePoint> NextWake() const;
  // The loop stops: held acknowledgements are dropped (the caller retries with the next leader,
  // which has their records or not) and the follower stops.
  void Stop();

 private:
  enum class Role { kLeader, kStandby };
  struct ParkedFetch {
    zmq::message_t client;
    uint64_t request_id = 0;
    std::string standby;
    uint64_t epoch = 0;
    uint64_t from = 0;
    TimePoint deadline{};
  };
  struct HeldReply {
    uint64_t depends_on = 0;
    StandbyReply reply;
  };

  // Answers a fetch with what the feed has from its position, or with the page of a snapshot
  // after key `snapshot_after` (non-empty: the standby is receiving one); nullopt when there
  // is nothing new (and it did not answer).
  std::optional<StandbyReply> AnswerFetch(const zmq::message_t& client, uint64_t request_id,
                                          const std::string& standby, uint64_t epoch, uint64_t from,
                                          bool even_if_empty, std::string_view snapshot_after = {});
  // The journal sequence every standby that may take over holds; asks the election to publish
  // the feed's in-sync standbys when they changed.
  uint64_t ConfirmedJournalSequence();

  const Clock& clock_;
  zmq::context_t& context_;
  const MasterOptions& options_;
  MasterJournal* const journal_;

  Role role_;
  bool demoted_ = false;
  uint64_t epoch_ = 0;
  uint64_t elections_won_ = 0;
  std::unique_ptr<JournalFeed> feed_;          // a leader's, in an election with a journal
  std::unique_ptr<JournalFollower> follower_;  // a standby's
  std::vector<ParkedFetch> parked_fetches_;
  std::deque<HeldReply> held_replies_;          // in the order they were made
  std::vector<std::string> requested_in_sync_;  // the last set asked to be published
};

}  // namespace bm
