#include "master/leader_election.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>

namespace bm {
namespace {

// A failed pass of the recipe (a lost race, a connection lost mid-way) is tried again after
// a delay, unless an event comes first; the delay doubles while passes keep failing (a
// malformed epoch znode fails every one), up to a second.
constexpr std::chrono::milliseconds kFirstRetryDelay{50};
constexpr std::chrono::milliseconds kMaxRetryDelay{1000};

// "c_<session id in hex>_": a candidate finds its own znode by it after a create whose reply
// was lost with the connection.
std::string CandidatePrefix(int64_t session_id) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "c_%016llx_", static_cast<unsigned long long>(session_id));
  return buffer;
}

}  // namespace

const char* ElectionRoleName(ElectionRole role) {
  switch (role) {
    case ElectionRole::kNoQuorum:
      return "no-quorum";
    case ElectionRole::kCandidate:
      return "candidate";
    case ElectionRole::kStandby:
      return "standby";
    case ElectionRole::kLeader:
      return "leader";
  }
  return "?";
}

Result<std::unique_ptr<LeaderElection>> LeaderElection::Start(ElectionOptions options,
                                                              std::function<void()> on_change) {
  BM_ASSIGN_OR_RETURN(ZooKeeperAddress address, ParseZooKeeperAddress(options.zookeeper));
  if (options.candidate_id.empty()) return InvalidArgumentError("the candidate needs an id");
  if (options.address.empty()) return InvalidArgumentError("the candidate needs an address");
  if (options.session_timeout.count() <= 0) {
    return InvalidArgumentError("the ZooKeeper session timeout must be positive");
  }
  std::unique_ptr<LeaderElection> election(
      new LeaderElection(std::move(options), std::move(address), std::move(on_change)));
  BM_RETURN_IF_ERROR(election->OpenSession());
  election->thread_ = std::thread([e = election.get()] { e->Run(); });
  return election;
}

LeaderElection::LeaderElection(ElectionOptions options, ZooKeeperAddress address,
                               std::function<void()> on_change)
    : options_(std::move(options)),
      address_(std::move(address)),
      on_change_(std::move(on_change)) {}

LeaderElection::~LeaderElection() { Resign(); }

void LeaderElection::Resign() {
  {
    MutexLock lock(mutex_);
    if (resigned_) return;
    resigned_ = true;
  }
  // First stop leading, then let the znodes go: never the other way round.
  Demote("resigning");
  events_.Stop();
  if (thread_.joinable()) thread_.join();
  // Closing the session deletes its candidate and leader znodes in one step on the server.
  session_.reset();
}

ElectionSnapshot LeaderElection::Current() const {
  MutexLock lock(mutex_);
  ElectionSnapshot snapshot = snapshot_;
  if (snapshot.role == ElectionRole::kLeader && Clock::now() >= lease_until_) {
    // The election thread will say so too when it wakes; this process may just have been
    // paused, and must not act as leader for even a moment longer.
    snapshot.role = ElectionRole::kNoQuorum;
    snapshot.leader_id.clear();
    snapshot.leader_address.clear();
  }
  return snapshot;
}

Status LeaderElection::OpenSession() {
  session_.reset();
  own_node_.clear();
  uint64_t serial = ++session_serial_;
  {
    MutexLock lock(mutex_);
    current_serial_ = serial;
    connected_ = false;
  }
  Result<std::unique_ptr<ZooKeeperSession>> session = ZooKeeperSession::Open(
      address_, options_.session_timeout,
      [this, serial](const ZooKeeperEvent& event) { OnEvent(serial, event); });
  if (!session.ok()) {
    spdlog::warn("leader election: {}", session.status().ToString());
    retry_at_ = Clock::now() + options_.session_timeout / 4;
    return session.status();
  }
  session_ = std::move(session).value();
  need_step_ = true;
  return Status::Ok();
}

