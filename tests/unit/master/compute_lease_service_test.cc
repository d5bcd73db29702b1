#include "master/compute_lease_service.h"

#include <capnp/message.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <zmq.hpp>

namespace bm {
namespace {

using std::chrono::milliseconds;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using Acquired = ComputeLeaseService::Acquired;
using Kind = ComputeLeases::Answer::Kind;

const BlockId kBlock = BlockId::Rdd(1, 0);

class ComputeLeaseServiceTest : public ::testing::Test {
 protected:
  // Asks for a lease on kBlock as `holder`, with ticket `waiter`.
  Result<Acquired> Ask(const std::string& holder, uint64_t waiter, uint32_t lease_ms = 1000,
                       LeaseEffects* effects = nullptr) {
    capnp::MallocMessageBuilder request;
    proto::AcquireCompute::Builder acquire = request.initRoot<proto::AcquireCompute>();
    acquire.setBlockId(kBlock.ToString());
    acquire.setHolder(holder);
    acquire.setLeaseMs(lease_ms);
    acquire.setWaitMs(5000);
    LeaseEffects ignored;
    return service_.Acquire(acquire.asReader(), waiter, reply_->initRoot<proto::Reply>(),
                            effects ? *effects : ignored);
  }
  proto::Reply::Reader reply() { return reply_->getRoot<proto::Reply>().asReader(); }
  Status Release(uint64_t token, LeaseEffects& effects) {
    capnp::MallocMessageBuilder request;
    proto::ComputeLease::Builder lease = request.initRoot<proto::ComputeLease>();
    lease.setBlockId(kBlock.ToString());
    lease.setToken(token);
    return service_.Release(lease.asReader(), reply_->initRoot<proto::Reply>(), effects);
  }
  BlockChange Stored() {
    BlockChange change{kBlock, false, StorageLevel::kMemoryOnly, Tier::kMemory, 100};
    change.version = 7;
    return change;
  }

