#include "worker/shuffle_handler.h"

#include <capnp/message.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "common/core/protocol.h"
#include "common/security/tenant.h"
#include "worker/wire.h"

namespace bm {
namespace {

// Bounds on one push and one read page.
constexpr size_t kMaxPiecesPerPush = 1 << 16;
constexpr uint64_t kMinPageBytes = 64 << 10;
constexpr uint64_t kMaxPageBytes = kMaxPieceBytes;
// Pieces at least this large are kept in the frame they arrived in (no copy); smaller ones are
// copied into their partition's chunks, so a partition of small pieces reads back as a few
// contiguous frames rather than one frame per piece (a reply carries at most
// kMaxPayloadFrames).
constexpr size_t kKeepFrameMinBytes = 32 << 10;

// Reads the pushed pieces' bytes out of the payload frames (taken as chunks): a piece inside one
// frame is borrowed from it (and, if large, the store keeps the frame instead of copying it),
// one that straddles frames is gathered into `gathered`.
Result<std::vector<ShuffleStore::Piece>> PiecesOf(capnp::List<proto::PushedPiece>::Reader headers,
                                                  const std::vector<ChunkPtr>& frames,
                                                  std::vector<std::vector<std::byte>>& gathered) {
  uint64_t declared = 0;
  for (proto::PushedPiece::Reader header : headers) {
    // A read sends each piece in at most one frame.
    if (header.getLength() > kMaxPayloadFrameBytes) {
      return InvalidArgumentError("a piece is at most " + std::to_string(kMaxPayloadFrameBytes) +
                                  " bytes; this one " + std::to_string(header.getLength()));
    }
    declared += header.getLength();
  }
  uint64_t carried = 0;
  for (const ChunkPtr& frame : frames) carried += frame->size();
  if (declared != carried) {
    return InvalidArgumentError("the push declares " + std::to_string(declared) +
                                " bytes of pieces and carries " + std::to_string(carried));
  }
  gathered.reserve(headers.size());
  std::vector<ShuffleStore::Piece> pieces;
  pieces.reserve(headers.size());
  size_t frame = 0;
  size_t offset = 0;  // in frames[frame]
  for (proto::PushedPiece::Reader header : headers) {
    const size_t length = header.getLength();
    while (frame < frames.size() && offset == frames[frame]->size() && length > 0) {
      ++frame;
      offset = 0;
    }
    ShuffleStore::Piece piece{.partition = header.getPartition(),
                              .sequence = header.getSequence(),
                              .first_sequence = header.getFirstSequence(),
                              .digest = header.getDigest(),
                              .bytes = {}};
    if (length > 0 && frames[frame]->size() - offset >= length) {
      piece.bytes = frames[frame]->bytes().subspan(offset, length);
      if (length >= kKeepFrameMinBytes) piece.owner = frames[frame];
      offset += length;
    } else if (length > 0) {
      std::vector<std::byte>& copy = gathered.emplace_back(length);
      size_t filled = 0;
      while (filled < length) {
        if (offset == frames[frame]->size()) {
          ++frame;
          offset = 0;
          continue;
        }
        const size_t take = std::min(length - filled, frames[frame]->size() - offset);
        std::memcpy(copy.data() + filled, frames[frame]->bytes().data() + offset, take);
        filled += take;
        offset += take;
      }
      piece.bytes = copy;
    }
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

// A forward's payload: slices of the pushed chunks, adjacent pieces of one chunk in one slice.
class ForwardPayload {
 public:
  void Add(const std::vector<ChunkPtr>& chunks, std::span<const std::byte> bytes) {
    if (bytes.empty()) return;
    if (run_ != nullptr && run_->bytes().data() + run_offset_ + run_length_ == bytes.data() &&
        run_offset_ + run_length_ + bytes.size() <= run_->size()) {
      run_length_ += bytes.size();
      return;
    }
    Close();
    for (const ChunkPtr& chunk : chunks) {
      const std::byte* start = chunk->bytes().data();
      if (bytes.data() >= start && bytes.data() + bytes.size() <= start + chunk->size()) {
        run_ = chunk;
        run_offset_ = static_cast<size_t>(bytes.data() - start);
        run_length_ = bytes.size();
        return;
      }
    }
    BM_CHECK(false);  // every piece lies in a pushed frame or in a gathered copy
  }
  std::vector<ChunkPtr> Take() {
    Close();
    return std::move(slices_);
  }

 private:
  void Close() {
    if (run_ != nullptr) slices_.push_back(SliceChunk(run_, run_offset_, run_length_));
    run_ = nullptr;
  }

  std::vector<ChunkPtr> slices_;
  ChunkPtr run_;
  size_t run_offset_ = 0;
  size_t run_length_ = 0;
};

}  // namespace

ShuffleHandler::ShuffleHandler(std::string worker_id, ShuffleStore::Limits limits,
                               std::vector<std::string> disk_dirs, ClientReplies& replies,
                               WorkerCounters& counters, const Clock& clock,
                               std::unique_ptr<ShuffleForwarder> forwarder)
    : store_(
          std::move(worker_id),
          [&] {
            limits.disks = static_cast<uint32_t>(disk_dirs.size());
            return limits;
          }(),
          clock),
      replies_(replies),
      counters_(counters),
      forwarder_(std::move(forwarder)) {
  if (!disk_dirs.empty()) {
    files_ = std::make_shared<const ShuffleFiles>(std::move(disk_dirs));
    jobs_ = std::make_unique<JobThread>();
  }
}

ShuffleHandler::~ShuffleHandler() {
  if (jobs_ == nullptr) return;
  FlushDue(/*all=*/true);
  jobs_.reset();  // runs the writes queued, then joins
}

size_t ShuffleHandler::LoadKept() {
  if (files_ == nullptr) return 0;
  std::vector<LoadedShuffle> kept = files_->Load();
  for (const LoadedShuffle& shuffle : kept) {
    size_t pieces = 0;
    for (const LoadedShufflePartition& partition : shuffle.partitions) {
      pieces += partition.records.size();
    }
    spdlog::info("shuffle {}: {} partitions ({} pieces) kept on disk", shuffle.id,
                 shuffle.partitions.size(), pieces);
    store_.Restore(shuffle);
  }
  return kept.size();
}

void ShuffleHandler::FlushDue(bool all) {
  if (jobs_ == nullptr) return;
  for (ShuffleStore::Flush& flush : store_.TakeFlushes(all)) {
    auto batch = std::make_shared<ShuffleStore::Flush>(std::move(flush));
    jobs_->Submit([this, files = files_, batch]() -> JobThread::Completion {
      Status written = files->Append(batch->disk, batch->shuffle_id, batch->partition, batch->maps,
                                     batch->owner, batch->offset, batch->records);
      batch->hold.clear();  // the bytes are in the file: their memory goes here, off the loop
      return [this, batch, written = std::move(written)] {
        if (!written.ok()) {
          spdlog::warn("cannot write partition {} of shuffle {} to disk: {}", batch->partition,
                       batch->shuffle_id, written.ToString());
        }
        const uint64_t before = store_.bytes_flushed();
        store_.Flushed(*batch, written);
        counters_.shuffle_bytes_flushed += store_.bytes_flushed() - before;
      };
    });
  }
}

size_t ShuffleHandler::RunCompletions() {
  if (jobs_ == nullptr) return 0;
  const size_t ran = jobs_->RunCompletions();
  // Memory a write released may let more partitions fall due.
  if (ran > 0) FlushDue();
  return ran;
}

Status ShuffleHandler::HandleAssigned(IncomingMessage& message, uint64_t id) {
  uint64_t shuffle_id = 0;
  std::vector<ShuffleStore::DroppedFile> dropped;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::ShuffleAssigned::Reader assigned = message.request().getShuffleAssigned();
    std::vector<uint32_t> partitions;
    for (uint32_t partition : assigned.getPartitions()) partitions.push_back(partition);
    shuffle_id = assigned.getShuffleId();
    dropped = store_.Assign(shuffle_id, assigned.getMaps(), std::move(partitions),
                            assigned.getOwner(), UsesDisk(FromProto(assigned.getLevel())));
    std::map<uint32_t, ShuffleReplica> replicas;
    for (proto::ShuffleForward::Reader forward : assigned.getForwards()) {
      proto::ReplicaTarget::Reader replica = forward.getReplica();
      replicas[forward.getStream()] = ShuffleReplica{.worker_id = replica.getWorkerId(),
                                                     .address = replica.getAddress(),
                                                     .public_key = replica.getPublicKey()};
    }
    if (replicas.empty()) {
      replicas_.erase(shuffle_id);
    } else {
      replicas_[shuffle_id] = std::move(replicas);
    }
    return Status::Ok();
  }));
  if (!dropped.empty() && jobs_ != nullptr) {
    // Queued behind any write of them still in flight.
    jobs_->Submit([files = files_, shuffle_id, dropped]() -> JobThread::Completion {
      for (const ShuffleStore::DroppedFile& file : dropped) {
        files->RemovePartition(file.disk, shuffle_id, file.partition);
      }
      return nullptr;
    });
  }
  replies_.SendOk(*message.routing_id(), id);
  return Status::Ok();
}

