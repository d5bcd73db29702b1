#include "master/client_queries.h"

#include <algorithm>
#include <iterator>
#include <string>

#include "common/security/tenant.h"
#include "master/request_decoding.h"

namespace bm {
namespace {

// RDDs in one listRddPage page at most: a few hundred bytes each with their workers' ids.
constexpr uint32_t kRddsPerPage = 10000;
// Blocks in one listBlocks page at most: ~1 MB of reply, and one pass over the index each.
constexpr size_t kMaxBlockPage = 10000;
// Lost blocks in one listBlocks(lost) reply at most, the newest: ~1-5 MB of reply.
constexpr size_t kMaxLostListed = 10000;

}  // namespace

void FillLostRecord(const LostRecord& record, proto::LostBlockRecord::Builder out) {
  out.setBlockId(record.id.ToString());
  out.setVersion(record.version);
  out.setSize(record.size);
  out.setLevel(ToProto(record.level));
  out.setLostAtMs(record.lost_at_ms);
  out.setCause(ToProto(record.cause));
  out.setDetail(record.detail);
  out.setWorkerId(record.worker_id);
}

void ClientQueries::FillBlockLocations(const BlockId& id, const std::optional<BlockInfo>& info,
                                       proto::BlockLocations::Builder out) const {
  out.setBlockId(id.ToString());
  if (!info) {
    out.initLocations(0);
    if (const LostRecord* lost = lost_.Find(id)) FillLostRecord(*lost, out.initLost());
    return;
  }
  out.setLevel(ToProto(info->level));
  out.setDigest(info->digest);
  auto locations = out.initLocations(info->locations.size());
  for (size_t i = 0; i < info->locations.size(); ++i) {
    const IndexedLocation& location = info->locations[i];
    const WorkerRecord* worker = registry_.Find(location.worker_id);
    BM_CHECK(worker != nullptr);  // locations exist only on registered workers
    locations[i].setWorkerId(location.worker_id);
    locations[i].setAddress(worker->address);
    locations[i].setTier(ToProto(location.tier));
    locations[i].setSize(location.size);
    if (const std::string& key = links_.Key(location.worker_id); !key.empty()) {
      locations[i].setPublicKey(key);
    }
  }
}

// The hot path of workload 5 (bench/README.md): nothing here allocates per block. The reply
// echoes each id's request text, which is the id's ToString() (a parsed id is canonical:
// BlockId::Parse rejects anything ToString() would not print), and a worker's address is
// looked up once per run of locations on the same worker.
Status ClientQueries::GetLocations(proto::GetLocations::Reader request,
                                   proto::Reply::Builder reply) {
  capnp::List<capnp::Text>::Reader texts = request.getBlockIds();
  BM_ASSIGN_OR_RETURN(std::vector<BlockId> ids, DecodeBlockIds(texts));
  auto out = reply.initLocations(ids.size());
  const std::string* last_worker_id = nullptr;
  const WorkerRecord* last_worker = nullptr;
  // At 1M+ blocks every lookup is a cache miss; fetching a few ids ahead overlaps them.
  constexpr size_t kPrefetchAhead = 8;
  for (size_t i = 0; i < std::min(kPrefetchAhead, ids.size()); ++i) index_.Prefetch(ids[i]);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i + kPrefetchAhead < ids.size()) index_.Prefetch(ids[i + kPrefetchAhead]);
    out[i].setBlockId(texts[i]);
    uint64_t digest = 0;
    std::optional<StorageLevel> level = index_.FindLocations(ids[i], &lookup_scratch_, &digest);
    if (!level) {
      out[i].initLocations(0);
      if (const LostRecord* lost = lost_.Find(ids[i])) FillLostRecord(*lost, out[i].initLost());
      continue;
    }
    out[i].setLevel(ToProto(*level));
    out[i].setDigest(digest);
    auto locations = out[i].initLocations(lookup_scratch_.size());
    for (size_t l = 0; l < lookup_scratch_.size(); ++l) {
      const LocationRef& location = lookup_scratch_[l];
      // The index's worker ids are interned: the same worker is the same string object.
      if (location.worker_id != last_worker_id) {
        last_worker_id = location.worker_id;
        last_worker = registry_.Find(*location.worker_id);
        BM_CHECK(last_worker != nullptr);  // locations exist only on registered workers
      }
      locations[l].setWorkerId(*location.worker_id);
      locations[l].setAddress(last_worker->address);
      locations[l].setTier(ToProto(location.tier));
      locations[l].setSize(location.size);
      if (keys_enabled_) locations[l].setPublicKey(links_.Key(*location.worker_id));
    }
  }
  return Status::Ok();
}

void ClientQueries::ListWorkers(proto::Reply::Builder reply) const {
  const TimePoint now = clock_.Now();
  std::vector<WorkerRecord> workers = registry_.List();
  auto out = reply.initWorkers(workers.size());
  for (size_t i = 0; i < workers.size(); ++i) {
    out[i].setWorkerId(workers[i].id);
    out[i].setAddress(workers[i].address);
    ToProto(workers[i].stats, out[i].initStats());
    out[i].setLastHeartbeatAgeMs(ToMillis(now - workers[i].last_seen));
    out[i].setHost(workers[i].labels.host);
    out[i].setRack(workers[i].labels.rack);
    out[i].setState(ToProto(workers[i].state));
    out[i].setPublicKey(links_.Key(workers[i].id));
  }
}

