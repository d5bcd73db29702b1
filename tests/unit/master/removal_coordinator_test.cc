#include "master/removal_coordinator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>

namespace bm {
namespace {

using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using Kind = RemovalCoordinator::Reply::Kind;
using Command = RemovalCoordinator::Command;

constexpr Duration kTimeout = seconds(5);
constexpr uint64_t kCaller = 42;

const BlockId kA = BlockId::Rdd(1, 0);
const BlockId kB = BlockId::Rdd(1, 1);
const BlockId kC = BlockId::Rdd(1, 2);

class RemovalCoordinatorTest : public ::testing::Test {
 protected:
  // Starts a client's removal of A and B (on w1) and B and C (on w2).
  RemovalCoordinator::Started RemoveAbc() {
    return removals_.RemoveBlocks(kCaller, 3, {{"w1", {kA, kB}}, {"w2", {kB, kC}}}, kTimeout);
  }
  static const Command& CommandTo(const std::vector<Command>& commands, const std::string& worker) {
    for (const Command& command : commands) {
      if (command.worker_id == worker) return command;
    }
    ADD_FAILURE() << "no command to " << worker;
    return commands.front();
  }

  FakeClock clock_;
  WorkerRequestIds request_ids_;
  RemovalCoordinator removals_{clock_, request_ids_};
};

TEST_F(RemovalCoordinatorTest, SendsOneCommandPerHolder) {
  RemovalCoordinator::Started started = RemoveAbc();
  EXPECT_FALSE(started.reply.has_value());
  ASSERT_EQ(started.commands.size(), 2u);
  EXPECT_THAT(CommandTo(started.commands, "w1").blocks, ElementsAre(kA, kB));
  EXPECT_THAT(CommandTo(started.commands, "w2").blocks, ElementsAre(kB, kC));
  EXPECT_THAT(CommandTo(started.commands, "w1").versions, IsEmpty());
  EXPECT_NE(started.commands[0].request_id, started.commands[1].request_id);
  EXPECT_EQ(removals_.waiting(), 1u);
}

TEST_F(RemovalCoordinatorTest, RepliesWithConfirmedCountWhenAllHoldersConfirm) {
  RemovalCoordinator::Started started = RemoveAbc();
  const Command& w1 = CommandTo(started.commands, "w1");
  const Command& w2 = CommandTo(started.commands, "w2");

  RemovalCoordinator::Answered first = removals_.WorkerAnswered("w1", w1.request_id, Status::Ok());
  EXPECT_FALSE(first.reply.has_value());
  ASSERT_EQ(first.removed.size(), 2u);
  EXPECT_EQ(first.removed[0].id, kA);
  EXPECT_TRUE(first.removed[0].removed);

  RemovalCoordinator::Answered last = removals_.WorkerAnswered("w2", w2.request_id, Status::Ok());
  ASSERT_TRUE(last.reply.has_value());
  EXPECT_EQ(last.reply->kind, Kind::kRemoved);
  EXPECT_EQ(last.reply->caller, kCaller);
  EXPECT_EQ(last.reply->removed, 3u);  // distinct blocks: B counts once
  EXPECT_EQ(removals_.waiting(), 0u);
  EXPECT_FALSE(removals_.NextDeadline().has_value());
}

TEST_F(RemovalCoordinatorTest, RepliesWithConfirmedCountOnTimeout) {
  RemovalCoordinator::Started started = RemoveAbc();
  removals_.WorkerAnswered("w1", CommandTo(started.commands, "w1").request_id, Status::Ok());
  ASSERT_EQ(removals_.NextDeadline(), clock_.Now() + kTimeout);

  clock_.Advance(kTimeout - seconds(1));
  EXPECT_THAT(removals_.Expire(), IsEmpty());
  clock_.Advance(seconds(1));
  std::vector<RemovalCoordinator::Reply> replies = removals_.Expire();
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].caller, kCaller);
  EXPECT_EQ(replies[0].removed, 2u);  // A and B, from w1

  // w2's late answer is ignored: it reports its removals to the master anyway.
  RemovalCoordinator::Answered late =
      removals_.WorkerAnswered("w2", CommandTo(started.commands, "w2").request_id, Status::Ok());
  EXPECT_THAT(late.removed, IsEmpty());
  EXPECT_FALSE(late.reply.has_value());
}

TEST_F(RemovalCoordinatorTest, DroppedWorkerCountsAsDone) {
  RemovalCoordinator::Started started = RemoveAbc();
  removals_.WorkerAnswered("w1", CommandTo(started.commands, "w1").request_id, Status::Ok());
  std::vector<RemovalCoordinator::Reply> replies = removals_.WorkerGone("w2");
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].removed, 2u);
  EXPECT_EQ(removals_.waiting(), 0u);
}

