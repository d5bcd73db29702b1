// How a cluster of real processes behaves: eviction and spill, removal fan-out, workers that die
// or come back, disk limits.

#include <gtest/gtest.h>
#include <signal.h>

#include <nlohmann/json.hpp>

#include "common/net/transport.h"
#include "tests/support/files.h"
#include "tests/support/local_cluster.h"

namespace bm::testing {
namespace {

using Loc = std::tuple<std::string, std::string, uint64_t>;
constexpr uint64_t kMiB = 1 << 20;

// Asks one worker directly whether it holds a block (not the master's view).
std::string Put(LocalCluster& cluster, const std::string& block, size_t size,
                const std::string& level, const std::string& worker = "") {
  std::string data = RandomBytes(size, std::hash<std::string>()(block));
  std::vector<std::string> args = {"put", block, "-", "--level", level};
  if (!worker.empty()) {
    args.push_back("--worker");
    args.push_back(worker);
  }
  CommandResult r = cluster.Bmctl(args, data);
  EXPECT_EQ(r.exit_code, 0) << "put " << block << ": " << r.err;
  return data;
}

TEST(ClusterBehaviourTest, EvictionSpillsMemoryAndDiskBlocksAndDropsMemoryOnlyOnes) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1", "10MiB", ""}));
  std::string spilled = Put(cluster, "rdd_1_0", 4 * kMiB, "MEMORY_AND_DISK");
  Put(cluster, "rdd_2_0", 4 * kMiB, "MEMORY_ONLY");
  // Needs 4 MiB more than is free: evicts the least recently used block (rdd_1_0, spilled),
  // then rdd_2_0 (dropped) for the next one.
  Put(cluster, "rdd_3_0", 4 * kMiB, "MEMORY_ONLY");
  // The spill runs in the background: the master hears of the move once it has committed.
  EXPECT_TRUE(WaitFor(
      [&] {
        return cluster.Locations({"rdd_1_0"})["rdd_1_0"] ==
               std::vector<Loc>{{"w1", "disk", 4 * kMiB}};
      },
      std::chrono::milliseconds(10000)));
  auto after_first = cluster.Locations({"rdd_1_0", "rdd_2_0", "rdd_3_0"});
  EXPECT_EQ(after_first["rdd_1_0"], (std::vector<Loc>{{"w1", "disk", 4 * kMiB}}));
  EXPECT_EQ(after_first["rdd_2_0"], (std::vector<Loc>{{"w1", "memory", 4 * kMiB}}));
  EXPECT_EQ(after_first["rdd_3_0"], (std::vector<Loc>{{"w1", "memory", 4 * kMiB}}));

  Put(cluster, "rdd_4_0", 4 * kMiB, "MEMORY_ONLY");
  auto after_second = cluster.Locations({"rdd_2_0", "rdd_4_0"});
  EXPECT_TRUE(after_second["rdd_2_0"].empty()) << "MEMORY_ONLY block should have been dropped";
  EXPECT_EQ(after_second["rdd_4_0"], (std::vector<Loc>{{"w1", "memory", 4 * kMiB}}));
  EXPECT_EQ(cluster.Bmctl({"get", "rdd_2_0"}).exit_code, 1);

  // The spilled block still reads back byte-exact from disk.
  CommandResult get = cluster.Bmctl({"get", "rdd_1_0"});
  ASSERT_EQ(get.exit_code, 0) << get.err;
  EXPECT_TRUE(get.out == spilled);
}

TEST(ClusterBehaviourTest, BlocksOfTheRddBeingInsertedAreNotEvictedForIt) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1", "10MiB", ""}));
  Put(cluster, "rdd_7_0", 4 * kMiB, "MEMORY_ONLY");
  Put(cluster, "rdd_7_1", 4 * kMiB, "MEMORY_ONLY");
  // No room without evicting rdd_7's own partitions: MEMORY_ONLY fails cleanly...
  CommandResult r =
      cluster.Bmctl({"put", "rdd_7_2", "-", "--level", "MEMORY_ONLY"}, RandomBytes(4 * kMiB, 1));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("out of space"), std::string::npos) << r.err;
  // ...and MEMORY_AND_DISK goes to disk.
  Put(cluster, "rdd_7_3", 4 * kMiB, "MEMORY_AND_DISK");
  auto locations = cluster.Locations({"rdd_7_0", "rdd_7_1", "rdd_7_3"});
  EXPECT_EQ(locations["rdd_7_0"], (std::vector<Loc>{{"w1", "memory", 4 * kMiB}}));
  EXPECT_EQ(locations["rdd_7_1"], (std::vector<Loc>{{"w1", "memory", 4 * kMiB}}));
  EXPECT_EQ(locations["rdd_7_3"], (std::vector<Loc>{{"w1", "disk", 4 * kMiB}}));
}

TEST(ClusterBehaviourTest, BlockBiggerThanMemoryFailsOrGoesToDiskByLevel) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1", "2MiB", ""}));
  CommandResult r =
      cluster.Bmctl({"put", "rdd_1_0", "-", "--level", "MEMORY_ONLY"}, RandomBytes(3 * kMiB, 1));
  EXPECT_EQ(r.exit_code, 1);
  Put(cluster, "rdd_1_1", 3 * kMiB, "MEMORY_AND_DISK");
  EXPECT_EQ(cluster.Locations({"rdd_1_1"})["rdd_1_1"],
            (std::vector<Loc>{{"w1", "disk", 3 * kMiB}}));
}

