// Client::Impl: routes the public calls to the components that do the work (uploads, the
// multi-get, the master client, worker channels), and places puts. Reads are in
// client_reads.cc, get-or-compute in get_or_compute.cc.

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <functional>
#include <istream>
#include <thread>
#include <unordered_set>
#include <zmq.hpp>

#include "blockmgr/chunk.h"
#include "client/client_impl.h"
#include "client/client_keys.h"
#include "client/copy_verification.h"
#include "client/lent_bytes.h"
#include "client/local_hosts.h"
#include "client/reply_decoding.h"
#include "common/core/byte_size.h"
#include "common/core/protocol.h"
#include "common/core/replica_spread.h"
#include "common/net/transport.h"
#include "common/security/tenant.h"
#include "common/zookeeper/leader_directory.h"
#include "transfer/block_upload.h"
#include "transfer/peer_calls.h"
#include "transfer/piece_source.h"

namespace bm {
namespace {

using std::chrono::milliseconds;

using reply_decoding::ToBlockLocation;
using reply_decoding::ToStdString;

// Copies a put stores: as PutOptions::replication says, else as the level does.
uint32_t CopiesWanted(StorageLevel level, const PutOptions& options) {
  return options.replication > 0 ? options.replication
                                 : static_cast<uint32_t>(ReplicationOf(level));
}

std::string DefaultHolderName() {
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
  return std::string(host.data()) + ":" + std::to_string(getpid());
}

// How long the ZooKeeper session that finds the leader outlives a silence: a reader's
// session, so its length only bounds how soon a lost one is replaced.
constexpr std::chrono::milliseconds kLeaderDirectorySession{10000};

Result<std::shared_ptr<const LeaderDirectory>> StartLeaderDirectory(const std::string& zookeeper) {
  if (zookeeper.empty()) return std::shared_ptr<const LeaderDirectory>();
  Result<std::unique_ptr<LeaderDirectory>> started =
      LeaderDirectory::Start(zookeeper, kLeaderDirectorySession);
  if (!started.ok()) {
    return InvalidArgumentError("zookeeper " + zookeeper + ": " + started.status().message());
  }
  return std::shared_ptr<const LeaderDirectory>(std::move(started).value());
}

// PutBlock.computeCostUs: a negative cost is not a cost (0 = not stated).
uint64_t ComputeCostMicros(std::chrono::microseconds cost) {
  return cost.count() > 0 ? static_cast<uint64_t>(cost.count()) : 0;
}

// spdlog builds its registry and default logger on first use. Built here, on the thread that
// creates the client, they exist before any thread the client (or its caller) starts logs
// through them; built by whichever of those threads logged first, the build raced with the
// others' logging as ThreadSanitizer sees it (Debian's libspdlog is not instrumented, so the
// guard of its function-local static is invisible to it).
ClientOptions WithLoggingReady(ClientOptions options) {
  (void)spdlog::default_logger_raw();
  return options;
}

}  // namespace

CacheCounters& CacheCounters::operator+=(const CacheCounters& other) {
  local_hits += other.local_hits;
  remote_hits += other.remote_hits;
  misses += other.misses;
  computes += other.computes;
  waits += other.waits;
  bytes_fetched += other.bytes_fetched;
  store_failures += other.store_failures;
  return *this;
}

Client::Impl::Impl(ClientOptions options, zmq::context_t& context)
    : options_(WithLoggingReady(std::move(options))),
      context_(context),
      keys_(LoadClientKeys(options_)),
      local_hosts_(options_.local_hosts.empty() ? DetectLocalHosts() : options_.local_hosts),
      holder_name_(options_.holder_name.empty() ? DefaultHolderName() : options_.holder_name),
      directory_(StartLeaderDirectory(options_.zookeeper)),
      master_(context, options_.master_address, options_.request_timeout, MasterSecurity(keys_),
              options_.leader_wait, directory_),
      // The master's worker list trusts the key of every worker it lists.
      workers_(context, OwnKeys(keys_), options_.request_timeout,
               [this] { return Workers().status(); }),
      local_reads_(options_.local_reads, workers_, options_.request_timeout,
                   {options_.idle_mapping_bytes, options_.idle_mapping_lifetime},
                   options_.local_arena),
      upload_ids_(std::random_device{}()),
      location_cache_(options_.location_cache_entries),
      placement_workers_(options_.worker_list_ttl),
      multi_get_(workers_, location_cache_, counters_) {}

Client::Impl::Impl(ClientOptions options, std::unique_ptr<zmq::context_t> context)
    : Impl(std::move(options), *context) {
  owned_context_ = std::move(context);
}

Client::Impl::~Impl() = default;

bool Client::Impl::IsLocalAddress(const std::string& address) const {
  return bm::IsLocalAddress(address, local_hosts_);
}

CacheCounters Client::Impl::TakeCounters() { return std::exchange(counters_, CacheCounters{}); }

// ---- writes ----

Result<PutResult> Client::Impl::Put(const BlockId& id, std::span<const std::byte> data,
                                    StorageLevel level, const PutOptions& options) {
  // The caller's bytes go out as they are, frame by frame (no copy into fresh frames, whose
  // first touch costs a page fault per 4 KiB); `lent` waits, before this returns, until ZeroMQ
  // has let go of every frame pointing into them.
  LentBytes lent(data);
  Result<PutResult> put = UnavailableError("not attempted");
  {
    size_t next = 0;
    ChunkSource chunks = [&lent, &next]() -> Result<ChunkPtr> {
      if (next == lent.size()) return ChunkPtr();
      const size_t length = std::min<size_t>(kChunkBytes, lent.size() - next);
      ChunkPtr chunk = lent.Lend(next, length);
      next += length;
      return chunk;
    };
    PieceSource source(std::move(chunks), data.size(), [&next]() { next = 0; });
    put = PutFrom(id, source, level, options);
  }  // the source's kept pieces let go of their chunks here
  lent.AwaitReturned();
  return put;
}

Result<PutResult> Client::Impl::PutChunks(const BlockId& id, const BlockData& data,
                                          StorageLevel level, const PutOptions& options) {
  size_t next = 0;
  ChunkSource chunks = [&data, &next]() -> Result<ChunkPtr> {
    return next < data.chunks.size() ? data.chunks[next++] : nullptr;
  };
  PieceSource source(std::move(chunks), data.size, [&next]() { next = 0; });
  return PutFrom(id, source, level, options);
}

Result<PutResult> Client::Impl::PutStream(const BlockId& id, std::istream& in, uint64_t size,
                                          StorageLevel level, const PutOptions& options) {
  ByteSource read = [&in](std::span<std::byte> out) -> Result<size_t> {
    in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size()));
    if (in.bad()) return InternalError("reading the input failed");
    return static_cast<size_t>(in.gcount());
  };
  std::function<void()> rewind;
  const std::streampos start = in.tellg();
  if (start != std::streampos(-1)) {
    rewind = [&in, start]() {
      in.clear();
      in.seekg(start);
    };
  }
  PieceSource source(std::move(read), size, std::move(rewind));
  return PutFrom(id, source, level, options);
}

