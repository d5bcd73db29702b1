#include "master/replication_planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>

namespace bm {
namespace {

using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr uint64_t kMiB = 1 << 20;
constexpr Duration kCopyTimeout = seconds(30);

class ReplicationPlannerTest : public ::testing::Test {
 protected:
  void AddWorker(const std::string& id, WorkerLabels labels = {},
                 WorkerStats stats = {.memory_capacity = 64 * kMiB}) {
    registry_.Register(id, "tcp://127.0.0.1:" + std::to_string(1000 + registry_.size()), stats,
                       std::move(labels));
  }
  void Store(const std::string& worker, const BlockId& block, StorageLevel level,
             uint64_t size = 1000) {
    const Tier tier = UsesMemory(level) ? Tier::kMemory : Tier::kDisk;
    index_.Apply(worker, BlockChange{block, false, level, tier, size});
  }
  // The master dropped the worker.
  void Drop(const std::string& worker) {
    registry_.Remove(worker);
    index_.RemoveWorker(worker);
    planner_.MarkAllForCheck();
  }
  static std::vector<std::string> TargetIds(const ReplicationPlanner::CopyCommand& command) {
    std::vector<std::string> ids;
    for (const WorkerRecord& target : command.targets) ids.push_back(target.id);
    return ids;
  }

  FakeClock clock_;
  BlockIndex index_;
  WorkerRegistry registry_{clock_};
  ReplicationPlanner planner_{clock_, /*max_in_flight=*/16, kCopyTimeout};
};

TEST_F(ReplicationPlannerTest, BlockThatLostACopyIsPlannedOnceToAWorkerWithoutOne) {
  for (const char* id : {"w1", "w2", "w3"}) AddWorker(id);
  const BlockId block = BlockId::Rdd(1, 0);
  Store("w1", block, StorageLevel::kMemoryAndDisk2);
  Store("w2", block, StorageLevel::kMemoryAndDisk2);
  Drop("w2");

  std::vector<ReplicationPlanner::CopyCommand> commands = planner_.Plan(index_, registry_);
  ASSERT_EQ(commands.size(), 1u);
  EXPECT_EQ(commands[0].block, block);
  EXPECT_EQ(commands[0].level, StorageLevel::kMemoryAndDisk2);
  EXPECT_EQ(commands[0].source, "w1");
  EXPECT_THAT(TargetIds(commands[0]), ElementsAre("w3"));
  EXPECT_EQ(planner_.under_replicated(), 1u);
  EXPECT_EQ(planner_.in_flight(), 1u);

  // In flight: not planned again, even after another scan.
  EXPECT_THAT(planner_.Plan(index_, registry_), IsEmpty());
  planner_.MarkAllForCheck();
  clock_.Advance(kCopyTimeout - seconds(1));
  EXPECT_THAT(planner_.Plan(index_, registry_), IsEmpty());
}

TEST_F(ReplicationPlannerTest, FailedCopyIsPlannedAgainAfterCopyFinished) {
  for (const char* id : {"w1", "w2", "w3"}) AddWorker(id);
  const BlockId block = BlockId::Rdd(1, 0);
  Store("w1", block, StorageLevel::kMemoryOnly2);
  Store("w2", block, StorageLevel::kMemoryOnly2);
  Drop("w2");
  ASSERT_EQ(planner_.Plan(index_, registry_).size(), 1u);

  planner_.CopyFinished(block);  // answered, but no copy landed
  EXPECT_EQ(planner_.in_flight(), 0u);
  std::vector<ReplicationPlanner::CopyCommand> again = planner_.Plan(index_, registry_);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_THAT(TargetIds(again[0]), ElementsAre("w3"));
}

TEST_F(ReplicationPlannerTest, UnansweredCopyIsPlannedAgainAfterTheCopyTimeout) {
  for (const char* id : {"w1", "w2", "w3"}) AddWorker(id);
  const BlockId block = BlockId::Rdd(1, 0);
  Store("w1", block, StorageLevel::kMemoryAndDisk2);
  Store("w2", block, StorageLevel::kMemoryAndDisk2);
  Drop("w2");
  ASSERT_EQ(planner_.Plan(index_, registry_).size(), 1u);

  clock_.Advance(kCopyTimeout);
  std::vector<ReplicationPlanner::CopyCommand> again = planner_.Plan(index_, registry_);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].block, block);
}

