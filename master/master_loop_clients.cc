#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "master/master_loop.h"
#include "master/request_decoding.h"
#include "master/worker_commands.h"

// The master's loop: removals, RDD registration and compute leases.

namespace bm {
namespace {

constexpr size_t kMaxRddNameBytes = 256;
// RDD descriptions are small, but a client registering ids in a loop must not grow the master
// without bound.
constexpr size_t kMaxRegisteredRdds = 100000;
// Bounds on a compute lease and on how long the master keeps a waiting acquireCompute.
constexpr uint32_t kMinLeaseMs = 50;
constexpr uint32_t kMaxLeaseMs = 10 * 60 * 1000;
constexpr uint32_t kMaxComputeWaitMs = 60 * 1000;

}  // namespace

// ---- removals ----

void MasterServer::Loop::StartRemove(const zmq::message_t& client, uint64_t request_id,
                                     std::vector<BlockId> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  // A copy of a removed version that comes back later (its worker was away) is refused, also
  // after a master restart (the journal remembers the retired versions).
  if (journal_) {
    std::vector<std::pair<BlockId, uint64_t>> retired;
    for (const BlockId& id : ids) {
      std::optional<uint64_t> version = index_.VersionOf(id);
      if (version && *version != 0) retired.emplace_back(id, *version);
    }
    Journaled(journal_->RecordRetired(retired));
  }
  index_.RetireVersions(ids);
  const uint64_t ticket = parked_.Park(client, request_id);
  RemovalCoordinator::Started started =
      removals_.RemoveBlocks(ticket, ids.size(), index_.Holders(ids), options_.remove_timeout);
  for (const RemovalCoordinator::Command& command : started.commands) {
    BM_CHECK(links_.Contains(command.worker_id));  // every location is on a linked worker
  }
  if (started.reply) AnswerRemoval(*started.reply);
  SendRemovals(started.commands);
}

void MasterServer::Loop::RemoveCopies(const std::vector<RetiredCopy>& copies) {
  // A dropped worker removes its copies when it registers again.
  SendRemovals(removals_.RemoveCopies(copies));
}

void MasterServer::Loop::SendRemovals(const std::vector<RemovalCoordinator::Command>& commands) {
  for (const RemovalCoordinator::Command& command : commands) {
    Status sent = SendRemoveBlocks(links_, command);
    if (sent.ok()) continue;
    if (sent.code() != StatusCode::kNotFound) {
      spdlog::warn("cannot send removeBlocks to worker {}: {}", command.worker_id, sent.ToString());
    }
    if (std::optional<RemovalCoordinator::Reply> reply = removals_.Unsent(command.request_id)) {
      AnswerRemoval(*reply);
    }
  }
}

void MasterServer::Loop::AnswerRemoval(const RemovalCoordinator::Reply& answer) {
  capnp::MallocMessageBuilder message;
  proto::Reply::Builder reply = message.initRoot<proto::Reply>();
  switch (answer.kind) {
    case RemovalCoordinator::Reply::Kind::kRemoved:
      reply.setRemoved(answer.removed);
      break;
    case RemovalCoordinator::Reply::Kind::kAcknowledged:
      reply.setOk();
      break;
  }
  AnswerParked(answer.caller, message);
}

void MasterServer::Loop::AnswerRemovals(const std::vector<RemovalCoordinator::Reply>& replies) {
  for (const RemovalCoordinator::Reply& reply : replies) AnswerRemoval(reply);
}

Status MasterServer::Loop::HandleRegisterRdd(proto::RegisterRdd::Reader request,
                                             proto::Reply::Builder reply) {
  capnp::Text::Reader name = request.getName();
  if (name.size() > kMaxRddNameBytes) {
    return InvalidArgumentError("RDD name is longer than " + std::to_string(kMaxRddNameBytes) +
                                " bytes");
  }
  const uint64_t rdd_id = request.getRddId();
  if (!rdd_descriptions_.contains(rdd_id) && rdd_descriptions_.size() >= kMaxRegisteredRdds) {
    return OutOfSpaceError("the master already describes " + std::to_string(kMaxRegisteredRdds) +
                           " RDDs; remove some first");
  }
  RddDescription description{std::string(name.cStr(), name.size()), FromProto(request.getLevel()),
                             request.getTotalPartitions()};
  // A dataset persisted again must be the same dataset: its cached blocks are found by RDD id
  // and partition alone, so another name, partition count or level under the same id would
  // silently serve the old dataset's partitions (Spark refuses a level change the same way).
  if (auto known = rdd_descriptions_.find(rdd_id); known != rdd_descriptions_.end()) {
    const RddDescription& old = known->second;
    if (old.name != description.name || old.level != description.level ||
        old.total_partitions != description.total_partitions) {
      return InvalidArgumentError("RDD " + std::to_string(rdd_id) + " is already persisted as '" +
                                  old.name + "' (" + std::to_string(old.total_partitions) +
                                  " partitions, " + std::string(StorageLevelName(old.level)) +
                                  "); remove it first (bmctl rm-rdd " + std::to_string(rdd_id) +
                                  ") to persist it as '" + description.name + "' (" +
                                  std::to_string(description.total_partitions) + " partitions, " +
                                  std::string(StorageLevelName(description.level)) + ")");
    }
    reply.setOk();
    return Status::Ok();
  }
  if (journal_) {
    Journaled(journal_->RecordRdd(JournaledRdd{.rdd_id = rdd_id,
                                               .name = description.name,
                                               .level = description.level,
                                               .total_partitions = description.total_partitions}));
  }
  rdd_descriptions_.insert_or_assign(rdd_id, std::move(description));
  reply.setOk();
  return Status::Ok();
}

// ---- compute leases ----

Result<MasterServer::Loop::Answer> MasterServer::Loop::HandleAcquireCompute(
    proto::AcquireCompute::Reader request, const zmq::message_t& client, uint64_t request_id,
    proto::Reply::Builder reply) {
  BM_ASSIGN_OR_RETURN(BlockId id, ParseWireBlockId(request.getBlockId()));
  BM_ASSIGN_OR_RETURN(std::string holder,
                      DecodeName(request.getHolder(), "lease holder", kMaxHolderBytes));
  const uint32_t lease_ms = request.getLeaseMs();
  if (lease_ms < kMinLeaseMs || lease_ms > kMaxLeaseMs) {
    return InvalidArgumentError("lease of " + std::to_string(lease_ms) + " ms is outside [" +
                                std::to_string(kMinLeaseMs) + ", " + std::to_string(kMaxLeaseMs) +
                                "] ms");
  }
  const uint32_t wait_ms = std::min(request.getWaitMs(), kMaxComputeWaitMs);
  std::vector<std::string> failed_workers;
  for (capnp::Text::Reader worker : request.getFailedWorkers()) {
    failed_workers.emplace_back(worker.cStr(), worker.size());
  }

  std::optional<BlockInfo> info = index_.Find(id);
  if (info) {
    std::erase_if(info->locations, [&](const IndexedLocation& location) {
      return std::find(failed_workers.begin(), failed_workers.end(), location.worker_id) !=
             failed_workers.end();
    });
    if (!info->locations.empty()) {
      queries_.FillBlockLocations(id, info, reply.initCompute().initCached());
      return Answer::kNow;
    }
  }
  // Parked until the leases answer it, unless it is granted now.
  const uint64_t waiter = parked_.Park(client, request_id);
  std::optional<uint64_t> token = leases_.Acquire(
      ComputeLeases::Request{.block = id,
                             .holder = holder,
                             .lease = std::chrono::milliseconds(lease_ms),
                             .wait_until = clock_.Now() + std::chrono::milliseconds(wait_ms),
                             .waiter = waiter});
  if (token) {
    parked_.Take(waiter);
    JournalLeases();
    ++counters_.lease_grants;
    spdlog::debug("{} computes {}", holder, id.ToString());
    reply.initCompute().setGranted(*token);
    return Answer::kNow;
  }
  // Queued behind the holder: answered by BlocksStored, a release, or the leases' expiry.
  ++counters_.lease_waits;
  return Answer::kLater;
}

Status MasterServer::Loop::HandleRenewCompute(proto::ComputeLease::Reader request,
                                              proto::Reply::Builder reply) {
  BM_ASSIGN_OR_RETURN(BlockId id, ParseWireBlockId(request.getBlockId()));
  BM_RETURN_IF_ERROR(leases_.Renew(id, request.getToken()));
  reply.setOk();
  return Status::Ok();
}

Status MasterServer::Loop::HandleReleaseCompute(proto::ComputeLease::Reader request,
                                                proto::Reply::Builder reply) {
  BM_ASSIGN_OR_RETURN(BlockId id, ParseWireBlockId(request.getBlockId()));
  AnswerWaiters(leases_.Release(id, request.getToken()));
  reply.setOk();
  return Status::Ok();
}

void MasterServer::Loop::BlocksStored(const std::vector<BlockChange>& changes) {
  if (leases_.lease_count() == 0) return;
  for (const BlockChange& change : changes) {
    if (!change.removed) AnswerWaiters(leases_.Stored(change.id));
  }
}

void MasterServer::Loop::JournalLeases() {
  if (!journal_) return;
  std::vector<JournaledLease> held;
  std::unordered_map<BlockId, uint64_t> now;
  for (const ComputeLeases::HeldLease& lease : leases_.Held()) {
    now.emplace(lease.block, lease.token);
    auto it = journaled_leases_.find(lease.block);
    if (it == journaled_leases_.end() || it->second != lease.token) {
      held.push_back(
          {lease.block, lease.token, lease.holder, static_cast<uint64_t>(ToMillis(lease.length))});
    }
  }
  std::vector<BlockId> ended;
  for (const auto& [block, token] : journaled_leases_) {
    if (!now.contains(block)) ended.push_back(block);
  }
  if (held.empty() && ended.empty()) return;
  Journaled(journal_->RecordLeases(held, ended));
  journaled_leases_ = std::move(now);
}

void MasterServer::Loop::AnswerWaiters(std::vector<ComputeLeases::Answer> answers) {
  JournalLeases();
  for (ComputeLeases::Answer& answer : answers) {
    capnp::MallocMessageBuilder message;
    proto::ComputeReply::Builder compute = message.initRoot<proto::Reply>().initCompute();
    switch (answer.kind) {
      case ComputeLeases::Answer::Kind::kGranted:
        ++counters_.lease_grants;
        spdlog::info("{} computes {} (the lease was handed over)", answer.holder,
                     answer.block.ToString());
        compute.setGranted(answer.token);
        break;
      case ComputeLeases::Answer::Kind::kStored:
        queries_.FillBlockLocations(answer.block, index_.Find(answer.block), compute.initCached());
        break;
      case ComputeLeases::Answer::Kind::kBusy: {
        proto::ComputeBusy::Builder busy = compute.initBusy();
        busy.setHolder(answer.holder);
        busy.setLeaseLeftMs(ToMillis(answer.lease_left));
        break;
      }
    }
    AnswerParked(answer.waiter, message);
  }
}

}  // namespace bm
