#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/chunk.h"
#include "blockmgr/status.h"
#include "blockmgr/storage_level.h"
#include "blockmgr/tier.h"
#include "blockmgr/types.h"

namespace bm {

class PieceSource;
class RpcChannel;
class WorkerChannels;

// The version an upload stores (PutBlock.version / replica in schema/messages.capnp).
struct UploadVersion {
  uint64_t token = 0;
  bool replica = false;          // a copy of an existing version, not a new put
  uint64_t lease = 0;            // PutOptions::compute_lease
  uint64_t compute_cost_us = 0;  // PutOptions::compute_cost; 0 = not stated
  // How many copies the put stores (PutBlock.copies), all admitted against a tenant's quota at
  // the first; 0 = one.
  uint32_t copies = 0;
};

// One block streamed to one or more workers at once, piece by piece (PROTOCOL.md, "Uploads").
// Each piece is read from the source once and sent to every target, up to kPutWindowPieces of
// them unacknowledged per target, so the next pieces are read and hashed while the workers
// take the earlier ones. A piece is kept until every target still in the upload acknowledged
// it; its chunks are shared, not copied, between the targets' messages.
//
// The steps: ReadPiece (the next piece and the digests the workers check it against),
// SendPiece (one piece to one target), TakeReply (a target's answer to its oldest piece in
// flight; a piece corrupted in transit is sent again, once) and GiveUp (a target that failed
// is dropped from the upload and releases its claim on the worker at once). A failure of the
// source gives up every target.
//
// One use: construct, Run() once. Borrows the channels and the source, which must outlive it.
// Not thread-safe: runs on the caller's thread.
class BlockUpload {
 public:
  // Pieces unacknowledged at once per worker: 4 of 4 MiB keep the network and the hashing on
  // both sides busy together while an upload holds at most 16 MiB in flight.
  static constexpr size_t kPutWindowPieces = 4;

  BlockUpload(WorkerChannels& channels, const BlockId& id, StorageLevel level,
              UploadVersion version, PieceSource& source);
  BlockUpload(const BlockUpload&) = delete;
  BlockUpload& operator=(const BlockUpload&) = delete;

  // Streams the block to every target; one result per target, in order. Each target's upload
  // id is drawn from `upload_ids`.
  std::vector<Result<PutResult>> Run(const std::vector<const WorkerInfo*>& targets,
                                     std::mt19937_64& upload_ids);

 private:
  struct Piece {
    uint64_t offset = 0;
    std::vector<ChunkPtr> chunks;
    bool last = false;
    // The piece's unit digests when it is cut on unit boundaries (the worker checks them and
    // stores them as they are), else one digest of its bytes.
    std::vector<uint64_t> unit_digests;
    std::optional<uint64_t> piece_digest;
  };
  // One worker's part of the upload. Pieces [acked, sent) are in flight; a target with a
  // failure is out of the upload.
  struct Target {
    const WorkerInfo* worker = nullptr;
    RpcChannel* channel = nullptr;
    uint64_t upload_id = 0;
    std::optional<Status> failure;
    Tier tier = Tier::kMemory;
    bool started = false;            // a piece was sent: the worker may hold a claim for it
    size_t acked = 0;                // pieces the worker acknowledged (by index)
    size_t sent = 0;                 // index of the next piece to send
    std::deque<uint64_t> in_flight;  // request ids of pieces [acked, sent)
    std::set<size_t> resent;         // pieces sent again after a transit corruption
  };

  bool Live() const;
  // Lets go of the pieces every live target acknowledged and reads the next ones, up to the
  // window ahead of the slowest target. A source failure gives up every target.
  void FillWindow();
  // Sends each live target the pieces read that its window allows.
  void SendPieces();
  Status ReadPiece();
  Status SendPiece(Target& target, const Piece& piece);
  void TakeReply(Target& target);
  void GiveUp(Target& target, Status why);

  WorkerChannels& channels_;
  PieceSource& source_;
  const std::string block_;
  const StorageLevel level_;
  const UploadVersion version_;
  const std::chrono::milliseconds timeout_;
  std::vector<Target> targets_;
  std::deque<Piece> window_;  // pieces read and not yet acknowledged by every live target
  size_t window_base_ = 0;    // index of window_.front()
  bool source_done_ = false;  // the last piece was read
};

}  // namespace bm
