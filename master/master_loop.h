#pragma once

// The master's event loop (MasterServer::Loop), defined in master_loop.cc: internal to master/.
// The loop owns the sockets and the order of events, routes each event to the component that
// owns its state, and carries out (CarryOut) what the component answers with: a reply, journal
// records (written before the answer goes), worker commands, answers to parked requests. The
// components (one .h/.cc each, tested without sockets):
//   RequestSocket       the ROUTER requests arrive on and replies leave by
//   KeyLimits           connections and registrations per key
//   WorkerRegistry, BlockIndex, MasterJournal   the metadata and its journal
//   RddCatalogue        the RDD descriptions (registerRdd, removeRdd)
//   WorkerLinks         the DEALER to each worker, and the keys the master vouches for
//   ClientQueries       the read-only requests
//   RemovalCoordinator  removals waiting for workers
//   ReplicationDriver   re-replication, drains, copies beyond a level (ReplicationPlanner decides)
//   DigestVerifications verifyBlock requests sent for copies with a mismatching digest
//   ParkedRequests      whom to answer later
//   In the router's shape (an event in, its effects out):
//   ShuffleService      shuffles: placement, committed map attempts (ShuffleEffects)
//   LossTracker         blocks whose last copy was lost, restarted workers' pending reports
//                       (LossEffects)
//   TenantService       dataset owners, shares, quotas; admits tenant keys' requests
//                       (TenantEffects)
//   ComputeLeaseService who computes a missing block (LeaseEffects)
//   StandbyService      the role in an election, the journal feed and follower, parked
//                       fetches and held acknowledgements (StandbyReply: what to send)
// Requests are read by request_decoding.h, worker_requests.h (registrations, replies to
// commands) and shuffle_requests.h; a worker's blocks enter the index by block_reports.h.

#include <capnp/message.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>
#include <zmq.hpp>

#include "blockmgr/status.h"
#include "common/core/clock.h"
#include "common/core/protocol.h"
#include "common/net/transport.h"
#include "master/block_index.h"
#include "master/block_reports.h"
#include "master/client_queries.h"
#include "master/compute_lease_service.h"
#include "master/digest_verifications.h"
#include "master/journal.h"
#include "master/key_limits.h"
#include "master/loss_tracker.h"
#include "master/master_server.h"
#include "master/master_status.h"
#include "master/parked_requests.h"
#include "master/rdd_catalogue.h"
#include "master/removal_coordinator.h"
#include "master/replication_driver.h"
#include "master/request_socket.h"
#include "master/shuffle_service.h"
#include "master/standby_service.h"
#include "master/tenant_service.h"
#include "master/worker_links.h"
#include "master/worker_registry.h"
#include "master/worker_request_ids.h"

namespace bm {

// Messages read from one socket before the loop looks at the others again.
inline constexpr int kMaxMessagesPerWake = 256;

// The event loop: the master's sockets and all its state, each piece owned by the component
// named for it. The loop decodes requests, routes them to the components, and sends what they
// return.
//
// Not thread-safe: created by MasterServer::Create, then run by Run() on one thread, which owns
// every member (and so every component) until Run() returns.
class MasterServer::Loop {
 public:
  Loop(zmq::context_t& context, MasterOptions options, const Clock& clock, zmq::socket_t router,
       zmq::socket_t control, std::unique_ptr<MasterJournal> journal);

  // Sets up the limits per key, watching the client socket's closed connections. Before Run().
  Status StartKeyLimits(zmq::context_t& context);
  // Loads the journal (if any) into the index, the registry (workers unconfirmed, with links)
  // and the RDD descriptions. Before Run().
  Status RestoreFromJournal();
  void Run(const std::atomic<bool>& stop_requested);
  // Whether Run() returned because this master lost the lead.
  bool demoted() const { return standby_.demoted(); }

 private:
  // Whether a handler answered its request (the reply it built is sent) or parked it, to be
  // answered later.
  enum class Answer { kNow, kLater };

  // ---- the loop and its client socket ----
  std::chrono::milliseconds NextTimeout() const;
  // Lets the status hook (if any) run its queries against the loop's state.
  void ServeStatus();
  void DrainControl();
  // Receives and answers the rest of a client message whose routing id frame was read.
  void HandleClientMessage(const zmq::message_t& client);
  // Routes a request to its handler, which fills `reply` or parks the request.
  Result<Answer> Dispatch(proto::Request::Reader request, const zmq::message_t& client,
                          const std::optional<PeerIdentity>& peer, proto::Reply::Builder reply);
  // Answers a parked request with `message` (its id is set here).
  void AnswerParked(uint64_t ticket, capnp::MallocMessageBuilder& message);
  void FailParked(uint64_t ticket, const Status& status);

  // ---- carrying out what the components' events came to ----
  // Each journals the event's records (before the answer goes), then sends its worker
  // commands or answers its parked requests.
  void CarryOut(const ShuffleEffects& effects);
  void CarryOut(const LossEffects& effects);
  void CarryOut(const TenantEffects& effects);
  void CarryOut(LeaseEffects effects);
  // Runs a tenant request, carrying out its effects whether it succeeded or not.
  Status WithTenantEffects(const std::function<Status(TenantEffects&)>& request);
  // A journal write's outcome: a failure is logged and counted, and the master goes on from
  // memory (which stays the truth while it runs; workers re-register after a restart anyway).
  void Journaled(const Status& written);
  // Journals the removal of these copies (already dropped from the index).
  void JournalRemovals(const std::vector<RetiredCopy>& copies);
  // Logs a command that could not be sent to the worker (one without a link is skipped
  // silently: it was dropped).
  void WarnIfUnsent(const std::string& worker_id, const Status& sent);

