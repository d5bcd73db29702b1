#include "worker/local_read_server.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/core/protocol.h"
#include "common/net/sealed_region.h"
#include "common/security/access_policy.h"
#include "common/security/tenant.h"
#include "schema/local_reads.capnp.h"
#include "worker/tenant_gate.h"

namespace bm {
namespace {

// Blocks up to this size travel inside the reply: mapping a region costs more than copying a
// few KiB (two system calls and a page table update on each side).
constexpr uint64_t kMaxInlineBlockBytes = 64 * 1024;
// Requests served from one connection per wake-up, so one busy reader cannot starve the rest.
constexpr int kPacketsPerWakeup = 64;
constexpr size_t kTicketBytes = 16;
// Replies one reader may leave unread in its outbox before it is disconnected.
constexpr size_t kMaxQueuedReplies = 256;
// Room in one packet for a shuffle page's piece headers (and file offsets) and, for pieces in
// memory, their bytes; each listed piece takes kHeaderBytes of it.
constexpr uint64_t kShufflePacketRoom = kMaxLocalPacketBytes - 16 * 1024;
constexpr uint64_t kHeaderBytes = 48;
// A page of pieces in memory holds at most this much, sent as packets back to back (one round
// trip for the page rather than one per packet, each a wake-up of the worker's loop).
constexpr uint64_t kMaxMemoryPageBytes = 1 << 20;

std::string RandomTicket() {
  std::string ticket(kTicketBytes, '\0');
  size_t got = 0;
  while (got < ticket.size()) {
    const ssize_t n = getrandom(ticket.data() + got, ticket.size() - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
    BM_CHECK(n > 0 || errno == EINTR);
  }
  return ticket;
}

std::span<const std::byte> BytesOf(const kj::Array<capnp::word>& words) {
  const kj::ArrayPtr<const kj::byte> bytes = words.asBytes();
  return std::as_bytes(std::span(bytes.begin(), bytes.size()));
}

// What a reply says of a block besides its bytes.
struct BlockFacts {
  uint64_t size;
  Tier tier;
  StorageLevel level;
  uint64_t version;
  uint64_t generation;
};

void FillBlock(proto::LocalBlock::Builder out, const BlockFacts& block,
               const std::vector<uint64_t>& unit_digests) {
  out.setSize(block.size);
  out.setGeneration(block.generation);
  out.setTier(ToProto(block.tier));
  out.setLevel(ToProto(block.level));
  out.setVersion(block.version);
  auto digests = out.initUnitDigests(static_cast<unsigned>(unit_digests.size()));
  for (unsigned i = 0; i < unit_digests.size(); ++i) digests.set(i, unit_digests[i]);
}

// A whole block read from the store, its bytes inline: in `trailer` when given (sent from the
// store's chunks after the message), else inside the message.
template <typename Trailer>
void FillInlineBlock(proto::LocalBlock::Builder out, const BlockRead& read, Trailer* trailer) {
  FillBlock(out, {read.total_size, read.tier, read.level, read.version, read.generation},
            read.unit_digests);
  if (trailer != nullptr) {
    out.setInTrailer(true);
    out.setTrailerOffset(trailer->bytes);
    trailer->chunks.insert(trailer->chunks.end(), read.chunks.begin(), read.chunks.end());
    trailer->bytes += read.total_size;
    return;
  }
  capnp::Data::Builder bytes = out.initInline(static_cast<unsigned>(read.total_size));
  size_t at = 0;
  for (const ChunkPtr& chunk : read.chunks) {
    std::memcpy(bytes.begin() + at, chunk->bytes().data(), chunk->size());
    at += chunk->size();
  }
}

}  // namespace

Result<std::unique_ptr<LocalReadServer>> LocalReadServer::Create(LocalReadServerOptions options,
                                                                 BlockManager& blocks,
                                                                 WorkerCounters& counters,
                                                                 const Clock& clock) {
  BM_ASSIGN_OR_RETURN(OwnedFd listener, ListenLocal(options.socket_path));
  OwnedFd epoll(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll.valid()) return InternalError(std::string("epoll_create1: ") + std::strerror(errno));
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = 0;
  if (epoll_ctl(epoll.get(), EPOLL_CTL_ADD, listener.get(), &event) != 0) {
    return InternalError(std::string("epoll_ctl: ") + std::strerror(errno));
  }
  return std::unique_ptr<LocalReadServer>(new LocalReadServer(
      std::move(options), blocks, counters, clock, std::move(listener), std::move(epoll)));
}

LocalReadServer::LocalReadServer(LocalReadServerOptions options, BlockManager& blocks,
                                 WorkerCounters& counters, const Clock& clock, OwnedFd listener,
                                 OwnedFd epoll)
    : options_(std::move(options)),
      blocks_(blocks),
      counters_(counters),
      clock_(clock),
      listener_(std::move(listener)),
      epoll_(std::move(epoll)),
      own_uid_(geteuid()),
      arenas_(options_.arenas) {
  blocks_.set_block_changed([this](const BlockId& id) { arenas_.Forget(id); });
}

LocalReadServer::~LocalReadServer() {
  blocks_.set_block_changed({});
  while (!sessions_.empty()) Close(sessions_.begin()->first);
  unlink(options_.socket_path.c_str());
}

std::string LocalReadServer::IssueTicket(const std::optional<PeerIdentity>& peer) {
  std::string ticket = RandomTicket();
  tickets_[ticket] = Ticket{peer, clock_.Now() + options_.ticket_lifetime};
  return ticket;
}

void LocalReadServer::Serve() {
  epoll_event events[64];
  const int ready = epoll_wait(epoll_.get(), events, 64, 0);
  for (int i = 0; i < ready; ++i) {
    const uint64_t id = events[i].data.u64;
    if (id == 0) {
      Accept();
      continue;
    }
    auto session = sessions_.find(id);
    if (session == sessions_.end()) continue;
    if ((events[i].events & EPOLLOUT) != 0) {
      if (!Flush(session->second)) {
        Close(id);
        continue;
      }
      if (session->second.outbox.empty()) WatchWritable(id, session->second, false);
    }
    if ((events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0 &&
        !ServeSession(id)) {
      Close(id);
    }
  }
}

void LocalReadServer::Accept() {
  while (true) {
    OwnedFd socket(accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!socket.valid()) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        spdlog::warn("local reads: accept failed: {}", std::strerror(errno));
      }
      return;
    }
    Result<uid_t> uid = PeerUid(socket.get());
    if (!uid.ok() || (*uid != own_uid_ && *uid != 0)) {
      ++counters_.local_reads_refused;
      const Status refused = PermissionDeniedError("local reads: uid " +
                                                   (uid.ok() ? std::to_string(*uid) : "unknown") +
                                                   " may not read this worker's blocks (only uid " +
                                                   std::to_string(own_uid_) + " and root may)");
      spdlog::warn("{}", refused.message());
      capnp::MallocMessageBuilder reply;
      SetError(reply.initRoot<proto::LocalReply>().initError(), refused);
      (void)SendPacket(socket.get(), BytesOf(capnp::messageToFlatArray(reply)), -1,
                       /*wait=*/false);
      continue;  // closed here
    }
    const uint64_t id = next_session_id_++;
    epoll_event event{};
    event.events = EPOLLIN | EPOLLRDHUP;
    event.data.u64 = id;
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, socket.get(), &event) != 0) {
      spdlog::warn("local reads: epoll_ctl failed: {}", std::strerror(errno));
      continue;
    }
    sessions_[id].socket = std::move(socket);
  }
}

