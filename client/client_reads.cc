// Client::Impl's reads: a block from its locations, local workers first, past copies that are
// gone, unreachable, replaced meanwhile or corrupt (schema/PROTOCOL.md, "Integrity: where every
// byte is checked"); one copy at a time through RangeReader.

#include <spdlog/spdlog.h>

#include <algorithm>
#include <istream>
#include <map>
#include <ostream>

#include "client/client_impl.h"
#include "client/copy_verification.h"
#include "common/core/allocator.h"
#include "common/core/digest.h"
#include "transfer/peer_calls.h"
#include "transfer/range_reader.h"

namespace bm {
namespace {

// How many times a read starts over because the block was replaced meanwhile.
constexpr int kMaxReadRestarts = 3;
// How many times a copy whose bytes arrived damaged while its worker finds it intact is read
// again before the read gives up on that copy (a link that keeps damaging bytes).
constexpr int kMaxTransitRereads = 2;

// Sizes a get's buffer for the whole block up front, so the bytes are copied once, not again on
// each growth. A big block's buffer, which glibc maps afresh (above its mmap threshold as the
// binaries set it, common/core/allocator.h), is backed by huge pages where the kernel can, so
// filling it does not pay a page fault per 4 KiB (most of a 64 MiB get's time on a VM otherwise).
void ReserveBlockBuffer(std::vector<std::byte>& data, uint64_t size) {
  constexpr uint64_t kHugePageAdviceBytes = 32 << 20;
  data.reserve(size);
  if (size >= kHugePageAdviceBytes) AdviseHugePages(data.data(), data.capacity());
}

}  // namespace

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

std::optional<BlockData> Client::Impl::GetMapped(const BlockId& id) {
  if (!local_reads_.enabled()) return std::nullopt;
  std::vector<BlockLocation> locations;
  if (const std::vector<BlockLocation>* cached = location_cache_.Find(id)) {
    locations = *cached;
  } else {
    Result<std::vector<BlockLocations>> found = Locations({id});
    if (!found.ok() || found->size() != 1) return std::nullopt;
    locations = std::move((*found)[0].locations);
    if (!locations.empty()) location_cache_.Remember(id, locations);
  }
  for (const BlockLocation& location : locations) {
    std::optional<Result<LocalBlockRead>> local = ReadLocally(location, id);
    if (local.has_value() && local->ok()) {
      counters_.bytes_fetched += (*local)->data.size;
      return std::move((*local)->data);
    }
  }
  return std::nullopt;
}

Result<BlockData> Client::Impl::GetChunks(const BlockId& id) {
  // This host's copies first, mapped as they are; else (or if they fail) one copy received.
  if (std::optional<BlockData> mapped = GetMapped(id)) return std::move(*mapped);
  BM_ASSIGN_OR_RETURN(std::vector<std::byte> bytes, Get(id));
  BlockData data;
  data.Append(std::make_shared<VectorChunk>(std::move(bytes)));
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
  if (!local_reads_.enabled()) return multi_get_.Read(ids, *this);
  // Blocks remembered on a worker of this host: its socket, their requests pipelined. The rest
  // (and any the local path could not serve) through the multi-get.
  std::vector<std::optional<Result<BlockData>>> results(ids.size());
  std::map<std::string, std::vector<size_t>> local_by_worker;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::vector<BlockLocation>* cached = location_cache_.Find(ids[i]);
    if (cached == nullptr) continue;
    for (const BlockLocation& location : *cached) {
      Result<std::shared_ptr<LocalReadConnection>> connection = local_reads_.For(location.address);
      if (connection.ok() && *connection != nullptr) {
        local_by_worker[location.address].push_back(i);
        break;
      }
    }
  }
  for (const auto& [address, indexes] : local_by_worker) {
    Result<std::shared_ptr<LocalReadConnection>> connection = local_reads_.For(address);
    if (!connection.ok() || *connection == nullptr) continue;
    // Small memory blocks 16 to a request (one round trip each); the others (big ones are
    // mapped, disk ones read) one request each, pipelined.
    constexpr size_t kPerRequest = 16;
    std::vector<size_t> alone;
    auto take = [&](size_t index, Result<LocalBlockRead>& read) {
      if (!read.ok()) return;  // read again below, as any other
      counters_.bytes_fetched += read->data.size;
      results[index] = std::move(read->data);
    };
    for (size_t first = 0; first < indexes.size(); first += kPerRequest) {
      const size_t end = std::min(indexes.size(), first + kPerRequest);
      std::vector<BlockId> batch;
      for (size_t k = first; k < end; ++k) batch.push_back(ids[indexes[k]]);
      std::vector<Result<LocalBlockRead>> reads = (*connection)->GetSmall(batch);
      for (size_t k = first; k < end; ++k) {
        Result<LocalBlockRead>& read = reads[k - first];
        if (!read.ok() && read.status().code() == StatusCode::kUnavailable &&
            !(*connection)->broken()) {
          alone.push_back(indexes[k]);
        } else {
          take(indexes[k], read);
        }
      }
    }
    if (!alone.empty() && !(*connection)->broken()) {
      std::vector<BlockId> batch;
      for (size_t i : alone) batch.push_back(ids[i]);
      std::vector<Result<LocalBlockRead>> reads = (*connection)->GetMany(batch);
      for (size_t k = 0; k < alone.size(); ++k) take(alone[k], reads[k]);
    }
    if ((*connection)->broken()) local_reads_.Failed(address);
  }
  std::vector<BlockId> rest;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!results[i].has_value()) rest.push_back(ids[i]);
  }
  std::vector<Result<BlockData>> rest_read;
  if (!rest.empty()) rest_read = multi_get_.Read(rest, *this);
  std::vector<Result<BlockData>> out;
  out.reserve(ids.size());
  size_t next_rest = 0;
  for (std::optional<Result<BlockData>>& result : results) {
    out.push_back(result.has_value() ? std::move(*result) : std::move(rest_read[next_rest++]));
  }
  return out;
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
  ByteSink counting_sink = [this, &sink](std::span<const std::byte> bytes) {
    counters_.bytes_fetched += bytes.size();
    return sink(bytes);
  };
  BlockReadMemory memory;
  int restarts = 0;
  while (true) {
    bool from_cache = false;
    BM_ASSIGN_OR_RETURN(std::vector<BlockLocation> locations,
                        LocationsToRead(id, known, from_cache));
    ReadPassEnd end =
        ReadPass(id, locations, from_cache, counting_sink, reset, expect_size, report, memory);
    switch (end.next) {
      case ReadPassEnd::Next::kFinished:
        return std::move(end.result);
      case ReadPassEnd::Next::kAskMaster:
        continue;
      case ReadPassEnd::Next::kRestart:
        if (++restarts > kMaxReadRestarts) {
          return AbortedError("block " + id.ToString() + " was replaced while being read " +
                              std::to_string(restarts) + " times in a row; gave up");
        }
        continue;
    }
  }
}

