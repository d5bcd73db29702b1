#include "master/master_loop.h"

#include <poll.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "common/access_policy.h"
#include "common/tenant.h"
#include "common/zap_handler.h"
#include "master/request_decoding.h"
#include "master/shuffle_requests.h"

namespace bm {
namespace {

// Block copies (re-replication, drains) in flight at once, and how long one may take before
// it is planned again.
constexpr size_t kMaxCopiesInFlight = 16;
constexpr Duration kCopyTimeout = std::chrono::seconds(120);
constexpr Duration kMinCheckInterval = std::chrono::milliseconds(10);
constexpr Duration kMaxCheckInterval = std::chrono::seconds(1);
constexpr Duration kLeadershipCheckInterval = std::chrono::milliseconds(100);

}  // namespace

MasterServer::Loop::Loop(zmq::context_t& context, MasterOptions options, const Clock& clock,
                         zmq::socket_t router, zmq::socket_t control,
                         std::unique_ptr<MasterJournal> journal)
    : options_(std::move(options)),
      clock_(clock),
      check_interval_(std::clamp<Duration>(options_.heartbeat_timeout / 4, kMinCheckInterval,
                                           kMaxCheckInterval)),
      requests_(std::move(router), kMaxMessagesPerWake),
      control_(std::move(control)),
      registry_(clock),
      journal_(std::move(journal)),
      links_(context, options_.keys, kMaxMessagesPerWake),
      replication_(clock_, request_ids_, kMaxCopiesInFlight, kCopyTimeout),
      standby_(clock_, context, options_, journal_.get()) {}

Status MasterServer::Loop::StartKeyLimits(zmq::context_t& context) {
  BM_ASSIGN_OR_RETURN(
      key_limits_, KeyLimits::Create(context, requests_.socket(), options_.max_connections_per_key,
                                     options_.zap, options_.max_registrations_per_key, clock_));
  return Status::Ok();
}

Status MasterServer::Loop::RestoreFromJournal() {
  if (!journal_) return Status::Ok();
  const TimePoint start = clock_.Now();
  BM_ASSIGN_OR_RETURN(JournalSnapshot snapshot,
                      journal_->Load([&](const std::string& worker_id, const BlockChange& change) {
                        index_.Apply(worker_id, change);
                      }));
  for (const auto& [id, version] : snapshot.retired) index_.RetireVersion(id, version);
  tenants_.Restore(snapshot.datasets, snapshot.quotas);
  CarryOut(losses_.Restore(std::move(snapshot.lost)));
  for (const JournaledLease& lease : snapshot.leases) {
    leases_.Restore(
        {lease.block, lease.token, lease.holder, std::chrono::milliseconds(lease.length_ms)});
    journaled_leases_.emplace(lease.block, lease.token);
  }
  for (JournaledWorker& worker : snapshot.workers) {
    // Connected now, so removes fan out to it before it registers again. With keys on, the
    // key it authenticated with last time is vouched for to clients, and trusted by the link,
    // until it registers again (a master with keys off has no use for journaled keys).
    const std::string public_key = options_.keys.enabled() ? worker.public_key : std::string();
    Result<zmq::socket_t> link = links_.Connect(worker.address, public_key);
    if (!link.ok()) {
      spdlog::warn("journaled worker {}: {}; forgetting it", worker.id, link.status().ToString());
      index_.RemoveWorker(worker.id);
      Journaled(journal_->RecordWorkerDropped(worker.id));
      continue;
    }
    links_.Add(worker.id, std::move(link).value(), public_key);
    registry_.Restore(worker.id, worker.address,
                      WorkerLabels{std::move(worker.host), std::move(worker.rack)});
  }
  for (const JournaledShuffle& shuffle : snapshot.shuffles) shuffles_.Restore(shuffle);
  for (const JournaledMapCommit& commit : snapshot.map_commits) shuffles_.RestoreCommit(commit);
  for (JournaledRdd& rdd : snapshot.rdds) {
    rdd_descriptions_.insert_or_assign(
        rdd.rdd_id, RddDescription{std::move(rdd.name), rdd.level, rdd.total_partitions});
  }
  spdlog::info(
      "restored from the master journal {}: {} workers (unconfirmed until they register again), "
      "{} block locations, {} RDD descriptions, {} lost blocks, {} shuffles in {} ms",
      journal_->dir(), registry_.size(), snapshot.location_count, rdd_descriptions_.size(),
      losses_.records().size(), shuffles_.size(), ToMillis(clock_.Now() - start));
  return Status::Ok();
}

// The loop sleeps in ::poll on the sockets' ZMQ_FDs rather than in zmq::poll. On this
// project's VMs a system call costs microseconds, and zmq::poll makes many per wake-up: two
// poll passes, and a ZMQ_EVENTS check (getpid, poll, read) of every socket, each worker link
// included, before and after. Here a wake-up drains only the sockets whose fd fired (the
// client socket always): a single-id lookup costs ~12 system calls in the master (strace -c,
// both its threads) where zmq::poll costs ~16, and the cost does not grow with the number of
// workers.
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
  // The first pass drains everything.
  requests_.Unsettle();
  links_.UnsettleAll();
  key_limits_->DrainClosed();
  if (options_.leadership != nullptr) FollowLeadership();
  while (!stop_requested.load() && !standby_.demoted()) {
    fds.clear();
    fds.push_back({requests_.fd(), POLLIN, 0});
    fds.push_back({control_.get(zmq::sockopt::fd), POLLIN, 0});
    fds.push_back({key_limits_->monitor_socket().get(zmq::sockopt::fd), POLLIN, 0});
    if (options_.status_hook) fds.push_back({options_.status_hook->wake_fd(), POLLIN, 0});
    const size_t first_worker_fd = fds.size();
    links_.AddPollFds(fds);
    const bool unsettled = requests_.unsettled() || links_.unsettled();
    const int timeout = unsettled ? 0 : static_cast<int>(NextTimeout().count());
    if (::poll(fds.data(), fds.size(), timeout) < 0) {
      // Anything but a signal means the fds are broken: a bug.
      BM_CHECK(errno == EINTR);
      continue;
    }
    if (fds[1].revents != 0) DrainControl();
    if (options_.leadership != nullptr) {
      FollowLeadership();
      if (standby_.demoted()) break;
    }
    // DrainClosed() drains the monitor's socket, so its fd is settled after this.
    if (fds[2].revents != 0) key_limits_->DrainClosed();
    if (options_.status_hook && fds[3].revents != 0) ServeStatus();
    // Worker replies first: handling them never adds or drops links.
    links_.DrainReady(std::span<const pollfd>(fds).subspan(first_worker_fd), handle_reply_);
    // Always: replies were sent on it last time round.
    requests_.Drain([this](const zmq::message_t& client) { HandleClientMessage(client); });
    Send(standby_.Serve());
    CheckHeartbeats();
    AnswerRemovals(removals_.Expire());
    if (leases_.lease_count() > 0) AnswerWaiters(leases_.Expire());
    if (std::optional<TimePoint> expiry = shuffles_.NextExpiry();
        expiry && *expiry <= clock_.Now() && standby_.leading()) {
      ShuffleEffects effects;
      for (uint64_t id : shuffles_.Expire(effects)) {
        spdlog::info("shuffle {} was not used for {} s: removing it", id,
                     ToMillis(options_.shuffle_ttl) / 1000);
      }
      CarryOut(effects);
    }
  }
  const Status stopping = UnavailableError("the master is shutting down");
  for (uint64_t ticket : removals_.TakeAllCallers()) FailParked(ticket, stopping);
  for (uint64_t ticket : leases_.TakeAllWaiters()) FailParked(ticket, stopping);
  // Acknowledgements the standbys never confirmed are not sent: the caller retries with the
  // next leader, which has the records or not.
  standby_.Stop();
}

