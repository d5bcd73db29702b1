// The C++ client library against real processes: what a computation caching its partitions
// relies on.

#include <gtest/gtest.h>

#include <sstream>

#include "client/client.h"
#include "tests/support/files.h"
#include "tests/support/local_cluster.h"

namespace bm::testing {
namespace {

std::vector<std::byte> Bytes(const std::string& s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return std::vector<std::byte>(p, p + s.size());
}

class ClientApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(cluster_.StartMaster());
    ASSERT_NO_FATAL_FAILURE(cluster_.StartWorkers(2));
    client_ = std::make_unique<Client>(ClientOptions{cluster_.master_endpoint()});
  }

  LocalCluster cluster_;
  std::unique_ptr<Client> client_;
};

TEST_F(ClientApiTest, PartitionsPutWithoutAWorkerSpreadAcrossWorkersAndReadBack) {
  std::map<std::string, int> per_worker;
  for (uint64_t p = 0; p < 6; ++p) {
    std::vector<std::byte> data = Bytes(RandomBytes(256 * 1024, p));
    Result<PutResult> put = client_->Put(BlockId::Rdd(4, p), data, StorageLevel::kMemoryOnly);
    ASSERT_TRUE(put.ok()) << put.status().ToString();
    EXPECT_EQ(put->tier, Tier::kMemory);
    per_worker[put->worker_id]++;
    Result<std::vector<std::byte>> back = client_->Get(BlockId::Rdd(4, p));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_TRUE(*back == data);
  }
  EXPECT_EQ(per_worker.size(), 2u) << "puts should spread over both workers";
  EXPECT_EQ(per_worker["w1"], 3);

  Result<std::vector<RddInfo>> rdds = client_->Rdds();
  ASSERT_TRUE(rdds.ok());
  ASSERT_EQ(rdds->size(), 1u);
  EXPECT_EQ((*rdds)[0].cached_partitions, 6u);
  EXPECT_EQ((*rdds)[0].memory_bytes, 6u * 256 * 1024);

  Result<uint64_t> removed = client_->RemoveRdd(4);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 6u);
  EXPECT_EQ(client_->Get(BlockId::Rdd(4, 0)).status().code(), StatusCode::kNotFound);
}

TEST_F(ClientApiTest, LocationsReportTierAndSizeRightAfterPut) {
  ASSERT_TRUE(client_->Put(BlockId::Broadcast(1), Bytes("hello"), StorageLevel::kDiskOnly,
                           PutOptions{"w2"}).ok());
  Result<std::vector<BlockLocations>> locations =
      client_->Locations({BlockId::Broadcast(1), BlockId::Broadcast(2)});
  ASSERT_TRUE(locations.ok()) << locations.status().ToString();
  ASSERT_EQ(locations->size(), 2u);
  ASSERT_EQ((*locations)[0].locations.size(), 1u);
  EXPECT_EQ((*locations)[0].locations[0].worker_id, "w2");
  EXPECT_EQ((*locations)[0].locations[0].address, cluster_.worker_endpoint("w2"));
  EXPECT_EQ((*locations)[0].locations[0].tier, Tier::kDisk);
  EXPECT_EQ((*locations)[0].locations[0].size, 5u);
  EXPECT_EQ((*locations)[0].level, StorageLevel::kDiskOnly);
  EXPECT_TRUE((*locations)[1].locations.empty());
}

TEST_F(ClientApiTest, StreamedPutAndGetOfALargeBlockAreByteExact) {
  const std::string data = RandomBytes((40 << 20) + 17, 5);
  std::istringstream in(data);
  Result<PutResult> put = client_->PutStream(BlockId::Shuffle(1, 2, 3), in, data.size(),
                                             StorageLevel::kMemoryAndDisk);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  std::ostringstream out;
  Result<uint64_t> got = client_->GetTo(BlockId::Shuffle(1, 2, 3), out);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, data.size());
  EXPECT_TRUE(out.str() == data);
}

TEST_F(ClientApiTest, NamedWorkerThatIsNotLiveIsNotFound) {
  Result<PutResult> put =
      client_->Put(BlockId::Rdd(1, 0), Bytes("x"), StorageLevel::kMemoryOnly, PutOptions{"w9"});
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(put.status().code(), StatusCode::kNotFound);
  EXPECT_NE(put.status().message().find("w9"), std::string::npos);
}

TEST_F(ClientApiTest, ReadFallsOverWhenTheFirstWorkerIsGone) {
  // Two copies by hand (replication proper is a later feature): w1 and w2 both hold rdd_2_0.
  std::vector<std::byte> data = Bytes(RandomBytes(100000, 3));
  ASSERT_TRUE(client_->Put(BlockId::Rdd(2, 0), data, StorageLevel::kMemoryOnly, PutOptions{"w1"})
                  .ok());
  ASSERT_TRUE(client_->Put(BlockId::Rdd(2, 0), data, StorageLevel::kMemoryOnly, PutOptions{"w2"})
                  .ok());
  Result<std::vector<BlockLocations>> before = client_->Locations({BlockId::Rdd(2, 0)});
  ASSERT_TRUE(before.ok());
  ASSERT_EQ((*before)[0].locations.size(), 2u);
  // Kill whichever worker the client would try first; the master still lists it (the
  // heartbeat timeout has not passed), so the read must fall over to the other copy.
  cluster_.KillWorker((*before)[0].locations[0].worker_id);
  Result<std::vector<std::byte>> back = client_->Get(BlockId::Rdd(2, 0));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == data);
}

}  // namespace
}  // namespace bm::testing