Result<PutResult> Client::Impl::PutStream(const BlockId& id, ByteSource read, uint64_t size,
                                          StorageLevel level, const PutOptions& options) {
  PieceSource source(std::move(read), size, nullptr);
  return PutFrom(id, source, level, options);
}

Result<PutResult> Client::Impl::PutFrom(const BlockId& id, PieceSource& source, StorageLevel level,
                                        const PutOptions& options) {
  // Whatever this client remembered of the old block may be replaced below. A mapping it keeps
  // of the old version would pin that version's memory on the worker until it idles out.
  location_cache_.Forget(id);
  local_reads_.ForgetBlock(id);
  // The copies placement chooses workers for: a named worker takes the first one.
  const uint32_t placed_copies = CopiesWanted(level, options) - (options.worker_id ? 1 : 0);
  BM_ASSIGN_OR_RETURN(PlacementList placement, PlacementWorkers(false));
  const auto usable =
      std::count_if(placement.workers.begin(), placement.workers.end(),
                    [](const WorkerInfo& w) { return w.state != WorkerState::kDecommissioning; });
  if (placement.kept && static_cast<uint64_t>(usable) < CopiesWanted(level, options)) {
    // Too few workers kept for the copies wanted: one may have joined since.
    BM_ASSIGN_OR_RETURN(placement, PlacementWorkers(true));
  }
  BM_ASSIGN_OR_RETURN(
      placement, AwaitConfirmedWorkers(std::move(placement), source.size(), level, placed_copies));
  Result<PutResult> put = PutOnce(id, source, level, options, std::move(placement.workers));
  if (put.ok() || !placement.kept || source.failed()) return put;
  // Placed from a kept worker list that no longer matched the cluster (a worker gone, full,
  // draining, or one named that joined since): place again from the master's list.
  const StatusCode code = put.status().code();
  // A tenant's quota is the same on every worker: placing again cannot help.
  const bool placement_failed = code == StatusCode::kUnavailable || code == StatusCode::kNotFound ||
                                (code == StatusCode::kOutOfSpace && !IsQuotaExceeded(put.status()));
  if (!placement_failed || !source.Restart()) return put;
  BM_ASSIGN_OR_RETURN(placement, PlacementWorkers(true));
  BM_ASSIGN_OR_RETURN(
      placement, AwaitConfirmedWorkers(std::move(placement), source.size(), level, placed_copies));
  return PutOnce(id, source, level, options, std::move(placement.workers));
}

