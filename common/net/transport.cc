#include "common/net/transport.h"

#include <zmq.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>

#include "common/core/protocol.h"
#include "common/core/tsan.h"
#include "common/net/handshake_refusal.h"

#if defined(BM_TSAN_ENABLED)
// Read by ThreadSanitizer at start-up in every program that links the transport. It names only
// the uninstrumented libraries: what their own threads do inside them (memcpy, free, their
// locks) is theirs to get right; every access from this project's code is still checked, and
// the hand-over of frames between threads is annotated in SendMessage/ReceiveMessage.
// libsodium is there because libzmq's I/O thread decrypts CURVE frames with it, straight into
// the buffer a receiver later reads; cpp-httplib (the --http server) hands requests between its
// own threads; the ZooKeeper C client formats its log lines in a static buffer from each
// session's threads. RocksDB's background threads also run std::string code that the linker takes
// from this program's instrumented copy, which called_from_lib cannot see: hence race:rocksdb::
// (the disk store calls RocksDB from one thread only, see DiskStore).
extern "C" const char* __tsan_default_suppressions() {
  return "called_from_lib:libzmq.so\n"
         "called_from_lib:libsodium.so\n"
         "called_from_lib:librocksdb.so\n"
         "called_from_lib:libcpp-httplib.so\n"
         "called_from_lib:libzookeeper_mt.so\n"
         "race:rocksdb::\n";
}
#endif

namespace bm {
namespace {

// Holds a received frame so its bytes can live on as a chunk.
class MessageChunk final : public Chunk {
 public:
  explicit MessageChunk(zmq::message_t message) : message_(std::move(message)) {}
  std::span<const std::byte> bytes() const override {
    return {static_cast<const std::byte*>(message_.data()), message_.size()};
  }

