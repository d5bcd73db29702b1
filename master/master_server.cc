#include "master/master_server.h"

#include <capnp/message.h>
#include <poll.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/access_policy.h"
#include "common/connection_limit.h"
#include "common/peer_monitor.h"
#include "common/protocol.h"
#include "common/socket_drain.h"
#include "common/transport.h"
#include "common/zap_handler.h"
#include "master/block_index.h"
#include "master/compute_leases.h"
#include "master/replication_planner.h"
#include "master/journal.h"
#include "master/master_status.h"
#include "master/registration_limit.h"
#include "master/worker_registry.h"

namespace bm {
namespace {

constexpr size_t kMaxWorkerIdBytes = 256;
constexpr size_t kMaxAddressBytes = 1024;
constexpr size_t kMaxHolderBytes = 256;
constexpr size_t kMaxRddNameBytes = 256;
constexpr size_t kMaxLabelBytes = 256;
// RDD descriptions are small, but a client registering ids in a loop must not grow the master
// without bound.
constexpr size_t kMaxRegisteredRdds = 100000;
// RDDs in one listRddPage page at most: a few hundred bytes each with their workers' ids.
constexpr uint32_t kRddsPerPage = 10000;
// Blocks in one listBlocks page at most: ~1 MB of reply, and one pass over the index each.
constexpr size_t kMaxBlockPage = 10000;
// Bounds on a compute lease and on how long the master keeps a waiting acquireCompute.
constexpr uint32_t kMinLeaseMs = 50;
constexpr uint32_t kMaxLeaseMs = 10 * 60 * 1000;
constexpr uint32_t kMaxComputeWaitMs = 60 * 1000;
// Block copies (re-replication, drains) in flight at once, and how long one may take before
// it is planned again.
constexpr size_t kMaxCopiesInFlight = 16;
constexpr Duration kCopyTimeout = std::chrono::seconds(120);
// Block ids per removeBlocks message to a worker, so a big RDD's removal stays far below the
// header size limit.
constexpr size_t kRemoveBatch = 10000;
// How long the acknowledgement of a report whose fresh put replaced copies on other workers
// waits for those workers to confirm they removed them. Below the worker's wait for the
// acknowledgement (2 s), so that the put returns after the old copies are gone whenever their
// workers answer at all.
constexpr Duration kReplaceWait = std::chrono::milliseconds(1500);
// Messages read from one socket before the loop looks at the others again.
constexpr int kMaxMessagesPerWake = 256;
// 256 KiB: the replies of lookups batched up to ~2000 ids.
constexpr size_t kReplySegmentWords = 32 * 1024;
constexpr Duration kMinHeartbeatInterval = std::chrono::milliseconds(50);
constexpr Duration kMinCheckInterval = std::chrono::milliseconds(10);
constexpr Duration kMaxCheckInterval = std::chrono::seconds(1);

// ---- decoding: every field of a request is read and checked before any state changes ----

Result<std::string> DecodeName(capnp::Text::Reader text, const char* what, size_t max_bytes) {
  if (text.size() == 0) return InvalidArgumentError(std::string(what) + " is empty");
  if (text.size() > max_bytes) {
    return InvalidArgumentError(std::string(what) + " is longer than " + std::to_string(max_bytes) +
                                " bytes");
  }
  return std::string(text.cStr(), text.size());
}

Result<BlockChange> DecodeBlockStatus(proto::BlockStatus::Reader status, bool removed,
                                      bool fresh = false) {
  ASSIGN_OR_RETURN(BlockId id, ParseWireBlockId(status.getBlockId()));
  BlockChange change{id};
  change.removed = removed;
  change.level = FromProto(status.getLevel());
  change.tier = FromProto(status.getTier());
  change.size = status.getSize();
  change.version = status.getVersion();
  change.digest = status.getDigest();
  change.fresh = fresh && !removed;
  return change;
}

Result<std::vector<BlockId>> DecodeBlockIds(capnp::List<capnp::Text>::Reader ids) {
  std::vector<BlockId> out;
  out.reserve(ids.size());
  for (capnp::Text::Reader text : ids) {
    ASSIGN_OR_RETURN(BlockId id, ParseWireBlockId(text));
    out.push_back(id);
  }
  return out;
}

Result<std::string> DecodeLabel(capnp::Text::Reader text, const char* what) {
  if (text.size() > kMaxLabelBytes) {
    return InvalidArgumentError(std::string(what) + " is longer than " +
                                std::to_string(kMaxLabelBytes) + " bytes");
  }
  return std::string(text.cStr(), text.size());
}

proto::WorkerState ToProto(WorkerState state) {
  switch (state) {
    case WorkerState::kActive:
      return proto::WorkerState::ACTIVE;
    case WorkerState::kUnconfirmed:
      return proto::WorkerState::UNCONFIRMED;
    case WorkerState::kDecommissioning:
      return proto::WorkerState::DECOMMISSIONING;
  }
  return proto::WorkerState::ACTIVE;
}

bool IsSupportedWorkerAddress(std::string_view address) {
  return address.starts_with("tcp://") || address.starts_with("ipc://");
}

kj::Array<capnp::word> ZeroedWords(size_t count) {
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(count);
  std::memset(words.begin(), 0, count * sizeof(capnp::word));
  return words;
}

MasterOp OpOf(proto::Request::Which which) {
  switch (which) {
    case proto::Request::REGISTER_WORKER:
      return MasterOp::kRegisterWorker;
    case proto::Request::HEARTBEAT:
      return MasterOp::kHeartbeat;
    case proto::Request::REPORT_BLOCKS:
      return MasterOp::kReportBlocks;
    case proto::Request::GET_LOCATIONS:
      return MasterOp::kGetLocations;
    case proto::Request::LIST_WORKERS:
      return MasterOp::kListWorkers;
    case proto::Request::LIST_BLOCKS:
      return MasterOp::kListBlocks;
    case proto::Request::LIST_RDDS:
    case proto::Request::LIST_RDD_PAGE:
      return MasterOp::kListRdds;
    case proto::Request::REMOVE_BLOCKS:
      return MasterOp::kRemoveBlocks;
    case proto::Request::REMOVE_RDD:
      return MasterOp::kRemoveRdd;
    case proto::Request::REGISTER_RDD:
      return MasterOp::kRegisterRdd;
    case proto::Request::ACQUIRE_COMPUTE:
      return MasterOp::kAcquireCompute;
    case proto::Request::RENEW_COMPUTE:
      return MasterOp::kRenewCompute;
    case proto::Request::RELEASE_COMPUTE:
      return MasterOp::kReleaseCompute;
    case proto::Request::DECOMMISSION_WORKER:
      return MasterOp::kDecommission;
    case proto::Request::PING:
      return MasterOp::kPing;
    default:
      return MasterOp::kOther;
  }
}

uint64_t ToMillis(Duration d) {
  return static_cast<uint64_t>(
      std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(d).count()));
}

}  // namespace

// The event loop: the sockets and all state of the master. Runs on one thread.
class MasterServer::Loop {
 public:
  Loop(zmq::context_t& context, MasterOptions options, const Clock& clock, zmq::socket_t router,
       zmq::socket_t control, std::unique_ptr<MasterJournal> journal)
      : context_(context),
        options_(std::move(options)),
        clock_(clock),
        check_interval_(std::clamp<Duration>(options_.heartbeat_timeout / 4, kMinCheckInterval,
                                             kMaxCheckInterval)),
        router_(std::move(router)),
        control_(std::move(control)),
        registry_(clock),
        journal_(std::move(journal)),
        connection_limit_(options_.max_connections_per_key, options_.zap),
        registration_limit_(options_.max_registrations_per_key, clock) {}

  // Watches the client socket's closed connections, for the connection limit. Before Run().
  Status MonitorConnections() {
    ASSIGN_OR_RETURN(peer_monitor_,
                     PeerMonitor::Create(context_, router_,
                                         "master-" + std::to_string(reinterpret_cast<uintptr_t>(
                                                         router_.handle()))));
    return Status::Ok();
  }

  // Loads the journal (if any) into the index, the registry (workers unconfirmed, with links)
  // and the RDD descriptions. Before Run().
  Status RestoreFromJournal();
  void Run(const std::atomic<bool>& stop_requested);

 private:
  // A client's removeBlocks / removeRdd waiting for the workers that hold the blocks. It is
  // answered when its last worker request is answered (a worker dropped meanwhile counts as
  // answered) or at its deadline, with the number of distinct blocks confirmed removed.
  struct PendingRemove {
    zmq::message_t client;
    uint64_t request_id = 0;
    size_t requested = 0;  // distinct ids asked for
    TimePoint deadline;
    size_t outstanding = 0;  // worker requests not answered yet
    std::unordered_set<BlockId> confirmed;
    // Not a client's removal: a worker's report whose fresh puts replaced other copies, answered
    // `ok` once those are removed (or at the deadline).
    bool acknowledges_report = false;
  };
  // An acquireCompute the leases keep waiting, by waiter id.
  struct ParkedAcquire {
    zmq::message_t client;
    uint64_t request_id = 0;
  };

  // One removeBlocks sent to a worker for a PendingRemove.
  struct WorkerRequest {
    uint64_t op_id;
    std::string worker_id;
    std::vector<BlockId> blocks;
    std::vector<uint64_t> versions;  // empty, or the version removed of each block
  };

