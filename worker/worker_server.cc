#include "worker/worker_server.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/core/digest.h"
#include "common/core/protocol.h"
#include "common/net/host_identity.h"
#include "common/net/master_addresses.h"
#include "common/net/socket_drain.h"
#include "common/security/access_policy.h"
#include "common/security/tenant.h"
#include "worker/address.h"
#include "worker/read_replies.h"
#include "worker/wire.h"
#include "worker/worker_request_kinds.h"

namespace bm {
namespace {

using std::chrono::milliseconds;

// Upper bound on one poll, so a missed wake-up can never stall the loop for long.
constexpr milliseconds kMaxPollTimeout{1000};
// Client messages handled per wake-up before timers get a turn.
constexpr int kMessagesPerWakeup = 64;
// How long a _2 shuffle stream's replica may take to hold a forwarded push before the push is
// answered as unavailable (the writer pushes again). A dead replica is noticed sooner, by the
// connection's heartbeats.
constexpr milliseconds kShuffleForwardTimeout{2000};

zmq::message_t CopyFrame(const zmq::message_t& frame) {
  return zmq::message_t(frame.data(), frame.size());
}

bool IsClientFault(StatusCode code) {
  return code == StatusCode::kInvalidArgument || code == StatusCode::kTooLarge ||
         code == StatusCode::kPermissionDenied;
}

WorkerOp OpOf(proto::Request::Which which) {
  switch (which) {
    case proto::Request::PUT_BLOCK:
      return WorkerOp::kPut;
    case proto::Request::GET_BLOCK:
      return WorkerOp::kGet;
    case proto::Request::GET_BLOCKS:
      return WorkerOp::kGetMany;
    case proto::Request::CONTAINS_BLOCK:
      return WorkerOp::kContains;
    case proto::Request::REMOVE_BLOCKS:
      return WorkerOp::kRemove;
    case proto::Request::REPLICATE_BLOCK:
      return WorkerOp::kReplicate;
    case proto::Request::DECOMMISSION:
      return WorkerOp::kDecommission;
    case proto::Request::SHUTDOWN:
      return WorkerOp::kShutdown;
    case proto::Request::PING:
      return WorkerOp::kPing;
    case proto::Request::PUSH_SHUFFLE:
      return WorkerOp::kShufflePush;
    case proto::Request::READ_SHUFFLE:
      return WorkerOp::kShuffleRead;
    default:
      return WorkerOp::kOther;
  }
}

}  // namespace

Result<std::unique_ptr<WorkerServer>> WorkerServer::Create(zmq::context_t& context,
                                                           WorkerServerOptions options,
                                                           std::unique_ptr<BlockManager> blocks,
                                                           const Clock& clock) {
  BM_CHECK(blocks != nullptr);
  BM_RETURN_IF_ERROR(ParseTcpAddress(options.listen_address, /*allow_any_port=*/true).status());
  if (!options.advertise_address.empty()) {
    BM_ASSIGN_OR_RETURN(TcpAddress advertised, ParseTcpAddress(options.advertise_address, false));
    if (IsWildcardHost(advertised.host)) {
      return InvalidArgumentError("advertised address " + options.advertise_address +
                                  " is a wildcard; give an address others can connect to");
    }
  }
  if (options.master.master_address.empty()) return InvalidArgumentError("no master address");
  BM_RETURN_IF_ERROR(MasterAddresses::Parse(options.master.master_address).status());
  // Private constructor: Create() is the only way to get a bound server.
  std::unique_ptr<WorkerServer> server(
      new WorkerServer(context, std::move(options), std::move(blocks), clock));
  BM_RETURN_IF_ERROR(server->Bind());
  return server;
}

WorkerServer::WorkerServer(zmq::context_t& context, WorkerServerOptions options,
                           std::unique_ptr<BlockManager> blocks, const Clock& clock)
    : context_(context), options_(std::move(options)), clock_(clock), blocks_(std::move(blocks)) {}

WorkerServer::~WorkerServer() {
  if (wake_fd_ >= 0) close(wake_fd_);
}

Status WorkerServer::Bind() {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return InternalError(std::string("eventfd: ") + std::strerror(errno));

  BM_ASSIGN_OR_RETURN(fence_, EpochFence::Open(options_.epoch_file));
  ChannelSecurity master_security;
  std::string certificate_worker_id;
  if (!options_.key_file.empty() || !options_.master_key_file.empty()) {
    if (options_.key_file.empty() || options_.master_key_file.empty()) {
      return InvalidArgumentError("keys need both the worker's key and the master's key");
    }
    BM_ASSIGN_OR_RETURN(Certificate own, LoadCertificate(options_.key_file));
    if (own.secret_key.empty()) {
      return InvalidArgumentError(options_.key_file + " holds no secret key");
    }
    BM_ASSIGN_OR_RETURN(KeyRole role, own.role());
    if (role != KeyRole::kWorker) {
      return InvalidArgumentError(options_.key_file + " is a " + KeyRoleName(role) +
                                  " key, not a worker key");
    }
    BM_ASSIGN_OR_RETURN(Certificate master, LoadCertificate(options_.master_key_file));
    keys_ = CurveKeys{own.public_key, own.secret_key};
    master_security = ChannelSecurity{keys_, master.public_key};
    certificate_worker_id = own.name();
    if (!options_.worker_id.empty() && options_.worker_id != certificate_worker_id) {
      return InvalidArgumentError("--id " + options_.worker_id + " differs from the worker id '" +
                                  certificate_worker_id + "' in " + options_.key_file);
    }
  }

  router_ = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::router);
  ConfigureServerSocket(*router_, keys_);
  SendHeartbeatsToClients(*router_);
  try {
    router_->bind(options_.listen_address);
  } catch (const zmq::error_t& e) {
    return UnavailableError("cannot listen on " + options_.listen_address + ": " + e.what());
  }
  endpoint_ = router_->get(zmq::sockopt::last_endpoint);
  replies_ = std::make_unique<ClientReplies>(*router_, counters_);
  BM_ASSIGN_OR_RETURN(peer_monitor_,
                      PeerMonitor::Create(context_, *router_, "worker-" + endpoint_));

