#pragma once

// Messages over ZeroMQ: one Cap'n Proto header frame followed by raw payload frames.
// Sockets are not thread-safe; every function here is called by the one thread that owns the
// socket.

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/chunk.h"
#include "common/curve_keys.h"
#include "common/status.h"
#include "schema/messages.capnp.h"

namespace bm {

// One received multipart message, header already decoded (lazily: Cap'n Proto validates as
// fields are read, so callers read it inside a try/catch for kj::Exception, see
// ReadGuarded()).
class IncomingMessage {
 public:
  IncomingMessage(std::optional<zmq::message_t> routing_id, kj::Array<capnp::word> words,
                  std::vector<zmq::message_t> payload);

  // The sender's identity when received on a ROUTER socket.
  const std::optional<zmq::message_t>& routing_id() const { return routing_id_; }
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
// ConfigureSocket() plus, with keys, CURVE client mode trusting only security.server_key.
// kPermissionDenied when the socket has keys but the server's key is unknown: connecting
// anyway could only fail.
Status ConfigureClientSocket(zmq::socket_t& socket, const ChannelSecurity& security,
                             const std::string& address);

// A request/reply channel to one server over a DEALER socket. Assigns request ids, waits for
// the matching reply up to a timeout and drops stale replies of earlier timed-out calls.
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
  // (within kHandshakeCheckInterval) with kPermissionDenied: "authentication refused by
  // tcp://HOST:PORT", or a message naming a keys/no-keys mismatch.
  Result<IncomingMessage> Call(capnp::MallocMessageBuilder& request,
                               std::vector<zmq::message_t> payload = {});

 private:
  void Reset();
  // The handshake failure the socket's monitor reported, if any (reads without waiting).
  Status HandshakeStatus();

  zmq::context_t& context_;
  std::string address_;
  std::chrono::milliseconds timeout_;
  ChannelSecurity security_;
  std::unique_ptr<zmq::socket_t> socket_;
  // Receives the handshake events of socket_ (ZMQ_EVENT_HANDSHAKE_*).
  std::unique_ptr<zmq::socket_t> monitor_;
  uint64_t next_id_ = 1;
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
