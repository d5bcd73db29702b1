#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/status.h"
#include "common/core/clock.h"
#include "common/core/protocol.h"
#include "master/block_index.h"
#include "master/client_queries.h"
#include "master/compute_leases.h"
#include "master/journal.h"

namespace bm {

// What a compute-lease event came to, for the master's loop to carry out in this order:
// journal the leases granted and ended (before any answer goes, so that a grant is
// acknowledged only once the standbys know of it), then answer the parked acquireCompute
// requests (ComputeLeaseService::Encode).
struct LeaseEffects {
  std::vector<JournaledLease> held;            // granted since the leases were last journaled
  std::vector<BlockId> ended;                  // journaled as held, and no longer held
  std::vector<ComputeLeases::Answer> answers;  // their waiters are the loop's parked tickets
  bool journal_changed() const { return !held.empty() || !ended.empty(); }
};

// The compute-lease requests of the master's protocol (PROTOCOL.md, "Compute leases"):
// acquireCompute, renewCompute and releaseCompute read and answered over ComputeLeases, and the
// leases' changes kept in step with the journal.
//
// A component of the master's loop: it owns the leases and what the journal holds of them,
// borrows the loop's BlockIndex (is the block stored?) and ClientQueries (where is it?), answers
// each event with its LeaseEffects, and touches no socket or journal itself. Not thread-safe:
// owned by the loop's thread; what it borrows must outlive it.
class ComputeLeaseService {
 public:
  ComputeLeaseService(const Clock& clock, const BlockIndex& index, const ClientQueries& queries)
      : clock_(clock), index_(index), queries_(queries), leases_(clock) {}

  // How an acquireCompute was answered.
  enum class Acquired {
    kStored,   // in the reply: the block's locations (a copy on a worker the client did not
               // see fail)
    kGranted,  // in the reply: the lease's token
    kWaiting,  // queued behind the holder as `waiter`: answered by a later event's effects
  };
  // acquireCompute: the reply is filled unless the request waits. `waiter` is the loop's
  // ticket for the request, kept only when it waits.
  Result<Acquired> Acquire(proto::AcquireCompute::Reader request, uint64_t waiter,
                           proto::Reply::Builder reply, LeaseEffects& effects);
  // renewCompute: ok, or kAborted when the token no longer holds the lease.
  Status Renew(proto::ComputeLease::Reader request, proto::Reply::Builder reply);
  // releaseCompute: ok (an unknown token too: its lease already ended); the lease goes to the
  // first waiter.
  Status Release(proto::ComputeLease::Reader request, proto::Reply::Builder reply,
                 LeaseEffects& effects);

  // A worker now holds these blocks (removals are skipped): their leases end and their waiters
  // are answered with the locations.
  void Stored(const std::vector<BlockChange>& changes, LeaseEffects& effects);
  // Leases not renewed and waits that are over (ComputeLeases::Expire).
  void Expire(LeaseEffects& effects);
  // Drops every waiting request (the server is stopping); returns their tickets.
  std::vector<uint64_t> TakeAllWaiters() { return leases_.TakeAllWaiters(); }

  // The answer to a parked acquireCompute, as the reply carries it.
  void Encode(const ComputeLeases::Answer& answer, proto::ComputeReply::Builder out) const;

  // Loads the journal's leases (before the loop runs); they count as journaled.
  void Restore(const std::vector<JournaledLease>& leases);

  // Whether `token` holds the lease on `block` now (a fresh block stored under a lease that
  // is no longer held is refused).
  bool Holds(const BlockId& block, uint64_t token) const { return leases_.Holds(block, token); }
  std::optional<TimePoint> NextDeadline() const { return leases_.NextDeadline(); }
  size_t lease_count() const { return leases_.lease_count(); }

 private:
  // Adds the leases granted and ended since the journal last heard of them.
  void NoteJournalChanges(LeaseEffects& effects);
  // Adds the answers, and the journal changes they come with.
  void Answer(std::vector<ComputeLeases::Answer> answers, LeaseEffects& effects);

  const Clock& clock_;
  const BlockIndex& index_;
  const ClientQueries& queries_;
  ComputeLeases leases_;                             // waiters are the loop's tickets
  std::unordered_map<BlockId, uint64_t> journaled_;  // block -> token, as the effects journaled
};

}  // namespace bm
