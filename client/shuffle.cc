#include "blockmgr/shuffle.h"

#include <capnp/message.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>

#include "blockmgr/chunk.h"
#include "blockmgr/client.h"
#include "client/client_impl.h"
#include "client/master_client.h"
#include "client/shuffle_calls.h"
#include "common/core/digest.h"
#include "common/core/protocol.h"
#include "common/net/transport.h"
#include "transfer/peer_calls.h"
#include "transfer/worker_channels.h"

namespace bm {
namespace {

ShuffleLayout DecodeLayout(proto::ShuffleAssignment::Reader in) {
  ShuffleLayout layout;
  layout.spec = ShuffleSpec{.id = in.getShuffleId(),
                            .maps = in.getMaps(),
                            .partitions = in.getPartitions(),
                            .level = FromProto(in.getLevel())};
  for (proto::ReplicaTarget::Reader worker : in.getWorkers()) {
    layout.workers.push_back(ShuffleWorker{.worker_id = worker.getWorkerId(),
                                           .address = worker.getAddress(),
                                           .public_key = worker.getPublicKey()});
  }
  for (uint32_t index : in.getPrimaries()) layout.primaries.push_back(index);
  for (uint32_t index : in.getReplicas()) layout.replicas.push_back(index);
  for (proto::ShuffleSplit::Reader split : in.getSplits()) {
    layout.splits.push_back(ShuffleLayout::Split{.stream = split.getStream(),
                                                 .partition = split.getPartition(),
                                                 .primary = split.getPrimary(),
                                                 .replica = split.getReplica()});
  }
  layout.committed_maps = in.getCommittedMaps();
  for (proto::MapCommit::Reader commit : in.getCommits()) {
    ShuffleLayout::Commit decoded{.map = commit.getMap(),
                                  .attempt = commit.getAttempt(),
                                  .pieces = commit.getPieces(),
                                  .bytes = commit.getBytes()};
    for (proto::PartitionPieces::Reader stream : commit.getStreams()) {
      decoded.streams.push_back({.stream = stream.getPartition(),
                                 .pieces = stream.getPieces(),
                                 .bytes = stream.getBytes()});
    }
    layout.commits.push_back(std::move(decoded));
  }
  return layout;
}

// A layout whose indexes point outside its worker list would be a master's bug; checked so
// it cannot become an out-of-range read here.
Status CheckLayout(const ShuffleLayout& layout) {
  const size_t partitions = layout.spec.partitions;
  auto in_range = [&](const std::vector<uint32_t>& indexes) {
    return std::all_of(indexes.begin(), indexes.end(),
                       [&](uint32_t index) { return index < layout.workers.size(); });
  };
  const bool splits_ok =
      std::all_of(layout.splits.begin(), layout.splits.end(), [&](const ShuffleLayout::Split& s) {
        return s.partition < partitions && s.stream >= partitions &&
               s.primary < layout.workers.size() &&
               (layout.replicas.empty() || s.replica < layout.workers.size());
      });
  if (layout.primaries.size() != partitions || !in_range(layout.primaries) || !splits_ok ||
      (!layout.replicas.empty() &&
       (layout.replicas.size() != partitions || !in_range(layout.replicas)))) {
    return InternalError("the master's layout of " + ShuffleName(layout.spec.id) +
                         " is inconsistent");
  }
  return Status::Ok();
}

Result<ShuffleLayout> CallForLayout(MasterClient& master, capnp::MallocMessageBuilder& message) {
  BM_ASSIGN_OR_RETURN(IncomingMessage reply, master.Call(message));
  ShuffleLayout layout;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::Reply::Reader r = reply.reply();
    if (!r.isShuffle()) return UnexpectedReply("master", "shuffle");
    layout = DecodeLayout(r.getShuffle());
    return Status::Ok();
  }));
  BM_RETURN_IF_ERROR(CheckLayout(layout));
  return layout;
}

// How often a writer whose worker does not answer asks the master whether its streams moved.
constexpr std::chrono::seconds kLookForMovedStreams{1};

