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
      PeerMonitor::Create(
          context, router,
          "master-" + std::to_string(reinterpret_cast<uintptr_t>(router.handle()))));
  return std::unique_ptr<KeyLimits>(new KeyLimits(std::move(monitor), max_connections_per_key, zap,
                                                  max_registrations_per_key, clock));
}

void KeyLimits::DrainClosed() {
  for (int fd : monitor_->TakeClosed()) connections_.Closed(fd);
}

Status KeyLimits::AdmitConnection(const IncomingMessage& message) {
  if (!message.peer()) return Status::Ok();
  // A descriptor not seen before may be a closed connection's, reused: forget the closed
  // ones first (see PeerMonitor).
  if (!connections_.Knows(message.source_fd())) DrainClosed();
  return connections_.Admit(message.source_fd(), *message.peer());
}

}  // namespace bm
