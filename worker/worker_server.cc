#include "worker/worker_server.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/access_policy.h"
#include "common/digest.h"
#include "common/protocol.h"
#include "common/socket_drain.h"
#include "worker/address.h"
#include "worker/wire.h"

namespace bm {
namespace {

using std::chrono::milliseconds;

// Upper bound on one poll, so a missed wake-up can never stall the loop for long.
constexpr milliseconds kMaxPollTimeout{1000};
// Client messages handled per wake-up before timers get a turn.
constexpr int kMessagesPerWakeup = 64;

std::string PeerKey(const zmq::message_t& peer) {
  return std::string(static_cast<const char*>(peer.data()), peer.size());
}

zmq::message_t CopyFrame(const zmq::message_t& frame) {
  return zmq::message_t(frame.data(), frame.size());
}

// A client's routing id, kept by a reply that waits for the storage thread (callbacks are
// copyable, ZeroMQ frames are not).
std::shared_ptr<const zmq::message_t> SharePeer(const zmq::message_t& frame) {
  return std::make_shared<const zmq::message_t>(frame.data(), frame.size());
}

// The Cap'n Proto enum value as sent, so values this build does not know can be rejected.
bool IsKnownLevel(proto::StorageLevel level) {
  return static_cast<uint16_t>(level) <= static_cast<uint16_t>(proto::StorageLevel::DISK_ONLY2);
}

bool IsClientFault(StatusCode code) {
  return code == StatusCode::kInvalidArgument || code == StatusCode::kTooLarge ||
         code == StatusCode::kPermissionDenied;
}

WorkerOp OpOf(proto::Request::Which which) {
  switch (which) {
    case proto::Request::PUT_BLOCK:
      return WorkerOp::kPut;
    case proto::Request::GET_BLOCK:
      return WorkerOp::kGet;
    case proto::Request::GET_BLOCKS:
      return WorkerOp::kGetMany;
    case proto::Request::CONTAINS_BLOCK:
      return WorkerOp::kContains;
    case proto::Request::REMOVE_BLOCKS:
      return WorkerOp::kRemove;
    case proto::Request::REPLICATE_BLOCK:
      return WorkerOp::kReplicate;
    case proto::Request::DECOMMISSION:
      return WorkerOp::kDecommission;
    case proto::Request::SHUTDOWN:
      return WorkerOp::kShutdown;
    case proto::Request::PING:
      return WorkerOp::kPing;
    default:
      return WorkerOp::kOther;
  }
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

Result<std::unique_ptr<WorkerServer>> WorkerServer::Create(zmq::context_t& context,
                                                           WorkerServerOptions options,
                                                           std::unique_ptr<BlockManager> blocks,
                                                           const Clock& clock) {
  BM_CHECK(blocks != nullptr);
  BM_RETURN_IF_ERROR(ParseTcpAddress(options.listen_address, /*allow_any_port=*/true).status());
  if (!options.advertise_address.empty()) {
    BM_ASSIGN_OR_RETURN(TcpAddress advertised, ParseTcpAddress(options.advertise_address, false));
    if (IsWildcardHost(advertised.host)) {
      return InvalidArgumentError("advertised address " + options.advertise_address +
                                  " is a wildcard; give an address others can connect to");
    }
  }
  if (options.master.master_address.empty()) return InvalidArgumentError("no master address");
  // Private constructor: Create() is the only way to get a bound server.
  std::unique_ptr<WorkerServer> server(
      new WorkerServer(context, std::move(options), std::move(blocks), clock));
  BM_RETURN_IF_ERROR(server->Bind());
  return server;
}

WorkerServer::WorkerServer(zmq::context_t& context, WorkerServerOptions options,
                           std::unique_ptr<BlockManager> blocks, const Clock& clock)
    : context_(context), options_(std::move(options)), clock_(clock), blocks_(std::move(blocks)) {}

WorkerServer::~WorkerServer() {
  if (wake_fd_ >= 0) close(wake_fd_);
}

Status WorkerServer::Bind() {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return InternalError(std::string("eventfd: ") + std::strerror(errno));

  ChannelSecurity master_security;
  std::string certificate_worker_id;
  if (!options_.key_file.empty() || !options_.master_key_file.empty()) {
    if (options_.key_file.empty() || options_.master_key_file.empty()) {
      return InvalidArgumentError("keys need both the worker's key and the master's key");
    }
    BM_ASSIGN_OR_RETURN(Certificate own, LoadCertificate(options_.key_file));
    if (own.secret_key.empty()) {
      return InvalidArgumentError(options_.key_file + " holds no secret key");
    }
    BM_ASSIGN_OR_RETURN(KeyRole role, own.role());
    if (role != KeyRole::kWorker) {
      return InvalidArgumentError(options_.key_file + " is a " + KeyRoleName(role) +
                                  " key, not a worker key");
    }
    BM_ASSIGN_OR_RETURN(Certificate master, LoadCertificate(options_.master_key_file));
    keys_ = CurveKeys{own.public_key, own.secret_key};
    master_security = ChannelSecurity{keys_, master.public_key};
    certificate_worker_id = own.name();
    if (!options_.worker_id.empty() && options_.worker_id != certificate_worker_id) {
      return InvalidArgumentError("--id " + options_.worker_id + " differs from the worker id '" +
                                  certificate_worker_id + "' in " + options_.key_file);
    }
  }

  router_ = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::router);
  ConfigureServerSocket(*router_, keys_);
  SendHeartbeatsToClients(*router_);
  try {
    router_->bind(options_.listen_address);
  } catch (const zmq::error_t& e) {
    return UnavailableError("cannot listen on " + options_.listen_address + ": " + e.what());
  }
  endpoint_ = router_->get(zmq::sockopt::last_endpoint);
  BM_ASSIGN_OR_RETURN(peer_monitor_,
                      PeerMonitor::Create(context_, *router_, "worker-" + endpoint_));

  advertised_address_ = options_.advertise_address.empty() ? endpoint_ : options_.advertise_address;
  BM_ASSIGN_OR_RETURN(TcpAddress advertised, ParseTcpAddress(advertised_address_, false));
  if (IsWildcardHost(advertised.host)) {
    return InvalidArgumentError("listening on the wildcard address " + endpoint_ +
                                " needs an address to advertise");
  }
  worker_id_ = !options_.worker_id.empty()      ? options_.worker_id
               : !certificate_worker_id.empty() ? certificate_worker_id
                                                : DefaultWorkerId(advertised);

  MasterLinkOptions link_options = options_.master;
  link_options.security = master_security;
  link_options.worker_id = worker_id_;
  link_options.advertised_address = advertised_address_;
  link_ = std::make_unique<MasterLink>(context_, std::move(link_options), *blocks_, clock_);
  return Status::Ok();
}

void WorkerServer::Stop() {
  stop_.store(true);
  const uint64_t one = 1;
  // Best effort: the flag alone stops the loop within kMaxPollTimeout.
  ssize_t written = write(wake_fd_, &one, sizeof(one));
  (void)written;
}

void WorkerServer::Run() {
  spdlog::info("worker {} serving on {} (advertised as {}), master {}", worker_id_, endpoint_,
               advertised_address_, options_.master.master_address);
  replicator_ = std::make_unique<Replicator>(context_, advertised_address_, keys_, [this] {
    const uint64_t one = 1;
    ssize_t written = write(wake_fd_, &one, sizeof(one));
    (void)written;
  });
  while (!stop_.load()) {
    const TimePoint now = clock_.Now();
    link_->OnTimer();
    ExpireIdleUploads(now);
    ReleaseDeferredPuts(now);
    if (now >= next_storage_maintenance_) {
      next_storage_maintenance_ = now + options_.storage_maintenance_interval;
      blocks_->Maintain();  // its findings arrive as a completion, reported at once
    }

    // The loop sleeps in ::poll on the sockets' ZMQ_FDs (see DrainSocket: measured ~12 poll
    // calls per 4 KiB get with zmq::poll, on a VM where a system call costs microseconds), and
    // only once every socket is settled; else it polls with a zero timeout and drains again.
    pollfd fds[] = {
        {router_->get(zmq::sockopt::fd), POLLIN, 0},
        {link_->socket().get(zmq::sockopt::fd), POLLIN, 0},
        {wake_fd_, POLLIN, 0},
        {peer_monitor_->socket().get(zmq::sockopt::fd), POLLIN, 0},
        // poll ignores a negative fd: no hook, no status queries.
        {options_.status_hook ? options_.status_hook->wake_fd() : -1, POLLIN, 0},
        {blocks_->completion_fd(), POLLIN, 0},
    };
    const bool unsettled = router_unsettled_ || link_->unsettled() || peer_monitor_unsettled_;
    const int timeout = unsettled ? 0 : static_cast<int>(PollTimeout(clock_.Now()).count());
    if (::poll(fds, 6, timeout) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("poll failed: {}; stopping", std::strerror(errno));
      break;
    }
    if (fds[2].revents != 0) {
      uint64_t count;
      ssize_t got = read(wake_fd_, &count, sizeof(count));
      (void)got;
    }
    if (fds[3].revents != 0 || peer_monitor_unsettled_) AbortUploadsOfClosedConnections();
    if (fds[5].revents != 0 && blocks_->RunCompletions() > 0) {
      // Finished disk work: replies were sent by its callbacks; spills may have made room for
      // the pieces held back, and the changes go to the master.
      ServeWaitingPieces();
      link_->CollectChanges();
    }
    if (fds[0].revents != 0 || router_unsettled_) HandleClientMessages();
    // Checks the current socket's readiness itself (the one polled may have been replaced).
    if (fds[1].revents != 0 || link_->unsettled()) link_->OnReadable();
    AnswerFinishedReplications();
    ReleaseDeferredPuts(clock_.Now());
    if (fds[4].revents != 0) {
      options_.status_hook->Serve(WorkerView{
          .worker_id = worker_id_,
          .blocks = *blocks_,
          .counters = counters_,
          .registered = link_->registered(),
          .decommissioning = decommissioning_,
          .uploads_in_progress = uploads_.size(),
      });
    }
  }
  // Copies in flight are abandoned: the master retries them elsewhere.
  replicator_.reset();

  for (const UploadTable::Entry& entry : uploads_.TakeAll()) blocks_->AbortPut(entry.upload);
  // The blocks are stored; their reports go out with the next registration.
  ReleaseDeferredPuts(clock_.Now(), /*all=*/true);
  spdlog::info("worker {} stopped", worker_id_);
}

milliseconds WorkerServer::PollTimeout(TimePoint now) const {
  TimePoint next = link_->NextDeadline();
  if (std::optional<TimePoint> oldest = uploads_.OldestActivity()) {
    next = std::min(next, *oldest + options_.upload_idle_timeout);
  }
  if (!deferred_.empty()) next = std::min(next, deferred_.front().deadline);
  next = std::min(next, next_storage_maintenance_);
  if (next <= now) return milliseconds(0);
  if (next - now >= kMaxPollTimeout) return kMaxPollTimeout;
  // Round up so the loop does not spin through the last fraction of a millisecond.
  return std::chrono::ceil<milliseconds>(next - now);
}

void WorkerServer::HandleClientMessages() {
  const Drained drained = DrainSocket(*router_, kMessagesPerWakeup, [&] {
    HandleClientMessage();
    // Anything the request changed goes to the master now.
    link_->CollectChanges();
    return true;
  });
  router_unsettled_ = drained != Drained::kSettled;
}

void WorkerServer::HandleClientMessage() {
  std::optional<zmq::message_t> peer;
  Result<IncomingMessage> received = ReceiveMessage(*router_, /*has_routing_id=*/true, &peer);
  if (!received.ok()) {
    spdlog::warn("rejected a message: {}", received.status().ToString());
    if (peer) SendError(*peer, 0, received.status());
    return;
  }
  if (Serve(received.value()) == Served::kMustWait) {
    waiting_pieces_.push_back(std::move(received).value());
  }
}

void WorkerServer::ServeWaitingPieces() {
  while (!waiting_pieces_.empty()) {
    serving_waiting_piece_ = true;
    const Served served = Serve(waiting_pieces_.front());
    serving_waiting_piece_ = false;
    if (served == Served::kMustWait) return;
    waiting_pieces_.pop_front();
  }
}

WorkerServer::Served WorkerServer::Serve(IncomingMessage& message) {
  uint64_t id = 0;
  WorkerOp op = WorkerOp::kOther;
  const TimePoint start = clock_.Now();
  Status status;
  piece_must_wait_ = false;
  try {
    status = Dispatch(message, &id, &op);
  } catch (const kj::Exception& e) {
    status = InvalidArgumentError(std::string("malformed message: ") + e.getDescription().cStr());
  } catch (const std::exception& e) {
    status = InternalError(std::string("unexpected failure: ") + e.what());
  }
  if (piece_must_wait_) return Served::kMustWait;
  counters_.RecordRequest(op, status, clock_.Now() - start);
  if (status.ok()) return Served::kDone;
  if (IsClientFault(status.code()) || status.code() == StatusCode::kInternal) {
    spdlog::warn("request {} failed: {}", id, status.ToString());
  } else {
    spdlog::debug("request {} failed: {}", id, status.ToString());
  }
  SendError(*message.routing_id(), id, status);
  return Served::kDone;
}

Status WorkerServer::Dispatch(IncomingMessage& message, uint64_t* id, WorkerOp* op) {
  proto::Request::Which which{};
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::Request::Reader request = message.request();
    *id = request.getId();
    which = request.which();
    return Status::Ok();
  }));
  *op = OpOf(which);
  BM_RETURN_IF_ERROR(AuthorizeWorkerRequest(keys_.enabled(), message.peer(), which));
  if (message.peer()) {
    // An unknown descriptor may be a closed connection's, reused (see PeerMonitor).
    if (!connection_limit_.Knows(message.source_fd())) AbortUploadsOfClosedConnections();
    Status admitted = connection_limit_.Admit(message.source_fd(), *message.peer());
    if (!admitted.ok()) ++counters_.connections_refused;
    BM_RETURN_IF_ERROR(admitted);
  }
  switch (which) {
    case proto::Request::PUT_BLOCK:
      // Pieces keep their order behind one that waits for room.
      if (!waiting_pieces_.empty() && !serving_waiting_piece_) {
        piece_must_wait_ = true;
        return Status::Ok();
      }
      return HandlePut(message, *id);
    case proto::Request::GET_BLOCK:
      return HandleGet(message, *id);
    case proto::Request::GET_BLOCKS:
      return HandleGetMany(message, *id);
    case proto::Request::CONTAINS_BLOCK:
      return HandleContains(message, *id);
    case proto::Request::VERIFY_BLOCK:
      return HandleVerify(message, *id);
    case proto::Request::CORRUPT_BLOCK:
      return HandleCorruptBlock(message, *id);
    case proto::Request::REMOVE_BLOCKS:
      return HandleRemove(message, *id);
    case proto::Request::REPLICATE_BLOCK:
      return HandleReplicate(message, *id);
    case proto::Request::ABORT_PUT:
      return HandleAbortPut(message, *id);
    case proto::Request::DECOMMISSION:
      if (!decommissioning_) spdlog::info("decommissioning: taking no new blocks");
      decommissioning_ = true;
      SendOk(*message.routing_id(), *id);
      return Status::Ok();
    case proto::Request::SHUTDOWN:
      spdlog::info("drained: shutting down as the master asked");
      SendOk(*message.routing_id(), *id);
      // Sockets close with linger 0; this last answer is promised (PROTOCOL.md), so the
      // router keeps it queued for up to a second while the worker exits.
      router_->set(zmq::sockopt::linger, 1000);
      Stop();
      return Status::Ok();
    case proto::Request::PING:
      SendOk(*message.routing_id(), *id);
      return Status::Ok();
    default:
      break;
  }
  return InvalidArgumentError("request kind " + std::to_string(static_cast<int>(which)) +
                              " is not served by a worker");
}

