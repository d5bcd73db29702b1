// The reader of a shuffle partition (blockmgr/shuffle.h): its streams from each copy, through
// the local-read socket of a worker on this host or over TCP.

#include <capnp/message.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "blockmgr/client.h"
#include "blockmgr/shuffle.h"
#include "client/client_impl.h"
#include "client/local_reads.h"
#include "client/local_shuffle_reads.h"
#include "client/master_client.h"
#include "client/shuffle_calls.h"
#include "common/core/digest.h"
#include "common/core/protocol.h"
#include "common/net/transport.h"
#include "transfer/peer_calls.h"
#include "transfer/worker_channels.h"

namespace bm {
namespace {

// What a same-host reader asks of a partition file per page: mapped whole, so bigger pages cost
// fewer round trips.
constexpr uint32_t kLocalFilePageBytes = 4 << 20;

}  // namespace

class ShuffleReader::Impl {
 public:
  Impl(MasterClient& master, WorkerChannels& channels, LocalReads& local_reads, uint64_t shuffle_id,
       uint32_t partition)
      : master_(master),
        channels_(channels),
        local_reads_(local_reads),
        shuffle_id_(shuffle_id),
        partition_(partition) {}

  Status ForEach(const Visit& visit) {
    missing_.clear();
    visit_error_ = Status::Ok();
    BM_ASSIGN_OR_RETURN(ShuffleLayout layout, GetShuffleLayout(master_, shuffle_id_, partition_));
    // A partition is whole only with every map's output: a map without a committed attempt
    // (not run yet, or its output was lost) is as missing as a lost piece.
    std::set<uint32_t> committed;
    for (const ShuffleLayout::Commit& commit : layout.commits) committed.insert(commit.map);
    for (uint32_t map = 0; map < layout.spec.maps; ++map) {
      if (!committed.contains(map)) missing_.push_back(map);
    }
    if (!missing_.empty()) {
      return DataLossError("partition " + std::to_string(partition_) + " of " +
                           ShuffleName(shuffle_id_) + " has no committed output of maps " +
                           ShuffleMapList(missing_) +
                           " (not run yet, or their output was lost): run them");
    }
    // The partition's streams in order (more than one once it split), each read whole before
    // the next: from its primary, then from its replica for what the primary lacked.
    std::set<uint32_t> lost;
    std::vector<std::string> problems;
    for (const ShuffleLayout::Stream& stream : layout.StreamsOf(partition_)) {
      // What each committed map wrote into this stream, and how much of it was delivered
      // (pieces come in sequence order per map, from either copy).
      std::map<uint32_t, Expected> expected;
      for (const ShuffleLayout::Commit& commit : layout.commits) {
        uint32_t pieces = 0;
        if (commit.streams.empty()) {
          if (stream.stream == partition_) pieces = commit.pieces;
        } else {
          for (const ShuffleLayout::StreamPieces& in : commit.streams) {
            if (in.stream == stream.stream) pieces = in.pieces;
          }
        }
        expected[commit.map] = Expected{commit.attempt, pieces};
      }
      std::vector<uint32_t> copies{stream.primary};
      if (stream.replica) copies.push_back(*stream.replica);
      bool whole = false;
      for (uint32_t copy : copies) {
        Status read = ReadCopy(layout, copy, stream.stream, expected, visit);
        if (!visit_error_.ok()) return visit_error_;  // the caller's own: not a copy's fault
        if (!read.ok()) problems.push_back(read.ToString());
        whole = std::all_of(expected.begin(), expected.end(), [](const auto& entry) {
          return entry.second.delivered == entry.second.pieces;
        });
        if (whole) break;
      }
      if (whole) continue;
      for (const auto& [map, want] : expected) {
        if (want.delivered != want.pieces) lost.insert(map);
      }
    }
    if (lost.empty()) return Status::Ok();
    missing_.assign(lost.begin(), lost.end());
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
    return DataLossError("partition " + std::to_string(partition_) + " of " +
                         ShuffleName(shuffle_id_) + " lacks the output of maps " +
                         ShuffleMapList(missing_) + " on every copy: run them again" + why);
  }

  const std::vector<uint32_t>& missing_maps() const { return missing_; }
  uint64_t bytes_read() const { return bytes_read_; }
  uint32_t partition() const { return partition_; }

 private:
  struct Expected {
    uint32_t attempt;
    uint32_t pieces;
    uint32_t delivered = 0;
  };

