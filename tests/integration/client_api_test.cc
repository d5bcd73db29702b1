// The C++ client library against real processes: what a computation caching its partitions
// relies on.

#include <gtest/gtest.h>

#include <sstream>

#include "blockmgr/client.h"
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
    client_ = std::make_unique<Client>(cluster_.ClientOptionsFor());
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

TEST_F(ClientApiTest, PutChunksSendsChunksOfAnySizeAndReadsBackExact) {
  // Chunks bigger than a frame (sliced), empty ones, and more tiny ones than one message may
  // carry frames (the piece is cut at the frame limit), on both tiers and two copies.
  BlockData data;
  std::vector<std::byte> expected;
  auto add = [&](size_t size, uint64_t seed) {
    std::vector<std::byte> bytes = RandomByteVector(size, seed);
    expected.insert(expected.end(), bytes.begin(), bytes.end());
    data.Append(std::make_shared<VectorChunk>(std::move(bytes)));
  };
  add(3 * 1024 * 1024 + 17, 1);
  add(0, 2);
  for (uint64_t i = 0; i < 100; ++i) add(1000 + i, 10 + i);
  add(20 * 1024 * 1024 + 5, 3);  // past one 16 MiB piece
  for (StorageLevel level : {StorageLevel::kMemoryOnly2, StorageLevel::kDiskOnly}) {
    const BlockId id = BlockId::Rdd(12, static_cast<uint64_t>(level));
    Result<PutResult> put = client_->PutChunks(id, data, level);
    ASSERT_TRUE(put.ok()) << put.status().ToString();
    EXPECT_EQ(put->size, expected.size());
    EXPECT_EQ(put->replicas.size(), ReplicationOf(level) == 2 ? 2u : 1u);
    for (const std::string& worker : put->replicas) {
      EXPECT_TRUE(cluster_.WorkerHolds(worker, id.ToString())) << worker;
    }
    // A client that does not remember where it went, so the bytes come from the worker.
    Client reader(cluster_.ClientOptionsFor());
    Result<std::vector<std::byte>> back = reader.Get(id);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_TRUE(*back == expected) << StorageLevelName(level);
  }
  BlockData empty;
  ASSERT_TRUE(client_->PutChunks(BlockId::Rdd(12, 99), empty, StorageLevel::kMemoryOnly).ok());
  Result<std::vector<std::byte>> none = client_->Get(BlockId::Rdd(12, 99));
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none->empty());
}

TEST_F(ClientApiTest, LocationsReportTierAndSizeRightAfterPut) {
  ASSERT_TRUE(
      client_->Put(BlockId::Broadcast(1), Bytes("hello"), StorageLevel::kDiskOnly, PutOptions{"w2"})
          .ok());
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
  Result<PutResult> put =
      client_->PutStream(BlockId::Shuffle(1, 2, 3), in, data.size(), StorageLevel::kMemoryAndDisk);
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
  // Two copies: w1 and w2 both hold rdd_2_0.
  std::vector<std::byte> data = Bytes(RandomBytes(100000, 3));
  PutOptions two_copies;
  two_copies.replication = 2;
  ASSERT_TRUE(client_->Put(BlockId::Rdd(2, 0), data, StorageLevel::kMemoryOnly, two_copies).ok());
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