  advertised_address_ = options_.advertise_address.empty() ? endpoint_ : options_.advertise_address;
  BM_ASSIGN_OR_RETURN(TcpAddress advertised, ParseTcpAddress(advertised_address_, false));
  if (IsWildcardHost(advertised.host)) {
    return InvalidArgumentError("listening on the wildcard address " + endpoint_ +
                                " needs an address to advertise");
  }
  worker_id_ = !options_.worker_id.empty()      ? options_.worker_id
               : !certificate_worker_id.empty() ? certificate_worker_id
                                                : DefaultWorkerId(advertised);
  shuffles_ = std::make_unique<ShuffleHandler>(
      worker_id_,
      ShuffleStore::Limits{.memory_bytes = options_.shuffle_memory,
                           .split_bytes = options_.shuffle_split_size},
      options_.shuffle_dirs, *replies_, counters_, clock_,
      std::make_unique<ShuffleForwarder>(context_, keys_, kShuffleForwardTimeout));
  shuffles_->LoadKept();

  MasterLinkOptions link_options = options_.master;
  link_options.security = master_security;
  link_options.worker_id = worker_id_;
  link_options.advertised_address = advertised_address_;
  link_options.held_shuffles = [this] { return shuffles_->store().ShuffleIds(); };
  link_ = std::make_unique<MasterLink>(context_, std::move(link_options), *blocks_, clock_);
  puts_ = std::make_unique<PutHandler>(
      PutHandlerOptions{.worker_id = worker_id_,
                        .upload_idle_timeout = options_.upload_idle_timeout,
                        .put_ack_timeout = options_.put_ack_timeout,
                        .max_uploads = options_.max_uploads,
                        .max_uploads_per_key = options_.max_uploads_per_key},
      *blocks_, *link_, *replies_, counters_, clock_,
      [this] { AbortUploadsOfClosedConnections(); });
  tenants_ = std::make_unique<TenantGate>(*link_, shares_, clock_);
  blocks_->set_eviction_guard(&shares_);
  host_id_ = HostIdentity();
  if (!options_.local_socket_path.empty()) {
    Result<std::unique_ptr<LocalReadServer>> local =
        LocalReadServer::Create({.socket_path = options_.local_socket_path,
                                 .secure = keys_.enabled(),
                                 .pin_lifetime = options_.local_pin_lifetime,
                                 .tenants = tenants_.get(),
                                 .shuffles = shuffles_.get(),
                                 .arenas = {.bytes = options_.local_arena_bytes}},
                                *blocks_, counters_, clock_);
    if (local.ok()) {
      local_read_server_ = std::move(local).value();
    } else {
      spdlog::warn("same-host reads are off: {}", local.status().ToString());
    }
  }
  return Status::Ok();
}

void WorkerServer::Stop() {
  stop_.store(true);
  const uint64_t one = 1;
  // Best effort: the flag alone stops the loop within kMaxPollTimeout.
  ssize_t written = write(wake_fd_, &one, sizeof(one));
  (void)written;
}