bool LocalReadServer::ServeSession(uint64_t session_id) {
  for (int served = 0; served < kPacketsPerWakeup;) {
    auto found = sessions_.find(session_id);
    if (found == sessions_.end()) return true;  // closed while serving (a failed send)
    Result<std::vector<Result<LocalPacket>>> packets =
        ReceiveQueuedPackets(found->second.socket.get());
    if (!packets.ok()) {
      // Nothing more queued, or the reader went away (its pins go with it).
      return packets.status().code() == StatusCode::kNotFound;
    }
    for (Result<LocalPacket>& packet : *packets) {
      if (!packet.ok()) return false;  // the reader went away, or sent a malformed packet
      found = sessions_.find(session_id);
      if (found == sessions_.end()) return true;
      if (packet->fd.valid() || packet->trailer != nullptr) {
        spdlog::warn(
            "local reads: a reader sent a descriptor or bytes after its request; "
            "disconnected");
        return false;
      }
      Status served_packet = ServePacket(session_id, found->second, *packet);
      if (!served_packet.ok()) {
        ++counters_.local_reads_refused;
        spdlog::warn("local reads: {}; disconnected", served_packet.ToString());
        SendError(session_id, 0, served_packet);  // best effort: the reader hears why
        return false;
      }
      ++served;
    }
    // Fewer than a full receive: the queue was drained.
    if (packets->size() < kMaxQueuedPacketsPerReceive) return true;
  }
  return true;
}