  std::chrono::milliseconds NextTimeout() const;
  // Lets the status hook (if any) run its queries against the loop's state.
  void ServeStatus();
  void DrainControl();
  // Forgets the connections the monitor reports closed.
  void DrainClosedConnections();
  // Counts the message's connection against its sender's key (keys on).
  Status AdmitConnection(const IncomingMessage& message);
  void DrainWorker(const std::string& worker_id, zmq::socket_t& socket);
  void DrainClients();
  // Receives and answers the rest of a client message whose routing id frame was read.
  void HandleClientMessage(const zmq::message_t& client);
  // Handles a request; fills `reply` or (for removals) takes over replying and sets *deferred.
  Status Dispatch(proto::Request::Reader request, const zmq::message_t& client,
                  const std::optional<PeerIdentity>& peer, proto::Reply::Builder reply,
                  bool* deferred);
  Status HandleRegister(proto::RegisterWorker::Reader request,
                        const std::optional<PeerIdentity>& peer, proto::Reply::Builder reply);
  Status HandleHeartbeat(proto::Heartbeat::Reader request, proto::Reply::Builder reply);
  Status HandleReportBlocks(proto::ReportBlocks::Reader request, const zmq::message_t& client,
                            uint64_t request_id, proto::Reply::Builder reply, bool* deferred);
  // A worker's lost blocks (RegisterWorker / ReportBlocks lostBlocks): logged, and copies are
  // planned at the next turn of the loop.
  void BlocksLost(const std::string& worker_id, capnp::List<capnp::Text>::Reader lost);
  Status HandleGetLocations(proto::GetLocations::Reader request, proto::Reply::Builder reply);
  void HandleListWorkers(proto::Reply::Builder reply);
  Status HandleListBlocks(proto::ListBlocks::Reader request, proto::Reply::Builder reply);
  void HandleListRdds(proto::Reply::Builder reply);
  void HandleListRddPage(proto::ListRdds::Reader request, proto::Reply::Builder reply);
  // RDDs with cached blocks, and registered ones with none cached (yet, or any more), by id.
  std::map<uint64_t, RddSummary> CollectRdds() const;
  void FillRddInfo(uint64_t rdd_id, const RddSummary& summary, proto::RddInfo::Builder out) const;
  Status HandleRegisterRdd(proto::RegisterRdd::Reader request, proto::Reply::Builder reply);
  void FillBlockLocations(const BlockId& id, const std::optional<BlockInfo>& info,
                          proto::BlockLocations::Builder out) const;

  // ---- compute leases ----
  Status HandleAcquireCompute(proto::AcquireCompute::Reader request, const zmq::message_t& client,
                              uint64_t request_id, proto::Reply::Builder reply, bool* deferred);
  Status HandleRenewCompute(proto::ComputeLease::Reader request, proto::Reply::Builder reply);
  Status HandleReleaseCompute(proto::ComputeLease::Reader request, proto::Reply::Builder reply);
  // A worker now holds these blocks: leases on them end and their waiters are answered.
  void BlocksStored(const std::vector<BlockChange>& changes);
  void AnswerWaiters(std::vector<ComputeLeases::Answer> answers);
  void ExpireLeases();
  void AbortWaiters();

  // A DEALER to the worker's data port; with keys on, a CURVE client trusting `public_key`.
  Result<zmq::socket_t> ConnectWorker(const std::string& address, const std::string& public_key);
  // The worker's CURVE key as it registered with it; empty with keys off or when unknown.
  const std::string& WorkerKey(const std::string& worker_id) const;
  // Forgets the worker: its record, its locations, its link; its outstanding remove requests
  // count as answered. Returns the number of locations dropped. Does not journal it.
  size_t ForgetWorker(const std::string& worker_id);
  // ForgetWorker, journaled.
  size_t DropWorker(const std::string& worker_id);
  // A journal write's outcome: a failure is logged and counted, and the master goes on from
  // memory (which stays the truth while it runs; workers re-register after a restart anyway).
  void Journaled(const Status& written);
  void StartRemove(const zmq::message_t& client, uint64_t request_id, std::vector<BlockId> ids);
  // Applies a worker's changes to the index under the version rules (BlockIndex::Apply),
  // journals what was recorded, and tells workers to remove the copies that were refused as
  // stale or replaced by a fresh put. Returns the copies replaced on other workers.
  // A fresh block stored under a compute lease (BlockChange::lease) is refused unless the
  // lease is still held, or the block's current version is this one (another copy of the same
  // put ended the lease): a holder that stalled past its lease must not store a second
  // computed version after another client's. Refused changes are added to `refused`.
  std::vector<RetiredCopy> ApplyChanges(const std::string& worker_id,
                                        std::vector<BlockChange>& changes,
                                        std::vector<BlockChange>* refused);
  // Sends removeBlocks for exactly these versions to their workers. With `op` the requests
  // count towards that pending operation; without, nobody waits for them.
  void RemoveCopies(const std::vector<RetiredCopy>& copies, PendingRemove* op, uint64_t op_id);
  // Copies beyond their block's level (a worker came back after its blocks were copied
  // elsewhere): removes the extra ones, keeping memory copies and copies on distinct racks and
  // hosts first.
  void TrimExtraCopies(const std::vector<BlockId>& ids);
  // Journals the removal of these copies (already dropped from the index).
  void JournalRemovals(const std::vector<RetiredCopy>& copies);
  void HandleWorkerReply(const std::string& worker_id, IncomingMessage& message);
  // A copy reported with a digest other than its version's (`expected`): not listed (the index
  // refused it); counted, logged, and its worker told to re-read it (verifyBlock, reportedBad),
  // which drops it if its bytes do not match its own digests.
  void DigestMismatch(const std::string& worker_id, const BlockChange& change, uint64_t expected);
  // Marks a worker request answered; replies to its operation if that was the last.
  void FinishWorkerRequest(uint64_t op_id);
  void ReplyRemoved(const PendingRemove& op);
  void CheckHeartbeats();
  // ---- replication: restoring copies, draining workers ----
  Status HandleDecommission(proto::DecommissionWorker::Reader request, proto::Reply::Builder reply);
  // Sends the copies the planner asks for and shuts down drained workers.
  void MaintainReplication();
  void SendToWorker(const std::string& worker_id, capnp::MallocMessageBuilder& message);
  void ExpireRemoves();
  void AbortRemoves();

  void Send(const zmq::message_t& client, capnp::MessageBuilder& message);
  void SendError(const zmq::message_t& client, uint64_t request_id, const Status& status);

  zmq::context_t& context_;
  const MasterOptions options_;
  const Clock& clock_;
  const Duration check_interval_;

  zmq::socket_t router_;
  zmq::socket_t control_;
  // A DEALER per registered worker, connected to its data address, for remove commands.
  std::map<std::string, zmq::socket_t, std::less<>> links_;
  // The public key each worker authenticated with when it registered, by worker id (keys on).
  std::map<std::string, std::string, std::less<>> worker_keys_;
  // Sockets that may hold messages their ZMQ_FD will not signal (see Run()): sent on since
  // they were last drained, or not drained to the end.
  bool router_unsettled_ = true;
  std::set<std::string, std::less<>> unsettled_links_;

  WorkerRegistry registry_;
  BlockIndex index_;
  std::map<uint64_t, RddDescription> rdd_descriptions_;
  // Follows registry_, index_ and rdd_descriptions_ on disk; null without --state-dir.
  std::unique_ptr<MasterJournal> journal_;
  MasterCounters counters_;  // for status pages and metrics
  // Limits per key (keys on); the monitor tells the connection limit which connections closed.
  std::unique_ptr<PeerMonitor> peer_monitor_;
  ConnectionLimit connection_limit_;
  RegistrationLimit registration_limit_;
  TimePoint next_heartbeat_check_{};
  ComputeLeases leases_{clock_};
  std::unordered_map<uint64_t, ParkedAcquire> parked_;  // by waiter id
  uint64_t next_waiter_id_ = 1;

  ReplicationPlanner replication_{clock_, kMaxCopiesInFlight, kCopyTimeout};
  // replicateBlock requests sent to workers, by the id sent.
  struct CopyRequest {
    std::string source;
    BlockId block;
  };
  std::unordered_map<uint64_t, CopyRequest> copy_requests_;
  // verifyBlock requests sent after a digest mismatch, by request id: their answers are logged.
  std::unordered_map<uint64_t, CopyRequest> verify_requests_;
  size_t last_reported_short_ = 0;

  std::unordered_map<uint64_t, PendingRemove> pending_;
  std::unordered_map<uint64_t, WorkerRequest> worker_requests_;  // by the id sent to the worker
  uint64_t next_op_id_ = 1;
  uint64_t next_worker_request_id_ = 1;

  // Reused by HandleGetLocations so that a lookup allocates nothing per block.
  std::vector<LocationRef> lookup_scratch_;
  // The first segment of every reply built by HandleClientMessage, zeroed (as Cap'n Proto
  // requires) and reused: a reply of 100 locations (~13 KiB) fits in it, so a lookup neither
  // callocs a fresh 8 KiB first segment nor spills into a second one.
  kj::Array<capnp::word> reply_segment_ = ZeroedWords(kReplySegmentWords);
};

// ---- the loop ----

Status MasterServer::Loop::RestoreFromJournal() {
  if (!journal_) return Status::Ok();
  const TimePoint start = clock_.Now();
  ASSIGN_OR_RETURN(JournalSnapshot snapshot,
                   journal_->Load([&](const std::string& worker_id, const BlockChange& change) {
                     index_.Apply(worker_id, change);
                   }));
  for (const auto& [id, version] : snapshot.retired) index_.RetireVersion(id, version);
  for (JournaledWorker& worker : snapshot.workers) {
    // Connected now, so removes fan out to it before it registers again. With keys on, the
    // key it authenticated with last time is vouched for to clients, and trusted by the link,
    // until it registers again (a master with keys off has no use for journaled keys).
    if (options_.keys.enabled() && !worker.public_key.empty()) {
      worker_keys_.insert_or_assign(worker.id, worker.public_key);
    }
    Result<zmq::socket_t> link = ConnectWorker(worker.address, WorkerKey(worker.id));
    if (!link.ok()) {
      spdlog::warn("journaled worker {}: {}; forgetting it", worker.id, link.status().ToString());
      index_.RemoveWorker(worker.id);
      Journaled(journal_->RecordWorkerDropped(worker.id));
      continue;
    }
    links_.insert_or_assign(worker.id, std::move(link).value());
    registry_.Restore(worker.id, worker.address,
                      WorkerLabels{std::move(worker.host), std::move(worker.rack)});
  }
  for (JournaledRdd& rdd : snapshot.rdds) {
    rdd_descriptions_.insert_or_assign(
        rdd.rdd_id, RddDescription{std::move(rdd.name), rdd.level, rdd.total_partitions});
  }
  spdlog::info(
      "restored from the master journal {}: {} workers (unconfirmed until they register again), "
      "{} block locations, {} RDD descriptions in {} ms",
      journal_->dir(), registry_.size(), snapshot.location_count, rdd_descriptions_.size(),
      ToMillis(clock_.Now() - start));
  return Status::Ok();
}

