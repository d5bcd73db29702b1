#include "master/worker_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>

namespace bm {
namespace {

using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

class WorkerRegistryTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  WorkerRegistry registry_{clock_};
};

TEST_F(WorkerRegistryTest, RegisteredWorkerIsFound) {
  WorkerStats stats{.memory_capacity = 100, .memory_used = 10};
  EXPECT_FALSE(registry_.Register("w1", "tcp://127.0.0.1:1", stats));
  const WorkerRecord* record = registry_.Find("w1");
  ASSERT_NE(record, nullptr);
  EXPECT_EQ(record->address, "tcp://127.0.0.1:1");
  EXPECT_EQ(record->stats, stats);
  EXPECT_EQ(record->last_seen, clock_.Now());
  EXPECT_EQ(registry_.Find("w2"), nullptr);
}

TEST_F(WorkerRegistryTest, RegisteringAKnownIdReplacesItsRecord) {
  ASSERT_FALSE(registry_.Register("w1", "tcp://127.0.0.1:1", {}));
  clock_.Advance(seconds(3));
  EXPECT_TRUE(registry_.Register("w1", "tcp://127.0.0.1:2", {.block_count = 4}));
  EXPECT_EQ(registry_.size(), 1u);
  EXPECT_EQ(registry_.Find("w1")->address, "tcp://127.0.0.1:2");
  EXPECT_EQ(registry_.Find("w1")->stats.block_count, 4u);
  EXPECT_EQ(registry_.Find("w1")->last_seen, clock_.Now());
}

TEST_F(WorkerRegistryTest, TouchOfUnknownWorkerIsUnknownWorker) {
  Status status = registry_.Touch("ghost", {});
  EXPECT_EQ(status.code(), StatusCode::kUnknownWorker);
}

TEST_F(WorkerRegistryTest, TouchUpdatesStatsAndLastSeen) {
  ASSERT_FALSE(registry_.Register("w1", "tcp://a:1", {}));
  clock_.Advance(seconds(2));
  ASSERT_TRUE(registry_.Touch("w1", {.disk_used = 9}).ok());
  EXPECT_EQ(registry_.Find("w1")->stats.disk_used, 9u);
  EXPECT_EQ(registry_.Find("w1")->last_seen, clock_.Now());
}

TEST_F(WorkerRegistryTest, WorkerExpiresOnlyAfterTimeoutWithoutContact) {
  ASSERT_FALSE(registry_.Register("w1", "tcp://a:1", {}));
  ASSERT_FALSE(registry_.Register("w2", "tcp://a:2", {}));
  clock_.Advance(seconds(6));
  ASSERT_TRUE(registry_.Touch("w2", {}).ok());
  clock_.Advance(seconds(4));
  EXPECT_THAT(registry_.Expired(seconds(10)), IsEmpty());  // exactly at the timeout: not yet
  clock_.Advance(std::chrono::milliseconds(1));
  EXPECT_THAT(registry_.Expired(seconds(10)), ElementsAre("w1"));
  clock_.Advance(seconds(6));
  EXPECT_THAT(registry_.Expired(seconds(10)), ElementsAre("w1", "w2"));
}

TEST_F(WorkerRegistryTest, ListIsSortedById) {
  for (const char* id : {"w3", "w1", "w2"}) ASSERT_FALSE(registry_.Register(id, "tcp://a:1", {}));
  std::vector<std::string> ids;
  for (const WorkerRecord& record : registry_.List()) ids.push_back(record.id);
  EXPECT_THAT(ids, ElementsAre("w1", "w2", "w3"));
}

TEST_F(WorkerRegistryTest, RemovedWorkerIsGone) {
  ASSERT_FALSE(registry_.Register("w1", "tcp://a:1", {}));
  EXPECT_TRUE(registry_.Remove("w1"));
  EXPECT_FALSE(registry_.Remove("w1"));
  EXPECT_FALSE(registry_.Contains("w1"));
  EXPECT_EQ(registry_.Touch("w1", {}).code(), StatusCode::kUnknownWorker);
}

TEST_F(WorkerRegistryTest, RestoredWorkerIsUnconfirmedUntilItRegisters) {
  registry_.Restore("w1", "tcp://127.0.0.1:1", {.host = "h1", .rack = "r1"});
  const WorkerRecord* record = registry_.Find("w1");
  ASSERT_NE(record, nullptr);
  EXPECT_EQ(record->state, WorkerState::kUnconfirmed);
  EXPECT_EQ(record->labels.host, "h1");
  EXPECT_EQ(record->labels.rack, "r1");
  // Its heartbeats are refused so that it registers again with a full report.
  EXPECT_EQ(registry_.Touch("w1", WorkerStats{}).code(), StatusCode::kUnknownWorker);

  EXPECT_TRUE(registry_.Register("w1", "tcp://127.0.0.1:2", WorkerStats{}, {.host = "h2"}));
  record = registry_.Find("w1");
  EXPECT_EQ(record->state, WorkerState::kActive);
  EXPECT_EQ(record->labels.host, "h2");
  EXPECT_TRUE(registry_.Touch("w1", WorkerStats{}).ok());
}

TEST_F(WorkerRegistryTest, RestoredWorkerThatNeverRegistersExpiresFromItsRestoreTime) {
  registry_.Restore("w1", "tcp://127.0.0.1:1", {});
  clock_.Advance(seconds(10));
  EXPECT_THAT(registry_.Expired(seconds(10)), IsEmpty());
  clock_.Advance(seconds(1));
  EXPECT_THAT(registry_.Expired(seconds(10)), ElementsAre("w1"));
}

}  // namespace
}  // namespace bm

namespace bm {
namespace {

class WorkerRegistryLivenessTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  WorkerRegistry registry_{clock_};
};

TEST_F(WorkerRegistryLivenessTest, WorkerWhoseRepliesKeepArrivingDoesNotExpireWithoutHeartbeats) {
  ASSERT_FALSE(registry_.Register("w1", "tcp://a:1", {}));
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(std::chrono::seconds(6));
    registry_.HeardFrom("w1");  // a reply on the master's link, a block report
  }
  EXPECT_TRUE(registry_.Expired(std::chrono::seconds(10)).empty());
  clock_.Advance(std::chrono::seconds(11));
  EXPECT_EQ(registry_.Expired(std::chrono::seconds(10)), std::vector<std::string>{"w1"});
}

TEST_F(WorkerRegistryLivenessTest, RepliesDoNotConfirmARestoredWorker) {
  registry_.Restore("w1", "tcp://a:1", {});
  clock_.Advance(std::chrono::seconds(6));
  registry_.HeardFrom("w1");  // e.g. its answer to a removal sent before it registered
  clock_.Advance(std::chrono::seconds(5));
  // Still dropped from its restore time: it must register again, with a full report.
  EXPECT_EQ(registry_.Expired(std::chrono::seconds(10)), std::vector<std::string>{"w1"});
  EXPECT_EQ(registry_.Find("w1")->state, WorkerState::kUnconfirmed);
  registry_.HeardFrom("nobody");  // unknown ids are ignored
}

}  // namespace
}  // namespace bm
