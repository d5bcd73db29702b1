#pragma once

// What bm-master and bm-worker do with their security flags at start-up: the safe default
// (no keys only on loopback, or when --insecure says so) and the ZAP handler.

#include <memory>
#include <string>
#include <zmq.hpp>

#include "blockmgr/status.h"
#include "common/security/curve_keys.h"
#include "common/security/zap_handler.h"

namespace bm {

// True for addresses only this machine can reach: tcp:// on 127.0.0.0/8, localhost or [::1],
// and ipc:// or inproc://.
bool IsLoopbackEndpoint(const std::string& endpoint);

// Like Redis's protected mode: a server reachable from other machines needs keys, unless the
// operator says --insecure. kInvalidArgument with the reason and the way out.
Status CheckListenSecurity(const std::string& listen, bool has_key, bool insecure);

// Loads the node's secret certificate, checks it has `role`, and starts the ZAP handler on
// `context` with `allow_dir` (which must come before any server socket binds). The master key
// let in is `master_public_key`, or for a master without one its own (standbys share it).
struct SecureNode {
  CurveKeys keys;
  std::unique_ptr<ZapHandler> zap;
};
Result<SecureNode> StartSecureNode(zmq::context_t& context, const std::string& key_file,
                                   KeyRole role, const std::string& allow_dir,
                                   const std::string& master_public_key);

}  // namespace bm