Status LocalReadServer::ServePacket(uint64_t session_id, Session& session,
                                    const LocalPacket& packet) {
  try {
    capnp::FlatArrayMessageReader message(packet.words);
    proto::LocalRequest::Reader request = message.getRoot<proto::LocalRequest>();
    const uint64_t request_id = request.getId();
    switch (request.which()) {
      case proto::LocalRequest::HELLO: {
        auto ticket = request.getHello();
        return Hello(session_id, session, request_id,
                     std::as_bytes(std::span(ticket.begin(), ticket.size())), request.getArena());
      }
      case proto::LocalRequest::GET: {
        if (!session.greeted) return PermissionDeniedError("a get before a valid ticket");
        Result<BlockId> id = ParseWireBlockId(request.getGet());
        if (!id.ok()) {
          SendError(session_id, request_id, id.status());
          return Status::Ok();
        }
        return Get(session_id, session, request_id, *id, request.getMapped(), request.getTrailer());
      }
      case proto::LocalRequest::GET_MANY:
        if (!session.greeted) return PermissionDeniedError("a get before a valid ticket");
        GetMany(session_id, session, request_id, request.getGetMany(), request.getTrailer());
        return Status::Ok();
      case proto::LocalRequest::READ_SHUFFLE:
        if (!session.greeted) return PermissionDeniedError("a read before a valid ticket");
        ReadShuffle(session_id, session, request_id, request.getReadShuffle());
        return Status::Ok();
      case proto::LocalRequest::ARENA_READS:
        if (!session.greeted) return PermissionDeniedError("a report before a valid ticket");
        ArenaReads(session, request.getArenaReads());
        return Status::Ok();
      case proto::LocalRequest::RELEASE: {
        auto pin = session.pins.find(request.getRelease());
        if (pin != session.pins.end()) {
          ReleasePin(pin->second);
          session.pins.erase(pin);
        }
        return Status::Ok();
      }
      default:
        return InvalidArgumentError("an unknown local-read request");
    }
  } catch (const kj::Exception& e) {
    return InvalidArgumentError(std::string("a malformed local-read request: ") +
                                e.getDescription().cStr());
  }
}