TEST_F(ReplicationPlannerTest, BlockBackAtItsLevelIsNoLongerUnderReplicated) {
  for (const char* id : {"w1", "w2", "w3"}) AddWorker(id);
  const BlockId block = BlockId::Rdd(1, 0);
  Store("w1", block, StorageLevel::kMemoryAndDisk2);
  Store("w2", block, StorageLevel::kMemoryAndDisk2);
  Drop("w2");
  ASSERT_EQ(planner_.Plan(index_, registry_).size(), 1u);

  Store("w3", block, StorageLevel::kMemoryAndDisk2);  // the target's block report
  planner_.CopyFinished(block);
  EXPECT_THAT(planner_.Plan(index_, registry_), IsEmpty());
  EXPECT_EQ(planner_.under_replicated(), 0u);
  EXPECT_EQ(planner_.in_flight(), 0u);
}

TEST_F(ReplicationPlannerTest, SingleCopyLevelsAreNotReplicated) {
  for (const char* id : {"w1", "w2"}) AddWorker(id);
  Store("w1", BlockId::Rdd(1, 0), StorageLevel::kMemoryAndDisk);
  Store("w1", BlockId::Rdd(1, 1), StorageLevel::kDiskOnly);
  planner_.MarkAllForCheck();
  EXPECT_THAT(planner_.Plan(index_, registry_), IsEmpty());
}

TEST_F(ReplicationPlannerTest, TargetsPreferAnotherRackThenAnotherHost) {
  // w2 has the most free memory, but shares the holder's rack; w3 is on another rack.
  AddWorker("w1", {.host = "h1", .rack = "r1"});
  AddWorker("w2", {.host = "h2", .rack = "r1"}, {.memory_capacity = 64 * kMiB});
  AddWorker("w3", {.host = "h3", .rack = "r2"},
            {.memory_capacity = 64 * kMiB, .memory_used = 32 * kMiB});
  AddWorker("dead", {.host = "h4", .rack = "r2"});
  const BlockId block = BlockId::Rdd(1, 0);
  Store("w1", block, StorageLevel::kMemoryAndDisk2);
  Store("dead", block, StorageLevel::kMemoryAndDisk2);
  Drop("dead");
  std::vector<ReplicationPlanner::CopyCommand> commands = planner_.Plan(index_, registry_);
  ASSERT_EQ(commands.size(), 1u);
  EXPECT_THAT(TargetIds(commands[0]), ElementsAre("w3"));
}

TEST_F(ReplicationPlannerTest, TargetsPreferAnotherHostWithinTheRack) {
  // Same rack everywhere: w2 (most free memory) is on the holder's host, w3 is not.
  AddWorker("w1", {.host = "h1", .rack = "r1"});
  AddWorker("w2", {.host = "h1", .rack = "r1"}, {.memory_capacity = 64 * kMiB});
  AddWorker("w3", {.host = "h2", .rack = "r1"},
            {.memory_capacity = 64 * kMiB, .memory_used = 32 * kMiB});
  AddWorker("dead", {.host = "h3", .rack = "r1"});
  const BlockId block = BlockId::Rdd(1, 0);
  Store("w1", block, StorageLevel::kMemoryOnly2);
  Store("dead", block, StorageLevel::kMemoryOnly2);
  Drop("dead");
  std::vector<ReplicationPlanner::CopyCommand> commands = planner_.Plan(index_, registry_);
  ASSERT_EQ(commands.size(), 1u);
  EXPECT_THAT(TargetIds(commands[0]), ElementsAre("w3"));
}

TEST_F(ReplicationPlannerTest, MemoryOnlyBlockOnADecommissioningWorkerGoesToAnActiveWorker) {
  AddWorker("w1");
  AddWorker("w2");
  AddWorker("w3");
  const BlockId block = BlockId::Broadcast(7);
  Store("w1", block, StorageLevel::kMemoryOnly);
  ASSERT_TRUE(registry_.Decommission("w1").ok());
  ASSERT_TRUE(registry_.Decommission("w2").ok());  // draining too: not a target
  planner_.MarkAllForCheck();

  std::vector<ReplicationPlanner::CopyCommand> commands = planner_.Plan(index_, registry_);
  ASSERT_EQ(commands.size(), 1u);
  EXPECT_EQ(commands[0].source, "w1");
  EXPECT_EQ(commands[0].level, StorageLevel::kMemoryOnly);
  EXPECT_THAT(TargetIds(commands[0]), ElementsAre("w3"));
}

