#include "client/client_impl.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <array>
#include <climits>
#include <deque>
#include <set>
#include <istream>
#include <ostream>
#include <zmq.hpp>

#include "client/abort_put.h"
#include "client/lent_bytes.h"
#include "client/local_hosts.h"
#include "client/placement.h"
#include "client/reply_decoding.h"
#include "common/allocator.h"
#include "common/byte_size.h"
#include "common/replica_spread.h"
#include "common/chunk.h"
#include "common/digest.h"
#include "common/range_verifier.h"
#include "common/protocol.h"
#include "common/transport.h"

namespace bm {
namespace {

using std::chrono::milliseconds;

// The worker holds the reply to a put's last piece until the master recorded the block.
constexpr milliseconds kCommitSlack{2000};
// An upload's pieces, and how many of them may be unacknowledged at once per worker: 4 of
// 4 MiB keep the network and the hashing on both sides busy together while an upload holds
// at most 16 MiB in flight. Pieces are whole digest units (common/digest.h).
constexpr uint64_t kPutPieceBytes = 4 << 20;
constexpr size_t kPutWindowPieces = 4;
static_assert(kPutPieceBytes % kDigestUnitBytes == 0 && kPutPieceBytes <= kMaxPieceBytes);
// The master waits for the workers before it answers a removal.
constexpr milliseconds kRemoveSlack{5000};
// How many times a read starts over because the block was replaced meanwhile.
constexpr int kMaxReadRestarts = 3;

using reply_decoding::ToBlockLocation;
using reply_decoding::ToStdString;

// A failed reply's Status says which peer it came from; its code is kept.
Result<IncomingMessage> NamePeer(const std::string& peer, Result<IncomingMessage> reply) {
  if (!reply.ok()) {
    const Status& error = reply.status();
    const char* what = error.code() == StatusCode::kUnavailable ? " unreachable: " : ": ";
    return Status(error.code(), peer + what + error.message());
  }
  return reply;
}

// Calls `channel` with `extra` added to its timeout for this call. Errors keep their code and
// say which peer they came from.
Result<IncomingMessage> Call(RpcChannel& channel, milliseconds base_timeout,
                             const std::string& peer, capnp::MallocMessageBuilder& request,
                             std::vector<zmq::message_t> payload = {},
                             milliseconds extra = milliseconds(0)) {
  channel.set_timeout(base_timeout + extra);
  Result<IncomingMessage> reply = channel.Call(request, std::move(payload));
  channel.set_timeout(base_timeout);
  return NamePeer(peer, std::move(reply));
}

// Awaits the reply to `request` (RpcChannel::Send) as Call does.
Result<IncomingMessage> Await(RpcChannel& channel, milliseconds base_timeout,
                              const std::string& peer, uint64_t request,
                              milliseconds extra = milliseconds(0)) {
  channel.set_timeout(base_timeout + extra);
  Result<IncomingMessage> reply = channel.Await(request);
  channel.set_timeout(base_timeout);
  return NamePeer(peer, std::move(reply));
}

// Copies a put stores: as PutOptions::replication says, else as the level does.
uint32_t CopiesWanted(StorageLevel level, const PutOptions& options) {
  return options.replication > 0 ? options.replication
                                 : static_cast<uint32_t>(ReplicationOf(level));
}

Status UnexpectedReply(const std::string& peer, const char* expected) {
  return InternalError(peer + " answered with something other than '" + expected + "'");
}

WorkerInfo ToWorkerInfo(proto::WorkerInfo::Reader reader) {
  const WorkerStats stats = FromProto(reader.getStats());
  WorkerInfo info;
  info.id = ToStdString(reader.getWorkerId());
  info.address = ToStdString(reader.getAddress());
  info.memory_capacity = stats.memory_capacity;
  info.memory_used = stats.memory_used;
  info.disk_used = stats.disk_used;
  info.disk_capacity = stats.disk_capacity;
  info.disk_read_only = stats.disk_read_only;
  info.block_count = stats.block_count;
  info.last_heartbeat_age_ms = reader.getLastHeartbeatAgeMs();
  info.host = ToStdString(reader.getHost());
  info.rack = ToStdString(reader.getRack());
  info.public_key = ToStdString(reader.getPublicKey());
  switch (reader.getState()) {
    case proto::WorkerState::ACTIVE:
      info.state = "active";
      break;
    case proto::WorkerState::UNCONFIRMED:
      info.state = "unconfirmed";
      break;
    case proto::WorkerState::DECOMMISSIONING:
      info.state = "decommissioning";
      break;
    default:
      info.state = "unknown";
      break;
  }
  return info;
}

Status ToBlockLocations(capnp::List<proto::BlockLocations>::Reader list,
                        std::vector<BlockLocations>* out) {
  out->reserve(list.size());
  for (proto::BlockLocations::Reader entry : list) {
    Result<BlockId> id = ParseWireBlockId(entry.getBlockId());
    if (!id.ok())
      return InternalError("master sent a malformed block id: " + id.status().message());
    BlockLocations block{*id, FromProto(entry.getLevel()), {}, entry.getDigest()};
    block.locations.reserve(entry.getLocations().size());
    for (proto::Location::Reader location : entry.getLocations()) {
      block.locations.push_back(ToBlockLocation(location));
      block.locations.back().block_digest = block.digest;
    }
    out->push_back(std::move(block));
  }
  return Status::Ok();
}

std::string DefaultHolderName() {
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
  return std::string(host.data()) + ":" + std::to_string(getpid());
}

Status DigestMismatch(const std::string& block, const std::string& peer, uint64_t unit,
                      uint64_t total) {
  return DataLossError("block " + block + " from " + peer + ": bytes " +
                       std::to_string(unit * kDigestUnitBytes) + " to " +
                       std::to_string(std::min<uint64_t>((unit + 1) * kDigestUnitBytes, total)) +
                       " do not match their digest (a corrupt copy, or corrupted in transit)");
}

// The channel's error, saying which peer it came from (as Call's).
Status WithPeer(const Status& error, const std::string& peer) {
  const char* what = error.code() == StatusCode::kUnavailable ? " unreachable: " : ": ";
  return Status(error.code(), peer + what + error.message());
}

// Ranges of one get a client keeps asked for beyond the one it is checking (ReadFrom). None:
// measured side by side on two cores (bench workload 11 against the build before), asking one
// or two ranges ahead made 64 MiB memory gets 12-17% slower, not faster: the client and the
// worker already keep both cores busy, and ranges ahead only add bytes queued in memory. The
// window stays in the code (it handles ranges cut short) for machines with cores to spare.
constexpr size_t kReadWindow = 0;

// Sizes a get's buffer for the whole block up front, so the bytes are copied once, not again on
// each growth. A big block's buffer, which glibc maps afresh (above its mmap threshold as the
// binaries set it, common/allocator.h), is backed by huge pages where the kernel can, so filling
// it does not pay a page fault per 4 KiB (most of a 64 MiB get's time on a VM otherwise).
void ReserveBlockBuffer(std::vector<std::byte>& data, uint64_t size) {
  constexpr uint64_t kHugePageAdviceBytes = 32 << 20;
  data.reserve(size);
  if (size >= kHugePageAdviceBytes) AdviseHugePages(data.data(), data.capacity());
}

// Ok when the bytes of a range a worker sent, [offset, offset + length) of a block of `total`
// bytes, match the stored digests it sent with them (none: a block stored without digests).
// kDataLoss otherwise: that copy is corrupt, the caller reads another.
Status CheckRange(const std::vector<zmq::message_t>& frames, uint64_t offset, uint64_t length,
                  uint64_t total, const std::vector<uint64_t>& unit_digests,
                  const std::string& peer, const std::string& block) {
  if (unit_digests.empty()) return Status::Ok();
  std::vector<std::span<const std::byte>> pieces;
  pieces.reserve(frames.size());
  for (const zmq::message_t& frame : frames) {
    pieces.emplace_back(static_cast<const std::byte*>(frame.data()), frame.size());
  }
  std::optional<uint64_t> bad = FirstBadUnit(pieces, offset, length, total, unit_digests);
  if (!bad.has_value()) return Status::Ok();
  return DigestMismatch(block, peer, *bad, total);
}

}  // namespace

CacheCounters& CacheCounters::operator+=(const CacheCounters& other) {
  local_hits += other.local_hits;
  remote_hits += other.remote_hits;
  misses += other.misses;
  computes += other.computes;
  waits += other.waits;
  bytes_fetched += other.bytes_fetched;
  store_failures += other.store_failures;
  return *this;
}

// The bytes of an upload, handed out piece by piece. The first piece is kept so the upload can
// start over on another worker after the first one refused it; a rewindable source (a span, a
// seekable stream, chunks) can start over at any point.
class Client::Impl::PieceSource {
 public:
  // Bytes copied from `read` into the frames sent. `rewind` may be empty: the source cannot be
  // read again.
  PieceSource(ByteSource read, uint64_t size, std::function<void()> rewind)
      : read_(std::move(read)), size_(size), rewind_(std::move(rewind)) {}
  // Chunks from `next` sent as they are, without a copy (sliced to frames of at most
  // kChunkBytes); `next` returns null at the end. `rewind` as above.
  PieceSource(ChunkSource next, uint64_t size, std::function<void()> rewind)
      : next_chunk_(std::move(next)), size_(size), rewind_(std::move(rewind)) {}

