#pragma once

// The ZAP handler (ZeroMQ RFC 27) that decides which CURVE keys a server lets in.
//
// libzmq asks the handler bound at inproc://zeromq.zap.01 on the socket's context about every
// CURVE handshake. With no handler bound, libzmq 4.3 lets in ANY client that knows the
// server's public key, so the handler must be bound before any CURVE socket binds: Start()
// binds it on the calling thread, and the servers are created after it.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <zmq.hpp>

#include "blockmgr/status.h"
#include "common/core/mutex.h"
#include "common/security/curve_keys.h"

namespace bm {

struct AllowListOptions {
  // Folder of public certificates (*.key) allowed in, each with its role, and the tenant a
  // NAME.tenant file beside NAME.key names (common/security/tenant.h).
  std::string allow_dir;
  // The master's public key: the only key let in with the master role (a worker's handler
  // trusts it; the master's handler leaves it empty). A certificate in allow_dir claiming the
  // master role with any other key is refused.
  std::string master_public_key;
};

// Answers libzmq's authentication requests from the allow-list. Its thread owns the ZAP socket
// and the allow-list; RequestReload() and the counters are thread-safe (RequestReload() is
// also async-signal-safe). Destroy it after the sockets it authenticates are closed and before
// the context.
class ZapHandler {
 public:
  // Reads the allow-list and binds the ZAP endpoint on `context`. kNotFound when allow_dir
  // cannot be read, kUnavailable when another handler is bound already.
  static Result<std::unique_ptr<ZapHandler>> Start(zmq::context_t& context,
                                                   AllowListOptions options);
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  // Re-reads allow_dir before the next handshake is answered: keys added are let in, keys
  // removed are refused on their next connection.
  void RequestReload() { reload_requested_.store(true); }

  // Decides whether an allowed key may open one more connection, and counts it if so
  // (HandshakeConnectionLimit). Called on the handler's thread, for every handshake of an
  // allowed key that SetKeyAtLimit does not refuse already.
  class HandshakeGate {
   public:
    virtual ~HandshakeGate() = default;
    virtual bool AdmitHandshake(const std::string& public_key) = 0;
  };

  // A key at its connection limit (ConnectionLimit) is refused with ZAP status 500 until it
  // is no longer (unknown keys get 400), so its client can tell the two apart. Thread-safe.
  void SetKeyAtLimit(const std::string& public_key, bool at_limit);
  // Asks `gate` (borrowed; null: none) about every handshake from now on; a key it refuses
  // gets 500 as a key at its limit does. Thread-safe: once it returns, the previous gate is
  // no longer called, so its owner may destroy it.
  void SetHandshakeGate(HandshakeGate* gate);

  // Handshakes refused: every one (unknown keys and keys at their limit), and those of keys at
  // their connection limit.
  uint64_t refused() const { return refused_.load(); }
  uint64_t refused_at_limit() const { return refused_at_limit_.load(); }
  uint64_t accepted() const { return accepted_.load(); }
  // How many keys the allow-list holds (after the last load).
  size_t allowed_keys() const { return allowed_keys_.load(); }

 private:
  ZapHandler(AllowListOptions options, zmq::socket_t socket);
  Status Reload();
  void Run();
  void Answer();
  void LogRefusal(const std::string& address, const std::string& why);
  // Whether `public_key` may open one more connection (and, through the gate, counts it).
  bool AdmitKey(const std::string& public_key);

  // Constant after construction.
  const AllowListOptions options_;

  // Owned by the handler's thread once Run() starts.
  zmq::socket_t socket_;
  std::unordered_map<std::string, PeerIdentity> allowed_;  // by Z85 public key
  std::chrono::steady_clock::time_point last_refusal_log_{};
  uint64_t refusals_not_logged_ = 0;

  // Keys at their connection limit (Z85) and the gate, set by the server's loop, read by the
  // handler.
  Mutex at_limit_mutex_;
  std::unordered_set<std::string> at_limit_ BM_GUARDED_BY(at_limit_mutex_);
  HandshakeGate* gate_ BM_GUARDED_BY(at_limit_mutex_) = nullptr;

  std::atomic<bool> stop_{false};
  std::atomic<bool> reload_requested_{false};
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> refused_at_limit_{0};
  std::atomic<uint64_t> accepted_{0};
  std::atomic<size_t> allowed_keys_{0};
  std::thread thread_;
};

}  // namespace bm
