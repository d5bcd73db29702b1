#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "blockmgr/status.h"
#include "blockmgr/tier.h"
#include "common/core/clock.h"
#include "common/core/refusal_log.h"
#include "common/net/transport.h"
#include "worker/block_manager.h"
#include "worker/client_replies.h"
#include "worker/master_link.h"
#include "worker/upload_table.h"
#include "worker/worker_status.h"

namespace bm {

struct PutPiece;  // one putBlock piece as sent (put_handler.cc)

struct PutHandlerOptions {
  std::string worker_id;  // for refusals
  // See WorkerServerOptions.
  Duration upload_idle_timeout = std::chrono::seconds(60);
  Duration put_ack_timeout = std::chrono::seconds(2);
  size_t max_uploads = 4096;
  size_t max_uploads_per_key = 1024;
};

// The worker's put path (PROTOCOL.md, "putBlock"): takes the pieces of uploads into the block
// manager, checks them against their senders' digests, commits the last piece, and answers.
//
// An upload: first piece (offset 0, admitted against the upload limits) -> pieces in order ->
// last piece stored -> committed -> answered once the master acknowledged the block's report
// (or after put_ack_timeout). It ends early on a bad piece, a failed append, abortPut, its
// connection closing, or no piece for upload_idle_timeout. A piece refused as corrupted in
// transit leaves the upload waiting for its resend.
//
// A committed put's reply is deferred here until MasterLink::acked_seq() covers its report;
// the owner calls ReleaseDeferredPuts() whenever that may have moved (and at NextDeadline()).
//
// Borrows the block manager, the master link, the replies, the counters and the clock, all of
// which must outlive it; the completions it hands the block manager call back into it, so it
// must also outlive every completion the block manager still runs. Not thread-safe: owned by
// the worker's event loop.
class PutHandler {
 public:
  // What became of a piece that was not refused.
  enum class Piece {
    kTaken,     // appended (answered when stored) or answered
    kMustWait,  // held back: the RAM cannot take its bytes until spills make room
                // (BlockManager::TakesBytes); nothing was changed or answered
  };

  // `forget_closed_connections` aborts the uploads of connections that closed: called before a
  // new upload notes its connection, so a descriptor just reused by a new connection does not
  // inherit a closed one's uploads (see PeerMonitor).
  PutHandler(PutHandlerOptions options, BlockManager& blocks, MasterLink& link,
             ClientReplies& replies, WorkerCounters& counters, const Clock& clock,
             std::function<void()> forget_closed_connections);
  PutHandler(const PutHandler&) = delete;
  PutHandler& operator=(const PutHandler&) = delete;

  // A putBlock piece. On failure nothing was answered: the caller sends the error reply.
  // `reservation`: the quota reservation the master admitted a first piece's put under.
  Result<Piece> HandlePut(IncomingMessage& message, uint64_t id, uint64_t reservation = 0);
  // abortPut: answered here.
  Status HandleAbortPut(IncomingMessage& message, uint64_t id);

  // Aborts the uploads that arrived on `connection` (it closed), releasing their space.
  void AbortUploadsOf(int connection);
  // Aborts the uploads idle since before now - upload_idle_timeout.
  void ExpireIdleUploads(TimePoint now);
  // Aborts every upload in progress (the worker stops).
  void AbortAll();
  // Answers the deferred put replies whose reports the master acknowledged (or refused), and
  // those past their deadline; `all`: every one (the worker stops).
  void ReleaseDeferredPuts(TimePoint now, bool all = false);
  // When ExpireIdleUploads or ReleaseDeferredPuts next has something to do; nullopt: never.
  std::optional<TimePoint> NextDeadline() const;

  // The master's decommission: new uploads are refused from now on.
  void Decommission() { decommissioning_ = true; }
  bool decommissioning() const { return decommissioning_; }
  size_t uploads_in_progress() const { return uploads_.size(); }

 private:
  // A committed put whose reply waits for the master (see the class comment).
  struct DeferredPut {
    zmq::message_t peer;
    uint64_t request_id;
    Tier tier;
    uint64_t needs_seq;  // reply once MasterLink::acked_seq() reaches this
    TimePoint deadline;  // or now
    BlockId block;       // the master may refuse it (MasterLink::TakeRefused)
    uint64_t version;
  };

  // Admits a first piece and begins its upload; returns its entry.
  Result<UploadTable::Entry*> StartUpload(const UploadTable::Key& key, PutPiece& piece,
                                          const IncomingMessage& message, TimePoint now);
  // After the last piece is stored: commits the upload and answers (or defers the answer).
  void CommitUpload(const UploadTable::Key& key, BlockManager::UploadId handle,
                    std::shared_ptr<const zmq::message_t> peer, uint64_t id, uint64_t version);
  // Takes the upload out of the table unless the key now names a newer upload.
  std::optional<UploadTable::Entry> ForgetUpload(const UploadTable::Key& key,
                                                 BlockManager::UploadId handle);
  void AbortUpload(const UploadTable::Key& key);

  // Constant after construction.
  const PutHandlerOptions options_;
  BlockManager& blocks_;
  MasterLink& link_;
  ClientReplies& replies_;
  WorkerCounters& counters_;
  const Clock& clock_;
  const std::function<void()> forget_closed_connections_;

  UploadTable uploads_;
  RefusalLog upload_refusals_;
  std::deque<DeferredPut> deferred_;  // in seq and deadline order
  // Fresh blocks the master refused, whose deferred puts fail (see ReleaseDeferredPuts).
  std::vector<std::pair<BlockId, uint64_t>> refused_;
  // Set by the master's `decommission`: new uploads are refused.
  bool decommissioning_ = false;
  // Versions for uploads that name none (clients from before versions).
  std::mt19937_64 version_tokens_{std::random_device{}()};
};

}  // namespace bm
