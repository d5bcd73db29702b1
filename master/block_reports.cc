#include "master/block_reports.h"

#include <spdlog/spdlog.h>

namespace bm {

AppliedBlocks ApplyRegistration(BlockIndex& index, const std::string& worker_id,
                                const std::vector<BlockChange>& blocks) {
  AppliedBlocks result;
  for (const BlockChange& change : blocks) {
    ApplyResult applied = index.Apply(worker_id, change);
    if (applied.digest_mismatch) {
      result.mismatched.push_back(MismatchedCopy{change, applied.expected_digest});
      continue;
    }
    if (!applied.recorded) {
      result.stale.push_back(RetiredCopy{worker_id, change.id, change.version});
      continue;
    }
    result.recorded.push_back(change);
    result.replaced.insert(result.replaced.end(), applied.replaced.begin(), applied.replaced.end());
  }
  if (!result.stale.empty()) {
    spdlog::info(
        "worker {} holds {} blocks in versions replaced or removed while it was away; "
        "removing them",
        worker_id, result.stale.size());
  }
  return result;
}

AppliedBlocks ApplyReport(BlockIndex& index, const std::string& worker_id,
                          const std::vector<BlockChange>& changes, const LeaseHeld& lease_held) {
  AppliedBlocks result;
  result.recorded.reserve(changes.size());
  for (const BlockChange& change : changes) {
    if (change.fresh && !change.removed && change.lease != 0 &&
        !lease_held(change.id, change.lease) && index.VersionOf(change.id) != change.version) {
      spdlog::info(
          "worker {} stored {} under a compute lease that is no longer held; refusing "
          "and removing it",
          worker_id, change.id.ToString());
      result.stale.push_back(RetiredCopy{worker_id, change.id, change.version});
      result.refused.push_back(change);
      continue;
    }
    ApplyResult applied = index.Apply(worker_id, change);
    if (applied.last_copy) result.gone.push_back(*applied.last_copy);
    if (applied.digest_mismatch) {
      result.mismatched.push_back(MismatchedCopy{change, applied.expected_digest});
      continue;
    }
    if (!applied.recorded) {
      spdlog::info("worker {} stored {} in a version that was replaced or removed; removing it",
                   worker_id, change.id.ToString());
      result.stale.push_back(RetiredCopy{worker_id, change.id, change.version});
      continue;
    }
    result.recorded.push_back(change);
    if (!applied.removal_ignored) result.journaled.push_back(change);
    result.replaced.insert(result.replaced.end(), applied.replaced.begin(), applied.replaced.end());
  }
  return result;
}

}  // namespace bm