Status ShuffleHandler::HandleRemove(IncomingMessage& message, uint64_t id) {
  uint64_t shuffle_id = 0;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    shuffle_id = message.request().getRemoveShuffle().getShuffleId();
    return Status::Ok();
  }));
  store_.Remove(shuffle_id);
  replicas_.erase(shuffle_id);
  if (jobs_ != nullptr) {
    jobs_->Submit([files = files_, shuffle_id]() -> JobThread::Completion {
      files->RemoveShuffle(shuffle_id);
      return nullptr;
    });
  }
  replies_.SendOk(*message.routing_id(), id);
  return Status::Ok();
}

Status ShuffleHandler::HandlePush(IncomingMessage& message, uint64_t id) {
  const std::string tenant =
      IsTenantRestricted(message.peer()) ? TenantOf(*message.peer()) : std::string();
  std::vector<uint32_t> full;  // streams past the split size: their pieces were not taken
  size_t forwards = 0;
  const uint64_t ticket = next_ticket_;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::PushShuffle::Reader push = message.request().getPushShuffle();
    // A forward is held here as it came, not forwarded again; with keys on, only a stream's
    // primary (a worker's key) sends one.
    const bool forwarded = push.getForwarded();
    if (forwarded && message.peer() && message.peer()->role != KeyRole::kWorker) {
      return PermissionDeniedError("only workers forward shuffle pieces; key '" +
                                   message.peer()->name + "' is not a worker's");
    }
    if (push.getPieces().size() > kMaxPiecesPerPush) {
      return InvalidArgumentError("a push carries at most " + std::to_string(kMaxPiecesPerPush) +
                                  " pieces; this one " + std::to_string(push.getPieces().size()));
    }
    // The frames become chunks the store may keep: a piece within one is not copied.
    std::vector<ChunkPtr> chunks;
    chunks.reserve(message.payload().size());
    for (zmq::message_t& frame : message.payload()) {
      chunks.push_back(ChunkFromMessage(std::move(frame)));
    }
    message.payload().clear();
    std::vector<std::vector<std::byte>> gathered;
    BM_ASSIGN_OR_RETURN(std::vector<ShuffleStore::Piece> pieces,
                        PiecesOf(push.getPieces(), chunks, gathered));
    const uint64_t pieces_before = store_.pieces_kept();
    const uint64_t bytes_before = store_.bytes_kept();
    BM_RETURN_IF_ERROR(
        store_.Push(push.getShuffleId(), push.getMap(), push.getAttempt(), pieces, tenant, &full));
    counters_.shuffle_pieces_pushed += store_.pieces_kept() - pieces_before;
    counters_.shuffle_bytes_pushed += store_.bytes_kept() - bytes_before;
    if (forwarded) return Status::Ok();
    // Gathered pieces become chunks too (their bytes stay where they are), for forwards.
    for (std::vector<std::byte>& piece : gathered) {
      chunks.push_back(std::make_shared<VectorChunk>(std::move(piece)));
    }
    BM_ASSIGN_OR_RETURN(forwards, Forward(push.getShuffleId(), push.getMap(), push.getAttempt(),
                                          pieces, chunks, full, ticket));
    return Status::Ok();
  }));
  if (forwards == 0) {
    SendPushed(*message.routing_id(), id, full);
  } else {
    ++next_ticket_;
    awaited_.emplace(ticket, AwaitedPush{.peer = SharePeer(*message.routing_id()),
                                         .id = id,
                                         .full = std::move(full),
                                         .forwards = forwards,
                                         .failed = Status::Ok()});
  }
  FlushDue();
  return Status::Ok();
}

