#pragma once

// The client's side of same-host reads (docs/storage.md "Same-host reads";
// schema/local_reads.capnp): a block held by a worker on this host is received as a sealed shared
// region and mapped, instead of being copied through TCP. Internal to the client library.

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/chunk.h"
#include "blockmgr/status.h"
#include "blockmgr/storage_level.h"
#include "blockmgr/tier.h"
#include "client/mapped_blocks.h"
#include "common/core/clock.h"
#include "common/core/mutex.h"
#include "common/net/block_arena.h"
#include "common/net/local_socket.h"

namespace capnp {
class MessageBuilder;
}  // namespace capnp

namespace bm {

class WorkerChannels;

// A whole block read through the local socket: one chunk viewing the mapped region (or a
// small block's bytes, which travel inline), and what the worker said of it.
struct LocalBlockRead {
  BlockData data;
  Tier tier = Tier::kMemory;
  StorageLevel level = StorageLevel::kMemoryOnly;
  uint64_t version = 0;
  uint64_t generation = 0;
  std::vector<uint64_t> unit_digests;
  bool mapped = false;  // false: the bytes came inline
};

// One connection to one worker's local-read socket. Get() is for the client's thread; the
// regions it returns may be dropped on any thread, and each tells the worker (release) when
// it is unmapped. Every region keeps the connection open (shared ownership), because the
// worker releases a closed connection's pins: the pages stay counted for as long as they are
// mapped, even by a region that outlives its Client.
class LocalReadConnection : public std::enable_shared_from_this<LocalReadConnection> {
 public:
  // Connects and presents `ticket` (from openLocalReads). kPermissionDenied when the worker
  // refuses this process (its uid) or the ticket; kUnavailable when the socket is not there.
  // Idle mappings are kept within `idle` and dropped by `reaper` (mapped_blocks.h). Each
  // mapped region keeps the connection open, so whoever opens one calls mapped()->Close() when
  // done with it (LocalReads does), or its idle mappings and the connection are never freed.
  // `arena`: take the worker's small-block arena (LocalReply.arenaBytes), through which small
  // memory blocks are then read without asking the worker.
  static Result<std::shared_ptr<LocalReadConnection>> Open(
      const std::string& path, const std::string& ticket, std::chrono::milliseconds timeout,
      IdleMappingLimits idle = {}, std::weak_ptr<IdleMappingReaper> reaper = {},
      bool arena = false);

  // The whole block: from the worker's small-block arena when it holds it, else asked for. The
  // worker's errors come back as they are (kNotFound: not stored there).
  // kUnavailable when the connection failed (broken() from then on). `extra`: how much longer
  // than the timeout to wait (a big block the worker first copies into a region).
  Result<LocalBlockRead> Get(const BlockId& id, std::chrono::milliseconds extra = {});
  // Several whole blocks, their requests all sent before the first reply is read (pipelined):
  // one result per id, in order.
  std::vector<Result<LocalBlockRead>> GetMany(const std::vector<BlockId>& ids);
  // Small blocks, those in the arena copied from it and the rest in one request and one reply
  // (getMany): each id's block with its bytes inline, or why it was not served this way
  // (kNotFound; kUnavailable: read it alone).
  std::vector<Result<LocalBlockRead>> GetSmall(const std::vector<BlockId>& ids);
  // Sends `request` (a LocalRequest; this sets its id, which it returns) for AwaitReply to
  // take the reply: one that comes while a get waits is kept for it, so a caller may ask ahead
  // and read blocks before it awaits. The client's thread's, as Get is.
  Result<uint64_t> Ask(capnp::MessageBuilder& request);
  // The reply to Ask's request `id` (called again for each further reply a request has, before
  // any other request is awaited). kUnavailable when the connection failed (broken() then).
  Result<LocalPacket> AwaitReply(uint64_t id);
  bool broken() const { return broken_; }
  bool has_arena() const { return arena_ != nullptr; }
  // The regions this connection keeps mapped (for the reaper, and to close them).
  const std::shared_ptr<MappedBlocks>& mapped() const { return mapped_; }

