// The client's location cache and kept worker list against real processes: reads of blocks the
// client stored go straight to the worker, stale entries fall back to the master, and a kept
// worker list that no longer matches the cluster is asked for again.

#include <gtest/gtest.h>

#include "blockmgr/client.h"
#include "tests/support/files.h"
#include "tests/support/local_cluster.h"

namespace bm::testing {
namespace {

using std::chrono::milliseconds;

class ClientCacheTest : public ::testing::Test {
 protected:
  ClientOptions Options(milliseconds worker_list_ttl = milliseconds(1000)) {
    ClientOptions options = cluster_.ClientOptionsFor();
    options.request_timeout = milliseconds(2000);
    options.worker_list_ttl = worker_list_ttl;
    return options;
  }

  // A master and w1, `client` keeping a worker list that names w1 only, then w2 joins.
  void KeepAListOfW1ThenStartW2(Client& client) {
    ASSERT_NO_FATAL_FAILURE(cluster_.StartWorker({"w1", "64MiB", ""}));
    ASSERT_TRUE(
        client.Put(BlockId::Broadcast(1), RandomByteVector(100, 1), StorageLevel::kMemoryOnly)
            .ok());
    ASSERT_NO_FATAL_FAILURE(cluster_.StartWorker({"w2", "64MiB", ""}));
  }

  LocalCluster cluster_;
};

TEST_F(ClientCacheTest, ReadsWhatItStoredWithoutAskingTheMaster) {
  ASSERT_NO_FATAL_FAILURE(cluster_.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster_.StartWorkers(1));
  Client client(Options());
  std::vector<BlockId> ids;
  std::vector<std::vector<std::byte>> data;
  for (uint64_t p = 0; p < 4; ++p) {
    ids.push_back(BlockId::Rdd(3, p));
    data.push_back(RandomByteVector(10000 + p, p));
    ASSERT_TRUE(client.Put(ids.back(), data.back(), StorageLevel::kMemoryOnly).ok());
  }
  // With the master gone, only a client that remembers where the blocks are can read them.
  cluster_.KillMaster();
  Result<std::vector<std::byte>> one = client.Get(ids[0]);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_TRUE(*one == data[0]);
  std::vector<Result<std::vector<std::byte>>> many = client.GetMany(ids);
  ASSERT_EQ(many.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_TRUE(many[i].ok()) << many[i].status().ToString();
    EXPECT_TRUE(*many[i] == data[i]);
  }
  ClientOptions uncached = Options();
  uncached.location_cache_entries = 0;
  Client forgetful(uncached);
  EXPECT_EQ(forgetful.Get(ids[0]).status().code(), StatusCode::kUnavailable);
}

TEST_F(ClientCacheTest, StaleLocationsFallBackToTheMaster) {
  ASSERT_NO_FATAL_FAILURE(cluster_.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster_.StartWorkers(2));
  Client reader(Options());
  Client writer(Options());
  const BlockId id = BlockId::Rdd(5, 0);
  const BlockId other = BlockId::Rdd(5, 1);
  PutOptions on_w1;
  on_w1.worker_id = "w1";
  PutOptions on_w2;
  on_w2.worker_id = "w2";
  ASSERT_TRUE(reader.Put(id, RandomByteVector(5000, 1), StorageLevel::kMemoryOnly, on_w1).ok());
  ASSERT_TRUE(reader.Put(other, RandomByteVector(6000, 2), StorageLevel::kMemoryOnly, on_w1).ok());

  // Another client moves both blocks to w2 with new bytes: the reader's entries now point at
  // a worker that no longer holds them.
  const std::vector<std::byte> moved = RandomByteVector(7000, 3);
  const std::vector<std::byte> moved_other = RandomByteVector(8000, 4);
  ASSERT_EQ(*writer.Remove({id, other}), 2u);
  ASSERT_TRUE(writer.Put(id, moved, StorageLevel::kMemoryOnly, on_w2).ok());
  ASSERT_TRUE(writer.Put(other, moved_other, StorageLevel::kMemoryOnly, on_w2).ok());
  ASSERT_FALSE(cluster_.WorkerHolds("w1", id.ToString()));

  Result<std::vector<std::byte>> got = reader.Get(id);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == moved);
  std::vector<Result<std::vector<std::byte>>> many = reader.GetMany({other, id});
  ASSERT_TRUE(many[0].ok()) << many[0].status().ToString();
  EXPECT_TRUE(*many[0] == moved_other);
  ASSERT_TRUE(many[1].ok()) << many[1].status().ToString();
  EXPECT_TRUE(*many[1] == moved);

  // Removed everywhere: not found, whatever the reader remembered.
  ASSERT_EQ(*writer.Remove({id}), 1u);
  EXPECT_EQ(reader.Get(id).status().code(), StatusCode::kNotFound);
}

TEST_F(ClientCacheTest, KeptWorkerListIsAskedForAgainWhenItDoesNotMatch) {
  ASSERT_NO_FATAL_FAILURE(cluster_.StartMaster());
  // A list kept for a minute: only a refresh on failure can show the client a new worker.
  Client client(Options(std::chrono::minutes(1)));
  ASSERT_NO_FATAL_FAILURE(KeepAListOfW1ThenStartW2(client));
  PutOptions on_w2;
  on_w2.worker_id = "w2";
  Result<PutResult> put =
      client.Put(BlockId::Broadcast(2), RandomByteVector(100, 2), StorageLevel::kMemoryOnly, on_w2);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->worker_id, "w2");

  // w1 dies: puts the kept list would place on it go to w2.
  cluster_.KillWorker("w1");
  for (uint64_t i = 0; i < 2; ++i) {
    Result<PutResult> next =
        client.Put(BlockId::Broadcast(10 + i), RandomByteVector(100, i), StorageLevel::kMemoryOnly);
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    EXPECT_EQ(next->worker_id, "w2");
  }
}

TEST_F(ClientCacheTest, ReplicatedPutSeesAWorkerThatJoinedWithinTheKeptListsLifetime) {
  ASSERT_NO_FATAL_FAILURE(cluster_.StartMaster());
  Client client(Options(std::chrono::minutes(1)));
  ASSERT_NO_FATAL_FAILURE(KeepAListOfW1ThenStartW2(client));
  // The kept list holds one worker, fewer than the two copies wanted: the master is asked.
  Result<PutResult> put =
      client.Put(BlockId::Broadcast(2), RandomByteVector(100, 2), StorageLevel::kMemoryOnly2);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->replicas.size(), 2u);
  EXPECT_TRUE(cluster_.WorkerHolds("w1", "broadcast_2"));
  EXPECT_TRUE(cluster_.WorkerHolds("w2", "broadcast_2"));
}

}  // namespace
}  // namespace bm::testing
