#pragma once

// The C++ API computations use to put, get, locate and remove blocks (bmctl is built on it).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/chunk.h"
#include "blockmgr/shuffle.h"
#include "blockmgr/status.h"
#include "blockmgr/storage_level.h"
#include "blockmgr/types.h"

namespace zmq {
class context_t;
}

namespace bm {

struct ClientOptions {
  // tcp://HOST:PORT of bm-master, or of several (comma-separated) when standby masters run:
  // calls go to the leader, follow it when it changes, and are retried there (README
  // "Standby masters").
  std::string master_address;
  // How long to wait for each reply. Calls that the server itself bounds get that bound on
  // top: the last piece of a put (the worker waits up to 2 s for the master) and removals (the
  // master waits up to 5 s for the workers). Kept second: callers write
  // ClientOptions{address, timeout}.
  std::chrono::milliseconds request_timeout{5000};
  // HOST:PORT[,HOST:PORT...][/CHROOT] of the ZooKeeper the masters are elected through
  // (bm-master --zookeeper): calls go to the leader it names, and follow it as it changes.
  // Either this or master_address is needed; with both, the addresses are tried too. The
  // client keeps one ZooKeeper session (a thread of its own) while it lives.
  std::string zookeeper{};
  // With several masters or ZooKeeper: how long one call may wait for a leader (while the
  // masters fail over) before failing with kUnavailable.
  std::chrono::milliseconds leader_wait{10000};

  // Hosts that count as this machine's when choosing a worker "on the same host" (reads try
  // such workers first; hits from them count as local). A worker is local when the host of its
  // address is one of these. Empty: detected, as the loopback names, this host's name and the
  // addresses of its network interfaces.
  std::vector<std::string> local_hosts{};

  // Get-or-compute: how long this client's lease on a block it computes lasts without renewal.
  // It is renewed every third of that while the compute runs, so this bounds how long a
  // client that died while computing keeps the others waiting.
  std::chrono::milliseconds compute_lease{5000};
  // Get-or-compute: how long the master holds one request of a client waiting for another's
  // compute before answering "still busy" (the client then asks again).
  std::chrono::milliseconds compute_wait{2000};
  // Get-or-compute: how long one call may wait for the block while other clients compute it
  // (or while the master cannot be reached) before failing with kUnavailable. 0: no bound. A
  // compute this client runs itself is not interrupted.
  std::chrono::milliseconds get_or_compute_deadline{0};
  // Names this client in leases (logs, "busy" answers). Empty: "<hostname>:<pid>".
  std::string holder_name{};

  // How many blocks' locations this client remembers (client/location_cache.h), so a read of a
  // block it stored or looked up before goes straight to a worker: one round trip instead of
  // two. A worker that no longer holds the block makes the client ask the master again. 0:
  // every read asks the master first.
  size_t location_cache_entries = 65536;
  // How long puts reuse the master's list of live workers for placement instead of asking for
  // it on every put (a round trip). The client counts its own puts into the list's free
  // memory and disk, and asks again at once when a worker it chose refused or failed. 0: ask
  // for every put.
  std::chrono::milliseconds worker_list_ttl{1000};

  // CURVE keys (docs/security.md "Security"): this client's secret certificate (NAME.key_secret)
  // and the master's public one (MASTER.key). Both empty: plaintext, for a cluster run with
  // --insecure. Workers' keys come from the master, which vouches for them.
  std::string key_file{};
  std::string master_key_file{};

  // Same-host reads (docs/storage.md "Same-host reads"): a block held by a worker on this host is
  // mapped from shared memory instead of copied through TCP. The first read from each worker
  // asks it once for its host identity and local socket; workers elsewhere (or with local
  // reads off) are read over TCP as before, and so is any block the local path cannot serve.
  bool local_reads = true;
  // A region mapped for a same-host read stays mapped (and pinned on the worker) for this long
  // after the last caller lets go, within this many bytes per worker, so that reading the block
  // again costs one round trip instead of a new mapping (HDFS short-circuit readers keep their
  // mappings the same way). 0 bytes: unmapped as soon as the last caller lets go.
  uint64_t idle_mapping_bytes = 256ull << 20;
  std::chrono::milliseconds idle_mapping_lifetime{10'000};
  // With same-host reads: take each local worker's small-block arena, a shared file mapped
  // read-only in which the worker keeps copies of small memory blocks (up to 64 KiB) that
  // readers of this key's tenant got before. Such a block is then copied out of it, checked
  // against its digest, with no round trip to the worker. false: every get asks the worker.
  bool local_arena = true;
};

// Computes a block's bytes when no worker has it (see Client::GetOrCompute).
using ComputeFn = std::function<Result<std::vector<std::byte>>()>;

// Fills `out` with the next bytes of an upload and returns how many it wrote (0 < n <=
// out.size()); returning 0 before the announced size was delivered fails the put.
using ByteSource = std::function<Result<size_t>(std::span<std::byte> out)>;
// Hands out the next piece of an upload's bytes as a shared immutable chunk, which is sent as
// it is (no copy); null when there are no more.
using ChunkSource = std::function<Result<ChunkPtr>()>;
// Receives a block's bytes in order, a range at a time. An error stops the read and is
// returned by the call.
using ByteSink = std::function<Status(std::span<const std::byte> bytes)>;

// A connection to a blockmgr cluster: a channel to the master and a cache of channels to the
// workers it has talked to. Every expected failure is returned as a Status, never thrown:
//   kNotFound     the block / worker / RDD does not exist
//   kUnavailable  the master or every worker that could serve the call did not answer in time
//   kOutOfSpace   no worker has room for the block
//   kAborted      a block kept being replaced while it was read
//   kInvalidArgument  the call itself was wrong (e.g. a source shorter than its size)
// Not thread-safe: use one Client per thread. Owns its ZeroMQ context unless one is lent to it,
// which must then outlive the Client.
class Client {
 public:
  explicit Client(ClientOptions options);
  Client(ClientOptions options, zmq::context_t& context);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // ---- writes ----

