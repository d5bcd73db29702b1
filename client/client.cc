#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <istream>
#include <ostream>
#include <zmq.hpp>

#include "client/block_upload.h"
#include "client/client_impl.h"
#include "client/client_keys.h"
#include "client/copy_verification.h"
#include "client/lent_bytes.h"
#include "client/local_hosts.h"
#include "client/peer_calls.h"
#include "client/piece_source.h"
#include "client/range_reader.h"
#include "client/reply_decoding.h"
#include "common/allocator.h"
#include "common/byte_size.h"
#include "common/chunk.h"
#include "common/protocol.h"
#include "common/replica_spread.h"
#include "common/transport.h"

namespace bm {
namespace {

using std::chrono::milliseconds;

// How many times a read starts over because the block was replaced meanwhile.
constexpr int kMaxReadRestarts = 3;
// How many times a copy whose bytes arrived damaged while its worker finds it intact is read
// again before the read gives up on that copy (a link that keeps damaging bytes).
constexpr int kMaxTransitRereads = 2;

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

// Sizes a get's buffer for the whole block up front, so the bytes are copied once, not again on
// each growth. A big block's buffer, which glibc maps afresh (above its mmap threshold as the
// binaries set it, common/allocator.h), is backed by huge pages where the kernel can, so filling
// it does not pay a page fault per 4 KiB (most of a 64 MiB get's time on a VM otherwise).
void ReserveBlockBuffer(std::vector<std::byte>& data, uint64_t size) {
  constexpr uint64_t kHugePageAdviceBytes = 32 << 20;
  data.reserve(size);
  if (size >= kHugePageAdviceBytes) AdviseHugePages(data.data(), data.capacity());
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
    : options_(std::move(options)),
      context_(context),
      keys_(LoadClientKeys(options_)),
      local_hosts_(options_.local_hosts.empty() ? DetectLocalHosts() : options_.local_hosts),
      holder_name_(options_.holder_name.empty() ? DefaultHolderName() : options_.holder_name),
      master_(context, options_.master_address, options_.request_timeout, MasterSecurity(keys_)),
      // The master's worker list trusts the key of every worker it lists.
      workers_(context, OwnKeys(keys_), options_.request_timeout,
               [this] { return Workers().status(); }),
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
  // Whatever this client remembered of the old block may be replaced below.
  location_cache_.Forget(id);
  BM_ASSIGN_OR_RETURN(PlacementList placement, PlacementWorkers(false));
  const auto usable =
      std::count_if(placement.workers.begin(), placement.workers.end(),
                    [](const WorkerInfo& w) { return w.state != WorkerState::kDecommissioning; });
  if (placement.kept && static_cast<uint64_t>(usable) < CopiesWanted(level, options)) {
    // Too few workers kept for the copies wanted: one may have joined since.
    BM_ASSIGN_OR_RETURN(placement, PlacementWorkers(true));
  }
  Result<PutResult> put = PutOnce(id, source, level, options, std::move(placement.workers));
  if (put.ok() || !placement.kept || source.failed()) return put;
  // Placed from a kept worker list that no longer matched the cluster (a worker gone, full,
  // draining, or one named that joined since): place again from the master's list.
  const StatusCode code = put.status().code();
  const bool placement_failed = code == StatusCode::kUnavailable ||
                                code == StatusCode::kOutOfSpace || code == StatusCode::kNotFound;
  if (!placement_failed || !source.Restart()) return put;
  BM_ASSIGN_OR_RETURN(placement, PlacementWorkers(true));
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

Result<PutResult> Client::Impl::PutOnce(const BlockId& id, PieceSource& source, StorageLevel level,
                                        const PutOptions& options,
                                        std::vector<WorkerInfo> workers) {
  const uint32_t wanted = CopiesWanted(level, options);
  std::erase_if(workers,
                [](const WorkerInfo& w) { return w.state == WorkerState::kDecommissioning; });
  if (workers.empty()) return UnavailableError("no live workers are registered with the master");
  std::vector<WorkerInfo> candidates = ChooseWorkers(workers, source.size(), level, put_counter_++);
  if (options.worker_id) {
    // The named worker takes the first copy, whether or not placement would have chosen it.
    auto named = std::find_if(workers.begin(), workers.end(),
                              [&](const WorkerInfo& w) { return w.id == *options.worker_id; });
    if (named == workers.end()) return NotFoundError("no live worker named " + *options.worker_id);
    std::erase_if(candidates, [&](const WorkerInfo& w) { return w.id == named->id; });
    candidates.insert(candidates.begin(), *named);
  } else if (options.prefer_local) {
    std::stable_partition(candidates.begin(), candidates.end(),
                          [this](const WorkerInfo& w) { return IsLocalAddress(w.address); });
  }
  if (candidates.empty()) {
    return OutOfSpaceError("no live worker has room for " + id.ToString() + " (" +
                           FormatBytes(source.size()) + ", " +
                           std::string(StorageLevelName(level)) + ")");
  }
  // Copies on distinct racks, then hosts, then workers; the named worker (if any) first.
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
  const UploadVersion version{NewVersionToken(), /*replica=*/false, options.compute_lease};
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
      const bool worker_refused =
          last.code() == StatusCode::kUnavailable || last.code() == StatusCode::kOutOfSpace;
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
  return master_.Remove(ids);
}

Result<uint64_t> Client::Impl::RemoveRdd(uint64_t rdd_id) {
  location_cache_.ForgetRdd(rdd_id);
  return master_.RemoveRdd(rdd_id);
}

// ---- reads ----

Result<std::vector<std::byte>> Client::Impl::Get(const BlockId& id) {
  std::vector<std::byte> data;
  ByteSink sink = [&data](std::span<const std::byte> bytes) {
    data.insert(data.end(), bytes.begin(), bytes.end());
    return Status::Ok();
  };
  auto reserve = [&data](uint64_t size) { ReserveBlockBuffer(data, size); };
  BM_ASSIGN_OR_RETURN(uint64_t size, ReadBlock(
                                         id, sink, [&data]() { data.clear(); }, reserve));
  BM_CHECK(size == data.size());
  return data;
}

Result<uint64_t> Client::Impl::GetTo(const BlockId& id, const ByteSink& sink) {
  return ReadBlock(id, sink, nullptr);
}

Result<uint64_t> Client::Impl::GetTo(const BlockId& id, std::ostream& out) {
  ByteSink sink = [&out](std::span<const std::byte> bytes) {
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    return out ? Status::Ok() : InternalError("writing the block's bytes failed");
  };
  return ReadBlock(id, sink, nullptr);
}

std::vector<Result<std::vector<std::byte>>> Client::Impl::GetMany(const std::vector<BlockId>& ids) {
  std::vector<Result<BlockData>> blocks = GetManyChunks(ids);
  std::vector<Result<std::vector<std::byte>>> out;
  out.reserve(blocks.size());
  for (Result<BlockData>& block : blocks) {
    if (!block.ok()) {
      out.emplace_back(block.status());
    } else if (block->chunks.size() == 1) {
      const std::span<const std::byte> bytes = block->chunks.front()->bytes();
      out.emplace_back(std::vector<std::byte>(bytes.begin(), bytes.end()));
    } else {
      out.emplace_back(block->Flatten());
    }
  }
  return out;
}

std::vector<Result<BlockData>> Client::Impl::GetManyChunks(const std::vector<BlockId>& ids) {
  return multi_get_.Read(ids, *this);
}

Result<std::vector<std::byte>> Client::Impl::ReadWhole(const BlockId& id,
                                                       std::vector<BlockLocation> known,
                                                       ReadReport& report) {
  std::vector<std::byte> data;
  ByteSink sink = [&data](std::span<const std::byte> bytes) {
    data.insert(data.end(), bytes.begin(), bytes.end());
    return Status::Ok();
  };
  auto reserve = [&data](uint64_t size) { ReserveBlockBuffer(data, size); };
  BM_ASSIGN_OR_RETURN(uint64_t size, ReadBlock(
                                         id, sink, [&data]() { data.clear(); }, reserve,
                                         std::move(known), &report));
  BM_CHECK(size == data.size());
  return data;
}

Result<uint64_t> Client::Impl::ReadBlock(const BlockId& id, const ByteSink& sink,
                                         const std::function<void()>& reset,
                                         const std::function<void(uint64_t)>& expect_size,
                                         std::optional<std::vector<BlockLocation>> known,
                                         ReadReport* report) {
  const std::string block = id.ToString();
  int restarts = 0;
  ByteSink counting_sink = [this, &sink](std::span<const std::byte> bytes) {
    counters_.bytes_fetched += bytes.size();
    return sink(bytes);
  };
  // Workers that did not answer during this call are not waited for a second time when the
  // master, which has not noticed yet, lists them again.
  std::vector<std::string> unreachable;
  // Copies that failed their checksum on their worker (kDataLoss) during this call. Such a copy
  // is never served: the next copy is read instead, and the worker, which dropped the bad one,
  // reports it so the master restores the replication level. When no good copy is left the
  // read fails with kDataLoss rather than "not found".
  int corrupt_copies = 0;
  while (true) {
    std::vector<BlockLocation> locations;
    bool from_cache = false;
    if (known) {
      locations = std::move(*known);
      known.reset();
    } else if (const std::vector<BlockLocation>* cached = location_cache_.Find(id)) {
      locations = *cached;
      from_cache = true;
    } else {
      BM_ASSIGN_OR_RETURN(std::vector<BlockLocations> found, Locations({id}));
      if (found.size() != 1) return InternalError("master sent no entry for " + block);
      locations = std::move(found[0].locations);
    }
    if (locations.empty()) {
      return NotFoundError("block " + block + " is not stored on any live worker");
    }
    if (!from_cache) location_cache_.Remember(id, locations);
    // This host's workers first; otherwise the master's order (memory copies before disk).
    std::stable_partition(locations.begin(), locations.end(),
                          [this](const BlockLocation& l) { return IsLocalAddress(l.address); });
    bool emitted = false;
    bool all_not_found = true;
    bool replaced = false;
    bool stale_digest = false;
    Status last;
    for (const BlockLocation& location : locations) {
      if (emitted) {
        if (!reset) return last;
        reset();
        emitted = false;
      }
      if (std::find(unreachable.begin(), unreachable.end(), location.address) !=
          unreachable.end()) {
        last = UnavailableError("worker " + location.worker_id + " did not answer");
        all_not_found = false;
        continue;
      }
      if (expect_size) expect_size(location.size);
      using Fault = RangeReader::Outcome::Fault;
      CopyRead copy = ReadCopy(location, id, counting_sink, reset, from_cache);
      RangeReader::Outcome& read = copy.outcome;
      emitted = read.emitted;
      if (read.size.ok()) {
        if (report != nullptr) report->local = IsLocalAddress(location.address);
        return read.size;
      }
      last = read.size.status();
      if (read.fault == Fault::kWrongBlockDigest && from_cache) {
        // The remembered digest may be an older version's: ask the master before calling the
        // copy corrupt.
        stale_digest = true;
        break;
      }
      if (read.fault == Fault::kSink) return last;
      if (report != nullptr) report->failed_workers.push_back(location.worker_id);
      if (copy.corrupted_in_transit) {
        all_not_found = false;  // a good copy, behind a bad link: not data loss
        continue;
      }
      if (last.code() == StatusCode::kAborted) {
        replaced = true;
        break;
      }
      if (last.code() == StatusCode::kDataLoss) {
        // The worker found its copy bad (and dropped it: the master restores a copy from a good
        // one), or could not say.
        ++corrupt_copies;
        continue;
      }
      if (last.code() != StatusCode::kUnavailable && last.code() != StatusCode::kNotFound) {
        return last;
      }
      if (last.code() == StatusCode::kUnavailable) {
        all_not_found = false;
        unreachable.push_back(location.address);
      }
    }
    if (emitted && !reset) return last;
    if (emitted) reset();
    if (stale_digest) {
      location_cache_.Forget(id);
      continue;
    }
    if (!replaced) {
      location_cache_.Forget(id);
      // Remembered locations that are stale (moved, removed, or their worker failed): ask the
      // master, which is not a restart.
      if (from_cache) continue;
      if (corrupt_copies > 0 && all_not_found) {
        return DataLossError("block " + block + " is corrupt on every copy (" +
                             std::to_string(corrupt_copies) +
                             " found corrupt); last error: " + last.message());
      }
      if (all_not_found) {
        return NotFoundError("block " + block + " is not stored on any live worker");
      }
      return UnavailableError("cannot read block " + block + " from any of its " +
                              std::to_string(locations.size()) +
                              " locations; last error: " + last.message());
    }
    if (++restarts > kMaxReadRestarts) {
      return AbortedError("block " + block + " was replaced while being read " +
                          std::to_string(restarts) + " times in a row; gave up");
    }
  }
}

RangeReader::Outcome Client::Impl::ReadFrom(const BlockLocation& location, const BlockId& id,
                                            const ByteSink& sink) {
  Result<RpcChannel*> channel = workers_.Channel(location.address);
  if (!channel.ok()) return {channel.status(), RangeReader::Outcome::Fault::kPeer, false};
  RangeReader reader(**channel, "worker " + location.worker_id, id);
  return reader.Read(sink, location.block_digest);
}

Client::Impl::CopyRead Client::Impl::ReadCopy(const BlockLocation& location, const BlockId& id,
                                              const ByteSink& sink,
                                              const std::function<void()>& reset,
                                              bool digest_may_be_stale) {
  using Fault = RangeReader::Outcome::Fault;
  CopyRead copy{ReadFrom(location, id, sink)};
  for (int rereads = 0;; ++rereads) {
    const RangeReader::Outcome& read = copy.outcome;
    if (read.size.ok()) return copy;
    if (read.fault == Fault::kWrongBlockDigest && !digest_may_be_stale) {
      // The unit digests the worker sent match its bytes but not the block: its copy (or its
      // digests) differ from the block's, which its own check cannot see. It is told anyway.
      (void)VerifyWorkerCopy(workers_, location, id, /*reported_bad=*/true);
      return copy;
    }
    if (read.fault != Fault::kCorruptCopy) return copy;
    // The worker re-reads its copy: dropped there if it is bad, else the bytes went bad on the
    // way and the copy is worth reading again.
    Result<CopyCheck> check = VerifyWorkerCopy(workers_, location, id, /*reported_bad=*/true);
    if (!check.ok() || check->state != CopyCheck::State::kIntact) return copy;
    if (rereads == kMaxTransitRereads || (read.emitted && !reset)) {
      copy.outcome.size = UnavailableError(
          "block " + id.ToString() + " was corrupted in transit from " + location.worker_id +
          " on " + std::to_string(rereads + 1) +
          " reads although its stored copy is intact (a network problem); last error: " +
          read.size.status().message());
      copy.corrupted_in_transit = true;
      return copy;
    }
    spdlog::warn(
        "block {}: bytes from {} were corrupted in transit (its copy is intact); "
        "reading it again",
        id.ToString(), location.worker_id);
    if (read.emitted) reset();
    copy.outcome = ReadFrom(location, id, sink);
  }
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

}  // namespace bm