TEST_F(RemovalCoordinatorTest, FailedRemovalCountsAsAnsweredButConfirmsNothing) {
  RemovalCoordinator::Started started = RemoveAbc();
  RemovalCoordinator::Answered failed = removals_.WorkerAnswered(
      "w1", CommandTo(started.commands, "w1").request_id, InternalError("disk on fire"));
  EXPECT_THAT(failed.removed, IsEmpty());
  RemovalCoordinator::Answered last =
      removals_.WorkerAnswered("w2", CommandTo(started.commands, "w2").request_id, Status::Ok());
  ASSERT_TRUE(last.reply.has_value());
  EXPECT_EQ(last.reply->removed, 2u);  // B and C
}

TEST_F(RemovalCoordinatorTest, UnsentCommandsCountAsAnswered) {
  RemovalCoordinator::Started started = RemoveAbc();
  EXPECT_FALSE(removals_.Unsent(started.commands[0].request_id).has_value());
  std::optional<RemovalCoordinator::Reply> reply = removals_.Unsent(started.commands[1].request_id);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->removed, 0u);
}

TEST_F(RemovalCoordinatorTest, AnswerFromAnotherWorkerIsIgnored) {
  RemovalCoordinator::Started started = RemoveAbc();
  RemovalCoordinator::Answered wrong =
      removals_.WorkerAnswered("w2", CommandTo(started.commands, "w1").request_id, Status::Ok());
  EXPECT_THAT(wrong.removed, IsEmpty());
  EXPECT_FALSE(wrong.reply.has_value());
  EXPECT_EQ(removals_.waiting(), 1u);
}

TEST_F(RemovalCoordinatorTest, RemovalOfBlocksNobodyHoldsRepliesAtOnce) {
  RemovalCoordinator::Started started = removals_.RemoveBlocks(kCaller, 2, {}, kTimeout);
  EXPECT_THAT(started.commands, IsEmpty());
  ASSERT_TRUE(started.reply.has_value());
  EXPECT_EQ(started.reply->kind, Kind::kRemoved);
  EXPECT_EQ(started.reply->removed, 0u);
  EXPECT_EQ(removals_.waiting(), 0u);
}

TEST_F(RemovalCoordinatorTest, AbortedOnShutdown) {
  RemoveAbc();
  removals_.AwaitRemoval(7, {RetiredCopy{"w3", kA, 11}}, kTimeout);
  std::vector<uint64_t> callers = removals_.TakeAllCallers();
  std::sort(callers.begin(), callers.end());
  EXPECT_THAT(callers, ElementsAre(7u, kCaller));
  EXPECT_EQ(removals_.waiting(), 0u);
  EXPECT_THAT(removals_.WorkerGone("w1"), IsEmpty());
}

TEST_F(RemovalCoordinatorTest, AcknowledgesReportOnceReplacedCopiesAreGone) {
  RemovalCoordinator::Started started = removals_.AwaitRemoval(
      kCaller, {RetiredCopy{"w1", kA, 11}, RetiredCopy{"w1", kB, 12}}, kTimeout);
  ASSERT_EQ(started.commands.size(), 1u);
  EXPECT_THAT(started.commands[0].versions, ElementsAre(11u, 12u));
  RemovalCoordinator::Answered answered =
      removals_.WorkerAnswered("w1", started.commands[0].request_id, Status::Ok());
  ASSERT_EQ(answered.removed.size(), 2u);
  EXPECT_EQ(answered.removed[1].version, 12u);
  ASSERT_TRUE(answered.reply.has_value());
  EXPECT_EQ(answered.reply->kind, Kind::kAcknowledged);
  EXPECT_EQ(answered.reply->caller, kCaller);
}

TEST_F(RemovalCoordinatorTest, CopiesNobodyWaitsForAreNotTracked) {
  std::vector<Command> commands =
      removals_.RemoveCopies({RetiredCopy{"w2", kA, 1}, RetiredCopy{"w1", kB, 2}});
  ASSERT_EQ(commands.size(), 2u);
  EXPECT_EQ(commands[0].worker_id, "w1");  // by worker id
  EXPECT_EQ(removals_.waiting(), 0u);
  EXPECT_THAT(removals_.WorkerAnswered("w1", commands[0].request_id, Status::Ok()).removed,
              IsEmpty());
}

TEST_F(RemovalCoordinatorTest, SplitsLargeRemovalsIntoBatches) {
  std::vector<BlockId> many;
  for (uint32_t i = 0; i < RemovalCoordinator::kBatch + 1; ++i) many.push_back(BlockId::Rdd(2, i));
  RemovalCoordinator::Started started =
      removals_.RemoveBlocks(kCaller, many.size(), {{"w1", many}}, kTimeout);
  ASSERT_EQ(started.commands.size(), 2u);
  EXPECT_EQ(started.commands[0].blocks.size(), RemovalCoordinator::kBatch);
  EXPECT_EQ(started.commands[1].blocks.size(), 1u);
  removals_.WorkerAnswered("w1", started.commands[0].request_id, Status::Ok());
  RemovalCoordinator::Answered last =
      removals_.WorkerAnswered("w1", started.commands[1].request_id, Status::Ok());
  ASSERT_TRUE(last.reply.has_value());
  EXPECT_EQ(last.reply->removed, many.size());
}

}  // namespace
}  // namespace bm
