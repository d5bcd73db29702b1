#include "client/master_client.h"

#include <algorithm>
#include <ctime>
#include <optional>
#include <thread>
#include <utility>

#include "client/reply_decoding.h"
#include "common/core/protocol.h"
#include "common/core/utc_time.h"
#include "common/net/transport.h"
#include "common/zookeeper/leader_directory.h"
#include "transfer/peer_calls.h"

namespace bm {
namespace {

using reply_decoding::ToBlockLocation;
using reply_decoding::ToStdString;

// The master waits for the workers before it answers a removal.
constexpr std::chrono::milliseconds kRemoveSlack{5000};

struct NotLeaderHint {
  std::string leader;
  uint64_t epoch = 0;
};

WorkerInfo ToWorkerInfo(proto::WorkerInfo::Reader reader) {
  const WorkerStats stats = FromProto(reader.getStats());
  WorkerInfo info;
  info.id = ToStdString(reader.getWorkerId());
  info.address = ToStdString(reader.getAddress());
  info.memory_capacity = stats.memory_capacity;
  info.memory_used = stats.memory_used;
  info.memory_pinned = stats.memory_pinned;
  info.disk_used = stats.disk_used;
  info.disk_capacity = stats.disk_capacity;
  info.disk_read_only = stats.disk_read_only;
  info.block_count = stats.block_count;
  for (const DiskStats& disk : stats.disks) {
    info.disks.push_back(WorkerDiskInfo{disk.path, disk.used, disk.capacity, disk.limit,
                                        DiskStateName(disk.state), disk.reason});
  }
  info.last_heartbeat_age_ms = reader.getLastHeartbeatAgeMs();
  info.host = ToStdString(reader.getHost());
  info.rack = ToStdString(reader.getRack());
  info.public_key = ToStdString(reader.getPublicKey());
  switch (reader.getState()) {
    case proto::WorkerState::ACTIVE:
      info.state = WorkerState::kActive;
      break;
    case proto::WorkerState::UNCONFIRMED:
      info.state = WorkerState::kUnconfirmed;
      break;
    case proto::WorkerState::DECOMMISSIONING:
      info.state = WorkerState::kDecommissioning;
      break;
    default:
      info.state = WorkerState::kUnknown;
      break;
  }
  return info;
}

std::string Text(capnp::Text::Reader text) { return std::string(text.cStr(), text.size()); }

}  // namespace

Result<LostBlockInfo> ToLostBlockInfo(proto::LostBlockRecord::Reader record) {
  Result<BlockId> id = ParseWireBlockId(record.getBlockId());
  if (!id.ok()) return InternalError("master sent a malformed block id: " + id.status().message());
  return LostBlockInfo{*id,
                       record.getVersion(),
                       record.getSize(),
                       FromProto(record.getLevel()),
                       record.getLostAtMs(),
                       std::string(LostCauseName(FromProto(record.getCause()))),
                       Text(record.getDetail()),
                       Text(record.getWorkerId())};
}

std::string LostBlockMessage(const LostBlockInfo& lost) {
  std::string out = "lost: " + FormatUtcTime(lost.lost_at_ms) + ", " + lost.reason;
  if (!lost.detail.empty()) out += " (" + lost.detail + ")";
  out += "; block " + lost.block.ToString() + " (" + std::to_string(lost.size) + " bytes, " +
         std::string(StorageLevelName(lost.level)) + ")";
  if (!lost.worker_id.empty()) out += " had its last copy on worker " + lost.worker_id;
  return out;
}

namespace {

Status ToBlockLocations(capnp::List<proto::BlockLocations>::Reader list,
                        std::vector<BlockLocations>* out) {
  out->reserve(list.size());
  for (proto::BlockLocations::Reader entry : list) {
    Result<BlockId> id = ParseWireBlockId(entry.getBlockId());
    if (!id.ok())
      return InternalError("master sent a malformed block id: " + id.status().message());
    BlockLocations block{*id, FromProto(entry.getLevel()), {}, entry.getDigest()};
    if (entry.hasLost()) {
      BM_ASSIGN_OR_RETURN(LostBlockInfo lost, ToLostBlockInfo(entry.getLost()));
      block.lost = std::move(lost);
    }
    block.locations.reserve(entry.getLocations().size());
    for (proto::Location::Reader location : entry.getLocations()) {
      block.locations.push_back(ToBlockLocation(location));
      block.locations.back().block_digest = block.digest;
    }
    out->push_back(std::move(block));
  }
  return Status::Ok();
}

}  // namespace

MasterClient::MasterClient(zmq::context_t& context, std::string address,
                           std::chrono::milliseconds timeout, Result<ChannelSecurity> security,
                           std::chrono::milliseconds leader_wait,
                           Result<std::shared_ptr<const LeaderDirectory>> directory)
    : context_(context),
      masters_(!directory.ok() ? Result<MasterAddresses>(directory.status())
               : address.empty() && *directory
                   ? Result<MasterAddresses>(UnavailableError("no leader known through ZooKeeper"))
                   : MasterAddresses::Parse(address)),
      timeout_(timeout),
      leader_wait_(leader_wait),
      security_(std::move(security)),
      directory_(directory.ok() ? *directory : nullptr) {}

MasterClient::~MasterClient() = default;

bool MasterClient::FollowDirectory(std::chrono::milliseconds wait) {
  if (!directory_) return masters_.ok();
  std::optional<LeaderRecord> leader =
      masters_.ok() ? directory_->Current() : directory_->WaitForLeader(0, wait);
  // Only news: a leader already followed is not gone back to after notLeader or a failure
  // moved on from it (ZooKeeper may be slow to see it gone, or this client cut off from it).
  if (leader && leader->epoch > directory_epoch_) {
    directory_epoch_ = leader->epoch;
    if (masters_.ok()) {
      masters_->FollowHint(leader->address);
    } else if (Result<MasterAddresses> known = MasterAddresses::Parse(leader->address);
               known.ok()) {
      masters_ = std::move(known);
    }
  }
  return masters_.ok();
}

Result<IncomingMessage> MasterClient::Call(capnp::MallocMessageBuilder& request,
                                           std::chrono::milliseconds extra) {
  BM_RETURN_IF_ERROR(security_.status());
  if (!FollowDirectory(leader_wait_)) {
    if (!directory_) return masters_.status();
    return UnavailableError(masters_.status().message() + " within " +
                            std::to_string(leader_wait_.count()) +
                            " ms (ZooKeeper unreachable, or no master elected)");
  }
  MasterAddresses& masters = *masters_;
  const auto deadline = std::chrono::steady_clock::now() + leader_wait_;
  // Between rounds of tries while no master leads (an election takes a ZooKeeper session's
  // timeout): short against the seconds a failover takes.
  constexpr std::chrono::milliseconds kPause{50};
  bool redirected = false;
  while (true) {
    if (!channel_ || channel_->address() != masters.current()) {
      BM_ASSIGN_OR_RETURN(channel_,
                          ConnectChannel(context_, masters.current(), timeout_, *security_));
    }
    Result<IncomingMessage> reply = CallPeer(*channel_, timeout_, "master", request, {}, extra);
    Status failed;
    if (reply.ok()) {
      std::optional<NotLeaderHint> not_leader;
      BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
        proto::Reply::Reader r = reply->reply();
        if (r.isNotLeader()) {
          not_leader = NotLeaderHint{ToStdString(r.getNotLeader().getLeaderAddress()),
                                     r.getNotLeader().getEpoch()};
        }
        return Status::Ok();
      }));
      if (!not_leader) return reply;
      failed = UnavailableError("master " + masters.current() + " is a standby and " +
                                (not_leader->leader.empty()
                                     ? std::string("knows no leader yet")
                                     : "says " + not_leader->leader + " leads (epoch " +
                                           std::to_string(not_leader->epoch) + ")"));
      redirected = true;
      if (masters.FollowHint(not_leader->leader)) continue;  // at once
      masters.Rotate();
    } else if (reply.status().code() == StatusCode::kUnavailable &&
               (masters.several() || redirected || directory_)) {
      failed = reply.status();
      masters.Rotate();
    } else {
      return reply;
    }
    // ZooKeeper's word on who leads beats the next in the list.
    FollowDirectory({});
    if (std::chrono::steady_clock::now() + kPause >= deadline) {
      return UnavailableError("no master leads among " + masters.ToString() + " after " +
                              std::to_string(leader_wait_.count()) + " ms: " + failed.message());
    }
    std::this_thread::sleep_for(kPause);
  }
}