void WorkerServer::Run() {
  spdlog::info("worker {} serving on {} (advertised as {}), master {}", worker_id_, endpoint_,
               advertised_address_, options_.master.master_address);
  auto wake = [this] {
    const uint64_t one = 1;
    ssize_t written = write(wake_fd_, &one, sizeof(one));
    (void)written;
  };
  own_block_reads_ = std::make_unique<OwnBlockReads>(wake);
  replicator_ = std::make_unique<Replicator>(context_, keys_, *own_block_reads_, wake);
  while (!stop_.load()) {
    const TimePoint now = clock_.Now();
    link_->OnTimer();
    puts_->ExpireIdleUploads(now);
    puts_->ReleaseDeferredPuts(now);
    if (now >= next_storage_maintenance_) {
      next_storage_maintenance_ = now + options_.storage_maintenance_interval;
      blocks_->Maintain();  // its findings arrive as a completion, reported at once
      // A disk found hung just now: its blocks are reported lost at once.
      link_->CollectChanges();
    }

    // The loop sleeps in ::poll on the sockets' ZMQ_FDs (see DrainSocket: zmq::poll made about a
    // dozen poll calls per 4 KiB get, on a VM where a system call costs microseconds), and
    // only once every socket is settled; else it polls with a zero timeout and drains again.
    // One slot per source, named.
    enum Slot {
      kClients,
      kMaster,
      kMasterMonitor,
      kWake,
      kPeerMonitor,
      kStatusHook,
      kDiskCompletions,
      kLocalReads,
      kRegionCompletions,
      kShuffleCompletions,
      kShuffleForwards,
      kSlots
    };
    pollfd fds[kSlots] = {};
    auto watch = [&](Slot slot, int fd) { fds[slot] = {fd, POLLIN, 0}; };
    watch(kClients, router_->get(zmq::sockopt::fd));
    watch(kMaster, link_->socket().get(zmq::sockopt::fd));
    watch(kMasterMonitor, link_->monitor_fd());
    watch(kWake, wake_fd_);
    watch(kPeerMonitor, peer_monitor_->socket().get(zmq::sockopt::fd));
    // poll ignores a negative fd: no hook, no status queries.
    watch(kStatusHook, options_.status_hook ? options_.status_hook->wake_fd() : -1);
    watch(kDiskCompletions, blocks_->completion_fd());
    watch(kLocalReads, local_read_server_ ? local_read_server_->poll_fd() : -1);
    watch(kRegionCompletions, blocks_->region_completion_fd());
    watch(kShuffleCompletions, shuffles_->completion_fd());
    watch(kShuffleForwards, shuffles_->forward_fd());
    const bool unsettled = replies_->unsettled() || link_->unsettled() ||
                           link_->monitor_unsettled() || peer_monitor_unsettled_;
    const int timeout = unsettled ? 0 : static_cast<int>(PollTimeout(clock_.Now()).count());
    if (::poll(fds, kSlots, timeout) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("poll failed: {}; stopping", std::strerror(errno));
      break;
    }
    if (fds[kWake].revents != 0) {
      uint64_t count;
      ssize_t got = read(wake_fd_, &count, sizeof(count));
      (void)got;
      // After the read of the eventfd: a read queued later wakes the loop again.
      own_block_reads_->ServeQueued(*blocks_);
    }
    if (fds[kPeerMonitor].revents != 0 || peer_monitor_unsettled_)
      AbortUploadsOfClosedConnections();
    if ((fds[kDiskCompletions].revents != 0 || fds[kRegionCompletions].revents != 0) &&
        blocks_->RunCompletions() > 0) {
      // Finished disk work: replies were sent by its callbacks; spills may have made room for
      // the pieces held back, and the changes go to the master.
      ServeWaitingPieces();
      link_->CollectChanges();
    }
    if (TooManyFailedDisks()) break;
    if (fds[kShuffleCompletions].revents != 0) shuffles_->RunCompletions();
    if (fds[kShuffleForwards].revents != 0) shuffles_->RunForwardCompletions();
    shuffles_->FlushDue();
    if (fds[kClients].revents != 0 || replies_->unsettled()) HandleClientMessages();
    shuffles_->SendForwards();  // the turn's pushes' forwards, together
    if (local_read_server_) {
      if (fds[kLocalReads].revents != 0) local_read_server_->Serve();
      local_read_server_->Expire();
    }
    // The monitor first: OnReadable() may replace the socket and its monitor.
    if (fds[kMasterMonitor].revents != 0 || link_->monitor_unsettled()) link_->OnMonitorReadable();
    // Checks the current socket's readiness itself (the one polled may have been replaced).
    if (fds[kMaster].revents != 0 || link_->unsettled()) {
      link_->OnReadable();
      // A registration tells the leader's epoch before any of its commands arrive.
      if (Status raised = fence_.Raise(link_->leader_epoch()); !raised.ok()) {
        spdlog::warn("{}", raised.ToString());
      }
    }
    ResumeParked();
    AnswerFinishedReplications();
    puts_->ReleaseDeferredPuts(clock_.Now());
    if (fds[kStatusHook].revents != 0) {
      options_.status_hook->Serve(WorkerView{
          .worker_id = worker_id_,
          .blocks = *blocks_,
          .counters = counters_,
          .registered = link_->registered(),
          .master_refusal =
              link_->handshake_refusal().ok() ? "" : link_->handshake_refusal().message(),
          .heartbeat_delays = link_->heartbeat_delays(),
          .worst_heartbeat_delay = link_->worst_heartbeat_delay(),
          .decommissioning = puts_->decommissioning(),
          .uploads_in_progress = puts_->uploads_in_progress(),
          .local_readers = local_read_server_ ? local_read_server_->readers() : 0,
          .local_pins = local_read_server_ ? local_read_server_->pins() : 0,
          .local_pins_expired = local_read_server_ ? local_read_server_->pins_expired() : 0,
          .local_arena_blocks = local_read_server_ ? local_read_server_->arena_blocks() : 0,
      });
    }
  }
  // Copies in flight are abandoned (their reads answered kAborted): the master retries them
  // elsewhere.
  own_block_reads_->Close();
  replicator_.reset();

  puts_->AbortAll();
  // The blocks are stored; their reports go out with the next registration.
  puts_->ReleaseDeferredPuts(clock_.Now(), /*all=*/true);
  spdlog::info("worker {} stopped", worker_id_);
}

bool WorkerServer::TooManyFailedDisks() {
  const size_t failed = blocks_->failed_disk_count();
  if (failed == 0) return false;
  const size_t tolerated =
      FailedDisksTolerated(options_.failed_disks_tolerated, blocks_->disk_count());
  if (failed <= tolerated) return false;
  spdlog::error(
      "worker {}: {} of its {} disks have failed, more than the {} tolerated "
      "(--failed-disks-tolerated); stopping",
      worker_id_, failed, blocks_->disk_count(), tolerated);
  exit_code_ = kTooManyFailedDisks;
  return true;
}

milliseconds WorkerServer::PollTimeout(TimePoint now) const {
  TimePoint next = link_->NextDeadline();
  if (std::optional<TimePoint> puts = puts_->NextDeadline()) next = std::min(next, *puts);
  next = std::min(next, next_storage_maintenance_);
  if (std::optional<TimePoint> shuffles = shuffles_->NextDeadline()) {
    next = std::min(next, *shuffles);
  }
  if (local_read_server_) {
    if (std::optional<TimePoint> local = local_read_server_->NextDeadline()) {
      next = std::min(next, *local);
    }
  }
  if (next <= now) return milliseconds(0);
  if (next - now >= kMaxPollTimeout) return kMaxPollTimeout;
  // Round up so the loop does not spin through the last fraction of a millisecond.
  return std::chrono::ceil<milliseconds>(next - now);
}