  FakeClock clock_;
  BlockIndex index_;
  WorkerRegistry registry_{clock_};
  zmq::context_t context_;
  WorkerLinks links_{context_, CurveKeys{}, 16};
  std::map<uint64_t, RddDescription> rdds_;
  LostBlocks lost_{16};
  ClientQueries queries_{clock_, false, index_, registry_, links_, rdds_, lost_};
  ComputeLeaseService service_{clock_, index_, queries_};
  // Held by pointer: its destructor may throw, which a test fixture's may not.
  std::unique_ptr<capnp::MallocMessageBuilder> reply_ =
      std::make_unique<capnp::MallocMessageBuilder>();
};

TEST_F(ComputeLeaseServiceTest, GrantIsJournaledWithTheReplysToken) {
  LeaseEffects effects;
  ASSERT_EQ(Ask("a", 1, 1000, &effects).value(), Acquired::kGranted);
  ASSERT_TRUE(reply().getCompute().isGranted());
  const uint64_t token = reply().getCompute().getGranted();
  EXPECT_THAT(effects.held, ElementsAre(JournaledLease{kBlock, token, "a", 1000}));
  EXPECT_THAT(effects.ended, IsEmpty());
  EXPECT_TRUE(service_.Holds(kBlock, token));
}

TEST_F(ComputeLeaseServiceTest, SecondAskerWaitsWithoutJournaling) {
  ASSERT_EQ(Ask("a", 1).value(), Acquired::kGranted);
  LeaseEffects effects;
  EXPECT_EQ(Ask("b", 2, 1000, &effects).value(), Acquired::kWaiting);
  EXPECT_FALSE(effects.journal_changed());
  EXPECT_THAT(effects.answers, IsEmpty());
}

TEST_F(ComputeLeaseServiceTest, StoredBlockIsAnsweredWithItsLocationsAndNoLease) {
  registry_.Register("w1", "tcp://127.0.0.1:1", WorkerStats{});
  index_.Apply("w1", Stored());
  LeaseEffects effects;
  EXPECT_EQ(Ask("a", 1, 1000, &effects).value(), Acquired::kStored);
  ASSERT_TRUE(reply().getCompute().isCached());
  EXPECT_EQ(reply().getCompute().getCached().getLocations().size(), 1u);
  EXPECT_EQ(service_.lease_count(), 0u);
  EXPECT_FALSE(effects.journal_changed());
}

TEST_F(ComputeLeaseServiceTest, LeaseOutsideItsBoundsIsRefused) {
  EXPECT_EQ(Ask("a", 1, /*lease_ms=*/1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(service_.lease_count(), 0u);
}

TEST_F(ComputeLeaseServiceTest, ReleaseHandsTheLeaseToTheWaiterAndJournalsTheNewToken) {
  ASSERT_EQ(Ask("a", 1).value(), Acquired::kGranted);
  const uint64_t first = reply().getCompute().getGranted();
  ASSERT_EQ(Ask("b", 2).value(), Acquired::kWaiting);
  LeaseEffects effects;
  ASSERT_TRUE(Release(first, effects).ok());
  ASSERT_EQ(effects.answers.size(), 1u);
  EXPECT_EQ(effects.answers[0].kind, Kind::kGranted);
  EXPECT_EQ(effects.answers[0].waiter, 2u);
  ASSERT_EQ(effects.held.size(), 1u);
  EXPECT_EQ(effects.held[0].token, effects.answers[0].token);
  EXPECT_EQ(effects.held[0].holder, "b");
  EXPECT_THAT(effects.ended, IsEmpty());
}

TEST_F(ComputeLeaseServiceTest, StoredBlockEndsTheLeaseAndAnswersWaitersWithLocations) {
  ASSERT_EQ(Ask("a", 1).value(), Acquired::kGranted);
  ASSERT_EQ(Ask("b", 2).value(), Acquired::kWaiting);
  registry_.Register("w1", "tcp://127.0.0.1:1", WorkerStats{});
  index_.Apply("w1", Stored());
  LeaseEffects effects;
  service_.Stored({Stored()}, effects);
  EXPECT_THAT(effects.ended, ElementsAre(kBlock));
  ASSERT_EQ(effects.answers.size(), 1u);
  EXPECT_EQ(effects.answers[0].kind, Kind::kStored);
  capnp::MallocMessageBuilder answer;
  service_.Encode(effects.answers[0], answer.initRoot<proto::ComputeReply>());
  proto::ComputeReply::Reader compute = answer.getRoot<proto::ComputeReply>();
  ASSERT_TRUE(compute.isCached());
  EXPECT_EQ(compute.getCached().getLocations().size(), 1u);
}

TEST_F(ComputeLeaseServiceTest, ExpiredLeaseIsJournaledAsEnded) {
  ASSERT_EQ(Ask("a", 1, /*lease_ms=*/100).value(), Acquired::kGranted);
  clock_.Advance(milliseconds(200));
  LeaseEffects effects;
  service_.Expire(effects);
  EXPECT_THAT(effects.ended, ElementsAre(kBlock));
  EXPECT_EQ(service_.lease_count(), 0u);
}

TEST_F(ComputeLeaseServiceTest, RestoredLeasesCountAsJournaled) {
  service_.Restore({JournaledLease{kBlock, 42, "a", 1000}});
  EXPECT_TRUE(service_.Holds(kBlock, 42));
  // Storing the block ends a lease the journal holds: that end is journaled.
  LeaseEffects effects;
  service_.Stored({Stored()}, effects);
  EXPECT_THAT(effects.held, IsEmpty());
  EXPECT_THAT(effects.ended, ElementsAre(kBlock));
}

TEST_F(ComputeLeaseServiceTest, RemovalsEndNoLease) {
  ASSERT_EQ(Ask("a", 1).value(), Acquired::kGranted);
  BlockChange removal = Stored();
  removal.removed = true;
  LeaseEffects effects;
  service_.Stored({removal}, effects);
  EXPECT_FALSE(effects.journal_changed());
  EXPECT_EQ(service_.lease_count(), 1u);
}

}  // namespace
}  // namespace bm
