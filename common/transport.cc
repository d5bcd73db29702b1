#include "common/transport.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "common/protocol.h"

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
                                 kj::Array<capnp::word> words,
                                 std::vector<zmq::message_t> payload, int source_fd)
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
    try {
      // ZMQ_SRCFD is deprecated for the "Peer-Address" property, which cannot be matched with
      // the socket monitor's events (PeerMonitor); it still works in every libzmq 4.x.
      const int source_fd = zmq_msg_get(header.handle(), ZMQ_SRCFD);
      return IncomingMessage(std::move(routing_id), std::move(words), std::move(payload),
                             source_fd);
    } catch (const kj::Exception& e) {
      return InvalidArgumentError(std::string("malformed header: ") +
                                  e.getDescription().cStr());
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
    if (!socket.send(header_frame, flags)) return UnavailableError("peer not ready");
    for (size_t i = 0; i < payload.size(); ++i) {
      zmq::send_flags f = i + 1 < payload.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
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
  auto* keeper = new ChunkPtr(std::move(chunk));
  return zmq::message_t(
      const_cast<std::byte*>(bytes.data()), bytes.size(),
      [](void*, void* hint) { delete static_cast<ChunkPtr*>(hint); }, keeper);
}

ChunkPtr ChunkFromMessage(zmq::message_t message) {
  return std::make_shared<MessageChunk>(std::move(message));
}

void ConfigureSocket(zmq::socket_t& socket) {
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::maxmsgsize, kMaxFrameBytes);
}

RpcChannel::RpcChannel(zmq::context_t& context, std::string address,
                       std::chrono::milliseconds timeout)
    : context_(context), address_(std::move(address)), timeout_(timeout) {
  Reset();
}

void RpcChannel::Reset() {
  monitor_.reset();  // before the socket it monitors
  socket_ = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
  ConfigureSocket(*socket_);
  socket_->set(zmq::sockopt::immediate, 1);
  socket_->set(zmq::sockopt::heartbeat_ivl, static_cast<int>(kHeartbeatInterval.count()));
  socket_->set(zmq::sockopt::heartbeat_timeout, static_cast<int>(kHeartbeatTimeout.count()));
  socket_->set(zmq::sockopt::sndtimeo, static_cast<int>(std::min(timeout_, kConnectBound).count()));
  static std::atomic<uint64_t> monitors{0};
  Result<std::unique_ptr<PeerMonitor>> monitor =
      PeerMonitor::Create(context_, *socket_, "rpc-" + std::to_string(++monitors));
  // Without a monitor a call still ends at its timeout.
  if (monitor.ok()) monitor_ = std::move(monitor).value();
  socket_->connect(address_);
}

Result<IncomingMessage> RpcChannel::Call(capnp::MallocMessageBuilder& request,
                                         std::vector<zmq::message_t> payload) {
  const uint64_t id = next_id_++;
  request.getRoot<proto::Request>().setId(id);
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  // Only a connection lost after this send fails the call.
  if (monitor_) monitor_->TakeClosed();
  Status sent = SendMessage(*socket_, nullptr, request, std::move(payload));
  if (!sent.ok()) {
    Reset();
    return UnavailableError("cannot reach " + address_ + ": " + sent.message());
  }
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    // A blocking receive bounded by the time left, not zmq::poll then a receive: that saves
    // a poll pass per call, which is measurable on VMs where system calls are dear. It waits
    // in slices, checking between them whether the connection was lost.
    socket_->set(zmq::sockopt::rcvtimeo,
                 static_cast<int>(std::min(left, kHeartbeatInterval).count()));
    Result<IncomingMessage> received = ReceiveMessage(*socket_, /*has_routing_id=*/false);
    if (!received.ok()) {
      if (received.status().code() == StatusCode::kUnavailable) {  // this slice is up
        if (monitor_ && !monitor_->TakeClosed().empty()) {
          Reset();
          return UnavailableError("lost the connection to " + address_ +
                                  " (it closed, or the peer stopped answering heartbeats)");
        }
        continue;
      }
      continue;  // a garbled reply: keep waiting for ours
    }
    IncomingMessage& message = received.value();
    bool stale = false;
    Status status = ReadGuarded([&]() -> Status {
      proto::Reply::Reader reply = message.reply();
      stale = reply.getId() != id;
      if (!stale && reply.isError()) return StatusFromError(reply.getError());
      return Status::Ok();
    });
    if (stale) continue;  // the late reply of an earlier call
    if (!status.ok()) return status;
    return std::move(received).value();
  }
  Reset();
  return UnavailableError("no reply from " + address_ + " within " +
                          std::to_string(timeout_.count()) + " ms");
}

Status RpcChannel::Post(capnp::MallocMessageBuilder& request) {
  request.getRoot<proto::Request>().setId(next_id_++);
  socket_->set(zmq::sockopt::sndtimeo, 0);
  Status sent = SendMessage(*socket_, nullptr, request);
  socket_->set(zmq::sockopt::sndtimeo, static_cast<int>(std::min(timeout_, kConnectBound).count()));
  return sent;
}

}  // namespace bm