  uint64_t size() const { return size_; }
  // Bytes handed out in the current attempt.
  uint64_t offset() const { return offset_; }
  // True once reading the source itself failed (not a worker's fault: do not fail over).
  bool failed() const { return failed_; }

  // The next bytes, at most kPutPieceBytes of them in at most kMaxPayloadFrames chunks of at
  // most kChunkBytes each.
  Result<std::vector<ChunkPtr>> NextPiece() {
    if (offset_ == 0 && first_piece_) {
      offset_ = first_piece_bytes_;
      return *first_piece_;
    }
    const uint64_t limit = std::min<uint64_t>(kPutPieceBytes, size_ - offset_);
    std::vector<ChunkPtr> chunks;
    uint64_t piece = 0;
    Status taken = next_chunk_ ? TakeChunks(limit, chunks, piece) : FillFrames(limit, chunks, piece);
    if (!taken.ok()) {
      failed_ = true;
      return taken;
    }
    if (offset_ == 0) {
      first_piece_ = chunks;
      first_piece_bytes_ = piece;
    }
    offset_ += piece;
    read_end_ = std::max(read_end_, offset_);
    return chunks;
  }

  // Starts the next attempt at byte 0. False when the bytes read so far cannot be had again.
  bool Restart() {
    if (read_end_ <= first_piece_bytes_) {
      offset_ = 0;
      return true;
    }
    if (!rewind_) return false;
    rewind_();
    pending_.reset();
    pending_offset_ = 0;
    offset_ = 0;
    read_end_ = 0;
    first_piece_.reset();
    first_piece_bytes_ = 0;
    return true;
  }

 private:
  Status DataEnded(uint64_t at) const {
    return InvalidArgumentError("the data ended after " + std::to_string(at) + " of " +
                                std::to_string(size_) + " bytes");
  }

  // `limit` bytes read into frame-sized buffers the source fills directly; they are sent as
  // they are (and, unlike a std::vector, not zero-filled first).
  Status FillFrames(uint64_t limit, std::vector<ChunkPtr>& chunks, uint64_t& piece) {
    for (uint64_t done = 0; done < limit;) {
      zmq::message_t frame(std::min<uint64_t>(kChunkBytes, limit - done));
      std::span<std::byte> buffer(static_cast<std::byte*>(frame.data()), frame.size());
      size_t filled = 0;
      while (filled < buffer.size()) {
        ASSIGN_OR_RETURN(size_t got, read_(buffer.subspan(filled)));
        if (got == 0 || got > buffer.size() - filled) return DataEnded(offset_ + done + filled);
        filled += got;
      }
      done += buffer.size();
      chunks.push_back(ChunkFromMessage(std::move(frame)));
    }
    piece = limit;
    return Status::Ok();
  }

  // Up to `limit` bytes of the source's chunks, sliced (not copied) to frames of at most
  // kChunkBytes, and no more frames than a message may carry.
  Status TakeChunks(uint64_t limit, std::vector<ChunkPtr>& chunks, uint64_t& piece) {
    piece = 0;
    while (piece < limit && chunks.size() < kMaxPayloadFrames) {
      if (!pending_) {
        ASSIGN_OR_RETURN(pending_, next_chunk_());
        pending_offset_ = 0;
        if (!pending_) return DataEnded(offset_ + piece);
        if (pending_->size() == 0) {
          pending_.reset();
          continue;
        }
      }
      const size_t take = static_cast<size_t>(
          std::min<uint64_t>({pending_->size() - pending_offset_, kChunkBytes, limit - piece}));
      chunks.push_back(take == pending_->size() ? pending_
                                                : SliceChunk(pending_, pending_offset_, take));
      pending_offset_ += take;
      piece += take;
      if (pending_offset_ == pending_->size()) pending_.reset();
    }
    return Status::Ok();
  }

  ByteSource read_;
  ChunkSource next_chunk_;
  ChunkPtr pending_;           // the source's chunk being handed out
  size_t pending_offset_ = 0;  // how much of it was
  const uint64_t size_;
  std::function<void()> rewind_;
  uint64_t offset_ = 0;    // next byte of the current attempt
  uint64_t read_end_ = 0;  // bytes pulled from read_ since the last rewind
  std::optional<std::vector<ChunkPtr>> first_piece_;
  uint64_t first_piece_bytes_ = 0;
  bool failed_ = false;
};

Client::Impl::Impl(ClientOptions options, zmq::context_t& context)
    : options_(std::move(options)),
      context_(context),
      upload_ids_(std::random_device{}()),
      local_hosts_(options_.local_hosts.empty() ? DetectLocalHosts() : options_.local_hosts),
      holder_name_(options_.holder_name.empty() ? DefaultHolderName() : options_.holder_name),
      location_cache_(options_.location_cache_entries) {
  if (options_.key_file.empty() != options_.master_key_file.empty()) {
    keys_status_ = InvalidArgumentError(
        "keys need both a key (--key, BLOCKMGR_KEY) and the master's key (--master-key, "
        "BLOCKMGR_MASTER_KEY)");
    return;
  }
  if (options_.key_file.empty()) return;
  Result<CurveKeys> keys = LoadKeyPair(options_.key_file);
  if (!keys.ok()) {
    keys_status_ = keys.status();
    return;
  }
  Result<Certificate> master = LoadCertificate(options_.master_key_file);
  if (!master.ok()) {
    keys_status_ = master.status();
    return;
  }
  keys_ = std::move(keys).value();
  master_key_ = master->public_key;
}

Client::Impl::Impl(ClientOptions options, std::unique_ptr<zmq::context_t> context)
    : Impl(std::move(options), *context) {
  owned_context_ = std::move(context);
}

Client::Impl::~Impl() = default;

bool Client::Impl::IsLocalAddress(const std::string& address) const {
  return bm::IsLocalAddress(address, local_hosts_);
}

CacheCounters Client::Impl::TakeCounters() { return std::exchange(counters_, CacheCounters{}); }

Result<RpcChannel*> Client::Impl::Connect(std::unique_ptr<RpcChannel>& slot, const std::string& address,
                                    const std::string& server_key) {
  RETURN_IF_ERROR(keys_status_);
  if (!slot) {
    try {
      slot = std::make_unique<RpcChannel>(context_, address, options_.request_timeout,
                                          ChannelSecurity{keys_, server_key});
    } catch (const std::exception& e) {
      return InvalidArgumentError("cannot connect to '" + address + "': " + e.what());
    }
  }
  return slot.get();
}

void Client::Impl::TrustWorkerKey(const std::string& address, const std::string& public_key) {
  if (public_key.empty()) return;
  std::string& known = worker_keys_[address];
  if (known != public_key) {
    // A channel made for another key must not be reused for this one.
    workers_.erase(address);
    pipelines_.erase(address);
    known = public_key;
  }
}

Result<std::string> Client::Impl::WorkerKey(const std::string& address) {
  if (!keys_.enabled()) return std::string();
  auto known = worker_keys_.find(address);
  if (known != worker_keys_.end()) return known->second;
  RETURN_IF_ERROR(Workers().status());  // learns the keys of every worker it lists
  known = worker_keys_.find(address);
  if (known != worker_keys_.end()) return known->second;
  return PermissionDeniedError("the master vouches for no worker at " + address +
                               ", so its key is unknown");
}

Result<RpcChannel*> Client::Impl::WorkerChannel(const std::string& address) {
  ASSIGN_OR_RETURN(std::string key, WorkerKey(address));
  Result<RpcChannel*> channel = Connect(workers_[address], address, key);
  if (!channel.ok()) workers_.erase(address);
  return channel;
}

Result<IncomingMessage> Client::Impl::CallMaster(capnp::MallocMessageBuilder& request,
                                           milliseconds extra) {
  ASSIGN_OR_RETURN(RpcChannel * master, Connect(master_, options_.master_address, master_key_));
  return Call(*master, options_.request_timeout, "master", request, {}, extra);
}

// ---- writes ----

Result<PutResult> Client::Impl::Put(const BlockId& id, std::span<const std::byte> data,
                              StorageLevel level, const PutOptions& options) {
  // The caller's bytes go out as they are, frame by frame (no copy into fresh frames, whose
  // first touch costs a page fault per 4 KiB); `lent` waits, before this returns, until ZeroMQ
  // has let go of every frame pointing into them.
  LentBytes lent(data);
  Result<PutResult> put = UnavailableError("not attempted");
  {
    size_t next = 0;
    ChunkSource chunks = [&lent, &next]() -> Result<ChunkPtr> {
      if (next == lent.size()) return ChunkPtr();
      const size_t length = std::min<size_t>(kChunkBytes, lent.size() - next);
      ChunkPtr chunk = lent.Lend(next, length);
      next += length;
      return chunk;
    };
    PieceSource source(std::move(chunks), data.size(), [&next]() { next = 0; });
    put = PutFrom(id, source, level, options);
  }  // the source's kept pieces let go of their chunks here
  lent.AwaitReturned();
  return put;
}

Result<PutResult> Client::Impl::PutChunks(const BlockId& id, const BlockData& data, StorageLevel level,
                                    const PutOptions& options) {
  size_t next = 0;
  ChunkSource chunks = [&data, &next]() -> Result<ChunkPtr> {
    return next < data.chunks.size() ? data.chunks[next++] : nullptr;
  };
  PieceSource source(std::move(chunks), data.size, [&next]() { next = 0; });
  return PutFrom(id, source, level, options);
}

Result<PutResult> Client::Impl::PutStream(const BlockId& id, std::istream& in, uint64_t size,
                                    StorageLevel level, const PutOptions& options) {
  ByteSource read = [&in](std::span<std::byte> out) -> Result<size_t> {
    in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size()));
    if (in.bad()) return InternalError("reading the input failed");
    return static_cast<size_t>(in.gcount());
  };
  std::function<void()> rewind;
  const std::streampos start = in.tellg();
  if (start != std::streampos(-1)) {
    rewind = [&in, start]() {
      in.clear();
      in.seekg(start);
    };
  }
  PieceSource source(std::move(read), size, std::move(rewind));
  return PutFrom(id, source, level, options);
}

