#pragma once

#include <capnp/message.h>

#include <cstdint>
#include <vector>
#include <zmq.hpp>

#include "blockmgr/status.h"
#include "common/net/transport.h"

namespace bm {

// The master's ROUTER socket, on which clients and workers send requests and get their
// replies, with the state its drains keep: whether it is settled (common/net/socket_drain.h: it
// may hold messages its ZMQ_FD will not signal when it was sent on since its last drain, or
// that drain stopped early), and the first segment every reply is built in.
//
// Not thread-safe: owned by the master's loop, used on its thread only.
class RequestSocket {
 public:
  RequestSocket(zmq::socket_t router, int max_messages_per_wake);

  zmq::socket_t& socket() { return router_; }
  // The bound address with its actual port.
  std::string endpoint() const { return router_.get(zmq::sockopt::last_endpoint); }
  int fd() const { return router_.get(zmq::sockopt::fd); }
  // Whether the socket must be drained again before the loop sleeps.
  bool unsettled() const { return unsettled_; }
  void Unsettle() { unsettled_ = true; }

  // Calls `handle(routing_id)` for each message waiting (at most max_messages_per_wake); the
  // handler reads the rest of the message with ReceiveRest().
  //
  // Each message's first frame (its sender's routing id) is received without waiting, and a
  // drain ends at the first that is not there, rather than asking ZMQ_EVENTS before every
  // message: libzmq processes the socket's commands (getpid and a poll(2)) on each ZMQ_EVENTS
  // query but only once on a receive that finds nothing, which settles the socket the same
  // way. With 8 clients a wake-up finds one or two requests, so this saves one of the ~2.6
  // poll(2) and ~4 getpid calls per single lookup (strace -c).
  template <typename Handle>
  void Drain(Handle&& handle) {
    for (int i = 0; i < max_messages_per_wake_; ++i) {
      zmq::message_t routing_id;
      if (!router_.recv(routing_id, zmq::recv_flags::dontwait)) {
        unsettled_ = false;
        return;
      }
      handle(routing_id);
    }
    unsettled_ = true;  // more may be waiting
  }
  // The rest of the message whose routing id frame was read: kInvalidArgument when it has no
  // header frame, as ReceiveMessage otherwise.
  Result<IncomingMessage> ReceiveRest();

  // The zeroed first segment for a reply's builder (which zeroes what it used again when it
  // is destroyed): a reply of 100 locations (~13 KiB) fits in it, so a lookup neither callocs a
  // fresh 8 KiB first segment nor spills into a second one.
  kj::ArrayPtr<capnp::word> reply_segment() { return reply_segment_.asPtr(); }

  // Sends a reply to `client` (its routing id); a reply that cannot be sent is dropped.
  void Send(const zmq::message_t& client, capnp::MessageBuilder& message,
            std::vector<zmq::message_t> payload = {});
  void SendError(const zmq::message_t& client, uint64_t request_id, const Status& status);

 private:
  zmq::socket_t router_;
  const int max_messages_per_wake_;
  bool unsettled_ = true;
  kj::Array<capnp::word> reply_segment_;
};

}  // namespace bm
