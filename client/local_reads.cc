#include "client/local_reads.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

#include "common/core/digest.h"
#include "common/core/protocol.h"
#include "common/net/host_identity.h"
#include "common/net/sealed_region.h"
#include "common/net/transport.h"
#include "schema/local_reads.capnp.h"
#include "transfer/peer_calls.h"
#include "transfer/worker_channels.h"

namespace bm {
namespace {

// A worker whose local socket failed is tried again after this long (over TCP meanwhile).
constexpr auto kRetryAfterFailure = std::chrono::seconds(5);
// How long a wait for the worker goes between looks at whether its process still runs.
constexpr std::chrono::milliseconds kLivenessSlice{200};
// Gets one GetMany keeps in flight on a connection.
constexpr size_t kPipelineDepth = 16;
// Reads from a worker's small-block arena are reported to it this many at a time, or at the
// first read this long after the oldest unreported one (ReportArenaReads).
constexpr size_t kArenaReadsPerReport = 256;
constexpr auto kArenaReportInterval = std::chrono::seconds(1);

}  // namespace

Result<std::shared_ptr<LocalReadConnection>> LocalReadConnection::Open(
    const std::string& path, const std::string& ticket, std::chrono::milliseconds timeout,
    IdleMappingLimits idle, std::weak_ptr<IdleMappingReaper> reaper, bool arena) {
  BM_ASSIGN_OR_RETURN(OwnedFd socket, ConnectLocal(path));
  // Waits are cut into slices, between which the worker's liveness is looked at (Receive).
  BM_RETURN_IF_ERROR(SetReceiveTimeout(socket.get(), kLivenessSlice));
  const Result<pid_t> peer = PeerPid(socket.get());
  const pid_t worker_pid = peer.ok() ? *peer : 0;
  std::shared_ptr<LocalReadConnection> connection(
      new LocalReadConnection(std::move(socket), timeout, worker_pid,
                              std::make_shared<MappedBlocks>(idle, std::move(reaper))));
  capnp::MallocMessageBuilder hello;
  proto::LocalRequest::Builder request = hello.initRoot<proto::LocalRequest>();
  request.setId(0);
  request.setArena(arena);
  request.setHello(
      capnp::Data::Reader(reinterpret_cast<const kj::byte*>(ticket.data()), ticket.size()));
  BM_RETURN_IF_ERROR(connection->SendRequest(hello));
  Result<LocalPacket> packet = ReceivePacket(connection->socket_.get(), timeout);
  if (!packet.ok())
    return UnavailableError("local reads: no answer to hello: " + packet.status().message());
  try {
    capnp::FlatArrayMessageReader message(packet->words);
    proto::LocalReply::Reader reply = message.getRoot<proto::LocalReply>();
    if (reply.isError()) return StatusFromError(reply.getError());
    if (!reply.isOk()) return UnavailableError("local reads: unexpected answer to hello");
    if (const uint64_t arena_bytes = reply.getArenaBytes(); arena && arena_bytes > 0) {
      Result<std::unique_ptr<BlockArenaReader>> mapped =
          BlockArenaReader::Map(std::move(packet->fd), arena_bytes);
      // Without it every get asks the worker, as before.
      if (mapped.ok()) {
        connection->arena_ = std::move(mapped).value();
      } else {
        spdlog::warn("local reads: the worker's small-block arena is not used: {}",
                     mapped.status().ToString());
      }
    }
  } catch (const kj::Exception& e) {
    return UnavailableError(std::string("local reads: malformed answer: ") +
                            e.getDescription().cStr());
  }
  return connection;
}

Status LocalReadConnection::SendRequest(capnp::MessageBuilder& message, bool wait) {
  std::vector<uint32_t> table;
  std::vector<std::span<const std::byte>> parts;
  MessageParts(message, table, parts);
  MutexLock lock(send_mutex_);
  return SendPacket(socket_.get(), parts, -1, wait);
}

void LocalReadConnection::Release(uint64_t pin) {
  capnp::MallocMessageBuilder release;
  proto::LocalRequest::Builder request = release.initRoot<proto::LocalRequest>();
  request.setRelease(pin);
  // A failure needs no answer: a connection that broke has had its pins released already.
  (void)SendRequest(release);
}

Result<uint64_t> LocalReadConnection::SendGet(const BlockId& id,
                                              std::map<uint64_t, Pending>& pending) {
  MappingOffer offer(mapped_, mapped_->Reserve(id));
  const uint64_t request_id = next_id_++;
  capnp::MallocMessageBuilder get;
  proto::LocalRequest::Builder request = get.initRoot<proto::LocalRequest>();
  request.setId(request_id);
  request.setGet(id.ToString());
  request.setMapped(offer.pin());
  request.setTrailer(true);
  if (Status sent = SendRequest(get); !sent.ok()) {
    broken_ = true;
    return sent;
  }
  pending.emplace(request_id, Pending{id, std::move(offer)});
  return request_id;
}

std::optional<LocalBlockRead> LocalReadConnection::FromArena(const BlockId& id) {
  if (arena_ == nullptr || broken_) return std::nullopt;
  std::optional<ArenaBlock> found = arena_->Find(id);
  if (!found) return std::nullopt;
  if (arena_reads_.empty()) arena_reads_since_ = std::chrono::steady_clock::now();
  arena_reads_.push_back(id.ToString());
  ReportArenaReads();
  LocalBlockRead read;
  read.data.Append(std::move(found->bytes));
  read.tier = found->facts.tier;
  read.level = found->facts.level;
  read.version = found->facts.version;
  read.generation = found->facts.generation;
  read.unit_digests = {found->facts.digest};
  return read;
}

void LocalReadConnection::ReportArenaReads() {
  if (arena_reads_.size() < kArenaReadsPerReport &&
      std::chrono::steady_clock::now() - arena_reads_since_ < kArenaReportInterval) {
    return;
  }
  capnp::MallocMessageBuilder report;
  proto::LocalRequest::Builder request = report.initRoot<proto::LocalRequest>();
  auto ids = request.initArenaReads(static_cast<unsigned>(arena_reads_.size()));
  for (unsigned i = 0; i < arena_reads_.size(); ++i) ids.set(i, arena_reads_[i]);
  arena_reads_.clear();
  // Not answered, and never waited for: a report the socket has no room for (a worker that
  // stopped reading) is dropped, as the hint it is; a connection that broke says so at its
  // next request.
  (void)SendRequest(report, /*wait=*/false);
}

Result<LocalBlockRead> LocalReadConnection::Get(const BlockId& id,
                                                std::chrono::milliseconds extra) {
  if (std::optional<LocalBlockRead> copied = FromArena(id)) return std::move(*copied);
  if (broken_) return UnavailableError("the local-read connection failed");
  std::map<uint64_t, Pending> pending;
  BM_RETURN_IF_ERROR(SendGet(id, pending).status());
  uint64_t answered = 0;
  return ReceiveBlock(pending, &answered, extra);
}

std::vector<Result<LocalBlockRead>> LocalReadConnection::GetMany(const std::vector<BlockId>& ids) {
  std::vector<std::optional<Result<LocalBlockRead>>> results(ids.size());
  std::vector<size_t> asked;  // the indexes of the blocks not in the arena
  for (size_t i = 0; i < ids.size(); ++i) {
    if (std::optional<LocalBlockRead> copied = FromArena(ids[i])) {
      results[i] = std::move(*copied);
    } else {
      asked.push_back(i);
    }
  }
  // Replies come as their blocks are ready (a disk read or a copy into a region takes longer
  // than a block already shared), matched to their requests by id.
  std::map<uint64_t, Pending> pending;
  std::map<uint64_t, size_t> index_of;
  size_t sent = 0;
  size_t received = 0;
  while (received < asked.size() && !broken_) {
    while (sent < asked.size() && pending.size() < kPipelineDepth) {
      Result<uint64_t> id = SendGet(ids[asked[sent]], pending);
      if (!id.ok()) break;
      index_of.emplace(*id, asked[sent]);
      ++sent;
    }
    if (broken_) break;
    uint64_t answered = 0;
    Result<LocalBlockRead> read = ReceiveBlock(pending, &answered);
    if (broken_ && !index_of.contains(answered)) break;
    results[index_of.at(answered)] = std::move(read);
    pending.erase(answered);
    ++received;
  }
  std::vector<Result<LocalBlockRead>> out;
  out.reserve(ids.size());
  for (std::optional<Result<LocalBlockRead>>& result : results) {
    out.push_back(result.has_value() ? std::move(*result)
                                     : Result<LocalBlockRead>(
                                           UnavailableError("the local-read connection failed")));
  }
  return out;
}

Result<uint64_t> LocalReadConnection::Ask(capnp::MessageBuilder& request) {
  if (broken_) return UnavailableError("the local-read connection failed");
  const uint64_t id = next_id_++;
  request.getRoot<proto::LocalRequest>().setId(id);
  if (Status sent = SendRequest(request); !sent.ok()) {
    broken_ = true;
    return sent;
  }
  asked_.insert(id);
  return id;
}

Result<LocalPacket> LocalReadConnection::AwaitReply(uint64_t id) {
  asked_.erase(id);  // from here on Receive hands its reply over rather than keeping it
  if (auto arrived = arrived_.find(id); arrived != arrived_.end()) {
    LocalPacket packet = std::move(arrived->second.front());
    arrived->second.pop_front();
    if (arrived->second.empty()) arrived_.erase(arrived);
    return packet;
  }
  if (broken_) return UnavailableError("the local-read connection failed");
  Result<LocalPacket> packet = Receive();
  if (!packet.ok()) {
    broken_ = true;
    return UnavailableError("local reads: no reply: " + packet.status().message());
  }
  if (ReplyId(*packet) != id) {
    broken_ = true;
    return UnavailableError("local reads: a reply to another request");
  }
  return packet;
}

uint64_t LocalReadConnection::ReplyId(const LocalPacket& packet) {
  try {
    capnp::FlatArrayMessageReader message(packet.words);
    return message.getRoot<proto::LocalReply>().getId();
  } catch (const kj::Exception&) {
    return 0;  // malformed: whoever receives it says so
  }
}

Result<LocalPacket> LocalReadConnection::Receive(std::chrono::milliseconds extra) {
  // A worker's answer may take long (a disk block read into a region), but a halted worker's
  // never comes: look at it between slices of the wait (the socket's receive timeout, so a
  // reply that comes in time costs one system call).
  const auto deadline = std::chrono::steady_clock::now() + timeout_ + extra;
  int halted_checks = 0;
  while (true) {
    Result<LocalPacket> packet = ReceivePacketWaiting(socket_.get());
    if (packet.ok() && !asked_.empty()) {
      // A reply to a request asked ahead (Ask): kept for its AwaitReply.
      if (const uint64_t id = ReplyId(*packet); asked_.contains(id)) {
        arrived_[id].push_back(std::move(*packet));
        continue;
      }
    }
    if (packet.ok() || packet.status().code() != StatusCode::kNotFound) return packet;
    if (std::chrono::steady_clock::now() >= deadline) {
      return NotFoundError("no answer within " + std::to_string(timeout_.count()) + " ms");
    }
    // Twice in a row, so a worker caught between a stop and a continue is not given up on.
    halted_checks = ProcessHalted(worker_pid_) ? halted_checks + 1 : 0;
    if (halted_checks == 2) return UnavailableError("the worker process is stopped or gone");
  }
}

namespace {

// What a reply says of a block, without its bytes.
LocalBlockRead FactsOf(proto::LocalBlock::Reader found) {
  LocalBlockRead read;
  read.tier = FromProto(found.getTier());
  read.level = FromProto(found.getLevel());
  read.version = found.getVersion();
  read.generation = found.getGeneration();
  for (uint64_t digest : found.getUnitDigests()) read.unit_digests.push_back(digest);
  return read;
}

// A block whose bytes came inline (in the packet's trailer, or inside the message from a worker
// that does not send trailers), checked against its digests as a TCP read's are (they crossed
// a socket).
Result<LocalBlockRead> InlineBlock(proto::LocalBlock::Reader found, const BlockId& block,
                                   const ChunkPtr& trailer) {
  LocalBlockRead read = FactsOf(found);
  ChunkPtr bytes;
  if (found.getInTrailer()) {
    const uint64_t offset = found.getTrailerOffset();
    if (trailer == nullptr || offset > trailer->size() ||
        found.getSize() > trailer->size() - offset) {
      return UnavailableError("local reads: a block past the end of its reply");
    }
    bytes = SliceChunk(trailer, offset, found.getSize());  // no copy
  } else {
    capnp::Data::Reader inline_bytes = found.getInline();
    if (inline_bytes.size() != found.getSize())
      return UnavailableError("local reads: a short reply");
    bytes = MakeChunk(std::as_bytes(std::span(inline_bytes.begin(), inline_bytes.size())));
  }
  const std::span<const std::byte> span = bytes->bytes();
  if (FirstBadUnit({span}, 0, span.size(), span.size(), read.unit_digests).has_value()) {
    return DataLossError("local read of " + block.ToString() + ": bytes do not match their digest");
  }
  read.data.Append(std::move(bytes));
  return read;
}

}  // namespace

std::vector<Result<LocalBlockRead>> LocalReadConnection::GetSmall(const std::vector<BlockId>& ids) {
  std::vector<std::optional<Result<LocalBlockRead>>> found(ids.size());
  std::vector<BlockId> asked;
  std::vector<size_t> asked_at;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (std::optional<LocalBlockRead> copied = FromArena(ids[i])) {
      found[i] = std::move(*copied);
    } else {
      asked.push_back(ids[i]);
      asked_at.push_back(i);
    }
  }
  if (!asked.empty()) {
    std::vector<Result<LocalBlockRead>> replies = AskSmall(asked);
    for (size_t j = 0; j < asked.size(); ++j) found[asked_at[j]] = std::move(replies[j]);
  }
  std::vector<Result<LocalBlockRead>> results;
  results.reserve(ids.size());
  for (std::optional<Result<LocalBlockRead>>& result : found) results.push_back(std::move(*result));
  return results;
}