// The loop sleeps in ::poll on the sockets' ZMQ_FDs rather than in zmq::poll. On this
// project's VMs a system call costs microseconds, and zmq::poll makes many per wake-up: two
// poll passes, and a ZMQ_EVENTS check (getpid, poll, read) of every socket, each worker link
// included, before and after. Here a wake-up drains only the sockets whose fd fired (the
// client socket always): a single-id lookup went from ~16 to ~12 system calls in the master
// (strace -c, both its threads), and the cost no longer grows with the number of workers.
//
// A ZMQ_FD is edge-triggered: it fires when commands reach the socket, and any operation on
// the socket (a send too) may consume them. So before sleeping, every socket is left
// "settled": drained until a receive finds nothing (the client socket) or ZMQ_EVENTS shows no
// message (the worker links, DrainSocket), with nothing sent on it since. A socket sent on
// after its drain, or whose drain stopped at kMaxMessagesPerWake, is drained again before the
// loop sleeps (it then polls with a zero timeout).
void MasterServer::Loop::Run(const std::atomic<bool>& stop_requested) {
  next_heartbeat_check_ = clock_.Now() + check_interval_;
  std::vector<pollfd> fds;
  std::vector<std::pair<const std::string*, zmq::socket_t*>> workers;
  // The first pass drains everything.
  router_unsettled_ = true;
  for (const auto& [id, socket] : links_) unsettled_links_.insert(id);
  DrainClosedConnections();
  while (!stop_requested.load()) {
    fds.clear();
    workers.clear();
    fds.push_back({router_.get(zmq::sockopt::fd), POLLIN, 0});
    fds.push_back({control_.get(zmq::sockopt::fd), POLLIN, 0});
    fds.push_back({peer_monitor_->socket().get(zmq::sockopt::fd), POLLIN, 0});
    if (options_.status_hook) fds.push_back({options_.status_hook->wake_fd(), POLLIN, 0});
    for (auto& [id, socket] : links_) {
      fds.push_back({socket.get(zmq::sockopt::fd), POLLIN, 0});
      workers.emplace_back(&id, &socket);
    }
    const bool unsettled = router_unsettled_ || !unsettled_links_.empty();
    const int timeout = unsettled ? 0 : static_cast<int>(NextTimeout().count());
    if (::poll(fds.data(), fds.size(), timeout) < 0) {
      // Anything but a signal means the fds are broken: a bug, as zmq::poll's throw was.
      BM_CHECK(errno == EINTR);
      continue;
    }
    if (fds[1].revents != 0) DrainControl();
    // TakeClosed() drains the monitor's socket, so its fd is settled after this.
    if (fds[2].revents != 0) DrainClosedConnections();
    const size_t first_worker_fd = options_.status_hook ? 4 : 3;
    if (first_worker_fd == 4 && fds[3].revents != 0) ServeStatus();
    // Worker replies first: handling them never adds or drops links, so `workers` stays valid.
    for (size_t i = 0; i < workers.size(); ++i) {
      if (fds[i + first_worker_fd].revents != 0 ||
          unsettled_links_.contains(*workers[i].first)) {
        DrainWorker(*workers[i].first, *workers[i].second);
      }
    }
    // Always: replies were sent on it last time round.
    DrainClients();
    CheckHeartbeats();
    ExpireRemoves();
    ExpireLeases();
  }
  AbortRemoves();
  AbortWaiters();
}

std::chrono::milliseconds MasterServer::Loop::NextTimeout() const {
  TimePoint wake = next_heartbeat_check_;
  for (const auto& [id, op] : pending_) wake = std::min(wake, op.deadline);
  if (std::optional<TimePoint> lease_deadline = leases_.NextDeadline()) {
    wake = std::min(wake, *lease_deadline);
  }
  const Duration left = std::max<Duration>(wake - clock_.Now(), Duration::zero());
  return std::chrono::ceil<std::chrono::milliseconds>(left);
}

void MasterServer::Loop::ServeStatus() {
  if (options_.zap != nullptr) {
    counters_.handshakes_refused = options_.zap->refused();
    counters_.handshakes_refused_at_limit = options_.zap->refused_at_limit();
  }
  options_.status_hook->Serve(MasterView{
      .index = index_,
      .registry = registry_,
      .rdds = rdd_descriptions_,
      .counters = counters_,
      .under_replicated = replication_.under_replicated(),
      .copies_in_flight = replication_.in_flight(),
      .leases_held = leases_.lease_count(),
      .journaled = journal_ != nullptr,
      .now = clock_.Now(),
  });
}

void MasterServer::Loop::DrainClosedConnections() {
  for (int fd : peer_monitor_->TakeClosed()) connection_limit_.Closed(fd);
}

Status MasterServer::Loop::AdmitConnection(const IncomingMessage& message) {
  if (!message.peer()) return Status::Ok();
  // A descriptor not seen before may be a closed connection's, reused: forget the closed
  // ones first (see PeerMonitor).
  if (!connection_limit_.Knows(message.source_fd())) DrainClosedConnections();
  Status admitted = connection_limit_.Admit(message.source_fd(), *message.peer());
  if (!admitted.ok()) ++counters_.connections_refused;
  return admitted;
}

void MasterServer::Loop::DrainControl() {
  zmq::message_t message;
  while (control_.recv(message, zmq::recv_flags::dontwait)) {
  }
}

void MasterServer::Loop::DrainWorker(const std::string& worker_id, zmq::socket_t& socket) {
  const Drained drained = DrainSocket(socket, kMaxMessagesPerWake, [&] {
    Result<IncomingMessage> received = ReceiveMessage(socket, /*has_routing_id=*/false);
    if (!received.ok()) {
      spdlog::warn("bad message from worker {}: {}", worker_id, received.status().ToString());
    } else {
      HandleWorkerReply(worker_id, received.value());
    }
    return true;
  });
  if (drained == Drained::kSettled) {
    unsettled_links_.erase(worker_id);
  } else {
    unsettled_links_.insert(worker_id);
  }
}

// Each message's first frame (its sender's routing id) is received without waiting, and a
// drain ends at the first that is not there, rather than asking ZMQ_EVENTS before every
// message: libzmq processes the socket's commands (getpid and a poll(2)) on each ZMQ_EVENTS
// query but only once on a receive that finds nothing, which settles the socket the same way.
// With 8 clients a wake-up finds one or two requests, so this saves one of the ~2.6 poll(2)
// and ~4 getpid calls the master made per single lookup (strace -c).
void MasterServer::Loop::DrainClients() {
  for (int i = 0; i < kMaxMessagesPerWake; ++i) {
    zmq::message_t routing_id;
    if (!router_.recv(routing_id, zmq::recv_flags::dontwait)) {
      router_unsettled_ = false;
      return;
    }
    HandleClientMessage(routing_id);
  }
  router_unsettled_ = true;  // more may be waiting
}

void MasterServer::Loop::HandleClientMessage(const zmq::message_t& client) {
  Result<IncomingMessage> received =
      router_.get(zmq::sockopt::rcvmore) != 0
          ? ReceiveMessage(router_, /*has_routing_id=*/false)
          : Result<IncomingMessage>(InvalidArgumentError("message has no header frame"));
  if (!received.ok()) {
    // Rejected before its id could be read: answer with id 0.
    if (received.status().code() != StatusCode::kUnavailable) {
      SendError(client, 0, received.status());
    }
    return;
  }
  IncomingMessage& message = received.value();
  uint64_t request_id = 0;
  bool deferred = false;
  MasterOp op = MasterOp::kOther;
  const TimePoint start = clock_.Now();
  // The builder zeroes what it used of the scratch segment again when it is destroyed.
  capnp::MallocMessageBuilder reply_message(reply_segment_.asPtr());
  proto::Reply::Builder reply = reply_message.initRoot<proto::Reply>();
  Status status = ReadGuarded([&]() -> Status {
    proto::Request::Reader request = message.request();
    request_id = request.getId();
    op = OpOf(request.which());
    RETURN_IF_ERROR(AdmitConnection(message));
    return Dispatch(request, client, message.peer(), reply, &deferred);
  });
  counters_.RecordRequest(op, status.ok(), clock_.Now() - start);
  if (!status.ok()) {
    SendError(client, request_id, status);
    return;
  }
  if (deferred) return;
  reply.setId(request_id);
  Send(client, reply_message);
}