Status LocalReadServer::Hello(uint64_t session_id, Session& session, uint64_t request_id,
                              std::span<const std::byte> ticket, bool wants_arena) {
  const std::string key(reinterpret_cast<const char*>(ticket.data()), ticket.size());
  auto found = tickets_.find(key);
  if (session.greeted || found == tickets_.end() || found->second.expires < clock_.Now()) {
    return PermissionDeniedError("a local-read connection presented no valid ticket");
  }
  session.peer = found->second.peer;
  session.greeted = true;
  tickets_.erase(found);
  capnp::MallocMessageBuilder reply;
  proto::LocalReply::Builder root = reply.initRoot<proto::LocalReply>();
  root.setId(request_id);
  root.setOk();
  int arena_fd = -1;
  if (wants_arena &&
      AuthorizeWorkerRequest(options_.secure, session.peer, proto::Request::GET_BLOCK).ok()) {
    // Every reader that may read any block shares one arena; a tenant's readers share theirs.
    std::string scope =
        IsTenantRestricted(session.peer) ? "tenant " + TenantOf(*session.peer) : "all";
    if (const BlockArenaWriter* arena = arenas_.For(scope)) {
      session.arena_scope = std::move(scope);
      root.setArenaBytes(arena->file_bytes());
      arena_fd = arena->read_only_fd();
    }
  }
  Send(session_id, reply, arena_fd);
  return Status::Ok();
}

void LocalReadServer::ArenaReads(const Session& session, capnp::List<capnp::Text>::Reader ids) {
  if (!session.arena_scope) return;
  for (capnp::Text::Reader text : ids) {
    Result<BlockId> id = ParseWireBlockId(text);
    // Only what this reader's arena holds: nothing else can have been read from it.
    if (!id.ok() || !arenas_.Holds(*session.arena_scope, *id)) continue;
    blocks_.TouchInMemory(*id);
    ++counters_.local_arena_reads;
  }
}

void LocalReadServer::OfferToArena(const Session& session, const BlockId& id,
                                   const BlockRead& read) {
  if (!session.arena_scope) return;
  // A restricted reader's get passed CheckTenant, so the dataset's record is known here; only
  // its own datasets' blocks go into its tenant's arena (a dataset shared with it stays out:
  // an unshare could not take back what its readers hold mapped).
  if (options_.tenants != nullptr && IsTenantRestricted(session.peer)) {
    const std::optional<std::string> owner = options_.tenants->OwnerOf(DatasetOf(id));
    if (!owner || *owner != TenantOf(*session.peer)) return;
  }
  arenas_.Offer(*session.arena_scope, id, read);
}

Status LocalReadServer::Get(uint64_t session_id, Session& session, uint64_t request_id,
                            const BlockId& id, uint64_t mapped, bool trailer) {
  if (Status allowed =
          AuthorizeWorkerRequest(options_.secure, session.peer, proto::Request::GET_BLOCK);
      !allowed.ok()) {
    ++counters_.local_reads_refused;
    SendError(session_id, request_id, allowed);
    return Status::Ok();
  }
  if (Status allowed = CheckTenant(session, id); !allowed.ok()) {
    SendError(session_id, request_id, allowed);
    return Status::Ok();
  }
  if (auto pin = session.pins.find(mapped);
      pin != session.pins.end() && blocks_.ReadAgainShared(id, pin->second.held)) {
    // The reader still has this version mapped: it reads its region again, and nothing new is
    // made or pinned. (The pin keeps the lifetime of its first grant.)
    const std::optional<BlockStatus> status = blocks_.Find(id);
    BM_CHECK(status.has_value());
    capnp::MallocMessageBuilder reply;
    proto::LocalReply::Builder root = reply.initRoot<proto::LocalReply>();
    root.setId(request_id);
    proto::LocalBlock::Builder block = root.initBlock();
    block.setSize(status->size);
    block.setGeneration(pin->second.held.generation);
    block.setPin(mapped);
    block.setReused(true);
    if (Send(session_id, reply)) {
      ++counters_.block_reads_local;
      counters_.local_read_bytes += status->size;
    }
    return Status::Ok();
  }
  const std::optional<BlockStatus> status = blocks_.Find(id);
  if (!status) {
    SendError(session_id, request_id,
              NotFoundError("block " + id.ToString() + " is not stored here"));
    return Status::Ok();
  }
  if (status->size <= kMaxInlineBlockBytes) {
    if (std::optional<BlockRead> read = blocks_.ReadInMemory(id)) {
      OfferToArena(session, id, *read);
      SendInline(session_id, request_id, std::move(*read), trailer);
    } else {
      blocks_.Read(id, 0, status->size,
                   [this, session_id, request_id, trailer](Result<BlockRead> read) {
                     SendInline(session_id, request_id, std::move(read), trailer);
                   });
    }
    return Status::Ok();
  }
  if (session.pins.size() >= options_.max_pins_per_reader) {
    SendError(session_id, request_id,
              OutOfSpaceError("this reader holds " + std::to_string(session.pins.size()) +
                              " mapped blocks, the most one may; release some"));
    return Status::Ok();
  }
  blocks_.ShareWhole(id, [this, session_id, request_id](Result<SharedBlock> shared) {
    SendShared(session_id, request_id, std::move(shared));
  });
  return Status::Ok();
}