Result<uint64_t> MasterClient::Remove(const std::vector<BlockId>& ids) {
  capnp::MallocMessageBuilder message;
  auto list = message.initRoot<proto::Request>().initRemoveBlocks().initBlockIds(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) list.set(i, ids[i].ToString());
  BM_ASSIGN_OR_RETURN(IncomingMessage reply, Call(message, kRemoveSlack));
  uint64_t removed = 0;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::Reply::Reader r = reply.reply();
    if (!r.isRemoved()) return UnexpectedReply("master", "removed");
    removed = r.getRemoved();
    return Status::Ok();
  }));
  return removed;
}

Result<uint64_t> MasterClient::RemoveRdd(uint64_t rdd_id) {
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Request>().initRemoveRdd().setRddId(rdd_id);
  BM_ASSIGN_OR_RETURN(IncomingMessage reply, Call(message, kRemoveSlack));
  uint64_t removed = 0;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::Reply::Reader r = reply.reply();
    if (!r.isRemoved()) return UnexpectedReply("master", "removed");
    removed = r.getRemoved();
    return Status::Ok();
  }));
  return removed;
}

Result<std::vector<BlockLocations>> MasterClient::Locations(const std::vector<BlockId>& ids) {
  // Asked in batches, so neither a request nor its answer nears the header limit however many
  // ids are asked for (an answer of 10,000 blocks with a copy each is about 1 MB).
  constexpr size_t kIdsPerRequest = 10000;
  std::vector<BlockLocations> out;
  out.reserve(ids.size());
  for (size_t first = 0; first < ids.size(); first += kIdsPerRequest) {
    const size_t n = std::min(kIdsPerRequest, ids.size() - first);
    capnp::MallocMessageBuilder message;
    auto list = message.initRoot<proto::Request>().initGetLocations().initBlockIds(n);
    for (size_t i = 0; i < n; ++i) list.set(i, ids[first + i].ToString());
    BM_ASSIGN_OR_RETURN(IncomingMessage reply, Call(message));
    const size_t before = out.size();
    BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
      proto::Reply::Reader r = reply.reply();
      if (!r.isLocations()) return UnexpectedReply("master", "locations");
      return ToBlockLocations(r.getLocations(), &out);
    }));
    if (out.size() - before != n) {
      return InternalError("master answered " + std::to_string(out.size() - before) +
                           " entries for " + std::to_string(n) + " blocks");
    }
  }
  return out;
}

