#pragma once

// The master's event loop (MasterServer::Loop): internal to master/, shared by the files that
// define its parts. The loop owns the sockets and the order of events; each concern is a
// component that owns its state and answers an event with its effects (a reply, journal
// records, worker commands), which the loop carries out (CarryOut). master_loop.cc runs the
// loop, routes requests and carries out effects; master_loop_workers.cc handles what workers
// send (registration, heartbeats, block reports, replies to commands) and keeps their copies
// (drops, re-replication, drains); master_loop_clients.cc handles removals, RDD registration
// and compute leases. The components (one .h/.cc each):
//   RequestSocket       the ROUTER requests arrive on and replies leave by
//   KeyLimits           connections and registrations per key
//   WorkerRegistry, BlockIndex, MasterJournal   the metadata and its journal
//   WorkerLinks         the DEALER to each worker, and the keys the master vouches for
//   ClientQueries       the read-only requests
//   RemovalCoordinator  removals waiting for workers
//   ComputeLeases       who computes a missing block; ParkedRequests: whom to answer later
//   ReplicationDriver   re-replication and drains (ReplicationPlanner decides)
//   In the router's shape (an event in, its effects out):
//   ShuffleService      shuffles: placement, committed map attempts (ShuffleEffects; its
//                       requests are read and answered by master/shuffle_requests.h)
//   LossTracker         blocks whose last copy was lost, restarted workers' pending reports
//                       (LossEffects)
//   TenantService       dataset owners, shares, quotas; admits tenant keys' requests
//                       (TenantEffects)
//   StandbyService      the role in an election, the journal feed and follower, parked
//                       fetches and held acknowledgements (StandbyReply: what to send)

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