Status WorkerServer::HandlePut(IncomingMessage& message, uint64_t id) {
  struct Piece {
    std::optional<BlockId> block;
    StorageLevel level = StorageLevel::kMemoryOnly;
    uint64_t total_size = 0;
    uint64_t offset = 0;
    bool last = false;
    uint64_t upload_id = 0;
    PutVersion version;
    std::optional<uint64_t> digest;
    std::vector<uint64_t> unit_digests;
  } piece;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::PutBlock::Reader put = message.request().getPutBlock();
    BM_ASSIGN_OR_RETURN(BlockId block, ParseWireBlockId(put.getBlockId()));
    piece.block = block;
    if (!IsKnownLevel(put.getLevel())) return InvalidArgumentError("unknown storage level");
    piece.level = FromProto(put.getLevel());
    piece.total_size = put.getTotalSize();
    piece.offset = put.getOffset();
    piece.last = put.getLast();
    piece.upload_id = put.getUploadId();
    piece.version = PutVersion{put.getVersion(), /*fresh=*/!put.getReplica(), put.getLeaseToken()};
    if (put.getDigested()) piece.digest = put.getPieceDigest();
    piece.unit_digests.reserve(put.getUnitDigests().size());
    for (uint64_t digest : put.getUnitDigests()) piece.unit_digests.push_back(digest);
    return Status::Ok();
  }));
  const zmq::message_t& peer = *message.routing_id();
  const UploadTable::Key key{PeerKey(peer), piece.upload_id};
  const std::string* owner = message.peer() ? &message.peer()->public_key : nullptr;
  const uint64_t bytes = message.payload_bytes();
  const TimePoint now = clock_.Now();

  if (bytes > kMaxPieceBytes) {
    AbortUpload(key);
    return TooLargeError("piece of " + std::to_string(bytes) + " bytes is over the " +
                         std::to_string(kMaxPieceBytes) + "-byte limit");
  }

  // Held back (no state changed) while spills are too far behind to take more bytes in RAM.
  if (bytes > 0 && !blocks_->TakesBytes(bytes)) {
    piece_must_wait_ = true;
    return Status::Ok();
  }

  UploadTable::Entry* upload = uploads_.Find(key);
  if (piece.offset == 0) {
    // A first piece always starts afresh, replacing a same-id upload the client gave up on.
    AbortUpload(key);
    if (decommissioning_) {
      return UnavailableError("worker " + worker_id_ +
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
    // Closed connections are forgotten before this one's descriptor is noted (see PeerMonitor:
    // a descriptor just reused must not inherit the closed connection's fate).
    AbortUploadsOfClosedConnections();
    BM_ASSIGN_OR_RETURN(
        BlockManager::UploadId handle,
        blocks_->BeginPut(*piece.block, piece.level, piece.total_size, piece.version));
    uploads_.Insert(key,
                    UploadTable::Entry{handle, *piece.block, piece.level, piece.total_size, 0, now,
                                       owner ? *owner : std::string(), message.source_fd()});
    upload = uploads_.Find(key);
  } else if (upload == nullptr) {
    return InvalidArgumentError("no upload " + std::to_string(piece.upload_id) +
                                " in progress from this client (never started, failed or "
                                "expired); start again from offset 0");
  }

  Status valid = Status::Ok();
  const std::string name = piece.block->ToString();
  if (*piece.block != upload->block || piece.level != upload->level ||
      piece.total_size != upload->total_size) {
    valid = InvalidArgumentError("piece of upload " + std::to_string(piece.upload_id) +
                                 " does not match its block, level or total size");
  } else if (piece.offset > upload->next_offset && upload->awaiting_resend) {
    // Sent in the same window as a piece refused as corrupted, before the client heard of it:
    // refused, and the upload waits for the resend.
    return AbortedError("piece of " + name + " at offset " + std::to_string(piece.offset) +
                        " was not taken: waiting for the resend of offset " +
                        std::to_string(upload->next_offset));
  } else if (piece.offset != upload->next_offset) {
    valid = InvalidArgumentError("piece of " + name + " at offset " + std::to_string(piece.offset) +
                                 ", expected " + std::to_string(upload->next_offset));
  } else if (bytes > upload->total_size - piece.offset) {
    valid = InvalidArgumentError("piece of " + name + " runs past its declared size of " +
                                 std::to_string(upload->total_size) + " bytes");
  } else if (piece.last && piece.offset + bytes != upload->total_size) {
    valid = InvalidArgumentError("last piece of " + name + " ends at " +
                                 std::to_string(piece.offset + bytes) + " of " +
                                 std::to_string(upload->total_size) + " bytes");
  } else if (!piece.unit_digests.empty() &&
             (piece.offset % kDigestUnitBytes != 0 ||
              (!piece.last && (piece.offset + bytes) % kDigestUnitBytes != 0))) {
    valid = InvalidArgumentError("piece of " + name + " at offset " + std::to_string(piece.offset) +
                                 " carries unit digests but is not cut at unit boundaries");
  }
  if (!valid.ok()) {
    AbortUpload(key);
    return valid;
  }

  std::vector<ChunkPtr> chunks = message.TakePayloadChunks();
  std::erase_if(chunks, [](const ChunkPtr& chunk) { return chunk->size() == 0; });
  // Checked before anything is appended; the upload stays at this offset for the resend.
  // A piece with unit digests is hashed once here, and those digests are what is stored.
  std::vector<uint64_t> checked_units;
  Status intact = Status::Ok();
  if (!piece.unit_digests.empty()) {
    Result<std::vector<uint64_t>> units =
        CheckPieceUnits(chunks, piece.unit_digests, name, piece.offset);
    if (units.ok()) {
      checked_units = std::move(units).value();
    } else {
      intact = units.status();
    }
  } else {
    intact = CheckPieceDigest(chunks, piece.digest, name, piece.offset);
  }
  if (!intact.ok()) {
    ++counters_.checksum_failures_transit;
    upload->awaiting_resend = true;
    return intact;
  }
  upload->awaiting_resend = false;
  upload->next_offset += bytes;
  upload->last_activity = now;
  counters_.bytes_written += bytes;
  const BlockManager::UploadId handle = upload->upload;
  // Answered when the bytes are stored: at once in memory, when the storage thread has written
  // them on disk. The client sends its next piece after this answer.
  blocks_->AppendPut(handle, std::move(chunks), std::move(checked_units),
                     [this, key, handle, peer = SharePeer(peer), id, last = piece.last,
                      version = piece.version.token](Status appended) {
                       if (!appended.ok()) {
                         ForgetUpload(key, handle);
                         SendError(*peer, id, appended);
                       } else if (!last) {
                         SendPutReply(*peer, id, Tier::kMemory, /*committed=*/false);
                       } else {
                         CommitUpload(key, handle, peer, id, version);
                       }
                     });
  return Status::Ok();
}

void WorkerServer::CommitUpload(const UploadTable::Key& key, BlockManager::UploadId handle,
                                std::shared_ptr<const zmq::message_t> peer, uint64_t id,
                                uint64_t version) {
  const std::optional<UploadTable::Entry> done = ForgetUpload(key, handle);
  if (!done) {
    SendError(*peer, id, AbortedError("the upload was abandoned before its last piece was stored"));
    return;
  }
  blocks_->CommitPut(handle, [this, peer, id, block = done->block, version](Result<Tier> tier) {
    if (!tier.ok()) {
      SendError(*peer, id, tier.status());
      return;
    }
    const uint64_t seq = link_->CollectChanges();
    if (link_->acked_seq() >= seq) {
      SendPutReply(*peer, id, *tier, /*committed=*/true);
    } else {
      deferred_.push_back(DeferredPut{CopyFrame(*peer), id, *tier, seq,
                                      clock_.Now() + options_.put_ack_timeout, block, version});
    }
  });
}

std::optional<UploadTable::Entry> WorkerServer::ForgetUpload(const UploadTable::Key& key,
                                                             BlockManager::UploadId handle) {
  const UploadTable::Entry* entry = uploads_.Find(key);
  if (entry == nullptr || entry->upload != handle) return std::nullopt;  // a newer upload
  return uploads_.Erase(key);
}

Status WorkerServer::HandleGet(IncomingMessage& message, uint64_t id) {
  std::optional<BlockId> block;
  uint64_t offset = 0;
  uint64_t max_length = 0;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::GetBlock::Reader get = message.request().getGetBlock();
    BM_ASSIGN_OR_RETURN(BlockId parsed, ParseWireBlockId(get.getBlockId()));
    block = parsed;
    offset = get.getOffset();
    max_length = get.getMaxLength();
    return Status::Ok();
  }));
  std::optional<BlockStatus> status = blocks_->Find(*block);
  if (!status) return NotFoundError("block " + block->ToString() + " is not stored here");
  if (offset > status->size) {
    return InvalidArgumentError("offset " + std::to_string(offset) + " is past the end of " +
                                block->ToString() + " (" + std::to_string(status->size) +
                                " bytes)");
  }
  const uint64_t limit = std::min(max_length, kMaxPieceBytes);
  // Memory blocks answer at once; disk blocks when the storage thread has read the range.
  blocks_->Read(*block, offset, limit,
                [this, peer = SharePeer(*message.routing_id()), id, limit](Result<BlockRead> read) {
                  if (read.ok()) {
                    SendGetReply(*peer, id, limit, *read);
                  } else {
                    SendError(*peer, id, read.status());
                  }
                });
  return Status::Ok();
}