Status MasterServer::Loop::Dispatch(proto::Request::Reader request, const zmq::message_t& client,
                                    const std::optional<PeerIdentity>& peer,
                                    proto::Reply::Builder reply, bool* deferred) {
  const bool secure = options_.keys.enabled();
  RETURN_IF_ERROR(AuthorizeMasterRequest(secure, peer, request.which()));
  switch (request.which()) {
    case proto::Request::REGISTER_WORKER:
      RETURN_IF_ERROR(
          AuthorizeWorkerId(secure, peer, request.getRegisterWorker().getWorkerId().cStr()));
      if (peer) {
        Status admitted = registration_limit_.Admit(*peer);
        if (!admitted.ok()) {
          ++counters_.registrations_refused;
          return admitted;
        }
      }
      return HandleRegister(request.getRegisterWorker(), peer, reply);
    case proto::Request::HEARTBEAT:
      RETURN_IF_ERROR(AuthorizeWorkerId(secure, peer, request.getHeartbeat().getWorkerId().cStr()));
      return HandleHeartbeat(request.getHeartbeat(), reply);
    case proto::Request::REPORT_BLOCKS:
      RETURN_IF_ERROR(
          AuthorizeWorkerId(secure, peer, request.getReportBlocks().getWorkerId().cStr()));
      return HandleReportBlocks(request.getReportBlocks(), client, request.getId(), reply,
                                deferred);
    case proto::Request::GET_LOCATIONS:
      return HandleGetLocations(request.getGetLocations(), reply);
    case proto::Request::LIST_WORKERS:
      HandleListWorkers(reply);
      return Status::Ok();
    case proto::Request::LIST_BLOCKS:
      return HandleListBlocks(request.getListBlocks(), reply);
    case proto::Request::LIST_RDDS:
      HandleListRdds(reply);
      return Status::Ok();
    case proto::Request::LIST_RDD_PAGE:
      HandleListRddPage(request.getListRddPage(), reply);
      return Status::Ok();
    case proto::Request::REMOVE_BLOCKS: {
      ASSIGN_OR_RETURN(std::vector<BlockId> ids,
                       DecodeBlockIds(request.getRemoveBlocks().getBlockIds()));
      *deferred = true;
      StartRemove(client, request.getId(), std::move(ids));
      return Status::Ok();
    }
    case proto::Request::REMOVE_RDD: {
      const uint64_t rdd_id = request.getRemoveRdd().getRddId();
      if (rdd_descriptions_.erase(rdd_id) > 0 && journal_) {
        Journaled(journal_->RecordRddForgotten(rdd_id));
      }
      *deferred = true;
      StartRemove(client, request.getId(), index_.RddBlockIds(rdd_id));
      return Status::Ok();
    }
    case proto::Request::REGISTER_RDD:
      return HandleRegisterRdd(request.getRegisterRdd(), reply);
    case proto::Request::ACQUIRE_COMPUTE:
      return HandleAcquireCompute(request.getAcquireCompute(), client, request.getId(), reply,
                                  deferred);
    case proto::Request::RENEW_COMPUTE:
      return HandleRenewCompute(request.getRenewCompute(), reply);
    case proto::Request::RELEASE_COMPUTE:
      return HandleReleaseCompute(request.getReleaseCompute(), reply);
    case proto::Request::DECOMMISSION_WORKER:
      return HandleDecommission(request.getDecommissionWorker(), reply);
    case proto::Request::PING:
      reply.setOk();
      return Status::Ok();
    default:
      return InvalidArgumentError("unsupported request");
  }
}

// ---- worker requests ----

Status MasterServer::Loop::HandleRegister(proto::RegisterWorker::Reader request,
                                          const std::optional<PeerIdentity>& peer,
                                          proto::Reply::Builder reply) {
  ASSIGN_OR_RETURN(std::string id,
                   DecodeName(request.getWorkerId(), "worker id", kMaxWorkerIdBytes));
  ASSIGN_OR_RETURN(std::string address,
                   DecodeName(request.getAddress(), "worker address", kMaxAddressBytes));
  if (!IsSupportedWorkerAddress(address)) {
    return InvalidArgumentError("worker address '" + address + "' is not tcp:// or ipc://");
  }
  ASSIGN_OR_RETURN(std::string host, DecodeLabel(request.getHost(), "host label"));
  ASSIGN_OR_RETURN(std::string rack, DecodeLabel(request.getRack(), "rack label"));
  const WorkerStats stats = FromProto(request.getStats());
  std::unordered_set<BlockId> fresh_ids;
  for (capnp::Text::Reader text : request.getFreshBlocks()) {
    ASSIGN_OR_RETURN(BlockId fresh, ParseWireBlockId(text));
    fresh_ids.insert(fresh);
  }
  std::vector<BlockChange> blocks;
  blocks.reserve(request.getBlocks().size());
  for (proto::BlockStatus::Reader block : request.getBlocks()) {
    ASSIGN_OR_RETURN(BlockChange change, DecodeBlockStatus(block, /*removed=*/false));
    change.fresh = fresh_ids.contains(change.id);
    blocks.push_back(change);
  }
  const std::string public_key = peer ? peer->public_key : std::string();
  ASSIGN_OR_RETURN(zmq::socket_t link, ConnectWorker(address, public_key));

  const bool known = registry_.Contains(id);
  if (known) ForgetWorker(id);
  registry_.Register(id, address, stats, WorkerLabels{host, rack});
  links_.insert_or_assign(id, std::move(link));
  if (!public_key.empty()) worker_keys_.insert_or_assign(id, public_key);
  // What it holds is taken under the version rules: copies of versions replaced or removed
  // while it was away are refused and removed from it.
  std::vector<BlockChange> recorded;
  std::vector<RetiredCopy> to_remove;
  std::vector<RetiredCopy> replaced;
  for (const BlockChange& change : blocks) {
    ApplyResult applied = index_.Apply(id, change);
    if (applied.digest_mismatch) {
      DigestMismatch(id, change, applied.expected_digest);
      continue;
    }
    if (!applied.recorded) {
      to_remove.push_back(RetiredCopy{id, change.id, change.version});
      continue;
    }
    recorded.push_back(change);
    replaced.insert(replaced.end(), applied.replaced.begin(), applied.replaced.end());
  }
  // The journal's registration record replaces the old locations in the same batch.
  if (journal_) {
    Journaled(journal_->RecordRegistration(JournaledWorker{.id = id,
                                                           .address = address,
                                                           .host = host,
                                                           .rack = rack,
                                                           .public_key = public_key},
                                           recorded));
  }
  JournalRemovals(replaced);
  if (!to_remove.empty()) {
    spdlog::info("worker {} holds {} blocks in versions replaced or removed while it was away; "
                 "removing them",
                 id, to_remove.size());
  }
  to_remove.insert(to_remove.end(), replaced.begin(), replaced.end());
  RemoveCopies(to_remove, nullptr, 0);
  BlocksStored(recorded);
  std::vector<BlockId> recorded_ids;
  recorded_ids.reserve(recorded.size());
  for (const BlockChange& change : recorded) recorded_ids.push_back(change.id);
  TrimExtraCopies(recorded_ids);
  BlocksLost(id, request.getLostBlocks());
  ++counters_.workers_registered;
  counters_.RecordWorkerEvent(id, known ? "re-registered" : "registered");
  spdlog::info("worker {} {} at {} holding {} blocks ({} workers, {} blocks known)", id,
               known ? "re-registered" : "registered", address, recorded.size(),
               registry_.size(), index_.block_count());

  const Duration interval = std::max(options_.heartbeat_timeout / 4, kMinHeartbeatInterval);
  reply.initRegistered().setHeartbeatIntervalMs(
      static_cast<uint32_t>(std::min<uint64_t>(ToMillis(interval), UINT32_MAX)));
  return Status::Ok();
}

Status MasterServer::Loop::HandleHeartbeat(proto::Heartbeat::Reader request,
                                           proto::Reply::Builder reply) {
  capnp::Text::Reader id = request.getWorkerId();
  RETURN_IF_ERROR(
      registry_.Touch(std::string_view(id.cStr(), id.size()), FromProto(request.getStats())));
  reply.setOk();
  return Status::Ok();
}

Status MasterServer::Loop::HandleReportBlocks(proto::ReportBlocks::Reader request,
                                              const zmq::message_t& client, uint64_t request_id,
                                              proto::Reply::Builder reply, bool* deferred) {
  capnp::Text::Reader id_text = request.getWorkerId();
  const std::string id(id_text.cStr(), id_text.size());
  std::vector<BlockChange> changes;
  changes.reserve(request.getUpdates().size());
  for (proto::BlockUpdate::Reader update : request.getUpdates()) {
    ASSIGN_OR_RETURN(BlockChange change, DecodeBlockStatus(update.getStatus(), update.getRemoved(),
                                                           update.getFresh()));
    change.lease = update.getLeaseToken();
    changes.push_back(change);
  }
  RETURN_IF_ERROR(registry_.Touch(id, FromProto(request.getStats())));
  std::vector<BlockChange> refused;
  std::vector<RetiredCopy> replaced = ApplyChanges(id, changes, &refused);
  BlocksStored(changes);
  // Copies landing from re-replication may meet a copy that came back meanwhile.
  std::vector<BlockId> copies;
  for (const BlockChange& change : changes) {
    if (!change.removed && !change.fresh) copies.push_back(change.id);
  }
  TrimExtraCopies(copies);
  BlocksLost(id, request.getLostBlocks());
  if (!refused.empty()) {
    // The worker fails the puts of the refused blocks (their removal is under way). A report
    // cannot both refuse and replace: a refused change replaced nothing, and other changes'
    // replaced copies are removed without waiting, as for a report that was not fresh.
    auto list = reply.initReportRefused(static_cast<unsigned>(refused.size()));
    for (size_t i = 0; i < refused.size(); ++i) {
      list[static_cast<unsigned>(i)].setBlockId(refused[i].id.ToString());
      list[static_cast<unsigned>(i)].setVersion(refused[i].version);
    }
    if (!replaced.empty()) RemoveCopies(replaced, nullptr, 0);
    return Status::Ok();
  }
  if (replaced.empty()) {
    reply.setOk();
    return Status::Ok();
  }
  // A put replaced copies on other workers: the report is acknowledged (and so the put
  // answered) once they confirm the old copies are gone, so that no reader who knows where
  // the old copies were can read one after the put returned (PROTOCOL.md).
  *deferred = true;
  const uint64_t op_id = next_op_id_++;
  PendingRemove op;
  op.client = zmq::message_t(client.data(), client.size());
  op.request_id = request_id;
  op.deadline = clock_.Now() + std::min<Duration>(kReplaceWait, options_.remove_timeout);
  op.acknowledges_report = true;
  RemoveCopies(replaced, &op, op_id);
  if (op.outstanding == 0) {
    ReplyRemoved(op);
    return Status::Ok();
  }
  pending_.emplace(op_id, std::move(op));
  return Status::Ok();
}

