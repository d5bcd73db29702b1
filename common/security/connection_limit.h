#pragma once

// How many connections one key may hold open to a server, so that one key (a runaway client,
// a leaked key) cannot take every descriptor and starve the others.
//
// ZeroMQ names neither the key nor the connection in one place: the ZAP handler sees the key
// of a handshake but not its connection, and the socket monitor reports closed connections by
// descriptor but not their key. Every message, though, carries both (the ZAP user id and
// ZMQ_SRCFD). So the server's loop counts a connection against its key from its first
// request, and forgets it when the monitor reports its descriptor closed (PeerMonitor). A key
// at its limit is refused twice over: its requests on further connections are answered
// kUnavailable, and the ZAP handler refuses its new handshakes (ZAP status 500, which clients
// name as "refused for now") until one of its connections closes.
//
// A connection that authenticates and never sends a request is not counted here: the master
// counts from the handshake instead (HandshakeConnectionLimit). TODO(security): the workers
// too, once their server feeds it the monitor's accepted connections.

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "blockmgr/status.h"
#include "common/core/refusal_log.h"
#include "common/security/curve_keys.h"

namespace bm {

class ZapHandler;

// Not thread-safe: owned by the loop that owns the server socket. The ZAP handler is borrowed
// (may be null) and must outlive it.
class ConnectionLimit {
 public:
  // max_per_key 0: no limit.
  ConnectionLimit(size_t max_per_key, ZapHandler* zap) : max_per_key_(max_per_key), zap_(zap) {}
  ConnectionLimit(const ConnectionLimit&) = delete;
  ConnectionLimit& operator=(const ConnectionLimit&) = delete;

  // Whether a request on descriptor `fd` was admitted before (and the descriptor has not been
  // reported closed since). A server drains its monitor's closed descriptors before admitting
  // an unknown one, so that a reused descriptor is never taken for the connection that left.
  bool Knows(int fd) const { return by_fd_.contains(fd); }

  // A request from `peer` on connection `fd`: Ok when the connection is counted against its
  // key, kUnavailable when the key already holds max_per_key other connections (refused,
  // counted and logged, rate-limited).
  Status Admit(int fd, const PeerIdentity& peer);
  // The monitor reported descriptor `fd` closed.
  void Closed(int fd);

  uint64_t refused() const { return refused_; }
  size_t counted_connections() const { return by_fd_.size(); }

 private:
  struct KeyConnections {
    std::string name;
    size_t open = 0;
  };

  const size_t max_per_key_;
  ZapHandler* const zap_;
  std::unordered_map<int, std::string> by_fd_;              // descriptor -> Z85 key
  std::unordered_map<std::string, KeyConnections> by_key_;  // Z85 key -> its connections
  uint64_t refused_ = 0;
  RefusalLog log_;
};

}  // namespace bm