void LeaderElection::OnEvent(uint64_t serial, const ZooKeeperEvent& event) {
  if (event.kind == ZooKeeperEvent::Kind::kSession) {
    bool lost = false;
    {
      MutexLock lock(mutex_);
      if (serial != current_serial_) return;  // a session already given up
      connected_ = event.state == ZooKeeperState::kConnected;
      lost = !connected_;
    }
    // At once, on this thread: the election thread may be blocked in a call for a while.
    if (lost)
      Demote(event.state == ZooKeeperState::kExpired ? "ZooKeeper session expired"
                                                     : "ZooKeeper connection lost");
  }
  events_.Push(event, serial);
}

void LeaderElection::Run() {
  while (!events_.stopped()) {
    Clock::time_point now = Clock::now();
    if (session_ == nullptr && now >= retry_at_) (void)OpenSession();  // logged; retried

    bool leading = false;
    Clock::time_point lease_until;
    {
      MutexLock lock(mutex_);
      leading = snapshot_.role == ElectionRole::kLeader;
      lease_until = lease_until_;
    }
    if (leading && now >= lease_until) {
      Demote("leader lease lapsed");
      need_step_ = true;
      leading = false;
    }
    if (leading && now >= next_renewal_) RenewLease();
    if (leading && options_.require_in_sync) WriteInSyncIfChanged();
    if (session_ != nullptr && need_step_ && now >= retry_at_ &&
        session_->state() == ZooKeeperState::kConnected) {
      Status status = Step();
      if (status.ok()) {
        need_step_ = false;
        retry_delay_ = kFirstRetryDelay;
      } else {
        // Lost races and connections are routine; anything else needs an operator.
        bool routine =
            status.code() == StatusCode::kAborted || status.code() == StatusCode::kUnavailable;
        spdlog::log(routine ? spdlog::level::info : spdlog::level::warn,
                    "leader election: {}; trying again in {} ms", status.ToString(),
                    retry_delay_.count());
        retry_at_ = Clock::now() + retry_delay_;
        retry_delay_ = std::min(retry_delay_ * 2, kMaxRetryDelay);
      }
    }

    {
      // Again: a Step() above may have just claimed the lead, whose first renewal is due
      // well within the second this loop may otherwise sleep.
      MutexLock lock(mutex_);
      leading = snapshot_.role == ElectionRole::kLeader;
      lease_until = lease_until_;
    }
    Clock::time_point wake = Clock::now() + std::chrono::seconds(1);
    if (need_step_ || session_ == nullptr) wake = std::min(wake, retry_at_);
    if (leading) wake = std::min({wake, next_renewal_, lease_until});
    std::optional<std::pair<ZooKeeperEvent, uint64_t>> event = events_.Next(wake);
    if (event && event->second == session_serial_) Handle(event->first);
  }
}

void LeaderElection::Handle(const ZooKeeperEvent& event) {
  if (event.kind != ZooKeeperEvent::Kind::kSession) {
    need_step_ = true;  // the predecessor went, or the leader znode changed
    return;
  }
  switch (event.state) {
    case ZooKeeperState::kConnected:
      need_step_ = true;
      retry_at_ = {};
      break;
    case ZooKeeperState::kConnecting:
      break;  // OnEvent demoted; the client reconnects by itself
    case ZooKeeperState::kExpired:
      spdlog::warn("leader election: ZooKeeper session expired; joining again with a new one");
      session_.reset();
      retry_at_ = {};
      break;
  }
}