void WorkerServer::HandleClientMessages() {
  const Drained drained = DrainSocket(*router_, kMessagesPerWakeup, [&] {
    HandleClientMessage();
    // Anything the request changed goes to the master now, and a heartbeat that fell due
    // while it was served goes before the next.
    link_->CollectChanges();
    link_->HeartbeatIfDue();
    return true;
  });
  replies_->Drained(drained == Drained::kSettled);
}

void WorkerServer::HandleClientMessage() {
  std::optional<zmq::message_t> peer;
  Result<IncomingMessage> received = ReceiveMessage(*router_, /*has_routing_id=*/true, &peer);
  if (!received.ok()) {
    spdlog::warn("rejected a message: {}", received.status().ToString());
    if (peer) replies_->SendError(*peer, 0, received.status());
    return;
  }
  if (Serve(received.value(), Arrival::kFromSocket) == Served::kMustWait) {
    waiting_pieces_.push_back(std::move(received).value());
  }
}

void WorkerServer::ServeWaitingPieces() {
  while (!waiting_pieces_.empty()) {
    // Out of the queue while it is served: serving may drop the pieces of closed connections.
    IncomingMessage piece = std::move(waiting_pieces_.front());
    waiting_pieces_.pop_front();
    if (Serve(piece, Arrival::kHeldBack) == Served::kMustWait) {
      waiting_pieces_.push_front(std::move(piece));
      return;
    }
    link_->HeartbeatIfDue();  // as between the messages of a burst
  }
}

WorkerServer::Served WorkerServer::Serve(IncomingMessage& message, Arrival arrival) {
  const TimePoint start = clock_.Now();
  RequestHeader header;  // id 0 and an unknown kind until read
  Result<Served> served = [&]() -> Result<Served> {
    try {
      BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
        proto::Request::Reader request = message.request();
        header.id = request.getId();
        header.which = request.which();
        header.epoch = request.getEpoch();
        return Status::Ok();
      }));
      return Dispatch(message, header, arrival);
    } catch (const kj::Exception& e) {
      return InvalidArgumentError(std::string("malformed message: ") + e.getDescription().cStr());
    } catch (const std::exception& e) {
      return InternalError(std::string("unexpected failure: ") + e.what());
    }
  }();
  if (served.ok() && *served == Served::kMustWait) return Served::kMustWait;
  const Status status = served.status();
  counters_.RecordRequest(OpOf(header.which), status, clock_.Now() - start);
  if (status.ok()) return Served::kDone;
  if (IsClientFault(status.code()) || status.code() == StatusCode::kInternal) {
    spdlog::warn("request {} failed: {}", header.id, status.ToString());
  } else {
    spdlog::debug("request {} failed: {}", header.id, status.ToString());
  }
  replies_->SendError(*message.routing_id(), header.id, status);
  return Served::kDone;
}

