#pragma once

#include <optional>
#include <string>

#include "blockmgr/status.h"
#include "common/net/peer_monitor.h"

namespace bm {

// What a socket monitor's handshake event says about a connection to `address` (README
// "Security"): a refusal as the Status a caller should see, or nullopt for any other event.
//   kUnavailable       the server's ZAP handler refused this key for now (500: it holds the
//                      most connections one key may have open)
//   kPermissionDenied  "authentication refused by ADDRESS" (400: not in its allow-list), or a
//                      keys / no-keys mismatch, or another failed secure handshake
// `has_keys`: whether this side uses keys (names the mismatch's side).
// Shared by RpcChannel (clients, tools) and the worker's master link.
std::optional<Status> HandshakeRefusal(const PeerMonitor::Event& event, const std::string& address,
                                       bool has_keys);

}  // namespace bm