std::vector<Result<LocalBlockRead>> LocalReadConnection::AskSmall(const std::vector<BlockId>& ids) {
  std::vector<Result<LocalBlockRead>> results;
  auto fail_all = [&](const Status& status) {
    results.assign(ids.size(), Result<LocalBlockRead>(status));
    return results;
  };
  if (broken_) return fail_all(UnavailableError("the local-read connection failed"));
  const uint64_t id = next_id_++;
  capnp::MallocMessageBuilder get;
  proto::LocalRequest::Builder request = get.initRoot<proto::LocalRequest>();
  request.setId(id);
  request.setTrailer(true);
  auto names = request.initGetMany(static_cast<unsigned>(ids.size()));
  for (unsigned i = 0; i < ids.size(); ++i) names.set(i, ids[i].ToString());
  if (Status sent = SendRequest(get); !sent.ok()) {
    broken_ = true;
    return fail_all(sent);
  }
  Result<LocalPacket> packet = Receive();
  if (!packet.ok()) {
    broken_ = true;
    return fail_all(UnavailableError("local getMany: " + packet.status().message()));
  }
  try {
    capnp::FlatArrayMessageReader message(packet->words);
    proto::LocalReply::Reader reply = message.getRoot<proto::LocalReply>();
    if (reply.getId() != id || !(reply.isBlocks() || reply.isError()) ||
        (reply.isBlocks() && reply.getBlocks().size() != ids.size())) {
      broken_ = true;
      return fail_all(UnavailableError("local reads: unexpected reply to getMany"));
    }
    if (reply.isError()) return fail_all(StatusFromError(reply.getError()));
    auto entries = reply.getBlocks();
    for (unsigned i = 0; i < entries.size(); ++i) {
      if (entries[i].isError()) {
        results.emplace_back(StatusFromError(entries[i].getError()));
      } else {
        results.push_back(InlineBlock(entries[i].getBlock(), ids[i], packet->trailer));
      }
    }
  } catch (const kj::Exception& e) {
    broken_ = true;
    return fail_all(UnavailableError(std::string("local reads: malformed reply: ") +
                                     e.getDescription().cStr()));
  }
  return results;
}