TEST(ClusterBehaviourTest, RemoveRddReachesEveryWorkerHoldingIt) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(2));
  Put(cluster, "rdd_3_0", 1000, "MEMORY_ONLY", "w1");
  Put(cluster, "rdd_3_1", 1000, "DISK_ONLY", "w2");
  Put(cluster, "rdd_3_2", 1000, "MEMORY_AND_DISK", "w2");
  Put(cluster, "rdd_4_0", 1000, "MEMORY_ONLY", "w1");

  EXPECT_EQ(cluster.BmctlJson({"rm-rdd", "3"}), nlohmann::json({{"removed", 3}}));
  for (const char* block : {"rdd_3_0", "rdd_3_1", "rdd_3_2"}) {
    EXPECT_FALSE(cluster.WorkerHolds("w1", block)) << block;
    EXPECT_FALSE(cluster.WorkerHolds("w2", block)) << block;
  }
  EXPECT_EQ(cluster.BmctlJson({"blocks", "--rdd", "3"}), nlohmann::json::array());
  EXPECT_TRUE(cluster.WorkerHolds("w1", "rdd_4_0"));
  EXPECT_EQ(cluster.BmctlJson({"rm-rdd", "3"}), nlohmann::json({{"removed", 0}}));
}

TEST(ClusterBehaviourTest, KilledWorkerAndItsLocationsVanishAfterHeartbeatTimeout) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/1);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(2));
  Put(cluster, "rdd_1_0", 1000, "MEMORY_ONLY", "w1");
  Put(cluster, "rdd_1_1", 1000, "DISK_ONLY", "w2");

  cluster.KillWorker("w2");
  ASSERT_TRUE(cluster.WaitForWorkers({"w1"})) << cluster.LogTail("master");
  auto locations = cluster.Locations({"rdd_1_0", "rdd_1_1"});
  EXPECT_EQ(locations["rdd_1_0"], (std::vector<Loc>{{"w1", "memory", 1000}}));
  EXPECT_TRUE(locations["rdd_1_1"].empty());
  nlohmann::json rdds = cluster.BmctlJson({"rdds"});
  ASSERT_EQ(rdds.size(), 1u);
  EXPECT_EQ(rdds[0]["workers"], nlohmann::json({"w1"}));
}

TEST(ClusterBehaviourTest, RestartedWorkerComesBackWithItsDiskBlocksOnly) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/1);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1", "64MiB", ""}));
  std::string on_disk = Put(cluster, "rdd_1_0", 3 * kMiB, "DISK_ONLY");
  std::string spilled_later = Put(cluster, "rdd_1_1", 2000, "MEMORY_AND_DISK");
  Put(cluster, "rdd_1_2", 1000, "MEMORY_ONLY");

  cluster.KillWorker("w1");
  ASSERT_TRUE(cluster.WaitForWorkers({}));
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1", "64MiB", ""}));

  auto locations = cluster.Locations({"rdd_1_0", "rdd_1_1", "rdd_1_2"});
  EXPECT_EQ(locations["rdd_1_0"], (std::vector<Loc>{{"w1", "disk", 3 * kMiB}}));
  EXPECT_TRUE(locations["rdd_1_1"].empty()) << "memory blocks do not survive a restart";
  EXPECT_TRUE(locations["rdd_1_2"].empty());
  CommandResult get = cluster.Bmctl({"get", "rdd_1_0"});
  ASSERT_EQ(get.exit_code, 0) << get.err;
  EXPECT_TRUE(get.out == on_disk);
}

TEST(ClusterBehaviourTest, WorkerReRegistersWithItsBlocksAfterMasterRestart) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1", "64MiB", ""}));
  Put(cluster, "rdd_1_0", 1000, "MEMORY_ONLY");
  Put(cluster, "broadcast_2", 500, "DISK_ONLY");

  cluster.KillMaster();
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_TRUE(cluster.WaitForWorkers({"w1"})) << cluster.LogTail("w1");
  auto locations = cluster.Locations({"rdd_1_0", "broadcast_2"});
  EXPECT_EQ(locations["rdd_1_0"], (std::vector<Loc>{{"w1", "memory", 1000}}));
  EXPECT_EQ(locations["broadcast_2"], (std::vector<Loc>{{"w1", "disk", 500}}));
}

TEST(ClusterBehaviourTest, DiskLimitGivesOutOfSpaceAndKeepsOtherBlocks) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1", "64MiB", "3MiB"}));
  std::string kept = Put(cluster, "rdd_1_0", 2 * kMiB, "DISK_ONLY");
  CommandResult r =
      cluster.Bmctl({"put", "rdd_1_1", "-", "--level", "DISK_ONLY"}, RandomBytes(2 * kMiB, 9));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("out of space"), std::string::npos) << r.err;
  EXPECT_TRUE(cluster.Locations({"rdd_1_1"})["rdd_1_1"].empty());
  CommandResult get = cluster.Bmctl({"get", "rdd_1_0"});
  ASSERT_EQ(get.exit_code, 0);
  EXPECT_TRUE(get.out == kept);
}

}  // namespace
}  // namespace bm::testing