Status ClientQueries::ListBlocks(proto::ListBlocks::Reader request, proto::Reply::Builder reply,
                                 const Visible& visible) const {
  if (request.isLost()) {
    std::vector<LostRecord> lost = lost_.Newest(kMaxLostListed);
    // A tenant's key sees only its own datasets' lost blocks.
    if (visible) {
      std::erase_if(lost, [&](const LostRecord& record) { return !visible(DatasetOf(record.id)); });
    }
    auto out = reply.initLostBlocks(static_cast<unsigned>(lost.size()));
    for (size_t i = 0; i < lost.size(); ++i) FillLostRecord(lost[i], out[static_cast<unsigned>(i)]);
    return Status::Ok();
  }
  auto hide = [&](std::vector<BlockInfo>& blocks) {
    if (visible) {
      std::erase_if(blocks, [&](const BlockInfo& block) { return !visible(DatasetOf(block.id)); });
    }
  };
  std::vector<BlockInfo> blocks;
  if (request.getLimit() > 0) {
    std::optional<uint64_t> rdd_id;
    if (request.isRddId()) {
      rdd_id = request.getRddId();
    } else if (!request.isAll()) {
      return InvalidArgumentError("unsupported listBlocks filter");
    }
    std::optional<BlockId> after;
    if (request.hasAfter() && request.getAfter().size() > 0) {
      BM_ASSIGN_OR_RETURN(BlockId parsed, ParseWireBlockId(request.getAfter()));
      after = parsed;
    }
    const size_t limit = std::min<size_t>(request.getLimit(), kMaxBlockPage);
    bool more = false;
    // Another tenant's blocks are skipped: pages are read on until `limit` visible ones are
    // found or the index ends, so `more` and the last id stay right for the lister.
    while (true) {
      std::vector<BlockInfo> read = index_.ListPage(rdd_id, after, limit - blocks.size());
      more = read.size() == limit - blocks.size();
      if (!read.empty()) after = read.back().id;
      hide(read);
      std::move(read.begin(), read.end(), std::back_inserter(blocks));
      if (!more || blocks.size() == limit) break;
    }
    proto::BlockPage::Builder page = reply.initBlockPage();
    page.setMore(more);
    auto out = page.initBlocks(blocks.size());
    for (size_t i = 0; i < blocks.size(); ++i) FillBlockLocations(blocks[i].id, blocks[i], out[i]);
    return Status::Ok();
  }
  switch (request.which()) {
    case proto::ListBlocks::ALL:
      blocks = index_.List();
      break;
    case proto::ListBlocks::RDD_ID:
      blocks = index_.ListRdd(request.getRddId());
      break;
    default:
      return InvalidArgumentError("unsupported listBlocks filter");
  }
  hide(blocks);
  // TODO(scale): one reply holds every block; past ~100k blocks it nears the header limit.
  auto out = reply.initBlocks(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) FillBlockLocations(blocks[i].id, blocks[i], out[i]);
  return Status::Ok();
}

std::map<uint64_t, RddSummary> ClientQueries::CollectRdds(const Visible& visible) const {
  std::map<uint64_t, RddSummary> rdds;
  for (RddSummary& summary : index_.RddSummaries())
    rdds.emplace(summary.rdd_id, std::move(summary));
  for (const auto& [rdd_id, description] : rdd_descriptions_) {
    RddSummary empty;
    empty.rdd_id = rdd_id;
    rdds.try_emplace(rdd_id, std::move(empty));
  }
  if (visible) {
    std::erase_if(
        rdds, [&](const auto& entry) { return !visible(DatasetOf(BlockId::Rdd(entry.first, 0))); });
  }
  return rdds;
}

void ClientQueries::FillRddInfo(uint64_t rdd_id, const RddSummary& summary,
                                proto::RddInfo::Builder out) const {
  out.setRddId(rdd_id);
  out.setCachedPartitions(summary.cached_partitions);
  out.setMemoryBytes(summary.memory_bytes);
  out.setDiskBytes(summary.disk_bytes);
  out.setLevel(ToProto(summary.level));
  auto workers = out.initWorkers(summary.workers.size());
  for (size_t w = 0; w < summary.workers.size(); ++w) workers.set(w, summary.workers[w]);
  if (auto description = rdd_descriptions_.find(rdd_id); description != rdd_descriptions_.end()) {
    out.setName(description->second.name);
    out.setLevel(ToProto(description->second.level));
    out.setTotalPartitions(description->second.total_partitions);
  }
}

void ClientQueries::ListRdds(proto::Reply::Builder reply, const Visible& visible) const {
  const std::map<uint64_t, RddSummary> rdds = CollectRdds(visible);
  auto out = reply.initRdds(rdds.size());
  size_t i = 0;
  for (const auto& [rdd_id, summary] : rdds) FillRddInfo(rdd_id, summary, out[i++]);
}

void ClientQueries::ListRddPage(proto::ListRdds::Reader request, proto::Reply::Builder reply,
                                const Visible& visible) const {
  const uint32_t limit =
      request.getLimit() == 0 ? kRddsPerPage : std::min(request.getLimit(), kRddsPerPage);
  const std::map<uint64_t, RddSummary> rdds = CollectRdds(visible);
  auto from = rdds.lower_bound(request.getStartAt());
  const size_t left = static_cast<size_t>(std::distance(from, rdds.end()));
  const size_t count = std::min<size_t>(left, limit);
  proto::RddPage::Builder page = reply.initRddPage();
  auto out = page.initRdds(static_cast<unsigned>(count));
  for (size_t i = 0; i < count; ++i, ++from) FillRddInfo(from->first, from->second, out[i]);
  page.setMore(left > count);
}

}  // namespace bm
