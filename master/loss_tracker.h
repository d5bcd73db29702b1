#pragma once

#include <capnp/list.h>

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "blockmgr/status.h"
#include "common/core/lost_cause.h"
#include "master/block_index.h"
#include "master/lost_blocks.h"
#include "schema/messages.capnp.h"

namespace bm {

// A copy a worker reported lost (RegisterWorker / ReportBlocks lostCopies, or lostBlocks from a
// worker that sends no causes), and why.
struct WorkerLoss {
  BlockId id;
  LostCause cause = LostCause::kStorageError;
  std::string detail;
  uint64_t version = 0;  // 0 = unknown
};
// Reads `copies`, or `names` (cause unknown) when a worker sent no copies.
Result<std::vector<WorkerLoss>> DecodeLosses(capnp::List<capnp::Text>::Reader names,
                                             capnp::List<proto::LostCopy>::Reader copies);

// What a loss event came to, for the master's loop to carry out in this order: journal the
// removals of copies the index dropped, then the lost records' changes, then (check_copies)
// plan copies of the blocks at the next turn of the loop.
struct LossEffects {
  // Copies a worker reported lost before reporting their removal: dropped from the index.
  std::vector<RetiredCopy> removed;
  std::vector<LostBlocks::Changes> lost;  // in the order they happened
  bool check_copies = false;
};

// Blocks whose last copy was lost (PROTOCOL.md, "Lost blocks"): decides when a block's last
// copy is lost (a worker dropped, a worker's lost report, a worker that came back without it)
// and keeps the records (LostBlocks).
//
// A worker that restarted sends its full report in its registration and `follow_ups` more
// updates after it; the blocks whose last copy was listed on it are judged only once the
// whole report is in (a pending restart), so a block in a follow-up is not called lost.
//
// A component of the master's loop: it owns the records and the pending restarts, borrows the
// loop's BlockIndex (a lost report that comes ahead of the copy's removal removes the copy),
// answers each event with its LossEffects, and touches no socket or journal itself. Not
// thread-safe: owned by the loop's thread.
class LossTracker {
 public:
  // `wall_clock_ms`: milliseconds since the Unix epoch, stamped on each record.
  LossTracker(BlockIndex& index, size_t records_kept,
              std::function<uint64_t()> wall_clock_ms = SystemMillis);

  // A worker reported these copies lost (ReportBlocks): logged, and copies planned. A loss
  // whose block went with this report's removals (`gone_now`), or goes now (its removal is
  // still to come), is recorded lost with the worker's cause; one the master recorded lost
  // already for a cause of its own is refined.
  [[nodiscard]] LossEffects LossesReported(const std::string& worker_id,
                                           const std::vector<WorkerLoss>& losses,
                                           const std::vector<GoneBlock>& gone_now);
  // A worker registered, and `gone` are the blocks whose last copy was listed on it and that
  // its full report does not hold (`recorded`) so far: `follow_ups` more blocks of it come in
  // its next reports. On its first registration since it started, those are lost: with the
  // cause it gave (`losses`), else as workerRestarted. Other losses refine records kept.
  [[nodiscard]] LossEffects WorkerRegistered(const std::string& worker_id,
                                             std::vector<GoneBlock> gone,
                                             const std::vector<BlockId>& recorded,
                                             const std::vector<WorkerLoss>& losses,
                                             bool started_now, uint64_t follow_ups);
  // The follow-up reports of a restarted worker's full report: what they hold was not lost.
  [[nodiscard]] LossEffects FollowUpsReported(const std::string& worker_id,
                                              const std::vector<BlockChange>& changes);
  // The worker was dropped (no heartbeat): the blocks whose last copy it held are lost.
  [[nodiscard]] LossEffects WorkerDropped(const std::string& worker_id, std::vector<GoneBlock> gone,
                                          const std::string& detail);
  // The worker is forgotten (dropped, or registering again): its pending restart goes.
  void WorkerForgotten(const std::string& worker_id) { pending_restarts_.erase(worker_id); }

  // Blocks stored again (copies recorded; removals skipped) and blocks removed are no longer
  // lost.
  [[nodiscard]] LossEffects Stored(const std::vector<BlockChange>& recorded);
  [[nodiscard]] LossEffects Removed(const std::vector<BlockId>& ids);
  [[nodiscard]] LossEffects RddRemoved(uint64_t rdd_id);

  // Loads the journal's records (before the loop runs).
  [[nodiscard]] LossEffects Restore(std::vector<LostRecord> records);

  const LostBlocks& records() const { return lost_; }
  bool restart_pending(const std::string& worker_id) const {
    return pending_restarts_.contains(worker_id);
  }

  static uint64_t SystemMillis();

 private:
  // A restarted worker whose full report is still arriving: the blocks it has not listed yet.
  struct PendingRestart {
    std::unordered_map<BlockId, GoneBlock> missing;
    std::unordered_map<BlockId, WorkerLoss> losses;  // the causes the worker gave
    uint64_t follow_ups = 0;                         // updates of the full report still to come
  };

  void ReportedWithoutLog(const std::string& worker_id, const std::vector<WorkerLoss>& losses,
                          const std::vector<GoneBlock>& gone_now, LossEffects& effects);
  // The last copies of these blocks, on `worker_id`, are lost; `why` names the cause of each.
  void RecordLost(const std::string& worker_id, std::vector<GoneBlock> gone,
                  const std::function<WorkerLoss(const BlockId&)>& why, LossEffects& effects);
  // Records what a restarted worker's full report did not hold.
  void JudgeRestart(const std::string& worker_id, LossEffects& effects);

  BlockIndex& index_;
  const std::function<uint64_t()> wall_clock_ms_;
  LostBlocks lost_;
  std::unordered_map<std::string, PendingRestart> pending_restarts_;
};

}  // namespace bm