bool Retryable(const Status& status) {
  // Unavailable: the worker's shuffle memory is full, it has not been told of the shuffle yet,
  // or the connection dropped; data loss: the bytes were damaged on the way.
  return status.code() == StatusCode::kUnavailable || status.code() == StatusCode::kDataLoss;
}

}  // namespace

std::string ShuffleName(uint64_t shuffle_id) { return "shuffle " + std::to_string(shuffle_id); }

Result<ShuffleLayout> GetShuffleLayout(MasterClient& master, uint64_t shuffle_id,

                                       std::optional<uint32_t> commits_of_partition) {
  capnp::MallocMessageBuilder message;
  proto::GetShuffle::Builder get = message.initRoot<proto::Request>().initGetShuffle();
  get.setShuffleId(shuffle_id);
  if (commits_of_partition) {
    get.setWithCommits(true);
    get.setPartition(*commits_of_partition);
  }
  return CallForLayout(master, message);
}

std::string ShuffleMapList(const std::vector<uint32_t>& maps) {
  std::string text;
  for (size_t i = 0; i < maps.size() && i < 16; ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(maps[i]);
  }
  if (maps.size() > 16) text += ", ... (" + std::to_string(maps.size()) + " maps)";
  return text;
}

std::vector<ShuffleLayout::Stream> ShuffleLayout::StreamsOf(uint32_t partition) const {
  std::vector<Stream> streams;
  if (partition >= primaries.size()) return streams;
  streams.push_back({partition, primaries[partition],
                     replicas.empty() ? std::nullopt : std::optional(replicas[partition])});
  for (const Split& split : splits) {
    if (split.partition != partition) continue;
    streams.push_back({split.stream, split.primary,
                       replicas.empty() ? std::nullopt : std::optional(split.replica)});
  }
  return streams;
}

// ---- the writer ----

class ShuffleWriter::Impl {
 public:
  Impl(MasterClient& master, WorkerChannels& channels, ShuffleLayout layout, uint32_t map,
       uint32_t attempt, ShuffleWriterOptions options)
      : master_(master),
        channels_(channels),
        layout_(std::move(layout)),
        map_(map),
        attempt_(attempt),
        options_(options),
        targets_(layout_.workers.size()),
        open_(layout_.spec.partitions),
        current_(layout_.spec.partitions) {
    options_.max_piece_bytes =
        std::clamp<size_t>(options_.max_piece_bytes, 1, kMaxPayloadFrameBytes);
    options_.max_in_flight = std::max<size_t>(options_.max_in_flight, 1);
    AdoptStreams();
  }

  Status Write(uint32_t partition, std::span<const std::byte> bytes) {
    BM_RETURN_IF_ERROR(failed_);
    if (partition >= layout_.spec.partitions) {
      return InvalidArgumentError(ShuffleName(layout_.spec.id) + " has partitions 0.." +
                                  std::to_string(layout_.spec.partitions - 1) +
                                  "; there is no partition " + std::to_string(partition));
    }
    if (committed_) return InvalidArgumentError("this map attempt is committed already");
    bytes_written_ += bytes.size();
    std::vector<std::byte>& open = open_[partition];
    while (!bytes.empty()) {
      const size_t take = std::min(bytes.size(), options_.max_piece_bytes - open.size());
      open.insert(open.end(), bytes.begin(), bytes.begin() + take);
      open_bytes_ += take;
      bytes = bytes.subspan(take);
      if (open.size() == options_.max_piece_bytes) BM_RETURN_IF_ERROR(Seal(partition));
    }
    // Small writes to many partitions: once enough is buffered, everything goes.
    if (open_bytes_ >= options_.batch_bytes * std::max<size_t>(targets_.size(), 1)) {
      BM_RETURN_IF_ERROR(SealAll());
    }
    return Status::Ok();
  }

