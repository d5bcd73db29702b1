#include "transfer/block_upload.h"

#include <algorithm>
#include <climits>
#include <span>
#include <utility>
#include <zmq.hpp>

#include "common/core/digest.h"
#include "common/core/protocol.h"
#include "common/net/transport.h"
#include "transfer/abort_put.h"
#include "transfer/peer_calls.h"
#include "transfer/piece_source.h"
#include "transfer/worker_channels.h"

namespace bm {
namespace {

// The worker holds the reply to a put's last piece until the master recorded the block.
constexpr std::chrono::milliseconds kCommitSlack{2000};

}  // namespace

BlockUpload::BlockUpload(WorkerChannels& channels, const BlockId& id, StorageLevel level,
                         UploadVersion version, PieceSource& source)
    : channels_(channels),
      source_(source),
      block_(id.ToString()),
      level_(level),
      version_(version),
      timeout_(channels.timeout()) {}

std::vector<Result<PutResult>> BlockUpload::Run(const std::vector<const WorkerInfo*>& targets,
                                                std::mt19937_64& upload_ids) {
  for (const WorkerInfo* worker : targets) {
    Target target;
    target.worker = worker;
    Result<RpcChannel*> channel = channels_.Channel(worker->address);
    if (channel.ok()) {
      target.channel = *channel;
      target.upload_id = upload_ids();
    } else {
      target.failure = channel.status();
    }
    targets_.push_back(std::move(target));
  }
  while (Live()) {
    FillWindow();
    if (!Live()) break;
    SendPieces();
    bool waited = false;
    for (Target& target : targets_) {
      if (target.failure || target.in_flight.empty()) continue;
      TakeReply(target);
      waited = true;
    }
    if (!waited) break;  // every live target acknowledged every piece
  }
  std::vector<Result<PutResult>> results;
  for (Target& target : targets_) {
    if (target.failure) {
      results.emplace_back(*target.failure);
    } else {
      results.emplace_back(
          PutResult{target.worker->id, target.worker->address, target.tier, source_.size()});
    }
  }
  return results;
}

bool BlockUpload::Live() const {
  return std::any_of(targets_.begin(), targets_.end(),
                     [](const Target& t) { return !t.failure.has_value(); });
}

void BlockUpload::FillWindow() {
  size_t slowest = SIZE_MAX;
  for (const Target& target : targets_) {
    if (!target.failure) slowest = std::min(slowest, target.acked);
  }
  while (window_base_ < slowest && !window_.empty()) {
    window_.pop_front();
    ++window_base_;
  }
  while (!source_done_ && window_base_ + window_.size() < slowest + kPutWindowPieces) {
    if (Status read = ReadPiece(); !read.ok()) {
      for (Target& target : targets_) {
        if (!target.failure) GiveUp(target, read);
      }
      return;
    }
  }
}

void BlockUpload::SendPieces() {
  const size_t produced = window_base_ + window_.size();
  for (Target& target : targets_) {
    while (!target.failure && target.sent < produced &&
           target.sent < target.acked + kPutWindowPieces) {
      if (Status sent = SendPiece(target, window_[target.sent - window_base_]); !sent.ok()) {
        GiveUp(target, sent);
      }
    }
  }
}

Status BlockUpload::ReadPiece() {
  Piece piece;
  piece.offset = source_.offset();
  BM_ASSIGN_OR_RETURN(piece.chunks, source_.NextPiece());
  piece.last = source_.offset() == source_.size();
  std::vector<std::span<const std::byte>> spans;
  spans.reserve(piece.chunks.size());
  for (const ChunkPtr& chunk : piece.chunks) spans.push_back(chunk->bytes());
  const uint64_t end = source_.offset();
  if (piece.offset % kDigestUnitBytes == 0 && (piece.last || end % kDigestUnitBytes == 0)) {
    piece.unit_digests = UnitDigestsOf(spans);
  } else {
    StreamingDigest digest;
    for (std::span<const std::byte> span : spans) digest.Update(span);
    piece.piece_digest = digest.value();
  }
  source_done_ = piece.last;
  window_.push_back(std::move(piece));
  return Status::Ok();
}

Status BlockUpload::SendPiece(Target& target, const Piece& piece) {
  capnp::MallocMessageBuilder message;
  proto::PutBlock::Builder put = message.initRoot<proto::Request>().initPutBlock();
  put.setBlockId(block_);
  put.setLevel(ToProto(level_));
  put.setTotalSize(source_.size());
  put.setOffset(piece.offset);
  put.setLast(piece.last);
  put.setUploadId(target.upload_id);
  put.setVersion(version_.token);
  put.setReplica(version_.replica);
  put.setLeaseToken(version_.lease);
  put.setComputeCostUs(version_.compute_cost_us);
  put.setCopies(version_.copies);
  if (piece.piece_digest) {
    put.setPieceDigest(*piece.piece_digest);
    put.setDigested(true);
  }
  if (!piece.unit_digests.empty()) {
    capnp::List<uint64_t>::Builder units =
        put.initUnitDigests(static_cast<unsigned>(piece.unit_digests.size()));
    for (size_t i = 0; i < piece.unit_digests.size(); ++i) {
      units.set(static_cast<unsigned>(i), piece.unit_digests[i]);
    }
  }
  // Over inproc:// (in-process servers, in tests) ZeroMQ hands the frame itself to the
  // receiver, which keeps it: a frame lent from the caller's bytes (Put) would never come
  // back. Those frames are copies; over a network the chunks go as they are.
  const bool frames_handed_over = target.channel->address().starts_with("inproc://");
  std::vector<zmq::message_t> payload;
  payload.reserve(piece.chunks.size());
  for (const ChunkPtr& chunk : piece.chunks) {
    const std::span<const std::byte> bytes = chunk->bytes();
    payload.push_back(frames_handed_over ? zmq::message_t(bytes.data(), bytes.size())
                                         : MessageFromChunk(chunk));
  }
  target.started = true;
  target.channel->set_timeout(timeout_);
  Result<uint64_t> request = target.channel->Send(message, std::move(payload));
  if (!request.ok()) {
    return Status(request.status().code(),
                  "worker " + target.worker->id + " unreachable: " + request.status().message());
  }
  target.in_flight.push_back(*request);
  ++target.sent;
  return Status::Ok();
}

void BlockUpload::TakeReply(Target& target) {
  const size_t index = target.acked;
  const Piece& piece = window_[index - window_base_];
  const std::string peer = "worker " + target.worker->id;
  const uint64_t request = target.in_flight.front();
  target.in_flight.pop_front();
  Result<IncomingMessage> reply =
      AwaitPeer(*target.channel, timeout_, peer, request,
                piece.last ? kCommitSlack : std::chrono::milliseconds(0));
  if (!reply.ok() && reply.status().code() == StatusCode::kDataLoss &&
      !target.resent.contains(index)) {
    // Corrupted in transit: not appended, and the pieces sent after it were refused
    // (`aborted`) without ending the upload. Their answers are taken, and all are sent
    // again from this one, once.
    target.resent.insert(index);
    while (!target.in_flight.empty()) {
      (void)AwaitPeer(*target.channel, timeout_, peer, target.in_flight.front());
      target.in_flight.pop_front();
    }
    target.sent = index;
    return;
  }
  if (!reply.ok()) {
    GiveUp(target, reply.status());
    return;
  }
  bool committed = false;
  Status read = ReadGuarded([&]() -> Status {
    proto::Reply::Reader r = reply->reply();
    if (!r.isPut()) return UnexpectedReply(peer, "put");
    committed = r.getPut().getCommitted();
    target.tier = FromProto(r.getPut().getTier());
    return Status::Ok();
  });
  if (read.ok() && committed != piece.last) {
    read = InternalError(peer + (piece.last ? " did not commit " : " committed early ") + block_);
  }
  if (!read.ok()) {
    GiveUp(target, read);
    return;
  }
  ++target.acked;
}

void BlockUpload::GiveUp(Target& target, Status why) {
  target.failure = std::move(why);
  for (uint64_t request : target.in_flight) target.channel->Abandon(request);
  // Pieces still queued for this worker are dropped with its connection rather than sent: a
  // put of lent bytes (Put) cannot return while a frame still points into them, and a stalled
  // worker might never take them. The closed connection aborts the upload there; an abortPut
  // is needed only on a connection that stays (PROTOCOL.md, "Uploads").
  if (!target.in_flight.empty()) {
    target.channel->DropQueued();
  } else if (target.started) {
    PostAbortPut(*target.channel, target.upload_id);
  }
  target.in_flight.clear();
}

}  // namespace bm