TEST_F(ReplicationPlannerTest,
       DecommissioningWorkerIsDrainedOnceItsBlocksHaveCopiesOnStayingWorkers) {
  for (const char* id : {"w1", "w2", "w3"}) AddWorker(id);
  const BlockId single = BlockId::Rdd(1, 0);
  const BlockId pair = BlockId::Rdd(1, 1);
  const BlockId elsewhere = BlockId::Rdd(1, 2);
  Store("w1", single, StorageLevel::kMemoryOnly);
  Store("w1", pair, StorageLevel::kMemoryAndDisk2);
  Store("w2", pair, StorageLevel::kMemoryAndDisk2);
  Store("w3", elsewhere, StorageLevel::kDiskOnly);
  EXPECT_THAT(planner_.DrainedWorkers(index_, registry_), IsEmpty());  // nobody draining

  ASSERT_TRUE(registry_.Decommission("w1").ok());
  planner_.MarkAllForCheck();
  EXPECT_THAT(planner_.DrainedWorkers(index_, registry_), IsEmpty());
  std::vector<ReplicationPlanner::CopyCommand> commands = planner_.Plan(index_, registry_);
  ASSERT_EQ(commands.size(), 2u);
  for (const ReplicationPlanner::CopyCommand& command : commands) {
    EXPECT_EQ(command.source, command.block == pair ? "w2" : "w1") << command.block.ToString();
  }

  Store("w2", single, StorageLevel::kMemoryOnly);
  EXPECT_THAT(planner_.DrainedWorkers(index_, registry_), IsEmpty()) << "pair still needs w1";
  Store("w3", pair, StorageLevel::kMemoryAndDisk2);
  EXPECT_THAT(planner_.DrainedWorkers(index_, registry_), ElementsAre("w1"));
}

TEST_F(ReplicationPlannerTest, WithOneStayingWorkerATwoCopyBlockNeedsOneCopyThere) {
  AddWorker("w1");
  AddWorker("w2");
  const BlockId block = BlockId::Rdd(3, 0);
  Store("w1", block, StorageLevel::kMemoryAndDisk2);
  ASSERT_TRUE(registry_.Decommission("w1").ok());
  planner_.MarkAllForCheck();
  EXPECT_THAT(planner_.DrainedWorkers(index_, registry_), IsEmpty());
  std::vector<ReplicationPlanner::CopyCommand> commands = planner_.Plan(index_, registry_);
  ASSERT_EQ(commands.size(), 1u);
  EXPECT_THAT(TargetIds(commands[0]), ElementsAre("w2"));

  Store("w2", block, StorageLevel::kMemoryAndDisk2);
  EXPECT_THAT(planner_.DrainedWorkers(index_, registry_), ElementsAre("w1"));
}

TEST_F(ReplicationPlannerTest, LastWorkerDecommissioningIsNeverDrained) {
  AddWorker("w1");
  Store("w1", BlockId::Rdd(1, 0), StorageLevel::kMemoryOnly);
  ASSERT_TRUE(registry_.Decommission("w1").ok());
  planner_.MarkAllForCheck();
  EXPECT_THAT(planner_.Plan(index_, registry_), IsEmpty());
  EXPECT_THAT(planner_.DrainedWorkers(index_, registry_), IsEmpty());
}

TEST_F(ReplicationPlannerTest, EmptyDecommissioningWorkerIsDrainedAtOnce) {
  AddWorker("w1");
  AddWorker("w2");
  Store("w2", BlockId::Rdd(1, 0), StorageLevel::kMemoryOnly);
  ASSERT_TRUE(registry_.Decommission("w1").ok());
  EXPECT_THAT(planner_.DrainedWorkers(index_, registry_), ElementsAre("w1"));
}