Result<Client::Impl::PlacementList> Client::Impl::PlacementWorkers(bool fresh) {
  const auto now = KeptWorkerList::Clock::now();
  if (!fresh) {
    if (const std::vector<WorkerInfo>* kept = placement_workers_.Find(now)) {
      return PlacementList{*kept, true};
    }
  }
  BM_ASSIGN_OR_RETURN(std::vector<WorkerInfo> workers, Workers());
  placement_workers_.Keep(workers, now);
  return PlacementList{std::move(workers), false};
}

Result<Client::Impl::PlacementList> Client::Impl::AwaitConfirmedWorkers(PlacementList placement,
                                                                        uint64_t size,
                                                                        StorageLevel level,
                                                                        uint32_t copies) {
  // Workers register with a new master within a round trip of its leaderElected; one that
  // died meanwhile stays listed until the master's heartbeat timeout drops it. The same bound
  // as a call's wait for a leader: the failover is not over before the workers are back.
  constexpr std::chrono::milliseconds kFirstPause{20};
  constexpr std::chrono::milliseconds kMaxPause{500};
  const auto deadline = std::chrono::steady_clock::now() + options_.leader_wait;
  std::chrono::milliseconds pause = kFirstPause;
  while (AwaitsUnconfirmedWorkers(placement.workers, size, level, copies) &&
         std::chrono::steady_clock::now() + pause < deadline) {
    std::this_thread::sleep_for(pause);
    pause = std::min(2 * pause, kMaxPause);
    BM_ASSIGN_OR_RETURN(placement, PlacementWorkers(true));
  }
  return placement;
}

