#include "master/digest_verifications.h"

#include <gtest/gtest.h>

namespace bm {
namespace {

const BlockId kBlock = BlockId::Rdd(1, 0);

WorkerReply Verified(uint64_t id) {
  WorkerReply reply;
  reply.id = id;
  reply.verified = "not found";
  return reply;
}

class DigestVerificationsTest : public ::testing::Test {
 protected:
  WorkerRequestIds request_ids_;
  DigestVerifications verifications_{request_ids_};
};

TEST_F(DigestVerificationsTest, AnswerFromTheAskedWorkerIsTakenOnce) {
  const uint64_t id = verifications_.Start("w1", kBlock);
  EXPECT_TRUE(verifications_.Answered("w1", Verified(id)));
  EXPECT_EQ(verifications_.in_flight(), 0u);
  EXPECT_FALSE(verifications_.Answered("w1", Verified(id)));
}

TEST_F(DigestVerificationsTest, AnswerFromAnotherWorkerIsIgnoredButNotPassedOn) {
  const uint64_t id = verifications_.Start("w1", kBlock);
  EXPECT_TRUE(verifications_.Answered("w2", Verified(id)));
  EXPECT_EQ(verifications_.in_flight(), 1u);
}

TEST_F(DigestVerificationsTest, OtherCommandsIdsAreNotVerifications) {
  const uint64_t removal = request_ids_.Next();
  verifications_.Start("w1", kBlock);
  EXPECT_FALSE(verifications_.Answered("w1", Verified(removal)));
}

TEST_F(DigestVerificationsTest, UnansweredRequestsDoNotPileUp) {
  const uint64_t first = verifications_.Start("w1", kBlock);
  for (size_t i = 1; i < DigestVerifications::kMaxInFlight; ++i) verifications_.Start("w1", kBlock);
  EXPECT_EQ(verifications_.in_flight(), DigestVerifications::kMaxInFlight);
  verifications_.Start("w1", kBlock);
  EXPECT_EQ(verifications_.in_flight(), 1u);
  EXPECT_FALSE(verifications_.Answered("w1", Verified(first)));
}

}  // namespace
}  // namespace bm