std::chrono::milliseconds MasterServer::Loop::NextTimeout() const {
  TimePoint wake = next_heartbeat_check_;
  if (std::optional<TimePoint> remove_deadline = removals_.NextDeadline()) {
    wake = std::min(wake, *remove_deadline);
  }
  if (std::optional<TimePoint> lease_deadline = leases_.NextDeadline()) {
    wake = std::min(wake, *lease_deadline);
  }
  if (std::optional<TimePoint> expiry = shuffles_.NextExpiry()) wake = std::min(wake, *expiry);
  if (options_.leadership != nullptr) {
    // The election pokes the loop when it changes; this bounds the wait if a poke is lost.
    wake = std::min(wake, clock_.Now() + kLeadershipCheckInterval);
  }
  if (std::optional<TimePoint> standbys = standby_.NextWake()) wake = std::min(wake, *standbys);
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
      .role = standby_.StatusRole(AdvertisedAddress()),
      .tenants = [this] { return tenants_.Usages(std::nullopt); },
      .lost = &losses_.records(),
      .shuffles = &shuffles_,
  });
}

void MasterServer::Loop::DrainControl() {
  zmq::message_t message;
  while (control_.recv(message, zmq::recv_flags::dontwait)) {
  }
}

void MasterServer::Loop::HandleClientMessage(const zmq::message_t& client) {
  Result<IncomingMessage> received = requests_.ReceiveRest();
  if (!received.ok()) {
    // Rejected before its id could be read: answer with id 0.
    if (received.status().code() != StatusCode::kUnavailable) {
      requests_.SendError(client, 0, received.status());
    }
    return;
  }
  IncomingMessage& message = received.value();
  uint64_t request_id = 0;
  Answer answer = Answer::kNow;
  MasterOp op = MasterOp::kOther;
  const TimePoint start = clock_.Now();
  const uint64_t journal_before = standby_.journal_head();
  // The builder zeroes what it used of the scratch segment again when it is destroyed.
  capnp::MallocMessageBuilder reply_message(requests_.reply_segment());
  proto::Reply::Builder reply = reply_message.initRoot<proto::Reply>();
  Status status = ReadGuarded([&]() -> Status {
    proto::Request::Reader request = message.request();
    request_id = request.getId();
    op = OpOf(request.which());
    if (Status admitted = key_limits_->AdmitConnection(message); !admitted.ok()) {
      ++counters_.connections_refused;
      return admitted;
    }
    BM_ASSIGN_OR_RETURN(answer, Dispatch(request, client, message.peer(), reply));
    return Status::Ok();
  });
  counters_.RecordRequest(op, status.ok(), clock_.Now() - start);
  if (!status.ok()) {
    requests_.SendError(client, request_id, status);
    return;
  }
  if (answer == Answer::kLater) return;
  reply.setId(request_id);
  if (standby_.journal_head() > journal_before) {
    // It acknowledges what it journaled: not before the standbys hold it.
    SendAcknowledgement(client, reply_message, standby_.journal_head());
    return;
  }
  requests_.Send(client, reply_message);
}

