#include "worker/put_handler.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/core/digest.h"
#include "common/core/protocol.h"
#include "worker/wire.h"

namespace bm {
namespace {

std::string PeerKey(const zmq::message_t& peer) {
  return std::string(static_cast<const char*>(peer.data()), peer.size());
}

std::string CorruptedInTransit(const std::string& block, uint64_t offset, uint64_t bytes,
                               const std::string& where) {
  spdlog::warn(
      "piece of {} at offset {} ({} bytes) was corrupted in transit: {} does not match the "
      "sender's; refused, the sender resends it",
      block, offset, bytes, where);
  return "piece of " + block + " at offset " + std::to_string(offset) + " (" +
         std::to_string(bytes) + " bytes) was corrupted in transit: " + where +
         " does not match; resend it";
}

// Ok when the piece's bytes match the digest its sender computed (or it sent none).
Status CheckPieceDigest(const std::vector<ChunkPtr>& chunks, std::optional<uint64_t> expected,
                        const std::string& block, uint64_t offset) {
  if (!expected.has_value()) return Status::Ok();
  StreamingDigest digest;
  uint64_t bytes = 0;
  for (const ChunkPtr& chunk : chunks) {
    digest.Update(chunk->bytes());
    bytes += chunk->size();
  }
  if (digest.value() == *expected) return Status::Ok();
  return DataLossError(CorruptedInTransit(block, offset, bytes, "its digest"));
}

// The piece's unit digests, computed in one pass over its bytes, when they match the ones its
// sender computed: the worker stores these and never hashes the bytes again. kDataLoss when
// they do not (corrupted in transit).
Result<std::vector<uint64_t>> CheckPieceUnits(const std::vector<ChunkPtr>& chunks,
                                              const std::vector<uint64_t>& expected,
                                              const std::string& block, uint64_t offset) {
  std::vector<std::span<const std::byte>> spans;
  spans.reserve(chunks.size());
  uint64_t bytes = 0;
  for (const ChunkPtr& chunk : chunks) {
    spans.push_back(chunk->bytes());
    bytes += chunk->size();
  }
  std::vector<uint64_t> units = UnitDigestsOf(spans);
  if (units == expected) return units;
  size_t unit = 0;
  while (unit < units.size() && unit < expected.size() && units[unit] == expected[unit]) ++unit;
  return DataLossError(CorruptedInTransit(block, offset, bytes,
                                          "the digest of its unit at block offset " +
                                              std::to_string(offset + unit * kDigestUnitBytes)));
}

}  // namespace

struct PutPiece {
  BlockId block = BlockId::Broadcast(0);
  StorageLevel level = StorageLevel::kMemoryOnly;
  uint64_t total_size = 0;
  uint64_t offset = 0;
  bool last = false;
  uint64_t upload_id = 0;
  PutVersion version;
  std::optional<uint64_t> digest;
  std::vector<uint64_t> unit_digests;
};

namespace {

Result<PutPiece> ParsePiece(IncomingMessage& message) {
  PutPiece piece;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::PutBlock::Reader put = message.request().getPutBlock();
    BM_ASSIGN_OR_RETURN(piece.block, ParseWireBlockId(put.getBlockId()));
    if (!IsKnownLevel(put.getLevel())) return InvalidArgumentError("unknown storage level");
    piece.level = FromProto(put.getLevel());
    piece.total_size = put.getTotalSize();
    piece.offset = put.getOffset();
    piece.last = put.getLast();
    piece.upload_id = put.getUploadId();
    piece.version = PutVersion{.token = put.getVersion(),
                               .fresh = !put.getReplica(),
                               .lease = put.getLeaseToken(),
                               .compute_cost_us = put.getComputeCostUs()};
    if (put.getDigested()) piece.digest = put.getPieceDigest();
    piece.unit_digests.reserve(put.getUnitDigests().size());
    for (uint64_t digest : put.getUnitDigests()) piece.unit_digests.push_back(digest);
    return Status::Ok();
  }));
  return piece;
}

