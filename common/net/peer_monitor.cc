#include "common/net/peer_monitor.h"

#include <cstring>

namespace bm {

Result<std::unique_ptr<PeerMonitor>> PeerMonitor::Create(zmq::context_t& context,
                                                         zmq::socket_t& router,
                                                         const std::string& name, int events) {
  const std::string endpoint = "inproc://peer-monitor-" + name;
  if (zmq_socket_monitor(router.handle(), endpoint.c_str(), events) != 0) {
    return InternalError("cannot monitor " + name + ": " + zmq_strerror(zmq_errno()));
  }
  try {
    return std::unique_ptr<PeerMonitor>(new PeerMonitor(context, router, endpoint));
  } catch (const zmq::error_t& e) {
    zmq_socket_monitor(router.handle(), nullptr, 0);
    return InternalError("cannot connect to the monitor of " + name + ": " + e.what());
  }
}

PeerMonitor::PeerMonitor(zmq::context_t& context, zmq::socket_t& router, std::string endpoint)
    : router_(router), endpoint_(std::move(endpoint)), events_(context, zmq::socket_type::pair) {
  events_.set(zmq::sockopt::linger, 0);
  events_.connect(endpoint_);
}

PeerMonitor::~PeerMonitor() {
  // Stops the monitor before its socket closes; the router may already be closed with it.
  if (router_.handle() != nullptr) zmq_socket_monitor(router_.handle(), nullptr, 0);
}

std::vector<int> PeerMonitor::TakeClosed() {
  std::vector<int> closed;
  for (const Event& event : TakeEvents()) {
    if (event.kind == ZMQ_EVENT_DISCONNECTED) closed.push_back(static_cast<int>(event.value));
  }
  return closed;
}

std::vector<PeerMonitor::Event> PeerMonitor::TakeEvents() {
  std::vector<Event> events;
  while (true) {
    // An event is two frames: [uint16 event, uint32 value] [endpoint].
    zmq::message_t frame;
    if (!events_.recv(frame, zmq::recv_flags::dontwait)) break;
    bool more = frame.more();
    if (frame.size() >= 6) {
      Event event{};
      std::memcpy(&event.kind, frame.data(), sizeof(event.kind));
      std::memcpy(&event.value, static_cast<const char*>(frame.data()) + 2, sizeof(event.value));
      events.push_back(event);
    }
    while (more) {
      zmq::message_t rest;
      if (!events_.recv(rest, zmq::recv_flags::dontwait)) break;
      more = rest.more();
    }
  }
  return events;
}

}  // namespace bm
