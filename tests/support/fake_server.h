#pragma once

// An in-process server (a ROUTER on an inproc:// endpoint) for the client's unit tests, which
// check the protocol side of the client's components against it.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "blockmgr/status.h"
#include "common/core/protocol.h"
#include "common/net/transport.h"

namespace bm {

// A server answering each request with `handler` on its own thread.
class FakeServer {
 public:
  using Handler = std::function<void(IncomingMessage& request, proto::Reply::Builder reply,
                                     std::vector<zmq::message_t>& payload)>;

  FakeServer(zmq::context_t& context, const std::string& address, Handler handler)
      : socket_(context, zmq::socket_type::router), handler_(std::move(handler)) {
    ConfigureSocket(socket_);
    socket_.bind(address);
    thread_ = std::thread([this]() { Loop(); });
  }
  ~FakeServer() {
    stop_ = true;
    thread_.join();
  }

 private:
  void Loop() {
    while (!stop_) {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(5));
      if (!(item.revents & ZMQ_POLLIN)) continue;
      Result<IncomingMessage> request = ReceiveMessage(socket_, /*has_routing_id=*/true);
      if (!request.ok()) continue;
      capnp::MallocMessageBuilder message;
      proto::Reply::Builder reply = message.initRoot<proto::Reply>();
      reply.setId(request->request().getId());
      std::vector<zmq::message_t> payload;
      handler_(*request, reply, payload);
      (void)SendMessage(socket_, &*request->routing_id(), message, std::move(payload));
    }
  }

  zmq::socket_t socket_;
  Handler handler_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

inline std::vector<std::byte> Pattern(size_t size, int seed = 0) {
  std::vector<std::byte> data(size);
  for (size_t i = 0; i < size; ++i) data[i] = static_cast<std::byte>((i + seed) % 251);
  return data;
}

inline void SetError(proto::Reply::Builder reply, StatusCode code, const std::string& message) {
  bm::SetError(reply.initError(), Status(code, message));
}

}  // namespace bm