  Status Flush() {
    BM_RETURN_IF_ERROR(failed_);
    BM_RETURN_IF_ERROR(SealAll());
    // Pieces a full stream refused go to their partition's next stream as replies come in,
    // so this goes round until nothing is pending or in flight.
    for (;;) {
      bool busy = false;
      for (size_t target = 0; target < targets_.size(); ++target) {
        if (!targets_[target].pending.headers.empty()) BM_RETURN_IF_ERROR(Push(target));
      }
      for (size_t target = 0; target < targets_.size(); ++target) {
        while (!targets_[target].in_flight.empty()) {
          busy = true;
          BM_RETURN_IF_ERROR(AwaitOldest(target));
        }
      }
      if (!full_.empty()) {
        busy = true;
        BM_RETURN_IF_ERROR(Resolve());
      }
      if (!busy) break;
    }
    return Status::Ok();
  }

  Status Commit() {
    BM_RETURN_IF_ERROR(Flush());
    capnp::MallocMessageBuilder message;
    proto::CommitShuffleMap::Builder commit =
        message.initRoot<proto::Request>().initCommitShuffleMap();
    commit.setShuffleId(layout_.spec.id);
    commit.setMap(map_);
    commit.setAttempt(attempt_);
    size_t written = 0;
    for (const auto& [stream, w] : written_) written += w.pieces > 0 ? 1 : 0;
    auto pieces = commit.initPieces(written);
    size_t i = 0;
    for (const auto& [stream, w] : written_) {
      if (w.pieces == 0) continue;
      pieces[i].setPartition(stream);
      pieces[i].setPieces(w.pieces);
      pieces[i].setBytes(w.bytes);
      ++i;
    }
    BM_RETURN_IF_ERROR(master_.CallForOk(message));
    committed_ = true;
    return Status::Ok();
  }

  uint64_t bytes_written() const { return bytes_written_; }
  uint64_t pushes() const { return pushes_; }

 private:
  struct PieceHeader {
    uint32_t stream;     // sent as the piece's partition
    uint32_t partition;  // the partition it belongs to (not sent)
    uint32_t sequence;   // in its stream, the same on each copy
    // The first sequence of the stream the worker it is queued for was sent (PushedPiece.
    // firstSequence); set per holder as it is queued.
    uint32_t first_sequence;
    uint32_t length;
    uint64_t digest;
    uint64_t piece;  // this writer's number for the piece, over all streams (not sent)
  };
  struct Batch {
    std::vector<PieceHeader> headers;
    std::vector<std::byte> bytes;
  };
  struct SentBatch;
  struct InFlight {
    uint64_t request_id;
    std::shared_ptr<const SentBatch> batch;
  };
  struct Target {
    Batch pending;
    std::deque<InFlight> in_flight;
  };
  struct Written {
    uint32_t pieces = 0;
    uint64_t bytes = 0;
  };
  // The worker a stream's pieces are pushed to: its primary, which for _2 forwards them to
  // the replica.
  struct Holder {
    uint32_t worker;  // index into layout_.workers
    // The sequence of the first piece sent to it: 0, or for a holder that replaced a lost one,
    // the first piece the lost one had not acknowledged. Unset until a piece is queued for it.
    std::optional<uint32_t> first_sequence{};
  };
  // A stream this writer pushes to, and the next piece's sequence: the same on every copy, so
  // a reader may take each piece from either.
  struct Stream {
    uint32_t partition = 0;
    Holder holder;
    uint32_t next_sequence = 0;
  };

  // Takes in the layout's streams this writer does not know yet (a new layout's splits). The
  // holder of a known stream stays as it was: its pieces' sequences go on from where they are
  // on that worker. At the start each partition's pieces go to its last stream; later a
  // partition moves to its next stream only when its current one refuses pieces (SplitAfter),
  // so its pieces stay in order.
  void AdoptStreams() {
    while (targets_.size() < layout_.workers.size()) targets_.emplace_back();
    for (uint32_t partition = 0; partition < layout_.spec.partitions; ++partition) {
      for (const ShuffleLayout::Stream& stream : layout_.StreamsOf(partition)) {
        if (streams_.contains(stream.stream)) continue;
        streams_.emplace(stream.stream,
                         Stream{.partition = partition, .holder = Holder{stream.primary}});
        if (!started_) current_[partition] = stream.stream;
      }
    }
    started_ = true;
  }

