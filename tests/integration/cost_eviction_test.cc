// Cost-aware eviction against real processes: the compute time get-or-compute measures travels
// with its put to the worker, whose memory tier then keeps the expensive block that LRU would
// have dropped (docs/eviction.md "Eviction").

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "blockmgr/client.h"
#include "tests/support/local_cluster.h"

namespace bm::testing {
namespace {

using Bytes = std::vector<std::byte>;

constexpr size_t kMiB = 1024 * 1024;

// Which of rdd_1_0 .. rdd_5_0 worker w1 holds after this sequence, on a worker with room for
// four 1 MiB blocks evicting by `eviction`: rdd_1_0 computed slowly (200 ms) first, then
// rdd_2_0 .. rdd_4_0 computed at once, then rdd_5_0, which evicts one of them. Each block is
// an RDD of its own, so any of them may be evicted for another.
std::vector<std::string> HeldAfterOneEviction(const std::string& eviction) {
  LocalCluster cluster;
  cluster.StartMaster();
  cluster.StartWorker(WorkerSpec{
      .id = "w1", .memory = "4MiB", .disk_limit = "", .extra_args = {"--eviction", eviction}});
  Client client(cluster.ClientOptionsFor());
  auto compute = [](uint64_t rdd, std::chrono::milliseconds takes) {
    return [rdd, takes]() -> Result<Bytes> {
      // The computation's own duration, which get-or-compute measures (not a wait for a
      // condition).
      std::this_thread::sleep_for(takes);
      return Bytes(kMiB, std::byte(rdd));
    };
  };
  for (uint64_t rdd = 1; rdd <= 5; ++rdd) {
    const std::chrono::milliseconds takes(rdd == 1 ? 200 : 0);
    Result<Bytes> got =
        client.GetOrCompute(BlockId::Rdd(rdd, 0), StorageLevel::kMemoryOnly, compute(rdd, takes));
    EXPECT_TRUE(got.ok()) << got.status().ToString() << cluster.LogTail("w1");
  }
  EXPECT_EQ(client.TakeCounters().store_failures, 0u);
  std::vector<std::string> held;
  for (uint64_t rdd = 1; rdd <= 5; ++rdd) {
    const std::string id = BlockId::Rdd(rdd, 0).ToString();
    if (cluster.WorkerHolds("w1", id)) held.push_back(id);
  }
  return held;
}

TEST(CostEvictionTest, MeasuredComputeCostKeepsTheExpensiveBlockThatLruDrops) {
  const std::vector<std::string> by_cost = HeldAfterOneEviction("cost");
  // One cheap block made room; the slow one, the oldest, stayed.
  EXPECT_EQ(by_cost.size(), 4u);
  EXPECT_THAT(by_cost, ::testing::Contains("rdd_1_0"));
  EXPECT_THAT(by_cost, ::testing::Contains("rdd_5_0"));

  // The same calls against a worker evicting by recency: the slow block, least recently used,
  // is the one that goes.
  const std::vector<std::string> by_recency = HeldAfterOneEviction("lru");
  EXPECT_THAT(by_recency, ::testing::ElementsAre("rdd_2_0", "rdd_3_0", "rdd_4_0", "rdd_5_0"));
}

TEST(CostEvictionTest, AWorkerRefusesAnUnknownEvictionPolicy) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  CommandResult run =
      RunCommand(Command{.binary = BinaryPath("bm-worker"),
                         .args = {"--master", cluster.master_endpoint(), "--listen",
                                  "tcp://127.0.0.1:0", "--memory", "4MiB", "--disk-dir",
                                  (cluster.dir().path() / "d").string(), "--eviction", "lfu"},
                         .timeout = std::chrono::seconds(10)})
          .value();
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, ::testing::HasSubstr("--eviction: unknown eviction policy 'lfu'"));
}

}  // namespace
}  // namespace bm::testing