void ShuffleHandler::SendPushed(const zmq::message_t& peer, uint64_t id,
                                const std::vector<uint32_t>& full) {
  if (full.empty()) {
    replies_.SendOk(peer, id);
    return;
  }
  capnp::MallocMessageBuilder reply_message;
  proto::Reply::Builder reply = reply_message.initRoot<proto::Reply>();
  reply.setId(id);
  auto streams = reply.initShufflePushed().initFull(static_cast<unsigned>(full.size()));
  for (size_t i = 0; i < full.size(); ++i) streams.set(static_cast<unsigned>(i), full[i]);
  replies_.Send(peer, reply_message, {});
}

Result<size_t> ShuffleHandler::Forward(uint64_t shuffle_id, uint32_t map, uint32_t attempt,
                                       const std::vector<ShuffleStore::Piece>& pieces,
                                       const std::vector<ChunkPtr>& chunks,
                                       const std::vector<uint32_t>& full, uint64_t ticket) {
  auto streams = replicas_.find(shuffle_id);
  if (forwarder_ == nullptr || streams == replicas_.end()) return 0;
  struct Outgoing {
    const ShuffleReplica* replica = nullptr;
    ShuffleForward forward;
    ForwardPayload payload;
    std::map<uint32_t, uint32_t> first_sequence;  // by stream: its first piece in this forward
  };
  std::map<std::string, Outgoing> outgoing;  // by replica worker
  for (const ShuffleStore::Piece& piece : pieces) {
    // A full stream's pieces go to the partition's next stream, as the writer sees it.
    if (std::find(full.begin(), full.end(), piece.partition) != full.end()) continue;
    auto replica = streams->second.find(piece.partition);
    if (replica == streams->second.end()) continue;  // this worker is the stream's replica
    if (replica->second.address.empty()) {
      return UnavailableError("the replica " + replica->second.worker_id + " of stream " +
                              std::to_string(piece.partition) + " of shuffle " +
                              std::to_string(shuffle_id) +
                              " is gone; push again once the master has placed a new one");
    }
    Outgoing& out = outgoing[replica->second.worker_id];
    out.replica = &replica->second;
    out.forward.shuffle_id = shuffle_id;
    out.forward.map = map;
    out.forward.attempt = attempt;
    // The replica takes each stream's pieces from the first one it is sent: one that replaced a
    // lost replica (or lost its memory) holds the stream from here on, the primary the rest.
    const uint32_t first =
        out.first_sequence.try_emplace(piece.partition, piece.sequence).first->second;
    out.forward.pieces.push_back({.stream = piece.partition,
                                  .sequence = piece.sequence,
                                  .first_sequence = first,
                                  .length = static_cast<uint32_t>(piece.bytes.size()),
                                  .digest = piece.digest});
    out.payload.Add(chunks, piece.bytes);
  }
  for (auto& [worker_id, out] : outgoing) {
    out.forward.payload = out.payload.Take();
    uint64_t bytes = 0;
    for (const ChunkPtr& slice : out.forward.payload) bytes += slice->size();
    forwarder_->Submit(*out.replica, std::move(out.forward),
                       [this, ticket, replica = *out.replica, bytes](const Status& held) {
                         if (held.ok()) counters_.shuffle_bytes_forwarded += bytes;
                         ForwardDone(ticket, replica, held);
                       });
  }
  return outgoing.size();
}

