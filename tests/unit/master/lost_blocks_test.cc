#include "master/lost_blocks.h"

#include <gtest/gtest.h>

#include <vector>

namespace bm {
namespace {

LostRecord Lost(BlockId id, LostCause cause, uint64_t version = 7) {
  return LostRecord{.id = id,
                    .version = version,
                    .size = 100,
                    .level = StorageLevel::kMemoryOnly,
                    .lost_at_ms = 1000,
                    .cause = cause,
                    .detail = "why",
                    .worker_id = "w1"};
}

std::vector<BlockId> Ids(const std::vector<LostRecord>& records) {
  std::vector<BlockId> ids;
  for (const LostRecord& record : records) ids.push_back(record.id);
  return ids;
}

TEST(LostBlocksTest, KeepsAtMostItsCapacityForgettingTheOldestFirst) {
  LostBlocks lost(3);
  LostBlocks::Changes first = lost.Add({Lost(BlockId::Rdd(1, 0), LostCause::kWorkerDropped),
                                        Lost(BlockId::Rdd(1, 1), LostCause::kCopyCorrupt)});
  EXPECT_EQ(Ids(first.recorded), (std::vector<BlockId>{BlockId::Rdd(1, 0), BlockId::Rdd(1, 1)}));
  EXPECT_TRUE(first.forgotten.empty());
  LostBlocks::Changes second = lost.Add({Lost(BlockId::Rdd(1, 2), LostCause::kDiskFailed),
                                         Lost(BlockId::Broadcast(4), LostCause::kLostAtStartUp)});
  EXPECT_EQ(second.forgotten, std::vector<BlockId>{BlockId::Rdd(1, 0)}) << "the oldest goes";
  EXPECT_EQ(lost.size(), 3u);
  EXPECT_EQ(lost.Find(BlockId::Rdd(1, 0)), nullptr);
  EXPECT_EQ(Ids(lost.List()),
            (std::vector<BlockId>{BlockId::Rdd(1, 1), BlockId::Rdd(1, 2), BlockId::Broadcast(4)}));
  EXPECT_EQ(Ids(lost.Newest(2)), (std::vector<BlockId>{BlockId::Rdd(1, 2), BlockId::Broadcast(4)}));
  // The same id lost again is the newest, not a second record.
  lost.Add({Lost(BlockId::Rdd(1, 1), LostCause::kWorkerRestarted)});
  EXPECT_EQ(Ids(lost.List()),
            (std::vector<BlockId>{BlockId::Rdd(1, 2), BlockId::Broadcast(4), BlockId::Rdd(1, 1)}));
  EXPECT_EQ(lost.Find(BlockId::Rdd(1, 1))->cause, LostCause::kWorkerRestarted);
}

TEST(LostBlocksTest, CountsEveryLossByCauseAlsoThoseBeyondItsCapacity) {
  LostBlocks lost(1);
  LostBlocks::Changes changes = lost.Add({Lost(BlockId::Rdd(2, 0), LostCause::kCopyCorrupt),
                                          Lost(BlockId::Rdd(2, 1), LostCause::kCopyCorrupt),
                                          Lost(BlockId::Rdd(2, 2), LostCause::kDiskFailed)});
  EXPECT_EQ(Ids(changes.recorded), std::vector<BlockId>{BlockId::Rdd(2, 2)})
      << "only what is kept is journaled";
  EXPECT_EQ(lost.totals()[static_cast<size_t>(LostCause::kCopyCorrupt)], 2u);
  EXPECT_EQ(lost.totals()[static_cast<size_t>(LostCause::kDiskFailed)], 1u);
  EXPECT_EQ(lost.totals()[static_cast<size_t>(LostCause::kWorkerDropped)], 0u);

  LostBlocks none(0);
  EXPECT_TRUE(none.Add({Lost(BlockId::Rdd(2, 3), LostCause::kStorageError)}).empty());
  EXPECT_EQ(none.size(), 0u);
  EXPECT_EQ(none.totals()[static_cast<size_t>(LostCause::kStorageError)], 1u);
}

TEST(LostBlocksTest, AStoreOrARemovalOfTheIdClearsItsRecord) {
  LostBlocks lost(10);
  lost.Add({Lost(BlockId::Rdd(3, 0), LostCause::kWorkerDropped),
            Lost(BlockId::Rdd(3, 1), LostCause::kWorkerDropped),
            Lost(BlockId::Rdd(4, 0), LostCause::kWorkerDropped),
            Lost(BlockId::Broadcast(3), LostCause::kWorkerDropped)});
  EXPECT_EQ(lost.Clear(BlockId::Rdd(3, 0)).forgotten, std::vector<BlockId>{BlockId::Rdd(3, 0)});
  EXPECT_TRUE(lost.Clear(BlockId::Rdd(3, 0)).empty()) << "cleared once";
  EXPECT_TRUE(lost.Clear(BlockId::Rdd(9, 9)).empty()) << "never lost";
  LostBlocks::Changes rdd = lost.ClearRdd(3);
  EXPECT_EQ(rdd.forgotten, std::vector<BlockId>{BlockId::Rdd(3, 1)});
  EXPECT_EQ(Ids(lost.List()), (std::vector<BlockId>{BlockId::Rdd(4, 0), BlockId::Broadcast(3)}))
      << "RDD 3's records only; broadcast_3 is not RDD 3's";
}

TEST(LostBlocksTest, AWorkersCauseRefinesTheMastersOwnOfTheSameVersion) {
  LostBlocks lost(10);
  lost.Add({Lost(BlockId::Rdd(5, 0), LostCause::kWorkerDropped, /*version=*/7)});
  EXPECT_TRUE(lost.Refine(BlockId::Rdd(5, 0), 8, LostCause::kLostAtStartUp, "x").empty())
      << "another version";
  EXPECT_TRUE(lost.Refine(BlockId::Rdd(5, 1), 7, LostCause::kLostAtStartUp, "x").empty());
  LostBlocks::Changes refined =
      lost.Refine(BlockId::Rdd(5, 0), 7, LostCause::kLostAtStartUp, "table file 12.sst");
  ASSERT_EQ(refined.recorded.size(), 1u);
  EXPECT_EQ(refined.recorded[0].cause, LostCause::kLostAtStartUp);
  EXPECT_EQ(lost.Find(BlockId::Rdd(5, 0))->detail, "table file 12.sst");
  EXPECT_EQ(lost.totals()[static_cast<size_t>(LostCause::kLostAtStartUp)], 0u)
      << "counted once, when it was lost";
}

TEST(LostBlocksTest, RestoredRecordsKeepTheirOrderAndNewOnesComeAfter) {
  LostBlocks before(10);
  before.Add({Lost(BlockId::Rdd(6, 0), LostCause::kCopyCorrupt)});
  before.Add({Lost(BlockId::Rdd(6, 1), LostCause::kCopyCorrupt)});
  std::vector<LostRecord> journaled = before.List();
  std::swap(journaled[0], journaled[1]);  // a journal hands them back in key order

  LostBlocks after(10);
  EXPECT_TRUE(after.Restore(journaled).empty());
  after.Add({Lost(BlockId::Rdd(6, 2), LostCause::kDiskFailed)});
  EXPECT_EQ(Ids(after.List()),
            (std::vector<BlockId>{BlockId::Rdd(6, 0), BlockId::Rdd(6, 1), BlockId::Rdd(6, 2)}));
  EXPECT_EQ(after.totals()[static_cast<size_t>(LostCause::kCopyCorrupt)], 0u);

  LostBlocks smaller(1);  // the capacity was lowered across the restart
  EXPECT_EQ(smaller.Restore(journaled).forgotten, std::vector<BlockId>{BlockId::Rdd(6, 0)});
}

}  // namespace
}  // namespace bm
