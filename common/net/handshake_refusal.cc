#include "common/net/handshake_refusal.h"

#include <zmq.h>

namespace bm {

std::optional<Status> HandshakeRefusal(const PeerMonitor::Event& event, const std::string& address,
                                       bool has_keys) {
  if (event.kind == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH && event.value == 500) {
    // blockmgr's ZAP handler answers 500 to a key it allows that holds the most connections
    // one key may have open (ConnectionLimit); a key it does not allow gets 400.
    return UnavailableError("handshake refused by " + address +
                            " for now: this key holds the most connections one key may have "
                            "open (--max-connections-per-key); retry later");
  }
  if (event.kind == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
    return PermissionDeniedError("authentication refused by " + address +
                                 " (its allow-list does not hold this key)");
  }
  if (event.kind == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
      event.value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
    if (has_keys) {
      return PermissionDeniedError(address +
                                   " does not use keys (an --insecure server?) but this side "
                                   "has a key: both must run with keys, or both without");
    }
    return PermissionDeniedError(address +
                                 " requires keys: give --key and --master-key (or "
                                 "BLOCKMGR_KEY and BLOCKMGR_MASTER_KEY)");
  }
  if (event.kind == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && has_keys) {
    return PermissionDeniedError("secure handshake with " + address + " failed (protocol error " +
                                 std::to_string(event.value) +
                                 "): is its public key the one this side was given?");
  }
  return std::nullopt;
}

}  // namespace bm