Result<WorkerServer::Served> WorkerServer::Dispatch(IncomingMessage& message,
                                                    const RequestHeader& header, Arrival arrival) {
  const uint64_t id = header.id;
  const proto::Request::Which which = header.which;
  BM_RETURN_IF_ERROR(AuthorizeWorkerRequest(keys_.enabled(), message.peer(), which));
  if (message.peer()) {
    // An unknown descriptor may be a closed connection's, reused (see PeerMonitor).
    if (!connection_limit_.Knows(message.source_fd())) AbortUploadsOfClosedConnections();
    Status admitted = connection_limit_.Admit(message.source_fd(), *message.peer());
    if (!admitted.ok()) ++counters_.connections_refused;
    BM_RETURN_IF_ERROR(admitted);
  }
  switch (which) {
    case proto::Request::REMOVE_BLOCKS:
    case proto::Request::REPLICATE_BLOCK:
    case proto::Request::VERIFY_BLOCK:
    case proto::Request::DECOMMISSION:
    case proto::Request::SHUTDOWN:
    case proto::Request::LEADER_ELECTED:
    case proto::Request::DATASET_ACCESS:
    case proto::Request::SHUFFLE_ASSIGNED:
    case proto::Request::REMOVE_SHUFFLE:
      // The master's commands: never from a deposed leader.
      BM_RETURN_IF_ERROR(fence_.Admit(header.epoch, "a command"));
      break;
    default:
      break;
  }
  // Every request but a put piece is answered (or will be) once its handler succeeds.
  auto done = [](Status handled) -> Result<Served> {
    BM_RETURN_IF_ERROR(handled);
    return Served::kDone;
  };
  uint64_t reservation = 0;
  if (IsTenantRestricted(message.peer())) {
    // Pieces keep their order behind one that waits for room (before the gate looks at them).
    if (which == proto::Request::PUT_BLOCK && !waiting_pieces_.empty() &&
        arrival == Arrival::kFromSocket) {
      return Served::kMustWait;
    }
    BM_ASSIGN_OR_RETURN(TenantGate::Admission admitted, AdmitTenant(message, which));
    if (admitted.parked) return Served::kDone;  // served again when the master answers
    reservation = admitted.reservation;
  }
  switch (which) {
    case proto::Request::PUT_BLOCK: {
      // Pieces keep their order behind one that waits for room.
      if (!waiting_pieces_.empty() && arrival == Arrival::kFromSocket) return Served::kMustWait;
      BM_ASSIGN_OR_RETURN(PutHandler::Piece piece, puts_->HandlePut(message, id, reservation));
      return piece == PutHandler::Piece::kMustWait ? Served::kMustWait : Served::kDone;
    }
    case proto::Request::DATASET_ACCESS:
      return done(HandleDatasetAccess(message, id));
    case proto::Request::GET_BLOCK:
      return done(HandleGet(message, id));
    case proto::Request::GET_BLOCKS:
      return done(HandleGetMany(message, id));
    case proto::Request::CONTAINS_BLOCK:
      return done(HandleContains(message, id));
    case proto::Request::OPEN_LOCAL_READS:
      return done(HandleOpenLocalReads(message, id));
    case proto::Request::VERIFY_BLOCK:
      return done(HandleVerify(message, id));
    case proto::Request::CORRUPT_BLOCK:
      return done(HandleCorruptBlock(message, id));
    case proto::Request::REMOVE_BLOCKS:
      return done(HandleRemove(message, id));
    case proto::Request::REPLICATE_BLOCK:
      return done(HandleReplicate(message, id));
    case proto::Request::ABORT_PUT:
      return done(puts_->HandleAbortPut(message, id));
    case proto::Request::SHUFFLE_ASSIGNED:
      return done(shuffles_->HandleAssigned(message, id));
    case proto::Request::REMOVE_SHUFFLE:
      return done(shuffles_->HandleRemove(message, id));
    case proto::Request::PUSH_SHUFFLE:
      return done(shuffles_->HandlePush(message, id));
    case proto::Request::READ_SHUFFLE:
      return done(shuffles_->HandleRead(message, id));
    case proto::Request::DECOMMISSION:
      if (!puts_->decommissioning()) spdlog::info("decommissioning: taking no new blocks");
      puts_->Decommission();
      replies_->SendOk(*message.routing_id(), id);
      return Served::kDone;
    case proto::Request::SHUTDOWN:
      spdlog::info("drained: shutting down as the master asked");
      replies_->SendOk(*message.routing_id(), id);
      // Sockets close with linger 0; this last answer is promised (PROTOCOL.md), so the
      // router keeps it queued for up to a second while the worker exits.
      router_->set(zmq::sockopt::linger, 1000);
      Stop();
      return Served::kDone;
    case proto::Request::PING:
      replies_->SendOk(*message.routing_id(), id);
      return Served::kDone;
    case proto::Request::LEADER_ELECTED: {
      std::string leader;
      BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
        leader = message.request().getLeaderElected();
        return Status::Ok();
      }));
      link_->LeaderElected(leader, header.epoch);
      replies_->SendOk(*message.routing_id(), id);
      return Served::kDone;
    }
    default:
      break;
  }
  return InvalidArgumentError("request kind " + std::to_string(static_cast<int>(which)) +
                              " is not served by a worker");
}

Result<TenantGate::Admission> WorkerServer::AdmitTenant(IncomingMessage& message,
                                                        proto::Request::Which which) {
  const PeerIdentity& peer = *message.peer();
  const WorkerRequestKind* kind = FindWorkerRequestKind(which);
  if (kind == nullptr) {
    return PermissionDeniedError("request kind " + std::to_string(static_cast<int>(which)) +
                                 " is not open to tenant key '" + peer.name + "'");
  }
  std::vector<std::string> datasets;
  std::optional<TenantGate::PutInfo> put;
  switch (kind->gating) {
    case WorkerTenantGating::kNeutral:
    case WorkerTenantGating::kNotServed:     // the dispatcher answers "not served"
    case WorkerTenantGating::kShuffleOwner:  // the shuffle store checks the owner
      return TenantGate::Admission{};
    case WorkerTenantGating::kMasterOnly:
    case WorkerTenantGating::kAdminOnly:
      // The access policy refuses these to client keys already; this holds if it ever did not.
      return PermissionDeniedError(std::string(kind->name) + " is not allowed for tenant key '" +
                                   peer.name + "'");
    case WorkerTenantGating::kRead:
      BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
        BM_ASSIGN_OR_RETURN(std::vector<BlockId> blocks, kind->named_blocks(message.request()));
        for (const BlockId& block : blocks) datasets.push_back(DatasetOf(block));
        return Status::Ok();
      }));
      std::sort(datasets.begin(), datasets.end());
      datasets.erase(std::unique(datasets.begin(), datasets.end()), datasets.end());
      if (datasets.empty()) return TenantGate::Admission{};
      return tenants_->AdmitRead(peer, datasets, message);
    case WorkerTenantGating::kPut:
      BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
        proto::PutBlock::Reader piece = message.request().getPutBlock();
        BM_ASSIGN_OR_RETURN(BlockId block, ParseWireBlockId(piece.getBlockId()));
        if (!IsKnownLevel(piece.getLevel())) return InvalidArgumentError("unknown storage level");
        const zmq::message_t& sender = *message.routing_id();
        put = TenantGate::PutInfo{
            .upload = std::string(static_cast<const char*>(sender.data()), sender.size()) + "/" +
                      std::to_string(piece.getUploadId()),
            .block = block,
            .offset = piece.getOffset(),
            .total_size = piece.getTotalSize(),
            .level = FromProto(piece.getLevel()),
            .version = piece.getVersion(),
            .copies = piece.getCopies()};
        return Status::Ok();
      }));
      return tenants_->AdmitPut(peer, *put, message);
  }
  return InternalError("unknown tenant gating");
}