Result<PutResult> Client::Impl::PutStream(const BlockId& id, ByteSource read, uint64_t size,
                                    StorageLevel level, const PutOptions& options) {
  PieceSource source(std::move(read), size, nullptr);
  return PutFrom(id, source, level, options);
}

Result<PutResult> Client::Impl::PutFrom(const BlockId& id, PieceSource& source, StorageLevel level,
                                  const PutOptions& options) {
  // Whatever this client remembered of the old block may be replaced below.
  location_cache_.Forget(id);
  bool from_cache = false;
  ASSIGN_OR_RETURN(std::vector<WorkerInfo> workers, PlacementWorkers(false, &from_cache));
  const auto usable = std::count_if(workers.begin(), workers.end(), [](const WorkerInfo& w) {
    return w.state != "decommissioning";
  });
  if (from_cache && static_cast<uint64_t>(usable) < CopiesWanted(level, options)) {
    // Too few workers kept for the copies wanted: one may have joined since.
    ASSIGN_OR_RETURN(workers, PlacementWorkers(true, &from_cache));
  }
  Result<PutResult> put = PutOnce(id, source, level, options, std::move(workers));
  if (put.ok() || !from_cache || source.failed()) return put;
  // Placed from a kept worker list that no longer matched the cluster (a worker gone, full,
  // draining, or one named that joined since): place again from the master's list.
  const StatusCode code = put.status().code();
  const bool placement_failed = code == StatusCode::kUnavailable ||
                                code == StatusCode::kOutOfSpace || code == StatusCode::kNotFound;
  if (!placement_failed || !source.Restart()) return put;
  ASSIGN_OR_RETURN(workers, PlacementWorkers(true, &from_cache));
  return PutOnce(id, source, level, options, std::move(workers));
}

Result<std::vector<WorkerInfo>> Client::Impl::PlacementWorkers(bool fresh, bool* from_cache) {
  const auto now = std::chrono::steady_clock::now();
  if (!fresh && !placement_workers_.empty() &&
      now - placement_workers_time_ < options_.worker_list_ttl) {
    *from_cache = true;
    return placement_workers_;
  }
  *from_cache = false;
  ASSIGN_OR_RETURN(std::vector<WorkerInfo> workers, Workers());
  placement_workers_ = workers;
  placement_workers_time_ = now;
  return workers;
}

void Client::Impl::CountPlacedCopy(const std::string& worker_id, Tier tier, uint64_t size) {
  for (WorkerInfo& worker : placement_workers_) {
    if (worker.id != worker_id) continue;
    (tier == Tier::kMemory ? worker.memory_used : worker.disk_used) += size;
    ++worker.block_count;
    return;
  }
}

Result<PutResult> Client::Impl::PutOnce(const BlockId& id, PieceSource& source, StorageLevel level,
                                  const PutOptions& options, std::vector<WorkerInfo> workers) {
  const uint32_t wanted = CopiesWanted(level, options);
  std::erase_if(workers, [](const WorkerInfo& w) { return w.state == "decommissioning"; });
  if (workers.empty()) return UnavailableError("no live workers are registered with the master");
  std::vector<WorkerInfo> candidates = ChooseWorkers(workers, source.size(), level, put_counter_++);
  if (options.worker_id) {
    // The named worker takes the first copy, whether or not placement would have chosen it.
    auto named = std::find_if(workers.begin(), workers.end(),
                              [&](const WorkerInfo& w) { return w.id == *options.worker_id; });
    if (named == workers.end()) return NotFoundError("no live worker named " + *options.worker_id);
    std::erase_if(candidates, [&](const WorkerInfo& w) { return w.id == named->id; });
    candidates.insert(candidates.begin(), *named);
  } else if (options.prefer_local) {
    std::stable_partition(candidates.begin(), candidates.end(),
                          [this](const WorkerInfo& w) { return IsLocalAddress(w.address); });
  }
  if (candidates.empty()) {
    return OutOfSpaceError("no live worker has room for " + id.ToString() + " (" +
                           FormatBytes(source.size()) + ", " +
                           std::string(StorageLevelName(level)) + ")");
  }
  // Copies on distinct racks, then hosts, then workers; the named worker (if any) first.
  std::vector<ReplicaSite> sites;
  for (const WorkerInfo& w : candidates) {
    sites.push_back({w.id, w.host.empty() ? HostOfAddress(w.address) : w.host, w.rack});
  }
  std::vector<size_t> order;
  if (options.worker_id) {
    order.push_back(0);
    for (size_t i : SpreadReplicas(std::span(sites).subspan(1), std::span(sites).first(1),
                                   wanted - 1)) {
      order.push_back(i + 1);
    }
  } else {
    order = SpreadReplicas(sites, {}, wanted);
  }

  // Every copy this put stores carries one version token, so the master sees them as one
  // version and lets that version replace any other (PROTOCOL.md, "One version per block id").
  const UploadVersion version{NewVersionToken(), /*replica=*/false, options.compute_lease};
  std::vector<Result<PutResult>> stored;
  Status last;
  size_t next = 0;
  bool attempted = false;
  while (stored.size() < wanted && next < order.size()) {
    if (attempted && !source.Restart()) break;
    attempted = true;
    std::vector<const WorkerInfo*> batch;
    while (batch.size() < wanted - stored.size() && next < order.size()) {
      batch.push_back(&candidates[order[next++]]);
    }
    for (Result<PutResult>& put : Upload(batch, id, source, level, version)) {
      if (put.ok()) {
        stored.push_back(std::move(put));
        continue;
      }
      last = put.status();
      const bool worker_refused =
          last.code() == StatusCode::kUnavailable || last.code() == StatusCode::kOutOfSpace;
      // The kept worker list was wrong about this worker: the next put asks the master.
      if (worker_refused) placement_workers_.clear();
      if (source.failed() || !worker_refused) return last;
    }
    // A named worker that failed is not replaced by another for the first copy.
    if (options.worker_id && stored.empty()) return last;
  }
  if (stored.empty()) return last;
  // The ids before the first result is moved from (its worker_id would read back empty).
  std::vector<std::string> replicas;
  std::vector<BlockLocation> locations;
  for (const Result<PutResult>& put : stored) {
    replicas.push_back(put->worker_id);
    locations.push_back({put->worker_id, put->address, put->tier, put->size});
    CountPlacedCopy(put->worker_id, put->tier, put->size);
  }
  // Memory copies first, as the master lists them.
  std::stable_partition(locations.begin(), locations.end(),
                        [](const BlockLocation& l) { return l.tier == Tier::kMemory; });
  location_cache_.Remember(id, std::move(locations));
  PutResult result = std::move(stored.front()).value();
  result.copies_wanted = wanted;
  result.replicas = std::move(replicas);
  return result;
}

uint64_t Client::Impl::NewVersionToken() {
  uint64_t token = 0;
  while (token == 0) token = upload_ids_();
  return token;
}