 private:
  // A get waiting for its reply: the block, and the mapping of it offered for reuse.
  struct Pending {
    BlockId id;
    MappingOffer offer;
  };
  LocalReadConnection(OwnedFd socket, std::chrono::milliseconds timeout, pid_t worker_pid,
                      std::shared_ptr<MappedBlocks> mapped)
      : socket_(std::move(socket)),
        timeout_(timeout),
        worker_pid_(worker_pid),
        mapped_(std::move(mapped)) {}
  // Sends a get of `id` (offering the mapping of it this connection holds, if any) under a
  // new request id, which it returns.
  Result<uint64_t> SendGet(const BlockId& id, std::map<uint64_t, Pending>& pending);
  // The next packet, within the timeout; kUnavailable sooner when the worker process is seen
  // halted (stopped or gone), as a TCP heartbeat would tell.
  Result<LocalPacket> Receive(std::chrono::milliseconds extra = {});
  // `wait`: for room on the socket; without it a request the socket cannot take now is not
  // sent (kOutOfSpace).
  Status SendRequest(capnp::MessageBuilder& message, bool wait = true);
  // The id a reply names (0 when malformed).
  static uint64_t ReplyId(const LocalPacket& packet);
  // Receives the reply to one of the `pending` requests (by id; replies may come in any
  // order) and sets `answered` to its id; 0 when none came (then broken()).
  Result<LocalBlockRead> ReceiveBlock(std::map<uint64_t, Pending>& pending, uint64_t* answered,
                                      std::chrono::milliseconds extra = {});
  void Release(uint64_t pin);
  // GetSmall of blocks not in the arena: one getMany request.
  std::vector<Result<LocalBlockRead>> AskSmall(const std::vector<BlockId>& ids);
  // `id` from the arena, when there is one and it holds the block. Each such read is reported
  // to the worker (ReportArenaReads), so it counts for the block's recency there.
  std::optional<LocalBlockRead> FromArena(const BlockId& id);
  // Sends the arena reads not yet reported (arenaReads), every kArenaReadsPerReport of them, or
  // at the first read a second after the oldest: one packet, not answered.
  void ReportArenaReads();

  const OwnedFd socket_;
  const std::chrono::milliseconds timeout_;
  const pid_t worker_pid_;  // 0: not visible from here
  const std::shared_ptr<MappedBlocks> mapped_;
  // Set by Open, then only read (Find is thread-safe).
  std::unique_ptr<BlockArenaReader> arena_;
  // The client's thread's: arena reads not reported yet, and when the first of them was.
  std::vector<std::string> arena_reads_;
  std::chrono::steady_clock::time_point arena_reads_since_{};
  // Sends come from the client's thread (requests) and from any thread (releases).
  Mutex send_mutex_;
  // The client's thread's:
  uint64_t next_id_ = 1;
  bool broken_ = false;
  std::set<uint64_t> asked_;  // Ask's requests not yet awaited
  // Their replies (a request may have several) that came while a get waited, in order.
  std::map<uint64_t, std::deque<LocalPacket>> arrived_;
};

// The connections of one Client to the workers on its host, found by asking each worker it
// reads from once (openLocalReads: the worker's host identity, socket and a ticket) and
// comparing the host identity with its own (common/net/host_identity.h). Not thread-safe: the
// Client's.
class LocalReads {
 public:
  // `arenas`: connections take their workers' small-block arenas (ClientOptions::local_arena).
  LocalReads(bool enabled, WorkerChannels& workers, std::chrono::milliseconds timeout,
             IdleMappingLimits idle_limits = {}, bool arenas = false);
  // Drops the idle mappings (regions callers still hold stay mapped until they let go).
  ~LocalReads();
  LocalReads(const LocalReads&) = delete;
  LocalReads& operator=(const LocalReads&) = delete;

  // The connection to the worker at `address` when it is on this host and serves local reads;
  // null otherwise (remembered: a remote worker is asked once, a failed connection is tried
  // again after a while). kUnavailable when the worker did not answer the question at all.
  Result<std::shared_ptr<LocalReadConnection>> For(const std::string& address);
  // The client removed blocks: every connection drops its mappings of them (MappedBlocks).
  void ForgetBlocks(const std::function<bool(const BlockId&)>& removed);
  // The client puts `id` anew: every connection drops its mapping of the old version.
  void ForgetBlock(const BlockId& id);
  // Forgets a connection that failed, so the next For() makes a new one.
  void Failed(const std::string& address);
  bool enabled() const { return enabled_; }

 private:
  struct Worker {
    std::shared_ptr<LocalReadConnection> connection;
    bool elsewhere = false;   // on another host, or local reads are off there
    TimePoint retry_after{};  // after a failure
    bool offered = false;     // the last Connect got the worker's answer over TCP
  };
  // Asks the worker at `address` for its offer and connects.
  Result<std::shared_ptr<LocalReadConnection>> Connect(const std::string& address, Worker& worker);
  // Lets go of a connection and its idle mappings.
  static void Drop(std::shared_ptr<LocalReadConnection>& connection);

  const bool enabled_;
  WorkerChannels& workers_;
  const std::chrono::milliseconds timeout_;
  const IdleMappingLimits idle_limits_;
  const bool arenas_;
  const std::string host_id_;
  std::shared_ptr<IdleMappingReaper> reaper_;  // made with the first connection
  std::unordered_map<std::string, Worker> by_address_;
};

}  // namespace bm
