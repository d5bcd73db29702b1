#include "common/zookeeper/leader_directory.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace bm {
namespace {

constexpr std::chrono::milliseconds kRetryDelay{50};

// The leader znode's record; nullopt when there is none. A malformed record counts as none.
Result<std::optional<LeaderRecord>> ReadLeaderZnode(ZooKeeperSession& session, bool watch) {
  while (true) {
    Result<ZooKeeperNode> node = session.Get(kLeaderZnode, watch);
    if (node.ok()) {
      Result<LeaderRecord> record = ParseLeaderRecord(node->data);
      if (!record.ok()) {
        spdlog::warn("leader directory: {}", record.status().ToString());
        return std::optional<LeaderRecord>();
      }
      return std::optional<LeaderRecord>(*record);
    }
    if (node.status().code() != StatusCode::kNotFound) return node.status();
    if (!watch) return std::optional<LeaderRecord>();
    // A read of a missing znode leaves no watch; an exists does, for its creation.
    BM_ASSIGN_OR_RETURN(bool exists, session.Exists(kLeaderZnode, /*watch=*/true));
    if (!exists) return std::optional<LeaderRecord>();
  }
}

// A session for one read, connected.
Result<std::unique_ptr<ZooKeeperSession>> ConnectForOneRead(const ZooKeeperAddress& address,
                                                            std::chrono::milliseconds timeout) {
  BM_ASSIGN_OR_RETURN(std::unique_ptr<ZooKeeperSession> session,
                      ZooKeeperSession::Open(address, timeout, nullptr));
  if (!session->WaitConnected(std::chrono::steady_clock::now() + timeout)) {
    return UnavailableError("ZooKeeper at '" + address.hosts + "' did not answer within " +
                            std::to_string(timeout.count()) + " ms");
  }
  return session;
}

}  // namespace

Result<std::unique_ptr<LeaderDirectory>> LeaderDirectory::Start(
    const std::string& zookeeper, std::chrono::milliseconds session_timeout,
    std::function<void()> on_change) {
  BM_ASSIGN_OR_RETURN(ZooKeeperAddress address, ParseZooKeeperAddress(zookeeper));
  std::unique_ptr<LeaderDirectory> directory(
      new LeaderDirectory(std::move(address), session_timeout, std::move(on_change)));
  BM_RETURN_IF_ERROR(directory->OpenSession());
  directory->thread_ = std::thread([d = directory.get()] { d->Run(); });
  return directory;
}

LeaderDirectory::LeaderDirectory(ZooKeeperAddress address,
                                 std::chrono::milliseconds session_timeout,
                                 std::function<void()> on_change)
    : address_(std::move(address)),
      session_timeout_(session_timeout),
      on_change_(std::move(on_change)) {}

LeaderDirectory::~LeaderDirectory() {
  events_.Stop();
  if (thread_.joinable()) thread_.join();
  session_.reset();
}

std::optional<LeaderRecord> LeaderDirectory::Current() const {
  MutexLock lock(mutex_);
  return leader_;
}

std::optional<LeaderRecord> LeaderDirectory::WaitForLeader(
    uint64_t above_epoch, std::chrono::milliseconds timeout) const {
  const Clock::time_point deadline = Clock::now() + timeout;
  MutexLock lock(mutex_);
  while (!leader_ || leader_->epoch <= above_epoch) {
    if (!lock.WaitUntil(changed_, deadline)) break;
  }
  if (leader_ && leader_->epoch > above_epoch) return leader_;
  return std::nullopt;
}

Result<LeaderRecord> LeaderDirectory::ReadOnce(const std::string& zookeeper,
                                               std::chrono::milliseconds timeout) {
  BM_ASSIGN_OR_RETURN(ZooKeeperAddress address, ParseZooKeeperAddress(zookeeper));
  BM_ASSIGN_OR_RETURN(std::unique_ptr<ZooKeeperSession> session,
                      ConnectForOneRead(address, timeout));
  BM_ASSIGN_OR_RETURN(std::optional<LeaderRecord> leader,
                      ReadLeaderZnode(*session, /*watch=*/false));
  if (!leader) return NotFoundError("no master leads the cluster at '" + zookeeper + "' now");
  return *leader;
}

