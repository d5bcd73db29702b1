#include "master/compute_leases.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bm {
namespace {

using std::chrono::milliseconds;
using Kind = ComputeLeases::Answer::Kind;

const BlockId kBlock = BlockId::Rdd(1, 0);

class ComputeLeasesTest : public ::testing::Test {
 protected:
  ComputeLeases::Request Ask(uint64_t waiter, std::string holder = "client",
                             milliseconds lease = milliseconds(1000),
                             milliseconds wait = milliseconds(5000), BlockId block = kBlock) {
    return ComputeLeases::Request{.block = block,
                                  .holder = std::move(holder),
                                  .lease = lease,
                                  .wait_until = clock_.Now() + wait,
                                  .waiter = waiter};
  }

  FakeClock clock_;
  ComputeLeases leases_{clock_};
};

TEST_F(ComputeLeasesTest, FirstAskerIsGrantedOthersWait) {
  std::optional<uint64_t> token = leases_.Acquire(Ask(1, "a"));
  ASSERT_TRUE(token.has_value());
  EXPECT_FALSE(leases_.Acquire(Ask(2, "b")).has_value());
  EXPECT_FALSE(leases_.Acquire(Ask(3, "c")).has_value());
  EXPECT_EQ(leases_.lease_count(), 1u);
  EXPECT_EQ(leases_.waiter_count(), 2u);
  // A different block is independent.
  EXPECT_TRUE(leases_.Acquire(Ask(4, "d", milliseconds(1000), milliseconds(0), BlockId::Rdd(1, 1)))
                  .has_value());
}

TEST_F(ComputeLeasesTest, StoringTheBlockAnswersEveryWaiterAndEndsTheLease) {
  const uint64_t token = *leases_.Acquire(Ask(1));
  leases_.Acquire(Ask(2));
  leases_.Acquire(Ask(3));
  std::vector<ComputeLeases::Answer> answers = leases_.Stored(kBlock);
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[0].kind, Kind::kStored);
  EXPECT_EQ(answers[0].waiter, 2u);
  EXPECT_EQ(answers[1].waiter, 3u);
  EXPECT_EQ(leases_.lease_count(), 0u);
  // The holder's late release and renewal are harmless.
  EXPECT_TRUE(leases_.Release(kBlock, token).empty());
  EXPECT_EQ(leases_.Renew(kBlock, token).code(), StatusCode::kAborted);
  EXPECT_FALSE(leases_.NextDeadline().has_value());
}

TEST_F(ComputeLeasesTest, ReleaseHandsTheLeaseToTheFirstWaiterInArrivalOrder) {
  const uint64_t first = *leases_.Acquire(Ask(1, "a"));
  leases_.Acquire(Ask(2, "b"));
  leases_.Acquire(Ask(3, "c"));
  std::vector<ComputeLeases::Answer> answers = leases_.Release(kBlock, first);
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0].kind, Kind::kGranted);
  EXPECT_EQ(answers[0].waiter, 2u);
  EXPECT_EQ(answers[0].holder, "b");
  EXPECT_NE(answers[0].token, first);
  // The old token no longer holds it; the new one does.
  EXPECT_EQ(leases_.Renew(kBlock, first).code(), StatusCode::kAborted);
  EXPECT_TRUE(leases_.Renew(kBlock, answers[0].token).ok());
  EXPECT_TRUE(leases_.Release(kBlock, first).empty());
  EXPECT_EQ(leases_.waiter_count(), 1u);
}

TEST_F(ComputeLeasesTest, ReleaseWithNoWaiterEndsTheLease) {
  const uint64_t token = *leases_.Acquire(Ask(1));
  EXPECT_TRUE(leases_.Release(kBlock, token).empty());
  EXPECT_EQ(leases_.lease_count(), 0u);
  EXPECT_TRUE(leases_.Acquire(Ask(2)).has_value());
}

TEST_F(ComputeLeasesTest, AnExpiredLeaseGoesToTheNextWaiterWithinItsLength) {
  leases_.Acquire(Ask(1, "dead", milliseconds(1000)));
  leases_.Acquire(Ask(2, "waiter", milliseconds(3000), milliseconds(60000)));
  EXPECT_EQ(leases_.NextDeadline(), clock_.Now() + milliseconds(1000));
  clock_.Advance(milliseconds(999));
  EXPECT_TRUE(leases_.Expire().empty());
  clock_.Advance(milliseconds(1));
  std::vector<ComputeLeases::Answer> answers = leases_.Expire();
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0].kind, Kind::kGranted);
  EXPECT_EQ(answers[0].waiter, 2u);
  // The new lease has the new holder's length.
  EXPECT_EQ(leases_.NextDeadline(), clock_.Now() + milliseconds(3000));
}

TEST_F(ComputeLeasesTest, RenewalKeepsALeaseAlive) {
  const uint64_t token = *leases_.Acquire(Ask(1, "alive", milliseconds(1000)));
  leases_.Acquire(Ask(2, "waiter", milliseconds(1000), milliseconds(60000)));
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(milliseconds(400));
    ASSERT_TRUE(leases_.Renew(kBlock, token).ok());
    EXPECT_TRUE(leases_.Expire().empty());
  }
  EXPECT_EQ(leases_.waiter_count(), 1u);
}

TEST_F(ComputeLeasesTest, AWaiterWhoseWaitIsOverIsAnsweredBusyWithTheHolder) {
  leases_.Acquire(Ask(1, "holder", milliseconds(10000)));
  leases_.Acquire(Ask(2, "waiter", milliseconds(1000), milliseconds(500)));
  clock_.Advance(milliseconds(500));
  std::vector<ComputeLeases::Answer> answers = leases_.Expire();
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0].kind, Kind::kBusy);
  EXPECT_EQ(answers[0].waiter, 2u);
  EXPECT_EQ(answers[0].holder, "holder");
  EXPECT_EQ(answers[0].lease_left, milliseconds(9500));
  EXPECT_EQ(leases_.waiter_count(), 0u);
  EXPECT_EQ(leases_.lease_count(), 1u);
}

TEST_F(ComputeLeasesTest, TokensDifferBetweenInstancesSoAnOldTokenCannotRenewANewLease) {
  const uint64_t token = *leases_.Acquire(Ask(1));
  FakeClock other_clock;
  ComputeLeases restarted(other_clock);
  ASSERT_TRUE(restarted.Acquire(Ask(1)).has_value());
  EXPECT_EQ(restarted.Renew(kBlock, token).code(), StatusCode::kAborted);
}

TEST_F(ComputeLeasesTest, TakeAllWaitersEmptiesTheQueues) {
  leases_.Acquire(Ask(1));
  leases_.Acquire(Ask(2));
  leases_.Acquire(Ask(3));
  EXPECT_THAT(leases_.TakeAllWaiters(), ::testing::UnorderedElementsAre(2u, 3u));
  EXPECT_EQ(leases_.waiter_count(), 0u);
}

}  // namespace
}  // namespace bm