Result<PutResult> Client::Impl::PutOnce(const BlockId& id, PieceSource& source, StorageLevel level,
                                        const PutOptions& options,
                                        std::vector<WorkerInfo> workers) {
  const uint32_t wanted = CopiesWanted(level, options);
  std::erase_if(workers,
                [](const WorkerInfo& w) { return w.state == WorkerState::kDecommissioning; });
  if (workers.empty()) return UnavailableError("no live workers are registered with the master");
  // Workers on this host first while they have room (PutOptions::prefer_local); a named
  // worker overrides that below.
  std::function<bool(const WorkerInfo&)> is_local;
  if (options.prefer_local && !options.worker_id) {
    is_local = [this](const WorkerInfo& w) { return IsLocalAddress(w.address); };
  }
  std::vector<WorkerInfo> candidates =
      ChooseWorkers(workers, source.size(), level, put_counter_++, is_local);
  if (options.worker_id) {
    // The named worker takes the first copy, whether or not placement would have chosen it.
    auto named = std::find_if(workers.begin(), workers.end(),
                              [&](const WorkerInfo& w) { return w.id == *options.worker_id; });
    if (named == workers.end()) return NotFoundError("no live worker named " + *options.worker_id);
    std::erase_if(candidates, [&](const WorkerInfo& w) { return w.id == named->id; });
    candidates.insert(candidates.begin(), *named);
  }
  if (candidates.empty()) {
    const std::string block = id.ToString() + " (" + FormatBytes(source.size()) + ", " +
                              std::string(StorageLevelName(level)) + ")";
    const auto unconfirmed = std::count_if(workers.begin(), workers.end(), [](const WorkerInfo& w) {
      return w.state == WorkerState::kUnconfirmed;
    });
    // Their room is unknown, not none: only confirmed workers can make "out of space" final.
    if (unconfirmed > 0) {
      return UnavailableError("no confirmed worker has room for " + block + ", and " +
                              std::to_string(unconfirmed) +
                              " have not registered with the master since it took over");
    }
    return OutOfSpaceError("no live worker has room for " + block);
  }
  // Copies on distinct racks, then hosts, then workers; the named worker (if any) first. The
  // first pick is the first candidate, so with prefer_local the first copy stays on this host
  // and the other copies of a replicated level go to other hosts, as before.
  std::vector<ReplicaSite> sites;
  for (const WorkerInfo& w : candidates) {
    sites.push_back({w.id, w.host.empty() ? HostOfAddress(w.address) : w.host, w.rack});
  }
  std::vector<size_t> order;
  if (options.worker_id) {
    order.push_back(0);
    for (size_t i :
         SpreadReplicas(std::span(sites).subspan(1), std::span(sites).first(1), wanted - 1)) {
      order.push_back(i + 1);
    }
  } else {
    order = SpreadReplicas(sites, {}, wanted);
  }

  // Every copy this put stores carries one version token, so the master sees them as one
  // version and lets that version replace any other (PROTOCOL.md, "One version per block id").
  const UploadVersion version{NewVersionToken(), /*replica=*/false, options.compute_lease,
                              ComputeCostMicros(options.compute_cost), wanted};
  std::vector<Result<PutResult>> stored;
  Status last;
  size_t next = 0;
  bool attempted = false;
  while (stored.size() < wanted && next < order.size()) {
    if (attempted && !source.Restart()) break;
    attempted = true;
    std::vector<const WorkerInfo*> batch;
    while (batch.size() < wanted - stored.size() && next < order.size()) {
      batch.push_back(&candidates[order[next++]]);
    }
    BlockUpload upload(workers_, id, level, version, source);
    for (Result<PutResult>& put : upload.Run(batch, upload_ids_)) {
      if (put.ok()) {
        stored.push_back(std::move(put));
        continue;
      }
      last = put.status();
      // A tenant's quota refuses the put on every worker alike (common/security/tenant.h).
      const bool worker_refused =
          last.code() == StatusCode::kUnavailable ||
          (last.code() == StatusCode::kOutOfSpace && !IsQuotaExceeded(last));
      // The kept worker list was wrong about this worker: the next put asks the master.
      if (worker_refused) placement_workers_.Clear();
      if (source.failed() || !worker_refused) return last;
    }
    // A named worker that failed is not replaced by another for the first copy.
    if (options.worker_id && stored.empty()) return last;
  }
  if (stored.empty()) return last;
  // The ids before the first result is moved from (its worker_id would read back empty).
  std::vector<std::string> replicas;
  std::vector<BlockLocation> locations;
  for (const Result<PutResult>& put : stored) {
    replicas.push_back(put->worker_id);
    locations.push_back({put->worker_id, put->address, put->tier, put->size});
    placement_workers_.CountPlacedCopy(put->worker_id, put->tier, put->size);
  }
  // Memory copies first, as the master lists them.
  std::stable_partition(locations.begin(), locations.end(),
                        [](const BlockLocation& l) { return l.tier == Tier::kMemory; });
  location_cache_.Remember(id, std::move(locations));
  PutResult result = std::move(stored.front()).value();
  result.copies_wanted = wanted;
  result.replicas = std::move(replicas);
  return result;
}