Status LocalReadServer::CheckTenant(const Session& session, const BlockId& id) const {
  if (options_.tenants == nullptr || !IsTenantRestricted(session.peer)) return Status::Ok();
  Status allowed = options_.tenants->CheckKnown(*session.peer, DatasetOf(id), DatasetOp::kRead);
  if (allowed.code() == StatusCode::kPermissionDenied) ++counters_.local_reads_refused;
  return allowed;
}

void LocalReadServer::GetMany(uint64_t session_id, const Session& session, uint64_t request_id,
                              capnp::List<capnp::Text>::Reader ids, bool trailer) {
  // Room for the blocks' bytes in one packet, with their headers and digests.
  constexpr uint64_t kBatchBytes = kMaxLocalPacketBytes - 16 * 1024;
  capnp::MallocMessageBuilder reply;
  proto::LocalReply::Builder root = reply.initRoot<proto::LocalReply>();
  root.setId(request_id);
  if (Status allowed =
          AuthorizeWorkerRequest(options_.secure, session.peer, proto::Request::GET_BLOCK);
      !allowed.ok()) {
    ++counters_.local_reads_refused;
    SetError(root.initError(), allowed);
    Send(session_id, reply);
    return;
  }
  auto entries = root.initBlocks(ids.size());
  Trailer bytes_after;
  uint64_t bytes = 0;
  uint64_t served = 0;
  for (unsigned i = 0; i < ids.size(); ++i) {
    Result<BlockId> id = ParseWireBlockId(ids[i]);
    if (!id.ok()) {
      SetError(entries[i].initError(), id.status());
      continue;
    }
    if (Status allowed = CheckTenant(session, *id); !allowed.ok()) {
      SetError(entries[i].initError(), allowed);
      continue;
    }
    std::optional<BlockRead> read;
    if (std::optional<BlockStatus> status = blocks_.Find(*id);
        status && status->tier == Tier::kMemory && status->size <= kMaxInlineBlockBytes &&
        status->size <= kBatchBytes - bytes) {
      read = blocks_.ReadInMemory(*id);
    } else if (!status) {
      SetError(entries[i].initError(),
               NotFoundError("block " + id->ToString() + " is not stored here"));
      continue;
    }
    if (!read) {
      SetError(entries[i].initError(), UnavailableError("read " + id->ToString() + " alone"));
      continue;
    }
    OfferToArena(session, *id, *read);
    FillInlineBlock(entries[i].initBlock(), *read, trailer ? &bytes_after : nullptr);
    bytes += read->total_size;
    ++served;
  }
  if (Send(session_id, reply, -1, &bytes_after)) {
    counters_.block_reads_local += served;
    counters_.local_read_bytes += bytes;
  }
}

