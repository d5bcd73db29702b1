#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <zmq.hpp>

#include "blockmgr/status.h"
#include "common/core/clock.h"
#include "common/security/curve_keys.h"
#include "master/leadership.h"

namespace bm {

class MasterStatusHook;
class ZapHandler;

struct MasterOptions {
  // Where clients and workers reach the master, e.g. "tcp://0.0.0.0:7077". A "*" port
  // ("tcp://127.0.0.1:*") binds a free one; endpoint() then tells which.
  std::string listen;
  // A worker with no heartbeat or block report for this long is dropped with its locations.
  Duration heartbeat_timeout = std::chrono::seconds(10);
  // How long a removeBlocks / removeRdd waits for the workers before replying with what was
  // confirmed.
  Duration remove_timeout = std::chrono::seconds(5);
  // Where the master journals its metadata (master/journal.h), created if missing; empty = no
  // journal. On start the master reloads it: workers come back unconfirmed, with their
  // locations, until they register again.
  std::string state_dir{};
  // CURVE (docs/security.md "Security"): the master's keypair. Empty: plaintext. The ZAP handler
  // that decides which keys get in is started by the caller, on the same context, before Create().
  CurveKeys keys{};
  // Borrowed, may be null: the ZAP handler of `keys`, which asks the master's connection
  // limit (HandshakeConnectionLimit) about every handshake. Must outlive the server.
  ZapHandler* zap = nullptr;
  // Limits per key (keys on; docs/security.md "Security"), 0 = none. Connections one key may hold
  // open at once, counted from their handshake ...
  size_t max_connections_per_key = 4096;
  // ... and registrations one key may make within a minute (a worker registers once when it
  // starts and once after each master restart or drop).
  size_t max_registrations_per_key = 60;
  // Borrowed, may be null: an observer (the HTTP status service) whose queries the loop answers
  // on its own thread. Must outlive Run().
  MasterStatusHook* status_hook = nullptr;
  // Standby masters (PROTOCOL.md, "Standby masters"). Borrowed, may be null: the election this
  // master runs in. Null: the master leads alone, as it always has. Otherwise it starts as a
  // standby that follows the leader's journal into its own (state_dir is then required), and
  // leads once `leadership` says so; Wake() must be called whenever the election changes.
  Leadership* leadership = nullptr;
  // The address clients and workers reach this master at (published when it leads, sent to
  // workers when elected). Empty: the bound endpoint.
  std::string advertised_address{};
  // This master's name among the masters (in the election, and to the leader as a standby).
  std::string master_id{};
  // The leader's journal feed: how long a silent standby holds acknowledgements back.
  Duration standby_timeout = std::chrono::milliseconds(1000);
  // A standby too far behind gets the journal in pages of this many batches of about
  // `snapshot_batch_bytes` each (the loop reads one page per fetch, so this bounds how long
  // that takes).
  size_t snapshot_page_batches = 16;
  size_t snapshot_batch_bytes = 2 << 20;
  // How many blocks whose last copy was lost the master remembers (PROTOCOL.md, "Lost
  // blocks"); beyond it the oldest records are forgotten first. 0 = none.
  size_t lost_blocks_kept = 100000;
  // A shuffle no client registered, read or committed to for this long is removed
  // (PROTOCOL.md, "Shuffles").
  Duration shuffle_ttl = std::chrono::hours(24);
};

// bm-master: serves the master requests of schema/PROTOCOL.md on a ROUTER socket and keeps the
// block index and the worker registry.
//
// Threads: Create() binds on the calling thread; Run() then owns every socket and all state on
// whichever one thread calls it, until Stop(). Stop() is thread-safe and may be called any
// number of times, before or during Run(). Destroy the server after Run() has returned, and
// before the ZeroMQ context.
//
// In-process use (tests):
//   BM_ASSIGN_OR_RETURN(auto server, MasterServer::Create(context, {.listen = "tcp://127.0.0.1:*"},
//                                                      clock));
//   std::thread thread([&] { server->Run(); });
//   RpcChannel channel(context, server->endpoint(), 2s);  ...
//   server->Stop();
//   thread.join();
class MasterServer {
 public:
  // Opens and loads the journal (options.state_dir) and binds options.listen. kUnavailable
  // when the address cannot be bound (in use, not local) or another process holds the journal,
  // kInvalidArgument when the address is malformed or an option is out of range, kInternal when
  // the journal is corrupt. `clock` is borrowed and must outlive the server.
  static Result<std::unique_ptr<MasterServer>> Create(zmq::context_t& context,
                                                      MasterOptions options, const Clock& clock);
  ~MasterServer();
  MasterServer(const MasterServer&) = delete;
  MasterServer& operator=(const MasterServer&) = delete;

  // The bound address with its actual port, e.g. "tcp://127.0.0.1:41234".
  const std::string& endpoint() const { return endpoint_; }

  // Serves until Stop(). Requests still waiting for workers then get an `unavailable` error.
  void Run();
  // Makes Run() return soon. Thread-safe.
  void Stop();
  // Makes Run() look at the election again soon. Thread-safe; cheap (the election's observer).
  void Wake();
  // After Run() returned: whether it did because this master lost the lead (options.leadership
  // no longer names it). Its state is then out of date: the process starts over as a standby.
  bool demoted() const;

 private:
  class Loop;

  MasterServer(zmq::context_t& context, std::string endpoint, std::string control_address,
               std::unique_ptr<Loop> loop);

  zmq::context_t& context_;
  const std::string endpoint_;
  const std::string control_address_;  // inproc address Stop() pokes to wake Run() up
  std::atomic<bool> stop_requested_{false};
  std::unique_ptr<Loop> loop_;  // the sockets and state Run() owns
};

}  // namespace bm
