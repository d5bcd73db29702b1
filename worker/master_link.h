#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "blockmgr/status.h"
#include "common/core/clock.h"
#include "common/core/metrics.h"
#include "common/net/master_addresses.h"
#include "common/net/peer_monitor.h"
#include "common/net/transport.h"
#include "common/security/curve_keys.h"
#include "common/security/tenant.h"
#include "worker/block_manager.h"
#include "worker/block_status.h"

namespace bm {

struct MasterLinkOptions {
  // One master's address, or several comma-separated (standby masters): the link registers
  // with the leader, following notLeader answers, and moves on when a master is lost.
  std::string master_address;
  // With --zookeeper: the leader's address as ZooKeeper names it now (nullopt while it names
  // none). Asked when the master in use is lost or knows no leader, before the next in the
  // list: it must be cheap and not block (LeaderDirectory::Current()).
  std::function<std::optional<std::string>()> zookeeper_leader{};
  // This worker's keys and the master's public key (all empty: plaintext).
  ChannelSecurity security{};
  std::string worker_id;
  std::string advertised_address;
  // Placement labels sent with each registration (empty = none).
  std::string host{};
  std::string rack{};
  // How long to wait for the master's reply to any request before the master counts as lost;
  // for heartbeats and reports at least `missed_heartbeats` heartbeat intervals.
  Duration request_timeout = std::chrono::seconds(1);
  int missed_heartbeats = 3;
  // Delay before the next registration attempt after a failed one: doubles up to the max.
  Duration backoff_initial = std::chrono::milliseconds(100);
  Duration backoff_max = std::chrono::seconds(2);
  // Bounds the header of one reportBlocks message.
  size_t max_updates_per_report = 4096;
  // The shuffles the worker holds partitions of, listed in each registration (may be empty:
  // none). Called on the loop's thread.
  std::function<std::vector<uint64_t>()> held_shuffles{};
};

// The worker's side of its conversation with the master, over one DEALER socket:
// registration, heartbeats, and reporting every block change in order.
//
// Nothing here blocks: requests are sent without waiting, replies are matched to outstanding
// request ids as they arrive (OnReadable), and timers are driven by the owner's poll loop
// (OnTimer / NextDeadline).
//
// States:
//   unregistered --(attempt due: send registerWorker with a full report)--> registering
//   registering  --(registered)--> registered
//   registering  --(error / no reply: fresh socket)--> unregistered, retry after back-off
//   registered   --(unknownWorker reply)--> registering (at once, same socket)
//   registered   --(a request unanswered too long: fresh socket)--> unregistered
// Block changes are numbered in the order they happened and queued until the master
// acknowledges a report holding them, or a registration's full report supersedes them.
// acked_seq() tells the owner how far the master is known to be up to date.
//
// Borrows the BlockManager (for full reports, stats and changes) and the clock; both must
// outlive the link. Not thread-safe: owned by the worker's event loop.
class MasterLink {
 public:
  MasterLink(zmq::context_t& context, MasterLinkOptions options, BlockManager& blocks,
             const Clock& clock);
  ~MasterLink();
  MasterLink(const MasterLink&) = delete;
  MasterLink& operator=(const MasterLink&) = delete;

  // The socket to poll for replies. It is replaced when the master is lost, so fetch it anew
  // for every poll.
  zmq::socket_t& socket() { return *socket_; }
  // True when the socket may hold replies its ZMQ_FD will not signal: it was sent on (or
  // replaced) since OnReadable() last drained it, or that drain stopped early. An event loop
  // sleeping on the fd must call OnReadable() first (see WorkerServer::Run).
  bool unsettled() const { return unsettled_; }
  // The descriptor of the socket monitor's handshake events (-1 without a monitor), for the
  // owner's poll; it is replaced with the socket, so fetch it anew for every poll. The monitor
  // is read when this signals (or monitor_unsettled()), not on every pass of the loop: each
  // read that finds nothing costs a getpid(2) and a poll(2) inside libzmq, which was a third of
  // the worker's system calls per same-host 4 KiB get.
  int monitor_fd() const;
  // True when the monitor is new since OnMonitorReadable() last drained it.
  bool monitor_unsettled() const { return monitor_unsettled_; }
  // Reads the monitor's handshake events: logs a refusal once, keeps it for /readyz.
  void OnMonitorReadable();

  // Moves the BlockManager's new changes into the report queue and sends a report if one can
  // go now. Returns the number of the latest change ever queued (0 if none yet): once
  // acked_seq() reaches it, the master knows of every change made so far.
  uint64_t CollectChanges();
  uint64_t acked_seq() const { return acked_seq_; }
  bool registered() const { return state_ == State::kRegistered; }
  // The epoch of the leader this worker last registered with (0: a master without election).
  uint64_t leader_epoch() const { return leader_epoch_; }
  // A master says it leads `epoch` at `address` (leaderElected): a newer leader than the one
  // this worker registered with is registered with at once.
  void LeaderElected(const std::string& address, uint64_t epoch);
  // Why the master refuses this worker's handshake (its key not allowed, keys on one side
  // only), OK when it does not: for /readyz.
  const Status& handshake_refusal() const { return handshake_refusal_; }
  // The master it talks to now.
  const std::string& master_address() const { return masters_.current(); }
  // Changes waiting for the master's acknowledgement.
  size_t queued_changes() const { return queue_.size(); }
  // Fresh blocks the master refused since the last call (stored under a compute lease that is
  // no longer held: reportRefused), as (id, version). Their reports are acknowledged.
  std::vector<std::pair<BlockId, uint64_t>> TakeRefused() { return std::exchange(refused_, {}); }