void ShuffleHandler::ForwardDone(uint64_t ticket, const ShuffleReplica& replica,
                                 const Status& held) {
  auto awaited = awaited_.find(ticket);
  if (awaited == awaited_.end()) return;
  AwaitedPush& push = awaited->second;
  if (!held.ok() && push.failed.ok()) {
    // Whatever the replica said, the writer pushes again: by then the replica may be back,
    // or replaced by the master.
    push.failed = UnavailableError("the replica " + replica.worker_id +
                                   " did not take the pieces: " + held.ToString());
  }
  if (--push.forwards > 0) return;
  if (push.failed.ok()) {
    SendPushed(*push.peer, push.id, push.full);
  } else {
    replies_.SendError(*push.peer, push.id, push.failed);
  }
  awaited_.erase(awaited);
}

size_t ShuffleHandler::RunForwardCompletions() {
  return forwarder_ ? forwarder_->RunCompletions() : 0;
}

Result<ShuffleStore::Page> ShuffleHandler::PageOf(proto::ReadShuffle::Reader read,
                                                  uint64_t max_memory_bytes) const {
  std::unordered_map<uint32_t, uint32_t> attempts;
  attempts.reserve(read.getCommits().size());
  for (proto::MapCommit::Reader commit : read.getCommits()) {
    attempts[commit.getMap()] = commit.getAttempt();
  }
  const uint64_t max_bytes = std::clamp<uint64_t>(read.getMaxBytes(), kMinPageBytes, kMaxPageBytes);
  return store_.Read(read.getShuffleId(), read.getPartition(), attempts, read.getCursor(),
                     max_bytes, max_memory_bytes);
}