TEST_F(ReplicationPlannerTest, BlockReachingADrainingWorkerAfterTheDrainStartedIsCopiedToo) {
  AddWorker("w1");
  AddWorker("w2");
  Store("w1", BlockId::Rdd(1, 0), StorageLevel::kMemoryOnly);
  ASSERT_TRUE(registry_.Decommission("w1").ok());
  planner_.MarkAllForCheck();
  ASSERT_EQ(planner_.Plan(index_, registry_).size(), 1u);
  Store("w2", BlockId::Rdd(1, 0), StorageLevel::kMemoryOnly);
  planner_.CopyFinished(BlockId::Rdd(1, 0));

  // A put that was under way when the drain started lands on w1 afterwards.
  const BlockId late = BlockId::Rdd(1, 1);
  Store("w1", late, StorageLevel::kMemoryAndDisk);
  EXPECT_THAT(planner_.DrainedWorkers(index_, registry_), IsEmpty());
  std::vector<ReplicationPlanner::CopyCommand> commands = planner_.Plan(index_, registry_);
  ASSERT_EQ(commands.size(), 1u) << "the late block must be copied or the drain never ends";
  EXPECT_EQ(commands[0].block, late);
  EXPECT_THAT(TargetIds(commands[0]), ElementsAre("w2"));
}

TEST_F(ReplicationPlannerTest, CopyWhoseSourceWasDroppedIsPlannedAgainAtOnce) {
  for (const char* id : {"w1", "w2", "w3", "w4"}) AddWorker(id);
  const BlockId block = BlockId::Rdd(1, 0);
  Store("w1", block, StorageLevel::kMemoryAndDisk2);
  Store("w2", block, StorageLevel::kMemoryAndDisk2);
  ASSERT_TRUE(registry_.Decommission("w1").ok());
  planner_.MarkAllForCheck();
  std::vector<ReplicationPlanner::CopyCommand> first = planner_.Plan(index_, registry_);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].source, "w2");  // the copy that stays

  // The source dies before answering; the draining w1 still has a copy to read from.
  Drop("w2");
  std::vector<ReplicationPlanner::CopyCommand> again = planner_.Plan(index_, registry_);
  ASSERT_EQ(again.size(), 1u) << "planned again only after the copy timeout";
  EXPECT_EQ(again[0].source, "w1");
  EXPECT_EQ(again[0].targets.size(), 2u);
}

TEST_F(ReplicationPlannerTest, NothingIsPlannedWhenNoWorkerHasRoom) {
  AddWorker("w1", {}, {.memory_capacity = 64 * kMiB});
  AddWorker("w2", {}, {.memory_capacity = 64 * kMiB});
  // Full memory, and a disk limit already reached.
  AddWorker("w3", {},
            {.memory_capacity = 8 * kMiB,
             .memory_used = 8 * kMiB,
             .disk_used = 4 * kMiB,
             .disk_capacity = 4 * kMiB});
  const BlockId memory_block = BlockId::Rdd(1, 0);
  const BlockId disk_block = BlockId::Rdd(1, 1);
  Store("w1", memory_block, StorageLevel::kMemoryAndDisk2, 2 * kMiB);
  Store("w2", memory_block, StorageLevel::kMemoryAndDisk2, 2 * kMiB);
  Store("w1", disk_block, StorageLevel::kDiskOnly2, 2 * kMiB);
  Store("w2", disk_block, StorageLevel::kDiskOnly2, 2 * kMiB);
  Drop("w2");

  EXPECT_THAT(planner_.Plan(index_, registry_), IsEmpty());
  EXPECT_EQ(planner_.under_replicated(), 2u);
  EXPECT_EQ(planner_.in_flight(), 0u);

  // Room appears (the worker freed space and said so in a heartbeat): both are planned.
  ASSERT_TRUE(
      registry_
          .Touch("w3", {.memory_capacity = 8 * kMiB, .disk_used = 0, .disk_capacity = 4 * kMiB})
          .ok());
  std::vector<ReplicationPlanner::CopyCommand> commands = planner_.Plan(index_, registry_);
  ASSERT_EQ(commands.size(), 2u);
  for (const ReplicationPlanner::CopyCommand& command : commands) {
    EXPECT_THAT(TargetIds(command), ElementsAre("w3"));
  }
}