Result<std::vector<BlockLocation>> Client::Impl::LocationsToRead(
    const BlockId& id, std::optional<std::vector<BlockLocation>>& known, bool& from_cache) {
  std::vector<BlockLocation> locations;
  from_cache = false;
  if (known) {
    locations = std::move(*known);
    known.reset();
  } else if (const std::vector<BlockLocation>* cached = location_cache_.Find(id)) {
    locations = *cached;
    from_cache = true;
  } else {
    BM_ASSIGN_OR_RETURN(std::vector<BlockLocations> found, Locations({id}));
    if (found.size() != 1) return InternalError("master sent no entry for " + id.ToString());
    // Its last copy was lost: not "not found", which a block never stored is.
    if (found[0].lost) return DataLossError(LostBlockMessage(*found[0].lost));
    locations = std::move(found[0].locations);
  }
  if (locations.empty()) {
    return NotFoundError("block " + id.ToString() + " is not stored on any live worker");
  }
  if (!from_cache) location_cache_.Remember(id, locations);
  // This host's workers first; otherwise the master's order (memory copies before disk).
  std::stable_partition(locations.begin(), locations.end(),
                        [this](const BlockLocation& l) { return IsLocalAddress(l.address); });
  return locations;
}

Client::Impl::ReadPassEnd Client::Impl::ReadPass(const BlockId& id,
                                                 const std::vector<BlockLocation>& locations,
                                                 bool from_cache, const ByteSink& sink,
                                                 const std::function<void()>& reset,
                                                 const std::function<void(uint64_t)>& expect_size,
                                                 ReadReport* report, BlockReadMemory& memory) {
  using Next = ReadPassEnd::Next;
  const auto finished = [](Result<uint64_t> result) {
    return ReadPassEnd{Next::kFinished, std::move(result)};
  };
  bool emitted = false;       // the sink holds bytes of a copy that failed
  bool all_not_found = true;  // every copy tried said "not here"
  bool replaced = false;      // a copy was replaced while it was read
  bool stale_digest = false;  // a remembered digest did not match: perhaps an older version's
  Status last;
  for (const BlockLocation& location : locations) {
    if (emitted) {
      if (!reset) return finished(last);
      reset();
      emitted = false;
    }
    if (std::find(memory.unreachable.begin(), memory.unreachable.end(), location.address) !=
        memory.unreachable.end()) {
      last = UnavailableError("worker " + location.worker_id + " did not answer");
      all_not_found = false;
      continue;
    }
    if (expect_size) expect_size(location.size);
    using Fault = RangeReader::Outcome::Fault;
    CopyRead copy = ReadCopy(location, id, sink, reset, from_cache);
    RangeReader::Outcome& read = copy.outcome;
    emitted = read.emitted;
    if (read.size.ok()) {
      if (report != nullptr) report->local = IsLocalAddress(location.address);
      return finished(read.size);
    }
    last = read.size.status();
    if (read.fault == Fault::kWrongBlockDigest && from_cache) {
      // The remembered digest may be an older version's: ask the master before calling the
      // copy corrupt.
      stale_digest = true;
      break;
    }
    if (read.fault == Fault::kSink) return finished(last);
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
      ++memory.corrupt_copies;
      continue;
    }
    if (last.code() != StatusCode::kUnavailable && last.code() != StatusCode::kNotFound) {
      return finished(last);
    }
    if (last.code() == StatusCode::kUnavailable) {
      all_not_found = false;
      memory.unreachable.push_back(location.address);
    }
  }
  if (emitted && !reset) return finished(last);
  if (emitted) reset();
  if (replaced) return {Next::kRestart};
  location_cache_.Forget(id);
  // A remembered digest or remembered locations that are stale (moved, removed, or their
  // worker failed): ask the master, which is not a restart.
  if (stale_digest || from_cache) return {Next::kAskMaster};
  const std::string block = id.ToString();
  if (memory.corrupt_copies > 0 && all_not_found) {
    return finished(DataLossError("block " + block + " is corrupt on every copy (" +
                                  std::to_string(memory.corrupt_copies) +
                                  " found corrupt); last error: " + last.message()));
  }
  if (all_not_found) {
    return finished(NotFoundError("block " + block + " is not stored on any live worker"));
  }
  return finished(UnavailableError("cannot read block " + block + " from any of its " +
                                   std::to_string(locations.size()) +
                                   " locations; last error: " + last.message()));
}