Result<std::vector<CandidateRecord>> LeaderDirectory::ReadCandidates(
    const ZooKeeperAddress& address, std::chrono::milliseconds timeout) {
  BM_ASSIGN_OR_RETURN(std::unique_ptr<ZooKeeperSession> session,
                      ConnectForOneRead(address, timeout));
  Result<std::vector<std::string>> children = session->Children(kCandidatesZnode);
  if (!children.ok() && children.status().code() == StatusCode::kNotFound) {
    return std::vector<CandidateRecord>();  // no master ever stood
  }
  BM_RETURN_IF_ERROR(children.status());
  std::erase_if(*children, [](const std::string& name) { return CandidateSequence(name) < 0; });
  std::sort(children->begin(), children->end(), [](const std::string& a, const std::string& b) {
    return CandidateSequence(a) < CandidateSequence(b);
  });
  std::vector<CandidateRecord> candidates;
  for (const std::string& name : *children) {
    // Gone since the listing (its master stopped): not a candidate any more.
    Result<ZooKeeperNode> node = session->Get(std::string(kCandidatesZnode) + "/" + name, false);
    if (!node.ok() && node.status().code() == StatusCode::kNotFound) continue;
    BM_RETURN_IF_ERROR(node.status());
    Result<CandidateRecord> candidate = ParseCandidateRecord(node->data);
    if (!candidate.ok()) {
      spdlog::warn("leader directory: {}", candidate.status().ToString());
      continue;
    }
    candidates.push_back(std::move(candidate).value());
  }
  return candidates;
}

Status LeaderDirectory::OpenSession() {
  session_.reset();
  uint64_t serial = ++session_serial_;
  Result<std::unique_ptr<ZooKeeperSession>> session = ZooKeeperSession::Open(
      address_, session_timeout_,
      [this, serial](const ZooKeeperEvent& event) { events_.Push(event, serial); });
  if (!session.ok()) {
    spdlog::warn("leader directory: {}", session.status().ToString());
    retry_at_ = Clock::now() + session_timeout_ / 4;
    return session.status();
  }
  session_ = std::move(session).value();
  need_read_ = true;
  return Status::Ok();
}

void LeaderDirectory::Run() {
  while (!events_.stopped()) {
    if (session_ == nullptr && Clock::now() >= retry_at_) (void)OpenSession();  // logged
    if (session_ != nullptr && need_read_ && Clock::now() >= retry_at_ &&
        session_->state() == ZooKeeperState::kConnected) {
      Status status = ReadLeader();
      if (status.ok()) {
        need_read_ = false;
      } else {
        spdlog::debug("leader directory: {}; trying again", status.ToString());
        retry_at_ = Clock::now() + kRetryDelay;
      }
    }
    Clock::time_point wake = Clock::now() + std::chrono::seconds(1);
    if (need_read_ || session_ == nullptr) wake = std::min(wake, retry_at_);
    std::optional<std::pair<ZooKeeperEvent, uint64_t>> event = events_.Next(wake);
    if (event && event->second == session_serial_) Handle(event->first);
  }
}

void LeaderDirectory::Handle(const ZooKeeperEvent& event) {
  if (event.kind != ZooKeeperEvent::Kind::kSession) {
    need_read_ = true;
    return;
  }
  if (event.state == ZooKeeperState::kConnected) {
    // Watches set before a reconnect survive it, but a change may have been missed while an
    // older session was replaced: read again.
    need_read_ = true;
    retry_at_ = {};
  } else if (event.state == ZooKeeperState::kExpired) {
    session_.reset();
    retry_at_ = {};
  }
}

Status LeaderDirectory::ReadLeader() {
  BM_ASSIGN_OR_RETURN(std::optional<LeaderRecord> leader,
                      ReadLeaderZnode(*session_, /*watch=*/true));
  Set(std::move(leader));
  return Status::Ok();
}

void LeaderDirectory::Set(std::optional<LeaderRecord> leader) {
  {
    MutexLock lock(mutex_);
    if (leader_ == leader) return;
    leader_ = std::move(leader);
    changed_.notify_all();
  }
  if (on_change_) on_change_();
}

}  // namespace bm