Result<std::vector<LostBlockInfo>> MasterClient::LostBlocks() {
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Request>().initListBlocks().setLost();
  BM_ASSIGN_OR_RETURN(IncomingMessage reply, Call(message));
  std::vector<LostBlockInfo> out;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::Reply::Reader r = reply.reply();
    if (!r.isLostBlocks()) return UnexpectedReply("master", "lostBlocks");
    for (proto::LostBlockRecord::Reader record : r.getLostBlocks()) {
      BM_ASSIGN_OR_RETURN(LostBlockInfo lost, ToLostBlockInfo(record));
      out.push_back(std::move(lost));
    }
    return Status::Ok();
  }));
  return out;
}

Result<std::vector<WorkerInfo>> MasterClient::Workers() {
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Request>().setListWorkers();
  BM_ASSIGN_OR_RETURN(IncomingMessage reply, Call(message));
  std::vector<WorkerInfo> out;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::Reply::Reader r = reply.reply();
    if (!r.isWorkers()) return UnexpectedReply("master", "workers");
    for (proto::WorkerInfo::Reader worker : r.getWorkers()) out.push_back(ToWorkerInfo(worker));
    return Status::Ok();
  }));
  return out;
}

Status MasterClient::ForEachBlockPage(
    std::optional<uint64_t> rdd_id,
    const std::function<Status(const std::vector<BlockLocations>&)>& visit, uint32_t page_size) {
  std::string after;
  while (true) {
    capnp::MallocMessageBuilder message;
    proto::ListBlocks::Builder list = message.initRoot<proto::Request>().initListBlocks();
    if (rdd_id) {
      list.setRddId(*rdd_id);
    } else {
      list.setAll();
    }
    list.setAfter(after);
    list.setLimit(std::max<uint32_t>(page_size, 1));
    BM_ASSIGN_OR_RETURN(IncomingMessage reply, Call(message));
    std::vector<BlockLocations> page;
    bool more = false;
    BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
      proto::Reply::Reader r = reply.reply();
      if (!r.isBlockPage()) return UnexpectedReply("master", "blockPage");
      more = r.getBlockPage().getMore();
      return ToBlockLocations(r.getBlockPage().getBlocks(), &page);
    }));
    if (page.empty()) return Status::Ok();
    after = page.back().block.ToString();
    BM_RETURN_IF_ERROR(visit(page));
    if (!more) return Status::Ok();
  }
}