std::vector<RetiredCopy> MasterServer::Loop::ApplyChanges(const std::string& worker_id,
                                                          std::vector<BlockChange>& changes,
                                                          std::vector<BlockChange>* refused) {
  std::vector<BlockChange> recorded;
  recorded.reserve(changes.size());
  std::vector<RetiredCopy> stale;
  std::vector<RetiredCopy> replaced;
  for (const BlockChange& change : changes) {
    if (change.fresh && !change.removed && change.lease != 0 &&
        !leases_.Holds(change.id, change.lease) && index_.VersionOf(change.id) != change.version) {
      spdlog::info("worker {} stored {} under a compute lease that is no longer held; refusing "
                   "and removing it",
                   worker_id, change.id.ToString());
      stale.push_back(RetiredCopy{worker_id, change.id, change.version});
      refused->push_back(change);
      continue;
    }
    ApplyResult applied = index_.Apply(worker_id, change);
    if (applied.digest_mismatch) {
      DigestMismatch(worker_id, change, applied.expected_digest);
      continue;
    }
    if (!applied.recorded) {
      spdlog::info("worker {} stored {} in a version that was replaced or removed; removing it",
                   worker_id, change.id.ToString());
      stale.push_back(RetiredCopy{worker_id, change.id, change.version});
      continue;
    }
    recorded.push_back(change);
    replaced.insert(replaced.end(), applied.replaced.begin(), applied.replaced.end());
  }
  if (journal_) Journaled(journal_->RecordChanges(worker_id, recorded));
  JournalRemovals(replaced);
  RemoveCopies(stale, nullptr, 0);
  changes = std::move(recorded);
  return replaced;
}

void MasterServer::Loop::JournalRemovals(const std::vector<RetiredCopy>& copies) {
  if (!journal_ || copies.empty()) return;
  std::map<std::string, std::vector<BlockChange>> by_worker;
  for (const RetiredCopy& copy : copies) {
    BlockChange removal{copy.id};
    removal.removed = true;
    removal.version = copy.version;
    by_worker[copy.worker_id].push_back(removal);
  }
  for (const auto& [worker_id, removals] : by_worker) {
    Journaled(journal_->RecordChanges(worker_id, removals));
  }
}

void MasterServer::Loop::RemoveCopies(const std::vector<RetiredCopy>& copies, PendingRemove* op,
                                      uint64_t op_id) {
  std::map<std::string, std::vector<const RetiredCopy*>> by_worker;
  for (const RetiredCopy& copy : copies) by_worker[copy.worker_id].push_back(&copy);
  for (const auto& [worker_id, held] : by_worker) {
    auto link = links_.find(worker_id);
    if (link == links_.end()) continue;  // dropped: it removes them when it registers again
    for (size_t start = 0; start < held.size(); start += kRemoveBatch) {
      const size_t end = std::min(held.size(), start + kRemoveBatch);
      const uint64_t worker_request_id = next_worker_request_id_++;
      capnp::MallocMessageBuilder message;
      proto::Request::Builder request = message.initRoot<proto::Request>();
      request.setId(worker_request_id);
      proto::RemoveBlocks::Builder remove = request.initRemoveBlocks();
      auto ids = remove.initBlockIds(end - start);
      auto versions = remove.initVersions(end - start);
      WorkerRequest record{op_id, worker_id, {}, {}};
      for (size_t i = start; i < end; ++i) {
        ids.set(i - start, held[i]->id.ToString());
        versions.set(i - start, held[i]->version);
        record.blocks.push_back(held[i]->id);
        record.versions.push_back(held[i]->version);
      }
      unsettled_links_.insert(link->first);
      Status sent = SendMessage(link->second, nullptr, message);
      if (!sent.ok()) {
        spdlog::warn("cannot send removeBlocks to worker {}: {}", worker_id, sent.ToString());
        continue;
      }
      if (op == nullptr) continue;  // nobody waits: its own report confirms the removal
      worker_requests_.emplace(worker_request_id, std::move(record));
      ++op->outstanding;
    }
  }
}

void MasterServer::Loop::TrimExtraCopies(const std::vector<BlockId>& ids) {
  std::vector<RetiredCopy> extra;
  for (const BlockId& id : ids) {
    std::optional<BlockInfo> info = index_.Find(id);
    if (!info || info->locations.size() <= 1) continue;
    std::vector<IndexedLocation> copies = replication_.ExtraCopies(*info, registry_);
    if (copies.empty()) continue;
    const uint64_t version = index_.VersionOf(id).value_or(0);
    for (const IndexedLocation& copy : copies) {
      BlockChange removal{id};
      removal.removed = true;
      removal.version = version;
      index_.Apply(copy.worker_id, removal);
      extra.push_back(RetiredCopy{copy.worker_id, id, version});
    }
  }
  if (extra.empty()) return;
  spdlog::info("removing {} copies beyond their blocks' levels", extra.size());
  JournalRemovals(extra);
  RemoveCopies(extra, nullptr, 0);
}

void MasterServer::Loop::BlocksLost(const std::string& worker_id,
                                    capnp::List<capnp::Text>::Reader lost) {
  if (lost.size() == 0) return;
  constexpr unsigned kNamed = 20;
  std::string named;
  for (unsigned i = 0; i < std::min(lost.size(), kNamed); ++i) {
    if (!named.empty()) named += ", ";
    named += std::string_view(lost[i].cStr(), std::min<size_t>(lost[i].size(), 256));
  }
  if (lost.size() > kNamed) named += ", ...";
  spdlog::warn("worker {} lost {} blocks from its disk: {}; restoring their copies", worker_id,
               lost.size(), named);
  replication_.MarkAllForCheck();
  next_heartbeat_check_ = clock_.Now();  // plan the copies at the next turn of the loop
}

// ---- client requests ----

void MasterServer::Loop::FillBlockLocations(const BlockId& id, const std::optional<BlockInfo>& info,
                                            proto::BlockLocations::Builder out) const {
  out.setBlockId(id.ToString());
  if (!info) {
    out.initLocations(0);
    return;
  }
  out.setLevel(ToProto(info->level));
  out.setDigest(info->digest);
  auto locations = out.initLocations(info->locations.size());
  for (size_t i = 0; i < info->locations.size(); ++i) {
    const IndexedLocation& location = info->locations[i];
    const WorkerRecord* worker = registry_.Find(location.worker_id);
    BM_CHECK(worker != nullptr);  // locations exist only on registered workers
    locations[i].setWorkerId(location.worker_id);
    locations[i].setAddress(worker->address);
    locations[i].setTier(ToProto(location.tier));
    locations[i].setSize(location.size);
    if (const std::string& key = WorkerKey(location.worker_id); !key.empty()) {
      locations[i].setPublicKey(key);
    }
  }
}

// The hot path of workload 5 (bench/README.md): nothing here allocates per block. The reply
// echoes each id's request text, which is the id's ToString() (a parsed id is canonical:
// BlockId::Parse rejects anything ToString() would not print), and a worker's address is
// looked up once per run of locations on the same worker.
Status MasterServer::Loop::HandleGetLocations(proto::GetLocations::Reader request,
                                              proto::Reply::Builder reply) {
  capnp::List<capnp::Text>::Reader texts = request.getBlockIds();
  ASSIGN_OR_RETURN(std::vector<BlockId> ids, DecodeBlockIds(texts));
  auto out = reply.initLocations(ids.size());
  const std::string* last_worker_id = nullptr;
  const WorkerRecord* last_worker = nullptr;
  // At 1M+ blocks every lookup is a cache miss; fetching a few ids ahead overlaps them.
  constexpr size_t kPrefetchAhead = 8;
  for (size_t i = 0; i < std::min(kPrefetchAhead, ids.size()); ++i) index_.Prefetch(ids[i]);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i + kPrefetchAhead < ids.size()) index_.Prefetch(ids[i + kPrefetchAhead]);
    out[i].setBlockId(texts[i]);
    uint64_t digest = 0;
    std::optional<StorageLevel> level = index_.FindLocations(ids[i], &lookup_scratch_, &digest);
    if (!level) {
      out[i].initLocations(0);
      continue;
    }
    out[i].setLevel(ToProto(*level));
    out[i].setDigest(digest);
    auto locations = out[i].initLocations(lookup_scratch_.size());
    for (size_t l = 0; l < lookup_scratch_.size(); ++l) {
      const LocationRef& location = lookup_scratch_[l];
      // The index's worker ids are interned: the same worker is the same string object.
      if (location.worker_id != last_worker_id) {
        last_worker_id = location.worker_id;
        last_worker = registry_.Find(*location.worker_id);
        BM_CHECK(last_worker != nullptr);  // locations exist only on registered workers
      }
      locations[l].setWorkerId(*location.worker_id);
      locations[l].setAddress(last_worker->address);
      locations[l].setTier(ToProto(location.tier));
      locations[l].setSize(location.size);
      if (options_.keys.enabled()) locations[l].setPublicKey(WorkerKey(*location.worker_id));
    }
  }
  return Status::Ok();
}

void MasterServer::Loop::HandleListWorkers(proto::Reply::Builder reply) {
  const TimePoint now = clock_.Now();
  std::vector<WorkerRecord> workers = registry_.List();
  auto out = reply.initWorkers(workers.size());
  for (size_t i = 0; i < workers.size(); ++i) {
    out[i].setWorkerId(workers[i].id);
    out[i].setAddress(workers[i].address);
    ToProto(workers[i].stats, out[i].initStats());
    out[i].setLastHeartbeatAgeMs(ToMillis(now - workers[i].last_seen));
    out[i].setHost(workers[i].labels.host);
    out[i].setRack(workers[i].labels.rack);
    out[i].setState(ToProto(workers[i].state));
    out[i].setPublicKey(WorkerKey(workers[i].id));
  }
}

