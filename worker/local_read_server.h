#pragma once

#include <capnp/list.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "blockmgr/status.h"
#include "common/core/clock.h"
#include "common/net/local_socket.h"
#include "common/security/curve_keys.h"
#include "schema/local_reads.capnp.h"
#include "worker/block_manager.h"
#include "worker/shuffle_handler.h"
#include "worker/small_block_arenas.h"
#include "worker/worker_status.h"

namespace capnp {
class MessageBuilder;
}

namespace bm {

class TenantGate;

struct LocalReadServerOptions {
  // Where the socket is made (the worker's disk directory; docs/storage.md "Same-host reads").
  std::string socket_path;
  // Keys on: a connection acts only as the key whose ticket it presented, authorized as that
  // key's getBlock would be over TCP.
  bool secure = false;
  // A ticket from openLocalReads must be presented within this long, once.
  Duration ticket_lifetime = std::chrono::seconds(30);
  // How long the worker keeps counting a region a reader has not released: after it the pin is
  // dropped (the block may then be evicted or removed, and its bytes leave the budget). The
  // reader's mapping stays valid, its bytes unchanged: the memfd is sealed; the pages are then
  // the reader's to free.
  Duration pin_lifetime = std::chrono::minutes(10);
  // Regions one connection may hold pinned at once; a get past it is refused (kOutOfSpace),
  // which the client answers by reading over TCP.
  size_t max_pins_per_reader = 4096;
  // Borrowed, may be null: the tenant rules of the worker's TCP port (worker/tenant_gate.h).
  // A client key's get of a dataset the gate holds no record of yet is answered kAborted, which
  // the reader answers by reading over TCP (where the worker asks the master).
  const TenantGate* tenants = nullptr;
  // Borrowed, may be null (then readShuffle is refused as unavailable, and read over TCP): the
  // shuffle partitions the worker holds.
  ShuffleHandler* shuffles = nullptr;
  // The small-block arenas handed to readers that ask for one (hello's `arena`).
  SmallBlockArenaOptions arenas{};
};

// Serves same-host reads on a Unix domain socket (schema/local_reads.capnp): readers on the
// worker's host receive whole blocks as sealed read-only shared regions (BlockManager::
// ShareWhole) that they map, instead of copies through TCP.
//
// Who may connect: the socket file is 0600, and a connection whose peer uid (SO_PEERCRED) is
// neither the worker's nor root is refused at once. A connection then presents a ticket the
// worker issued over its TCP port (openLocalReads), so it acts as the key (and role) that asked
// there, and each get is authorized as a getBlock over TCP would be: nothing can be read here
// that could not be read there, and nothing can be written (the regions are sealed).
//
// Shuffle pages (readShuffle) are authorized as over TCP and travel without a copy into a
// region where they can: pieces in memory in the trailers of packets sent back to back (from
// the store's chunks, by the kernel), pieces written to a partition file as the file's
// descriptor for the reader to map. Only a piece too big for a packet is copied into a sealed
// region.
// Nothing of a shuffle is pinned: written records never change, and a mapped file or region
// outlives its shuffle's removal.
//
// Small blocks: a reader may also take, with its hello, the small-block arena of its key's
// scope (worker/small_block_arenas.h), a file it maps read-only once; the small memory blocks
// it and its scope's other readers get are copied in, and found there next time without a
// round trip. A block leaves every arena as soon as it changes (BlockManager's block_changed).
//
// Pins: every region handed out stays pinned (never evicted, counted in the memory budget even
// once removed) until the reader sends release, its connection closes (a reader that dies
// releases everything), or pin_lifetime passes.
//
// Threads: owned by the worker's loop, which polls poll_fd() and calls Serve(); disk blocks
// are read on the storage thread, their replies sent when the completions run on the loop.
// Replies never wait: a reply the reader's socket has no room for waits in the
// session's outbox until it does, and a reader that stops reading is disconnected.
class LocalReadServer {
 public:
  static Result<std::unique_ptr<LocalReadServer>> Create(LocalReadServerOptions options,
                                                         BlockManager& blocks,
                                                         WorkerCounters& counters,
                                                         const Clock& clock);
  // Releases every pin and removes the socket file.
  ~LocalReadServer();
  LocalReadServer(const LocalReadServer&) = delete;
  LocalReadServer& operator=(const LocalReadServer&) = delete;

  // Readable (an epoll descriptor) while connections or requests wait.
  int poll_fd() const { return epoll_.get(); }
  const std::string& socket_path() const { return options_.socket_path; }

  // A single-use ticket that lets one connection on the socket act as `peer` (nullopt: keys
  // off).
  std::string IssueTicket(const std::optional<PeerIdentity>& peer);
  // Accepts connections and serves the requests that arrived; drops closed connections.
  void Serve();
  // Drops pins older than pin_lifetime and tickets past theirs, and keeps the small-block
  // arenas alive (SmallBlockArenas::KeepAlive). Called on every pass of the loop.
  void Expire();
  // When Expire() has work next; nullopt when nothing is pinned or issued.
  std::optional<TimePoint> NextDeadline() const;

  size_t readers() const { return sessions_.size(); }
  // Blocks held in the small-block arenas, and the arenas.
  size_t arena_blocks() const { return arenas_.blocks(); }
  size_t arenas() const { return arenas_.arenas(); }
  size_t pins() const { return pin_count_; }
  uint64_t pins_expired() const { return pins_expired_; }