  // Cuts the partition's open bytes into a piece for its worker(s).
  Status Seal(uint32_t partition) {
    std::vector<std::byte>& open = open_[partition];
    if (open.empty()) return Status::Ok();
    BM_RETURN_IF_ERROR(Route(partition, open, /*push=*/true));
    open_bytes_ -= open.size();
    open.clear();
    return Status::Ok();
  }

  // Adds `bytes` as the next piece of the partition's current stream to its holder's pending
  // batch, pushing the batch once it is full when `push`.
  Status Route(uint32_t partition, std::span<const std::byte> bytes, bool push) {
    BM_RETURN_IF_ERROR(Resolve());  // refused pieces go first, and to the partition's next stream
    const uint32_t stream_id = current_[partition];
    Stream& stream = streams_.at(stream_id);
    const PieceHeader header{.stream = stream_id,
                             .partition = partition,
                             .sequence = stream.next_sequence++,
                             .first_sequence = 0,
                             .length = static_cast<uint32_t>(bytes.size()),
                             .digest = DigestOf(bytes),
                             .piece = next_piece_++};
    Written& written = written_[stream_id];
    ++written.pieces;
    written.bytes += bytes.size();
    Queue(header, bytes, stream.holder);
    const uint32_t target = stream.holder.worker;
    if (push && targets_[target].pending.bytes.size() >= options_.batch_bytes) {
      BM_RETURN_IF_ERROR(Push(target));
    }
    return Status::Ok();
  }

  // Adds a piece of its stream to the holder's pending batch, under the sequence it has on
  // every copy.
  void Queue(const PieceHeader& header, std::span<const std::byte> bytes, Holder& holder) {
    if (!holder.first_sequence) holder.first_sequence = header.sequence;
    Batch& pending = targets_[holder.worker].pending;
    pending.headers.push_back(header);
    pending.headers.back().first_sequence = *holder.first_sequence;
    pending.bytes.insert(pending.bytes.end(), bytes.begin(), bytes.end());
  }

  // While `target` does not answer: once the master has dropped it and moved its streams to
  // other workers, the pieces waiting for it go to those instead (under their own sequences:
  // the new holder starts at the first of them), and it keeps only the pieces of streams it
  // still holds. Returns whether anything moved.
  Result<bool> FollowMovedStreams(size_t target) {
    BM_ASSIGN_OR_RETURN(ShuffleLayout fresh,
                        GetShuffleLayout(master_, layout_.spec.id, std::nullopt));
    if (fresh.workers.size() < layout_.workers.size()) return false;
    layout_.workers = std::move(fresh.workers);
    while (targets_.size() < layout_.workers.size()) targets_.emplace_back();
    // Streams pushed to `target` whose primary is another worker now (for _2 the surviving
    // copy, which forwards to the new replica).
    std::set<uint32_t> moved;
    for (uint32_t partition = 0; partition < fresh.spec.partitions; ++partition) {
      for (const ShuffleLayout::Stream& now : fresh.StreamsOf(partition)) {
        auto known = streams_.find(now.stream);
        if (known == streams_.end()) continue;
        Holder& holder = known->second.holder;
        if (holder.worker != target || now.primary == target) continue;
        holder = Holder{now.primary};
        moved.insert(now.stream);
      }
    }
    if (moved.empty()) return false;
    // Everything queued for `target`, oldest first: what stays is queued again as unsent.
    Target& t = targets_[target];
    Result<RpcChannel*> channel = ChannelOf(target);
    std::vector<std::shared_ptr<const SentBatch>> queued;
    for (InFlight& in_flight : t.in_flight) {
      if (channel.ok() && in_flight.request_id != 0) (*channel)->Abandon(in_flight.request_id);
      queued.push_back(std::move(in_flight.batch));
    }
    t.in_flight.clear();
    Batch pending = std::move(t.pending);
    t.pending = Batch{};
    queued.push_back(std::make_shared<const SentBatch>(SentBatch{
        std::move(pending.headers), std::make_shared<VectorChunk>(std::move(pending.bytes))}));
    Batch stays;
    for (const std::shared_ptr<const SentBatch>& batch : queued) {
      size_t offset = 0;
      for (const PieceHeader& header : batch->headers) {
        const std::span<const std::byte> bytes =
            batch->bytes->bytes().subspan(offset, header.length);
        offset += header.length;
        if (moved.contains(header.stream)) {
          Queue(header, bytes, streams_.at(header.stream).holder);
        } else {
          stays.headers.push_back(header);
          stays.bytes.insert(stays.bytes.end(), bytes.begin(), bytes.end());
        }
      }
    }
    if (!stays.headers.empty()) {
      t.in_flight.push_back({0, std::make_shared<const SentBatch>(SentBatch{
                                    std::move(stays.headers),
                                    std::make_shared<VectorChunk>(std::move(stays.bytes))})});
    }
    return true;
  }

