#include "worker/disk/journal_check.h"

#include <gtest/gtest.h>

namespace bm::disk {
namespace {

Meta At(uint64_t generation) {
  return Meta{StorageLevel::kDiskOnly, /*size=*/1, generation, /*chunk_count=*/1, 1 << 20};
}

const BlockId kA = BlockId::Broadcast(1);
const BlockId kB = BlockId::Broadcast(2);

TEST(JournalCheckTest, NothingIsLostWhenTheIndexHoldsEveryCommittedGeneration) {
  DiskIndex index;
  index.Put(kA, At(5));
  JournalVerdict verdict = CheckJournal({{kA, 5}}, {}, index, {});
  EXPECT_TRUE(verdict.lost.empty());
  EXPECT_TRUE(verdict.stale.empty());
  EXPECT_TRUE(verdict.removed_earlier.empty());
}

TEST(JournalCheckTest, AMissingBlockIsLostAndCorruptOnlyInAnUnreadableRange) {
  DiskIndex index;
  JournalVerdict verdict = CheckJournal({{kA, 5}, {kB, 20}}, {}, index, {{3, 10}});
  ASSERT_EQ(verdict.lost.size(), 2u);
  EXPECT_EQ(verdict.lost[0].id, kA);
  EXPECT_NE(verdict.lost[0].reason.find("corrupt on disk"), std::string::npos);
  EXPECT_NE(verdict.lost[1].reason.find("no longer has it"), std::string::npos);
  EXPECT_EQ(verdict.corrupt, 1u);
}

// The reason names the damaged table file, not the write-ahead log.
TEST(JournalCheckTest, AMissingBlockNamesTheDamagedTableFile) {
  DiskIndex index;
  JournalVerdict scanned =
      CheckJournal({{kA, 5}}, {}, index, {{3, 10, "index table 000012.sst was damaged (x)"}});
  ASSERT_EQ(scanned.lost.size(), 1u);
  EXPECT_NE(scanned.lost[0].reason.find("index table 000012.sst was damaged"), std::string::npos);
  JournalVerdict set_aside =
      CheckJournal({{kA, 5}}, {}, index, {}, "index table 000013.sst, which was damaged (y)");
  ASSERT_EQ(set_aside.lost.size(), 1u);
  EXPECT_NE(set_aside.lost[0].reason.find("index table 000013.sst"), std::string::npos);
  EXPECT_EQ(set_aside.lost[0].reason.find("write-ahead log"), std::string::npos);
  EXPECT_EQ(set_aside.corrupt, 1u);
}

TEST(JournalCheckTest, AnOlderRecoveredGenerationIsLostAndStale) {
  DiskIndex index;
  index.Put(kA, At(4));
  JournalVerdict verdict = CheckJournal({{kA, 5}}, {}, index, {});
  ASSERT_EQ(verdict.lost.size(), 1u);
  EXPECT_EQ(verdict.stale, std::vector<BlockId>{kA});
}

TEST(JournalCheckTest, BlocksRemovedBeforeTheRestartAreDeletedNotLost) {
  DiskIndex index;
  index.Put(kA, At(5));
  index.Put(kB, At(9));
  JournalVerdict verdict = CheckJournal({}, {{kA, 5}, {kB, 8}}, index, {});
  // kB's stored generation is newer than the removed one: kept.
  EXPECT_EQ(verdict.removed_earlier, std::vector<BlockId>{kA});
  EXPECT_TRUE(verdict.lost.empty());
}

}  // namespace
}  // namespace bm::disk
