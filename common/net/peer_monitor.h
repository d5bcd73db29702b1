#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "blockmgr/status.h"

namespace bm {

// Tells a socket's owner which of its connections closed: a server's ROUTER, so it can drop at
// once what a peer left behind (the uploads of a client that was killed or gave up) instead of
// waiting for a timeout; a client's DEALER, so a call in flight fails over at once when its
// connection dies (RpcChannel).
//
// ZeroMQ hides connections behind routing ids; its socket monitor reports a closed
// connection by its file descriptor, and every received frame carries the descriptor it came
// in on (ZMQ_SRCFD, IncomingMessage::source_fd()). So a server notes the descriptor of a peer's
// messages and forgets the peer when the monitor reports that descriptor closed. (ZMQ_ROUTER_NOTIFY
// would name the routing id itself, but it is a draft option Debian's libzmq is built without.)
//
// Descriptors are reused, but not out of order: ZeroMQ reports a connection closed before it
// closes the descriptor, and a new connection can only get that descriptor afterwards. So a
// server that calls TakeClosed() before it first records a peer's descriptor never mistakes
// a new peer on a reused descriptor for the one that left.
//
// Not thread-safe: owned by the thread that owns the ROUTER.
class PeerMonitor {
 public:
  // One event of the socket monitor: ZMQ_EVENT_* and its value (a descriptor for
  // ZMQ_EVENT_DISCONNECTED, an error or protocol code for the handshake failures).
  struct Event {
    uint16_t kind;
    uint32_t value;
  };

  // Monitors `router` (any socket; it must outlive the monitor) for `events` (ZMQ_EVENT_*
  // bits; a socket has one monitor, so its owner asks for every event it needs here); `name`
  // makes the inproc endpoint unique within the context.
  static Result<std::unique_ptr<PeerMonitor>> Create(zmq::context_t& context, zmq::socket_t& router,
                                                     const std::string& name,
                                                     int events = ZMQ_EVENT_DISCONNECTED);
  ~PeerMonitor();
  PeerMonitor(const PeerMonitor&) = delete;
  PeerMonitor& operator=(const PeerMonitor&) = delete;

  // The socket the events arrive on, for the server's poll (see SettledSocket: only
  // TakeClosed() reads it, and it drains it).
  zmq::socket_t& socket() { return events_; }
  // Every connection closed since the last call, oldest first, by descriptor. Never blocks.
  // Drops the other events.
  std::vector<int> TakeClosed();
  // Every event since the last call, oldest first. Never blocks.
  std::vector<Event> TakeEvents();

 private:
  PeerMonitor(zmq::context_t& context, zmq::socket_t& router, std::string endpoint);

  zmq::socket_t& router_;
  std::string endpoint_;
  zmq::socket_t events_;
};

}  // namespace bm
