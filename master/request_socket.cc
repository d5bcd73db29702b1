#include "master/request_socket.h"

#include <spdlog/spdlog.h>

#include <cstring>

#include "common/core/protocol.h"

namespace bm {
namespace {

// 256 KiB: the replies of lookups batched up to ~2000 ids.
constexpr size_t kReplySegmentWords = 32 * 1024;

kj::Array<capnp::word> ZeroedWords(size_t count) {
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(count);
  std::memset(words.begin(), 0, count * sizeof(capnp::word));
  return words;
}

}  // namespace

RequestSocket::RequestSocket(zmq::socket_t router, int max_messages_per_wake)
    : router_(std::move(router)),
      max_messages_per_wake_(max_messages_per_wake),
      reply_segment_(ZeroedWords(kReplySegmentWords)) {}

Result<IncomingMessage> RequestSocket::ReceiveRest() {
  if (router_.get(zmq::sockopt::rcvmore) == 0) {
    return InvalidArgumentError("message has no header frame");
  }
  return ReceiveMessage(router_, /*has_routing_id=*/false);
}

void RequestSocket::Send(const zmq::message_t& client, capnp::MessageBuilder& message,
                         std::vector<zmq::message_t> payload) {
  unsettled_ = true;
  Status sent = SendMessage(router_, &client, message, std::move(payload));
  if (!sent.ok()) spdlog::debug("reply not sent: {}", sent.ToString());
}

void RequestSocket::SendError(const zmq::message_t& client, uint64_t request_id,
                              const Status& status) {
  capnp::MallocMessageBuilder message;
  proto::Reply::Builder reply = message.initRoot<proto::Reply>();
  reply.setId(request_id);
  SetError(reply.initError(), status);
  Send(client, message);
}

}  // namespace bm
