#pragma once

// Messages over ZeroMQ: one Cap'n Proto header frame followed by raw payload frames.
// Sockets are not thread-safe; every function here is called by the one thread that owns the
// socket.

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "blockmgr/chunk.h"
#include "blockmgr/status.h"
#include "common/net/peer_monitor.h"
#include "common/security/curve_keys.h"
#include "schema/messages.capnp.h"

namespace bm {

// One received multipart message, header already decoded (lazily: Cap'n Proto validates as
// fields are read, so callers read it inside a try/catch for kj::Exception, see
// ReadGuarded()).
class IncomingMessage {
 public:
  IncomingMessage(std::optional<zmq::message_t> routing_id, kj::Array<capnp::word> words,
                  std::vector<zmq::message_t> payload, int source_fd = -1);

  // The sender's identity when received on a ROUTER socket.
  const std::optional<zmq::message_t>& routing_id() const { return routing_id_; }
  // The descriptor of the connection the message came in on (ZMQ_SRCFD of its header frame;
  // ROUTERs do not set it on the routing id frame); -1 when unknown. See PeerMonitor.
  int source_fd() const { return source_fd_; }
  proto::Request::Reader request() { return reader_->getRoot<proto::Request>(); }
  proto::Reply::Reader reply() { return reader_->getRoot<proto::Reply>(); }
  std::vector<zmq::message_t>& payload() { return payload_; }
  // Who sent it, as the server's ZAP handler authenticated the connection; nullopt on a
  // plaintext (insecure) socket.
  const std::optional<PeerIdentity>& peer() const { return peer_; }
  void set_peer(std::optional<PeerIdentity> peer) { peer_ = std::move(peer); }
  uint64_t payload_bytes() const;
  // Moves the payload frames out as chunks, without copying their bytes.
  std::vector<ChunkPtr> TakePayloadChunks();

 private:
  std::optional<zmq::message_t> routing_id_;
  kj::Array<capnp::word> words_;
  std::unique_ptr<capnp::FlatArrayMessageReader> reader_;
  std::vector<zmq::message_t> payload_;
  std::optional<PeerIdentity> peer_;
  int source_fd_ = -1;
};

// Receives one whole multipart message from a socket that is ready to read (poll first, or
// pass a blocking socket). All frames of the message are consumed even when it is rejected, so
// the socket stays aligned on message boundaries. Rejects: missing header, header or payload
// frames over the limits, too many frames. On rejection `routing_id_out` still holds the
// sender (for ROUTER sockets) so the caller can reply with an error.
Result<IncomingMessage> ReceiveMessage(zmq::socket_t& socket, bool has_routing_id,
                                       std::optional<zmq::message_t>* routing_id_out = nullptr);

// Sends [routing id] [header] [payload...]. Never blocks on a ROUTER (unroutable or full peers
// drop the message); may block on a DEALER up to its send timeout. Fails with kUnavailable.
Status SendMessage(zmq::socket_t& socket, const zmq::message_t* routing_id,
                   capnp::MessageBuilder& header, std::vector<zmq::message_t> payload = {});

// A frame that shares `chunk`'s bytes with no copy; the chunk stays alive until ZeroMQ is done.
zmq::message_t MessageFromChunk(ChunkPtr chunk);
// A chunk that takes over the frame's bytes with no copy.
ChunkPtr ChunkFromMessage(zmq::message_t message);

// Applies the settings every blockmgr socket shares: no linger on close, a cap on frame size.
void ConfigureSocket(zmq::socket_t& socket);

// ConfigureSocket() plus, with keys, CURVE server mode: the context's ZapHandler (which must
// be bound before this socket binds) decides which client keys get in.
void ConfigureServerSocket(zmq::socket_t& socket, const CurveKeys& keys);
// Makes a server socket ping each client every RpcChannel::kHeartbeatInterval, so that a client
// sending a large request still hears from it while the request is on the way. A client gives
// up on a connection that sends nothing for RpcChannel::kHeartbeatTimeout after the client's
// own ping, and that ping queues behind the bytes it is sending: on a link slower than a piece
// per heartbeat timeout, the server's pings (answered by no loop, sent by its ZeroMQ I/O thread)
// are what show it alive. A client silent for kClientSilenceBound after the server's ping (its
// host gone without closing the connection) has its connection closed.
// For servers whose clients send large requests (workers); the master's requests are small.
void SendHeartbeatsToClients(zmq::socket_t& socket);
inline constexpr std::chrono::seconds kClientSilenceBound{60};

// ConfigureSocket() plus, with keys, CURVE client mode trusting only security.server_key.
// kPermissionDenied when the socket has keys but the server's key is unknown: connecting
// anyway could only fail.
Status ConfigureClientSocket(zmq::socket_t& socket, const ChannelSecurity& security,
                             const std::string& address);

// A request/reply channel to one server over a DEALER socket. Assigns request ids, waits for
// the matching reply up to a timeout and drops stale replies of earlier timed-out calls.
//
// A server that is dead or stopped fails a call within about half a second, not at the
// timeout, so callers fail over fast (to another copy, another worker):
//   - ZMQ_IMMEDIATE: a request is queued only on a connection whose handshake completed, and a
//     send waits at most kConnectBound for one. A killed server refuses the connection; a
//     stopped one (its port still accepts) never completes the handshake.
//   - ZMTP heartbeats (ZMQ_HEARTBEAT_IVL/TIMEOUT): a connection whose peer stops answering
//     pings is closed, and the socket monitor's report of it fails the call in flight. Pings
//     are answered by the peer's ZeroMQ I/O thread, so a server busy with a long request still
//     answers them; only a dead, stopped or cut-off process is detected. Any frame from the
//     server counts as an answer, and workers ping their clients too (SendHeartbeatsToClients):
//     this side's ping waits behind the bytes of a large put, theirs does not.
// Not thread-safe: one thread owns a channel.
class RpcChannel {
 public:
  // Throws zmq::error_t for an address ZeroMQ cannot parse, and for keys without the server's
  // key (see ConfigureClientSocket).
  RpcChannel(zmq::context_t& context, std::string address, std::chrono::milliseconds timeout,
             ChannelSecurity security = {});
  ~RpcChannel();