uint64_t Client::Impl::NewVersionToken() {
  uint64_t token = 0;
  while (token == 0) token = upload_ids_();
  return token;
}

Result<uint64_t> Client::Impl::Remove(const std::vector<BlockId>& ids) {
  for (const BlockId& id : ids) location_cache_.Forget(id);
  // Mappings this client keeps of them would pin their memory on the worker until they idle out.
  const std::unordered_set<BlockId> removed(ids.begin(), ids.end());
  local_reads_.ForgetBlocks([&](const BlockId& id) { return removed.contains(id); });
  return master_.Remove(ids);
}

Result<uint64_t> Client::Impl::RemoveRdd(uint64_t rdd_id) {
  location_cache_.ForgetRdd(rdd_id);
  local_reads_.ForgetBlocks([rdd_id](const BlockId& id) { return id.rdd_id() == rdd_id; });
  return master_.RemoveRdd(rdd_id);
}

// ---- verification ----

Result<std::vector<CopyCheck>> Client::Impl::VerifyCopies(
    const std::vector<BlockLocations>& blocks) {
  std::vector<CopyCheck> checks;
  for (const BlockLocations& block : blocks) {
    if (block.locations.empty()) {
      checks.push_back({block.block, "", CopyCheck::State::kGone});
      continue;
    }
    for (const BlockLocation& location : block.locations) {
      BM_ASSIGN_OR_RETURN(CopyCheck check,
                          VerifyWorkerCopy(workers_, location, block.block, false));
      checks.push_back(std::move(check));
    }
  }
  return checks;
}

// ---- metadata ----

Result<std::vector<BlockLocations>> Client::Impl::Locations(const std::vector<BlockId>& ids) {
  return master_.Locations(ids);
}

Result<std::vector<WorkerInfo>> Client::Impl::Workers() {
  BM_ASSIGN_OR_RETURN(std::vector<WorkerInfo> workers, master_.Workers());
  for (const WorkerInfo& worker : workers) workers_.Trust(worker.address, worker.public_key);
  return workers;
}

Result<std::vector<BlockLocations>> Client::Impl::Blocks(std::optional<uint64_t> rdd_id) {
  std::vector<BlockLocations> out;
  BM_RETURN_IF_ERROR(ForEachBlockPage(rdd_id, [&](const std::vector<BlockLocations>& page) {
    out.insert(out.end(), page.begin(), page.end());
    return Status::Ok();
  }));
  return out;
}

Status Client::Impl::ForEachBlockPage(
    std::optional<uint64_t> rdd_id,
    const std::function<Status(const std::vector<BlockLocations>&)>& visit, uint32_t page_size) {
  return master_.ForEachBlockPage(rdd_id, visit, page_size);
}

Result<std::vector<RddInfo>> Client::Impl::Rdds() { return master_.Rdds(); }

Status Client::Impl::RegisterRdd(uint64_t rdd_id, const std::string& name, StorageLevel level,
                                 uint64_t total_partitions) {
  return master_.RegisterRdd(rdd_id, name, level, total_partitions);
}

Status Client::Impl::Decommission(const std::string& worker_id) {
  return master_.Decommission(worker_id);
}

Status Client::Impl::PingMaster() { return master_.Ping(); }
std::vector<MasterInfo> Client::Impl::Masters() { return master_.Masters(); }

}  // namespace bm
