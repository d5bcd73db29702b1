#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "blockmgr/chunk.h"
#include "blockmgr/status.h"
#include "common/security/curve_keys.h"

namespace zmq {
class context_t;
}

namespace bm {

class JobThread;
class WorkerChannels;

// A _2 shuffle's replica as the master named it to the stream's primary (ShuffleAssigned.
// forwards). An empty address: the replica is not registered (dropped, not replaced yet).
struct ShuffleReplica {
  std::string worker_id;
  std::string address;
  std::string public_key;
  bool operator==(const ShuffleReplica&) const = default;
};

// Pieces a stream's primary took, forwarded to the replica as a pushShuffle{forwarded}.
struct ShuffleForward {
  struct Piece {
    uint32_t stream = 0;
    uint32_t sequence = 0;
    uint32_t first_sequence = 0;
    uint32_t length = 0;
    uint64_t digest = 0;
  };
  uint64_t shuffle_id = 0;
  uint32_t map = 0;
  uint32_t attempt = 0;
  std::vector<Piece> pieces;
  std::vector<ChunkPtr> payload;  // the pieces' bytes, back to back (borrowed from the push)
};

// Sends the forwards of a worker's _2 shuffle streams to their replicas (PROTOCOL.md,
// "Shuffles": the primary acknowledges a push once its replica holds it, Kafka's acks=all).
// One lane per replica address: a thread that sends the lane's forwards in order, so the loop
// never waits on a peer, and a slow or dead replica holds up only the pushes bound for it. The
// forwards submitted in one turn of the loop go together: all sent, then their answers awaited,
// so a replica has several in flight (one at a time cost a round trip each). Each answer comes
// back to the loop as a completion (RunCompletions, once wake_fd() is readable) calling the
// forward's `done` with the replica's verdict.
//
// Owns its lanes; borrows the ZeroMQ context, which must outlive it. Submit, SendQueued,
// RunCompletions and wake_fd are for the loop's thread.
class ShuffleForwarder {
 public:
  using Done = std::function<void(const Status& held)>;

  // `keys`: this worker's keypair (empty with keys off), which the replicas authenticate;
  // `timeout`: how long a replica may take to answer one forward.
  ShuffleForwarder(zmq::context_t& context, CurveKeys keys, std::chrono::milliseconds timeout);
  // Forwards still queued are dropped unsent (their `done` never runs): a stopping worker
  // answers nobody anyway.
  ~ShuffleForwarder();
  ShuffleForwarder(const ShuffleForwarder&) = delete;
  ShuffleForwarder& operator=(const ShuffleForwarder&) = delete;

  // Queues a forward; SendQueued() hands the queued ones to their lanes.
  void Submit(const ShuffleReplica& replica, ShuffleForward forward, Done done);
  void SendQueued();
  size_t RunCompletions();
  int wake_fd() const { return wake_fd_; }

 private:
  struct Lane;
  struct Queued {
    ShuffleReplica replica;
    ShuffleForward forward;
    Done done;
  };

  zmq::context_t& context_;
  const CurveKeys keys_;
  const std::chrono::milliseconds timeout_;
  const int wake_fd_;
  // Set first in the destructor: lanes skip what is still queued.
  std::shared_ptr<std::atomic<bool>> stopping_;
  std::map<std::string, std::unique_ptr<Lane>> lanes_;  // by replica address
  std::map<std::string, std::vector<Queued>> queued_;   // by replica address
};

}  // namespace bm