void LocalReadServer::ReadShuffle(uint64_t session_id, const Session& session, uint64_t request_id,
                                  proto::ReadShuffle::Reader read) {
  if (Status allowed =
          AuthorizeWorkerRequest(options_.secure, session.peer, proto::Request::READ_SHUFFLE);
      !allowed.ok()) {
    ++counters_.local_reads_refused;
    SendError(session_id, request_id, allowed);
    return;
  }
  // The shuffle's owner is checked as over TCP: a shuffle is a dataset its tenant owns.
  if (Status allowed = CheckTenant(session, BlockId::Shuffle(read.getShuffleId(), 0, 0));
      !allowed.ok()) {
    SendError(session_id, request_id, allowed);
    return;
  }
  if (options_.shuffles == nullptr) {
    SendError(session_id, request_id, UnavailableError("this worker serves no shuffles here"));
    return;
  }
  options_.shuffles->ReadForLocal(read, kMaxMemoryPageBytes,
                                  [this, session_id, request_id](Result<OpenedShufflePage> opened) {
                                    if (!opened.ok()) {
                                      SendError(session_id, request_id, opened.status());
                                      return;
                                    }
                                    SendShufflePage(session_id, request_id, std::move(*opened));
                                  });
}

void LocalReadServer::SendShufflePage(uint64_t session_id, uint64_t request_id,
                                      OpenedShufflePage opened) {
  using Bytes = proto::LocalShufflePage::PageBytes;
  const ShuffleStore::Page& page = opened.page;
  const std::vector<ShuffleStore::StoredPiece>& pieces = page.pieces;
  const bool in_file = opened.file.valid();
  // The pieces from `begin` that fit one packet: their headers always, their bytes too when
  // they travel in its trailer.
  auto fitting = [&](size_t begin) {
    size_t end = begin;
    for (uint64_t room = kShufflePacketRoom; end < pieces.size(); ++end) {
      const uint64_t needs = kHeaderBytes + (in_file ? 0 : pieces[end].length);
      if (needs > room) break;
      room -= needs;
    }
    return end;
  };
  if (in_file) {
    // A page cut short continues where the reader asks next.
    SendShufflePart(session_id, request_id, page, {0, fitting(0)}, Bytes::FILE, opened.file.get());
    return;
  }
  if (!pieces.empty() && fitting(0) == 0) {
    // A first piece too big for a packet goes in a sealed region: one copy, as a TCP reply
    // would make into its socket.
    Result<std::shared_ptr<const SealedRegion>> region =
        SealedRegion::Create("bm-shuffle-piece", pieces[0].length, [&](std::span<std::byte> out) {
          std::memcpy(out.data(), pieces[0].bytes.data(), pieces[0].length);
          return Status::Ok();
        });
    if (!region.ok()) {
      SendError(session_id, request_id, region.status());
      return;
    }
    SendShufflePart(session_id, request_id, page, {0, 1}, Bytes::REGION, (*region)->read_only_fd());
    return;
  }
  // The rest in packets sent back to back, each a trailer of the store's chunks (no copy here):
  // one round trip for the page. A piece too big for a packet ends the page early.
  size_t begin = 0;
  do {
    const size_t end = fitting(begin);
    const bool more = end > begin && end < pieces.size() && fitting(end) > end;
    if (!SendShufflePart(session_id, request_id, page, {begin, end}, Bytes::TRAILER, -1, more)) {
      return;
    }
    if (!more) return;
    begin = end;
  } while (true);
}