void WorkerServer::ResumeParked() {
  // Records kept from before a registration may have missed the master's updates meanwhile.
  if (link_->registrations() != registrations_seen_) {
    registrations_seen_ = link_->registrations();
    tenants_->ForgetAll();
  }
  for (TenantGate::Resumed& resumed : tenants_->TakeResumed()) {
    if (!resumed.failed.ok()) {
      uint64_t id = 0;
      (void)ReadGuarded([&]() -> Status {
        id = resumed.message.request().getId();
        return Status::Ok();
      });
      replies_->SendError(*resumed.message.routing_id(), id, resumed.failed);
      continue;
    }
    if (Serve(resumed.message, Arrival::kFromSocket) == Served::kMustWait) {
      waiting_pieces_.push_back(std::move(resumed.message));
    }
  }
}

Status WorkerServer::HandleDatasetAccess(IncomingMessage& message, uint64_t id) {
  std::string dataset;
  DatasetAccess access;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::DatasetAccessRecord::Reader record = message.request().getDatasetAccess();
    BM_ASSIGN_OR_RETURN(dataset, ParseDataset(std::string_view(record.getDataset().cStr(),
                                                               record.getDataset().size())));
    access.owner = record.getOwner();
    for (capnp::Text::Reader reader : record.getReaders()) {
      access.readers.emplace_back(reader.cStr(), reader.size());
    }
    std::sort(access.readers.begin(), access.readers.end());
    access.generation = record.getGeneration();
    access.owner_memory_quota = record.getOwnerMemoryQuota();
    return Status::Ok();
  }));
  tenants_->Update(dataset, access);
  replies_->SendOk(*message.routing_id(), id);
  return Status::Ok();
}

Status WorkerServer::HandleGet(IncomingMessage& message, uint64_t id) {
  std::optional<BlockId> block;
  uint64_t offset = 0;
  uint64_t max_length = 0;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::GetBlock::Reader get = message.request().getGetBlock();
    BM_ASSIGN_OR_RETURN(BlockId parsed, ParseWireBlockId(get.getBlockId()));
    block = parsed;
    offset = get.getOffset();
    max_length = get.getMaxLength();
    return Status::Ok();
  }));
  std::optional<BlockStatus> status = blocks_->Find(*block);
  if (!status) return NotFoundError("block " + block->ToString() + " is not stored here");
  if (offset > status->size) {
    return InvalidArgumentError("offset " + std::to_string(offset) + " is past the end of " +
                                block->ToString() + " (" + std::to_string(status->size) +
                                " bytes)");
  }
  const uint64_t limit = std::min(max_length, kMaxPieceBytes);
  if (offset == 0) CountBlockReads(message, 1);
  // Memory blocks answer at once; disk blocks when the storage thread has read the range.
  blocks_->Read(*block, offset, limit,
                [this, peer = SharePeer(*message.routing_id()), id, limit](Result<BlockRead> read) {
                  if (read.ok()) {
                    capnp::MallocMessageBuilder reply;
                    proto::Reply::Builder root = reply.initRoot<proto::Reply>();
                    root.setId(id);
                    std::vector<zmq::message_t> frames = FillGetReply(root.initGet(), limit, *read);
                    replies_->Send(*peer, reply, std::move(frames));
                  } else {
                    replies_->SendError(*peer, id, read.status());
                  }
                });
  return Status::Ok();
}

Status WorkerServer::HandleGetMany(IncomingMessage& message, uint64_t id) {
  std::vector<BlockId> blocks;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    capnp::List<capnp::Text>::Reader ids = message.request().getGetBlocks().getBlockIds();
    if (ids.size() > kMaxGetBlocksIds) {
      return InvalidArgumentError("getBlocks asks for " + std::to_string(ids.size()) +
                                  " blocks; at most " + std::to_string(kMaxGetBlocksIds));
    }
    blocks.reserve(ids.size());
    for (capnp::Text::Reader text : ids) {
      BM_ASSIGN_OR_RETURN(BlockId parsed, ParseWireBlockId(text));
      blocks.push_back(parsed);
    }
    return Status::Ok();
  }));

  CountBlockReads(message, blocks.size());
  // Every block that may fit the reply is read (memory blocks at once, with one index probe
  // each; disk blocks on the storage thread); the reply is built when the last read is in.
  auto batch = std::make_shared<GetManyBatch>();
  batch->peer = CopyFrame(*message.routing_id());
  batch->request_id = id;
  batch->blocks = std::move(blocks);
  batch->statuses.resize(batch->blocks.size());
  batch->reads.resize(batch->blocks.size());
  uint64_t bytes = 0;
  std::vector<size_t> to_read;
  blocks_->PrefetchInMemory(batch->blocks);
  for (size_t i = 0; i < batch->blocks.size(); ++i) {
    const BlockId& block = batch->blocks[i];
    if (std::optional<BlockRead> read = blocks_->ReadInMemory(block)) {
      batch->statuses[i] =
          BlockStatus{block, read->level, Tier::kMemory, read->total_size, read->version};
      if (read->total_size > kMaxPieceBytes - bytes) continue;
      bytes += read->total_size;
      batch->reads[i] = std::move(read);
      continue;
    }
    batch->statuses[i] = blocks_->Find(block);
    const std::optional<BlockStatus>& status = batch->statuses[i];
    if (!status || status->size > kMaxPieceBytes - bytes) continue;
    bytes += status->size;
    to_read.push_back(i);
  }
  batch->pending = to_read.size() + 1;  // + 1 until every read is asked for
  for (size_t i : to_read) {
    blocks_->Read(batch->blocks[i], 0, batch->statuses[i]->size,
                  [this, batch, i](Result<BlockRead> read) {
                    // Gone or unreadable since Find: the client reads it alone and hears why.
                    if (read.ok()) batch->reads[i] = std::move(read).value();
                    if (--batch->pending == 0) SendGetManyReply(*batch);
                  });
  }
  if (--batch->pending == 0) SendGetManyReply(*batch);
  return Status::Ok();
}