Result<MasterServer::Loop::Answer> MasterServer::Loop::Dispatch(
    proto::Request::Reader request, const zmq::message_t& client,
    const std::optional<PeerIdentity>& peer, proto::Reply::Builder reply) {
  const bool secure = options_.keys.enabled();
  BM_RETURN_IF_ERROR(AuthorizeMasterRequest(secure, peer, request.which()));
  if (request.which() == proto::Request::MASTER_INFO) {
    standby_.AnswerMasterInfo(AdvertisedAddress(), reply);
    return Answer::kNow;
  }
  if (!standby_.leading()) {
    standby_.AnswerNotLeader(reply);
    return Answer::kNow;
  }
  // A client key's request is checked against the tenant rules by its kind, before any handler.
  if (IsTenantRestricted(peer)) {
    BM_RETURN_IF_ERROR(WithTenantEffects(
        [&](TenantEffects& effects) { return tenants_.Admit(request, *peer, effects); }));
  }
  if (IsShuffleRequest(request.which())) {
    ShuffleEffects effects;
    BM_RETURN_IF_ERROR(AnswerShuffleRequest(
        shuffles_, request,
        ShuffleRequestContext{.registry = registry_,
                              .links = links_,
                              .tenant = IsTenantRestricted(peer) ? TenantOf(*peer) : std::string(),
                              .visible = tenants_.VisibleTo(peer),
                              .now = clock_.Now()},
        reply, effects));
    CarryOut(effects);
    return Answer::kNow;
  }
  switch (request.which()) {
    case proto::Request::REGISTER_WORKER:
      BM_RETURN_IF_ERROR(
          AuthorizeWorkerId(secure, peer, request.getRegisterWorker().getWorkerId().cStr()));
      if (peer) {
        Status admitted = key_limits_->AdmitRegistration(*peer);
        if (!admitted.ok()) {
          ++counters_.registrations_refused;
          return admitted;
        }
      }
      BM_RETURN_IF_ERROR(HandleRegister(request.getRegisterWorker(), peer, reply));
      return Answer::kNow;
    case proto::Request::HEARTBEAT:
      BM_RETURN_IF_ERROR(
          AuthorizeWorkerId(secure, peer, request.getHeartbeat().getWorkerId().cStr()));
      BM_RETURN_IF_ERROR(HandleHeartbeat(request.getHeartbeat(), reply));
      return Answer::kNow;
    case proto::Request::REPORT_BLOCKS:
      BM_RETURN_IF_ERROR(
          AuthorizeWorkerId(secure, peer, request.getReportBlocks().getWorkerId().cStr()));
      return HandleReportBlocks(request.getReportBlocks(), client, request.getId(), reply);
    case proto::Request::GET_LOCATIONS:
      BM_RETURN_IF_ERROR(queries_.GetLocations(request.getGetLocations(), reply));
      return Answer::kNow;
    case proto::Request::LIST_WORKERS:
      queries_.ListWorkers(reply);
      return Answer::kNow;
    case proto::Request::LIST_BLOCKS:
      BM_RETURN_IF_ERROR(
          queries_.ListBlocks(request.getListBlocks(), reply, tenants_.VisibleTo(peer)));
      return Answer::kNow;
    case proto::Request::LIST_RDDS:
      queries_.ListRdds(reply, tenants_.VisibleTo(peer));
      return Answer::kNow;
    case proto::Request::LIST_RDD_PAGE:
      queries_.ListRddPage(request.getListRddPage(), reply, tenants_.VisibleTo(peer));
      return Answer::kNow;
    case proto::Request::REMOVE_BLOCKS: {
      BM_ASSIGN_OR_RETURN(std::vector<BlockId> ids,
                          DecodeBlockIds(request.getRemoveBlocks().getBlockIds()));
      CarryOut(losses_.Removed(ids));
      StartRemove(client, request.getId(), std::move(ids));
      return Answer::kLater;
    }
    case proto::Request::REMOVE_RDD: {
      const uint64_t rdd_id = request.getRemoveRdd().getRddId();
      if (rdd_descriptions_.erase(rdd_id) > 0 && journal_) {
        Journaled(journal_->RecordRddForgotten(rdd_id));
      }
      CarryOut(losses_.RddRemoved(rdd_id));
      StartRemove(client, request.getId(), index_.RddBlockIds(rdd_id));
      return Answer::kLater;
    }
    case proto::Request::REGISTER_RDD:
      BM_RETURN_IF_ERROR(HandleRegisterRdd(request.getRegisterRdd(), reply));
      return Answer::kNow;
    case proto::Request::ACQUIRE_COMPUTE:
      return HandleAcquireCompute(request.getAcquireCompute(), client, request.getId(), reply);
    case proto::Request::CHECK_ACCESS:
      BM_RETURN_IF_ERROR(WithTenantEffects([&](TenantEffects& effects) {
        return tenants_.CheckAccess(request.getCheckAccess(), reply, effects);
      }));
      return Answer::kNow;
    case proto::Request::SHARE_DATASET:
      BM_RETURN_IF_ERROR(WithTenantEffects([&](TenantEffects& effects) {
        return tenants_.ShareDataset(request.getShareDataset(), peer, reply, effects);
      }));
      return Answer::kNow;
    case proto::Request::SET_QUOTA:
      BM_RETURN_IF_ERROR(WithTenantEffects([&](TenantEffects& effects) {
        return tenants_.SetQuota(request.getSetQuota(), reply, effects);
      }));
      return Answer::kNow;
    case proto::Request::LIST_TENANTS:
      tenants_.ListTenants(peer, reply);
      return Answer::kNow;
    case proto::Request::RENEW_COMPUTE:
      BM_RETURN_IF_ERROR(HandleRenewCompute(request.getRenewCompute(), reply));
      return Answer::kNow;
    case proto::Request::RELEASE_COMPUTE:
      BM_RETURN_IF_ERROR(HandleReleaseCompute(request.getReleaseCompute(), reply));
      return Answer::kNow;
    case proto::Request::DECOMMISSION_WORKER:
      BM_RETURN_IF_ERROR(HandleDecommission(request.getDecommissionWorker(), reply));
      return Answer::kNow;
    case proto::Request::PING:
      reply.setOk();
      return Answer::kNow;
    case proto::Request::FETCH_JOURNAL: {
      // Answered with its payload (now, or later when records come), never by the reply here.
      std::vector<StandbyReply> answered;
      BM_RETURN_IF_ERROR(
          standby_.FetchJournal(request.getFetchJournal(), client, request.getId(), answered));
      Send(std::move(answered));
      return Answer::kLater;
    }
    default:
      return InvalidArgumentError("unsupported request");
  }
}