  Status SealAll() {
    for (uint32_t partition = 0; partition < open_.size(); ++partition) {
      BM_RETURN_IF_ERROR(Seal(partition));
    }
    return Status::Ok();
  }

  Result<RpcChannel*> ChannelOf(size_t target) {
    const ShuffleWorker& worker = layout_.workers[target];
    if (worker.address.empty()) {
      return UnavailableError("worker " + worker.worker_id + " of " + ShuffleName(layout_.spec.id) +
                              " is not registered with the master");
    }
    channels_.Trust(worker.address, worker.public_key);
    return channels_.Channel(worker.address);
  }

  // A pushed batch: kept (with its bytes as a chunk that frames borrow, no copy) until the
  // worker acknowledges it, for a resend.
  struct SentBatch {
    std::vector<PieceHeader> headers;
    ChunkPtr bytes;
  };

  Result<uint64_t> Send(size_t target, const SentBatch& batch) {
    BM_ASSIGN_OR_RETURN(RpcChannel * channel, ChannelOf(target));
    capnp::MallocMessageBuilder message;
    proto::PushShuffle::Builder push = message.initRoot<proto::Request>().initPushShuffle();
    push.setShuffleId(layout_.spec.id);
    push.setMap(map_);
    push.setAttempt(attempt_);
    auto headers = push.initPieces(batch.headers.size());
    for (size_t i = 0; i < batch.headers.size(); ++i) {
      headers[i].setPartition(batch.headers[i].stream);
      headers[i].setSequence(batch.headers[i].sequence);
      headers[i].setFirstSequence(batch.headers[i].first_sequence);
      headers[i].setLength(batch.headers[i].length);
      headers[i].setDigest(batch.headers[i].digest);
    }
    std::vector<zmq::message_t> payload;
    const size_t size = batch.bytes->bytes().size();
    for (size_t offset = 0; offset < size; offset += kMaxPayloadFrameBytes) {
      payload.push_back(MessageFromChunk(
          SliceChunk(batch.bytes, offset, std::min(kMaxPayloadFrameBytes, size - offset))));
    }
    ++pushes_;
    return channel->Send(message, std::move(payload));
  }

  Status Push(size_t target) {
    Batch& pending = targets_[target].pending;
    auto batch = std::make_shared<const SentBatch>(SentBatch{
        std::move(pending.headers), std::make_shared<VectorChunk>(std::move(pending.bytes))});
    pending = Batch{};
    Result<uint64_t> sent = Send(target, *batch);
    if (!sent.ok()) {
      // Not sent: kept as the oldest unacknowledged batch of the ones to push again.
      targets_[target].in_flight.push_back({0, std::move(batch)});
      return Recover(target, sent.status());
    }
    targets_[target].in_flight.push_back({*sent, std::move(batch)});
    if (targets_[target].in_flight.size() > options_.max_in_flight) return AwaitOldest(target);
    return Status::Ok();
  }

  Status AwaitOldest(size_t target) {
    InFlight& oldest = targets_[target].in_flight.front();
    if (oldest.request_id != 0) {
      BM_ASSIGN_OR_RETURN(RpcChannel * channel, ChannelOf(target));
      Result<IncomingMessage> reply = AwaitPeer(
          *channel, channels_.timeout(), layout_.workers[target].worker_id, oldest.request_id);
      if (reply.ok()) {
        std::shared_ptr<const SentBatch> batch = std::move(oldest.batch);
        targets_[target].in_flight.pop_front();
        return Took(target, *batch, *reply);
      }
      return Recover(target, reply.status());
    }
    return Recover(target, UnavailableError("not sent"));
  }