#include "common/clock.h"
#include "common/protocol.h"
#include "common/status.h"
#include "common/transport.h"
#include "master/block_index.h"
#include "master/client_queries.h"
#include "master/compute_leases.h"
#include "master/journal.h"
#include "master/key_limits.h"
#include "master/loss_tracker.h"
#include "master/master_server.h"
#include "master/master_status.h"
#include "master/parked_requests.h"
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

  // ---- the loop and its client socket (master_loop.cc) ----
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
  // Carries out what a component's event came to: journals its records (before the answer
  // goes), then sends its worker commands.
  void CarryOut(const ShuffleEffects& effects);
  void CarryOut(const LossEffects& effects);
  void CarryOut(const TenantEffects& effects);
  // Runs a tenant request, carrying out its effects whether it succeeded or not.
  Status WithTenantEffects(const std::function<Status(TenantEffects&)>& request);

  // ---- workers (master_loop_workers.cc) ----
  Status HandleRegister(proto::RegisterWorker::Reader request,
                        const std::optional<PeerIdentity>& peer, proto::Reply::Builder reply);
  Status HandleHeartbeat(proto::Heartbeat::Reader request, proto::Reply::Builder reply);
  Result<Answer> HandleReportBlocks(proto::ReportBlocks::Reader request,
                                    const zmq::message_t& client, uint64_t request_id,
                                    proto::Reply::Builder reply);
  // Applies a worker's changes to the index under the version rules (BlockIndex::Apply),
  // journals what was recorded, and tells workers to remove the copies that were refused as
  // stale. Returns the changes recorded, the copies they replaced on other workers (not removed
  // yet) and the changes refused.
  // A fresh block stored under a compute lease (BlockChange::lease) is refused unless the
  // lease is still held, or the block's current version is this one (another copy of the same
  // put ended the lease): a holder that stalled past its lease must not store a second
  // computed version after another client's.
  struct Applied {
    std::vector<BlockChange> recorded;
    std::vector<RetiredCopy> replaced;
    std::vector<BlockChange> refused;
    std::vector<GoneBlock> gone;  // blocks whose last location a removal dropped
  };
  Applied ApplyChanges(const std::string& worker_id, const std::vector<BlockChange>& changes);
  // Copies beyond their block's level (a worker came back after its blocks were copied
  // elsewhere): removes the extra ones, keeping memory copies and copies on distinct racks and
  // hosts first.
  void TrimExtraCopies(const std::vector<BlockId>& ids);
  // Journals the removal of these copies (already dropped from the index).
  void JournalRemovals(const std::vector<RetiredCopy>& copies);
  // A copy reported with a digest other than its version's (`expected`): not listed (the index
  // refused it); counted, logged, and its worker told to re-read it (verifyBlock, reportedBad),
  // which drops it if its bytes do not match its own digests.
  void DigestMismatch(const std::string& worker_id, const BlockChange& change, uint64_t expected);
  // A worker's reply to a command: a verifyBlock's, a replicateBlock's or a removeBlocks'.
  void HandleWorkerReply(const std::string& worker_id, IncomingMessage& message);
  // Forgets the worker: its record, its locations, its link; its outstanding remove requests
  // count as answered. Returns the number of locations dropped; with `gone`, appends the
  // blocks whose last location that was. Does not journal it.
  size_t ForgetWorker(const std::string& worker_id, std::vector<GoneBlock>* gone = nullptr);
  // ForgetWorker, journaled.
  size_t DropWorker(const std::string& worker_id, std::vector<GoneBlock>* gone = nullptr);
  // A journal write's outcome: a failure is logged and counted, and the master goes on from
  // memory (which stays the truth while it runs; workers re-register after a restart anyway).
  void Journaled(const Status& written);
  void CheckHeartbeats();
  Status HandleDecommission(proto::DecommissionWorker::Reader request, proto::Reply::Builder reply);
  // Sends the copies the planner asks for and shuts down drained workers.
  void MaintainReplication();
  // Logs a command that could not be sent to the worker (one without a link is skipped
  // silently: it was dropped).
  void WarnIfUnsent(const std::string& worker_id, const Status& sent);

  // ---- removals (master_loop_clients.cc) ----
  // Removes the blocks (removeBlocks, removeRdd) and parks the request until the workers
  // confirm or the remove timeout passes.
  void StartRemove(const zmq::message_t& client, uint64_t request_id, std::vector<BlockId> ids);
  // Removes exactly these versions of these copies; nobody waits.
  void RemoveCopies(const std::vector<RetiredCopy>& copies);
  // Sends the coordinator's commands; a command that cannot be sent counts as answered.
  void SendRemovals(const std::vector<RemovalCoordinator::Command>& commands);
  void AnswerRemoval(const RemovalCoordinator::Reply& reply);
  void AnswerRemovals(const std::vector<RemovalCoordinator::Reply>& replies);
  Status HandleRegisterRdd(proto::RegisterRdd::Reader request, proto::Reply::Builder reply);

  // ---- compute leases (master_loop_clients.cc) ----
  Result<Answer> HandleAcquireCompute(proto::AcquireCompute::Reader request,
                                      const zmq::message_t& client, uint64_t request_id,
                                      proto::Reply::Builder reply);
  Status HandleRenewCompute(proto::ComputeLease::Reader request, proto::Reply::Builder reply);
  Status HandleReleaseCompute(proto::ComputeLease::Reader request, proto::Reply::Builder reply);
  // A worker now holds these blocks: leases on them end and their waiters are answered.
  void BlocksStored(const std::vector<BlockChange>& changes);
  void AnswerWaiters(std::vector<ComputeLeases::Answer> answers);
  // Journals the leases granted and ended since the last call (before their answers go, so a
  // grant is acknowledged only once the standbys know of it).
  void JournalLeases();

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
  std::map<uint64_t, RddDescription> rdd_descriptions_;
  std::unique_ptr<MasterJournal> journal_;
  LossTracker losses_{index_, options_.lost_blocks_kept};  // blocks whose last copy was lost
  MasterCounters counters_;                                // for status pages and metrics

  std::unique_ptr<KeyLimits> key_limits_;

  WorkerLinks links_;
  WorkerRequestIds request_ids_;  // of every command sent on links_
  ParkedRequests parked_;         // answered later: removals, waiting acquireCompute requests
  ClientQueries queries_{clock_, options_.keys.enabled(), index_,           registry_,
                         links_, rdd_descriptions_,       losses_.records()};
  RemovalCoordinator removals_{clock_, request_ids_};
  ComputeLeases leases_{clock_};  // waiters are tickets of parked_
  TimePoint next_heartbeat_check_{};
  const WorkerLinks::ReplyHandler handle_reply_ = [this](const std::string& worker_id,
                                                         IncomingMessage& reply) {
    HandleWorkerReply(worker_id, reply);
  };
  std::unordered_map<BlockId, uint64_t> journaled_leases_;  // block -> token, as journaled
  TenantService tenants_{clock_, index_};                   // owners, shares, quotas
  ShuffleService shuffles_{clock_, ShuffleService::Limits{.ttl = options_.shuffle_ttl}};

  ReplicationDriver replication_;  // re-replication and drains
  // verifyBlock requests sent after a digest mismatch, by request id: their answers are logged.
  struct VerifyRequest {
    std::string worker_id;
    BlockId block;
  };
  std::unordered_map<uint64_t, VerifyRequest> verify_requests_;

  // Standby masters: the role, the journal feed, the follower, parked fetches, held replies.
  StandbyService standby_;
};

}  // namespace bm