void WorkerServer::CountBlockReads(const IncomingMessage& message, uint64_t blocks) {
  (ConnectionFromThisHost(message.source_fd()) ? counters_.block_reads_local
                                               : counters_.block_reads_remote) += blocks;
}

Status WorkerServer::HandleOpenLocalReads(IncomingMessage& message, uint64_t id) {
  capnp::MallocMessageBuilder reply;
  proto::Reply::Builder root = reply.initRoot<proto::Reply>();
  root.setId(id);
  proto::LocalReadsOffer::Builder offer = root.initLocalReads();
  offer.setHostId(host_id_);
  if (local_read_server_) {
    offer.setSocketPath(local_read_server_->socket_path());
    const std::string ticket = local_read_server_->IssueTicket(message.peer());
    offer.setTicket(
        capnp::Data::Reader(reinterpret_cast<const kj::byte*>(ticket.data()), ticket.size()));
  }
  replies_->Send(*message.routing_id(), reply);
  return Status::Ok();
}

void WorkerServer::SendGetManyReply(const GetManyBatch& batch) {
  capnp::MallocMessageBuilder reply;
  proto::Reply::Builder root = reply.initRoot<proto::Reply>();
  root.setId(batch.request_id);
  std::vector<zmq::message_t> frames = FillGetManyReply(
      root.initBlocksRead(static_cast<unsigned>(batch.blocks.size())), batch.statuses, batch.reads);
  replies_->Send(batch.peer, reply, std::move(frames));
}

Status WorkerServer::HandleVerify(IncomingMessage& message, uint64_t id) {
  std::optional<BlockId> block;
  bool reported_bad = false;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::VerifyBlock::Reader verify = message.request().getVerifyBlock();
    BM_ASSIGN_OR_RETURN(BlockId parsed, ParseWireBlockId(verify.getBlockId()));
    block = parsed;
    reported_bad = verify.getReportedBad();
    return Status::Ok();
  }));
  // A disk copy is re-read on the storage thread; the answer goes when it is done.
  blocks_->Verify(*block, [this, peer = SharePeer(*message.routing_id()), id, block = *block,
                           reported_bad](Result<BlockCheck> check) {
    capnp::MallocMessageBuilder reply;
    proto::Reply::Builder root = reply.initRoot<proto::Reply>();
    root.setId(id);
    proto::VerifyReply::Builder verified = root.initVerified();
    if (!check.ok()) {
      if (check.status().code() != StatusCode::kNotFound) {
        replies_->SendError(*peer, id, check.status());
        return;
      }
      verified.setState(proto::VerifyReply::State::NOT_FOUND);
    } else {
      verified.setTier(ToProto(check->tier));
      verified.setDigested(check->digested);
      if (check->corrupt.ok()) {
        verified.setState(proto::VerifyReply::State::INTACT);
        if (reported_bad) {
          // The stored copy is right: what the reader got went bad on the way.
          ++counters_.checksum_failures_read_transit;
          spdlog::warn(
              "block {}: a reader's bytes did not match their digests but the stored copy "
              "is intact: corrupted in transit",
              block.ToString());
        }
      } else {
        verified.setState(proto::VerifyReply::State::CORRUPT);
        verified.setMessage(check->corrupt.message());
        if (check->tier == Tier::kMemory) ++counters_.checksum_failures_memory;
        link_->CollectChanges();  // the master hears of the dropped copy at once
      }
    }
    replies_->Send(*peer, reply);
  });
  return Status::Ok();
}

Status WorkerServer::HandleCorruptBlock(IncomingMessage& message, uint64_t id) {
  if (!options_.enable_fault_injection) {
    return InvalidArgumentError("corruptBlock is test-only fault injection, off on worker " +
                                worker_id_ +
                                " (it serves it only when started with --enable-fault-injection)");
  }
  std::optional<BlockId> block;
  Tier tier = Tier::kMemory;
  uint64_t offset = 0;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::CorruptBlock::Reader corrupt = message.request().getCorruptBlock();
    BM_ASSIGN_OR_RETURN(BlockId parsed, ParseWireBlockId(corrupt.getBlockId()));
    block = parsed;
    switch (corrupt.getTier()) {
      case proto::Tier::MEMORY:
        tier = Tier::kMemory;
        break;
      case proto::Tier::DISK:
        tier = Tier::kDisk;
        break;
      default:
        return InvalidArgumentError("unknown tier");
    }
    offset = corrupt.getOffset();
    return Status::Ok();
  }));
  blocks_->CorruptStoredByte(
      *block, tier, offset,
      [this, peer = SharePeer(*message.routing_id()), id, block = *block, tier,
       offset](Status corrupted) {
        if (!corrupted.ok()) {
          replies_->SendError(*peer, id, corrupted);
          return;
        }
        spdlog::warn("fault injection: flipped the byte at offset {} of block {}'s {} copy", offset,
                     block.ToString(), TierName(tier));
        replies_->SendOk(*peer, id);
      });
  return Status::Ok();
}

