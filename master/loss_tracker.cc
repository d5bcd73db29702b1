#include "master/loss_tracker.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <unordered_set>
#include <utility>

#include "common/core/protocol.h"

namespace bm {
namespace {

constexpr size_t kMaxLostDetailBytes = 512;

// "a (cause), b (cause), ..." naming at most `limit` of `items`.
template <typename Item>
std::string NameSome(const std::vector<Item>& items, size_t limit) {
  std::string named;
  for (size_t i = 0; i < std::min(items.size(), limit); ++i) {
    if (!named.empty()) named += ", ";
    named += items[i].id.ToString() + " (" + std::string(LostCauseName(items[i].cause)) + ")";
  }
  if (items.size() > limit) named += ", ...";
  return named;
}

void LogLosses(const std::string& worker_id, const std::vector<WorkerLoss>& losses) {
  if (losses.empty()) return;
  spdlog::warn("worker {} lost {} blocks: {}; restoring their copies", worker_id, losses.size(),
               NameSome(losses, 20));
}

void AddChanges(LostBlocks::Changes changes, LossEffects& effects) {
  if (!changes.empty()) effects.lost.push_back(std::move(changes));
}

}  // namespace

Result<std::vector<WorkerLoss>> DecodeLosses(capnp::List<capnp::Text>::Reader names,
                                             capnp::List<proto::LostCopy>::Reader copies) {
  std::vector<WorkerLoss> losses;
  if (copies.size() > 0) {
    losses.reserve(copies.size());
    for (proto::LostCopy::Reader copy : copies) {
      BM_ASSIGN_OR_RETURN(BlockId id, ParseWireBlockId(copy.getBlockId()));
      capnp::Text::Reader detail = copy.getDetail();
      losses.push_back(WorkerLoss{
          id, FromProto(copy.getCause()),
          std::string(detail.cStr(), std::min<size_t>(detail.size(), kMaxLostDetailBytes)),
          copy.getVersion()});
    }
    return losses;
  }
  // A worker from before causes were sent: the cause is unknown.
  losses.reserve(names.size());
  for (capnp::Text::Reader name : names) {
    BM_ASSIGN_OR_RETURN(BlockId id, ParseWireBlockId(name));
    losses.push_back(WorkerLoss{id, LostCause::kStorageError, "", 0});
  }
  return losses;
}

LossTracker::LossTracker(BlockIndex& index, size_t records_kept,
                         std::function<uint64_t()> wall_clock_ms)
    : index_(index), wall_clock_ms_(std::move(wall_clock_ms)), lost_(records_kept) {}

uint64_t LossTracker::SystemMillis() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

LossEffects LossTracker::LossesReported(const std::string& worker_id,
                                        const std::vector<WorkerLoss>& losses,
                                        const std::vector<GoneBlock>& gone_now) {
  LossEffects effects;
  LogLosses(worker_id, losses);
  ReportedWithoutLog(worker_id, losses, gone_now, effects);
  return effects;
}

void LossTracker::ReportedWithoutLog(const std::string& worker_id,
                                     const std::vector<WorkerLoss>& losses,
                                     const std::vector<GoneBlock>& gone_now, LossEffects& effects) {
  if (losses.empty()) return;
  std::unordered_map<BlockId, const WorkerLoss*> by_id;
  by_id.reserve(losses.size());
  for (const WorkerLoss& loss : losses) by_id.insert_or_assign(loss.id, &loss);
  // The copies whose last location this message's removals dropped.
  std::vector<GoneBlock> lost;
  for (const GoneBlock& block : gone_now) {
    auto it = by_id.find(block.id);
    if (it == by_id.end()) continue;  // removed, evicted: not lost
    lost.push_back(block);
    by_id.erase(it);
  }
  LostBlocks::Changes refined;
  for (const WorkerLoss& loss : losses) {
    if (!by_id.contains(loss.id)) continue;
    by_id.erase(loss.id);
    std::optional<BlockInfo> info = index_.Find(loss.id);
    const bool here = info && std::any_of(info->locations.begin(), info->locations.end(),
                                          [&](const IndexedLocation& location) {
                                            return location.worker_id == worker_id;
                                          });
    if (here) {
      // The lost report came ahead of the copy's removal (a report carries a bounded number of
      // each): the report is the removal.
      BlockChange removal{loss.id};
      removal.removed = true;
      removal.version = loss.version;
      ApplyResult applied = index_.Apply(worker_id, removal);
      if (!applied.removal_ignored) {
        effects.removed.push_back(RetiredCopy{worker_id, loss.id, loss.version});
      }
      if (applied.last_copy) lost.push_back(*applied.last_copy);
      continue;
    }
    if (!info) {
      // Recorded lost already for a reason of the master's own (its worker was dropped, or
      // came back without it): the worker's cause is the more precise.
      LostBlocks::Changes one = lost_.Refine(loss.id, loss.version, loss.cause, loss.detail);
      refined.recorded.insert(refined.recorded.end(), one.recorded.begin(), one.recorded.end());
    }
  }
  AddChanges(std::move(refined), effects);
  std::unordered_map<BlockId, const WorkerLoss*> cause_of;
  for (const WorkerLoss& loss : losses) cause_of.insert_or_assign(loss.id, &loss);
  RecordLost(
      worker_id, std::move(lost), [&](const BlockId& id) { return *cause_of.at(id); }, effects);
  effects.check_copies = true;
}

LossEffects LossTracker::WorkerRegistered(const std::string& worker_id, std::vector<GoneBlock> gone,
                                          const std::vector<BlockId>& recorded,
                                          const std::vector<WorkerLoss>& losses, bool started_now,
                                          uint64_t follow_ups) {
  LossEffects effects;
  std::unordered_set<BlockId> held(recorded.begin(), recorded.end());
  std::erase_if(gone, [&](const GoneBlock& block) { return held.contains(block.id); });
  std::unordered_map<BlockId, WorkerLoss> causes;
  for (const WorkerLoss& loss : losses) causes.insert_or_assign(loss.id, loss);
  std::vector<WorkerLoss> others;  // not about a block gone just now
  std::unordered_set<BlockId> gone_ids;
  for (const GoneBlock& block : gone) gone_ids.insert(block.id);
  for (const WorkerLoss& loss : losses) {
    if (!gone_ids.contains(loss.id) && !held.contains(loss.id)) others.push_back(loss);
  }
  LogLosses(worker_id, losses);
  ReportedWithoutLog(worker_id, others, {}, effects);
  // Restore other copies of what it lost at the next turn.
  if (!losses.empty()) effects.check_copies = true;
  if (!started_now) {
    // Registered again after losing its master: blocks it no longer holds were removed or
    // evicted meanwhile, except those it reported lost.
    std::erase_if(gone, [&](const GoneBlock& block) { return !causes.contains(block.id); });
    follow_ups = 0;
  }
  PendingRestart& pending = pending_restarts_[worker_id];
  pending = PendingRestart{};
  for (GoneBlock& block : gone) pending.missing.insert_or_assign(block.id, std::move(block));
  pending.losses = std::move(causes);
  pending.follow_ups = follow_ups;
  if (follow_ups == 0) JudgeRestart(worker_id, effects);
  return effects;
}

LossEffects LossTracker::FollowUpsReported(const std::string& worker_id,
                                           const std::vector<BlockChange>& changes) {
  LossEffects effects;
  auto it = pending_restarts_.find(worker_id);
  if (it == pending_restarts_.end()) return effects;
  PendingRestart& pending = it->second;
  for (size_t i = 0; i < changes.size() && pending.follow_ups > 0; ++i) {
    pending.missing.erase(changes[i].id);
    --pending.follow_ups;
  }
  if (pending.follow_ups == 0) JudgeRestart(worker_id, effects);
  return effects;
}

void LossTracker::JudgeRestart(const std::string& worker_id, LossEffects& effects) {
  auto it = pending_restarts_.find(worker_id);
  if (it == pending_restarts_.end()) return;
  PendingRestart pending = std::move(it->second);
  pending_restarts_.erase(it);
  std::vector<GoneBlock> gone;
  gone.reserve(pending.missing.size());
  for (auto& [id, block] : pending.missing) {
    // Stored again meanwhile (a new put elsewhere): not lost.
    if (!index_.VersionOf(id)) gone.push_back(std::move(block));
  }
  std::sort(gone.begin(), gone.end(),
            [](const GoneBlock& a, const GoneBlock& b) { return a.id < b.id; });
  RecordLost(
      worker_id, std::move(gone),
      [&](const BlockId& id) {
        auto loss = pending.losses.find(id);
        if (loss != pending.losses.end()) return loss->second;
        return WorkerLoss{id, LostCause::kWorkerRestarted,
                          "not in its block report after it restarted"};
      },
      effects);
}

LossEffects LossTracker::WorkerDropped(const std::string& worker_id, std::vector<GoneBlock> gone,
                                       const std::string& detail) {
  LossEffects effects;
  RecordLost(
      worker_id, std::move(gone),
      [&](const BlockId& block) {
        return WorkerLoss{block, LostCause::kWorkerDropped, detail};
      },
      effects);
  return effects;
}

void LossTracker::RecordLost(const std::string& worker_id, std::vector<GoneBlock> gone,
                             const std::function<WorkerLoss(const BlockId&)>& why,
                             LossEffects& effects) {
  if (gone.empty()) return;
  const uint64_t now_ms = wall_clock_ms_();
  std::vector<LostRecord> records;
  records.reserve(gone.size());
  for (const GoneBlock& block : gone) {
    WorkerLoss loss = why(block.id);
    records.push_back(LostRecord{block.id, block.version, block.size, block.level, now_ms,
                                 loss.cause, std::move(loss.detail), worker_id});
  }
  spdlog::error("{} blocks lost their last copy, on worker {}: {}", records.size(), worker_id,
                NameSome(records, 10));
  AddChanges(lost_.Add(std::move(records)), effects);
}

LossEffects LossTracker::Stored(const std::vector<BlockChange>& recorded) {
  LossEffects effects;
  if (lost_.size() == 0) return effects;
  LostBlocks::Changes cleared;
  for (const BlockChange& change : recorded) {
    if (change.removed) continue;
    LostBlocks::Changes one = lost_.Clear(change.id);
    if (!one.forgotten.empty()) {
      spdlog::info("block {} was lost and is stored again (worker report)", change.id.ToString());
    }
    cleared.forgotten.insert(cleared.forgotten.end(), one.forgotten.begin(), one.forgotten.end());
  }
  AddChanges(std::move(cleared), effects);
  return effects;
}

LossEffects LossTracker::Removed(const std::vector<BlockId>& ids) {
  LossEffects effects;
  if (lost_.size() == 0) return effects;
  LostBlocks::Changes cleared;
  for (const BlockId& id : ids) {
    LostBlocks::Changes one = lost_.Clear(id);
    cleared.forgotten.insert(cleared.forgotten.end(), one.forgotten.begin(), one.forgotten.end());
  }
  AddChanges(std::move(cleared), effects);
  return effects;
}

LossEffects LossTracker::RddRemoved(uint64_t rdd_id) {
  LossEffects effects;
  if (lost_.size() > 0) AddChanges(lost_.ClearRdd(rdd_id), effects);
  return effects;
}

LossEffects LossTracker::Restore(std::vector<LostRecord> records) {
  LossEffects effects;
  AddChanges(lost_.Restore(std::move(records)), effects);
  return effects;
}

}  // namespace bm