  // The worker took `batch`, except the pieces of the streams its reply names as full (past
  // the split size): those are kept to go on in their partitions' next streams (Resolve).
  Status Took(size_t target, const SentBatch& batch, IncomingMessage& reply) {
    std::vector<uint32_t> full;
    BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
      proto::Reply::Reader r = reply.reply();
      if (r.isShufflePushed()) {
        for (uint32_t stream : r.getShufflePushed().getFull()) full.push_back(stream);
      }
      return Status::Ok();
    }));
    if (full.empty()) return Status::Ok();
    for (uint32_t stream : full) {
      if (!streams_.contains(stream)) {
        return Fail(InternalError("worker " + layout_.workers[target].worker_id +
                                  " refused pieces of stream " + std::to_string(stream) +
                                  ", which this writer never pushed"));
      }
      full_.insert(stream);
    }
    size_t offset = 0;
    for (const PieceHeader& header : batch.headers) {
      const size_t at = offset;
      offset += header.length;
      if (std::find(full.begin(), full.end(), header.stream) == full.end()) continue;
      // Once, should a batch pushed again be refused again.
      refused_.try_emplace(header.piece,
                           Refused{header, SliceChunk(batch.bytes, at, header.length)});
    }
    return Status::Ok();
  }

  // Pieces refused by full streams go on in their partitions' next streams, in the order they
  // were written: first every push in flight is answered (each holder's verdict on each piece
  // is known, and no piece of the partition is in the air), then the partition moves to its
  // next stream (split by the master if this writer knows none), then the refused pieces are
  // queued there in piece order, ahead of anything written later.
  Status Resolve() {
    if (full_.empty() || resolving_) return Status::Ok();
    resolving_ = true;
    struct Done {
      bool& flag;
      ~Done() { flag = false; }
    } done{resolving_};
    for (size_t target = 0; target < targets_.size(); ++target) {
      while (!targets_[target].in_flight.empty()) BM_RETURN_IF_ERROR(AwaitOldest(target));
    }
    for (uint32_t stream : std::exchange(full_, {})) BM_RETURN_IF_ERROR(SplitAfter(stream));
    for (auto& [piece, refused] : std::exchange(refused_, {})) {
      Written& written = written_[refused.header.stream];
      --written.pieces;
      written.bytes -= refused.header.length;
      BM_RETURN_IF_ERROR(Route(refused.header.partition, refused.bytes->bytes(), /*push=*/false));
    }
    return Status::Ok();
  }

  // Moves the partition of `stream` (full) to the stream after it, asking the master to split
  // it when this writer knows none.
  Status SplitAfter(uint32_t stream) {
    const uint32_t partition = streams_.at(stream).partition;
    if (current_[partition] != stream) return Status::Ok();
    if (!NextStream(partition, stream)) {
      capnp::MallocMessageBuilder message;
      proto::SplitShuffle::Builder split = message.initRoot<proto::Request>().initSplitShuffle();
      split.setShuffleId(layout_.spec.id);
      split.setStream(stream);
      Result<ShuffleLayout> layout = CallForLayout(master_, message);
      if (!layout.ok()) return Fail(layout.status());
      if (layout->workers.size() < layout_.workers.size()) {
        return Fail(InternalError("the master's layout of " + ShuffleName(layout_.spec.id) +
                                  " lost workers"));
      }
      // Workers are only ever added to a placement: the indexes held here stay valid.
      layout_.workers = std::move(layout->workers);
      layout_.splits = std::move(layout->splits);
      AdoptStreams();
    }
    const std::optional<uint32_t> next = NextStream(partition, stream);
    if (!next) {
      return Fail(InternalError("the master did not split stream " + std::to_string(stream) +
                                " of " + ShuffleName(layout_.spec.id)));
    }
    current_[partition] = *next;
    return Status::Ok();
  }

  // The stream after `stream` in the partition's order, if this writer knows one.
  std::optional<uint32_t> NextStream(uint32_t partition, uint32_t stream) const {
    const std::vector<ShuffleLayout::Stream> streams = layout_.StreamsOf(partition);
    for (size_t i = 0; i + 1 < streams.size(); ++i) {
      if (streams[i].stream == stream) return streams[i + 1].stream;
    }
    return std::nullopt;
  }

  // A push failed: every batch after it was refused too (the worker takes each partition's
  // pieces in order) or is unknown, so all of them go again, in order, one at a time, backing
  // off while the worker asks to wait. Pieces it holds already are acknowledged, not kept twice.
  // Meanwhile the writer asks the master about once a second whether the worker's streams
  // moved (the master dropped it): their pieces then go to the new holders.
  Status Recover(size_t target, Status first) {
    Target& t = targets_[target];
    if (!Retryable(first)) return Fail(first);
    Result<RpcChannel*> channel = ChannelOf(target);
    if (channel.ok()) {
      for (InFlight& in_flight : t.in_flight) {
        if (in_flight.request_id != 0) (*channel)->Abandon(in_flight.request_id);
      }
    }
    const auto deadline = std::chrono::steady_clock::now() + options_.retry_for;
    auto next_look = std::chrono::steady_clock::now() + kLookForMovedStreams;
    std::chrono::milliseconds backoff(5);
    Status last = first;
    while (!t.in_flight.empty()) {
      if (std::chrono::steady_clock::now() >= deadline) {
        return Fail(WithPeer(last, layout_.workers[target].worker_id));
      }
      if (std::chrono::steady_clock::now() >= next_look) {
        next_look = std::chrono::steady_clock::now() + kLookForMovedStreams;
        Result<bool> moved = FollowMovedStreams(target);
        if (moved.ok() && *moved) continue;  // what is left for it (if anything) goes again
      }
      std::shared_ptr<const SentBatch> batch = t.in_flight.front().batch;
      Result<uint64_t> sent = Send(target, *batch);
      Status status = sent.status();
      if (sent.ok()) {
        BM_ASSIGN_OR_RETURN(RpcChannel * ch, ChannelOf(target));
        Result<IncomingMessage> reply =
            AwaitPeer(*ch, channels_.timeout(), layout_.workers[target].worker_id, *sent);
        status = reply.status();
        if (reply.ok()) {
          t.in_flight.pop_front();
          backoff = std::chrono::milliseconds(5);
          BM_RETURN_IF_ERROR(Took(target, *batch, *reply));
          continue;
        }
      }
      if (!Retryable(status)) return Fail(status);
      last = status;
      std::this_thread::sleep_for(backoff);  // the worker asked to wait: not a lost reply
      backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
    }
    return Status::Ok();
  }

  Status Fail(Status status) {
    failed_ = Status(status.code(), "map " + std::to_string(map_) + " attempt " +
                                        std::to_string(attempt_) + " of " +
                                        ShuffleName(layout_.spec.id) + ": " + status.message());
    return failed_;
  }

  MasterClient& master_;
  WorkerChannels& channels_;
  ShuffleLayout layout_;  // its workers and splits grow as partitions split
  const uint32_t map_;
  const uint32_t attempt_;
  ShuffleWriterOptions options_;
  // By index into layout_.workers; a deque, so a Target stays where it is as workers are added.
  std::deque<Target> targets_;
  std::vector<std::vector<std::byte>> open_;  // by partition: bytes not cut into a piece yet
  std::vector<uint32_t> current_;             // by partition: the stream its pieces go to
  std::map<uint32_t, Stream> streams_;        // by stream id
  std::map<uint32_t, Written> written_;       // by stream id: what the commit reports
  // Pieces refused by full streams, by piece number (their order), until Resolve sends them
  // to the next streams.
  struct Refused {
    PieceHeader header;
    ChunkPtr bytes;
  };
  std::map<uint64_t, Refused> refused_;
  std::set<uint32_t> full_;  // streams that refused pieces, not resolved yet
  bool resolving_ = false;
  bool started_ = false;  // AdoptStreams ran once
  uint64_t next_piece_ = 0;
  uint64_t open_bytes_ = 0;
  uint64_t bytes_written_ = 0;
  uint64_t pushes_ = 0;
  bool committed_ = false;
  Status failed_;  // sticky: the attempt is lost once a push failed for good
};