void MasterServer::Loop::AnswerParked(uint64_t ticket, capnp::MallocMessageBuilder& message) {
  ParkedRequests::Parked parked = parked_.Take(ticket);
  message.getRoot<proto::Reply>().setId(parked.request_id);
  // A parked answer (a removal's, a lease's) may depend on anything journaled so far.
  SendAcknowledgement(parked.client, message, standby_.journal_head());
}

void MasterServer::Loop::FailParked(uint64_t ticket, const Status& status) {
  ParkedRequests::Parked parked = parked_.Take(ticket);
  requests_.SendError(parked.client, parked.request_id, status);
}

void MasterServer::Loop::FollowLeadership() {
  if (std::optional<uint64_t> elected = standby_.Follow()) Promote(*elected);
}

void MasterServer::Loop::Promote(uint64_t epoch) {
  const TimePoint start = clock_.Now();
  standby_.StopFollowing(epoch);
  if (Status restored = RestoreFromJournal(); !restored.ok()) {
    // The journal cannot be read: leading from it would serve nothing, or wrong locations.
    spdlog::error("elected leader of epoch {} but cannot load the journal: {}; stepping down",
                  epoch, restored.ToString());
    standby_.StepDown();
    return;
  }
  standby_.Lead(epoch);
  links_.set_epoch(epoch);
  // The workers learn of the new leader now, not when they find the old one silent.
  size_t told = 0;
  for (const WorkerRecord& worker : registry_.List()) {
    capnp::MallocMessageBuilder message;
    message.initRoot<proto::Request>().setLeaderElected(AdvertisedAddress());
    if (links_.Send(worker.id, message).ok()) ++told;
  }
  spdlog::info("leading as epoch {} ({} ms after the election; {} workers told)", epoch,
               ToMillis(clock_.Now() - start), told);
}

