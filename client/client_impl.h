#pragma once

// Client's state and the calls behind its public methods. Internal: not installed, so the
// public header (blockmgr/client.h) stays free of ZeroMQ, Cap'n Proto and the client's caches.

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

#include "blockmgr/block_id.h"
#include "blockmgr/chunk.h"
#include "blockmgr/client.h"
#include "blockmgr/status.h"
#include "blockmgr/storage_level.h"
#include "blockmgr/tier.h"
#include "blockmgr/types.h"
#include "client/client_keys.h"
#include "client/local_reads.h"
#include "client/location_cache.h"
#include "client/master_client.h"
#include "client/multi_get.h"
#include "client/placement.h"
#include "common/security/curve_keys.h"
#include "transfer/range_reader.h"
#include "transfer/worker_channels.h"

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace bm {

class IncomingMessage;
class PieceSource;
class RpcChannel;

// What a Client is: every public call of Client forwards here (client/client_api.cc). It
// routes each call to the components that do the work (the worker channels, uploads, range
// reads, the multi-get, the location cache, placement) and handles fail-over between workers:
// another candidate for a put, another copy for a read.
//
// Owned by its Client; owns its components. Not thread-safe, as the Client is not.
class Client::Impl : private MultiGet::Reads {
 public:
  Impl(ClientOptions options, zmq::context_t& context);
  Impl(ClientOptions options, std::unique_ptr<zmq::context_t> context);
  ~Impl() override;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // The public calls, documented in blockmgr/client.h.
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
  Result<uint64_t> Remove(const std::vector<BlockId>& ids);
  Result<uint64_t> RemoveRdd(uint64_t rdd_id);
  Result<std::vector<std::byte>> Get(const BlockId& id) override;
  Result<uint64_t> GetTo(const BlockId& id, const ByteSink& sink);
  Result<uint64_t> GetTo(const BlockId& id, std::ostream& out);
  Result<BlockData> GetChunks(const BlockId& id);
  std::optional<BlockData> GetMapped(const BlockId& id);
  std::vector<Result<std::vector<std::byte>>> GetMany(const std::vector<BlockId>& ids);
  std::vector<Result<BlockData>> GetManyChunks(const std::vector<BlockId>& ids);
  Result<std::vector<BlockLocations>> Locations(const std::vector<BlockId>& ids) override;
  Result<std::vector<CopyCheck>> VerifyCopies(const std::vector<BlockLocations>& blocks);
  Result<std::vector<WorkerInfo>> Workers();
  Result<std::vector<LostBlockInfo>> LostBlocks() { return master_.LostBlocks(); }
  Result<std::vector<BlockLocations>> Blocks(std::optional<uint64_t> rdd_id);
  Status ForEachBlockPage(std::optional<uint64_t> rdd_id,
                          const std::function<Status(const std::vector<BlockLocations>&)>& visit,
                          uint32_t page_size = 10000);
  Result<std::vector<RddInfo>> Rdds();
  Status Decommission(const std::string& worker_id);
  Status PingMaster();
  std::vector<MasterInfo> Masters();
  // The master's requests that need nothing else of the client (tenants, shares, quotas).
  MasterClient& master() { return master_; }
  // The channels to workers, for the shuffle writers and readers (client/shuffle.cc).
  WorkerChannels& worker_channels() { return workers_; }
  // The connections to workers on this host, for the shuffle readers too.
  LocalReads& local_reads() { return local_reads_; }
  // Shuffle layouts a writer opened lately, by shuffle id, so the map tasks of one process ask
  // the master once (kept for worker_list_ttl, as the worker list is: a dropped worker's
  // partitions move).
  struct KeptLayout {
    std::shared_ptr<const ShuffleLayout> layout;
    std::chrono::steady_clock::time_point fetched;
  };
  std::map<uint64_t, KeptLayout>& shuffle_layouts() { return shuffle_layouts_; }
  const ClientOptions& options() const { return options_; }

  // MultiGet::Reads: Get and Locations above, and:
  bool IsLocalAddress(const std::string& address) const override;

 private:
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
  // The live workers for placement, and whether they are the kept list.
  struct PlacementList {
    std::vector<WorkerInfo> workers;
    bool kept = false;
  };

  Result<PutResult> PutFrom(const BlockId& id, PieceSource& source, StorageLevel level,
                            const PutOptions& options);
  // While AwaitsUnconfirmedWorkers (client/placement.h) says the put should wait for workers
  // to register with a new master, asks the master for `placement` again, backing off, for up
  // to ClientOptions::leader_wait; returns the list to place from. Fails only when the master
  // cannot be asked.
  Result<PlacementList> AwaitConfirmedWorkers(PlacementList placement, uint64_t size,
                                              StorageLevel level, uint32_t copies);
  // One placement attempt of PutFrom over `workers`.
  Result<PutResult> PutOnce(const BlockId& id, PieceSource& source, StorageLevel level,
                            const PutOptions& options, std::vector<WorkerInfo> workers);
  // The live workers for placement: the kept list when it is younger than `worker_list_ttl`
  // (and `fresh` is false), else the master's.
  Result<PlacementList> PlacementWorkers(bool fresh);
  uint64_t NewVersionToken();
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
  // What one ReadBlock remembers from pass to pass over its locations.
  struct BlockReadMemory {
    // Workers that did not answer: not waited for again when the master, which has not
    // noticed yet, lists them again.
    std::vector<std::string> unreachable;
    // Copies that failed their checksum on their worker (kDataLoss). Such a copy is never
    // served: the next is read instead, and the worker, which dropped the bad one, reports it
    // so the master restores the replication level. With no good copy left the read fails
    // with kDataLoss rather than "not found".
    int corrupt_copies = 0;
  };
  // How one pass over a block's locations ended: finished (read whole, or failed for good),
  // or another pass is due: over the master's locations (those remembered were stale), or
  // from the start because the block was replaced while it was read.
  struct ReadPassEnd {
    enum class Next { kFinished, kAskMaster, kRestart } next;
    Result<uint64_t> result = 0;  // kFinished's
  };
  // The locations to try, this host's workers first: `known` (consumed), else the cache's
  // (`from_cache` set), else the master's (remembered in the cache).
  Result<std::vector<BlockLocation>> LocationsToRead(
      const BlockId& id, std::optional<std::vector<BlockLocation>>& known, bool& from_cache);
  // One pass of ReadBlock: each location in turn until a copy is read whole.
  ReadPassEnd ReadPass(const BlockId& id, const std::vector<BlockLocation>& locations,
                       bool from_cache, const ByteSink& sink, const std::function<void()>& reset,
                       const std::function<void(uint64_t)>& expect_size, ReadReport* report,
                       BlockReadMemory& memory);
  // The whole block from a worker on this host through shared memory; nullopt when `location`
  // is not such a worker or the local path failed (then the caller reads over TCP).
  std::optional<Result<LocalBlockRead>> ReadLocally(const BlockLocation& location,
                                                    const BlockId& id);
  // Reads the whole block from one location into `sink`, checked against its digests: through
  // shared memory from a worker on this host, else over TCP.
  RangeReader::Outcome ReadFrom(const BlockLocation& location, const BlockId& id,
                                const ByteSink& sink);
  // What ReadCopy made of one location.
  struct CopyRead {
    RangeReader::Outcome outcome;
    // Bytes from this copy failed their digests on every try while the worker found its stored
    // copy intact each time: they went bad on the way (outcome.size is kUnavailable).
    bool corrupted_in_transit = false;
  };
  // ReadFrom, except that bytes failing their unit digests are not yet blamed on the copy: the
  // worker re-reads it (verifyBlock), and when it is intact there the copy is read again, up to
  // kMaxTransitRereads times (only from the start: without `reset`, a read that emitted bytes is
  // not repeated). A copy whose unit digests do not make the block digest is reported to its
  // worker and returned as it is; `digest_may_be_stale` leaves that case to the caller (the
  // digest came from the location cache).
  CopyRead ReadCopy(const BlockLocation& location, const BlockId& id, const ByteSink& sink,
                    const std::function<void()>& reset, bool digest_may_be_stale);
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

  // Constant after construction.
  const ClientOptions options_;
  std::unique_ptr<zmq::context_t> owned_context_;  // null when the context is borrowed
  zmq::context_t& context_;
  // This client's keypair and the master's public key (empty: plaintext), or why the key files
  // could not be read (then every call fails with it).
  const Result<ClientKeys> keys_;
  const std::vector<std::string> local_hosts_;
  const std::string holder_name_;
  // The leader as ZooKeeper names it (options_.zookeeper): null without, or why it could not
  // be started. Shared with the MasterClients this client makes (lease renewals).
  const Result<std::shared_ptr<const LeaderDirectory>> directory_;

  MasterClient master_;
  WorkerChannels workers_;
  LocalReads local_reads_;
  uint64_t put_counter_ = 0;  // rotates placement ties
  std::mt19937_64 upload_ids_;
  CacheCounters counters_;
  LocationCache location_cache_;
  KeptWorkerList placement_workers_;
  std::map<uint64_t, KeptLayout> shuffle_layouts_;
  MultiGet multi_get_;
};

}  // namespace bm
