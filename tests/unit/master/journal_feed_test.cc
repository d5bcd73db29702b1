#include "master/journal_feed.h"

#include <gtest/gtest.h>

#include <string>

#include "common/core/clock.h"

namespace bm {
namespace {

using namespace std::chrono_literals;

class JournalFeedTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  JournalFeed feed_{clock_, /*epoch=*/3, {.max_kept_bytes = 100, .standby_timeout = 500ms}};
};

TEST_F(JournalFeedTest, AStandbyFromAnotherEpochOrFromScratchNeedsASnapshot) {
  feed_.Append("one");
  JournalFeed::Fetched fresh = feed_.Fetch("s1", /*epoch=*/0, /*from=*/0, 1 << 20);
  EXPECT_TRUE(fresh.snapshot);
  EXPECT_EQ(fresh.first, 1u);  // the snapshot is of the journal as of record 1
  EXPECT_TRUE(feed_.Fetch("s1", /*epoch=*/2, /*from=*/1, 1 << 20).snapshot);
  EXPECT_TRUE(feed_.Fetch("s1", /*epoch=*/3, /*from=*/5, 1 << 20).snapshot);  // from the future
  EXPECT_EQ(feed_.in_sync_count(), 0u);
}

TEST_F(JournalFeedTest, FetchesReturnTheRecordsFromTheirPositionInOrder) {
  feed_.Append("a");
  feed_.Append("b");
  feed_.Append("c");
  JournalFeed::Fetched fetched = feed_.Fetch("s1", 3, 1, 1 << 20);
  ASSERT_FALSE(fetched.snapshot);
  EXPECT_EQ(fetched.first, 1u);
  ASSERT_EQ(fetched.batches.size(), 2u);
  EXPECT_EQ(*fetched.batches[0], "b");
  EXPECT_EQ(*fetched.batches[1], "c");
  // A byte bound still returns at least one record.
  EXPECT_EQ(feed_.Fetch("s1", 3, 0, 1).batches.size(), 1u);
}

TEST_F(JournalFeedTest, RecordsNoLongerKeptSendAStandbyToASnapshot) {
  for (int i = 0; i < 10; ++i) feed_.Append(std::string(30, 'x'));  // 100 bytes kept: 3 records
  EXPECT_TRUE(feed_.Fetch("s1", 3, 6, 1 << 20).snapshot);
  EXPECT_FALSE(feed_.Fetch("s1", 3, 7, 1 << 20).snapshot);
}

TEST_F(JournalFeedTest, AcknowledgementsWaitForInSyncStandbysOnly) {
  feed_.Append("a");
  // Nobody in sync: everything is confirmed.
  EXPECT_EQ(feed_.ConfirmedSequence(), 1u);
  // s1 catches up (its fetch from 1 confirms record 0, and it is now in sync).
  EXPECT_TRUE(feed_.Fetch("s1", 3, 1, 1 << 20).batches.empty());
  EXPECT_EQ(feed_.in_sync_count(), 1u);
  feed_.Append("b");
  feed_.Append("c");
  EXPECT_EQ(feed_.ConfirmedSequence(), 1u);
  // A lagging standby that never caught up holds nothing back.
  feed_.Fetch("s2", 3, 0, 1 << 20);
  EXPECT_EQ(feed_.ConfirmedSequence(), 1u);
  feed_.Fetch("s1", 3, 2, 1 << 20);
  EXPECT_EQ(feed_.ConfirmedSequence(), 2u);
  feed_.Fetch("s1", 3, 3, 1 << 20);
  EXPECT_EQ(feed_.ConfirmedSequence(), 3u);
}

TEST_F(JournalFeedTest, ASilentStandbyIsDroppedAndHoldsNothingBackAfterwards) {
  feed_.Fetch("s1", 3, 0, 1 << 20);  // in sync at 0
  feed_.Append("a");
  EXPECT_EQ(feed_.ConfirmedSequence(), 0u);
  ASSERT_TRUE(feed_.NextExpiry().has_value());
  clock_.Advance(499ms);
  EXPECT_TRUE(feed_.ExpireSilent().empty());
  clock_.Advance(1ms);
  EXPECT_EQ(feed_.ExpireSilent(), std::vector<std::string>{"s1"});
  EXPECT_EQ(feed_.ConfirmedSequence(), 1u);
  EXPECT_EQ(feed_.in_sync_count(), 0u);
}

}  // namespace
}  // namespace bm

namespace bm {
namespace {

TEST_F(JournalFeedTest, AStandbyZooKeeperStillListsIsWaitedForUntilAListWithoutIt) {
  feed_.Fetch("s1", 3, 0, 1 << 20);  // in sync at 0
  feed_.Append("a");
  const std::vector<std::string> listed = {"s1"};
  clock_.Advance(500ms);
  EXPECT_EQ(feed_.ExpireSilent(), std::vector<std::string>{"s1"});
  EXPECT_TRUE(feed_.InSyncIds().empty());  // what the election is asked to publish
  // Until the list without it is published, s1 may still take over: nothing goes without it.
  EXPECT_EQ(feed_.ConfirmedSequence(&listed), 0u);
  const std::vector<std::string> none;
  EXPECT_EQ(feed_.ConfirmedSequence(&none), 1u);
}

}  // namespace
}  // namespace bm