Result<std::vector<RddInfo>> MasterClient::Rdds() {
  // Page by page (PROTOCOL.md, "Listing many blocks"), so no reply outgrows the header limit.
  std::vector<RddInfo> out;
  uint64_t start_at = 0;
  while (true) {
    capnp::MallocMessageBuilder message;
    message.initRoot<proto::Request>().initListRddPage().setStartAt(start_at);
    BM_ASSIGN_OR_RETURN(IncomingMessage reply, Call(message));
    bool more = false;
    BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
      proto::Reply::Reader r = reply.reply();
      if (!r.isRddPage()) return UnexpectedReply("master", "rddPage");
      more = r.getRddPage().getMore();
      for (proto::RddInfo::Reader rdd : r.getRddPage().getRdds()) {
        RddInfo info;
        info.rdd_id = rdd.getRddId();
        info.name = ToStdString(rdd.getName());
        info.level = FromProto(rdd.getLevel());
        info.total_partitions = rdd.getTotalPartitions();
        info.cached_partitions = rdd.getCachedPartitions();
        info.memory_bytes = rdd.getMemoryBytes();
        info.disk_bytes = rdd.getDiskBytes();
        for (capnp::Text::Reader worker : rdd.getWorkers())
          info.workers.push_back(ToStdString(worker));
        out.push_back(std::move(info));
      }
      return Status::Ok();
    }));
    if (!more || out.empty() || out.back().rdd_id == UINT64_MAX) return out;
    if (out.back().rdd_id < start_at) return InternalError("the master's RDD pages went backwards");
    start_at = out.back().rdd_id + 1;
  }
}

Status MasterClient::CallForOk(capnp::MallocMessageBuilder& request) {
  BM_ASSIGN_OR_RETURN(IncomingMessage reply, Call(request));
  return ReadGuarded([&]() -> Status {
    return reply.reply().isOk() ? Status::Ok() : UnexpectedReply("master", "ok");
  });
}

Status MasterClient::RegisterRdd(uint64_t rdd_id, const std::string& name, StorageLevel level,
                                 uint64_t total_partitions) {
  capnp::MallocMessageBuilder message;
  proto::RegisterRdd::Builder rdd = message.initRoot<proto::Request>().initRegisterRdd();
  rdd.setRddId(rdd_id);
  rdd.setName(name);
  rdd.setLevel(ToProto(level));
  rdd.setTotalPartitions(total_partitions);
  return CallForOk(message);
}

Status MasterClient::Decommission(const std::string& worker_id) {
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Request>().initDecommissionWorker().setWorkerId(worker_id);
  return CallForOk(message);
}

Status MasterClient::Share(const std::string& dataset, const std::string& tenant, bool unshare) {
  capnp::MallocMessageBuilder message;
  proto::ShareDataset::Builder share = message.initRoot<proto::Request>().initShareDataset();
  share.setDataset(dataset);
  share.setTenant(tenant);
  share.setUnshare(unshare);
  return CallForOk(message);
}

Status MasterClient::SetQuota(const std::string& tenant, uint64_t memory_bytes, uint64_t disk_bytes,
                              bool remove) {
  capnp::MallocMessageBuilder message;
  proto::SetQuota::Builder quota = message.initRoot<proto::Request>().initSetQuota();
  quota.setTenant(tenant);
  quota.setMemoryBytes(memory_bytes);
  quota.setDiskBytes(disk_bytes);
  quota.setRemove(remove);
  return CallForOk(message);
}

