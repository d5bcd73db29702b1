#include "client/shuffle.h"

#include <capnp/message.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <thread>
#include <unordered_map>
#include <utility>

#include "client/client.h"
#include "client/client_impl.h"
#include "client/master_client.h"
#include "client/peer_calls.h"
#include "client/worker_channels.h"
#include "common/chunk.h"
#include "common/digest.h"
#include "common/protocol.h"
#include "common/transport.h"

namespace bm {
namespace {

std::string Named(uint64_t shuffle_id) { return "shuffle " + std::to_string(shuffle_id); }

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
  layout.committed_maps = in.getCommittedMaps();
  for (proto::MapCommit::Reader commit : in.getCommits()) {
    layout.commits.push_back(ShuffleLayout::Commit{.map = commit.getMap(),
                                                   .attempt = commit.getAttempt(),
                                                   .pieces = commit.getPieces(),
                                                   .bytes = commit.getBytes()});
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
  if (layout.primaries.size() != partitions || !in_range(layout.primaries) ||
      (!layout.replicas.empty() &&
       (layout.replicas.size() != partitions || !in_range(layout.replicas)))) {
    return InternalError("the master's layout of " + Named(layout.spec.id) + " is inconsistent");
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

Result<ShuffleLayout> GetLayout(MasterClient& master, uint64_t shuffle_id,
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

// "3, 7, 9", or the first 16 and how many in all.
std::string MapList(const std::vector<uint32_t>& maps) {
  std::string text;
  for (size_t i = 0; i < maps.size() && i < 16; ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(maps[i]);
  }
  if (maps.size() > 16) text += ", ... (" + std::to_string(maps.size()) + " maps)";
  return text;
}

bool Retryable(const Status& status) {
  // Unavailable: the worker's shuffle memory is full, it has not been told of the shuffle yet,
  // or the connection dropped; data loss: the bytes were damaged on the way.
  return status.code() == StatusCode::kUnavailable || status.code() == StatusCode::kDataLoss;
}

}  // namespace

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
        sequences_(layout_.spec.partitions),
        written_(layout_.spec.partitions) {
    options_.max_piece_bytes =
        std::clamp<size_t>(options_.max_piece_bytes, 1, kMaxPayloadFrameBytes);
    options_.max_in_flight = std::max<size_t>(options_.max_in_flight, 1);
  }

  Status Write(uint32_t partition, std::span<const std::byte> bytes) {
    BM_RETURN_IF_ERROR(failed_);
    if (partition >= layout_.spec.partitions) {
      return InvalidArgumentError(Named(layout_.spec.id) + " has partitions 0.." +
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
    for (size_t target = 0; target < targets_.size(); ++target) {
      if (!targets_[target].pending.headers.empty()) BM_RETURN_IF_ERROR(Push(target));
    }
    for (size_t target = 0; target < targets_.size(); ++target) {
      while (!targets_[target].in_flight.empty()) BM_RETURN_IF_ERROR(AwaitOldest(target));
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
    for (const Written& w : written_) written += w.pieces > 0 ? 1 : 0;
    auto pieces = commit.initPieces(written);
    size_t i = 0;
    for (uint32_t partition = 0; partition < written_.size(); ++partition) {
      if (written_[partition].pieces == 0) continue;
      pieces[i].setPartition(partition);
      pieces[i].setPieces(written_[partition].pieces);
      pieces[i].setBytes(written_[partition].bytes);
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
    uint32_t partition;
    uint32_t sequence;
    uint32_t length;
    uint64_t digest;
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

  // Cuts the partition's open bytes into a piece for its worker(s).
  Status Seal(uint32_t partition) {
    std::vector<std::byte>& open = open_[partition];
    if (open.empty()) return Status::Ok();
    const PieceHeader header{partition, sequences_[partition]++, static_cast<uint32_t>(open.size()),
                             DigestOf(open)};
    ++written_[partition].pieces;
    written_[partition].bytes += open.size();
    std::vector<uint32_t> holders{layout_.primaries[partition]};
    if (!layout_.replicas.empty()) holders.push_back(layout_.replicas[partition]);
    for (uint32_t holder : holders) {
      Batch& pending = targets_[holder].pending;
      pending.headers.push_back(header);
      pending.bytes.insert(pending.bytes.end(), open.begin(), open.end());
      if (pending.bytes.size() >= options_.batch_bytes) BM_RETURN_IF_ERROR(Push(holder));
    }
    open_bytes_ -= open.size();
    open.clear();
    return Status::Ok();
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
      return UnavailableError("worker " + worker.worker_id + " of " + Named(layout_.spec.id) +
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
      headers[i].setPartition(batch.headers[i].partition);
      headers[i].setSequence(batch.headers[i].sequence);
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
        targets_[target].in_flight.pop_front();
        return Status::Ok();
      }
      return Recover(target, reply.status());
    }
    return Recover(target, UnavailableError("not sent"));
  }

  // A push failed: every batch after it was refused too (the worker takes each partition's
  // pieces in order) or is unknown, so all of them go again, in order, one at a time, backing
  // off while the worker asks to wait. Pieces it holds already are acknowledged, not kept twice.
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
    std::chrono::milliseconds backoff(5);
    Status last = first;
    while (!t.in_flight.empty()) {
      if (std::chrono::steady_clock::now() >= deadline) {
        return Fail(WithPeer(last, layout_.workers[target].worker_id));
      }
      Result<uint64_t> sent = Send(target, *t.in_flight.front().batch);
      Status status = sent.status();
      if (sent.ok()) {
        BM_ASSIGN_OR_RETURN(RpcChannel * ch, ChannelOf(target));
        status =
            AwaitPeer(*ch, channels_.timeout(), layout_.workers[target].worker_id, *sent).status();
      }
      if (status.ok()) {
        t.in_flight.pop_front();
        backoff = std::chrono::milliseconds(5);
        continue;
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
                                        std::to_string(attempt_) + " of " + Named(layout_.spec.id) +
                                        ": " + status.message());
    return failed_;
  }

  MasterClient& master_;
  WorkerChannels& channels_;
  const ShuffleLayout layout_;
  const uint32_t map_;
  const uint32_t attempt_;
  ShuffleWriterOptions options_;
  std::vector<Target> targets_;               // by index into layout_.workers
  std::vector<std::vector<std::byte>> open_;  // by partition: bytes not cut into a piece yet
  std::vector<uint32_t> sequences_;           // by partition: the next piece's sequence
  std::vector<Written> written_;              // by partition
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

// ---- the reader ----

class ShuffleReader::Impl {
 public:
  Impl(MasterClient& master, WorkerChannels& channels, uint64_t shuffle_id, uint32_t partition)
      : master_(master), channels_(channels), shuffle_id_(shuffle_id), partition_(partition) {}

  Status ForEach(const Visit& visit) {
    missing_.clear();
    visit_error_ = Status::Ok();
    BM_ASSIGN_OR_RETURN(ShuffleLayout layout, GetLayout(master_, shuffle_id_, partition_));
    // What each committed map wrote here, and how much of it was delivered (pieces come in
    // sequence order per map, from either copy).
    struct Expected {
      uint32_t attempt;
      uint32_t pieces;
      uint32_t delivered = 0;
    };
    std::map<uint32_t, Expected> expected;
    for (const ShuffleLayout::Commit& commit : layout.commits) {
      expected[commit.map] = Expected{commit.attempt, commit.pieces};
    }
    // A partition is whole only with every map's output: a map without a committed attempt
    // (not run yet, or its output was lost) is as missing as a lost piece.
    for (uint32_t map = 0; map < layout.spec.maps; ++map) {
      if (!expected.contains(map)) missing_.push_back(map);
    }
    if (!missing_.empty()) {
      return DataLossError("partition " + std::to_string(partition_) + " of " + Named(shuffle_id_) +
                           " has no committed output of maps " + MapList(missing_) +
                           " (not run yet, or their output was lost): run them");
    }
    std::vector<uint32_t> copies{layout.primaries[partition_]};
    if (!layout.replicas.empty()) copies.push_back(layout.replicas[partition_]);
    std::vector<std::string> problems;
    for (uint32_t copy : copies) {
      Status read = ReadCopy(layout, copy, expected, visit);
      if (!visit_error_.ok()) return visit_error_;  // the caller's own: not a copy's fault
      if (!read.ok()) problems.push_back(read.ToString());
      const bool whole = std::all_of(expected.begin(), expected.end(), [](const auto& entry) {
        return entry.second.delivered == entry.second.pieces;
      });
      if (whole) return Status::Ok();
    }
    for (const auto& [map, want] : expected) {
      if (want.delivered != want.pieces) missing_.push_back(map);
    }
    // The master drops those maps' commits, so they can run again and commit (best effort: a
    // reader that cannot tell it still fails with the maps named).
    capnp::MallocMessageBuilder message;
    proto::ReportShuffleLoss::Builder loss =
        message.initRoot<proto::Request>().initReportShuffleLoss();
    loss.setShuffleId(shuffle_id_);
    loss.setPartition(partition_);
    auto maps = loss.initMaps(missing_.size());
    for (size_t i = 0; i < missing_.size(); ++i) maps.set(i, missing_[i]);
    const Status reported = master_.CallForOk(message);
    std::string why;
    for (const std::string& problem : problems) why += "; " + problem;
    if (!reported.ok()) why += "; the master was not told: " + reported.ToString();
    return DataLossError("partition " + std::to_string(partition_) + " of " + Named(shuffle_id_) +
                         " lacks the output of maps " + MapList(missing_) +
                         " on every copy: run them again" + why);
  }

  const std::vector<uint32_t>& missing_maps() const { return missing_; }
  uint64_t bytes_read() const { return bytes_read_; }
  uint32_t partition() const { return partition_; }

 private:
  template <typename Expected>
  Status ReadCopy(const ShuffleLayout& layout, uint32_t copy,
                  std::map<uint32_t, Expected>& expected, const Visit& visit) {
    const ShuffleWorker& worker = layout.workers[copy];
    if (worker.address.empty()) {
      return UnavailableError("worker " + worker.worker_id + " is not registered");
    }
    channels_.Trust(worker.address, worker.public_key);
    BM_ASSIGN_OR_RETURN(RpcChannel * channel, channels_.Channel(worker.address));
    uint64_t cursor = 0;
    std::vector<std::byte> gathered;
    for (;;) {
      capnp::MallocMessageBuilder message;
      proto::ReadShuffle::Builder read = message.initRoot<proto::Request>().initReadShuffle();
      read.setShuffleId(shuffle_id_);
      read.setPartition(partition_);
      read.setCursor(cursor);
      read.setMaxBytes(static_cast<uint32_t>(kMaxPieceBytes));
      auto commits = read.initCommits(expected.size());
      size_t i = 0;
      for (const auto& [map, want] : expected) {
        commits[i].setMap(map);
        commits[i].setAttempt(want.attempt);
        ++i;
      }
      BM_ASSIGN_OR_RETURN(IncomingMessage reply,
                          CallPeer(*channel, channels_.timeout(), worker.worker_id, message));
      bool end = false;
      BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
        proto::Reply::Reader r = reply.reply();
        if (!r.isShufflePieces()) return UnexpectedReply(worker.worker_id, "shufflePieces");
        proto::ShufflePieces::Reader pieces = r.getShufflePieces();
        std::vector<zmq::message_t>& payload = reply.payload();
        size_t frame = 0;
        size_t offset = 0;
        for (proto::ReadPiece::Reader piece : pieces.getPieces()) {
          const size_t length = piece.getLength();
          std::span<const std::byte> bytes;
          while (length > 0 && frame < payload.size() && offset == payload[frame].size()) {
            ++frame;
            offset = 0;
          }
          if (length > 0 && frame == payload.size()) {
            return DataLossError("a reply from " + worker.worker_id + " is short of its pieces");
          }
          if (length == 0) {
          } else if (payload[frame].size() - offset >= length) {
            bytes = {static_cast<const std::byte*>(payload[frame].data()) + offset, length};
            offset += length;
          } else {
            gathered.resize(length);
            size_t filled = 0;
            while (filled < length) {
              if (frame == payload.size()) {
                return DataLossError("a reply from " + worker.worker_id +
                                     " is short of its pieces");
              }
              const size_t take = std::min(length - filled, payload[frame].size() - offset);
              std::memcpy(gathered.data() + filled,
                          static_cast<const std::byte*>(payload[frame].data()) + offset, take);
              filled += take;
              offset += take;
              if (offset == payload[frame].size()) {
                ++frame;
                offset = 0;
              }
            }
            bytes = gathered;
          }
          if (DigestOf(bytes) != piece.getDigest()) {
            return DataLossError("a piece of map " + std::to_string(piece.getMap()) + " from " +
                                 worker.worker_id + " does not match its digest");
          }
          auto want = expected.find(piece.getMap());
          if (want == expected.end()) continue;                        // not asked for: never used
          if (piece.getSequence() < want->second.delivered) continue;  // had it from a copy
          if (piece.getSequence() > want->second.delivered) {
            // An earlier piece of the map is gone from this copy: the rest of it is not used.
            continue;
          }
          visit_error_ = visit(piece.getMap(), bytes);
          if (!visit_error_.ok()) return Status::Ok();
          ++want->second.delivered;
          bytes_read_ += bytes.size();
        }
        cursor = pieces.getNextCursor();
        end = pieces.getEnd();
        return Status::Ok();
      }));
      if (!visit_error_.ok() || end) return Status::Ok();
    }
  }

  MasterClient& master_;
  WorkerChannels& channels_;
  const uint64_t shuffle_id_;
  const uint32_t partition_;
  std::vector<uint32_t> missing_;
  Status visit_error_;  // what the caller's visit returned, when not Ok
  uint64_t bytes_read_ = 0;
};

ShuffleReader::ShuffleReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShuffleReader::~ShuffleReader() = default;
Status ShuffleReader::ForEach(const Visit& visit) { return impl_->ForEach(visit); }
Result<std::vector<std::byte>> ShuffleReader::ReadAll() {
  std::vector<std::byte> all;
  BM_RETURN_IF_ERROR(ForEach([&](uint32_t, std::span<const std::byte> bytes) {
    all.insert(all.end(), bytes.begin(), bytes.end());
    return Status::Ok();
  }));
  return all;
}
const std::vector<uint32_t>& ShuffleReader::missing_maps() const { return impl_->missing_maps(); }
uint64_t ShuffleReader::bytes_read() const { return impl_->bytes_read(); }
uint32_t ShuffleReader::partition() const { return impl_->partition(); }

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
  return GetLayout(impl_->master(), shuffle_id, partition);
}

Result<std::unique_ptr<ShuffleWriter>> Client::OpenShuffleWriter(
    uint64_t shuffle_id, uint32_t map, uint32_t attempt, const ShuffleWriterOptions& options) {
  auto& kept = impl_->shuffle_layouts();
  const auto now = std::chrono::steady_clock::now();
  auto found = kept.find(shuffle_id);
  if (found == kept.end() || now - found->second.fetched > impl_->options().worker_list_ttl) {
    BM_ASSIGN_OR_RETURN(ShuffleLayout fetched,
                        GetLayout(impl_->master(), shuffle_id, std::nullopt));
    found =
        kept.insert_or_assign(shuffle_id,
                              Client::Impl::KeptLayout{
                                  std::make_shared<const ShuffleLayout>(std::move(fetched)), now})
            .first;
  }
  const ShuffleLayout& layout = *found->second.layout;
  if (map >= layout.spec.maps) {
    return InvalidArgumentError(Named(shuffle_id) + " has maps 0.." +
                                std::to_string(layout.spec.maps - 1) + "; there is no map " +
                                std::to_string(map));
  }
  return std::make_unique<ShuffleWriter>(std::make_unique<ShuffleWriter::Impl>(
      impl_->master(), impl_->worker_channels(), layout, map, attempt, options));
}

Result<std::unique_ptr<ShuffleReader>> Client::OpenShuffleReader(uint64_t shuffle_id,
                                                                 uint32_t partition) {
  return std::make_unique<ShuffleReader>(std::make_unique<ShuffleReader::Impl>(
      impl_->master(), impl_->worker_channels(), shuffle_id, partition));
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
