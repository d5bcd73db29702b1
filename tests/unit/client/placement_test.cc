#include "client/placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "common/core/byte_size.h"

namespace bm {
namespace {

WorkerInfo Worker(std::string id, uint64_t memory_capacity, uint64_t memory_used,
                  uint64_t disk_used = 0, uint64_t disk_capacity = 0) {
  WorkerInfo w;
  w.address = "tcp://127.0.0.1:" + std::to_string(7700 + id.back());
  w.id = std::move(id);
  w.memory_capacity = memory_capacity;
  w.memory_used = memory_used;
  w.disk_used = disk_used;
  w.disk_capacity = disk_capacity;
  return w;
}

std::vector<std::string> Ids(const std::vector<WorkerInfo>& workers) {
  std::vector<std::string> ids;
  for (const WorkerInfo& w : workers) ids.push_back(w.id);
  return ids;
}

using Ids_ = std::vector<std::string>;

TEST(ChooseWorkersTest, MemoryLevelPrefersMostFreeMemory) {
  std::vector<WorkerInfo> workers = {Worker("w1", 4 * kGiB, 3 * kGiB),
                                     Worker("w2", 4 * kGiB, 1 * kGiB),
                                     Worker("w3", 8 * kGiB, 6 * kGiB)};
  EXPECT_EQ(Ids(ChooseWorkers(workers, kMiB, StorageLevel::kMemoryOnly, 0)),
            (Ids_{"w2", "w3", "w1"}));
  EXPECT_EQ(Ids(ChooseWorkers(workers, kMiB, StorageLevel::kMemoryAndDisk2, 0)),
            (Ids_{"w2", "w3", "w1"}));
}

TEST(ChooseWorkersTest, MemoryAndDiskFallsBackToLeastDiskUsedWhenNoMemoryFits) {
  std::vector<WorkerInfo> workers = {Worker("w1", kGiB, kGiB - kMiB, 5 * kGiB),
                                     Worker("w2", kGiB, kGiB - 2 * kMiB, 1 * kGiB),
                                     Worker("w3", kGiB, 0, 9 * kGiB)};
  // 100 MiB fits only w3's memory; the others follow by disk used.
  EXPECT_EQ(Ids(ChooseWorkers(workers, 100 * kMiB, StorageLevel::kMemoryAndDisk, 0)),
            (Ids_{"w3", "w2", "w1"}));
  // 2 GiB fits no memory at all: least disk used first.
  EXPECT_EQ(Ids(ChooseWorkers(workers, 2 * kGiB, StorageLevel::kMemoryAndDisk, 0)),
            (Ids_{"w2", "w1", "w3"}));
}

TEST(ChooseWorkersTest, DiskOnlyIgnoresMemoryAndSkipsFullDisks) {
  std::vector<WorkerInfo> workers = {Worker("w1", 8 * kGiB, 0, 3 * kGiB),
                                     Worker("w2", 0, 0, 2 * kGiB, 2 * kGiB + kMiB),
                                     Worker("w3", 0, 0, 4 * kGiB, /*unlimited*/ 0)};
  EXPECT_EQ(Ids(ChooseWorkers(workers, kMiB, StorageLevel::kDiskOnly, 0)),
            (Ids_{"w2", "w1", "w3"}));
  // w2's limit leaves 1 MiB: a 2 MiB block does not fit there.
  EXPECT_EQ(Ids(ChooseWorkers(workers, 2 * kMiB, StorageLevel::kDiskOnly2, 0)), (Ids_{"w1", "w3"}));
}

TEST(ChooseWorkersTest, DiskOverItsLimitHoldsNothing) {
  std::vector<WorkerInfo> workers = {Worker("w1", 0, 0, 3 * kGiB, 2 * kGiB)};
  EXPECT_TRUE(ChooseWorkers(workers, 0, StorageLevel::kDiskOnly, 0).empty());
}

TEST(ChooseWorkersTest, ReadOnlyDiskTakesNoDiskBlocksButStillTakesMemoryBlocks) {
  WorkerInfo full = Worker("w1", kGiB, 0, 0, /*unlimited*/ 0);
  full.disk_read_only = true;
  std::vector<WorkerInfo> workers = {full, Worker("w2", 0, 0, 5 * kGiB)};
  EXPECT_EQ(Ids(ChooseWorkers(workers, kMiB, StorageLevel::kDiskOnly, 0)), (Ids_{"w2"}));
  EXPECT_EQ(Ids(ChooseWorkers(workers, kMiB, StorageLevel::kMemoryOnly, 0)), (Ids_{"w1"}));
}

TEST(ChooseWorkersTest, MemoryOnlyNeverFallsBackToDisk) {
  std::vector<WorkerInfo> workers = {Worker("w1", 2 * kGiB, 2 * kGiB), Worker("w2", 512 * kMiB, 0),
                                     Worker("w3", 4 * kGiB, 3 * kGiB)};
  // No free memory holds 1 GiB; w1 and w3 could evict to make room, w2 never could.
  EXPECT_EQ(Ids(ChooseWorkers(workers, kGiB, StorageLevel::kMemoryOnly, 0)), (Ids_{"w3", "w1"}));
  EXPECT_TRUE(ChooseWorkers(workers, 5 * kGiB, StorageLevel::kMemoryOnly2, 0).empty());
}

TEST(ChooseWorkersTest, MemoryFitsComeBeforeDiskFallbacks) {
  std::vector<WorkerInfo> workers = {Worker("w1", kGiB, 0, 10 * kGiB), Worker("w2", kGiB, kGiB, 0)};
  EXPECT_EQ(Ids(ChooseWorkers(workers, kMiB, StorageLevel::kMemoryAndDisk, 0)), (Ids_{"w1", "w2"}));
}

TEST(ChooseWorkersTest, TiesRotateWithTheCounter) {
  std::vector<WorkerInfo> workers = {Worker("w1", kGiB, 0), Worker("w2", kGiB, 0),
                                     Worker("w3", kGiB, 0)};
  EXPECT_EQ(Ids(ChooseWorkers(workers, kMiB, StorageLevel::kMemoryOnly, 0)),
            (Ids_{"w1", "w2", "w3"}));
  EXPECT_EQ(Ids(ChooseWorkers(workers, kMiB, StorageLevel::kMemoryOnly, 1)),
            (Ids_{"w2", "w3", "w1"}));
  EXPECT_EQ(Ids(ChooseWorkers(workers, kMiB, StorageLevel::kDiskOnly, 5)),
            (Ids_{"w3", "w1", "w2"}));
  // Consecutive puts start on different workers.
  std::vector<std::string> firsts;
  for (uint64_t counter = 0; counter < 3; ++counter) {
    firsts.push_back(ChooseWorkers(workers, kMiB, StorageLevel::kMemoryOnly, counter)[0].id);
  }
  EXPECT_EQ(firsts, (Ids_{"w1", "w2", "w3"}));
}

TEST(ChooseWorkersTest, RotationOnlyBreaksTies) {
  std::vector<WorkerInfo> workers = {Worker("w1", kGiB, 0), Worker("w2", kGiB, kMiB),
                                     Worker("w3", kGiB, 0)};
  EXPECT_EQ(Ids(ChooseWorkers(workers, kMiB, StorageLevel::kMemoryOnly, 1)),
            (Ids_{"w3", "w1", "w2"}));
}

TEST(ChooseWorkersTest, EmptyBlockFitsEverywhereAndNoWorkersGiveNoCandidates) {
  std::vector<WorkerInfo> workers = {Worker("w1", 0, 0)};
  EXPECT_EQ(Ids(ChooseWorkers(workers, 0, StorageLevel::kMemoryOnly, 0)), (Ids_{"w1"}));
  EXPECT_TRUE(ChooseWorkers({}, kMiB, StorageLevel::kMemoryAndDisk, 7).empty());
}

TEST(ChooseWorkersTest, MemoryUsedOverCapacityCountsAsNoFreeMemory) {
  std::vector<WorkerInfo> workers = {Worker("w1", kGiB, 2 * kGiB, 0), Worker("w2", kGiB, 0, 0)};
  EXPECT_EQ(Ids(ChooseWorkers(workers, kMiB, StorageLevel::kMemoryAndDisk, 0)), (Ids_{"w2", "w1"}));
}

// Workers whose id is in `ids` count as on the caller's host.
std::function<bool(const WorkerInfo&)> LocalAre(std::vector<std::string> ids) {
  return [ids = std::move(ids)](const WorkerInfo& w) {
    return std::find(ids.begin(), ids.end(), w.id) != ids.end();
  };
}

TEST(ChooseWorkersTest, LocalWorkerWithFreeMemoryComesFirstThoughOthersHaveMore) {
  std::vector<WorkerInfo> workers = {Worker("w1", 8 * kGiB, 0), Worker("w2", kGiB, 0),
                                     Worker("w3", 4 * kGiB, 0)};
  EXPECT_EQ(Ids(ChooseWorkers(workers, kMiB, StorageLevel::kMemoryOnly, 0, LocalAre({"w2"}))),
            (Ids_{"w2", "w1", "w3"}));
  EXPECT_EQ(Ids(ChooseWorkers(workers, kMiB, StorageLevel::kMemoryAndDisk, 0, LocalAre({"w2"}))),
            (Ids_{"w2", "w1", "w3"}));
  // Several local workers keep the usual order among themselves.
  EXPECT_EQ(Ids(ChooseWorkers(workers, kMiB, StorageLevel::kMemoryOnly, 0, LocalAre({"w2", "w3"}))),
            (Ids_{"w3", "w2", "w1"}));
}

TEST(ChooseWorkersTest, FullLocalWorkerDoesNotGoAheadOfOneWithRoom) {
  // w1 is local but its free memory cannot hold the block: a worker with room takes it, and
  // w1 stays a fall-back (on disk, or evicting for MEMORY_ONLY).
  std::vector<WorkerInfo> workers = {Worker("w1", kGiB, kGiB - kMiB), Worker("w2", kGiB, 0)};
  EXPECT_EQ(
      Ids(ChooseWorkers(workers, 2 * kMiB, StorageLevel::kMemoryAndDisk, 0, LocalAre({"w1"}))),
      (Ids_{"w2", "w1"}));
  EXPECT_EQ(Ids(ChooseWorkers(workers, 2 * kMiB, StorageLevel::kMemoryOnly, 0, LocalAre({"w1"}))),
            (Ids_{"w2", "w1"}));
}

TEST(ChooseWorkersTest, LocalWorkerComesFirstAmongDiskFallbacks) {
  std::vector<WorkerInfo> workers = {Worker("w1", 0, 0, 5 * kGiB), Worker("w2", 0, 0, 0)};
  EXPECT_EQ(Ids(ChooseWorkers(workers, kMiB, StorageLevel::kDiskOnly, 0, LocalAre({"w1"}))),
            (Ids_{"w1", "w2"}));
  // A local worker whose disk is full is still left out.
  workers[0].disk_capacity = 5 * kGiB;
  EXPECT_EQ(Ids(ChooseWorkers(workers, kMiB, StorageLevel::kDiskOnly, 0, LocalAre({"w1"}))),
            (Ids_{"w2"}));
}

// A master that just took over lists the workers from its journal with no stats until they
// register with it: zero free memory that means "not known yet", not "full".
WorkerInfo Unconfirmed(std::string id) {
  WorkerInfo w = Worker(std::move(id), 0, 0);
  w.state = WorkerState::kUnconfirmed;
  return w;
}

TEST(ChooseWorkersTest, UnconfirmedWorkersAreNotCandidates) {
  const std::vector<WorkerInfo> workers = {Unconfirmed("w1"), Worker("w2", kGiB, 0),
                                           Unconfirmed("w3")};
  for (StorageLevel level :
       {StorageLevel::kMemoryOnly2, StorageLevel::kMemoryAndDisk, StorageLevel::kDiskOnly}) {
    EXPECT_EQ(Ids(ChooseWorkers(workers, kKiB, level, 0)), (Ids_{"w2"})) << StorageLevelName(level);
  }
}

TEST(AwaitsUnconfirmedWorkersTest, APutWaitsWhileUnconfirmedWorkersCouldTakeCopiesItLacks) {
  // Right after a failover: every worker unconfirmed. A memory-only put is not "out of space".
  std::vector<WorkerInfo> workers = {Unconfirmed("w1"), Unconfirmed("w2"), Unconfirmed("w3")};
  EXPECT_TRUE(AwaitsUnconfirmedWorkers(workers, 1002, StorageLevel::kMemoryOnly2, 2));
  EXPECT_TRUE(AwaitsUnconfirmedWorkers(workers, 1002, StorageLevel::kMemoryAndDisk, 1));
  // One registered: enough for one copy, not for two.
  workers[0] = Worker("w1", kGiB, 0);
  EXPECT_FALSE(AwaitsUnconfirmedWorkers(workers, 1002, StorageLevel::kMemoryOnly, 1));
  EXPECT_TRUE(AwaitsUnconfirmedWorkers(workers, 1002, StorageLevel::kMemoryOnly2, 2));
  // A draining worker takes no copy.
  workers[1] = Worker("w2", kGiB, 0);
  workers[1].state = WorkerState::kDecommissioning;
  EXPECT_TRUE(AwaitsUnconfirmedWorkers(workers, 1002, StorageLevel::kMemoryOnly2, 2));
  workers[1].state = WorkerState::kActive;
  EXPECT_FALSE(AwaitsUnconfirmedWorkers(workers, 1002, StorageLevel::kMemoryOnly2, 2));
}

TEST(AwaitsUnconfirmedWorkersTest, WithoutUnconfirmedWorkersTheAnswerIsFinal) {
  // Full confirmed workers: out of space, nothing to wait for.
  const std::vector<WorkerInfo> full = {Worker("w1", kKiB, kKiB), Worker("w2", kKiB, kKiB)};
  EXPECT_FALSE(AwaitsUnconfirmedWorkers(full, kMiB, StorageLevel::kMemoryOnly2, 2));
  // Fewer workers than copies: the put stores what it can.
  EXPECT_FALSE(
      AwaitsUnconfirmedWorkers({Worker("w1", kGiB, 0)}, kKiB, StorageLevel::kMemoryOnly2, 2));
  EXPECT_FALSE(AwaitsUnconfirmedWorkers({}, kKiB, StorageLevel::kMemoryOnly, 1));
}

TEST(PreferredHostsOfTest, HostsOfMemoryCopiesComeFirstEachOnce) {
  const std::vector<BlockLocation> copies = {
      {"w1", "tcp://10.0.0.1:7701", Tier::kDisk, 10},
      {"w2", "tcp://10.0.0.2:7701", Tier::kMemory, 10},
      {"w3", "tcp://10.0.0.2:7702", Tier::kMemory, 10},  // same host as w2
      {"w4", "tcp://[fd00::3]:7701", Tier::kMemory, 10},
      {"w5", "tcp://10.0.0.2:7703", Tier::kDisk, 10}};
  EXPECT_EQ(PreferredHostsOf(copies),
            (std::vector<std::string>{"10.0.0.2", "fd00::3", "10.0.0.1"}));
  EXPECT_TRUE(PreferredHostsOf({}).empty());
}

}  // namespace
}  // namespace bm