  const std::string& address() const { return address_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

  // Sends the request (its id is set here) and returns the reply. An error reply becomes its
  // Status; no reply within the timeout is kUnavailable (and the socket is reset so a late
  // reply cannot be mistaken for a later call's). A handshake the server refused fails at once
  // (within kHeartbeatInterval) with kPermissionDenied: "authentication refused by
  // tcp://HOST:PORT", or a message naming a keys/no-keys mismatch.
  Result<IncomingMessage> Call(capnp::MallocMessageBuilder& request,
                               std::vector<zmq::message_t> payload = {});

  // Call in two halves, so several requests can be in flight on the channel: Send sends the
  // request and returns its id; Await(id) waits (up to the timeout, from the Await) for that
  // id's reply, with Call's errors. Replies of other requests in flight that arrive meanwhile
  // are kept for their own Await. A reset (timeout, lost connection) forgets every request in
  // flight: their Awaits fail at once with kUnavailable.
  Result<uint64_t> Send(capnp::MallocMessageBuilder& request,
                        std::vector<zmq::message_t> payload = {});
  Result<IncomingMessage> Await(uint64_t id);
  // Gives up on a request sent and not awaited: its reply, now or later, is dropped.
  void Abandon(uint64_t id);
  // Gives up on every request in flight and drops the frames still queued to the peer, with
  // the connection (a fresh socket connects on the next send). Frames lent from a caller's
  // memory are released this way without waiting for a peer that may never take them.
  void DropQueued() { Reset(); }

  // Sends a request without waiting for its reply (which a later Call drops as stale), and
  // without blocking: for best-effort notices such as abortPut. kUnavailable when it cannot
  // be queued at once.
  Status Post(capnp::MallocMessageBuilder& request);

  // How long a send waits for a connection to complete (see the class comment).
  static constexpr std::chrono::milliseconds kConnectBound{500};
  // Heartbeats on the connection: a peer silent this long after a ping is given up.
  static constexpr std::chrono::milliseconds kHeartbeatInterval{100};
  static constexpr std::chrono::milliseconds kHeartbeatTimeout{400};

 private:
  void Reset();
  // A refused handshake (kPermissionDenied, saying why) or a lost connection (kUnavailable)
  // reported by the monitor since the last call; OK when neither.
  Status ConnectionStatus();
  Status ReadMonitor();

  zmq::context_t& context_;
  std::string address_;
  std::chrono::milliseconds timeout_;
  ChannelSecurity security_;
  std::unique_ptr<zmq::socket_t> socket_;
  // Of socket_, for lost connections and refused handshakes; null if it could not be set up.
  std::unique_ptr<PeerMonitor> monitor_;
  // The last refused or cut handshake, until a handshake succeeds.
  Status handshake_problem_;
  uint64_t next_id_ = 1;
  // Sent and not yet awaited, and the replies of those that arrived before their Await.
  std::set<uint64_t> in_flight_;
  std::map<uint64_t, IncomingMessage> early_replies_;
};

// Runs `read` (which reads a Cap'n Proto message from the network) and turns a decoding
// exception (truncated or hostile data) into kInvalidArgument instead of letting it escape.
template <typename F>
Status ReadGuarded(F&& read) {
  try {
    return read();
  } catch (const kj::Exception& e) {
    return InvalidArgumentError(std::string("malformed message: ") + e.getDescription().cStr());
  }
}

}  // namespace bm
