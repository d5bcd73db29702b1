#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "blockmgr/status.h"
#include "blockmgr/tier.h"
#include "common/core/clock.h"
#include "common/net/peer_monitor.h"
#include "common/net/transport.h"
#include "common/security/connection_limit.h"
#include "worker/block_manager.h"
#include "worker/client_replies.h"
#include "worker/epoch_fence.h"
#include "worker/local_read_server.h"
#include "worker/master_link.h"
#include "worker/own_block_reads.h"
#include "worker/put_handler.h"
#include "worker/replicator.h"
#include "worker/shuffle_handler.h"
#include "worker/tenant_gate.h"
#include "worker/worker_status.h"

namespace bm {

struct WorkerServerOptions {
  // Where clients and the master connect: tcp://HOST:PORT; PORT may be "*" (any free port,
  // see WorkerServer::endpoint()).
  std::string listen_address;
  // The address the master hands out to clients. Empty: the bound endpoint. Must not be a
  // wildcard host.
  std::string advertise_address;
  // Empty: DefaultWorkerId() of the advertised address.
  std::string worker_id;
  // The master and how to talk to it. The server fills in worker_id and advertised_address.
  MasterLinkOptions master;
  // An upload with no piece for this long is aborted. The last resort: a client that gives up
  // sends abortPut, and a client whose connection closes loses its uploads at once.
  Duration upload_idle_timeout = std::chrono::seconds(60);
  // How long a committed put's reply waits for the master to acknowledge the block's report.
  Duration put_ack_timeout = std::chrono::seconds(2);
  // Uploads in progress at once, over all clients; more are refused as unavailable.
  size_t max_uploads = 4096;
  // Uploads in progress at once from one key (keys on), so one key cannot take them all.
  size_t max_uploads_per_key = 1024;
  // Connections one key may hold open at once (keys on; ConnectionLimit), 0 = no limit.
  size_t max_connections_per_key = 4096;
  // Borrowed, may be null: the ZAP handler the caller started, told which keys are at their
  // connection limit. Must outlive the server.
  ZapHandler* zap = nullptr;
  // CURVE (docs/security.md "Security"): this worker's secret certificate and the master's public
  // one. Both empty: plaintext. The certificate's worker id is the worker's id (worker_id, if
  // given, must match it). The ZAP handler deciding which keys get in is started by the
  // caller, on the same context, before Create().
  std::string key_file{};
  std::string master_key_file{};
  // Where the highest leader epoch seen is kept (worker/epoch_fence.h); empty: in memory.
  std::string epoch_file{};
  // How often the disk store checks for storage errors, recovers and reclaims space
  // (BlockManager::Maintain).
  Duration storage_maintenance_interval = std::chrono::seconds(1);
  // Failed disks the worker serves on with; when more have failed it stops, and exit_code()
  // says so. nullopt: serve while one disk works.
  std::optional<size_t> failed_disks_tolerated;
  // Same-host reads (docs/storage.md "Same-host reads"): the Unix socket readers on this host map
  // blocks through; empty: off. If it cannot be made, the worker serves over TCP only.
  std::string local_socket_path{};
  // How long a reader's pin lasts at most (LocalReadServerOptions::pin_lifetime).
  Duration local_pin_lifetime = std::chrono::minutes(10);
  // Ring bytes of each small-block arena of same-host reads (worker/small_block_arenas.h);
  // 0: none.
  uint64_t local_arena_bytes = 64ull << 20;
  // Memory for the shuffle partitions this worker holds (ShuffleStore::Limits).
  uint64_t shuffle_memory = uint64_t{256} << 20;
  // The disk directories shuffle partitions are written to (ShuffleFiles), and read back from
  // after a restart; empty: shuffle partitions live in memory only.
  std::vector<std::string> shuffle_dirs{};
  // A shuffle stream holding this much takes no more pieces; its partition continues on
  // another worker (ShuffleStore::Limits::split_bytes).
  uint64_t shuffle_split_size = uint64_t{256} << 20;
  // Test-only: serve corruptBlock, which flips a stored byte on purpose (PROTOCOL.md, "Fault
  // injection"). Off: the request is refused.
  bool enable_fault_injection = false;
  // Borrowed, may be null: an observer (the HTTP status service) whose queries the loop answers
  // on its own thread. Must outlive Run().
  WorkerStatusHook* status_hook = nullptr;
};

// The bm-worker server: serves clients and the master on a ROUTER socket (PROTOCOL.md,
// "Worker requests") and keeps the master informed through a MasterLink.
//
// Threads: the loop in Run() polls the ROUTER, the master link's DEALER, the block manager's
// completion fd and a wake-up fd, with a timeout that is the next timer (heartbeat,
// registration retry, idle-upload expiry, deferred put reply). It owns the sockets, the
// BlockManager's memory tier and every table here, so nothing is locked. It never waits on a
// disk: reads of disk blocks, disk uploads, removals and spills run on the block manager's
// storage thread, and the loop answers those requests when their completions come back (a
// put piece held back for room waits in waiting_pieces_, its arrival order kept). Puts are the
// PutHandler's, reply framing is read_replies.h's; the server routes requests to them, serves
// reads and the master's commands. Copies for the master (replicateBlock) run on the
// Replicator's thread, which reads the blocks through the loop (own_block_reads_, served when the
// wake-up fd turns readable); HTTP status queries are answered through status_hook. Sockets
// are created by Create() and then used only by the thread calling Run() (moving them to a new
// thread once, before Run(), is allowed by ZeroMQ).
//
// A committed put is answered once the master has acknowledged the report holding the block,
// or after put_ack_timeout (the report is still delivered later), so a client that saw its put
// return can find the block through the master.
//
// Stop() may be called from any thread or a signal handler. The server must outlive Run();
// destroy it (closing its sockets) before the ZeroMQ context.
class WorkerServer {
 public:
  // Binds the listen address. kUnavailable when the address cannot be bound, kInvalidArgument
  // for bad options.
  static Result<std::unique_ptr<WorkerServer>> Create(zmq::context_t& context,
                                                      WorkerServerOptions options,
                                                      std::unique_ptr<BlockManager> blocks,
                                                      const Clock& clock);
  ~WorkerServer();
  WorkerServer(const WorkerServer&) = delete;
  WorkerServer& operator=(const WorkerServer&) = delete;