bool LocalReadServer::SendShufflePart(uint64_t session_id, uint64_t request_id,
                                      const ShuffleStore::Page& page,
                                      std::pair<size_t, size_t> range,
                                      proto::LocalShufflePage::PageBytes where, int fd, bool more) {
  using Bytes = proto::LocalShufflePage::PageBytes;
  const auto [begin, end] = range;
  const std::span<const ShuffleStore::StoredPiece> sent(page.pieces.data() + begin, end - begin);
  capnp::MallocMessageBuilder reply;
  proto::LocalReply::Builder root = reply.initRoot<proto::LocalReply>();
  root.setId(request_id);
  proto::LocalShufflePage::Builder out = root.initShufflePage();
  const bool whole_page = end == page.pieces.size();
  if (!more) {
    out.setNextCursor(whole_page ? page.next_cursor : page.pieces[end].cursor);
    out.setEnd(whole_page && page.end);
  }
  out.setMore(more);
  out.setBytes(where);
  auto listed = out.initPieces(static_cast<unsigned>(sent.size()));
  const bool in_file = where == Bytes::FILE;
  auto offsets = out.initFileOffsets(in_file ? static_cast<unsigned>(sent.size()) : 0);
  uint64_t bytes = 0;
  for (unsigned i = 0; i < sent.size(); ++i) {
    listed[i].setMap(sent[i].map);
    listed[i].setSequence(sent[i].sequence);
    listed[i].setLength(sent[i].length);
    listed[i].setDigest(sent[i].digest);
    if (in_file) offsets.set(i, sent[i].file_offset);
    bytes += sent[i].length;
  }
  Trailer bytes_after;
  if (where == Bytes::TRAILER) {
    for (ShuffleStore::PieceRun& run : ShuffleStore::RunsOf(sent, kShufflePacketRoom)) {
      if (run.bytes != nullptr) bytes_after.chunks.push_back(std::move(run.bytes));
    }
    bytes_after.bytes = bytes;
  }
  if (!Send(session_id, reply, fd, &bytes_after)) return false;
  ++(in_file   ? counters_.shuffle_local_pages_file
     : fd >= 0 ? counters_.shuffle_local_pages_region
               : counters_.shuffle_local_pages_trailer);
  counters_.shuffle_bytes_read += bytes;
  return true;
}

void LocalReadServer::SendInline(uint64_t session_id, uint64_t request_id, Result<BlockRead> read,
                                 bool trailer) {
  if (!read.ok()) {
    SendError(session_id, request_id, read.status());
    return;
  }
  capnp::MallocMessageBuilder reply;
  proto::LocalReply::Builder root = reply.initRoot<proto::LocalReply>();
  root.setId(request_id);
  Trailer bytes_after;
  FillInlineBlock(root.initBlock(), *read, trailer ? &bytes_after : nullptr);
  if (Send(session_id, reply, -1, &bytes_after)) {
    ++counters_.block_reads_local;
    counters_.local_read_bytes += read->total_size;
  }
}

void LocalReadServer::SendShared(uint64_t session_id, uint64_t request_id,
                                 Result<SharedBlock> shared) {
  if (!shared.ok()) {
    SendError(session_id, request_id, shared.status());
    return;
  }
  auto session = sessions_.find(session_id);
  if (session == sessions_.end()) {
    blocks_.ReleaseShared(shared->pin);  // the reader went away meanwhile
    return;
  }
  const uint64_t pin_id = next_pin_id_++;
  capnp::MallocMessageBuilder reply;
  proto::LocalReply::Builder root = reply.initRoot<proto::LocalReply>();
  root.setId(request_id);
  proto::LocalBlock::Builder block = root.initBlock();
  FillBlock(block,
            {shared->status.size, shared->status.tier, shared->status.level, shared->status.version,
             shared->generation},
            shared->unit_digests);
  block.setPin(pin_id);
  // Recorded first: a failed send closes the session, which releases it.
  session->second.pins[pin_id] = Pin{shared->pin, clock_.Now()};
  ++pin_count_;
  if (Send(session_id, reply, shared->region->read_only_fd())) {
    ++counters_.block_reads_local;
    counters_.local_read_bytes += shared->status.size;
  }
}

void LocalReadServer::SendError(uint64_t session_id, uint64_t request_id, const Status& status) {
  capnp::MallocMessageBuilder reply;
  proto::LocalReply::Builder root = reply.initRoot<proto::LocalReply>();
  root.setId(request_id);
  SetError(root.initError(), status);
  Send(session_id, reply);
}

