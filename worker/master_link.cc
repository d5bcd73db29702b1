#include "worker/master_link.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>

#include "common/core/protocol.h"
#include "common/net/handshake_refusal.h"
#include "common/net/socket_drain.h"
#include "worker/wire.h"

namespace bm {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kMinHeartbeatInterval{10};
constexpr milliseconds kMaxHeartbeatInterval{60'000};

long long Millis(Duration d) { return std::chrono::duration_cast<milliseconds>(d).count(); }

// WorkerServer::Create checked the list; a list that does not parse is kept as one address
// (whose connection fails, saying why).
MasterAddresses ParseMasters(const std::string& list) {
  Result<MasterAddresses> parsed = MasterAddresses::Parse(list);
  if (parsed.ok()) return std::move(parsed).value();
  return *MasterAddresses::Parse("unparsable-master-address");
}

}  // namespace

MasterLink::MasterLink(zmq::context_t& context, MasterLinkOptions options, BlockManager& blocks,
                       const Clock& clock)
    : context_(context),
      options_(std::move(options)),
      masters_(ParseMasters(options_.master_address)),
      blocks_(blocks),
      clock_(clock),
      backoff_(options_.backoff_initial) {
  ResetSocket();
  next_attempt_ = clock_.Now();
}

MasterLink::~MasterLink() = default;

const char* MasterLink::KindName(RequestKind kind) {
  switch (kind) {
    case RequestKind::kRegister:
      return "registerWorker";
    case RequestKind::kHeartbeat:
      return "heartbeat";
    case RequestKind::kReport:
      return "reportBlocks";
    case RequestKind::kAccess:
      return "checkAccess";
  }
  return "request";
}

Status MasterLink::AskAccess(uint64_t ask, const AccessQuestion& question) {
  if (state_ != State::kRegistered) {
    return UnavailableError("worker " + options_.worker_id +
                            " is not registered with a master, which decides who may use " +
                            question.dataset + "; retry shortly");
  }
  const bool sent = SendRequest(RequestKind::kAccess, 0, [&](proto::Request::Builder request) {
    proto::CheckAccess::Builder check = request.initCheckAccess();
    check.setDataset(question.dataset);
    check.setTenant(question.tenant);
    check.setClaim(question.claim);
    check.setReserveBytes(question.reserve_bytes);
    check.setLevel(ToProto(question.level));
    check.setBlockId(question.block);
    check.setCopies(question.copies);
    check.setVersion(question.version);
  });
  if (!sent) {
    return UnavailableError("lost master " + masters_.current() + " asking about " +
                            question.dataset + "; retry shortly");
  }
  outstanding_.rbegin()->second.ask = ask;  // the request SendRequest just recorded
  return Status::Ok();
}

void MasterLink::FailAccessAsks(const std::string& why) {
  for (const auto& [id, request] : outstanding_) {
    if (request.kind != RequestKind::kAccess) continue;
    access_answers_.push_back(
        {request.ask,
         UnavailableError("no answer from the master about access: " + why + "; retry shortly")});
  }
}

void MasterLink::ResetSocket() {
  monitor_.reset();  // before the socket it watches
  // Kept until the drain that may be reading it returns (OnReadable).
  retired_socket_ = std::move(socket_);
  socket_ = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
  // WorkerServer checked the keys when it started: a failure here is a bug.
  BM_CHECK(ConfigureClientSocket(*socket_, options_.security, masters_.current()).ok());
  // Sends never wait: a full queue means the master is not taking messages, which the loss
  // handling deals with.
  socket_->set(zmq::sockopt::sndtimeo, 0);
  // The handshake's outcome: a refused key is otherwise only "peer not ready" for ever.
  static std::atomic<uint64_t> next_monitor{1};
  Result<std::unique_ptr<PeerMonitor>> monitor = PeerMonitor::Create(
      context_, *socket_, "master-link-" + std::to_string(next_monitor.fetch_add(1)),
      ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
          ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
  if (monitor.ok()) monitor_ = std::move(monitor).value();
  monitor_unsettled_ = true;
  socket_->connect(masters_.current());
  unsettled_ = true;
}

void MasterLink::CollectLost() {
  for (LostBlock& block : blocks_.TakeLost()) {
    lost_.push_back(QueuedLoss{std::move(block), last_seq_});
  }
}

template <typename Request>
void MasterLink::FillLost(Request&& request) {
  constexpr size_t kMaxDetailBytes = 512;
  lost_in_flight_ = std::min(lost_.size(), options_.max_updates_per_report);
  // Both lists: a master from before causes were sent reads only the names.
  auto names = request.initLostBlocks(static_cast<unsigned>(lost_in_flight_));
  auto copies = request.initLostCopies(static_cast<unsigned>(lost_in_flight_));
  for (size_t i = 0; i < lost_in_flight_; ++i) {
    const LostBlock& block = lost_[i].block;
    const std::string id = block.id.ToString();
    const unsigned at = static_cast<unsigned>(i);
    names.set(at, id);
    copies[at].setBlockId(id);
    copies[at].setCause(ToProto(block.cause));
    copies[at].setDetail(block.reason.substr(0, kMaxDetailBytes));
    copies[at].setVersion(block.version);
  }
}

void MasterLink::LostAcknowledged() {
  lost_.erase(lost_.begin(), lost_.begin() + static_cast<std::ptrdiff_t>(lost_in_flight_));
  lost_in_flight_ = 0;
}

uint64_t MasterLink::CollectChanges() {
  CollectLost();
  for (BlockStatusChange& change : blocks_.TakeChanges()) {
    queue_.push_back(QueuedChange{++last_seq_, std::move(change)});
  }
  MaybeSendReport();
  return last_seq_;
}

template <typename Fill>
bool MasterLink::SendRequest(RequestKind kind, uint64_t covers_seq, Fill&& fill) {
  capnp::MallocMessageBuilder builder;
  proto::Request::Builder request = builder.initRoot<proto::Request>();
  const uint64_t id = next_request_id_++;
  request.setId(id);
  fill(request);
  unsettled_ = true;
  Status sent = SendMessage(*socket_, nullptr, builder);
  if (!sent.ok()) {
    MasterLost(std::string("cannot send ") + KindName(kind) + ": " + sent.message());
    return false;
  }
  outstanding_[id] = Outstanding{kind, clock_.Now(), covers_seq};
  return true;
}

void MasterLink::SendRegister() {
  CollectLost();
  for (BlockStatusChange& change : blocks_.TakeChanges()) {
    queue_.push_back(QueuedChange{++last_seq_, std::move(change)});
  }
  const uint64_t covers = last_seq_;
  // Puts committed here that the master has not acknowledged yet stay fresh in the full report:
  // the master must still let them replace other versions (a put may have been answered
  // without the master's acknowledgement when the master was away).
  std::map<BlockId, uint64_t> unacknowledged_puts;
  for (const QueuedChange& queued : queue_) {
    if (queued.change.fresh && !queued.change.removed) {
      unacknowledged_puts[queued.change.status.id] = queued.change.status.version;
    }
  }
  std::vector<BlockStatus> all = blocks_.List();
  auto is_fresh = [&](const BlockStatus& status) {
    auto put = unacknowledged_puts.find(status.id);
    return put != unacknowledged_puts.end() && put->second == status.version;
  };
  const WorkerStats stats = blocks_.Stats();
  // The full report goes out in bounded pieces so its header stays under the protocol's limit
  // however many blocks the worker holds: the registration carries the first batch, the rest
  // is queued as ordinary changes right behind it (ahead of anything that happens later).
  const size_t in_registration = std::min(all.size(), options_.max_updates_per_report);
  queue_.clear();  // everything queued so far is superseded by the full report
  for (size_t i = in_registration; i < all.size(); ++i) {
    queue_.push_back(
        QueuedChange{++last_seq_, BlockStatusChange{all[i], /*removed=*/false, is_fresh(all[i])}});
  }
  state_ = State::kRegistering;
  spdlog::debug("registering with master {} as {} ({} blocks, {} in follow-up reports)",
                masters_.current(), options_.worker_id, all.size(), all.size() - in_registration);
  SendRequest(RequestKind::kRegister, covers, [&](proto::Request::Builder request) {
    proto::RegisterWorker::Builder reg = request.initRegisterWorker();
    reg.setWorkerId(options_.worker_id);
    reg.setAddress(options_.advertised_address);
    reg.setHost(options_.host);
    reg.setRack(options_.rack);
    ToProto(stats, reg.initStats());
    auto list = reg.initBlocks(static_cast<unsigned>(in_registration));
    for (size_t i = 0; i < in_registration; ++i) FillBlockStatus(all[i], list[i]);
    auto fresh = reg.initFreshBlocks(
        static_cast<unsigned>(std::count_if(all.begin(), all.begin() + in_registration, is_fresh)));
    unsigned next_fresh = 0;
    for (size_t i = 0; i < in_registration; ++i) {
      if (is_fresh(all[i])) fresh.set(next_fresh++, all[i].id.ToString());
    }
    FillLost(reg);
    reg.setStartedNow(!registered_before_);
    reg.setFollowUpBlocks(all.size() - in_registration);
    if (options_.held_shuffles) {
      const std::vector<uint64_t> shuffles = options_.held_shuffles();
      auto held = reg.initShuffles(static_cast<unsigned>(shuffles.size()));
      for (size_t i = 0; i < shuffles.size(); ++i) held.set(static_cast<unsigned>(i), shuffles[i]);
    }
  });
}

void MasterLink::SendHeartbeat() {
  const WorkerStats stats = blocks_.Stats();
  SendRequest(RequestKind::kHeartbeat, 0, [&](proto::Request::Builder request) {
    proto::Heartbeat::Builder heartbeat = request.initHeartbeat();
    heartbeat.setWorkerId(options_.worker_id);
    ToProto(stats, heartbeat.initStats());
  });
}

void MasterLink::MaybeSendReport() {
  if (state_ != State::kRegistered || report_in_flight_ || (queue_.empty() && lost_.empty())) {
    return;
  }
  size_t n = std::min(queue_.size(), options_.max_updates_per_report);
  if (lost_.size() > options_.max_updates_per_report) {
    // The losses that wait for the next report hold back the changes queued after them.
    const uint64_t waiting_after = lost_[options_.max_updates_per_report].after_seq;
    while (n > 0 && queue_[n - 1].seq > waiting_after) --n;
  }
  const uint64_t covers = n > 0 ? queue_[n - 1].seq : acked_seq_;
  const WorkerStats stats = blocks_.Stats();
  bool sent = SendRequest(RequestKind::kReport, covers, [&](proto::Request::Builder request) {
    proto::ReportBlocks::Builder report = request.initReportBlocks();
    report.setWorkerId(options_.worker_id);
    auto updates = report.initUpdates(static_cast<unsigned>(n));
    for (size_t i = 0; i < n; ++i) {
      FillBlockStatus(queue_[i].change.status, updates[i].initStatus());
      updates[i].setRemoved(queue_[i].change.removed);
      updates[i].setFresh(queue_[i].change.fresh);
      updates[i].setLeaseToken(queue_[i].change.lease);
      updates[i].setReservation(queue_[i].change.reservation);
    }
    ToProto(stats, report.initStats());
    FillLost(report);
  });
  if (sent) report_in_flight_ = true;
}

void MasterLink::OnReadable() {
  retired_socket_.reset();
  zmq::socket_t& socket = *socket_;
  const Drained drained = DrainSocket(socket, 256, [&] {
    // A reply that sent the link to another master replaced the socket: the rest of this one
    // is stale.
    if (socket_.get() != &socket) return false;
    Result<IncomingMessage> received = ReceiveMessage(socket, /*has_routing_id=*/false);
    if (!received.ok()) {
      spdlog::warn("bad message from master {}: {}", masters_.current(),
                   received.status().ToString());
      return received.status().code() != StatusCode::kUnavailable;
    }
    HandleReply(received.value());
    return true;
  });
  if (socket_.get() != &socket) {
    unsettled_ = true;  // the new socket
  } else if (drained != Drained::kStopped) {
    unsettled_ = drained == Drained::kMoreWaiting;
  }
}

void MasterLink::HandleReply(IncomingMessage& message) {
  // Everything the reply says, read under the guard since decoding is lazy.
  uint64_t id = 0;
  proto::Reply::Which which = proto::Reply::OK;
  Status error;
  uint32_t heartbeat_interval_ms = 0;
  uint64_t epoch = 0;
  std::string leader_hint;
  std::optional<AccessGrant> access_grant;
  Status read = ReadGuarded([&]() -> Status {
    proto::Reply::Reader reply = message.reply();
    id = reply.getId();
    which = reply.which();
    if (reply.isError()) error = StatusFromError(reply.getError());
    if (reply.isRegistered()) {
      heartbeat_interval_ms = reply.getRegistered().getHeartbeatIntervalMs();
      epoch = reply.getRegistered().getEpoch();
    }
    if (reply.isNotLeader()) leader_hint = reply.getNotLeader().getLeaderAddress();
    if (reply.isAccess()) {
      proto::DatasetAccessRecord::Reader record = reply.getAccess().getAccess();
      AccessGrant grant;
      grant.access.owner = record.getOwner();
      for (capnp::Text::Reader reader : record.getReaders()) {
        grant.access.readers.emplace_back(reader.cStr(), reader.size());
      }
      std::sort(grant.access.readers.begin(), grant.access.readers.end());
      grant.access.generation = record.getGeneration();
      grant.access.owner_memory_quota = record.getOwnerMemoryQuota();
      grant.reservation = reply.getAccess().getReservation();
      access_grant = std::move(grant);
    }
    if (reply.isReportRefused()) {
      for (proto::BlockStatus::Reader block : reply.getReportRefused()) {
        BM_ASSIGN_OR_RETURN(BlockId refused, ParseWireBlockId(block.getBlockId()));
        refused_.emplace_back(refused, block.getVersion());
      }
    }
    return Status::Ok();
  });
  if (!read.ok()) {
    spdlog::warn("unreadable reply from master {}: {}", masters_.current(), read.ToString());
    return;
  }
  auto it = outstanding_.find(id);
  if (it == outstanding_.end()) {
    spdlog::debug("dropping stale reply {} from master", id);
    return;
  }
  const Outstanding request = it->second;
  outstanding_.erase(it);
  if (request.kind == RequestKind::kAccess) {
    if (access_grant) {
      access_answers_.push_back({request.ask, std::move(*access_grant)});
    } else if (which == proto::Reply::ERROR) {
      access_answers_.push_back({request.ask, error});
    } else {
      access_answers_.push_back(
          {request.ask, UnavailableError("master " + masters_.current() +
                                         " did not answer checkAccess; retry shortly")});
    }
    if (which == proto::Reply::NOT_LEADER) FollowLeader(leader_hint);
    return;
  }
  if (which == proto::Reply::NOT_LEADER) {
    FollowLeader(leader_hint);
    return;
  }
  if (which == proto::Reply::REGISTERED) leader_epoch_ = epoch;

  const bool unknown_worker =
      which == proto::Reply::ERROR && error.code() == StatusCode::kUnknownWorker;
  switch (request.kind) {
    case RequestKind::kRegister:
      if (which == proto::Reply::REGISTERED) {
        OnRegistered(request, heartbeat_interval_ms);
      } else {
        spdlog::warn("master {} refused registration: {}", masters_.current(),
                     which == proto::Reply::ERROR ? error.ToString() : "unexpected reply");
        RetryRegistrationLater();
      }
      return;
    case RequestKind::kHeartbeat:
    case RequestKind::kReport:
      if (request.kind == RequestKind::kReport) report_in_flight_ = false;
      if (unknown_worker) {
        spdlog::info("master {} does not know worker {}: registering again", masters_.current(),
                     options_.worker_id);
        FailAccessAsks("the master does not know this worker");
        outstanding_.clear();
        report_in_flight_ = false;
        SendRegister();
        return;
      }
      if (which == proto::Reply::OK || which == proto::Reply::REPORT_REFUSED) {
        if (request.kind == RequestKind::kReport) {
          LostAcknowledged();
          Acknowledge(request.covers_seq);
          MaybeSendReport();
        }
        return;
      }
      if (request.kind == RequestKind::kHeartbeat) {
        spdlog::warn("master {} rejected a heartbeat: {}", masters_.current(),
                     which == proto::Reply::ERROR ? error.ToString() : "unexpected reply");
        return;
      }
      // A rejected report cannot be fixed by resending it; a full report supersedes it.
      spdlog::warn("master {} rejected a block report: {}; registering again", masters_.current(),
                   which == proto::Reply::ERROR ? error.ToString() : "unexpected reply");
      RetryRegistrationLater();
      return;
    case RequestKind::kAccess:
      return;  // answered above
  }
}

void MasterLink::OnRegistered(const Outstanding& request, uint32_t heartbeat_interval_ms) {
  heartbeat_interval_ = std::clamp<Duration>(milliseconds(heartbeat_interval_ms),
                                             kMinHeartbeatInterval, kMaxHeartbeatInterval);
  state_ = State::kRegistered;
  ++registrations_;
  registered_before_ = true;
  LostAcknowledged();
  backoff_ = options_.backoff_initial;
  next_heartbeat_ = clock_.Now() + heartbeat_interval_;
  Acknowledge(request.covers_seq);
  spdlog::info("registered with master {} as {} (address {}, heartbeat every {} ms)",
               masters_.current(), options_.worker_id, options_.advertised_address,
               Millis(heartbeat_interval_));
  MaybeSendReport();
}

void MasterLink::Acknowledge(uint64_t covers_seq) {
  while (!queue_.empty() && queue_.front().seq <= covers_seq) queue_.pop_front();
  acked_seq_ = std::max(acked_seq_, covers_seq);
}

void MasterLink::LeaderElected(const std::string& address, uint64_t epoch) {
  if (epoch <= leader_epoch_ || address.empty()) return;
  spdlog::info("master {} was elected leader (epoch {}): registering with it", address, epoch);
  leader_epoch_ = epoch;  // the fence is raised already; a reply may confirm it
  masters_.FollowHint(address);
  ResetSocket();
  RetryRegistrationLater();
  next_attempt_ = clock_.Now();
  backoff_ = options_.backoff_initial;
}

void MasterLink::FollowLeader(const std::string& leader) {
  const std::string standby = masters_.current();
  if (masters_.FollowHint(leader)) {
    spdlog::info("master {} is a standby; registering with the leader {}", standby, leader);
    ResetSocket();
    RetryRegistrationLater();
    next_attempt_ = clock_.Now();  // at once: the leader is known
    backoff_ = options_.backoff_initial;
    return;
  }
  // It knows no leader (an election is on): try the others, after the back-off.
  spdlog::info("master {} is a standby and knows no leader yet; retrying in {} ms", standby,
               Millis(backoff_));
  NextMaster();
  ResetSocket();
  RetryRegistrationLater();
}

void MasterLink::MasterLost(const std::string& why) {
  if (state_ == State::kRegistered) {
    spdlog::warn("lost master {}: {}; registering again", masters_.current(), why);
  } else {
    spdlog::info("master {} not reachable: {}; retrying in {} ms", masters_.current(), why,
                 Millis(backoff_));
  }
  NextMaster();
  ResetSocket();
  RetryRegistrationLater();
}

void MasterLink::NextMaster() {
  // ZooKeeper's word on who leads beats the next in the list; with several masters and no
  // word, the next may lead now.
  if (options_.zookeeper_leader) {
    if (std::optional<std::string> leader = options_.zookeeper_leader();
        leader && masters_.FollowHint(*leader)) {
      return;
    }
  }
  masters_.Rotate();
}

void MasterLink::RetryRegistrationLater() {
  lost_in_flight_ = 0;  // not acknowledged: they go again with the registration
  FailAccessAsks("the master was lost");
  outstanding_.clear();
  report_in_flight_ = false;
  state_ = State::kUnregistered;
  next_attempt_ = clock_.Now() + backoff_;
  backoff_ = std::min(backoff_ * 2, options_.backoff_max);
}

Duration MasterLink::ReplyTimeout(RequestKind kind) const {
  if (kind == RequestKind::kRegister) return options_.request_timeout;
  return std::max(options_.request_timeout, heartbeat_interval_ * options_.missed_heartbeats);
}

int MasterLink::monitor_fd() const {
  return monitor_ ? monitor_->socket().get(zmq::sockopt::fd) : -1;
}

void MasterLink::OnMonitorReadable() {
  monitor_unsettled_ = false;  // TakeEvents() drains the monitor's socket
  if (!monitor_) return;
  for (const PeerMonitor::Event& event : monitor_->TakeEvents()) {
    if (event.kind == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      if (!handshake_refusal_.ok()) {
        spdlog::info("master {} accepts this worker's key again", masters_.current());
      }
      handshake_refusal_ = Status::Ok();
      continue;
    }
    std::optional<Status> refused =
        HandshakeRefusal(event, masters_.current(), options_.security.own.enabled());
    if (!refused) continue;
    // Once per refusal, not at every retry: the operator has to act (add the key to the
    // master's allow folder), and a log line a second would bury everything else.
    if (refused->ToString() != handshake_refusal_.ToString()) {
      spdlog::error("{}: worker {} with key {} cannot register", refused->message(),
                    options_.worker_id,
                    options_.security.own.public_key.empty() ? std::string("(none)")
                                                             : options_.security.own.public_key);
    }
    handshake_refusal_ = *refused;
  }
}

void MasterLink::OnTimer() {
  const TimePoint now = clock_.Now();
  for (const auto& [id, request] : outstanding_) {
    if (now - request.sent_at >= ReplyTimeout(request.kind)) {
      MasterLost(std::string("no reply to ") + KindName(request.kind) + " within " +
                 std::to_string(Millis(ReplyTimeout(request.kind))) + " ms");
      break;  // MasterLost cleared outstanding_
    }
  }
  switch (state_) {
    case State::kUnregistered:
      if (now >= next_attempt_) SendRegister();
      break;
    case State::kRegistering:
      break;
    case State::kRegistered:
      HeartbeatIfDue();
      MaybeSendReport();
      break;
  }
}

void MasterLink::HeartbeatIfDue() {
  if (state_ != State::kRegistered) return;
  const TimePoint now = clock_.Now();
  if (now < next_heartbeat_) return;
  // How late it goes out: the worker's loop was busy (a burst of pieces, a long callback).
  const Duration late = now - next_heartbeat_;
  heartbeat_delays_.Observe(late);
  worst_heartbeat_delay_ = std::max(worst_heartbeat_delay_, late);
  // Even while the last one is unanswered: during a burst its answer waits unread on this side
  // (the loop reads the link after the burst), and holding this one back would leave the master
  // without a heartbeat for the whole burst. A master that answers none is caught by the reply
  // timeout, which bounds how many can be outstanding.
  SendHeartbeat();
  next_heartbeat_ = now + heartbeat_interval_;
}

TimePoint MasterLink::NextDeadline() const {
  TimePoint next = TimePoint::max();
  for (const auto& [id, request] : outstanding_) {
    next = std::min(next, request.sent_at + ReplyTimeout(request.kind));
  }
  if (state_ == State::kUnregistered) next = std::min(next, next_attempt_);
  if (state_ == State::kRegistered) next = std::min(next, next_heartbeat_);
  return next;
}

}  // namespace bm
