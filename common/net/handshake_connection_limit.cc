#include "common/net/handshake_connection_limit.h"

#include <algorithm>

namespace bm {

bool HandshakeConnectionLimit::AdmitHandshake(const std::string& public_key) {
  if (max_per_key_ == 0) return true;
  MutexLock lock(mutex_);
  KeyConnections& connections = by_key_[public_key];
  if (connections.with_request + connections.pending >= max_per_key_) return false;
  ++connections.pending;
  return true;
}

void HandshakeConnectionLimit::ApplyMonitorEvents(
    const std::function<std::vector<PeerMonitor::Event>()>& take_events) {
  // Pending connections as they stand before the events are taken: each was accepted before its
  // handshake, so its accept is among the events taken next (or applied earlier). One counted
  // after this snapshot may not be yet, so it is left alone until the next call.
  std::vector<std::pair<std::string, size_t>> pending_before;
  {
    MutexLock lock(mutex_);
    for (const auto& [key, connections] : by_key_) {
      if (connections.pending > 0) pending_before.emplace_back(key, connections.pending);
    }
  }
  const std::vector<PeerMonitor::Event> events = take_events();
  MutexLock lock(mutex_);
  for (const PeerMonitor::Event& event : events) {
    const int fd = static_cast<int>(event.value);
    if (event.kind == ZMQ_EVENT_ACCEPTED) {
      ForgetLocked(fd);  // its close was missed
      without_request_.insert(fd);
    } else if (event.kind == ZMQ_EVENT_DISCONNECTED) {
      ForgetLocked(fd);
    }
  }
  // A key's pending connections that are still open are among the connections without a
  // request; it cannot hold more of them than there are.
  for (const auto& [key, before] : pending_before) {
    if (before <= without_request_.size()) continue;
    auto found = by_key_.find(key);
    if (found == by_key_.end()) continue;
    found->second.pending -= std::min(found->second.pending, before - without_request_.size());
    EraseIfEmptyLocked(key);
  }
}

bool HandshakeConnectionLimit::Knows(int fd) const {
  MutexLock lock(mutex_);
  return by_fd_.contains(fd);
}

Status HandshakeConnectionLimit::Admit(int fd, const PeerIdentity& peer) {
  if (max_per_key_ == 0 || fd < 0) return Status::Ok();
  MutexLock lock(mutex_);
  if (auto known = by_fd_.find(fd); known != by_fd_.end()) {
    if (known->second == peer.public_key) return Status::Ok();
    ForgetLocked(fd);  // the monitor's report of the old connection was missed
  }
  KeyConnections& connections = by_key_[peer.public_key];
  if (connections.pending > 0) {
    --connections.pending;
  } else if (connections.with_request >= max_per_key_) {
    // Not counted at its handshake (it came before the limit was set up).
    ++refused_;
    const std::string why = "key '" + peer.name + "' already holds " +
                            std::to_string(connections.with_request) +
                            " connections, the most one key may have open";
    EraseIfEmptyLocked(peer.public_key);
    log_.Warn("refused a request: " + why);
    return UnavailableError(why + " (--max-connections-per-key); close some or retry later");
  }
  ++connections.with_request;
  by_fd_.emplace(fd, peer.public_key);
  without_request_.erase(fd);
  return Status::Ok();
}

uint64_t HandshakeConnectionLimit::refused() const {
  MutexLock lock(mutex_);
  return refused_;
}

size_t HandshakeConnectionLimit::CountedFor(const std::string& public_key) const {
  MutexLock lock(mutex_);
  auto found = by_key_.find(public_key);
  return found == by_key_.end() ? 0 : found->second.with_request + found->second.pending;
}

void HandshakeConnectionLimit::ForgetLocked(int fd) {
  without_request_.erase(fd);
  auto known = by_fd_.find(fd);
  if (known == by_fd_.end()) return;
  auto connections = by_key_.find(known->second);
  if (connections != by_key_.end() && connections->second.with_request > 0) {
    --connections->second.with_request;
    EraseIfEmptyLocked(known->second);
  }
  by_fd_.erase(known);
}

void HandshakeConnectionLimit::EraseIfEmptyLocked(const std::string& public_key) {
  auto found = by_key_.find(public_key);
  if (found != by_key_.end() && found->second.with_request == 0 && found->second.pending == 0) {
    by_key_.erase(found);
  }
}

}  // namespace bm