void WorkerServer::SendGetReply(const zmq::message_t& peer, uint64_t id, uint64_t limit,
                                const BlockRead& read) {
  // Frames of at most kChunkBytes sharing the stored chunks' bytes; a range made of many tiny
  // chunks is cut short at kMaxPayloadFrames (the client asks again for the rest), at a digest
  // unit's boundary where the frames reach one, so each unit tends to travel in one reply.
  uint64_t fits = 0;
  size_t frame_count = 0;
  for (const ChunkPtr& chunk : read.chunks) {
    for (size_t pos = 0; pos < chunk->size() && fits < limit && frame_count < kMaxPayloadFrames;
         ++frame_count) {
      const size_t take =
          static_cast<size_t>(std::min<uint64_t>({chunk->size() - pos, kChunkBytes, limit - fits}));
      pos += take;
      fits += take;
    }
  }
  const uint64_t available = std::min(limit, read.total_size - read.offset);
  if (fits < available) {
    const uint64_t boundary = (read.offset + fits) / kDigestUnitBytes * kDigestUnitBytes;
    if (boundary > read.offset) limit = boundary - read.offset;
  }
  std::vector<zmq::message_t> frames;
  uint64_t length = 0;
  for (const ChunkPtr& chunk : read.chunks) {
    for (size_t pos = 0; pos < chunk->size() && length < limit;) {
      if (frames.size() == kMaxPayloadFrames) break;
      const size_t take = static_cast<size_t>(
          std::min<uint64_t>({chunk->size() - pos, kChunkBytes, limit - length}));
      frames.push_back(MessageFromChunk(SliceChunk(chunk, pos, take)));
      pos += take;
      length += take;
    }
  }

  capnp::MallocMessageBuilder reply;
  proto::Reply::Builder root = reply.initRoot<proto::Reply>();
  root.setId(id);
  proto::GetReply::Builder get = root.initGet();
  get.setTotalSize(read.total_size);
  get.setOffset(read.offset);
  get.setLength(length);
  get.setGeneration(read.generation);
  get.setTier(ToProto(read.tier));
  get.setLevel(ToProto(read.level));
  get.setVersion(read.version);
  if (!read.unit_digests.empty() && length > 0) {
    // Those of the units this reply's bytes overlap (it may end before the range read).
    const uint64_t offset = read.offset;
    const size_t units =
        std::min<size_t>(read.unit_digests.size(),
                         (offset + length - 1) / kDigestUnitBytes - offset / kDigestUnitBytes + 1);
    capnp::List<uint64_t>::Builder digests = get.initUnitDigests(static_cast<unsigned>(units));
    for (size_t i = 0; i < units; ++i) digests.set(static_cast<unsigned>(i), read.unit_digests[i]);
  }
  SendReply(peer, reply, std::move(frames));
}