ShuffleWriter::ShuffleWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShuffleWriter::~ShuffleWriter() = default;
Status ShuffleWriter::Write(uint32_t partition, std::span<const std::byte> bytes) {
  return impl_->Write(partition, bytes);
}
Status ShuffleWriter::Flush() { return impl_->Flush(); }
Status ShuffleWriter::Commit() { return impl_->Commit(); }
uint64_t ShuffleWriter::bytes_written() const { return impl_->bytes_written(); }
uint64_t ShuffleWriter::pushes() const { return impl_->pushes(); }

// ---- the Client's shuffle calls ----

Result<ShuffleLayout> Client::RegisterShuffle(const ShuffleSpec& spec) {
  capnp::MallocMessageBuilder message;
  proto::RegisterShuffle::Builder reg = message.initRoot<proto::Request>().initRegisterShuffle();
  reg.setShuffleId(spec.id);
  reg.setMaps(spec.maps);
  reg.setPartitions(spec.partitions);
  reg.setLevel(ToProto(spec.level));
  return CallForLayout(impl_->master(), message);
}

Result<ShuffleLayout> Client::ShuffleLayoutOf(uint64_t shuffle_id,
                                              std::optional<uint32_t> partition) {
  return GetShuffleLayout(impl_->master(), shuffle_id, partition);
}