std::vector<Result<PutResult>> Client::Impl::Upload(const std::vector<const WorkerInfo*>& targets,
                                              const BlockId& id, PieceSource& source,
                                              StorageLevel level, const UploadVersion& version) {
  // Pieces go to every target with up to kPutWindowPieces of them unacknowledged per target
  // (PROTOCOL.md, "Uploads"): the next pieces are read and hashed while the worker takes the
  // earlier ones. A piece is kept until every target still in the upload acknowledged it; its
  // chunks are shared, not copied, between the targets' messages.
  struct Piece {
    uint64_t offset = 0;
    std::vector<ChunkPtr> chunks;
    bool last = false;
    // The piece's unit digests when it is cut on unit boundaries (the worker checks them and
    // stores them as they are), else one digest of its bytes.
    std::vector<uint64_t> unit_digests;
    std::optional<uint64_t> piece_digest;
  };
  struct Target {
    const WorkerInfo* worker = nullptr;
    RpcChannel* channel = nullptr;
    uint64_t upload_id = 0;
    std::optional<Status> failure;
    Tier tier = Tier::kMemory;
    bool started = false;             // a piece was sent: the worker may hold a claim for it
    size_t acked = 0;                 // pieces the worker acknowledged (by index)
    size_t sent = 0;                  // index of the next piece to send
    std::deque<uint64_t> in_flight;   // request ids of pieces [acked, sent)
    std::set<size_t> resent;          // pieces sent again after a transit corruption
  };
  std::vector<Target> uploads;
  // A target this client gives up on releases its claim at once (PROTOCOL.md, "Uploads").
  auto give_up = [](Target& target, Status why) {
    target.failure = std::move(why);
    for (uint64_t request : target.in_flight) target.channel->Abandon(request);
    // Pieces still queued for this worker are dropped with its connection rather than sent: a
    // put of lent bytes (Put) cannot return while a frame still points into them, and a
    // stalled worker might never take them. The closed connection aborts the upload there;
    // an abortPut is needed only on a connection that stays.
    if (!target.in_flight.empty()) {
      target.channel->DropQueued();
    } else if (target.started) {
      PostAbortPut(*target.channel, target.upload_id);
    }
    target.in_flight.clear();
  };
  for (const WorkerInfo* worker : targets) {
    Target target;
    target.worker = worker;
    Result<RpcChannel*> channel = WorkerChannel(worker->address);
    if (channel.ok()) {
      target.channel = *channel;
      target.upload_id = upload_ids_();
    } else {
      target.failure = channel.status();
    }
    uploads.push_back(std::move(target));
  }
  const std::string block = id.ToString();
  auto live = [&] {
    return std::any_of(uploads.begin(), uploads.end(),
                       [](const Target& t) { return !t.failure.has_value(); });
  };
  std::deque<Piece> window;
  size_t window_base = 0;  // index of window.front()
  bool source_done = false;

  // Reads the next piece and computes what the workers check it against.
  auto read_piece = [&]() -> Status {
    Piece piece;
    piece.offset = source.offset();
    ASSIGN_OR_RETURN(piece.chunks, source.NextPiece());
    piece.last = source.offset() == source.size();
    std::vector<std::span<const std::byte>> spans;
    spans.reserve(piece.chunks.size());
    for (const ChunkPtr& chunk : piece.chunks) spans.push_back(chunk->bytes());
    const uint64_t end = source.offset();
    if (piece.offset % kDigestUnitBytes == 0 && (piece.last || end % kDigestUnitBytes == 0)) {
      piece.unit_digests = UnitDigestsOf(spans);
    } else {
      StreamingDigest digest;
      for (std::span<const std::byte> span : spans) digest.Update(span);
      piece.piece_digest = digest.value();
    }
    source_done = piece.last;
    window.push_back(std::move(piece));
    return Status::Ok();
  };
  auto send_piece = [&](Target& target, const Piece& piece) -> Status {
    capnp::MallocMessageBuilder message;
    proto::PutBlock::Builder put = message.initRoot<proto::Request>().initPutBlock();
    put.setBlockId(block);
    put.setLevel(ToProto(level));
    put.setTotalSize(source.size());
    put.setOffset(piece.offset);
    put.setLast(piece.last);
    put.setUploadId(target.upload_id);
    put.setVersion(version.token);
    put.setReplica(version.replica);
    put.setLeaseToken(version.lease);
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
    target.channel->set_timeout(options_.request_timeout);
    Result<uint64_t> request = target.channel->Send(message, std::move(payload));
    if (!request.ok()) {
      return Status(request.status().code(),
                    "worker " + target.worker->id + " unreachable: " + request.status().message());
    }
    target.in_flight.push_back(*request);
    ++target.sent;
    return Status::Ok();
  };
  // Takes the worker's answer to the oldest piece `target` has in flight.
  auto take_reply = [&](Target& target) {
    const size_t index = target.acked;
    const Piece& piece = window[index - window_base];
    const std::string peer = "worker " + target.worker->id;
    const uint64_t request = target.in_flight.front();
    target.in_flight.pop_front();
    Result<IncomingMessage> reply =
        Await(*target.channel, options_.request_timeout, peer, request,
              piece.last ? kCommitSlack : milliseconds(0));
    if (!reply.ok() && reply.status().code() == StatusCode::kDataLoss &&
        !target.resent.contains(index)) {
      // Corrupted in transit: not appended, and the pieces sent after it were refused
      // (`aborted`) without ending the upload. Their answers are taken, and all are sent
      // again from this one, once.
      target.resent.insert(index);
      while (!target.in_flight.empty()) {
        (void)Await(*target.channel, options_.request_timeout, peer, target.in_flight.front());
        target.in_flight.pop_front();
      }
      target.sent = index;
      return;
    }
    if (!reply.ok()) {
      give_up(target, reply.status());
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
      read = InternalError(peer + (piece.last ? " did not commit " : " committed early ") + block);
    }
    if (!read.ok()) {
      give_up(target, read);
      return;
    }
    ++target.acked;
  };

  while (live()) {
    // Pieces every live target acknowledged are let go; the next are read up to a window
    // ahead of the slowest target.
    size_t slowest = SIZE_MAX;
    for (const Target& target : uploads) {
      if (!target.failure) slowest = std::min(slowest, target.acked);
    }
    while (window_base < slowest && !window.empty()) {
      window.pop_front();
      ++window_base;
    }
    while (!source_done && window_base + window.size() < slowest + kPutWindowPieces) {
      if (Status read = read_piece(); !read.ok()) {
        for (Target& target : uploads) {
          if (!target.failure) give_up(target, read);
        }
        break;
      }
    }
    if (!live()) break;
    const size_t produced = window_base + window.size();
    for (Target& target : uploads) {
      while (!target.failure && target.sent < produced &&
             target.sent < target.acked + kPutWindowPieces) {
        if (Status sent = send_piece(target, window[target.sent - window_base]); !sent.ok()) {
          give_up(target, sent);
        }
      }
    }
    bool waited = false;
    for (Target& target : uploads) {
      if (target.failure || target.in_flight.empty()) continue;
      take_reply(target);
      waited = true;
    }
    if (!waited) break;  // every live target acknowledged every piece
  }
  std::vector<Result<PutResult>> results;
  for (Target& target : uploads) {
    if (target.failure) {
      results.emplace_back(*target.failure);
    } else {
      results.emplace_back(PutResult{target.worker->id, target.worker->address, target.tier,
                                     source.size()});
    }
  }
  return results;
}

Result<uint32_t> Client::Impl::CopyBlock(const BlockId& id, const std::string& source_address,
                                   const std::vector<WorkerInfo>& targets, StorageLevel level) {
  for (const WorkerInfo& target : targets) TrustWorkerKey(target.address, target.public_key);
  ASSIGN_OR_RETURN(RpcChannel * channel, WorkerChannel(source_address));
  const std::string block = id.ToString();
  const std::string peer = "worker at " + source_address;
  // Pulls the block from the source in ranges of up to kMaxPieceBytes and hands the received
  // frames on to the upload as they are (no copy); every range must come from the same
  // generation.
  std::vector<zmq::message_t> frames;
  size_t frame = 0;
  uint64_t fetched = 0, total = 0;
  std::optional<uint64_t> generation;
  uint64_t version = 0;
  auto fetch = [&]() -> Status {
    capnp::MallocMessageBuilder message;
    proto::GetBlock::Builder get = message.initRoot<proto::Request>().initGetBlock();
    get.setBlockId(block);
    get.setOffset(fetched);
    get.setMaxLength(kMaxPieceBytes);
    ASSIGN_OR_RETURN(IncomingMessage reply, Call(*channel, options_.request_timeout, peer, message));
    uint64_t length = 0, reply_generation = 0, reply_total = 0;
    std::vector<uint64_t> unit_digests;
    RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
      proto::Reply::Reader r = reply.reply();
      if (!r.isGet()) return UnexpectedReply(peer, "get");
      length = r.getGet().getLength();
      reply_generation = r.getGet().getGeneration();
      reply_total = r.getGet().getTotalSize();
      version = r.getGet().getVersion();
      for (uint64_t digest : r.getGet().getUnitDigests()) unit_digests.push_back(digest);
      return Status::Ok();
    }));
    if (generation && (reply_generation != *generation || reply_total != total)) {
      return AbortedError(block + " was replaced on " + peer + " while being copied");
    }
    if (reply.payload_bytes() != length || length > reply_total - fetched ||
        (length == 0 && fetched < reply_total)) {
      return InternalError(peer + " sent a malformed range of " + block);
    }
    // A copy is made only of bytes that match their digests.
    RETURN_IF_ERROR(CheckRange(reply.payload(), fetched, length, reply_total, unit_digests, peer,
                               block));
    generation = reply_generation;
    total = reply_total;
    fetched += length;
    frames = std::move(reply.payload());
    frame = 0;
    return Status::Ok();
  };
  RETURN_IF_ERROR(fetch());
  ChunkSource next = [&]() -> Result<ChunkPtr> {
    while (frame == frames.size()) {
      if (fetched == total) return ChunkPtr();
      RETURN_IF_ERROR(fetch());
    }
    return ChunkFromMessage(std::move(frames[frame++]));
  };
  PieceSource source(std::move(next), total, nullptr);
  std::vector<const WorkerInfo*> pointers;
  for (const WorkerInfo& target : targets) pointers.push_back(&target);
  uint32_t copies = 0;
  Status last;
  // The copies keep the source's version: they are more copies of it, not a new put (a source
  // from before versions has none, and the targets then pick one).
  for (Result<PutResult>& put : Upload(pointers, id, source, level, {version, /*replica=*/true})) {
    if (put.ok()) {
      ++copies;
    } else {
      last = put.status();
    }
  }
  if (copies == 0 && !targets.empty()) return last;
  return copies;
}

