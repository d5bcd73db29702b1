#include "master/key_limits.h"

#include <cstdint>

namespace bm {

Result<std::unique_ptr<KeyLimits>> KeyLimits::Create(zmq::context_t& context, zmq::socket_t& router,
                                                     size_t max_connections_per_key,
                                                     ZapHandler* zap,
                                                     size_t max_registrations_per_key,
                                                     const Clock& clock) {
  BM_ASSIGN_OR_RETURN(
      std::unique_ptr<PeerMonitor> monitor,
      PeerMonitor::Create(context, router,
                          "master-" + std::to_string(reinterpret_cast<uintptr_t>(router.handle())),
                          ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED));
  return std::unique_ptr<KeyLimits>(new KeyLimits(std::move(monitor), max_connections_per_key, zap,
                                                  max_registrations_per_key, clock));
}

KeyLimits::KeyLimits(std::unique_ptr<PeerMonitor> monitor, size_t max_connections_per_key,
                     ZapHandler* zap, size_t max_registrations_per_key, const Clock& clock)
    : monitor_(std::move(monitor)),
      zap_(max_connections_per_key > 0 ? zap : nullptr),
      connections_(max_connections_per_key),
      registrations_(max_registrations_per_key, clock) {
  if (zap_ != nullptr) zap_->SetHandshakeGate(&connections_);
}

KeyLimits::~KeyLimits() {
  if (zap_ != nullptr) zap_->SetHandshakeGate(nullptr);
}

void KeyLimits::DrainClosed() {
  connections_.ApplyMonitorEvents([this] { return monitor_->TakeEvents(); });
}

Status KeyLimits::AdmitConnection(const IncomingMessage& message) {
  if (!message.peer()) return Status::Ok();
  const int fd = message.source_fd();
  if (connections_.Knows(fd)) return connections_.Admit(fd, *message.peer());
  // A descriptor not seen before may be a closed connection's, reused, or one accepted since the
  // last drain: apply the monitor's events first (see PeerMonitor).
  DrainClosed();
  Status admitted = connections_.Admit(fd, *message.peer());
  // Tied to its descriptor now, the connection no longer hides from the count of silent ones
  // the close of another key's silent connection (see HandshakeConnectionLimit).
  DrainClosed();
  return admitted;
}

}  // namespace bm