Result<std::unique_ptr<ShuffleWriter>> Client::OpenShuffleWriter(
    uint64_t shuffle_id, uint32_t map, uint32_t attempt, const ShuffleWriterOptions& options) {
  auto& kept = impl_->shuffle_layouts();
  const auto now = std::chrono::steady_clock::now();
  auto found = kept.find(shuffle_id);
  if (found == kept.end() || now - found->second.fetched > impl_->options().worker_list_ttl) {
    BM_ASSIGN_OR_RETURN(ShuffleLayout fetched,
                        GetShuffleLayout(impl_->master(), shuffle_id, std::nullopt));
    found =
        kept.insert_or_assign(shuffle_id,
                              Client::Impl::KeptLayout{
                                  std::make_shared<const ShuffleLayout>(std::move(fetched)), now})
            .first;
  }
  const ShuffleLayout& layout = *found->second.layout;
  if (map >= layout.spec.maps) {
    return InvalidArgumentError(ShuffleName(shuffle_id) + " has maps 0.." +
                                std::to_string(layout.spec.maps - 1) + "; there is no map " +
                                std::to_string(map));
  }
  return std::make_unique<ShuffleWriter>(std::make_unique<ShuffleWriter::Impl>(
      impl_->master(), impl_->worker_channels(), layout, map, attempt, options));
}

Status Client::UnregisterShuffle(uint64_t shuffle_id) {
  impl_->shuffle_layouts().erase(shuffle_id);
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Request>().initUnregisterShuffle().setShuffleId(shuffle_id);
  return impl_->master().CallForOk(message);
}

Result<std::vector<ShuffleSummary>> Client::Shuffles() {
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Request>().setListShuffles();
  BM_ASSIGN_OR_RETURN(IncomingMessage reply, impl_->master().Call(message));
  std::vector<ShuffleSummary> out;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::Reply::Reader r = reply.reply();
    if (!r.isShuffles()) return UnexpectedReply("master", "shuffles");
    for (proto::ShuffleInfo::Reader info : r.getShuffles()) {
      ShuffleSummary summary{.spec = {.id = info.getShuffleId(),
                                      .maps = info.getMaps(),
                                      .partitions = info.getPartitions(),
                                      .level = FromProto(info.getLevel())},
                             .committed_maps = info.getCommittedMaps(),
                             .bytes = info.getBytes(),
                             .workers = {},
                             .idle_ms = info.getIdleMs()};
      for (capnp::Text::Reader worker : info.getWorkers()) summary.workers.push_back(worker);
      out.push_back(std::move(summary));
    }
    return Status::Ok();
  }));
  return out;
}

}  // namespace bm