Result<uint64_t> Client::Impl::Remove(const std::vector<BlockId>& ids) {
  for (const BlockId& id : ids) location_cache_.Forget(id);
  capnp::MallocMessageBuilder message;
  auto list = message.initRoot<proto::Request>().initRemoveBlocks().initBlockIds(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) list.set(i, ids[i].ToString());
  ASSIGN_OR_RETURN(IncomingMessage reply, CallMaster(message, kRemoveSlack));
  uint64_t removed = 0;
  RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::Reply::Reader r = reply.reply();
    if (!r.isRemoved()) return UnexpectedReply("master", "removed");
    removed = r.getRemoved();
    return Status::Ok();
  }));
  return removed;
}

Result<uint64_t> Client::Impl::RemoveRdd(uint64_t rdd_id) {
  location_cache_.ForgetRdd(rdd_id);
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Request>().initRemoveRdd().setRddId(rdd_id);
  ASSIGN_OR_RETURN(IncomingMessage reply, CallMaster(message, kRemoveSlack));
  uint64_t removed = 0;
  RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::Reply::Reader r = reply.reply();
    if (!r.isRemoved()) return UnexpectedReply("master", "removed");
    removed = r.getRemoved();
    return Status::Ok();
  }));
  return removed;
}

// ---- reads ----

Result<std::vector<std::byte>> Client::Impl::Get(const BlockId& id) {
  std::vector<std::byte> data;
  ByteSink sink = [&data](std::span<const std::byte> bytes) {
    data.insert(data.end(), bytes.begin(), bytes.end());
    return Status::Ok();
  };
  auto reserve = [&data](uint64_t size) { ReserveBlockBuffer(data, size); };
  ASSIGN_OR_RETURN(uint64_t size, ReadBlock(id, sink, [&data]() { data.clear(); }, reserve));
  BM_CHECK(size == data.size());
  return data;
}

Result<uint64_t> Client::Impl::GetTo(const BlockId& id, const ByteSink& sink) {
  return ReadBlock(id, sink, nullptr);
}

Result<uint64_t> Client::Impl::GetTo(const BlockId& id, std::ostream& out) {
  ByteSink sink = [&out](std::span<const std::byte> bytes) {
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    return out ? Status::Ok() : InternalError("writing the block's bytes failed");
  };
  return ReadBlock(id, sink, nullptr);
}

std::vector<Result<std::vector<std::byte>>> Client::Impl::GetMany(const std::vector<BlockId>& ids) {
  std::vector<Result<BlockData>> blocks = GetManyChunks(ids);
  std::vector<Result<std::vector<std::byte>>> out;
  out.reserve(blocks.size());
  for (Result<BlockData>& block : blocks) {
    if (!block.ok()) {
      out.emplace_back(block.status());
    } else if (block->chunks.size() == 1) {
      const std::span<const std::byte> bytes = block->chunks.front()->bytes();
      out.emplace_back(std::vector<std::byte>(bytes.begin(), bytes.end()));
    } else {
      out.emplace_back(block->Flatten());
    }
  }
  return out;
}

std::vector<Result<BlockData>> Client::Impl::GetManyChunks(const std::vector<BlockId>& ids) {
  std::vector<Result<BlockData>> out(ids.size(), Result<BlockData>(InternalError("not read")));
  std::vector<uint64_t> sizes(ids.size());  // as the master last reported them
  // Whether an address is this host's, asked once per address rather than once per block.
  std::map<std::string, bool, std::less<>> local;
  auto is_local = [&](const std::string& address) {
    auto it = local.find(address);
    if (it == local.end()) it = local.emplace(address, IsLocalAddress(address)).first;
    return it->second;
  };
  auto preferred = [&](const std::vector<BlockLocation>& locations) -> const BlockLocation& {
    if (locations.size() == 1) return locations.front();
    auto found = std::find_if(locations.begin(), locations.end(),
                              [&](const BlockLocation& l) { return is_local(l.address); });
    return found != locations.end() ? *found : locations.front();
  };
  // The reads of remembered blocks go out before anything is looked up.
  std::map<std::string, std::vector<size_t>> by_worker;
  std::vector<size_t> unknown;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (const std::vector<BlockLocation>* cached = location_cache_.Find(ids[i])) {
      const BlockLocation& from = preferred(*cached);
      by_worker[from.address].push_back(i);
      sizes[i] = from.size;
    } else {
      unknown.push_back(i);
    }
  }
  std::map<uint64_t, PendingBatch> in_flight;  // by request id
  std::vector<size_t> retry;
  SendBatches(by_worker, ids, sizes, in_flight, retry);
  // The others are looked up in chunks that grow, and each chunk's reads are sent as soon as
  // its locations are known: the workers serve one chunk while the master answers the next
  // (one lookup of all 10,000 ids of workload 7 first left the workers idle for 6-10 ms).
  constexpr size_t kFirstLookupChunk = 256;
  constexpr size_t kMaxLookupChunk = 4096;
  for (size_t first = 0, chunk = kFirstLookupChunk; first < unknown.size();
       first += chunk, chunk = std::min(2 * chunk, kMaxLookupChunk)) {
    const size_t n = std::min(chunk, unknown.size() - first);
    std::vector<BlockId> lookup;
    lookup.reserve(n);
    for (size_t k = 0; k < n; ++k) lookup.push_back(ids[unknown[first + k]]);
    Result<std::vector<BlockLocations>> found = Locations(lookup);
    if (!found.ok()) {  // the master is not answering: the ids left unread fail with why
      for (size_t k = first; k < unknown.size(); ++k) out[unknown[k]] = found.status();
      break;
    }
    by_worker.clear();
    for (size_t k = 0; k < n; ++k) {
      const size_t i = unknown[first + k];
      if ((*found)[k].locations.empty()) {
        out[i] = NotFoundError("block " + ids[i].ToString() + " is not stored on any live worker");
      } else {
        const BlockLocation& from = preferred((*found)[k].locations);
        by_worker[from.address].push_back(i);
        sizes[i] = from.size;
        location_cache_.Remember(ids[i], std::move((*found)[k].locations));
      }
    }
    SendBatches(by_worker, ids, sizes, in_flight, retry);
  }
  AwaitBatches(ids, in_flight, out, retry);
  for (size_t i : retry) {
    Result<std::vector<std::byte>> alone = Get(ids[i]);
    if (!alone.ok()) {
      out[i] = alone.status();
      continue;
    }
    BlockData data;
    if (!alone->empty()) data.Append(std::make_shared<VectorChunk>(std::move(alone).value()));
    out[i] = std::move(data);
  }
  return out;
}

namespace {

// Expected bytes one getBlocks of GetMany asks for: 256 blocks of 4 KiB (the packed reply is
// one 1 MiB frame), where a cap of 64 ids cost four requests and replies for the same bytes
// (worker CPU per 10,000 4 KiB blocks 20 -> 17-18.5 ms), and a reply is still small enough to
// be on its way while the worker packs the next.
constexpr uint64_t kGetBlocksBatchBytes = 1 << 20;

}  // namespace

// How many of indexes[start...] one getBlocks asks for: up to kMaxGetBlocksIds ids and
// kGetBlocksBatchBytes of expected bytes, at least one id. A block the worker cannot fit in
// its reply comes back notIncluded and is read alone.
size_t Client::Impl::BatchLength(const std::vector<size_t>& indexes, size_t start,
                                 const std::vector<uint64_t>& sizes) {
  size_t count = 0;
  uint64_t bytes = 0;
  while (start + count < indexes.size() && count < kMaxGetBlocksIds) {
    const uint64_t size = sizes[indexes[start + count]];
    if (count > 0 && bytes + size > kGetBlocksBatchBytes) break;
    bytes += size;
    ++count;
  }
  return count;
}