Status WorkerServer::HandleGetMany(IncomingMessage& message, uint64_t id) {
  std::vector<BlockId> blocks;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    capnp::List<capnp::Text>::Reader ids = message.request().getGetBlocks().getBlockIds();
    if (ids.size() > kMaxGetBlocksIds) {
      return InvalidArgumentError("getBlocks asks for " + std::to_string(ids.size()) +
                                  " blocks; at most " + std::to_string(kMaxGetBlocksIds));
    }
    blocks.reserve(ids.size());
    for (capnp::Text::Reader text : ids) {
      BM_ASSIGN_OR_RETURN(BlockId parsed, ParseWireBlockId(text));
      blocks.push_back(parsed);
    }
    return Status::Ok();
  }));

  // Every block that may fit the reply is read (memory blocks at once, with one index probe
  // each; disk blocks on the storage thread); the reply is built when the last read is in.
  auto batch = std::make_shared<GetManyBatch>();
  batch->peer = CopyFrame(*message.routing_id());
  batch->request_id = id;
  batch->blocks = std::move(blocks);
  batch->statuses.resize(batch->blocks.size());
  batch->reads.resize(batch->blocks.size());
  uint64_t bytes = 0;
  std::vector<size_t> to_read;
  blocks_->PrefetchInMemory(batch->blocks);
  for (size_t i = 0; i < batch->blocks.size(); ++i) {
    const BlockId& block = batch->blocks[i];
    if (std::optional<BlockRead> read = blocks_->ReadInMemory(block)) {
      batch->statuses[i] =
          BlockStatus{block, read->level, Tier::kMemory, read->total_size, read->version};
      if (read->total_size > kMaxPieceBytes - bytes) continue;
      bytes += read->total_size;
      batch->reads[i] = std::move(read);
      continue;
    }
    batch->statuses[i] = blocks_->Find(block);
    const std::optional<BlockStatus>& status = batch->statuses[i];
    if (!status || status->size > kMaxPieceBytes - bytes) continue;
    bytes += status->size;
    to_read.push_back(i);
  }
  batch->pending = to_read.size() + 1;  // + 1 until every read is asked for
  for (size_t i : to_read) {
    blocks_->Read(batch->blocks[i], 0, batch->statuses[i]->size,
                  [this, batch, i](Result<BlockRead> read) {
                    // Gone or unreadable since Find: the client reads it alone and hears why.
                    if (read.ok()) batch->reads[i] = std::move(read).value();
                    if (--batch->pending == 0) SendGetManyReply(*batch);
                  });
  }
  if (--batch->pending == 0) SendGetManyReply(*batch);
  return Status::Ok();
}

