#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/transport.h"
#include "worker/client_replies.h"
#include "worker/job_thread.h"
#include "worker/shuffle_files.h"
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
// Owns the store and the job thread; borrows the replies, the counters and the clock, which
// must outlive it. Not thread-safe: owned by the worker's loop.
class ShuffleHandler {
 public:
  // `disk_dirs` empty: memory only.
  ShuffleHandler(std::string worker_id, ShuffleStore::Limits limits,
                 std::vector<std::string> disk_dirs, ClientReplies& replies,
                 WorkerCounters& counters, const Clock& clock);
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

  const ShuffleStore& store() const { return store_; }

 private:
  // The page a readShuffle asks for (commits, cursor, bounded page size).
  Result<ShuffleStore::Page> PageOf(proto::ReadShuffle::Reader read,
                                    uint64_t max_memory_bytes = UINT64_MAX) const;
  // Frames the page's pieces (which borrow their chunks) into a shufflePieces reply.
  void SendPage(const zmq::message_t& peer, uint64_t id, const ShuffleStore::Page& page);

  ShuffleStore store_;
  ClientReplies& replies_;
  WorkerCounters& counters_;                   // shuffle pieces and bytes, for /metrics
  std::shared_ptr<const ShuffleFiles> files_;  // null without disks; shared with jobs
  std::unique_ptr<JobThread> jobs_;            // last: joined first
};

}  // namespace bm
