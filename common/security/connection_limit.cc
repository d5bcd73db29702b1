#include "common/security/connection_limit.h"

#include "common/security/zap_handler.h"

namespace bm {

Status ConnectionLimit::Admit(int fd, const PeerIdentity& peer) {
  if (max_per_key_ == 0 || fd < 0) return Status::Ok();
  if (auto known = by_fd_.find(fd); known != by_fd_.end()) {
    if (known->second == peer.public_key) return Status::Ok();
    // The monitor's report of the old connection was missed: count the descriptor afresh.
    Closed(fd);
  }
  KeyConnections& connections = by_key_[peer.public_key];
  if (connections.open >= max_per_key_) {
    ++refused_;
    const std::string why = "key '" + peer.name + "' already holds " +
                            std::to_string(connections.open) +
                            " connections, the most one key may have open";
    log_.Warn("refused a request: " + why);
    return UnavailableError(why + " (--max-connections-per-key); close some or retry later");
  }
  connections.name = peer.name;
  ++connections.open;
  by_fd_.emplace(fd, peer.public_key);
  if (connections.open == max_per_key_ && zap_ != nullptr) {
    zap_->SetKeyAtLimit(peer.public_key, true);
  }
  return Status::Ok();
}

void ConnectionLimit::Closed(int fd) {
  auto known = by_fd_.find(fd);
  if (known == by_fd_.end()) return;
  auto connections = by_key_.find(known->second);
  if (connections != by_key_.end()) {
    if (connections->second.open == max_per_key_ && zap_ != nullptr) {
      zap_->SetKeyAtLimit(known->second, false);
    }
    if (--connections->second.open == 0) by_key_.erase(connections);
  }
  by_fd_.erase(known);
}

}  // namespace bm