Status MasterServer::Loop::HandleListBlocks(proto::ListBlocks::Reader request,
                                            proto::Reply::Builder reply) {
  std::vector<BlockInfo> blocks;
  if (request.getLimit() > 0) {
    std::optional<uint64_t> rdd_id;
    if (request.isRddId()) {
      rdd_id = request.getRddId();
    } else if (!request.isAll()) {
      return InvalidArgumentError("unsupported listBlocks filter");
    }
    std::optional<BlockId> after;
    if (request.hasAfter() && request.getAfter().size() > 0) {
      ASSIGN_OR_RETURN(BlockId parsed, ParseWireBlockId(request.getAfter()));
      after = parsed;
    }
    const size_t limit = std::min<size_t>(request.getLimit(), kMaxBlockPage);
    blocks = index_.ListPage(rdd_id, after, limit);
    proto::BlockPage::Builder page = reply.initBlockPage();
    page.setMore(blocks.size() == limit);
    auto out = page.initBlocks(blocks.size());
    for (size_t i = 0; i < blocks.size(); ++i) FillBlockLocations(blocks[i].id, blocks[i], out[i]);
    return Status::Ok();
  }
  switch (request.which()) {
    case proto::ListBlocks::ALL:
      blocks = index_.List();
      break;
    case proto::ListBlocks::RDD_ID:
      blocks = index_.ListRdd(request.getRddId());
      break;
    default:
      return InvalidArgumentError("unsupported listBlocks filter");
  }
  // TODO(scale): one reply holds every block; past ~100k blocks it nears the header limit.
  auto out = reply.initBlocks(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) FillBlockLocations(blocks[i].id, blocks[i], out[i]);
  return Status::Ok();
}

std::map<uint64_t, RddSummary> MasterServer::Loop::CollectRdds() const {
  std::map<uint64_t, RddSummary> rdds;
  for (RddSummary& summary : index_.RddSummaries()) rdds.emplace(summary.rdd_id, std::move(summary));
  for (const auto& [rdd_id, description] : rdd_descriptions_) {
    RddSummary empty;
    empty.rdd_id = rdd_id;
    rdds.try_emplace(rdd_id, std::move(empty));
  }
  return rdds;
}

void MasterServer::Loop::FillRddInfo(uint64_t rdd_id, const RddSummary& summary,
                                     proto::RddInfo::Builder out) const {
  out.setRddId(rdd_id);
  out.setCachedPartitions(summary.cached_partitions);
  out.setMemoryBytes(summary.memory_bytes);
  out.setDiskBytes(summary.disk_bytes);
  out.setLevel(ToProto(summary.level));
  auto workers = out.initWorkers(summary.workers.size());
  for (size_t w = 0; w < summary.workers.size(); ++w) workers.set(w, summary.workers[w]);
  if (auto description = rdd_descriptions_.find(rdd_id); description != rdd_descriptions_.end()) {
    out.setName(description->second.name);
    out.setLevel(ToProto(description->second.level));
    out.setTotalPartitions(description->second.total_partitions);
  }
}

void MasterServer::Loop::HandleListRdds(proto::Reply::Builder reply) {
  const std::map<uint64_t, RddSummary> rdds = CollectRdds();
  auto out = reply.initRdds(rdds.size());
  size_t i = 0;
  for (const auto& [rdd_id, summary] : rdds) FillRddInfo(rdd_id, summary, out[i++]);
}

void MasterServer::Loop::HandleListRddPage(proto::ListRdds::Reader request,
                                           proto::Reply::Builder reply) {
  const uint32_t limit =
      request.getLimit() == 0 ? kRddsPerPage : std::min(request.getLimit(), kRddsPerPage);
  const std::map<uint64_t, RddSummary> rdds = CollectRdds();
  auto from = rdds.lower_bound(request.getStartAt());
  const size_t left = static_cast<size_t>(std::distance(from, rdds.end()));
  const size_t count = std::min<size_t>(left, limit);
  proto::RddPage::Builder page = reply.initRddPage();
  auto out = page.initRdds(static_cast<unsigned>(count));
  for (size_t i = 0; i < count; ++i, ++from) FillRddInfo(from->first, from->second, out[i]);
  page.setMore(left > count);
}

Status MasterServer::Loop::HandleRegisterRdd(proto::RegisterRdd::Reader request,
                                             proto::Reply::Builder reply) {
  capnp::Text::Reader name = request.getName();
  if (name.size() > kMaxRddNameBytes) {
    return InvalidArgumentError("RDD name is longer than " + std::to_string(kMaxRddNameBytes) +
                                " bytes");
  }
  const uint64_t rdd_id = request.getRddId();
  if (!rdd_descriptions_.contains(rdd_id) && rdd_descriptions_.size() >= kMaxRegisteredRdds) {
    return OutOfSpaceError("the master already describes " + std::to_string(kMaxRegisteredRdds) +
                           " RDDs; remove some first");
  }
  RddDescription description{std::string(name.cStr(), name.size()),
                             FromProto(request.getLevel()), request.getTotalPartitions()};
  // A dataset persisted again must be the same dataset: its cached blocks are found by RDD id
  // and partition alone, so another name, partition count or level under the same id would
  // silently serve the old dataset's partitions (Spark refuses a level change the same way).
  if (auto known = rdd_descriptions_.find(rdd_id); known != rdd_descriptions_.end()) {
    const RddDescription& old = known->second;
    if (old.name != description.name || old.level != description.level ||
        old.total_partitions != description.total_partitions) {
      return InvalidArgumentError(
          "RDD " + std::to_string(rdd_id) + " is already persisted as '" + old.name + "' (" +
          std::to_string(old.total_partitions) + " partitions, " +
          std::string(StorageLevelName(old.level)) + "); remove it first (bmctl rm-rdd " +
          std::to_string(rdd_id) + ") to persist it as '" + description.name + "' (" +
          std::to_string(description.total_partitions) + " partitions, " +
          std::string(StorageLevelName(description.level)) + ")");
    }
    reply.setOk();
    return Status::Ok();
  }
  if (journal_) {
    Journaled(journal_->RecordRdd(JournaledRdd{.rdd_id = rdd_id,
                                               .name = description.name,
                                               .level = description.level,
                                               .total_partitions = description.total_partitions}));
  }
  rdd_descriptions_.insert_or_assign(rdd_id, std::move(description));
  reply.setOk();
  return Status::Ok();
}

// ---- compute leases ----

Status MasterServer::Loop::HandleAcquireCompute(proto::AcquireCompute::Reader request,
                                                const zmq::message_t& client, uint64_t request_id,
                                                proto::Reply::Builder reply, bool* deferred) {
  ASSIGN_OR_RETURN(BlockId id, ParseWireBlockId(request.getBlockId()));
  ASSIGN_OR_RETURN(std::string holder,
                   DecodeName(request.getHolder(), "lease holder", kMaxHolderBytes));
  const uint32_t lease_ms = request.getLeaseMs();
  if (lease_ms < kMinLeaseMs || lease_ms > kMaxLeaseMs) {
    return InvalidArgumentError("lease of " + std::to_string(lease_ms) + " ms is outside [" +
                                std::to_string(kMinLeaseMs) + ", " + std::to_string(kMaxLeaseMs) +
                                "] ms");
  }
  const uint32_t wait_ms = std::min(request.getWaitMs(), kMaxComputeWaitMs);
  std::vector<std::string> failed_workers;
  for (capnp::Text::Reader worker : request.getFailedWorkers()) {
    failed_workers.emplace_back(worker.cStr(), worker.size());
  }

  std::optional<BlockInfo> info = index_.Find(id);
  if (info) {
    std::erase_if(info->locations, [&](const IndexedLocation& location) {
      return std::find(failed_workers.begin(), failed_workers.end(), location.worker_id) !=
             failed_workers.end();
    });
    if (!info->locations.empty()) {
      FillBlockLocations(id, info, reply.initCompute().initCached());
      return Status::Ok();
    }
  }
  const uint64_t waiter = next_waiter_id_++;
  std::optional<uint64_t> token = leases_.Acquire(ComputeLeases::Request{
      .block = id,
      .holder = holder,
      .lease = std::chrono::milliseconds(lease_ms),
      .wait_until = clock_.Now() + std::chrono::milliseconds(wait_ms),
      .waiter = waiter});
  if (token) {
    ++counters_.lease_grants;
    spdlog::debug("{} computes {}", holder, id.ToString());
    reply.initCompute().setGranted(*token);
    return Status::Ok();
  }
  // Queued behind the holder: answered by BlocksStored, a release, or ExpireLeases.
  ++counters_.lease_waits;
  *deferred = true;
  parked_.emplace(waiter, ParkedAcquire{zmq::message_t(client.data(), client.size()), request_id});
  return Status::Ok();
}

Status MasterServer::Loop::HandleRenewCompute(proto::ComputeLease::Reader request,
                                              proto::Reply::Builder reply) {
  ASSIGN_OR_RETURN(BlockId id, ParseWireBlockId(request.getBlockId()));
  RETURN_IF_ERROR(leases_.Renew(id, request.getToken()));
  reply.setOk();
  return Status::Ok();
}

Status MasterServer::Loop::HandleReleaseCompute(proto::ComputeLease::Reader request,
                                                proto::Reply::Builder reply) {
  ASSIGN_OR_RETURN(BlockId id, ParseWireBlockId(request.getBlockId()));
  AnswerWaiters(leases_.Release(id, request.getToken()));
  reply.setOk();
  return Status::Ok();
}