// Checks a piece of `bytes` bytes against its upload's state: kInvalidArgument ends the upload
// (the caller aborts it), kAborted refuses only this piece.
Status CheckPieceFits(const PutPiece& piece, const UploadTable::Entry& upload, uint64_t bytes) {
  const std::string name = piece.block.ToString();
  if (piece.block != upload.block || piece.level != upload.level ||
      piece.total_size != upload.total_size) {
    return InvalidArgumentError("piece of upload " + std::to_string(piece.upload_id) +
                                " does not match its block, level or total size");
  }
  if (piece.offset > upload.next_offset && upload.awaiting_resend) {
    // Sent in the same window as a piece refused as corrupted, before the client heard of it:
    // refused, and the upload waits for the resend.
    return AbortedError("piece of " + name + " at offset " + std::to_string(piece.offset) +
                        " was not taken: waiting for the resend of offset " +
                        std::to_string(upload.next_offset));
  }
  if (piece.offset != upload.next_offset) {
    return InvalidArgumentError("piece of " + name + " at offset " + std::to_string(piece.offset) +
                                ", expected " + std::to_string(upload.next_offset));
  }
  if (bytes > upload.total_size - piece.offset) {
    return InvalidArgumentError("piece of " + name + " runs past its declared size of " +
                                std::to_string(upload.total_size) + " bytes");
  }
  if (piece.last && piece.offset + bytes != upload.total_size) {
    return InvalidArgumentError("last piece of " + name + " ends at " +
                                std::to_string(piece.offset + bytes) + " of " +
                                std::to_string(upload.total_size) + " bytes");
  }
  if (!piece.unit_digests.empty() &&
      (piece.offset % kDigestUnitBytes != 0 ||
       (!piece.last && (piece.offset + bytes) % kDigestUnitBytes != 0))) {
    return InvalidArgumentError("piece of " + name + " at offset " + std::to_string(piece.offset) +
                                " carries unit digests but is not cut at unit boundaries");
  }
  return Status::Ok();
}

// The piece's checked unit digests (empty when it carries none): kDataLoss when its bytes do
// not match what its sender computed. A piece with unit digests is hashed once here, and those
// digests are what is stored.
Result<std::vector<uint64_t>> CheckPieceIntact(const PutPiece& piece,
                                               const std::vector<ChunkPtr>& chunks) {
  const std::string name = piece.block.ToString();
  if (!piece.unit_digests.empty()) {
    return CheckPieceUnits(chunks, piece.unit_digests, name, piece.offset);
  }
  BM_RETURN_IF_ERROR(CheckPieceDigest(chunks, piece.digest, name, piece.offset));
  return std::vector<uint64_t>{};
}

}  // namespace

PutHandler::PutHandler(PutHandlerOptions options, BlockManager& blocks, MasterLink& link,
                       ClientReplies& replies, WorkerCounters& counters, const Clock& clock,
                       std::function<void()> forget_closed_connections)
    : options_(std::move(options)),
      blocks_(blocks),
      link_(link),
      replies_(replies),
      counters_(counters),
      clock_(clock),
      forget_closed_connections_(std::move(forget_closed_connections)) {}

