// Where plain puts land: on a worker on the client's own host while it has room (as Spark
// caches into the executor's own BlockManager), elsewhere once it is full, and by free memory
// alone when the caller asks for the old order.
//
// Every worker here runs on 127.0.0.1. The "near" one advertises itself as tcp://localhost:PORT
// and the client counts only "localhost" as its host (ClientOptions::local_hosts), so "near" is
// the one worker on the client's host, though the far one has four times its free memory.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "blockmgr/client.h"
#include "blockmgr/dataset.h"
#include "tests/support/local_cluster.h"
#include "tests/support/process.h"

namespace bm::testing {
namespace {

constexpr size_t kMiB = 1024 * 1024;

class LocalPlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(cluster_.StartMaster());
    const int near_port = FreeLoopbackPort();
    ASSERT_NO_FATAL_FAILURE(cluster_.StartWorker(
        {.id = "near",
         .memory = "16MiB",
         .extra_args = {"--advertise", "tcp://localhost:" + std::to_string(near_port)},
         .port = near_port}));
    ASSERT_NO_FATAL_FAILURE(cluster_.StartWorker({.id = "far", .memory = "64MiB"}));
  }

  ClientOptions NearClientOptions() const {
    ClientOptions options = cluster_.ClientOptionsFor();
    options.local_hosts = {"localhost"};
    return options;
  }

  // The worker the master lists `block` on (empty when none or several).
  std::string WorkerOf(const std::string& block) {
    auto where = cluster_.Locations({block});
    if (where[block].size() != 1) return "";
    return std::get<0>(where[block].front());
  }

  LocalCluster cluster_;
};

TEST_F(LocalPlacementTest, PutLandsOnTheLocalWorkerWhileItHasRoomThenElsewhere) {
  Client client(NearClientOptions());
  ASSERT_FALSE(client.IsLocalAddress(cluster_.worker_endpoint("far")));
  const std::vector<std::byte> data(3 * kMiB, std::byte{7});
  // Five 3 MiB blocks fit in near's 16 MiB of free memory.
  for (int i = 0; i < 5; ++i) {
    const std::string block = "rdd_1_" + std::to_string(i);
    Result<PutResult> put = client.Put(BlockId::Rdd(1, i), data, StorageLevel::kMemoryOnly);
    ASSERT_TRUE(put.ok()) << put.status().ToString();
    EXPECT_EQ(put->worker_id, "near") << block;
    EXPECT_EQ(WorkerOf(block), "near") << block;
  }
  // The sixth does not fit in near's free memory: it goes to a worker with room rather than
  // evicting near's blocks.
  Result<PutResult> put = client.Put(BlockId::Rdd(1, 5), data, StorageLevel::kMemoryOnly);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->worker_id, "far");
  EXPECT_EQ(WorkerOf("rdd_1_5"), "far");
}

TEST_F(LocalPlacementTest, PutsWithoutPreferLocalGoWhereMostMemoryIsFree) {
  Client client(NearClientOptions());
  PutOptions options;
  options.prefer_local = false;
  Result<PutResult> put = client.Put(BlockId::Rdd(1, 0), std::vector<std::byte>(kMiB),
                                     StorageLevel::kMemoryOnly, options);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->worker_id, "far");
}

TEST_F(LocalPlacementTest, ReplicatedPutKeepsOneCopyLocalAndTheOtherElsewhere) {
  Client client(NearClientOptions());
  Result<PutResult> put =
      client.Put(BlockId::Rdd(1, 0), std::vector<std::byte>(kMiB), StorageLevel::kMemoryOnly2);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->worker_id, "near");
  EXPECT_EQ(put->replicas, (std::vector<std::string>{"near", "far"}));
}

TEST_F(LocalPlacementTest, DatasetPreferredHostsAreWhereItsPartitionsAreCached) {
  auto session = std::make_shared<CacheSession>(NearClientOptions());
  auto dataset = Dataset::Source(session, 3, "numbers", 3, [](uint32_t i) -> Result<PartitionData> {
    return PartitionData(1000, std::byte(i));
  });
  // Nothing cached yet: no preference.
  Result<std::vector<std::vector<std::string>>> all = dataset->PreferredHostsOfAll();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(*all, (std::vector<std::vector<std::string>>(3)));
  Result<std::vector<std::string>> one = dataset->PreferredHosts(1);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_TRUE(one->empty());

  // Cached by this session's clients: on the worker on their host, "localhost".
  ASSERT_TRUE(dataset->Persist(StorageLevel::kMemoryOnly).ok());
  ASSERT_TRUE(dataset->Collect(1).ok());
  all = dataset->PreferredHostsOfAll();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(*all, (std::vector<std::vector<std::string>>(3, {"localhost"})));

  // Two copies: both hosts, each once.
  auto replicated = Dataset::Source(
      session, 4, "twice", 2,
      [](uint32_t i) -> Result<PartitionData> { return PartitionData(1000, std::byte(i)); });
  ASSERT_TRUE(replicated->Persist(StorageLevel::kMemoryOnly2).ok());
  ASSERT_TRUE(replicated->Collect(1).ok());
  one = replicated->PreferredHosts(1);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_THAT(*one, ::testing::UnorderedElementsAre("localhost", "127.0.0.1"));
  EXPECT_FALSE(replicated->PreferredHosts(2).ok());  // no such partition
}

}  // namespace
}  // namespace bm::testing
