#include "master/compute_lease_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>
#include <utility>

#include "master/request_decoding.h"

namespace bm {
namespace {

// Bounds on a compute lease and on how long the master keeps a waiting acquireCompute.
constexpr uint32_t kMinLeaseMs = 50;
constexpr uint32_t kMaxLeaseMs = 10 * 60 * 1000;
constexpr uint32_t kMaxComputeWaitMs = 60 * 1000;

}  // namespace

Result<ComputeLeaseService::Acquired> ComputeLeaseService::Acquire(
    proto::AcquireCompute::Reader request, uint64_t waiter, proto::Reply::Builder reply,
    LeaseEffects& effects) {
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
      return Acquired::kStored;
    }
  }
  std::optional<uint64_t> token = leases_.Acquire(
      ComputeLeases::Request{.block = id,
                             .holder = holder,
                             .lease = std::chrono::milliseconds(lease_ms),
                             .wait_until = clock_.Now() + std::chrono::milliseconds(wait_ms),
                             .waiter = waiter});
  if (!token) return Acquired::kWaiting;
  NoteJournalChanges(effects);
  spdlog::debug("{} computes {}", holder, id.ToString());
  reply.initCompute().setGranted(*token);
  return Acquired::kGranted;
}

Status ComputeLeaseService::Renew(proto::ComputeLease::Reader request,
                                  proto::Reply::Builder reply) {
  BM_ASSIGN_OR_RETURN(BlockId id, ParseWireBlockId(request.getBlockId()));
  BM_RETURN_IF_ERROR(leases_.Renew(id, request.getToken()));
  reply.setOk();
  return Status::Ok();
}

Status ComputeLeaseService::Release(proto::ComputeLease::Reader request,
                                    proto::Reply::Builder reply, LeaseEffects& effects) {
  BM_ASSIGN_OR_RETURN(BlockId id, ParseWireBlockId(request.getBlockId()));
  Answer(leases_.Release(id, request.getToken()), effects);
  reply.setOk();
  return Status::Ok();
}

void ComputeLeaseService::Stored(const std::vector<BlockChange>& changes, LeaseEffects& effects) {
  if (leases_.lease_count() == 0) return;
  for (const BlockChange& change : changes) {
    if (!change.removed) Answer(leases_.Stored(change.id), effects);
  }
}

void ComputeLeaseService::Expire(LeaseEffects& effects) {
  if (leases_.lease_count() > 0) Answer(leases_.Expire(), effects);
}

void ComputeLeaseService::Encode(const ComputeLeases::Answer& answer,
                                 proto::ComputeReply::Builder out) const {
  switch (answer.kind) {
    case ComputeLeases::Answer::Kind::kGranted:
      out.setGranted(answer.token);
      break;
    case ComputeLeases::Answer::Kind::kStored:
      queries_.FillBlockLocations(answer.block, index_.Find(answer.block), out.initCached());
      break;
    case ComputeLeases::Answer::Kind::kBusy: {
      proto::ComputeBusy::Builder busy = out.initBusy();
      busy.setHolder(answer.holder);
      busy.setLeaseLeftMs(ToMillis(answer.lease_left));
      break;
    }
  }
}

void ComputeLeaseService::Restore(const std::vector<JournaledLease>& leases) {
  for (const JournaledLease& lease : leases) {
    leases_.Restore(
        {lease.block, lease.token, lease.holder, std::chrono::milliseconds(lease.length_ms)});
    journaled_.emplace(lease.block, lease.token);
  }
}

void ComputeLeaseService::NoteJournalChanges(LeaseEffects& effects) {
  std::unordered_map<BlockId, uint64_t> now;
  for (const ComputeLeases::HeldLease& lease : leases_.Held()) {
    now.emplace(lease.block, lease.token);
    auto it = journaled_.find(lease.block);
    if (it == journaled_.end() || it->second != lease.token) {
      effects.held.push_back(
          {lease.block, lease.token, lease.holder, static_cast<uint64_t>(ToMillis(lease.length))});
    }
  }
  for (const auto& [block, token] : journaled_) {
    if (!now.contains(block)) effects.ended.push_back(block);
  }
  journaled_ = std::move(now);
}

void ComputeLeaseService::Answer(std::vector<ComputeLeases::Answer> answers,
                                 LeaseEffects& effects) {
  NoteJournalChanges(effects);
  for (ComputeLeases::Answer& answer : answers) {
    if (answer.kind == ComputeLeases::Answer::Kind::kGranted) {
      spdlog::info("{} computes {} (the lease was handed over)", answer.holder,
                   answer.block.ToString());
    }
    effects.answers.push_back(std::move(answer));
  }
}

}  // namespace bm