 private:
  struct Pin {
    SharedBlock::Pin held;
    TimePoint granted;
  };
  // A reply the reader's socket had no room for yet, sent when it turns writable.
  struct Queued {
    std::vector<std::byte> bytes;
    OwnedFd fd;  // a duplicate of the region's descriptor, or none
  };
  struct Session {
    OwnedFd socket;
    std::deque<Queued> outbox;
    std::optional<PeerIdentity> peer;
    bool greeted = false;  // presented a valid ticket
    // The scope of the small-block arena the reader took, if it took one.
    std::optional<std::string> arena_scope;
    std::map<uint64_t, Pin> pins;
  };
  struct Ticket {
    std::optional<PeerIdentity> peer;
    TimePoint expires;
  };
  // Small blocks' bytes sent after a reply's message (LocalBlock.inTrailer), straight from the
  // chunks they are stored in, which it keeps alive until sent.
  struct Trailer {
    std::vector<ChunkPtr> chunks;
    uint64_t bytes = 0;
  };

  LocalReadServer(LocalReadServerOptions options, BlockManager& blocks, WorkerCounters& counters,
                  const Clock& clock, OwnedFd listener, OwnedFd epoll);
  void Accept();
  // Serves the packets queued on one connection; false when it must be closed.
  bool ServeSession(uint64_t session_id);
  Status ServePacket(uint64_t session_id, Session& session, const LocalPacket& packet);
  // `wants_arena`: the reader would take its scope's small-block arena.
  Status Hello(uint64_t session_id, Session& session, uint64_t request_id,
               std::span<const std::byte> ticket, bool wants_arena);
  // The reader's report of the gets it served from its arena (schema: arenaReads).
  void ArenaReads(const Session& session, capnp::List<capnp::Text>::Reader ids);
  // A whole memory block the session got inline: into its arena, if it has one and its scope
  // may hold the block (a tenant's arena holds only the tenant's own datasets' blocks).
  void OfferToArena(const Session& session, const BlockId& id, const BlockRead& read);
  // `mapped`: a pin the reader offers to read again (LocalRequest.mapped), 0 for none.
  // `trailer`: small blocks' bytes go in the reply's trailer (LocalRequest.trailer).
  Status Get(uint64_t session_id, Session& session, uint64_t request_id, const BlockId& id,
             uint64_t mapped, bool trailer);
  // The tenant rules (options_.tenants) for a read of `id` by the session's key.
  Status CheckTenant(const Session& session, const BlockId& id) const;
  // Small memory blocks inline, one reply for all (schema: getMany).
  void GetMany(uint64_t session_id, const Session& session, uint64_t request_id,
               capnp::List<capnp::Text>::Reader ids, bool trailer);
  // A page of a shuffle stream (schema: readShuffle), answered when the page is ready.
  void ReadShuffle(uint64_t session_id, const Session& session, uint64_t request_id,
                   proto::ReadShuffle::Reader read);
  void SendShufflePage(uint64_t session_id, uint64_t request_id, OpenedShufflePage opened);
  // One packet of a page: the pieces [range.first, range.second), their bytes `where`, `fd`
  // (the region or file) attached if >= 0; `more`: packets of the page follow. False when the
  // session is gone.
  bool SendShufflePart(uint64_t session_id, uint64_t request_id, const ShuffleStore::Page& page,
                       std::pair<size_t, size_t> range, proto::LocalShufflePage::PageBytes where,
                       int fd, bool more = false);
  // Sends a small block's bytes inline (in the trailer when `trailer`).
  void SendInline(uint64_t session_id, uint64_t request_id, Result<BlockRead> read, bool trailer);
  // Sends a shared block (pinning it) to the session, or releases it when the session is gone.
  void SendShared(uint64_t session_id, uint64_t request_id, Result<SharedBlock> shared);
  void SendError(uint64_t session_id, uint64_t request_id, const Status& status);
  // Sends `reply` (with `fd` attached, if >= 0), or queues it while the reader's socket is full
  // (a reader pipelining gets); closes the session when it holds more than kMaxQueuedReplies
  // unread or the socket failed. False when the session is gone.
  bool Send(uint64_t session_id, capnp::MessageBuilder& reply, int fd = -1,
            const Trailer* trailer = nullptr);
  // Sends what waits in the session's outbox; false when the socket failed.
  bool Flush(Session& session);
  void WatchWritable(uint64_t session_id, Session& session, bool writable);
  void Close(uint64_t session_id);
  void ReleasePin(const Pin& pin);

  const LocalReadServerOptions options_;
  BlockManager& blocks_;
  WorkerCounters& counters_;
  const Clock& clock_;
  const OwnedFd listener_;
  const OwnedFd epoll_;
  const uid_t own_uid_;

  std::unordered_map<uint64_t, Session> sessions_;  // by session id (epoll's data)
  uint64_t next_session_id_ = 1;                    // 0 is the listener
  std::unordered_map<std::string, Ticket> tickets_;
  uint64_t next_pin_id_ = 1;
  size_t pin_count_ = 0;
  uint64_t pins_expired_ = 0;
  SmallBlockArenas arenas_;
};

}  // namespace bm