 private:
  zmq::message_t message_;
};

kj::Array<capnp::word> CopyToWords(const zmq::message_t& frame) {
  // Frames carry no alignment guarantee; Cap'n Proto wants 8-byte aligned words.
  size_t words = (frame.size() + sizeof(capnp::word) - 1) / sizeof(capnp::word);
  kj::Array<capnp::word> out = kj::heapArray<capnp::word>(words);
  if (words > 0) {
    std::memset(out.begin(), 0, words * sizeof(capnp::word));
    std::memcpy(out.begin(), frame.data(), frame.size());
  }
  return out;
}

bool More(zmq::socket_t& socket) { return socket.get(zmq::sockopt::rcvmore) != 0; }

void DrainRest(zmq::socket_t& socket) {
  while (More(socket)) {
    zmq::message_t discard;
    (void)socket.recv(discard, zmq::recv_flags::none);
  }
}

}  // namespace

IncomingMessage::IncomingMessage(std::optional<zmq::message_t> routing_id,
                                 kj::Array<capnp::word> words, std::vector<zmq::message_t> payload,
                                 int source_fd)
    : routing_id_(std::move(routing_id)),
      words_(std::move(words)),
      payload_(std::move(payload)),
      source_fd_(source_fd) {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = kTraversalLimitWords;
  options.nestingLimit = 32;
  reader_ = std::make_unique<capnp::FlatArrayMessageReader>(words_.asPtr(), options);
}

uint64_t IncomingMessage::payload_bytes() const {
  uint64_t total = 0;
  for (const zmq::message_t& frame : payload_) total += frame.size();
  return total;
}

std::vector<ChunkPtr> IncomingMessage::TakePayloadChunks() {
  std::vector<ChunkPtr> chunks;
  chunks.reserve(payload_.size());
  for (zmq::message_t& frame : payload_) chunks.push_back(ChunkFromMessage(std::move(frame)));
  payload_.clear();
  return chunks;
}

Result<IncomingMessage> ReceiveMessage(zmq::socket_t& socket, bool has_routing_id,
                                       std::optional<zmq::message_t>* routing_id_out) {
  std::optional<zmq::message_t> routing_id;
  try {
    if (has_routing_id) {
      zmq::message_t id;
      if (!socket.recv(id, zmq::recv_flags::none)) return UnavailableError("receive interrupted");
      routing_id = std::move(id);
      if (routing_id_out) *routing_id_out = zmq::message_t(routing_id->data(), routing_id->size());
      if (!More(socket)) return InvalidArgumentError("message has no header frame");
    }
    zmq::message_t header;
    if (!socket.recv(header, zmq::recv_flags::none)) return UnavailableError("receive interrupted");
    BM_TSAN_ACQUIRE(header.data());
    if (header.size() == 0 || header.size() > kMaxHeaderBytes) {
      DrainRest(socket);
      return InvalidArgumentError("header frame of " + std::to_string(header.size()) +
                                  " bytes is empty or over the limit");
    }
    std::vector<zmq::message_t> payload;
    while (More(socket)) {
      zmq::message_t frame;
      if (!socket.recv(frame, zmq::recv_flags::none)) {
        return UnavailableError("receive interrupted");
      }
      BM_TSAN_ACQUIRE(frame.data());
      if (payload.size() >= kMaxPayloadFrames) {
        DrainRest(socket);
        return TooLargeError("message has more than " + std::to_string(kMaxPayloadFrames) +
                             " payload frames");
      }
      if (frame.size() > kMaxPayloadFrameBytes) {
        DrainRest(socket);
        return TooLargeError("payload frame of " + std::to_string(frame.size()) +
                             " bytes is over the limit");
      }
      payload.push_back(std::move(frame));
    }
    kj::Array<capnp::word> words = CopyToWords(header);
    // Set by the ZAP handler for CURVE connections; absent (NULL) on plaintext ones.
    const char* user_id = zmq_msg_gets(header.handle(), "User-Id");
    try {
      // ZMQ_SRCFD is deprecated for the "Peer-Address" property, which cannot be matched with
      // the socket monitor's events (PeerMonitor); it still works in every libzmq 4.x.
      const int source_fd = zmq_msg_get(header.handle(), ZMQ_SRCFD);
      IncomingMessage message(std::move(routing_id), std::move(words), std::move(payload),
                              source_fd);
      if (user_id != nullptr) message.set_peer(DecodeUserId(user_id));
      return message;
    } catch (const kj::Exception& e) {
      return InvalidArgumentError(std::string("malformed header: ") + e.getDescription().cStr());
    }
  } catch (const zmq::error_t& e) {
    return UnavailableError(std::string("receive failed: ") + e.what());
  }
}

Status SendMessage(zmq::socket_t& socket, const zmq::message_t* routing_id,
                   capnp::MessageBuilder& header, std::vector<zmq::message_t> payload) {
  kj::Array<capnp::word> words = capnp::messageToFlatArray(header);
  kj::ArrayPtr<const kj::byte> bytes = words.asBytes();
  try {
    if (routing_id) {
      zmq::message_t id(routing_id->data(), routing_id->size());
      if (!socket.send(id, zmq::send_flags::sndmore)) return UnavailableError("peer not ready");
    }
    zmq::message_t header_frame(bytes.begin(), bytes.size());
    zmq::send_flags flags = payload.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore;
    BM_TSAN_RELEASE(header_frame.data());
    if (!socket.send(header_frame, flags)) return UnavailableError("peer not ready");
    for (size_t i = 0; i < payload.size(); ++i) {
      zmq::send_flags f = i + 1 < payload.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      BM_TSAN_RELEASE(payload[i].data());
      if (!socket.send(payload[i], f)) return UnavailableError("peer not ready");
    }
  } catch (const zmq::error_t& e) {
    return UnavailableError(std::string("send failed: ") + e.what());
  }
  return Status::Ok();
}

zmq::message_t MessageFromChunk(ChunkPtr chunk) {
  std::span<const std::byte> bytes = chunk->bytes();
  if (bytes.empty()) return zmq::message_t();
  // The heap-held shared_ptr keeps the chunk alive until ZeroMQ has sent the frame.
  // ZeroMQ may call the free function on its I/O thread.
  auto* keeper = new ChunkPtr(std::move(chunk));
  BM_TSAN_RELEASE(keeper);
  return zmq::message_t(
      const_cast<std::byte*>(bytes.data()), bytes.size(),
      [](void*, void* hint) {
        BM_TSAN_ACQUIRE(hint);
        delete static_cast<ChunkPtr*>(hint);
      },
      keeper);
}

ChunkPtr ChunkFromMessage(zmq::message_t message) {
  return std::make_shared<MessageChunk>(std::move(message));
}

void ConfigureSocket(zmq::socket_t& socket) {
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::maxmsgsize, kMaxFrameBytes);
}

void ConfigureServerSocket(zmq::socket_t& socket, const CurveKeys& keys) {
  ConfigureSocket(socket);
  if (!keys.enabled()) return;
  socket.set(zmq::sockopt::curve_server, true);
  socket.set(zmq::sockopt::curve_secretkey, keys.secret_key);
  socket.set(zmq::sockopt::curve_publickey, keys.public_key);
}

