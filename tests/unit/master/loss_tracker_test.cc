#include "master/loss_tracker.h"

#include <gtest/gtest.h>

#include <vector>

namespace bm {
namespace {

const BlockId kA = BlockId::Rdd(1, 0);
const BlockId kB = BlockId::Rdd(1, 1);

BlockChange Stored(BlockId id, uint64_t version = 7) {
  BlockChange change{id};
  change.size = 100;
  change.version = version;
  return change;
}

std::vector<BlockId> Ids(const std::vector<LostRecord>& records) {
  std::vector<BlockId> ids;
  for (const LostRecord& record : records) ids.push_back(record.id);
  return ids;
}

// Every record the effects wrote, in order.
std::vector<LostRecord> Recorded(const LossEffects& effects) {
  std::vector<LostRecord> records;
  for (const LostBlocks::Changes& changes : effects.lost) {
    records.insert(records.end(), changes.recorded.begin(), changes.recorded.end());
  }
  return records;
}

std::vector<BlockId> Forgotten(const LossEffects& effects) {
  std::vector<BlockId> ids;
  for (const LostBlocks::Changes& changes : effects.lost) {
    ids.insert(ids.end(), changes.forgotten.begin(), changes.forgotten.end());
  }
  return ids;
}

class LossTrackerTest : public ::testing::Test {
 protected:
  // The blocks whose last copy was on `worker_id`, as the index drops the worker.
  std::vector<GoneBlock> Forget(const std::string& worker_id) {
    std::vector<GoneBlock> gone;
    index_.RemoveWorker(worker_id, &gone);
    tracker_.WorkerForgotten(worker_id);
    return gone;
  }