  // ---- tenant checks (worker/tenant_gate.h; PROTOCOL.md "Tenants") ----
  // What a worker asks the master about a dataset (checkAccess).
  struct AccessQuestion {
    std::string dataset;
    std::string tenant;
    bool claim = false;
    uint64_t reserve_bytes = 0;
    StorageLevel level = StorageLevel::kMemoryOnly;
    std::string block{};
    // A put's copies and version: its first copy reserves for all of them (CheckAccess).
    uint32_t copies = 0;
    uint64_t version = 0;
  };
  struct AccessGrant {
    DatasetAccess access;
    uint64_t reservation = 0;
  };
  struct AccessAnswer {
    uint64_t ask = 0;  // the caller's number for the question
    Result<AccessGrant> grant;
  };
  // Sends checkAccess; kUnavailable (nothing sent) while the worker is not registered. Its
  // answer comes out of TakeAccessAnswers(): the master's, or kUnavailable when the master
  // was lost first.
  Status AskAccess(uint64_t ask, const AccessQuestion& question);
  std::vector<AccessAnswer> TakeAccessAnswers() { return std::exchange(access_answers_, {}); }
  // How many registrations succeeded: one more means this worker may have missed the master's
  // datasetAccess updates while it was away.
  uint64_t registrations() const { return registrations_; }

  // Handles every reply ready on the socket.
  void OnReadable();
  // Sends a heartbeat if one is due: cheap, so the worker's loop calls it between the messages
  // of a burst, and liveness does not wait for data work (issue: a loaded worker was dropped).
  void HeartbeatIfDue();
  // How late heartbeats went out against when they were due, and the worst of them.
  const LatencyHistogram& heartbeat_delays() const { return heartbeat_delays_; }
  Duration worst_heartbeat_delay() const { return worst_heartbeat_delay_; }
  // Does what is due now: registration attempts, heartbeats, reports, loss detection.
  void OnTimer();
  // When OnTimer next has something to do.
  TimePoint NextDeadline() const;

 private:
  enum class State { kUnregistered, kRegistering, kRegistered };
  enum class RequestKind { kRegister, kHeartbeat, kReport, kAccess };
  struct Outstanding {
    RequestKind kind;
    TimePoint sent_at;
    uint64_t covers_seq;  // register / report: every change up to this one is in it
    uint64_t ask = 0;     // kAccess: the caller's number
  };
  // Answers every access question in flight with `why` (their requests are dropped).
  void FailAccessAsks(const std::string& why);
  struct QueuedChange {
    uint64_t seq;
    BlockStatusChange change;
  };

  static const char* KindName(RequestKind kind);
  void ResetSocket();
  void SendRegister();
  void SendHeartbeat();
  void MaybeSendReport();
  // Sends a request built by `fill` with a fresh id and records it as outstanding.
  // Returns false (after handling the loss) if it could not be sent.
  template <typename Fill>
  bool SendRequest(RequestKind kind, uint64_t covers_seq, Fill&& fill);
  void HandleReply(IncomingMessage& message);
  void OnRegistered(const Outstanding& request, uint32_t heartbeat_interval_ms);
  void Acknowledge(uint64_t covers_seq);
  // The master is unreachable: drop the socket with whatever it still queues and register
  // again after the back-off.
  void MasterLost(const std::string& why);
  // A standby answered: register with `leader` (empty: unknown yet) instead.
  void FollowLeader(const std::string& leader);
  // Moves on from the current master: to the leader ZooKeeper names, or the next listed.
  void NextMaster();
  void RetryRegistrationLater();
  Duration ReplyTimeout(RequestKind kind) const;

  zmq::context_t& context_;
  const MasterLinkOptions options_;
  MasterAddresses masters_;
  uint64_t leader_epoch_ = 0;
  BlockManager& blocks_;
  const Clock& clock_;

  std::unique_ptr<zmq::socket_t> socket_;
  std::unique_ptr<zmq::socket_t> retired_socket_;  // replaced while being drained
  std::unique_ptr<PeerMonitor> monitor_;           // of socket_: handshake outcomes
  Status handshake_refusal_;
  LatencyHistogram heartbeat_delays_;
  Duration worst_heartbeat_delay_{};
  bool unsettled_ = true;
  bool monitor_unsettled_ = true;
  std::vector<std::pair<BlockId, uint64_t>> refused_;  // see TakeRefused()
  std::vector<AccessAnswer> access_answers_;           // see TakeAccessAnswers()
  uint64_t registrations_ = 0;
  State state_ = State::kUnregistered;
  TimePoint next_attempt_;  // kUnregistered: when to send registerWorker
  Duration backoff_;        // the delay after the next failure
  Duration heartbeat_interval_ = std::chrono::seconds(1);
  TimePoint next_heartbeat_;  // kRegistered
  uint64_t next_request_id_ = 1;
  std::map<uint64_t, Outstanding> outstanding_;
  bool report_in_flight_ = false;

  // Blocks the worker lost (BlockManager::TakeLost), sent with the next registration or report;
  // the first lost_in_flight_ of them are in the one in flight. A lost block's removal is among
  // the changes queued after `after_seq`: a report never carries such a change while the loss
  // waits (the master records the loss when it sees the removal, or sooner; PROTOCOL.md).
  struct QueuedLoss {
    LostBlock block;
    uint64_t after_seq = 0;
  };
  std::vector<QueuedLoss> lost_;
  size_t lost_in_flight_ = 0;
  // Whether a registration was accepted since this process started (RegisterWorker.startedNow).
  bool registered_before_ = false;
  void CollectLost();
  // Fills a request's lostBlocks and lostCopies with what fits and marks them in flight.
  template <typename Request>
  void FillLost(Request&& request);
  void LostAcknowledged();

  std::deque<QueuedChange> queue_;  // in seq order
  uint64_t last_seq_ = 0;
  uint64_t acked_seq_ = 0;
};

}  // namespace bm
