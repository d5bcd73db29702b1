#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "blockmgr/status.h"
#include "common/core/mutex.h"
#include "common/zookeeper/leader_record.h"
#include "common/zookeeper/zookeeper_session.h"

namespace bm {

// Who leads the cluster, as its /leader znode in ZooKeeper says (schema/PROTOCOL.md, "Leader
// election"): for the workers, clients and tools that follow the leader.
//
// Owns a thread that keeps a ZooKeeper session, reads the leader znode and watches it, so a
// change is seen within a round trip; an expired session is replaced. While ZooKeeper cannot be
// reached the last leader read stays current: it is still the best guess, and a master that no
// longer leads answers notLeader. Every method is thread-safe. `on_change` runs on the
// directory's thread whenever Current() changes; it must be cheap and not block.
class LeaderDirectory {
 public:
  // kInvalidArgument for a malformed ZooKeeper address (or host names that do not resolve).
  // Succeeds while ZooKeeper is unreachable: the leader is then unknown until it can be
  // reached.
  static Result<std::unique_ptr<LeaderDirectory>> Start(const std::string& zookeeper,
                                                        std::chrono::milliseconds session_timeout,
                                                        std::function<void()> on_change = {});
  ~LeaderDirectory();
  LeaderDirectory(const LeaderDirectory&) = delete;
  LeaderDirectory& operator=(const LeaderDirectory&) = delete;

  // The leader as last read; nullopt while none is known (none elected, or not read yet).
  std::optional<LeaderRecord> Current() const;
  // Waits until a leader with an epoch above `above_epoch` is known (0: any leader), and
  // returns it; nullopt if none is by then.
  std::optional<LeaderRecord> WaitForLeader(uint64_t above_epoch,
                                            std::chrono::milliseconds timeout) const;

  // One read, for a command-line tool: connects, reads the leader znode, closes. kNotFound
  // when no leader is elected now, kUnavailable when ZooKeeper does not answer in `timeout`,
  // kInvalidArgument for a malformed address or leader znode.
  static Result<LeaderRecord> ReadOnce(const std::string& zookeeper,
                                       std::chrono::milliseconds timeout);
  // One read of the masters standing in the election (the candidate znodes), in line: the
  // leader (or the next to lead) first. For a command-line tool, as ReadOnce, which it fails
  // as; a candidate znode it cannot read is left out.
  static Result<std::vector<CandidateRecord>> ReadCandidates(const ZooKeeperAddress& address,
                                                             std::chrono::milliseconds timeout);
  // Where it reads the leader from.
  const ZooKeeperAddress& address() const { return address_; }

 private:
  using Clock = std::chrono::steady_clock;

  LeaderDirectory(ZooKeeperAddress address, std::chrono::milliseconds session_timeout,
                  std::function<void()> on_change);
  void Run();
  Status OpenSession();
  void Handle(const ZooKeeperEvent& event);
  // Reads the leader znode and leaves a watch on it (present or not).
  Status ReadLeader();
  void Set(std::optional<LeaderRecord> leader);

  // Constant after construction.
  const ZooKeeperAddress address_;
  const std::chrono::milliseconds session_timeout_;
  const std::function<void()> on_change_;

  ZooKeeperEventQueue events_;

  // Owned by the directory's thread.
  std::unique_ptr<ZooKeeperSession> session_;
  uint64_t session_serial_ = 0;
  bool need_read_ = true;
  Clock::time_point retry_at_{};

  mutable Mutex mutex_;
  mutable std::condition_variable changed_;
  std::optional<LeaderRecord> leader_ BM_GUARDED_BY(mutex_);

  std::thread thread_;
};

}  // namespace bm