void SendHeartbeatsToClients(zmq::socket_t& socket) {
  socket.set(zmq::sockopt::heartbeat_ivl, static_cast<int>(RpcChannel::kHeartbeatInterval.count()));
  // Not left at its default (the interval): a client's answer queues behind what it sends, so
  // a timeout as short as the interval would cut every client in the middle of a large put.
  socket.set(zmq::sockopt::heartbeat_timeout,
             static_cast<int>(std::chrono::milliseconds(kClientSilenceBound).count()));
}

Status ConfigureClientSocket(zmq::socket_t& socket, const ChannelSecurity& security,
                             const std::string& address) {
  ConfigureSocket(socket);
  if (!security.own.enabled()) return Status::Ok();
  if (security.server_key.empty()) {
    return PermissionDeniedError("no public key is known for " + address +
                                 "; with keys on, only servers the master vouches for are used");
  }
  socket.set(zmq::sockopt::curve_serverkey, security.server_key);
  socket.set(zmq::sockopt::curve_publickey, security.own.public_key);
  socket.set(zmq::sockopt::curve_secretkey, security.own.secret_key);
  return Status::Ok();
}

namespace {

// Slices of a call's wait between looks at the handshake monitor: a refused key fails within
// this, not at the call's timeout. A reply that comes sooner costs no extra system call.
std::atomic<uint64_t> next_monitor_id{1};

}  // namespace

RpcChannel::RpcChannel(zmq::context_t& context, std::string address,
                       std::chrono::milliseconds timeout, ChannelSecurity security)
    : context_(context),
      address_(std::move(address)),
      timeout_(timeout),
      security_(std::move(security)) {
  Reset();
}

RpcChannel::~RpcChannel() = default;