  // Stores `data` as block `id` at `level`, replacing any block of that id on the chosen
  // worker. The block is streamed in pieces of 4 MiB, up to 4 in flight per worker; it returns
  // once the worker has stored it and reported it to the master. The bytes are sent from
  // `data` itself, not copied (over tcp:// and ipc://): `data` must stay unchanged until the
  // call returns, which it does only once ZeroMQ has let go of every frame pointing into it.
  //
  // Placement: with `options.worker_id`, on that worker (kNotFound "no live worker named X" if
  // the master does not list it). Otherwise the client asks the master for the live workers and
  // tries them in the order ChooseWorkers() (client/placement.h) gives: a worker on this host
  // (IsLocalAddress) first when it has room for the block (free memory for memory levels, disk
  // for DISK_ONLY), as Spark caches into the executor's own BlockManager; then memory levels
  // on the worker with the most free memory that fits the block; DISK_ONLY, or when no worker
  // has the free memory, on the worker with the least disk used that has room; ties rotate
  // from put to put. `options.prefer_local = false` drops the first rule, for the old
  // spread-by-free-memory order (a loader filling the whole cluster from one machine). A
  // candidate that is unavailable or out of space is skipped for the next one.
  // kUnavailable when no worker is registered; kOutOfSpace when no worker can hold the block.
  //
  // Replication: the _2 levels (or `options.replication`) store that many copies on distinct
  // workers, spread over racks first, then hosts, then workers (common/core/replica_spread.h). Each
  // piece goes to every chosen worker before the next piece is read, so a streamed block is
  // still never held whole; a worker that fails mid-way is replaced by the next candidate
  // when the source can be read again. The put returns once every copy is committed; with
  // fewer willing workers than copies it returns what was stored (`replicas.size()` <
  // `copies_wanted`), and fails only when no copy could be stored.
  Result<PutResult> Put(const BlockId& id, std::span<const std::byte> data, StorageLevel level,
                        const PutOptions& options = {});
  // As Put, sending `data`'s chunks themselves instead of a copy of their bytes: for bytes
  // already held in shared immutable chunks (blockmgr/chunk.h), e.g. a partition a computation
  // built chunk by chunk. The chunks are referenced, not copied, until ZeroMQ has sent them,
  // so the caller may drop its own references as soon as the call returns.
  Result<PutResult> PutChunks(const BlockId& id, const BlockData& data, StorageLevel level,
                              const PutOptions& options = {});
  // As Put, reading the `size` bytes from `in` (or `source`) 1 MiB at a time, so a block of
  // any size is never held whole. The first piece (up to 16 MiB) is kept until the first
  // worker accepted it; a worker failing after that fails the put, as the bytes already read
  // cannot be read again.
  Result<PutResult> PutStream(const BlockId& id, std::istream& in, uint64_t size,
                              StorageLevel level, const PutOptions& options = {});
  Result<PutResult> PutStream(const BlockId& id, ByteSource source, uint64_t size,
                              StorageLevel level, const PutOptions& options = {});

  // ---- caching computations ----