Result<PutHandler::Piece> PutHandler::HandlePut(IncomingMessage& message, uint64_t id,
                                                uint64_t reservation) {
  BM_ASSIGN_OR_RETURN(PutPiece piece, ParsePiece(message));
  piece.version.reservation = reservation;
  const zmq::message_t& peer = *message.routing_id();
  const UploadTable::Key key{PeerKey(peer), piece.upload_id};
  const uint64_t bytes = message.payload_bytes();
  const TimePoint now = clock_.Now();

  if (bytes > kMaxPieceBytes) {
    AbortUpload(key);
    return TooLargeError("piece of " + std::to_string(bytes) + " bytes is over the " +
                         std::to_string(kMaxPieceBytes) + "-byte limit");
  }
  // Held back (no state changed) while spills are too far behind to take more bytes in RAM.
  if (bytes > 0 && !blocks_.TakesBytes(bytes)) return Piece::kMustWait;

  UploadTable::Entry* upload = nullptr;
  if (piece.offset == 0) {
    BM_ASSIGN_OR_RETURN(upload, StartUpload(key, piece, message, now));
  } else {
    upload = uploads_.Find(key);
    if (upload == nullptr) {
      return InvalidArgumentError("no upload " + std::to_string(piece.upload_id) +
                                  " in progress from this client (never started, failed or "
                                  "expired); start again from offset 0");
    }
  }
  if (Status fits = CheckPieceFits(piece, *upload, bytes); !fits.ok()) {
    if (fits.code() != StatusCode::kAborted) AbortUpload(key);
    return fits;
  }

  std::vector<ChunkPtr> chunks = message.TakePayloadChunks();
  std::erase_if(chunks, [](const ChunkPtr& chunk) { return chunk->size() == 0; });
  // Checked before anything is appended; the upload stays at this offset for the resend.
  Result<std::vector<uint64_t>> checked_units = CheckPieceIntact(piece, chunks);
  if (!checked_units.ok()) {
    ++counters_.checksum_failures_transit;
    upload->awaiting_resend = true;
    return checked_units.status();
  }
  upload->awaiting_resend = false;
  upload->next_offset += bytes;
  upload->last_activity = now;
  counters_.bytes_written += bytes;
  const BlockManager::UploadId handle = upload->upload;
  // Answered when the bytes are stored: at once in memory, when the storage thread has written
  // them on disk. The client sends its next piece after this answer.
  blocks_.AppendPut(handle, std::move(chunks), std::move(checked_units).value(),
                    [this, key, handle, peer = SharePeer(peer), id, last = piece.last,
                     version = piece.version.token](Status appended) {
                      if (!appended.ok()) {
                        ForgetUpload(key, handle);
                        replies_.SendError(*peer, id, appended);
                      } else if (!last) {
                        replies_.SendPutReply(*peer, id, Tier::kMemory, /*committed=*/false);
                      } else {
                        CommitUpload(key, handle, peer, id, version);
                      }
                    });
  return Piece::kTaken;
}

Result<UploadTable::Entry*> PutHandler::StartUpload(const UploadTable::Key& key, PutPiece& piece,
                                                    const IncomingMessage& message, TimePoint now) {
  const std::string* owner = message.peer() ? &message.peer()->public_key : nullptr;
  // A first piece always starts afresh, replacing a same-id upload the client gave up on.
  AbortUpload(key);
  // Closed connections are forgotten first: their uploads no longer count against the limits
  // below, and a descriptor just reused by this connection must not inherit a closed one's
  // fate (see PeerMonitor).
  forget_closed_connections_();
  if (decommissioning_) {
    return UnavailableError("worker " + options_.worker_id +
                            " is decommissioning: it takes no new blocks");
  }
  if (uploads_.size() >= options_.max_uploads) {
    return UnavailableError("too many uploads in progress; retry later");
  }
  if (owner && uploads_.CountOwnedBy(*owner) >= options_.max_uploads_per_key) {
    ++counters_.uploads_refused_per_key;
    const std::string why = "key '" + message.peer()->name + "' has " +
                            std::to_string(options_.max_uploads_per_key) +
                            " uploads in progress, the most one key may";
    upload_refusals_.Warn("refused a put: " + why);
    return UnavailableError(why + " (--max-uploads-per-key); retry later");
  }
  // A client from before versions sends none: the put still gets a version of its own.
  while (piece.version.token == 0) piece.version.token = version_tokens_();
  BM_ASSIGN_OR_RETURN(BlockManager::UploadId handle,
                      blocks_.BeginPut(piece.block, piece.level, piece.total_size, piece.version));
  uploads_.Insert(key,
                  UploadTable::Entry{handle, piece.block, piece.level, piece.total_size, 0, now,
                                     owner ? *owner : std::string(), message.source_fd()});
  return uploads_.Find(key);
}

void PutHandler::CommitUpload(const UploadTable::Key& key, BlockManager::UploadId handle,
                              std::shared_ptr<const zmq::message_t> peer, uint64_t id,
                              uint64_t version) {
  const std::optional<UploadTable::Entry> done = ForgetUpload(key, handle);
  if (!done) {
    replies_.SendError(*peer, id,
                       AbortedError("the upload was abandoned before its last piece was stored"));
    return;
  }
  blocks_.CommitPut(handle, [this, peer, id, block = done->block, version](Result<Tier> tier) {
    if (!tier.ok()) {
      replies_.SendError(*peer, id, tier.status());
      return;
    }
    const uint64_t seq = link_.CollectChanges();
    if (link_.acked_seq() >= seq) {
      replies_.SendPutReply(*peer, id, *tier, /*committed=*/true);
    } else {
      deferred_.push_back(DeferredPut{zmq::message_t(peer->data(), peer->size()), id, *tier, seq,
                                      clock_.Now() + options_.put_ack_timeout, block, version});
    }
  });
}