Status LeaderElection::Step() {
  {
    MutexLock lock(mutex_);
    if (snapshot_.role == ElectionRole::kLeader && connected_) return Status::Ok();
  }
  BM_RETURN_IF_ERROR(session_->EnsurePath(kCandidatesZnode));
  if (own_node_.empty()) BM_RETURN_IF_ERROR(JoinAsCandidate());
  const std::string own_name = own_node_.substr(own_node_.rfind('/') + 1);
  // Until the predecessor read is one that is still there (it may leave as it is looked at).
  while (true) {
    BM_ASSIGN_OR_RETURN(std::vector<std::string> children, session_->Children(kCandidatesZnode));
    std::erase_if(children, [](const std::string& name) { return CandidateSequence(name) < 0; });
    std::sort(children.begin(), children.end(), [](const std::string& a, const std::string& b) {
      return CandidateSequence(a) < CandidateSequence(b);
    });
    auto own = std::find(children.begin(), children.end(), own_name);
    if (own == children.end()) {
      // Deleted under us (by hand?): join again at the back.
      Status gone = AbortedError("this candidate's znode " + own_node_ + " is gone");
      own_node_.clear();
      return gone;
    }
    if (own == children.begin()) return Claim();
    // Watch only the one just before: it is the only departure that can make this one first.
    std::string predecessor = std::string(kCandidatesZnode) + "/" + *(own - 1);
    Result<ZooKeeperNode> node = session_->Get(predecessor, /*watch=*/true);
    if (node.ok()) return FollowLeader();
    if (node.status().code() != StatusCode::kNotFound) return node.status();
  }
}

Status LeaderElection::JoinAsCandidate() {
  const std::string prefix = CandidatePrefix(session_->id().id);
  // A create whose reply was lost with the connection may have happened: look for it first.
  BM_ASSIGN_OR_RETURN(std::vector<std::string> children, session_->Children(kCandidatesZnode));
  for (const std::string& name : children) {
    if (name.starts_with(prefix)) {
      own_node_ = std::string(kCandidatesZnode) + "/" + name;
      return Status::Ok();
    }
  }
  BM_ASSIGN_OR_RETURN(
      own_node_, session_->Create(std::string(kCandidatesZnode) + "/" + prefix,
                                  EncodeCandidateRecord(options_.candidate_id, options_.address),
                                  /*ephemeral=*/true, /*sequential=*/true));
  spdlog::info("leader election: {} joined as {}", options_.candidate_id, own_node_);
  return Status::Ok();
}

