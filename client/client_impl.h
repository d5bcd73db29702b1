#pragma once

// Client's state and the calls behind its public methods. Internal: not installed, so the
// public header (client/client.h) stays free of ZeroMQ, Cap'n Proto and the client's caches.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/location_cache.h"
#include "client/types.h"
#include "common/block_id.h"
#include "common/chunk.h"
#include "common/curve_keys.h"
#include "common/status.h"
#include "common/storage_level.h"
#include "common/tier.h"

namespace capnp {
class MallocMessageBuilder;
}
namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace bm {

class IncomingMessage;
class RpcChannel;

// What a Client is: every public call of Client forwards here (client/client_api.cc). Owned by
// its Client; not thread-safe, as the Client is not.
class Client::Impl {
 public:
  Impl(ClientOptions options, zmq::context_t& context);
  Impl(ClientOptions options, std::unique_ptr<zmq::context_t> context);
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // The public calls, documented in client/client.h.
  Result<PutResult> Put(const BlockId& id, std::span<const std::byte> data, StorageLevel level,
                        const PutOptions& options);
  Result<PutResult> PutChunks(const BlockId& id, const BlockData& data, StorageLevel level,
                              const PutOptions& options);
  Result<PutResult> PutStream(const BlockId& id, std::istream& in, uint64_t size,
                              StorageLevel level, const PutOptions& options);
  Result<PutResult> PutStream(const BlockId& id, ByteSource source, uint64_t size,
                              StorageLevel level, const PutOptions& options);
  Result<std::vector<std::byte>> GetOrCompute(const BlockId& id, StorageLevel level,
                                              const ComputeFn& compute);
  Status RegisterRdd(uint64_t rdd_id, const std::string& name, StorageLevel level,
                     uint64_t total_partitions);
  const CacheCounters& counters() const { return counters_; }
  CacheCounters TakeCounters();
  bool IsLocalAddress(const std::string& address) const;
  Result<uint32_t> CopyBlock(const BlockId& id, const std::string& source_address,
                             const std::vector<WorkerInfo>& targets, StorageLevel level);
  Result<uint64_t> Remove(const std::vector<BlockId>& ids);
  Result<uint64_t> RemoveRdd(uint64_t rdd_id);
  Result<std::vector<std::byte>> Get(const BlockId& id);
  Result<uint64_t> GetTo(const BlockId& id, const ByteSink& sink);
  Result<uint64_t> GetTo(const BlockId& id, std::ostream& out);
  std::vector<Result<std::vector<std::byte>>> GetMany(const std::vector<BlockId>& ids);
  std::vector<Result<BlockData>> GetManyChunks(const std::vector<BlockId>& ids);
  Result<std::vector<BlockLocations>> Locations(const std::vector<BlockId>& ids);
  Result<std::vector<CopyCheck>> VerifyCopies(const std::vector<BlockLocations>& blocks);
  // Asks the worker at `location` to re-read its copy of `id` (PROTOCOL.md, verifyBlock).
  Result<CopyCheck> VerifyCopy(const BlockLocation& location, const BlockId& id, bool reported_bad);
  Result<std::vector<WorkerInfo>> Workers();
  void TrustWorkerKey(const std::string& address, const std::string& public_key);
  Result<std::vector<BlockLocations>> Blocks(std::optional<uint64_t> rdd_id);
  Status ForEachBlockPage(std::optional<uint64_t> rdd_id,
                          const std::function<Status(const std::vector<BlockLocations>&)>& visit,
                          uint32_t page_size = 10000);
  Result<std::vector<RddInfo>> Rdds();
  Status Decommission(const std::string& worker_id);
  Status PingMaster();

 private:
  class PieceSource;
  // How far a read from one location got before it stopped.
  struct ReadProgress {
    bool emitted = false;      // the sink received at least one byte
    bool sink_failed = false;  // the error came from the sink, not from the worker
    bool digest_mismatch = false;  // the worker's bytes did not match their digests
    // The unit digests the worker sent, by unit (0 = none sent); all of them after a whole
    // read of a block stored with digests.
    std::vector<uint64_t> unit_digests;
    void RecordUnitDigests(uint64_t offset, uint64_t total, const std::vector<uint64_t>& units);
    // BlockDigestOf the units recorded, when every unit of the block was; 0 otherwise.
    uint64_t BlockDigest(uint64_t total) const;
  };
  // Where a successful read came from, and which workers failed to serve it before.
  struct ReadReport {
    bool local = false;
    std::vector<std::string> failed_workers;
  };
  // The master's answer to acquireCompute.
  struct ComputeTicket {
    enum class Kind { kCached, kGranted, kBusy };
    Kind kind = Kind::kBusy;
    std::vector<BlockLocation> locations;  // kCached
    uint64_t token = 0;                    // kGranted
  };

  Result<PutResult> PutFrom(const BlockId& id, PieceSource& source, StorageLevel level,
                            const PutOptions& options);
  // One placement attempt of PutFrom over `workers`.
  Result<PutResult> PutOnce(const BlockId& id, PieceSource& source, StorageLevel level,
                            const PutOptions& options, std::vector<WorkerInfo> workers);
  // The live workers for placement: the list kept from a recent call when it is younger than
  // `worker_list_ttl` (and `fresh` is false), else the master's. `from_cache` says which.
  Result<std::vector<WorkerInfo>> PlacementWorkers(bool fresh, bool* from_cache);
  // Counts a stored copy into the kept worker list, so the next placements see it.
  void CountPlacedCopy(const std::string& worker_id, Tier tier, uint64_t size);
  // The version an upload stores (PutBlock.version / replica in schema/messages.capnp).
  struct UploadVersion {
    uint64_t token = 0;
    bool replica = false;  // a copy of an existing version, not a new put
    uint64_t lease = 0;    // PutOptions::compute_lease
  };
  uint64_t NewVersionToken();
  // Streams the block to every target, piece by piece; one result per target, in order.
  std::vector<Result<PutResult>> Upload(const std::vector<const WorkerInfo*>& targets,
                                        const BlockId& id, PieceSource& source,
                                        StorageLevel level, const UploadVersion& version);
  // Reads the block from its locations into `sink`: `known` when given (the master's answer
  // of a moment ago), else those the master lists; local workers first. `reset` (may be empty)
  // discards what the sink received so the read can start over; without it only a read that
  // has not emitted a byte yet can start over.
  // `expect_size` (may be empty) hears each location's block size before it is read.
  // `report` (may be null) hears where the block came from and which workers failed.
  Result<uint64_t> ReadBlock(const BlockId& id, const ByteSink& sink,
                             const std::function<void()>& reset,
                             const std::function<void(uint64_t)>& expect_size = {},
                             std::optional<std::vector<BlockLocation>> known = std::nullopt,
                             ReadReport* report = nullptr);
  // Get(), from `known` locations, reporting as ReadBlock does.
  Result<std::vector<std::byte>> ReadWhole(const BlockId& id, std::vector<BlockLocation> known,
                                           ReadReport& report);

  // ---- get-or-compute (client/get_or_compute.cc) ----
  Result<ComputeTicket> AcquireCompute(const BlockId& id,
                                       const std::vector<std::string>& failed_workers,
                                       std::chrono::milliseconds wait);
  Status ReleaseCompute(const BlockId& id, uint64_t token);
  // Runs `compute` under the lease `token`, stores the result unless the lease was lost to
  // another client meanwhile, and releases the lease.
  Result<std::vector<std::byte>> ComputeAndStore(const BlockId& id, StorageLevel level,
                                                 const ComputeFn& compute, uint64_t token);
  Result<uint64_t> ReadFrom(const BlockLocation& location, const BlockId& id, const ByteSink& sink,
                            ReadProgress& progress);
  // `total` when the unit digests of a whole read (`progress`) make the block digest the master
  // keeps for the copy's block (either unknown passes); kDataLoss otherwise.
  static Result<uint64_t> CheckBlockDigest(const BlockLocation& location, const std::string& block,
                                           uint64_t total, ReadProgress& progress);
  // A getBlocks request of GetMany in flight: to which worker, for which of its ids.
  struct PendingBatch {
    std::string address;
    std::vector<size_t> indexes;  // into GetMany's ids
  };
  // Sends GetMany's reads: the ids of each worker, in getBlocks batches, without waiting for
  // any reply; adds what was sent to `in_flight`, and to `retry` the ids it could not send.
  void SendBatches(const std::map<std::string, std::vector<size_t>>& by_worker,
                   const std::vector<BlockId>& ids, const std::vector<uint64_t>& sizes,
                   std::map<uint64_t, PendingBatch>& in_flight, std::vector<size_t>& retry);
  // Takes the replies of `in_flight` as they come, up to the request timeout: fills `out[i]`
  // or adds i to `retry`.
  void AwaitBatches(const std::vector<BlockId>& ids, std::map<uint64_t, PendingBatch>& in_flight,
                    std::vector<Result<BlockData>>& out, std::vector<size_t>& retry);
  // How many of GetMany's ids, from indexes[start], one getBlocks asks for (by their sizes).
  static size_t BatchLength(const std::vector<size_t>& indexes, size_t start,
                            const std::vector<uint64_t>& sizes);
  // Takes one getBlocks reply into `out` / `retry` and off `in_flight` (stale ones are
  // dropped).
  void TakeBatchReply(IncomingMessage& message, const std::vector<BlockId>& ids,
                      std::map<uint64_t, PendingBatch>& in_flight,
                      std::vector<Result<BlockData>>& out, std::vector<size_t>& retry);
  // The channel in `slot`, connected to `address` on first use; kInvalidArgument for an
  // address ZeroMQ cannot connect to (so a bad address fails a call instead of throwing).
  Result<RpcChannel*> Connect(std::unique_ptr<RpcChannel>& slot, const std::string& address,
                              const std::string& server_key);
  // The public key the master vouches for at `address` (asking it when unknown); empty with
  // keys off. kPermissionDenied when the master does not list the worker.
  Result<std::string> WorkerKey(const std::string& address);
  Result<RpcChannel*> WorkerChannel(const std::string& address);
  // Sends `request` to the master with `extra` added to the timeout for this call.
  Result<IncomingMessage> CallMaster(capnp::MallocMessageBuilder& request,
                                     std::chrono::milliseconds extra = {});
  // CallMaster for requests whose answer is a bare `ok`.
  Status CallMasterForOk(capnp::MallocMessageBuilder& request);

  const ClientOptions options_;
  std::unique_ptr<zmq::context_t> owned_context_;  // null when the context is borrowed
  zmq::context_t& context_;
  // With keys: this client's keypair and the master's public key (all empty: plaintext), or
  // why the key files could not be read (then every call fails with it).
  CurveKeys keys_;
  std::string master_key_;
  Status keys_status_;
  std::map<std::string, std::string> worker_keys_;              // by address, from the master
  std::unique_ptr<RpcChannel> master_;                          // connected on first use
  std::map<std::string, std::unique_ptr<RpcChannel>> workers_;  // by address
  // GetMany's DEALERs, by worker address: kept apart from `workers_` so replies to its
  // batches never meet RpcChannel's one-call-at-a-time matching.
  std::map<std::string, std::unique_ptr<zmq::socket_t>> pipelines_;
  uint64_t next_pipelined_id_ = 1;
  uint64_t put_counter_ = 0;  // rotates placement ties
  std::mt19937_64 upload_ids_;
  std::vector<std::string> local_hosts_;
  std::string holder_name_;
  CacheCounters counters_;
  LocationCache location_cache_;
  // The master's worker list as PlacementWorkers() last fetched it (empty: none kept).
  std::vector<WorkerInfo> placement_workers_;
  std::chrono::steady_clock::time_point placement_workers_time_{};
};

}  // namespace bm