std::optional<UploadTable::Entry> PutHandler::ForgetUpload(const UploadTable::Key& key,
                                                           BlockManager::UploadId handle) {
  const UploadTable::Entry* entry = uploads_.Find(key);
  if (entry == nullptr || entry->upload != handle) return std::nullopt;  // a newer upload
  return uploads_.Erase(key);
}

Status PutHandler::HandleAbortPut(IncomingMessage& message, uint64_t id) {
  uint64_t upload_id = 0;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    upload_id = message.request().getAbortPut().getUploadId();
    return Status::Ok();
  }));
  const UploadTable::Key key{PeerKey(*message.routing_id()), upload_id};
  if (const UploadTable::Entry* upload = uploads_.Find(key)) {
    spdlog::debug("client aborted its upload of {} ({} of {} bytes received)",
                  upload->block.ToString(), upload->next_offset, upload->total_size);
  }
  AbortUpload(key);
  replies_.SendOk(*message.routing_id(), id);
  return Status::Ok();
}

void PutHandler::AbortUpload(const UploadTable::Key& key) {
  if (std::optional<UploadTable::Entry> entry = uploads_.Erase(key)) {
    blocks_.AbortPut(entry->upload);
  }
}

void PutHandler::AbortUploadsOf(int connection) {
  for (const UploadTable::Entry& entry : uploads_.TakeFromConnection(connection)) {
    spdlog::info("aborting upload of {} ({} of {} bytes received): its client disconnected",
                 entry.block.ToString(), entry.next_offset, entry.total_size);
    blocks_.AbortPut(entry.upload);
  }
}

void PutHandler::ExpireIdleUploads(TimePoint now) {
  for (const UploadTable::Entry& entry :
       uploads_.TakeIdleSince(now - options_.upload_idle_timeout)) {
    spdlog::info("aborting idle upload of {} ({} of {} bytes received)", entry.block.ToString(),
                 entry.next_offset, entry.total_size);
    blocks_.AbortPut(entry.upload);
  }
}

void PutHandler::AbortAll() {
  for (const UploadTable::Entry& entry : uploads_.TakeAll()) blocks_.AbortPut(entry.upload);
}

std::optional<TimePoint> PutHandler::NextDeadline() const {
  std::optional<TimePoint> next;
  if (std::optional<TimePoint> oldest = uploads_.OldestActivity()) {
    next = *oldest + options_.upload_idle_timeout;
  }
  if (!deferred_.empty() && (!next || deferred_.front().deadline < *next)) {
    next = deferred_.front().deadline;
  }
  return next;
}

void PutHandler::ReleaseDeferredPuts(TimePoint now, bool all) {
  for (auto& refused : link_.TakeRefused()) refused_.push_back(std::move(refused));
  while (!deferred_.empty()) {
    DeferredPut& put = deferred_.front();
    const bool acked = link_.acked_seq() >= put.needs_seq;
    if (!acked && !all && now < put.deadline) return;
    if (!acked) {
      // The master is slow or away (failing over): the put is answered, and its location
      // reaches the master with the next report or registration. Until then `locations` may
      // miss this copy, which is worth knowing.
      spdlog::warn("answering the put of {} before the master acknowledged its report",
                   put.block.ToString());
    }
    auto refused = std::find(refused_.begin(), refused_.end(),
                             std::pair<BlockId, uint64_t>{put.block, put.version});
    if (acked && refused != refused_.end()) {
      refused_.erase(refused);
      replies_.SendError(
          put.peer, put.request_id,
          AbortedError("the master refused " + put.block.ToString() +
                       ": the compute lease it was stored under is no longer held "
                       "(another client computes or stored it); it is being removed"));
    } else {
      replies_.SendPutReply(put.peer, put.request_id, put.tier, /*committed=*/true);
    }
    deferred_.pop_front();
  }
  if (deferred_.empty()) refused_.clear();
}

}  // namespace bm