void Client::Impl::SendBatches(const std::map<std::string, std::vector<size_t>>& by_worker,
                               const std::vector<BlockId>& ids, const std::vector<uint64_t>& sizes,
                               std::map<uint64_t, PendingBatch>& in_flight,
                               std::vector<size_t>& retry) {
  for (const auto& [address, indexes] : by_worker) {
    Result<std::string> key = WorkerKey(address);
    if (!key.ok()) {  // no key the master vouches for: the one-by-one reads report why
      retry.insert(retry.end(), indexes.begin(), indexes.end());
      continue;
    }
    std::unique_ptr<zmq::socket_t>& socket = pipelines_[address];
    if (!socket) {
      try {
        socket = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
        // Cannot fail: with keys on, WorkerKey() returned a key.
        BM_CHECK(ConfigureClientSocket(*socket, {keys_, *key}, address).ok());
        socket->set(zmq::sockopt::sndtimeo, static_cast<int>(options_.request_timeout.count()));
        socket->connect(address);
      } catch (const zmq::error_t&) {
        pipelines_.erase(address);
        retry.insert(retry.end(), indexes.begin(), indexes.end());
        continue;
      }
    }
    for (size_t start = 0, count = 0; start < indexes.size(); start += count) {
      count = BatchLength(indexes, start, sizes);
      PendingBatch batch{address, {indexes.begin() + static_cast<ptrdiff_t>(start),
                            indexes.begin() + static_cast<ptrdiff_t>(start + count)}};
      const uint64_t request_id = next_pipelined_id_++;
      capnp::MallocMessageBuilder message;
      proto::Request::Builder request = message.initRoot<proto::Request>();
      request.setId(request_id);
      auto list = request.initGetBlocks().initBlockIds(static_cast<unsigned>(count));
      for (size_t k = 0; k < count; ++k) {
        list.set(static_cast<unsigned>(k), ids[batch.indexes[k]].ToString());
      }
      if (!SendMessage(*socket, nullptr, message).ok()) {
        retry.insert(retry.end(), batch.indexes.begin(), batch.indexes.end());
        continue;
      }
      in_flight.emplace(request_id, std::move(batch));
    }
  }
}

void Client::Impl::AwaitBatches(const std::vector<BlockId>& ids,
                                std::map<uint64_t, PendingBatch>& in_flight,
                                std::vector<Result<BlockData>>& out,
                                std::vector<size_t>& retry) {
  std::vector<std::string> addresses;
  for (const auto& [request_id, batch] : in_flight) addresses.push_back(batch.address);
  std::sort(addresses.begin(), addresses.end());
  addresses.erase(std::unique(addresses.begin(), addresses.end()), addresses.end());
  const auto deadline = std::chrono::steady_clock::now() + options_.request_timeout;
  if (addresses.size() == 1) {
    // One worker (GetMany's usual case): a receive bounded by the time left, without a
    // zmq::poll pass first, which costs system calls of its own on every reply (as in
    // RpcChannel::Call).
    zmq::socket_t& socket = *pipelines_[addresses.front()];
    while (!in_flight.empty()) {
      const auto left =
          std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      socket.set(zmq::sockopt::rcvtimeo, static_cast<int>(left.count()));
      Result<IncomingMessage> received = ReceiveMessage(socket, /*has_routing_id=*/false);
      if (received.ok()) {
        TakeBatchReply(*received, ids, in_flight, out, retry);
      } else if (received.status().code() == StatusCode::kUnavailable) {
        break;  // the time is up
      }
    }
  }
  while (!in_flight.empty() && addresses.size() > 1) {
    std::vector<zmq::pollitem_t> items;
    for (const std::string& address : addresses) {
      items.push_back({pipelines_[address]->handle(), 0, ZMQ_POLLIN, 0});
    }
    const auto left = std::chrono::duration_cast<milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || zmq::poll(items, std::max(left, milliseconds(0))) == 0) break;
    for (size_t w = 0; w < items.size(); ++w) {
      if (!(items[w].revents & ZMQ_POLLIN)) continue;
      Result<IncomingMessage> received =
          ReceiveMessage(*pipelines_[addresses[w]], /*has_routing_id=*/false);
      if (received.ok()) TakeBatchReply(*received, ids, in_flight, out, retry);
    }
  }
  // Unanswered in time: late replies must not meet a later call, so those sockets go, and
  // their blocks are read again one by one (which falls over to other copies).
  for (const auto& [request_id, batch] : in_flight) {
    pipelines_.erase(batch.address);
    retry.insert(retry.end(), batch.indexes.begin(), batch.indexes.end());
  }
}

void Client::Impl::TakeBatchReply(IncomingMessage& message, const std::vector<BlockId>& ids,
                                  std::map<uint64_t, PendingBatch>& in_flight,
                                  std::vector<Result<BlockData>>& out,
                                  std::vector<size_t>& retry) {
  uint64_t request_id = 0;
  Status status = ReadGuarded([&]() -> Status {
    request_id = message.reply().getId();
    return Status::Ok();
  });
  auto found = in_flight.find(request_id);
  if (!status.ok() || found == in_flight.end()) return;  // garbled, or a stale reply
  const std::vector<size_t> indexes = std::move(found->second.indexes);
  in_flight.erase(found);
  // The included blocks' bytes, back to back over the frames. Each block is handed out as
  // slices of the frames it lies in (no copy); a slice keeps its frame alive.
  const uint64_t payload_bytes = message.payload_bytes();
  const std::vector<ChunkPtr> frames = message.TakePayloadChunks();
  size_t frame = 0, frame_offset = 0;
  auto take = [&](uint64_t n, BlockData& block) {
    while (n > 0 && frame < frames.size()) {
      const size_t available = frames[frame]->size() - frame_offset;
      const size_t k = static_cast<size_t>(std::min<uint64_t>(available, n));
      block.Append(SliceChunk(frames[frame], frame_offset, k));
      n -= k;
      frame_offset += k;
      if (frame_offset == frames[frame]->size()) {
        ++frame;
        frame_offset = 0;
      }
    }
    return n == 0;
  };
  std::vector<size_t> to_retry;
  std::vector<std::span<const std::byte>> pieces;
  std::vector<uint64_t> digests;
  status = ReadGuarded([&]() -> Status {
    proto::Reply::Reader reply = message.reply();
    if (!reply.isBlocksRead()) return UnexpectedReply("worker", "blocksRead");
    auto entries = reply.getBlocksRead();
    if (entries.size() != indexes.size()) return InternalError("worker answered a wrong count");
    for (size_t k = 0; k < indexes.size(); ++k) {
      proto::MultiGetEntry::Reader entry = entries[static_cast<unsigned>(k)];
      const size_t index = indexes[k];
      if (entry.getState() != proto::MultiGetEntry::State::INCLUDED) {
        // Moved or removed since this client learnt where it was: ask the master again.
        if (entry.getState() == proto::MultiGetEntry::State::NOT_FOUND) {
          location_cache_.Forget(ids[index]);
        }
        to_retry.push_back(index);
        continue;
      }
      const uint64_t size = entry.getTotalSize();
      if (size > payload_bytes) return InternalError("worker announced more bytes than it sent");
      BlockData block;
      if (!take(size, block)) {
        return InternalError("worker sent fewer bytes of " + ids[index].ToString() +
                             " than it announced");
      }
      if (entry.hasUnitDigests()) {
        digests.clear();
        for (uint64_t digest : entry.getUnitDigests()) digests.push_back(digest);
        pieces.clear();
        for (const ChunkPtr& chunk : block.chunks) pieces.push_back(chunk->bytes());
        if (FirstBadUnit(pieces, 0, size, size, digests)) {
          // A corrupt copy, or bytes that went bad on the way: the block is read alone, which
          // reads past a bad copy to a good one and reports it.
          to_retry.push_back(index);
          continue;
        }
      }
      counters_.bytes_fetched += size;
      out[index] = std::move(block);
    }
    return Status::Ok();
  });
  if (!status.ok()) {
    // An error reply or a malformed one: every block of the batch is read again one by one,
    // which reports the reason for each.
    retry.insert(retry.end(), indexes.begin(), indexes.end());
    return;
  }
  retry.insert(retry.end(), to_retry.begin(), to_retry.end());
}

Result<std::vector<std::byte>> Client::Impl::ReadWhole(const BlockId& id,
                                                 std::vector<BlockLocation> known,
                                                 ReadReport& report) {
  std::vector<std::byte> data;
  ByteSink sink = [&data](std::span<const std::byte> bytes) {
    data.insert(data.end(), bytes.begin(), bytes.end());
    return Status::Ok();
  };
  auto reserve = [&data](uint64_t size) { ReserveBlockBuffer(data, size); };
  ASSIGN_OR_RETURN(uint64_t size, ReadBlock(id, sink, [&data]() { data.clear(); }, reserve,
                                            std::move(known), &report));
  BM_CHECK(size == data.size());
  return data;
}