  // Reads `stream` from workers[copy], delivering each map's pieces in sequence order after the
  // ones delivered already, up to as many as the map committed there: through the worker's
  // local-read socket when it is on this host, else (or where that path cannot serve) over TCP.
  Status ReadCopy(const ShuffleLayout& layout, uint32_t copy, uint32_t stream,
                  std::map<uint32_t, Expected>& expected, const Visit& visit) {
    const ShuffleWorker& worker = layout.workers[copy];
    if (worker.address.empty()) {
      return UnavailableError("worker " + worker.worker_id + " is not registered");
    }
    channels_.Trust(worker.address, worker.public_key);
    ShuffleStreamAsk ask{
        .shuffle_id = shuffle_id_, .stream = stream, .max_bytes = 0, .commits = {}};
    for (const auto& [map, want] : expected) ask.commits.emplace_back(map, want.attempt);
    auto deliver = [&](const ShufflePieceHeader& piece, std::span<const std::byte> bytes) {
      return Deliver(worker, piece, bytes, expected, visit);
    };
    if (std::optional<Status> local = ReadCopyLocally(worker, ask, deliver)) return *local;
    ask.max_bytes = static_cast<uint32_t>(kMaxPieceBytes);
    BM_ASSIGN_OR_RETURN(RpcChannel * channel, channels_.Channel(worker.address));
    auto ask_for = [&](uint64_t cursor) -> Result<uint64_t> {
      capnp::MallocMessageBuilder message;
      ask.Fill(message.initRoot<proto::Request>().initReadShuffle(), cursor);
      return channel->Send(message);
    };
    // Read-ahead: the next page is asked for as soon as a reply says where it starts, so the
    // worker reads and sends it while this one is checked and visited. A page asked for and
    // not awaited (an error, the caller stopping) is abandoned.
    std::optional<uint64_t> ahead;
    struct AbandonAhead {
      RpcChannel& channel;
      std::optional<uint64_t>& id;
      ~AbandonAhead() {
        if (id) channel.Abandon(*id);
      }
    } abandon{*channel, ahead};
    BM_ASSIGN_OR_RETURN(uint64_t asked, ask_for(0));
    ahead = asked;
    std::vector<std::byte> gathered;
    for (;;) {
      const uint64_t awaited = *std::exchange(ahead, std::nullopt);
      BM_ASSIGN_OR_RETURN(IncomingMessage reply,
                          AwaitPeer(*channel, channels_.timeout(), worker.worker_id, awaited));
      bool end = false;
      Status read = ReadGuarded([&]() -> Status {
        proto::Reply::Reader r = reply.reply();
        if (!r.isShufflePieces()) return UnexpectedReply(worker.worker_id, "shufflePieces");
        proto::ShufflePieces::Reader pieces = r.getShufflePieces();
        if (!pieces.getEnd()) {
          BM_ASSIGN_OR_RETURN(uint64_t next, ask_for(pieces.getNextCursor()));
          ahead = next;
        }
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
          BM_RETURN_IF_ERROR(
              deliver({piece.getMap(), piece.getSequence(), piece.getDigest()}, bytes));
        }
        end = pieces.getEnd();
        return Status::Ok();
      });
      if (!visit_error_.ok()) return Status::Ok();  // the caller's own error: ForEach returns it
      BM_RETURN_IF_ERROR(read);
      if (end) return Status::Ok();
    }
  }

  // The stream through the local-read socket of `worker` when it is on this host: the copy's
  // outcome, or nullopt when it is to be read over TCP (not on this host, local reads off, or
  // the local path could not serve it: its pieces delivered so far stay delivered).
  std::optional<Status> ReadCopyLocally(const ShuffleWorker& worker, const ShuffleStreamAsk& ask,
                                        const ShufflePieceSink& deliver) {
    Result<std::shared_ptr<LocalReadConnection>> connection = local_reads_.For(worker.address);
    // The worker did not answer at all: reading it over TCP would wait as long again.
    if (!connection.ok()) return connection.status();
    if (*connection == nullptr) return std::nullopt;
    ShuffleStreamAsk local = ask;
    local.max_bytes = kLocalFilePageBytes;  // the worker cuts pages in memory to one packet
    const Status read = ReadShuffleStreamLocally(**connection, local, deliver);
    if (!visit_error_.ok() || read.ok()) return Status::Ok();
    if ((*connection)->broken()) {
      local_reads_.Failed(worker.address);
      // No answer on the socket: the worker is stopped or gone.
      if (read.code() == StatusCode::kUnavailable) return read;
    }
    // The worker's own answers stand (not held there, not allowed, a damaged piece), as over
    // TCP; anything else (a tenant record the worker must first ask the master for) is read
    // over TCP.
    const StatusCode code = read.code();
    if (code == StatusCode::kNotFound || code == StatusCode::kPermissionDenied ||
        code == StatusCode::kDataLoss) {
      return read;
    }
    spdlog::debug("local read of partition stream {} of {} from {} failed ({}); reading over TCP",
                  ask.stream, ShuffleName(shuffle_id_), worker.worker_id, read.ToString());
    return std::nullopt;
  }

  // Checks one piece and hands it to the caller's visit when it is the next of its map here;
  // stops the read (visit_error_ set) when the visit fails.
  Status Deliver(const ShuffleWorker& worker, const ShufflePieceHeader& piece,
                 std::span<const std::byte> bytes, std::map<uint32_t, Expected>& expected,
                 const Visit& visit) {
    if (DigestOf(bytes) != piece.digest) {
      return DataLossError("a piece of map " + std::to_string(piece.map) + " from " +
                           worker.worker_id + " does not match its digest");
    }
    auto want = expected.find(piece.map);
    if (want == expected.end()) return Status::Ok();                   // not asked for: never used
    if (piece.sequence < want->second.delivered) return Status::Ok();  // had it from a copy
    // Past what the map committed here: a copy took a piece the other refused as full, and the
    // writer sent it to the next stream.
    if (want->second.delivered >= want->second.pieces) return Status::Ok();
    // An earlier piece of the map is gone from this copy: the rest of it is not used.
    if (piece.sequence > want->second.delivered) return Status::Ok();
    visit_error_ = visit(piece.map, bytes);
    if (!visit_error_.ok()) return AbortedError("the visit stopped the read");
    ++want->second.delivered;
    bytes_read_ += bytes.size();
    return Status::Ok();
  }

  MasterClient& master_;
  WorkerChannels& channels_;
  LocalReads& local_reads_;
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

Result<std::unique_ptr<ShuffleReader>> Client::OpenShuffleReader(uint64_t shuffle_id,
                                                                 uint32_t partition) {
  return std::make_unique<ShuffleReader>(std::make_unique<ShuffleReader::Impl>(
      impl_->master(), impl_->worker_channels(), impl_->local_reads(), shuffle_id, partition));
}

}  // namespace bm
