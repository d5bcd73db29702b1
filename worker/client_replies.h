#pragma once

#include <capnp/message.h>

#include <cstdint>
#include <vector>
#include <zmq.hpp>

#include "blockmgr/status.h"
#include "blockmgr/tier.h"
#include "worker/worker_status.h"

namespace bm {

// Sends replies to the worker's clients (and to the master, which reaches the data port as a
// client) on the worker's ROUTER socket, counting the block bytes sent.
//
// Sending on a ZeroMQ socket may leave messages that arrived meanwhile unsignalled by its
// ZMQ_FD, so every send marks the socket unsettled: the loop drains it before it sleeps.
//
// Borrows the socket and the counters, which must outlive it. Not thread-safe: owned by the
// worker's event loop, like the socket.
class ClientReplies {
 public:
  ClientReplies(zmq::socket_t& router, WorkerCounters& counters)
      : router_(router), counters_(counters) {}
  ClientReplies(const ClientReplies&) = delete;
  ClientReplies& operator=(const ClientReplies&) = delete;

  // Never blocks: a reply to a peer that is gone or too far behind is dropped (and logged).
  void Send(const zmq::message_t& peer, capnp::MallocMessageBuilder& reply,
            std::vector<zmq::message_t> payload = {});
  void SendError(const zmq::message_t& peer, uint64_t id, const Status& status);
  void SendOk(const zmq::message_t& peer, uint64_t id);
  void SendPutReply(const zmq::message_t& peer, uint64_t id, Tier tier, bool committed);

  // True when the socket may hold messages its ZMQ_FD will not signal: a reply was sent since
  // the loop last drained it, or that drain stopped early (see WorkerServer::Run).
  bool unsettled() const { return unsettled_; }
  // The loop drained the socket: `settled` when it read it empty.
  void Drained(bool settled) { unsettled_ = !settled; }

 private:
  zmq::socket_t& router_;
  WorkerCounters& counters_;
  bool unsettled_ = true;
};

}  // namespace bm
