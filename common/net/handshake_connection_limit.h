#pragma once

// How many connections one key may hold open to a server, counted from the CURVE handshake, so
// that connections that authenticate and then stay silent count as much as busy ones: without
// it, any allowed key could take the server's descriptors by opening connections that never
// send a request.
//
// ZeroMQ names a connection's key in one place (the ZAP request, which has no descriptor) and
// its descriptor in others (the monitor's accepted and disconnected events, and every message's
// ZMQ_SRCFD, which also carries the key). So a connection is counted in two steps:
//   handshake: the ZAP handler asks AdmitHandshake(); the key's count grows by one "pending"
//              connection, or the handshake is refused (ZAP 500) when the key holds the most
//              connections it may. A refused handshake is never counted.
//   first request: Admit(fd, peer) moves one of the key's pending connections to descriptor fd,
//              whose close (the monitor's report) then releases it exactly.
// A connection that closes before its first request is known only by its descriptor, without
// its key. ApplyMonitorEvents() releases such pending connections by counting: every handshake
// happens after its connection was accepted (libzmq reports the accept before the engine that
// handshakes starts, on a context with one I/O thread), so the pending connections of a key
// that are still open are among the accepted connections that have made no request yet; a key
// with more pending connections than there are such connections lost the difference. This is
// exact while one key at a time has silent connections, and whenever the silent connections
// are all gone; while several keys hold silent connections, a silent close is released once it
// can be told apart, and until then its key counts it (never the other way round: a key is
// never counted below what it holds).
//
// Thread-safe: AdmitHandshake() runs on the ZAP handler's thread, everything else on the loop
// that owns the server socket and its monitor.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "blockmgr/status.h"
#include "common/core/mutex.h"
#include "common/core/refusal_log.h"
#include "common/net/peer_monitor.h"
#include "common/security/curve_keys.h"
#include "common/security/zap_handler.h"

namespace bm {

class HandshakeConnectionLimit : public ZapHandler::HandshakeGate {
 public:
  // max_per_key 0: no limit (nothing is counted).
  explicit HandshakeConnectionLimit(size_t max_per_key) : max_per_key_(max_per_key) {}
  HandshakeConnectionLimit(const HandshakeConnectionLimit&) = delete;
  HandshakeConnectionLimit& operator=(const HandshakeConnectionLimit&) = delete;

  // The ZAP handler's question: true (and counted) when `public_key` holds fewer connections
  // than it may.
  bool AdmitHandshake(const std::string& public_key) override;

  // Calls `take_events` (the monitor's ZMQ_EVENT_ACCEPTED and ZMQ_EVENT_DISCONNECTED events,
  // oldest first), applies them, then releases the pending connections that must have closed.
  void ApplyMonitorEvents(const std::function<std::vector<PeerMonitor::Event>()>& take_events);

  // Whether a request on descriptor `fd` was admitted before (and the descriptor has not been
  // reported closed since). A server applies its monitor's events before admitting an unknown
  // descriptor, so that it is known as accepted and a reused descriptor is never taken for the
  // connection that left.
  bool Knows(int fd) const;
  // A request from `peer` on connection `fd`: Ok when the connection is counted against its
  // key (from its handshake, or now), kUnavailable when it was not counted at its handshake and
  // the key already holds max_per_key other connections (refused, counted and logged,
  // rate-limited).
  Status Admit(int fd, const PeerIdentity& peer);

  uint64_t refused() const;
  // The connections `public_key` is counted for (with a request or pending).
  size_t CountedFor(const std::string& public_key) const;

 private:
  struct KeyConnections {
    size_t with_request = 0;  // by descriptor, in by_fd_
    size_t pending = 0;       // handshake admitted, no request yet
  };

  // The descriptor closed (or was found reused): forget it.
  void ForgetLocked(int fd) BM_REQUIRES(mutex_);
  void EraseIfEmptyLocked(const std::string& public_key) BM_REQUIRES(mutex_);

  const size_t max_per_key_;

  mutable Mutex mutex_;
  std::unordered_map<int, std::string> by_fd_ BM_GUARDED_BY(mutex_);  // key by fd
  std::unordered_set<int> without_request_ BM_GUARDED_BY(mutex_);     // accepted
  std::unordered_map<std::string, KeyConnections> by_key_ BM_GUARDED_BY(mutex_);
  uint64_t refused_ BM_GUARDED_BY(mutex_) = 0;

  RefusalLog log_;  // the owner's thread
};

}  // namespace bm
