#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "blockmgr/status.h"
#include "common/core/clock.h"
#include "common/net/transport.h"
#include "worker/client_replies.h"
#include "worker/job_thread.h"
#include "worker/shuffle_files.h"
#include "worker/shuffle_forwarder.h"
#include "worker/shuffle_store.h"
#include "worker/worker_status.h"

namespace bm {

// A page of a shuffle stream for a reader on this host (LocalReadServer): `file` is the
// partition file opened read-only when the page's pieces lie there (Page::file), for the reader
// to map; otherwise the pieces' bytes lie in the store's chunks the page holds.
struct OpenedShufflePage {
  ShuffleStore::Page page;
  OwnedFd file;
};

// Serves the shuffle requests a worker answers (PROTOCOL.md, "Shuffles"): the master's
// shuffleAssigned and removeShuffle, mappers' pushShuffle and reducers' readShuffle, by
// reading them into the ShuffleStore's terms and framing its answers. On success the reply
// was sent (or, for a read from disk, will be when the read completes); on failure the caller
// sends the error.
//
// With disks, the store's pieces are written to partition files (ShuffleFiles) on a job
// thread of the handler's, so the loop never waits on a disk: the loop calls FlushDue() each
// turn and RunCompletions() when completion_fd() turns readable; reads of written pieces run
// there too and are answered from their completions.
//
// For _2 shuffles the worker is told which streams it is the primary of, and their replicas
// (ShuffleAssigned.forwards): a push's pieces of those streams are forwarded to the replicas
// (ShuffleForwarder) and the push is answered once every replica holds them, or with why one
// does not (kUnavailable: the writer pushes again, and the master replaces a lost replica).
//
// Owns the store, the job thread and the forwarder; borrows the replies, the counters and the
// clock, which must outlive it. Not thread-safe: owned by the worker's loop.
class ShuffleHandler {
 public:
  // `disk_dirs` empty: memory only. `forwarder` null: pushes are held here only (a worker
  // without peers, in tests).
  ShuffleHandler(std::string worker_id, ShuffleStore::Limits limits,
                 std::vector<std::string> disk_dirs, ClientReplies& replies,
                 WorkerCounters& counters, const Clock& clock,
                 std::unique_ptr<ShuffleForwarder> forwarder = nullptr);
  // Writes what is still in memory and waits for it (a stopping worker keeps its partitions).
  ~ShuffleHandler();
  ShuffleHandler(const ShuffleHandler&) = delete;
  ShuffleHandler& operator=(const ShuffleHandler&) = delete;

  // Takes in what the disks kept across a restart (before the worker serves; blocks on the
  // disks). Returns how many shuffles.
  size_t LoadKept();

  Status HandleAssigned(IncomingMessage& message, uint64_t id);
  Status HandleRemove(IncomingMessage& message, uint64_t id);
  Status HandlePush(IncomingMessage& message, uint64_t id);
  Status HandleRead(IncomingMessage& message, uint64_t id);

  // A page as HandleRead reads it, for the local-read socket (readShuffle there): `done` runs on
  // the loop, at once for pieces in memory or an error, from a completion once a partition file
  // is open. The caller authorizes the read, and catches the reader's kj exceptions.
  // Of pieces in memory, a page holds at most `max_memory_bytes` (what one packet carries).
  using LocalPageDone = std::function<void(Result<OpenedShufflePage>)>;
  void ReadForLocal(proto::ReadShuffle::Reader read, uint64_t max_memory_bytes,
                    const LocalPageDone& done);

  // Hands the partitions due to the job thread (all with pieces in memory, with `all`).
  void FlushDue(bool all = false);
  // Readable (eventfd) while completions wait; -1 without disks.
  int completion_fd() const { return jobs_ ? jobs_->wake_fd() : -1; }
  // Runs the finished writes' and reads' completions; returns how many.
  size_t RunCompletions();
  std::optional<TimePoint> NextDeadline() const { return store_.NextFlush(); }
  // Readable while replicas' answers to forwards wait; -1 without a forwarder.
  int forward_fd() const { return forwarder_ ? forwarder_->wake_fd() : -1; }
  // Answers the pushes whose forwards all came back; returns how many forwards came back.
  size_t RunForwardCompletions();
  // Sends the forwards of the pushes handled since the last call, together (once a turn).
  void SendForwards() {
    if (forwarder_) forwarder_->SendQueued();
  }

  const ShuffleStore& store() const { return store_; }

 private:
  // The page a readShuffle asks for (commits, cursor, bounded page size).
  Result<ShuffleStore::Page> PageOf(proto::ReadShuffle::Reader read,
                                    uint64_t max_memory_bytes = UINT64_MAX) const;
  // Frames the page's pieces (which borrow their chunks) into a shufflePieces reply.
  void SendPage(const zmq::message_t& peer, uint64_t id, const ShuffleStore::Page& page);
  // Answers a push the store took: ok, or shufflePushed naming the `full` streams.
  void SendPushed(const zmq::message_t& peer, uint64_t id, const std::vector<uint32_t>& full);

  // A push held here whose pieces went to replicas: answered once every forward came back.
  struct AwaitedPush {
    std::shared_ptr<const zmq::message_t> peer;
    uint64_t id = 0;
    std::vector<uint32_t> full;
    size_t forwards = 0;  // not answered yet
    Status failed;        // the first replica's refusal
  };
  // Hands the pushed pieces of streams with a replica to the forwarder, one forward per
  // replica; returns how many (0: nothing to forward, answer now). kUnavailable when a stream's
  // replica is not registered: the writer pushes again once the master replaced it.
  Result<size_t> Forward(uint64_t shuffle_id, uint32_t map, uint32_t attempt,
                         const std::vector<ShuffleStore::Piece>& pieces,
                         const std::vector<ChunkPtr>& chunks, const std::vector<uint32_t>& full,
                         uint64_t ticket);
  void ForwardDone(uint64_t ticket, const ShuffleReplica& replica, const Status& held);

  ShuffleStore store_;
  ClientReplies& replies_;
  WorkerCounters& counters_;                   // shuffle pieces and bytes, for /metrics
  std::shared_ptr<const ShuffleFiles> files_;  // null without disks; shared with jobs
  // The streams this worker is the primary of in _2 shuffles, by shuffle, with their replicas.
  std::map<uint64_t, std::map<uint32_t, ShuffleReplica>> replicas_;
  std::unordered_map<uint64_t, AwaitedPush> awaited_;  // by ticket
  uint64_t next_ticket_ = 1;
  std::unique_ptr<ShuffleForwarder> forwarder_;  // null: nothing is forwarded
  std::unique_ptr<JobThread> jobs_;              // last: joined first
};

}  // namespace bm