Result<uint64_t> Client::Impl::ReadBlock(const BlockId& id, const ByteSink& sink,
                                   const std::function<void()>& reset,
                                   const std::function<void(uint64_t)>& expect_size,
                                   std::optional<std::vector<BlockLocation>> known,
                                   ReadReport* report) {
  const std::string block = id.ToString();
  int restarts = 0;
  ByteSink counting_sink = [this, &sink](std::span<const std::byte> bytes) {
    counters_.bytes_fetched += bytes.size();
    return sink(bytes);
  };
  // Workers that did not answer during this call are not waited for a second time when the
  // master, which has not noticed yet, lists them again.
  std::vector<std::string> unreachable;
  // Copies that failed their checksum on their worker (kDataLoss) during this call. Such a copy
  // is never served: the next copy is read instead, and the worker, which dropped the bad one,
  // reports it so the master restores the replication level. When no good copy is left the
  // read fails with kDataLoss rather than "not found".
  int corrupt_copies = 0;
  while (true) {
    std::vector<BlockLocation> locations;
    bool from_cache = false;
    if (known) {
      locations = std::move(*known);
      known.reset();
    } else if (const std::vector<BlockLocation>* cached = location_cache_.Find(id)) {
      locations = *cached;
      from_cache = true;
    } else {
      ASSIGN_OR_RETURN(std::vector<BlockLocations> found, Locations({id}));
      if (found.size() != 1) return InternalError("master sent no entry for " + block);
      locations = std::move(found[0].locations);
    }
    if (locations.empty()) {
      return NotFoundError("block " + block + " is not stored on any live worker");
    }
    if (!from_cache) location_cache_.Remember(id, locations);
    // This host's workers first; otherwise the master's order (memory copies before disk).
    std::stable_partition(locations.begin(), locations.end(), [this](const BlockLocation& l) {
      return IsLocalAddress(l.address);
    });
    bool emitted = false;
    bool all_not_found = true;
    bool replaced = false;
    bool stale_digest = false;
    Status last;
    for (const BlockLocation& location : locations) {
      if (emitted) {
        if (!reset) return last;
        reset();
        emitted = false;
      }
      if (std::find(unreachable.begin(), unreachable.end(), location.address) !=
          unreachable.end()) {
        last = UnavailableError("worker " + location.worker_id + " did not answer");
        all_not_found = false;
        continue;
      }
      if (expect_size) expect_size(location.size);
      ReadProgress progress;
      Result<uint64_t> read = ReadFrom(location, id, counting_sink, progress);
      if (read.ok()) {
        read = CheckBlockDigest(location, block, *read, progress);
        if (!read.ok() && from_cache) {
          // The remembered digest may be an older version's: ask the master before calling
          // the copy corrupt.
          stale_digest = true;
          emitted = progress.emitted;
          last = read.status();
          break;
        }
      }
      if (read.ok()) {
        if (report != nullptr) report->local = IsLocalAddress(location.address);
        return read;
      }
      if (report != nullptr && !progress.sink_failed) {
        report->failed_workers.push_back(location.worker_id);
      }
      emitted = progress.emitted;
      last = read.status();
      if (progress.sink_failed) return last;
      if (last.code() == StatusCode::kAborted) {
        replaced = true;
        break;
      }
      if (last.code() == StatusCode::kDataLoss) {
        ++corrupt_copies;
        // The worker re-reads its copy: dropped if it is bad there (the master then restores
        // a copy from a good one), else the bytes went bad on the way. Best effort.
        if (progress.digest_mismatch) (void)VerifyCopy(location, id, /*reported_bad=*/true);
        continue;
      }
      if (last.code() != StatusCode::kUnavailable && last.code() != StatusCode::kNotFound) {
        return last;
      }
      if (last.code() == StatusCode::kUnavailable) {
        all_not_found = false;
        unreachable.push_back(location.address);
      }
    }
    if (emitted && !reset) return last;
    if (emitted) reset();
    if (stale_digest) {
      location_cache_.Forget(id);
      continue;
    }
    if (!replaced) {
      location_cache_.Forget(id);
      // Remembered locations that are stale (moved, removed, or their worker failed): ask the
      // master, which is not a restart.
      if (from_cache) continue;
      if (corrupt_copies > 0 && all_not_found) {
        return DataLossError("block " + block + " is corrupt on every copy (" +
                             std::to_string(corrupt_copies) +
                             " found corrupt); last error: " + last.message());
      }
      if (all_not_found) {
        return NotFoundError("block " + block + " is not stored on any live worker");
      }
      return UnavailableError("cannot read block " + block + " from any of its " +
                              std::to_string(locations.size()) +
                              " locations; last error: " + last.message());
    }
    if (++restarts > kMaxReadRestarts) {
      return AbortedError("block " + block + " was replaced while being read " +
                          std::to_string(restarts) + " times in a row; gave up");
    }
  }
}

Result<uint64_t> Client::Impl::ReadFrom(const BlockLocation& location, const BlockId& id,
                                  const ByteSink& sink, ReadProgress& progress) {
  ASSIGN_OR_RETURN(RpcChannel * channel, WorkerChannel(location.address));
  const std::string peer = "worker " + location.worker_id;
  const std::string block = id.ToString();
  // Ranges asked for and not yet received, oldest first: up to kReadWindow, so the worker
  // reads and sends the next range while this thread checks and hands out the last one.
  struct Asked {
    uint64_t request;
    uint64_t offset;
  };
  std::deque<Asked> asked;
  struct AbandonAsked {  // on any return: replies still coming are dropped
    RpcChannel* channel;
    std::deque<Asked>* asked;
    ~AbandonAsked() {
      for (const Asked& a : *asked) channel->Abandon(a.request);
    }
  } abandon{channel, &asked};
  uint64_t asked_end = 0;  // where the next range to ask for starts
  auto ask = [&]() -> Status {
    capnp::MallocMessageBuilder message;
    proto::GetBlock::Builder get = message.initRoot<proto::Request>().initGetBlock();
    get.setBlockId(block);
    get.setOffset(asked_end);
    get.setMaxLength(kMaxPieceBytes);
    Result<uint64_t> request = channel->Send(message);
    if (!request.ok()) return WithPeer(request.status(), peer);
    asked.push_back({*request, asked_end});
    asked_end += kMaxPieceBytes;
    return Status::Ok();
  };
  uint64_t offset = 0;  // of the next byte to receive
  std::optional<uint64_t> generation;
  uint64_t total = 0;
  std::optional<RangeVerifier> verifier;
  RETURN_IF_ERROR(ask());  // one range until the block's size is known
  while (true) {
    if (asked.empty()) RETURN_IF_ERROR(ask());  // every range asked was past a short one
    const Asked next = asked.front();
    asked.pop_front();
    Result<IncomingMessage> awaited = channel->Await(next.request);
    if (!awaited.ok()) return WithPeer(awaited.status(), peer);
    IncomingMessage& reply = *awaited;
    // Asked for past a range the worker cut short: the range after it is asked again below.
    if (next.offset != offset) continue;
    uint64_t reply_total = 0, reply_offset = 0, length = 0, reply_generation = 0;
    std::vector<uint64_t> unit_digests;
    RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
      proto::Reply::Reader r = reply.reply();
      if (!r.isGet()) return UnexpectedReply(peer, "get");
      proto::GetReply::Reader g = r.getGet();
      reply_total = g.getTotalSize();
      reply_offset = g.getOffset();
      length = g.getLength();
      reply_generation = g.getGeneration();
      for (uint64_t digest : g.getUnitDigests()) unit_digests.push_back(digest);
      return Status::Ok();
    }));
    if (generation && reply_generation != *generation) {
      return AbortedError(block + " was replaced on " + peer + " while being read");
    }
    if (generation && reply_total != total) {
      return InternalError(peer + " changed the size of " + block + " within one generation");
    }
    generation = reply_generation;
    total = reply_total;
    if (reply_offset != offset || offset > total || length > total - offset ||
        length > kMaxPieceBytes || reply.payload_bytes() != length ||
        (length == 0 && offset < total)) {
      return InternalError(peer + " sent a malformed range of " + block);
    }
    if (!verifier) verifier.emplace(total);
    // A short range (the worker caps a reply's frames): the ranges asked after it start in the
    // wrong place; their replies are dropped above and the range after it is asked for anew.
    if (offset + length < total && length < kMaxPieceBytes) asked_end = offset + length;
    while (asked.size() < kReadWindow && asked_end < total) RETURN_IF_ERROR(ask());
    // Checked before any of it reaches the sink: wrong bytes are never handed out. A unit the
    // range holds only part of is checked (and handed out) with the range that completes it.
    std::vector<std::span<const std::byte>> pieces;
    pieces.reserve(reply.payload().size());
    for (const zmq::message_t& frame : reply.payload()) {
      pieces.emplace_back(static_cast<const std::byte*>(frame.data()), frame.size());
    }
    if (std::optional<uint64_t> bad = verifier->Add(offset, length, pieces, unit_digests)) {
      progress.digest_mismatch = true;
      return DigestMismatch(block, peer, *bad, total);
    }
    progress.RecordUnitDigests(offset, total, unit_digests);
    for (std::span<const std::byte> bytes : verifier->ready()) {
      progress.emitted = true;
      Status written = sink(bytes);
      if (!written.ok()) {
        progress.sink_failed = true;
        return written;
      }
    }
    offset += length;
    if (offset == total) return total;
  }
}

void Client::Impl::ReadProgress::RecordUnitDigests(uint64_t offset, uint64_t total,
                                                    const std::vector<uint64_t>& units) {
  const uint64_t first = offset / kDigestUnitBytes;
  const uint64_t count = DigestUnitCount(total);
  if (unit_digests.size() != count) unit_digests.assign(count, 0);
  for (size_t i = 0; i < units.size() && first + i < count; ++i) unit_digests[first + i] = units[i];
}

uint64_t Client::Impl::ReadProgress::BlockDigest(uint64_t total) const {
  if (unit_digests.size() != DigestUnitCount(total) || unit_digests.empty()) return 0;
  if (std::find(unit_digests.begin(), unit_digests.end(), 0) != unit_digests.end()) return 0;
  return BlockDigestOf(unit_digests);
}

