#include "bench/raw_zmq.h"

#include <unistd.h>

#include <cstring>
#include <vector>
#include <zmq.hpp>

#include "bench/proc_info.h"
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

// Sends `bytes` of `buffer` as messages of kFrameBytes without copying, each addressed to `peer`
// when given (ROUTER side).
void SendZeroCopy(zmq::socket_t& socket, const zmq::message_t* peer,
                  const std::vector<std::byte>& buffer, uint64_t bytes) {
  for (uint64_t offset = 0; offset < bytes; offset += kFrameBytes) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kFrameBytes, bytes - offset));
    if (peer) socket.send(zmq::buffer(peer->data(), peer->size()), zmq::send_flags::sndmore);
    zmq::message_t frame(const_cast<std::byte*>(buffer.data() + offset), n, &KeepBuffer, nullptr);
    socket.send(frame, zmq::send_flags::none);
  }
}

// Receives messages until `bytes` have arrived.
Status ReceiveBytes(zmq::socket_t& socket, uint64_t bytes) {
  uint64_t received = 0;
  while (received < bytes) {
    zmq::message_t frame;
    if (!socket.recv(frame, zmq::recv_flags::none)) return UnavailableError("receive interrupted");
    received += frame.size();
  }
  return received == bytes ? Status::Ok() : InternalError("raw ZeroMQ peer sent a wrong size");
}

uint64_t OpBytes(const zmq::message_t& op) {
  uint64_t bytes = 0;
  std::memcpy(&bytes, static_cast<const char*>(op.data()) + 1, sizeof(bytes));
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
  uint64_t upload_left = 0;  // bytes still to come of a 'P'
  while (true) {
    zmq::message_t peer, frame;
    if (!router.recv(peer, zmq::recv_flags::none) || !router.get(zmq::sockopt::rcvmore)) continue;
    (void)router.recv(frame, zmq::recv_flags::none);
    if (upload_left > 0) {
      upload_left -= std::min<uint64_t>(upload_left, frame.size());
      if (upload_left == 0) {
        router.send(peer, zmq::send_flags::sndmore);
        router.send(OpFrame('P', 0), zmq::send_flags::none);
      }
      continue;
    }
    if (frame.size() != kOpFrameBytes) continue;
    const char kind = static_cast<const char*>(frame.data())[0];
    const uint64_t bytes = OpBytes(frame);
    if (kind == 'G' && bytes <= max_bytes) SendZeroCopy(router, &peer, buffer, bytes);
    if (kind == 'P') upload_left = bytes;
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
    dealer.send(OpFrame('P', size), zmq::send_flags::none);
    SendZeroCopy(dealer, nullptr, data, size);
    zmq::message_t ack;
    if (!dealer.recv(ack, zmq::recv_flags::none)) return UnavailableError("receive interrupted");
    return Status::Ok();
  };
  auto get = [&](int) -> Status {
    dealer.send(OpFrame('G', size), zmq::send_flags::none);
    return ReceiveBytes(dealer, size);
  };
  return MeasureTransfer(DurationOf(task), size, 1, put, get);
}

Result<Json> ZmqRoundTripsTask(const Json& task) {
  const uint64_t size = task.at("size").get<uint64_t>();
  zmq::context_t context(1);
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(task.at("endpoint").get<std::string>());
  // One of several concurrent clients (ConcurrentClients): the connection is made and the
  // first round trip done before the common start, as a lookup client pings first.
  int64_t late_ms = 0;
  if (task.contains("start_at_ms")) {
    dealer.send(OpFrame('G', size), zmq::send_flags::none);
    BM_RETURN_IF_ERROR(ReceiveBytes(dealer, size));
    late_ms = WaitForCommonStart(task.at("start_at_ms").get<int64_t>());
  }
  const double cpu_before = ProcessCpuSeconds(getpid());
  BM_ASSIGN_OR_RETURN(Timed trips, RunTimed(DurationOf(task), [&]() -> Status {
                        dealer.send(OpFrame('G', size), zmq::send_flags::none);
                        return ReceiveBytes(dealer, size);
                      }));
  const double ops = std::max<double>(1.0, static_cast<double>(trips.ops));
  return Json{{"ops_per_s", trips.per_second()},
              {"late_ms", late_ms},
              {"cpu_us_per_op", (ProcessCpuSeconds(getpid()) - cpu_before) * 1e6 / ops}};
}

}  // namespace bm::bench
