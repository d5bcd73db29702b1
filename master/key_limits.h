#pragma once

#include <memory>
#include <string>
#include <zmq.hpp>

#include "blockmgr/status.h"
#include "common/core/clock.h"
#include "common/net/handshake_connection_limit.h"
#include "common/net/peer_monitor.h"
#include "common/net/transport.h"
#include "master/registration_limit.h"

namespace bm {

class ZapHandler;

// The master's limits per key (keys on; docs/security.md "Security"): the connections one key may
// hold open at once, counted from their handshake (HandshakeConnectionLimit, the ZAP handler's
// gate), and the registrations one key may make a minute. A monitor of the master's socket
// reports the connections accepted and closed.
//
// Not thread-safe: owned by the master's loop, which polls monitor_socket() with its own
// sockets. The ZAP handler (may be null), the clock and the monitored socket are borrowed and
// must outlive the limits.
class KeyLimits {
 public:
  // Monitors `router` for accepted and closed connections, and makes the limits the ZAP
  // handler's gate. 0 for either limit: none.
  static Result<std::unique_ptr<KeyLimits>> Create(zmq::context_t& context, zmq::socket_t& router,
                                                   size_t max_connections_per_key, ZapHandler* zap,
                                                   size_t max_registrations_per_key,
                                                   const Clock& clock);
  ~KeyLimits();
  KeyLimits(const KeyLimits&) = delete;
  KeyLimits& operator=(const KeyLimits&) = delete;

  // The socket the monitor's events arrive on; DrainClosed() reads it.
  zmq::socket_t& monitor_socket() { return monitor_->socket(); }
  // Applies what the monitor reports: connections accepted, and closed (which stop counting).
  // Never blocks.
  void DrainClosed();

  // Counts the message's connection against its sender's key (a message without a peer, keys
  // off, always gets in): kUnavailable when the key holds the most connections it may.
  Status AdmitConnection(const IncomingMessage& message);
  // A registration by `peer`: kUnavailable when its key registered too often this minute.
  Status AdmitRegistration(const PeerIdentity& peer) { return registrations_.Admit(peer); }

 private:
  KeyLimits(std::unique_ptr<PeerMonitor> monitor, size_t max_connections_per_key, ZapHandler* zap,
            size_t max_registrations_per_key, const Clock& clock);

  std::unique_ptr<PeerMonitor> monitor_;
  ZapHandler* const zap_;
  HandshakeConnectionLimit connections_;
  RegistrationLimit registrations_;
};

}  // namespace bm