// After a whole read: the unit digests the worker sent must make up the block digest the master
// keeps (both known). A worker whose digest metadata itself is wrong passes every unit check of
// its own bytes; this catches it. A mismatch is a corrupt copy (kDataLoss): the caller reports
// it and reads the next one.
Result<uint64_t> Client::Impl::CheckBlockDigest(const BlockLocation& location,
                                                const std::string& block, uint64_t total,
                                                ReadProgress& progress) {
  const uint64_t sent = progress.BlockDigest(total);
  if (location.block_digest == 0 || sent == 0 || sent == location.block_digest) return total;
  progress.digest_mismatch = true;
  return DataLossError("block " + block + " from worker " + location.worker_id +
                       ": its unit digests make block digest " + DigestHex(sent) +
                       ", but the master keeps " + DigestHex(location.block_digest) +
                       " for this version");
}

// ---- verification ----

Result<CopyCheck> Client::Impl::VerifyCopy(const BlockLocation& location, const BlockId& id,
                                           bool reported_bad) {
  CopyCheck check{id, location.worker_id, CopyCheck::State::kUnreachable, location.tier};
  Result<RpcChannel*> channel = WorkerChannel(location.address);
  if (!channel.ok()) {
    check.message = channel.status().message();
    return check;
  }
  const std::string peer = "worker " + location.worker_id;
  capnp::MallocMessageBuilder message;
  proto::VerifyBlock::Builder verify = message.initRoot<proto::Request>().initVerifyBlock();
  verify.setBlockId(id.ToString());
  verify.setReportedBad(reported_bad);
  Result<IncomingMessage> reply = Call(**channel, options_.request_timeout, peer, message);
  if (!reply.ok()) {
    if (reply.status().code() != StatusCode::kUnavailable) return reply.status();
    check.message = reply.status().message();
    return check;
  }
  RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::Reply::Reader r = reply->reply();
    if (!r.isVerified()) return UnexpectedReply(peer, "verified");
    proto::VerifyReply::Reader verified = r.getVerified();
    switch (verified.getState()) {
      case proto::VerifyReply::State::INTACT: check.state = CopyCheck::State::kIntact; break;
      case proto::VerifyReply::State::CORRUPT: check.state = CopyCheck::State::kCorrupt; break;
      default: check.state = CopyCheck::State::kGone; break;
    }
    check.tier = FromProto(verified.getTier());
    check.digested = verified.getDigested();
    check.message = verified.getMessage();
    return Status::Ok();
  }));
  return check;
}

Result<std::vector<CopyCheck>> Client::Impl::VerifyCopies(
    const std::vector<BlockLocations>& blocks) {
  std::vector<CopyCheck> checks;
  for (const BlockLocations& block : blocks) {
    if (block.locations.empty()) {
      checks.push_back({block.block, "", CopyCheck::State::kGone});
      continue;
    }
    for (const BlockLocation& location : block.locations) {
      ASSIGN_OR_RETURN(CopyCheck check, VerifyCopy(location, block.block, false));
      checks.push_back(std::move(check));
    }
  }
  return checks;
}

// ---- metadata ----

Result<std::vector<BlockLocations>> Client::Impl::Locations(const std::vector<BlockId>& ids) {
  // Asked in batches, so neither a request nor its answer nears the header limit however many
  // ids are asked for (an answer of 10,000 blocks with a copy each is about 1 MB).
  constexpr size_t kIdsPerRequest = 10000;
  std::vector<BlockLocations> out;
  out.reserve(ids.size());
  for (size_t first = 0; first < ids.size(); first += kIdsPerRequest) {
    const size_t n = std::min(kIdsPerRequest, ids.size() - first);
    capnp::MallocMessageBuilder message;
    auto list = message.initRoot<proto::Request>().initGetLocations().initBlockIds(n);
    for (size_t i = 0; i < n; ++i) list.set(i, ids[first + i].ToString());
    ASSIGN_OR_RETURN(IncomingMessage reply, CallMaster(message));
    const size_t before = out.size();
    RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
      proto::Reply::Reader r = reply.reply();
      if (!r.isLocations()) return UnexpectedReply("master", "locations");
      return ToBlockLocations(r.getLocations(), &out);
    }));
    if (out.size() - before != n) {
      return InternalError("master answered " + std::to_string(out.size() - before) +
                           " entries for " + std::to_string(n) + " blocks");
    }
  }
  return out;
}

Result<std::vector<WorkerInfo>> Client::Impl::Workers() {
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Request>().setListWorkers();
  ASSIGN_OR_RETURN(IncomingMessage reply, CallMaster(message));
  std::vector<WorkerInfo> out;
  RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::Reply::Reader r = reply.reply();
    if (!r.isWorkers()) return UnexpectedReply("master", "workers");
    for (proto::WorkerInfo::Reader worker : r.getWorkers()) out.push_back(ToWorkerInfo(worker));
    return Status::Ok();
  }));
  for (const WorkerInfo& worker : out) TrustWorkerKey(worker.address, worker.public_key);
  return out;
}

Result<std::vector<BlockLocations>> Client::Impl::Blocks(std::optional<uint64_t> rdd_id) {
  std::vector<BlockLocations> out;
  RETURN_IF_ERROR(ForEachBlockPage(rdd_id, [&](const std::vector<BlockLocations>& page) {
    out.insert(out.end(), page.begin(), page.end());
    return Status::Ok();
  }));
  return out;
}

Status Client::Impl::ForEachBlockPage(
    std::optional<uint64_t> rdd_id,
    const std::function<Status(const std::vector<BlockLocations>&)>& visit, uint32_t page_size) {
  std::string after;
  while (true) {
    capnp::MallocMessageBuilder message;
    proto::ListBlocks::Builder list = message.initRoot<proto::Request>().initListBlocks();
    if (rdd_id) {
      list.setRddId(*rdd_id);
    } else {
      list.setAll();
    }
    list.setAfter(after);
    list.setLimit(std::max<uint32_t>(page_size, 1));
    ASSIGN_OR_RETURN(IncomingMessage reply, CallMaster(message));
    std::vector<BlockLocations> page;
    bool more = false;
    RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
      proto::Reply::Reader r = reply.reply();
      if (!r.isBlockPage()) return UnexpectedReply("master", "blockPage");
      more = r.getBlockPage().getMore();
      return ToBlockLocations(r.getBlockPage().getBlocks(), &page);
    }));
    if (page.empty()) return Status::Ok();
    after = page.back().block.ToString();
    RETURN_IF_ERROR(visit(page));
    if (!more) return Status::Ok();
  }
}

Result<std::vector<RddInfo>> Client::Impl::Rdds() {
  // Page by page (PROTOCOL.md, "Listing many blocks"), so no reply outgrows the header limit.
  std::vector<RddInfo> out;
  uint64_t start_at = 0;
  while (true) {
    capnp::MallocMessageBuilder message;
    message.initRoot<proto::Request>().initListRddPage().setStartAt(start_at);
    ASSIGN_OR_RETURN(IncomingMessage reply, CallMaster(message));
    bool more = false;
    RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
      proto::Reply::Reader r = reply.reply();
      if (!r.isRddPage()) return UnexpectedReply("master", "rddPage");
      more = r.getRddPage().getMore();
      for (proto::RddInfo::Reader rdd : r.getRddPage().getRdds()) {
        RddInfo info;
        info.rdd_id = rdd.getRddId();
        info.name = ToStdString(rdd.getName());
        info.level = FromProto(rdd.getLevel());
        info.total_partitions = rdd.getTotalPartitions();
        info.cached_partitions = rdd.getCachedPartitions();
        info.memory_bytes = rdd.getMemoryBytes();
        info.disk_bytes = rdd.getDiskBytes();
        for (capnp::Text::Reader worker : rdd.getWorkers())
          info.workers.push_back(ToStdString(worker));
        out.push_back(std::move(info));
      }
      return Status::Ok();
    }));
    if (!more || out.empty() || out.back().rdd_id == UINT64_MAX) return out;
    if (out.back().rdd_id < start_at) return InternalError("the master's RDD pages went backwards");
    start_at = out.back().rdd_id + 1;
  }
}

Status Client::Impl::CallMasterForOk(capnp::MallocMessageBuilder& request) {
  ASSIGN_OR_RETURN(IncomingMessage reply, CallMaster(request));
  return ReadGuarded([&]() -> Status {
    return reply.reply().isOk() ? Status::Ok() : UnexpectedReply("master", "ok");
  });
}

Status Client::Impl::RegisterRdd(uint64_t rdd_id, const std::string& name, StorageLevel level,
                           uint64_t total_partitions) {
  capnp::MallocMessageBuilder message;
  proto::RegisterRdd::Builder rdd = message.initRoot<proto::Request>().initRegisterRdd();
  rdd.setRddId(rdd_id);
  rdd.setName(name);
  rdd.setLevel(ToProto(level));
  rdd.setTotalPartitions(total_partitions);
  return CallMasterForOk(message);
}

Status Client::Impl::Decommission(const std::string& worker_id) {
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Request>().initDecommissionWorker().setWorkerId(worker_id);
  return CallMasterForOk(message);
}

Status Client::Impl::PingMaster() {
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Request>().setPing();
  return CallMasterForOk(message);
}

}  // namespace bm