void WorkerServer::SendGetManyReply(const GetManyBatch& batch) {
  const std::vector<BlockId>& blocks = batch.blocks;
  capnp::MallocMessageBuilder reply;
  proto::Reply::Builder root = reply.initRoot<proto::Reply>();
  root.setId(batch.request_id);
  auto entries = root.initBlocksRead(static_cast<unsigned>(blocks.size()));
  // Small blocks are copied into shared frames: every frame costs ZeroMQ a send and a receive
  // call of its own (below 8 KiB it copies them into its batch buffer anyway), so 16 blocks of
  // 4 KiB travel as one frame. Bigger blocks go as their stored chunks, without a copy.
  // First which blocks fit and how the frames are cut, then the frames themselves.
  constexpr uint64_t kPackedBlockBytes = 64 << 10;
  struct Part {
    const BlockRead* read;
    bool packed;
  };
  std::vector<Part> parts;
  std::vector<uint64_t> pack_sizes;  // bytes of each pack of small blocks, in order
  uint64_t open_pack = 0;            // bytes of the pack being filled (0: none)
  size_t closed_frames = 0;          // frames before the open pack
  uint64_t bytes = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    proto::MultiGetEntry::Builder entry = entries[static_cast<unsigned>(i)];
    const std::optional<BlockStatus>& status = batch.statuses[i];
    if (!status) {
      entry.setState(proto::MultiGetEntry::State::NOT_FOUND);
      continue;
    }
    entry.setTotalSize(status->size);
    entry.setState(proto::MultiGetEntry::State::NOT_INCLUDED);
    if (status->size > kMaxPieceBytes - bytes) continue;
    const std::optional<BlockRead>& read = batch.reads[i];
    if (!read || read->total_size != status->size) continue;
    const bool packed = status->size <= kPackedBlockBytes;
    const bool pack_full = packed && open_pack > 0 && open_pack + status->size > kChunkBytes;
    // Frames the reply would have with this block, counting an open pack as one. A bigger
    // block goes as its stored chunks cut at kChunkBytes, however they were cut when stored.
    size_t frames_after = closed_frames + (pack_full ? 1 : 0) + 1;
    if (!packed) {
      frames_after = closed_frames + (open_pack > 0 ? 1 : 0);
      for (const ChunkPtr& chunk : read->chunks) {
        frames_after += (chunk->size() + kChunkBytes - 1) / kChunkBytes;
      }
    }
    if (frames_after > kMaxPayloadFrames) continue;
    if (packed) {
      if (pack_full) {
        pack_sizes.push_back(open_pack);
        ++closed_frames;
        open_pack = 0;
      }
      open_pack += status->size;
    } else {
      if (open_pack > 0) {
        pack_sizes.push_back(open_pack);
        ++closed_frames;
        open_pack = 0;
      }
      closed_frames = frames_after;
    }
    entry.setState(proto::MultiGetEntry::State::INCLUDED);
    entry.setGeneration(read->generation);
    entry.setTier(ToProto(read->tier));
    if (!read->unit_digests.empty()) {
      capnp::List<uint64_t>::Builder digests =
          entry.initUnitDigests(static_cast<unsigned>(read->unit_digests.size()));
      for (size_t u = 0; u < read->unit_digests.size(); ++u) {
        digests.set(static_cast<unsigned>(u), read->unit_digests[u]);
      }
    }
    bytes += status->size;
    parts.push_back(Part{&*read, packed});
  }
  if (open_pack > 0) pack_sizes.push_back(open_pack);

  std::vector<zmq::message_t> frames;
  size_t next_pack = 0;
  std::optional<zmq::message_t> pack;  // sized exactly, filled in place
  size_t pack_filled = 0;
  auto close_pack = [&] {
    if (pack) frames.push_back(std::move(*pack));
    pack.reset();
  };
  for (const Part& part : parts) {
    if (part.read->total_size == 0) continue;  // no bytes, no frame
    if (part.packed) {
      if (pack && pack_filled + part.read->total_size > pack->size()) close_pack();
      if (!pack) {
        pack.emplace(static_cast<size_t>(pack_sizes[next_pack++]));
        pack_filled = 0;
      }
      for (const ChunkPtr& chunk : part.read->chunks) {
        std::memcpy(static_cast<std::byte*>(pack->data()) + pack_filled, chunk->bytes().data(),
                    chunk->size());
        pack_filled += chunk->size();
      }
      continue;
    }
    close_pack();
    for (const ChunkPtr& chunk : part.read->chunks) {
      for (size_t pos = 0; pos < chunk->size();) {
        const size_t take = std::min<size_t>(chunk->size() - pos, kChunkBytes);
        frames.push_back(MessageFromChunk(SliceChunk(chunk, pos, take)));
        pos += take;
      }
    }
  }
  close_pack();
  SendReply(batch.peer, reply, std::move(frames));
}

