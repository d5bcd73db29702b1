#include "bench/raw_zmq.h"

#include <cstring>
#include <vector>
#include <zmq.hpp>

#include "bench/tasks.h"

namespace bm::bench {
namespace {

constexpr size_t kFrameBytes = 1 << 20;
constexpr size_t kOpFrameBytes = 1 + sizeof(uint64_t);

zmq::message_t OpFrame(char op, uint64_t bytes) {
  zmq::message_t frame(kOpFrameBytes);
  auto* data = static_cast<char*>(frame.data());
  data[0] = op;
  std::memcpy(data + 1, &bytes, sizeof(bytes));
  return frame;
}

// The bytes stay owned by their buffer, which outlives every send: nothing to free.
void KeepBuffer(void*, void*) {}

// Sends `bytes` of `buffer` as frames of kFrameBytes without copying; the last one ends the
// message.
void SendZeroCopy(zmq::socket_t& socket, const std::vector<std::byte>& buffer, uint64_t bytes) {
  for (uint64_t offset = 0; offset < bytes; offset += kFrameBytes) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kFrameBytes, bytes - offset));
    zmq::message_t frame(const_cast<std::byte*>(buffer.data() + offset), n, &KeepBuffer, nullptr);
    socket.send(frame, offset + n < bytes ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

// Receives the rest of a message; returns the payload bytes.
uint64_t ReceiveRest(zmq::socket_t& socket) {
  uint64_t bytes = 0;
  while (socket.get(zmq::sockopt::rcvmore)) {
    zmq::message_t frame;
    (void)socket.recv(frame, zmq::recv_flags::none);
    bytes += frame.size();
  }
  return bytes;
}

}  // namespace

Status RunRawZmqServer(const std::string& endpoint, uint64_t max_bytes) {
  zmq::context_t context(1);
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  try {
    router.bind(endpoint);
  } catch (const zmq::error_t& e) {
    return UnavailableError("raw ZeroMQ server cannot bind " + endpoint + ": " + e.what());
  }
  const std::vector<std::byte> buffer = PatternBytes(max_bytes);
  while (true) {
    zmq::message_t peer, op;
    if (!router.recv(peer, zmq::recv_flags::none)) continue;
    if (!router.get(zmq::sockopt::rcvmore)) continue;
    (void)router.recv(op, zmq::recv_flags::none);
    ReceiveRest(router);
    if (op.size() != kOpFrameBytes) continue;
    uint64_t bytes = 0;
    std::memcpy(&bytes, static_cast<const char*>(op.data()) + 1, sizeof(bytes));
    const char kind = static_cast<const char*>(op.data())[0];
    router.send(peer, zmq::send_flags::sndmore);
    const bool with_payload = kind == 'G' && bytes > 0 && bytes <= max_bytes;
    zmq::message_t header = OpFrame(kind, with_payload ? bytes : 0);
    router.send(header, with_payload ? zmq::send_flags::sndmore : zmq::send_flags::none);
    if (with_payload) SendZeroCopy(router, buffer, bytes);
  }
}

Result<Json> ZmqTransferTask(const Json& task) {
  const uint64_t size = task.at("size").get<uint64_t>();
  zmq::context_t context(1);
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(task.at("endpoint").get<std::string>());
  const std::vector<std::byte> data = PatternBytes(size);
  auto put = [&](int) -> Status {
    zmq::message_t op = OpFrame('P', size);
    dealer.send(op, zmq::send_flags::sndmore);
    SendZeroCopy(dealer, data, size);
    zmq::message_t reply;
    (void)dealer.recv(reply, zmq::recv_flags::none);
    ReceiveRest(dealer);
    return Status::Ok();
  };
  auto get = [&](int) -> Status {
    zmq::message_t op = OpFrame('G', size);
    dealer.send(op, zmq::send_flags::none);
    zmq::message_t header;
    (void)dealer.recv(header, zmq::recv_flags::none);
    if (ReceiveRest(dealer) != size) return InternalError("raw ZeroMQ peer sent a wrong size");
    return Status::Ok();
  };
  return MeasureTransfer(DurationOf(task), size, 1, put, get);
}

Result<Json> ZmqRoundTripsTask(const Json& task) {
  const uint64_t size = task.at("size").get<uint64_t>();
  zmq::context_t context(1);
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(task.at("endpoint").get<std::string>());
  ASSIGN_OR_RETURN(Timed trips, RunTimed(DurationOf(task), [&]() -> Status {
                     zmq::message_t op = OpFrame('G', size);
                     dealer.send(op, zmq::send_flags::none);
                     zmq::message_t header;
                     (void)dealer.recv(header, zmq::recv_flags::none);
                     if (ReceiveRest(dealer) != size) {
                       return InternalError("raw ZeroMQ peer sent a wrong size");
                     }
                     return Status::Ok();
                   }));
  return Json{{"ops_per_s", trips.per_second()}};
}

}  // namespace bm::bench
