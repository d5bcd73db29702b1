#pragma once

#include <cstdint>

#include "common/status.h"
#include "common/transport.h"
#include "worker/client_replies.h"
#include "worker/shuffle_store.h"
#include "worker/worker_status.h"

namespace bm {

// Serves the shuffle requests a worker answers (PROTOCOL.md, "Shuffles"): the master's
// shuffleAssigned and removeShuffle, mappers' pushShuffle and reducers' readShuffle, by
// reading them into the ShuffleStore's terms and framing its answers. On success the reply
// was sent; on failure the caller sends the error.
//
// Owns the store; borrows the replies and the counters, which must outlive it. Not thread-safe:
// owned by the worker's loop.
class ShuffleHandler {
 public:
  ShuffleHandler(std::string worker_id, ShuffleStore::Limits limits, ClientReplies& replies,
                 WorkerCounters& counters)
      : store_(std::move(worker_id), limits), replies_(replies), counters_(counters) {}

  Status HandleAssigned(IncomingMessage& message, uint64_t id);
  Status HandleRemove(IncomingMessage& message, uint64_t id);
  Status HandlePush(IncomingMessage& message, uint64_t id);
  Status HandleRead(IncomingMessage& message, uint64_t id);

  const ShuffleStore& store() const { return store_; }

 private:
  ShuffleStore store_;
  ClientReplies& replies_;
  WorkerCounters& counters_;  // shuffle pieces and bytes, for /metrics
};

}  // namespace bm