Status LeaderElection::Claim() {
  Result<ZooKeeperNode> leader = session_->Get(kLeaderZnode, /*watch=*/false);
  if (!leader.ok() && leader.status().code() != StatusCode::kNotFound) return leader.status();
  const int64_t own_session = session_->id().id;
  if (leader.ok() && leader->ephemeral_owner != own_session) {
    // First in line, but the leader znode still belongs to another session (one that left
    // the line before its session ended): wait for it to go.
    return FollowLeader();
  }
  Result<ZooKeeperNode> epoch_node = session_->Get(kEpochZnode, /*watch=*/false);
  if (!epoch_node.ok() && epoch_node.status().code() != StatusCode::kNotFound) {
    return epoch_node.status();
  }
  uint64_t last_epoch = 0;
  if (epoch_node.ok()) {
    BM_ASSIGN_OR_RETURN(last_epoch, ParseEpoch(epoch_node->data));
  }
  const LeaderRecord record{options_.candidate_id, options_.address, last_epoch + 1};
  // Only a master that holds everything the last leader acknowledged may lead next.
  Result<ZooKeeperNode> in_sync_node = NotFoundError("not kept");
  if (options_.require_in_sync) in_sync_node = session_->Get(kInSyncZnode, /*watch=*/false);
  if (!in_sync_node.ok() && in_sync_node.status().code() != StatusCode::kNotFound) {
    return in_sync_node.status();
  }
  if (in_sync_node.ok()) {
    BM_ASSIGN_OR_RETURN(InSyncRecord in_sync, ParseInSyncRecord(in_sync_node->data));
    if (!in_sync.Eligible(options_.candidate_id)) {
      if (!ineligible_logged_) {
        spdlog::warn(
            "leader election: {} may not lead: it was not in sync with {}, the leader of epoch "
            "{} (in sync: {} standbys), so it may lack what that leader acknowledged; it waits "
            "for an in-sync master to lead (an operator may delete {} in ZooKeeper to let it "
            "lead anyway, accepting that loss)",
            options_.candidate_id, in_sync.leader, in_sync.epoch, in_sync.standbys.size(),
            kInSyncZnode);
        ineligible_logged_ = true;
      }
      // Step out of line, so that the next candidate gets its turn; join again at the back.
      (void)session_->Delete(own_node_, -1);
      own_node_.clear();
      Publish(ElectionRole::kCandidate, {}, {});
      return AbortedError("not in sync with the last leader: stepped to the back of the line");
    }
  }
  ineligible_logged_ = false;

  std::vector<ZooKeeperOp> ops;
  // The epoch moves from exactly what was read, or is created: a second claimer fails here.
  ZooKeeperOp epoch_op{epoch_node.ok() ? ZooKeeperOp::Kind::kSetData : ZooKeeperOp::Kind::kCreate,
                       kEpochZnode, std::to_string(record.epoch)};
  if (epoch_node.ok()) epoch_op.version = epoch_node->version;
  ops.push_back(epoch_op);
  if (leader.ok()) {
    // This session led before its connection dropped: that term is over.
    ops.push_back({ZooKeeperOp::Kind::kDelete, kLeaderZnode, "", leader->version});
  }
  ops.push_back({ZooKeeperOp::Kind::kCreate, kLeaderZnode, EncodeLeaderRecord(record), -1,
                 /*ephemeral=*/true});
  // A new epoch starts with no standby in sync: each catches up with this leader first.
  const std::string in_sync = EncodeInSyncRecord({record.epoch, options_.candidate_id, {}});
  if (!options_.require_in_sync) {
    // No list kept.
  } else if (in_sync_node.ok()) {
    ops.push_back({ZooKeeperOp::Kind::kSetData, kInSyncZnode, in_sync, in_sync_node->version});
  } else {
    ops.push_back({ZooKeeperOp::Kind::kCreate, kInSyncZnode, in_sync});
  }
  // The lease runs from before the request: the server heard from this session after that.
  const Clock::time_point sent = Clock::now();
  BM_RETURN_IF_ERROR(session_->Multi(ops));
  claimed_epoch_version_ = epoch_node.ok() ? epoch_node->version + 1 : 0;
  {
    MutexLock lock(mutex_);
    wanted_in_sync_.clear();
    snapshot_.in_sync_published.clear();
  }
  Publish(ElectionRole::kLeader, record, sent + session_->negotiated_timeout() * 2 / 3);
  next_renewal_ = sent + session_->negotiated_timeout() / 4;
  spdlog::info("leader election: {} leads in epoch {}", record.id, record.epoch);
  return Status::Ok();
}

Status LeaderElection::FollowLeader() {
  while (true) {
    Result<ZooKeeperNode> node = session_->Get(kLeaderZnode, /*watch=*/true);
    if (node.ok()) {
      Result<LeaderRecord> record = ParseLeaderRecord(node->data);
      if (!record.ok()) {
        spdlog::warn("leader election: {}", record.status().ToString());
        Publish(ElectionRole::kCandidate, {}, {});
        return Status::Ok();
      }
      Publish(ElectionRole::kStandby, *record, {});
      return Status::Ok();
    }
    if (node.status().code() != StatusCode::kNotFound) return node.status();
    // No leader yet: wait for one to be created (a read of a missing znode leaves no watch).
    BM_ASSIGN_OR_RETURN(bool exists, session_->Exists(kLeaderZnode, /*watch=*/true));
    if (!exists) {
      Publish(ElectionRole::kCandidate, {}, {});
      return Status::Ok();
    }
  }
}