bool LocalReadServer::Send(uint64_t session_id, capnp::MessageBuilder& reply, int fd,
                           const Trailer* trailer) {
  auto session = sessions_.find(session_id);
  if (session == sessions_.end()) return false;
  // Gathered by the kernel from the message's segments and the blocks' chunks: no copy here.
  std::vector<uint32_t> table;
  std::vector<std::span<const std::byte>> parts;
  MessageParts(reply, table, parts);
  if (trailer != nullptr) {
    for (const ChunkPtr& chunk : trailer->chunks) parts.push_back(chunk->bytes());
  }
  Session& reader = session->second;
  if (reader.outbox.empty()) {
    Status sent = SendPacket(reader.socket.get(), parts, fd, /*wait=*/false);
    if (sent.ok()) return true;
    if (sent.code() != StatusCode::kOutOfSpace) {
      Close(session_id);
      return false;
    }
  }
  if (reader.outbox.size() >= kMaxQueuedReplies) {
    spdlog::warn("local reads: a reader left {} replies unread; disconnected", kMaxQueuedReplies);
    Close(session_id);
    return false;
  }
  std::vector<std::byte> bytes;
  for (std::span<const std::byte> part : parts) bytes.insert(bytes.end(), part.begin(), part.end());
  reader.outbox.push_back({std::move(bytes), OwnedFd(fd >= 0 ? dup(fd) : -1)});
  if (reader.outbox.size() == 1) WatchWritable(session_id, reader, true);
  return true;
}

bool LocalReadServer::Flush(Session& session) {
  while (!session.outbox.empty()) {
    const Queued& next = session.outbox.front();
    Status sent = SendPacket(session.socket.get(), next.bytes, next.fd.get(), /*wait=*/false);
    if (!sent.ok()) return sent.code() == StatusCode::kOutOfSpace;
    session.outbox.pop_front();
  }
  return true;
}

void LocalReadServer::WatchWritable(uint64_t session_id, Session& session, bool writable) {
  epoll_event event{};
  event.events = EPOLLIN | EPOLLRDHUP | (writable ? uint32_t{EPOLLOUT} : uint32_t{0});
  event.data.u64 = session_id;
  epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, session.socket.get(), &event);
}

void LocalReadServer::Close(uint64_t session_id) {
  auto session = sessions_.find(session_id);
  if (session == sessions_.end()) return;
  for (const auto& [pin_id, pin] : session->second.pins) ReleasePin(pin);
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, session->second.socket.get(), nullptr);
  sessions_.erase(session);
}

void LocalReadServer::ReleasePin(const Pin& pin) {
  blocks_.ReleaseShared(pin.held);
  --pin_count_;
}

void LocalReadServer::Expire() {
  arenas_.KeepAlive();
  const TimePoint now = clock_.Now();
  std::erase_if(tickets_, [now](const auto& ticket) { return ticket.second.expires < now; });
  for (auto& [id, session] : sessions_) {
    for (auto pin = session.pins.begin(); pin != session.pins.end();) {
      if (now - pin->second.granted < options_.pin_lifetime) {
        ++pin;
        continue;
      }
      ReleasePin(pin->second);
      ++pins_expired_;
      pin = session.pins.erase(pin);
    }
  }
}

std::optional<TimePoint> LocalReadServer::NextDeadline() const {
  std::optional<TimePoint> next;
  auto consider = [&next](TimePoint at) {
    if (!next || at < *next) next = at;
  };
  for (const auto& [ticket, issued] : tickets_) consider(issued.expires);
  for (const auto& [id, session] : sessions_) {
    // Pins are granted in id order, so the first is the oldest.
    if (!session.pins.empty())
      consider(session.pins.begin()->second.granted + options_.pin_lifetime);
  }
  return next;
}

}  // namespace bm