  // ---- workers ----
  Status HandleRegister(proto::RegisterWorker::Reader request,
                        const std::optional<PeerIdentity>& peer, proto::Reply::Builder reply);
  Status HandleHeartbeat(proto::Heartbeat::Reader request, proto::Reply::Builder reply);
  Result<Answer> HandleReportBlocks(proto::ReportBlocks::Reader request,
                                    const zmq::message_t& client, uint64_t request_id,
                                    proto::Reply::Builder reply);
  // Applies a report's changes to the index (ApplyReport), journals what was recorded, and
  // tells workers to remove the copies that were refused as stale.
  AppliedBlocks ApplyChanges(const std::string& worker_id, const std::vector<BlockChange>& changes);
  // Removes the copies beyond their blocks' levels (ReplicationDriver::TrimExtraCopies).
  void TrimExtraCopies(const std::vector<BlockId>& ids);
  // A copy reported with a digest other than its version's: counted, logged, journaled as
  // removed, and its worker told to re-read it (verifyBlock, reportedBad).
  void DigestMismatch(const std::string& worker_id, const MismatchedCopy& copy);
  // A worker's reply to a command: a verifyBlock's, a replicateBlock's or a removeBlocks'.
  void HandleWorkerReply(const std::string& worker_id, IncomingMessage& message);
  // Forgets the worker: its record, its locations, its link; its outstanding remove requests
  // count as answered. Returns the number of locations dropped; with `gone`, appends the
  // blocks whose last location that was. Does not journal it.
  size_t ForgetWorker(const std::string& worker_id, std::vector<GoneBlock>* gone = nullptr);
  // ForgetWorker, journaled.
  size_t DropWorker(const std::string& worker_id, std::vector<GoneBlock>* gone = nullptr);
  void CheckHeartbeats();
  Status HandleDecommission(proto::DecommissionWorker::Reader request, proto::Reply::Builder reply);
  // Sends the copies the planner asks for and shuts down drained workers.
  void MaintainReplication();

  // ---- removals ----
  // Removes the blocks (removeBlocks, removeRdd) and parks the request until the workers
  // confirm or the remove timeout passes.
  void StartRemove(const zmq::message_t& client, uint64_t request_id, std::vector<BlockId> ids);
  // Removes exactly these versions of these copies; nobody waits.
  void RemoveCopies(const std::vector<RetiredCopy>& copies);
  // Sends the coordinator's commands; a command that cannot be sent counts as answered.
  void SendRemovals(const std::vector<RemovalCoordinator::Command>& commands);
  void AnswerRemoval(const RemovalCoordinator::Reply& reply);
  void AnswerRemovals(const std::vector<RemovalCoordinator::Reply>& replies);

  // ---- compute leases (ComputeLeaseService decides) ----
  // acquireCompute: parks the request while it waits behind the holder.
  Result<Answer> AcquireCompute(proto::AcquireCompute::Reader request, const zmq::message_t& client,
                                uint64_t request_id, proto::Reply::Builder reply);

  // ---- standby masters (StandbyService decides; the loop loads the journal and sends) ----
  // Follows the election: a standby that was elected leads; a leader that lost the lead
  // stops (demoted()) and the process starts over as a standby.
  void FollowLeadership();
  // Loads the journal the standby kept, becomes the leader of `epoch` and tells the workers.
  void Promote(uint64_t epoch);
  // Where clients and workers reach this master.
  std::string AdvertisedAddress() const;
  // Sends an acknowledgement now, or has the standby service hold it until every in-sync
  // standby holds the journal records it depends on (those before `depends_on`).
  void SendAcknowledgement(const zmq::message_t& client, capnp::MallocMessageBuilder& message,
                           uint64_t depends_on);
  void Send(std::vector<StandbyReply> replies);

  const MasterOptions options_;
  const Clock& clock_;
  const Duration check_interval_;  // how often heartbeats and replication are checked

  RequestSocket requests_;  // clients' and workers' requests
  zmq::socket_t control_;   // Stop() pokes it

  // The metadata: workers, block locations, RDD descriptions, and the journal that follows them
  // on disk (null without --state-dir).
  WorkerRegistry registry_;
  BlockIndex index_;
  RddCatalogue rdds_;
  std::unique_ptr<MasterJournal> journal_;
  LossTracker losses_{index_, options_.lost_blocks_kept};  // blocks whose last copy was lost
  MasterCounters counters_;                                // for status pages and metrics

  std::unique_ptr<KeyLimits> key_limits_;

  WorkerLinks links_;
  WorkerRequestIds request_ids_;  // of every command sent on links_
  ParkedRequests parked_;         // answered later: removals, waiting acquireCompute requests
  ClientQueries queries_{clock_, options_.keys.enabled(), index_,           registry_,
                         links_, rdds_.descriptions(),    losses_.records()};
  RemovalCoordinator removals_{clock_, request_ids_};
  ComputeLeaseService leases_{clock_, index_, queries_};  // waiters are tickets of parked_
  TimePoint next_heartbeat_check_{};
  const WorkerLinks::ReplyHandler handle_reply_ = [this](const std::string& worker_id,
                                                         IncomingMessage& reply) {
    HandleWorkerReply(worker_id, reply);
  };
  TenantService tenants_{clock_, index_};  // owners, shares, quotas
  ShuffleService shuffles_{clock_, ShuffleService::Limits{.ttl = options_.shuffle_ttl}};

  ReplicationDriver replication_;                    // re-replication and drains
  DigestVerifications verifications_{request_ids_};  // verifyBlock requests in flight

  // Standby masters: the role, the journal feed, the follower, parked fetches, held replies.
  StandbyService standby_;
};

}  // namespace bm