Result<LocalBlockRead> LocalReadConnection::ReceiveBlock(std::map<uint64_t, Pending>& pending,
                                                         uint64_t* answered,
                                                         std::chrono::milliseconds extra) {
  *answered = 0;
  Result<LocalPacket> packet = Receive(extra);
  if (!packet.ok()) {
    broken_ = true;  // a reply missing: the stream can no longer be trusted
    return UnavailableError("local read of " + pending.begin()->second.id.ToString() + ": " +
                            packet.status().message());
  }
  LocalBlockRead read;
  uint64_t pin = 0;
  BlockId block = pending.begin()->second.id;
  Status parsed = [&]() -> Status {
    try {
      capnp::FlatArrayMessageReader message(packet->words);
      proto::LocalReply::Reader reply = message.getRoot<proto::LocalReply>();
      auto asked = pending.find(reply.getId());
      if (asked == pending.end()) {
        broken_ = true;
        return UnavailableError("local reads: a reply to no request");
      }
      *answered = asked->first;
      block = asked->second.id;
      // Taken from the pending request: unless confirmed below, the offer ends with this scope.
      MappingOffer offer = std::move(asked->second.offer);
      const bool reused = reply.isBlock() && reply.getBlock().getReused();
      if (!reused) offer.Forget();  // the worker no longer serves that mapping's version
      if (reply.isError()) return StatusFromError(reply.getError());
      if (!reply.isBlock()) {
        broken_ = true;
        return UnavailableError("local reads: unexpected reply");
      }
      proto::LocalBlock::Reader found = reply.getBlock();
      if (reused) {
        // The worker confirmed that the region this connection keeps mapped is the block's
        // current version.
        const MappedBlock* kept = offer.get();
        if (kept == nullptr || found.getPin() != kept->pin ||
            found.getGeneration() != kept->generation || found.getSize() != kept->region->size()) {
          broken_ = true;
          return UnavailableError("local reads: a reuse of a mapping that was not offered");
        }
        read.tier = kept->tier;
        read.level = kept->level;
        read.version = kept->version;
        read.generation = kept->generation;
        read.unit_digests = kept->unit_digests;
        read.data.Append(offer.Take());
        read.mapped = true;
        return Status::Ok();
      }
      pin = found.getPin();
      if (pin == 0) {
        BM_ASSIGN_OR_RETURN(read, InlineBlock(found, block, packet->trailer));
        return Status::Ok();
      }
      // A mapped region was checked by the worker when it was sealed and cannot have changed.
      read = FactsOf(found);
      if (!packet->fd.valid()) {
        broken_ = true;
        return UnavailableError("local reads: a region without its descriptor");
      }
      // Unmapping tells the worker; the region keeps this connection (and so the pin) alive.
      auto mapped = std::make_shared<MappedBlock>(block);
      BM_ASSIGN_OR_RETURN(mapped->region, MappedRegion::Map(packet->fd.Release(), found.getSize(),
                                                            [connection = shared_from_this(), pin] {
                                                              connection->Release(pin);
                                                            }));
      mapped->pin = pin;
      mapped->generation = read.generation;
      mapped->tier = read.tier;
      mapped->level = read.level;
      mapped->version = read.version;
      mapped->unit_digests = read.unit_digests;
      // Kept for the next get of this block, while it stays the worker's current version.
      mapped_->Add(mapped);
      read.data.Append(mapped_->View(std::move(mapped)));
      read.mapped = true;
      return Status::Ok();
    } catch (const kj::Exception& e) {
      broken_ = true;
      return UnavailableError(std::string("local reads: malformed reply: ") +
                              e.getDescription().cStr());
    }
  }();
  if (!parsed.ok()) {
    if (pin != 0 && !read.mapped) Release(pin);  // refused to map: the worker need not keep it
    return parsed;
  }
  return read;
}

