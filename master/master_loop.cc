#include "master/master_loop.h"

#include <poll.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <utility>

#include "common/security/access_policy.h"
#include "common/security/tenant.h"
#include "common/security/zap_handler.h"
#include "master/block_reports.h"
#include "master/request_decoding.h"
#include "master/shuffle_requests.h"
#include "master/worker_commands.h"
#include "master/worker_requests.h"

namespace bm {
namespace {

// Block copies (re-replication, drains) in flight at once, and how long one may take before
// it is planned again.
constexpr size_t kMaxCopiesInFlight = 16;
constexpr Duration kCopyTimeout = std::chrono::seconds(120);
constexpr Duration kMinCheckInterval = std::chrono::milliseconds(10);
constexpr Duration kMaxCheckInterval = std::chrono::seconds(1);
constexpr Duration kLeadershipCheckInterval = std::chrono::milliseconds(100);
// How long the acknowledgement of a report whose fresh put replaced copies on other workers
// waits for those workers to confirm they removed them. Below the worker's wait for the
// acknowledgement (2 s), so that the put returns after the old copies are gone whenever their
// workers answer at all.
constexpr Duration kReplaceWait = std::chrono::milliseconds(1500);

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
  leases_.Restore(snapshot.leases);
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
  rdds_.Restore(std::move(snapshot.rdds));
  spdlog::info(
      "restored from the master journal {}: {} workers (unconfirmed until they register again), "
      "{} block locations, {} RDD descriptions, {} lost blocks, {} shuffles in {} ms",
      journal_->dir(), registry_.size(), snapshot.location_count, rdds_.size(),
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
    LeaseEffects expired;
    leases_.Expire(expired);
    CarryOut(std::move(expired));
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
      .rdds = rdds_.descriptions(),
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
      if (rdds_.Forget(rdd_id) && journal_) {
        Journaled(journal_->RecordRddForgotten(rdd_id));
      }
      CarryOut(losses_.RddRemoved(rdd_id));
      StartRemove(client, request.getId(), index_.RddBlockIds(rdd_id));
      return Answer::kLater;
    }
    case proto::Request::REGISTER_RDD: {
      BM_ASSIGN_OR_RETURN(std::optional<JournaledRdd> added,
                          rdds_.Register(request.getRegisterRdd()));
      if (added && journal_) Journaled(journal_->RecordRdd(*added));
      reply.setOk();
      return Answer::kNow;
    }
    case proto::Request::ACQUIRE_COMPUTE:
      return AcquireCompute(request.getAcquireCompute(), client, request.getId(), reply);
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
      BM_RETURN_IF_ERROR(leases_.Renew(request.getRenewCompute(), reply));
      return Answer::kNow;
    case proto::Request::RELEASE_COMPUTE: {
      LeaseEffects effects;
      BM_RETURN_IF_ERROR(leases_.Release(request.getReleaseCompute(), reply, effects));
      CarryOut(std::move(effects));
      return Answer::kNow;
    }
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

// ---- workers ----

Status MasterServer::Loop::HandleRegister(proto::RegisterWorker::Reader request,
                                          const std::optional<PeerIdentity>& peer,
                                          proto::Reply::Builder reply) {
  BM_ASSIGN_OR_RETURN(WorkerRegistration worker, DecodeRegistration(request));
  const std::string& id = worker.id;
  const std::string public_key = peer ? peer->public_key : std::string();
  BM_ASSIGN_OR_RETURN(zmq::socket_t link, links_.Connect(worker.address, public_key));

  const bool known = registry_.Contains(id);
  std::vector<GoneBlock> gone;  // blocks whose only copy was listed on it
  if (known) ForgetWorker(id, &gone);
  registry_.Register(id, worker.address, worker.stats, worker.labels);
  links_.Add(id, std::move(link), public_key);
  AppliedBlocks applied = ApplyRegistration(index_, id, worker.blocks);
  for (const MismatchedCopy& copy : applied.mismatched) DigestMismatch(id, copy);
  // The journal's registration record replaces the old locations in the same batch.
  if (journal_) {
    Journaled(journal_->RecordRegistration(JournaledWorker{.id = id,
                                                           .address = worker.address,
                                                           .host = worker.labels.host,
                                                           .rack = worker.labels.rack,
                                                           .public_key = public_key},
                                           applied.recorded));
  }
  JournalRemovals(applied.replaced);
  std::vector<RetiredCopy>& to_remove = applied.stale;
  to_remove.insert(to_remove.end(), applied.replaced.begin(), applied.replaced.end());
  RemoveCopies(to_remove);
  const std::vector<BlockChange>& recorded = applied.recorded;
  LeaseEffects stored;
  leases_.Stored(recorded, stored);
  CarryOut(std::move(stored));
  std::vector<BlockId> recorded_ids;
  recorded_ids.reserve(recorded.size());
  for (const BlockChange& change : recorded) recorded_ids.push_back(change.id);
  TrimExtraCopies(recorded_ids);
  CarryOut(losses_.Stored(recorded));
  CarryOut(losses_.WorkerRegistered(id, std::move(gone), recorded_ids, worker.losses,
                                    worker.started_now, worker.follow_ups));
  ShuffleEffects told;
  shuffles_.WorkerRegistered(id, worker.shuffles, told);
  CarryOut(told);
  ++counters_.workers_registered;
  counters_.RecordWorkerEvent(id, known ? "re-registered" : "registered");
  spdlog::info("worker {} {} at {} holding {} blocks ({} workers, {} blocks known)", id,
               known ? "re-registered" : "registered", worker.address, recorded.size(),
               registry_.size(), index_.block_count());
  EncodeRegistered(options_.heartbeat_timeout, standby_.epoch(), reply.initRegistered());
  return Status::Ok();
}

Status MasterServer::Loop::HandleHeartbeat(proto::Heartbeat::Reader request,
                                           proto::Reply::Builder reply) {
  capnp::Text::Reader id = request.getWorkerId();
  BM_RETURN_IF_ERROR(
      registry_.Touch(std::string_view(id.cStr(), id.size()), FromProto(request.getStats())));
  reply.setOk();
  return Status::Ok();
}

Result<MasterServer::Loop::Answer> MasterServer::Loop::HandleReportBlocks(
    proto::ReportBlocks::Reader request, const zmq::message_t& client, uint64_t request_id,
    proto::Reply::Builder reply) {
  capnp::Text::Reader id_text = request.getWorkerId();
  const std::string id(id_text.cStr(), id_text.size());
  std::vector<BlockChange> changes;
  changes.reserve(request.getUpdates().size());
  for (proto::BlockUpdate::Reader update : request.getUpdates()) {
    BM_ASSIGN_OR_RETURN(
        BlockChange change,
        DecodeBlockStatus(update.getStatus(), update.getRemoved(), update.getFresh()));
    change.lease = update.getLeaseToken();
    changes.push_back(change);
    // The block's bytes count from this report on (as stored, or not at all if refused).
    if (update.getReservation() != 0) tenants_.EndReservation(update.getReservation(), id);
  }
  BM_ASSIGN_OR_RETURN(std::vector<WorkerLoss> losses,
                      DecodeLosses(request.getLostBlocks(), request.getLostCopies()));
  BM_RETURN_IF_ERROR(registry_.Touch(id, FromProto(request.getStats())));
  const AppliedBlocks applied = ApplyChanges(id, changes);
  const std::vector<BlockChange>& recorded = applied.recorded;
  const std::vector<RetiredCopy>& replaced = applied.replaced;
  const std::vector<BlockChange>& refused = applied.refused;
  LeaseEffects stored;
  leases_.Stored(recorded, stored);
  CarryOut(std::move(stored));
  CarryOut(losses_.Stored(recorded));
  CarryOut(losses_.FollowUpsReported(id, changes));
  // Copies landing from re-replication may meet a copy that came back meanwhile.
  std::vector<BlockId> copies;
  for (const BlockChange& change : recorded) {
    if (!change.removed && !change.fresh) copies.push_back(change.id);
  }
  TrimExtraCopies(copies);
  CarryOut(losses_.LossesReported(id, losses, applied.gone));
  if (!refused.empty()) {
    // The worker fails the puts of the refused blocks (their removal is under way). A report
    // cannot both refuse and replace: a refused change replaced nothing, and other changes'
    // replaced copies are removed without waiting, as for a report that was not fresh.
    auto list = reply.initReportRefused(static_cast<unsigned>(refused.size()));
    for (size_t i = 0; i < refused.size(); ++i) {
      list[static_cast<unsigned>(i)].setBlockId(refused[i].id.ToString());
      list[static_cast<unsigned>(i)].setVersion(refused[i].version);
    }
    if (!replaced.empty()) RemoveCopies(replaced);
    return Answer::kNow;
  }
  if (replaced.empty()) {
    reply.setOk();
    return Answer::kNow;
  }
  // A put replaced copies on other workers: the report is acknowledged (and so the put
  // answered) once they confirm the old copies are gone, so that no reader who knows where
  // the old copies were can read one after the put returned (PROTOCOL.md).
  const uint64_t ticket = parked_.Park(client, request_id);
  RemovalCoordinator::Started started = removals_.AwaitRemoval(
      ticket, replaced, std::min<Duration>(kReplaceWait, options_.remove_timeout));
  if (started.reply) AnswerRemoval(*started.reply);
  SendRemovals(started.commands);
  return Answer::kLater;
}

AppliedBlocks MasterServer::Loop::ApplyChanges(const std::string& worker_id,
                                               const std::vector<BlockChange>& changes) {
  AppliedBlocks applied = ApplyReport(
      index_, worker_id, changes,
      [this](const BlockId& block, uint64_t lease) { return leases_.Holds(block, lease); });
  for (const MismatchedCopy& copy : applied.mismatched) DigestMismatch(worker_id, copy);
  if (journal_ && !applied.journaled.empty()) {
    Journaled(journal_->RecordChanges(worker_id, applied.journaled));
  }
  JournalRemovals(applied.replaced);
  RemoveCopies(applied.stale);
  return applied;
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

void MasterServer::Loop::TrimExtraCopies(const std::vector<BlockId>& ids) {
  std::vector<RetiredCopy> extra = replication_.TrimExtraCopies(index_, registry_, ids);
  if (extra.empty()) return;
  JournalRemovals(extra);
  RemoveCopies(extra);
}

size_t MasterServer::Loop::DropWorker(const std::string& worker_id, std::vector<GoneBlock>* gone) {
  const size_t locations = ForgetWorker(worker_id, gone);
  // Its shuffle partitions move to the live workers (a re-registering worker keeps its own).
  ShuffleEffects moved;
  shuffles_.WorkerLost(worker_id, ShuffleCandidates(registry_), moved);
  CarryOut(moved);
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

size_t MasterServer::Loop::ForgetWorker(const std::string& worker_id,
                                        std::vector<GoneBlock>* gone) {
  const size_t locations = index_.RemoveWorker(worker_id, gone);
  losses_.WorkerForgotten(worker_id);
  replication_.WorkerGone(worker_id, locations);
  links_.Remove(worker_id);
  registry_.Remove(worker_id);
  AnswerRemovals(removals_.WorkerGone(worker_id));
  return locations;
}

void MasterServer::Loop::HandleWorkerReply(const std::string& worker_id, IncomingMessage& message) {
  registry_.HeardFrom(worker_id);
  Result<WorkerReply> decoded = DecodeWorkerReply(message);
  if (!decoded.ok()) {
    spdlog::warn("bad reply from worker {}: {}", worker_id, decoded.status().ToString());
    return;
  }
  WorkerReply& answer = *decoded;
  if (answer.unawaited()) return;
  if (verifications_.Answered(worker_id, answer)) return;
  if (replication_.CopyAnswered(answer.id)) return;
  if (!answer.removed && answer.failure.ok()) {
    answer.failure = InvalidArgumentError("unexpected reply to removeBlocks");
  }
  RemovalCoordinator::Answered answered = removals_.WorkerAnswered(
      worker_id, answer.id, answer.removed ? Status::Ok() : answer.failure);
  // A removal of a replaced version can be answered after the worker reported the new
  // version it stores now (the answer and the report travel on different sockets): the index
  // ignores it, and so must the journal, whose record would delete the new copy's location.
  std::vector<BlockChange> journaled;
  for (const BlockChange& removal : answered.removed) {
    if (!index_.Apply(worker_id, removal).removal_ignored) journaled.push_back(removal);
  }
  if (journal_ && !journaled.empty()) Journaled(journal_->RecordChanges(worker_id, journaled));
  if (answered.reply) AnswerRemoval(*answered.reply);
}

void MasterServer::Loop::CheckHeartbeats() {
  const TimePoint now = clock_.Now();
  if (now < next_heartbeat_check_) return;
  next_heartbeat_check_ = now + check_interval_;
  if (!registry_.Expired(options_.heartbeat_timeout).empty()) {
    // Before calling anyone dead: take what is already waiting (heartbeats queued behind other
    // messages, replies on the links), bounded so a flood cannot hold the loop here.
    constexpr int kPasses = 16;
    links_.UnsettleAll();
    requests_.Unsettle();
    for (int pass = 0; pass < kPasses && (links_.unsettled() || requests_.unsettled()); ++pass) {
      links_.DrainUnsettled(handle_reply_);
      requests_.Drain([this](const zmq::message_t& client) { HandleClientMessage(client); });
    }
  }
  for (const std::string& id : registry_.Expired(options_.heartbeat_timeout)) {
    const size_t blocks_before = index_.block_count();
    std::vector<GoneBlock> gone;
    const size_t locations = DropWorker(id, &gone);
    ++counters_.workers_dropped;
    counters_.blocks_lost += blocks_before - index_.block_count();
    counters_.RecordWorkerEvent(id, "dropped (no heartbeat)");
    spdlog::warn("dropped worker {}: no heartbeat for over {} ms; {} block locations lost", id,
                 ToMillis(options_.heartbeat_timeout), locations);
    const std::string detail =
        "no heartbeat for over " + std::to_string(ToMillis(options_.heartbeat_timeout)) + " ms";
    CarryOut(losses_.WorkerDropped(id, std::move(gone), detail));
  }
  MaintainReplication();
}

Status MasterServer::Loop::HandleDecommission(proto::DecommissionWorker::Reader request,
                                              proto::Reply::Builder reply) {
  capnp::Text::Reader id_text = request.getWorkerId();
  const std::string id(id_text.cStr(), id_text.size());
  BM_RETURN_IF_ERROR(registry_.Decommission(id));
  WarnIfUnsent(id, SendDecommission(links_, id));
  spdlog::info("decommissioning worker {}: copying its {} blocks elsewhere", id,
               index_.LocationCount(id));
  replication_.MarkAllForCheck();
  next_heartbeat_check_ = clock_.Now();  // start copying at the next turn of the loop
  reply.setOk();
  return Status::Ok();
}

void MasterServer::Loop::MaintainReplication() {
  for (const ReplicationDriver::Copy& copy : replication_.Plan(index_, registry_)) {
    std::vector<std::string> target_keys;
    target_keys.reserve(copy.command.targets.size());
    for (const WorkerRecord& target : copy.command.targets) {
      target_keys.push_back(links_.Key(target.id));
    }
    ++counters_.copies_started;
    WarnIfUnsent(copy.command.source,
                 SendReplicateBlock(links_, copy.request_id, copy.command, target_keys));
  }
  for (const std::string& id : replication_.DrainedWorkers(index_, registry_)) {
    WarnIfUnsent(id, SendShutdown(links_, id));
    const size_t locations = DropWorker(id);
    counters_.RecordWorkerEvent(id, "decommissioned");
    spdlog::info("decommissioned worker {}: every one of its {} blocks has its copies elsewhere",
                 id, locations);
  }
}

void MasterServer::Loop::DigestMismatch(const std::string& worker_id, const MismatchedCopy& copy) {
  const BlockChange& change = copy.change;
  ++counters_.digest_mismatch_reports;
  spdlog::warn(
      "worker {} reported {} (version {:016x}) with digest {:016x}, but the version's "
      "digest is {:016x}: not listing that copy; asking the worker to verify it",
      worker_id, change.id.ToString(), change.version, change.digest, copy.expected_digest);
  const uint64_t request_id = verifications_.Start(worker_id, change.id);
  WarnIfUnsent(worker_id, SendVerifyBlock(links_, worker_id, request_id, change.id));
  // The index dropped any location the worker had for the block: so does the journal.
  JournalRemovals({RetiredCopy{worker_id, change.id, change.version}});
}

void MasterServer::Loop::WarnIfUnsent(const std::string& worker_id, const Status& sent) {
  if (sent.ok() || sent.code() == StatusCode::kNotFound) return;
  spdlog::warn("cannot send to worker {}: {}", worker_id, sent.ToString());
}

// ---- removals ----

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
  const uint64_t ticket = parked_.Park(client, request_id);
  RemovalCoordinator::Started started =
      removals_.RemoveBlocks(ticket, ids.size(), index_.Holders(ids), options_.remove_timeout);
  for (const RemovalCoordinator::Command& command : started.commands) {
    BM_CHECK(links_.Contains(command.worker_id));  // every location is on a linked worker
  }
  if (started.reply) AnswerRemoval(*started.reply);
  SendRemovals(started.commands);
}

void MasterServer::Loop::RemoveCopies(const std::vector<RetiredCopy>& copies) {
  // A dropped worker removes its copies when it registers again.
  SendRemovals(removals_.RemoveCopies(copies));
}

void MasterServer::Loop::SendRemovals(const std::vector<RemovalCoordinator::Command>& commands) {
  for (const RemovalCoordinator::Command& command : commands) {
    Status sent = SendRemoveBlocks(links_, command);
    if (sent.ok()) continue;
    if (sent.code() != StatusCode::kNotFound) {
      spdlog::warn("cannot send removeBlocks to worker {}: {}", command.worker_id, sent.ToString());
    }
    if (std::optional<RemovalCoordinator::Reply> reply = removals_.Unsent(command.request_id)) {
      AnswerRemoval(*reply);
    }
  }
}

void MasterServer::Loop::AnswerRemoval(const RemovalCoordinator::Reply& answer) {
  capnp::MallocMessageBuilder message;
  proto::Reply::Builder reply = message.initRoot<proto::Reply>();
  switch (answer.kind) {
    case RemovalCoordinator::Reply::Kind::kRemoved:
      reply.setRemoved(answer.removed);
      break;
    case RemovalCoordinator::Reply::Kind::kAcknowledged:
      reply.setOk();
      break;
  }
  AnswerParked(answer.caller, message);
}

void MasterServer::Loop::AnswerRemovals(const std::vector<RemovalCoordinator::Reply>& replies) {
  for (const RemovalCoordinator::Reply& reply : replies) AnswerRemoval(reply);
}

Result<MasterServer::Loop::Answer> MasterServer::Loop::AcquireCompute(
    proto::AcquireCompute::Reader request, const zmq::message_t& client, uint64_t request_id,
    proto::Reply::Builder reply) {
  // Parked in case it waits; taken back when it is answered now or refused.
  const uint64_t waiter = parked_.Park(client, request_id);
  LeaseEffects effects;
  Result<ComputeLeaseService::Acquired> acquired = leases_.Acquire(request, waiter, reply, effects);
  if (!acquired.ok() || *acquired != ComputeLeaseService::Acquired::kWaiting) {
    parked_.Take(waiter);
  }
  CarryOut(std::move(effects));
  BM_RETURN_IF_ERROR(acquired.status());
  switch (*acquired) {
    case ComputeLeaseService::Acquired::kStored:
      return Answer::kNow;
    case ComputeLeaseService::Acquired::kGranted:
      ++counters_.lease_grants;
      return Answer::kNow;
    case ComputeLeaseService::Acquired::kWaiting:
      // Answered by the effects of a store, a release, or the leases' expiry.
      ++counters_.lease_waits;
      return Answer::kLater;
  }
  return Answer::kLater;
}

void MasterServer::Loop::CarryOut(LeaseEffects effects) {
  if (journal_ && effects.journal_changed()) {
    Journaled(journal_->RecordLeases(effects.held, effects.ended));
  }
  for (const ComputeLeases::Answer& answer : effects.answers) {
    if (answer.kind == ComputeLeases::Answer::Kind::kGranted) ++counters_.lease_grants;
    capnp::MallocMessageBuilder message;
    leases_.Encode(answer, message.initRoot<proto::Reply>().initCompute());
    AnswerParked(answer.waiter, message);
  }
}

}  // namespace bm