Status WorkerServer::HandleContains(IncomingMessage& message, uint64_t id) {
  std::optional<BlockId> block;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    BM_ASSIGN_OR_RETURN(BlockId parsed,
                        ParseWireBlockId(message.request().getContainsBlock().getBlockId()));
    block = parsed;
    return Status::Ok();
  }));
  std::optional<BlockStatus> status = blocks_->Find(*block);
  capnp::MallocMessageBuilder reply;
  proto::Reply::Builder root = reply.initRoot<proto::Reply>();
  root.setId(id);
  proto::ContainsReply::Builder contains = root.initContains();
  contains.setPresent(status.has_value());
  if (status) {
    FillBlockStatus(*status, contains.initStatus());
  } else {
    contains.initStatus().setBlockId(block->ToString());
  }
  replies_->Send(*message.routing_id(), reply);
  return Status::Ok();
}

Status WorkerServer::HandleReplicate(IncomingMessage& message, uint64_t id) {
  Replicator::Job job{.ticket = next_ticket_++,
                      .block = BlockId::Broadcast(0),
                      .level = StorageLevel::kMemoryOnly,
                      .targets = {}};
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::ReplicateBlock::Reader request = message.request().getReplicateBlock();
    BM_ASSIGN_OR_RETURN(job.block, ParseWireBlockId(request.getBlockId()));
    if (!IsKnownLevel(request.getLevel())) return InvalidArgumentError("unknown storage level");
    job.level = FromProto(request.getLevel());
    for (proto::ReplicaTarget::Reader target : request.getTargets()) {
      WorkerInfo info;
      info.id = std::string(target.getWorkerId().cStr(), target.getWorkerId().size());
      info.address = std::string(target.getAddress().cStr(), target.getAddress().size());
      info.public_key = std::string(target.getPublicKey().cStr(), target.getPublicKey().size());
      job.targets.push_back(std::move(info));
    }
    return Status::Ok();
  }));
  if (job.targets.empty()) return InvalidArgumentError("replicateBlock names no target");
  if (!blocks_->Find(job.block)) {
    return NotFoundError("block " + job.block.ToString() + " is not stored on worker " +
                         worker_id_);
  }
  replications_.emplace(job.ticket, PendingReplication{zmq::message_t(message.routing_id()->data(),
                                                                      message.routing_id()->size()),
                                                       id, job.block});
  replicator_->Submit(std::move(job));
  return Status::Ok();
}

void WorkerServer::AnswerFinishedReplications() {
  if (replications_.empty()) return;
  for (Replicator::Finished& finished : replicator_->TakeFinished()) {
    auto pending = replications_.find(finished.ticket);
    if (pending == replications_.end()) continue;
    if (finished.copies.ok()) {
      capnp::MallocMessageBuilder reply;
      proto::Reply::Builder root = reply.initRoot<proto::Reply>();
      root.setId(pending->second.request_id);
      root.setReplicated(*finished.copies);
      replies_->Send(pending->second.peer, reply);
    } else {
      replies_->SendError(pending->second.peer, pending->second.request_id,
                          finished.copies.status());
      // dataLoss: this worker's bytes failed their digests at the copier, which reads them
      // without RocksDB's checksum (ReadForCheckingReader), or a target twice refused a piece
      // as corrupted in transit. Either way the copy here is verified (a re-read), and dropped
      // and reported lost when corrupt, so the master copies the block from another worker.
      if (finished.copies.status().code() == StatusCode::kDataLoss) {
        blocks_->Verify(pending->second.block, [this](Result<BlockCheck> check) {
          if (check.ok() && !check->corrupt.ok()) link_->CollectChanges();
        });
      }
    }
    replications_.erase(pending);
  }
}

Status WorkerServer::HandleRemove(IncomingMessage& message, uint64_t id) {
  // Every id is checked before anything is removed: a bad list changes nothing.
  std::vector<BlockId> ids;
  std::vector<uint64_t> versions;  // empty, or one per id (0 = any version)
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::RemoveBlocks::Reader request = message.request().getRemoveBlocks();
    for (capnp::Text::Reader text : request.getBlockIds()) {
      BM_ASSIGN_OR_RETURN(BlockId parsed, ParseWireBlockId(text));
      ids.push_back(parsed);
    }
    if (request.hasVersions()) {
      if (request.getVersions().size() != ids.size()) {
        return InvalidArgumentError("removeBlocks has " +
                                    std::to_string(request.getVersions().size()) +
                                    " versions for " + std::to_string(ids.size()) + " ids");
      }
      for (uint64_t version : request.getVersions()) versions.push_back(version);
    }
    return Status::Ok();
  }));
  uint64_t removed = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const BlockId& block = ids[i];
    Status status = blocks_->Remove(block, versions.empty() ? 0 : versions[i]);
    if (status.ok()) {
      ++removed;
    } else if (status.code() != StatusCode::kNotFound) {
      spdlog::warn("cannot remove {}: {}", block.ToString(), status.ToString());
    }
  }
  capnp::MallocMessageBuilder reply;
  proto::Reply::Builder root = reply.initRoot<proto::Reply>();
  root.setId(id);
  root.setRemoved(removed);
  replies_->Send(*message.routing_id(), reply);
  return Status::Ok();
}

void WorkerServer::AbortUploadsOfClosedConnections() {
  peer_monitor_unsettled_ = false;  // TakeClosed() drains its socket
  for (int connection : peer_monitor_->TakeClosed()) {
    std::erase_if(waiting_pieces_, [connection](const IncomingMessage& piece) {
      return piece.source_fd() == connection;
    });
    connection_limit_.Closed(connection);
    puts_->AbortUploadsOf(connection);
  }
}

}  // namespace bm