LocalReads::LocalReads(bool enabled, WorkerChannels& workers, std::chrono::milliseconds timeout,
                       IdleMappingLimits idle_limits, bool arenas)
    : enabled_(enabled),
      workers_(workers),
      timeout_(timeout),
      idle_limits_(idle_limits),
      arenas_(arenas),
      host_id_(HostIdentity()) {}

Result<std::shared_ptr<LocalReadConnection>> LocalReads::For(const std::string& address) {
  using Connection = std::shared_ptr<LocalReadConnection>;
  // inproc:// peers live in this process (tests' fake workers): they serve no socket.
  if (!enabled_ || address.starts_with("inproc://")) return Connection();
  Worker& worker = by_address_[address];
  if (worker.elsewhere) return Connection();
  if (worker.connection && !worker.connection->broken()) return worker.connection;
  Drop(worker.connection);
  const TimePoint now = std::chrono::steady_clock::now();
  if (now < worker.retry_after) return Connection();
  Result<std::shared_ptr<LocalReadConnection>> connected = Connect(address, worker);
  if (!connected.ok()) {
    spdlog::debug("local reads from {} are off for now: {}", address,
                  connected.status().ToString());
    worker.retry_after = now + kRetryAfterFailure;
    if (connected.status().code() == StatusCode::kUnavailable && !worker.offered) {
      return connected.status();  // the worker itself did not answer over TCP
    }
    return Connection();
  }
  worker.connection = *connected;
  reaper_->Watch(worker.connection->mapped());
  return worker.connection;
}