  // The bound endpoint, e.g. "tcp://127.0.0.1:40123" for a listen address with port "*".
  const std::string& endpoint() const { return endpoint_; }
  const std::string& advertised_address() const { return advertised_address_; }
  const std::string& worker_id() const { return worker_id_; }

  // Serves until Stop(). Then aborts uploads in progress and answers deferred put replies.
  void Run();
  // Makes Run() return soon. Thread-safe and async-signal-safe.
  void Stop();
  // After Run(): 0, or kTooManyFailedDisks when it stopped because too many disks failed.
  int exit_code() const { return exit_code_; }
  static constexpr int kTooManyFailedDisks = 3;

 private:
  // What serving a request came to.
  enum class Served {
    kDone,      // answered, or its answer will be sent when its work completes
    kMustWait,  // a put piece held back until spills make room; nothing changed or answered
  };
  // Where a request comes from: the socket, or the queue of held-back put pieces (which only
  // its head may leave, so the pieces keep their order).
  enum class Arrival { kFromSocket, kHeldBack };
  struct RequestHeader {
    uint64_t id = 0;
    proto::Request::Which which{};
    uint64_t epoch = 0;  // of the master that sent a command (Request.epoch)
  };

  WorkerServer(zmq::context_t& context, WorkerServerOptions options,
               std::unique_ptr<BlockManager> blocks, const Clock& clock);
  Status Bind();

