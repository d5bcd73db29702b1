#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/status.h"
#include "common/core/clock.h"

namespace bm {

// Who computes a missing block when several clients want it at once (schema/PROTOCOL.md,
// "Compute leases"). At most one lease per block id; the other askers wait in arrival order.
//
// A lease ends when the block is stored, by its holder or anyone else (every waiter is answered
// "stored"), when its holder releases it, or when it expires without renewal (these two hand it
// to the first waiter, who computes next). Waiters that waited their full wait time are
// answered "busy" and ask again.
//
// The class knows no sockets: waiters are opaque ids chosen by the caller, and every method
// returns the answers the caller must send. Not thread-safe: owned by the master's loop.
class ComputeLeases {
 public:
  // An answer to send to a waiting request.
  struct Answer {
    enum class Kind { kGranted, kStored, kBusy };
    Kind kind;
    uint64_t waiter = 0;
    BlockId block;
    uint64_t token = 0;     // kGranted: the new lease
    std::string holder{};   // kGranted: who computes now; kBusy: who holds the lease
    Duration lease_left{};  // kBusy: until it expires unless renewed
  };

  // A request for a lease: `lease` is how long it lasts unless renewed, `wait_until` how long
  // the request may wait while someone else holds it.
  struct Request {
    BlockId block;
    std::string holder{};
    Duration lease{};
    TimePoint wait_until{};
    uint64_t waiter = 0;
  };

  explicit ComputeLeases(const Clock& clock);

  // Grants a lease on a block nobody is computing (returns the token), or queues the request
  // behind the current holder (returns nullopt; it is answered later by one of the methods
  // below). The caller has checked the block is not stored.
  std::optional<uint64_t> Acquire(Request request);

  // kOk and extends the lease by its length; kAborted when `token` no longer holds it.
  Status Renew(const BlockId& block, uint64_t token);

  // Whether `token` holds the lease on `block` now (granted, not released, not expired).
  bool Holds(const BlockId& block, uint64_t token) const;

  // Ends the lease if `token` holds it, granting it to the first waiter. Unknown tokens are
  // ignored (the lease already ended).
  std::vector<Answer> Release(const BlockId& block, uint64_t token);

  // The block was stored: ends its lease; every waiter is answered kStored.
  std::vector<Answer> Stored(const BlockId& block);

  // Expires leases not renewed in time (granting each to its first waiter) and answers waiters
  // whose wait is over with kBusy.
  std::vector<Answer> Expire();

  // Drops every waiting request (the server is stopping); returns their ids.
  std::vector<uint64_t> TakeAllWaiters();

  // The next time Expire() has something to do; nullopt when nothing is pending.
  std::optional<TimePoint> NextDeadline() const;

  size_t lease_count() const { return leases_.size(); }

  // A lease as the journal keeps it (standby masters, restarts): a new leader restores each with
  // a full length from when it takes over, so the holder's renewals go on with it.
  struct HeldLease {
    BlockId block;
    uint64_t token = 0;
    std::string holder;
    Duration length{};
    bool operator==(const HeldLease&) const = default;
  };
  std::vector<HeldLease> Held() const;
  // A lease from the journal; replaces any lease on the block. Waiters are not kept: they ask
  // again (their requests went to the old leader).
  void Restore(const HeldLease& lease);
  size_t waiter_count() const;

 private:
  struct Lease {
    uint64_t token = 0;
    std::string holder;
    Duration length{};
    TimePoint expires{};
    std::deque<Request> waiters;  // arrival order
  };

  // Hands the lease to its first waiter (returns the grant), or ends it when none waits.
  std::optional<Answer> HandOver(const BlockId& block, Lease& lease);
  Lease NewLease(const Request& request);

  const Clock& clock_;
  std::unordered_map<BlockId, Lease> leases_;
  // Starts at a random value so a token from before a master restart does not match a lease
  // granted after it.
  uint64_t next_token_;
};

}  // namespace bm
