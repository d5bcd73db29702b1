#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "blockmgr/status.h"
#include "common/security/curve_keys.h"

namespace zmq {
class context_t;
}

namespace bm {

class RpcChannel;

// The channels to workers: one RpcChannel per worker address, connected on first use and
// secured with the CURVE key the master vouched for at that address (Trust). A key that is not
// known yet is learnt through `learn_keys` (the client asks the master for its worker list,
// which trusts every key it lists); without it an unknown key is kPermissionDenied. With keys
// off every key is empty and nothing is asked.
//
// Owns its channels; borrows the ZeroMQ context, which must outlive it. Not thread-safe: one
// thread (a Client's, or the worker's replicator thread) owns it and its channels.
class WorkerChannels {
 public:
  // Learns the keys of the workers the master lists (by calling Trust for each).
  using LearnKeys = std::function<Status()>;

  // `keys` is this side's keypair (empty: plaintext), or why it could not be had: then every
  // channel and key fails with that. `timeout` is each reply's.
  WorkerChannels(zmq::context_t& context, Result<CurveKeys> keys, std::chrono::milliseconds timeout,
                 LearnKeys learn_keys = {});
  ~WorkerChannels();
  WorkerChannels(const WorkerChannels&) = delete;
  WorkerChannels& operator=(const WorkerChannels&) = delete;

  // Trusts `public_key` as the key of the worker at `address`. A channel made for another key
  // is closed. An empty key (keys off) is ignored.
  void Trust(const std::string& address, const std::string& public_key);
  // The key trusted for `address` (learning it when unknown); empty with keys off.
  Result<std::string> Key(const std::string& address);
  // The channel to `address`; kInvalidArgument for an address ZeroMQ cannot connect to.
  Result<RpcChannel*> Channel(const std::string& address);

  zmq::context_t& context() { return context_; }
  // This side's keypair; empty with keys off (or when they could not be read).
  const CurveKeys& keys() const { return keys_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  zmq::context_t& context_;
  const CurveKeys keys_;
  const Status keys_status_;
  const std::chrono::milliseconds timeout_;
  const LearnKeys learn_keys_;
  std::map<std::string, std::string> keys_by_address_;
  std::map<std::string, std::unique_ptr<RpcChannel>> channels_;  // by address
};

}  // namespace bm
