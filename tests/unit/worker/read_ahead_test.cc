#include "worker/read_ahead.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

// ReadAheadTable's states (worker/read_ahead.h) one by one: pending -> ready -> taken, and the
// ways an entry is dropped or a read-ahead refused. The table does no I/O: a test plays the
// storage thread by calling Complete() itself.

namespace bm {
namespace {

const BlockId kBlock = BlockId::Rdd(1, 0);
const BlockId kOtherBlock = BlockId::Rdd(2, 0);
constexpr uint64_t kRange = 100;

// A read of [offset, offset + kRange) of a block of `generation`: the generation marks which
// read a request was handed.
Result<BlockRead> ReadOf(uint64_t offset, uint64_t generation = 1) {
  return BlockRead{.total_size = 10 * kRange,
                   .offset = offset,
                   .generation = generation,
                   .tier = Tier::kDisk,
                   .level = StorageLevel::kDiskOnly,
                   .chunks = {}};
}

// A request's completion that records what it was handed.
struct Request {
  std::vector<Result<BlockRead>> got;
  ReadAheadTable::Done done = [this](Result<BlockRead> read) { got.push_back(std::move(read)); };

  Request() = default;
  Request(const Request&) = delete;  // `done` captures this
  Request& operator=(const Request&) = delete;
};

TEST(ReadAheadTableTest, AStartedReadAheadHoldsItsBytesWhilePending) {
  ReadAheadTable table(1000);
  std::optional<uint64_t> ticket = table.Start(kBlock, kRange, kRange, kRange);
  ASSERT_TRUE(ticket.has_value());
  EXPECT_EQ(table.bytes(), kRange);
  EXPECT_EQ(table.hits(), 0u);
}

TEST(ReadAheadTableTest, EveryStartedReadAheadGetsItsOwnTicket) {
  ReadAheadTable table(1000);
  std::optional<uint64_t> first = table.Start(kBlock, kRange, kRange, kRange);
  std::optional<uint64_t> second = table.Start(kBlock, 2 * kRange, kRange, kRange);
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(second.has_value());
  EXPECT_NE(*first, *second);
  EXPECT_EQ(table.bytes(), 2 * kRange);
}

TEST(ReadAheadTableTest, ARequestForAPendingRangeWaitsAndIsAnsweredWhenItsReadCompletes) {
  ReadAheadTable table(1000);
  const uint64_t ticket = *table.Start(kBlock, kRange, kRange, kRange);
  Request request;
  ASSERT_TRUE(table.Take(kBlock, kRange, kRange, request.done));
  EXPECT_TRUE(request.got.empty());  // not read yet
  EXPECT_EQ(table.hits(), 1u);

  table.Complete(ticket, ReadOf(kRange));
  ASSERT_EQ(request.got.size(), 1u);
  ASSERT_TRUE(request.got[0].ok());
  EXPECT_EQ(request.got[0]->offset, kRange);
  EXPECT_EQ(table.bytes(), 0u);  // handed over: the entry is gone
}

TEST(ReadAheadTableTest, ACompletedReadIsHeldAndHandedToTheRequestAtOnce) {
  ReadAheadTable table(1000);
  const uint64_t ticket = *table.Start(kBlock, kRange, kRange, kRange);
  table.Complete(ticket, ReadOf(kRange));
  EXPECT_EQ(table.bytes(), kRange);  // ready: still held

  Request request;
  ASSERT_TRUE(table.Take(kBlock, kRange, kRange, request.done));
  ASSERT_EQ(request.got.size(), 1u);  // run inside Take
  ASSERT_TRUE(request.got[0].ok());
  EXPECT_EQ(request.got[0]->offset, kRange);
  EXPECT_EQ(table.bytes(), 0u);
  EXPECT_EQ(table.hits(), 1u);
}

TEST(ReadAheadTableTest, ATakenRangeIsNotHandedToASecondRequest) {
  ReadAheadTable table(1000);
  const uint64_t ticket = *table.Start(kBlock, kRange, kRange, kRange);
  table.Complete(ticket, ReadOf(kRange));
  Request first;
  ASSERT_TRUE(table.Take(kBlock, kRange, kRange, first.done));
  Request second;
  EXPECT_FALSE(table.Take(kBlock, kRange, kRange, second.done));
  EXPECT_TRUE(second.got.empty());
  EXPECT_EQ(table.hits(), 1u);
}

TEST(ReadAheadTableTest, ASecondRequestForAPendingRangeAlreadyWaitedOnMissesAndReadsAfresh) {
  ReadAheadTable table(1000);
  const uint64_t ticket = *table.Start(kBlock, kRange, kRange, kRange);
  Request first;
  ASSERT_TRUE(table.Take(kBlock, kRange, kRange, first.done));
  Request second;
  EXPECT_FALSE(table.Take(kBlock, kRange, kRange, second.done));
  EXPECT_TRUE(static_cast<bool>(second.done));  // untouched: the caller still holds it

  table.Complete(ticket, ReadOf(kRange));
  EXPECT_EQ(first.got.size(), 1u);
  EXPECT_TRUE(second.got.empty());
  EXPECT_EQ(table.hits(), 1u);
}

TEST(ReadAheadTableTest, ARequestForARangeNeverReadAheadMissesAndLeavesItsCompletionUntouched) {
  ReadAheadTable table(1000);
  Request request;
  EXPECT_FALSE(table.Take(kBlock, kRange, kRange, request.done));
  EXPECT_TRUE(static_cast<bool>(request.done));
  EXPECT_TRUE(request.got.empty());
  EXPECT_EQ(table.hits(), 0u);
}

TEST(ReadAheadTableTest, ARequestMustMatchTheBlockOffsetAndLengthReadAhead) {
  ReadAheadTable table(1000);
  const uint64_t ticket = *table.Start(kBlock, kRange, kRange, kRange);
  table.Complete(ticket, ReadOf(kRange));
  Request request;
  EXPECT_FALSE(table.Take(kOtherBlock, kRange, kRange, request.done));
  EXPECT_FALSE(table.Take(kBlock, 2 * kRange, kRange, request.done));
  EXPECT_FALSE(table.Take(kBlock, kRange, kRange / 2, request.done));
  EXPECT_TRUE(request.got.empty());
  EXPECT_EQ(table.hits(), 0u);
  // Still there for the request that matches.
  EXPECT_TRUE(table.Take(kBlock, kRange, kRange, request.done));
  EXPECT_EQ(request.got.size(), 1u);
}

TEST(ReadAheadTableTest, ASecondStartOfARangeAlreadyComingIsRefused) {
  ReadAheadTable table(1000);
  const uint64_t ticket = *table.Start(kBlock, kRange, kRange, kRange);
  EXPECT_FALSE(table.Start(kBlock, kRange, kRange, kRange).has_value());  // pending
  table.Complete(ticket, ReadOf(kRange));
  EXPECT_FALSE(table.Start(kBlock, kRange, kRange, kRange).has_value());  // ready
  EXPECT_EQ(table.bytes(), kRange);
  // The same offset of another block is another range.
  EXPECT_TRUE(table.Start(kOtherBlock, kRange, kRange, kRange).has_value());
}

TEST(ReadAheadTableTest, AReadAheadOfNoBytesIsNotStarted) {
  ReadAheadTable table(1000);
  EXPECT_FALSE(table.Start(kBlock, kRange, kRange, 0).has_value());
  EXPECT_EQ(table.bytes(), 0u);
}

TEST(ReadAheadTableTest, AReadAheadLargerThanTheWholeTableIsNotStarted) {
  ReadAheadTable table(1000);
  EXPECT_FALSE(table.Start(kBlock, 0, 1001, 1001).has_value());
  EXPECT_EQ(table.bytes(), 0u);
  EXPECT_TRUE(table.Start(kBlock, 0, 1000, 1000).has_value());  // exactly the table fits
  EXPECT_EQ(table.bytes(), 1000u);
}

TEST(ReadAheadTableTest, ReadyEntriesAreEvictedOldestFirstToMakeRoom) {
  ReadAheadTable table(2 * kRange);
  const uint64_t oldest = *table.Start(kBlock, kRange, kRange, kRange);
  const uint64_t newer = *table.Start(kBlock, 2 * kRange, kRange, kRange);
  table.Complete(oldest, ReadOf(kRange));
  table.Complete(newer, ReadOf(2 * kRange));

  ASSERT_TRUE(table.Start(kBlock, 3 * kRange, kRange, kRange).has_value());
  EXPECT_EQ(table.bytes(), 2 * kRange);
  Request request;
  EXPECT_FALSE(table.Take(kBlock, kRange, kRange, request.done));  // evicted
  EXPECT_TRUE(table.Take(kBlock, 2 * kRange, kRange, request.done));
}

TEST(ReadAheadTableTest, PendingEntriesHoldTheirRoomSoAReadAheadThatDoesNotFitIsNotStarted) {
  ReadAheadTable table(2 * kRange);
  const uint64_t first = *table.Start(kBlock, kRange, kRange, kRange);
  ASSERT_TRUE(table.Start(kBlock, 2 * kRange, kRange, kRange).has_value());
  EXPECT_FALSE(table.Start(kBlock, 3 * kRange, kRange, kRange).has_value());
  EXPECT_EQ(table.bytes(), 2 * kRange);

  // The pending reads were kept: a request still gets the first.
  Request request;
  ASSERT_TRUE(table.Take(kBlock, kRange, kRange, request.done));
  table.Complete(first, ReadOf(kRange));
  EXPECT_EQ(request.got.size(), 1u);
  // Its room given back, the next read-ahead fits.
  EXPECT_TRUE(table.Start(kBlock, 3 * kRange, kRange, kRange).has_value());
}

TEST(ReadAheadTableTest, MakingRoomEvictsAReadyEntryButNotAnOlderPendingOne) {
  ReadAheadTable table(2 * kRange);
  const uint64_t pending = *table.Start(kBlock, kRange, kRange, kRange);  // the oldest
  const uint64_t ready = *table.Start(kBlock, 2 * kRange, kRange, kRange);
  table.Complete(ready, ReadOf(2 * kRange));

  ASSERT_TRUE(table.Start(kBlock, 3 * kRange, kRange, kRange).has_value());
  Request request;
  EXPECT_FALSE(table.Take(kBlock, 2 * kRange, kRange, request.done));  // the ready one went
  ASSERT_TRUE(table.Take(kBlock, kRange, kRange, request.done));       // the pending one stayed
  table.Complete(pending, ReadOf(kRange));
  EXPECT_EQ(request.got.size(), 1u);
}

// The header's "once ready entries are evicted oldest first": a read-ahead that still does not
// fit has already cost them.
TEST(ReadAheadTableTest,
     AReadAheadThatCannotFitEvenWithoutTheReadyEntriesIsNotStartedButTheyAreEvicted) {
  ReadAheadTable table(3 * kRange);
  ASSERT_TRUE(table.Start(kBlock, kRange, kRange, 2 * kRange).has_value());  // stays pending
  const uint64_t ready = *table.Start(kBlock, 3 * kRange, kRange, kRange);
  table.Complete(ready, ReadOf(3 * kRange));

  EXPECT_FALSE(table.Start(kBlock, 4 * kRange, 2 * kRange, 2 * kRange).has_value());
  EXPECT_EQ(table.bytes(), 2 * kRange);
  Request request;
  EXPECT_FALSE(table.Take(kBlock, 3 * kRange, kRange, request.done));
}

TEST(ReadAheadTableTest, AFailedReadIsHandedToTheRequestWaitingOnIt) {
  ReadAheadTable table(1000);
  const uint64_t ticket = *table.Start(kBlock, kRange, kRange, kRange);
  Request request;
  ASSERT_TRUE(table.Take(kBlock, kRange, kRange, request.done));
  table.Complete(ticket, DataLossError("checksum mismatch"));
  ASSERT_EQ(request.got.size(), 1u);
  EXPECT_EQ(request.got[0].status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(table.bytes(), 0u);
}

TEST(ReadAheadTableTest, AFailedReadNobodyWaitsOnIsDroppedSoTheRequestReadsAfresh) {
  ReadAheadTable table(1000);
  const uint64_t ticket = *table.Start(kBlock, kRange, kRange, kRange);
  table.Complete(ticket, DataLossError("checksum mismatch"));
  EXPECT_EQ(table.bytes(), 0u);
  Request request;
  EXPECT_FALSE(table.Take(kBlock, kRange, kRange, request.done));
  EXPECT_TRUE(request.got.empty());
}

TEST(ReadAheadTableTest, ACompletionOfAnUnknownTicketChangesNothing) {
  ReadAheadTable table(1000);
  const uint64_t ticket = *table.Start(kBlock, kRange, kRange, kRange);
  table.Complete(ticket, ReadOf(kRange));
  table.Complete(ticket + 100, ReadOf(2 * kRange));
  EXPECT_EQ(table.bytes(), kRange);
  Request request;
  EXPECT_FALSE(table.Take(kBlock, 2 * kRange, kRange, request.done));
  ASSERT_TRUE(table.Take(kBlock, kRange, kRange, request.done));
  ASSERT_EQ(request.got.size(), 1u);
  EXPECT_EQ(request.got[0]->offset, kRange);
}

TEST(ReadAheadTableTest, ForgettingABlockDropsItsReadyRangesAtOnceAndNoOtherBlocks) {
  ReadAheadTable table(1000);
  const uint64_t mine = *table.Start(kBlock, kRange, kRange, kRange);
  const uint64_t other = *table.Start(kOtherBlock, kRange, kRange, kRange);
  table.Complete(mine, ReadOf(kRange));
  table.Complete(other, ReadOf(kRange));

  table.Forget(kBlock);
  EXPECT_EQ(table.bytes(), kRange);
  Request request;
  EXPECT_FALSE(table.Take(kBlock, kRange, kRange, request.done));
  EXPECT_TRUE(table.Take(kOtherBlock, kRange, kRange, request.done));
}

TEST(ReadAheadTableTest, AForgottenPendingRangeIsNotHandedToALaterRequestAndIsDroppedWhenRead) {
  ReadAheadTable table(1000);
  const uint64_t ticket = *table.Start(kBlock, kRange, kRange, kRange);
  table.Forget(kBlock);
  EXPECT_EQ(table.bytes(), kRange);  // its read is still queued: it holds its room
  Request request;
  EXPECT_FALSE(table.Take(kBlock, kRange, kRange, request.done));

  table.Complete(ticket, ReadOf(kRange));
  EXPECT_EQ(table.bytes(), 0u);  // not held for anyone
  EXPECT_FALSE(table.Take(kBlock, kRange, kRange, request.done));
  EXPECT_TRUE(request.got.empty());
}

TEST(ReadAheadTableTest, ARequestAlreadyWaitingOnAForgottenRangeStillGetsItsOldVersion) {
  ReadAheadTable table(1000);
  const uint64_t ticket = *table.Start(kBlock, kRange, kRange, kRange);
  Request request;
  ASSERT_TRUE(table.Take(kBlock, kRange, kRange, request.done));
  table.Forget(kBlock);  // replaced while the read was queued

  table.Complete(ticket, ReadOf(kRange, /*generation=*/7));
  ASSERT_EQ(request.got.size(), 1u);
  ASSERT_TRUE(request.got[0].ok());
  EXPECT_EQ(request.got[0]->generation, 7u);
  EXPECT_EQ(table.bytes(), 0u);
}

TEST(ReadAheadTableTest, AReadyRangeSurvivesOneAgePassAndIsDroppedByTheSecond) {
  ReadAheadTable table(1000);
  const uint64_t ticket = *table.Start(kBlock, kRange, kRange, kRange);
  table.Complete(ticket, ReadOf(kRange));
  table.Age();
  EXPECT_EQ(table.bytes(), kRange);
  table.Age();
  EXPECT_EQ(table.bytes(), 0u);
  Request request;
  EXPECT_FALSE(table.Take(kBlock, kRange, kRange, request.done));
}

TEST(ReadAheadTableTest, AgingCountsPassesFromWhenTheRangeBecameReadyNotFromItsStart) {
  ReadAheadTable table(1000);
  const uint64_t ticket = *table.Start(kBlock, kRange, kRange, kRange);
  for (int pass = 0; pass < 5; ++pass) table.Age();  // a slow read: pending entries stay
  EXPECT_EQ(table.bytes(), kRange);
  table.Complete(ticket, ReadOf(kRange));
  table.Age();
  EXPECT_EQ(table.bytes(), kRange);
  Request request;
  EXPECT_TRUE(table.Take(kBlock, kRange, kRange, request.done));
  EXPECT_EQ(request.got.size(), 1u);
}

TEST(ReadAheadTableTest, AgingDropsOnlyTheRangesThatWaitedThroughAWholePass) {
  ReadAheadTable table(1000);
  const uint64_t old_range = *table.Start(kBlock, kRange, kRange, kRange);
  const uint64_t new_range = *table.Start(kBlock, 2 * kRange, kRange, kRange);
  table.Complete(old_range, ReadOf(kRange));
  table.Age();
  table.Complete(new_range, ReadOf(2 * kRange));
  table.Age();
  EXPECT_EQ(table.bytes(), kRange);
  Request request;
  EXPECT_FALSE(table.Take(kBlock, kRange, kRange, request.done));
  EXPECT_TRUE(table.Take(kBlock, 2 * kRange, kRange, request.done));
}

}  // namespace
}  // namespace bm
