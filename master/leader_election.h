#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "blockmgr/status.h"
#include "common/core/mutex.h"
#include "common/zookeeper/leader_record.h"
#include "common/zookeeper/zookeeper_session.h"

namespace bm {

struct ElectionOptions {
  // "host:port[,host:port...][/chroot]"; the chroot defaults to /blockmgr.
  std::string zookeeper;
  // This master's name, unique among the cluster's masters, and the address its clients use.
  std::string candidate_id;
  std::string address;
  // The ZooKeeper session timeout asked for (the server clamps it to its minSessionTimeout ..
  // maxSessionTimeout, by default 2 .. 20 ticks). A killed leader is replaced about this long
  // after it died.
  std::chrono::milliseconds session_timeout = std::chrono::seconds(2);
  // Whether only the masters /in_sync lists may claim (PublishInSync); bm-master sets it, so
  // that a standby that fell behind never takes over. Off: any candidate first in line leads.
  bool require_in_sync = false;
};

// What this master is, as far as it can tell now.
//   kNoQuorum:  not connected to ZooKeeper (or its leader lease lapsed): must not act as leader,
//               and cannot say who does.
//   kCandidate: connected and in line, but no leader is known yet.
//   kStandby:   another master leads (leader_* name it).
//   kLeader:    this master leads, in `epoch`.
enum class ElectionRole { kNoQuorum, kCandidate, kStandby, kLeader };
const char* ElectionRoleName(ElectionRole role);

struct ElectionSnapshot {
  ElectionRole role = ElectionRole::kNoQuorum;
  // kLeader: this master's epoch; kStandby: the leader's; otherwise the last one seen.
  uint64_t epoch = 0;
  // kLeader: this master; kStandby and kCandidate (when known): the leader.
  std::string leader_id;
  std::string leader_address;
  // How many times this master has won an election.
  uint64_t elections_won = 0;
  // kLeader: the in-sync standbys as last written to ZooKeeper's /in_sync in this epoch
  // (PublishInSync); empty otherwise.
  std::vector<std::string> in_sync_published;

  bool operator==(const ElectionSnapshot&) const = default;
};

// One master's part in the leader election of the ZooKeeper recipe (schema/PROTOCOL.md,
// "Leader election"):
//  - it joins with an EPHEMERAL|SEQUENCE znode under /candidates and watches only the candidate
//    just before it, so a departure wakes one master, not all;
//  - the first in line claims leadership with one multi that bumps /epoch at the version it
//    read and creates the EPHEMERAL /leader znode: of two claimers one fails, and every leader
//    has a larger epoch than the one before;
//  - a leader stops leading at once when its connection is lost or falls silent, and in any
//    case when its lease lapses: two thirds of the session timeout after the send of its last
//    request ZooKeeper answered. The server cannot expire the session, and so cannot let
//    another master lead, before a full session timeout after it last heard from this one.
//    Current() checks the lease against the clock, so a master that was paused (a stopped
//    process, a stall) stops leading the moment it runs again, before any thread of it notices;
//  - a lost connection that comes back within the session makes a former leader claim again,
//    with a new epoch; an expired session is replaced by a new one that joins at the back.
//
// Owns a thread that runs the election over a ZooKeeperSession; the C client's thread only
// queues events, and demotes at once on a lost connection. Current() and Resign() are
// thread-safe. `on_change` runs whenever Current() changes, on the election's thread, the C
// client's thread or the thread calling Resign(); it must be cheap and never block or call
// Resign() (the master pokes its loop with it). A lapsing lease changes Current() before the
// election's thread notices and calls `on_change`, up to a moment later.
class LeaderElection {
 public:
  // kInvalidArgument for a malformed ZooKeeper address (or host names that do not resolve)
  // or an empty id or address. Succeeds while ZooKeeper is unreachable: the election then
  // starts when it can be reached.
  static Result<std::unique_ptr<LeaderElection>> Start(ElectionOptions options,
                                                       std::function<void()> on_change);
  // Resigns.
  ~LeaderElection();
  LeaderElection(const LeaderElection&) = delete;
  LeaderElection& operator=(const LeaderElection&) = delete;

  ElectionSnapshot Current() const;

  // Leader: the standbys that hold every record it acknowledged (sorted by the caller or not).
  // Written to /in_sync on the election's thread, conditional on this master's epoch; once
  // written, Current().in_sync_published says so (and `on_change` runs). Only masters listed
  // there (and this one) may claim the next epoch: a standby that fell behind cannot take over
  // and lose what was acknowledged without it.
  void PublishInSync(std::vector<std::string> standbys);

  // Stops leading (Current() says kNoQuorum from now on) and closes the session, which removes
  // this master's znodes at once, so the next candidate takes over without waiting for the
  // session to expire. For a clean shutdown; the election does not run again.
  void Resign();

 private:
  using Clock = std::chrono::steady_clock;

  LeaderElection(ElectionOptions options, ZooKeeperAddress address,
                 std::function<void()> on_change);
  void Run();
  // Opens a new session (after an expiry, or the first), with a new serial. kInvalidArgument
  // when the C client refuses the address (a host name that does not resolve).
  Status OpenSession();
  // C client's thread: queues the event; a connection lost demotes at once.
  void OnEvent(uint64_t serial, const ZooKeeperEvent& event);
  void Handle(const ZooKeeperEvent& event);
  // One pass of the recipe: join, find the predecessor, claim or follow.
  Status Step();
  Status JoinAsCandidate();
  Status Claim();
  Status FollowLeader();
  // Leader: proves to itself that the session still lives, extending the lease.
  void RenewLease();
  // Sets what Current() says, unless the session it was decided under is no longer the
  // connected one (a lost connection wins over a decision in flight).
  void Publish(ElectionRole role, const LeaderRecord& leader, Clock::time_point lease_until);
  void Demote(const char* why);
  // Leader: writes the wanted in-sync set when it differs from the one published.
  void WriteInSyncIfChanged();
  void NotifyIfChanged(const ElectionSnapshot& before);

  // Constant after construction.
  const ElectionOptions options_;
  const ZooKeeperAddress address_;
  const std::function<void()> on_change_;

  ZooKeeperEventQueue events_;

  // Owned by the election thread.
  std::unique_ptr<ZooKeeperSession> session_;
  uint64_t session_serial_ = 0;
  std::string own_node_;  // "/candidates/c_<session>_<seq>", empty until joined
  bool need_step_ = true;
  Clock::time_point retry_at_{};
  std::chrono::milliseconds retry_delay_{50};
  Clock::time_point next_renewal_{};

  mutable Mutex mutex_;
  uint64_t current_serial_ BM_GUARDED_BY(mutex_) = 0;
  bool connected_ BM_GUARDED_BY(mutex_) = false;
  bool resigned_ BM_GUARDED_BY(mutex_) = false;
  ElectionSnapshot snapshot_ BM_GUARDED_BY(mutex_);
  Clock::time_point lease_until_ BM_GUARDED_BY(mutex_){};
  std::vector<std::string> wanted_in_sync_ BM_GUARDED_BY(mutex_);
  // Owned by the election thread: the /epoch znode's version this master's claim wrote.
  int32_t claimed_epoch_version_ = -1;
  bool ineligible_logged_ = false;

  std::thread thread_;
};

}  // namespace bm