  // More disks have failed than tolerated: logs it, sets exit_code_; true to stop.
  bool TooManyFailedDisks();
  std::chrono::milliseconds PollTimeout(TimePoint now) const;
  void HandleClientMessages();
  void HandleClientMessage();
  // Serves one request and answers any failure.
  Served Serve(IncomingMessage& message, Arrival arrival);
  // Serves the held-back pieces, in arrival order, as far as room allows.
  void ServeWaitingPieces();
  // Serves one request; when it succeeds, the reply was sent (or will be, or was deferred).
  // On failure the caller sends the error reply.
  Result<Served> Dispatch(IncomingMessage& message, const RequestHeader& header, Arrival arrival);
  // Read serving: answered when the reads complete (at once for memory blocks).
  Status HandleGet(IncomingMessage& message, uint64_t id);
  Status HandleGetMany(IncomingMessage& message, uint64_t id);
  // A getBlocks request whose reads are in progress.
  struct GetManyBatch {
    zmq::message_t peer;
    uint64_t request_id = 0;
    std::vector<BlockId> blocks;
    std::vector<std::optional<BlockStatus>> statuses;  // from Find, nullopt: not stored here
    std::vector<std::optional<BlockRead>> reads;       // nullopt: not read, or the read failed
    size_t pending = 0;
  };
  void SendGetManyReply(const GetManyBatch& batch);
  Status HandleContains(IncomingMessage& message, uint64_t id);
  // Offers this host's readers the local-read socket, with a ticket for the asking key.
  Status HandleOpenLocalReads(IncomingMessage& message, uint64_t id);
  // Counts `blocks` whole-block reads by where their reader is (WorkerCounters).
  void CountBlockReads(const IncomingMessage& message, uint64_t blocks);
  Status HandleVerify(IncomingMessage& message, uint64_t id);
  // Test-only fault injection (options_.enable_fault_injection).
  Status HandleCorruptBlock(IncomingMessage& message, uint64_t id);
  // The master's commands.
  Status HandleRemove(IncomingMessage& message, uint64_t id);
  // Copies a block to other workers (answered when the copy is done).
  Status HandleReplicate(IncomingMessage& message, uint64_t id);
  // Answers the replicateBlock requests whose copies finished.
  void AnswerFinishedReplications();
  // The tenant rules for a client key's request, by its kind's entry in the table
  // (worker/worker_request_kinds.h; the gate is worker/tenant_gate.h): parked (the message is
  // taken) while the master is asked, or refused.
  Result<TenantGate::Admission> AdmitTenant(IncomingMessage& message, proto::Request::Which which);
  // Serves again the requests the gate parked whose answers came.
  void ResumeParked();
  // The master's datasetAccess.
  Status HandleDatasetAccess(IncomingMessage& message, uint64_t id);
  // Aborts the uploads of client connections that closed (a client killed mid-upload, or one
  // that gave up and reset its socket), releasing their claimed space at once, and drops their
  // held-back pieces.
  void AbortUploadsOfClosedConnections();

  // Constant after construction.
  zmq::context_t& context_;
  WorkerServerOptions options_;
  const Clock& clock_;
  std::string endpoint_;
  std::string advertised_address_;
  std::string worker_id_;
  CurveKeys keys_;    // empty with keys off
  int wake_fd_ = -1;  // eventfd written by Stop()

  std::atomic<bool> stop_{false};
  int exit_code_ = 0;

  // Owned by the thread in Run().
  GuaranteedShares shares_;  // before blocks_, whose memory tier asks it
  std::unique_ptr<BlockManager> blocks_;
  std::unique_ptr<zmq::socket_t> router_;
  WorkerCounters counters_;                 // for /metrics
  std::unique_ptr<ClientReplies> replies_;  // on router_
  // Reports router_'s closed connections; declared after router_ so it stops first.
  std::unique_ptr<PeerMonitor> peer_monitor_;
  ConnectionLimit connection_limit_{options_.max_connections_per_key, options_.zap};
  bool peer_monitor_unsettled_ = true;  // as ClientReplies::unsettled(), for its event socket
  std::unique_ptr<MasterLink> link_;
  // Refuses the commands of a deposed leader (set up by Bind()).
  EpochFence fence_ = *EpochFence::Open("");
  TimePoint next_storage_maintenance_{};
  std::unique_ptr<PutHandler> puts_;
  std::unique_ptr<ShuffleHandler> shuffles_;  // shuffle partitions and their requests
  std::unique_ptr<TenantGate> tenants_;       // after link_, which it borrows
  uint64_t registrations_seen_ = 0;           // link_->registrations() when tenants_ last knew
  // Put pieces held back until spills make room, in arrival order (see Serve).
  std::deque<IncomingMessage> waiting_pieces_;
  // The replicator's reads of this worker's blocks; before replicator_, which borrows it.
  std::unique_ptr<OwnBlockReads> own_block_reads_;
  std::unique_ptr<Replicator> replicator_;  // started by Run()
  // Same-host reads; null when off. Before nothing it borrows is destroyed (declared after
  // blocks_ and counters_).
  std::unique_ptr<LocalReadServer> local_read_server_;
  std::string host_id_;  // HostIdentity(), offered to readers
  struct PendingReplication {
    zmq::message_t peer;
    uint64_t request_id;
    BlockId block;
  };
  std::map<uint64_t, PendingReplication> replications_;  // by replicator ticket
  uint64_t next_ticket_ = 1;
};

}  // namespace bm