void LeaderElection::RenewLease() {
  const Clock::time_point sent = Clock::now();
  next_renewal_ = sent + session_->negotiated_timeout() / 4;
  Result<ZooKeeperNode> leader = session_->Get(kLeaderZnode, /*watch=*/false);
  if (!leader.ok() && leader.status().code() != StatusCode::kNotFound) {
    return;  // the lease runs out unless a later renewal succeeds
  }
  if (!leader.ok() || leader->ephemeral_owner != session_->id().id) {
    Demote("the leader znode is no longer this master's");
    need_step_ = true;
    return;
  }
  MutexLock lock(mutex_);
  if (snapshot_.role == ElectionRole::kLeader && connected_ && current_serial_ == session_serial_) {
    lease_until_ = std::max(lease_until_, sent + session_->negotiated_timeout() * 2 / 3);
  }
}

void LeaderElection::Publish(ElectionRole role, const LeaderRecord& leader,
                             Clock::time_point lease_until) {
  ElectionSnapshot before;
  {
    MutexLock lock(mutex_);
    // A connection lost while this was being decided has demoted already: keep it so.
    if (!connected_ || current_serial_ != session_serial_ || resigned_) return;
    before = snapshot_;
    snapshot_.role = role;
    snapshot_.epoch = std::max(snapshot_.epoch, leader.epoch);
    snapshot_.leader_id = leader.id;
    snapshot_.leader_address = leader.address;
    if (role == ElectionRole::kLeader) {
      snapshot_.epoch = leader.epoch;
      ++snapshot_.elections_won;
      lease_until_ = lease_until;
    }
  }
  NotifyIfChanged(before);
}

void LeaderElection::PublishInSync(std::vector<std::string> standbys) {
  std::sort(standbys.begin(), standbys.end());
  {
    MutexLock lock(mutex_);
    if (standbys == wanted_in_sync_) return;
    wanted_in_sync_ = std::move(standbys);
  }
  ZooKeeperEvent wake_up;
  wake_up.kind = ZooKeeperEvent::Kind::kOther;
  events_.Push(std::move(wake_up), /*session_serial=*/0);
}

void LeaderElection::WriteInSyncIfChanged() {
  std::vector<std::string> wanted;
  uint64_t epoch = 0;
  {
    MutexLock lock(mutex_);
    if (wanted_in_sync_ == snapshot_.in_sync_published) return;
    wanted = wanted_in_sync_;
    epoch = snapshot_.epoch;
  }
  // Conditional on /epoch still being this claim's: a deposed leader cannot overwrite what its
  // successor wrote.
  const Status written =
      session_->Multi({{ZooKeeperOp::Kind::kCheck, kEpochZnode, "", claimed_epoch_version_},
                       {ZooKeeperOp::Kind::kSetData, kInSyncZnode,
                        EncodeInSyncRecord({epoch, options_.candidate_id, wanted}), -1}});
  if (!written.ok()) {
    spdlog::warn("leader election: cannot write the in-sync standbys: {}", written.ToString());
    if (written.code() != StatusCode::kUnavailable) {
      Demote("its epoch is no longer the latest");
      need_step_ = true;
    }
    return;
  }
  ElectionSnapshot before;
  {
    MutexLock lock(mutex_);
    before = snapshot_;
    if (snapshot_.role == ElectionRole::kLeader && snapshot_.epoch == epoch) {
      snapshot_.in_sync_published = wanted;
    }
  }
  NotifyIfChanged(before);
}

void LeaderElection::Demote(const char* why) {
  ElectionSnapshot before;
  {
    MutexLock lock(mutex_);
    before = snapshot_;
    if (snapshot_.role == ElectionRole::kLeader) {
      spdlog::warn("leader election: {} stops leading epoch {}: {}", options_.candidate_id,
                   snapshot_.epoch, why);
    }
    snapshot_.role = ElectionRole::kNoQuorum;
    snapshot_.in_sync_published.clear();
    snapshot_.leader_id.clear();
    snapshot_.leader_address.clear();
    lease_until_ = {};
  }
  NotifyIfChanged(before);
}

void LeaderElection::NotifyIfChanged(const ElectionSnapshot& before) {
  bool changed;
  {
    MutexLock lock(mutex_);
    changed = !(snapshot_ == before);
  }
  if (changed && on_change_) on_change_();
}

}  // namespace bm