  // Returns block `id` if any live worker holds it; otherwise runs `compute`, stores its result
  // at `level` (on a worker on this host first) and returns it. The bytes are the same on
  // either path.
  //
  // Reads try workers on this host first, then the others, falling over to the next location
  // when one fails. When several clients (threads or processes) ask for the same missing block
  // at once, exactly one computes it and the others wait for its result: the master grants a
  // compute lease to the first and holds the others' requests until the block is stored. If
  // the computing client fails (compute returned an error) the next waiter computes at once;
  // if it dies, its lease expires within `compute_lease` and the next waiter computes then.
  // See "Compute leases" in schema/PROTOCOL.md.
  //
  // A compute error is returned as is. A result that cannot be stored (no worker has room,
  // workers down) is still returned, and counted in `store_failures`.
  Result<std::vector<std::byte>> GetOrCompute(const BlockId& id, StorageLevel level,
                                              const ComputeFn& compute);

  // Describes an RDD to the master, for `bmctl rdds`: its name, storage level and partition
  // count. Replaces an earlier description; RemoveRdd forgets it.
  Status RegisterRdd(uint64_t rdd_id, const std::string& name, StorageLevel level,
                     uint64_t total_partitions);

  // What this client's get-or-compute calls did so far.
  const CacheCounters& counters() const;
  // Returns the counters and starts them again from zero.
  CacheCounters TakeCounters();

  // True when `address` (tcp://HOST:PORT) is on this client's host (ClientOptions::local_hosts).
  bool IsLocalAddress(const std::string& address) const;

  // Removes the blocks wherever they are stored; returns how many existed. Unknown ids count 0.
  Result<uint64_t> Remove(const std::vector<BlockId>& ids);
  // Removes every block of the RDD; returns how many there were.
  Result<uint64_t> RemoveRdd(uint64_t rdd_id);

  // ---- reads ----

  // The whole block. It is read from its first location (memory copies first) in ranges of at
  // most 16 MiB; a location that fails (unavailable, or no longer holds the block) is skipped
  // for the next. The locations are those this client remembers (it stored or read the block
  // before; see ClientOptions::location_cache_entries), else the master's; when every
  // remembered one fails, the master is asked, and workers that did not answer are not waited
  // for again. If the block is replaced while it is read, the read starts over, at most 3
  // times, then kAborted. kNotFound "block X is not stored on any live worker" when there is no
  // location; kDataLoss "lost: <when>, <reason> ..." (LostBlockMessage) instead when the master
  // recorded that the block's last copy was lost (PROTOCOL.md, "Lost blocks"). GetTo, GetMany
  // and the other reads fail the same way.
  Result<std::vector<std::byte>> Get(const BlockId& id);
  // As Get, handing the bytes to `sink` range by range so a block of any size is never held
  // whole; returns the block's size. Falling over to another location, or starting over after
  // the block was replaced, is only possible before the first byte reached the sink: after
  // that such failures are returned (kUnavailable / kNotFound / kAborted) and the sink has
  // received a prefix of the block, which the caller must discard.
  Result<uint64_t> GetTo(const BlockId& id, const ByteSink& sink);
  Result<uint64_t> GetTo(const BlockId& id, std::ostream& out);
  // As Get, without copying the bytes where it can: from a worker on this host (README
  // "Same-host reads"), one chunk that maps the worker's sealed shared region of the block,
  // read-only, no byte copied (Get and GetTo copy once from it); from elsewhere, one chunk
  // holding the bytes received. The block stays pinned on its worker (never evicted, counted
  // in its memory) until the last reference to the chunk is dropped; its bytes never change,
  // even if the block is removed or replaced meanwhile. The chunk may outlive this Client and be
  // dropped on any thread.
  Result<BlockData> GetChunks(const BlockId& id);
  // Only the first half of GetChunks: the block mapped from a worker on this host, or nullopt
  // when no copy is on this host or the local path cannot serve it (then read it with Get,
  // GetTo or GetChunks). For callers with their own way of receiving remote blocks.
  std::optional<BlockData> GetMapped(const BlockId& id);
  // Several whole blocks at once, one result per id in the same order: getBlocks requests (a
  // multi-get of up to 1 MiB of small blocks each) to each block's worker (this host's copy
  // first, else the first the master lists), all in flight together; the ids whose locations
  // this client does not remember are looked up in a few growing chunks, each chunk's reads
  // sent as soon as its locations arrive. A block the multi-get cannot return (over its 16 MiB,
  // moved, or its worker failed) is read again with Get(), which falls over to other
  // locations. An id with no location is kNotFound.
  std::vector<Result<std::vector<std::byte>>> GetMany(const std::vector<BlockId>& ids);
  // As GetMany, without copying the bytes out: each block comes as views of the frames it
  // arrived in (one chunk for a block of up to 64 KiB, which travels inside a frame shared
  // with its neighbours; slices of several frames for a bigger one). The bytes were checked
  // against the block's digests, as GetMany's are. A view keeps its whole frame (up to 1 MiB)
  // alive, so a caller keeping a few blocks of many long should Flatten() them; the views are
  // immutable and may outlive this Client. The fastest way to read many small blocks.
  std::vector<Result<BlockData>> GetManyChunks(const std::vector<BlockId>& ids);

