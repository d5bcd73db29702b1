#include "master/replication_driver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>

namespace bm {
namespace {

constexpr uint64_t kMiB = 1 << 20;

class ReplicationDriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* id : {"w1", "w2", "w3"}) {
      registry_.Register(id, std::string("tcp://127.0.0.1:1") + id[1],
                         WorkerStats{.memory_capacity = 64 * kMiB});
    }
    for (const char* id : {"w1", "w2"}) {
      index_.Apply(id,
                   BlockChange{kBlock, false, StorageLevel::kMemoryAndDisk2, Tier::kMemory, 1000});
    }
  }
  // w2 is dropped: kBlock is short of a copy, which w1 makes.
  void DropW2() {
    const size_t locations = index_.RemoveWorker("w2");
    registry_.Remove("w2");
    driver_.WorkerGone("w2", locations);
  }

  const BlockId kBlock = BlockId::Rdd(1, 0);
  FakeClock clock_;
  BlockIndex index_;
  WorkerRegistry registry_{clock_};
  WorkerRequestIds request_ids_;
  ReplicationDriver driver_{clock_, request_ids_, /*max_in_flight=*/16, std::chrono::seconds(30)};
};

TEST_F(ReplicationDriverTest, PlansEachCopyUnderAFreshRequestId) {
  const uint64_t before = request_ids_.Next();
  DropW2();
  std::vector<ReplicationDriver::Copy> copies = driver_.Plan(index_, registry_);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_GT(copies[0].request_id, before);
  EXPECT_EQ(copies[0].command.block, kBlock);
  EXPECT_EQ(copies[0].command.source, "w1");
  EXPECT_EQ(driver_.in_flight(), 1u);
  // In flight: not planned again.
  EXPECT_TRUE(driver_.Plan(index_, registry_).empty());
}

TEST_F(ReplicationDriverTest, AnswerFreesTheCopysSlotOnce) {
  DropW2();
  std::vector<ReplicationDriver::Copy> copies = driver_.Plan(index_, registry_);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_FALSE(driver_.CopyAnswered(copies[0].request_id + 1000));
  EXPECT_TRUE(driver_.CopyAnswered(copies[0].request_id));
  EXPECT_FALSE(driver_.CopyAnswered(copies[0].request_id));
  EXPECT_EQ(driver_.in_flight(), 0u);
}

TEST_F(ReplicationDriverTest, DroppedSourceForgetsTheCopiesItWasMaking) {
  DropW2();
  std::vector<ReplicationDriver::Copy> copies = driver_.Plan(index_, registry_);
  ASSERT_EQ(copies.size(), 1u);
  driver_.WorkerGone("w1", index_.RemoveWorker("w1"));
  EXPECT_FALSE(driver_.CopyAnswered(copies[0].request_id));
}

TEST_F(ReplicationDriverTest, TrimDropsCopiesBeyondTheLevelFromTheIndexOnce) {
  // kBlock wants two copies; a third lands on w3 (its worker came back after a re-copy).
  BlockChange third{kBlock, false, StorageLevel::kMemoryAndDisk2, Tier::kMemory, 1000};
  third.version = 5;
  index_.Apply("w3", third);
  std::vector<RetiredCopy> extra = driver_.TrimExtraCopies(index_, registry_, {kBlock, kBlock});
  ASSERT_EQ(extra.size(), 1u);
  EXPECT_EQ(extra[0].id, kBlock);
  EXPECT_EQ(extra[0].version, index_.VersionOf(kBlock).value_or(0));
  EXPECT_EQ(index_.Find(kBlock)->locations.size(), 2u);
  // At its level now: nothing more to trim.
  EXPECT_TRUE(driver_.TrimExtraCopies(index_, registry_, {kBlock}).empty());
}

}  // namespace
}  // namespace bm