TEST_F(ReplicationPlannerTest, AReadOnlyDiskTakesNoDiskCopies) {
  AddWorker("w1", {}, {.memory_capacity = 64 * kMiB});
  AddWorker("w2", {}, {.memory_capacity = 64 * kMiB});
  // No limit (0), but its disk store is read-only after a storage error.
  AddWorker("w3", {}, {.memory_capacity = 64 * kMiB, .disk_read_only = true});
  const BlockId block = BlockId::Rdd(1, 0);
  Store("w1", block, StorageLevel::kDiskOnly2, 2 * kMiB);
  Store("w2", block, StorageLevel::kDiskOnly2, 2 * kMiB);
  Drop("w2");
  EXPECT_THAT(planner_.Plan(index_, registry_), IsEmpty());
  EXPECT_EQ(planner_.under_replicated(), 1u);

  ASSERT_TRUE(registry_.Touch("w3", {.memory_capacity = 64 * kMiB}).ok());
  std::vector<ReplicationPlanner::CopyCommand> commands = planner_.Plan(index_, registry_);
  ASSERT_EQ(commands.size(), 1u);
  EXPECT_THAT(TargetIds(commands[0]), ElementsAre("w3"));
}

TEST_F(ReplicationPlannerTest, AtMostMaxInFlightCopiesAreInFlight) {
  ReplicationPlanner planner(clock_, /*max_in_flight=*/2, kCopyTimeout);
  for (const char* id : {"w1", "w2", "w3"}) AddWorker(id);
  for (uint64_t p = 0; p < 5; ++p) {
    Store("w1", BlockId::Rdd(1, p), StorageLevel::kMemoryOnly2);
    Store("w2", BlockId::Rdd(1, p), StorageLevel::kMemoryOnly2);
  }
  registry_.Remove("w2");
  index_.RemoveWorker("w2");
  planner.MarkAllForCheck();
  std::vector<ReplicationPlanner::CopyCommand> first = planner.Plan(index_, registry_);
  EXPECT_EQ(first.size(), 2u);
  EXPECT_THAT(planner.Plan(index_, registry_), IsEmpty());
  planner.CopyFinished(first[0].block);
  Store("w3", first[0].block, StorageLevel::kMemoryOnly2);
  EXPECT_EQ(planner.Plan(index_, registry_).size(), 1u);
  EXPECT_EQ(planner.in_flight(), 2u);
}

TEST_F(ReplicationPlannerTest, ExtraCopiesKeepMemoryCopiesOnDistinctRacks) {
  AddWorker("w1", {.host = "h1", .rack = "r1"});
  AddWorker("w2", {.host = "h2", .rack = "r1"});
  AddWorker("w3", {.host = "h3", .rack = "r2"});
  const BlockId block = BlockId::Rdd(1, 0);
  index_.Apply("w1", BlockChange{block, false, StorageLevel::kMemoryAndDisk2, Tier::kMemory, 10});
  index_.Apply("w2", BlockChange{block, false, StorageLevel::kMemoryAndDisk2, Tier::kMemory, 10});
  index_.Apply("w3", BlockChange{block, false, StorageLevel::kMemoryAndDisk2, Tier::kDisk, 10});
  std::vector<IndexedLocation> extra = planner_.ExtraCopies(*index_.Find(block), registry_);
  // Two memory copies on r1, one disk copy on r2: one r1 copy goes, the other rack stays.
  ASSERT_EQ(extra.size(), 1u);
  EXPECT_EQ(extra[0].worker_id, "w2");
}

TEST_F(ReplicationPlannerTest, NoExtraCopiesAtOrBelowTheLevel) {
  for (const char* id : {"w1", "w2"}) AddWorker(id);
  const BlockId block = BlockId::Rdd(1, 0);
  Store("w1", block, StorageLevel::kMemoryOnly2);
  Store("w2", block, StorageLevel::kMemoryOnly2);
  EXPECT_THAT(planner_.ExtraCopies(*index_.Find(block), registry_), IsEmpty());
  const BlockId single = BlockId::Rdd(1, 1);
  Store("w1", single, StorageLevel::kMemoryOnly);
  Store("w2", single, StorageLevel::kMemoryOnly);
  EXPECT_EQ(planner_.ExtraCopies(*index_.Find(single), registry_).size(), 1u);
}

}  // namespace
}  // namespace bm