  BlockIndex index_;
  LossTracker tracker_{index_, /*records_kept=*/100, [] { return uint64_t{1234}; }};
};

TEST_F(LossTrackerTest, DroppedWorkersLastCopiesAreRecordedLostWithTheMastersCause) {
  index_.Apply("w1", Stored(kA));
  index_.Apply("w1", Stored(kB));
  index_.Apply("w2", Stored(kB));
  LossEffects effects = tracker_.WorkerDropped("w1", Forget("w1"), "no heartbeat for 10 s");
  const std::vector<LostRecord> recorded = Recorded(effects);
  ASSERT_EQ(Ids(recorded), std::vector<BlockId>{kA}) << "kB has a copy on w2";
  const LostRecord& record = recorded[0];
  EXPECT_EQ(record.cause, LostCause::kWorkerDropped);
  EXPECT_EQ(record.detail, "no heartbeat for 10 s");
  EXPECT_EQ(record.worker_id, "w1");
  EXPECT_EQ(record.version, 7u);
  EXPECT_EQ(record.lost_at_ms, 1234u);
  EXPECT_TRUE(effects.removed.empty());
  EXPECT_NE(tracker_.records().Find(kA), nullptr);
}

TEST_F(LossTrackerTest, LostReportAheadOfTheRemovalRemovesTheCopyAndRecordsALastOne) {
  index_.Apply("w1", Stored(kA));
  index_.Apply("w1", Stored(kB));
  index_.Apply("w2", Stored(kB));
  LossEffects effects =
      tracker_.LossesReported("w1",
                              {WorkerLoss{kA, LostCause::kDiskFailed, "disk 0", 7},
                               WorkerLoss{kB, LostCause::kCopyCorrupt, "bad digest", 7}},
                              /*gone_now=*/{});
  ASSERT_EQ(effects.removed.size(), 2u) << "both copies leave the index, to be journaled";
  EXPECT_EQ(effects.removed[0].worker_id, "w1");
  EXPECT_FALSE(index_.Find(kA).has_value());
  ASSERT_TRUE(index_.Find(kB).has_value());
  EXPECT_EQ(index_.Find(kB)->locations.size(), 1u);
  ASSERT_EQ(Ids(Recorded(effects)), std::vector<BlockId>{kA});
  EXPECT_EQ(Recorded(effects)[0].cause, LostCause::kDiskFailed);
  EXPECT_EQ(Recorded(effects)[0].detail, "disk 0");
  EXPECT_TRUE(effects.check_copies) << "kB is under-replicated now";
}

TEST_F(LossTrackerTest, LossesOfBlocksThisReportRemovedAreRecordedAndOthersIgnored) {
  const std::vector<GoneBlock> gone_now = {GoneBlock{kA, 7, 100}, GoneBlock{kB, 7, 100}};
  LossEffects effects = tracker_.LossesReported(
      "w1", {WorkerLoss{kA, LostCause::kDiskFailed, "disk 0", 7}}, gone_now);
  EXPECT_EQ(Ids(Recorded(effects)), std::vector<BlockId>{kA}) << "kB was removed, not lost";
}

TEST_F(LossTrackerTest, NoLossesChangeNothing) {
  LossEffects effects = tracker_.LossesReported("w1", {}, {GoneBlock{kA, 7, 100}});
  EXPECT_TRUE(effects.lost.empty());
  EXPECT_FALSE(effects.check_copies);
}

TEST_F(LossTrackerTest, WorkersCauseRefinesALossTheMasterRecordedFirst) {
  index_.Apply("w1", Stored(kA));
  (void)tracker_.WorkerDropped("w1", Forget("w1"), "no heartbeat");
  LossEffects effects = tracker_.LossesReported(
      "w1", {WorkerLoss{kA, LostCause::kDiskFailed, "disk 0 failed", 7}}, {});
  ASSERT_EQ(Ids(Recorded(effects)), std::vector<BlockId>{kA});
  EXPECT_EQ(tracker_.records().Find(kA)->cause, LostCause::kDiskFailed);
  EXPECT_EQ(tracker_.records().Find(kA)->detail, "disk 0 failed");
}

TEST_F(LossTrackerTest, RestartedWorkerIsJudgedOnlyOnceItsFollowUpsAreIn) {
  index_.Apply("w1", Stored(kA));
  index_.Apply("w1", Stored(kB));
  LossEffects registered = tracker_.WorkerRegistered("w1", Forget("w1"), /*recorded=*/{},
                                                     /*losses=*/{}, /*started_now=*/true,
                                                     /*follow_ups=*/1);
  EXPECT_TRUE(registered.lost.empty()) << "its report is not complete yet";
  EXPECT_TRUE(tracker_.restart_pending("w1"));

  index_.Apply("w1", Stored(kA));
  LossEffects followed = tracker_.FollowUpsReported("w1", {Stored(kA)});
  ASSERT_EQ(Ids(Recorded(followed)), std::vector<BlockId>{kB});
  EXPECT_EQ(Recorded(followed)[0].cause, LostCause::kWorkerRestarted);
  EXPECT_FALSE(tracker_.restart_pending("w1"));
}

TEST_F(LossTrackerTest, RestartedWorkersOwnCauseWinsOverWorkerRestarted) {
  index_.Apply("w1", Stored(kA));
  LossEffects effects = tracker_.WorkerRegistered(
      "w1", Forget("w1"), {}, {WorkerLoss{kA, LostCause::kLostAtStartUp, "file missing", 7}},
      /*started_now=*/true, /*follow_ups=*/0);
  ASSERT_EQ(Ids(Recorded(effects)), std::vector<BlockId>{kA});
  EXPECT_EQ(Recorded(effects)[0].cause, LostCause::kLostAtStartUp);
  EXPECT_TRUE(effects.check_copies);
}

TEST_F(LossTrackerTest, BlockStoredElsewhereWhileTheReportArrivesIsNotLost) {
  index_.Apply("w1", Stored(kA));
  (void)tracker_.WorkerRegistered("w1", Forget("w1"), {}, {}, /*started_now=*/true,
                                  /*follow_ups=*/1);
  BlockChange put_again = Stored(kA, /*version=*/8);
  put_again.fresh = true;
  ASSERT_TRUE(index_.Apply("w2", put_again).recorded);
  LossEffects effects = tracker_.FollowUpsReported("w1", {Stored(kB)});
  EXPECT_TRUE(Recorded(effects).empty());
}

TEST_F(LossTrackerTest, WorkerBackFromAnotherMasterLosesOnlyWhatItReportedLost) {
  index_.Apply("w1", Stored(kA));
  index_.Apply("w1", Stored(kB));
  LossEffects effects = tracker_.WorkerRegistered("w1", Forget("w1"), {},
                                                  {WorkerLoss{kB, LostCause::kCopyCorrupt, "", 7}},
                                                  /*started_now=*/false, /*follow_ups=*/5);
  EXPECT_EQ(Ids(Recorded(effects)), std::vector<BlockId>{kB}) << "kA was removed meanwhile";
  EXPECT_FALSE(tracker_.restart_pending("w1")) << "no follow-ups are awaited";
}

TEST_F(LossTrackerTest, ForgottenWorkerLeavesNoPendingRestart) {
  index_.Apply("w1", Stored(kA));
  (void)tracker_.WorkerRegistered("w1", Forget("w1"), {}, {}, true, /*follow_ups=*/3);
  tracker_.WorkerForgotten("w1");
  EXPECT_FALSE(tracker_.restart_pending("w1"));
  EXPECT_TRUE(tracker_.FollowUpsReported("w1", {Stored(kB)}).lost.empty());
}

TEST_F(LossTrackerTest, StoredAgainOrRemovedBlocksAreForgotten) {
  index_.Apply("w1", Stored(kA));
  index_.Apply("w1", Stored(kB));
  index_.Apply("w1", Stored(BlockId::Rdd(2, 0)));
  (void)tracker_.WorkerDropped("w1", Forget("w1"), "gone");
  ASSERT_EQ(tracker_.records().size(), 3u);

  BlockChange removal = Stored(kB);
  removal.removed = true;
  EXPECT_EQ(Forgotten(tracker_.Stored({Stored(kA), removal})), std::vector<BlockId>{kA})
      << "a removal stores nothing";
  EXPECT_EQ(Forgotten(tracker_.Removed({kB})), std::vector<BlockId>{kB});
  EXPECT_EQ(Forgotten(tracker_.RddRemoved(2)), std::vector<BlockId>{BlockId::Rdd(2, 0)});
  EXPECT_EQ(tracker_.records().size(), 0u);
}

}  // namespace
}  // namespace bm