Status WorkerServer::HandleVerify(IncomingMessage& message, uint64_t id) {
  std::optional<BlockId> block;
  bool reported_bad = false;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::VerifyBlock::Reader verify = message.request().getVerifyBlock();
    BM_ASSIGN_OR_RETURN(BlockId parsed, ParseWireBlockId(verify.getBlockId()));
    block = parsed;
    reported_bad = verify.getReportedBad();
    return Status::Ok();
  }));
  // A disk copy is re-read on the storage thread; the answer goes when it is done.
  blocks_->Verify(*block, [this, peer = SharePeer(*message.routing_id()), id, block = *block,
                           reported_bad](Result<BlockCheck> check) {
    capnp::MallocMessageBuilder reply;
    proto::Reply::Builder root = reply.initRoot<proto::Reply>();
    root.setId(id);
    proto::VerifyReply::Builder verified = root.initVerified();
    if (!check.ok()) {
      if (check.status().code() != StatusCode::kNotFound) {
        SendError(*peer, id, check.status());
        return;
      }
      verified.setState(proto::VerifyReply::State::NOT_FOUND);
    } else {
      verified.setTier(ToProto(check->tier));
      verified.setDigested(check->digested);
      if (check->corrupt.ok()) {
        verified.setState(proto::VerifyReply::State::INTACT);
        if (reported_bad) {
          // The stored copy is right: what the reader got went bad on the way.
          ++counters_.checksum_failures_read_transit;
          spdlog::warn(
              "block {}: a reader's bytes did not match their digests but the stored copy "
              "is intact: corrupted in transit",
              block.ToString());
        }
      } else {
        verified.setState(proto::VerifyReply::State::CORRUPT);
        verified.setMessage(check->corrupt.message());
        if (check->tier == Tier::kMemory) ++counters_.checksum_failures_memory;
        link_->CollectChanges();  // the master hears of the dropped copy at once
      }
    }
    SendReply(*peer, reply);
  });
  return Status::Ok();
}