void ShuffleHandler::ReadForLocal(proto::ReadShuffle::Reader read, uint64_t max_memory_bytes,
                                  const LocalPageDone& done) {
  Result<ShuffleStore::Page> page = PageOf(read, max_memory_bytes);
  if (!page.ok() || !page->file) {
    if (!page.ok()) {
      done(page.status());
    } else {
      done(OpenedShufflePage{std::move(*page), OwnedFd()});
    }
    return;
  }
  // Opened on the job thread, behind the writes queued there: an open looks its path up on the
  // disk, which the loop never waits on.
  auto opened = std::make_shared<OpenedShufflePage>(OpenedShufflePage{std::move(*page), OwnedFd()});
  jobs_->Submit([files = files_, opened, shuffle_id = read.getShuffleId(),
                 partition = read.getPartition(), done]() -> JobThread::Completion {
    Result<OwnedFd> file = files->OpenForReading(opened->page.file->disk, shuffle_id, partition);
    Status status = file.status();
    if (file.ok()) opened->file = std::move(*file);
    return [opened, status = std::move(status), done] {
      if (!status.ok()) {
        done(status);
        return;
      }
      done(std::move(*opened));
    };
  });
}

Status ShuffleHandler::HandleRead(IncomingMessage& message, uint64_t id) {
  ShuffleStore::Page page;
  uint64_t shuffle_id = 0;
  uint32_t partition = 0;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::ReadShuffle::Reader read = message.request().getReadShuffle();
    shuffle_id = read.getShuffleId();
    partition = read.getPartition();
    BM_ASSIGN_OR_RETURN(page, PageOf(read));
    return Status::Ok();
  }));
  if (!page.file) {
    SendPage(*message.routing_id(), id, page);
    return Status::Ok();
  }
  // Written pieces are read on the job thread and answered from its completion: the range
  // holds the pieces (and the headers between them), gathered back to back into one chunk.
  auto read = std::make_shared<ShuffleStore::Page>(std::move(page));
  jobs_->Submit([this, files = files_, read, shuffle_id, partition,
                 peer = SharePeer(*message.routing_id()), id]() -> JobThread::Completion {
    const ShuffleStore::FileRange range = *read->file;
    Result<ChunkPtr> bytes =
        files->Read(range.disk, shuffle_id, partition, range.offset, range.length);
    ChunkPtr gathered;
    if (bytes.ok()) {
      uint64_t total = 0;
      for (const ShuffleStore::StoredPiece& piece : read->pieces) total += piece.length;
      std::vector<std::byte> out(total);
      size_t at = 0;
      for (const ShuffleStore::StoredPiece& piece : read->pieces) {
        std::memcpy(out.data() + at, (*bytes)->bytes().data() + (piece.file_offset - range.offset),
                    piece.length);
        at += piece.length;
      }
      gathered = std::make_shared<VectorChunk>(std::move(out));
    }
    return [this, read, peer, id, status = bytes.status(), gathered] {
      if (!status.ok()) {
        replies_.SendError(*peer, id, status);
        return;
      }
      // The pieces now lie back to back in `gathered`.
      size_t at = 0;
      for (ShuffleStore::StoredPiece& piece : read->pieces) {
        piece.bytes = gathered->bytes().subspan(at, piece.length);
        piece.chunk = gathered;
        at += piece.length;
      }
      SendPage(*peer, id, *read);
    };
  });
  return Status::Ok();
}

void ShuffleHandler::SendPage(const zmq::message_t& peer, uint64_t id,
                              const ShuffleStore::Page& page) {
  capnp::MallocMessageBuilder reply_message;
  proto::Reply::Builder reply = reply_message.initRoot<proto::Reply>();
  reply.setId(id);
  std::vector<zmq::message_t> payload;
  // The pieces' bytes go as frames that borrow the store's chunks (no copy). A page that would
  // need more frames than a message may carry ends early; the reader asks again from there.
  size_t included = 0;
  for (ShuffleStore::PieceRun& run : ShuffleStore::RunsOf(page.pieces, kMaxPayloadFrameBytes)) {
    if (run.bytes != nullptr) {
      if (payload.size() == kMaxPayloadFrames) break;
      payload.push_back(MessageFromChunk(std::move(run.bytes)));
    }
    included += run.pieces;
  }
  proto::ShufflePieces::Builder out = reply.initShufflePieces();
  const bool whole_page = included == page.pieces.size();
  out.setNextCursor(whole_page ? page.next_cursor : page.pieces[included].cursor);
  out.setEnd(whole_page && page.end);
  auto pieces = out.initPieces(static_cast<unsigned>(included));
  for (size_t i = 0; i < included; ++i) {
    const ShuffleStore::StoredPiece& piece = page.pieces[i];
    counters_.shuffle_bytes_read += piece.bytes.size();
    pieces[i].setMap(piece.map);
    pieces[i].setSequence(piece.sequence);
    pieces[i].setLength(static_cast<uint32_t>(piece.bytes.size()));
    pieces[i].setDigest(piece.digest);
  }
  replies_.Send(peer, reply_message, std::move(payload));
}

}  // namespace bm