void LocalReads::Drop(std::shared_ptr<LocalReadConnection>& connection) {
  // Its idle mappings hold it open (each region releases its pin through it): drop them.
  if (connection) connection->mapped()->Close();
  connection.reset();
}

LocalReads::~LocalReads() {
  for (auto& [address, worker] : by_address_) Drop(worker.connection);
}

void LocalReads::ForgetBlocks(const std::function<bool(const BlockId&)>& removed) {
  for (auto& [address, worker] : by_address_) {
    if (worker.connection) worker.connection->mapped()->ForgetBlocks(removed);
  }
}

void LocalReads::ForgetBlock(const BlockId& id) {
  for (auto& [address, worker] : by_address_) {
    if (worker.connection) worker.connection->mapped()->ForgetBlock(id);
  }
}

void LocalReads::Failed(const std::string& address) {
  auto found = by_address_.find(address);
  if (found == by_address_.end()) return;
  Drop(found->second.connection);
  found->second.retry_after = std::chrono::steady_clock::now() + kRetryAfterFailure;
}

Result<std::shared_ptr<LocalReadConnection>> LocalReads::Connect(const std::string& address,
                                                                 Worker& worker) {
  BM_ASSIGN_OR_RETURN(RpcChannel * channel, workers_.Channel(address));
  capnp::MallocMessageBuilder request;
  request.initRoot<proto::Request>().setOpenLocalReads();
  const std::string peer = "worker at " + address;
  worker.offered = false;
  Result<IncomingMessage> reply = CallPeer(*channel, timeout_, peer, request);
  if (!reply.ok()) {
    // A worker from before local reads does not know the request: it never will.
    if (reply.status().code() == StatusCode::kInvalidArgument) worker.elsewhere = true;
    return reply.status();
  }
  std::string host_id;
  std::string path;
  std::string ticket;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::Reply::Reader r = reply->reply();
    if (!r.isLocalReads()) return UnexpectedReply(peer, "localReads");
    proto::LocalReadsOffer::Reader offer = r.getLocalReads();
    host_id = offer.getHostId();
    path = offer.getSocketPath();
    capnp::Data::Reader bytes = offer.getTicket();
    ticket.assign(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
    return Status::Ok();
  }));
  worker.offered = true;  // failures from here on are the socket's, not the worker's
  if (host_id != host_id_ || path.empty()) {
    worker.elsewhere = true;
    return NotFoundError(path.empty() ? "local reads are off there" : "on another host");
  }
  if (!reaper_) reaper_ = std::make_shared<IdleMappingReaper>();
  return LocalReadConnection::Open(path, ticket, timeout_, idle_limits_, reaper_, arenas_);
}

}  // namespace bm