  // ---- metadata (answered by the master) ----

  // One entry per id, in the same order; an entry has no locations when no live worker holds
  // the block (its level is then meaningless).
  Result<std::vector<BlockLocations>> Locations(const std::vector<BlockId>& ids);
  // Live workers, sorted by id.
  Result<std::vector<WorkerInfo>> Workers();
  // Blocks whose last copy was lost, as the master keeps them: the newest 10,000 at most, oldest
  // first (bmctl blocks --lost; PROTOCOL.md, "Lost blocks"). kInvalidArgument from a master
  // that keeps no such records (older than this client).
  Result<std::vector<LostBlockInfo>> LostBlocks();
  // Has every worker holding each block re-read its copy now and check it against the block's
  // digests (bmctl verify). A corrupt copy is dropped by its worker, and the master restores
  // the replication level from a good one. One entry per copy, in the order of `blocks` and
  // their locations; a block with no copy yields one kGone entry with no worker.
  Result<std::vector<CopyCheck>> VerifyCopies(const std::vector<BlockLocations>& blocks);

  // Every known block, or those of one RDD, sorted by id. Read page by page (BlockPages), so
  // it works at any count; for millions of blocks prefer ForEachBlockPage, which holds one
  // page at a time.
  Result<std::vector<BlockLocations>> Blocks(std::optional<uint64_t> rdd_id = std::nullopt);
  // Hands every known block (or those of one RDD) to `visit` a page at a time, in id order,
  // asking the master for one page after another (at most `page_size` blocks each; the master
  // may send fewer). An error from `visit` stops the walk and is returned. Blocks put or
  // removed during the walk may or may not be seen; none is seen twice.
  Status ForEachBlockPage(std::optional<uint64_t> rdd_id,
                          const std::function<Status(const std::vector<BlockLocations>&)>& visit,
                          uint32_t page_size = 10000);
  // Cached RDDs, sorted by id.
  Result<std::vector<RddInfo>> Rdds();
  // Starts draining a worker (see DecommissionWorker in schema/messages.capnp): it takes no
  // new blocks, its blocks are copied elsewhere, then it exits and the master stops listing
  // it. kNotFound for an unknown worker.
  Status Decommission(const std::string& worker_id);
  // Tenants (docs/security.md "Tenants, shares and quotas"). Shares a dataset ("42", "rdd_42", or a
  // non-RDD block id) read-only with another tenant, or stops: its owner's key or an admin's.
  Status Share(const std::string& dataset, const std::string& tenant, bool unshare = false);
  // A tenant's byte quotas across the cluster, every copy counted (0: no limit on that tier),
  // or none at all: admin keys only.
  Status SetQuota(const std::string& tenant, uint64_t memory_bytes, uint64_t disk_bytes);
  Status RemoveQuota(const std::string& tenant);
  // Every tenant with datasets or a quota (a client key: its own only), by name.
  Result<std::vector<TenantInfo>> Tenants();
  // OK when the master answers within the timeout (for waiting until a master is up).
  // ---- shuffles (blockmgr/shuffle.h) ----

  // Registers a shuffle (the same spec again returns the same layout; another spec under the
  // id is kInvalidArgument), placing its partitions on the live workers.
  Result<ShuffleLayout> RegisterShuffle(const ShuffleSpec& spec);
  // The layout of a registered shuffle; with `partition`, also the committed maps' pieces in it.
  Result<ShuffleLayout> ShuffleLayoutOf(uint64_t shuffle_id,
                                        std::optional<uint32_t> partition = std::nullopt);
  // A writer of one attempt of one map (attempts are the caller's numbers, e.g. Spark's task
  // attempt). The shuffle must be registered.
  Result<std::unique_ptr<ShuffleWriter>> OpenShuffleWriter(
      uint64_t shuffle_id, uint32_t map, uint32_t attempt,
      const ShuffleWriterOptions& options = {});
  // A reader of one partition's committed output.
  Result<std::unique_ptr<ShuffleReader>> OpenShuffleReader(uint64_t shuffle_id, uint32_t partition);
  // Removes the shuffle and its data on every worker (Ok when it is not registered).
  Status UnregisterShuffle(uint64_t shuffle_id);
  Result<std::vector<ShuffleSummary>> Shuffles();

  Status PingMaster();
  // Every master this client knows of (its master addresses, and the leader they name), each
  // asked for its role, epoch and journal position; a master that does not answer is listed
  // with the error. For `bmctl masters`.
  std::vector<MasterInfo> Masters();

 private:
  class Impl;  // client/client_impl.h: the connections, caches and counters
  std::unique_ptr<Impl> impl_;
};

}  // namespace bm