Result<std::vector<TenantInfo>> MasterClient::Tenants() {
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Request>().setListTenants();
  BM_ASSIGN_OR_RETURN(IncomingMessage reply, Call(message));
  std::vector<TenantInfo> out;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::Reply::Reader r = reply.reply();
    if (!r.isTenants()) return UnexpectedReply("master", "tenants");
    for (proto::TenantInfo::Reader tenant : r.getTenants()) {
      out.push_back(TenantInfo{.tenant = ToStdString(tenant.getTenant()),
                               .memory_bytes = tenant.getMemoryBytes(),
                               .disk_bytes = tenant.getDiskBytes(),
                               .memory_quota = tenant.getMemoryQuota(),
                               .disk_quota = tenant.getDiskQuota(),
                               .reserved_bytes = tenant.getReservedBytes(),
                               .datasets = tenant.getDatasets()});
    }
    return Status::Ok();
  }));
  return out;
}

Status MasterClient::Ping() {
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Request>().setPing();
  return CallForOk(message);
}

}  // namespace bm

namespace bm {

std::vector<MasterInfo> MasterClient::Masters() {
  FollowDirectory(leader_wait_);
  std::vector<MasterInfo> out;
  // ZooKeeper names the leader, and lists every master standing in the election: the standbys
  // too, which no master's answer names.
  std::vector<CandidateRecord> candidates;
  if (directory_) {
    Result<std::vector<CandidateRecord>> read =
        LeaderDirectory::ReadCandidates(directory_->address(), timeout_);
    if (read.ok()) {
      candidates = std::move(read).value();
    } else {
      MasterInfo unlisted;
      unlisted.address = "zookeeper://" + directory_->address().hosts;
      unlisted.error = "cannot list the masters' candidate znodes: " + read.status().ToString();
      out.push_back(std::move(unlisted));
    }
  }
  std::vector<std::string> addresses;
  if (masters_.ok()) addresses = masters_->all();
  for (const CandidateRecord& candidate : candidates) {
    if (std::find(addresses.begin(), addresses.end(), candidate.address) == addresses.end()) {
      addresses.push_back(candidate.address);
    }
  }
  if (addresses.empty()) {
    MasterInfo unusable;
    unusable.error =
        masters_.ok() ? "no master stands in the election" : masters_.status().ToString();
    out.push_back(std::move(unusable));
    return out;
  }
  for (size_t i = 0; i < addresses.size(); ++i) {
    MasterInfo info;
    info.address = addresses[i];
    // Named, should it not answer.
    for (const CandidateRecord& candidate : candidates) {
      if (candidate.address == info.address) info.id = candidate.id;
    }
    Result<IncomingMessage> reply = [&]() -> Result<IncomingMessage> {
      BM_RETURN_IF_ERROR(security_.status());
      BM_ASSIGN_OR_RETURN(std::unique_ptr<RpcChannel> channel,
                          ConnectChannel(context_, addresses[i], timeout_, *security_));
      capnp::MallocMessageBuilder message;
      message.initRoot<proto::Request>().setMasterInfo();
      return CallPeer(*channel, timeout_, "master", message);
    }();
    Status read = reply.status();
    if (reply.ok()) {
      read = ReadGuarded([&]() -> Status {
        proto::Reply::Reader r = reply->reply();
        if (!r.isMaster()) return UnexpectedReply("master", "master");
        proto::MasterInfo::Reader m = r.getMaster();
        info.id = ToStdString(m.getId());
        info.leader = m.getLeader();
        info.epoch = m.getEpoch();
        info.leader_address = ToStdString(m.getLeaderAddress());
        info.journal_sequence = m.getJournalSequence();
        info.in_sync = m.getInSync();
        return Status::Ok();
      });
    }
    if (!read.ok()) info.error = read.ToString();
    // A leader named but not listed is asked too.
    if (!info.leader_address.empty() &&
        std::find(addresses.begin(), addresses.end(), info.leader_address) == addresses.end()) {
      addresses.push_back(info.leader_address);
    }
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace bm
