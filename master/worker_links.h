#pragma once

#include <capnp/message.h>
#include <poll.h>

#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "blockmgr/status.h"
#include "common/net/transport.h"
#include "common/security/curve_keys.h"

namespace bm {

// Where the master's commands to workers go (removeBlocks, replicateBlock, verifyBlock,
// decommission, shutdown): the seam between what the loop decides to send and the sockets.
class WorkerSender {
 public:
  virtual ~WorkerSender() = default;
  // Sends one request to the worker without blocking. kNotFound when the master has no link to
  // it; kUnavailable (or another error) when the send failed.
  virtual Status Send(std::string_view worker_id, capnp::MessageBuilder& message) = 0;
};

// The master's connections to its workers: a DEALER per registered (or journaled) worker,
// connected to its data port, on which the loop sends commands and receives their replies; and
// the CURVE public key each worker authenticated with (keys on), which the master vouches for
// to clients and its link trusts.
//
// A link lives from the worker's registration (or the master's restart, for a journaled
// worker) until the worker is forgotten (Remove). Sends never block: a worker too slow to take
// a command loses it.
//
// The loop sleeps in ::poll on the links' ZMQ_FDs (common/net/socket_drain.h): a link sent on
// since it was last drained, or not drained to the end, is "unsettled" and must be drained
// again before the loop sleeps.
//
// Not thread-safe: owned by the master's loop, used on its thread only. The context is borrowed
// and must outlive the links.
class WorkerLinks final : public WorkerSender {
 public:
  // A worker's reply: the worker that sent it and the message.
  using ReplyHandler = std::function<void(const std::string& worker_id, IncomingMessage& reply)>;

  // `keys`: the master's keypair (empty: plaintext links).
  WorkerLinks(zmq::context_t& context, CurveKeys keys, int max_messages_per_wake)
      : context_(context), keys_(std::move(keys)), max_messages_per_wake_(max_messages_per_wake) {}

  // A DEALER to the worker's data port; with keys on, a CURVE client trusting `public_key`.
  // kInvalidArgument when the address cannot be connected to. The link is not used until
  // Add() adopts it.
  Result<zmq::socket_t> Connect(const std::string& address, const std::string& public_key);
  // Adopts the link of a worker (replacing any it had) and, when not empty, its public key.
  void Add(const std::string& worker_id, zmq::socket_t link, const std::string& public_key);
  // Forgets the worker's link and key.
  void Remove(std::string_view worker_id);
  bool Contains(std::string_view worker_id) const { return links_.contains(worker_id); }

  // The worker's CURVE key as it registered with it; empty with keys off or when unknown.
  const std::string& Key(std::string_view worker_id) const;

  // Stamps every request sent with the leader's epoch (Request.epoch), so that workers refuse
  // the commands of a deposed leader. 0 (no election) by default.
  void set_epoch(uint64_t epoch) { epoch_ = epoch; }
  Status Send(std::string_view worker_id, capnp::MessageBuilder& message) override;

  // ---- the loop's poll ----
  // Appends each link's ZMQ_FD to `fds`, in the order DrainReady() reads them.
  void AddPollFds(std::vector<pollfd>& fds);
  // Whether some link must be drained before the loop sleeps.
  bool unsettled() const { return !unsettled_.empty(); }
  // Marks every link unsettled (the loop's first pass drains everything).
  void UnsettleAll();
  // Receives the replies waiting on the links whose fd fired in `fds` (the entries
  // AddPollFds() appended, with their revents) or that are unsettled, and hands each to
  // `handle`. `handle` must not add or remove links.
  void DrainReady(std::span<const pollfd> fds, const ReplyHandler& handle);
  // Receives what waits on every unsettled link (no poll needed), as DrainReady.
  void DrainUnsettled(const ReplyHandler& handle);

 private:
  void Drain(const std::string& worker_id, zmq::socket_t& link, const ReplyHandler& handle);

  zmq::context_t& context_;
  const CurveKeys keys_;
  const int max_messages_per_wake_;
  uint64_t epoch_ = 0;
  std::map<std::string, zmq::socket_t, std::less<>> links_;         // by worker id
  std::map<std::string, std::string, std::less<>> keys_by_worker_;  // keys on: by worker id
  std::set<std::string, std::less<>> unsettled_;                    // worker ids
  // The links in the order of the last AddPollFds().
  std::vector<std::pair<const std::string*, zmq::socket_t*>> polled_;
};

}  // namespace bm