void RpcChannel::Reset() {
  in_flight_.clear();
  early_replies_.clear();
  monitor_.reset();  // before the socket it monitors
  socket_ = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
  Status configured = ConfigureClientSocket(*socket_, security_, address_);
  // Never fall back to plaintext: the request would go out unencrypted to whoever answers.
  if (!configured.ok()) throw std::invalid_argument(configured.message());
  socket_->set(zmq::sockopt::immediate, 1);
  socket_->set(zmq::sockopt::heartbeat_ivl, static_cast<int>(kHeartbeatInterval.count()));
  socket_->set(zmq::sockopt::heartbeat_timeout, static_cast<int>(kHeartbeatTimeout.count()));
  socket_->set(zmq::sockopt::sndtimeo, static_cast<int>(std::min(timeout_, kConnectBound).count()));
  // One monitor for both what ends a call early: a lost connection and a refused handshake.
  Result<std::unique_ptr<PeerMonitor>> monitor =
      PeerMonitor::Create(context_, *socket_, "rpc-" + std::to_string(next_monitor_id.fetch_add(1)),
                          ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                              ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                              ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
  // Without a monitor a call still ends at its timeout.
  if (monitor.ok()) monitor_ = std::move(monitor).value();
  socket_->connect(address_);
}

Status RpcChannel::ConnectionStatus() {
  Status status = ReadMonitor();
  // A refused or cut handshake is remembered until one succeeds: a call that then gives up
  // waiting for a connection reports it, even if its events were read before the call.
  if (status.code() == StatusCode::kPermissionDenied ||
      status.message().find("handshake") != std::string::npos) {
    handshake_problem_ = status;
  }
  return status;
}

Status RpcChannel::ReadMonitor() {
  if (!monitor_) return Status::Ok();
  bool lost = false;
  bool handshake_cut = false;
  for (const PeerMonitor::Event& event : monitor_->TakeEvents()) {
    if (std::optional<Status> refused =
            HandshakeRefusal(event, address_, security_.own.enabled())) {
      return *refused;
    }
    if (event.kind == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) handshake_cut = true;
    if (event.kind == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      handshake_cut = false;
      handshake_problem_ = Status::Ok();
    }
    if (event.kind == ZMQ_EVENT_DISCONNECTED) lost = true;
  }
  // The server closed the connection before this side learnt why (a keys mismatch races with
  // the close): name the likely cause, but as unavailable, since a transport error during the
  // handshake looks the same.
  if (handshake_cut) {
    if (security_.own.enabled()) {
      return UnavailableError(address_ +
                              " closed the connection during the secure handshake: it does not "
                              "use keys (an --insecure server?), or it refused this key");
    }
    return UnavailableError(address_ +
                            " closed the connection during the handshake: it requires keys "
                            "(give --key and --master-key, or BLOCKMGR_KEY and "
                            "BLOCKMGR_MASTER_KEY), or it is not a blockmgr server");
  }
  if (lost) {
    return UnavailableError("lost the connection to " + address_ +
                            " (it closed, or the peer stopped answering heartbeats)");
  }
  return Status::Ok();
}

Result<IncomingMessage> RpcChannel::Call(capnp::MallocMessageBuilder& request,
                                         std::vector<zmq::message_t> payload) {
  BM_ASSIGN_OR_RETURN(uint64_t id, Send(request, std::move(payload)));
  return Await(id);
}

Result<uint64_t> RpcChannel::Send(capnp::MallocMessageBuilder& request,
                                  std::vector<zmq::message_t> payload) {
  const uint64_t id = next_id_++;
  request.getRoot<proto::Request>().setId(id);
  // Only a connection lost after this send fails the call; a refused handshake fails it at
  // once, whenever it happened.
  if (Status before = ConnectionStatus(); !before.ok()) {
    Reset();
    if (before.code() == StatusCode::kPermissionDenied) return before;
    // Lost before this send: the monitor can tell of it before the socket has let go of the
    // dead connection's pipe, and a message sent into that pipe vanishes with no further
    // event, so the call would wait out its whole timeout. The fresh socket's send waits
    // for a new connection instead (ZMQ_IMMEDIATE), and fails within kConnectBound if
    // there is none.
  }
  Status sent = SendMessage(*socket_, nullptr, request, std::move(payload));
  if (!sent.ok()) {
    // With ZMQ_IMMEDIATE a send waits for a connection that completed its handshake: a
    // refused key shows here, as a handshake event (read now, or earlier and remembered),
    // rather than as a reply.
    Status connection = ConnectionStatus();
    if (connection.ok()) connection = handshake_problem_;
    Reset();
    if (!connection.ok()) return connection;
    return UnavailableError("cannot reach " + address_ + ": " + sent.message());
  }
  in_flight_.insert(id);
  return id;
}

Result<IncomingMessage> RpcChannel::Await(uint64_t id) {
  auto reply_status = [](IncomingMessage& message) {
    return ReadGuarded([&]() -> Status {
      proto::Reply::Reader reply = message.reply();
      if (reply.isError()) return StatusFromError(reply.getError());
      return Status::Ok();
    });
  };
  if (auto early = early_replies_.find(id); early != early_replies_.end()) {
    IncomingMessage message = std::move(early->second);
    early_replies_.erase(early);
    BM_RETURN_IF_ERROR(reply_status(message));
    return message;
  }
  if (!in_flight_.contains(id)) {
    return UnavailableError("the request to " + address_ + " was lost when its connection reset");
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    // A blocking receive bounded by the time left, not zmq::poll then a receive: that saves
    // a poll pass per call, which is measurable on VMs where system calls are dear. It waits
    // in slices, checking between them whether the connection was lost or refused.
    socket_->set(zmq::sockopt::rcvtimeo,
                 static_cast<int>(std::min(left, kHeartbeatInterval).count()));
    Result<IncomingMessage> received = ReceiveMessage(*socket_, /*has_routing_id=*/false);
    if (!received.ok()) {
      if (received.status().code() == StatusCode::kUnavailable) {  // this slice is up
        Status connection = ConnectionStatus();
        if (!connection.ok()) {
          Reset();
          return connection;
        }
      }
      continue;  // a garbled reply: keep waiting for ours
    }
    IncomingMessage& message = received.value();
    uint64_t reply_id = 0;
    if (!ReadGuarded([&]() -> Status {
           reply_id = message.reply().getId();
           return Status::Ok();
         }).ok()) {
      continue;  // garbled
    }
    // Not ours: a later request's (kept for its Await), or the late reply of an earlier
    // timed-out call (dropped).
    if (reply_id != id) {
      if (in_flight_.erase(reply_id) > 0) {
        early_replies_.emplace(reply_id, std::move(received).value());
      }
      continue;
    }
    in_flight_.erase(id);
    BM_RETURN_IF_ERROR(reply_status(message));
    return std::move(received).value();
  }
  Reset();
  return UnavailableError("no reply from " + address_ + " within " +
                          std::to_string(timeout_.count()) + " ms");
}

void RpcChannel::Abandon(uint64_t id) {
  in_flight_.erase(id);
  early_replies_.erase(id);
}

Status RpcChannel::Post(capnp::MallocMessageBuilder& request) {
  request.getRoot<proto::Request>().setId(next_id_++);
  socket_->set(zmq::sockopt::sndtimeo, 0);
  Status sent = SendMessage(*socket_, nullptr, request);
  socket_->set(zmq::sockopt::sndtimeo, static_cast<int>(std::min(timeout_, kConnectBound).count()));
  return sent;
}

}  // namespace bm