void MasterServer::Loop::BlocksStored(const std::vector<BlockChange>& changes) {
  if (leases_.lease_count() == 0) return;
  for (const BlockChange& change : changes) {
    if (!change.removed) AnswerWaiters(leases_.Stored(change.id));
  }
}

void MasterServer::Loop::AnswerWaiters(std::vector<ComputeLeases::Answer> answers) {
  for (ComputeLeases::Answer& answer : answers) {
    auto parked = parked_.find(answer.waiter);
    BM_CHECK(parked != parked_.end());
    capnp::MallocMessageBuilder message;
    proto::Reply::Builder reply = message.initRoot<proto::Reply>();
    reply.setId(parked->second.request_id);
    proto::ComputeReply::Builder compute = reply.initCompute();
    switch (answer.kind) {
      case ComputeLeases::Answer::Kind::kGranted:
        ++counters_.lease_grants;
        spdlog::info("{} computes {} (the lease was handed over)", answer.holder,
                     answer.block.ToString());
        compute.setGranted(answer.token);
        break;
      case ComputeLeases::Answer::Kind::kStored:
        FillBlockLocations(answer.block, index_.Find(answer.block), compute.initCached());
        break;
      case ComputeLeases::Answer::Kind::kBusy: {
        proto::ComputeBusy::Builder busy = compute.initBusy();
        busy.setHolder(answer.holder);
        busy.setLeaseLeftMs(ToMillis(answer.lease_left));
        break;
      }
    }
    Send(parked->second.client, message);
    parked_.erase(parked);
  }
}

void MasterServer::Loop::ExpireLeases() {
  if (leases_.lease_count() == 0) return;
  AnswerWaiters(leases_.Expire());
}

void MasterServer::Loop::AbortWaiters() {
  for (uint64_t waiter : leases_.TakeAllWaiters()) {
    auto parked = parked_.find(waiter);
    BM_CHECK(parked != parked_.end());
    SendError(parked->second.client, parked->second.request_id,
              UnavailableError("the master is shutting down"));
  }
  parked_.clear();
}

// ---- workers: links, drops, removal fan-out ----

const std::string& MasterServer::Loop::WorkerKey(const std::string& worker_id) const {
  static const std::string kNone;
  auto found = worker_keys_.find(worker_id);
  return found == worker_keys_.end() ? kNone : found->second;
}

Result<zmq::socket_t> MasterServer::Loop::ConnectWorker(const std::string& address,
                                                        const std::string& public_key) {
  try {
    zmq::socket_t socket(context_, zmq::socket_type::dealer);
    RETURN_IF_ERROR(
        ConfigureClientSocket(socket, ChannelSecurity{options_.keys, public_key}, address));
    socket.set(zmq::sockopt::sndtimeo, 0);  // never block the loop on a slow worker
    socket.connect(address);
    return Result<zmq::socket_t>(std::move(socket));
  } catch (const zmq::error_t& e) {
    return InvalidArgumentError("cannot connect to worker address '" + address + "': " + e.what());
  }
}

size_t MasterServer::Loop::DropWorker(const std::string& worker_id) {
  const size_t locations = ForgetWorker(worker_id);
  if (journal_) Journaled(journal_->RecordWorkerDropped(worker_id));
  return locations;
}

void MasterServer::Loop::Journaled(const Status& written) {
  ++counters_.journal_writes;
  if (written.ok()) return;
  ++counters_.journal_failures;
  spdlog::error("{} ({} journal write failures so far; serving from memory)", written.ToString(),
                counters_.journal_failures);
}

size_t MasterServer::Loop::ForgetWorker(const std::string& worker_id) {
  const size_t locations = index_.RemoveWorker(worker_id);
  // Blocks it held may now be short of copies; copies it was making will not be answered.
  if (locations > 0) replication_.MarkAllForCheck();
  std::erase_if(copy_requests_,
                [&](const auto& entry) { return entry.second.source == worker_id; });
  links_.erase(worker_id);
  worker_keys_.erase(worker_id);
  unsettled_links_.erase(worker_id);
  registry_.Remove(worker_id);
  std::vector<uint64_t> answered_ops;
  for (auto it = worker_requests_.begin(); it != worker_requests_.end();) {
    if (it->second.worker_id == worker_id) {
      answered_ops.push_back(it->second.op_id);
      it = worker_requests_.erase(it);
    } else {
      ++it;
    }
  }
  for (uint64_t op_id : answered_ops) FinishWorkerRequest(op_id);
  return locations;
}

void MasterServer::Loop::StartRemove(const zmq::message_t& client, uint64_t request_id,
                                     std::vector<BlockId> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  // A copy of a removed version that comes back later (its worker was away) is refused, also
  // after a master restart (the journal remembers the retired versions).
  if (journal_) {
    std::vector<std::pair<BlockId, uint64_t>> retired;
    for (const BlockId& id : ids) {
      std::optional<uint64_t> version = index_.VersionOf(id);
      if (version && *version != 0) retired.emplace_back(id, *version);
    }
    Journaled(journal_->RecordRetired(retired));
  }
  index_.RetireVersions(ids);
  const uint64_t op_id = next_op_id_++;
  PendingRemove op;
  op.client = zmq::message_t(client.data(), client.size());
  op.request_id = request_id;
  op.requested = ids.size();
  op.deadline = clock_.Now() + options_.remove_timeout;

  for (auto& [worker_id, blocks] : index_.Holders(ids)) {
    auto link = links_.find(worker_id);
    BM_CHECK(link != links_.end());  // every location is on a registered, linked worker
    for (size_t start = 0; start < blocks.size(); start += kRemoveBatch) {
      const size_t end = std::min(blocks.size(), start + kRemoveBatch);
      const uint64_t worker_request_id = next_worker_request_id_++;
      capnp::MallocMessageBuilder message;
      proto::Request::Builder request = message.initRoot<proto::Request>();
      request.setId(worker_request_id);
      auto list = request.initRemoveBlocks().initBlockIds(end - start);
      for (size_t i = start; i < end; ++i) list.set(i - start, blocks[i].ToString());
      unsettled_links_.insert(link->first);
      Status sent = SendMessage(link->second, nullptr, message);
      if (!sent.ok()) {
        spdlog::warn("cannot send removeBlocks to worker {}: {}", worker_id, sent.ToString());
        continue;
      }
      worker_requests_.emplace(
          worker_request_id,
          WorkerRequest{op_id, worker_id,
                        std::vector<BlockId>(blocks.begin() + start, blocks.begin() + end), {}});
      ++op.outstanding;
    }
  }
  if (op.outstanding == 0) {
    ReplyRemoved(op);
    return;
  }
  pending_.emplace(op_id, std::move(op));
}

void MasterServer::Loop::HandleWorkerReply(const std::string& worker_id, IncomingMessage& message) {
  uint64_t id = 0;
  bool removed = false;
  std::optional<std::string> verified;  // a verifyBlock's answer, as a sentence
  Status failure;
  Status read = ReadGuarded([&]() -> Status {
    proto::Reply::Reader reply = message.reply();
    id = reply.getId();
    if (reply.isRemoved()) {
      removed = true;
    } else if (reply.isVerified()) {
      proto::VerifyReply::Reader answer = reply.getVerified();
      switch (answer.getState()) {
        case proto::VerifyReply::State::INTACT:
          verified = "its bytes match its own digests: its digest metadata differs from the "
                     "version's";
          break;
        case proto::VerifyReply::State::CORRUPT: {
          capnp::Text::Reader what = answer.getMessage();
          verified = "corrupt, dropped: " +
                     std::string(what.cStr(), std::min<size_t>(what.size(), 512));
          break;
        }
        default:
          verified = "not found";
          break;
      }
    } else if (reply.isError()) {
      failure = StatusFromError(reply.getError());
    } else {
      failure = InvalidArgumentError("unexpected reply to removeBlocks");
    }
    return Status::Ok();
  });
  if (!read.ok()) {
    spdlog::warn("bad reply from worker {}: {}", worker_id, read.ToString());
    return;
  }
  if (auto verify = verify_requests_.find(id); verify != verify_requests_.end()) {
    if (verify->second.source == worker_id) {
      spdlog::warn("worker {} verified its copy of {} (reported with a mismatching digest): {}",
                   worker_id, verify->second.block.ToString(),
                   verified ? *verified : failure.ToString());
      verify_requests_.erase(verify);
    }
    return;
  }
  if (auto copy = copy_requests_.find(id); copy != copy_requests_.end()) {
    // The copies themselves arrive as the targets' block reports; this only frees the slot.
    replication_.CopyFinished(copy->second.block);
    copy_requests_.erase(copy);
    return;
  }
  auto it = worker_requests_.find(id);
  // A late answer to an operation that timed out: the worker reports its removals anyway.
  if (it == worker_requests_.end() || it->second.worker_id != worker_id) return;
  WorkerRequest request = std::move(it->second);
  worker_requests_.erase(it);
  auto op = pending_.find(request.op_id);
  BM_CHECK(op != pending_.end());
  if (removed) {
    std::vector<BlockChange> removals;
    removals.reserve(request.blocks.size());
    for (size_t i = 0; i < request.blocks.size(); ++i) {
      BlockChange removal{request.blocks[i], /*removed=*/true};
      if (!request.versions.empty()) removal.version = request.versions[i];
      removals.push_back(removal);
      index_.Apply(worker_id, removal);
      op->second.confirmed.insert(request.blocks[i]);
    }
    if (journal_) Journaled(journal_->RecordChanges(worker_id, removals));
  } else {
    spdlog::warn("worker {} could not remove {} blocks: {}", worker_id, request.blocks.size(),
                 failure.ToString());
  }
  FinishWorkerRequest(request.op_id);
}

void MasterServer::Loop::FinishWorkerRequest(uint64_t op_id) {
  auto op = pending_.find(op_id);
  BM_CHECK(op != pending_.end());
  BM_CHECK(op->second.outstanding > 0);
  if (--op->second.outstanding > 0) return;
  ReplyRemoved(op->second);
  pending_.erase(op);
}