Status WorkerServer::HandleCorruptBlock(IncomingMessage& message, uint64_t id) {
  if (!options_.enable_fault_injection) {
    return InvalidArgumentError("corruptBlock is test-only fault injection, off on worker " +
                                worker_id_ +
                                " (it serves it only when started with --enable-fault-injection)");
  }
  std::optional<BlockId> block;
  Tier tier = Tier::kMemory;
  uint64_t offset = 0;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::CorruptBlock::Reader corrupt = message.request().getCorruptBlock();
    BM_ASSIGN_OR_RETURN(BlockId parsed, ParseWireBlockId(corrupt.getBlockId()));
    block = parsed;
    switch (corrupt.getTier()) {
      case proto::Tier::MEMORY:
        tier = Tier::kMemory;
        break;
      case proto::Tier::DISK:
        tier = Tier::kDisk;
        break;
      default:
        return InvalidArgumentError("unknown tier");
    }
    offset = corrupt.getOffset();
    return Status::Ok();
  }));
  blocks_->CorruptStoredByte(
      *block, tier, offset,
      [this, peer = SharePeer(*message.routing_id()), id, block = *block, tier,
       offset](Status corrupted) {
        if (!corrupted.ok()) {
          SendError(*peer, id, corrupted);
          return;
        }
        spdlog::warn("fault injection: flipped the byte at offset {} of block {}'s {} copy", offset,
                     block.ToString(), TierName(tier));
        SendOk(*peer, id);
      });
  return Status::Ok();
}

Status WorkerServer::HandleContains(IncomingMessage& message, uint64_t id) {
  std::optional<BlockId> block;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    BM_ASSIGN_OR_RETURN(BlockId parsed,
                        ParseWireBlockId(message.request().getContainsBlock().getBlockId()));
    block = parsed;
    return Status::Ok();
  }));
  std::optional<BlockStatus> status = blocks_->Find(*block);
  capnp::MallocMessageBuilder reply;
  proto::Reply::Builder root = reply.initRoot<proto::Reply>();
  root.setId(id);
  proto::ContainsReply::Builder contains = root.initContains();
  contains.setPresent(status.has_value());
  if (status) {
    FillBlockStatus(*status, contains.initStatus());
  } else {
    contains.initStatus().setBlockId(block->ToString());
  }
  SendReply(*message.routing_id(), reply);
  return Status::Ok();
}

Status WorkerServer::HandleReplicate(IncomingMessage& message, uint64_t id) {
  Replicator::Job job{.ticket = next_ticket_++,
                      .block = BlockId::Broadcast(0),
                      .level = StorageLevel::kMemoryOnly,
                      .targets = {}};
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::ReplicateBlock::Reader request = message.request().getReplicateBlock();
    BM_ASSIGN_OR_RETURN(job.block, ParseWireBlockId(request.getBlockId()));
    if (!IsKnownLevel(request.getLevel())) return InvalidArgumentError("unknown storage level");
    job.level = FromProto(request.getLevel());
    for (proto::ReplicaTarget::Reader target : request.getTargets()) {
      WorkerInfo info;
      info.id = std::string(target.getWorkerId().cStr(), target.getWorkerId().size());
      info.address = std::string(target.getAddress().cStr(), target.getAddress().size());
      info.public_key = std::string(target.getPublicKey().cStr(), target.getPublicKey().size());
      job.targets.push_back(std::move(info));
    }
    return Status::Ok();
  }));
  if (job.targets.empty()) return InvalidArgumentError("replicateBlock names no target");
  if (!blocks_->Find(job.block)) {
    return NotFoundError("block " + job.block.ToString() + " is not stored on worker " +
                         worker_id_);
  }
  replications_.emplace(job.ticket, PendingReplication{zmq::message_t(message.routing_id()->data(),
                                                                      message.routing_id()->size()),
                                                       id, job.block});
  replicator_->Submit(std::move(job));
  return Status::Ok();
}

void WorkerServer::AnswerFinishedReplications() {
  if (replications_.empty()) return;
  for (Replicator::Finished& finished : replicator_->TakeFinished()) {
    auto pending = replications_.find(finished.ticket);
    if (pending == replications_.end()) continue;
    if (finished.copies.ok()) {
      capnp::MallocMessageBuilder reply;
      proto::Reply::Builder root = reply.initRoot<proto::Reply>();
      root.setId(pending->second.request_id);
      root.setReplicated(*finished.copies);
      SendReply(pending->second.peer, reply);
    } else {
      SendError(pending->second.peer, pending->second.request_id, finished.copies.status());
      // dataLoss: this worker's bytes failed their digests at the copier, which reads them
      // without RocksDB's checksum (ReadForCheckingReader), or a target twice refused a piece
      // as corrupted in transit. Either way the copy here is verified (a re-read), and dropped
      // and reported lost when corrupt, so the master copies the block from another worker.
      if (finished.copies.status().code() == StatusCode::kDataLoss) {
        blocks_->Verify(pending->second.block, [this](Result<BlockCheck> check) {
          if (check.ok() && !check->corrupt.ok()) link_->CollectChanges();
        });
      }
    }
    replications_.erase(pending);
  }
}