std::string MasterServer::Loop::AdvertisedAddress() const {
  return options_.advertised_address.empty() ? requests_.endpoint() : options_.advertised_address;
}

void MasterServer::Loop::SendAcknowledgement(const zmq::message_t& client,
                                             capnp::MallocMessageBuilder& message,
                                             uint64_t depends_on) {
  if (!standby_.Hold(client, message, depends_on)) requests_.Send(client, message);
}

void MasterServer::Loop::Send(std::vector<StandbyReply> replies) {
  for (StandbyReply& reply : replies) {
    requests_.Send(reply.client, *reply.message, std::move(reply.frames));
  }
}

void MasterServer::Loop::CarryOut(const ShuffleEffects& effects) {
  if (journal_) Journaled(journal_->RecordShuffles(effects));
  for (const ShuffleCommand& command : effects.commands) {
    WarnIfUnsent(command.worker_id, SendShuffleCommand(links_, registry_, command));
  }
}

void MasterServer::Loop::CarryOut(const TenantEffects& effects) {
  if (journal_) {
    for (const DatasetRecord& record : effects.recorded) {
      Journaled(journal_->RecordDataset(record.dataset, record.access));
    }
    for (const auto& [tenant, quota] : effects.quotas) {
      Journaled(journal_->RecordQuota(tenant, quota));
    }
  }
  for (const DatasetRecord& record : effects.to_workers) {
    for (const WorkerRecord& worker : registry_.List()) {
      capnp::MallocMessageBuilder message;
      FillDatasetAccess(record.dataset, record.access,
                        message.initRoot<proto::Request>().initDatasetAccess());
      WarnIfUnsent(worker.id, links_.Send(worker.id, message));
    }
  }
}

Status MasterServer::Loop::WithTenantEffects(const std::function<Status(TenantEffects&)>& request) {
  TenantEffects effects;
  Status status = request(effects);
  CarryOut(effects);
  return status;
}

void MasterServer::Loop::CarryOut(const LossEffects& effects) {
  JournalRemovals(effects.removed);
  if (journal_) {
    for (const LostBlocks::Changes& changes : effects.lost) {
      Journaled(journal_->RecordLost(changes));
    }
  }
  if (effects.check_copies) {
    replication_.MarkAllForCheck();
    next_heartbeat_check_ = clock_.Now();  // plan the copies at the next turn of the loop
  }
}

}  // namespace bm