void MasterServer::Loop::ReplyRemoved(const PendingRemove& op) {
  capnp::MallocMessageBuilder message;
  proto::Reply::Builder reply = message.initRoot<proto::Reply>();
  reply.setId(op.request_id);
  if (op.acknowledges_report) {
    reply.setOk();
  } else {
    spdlog::info("removed {} of {} requested blocks", op.confirmed.size(), op.requested);
    reply.setRemoved(op.confirmed.size());
  }
  Send(op.client, message);
}

void MasterServer::Loop::CheckHeartbeats() {
  const TimePoint now = clock_.Now();
  if (now < next_heartbeat_check_) return;
  next_heartbeat_check_ = now + check_interval_;
  for (const std::string& id : registry_.Expired(options_.heartbeat_timeout)) {
    const size_t blocks_before = index_.block_count();
    const size_t locations = DropWorker(id);
    ++counters_.workers_dropped;
    counters_.blocks_lost += blocks_before - index_.block_count();
    counters_.RecordWorkerEvent(id, "dropped (no heartbeat)");
    spdlog::warn("dropped worker {}: no heartbeat for over {} ms; {} block locations lost", id,
                 ToMillis(options_.heartbeat_timeout), locations);
  }
  MaintainReplication();
}

Status MasterServer::Loop::HandleDecommission(proto::DecommissionWorker::Reader request,
                                              proto::Reply::Builder reply) {
  capnp::Text::Reader id_text = request.getWorkerId();
  const std::string id(id_text.cStr(), id_text.size());
  RETURN_IF_ERROR(registry_.Decommission(id));
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Request>().setDecommission();
  SendToWorker(id, message);
  spdlog::info("decommissioning worker {}: copying its {} blocks elsewhere", id,
               index_.LocationCount(id));
  replication_.MarkAllForCheck();
  next_heartbeat_check_ = clock_.Now();  // start copying at the next turn of the loop
  reply.setOk();
  return Status::Ok();
}

void MasterServer::Loop::MaintainReplication() {
  for (ReplicationPlanner::CopyCommand& command : replication_.Plan(index_, registry_)) {
    const uint64_t request_id = next_worker_request_id_++;
    capnp::MallocMessageBuilder message;
    proto::Request::Builder request = message.initRoot<proto::Request>();
    request.setId(request_id);
    proto::ReplicateBlock::Builder copy = request.initReplicateBlock();
    copy.setBlockId(command.block.ToString());
    copy.setLevel(ToProto(command.level));
    auto targets = copy.initTargets(command.targets.size());
    for (size_t i = 0; i < command.targets.size(); ++i) {
      targets[i].setWorkerId(command.targets[i].id);
      targets[i].setAddress(command.targets[i].address);
      targets[i].setPublicKey(WorkerKey(command.targets[i].id));
    }
    spdlog::info("copying {} from {} to {} more worker(s)", command.block.ToString(),
                 command.source, command.targets.size());
    copy_requests_.emplace(request_id, CopyRequest{command.source, command.block});
    ++counters_.copies_started;
    SendToWorker(command.source, message);
  }
  if (replication_.under_replicated() != last_reported_short_) {
    last_reported_short_ = replication_.under_replicated();
    spdlog::info("re-replication: {} blocks short of copies, {} copies in flight",
                 last_reported_short_, replication_.in_flight());
  }
  for (const std::string& id : replication_.DrainedWorkers(index_, registry_)) {
    capnp::MallocMessageBuilder message;
    message.initRoot<proto::Request>().setShutdown();
    SendToWorker(id, message);
    const size_t locations = DropWorker(id);
    counters_.RecordWorkerEvent(id, "decommissioned");
    spdlog::info("decommissioned worker {}: every one of its {} blocks has its copies elsewhere",
                 id, locations);
  }
}

void MasterServer::Loop::DigestMismatch(const std::string& worker_id, const BlockChange& change,
                                        uint64_t expected) {
  ++counters_.digest_mismatch_reports;
  spdlog::warn("worker {} reported {} (version {:016x}) with digest {:016x}, but the version's "
               "digest is {:016x}: not listing that copy; asking the worker to verify it",
               worker_id, change.id.ToString(), change.version, change.digest, expected);
  // Bounded: answers that never come (a worker gone) must not pile up.
  constexpr size_t kMaxVerifiesInFlight = 1024;
  if (verify_requests_.size() >= kMaxVerifiesInFlight) verify_requests_.clear();
  const uint64_t request_id = next_worker_request_id_++;
  capnp::MallocMessageBuilder message;
  proto::Request::Builder request = message.initRoot<proto::Request>();
  request.setId(request_id);
  proto::VerifyBlock::Builder verify = request.initVerifyBlock();
  verify.setBlockId(change.id.ToString());
  verify.setReportedBad(true);
  verify_requests_.insert_or_assign(request_id, CopyRequest{worker_id, change.id});
  SendToWorker(worker_id, message);
  // The index dropped any location the worker had for the block: so does the journal.
  JournalRemovals({RetiredCopy{worker_id, change.id, change.version}});
}

void MasterServer::Loop::SendToWorker(const std::string& worker_id,
                                      capnp::MallocMessageBuilder& message) {
  auto link = links_.find(worker_id);
  if (link == links_.end()) return;
  unsettled_links_.insert(link->first);
  Status sent = SendMessage(link->second, nullptr, message);
  if (!sent.ok()) spdlog::warn("cannot send to worker {}: {}", worker_id, sent.ToString());
}

void MasterServer::Loop::ExpireRemoves() {
  const TimePoint now = clock_.Now();
  std::vector<uint64_t> expired;
  for (const auto& [op_id, op] : pending_) {
    if (op.deadline <= now) expired.push_back(op_id);
  }
  if (expired.empty()) return;
  const std::unordered_set<uint64_t> expired_set(expired.begin(), expired.end());
  std::erase_if(worker_requests_,
                [&](const auto& entry) { return expired_set.contains(entry.second.op_id); });
  for (uint64_t op_id : expired) {
    auto op = pending_.find(op_id);
    spdlog::warn("remove timed out waiting for {} worker requests", op->second.outstanding);
    ReplyRemoved(op->second);
    pending_.erase(op);
  }
}

void MasterServer::Loop::AbortRemoves() {
  for (const auto& [op_id, op] : pending_) {
    SendError(op.client, op.request_id, UnavailableError("the master is shutting down"));
  }
  pending_.clear();
  worker_requests_.clear();
}

void MasterServer::Loop::Send(const zmq::message_t& client, capnp::MessageBuilder& message) {
  router_unsettled_ = true;
  Status sent = SendMessage(router_, &client, message);
  if (!sent.ok()) spdlog::debug("reply not sent: {}", sent.ToString());
}

void MasterServer::Loop::SendError(const zmq::message_t& client, uint64_t request_id,
                                   const Status& status) {
  capnp::MallocMessageBuilder message;
  proto::Reply::Builder reply = message.initRoot<proto::Reply>();
  reply.setId(request_id);
  SetError(reply.initError(), status);
  Send(client, message);
}

// ---- MasterServer ----

Result<std::unique_ptr<MasterServer>> MasterServer::Create(zmq::context_t& context,
                                                           MasterOptions options,
                                                           const Clock& clock) {
  if (options.heartbeat_timeout <= Duration::zero()) {
    return InvalidArgumentError("heartbeat timeout must be positive");
  }
  if (options.remove_timeout <= Duration::zero()) {
    return InvalidArgumentError("remove timeout must be positive");
  }
  std::unique_ptr<MasterJournal> journal;
  if (!options.state_dir.empty()) {
    ASSIGN_OR_RETURN(journal, MasterJournal::Open(options.state_dir));
  }
  zmq::socket_t router(context, zmq::socket_type::router);
  ConfigureServerSocket(router, options.keys);
  try {
    router.bind(options.listen);
  } catch (const zmq::error_t& e) {
    std::string message = "cannot listen on '" + options.listen + "': " + e.what();
    if (e.num() == EADDRINUSE || e.num() == EADDRNOTAVAIL) return UnavailableError(message);
    return InvalidArgumentError(message);
  }
  std::string endpoint = router.get(zmq::sockopt::last_endpoint);
  // Unique within the context while the router lives: its handle's address.
  std::string control_address =
      "inproc://bm-master-control-" + std::to_string(reinterpret_cast<uintptr_t>(router.handle()));
  zmq::socket_t control(context, zmq::socket_type::pull);
  ConfigureSocket(control);
  control.bind(control_address);
  auto loop = std::make_unique<Loop>(context, std::move(options), clock, std::move(router),
                                     std::move(control), std::move(journal));
  RETURN_IF_ERROR(loop->MonitorConnections());
  RETURN_IF_ERROR(loop->RestoreFromJournal());
  return std::unique_ptr<MasterServer>(
      new MasterServer(context, std::move(endpoint), std::move(control_address), std::move(loop)));
}

MasterServer::MasterServer(zmq::context_t& context, std::string endpoint,
                           std::string control_address, std::unique_ptr<Loop> loop)
    : context_(context),
      endpoint_(std::move(endpoint)),
      control_address_(std::move(control_address)),
      loop_(std::move(loop)) {}

MasterServer::~MasterServer() = default;

void MasterServer::Run() { loop_->Run(stop_requested_); }

void MasterServer::Stop() {
  stop_requested_.store(true);
  // Wake the loop now rather than at its next timer. If this fails the loop still sees the
  // flag within a second.
  try {
    zmq::socket_t poke(context_, zmq::socket_type::push);
    poke.set(zmq::sockopt::linger, 100);
    poke.connect(control_address_);
    (void)poke.send(zmq::message_t(), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    spdlog::debug("could not wake the master loop: {}", e.what());
  }
}

}  // namespace bm