void WorkerServer::SendOk(const zmq::message_t& peer, uint64_t id) {
  capnp::MallocMessageBuilder reply;
  proto::Reply::Builder root = reply.initRoot<proto::Reply>();
  root.setId(id);
  root.setOk();
  SendReply(peer, reply);
}

Status WorkerServer::HandleRemove(IncomingMessage& message, uint64_t id) {
  // Every id is checked before anything is removed: a bad list changes nothing.
  std::vector<BlockId> ids;
  std::vector<uint64_t> versions;  // empty, or one per id (0 = any version)
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::RemoveBlocks::Reader request = message.request().getRemoveBlocks();
    for (capnp::Text::Reader text : request.getBlockIds()) {
      BM_ASSIGN_OR_RETURN(BlockId parsed, ParseWireBlockId(text));
      ids.push_back(parsed);
    }
    if (request.hasVersions()) {
      if (request.getVersions().size() != ids.size()) {
        return InvalidArgumentError("removeBlocks has " +
                                    std::to_string(request.getVersions().size()) +
                                    " versions for " + std::to_string(ids.size()) + " ids");
      }
      for (uint64_t version : request.getVersions()) versions.push_back(version);
    }
    return Status::Ok();
  }));
  uint64_t removed = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const BlockId& block = ids[i];
    Status status = blocks_->Remove(block, versions.empty() ? 0 : versions[i]);
    if (status.ok()) {
      ++removed;
    } else if (status.code() != StatusCode::kNotFound) {
      spdlog::warn("cannot remove {}: {}", block.ToString(), status.ToString());
    }
  }
  capnp::MallocMessageBuilder reply;
  proto::Reply::Builder root = reply.initRoot<proto::Reply>();
  root.setId(id);
  root.setRemoved(removed);
  SendReply(*message.routing_id(), reply);
  return Status::Ok();
}

Status WorkerServer::HandleAbortPut(IncomingMessage& message, uint64_t id) {
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
  SendOk(*message.routing_id(), id);
  return Status::Ok();
}

void WorkerServer::AbortUploadsOfClosedConnections() {
  peer_monitor_unsettled_ = false;  // TakeClosed() drains its socket
  for (int connection : peer_monitor_->TakeClosed()) {
    std::erase_if(waiting_pieces_, [connection](const IncomingMessage& piece) {
      return piece.source_fd() == connection;
    });
    connection_limit_.Closed(connection);
    for (const UploadTable::Entry& entry : uploads_.TakeFromConnection(connection)) {
      spdlog::info("aborting upload of {} ({} of {} bytes received): its client disconnected",
                   entry.block.ToString(), entry.next_offset, entry.total_size);
      blocks_->AbortPut(entry.upload);
    }
  }
}

void WorkerServer::AbortUpload(const UploadTable::Key& key) {
  if (std::optional<UploadTable::Entry> entry = uploads_.Erase(key)) {
    blocks_->AbortPut(entry->upload);
  }
}

void WorkerServer::ExpireIdleUploads(TimePoint now) {
  for (const UploadTable::Entry& entry :
       uploads_.TakeIdleSince(now - options_.upload_idle_timeout)) {
    spdlog::info("aborting idle upload of {} ({} of {} bytes received)", entry.block.ToString(),
                 entry.next_offset, entry.total_size);
    blocks_->AbortPut(entry.upload);
  }
}

void WorkerServer::ReleaseDeferredPuts(TimePoint now, bool all) {
  for (auto& refused : link_->TakeRefused()) refused_.push_back(std::move(refused));
  while (!deferred_.empty()) {
    DeferredPut& put = deferred_.front();
    const bool acked = link_->acked_seq() >= put.needs_seq;
    if (!acked && !all && now < put.deadline) return;
    if (!acked) {
      spdlog::debug("answering put {} before the master acknowledged its report", put.request_id);
    }
    auto refused = std::find(refused_.begin(), refused_.end(),
                             std::pair<BlockId, uint64_t>{put.block, put.version});
    if (acked && refused != refused_.end()) {
      refused_.erase(refused);
      SendError(put.peer, put.request_id,
                AbortedError("the master refused " + put.block.ToString() +
                             ": the compute lease it was stored under is no longer held "
                             "(another client computes or stored it); it is being removed"));
    } else {
      SendPutReply(put.peer, put.request_id, put.tier, /*committed=*/true);
    }
    deferred_.pop_front();
  }
  if (deferred_.empty()) refused_.clear();
}

void WorkerServer::SendReply(const zmq::message_t& peer, capnp::MallocMessageBuilder& reply,
                             std::vector<zmq::message_t> payload) {
  router_unsettled_ = true;
  for (const zmq::message_t& frame : payload) counters_.bytes_read += frame.size();
  Status sent = SendMessage(*router_, &peer, reply, std::move(payload));
  if (!sent.ok()) spdlog::debug("reply not sent: {}", sent.ToString());
}

void WorkerServer::SendError(const zmq::message_t& peer, uint64_t id, const Status& status) {
  capnp::MallocMessageBuilder reply;
  proto::Reply::Builder root = reply.initRoot<proto::Reply>();
  root.setId(id);
  SetError(root.initError(), status);
  SendReply(peer, reply);
}

void WorkerServer::SendPutReply(const zmq::message_t& peer, uint64_t id, Tier tier,
                                bool committed) {
  capnp::MallocMessageBuilder reply;
  proto::Reply::Builder root = reply.initRoot<proto::Reply>();
  root.setId(id);
  proto::PutReply::Builder put = root.initPut();
  put.setTier(ToProto(tier));
  put.setCommitted(committed);
  SendReply(peer, reply);
}

}  // namespace bm