std::optional<Result<LocalBlockRead>> Client::Impl::ReadLocally(const BlockLocation& location,
                                                                const BlockId& id) {
  Result<std::shared_ptr<LocalReadConnection>> connection = local_reads_.For(location.address);
  // The worker did not answer at all: reading it over TCP would wait as long again.
  if (!connection.ok()) return Result<LocalBlockRead>(connection.status());
  if (*connection == nullptr) return std::nullopt;
  // A block not yet in shared memory is copied there first (by the worker, at memory speed on a
  // loaded machine); its reader waits for that on top of the timeout, 1 s per 256 MiB.
  const auto copy_allowance = std::chrono::milliseconds(location.size / (256 * 1024));
  Result<LocalBlockRead> read = (*connection)->Get(id, copy_allowance);
  if (read.ok()) return read;
  if ((*connection)->broken()) {
    local_reads_.Failed(location.address);
    // No answer on the socket within the timeout: the worker is stopped or stuck.
    if (read.status().code() == StatusCode::kUnavailable) return read;
  }
  // The worker's own answers stand (not stored there, not allowed, corrupt); anything else
  // (no room to map a disk block, the block changing as it was shared) is read over TCP.
  const StatusCode code = read.status().code();
  if (code == StatusCode::kNotFound || code == StatusCode::kPermissionDenied ||
      code == StatusCode::kDataLoss) {
    return read;
  }
  spdlog::debug("local read of {} from {} failed ({}); reading over TCP", id.ToString(),
                location.worker_id, read.status().ToString());
  return std::nullopt;
}

RangeReader::Outcome Client::Impl::ReadFrom(const BlockLocation& location, const BlockId& id,
                                            const ByteSink& sink) {
  using Fault = RangeReader::Outcome::Fault;
  if (std::optional<Result<LocalBlockRead>> local = ReadLocally(location, id)) {
    if (!local->ok()) {
      const Status status = WithPeer(local->status(), "worker " + location.worker_id);
      // The worker found its copy corrupt as it shared it: handled as bytes failing their
      // digests over TCP are (ReadCopy has the worker verify, and so drop, the copy).
      const bool corrupt = local->status().code() == StatusCode::kDataLoss;
      return {status, corrupt ? Fault::kCorruptCopy : Fault::kPeer, false};
    }
    const std::vector<uint64_t>& units = (*local)->unit_digests;
    if (location.block_digest != 0 && !units.empty() &&
        BlockDigestOf(units) != location.block_digest) {
      // Another version than the one located (a stale remembered location, or replaced since
      // the master answered): as for a TCP read, the caller asks the master again.
      return {DataLossError("block " + id.ToString() + " on worker " + location.worker_id +
                            " is not the version located"),
              Fault::kWrongBlockDigest, false};
    }
    bool emitted = false;
    for (const ChunkPtr& chunk : (*local)->data.chunks) {
      if (chunk->size() == 0) continue;
      emitted = true;
      if (Status written = sink(chunk->bytes()); !written.ok()) {
        return {written, Fault::kSink, emitted};
      }
    }
    return {(*local)->data.size, Fault::kNone, emitted};
  }
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

}  // namespace bm
