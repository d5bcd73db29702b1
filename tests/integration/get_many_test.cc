// Client::GetMany against real processes: many blocks read at once, pipelined per worker.

#include <gtest/gtest.h>

#include "blockmgr/client.h"
#include "tests/support/files.h"
#include "tests/support/local_cluster.h"

namespace bm::testing {
namespace {

class GetManyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(cluster_.StartMaster());
    ASSERT_NO_FATAL_FAILURE(cluster_.StartWorkers(2, "256MiB"));
    client_ = std::make_unique<Client>(cluster_.ClientOptionsFor());
  }

  std::vector<std::byte> PutBlock(const BlockId& id, size_t size, StorageLevel level) {
    std::vector<std::byte> data = RandomByteVector(size, id.Hash());
    Result<PutResult> put = client_->Put(id, data, level);
    EXPECT_TRUE(put.ok()) << put.status().ToString();
    return data;
  }

  LocalCluster cluster_;
  std::unique_ptr<Client> client_;
};

TEST_F(GetManyTest, ReadsBlocksOnBothWorkersAndBothTiersInTheOrderAsked) {
  std::vector<BlockId> ids;
  std::vector<std::vector<std::byte>> expected;
  // More blocks than the 16 a worker gets in flight, spread over the two workers by placement.
  for (uint64_t p = 0; p < 40; ++p) {
    ids.push_back(BlockId::Rdd(9, p));
    expected.push_back(PutBlock(ids.back(), 4096 + p,
                                p % 5 == 0 ? StorageLevel::kDiskOnly : StorageLevel::kMemoryOnly));
  }
  std::vector<Result<std::vector<std::byte>>> got = client_->GetMany(ids);
  ASSERT_EQ(got.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_TRUE(got[i].ok()) << ids[i].ToString() << ": " << got[i].status().ToString();
    EXPECT_TRUE(*got[i] == expected[i]) << ids[i].ToString();
  }
}

TEST_F(GetManyTest, BlockBiggerThanOneReplyAndMissingBlockAreHandledPerId) {
  const BlockId big = BlockId::Broadcast(1);
  const BlockId small = BlockId::Broadcast(2);
  const BlockId missing = BlockId::Broadcast(3);
  std::vector<std::byte> big_data = PutBlock(big, (16 << 20) + 12345, StorageLevel::kMemoryOnly);
  std::vector<std::byte> small_data = PutBlock(small, 10, StorageLevel::kMemoryOnly);
  std::vector<Result<std::vector<std::byte>>> got = client_->GetMany({big, missing, small, big});
  ASSERT_EQ(got.size(), 4u);
  ASSERT_TRUE(got[0].ok()) << got[0].status().ToString();
  EXPECT_TRUE(*got[0] == big_data);
  EXPECT_EQ(got[1].status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(got[2].ok()) << got[2].status().ToString();
  EXPECT_TRUE(*got[2] == small_data);
  ASSERT_TRUE(got[3].ok()) << got[3].status().ToString();
  EXPECT_TRUE(*got[3] == big_data);
  EXPECT_TRUE(client_->GetMany({}).empty());
}

TEST_F(GetManyTest, PackedAndUnpackedBlocksOfEverySizeComeBackExact) {
  // The worker packs blocks up to 64 KiB into shared frames and sends bigger ones as their
  // own chunks; sizes around every boundary, empty blocks included, all in one batch.
  const std::vector<size_t> sizes = {
      0, 1, 4096, 65536, 65537, 0, (1 << 20) - 3, 1 << 20, (1 << 20) + 1, 3000, 200000, 7};
  std::vector<BlockId> ids;
  std::vector<std::vector<std::byte>> expected;
  PutOptions on_w1;
  on_w1.worker_id = "w1";
  for (size_t i = 0; i < sizes.size(); ++i) {
    ids.push_back(BlockId::Rdd(11, i));
    expected.push_back(RandomByteVector(sizes[i], i + 1));
    ASSERT_TRUE(client_->Put(ids.back(), expected.back(), StorageLevel::kMemoryOnly, on_w1).ok());
  }
  // A fresh client: the locations come from the master, then from its cache the second time.
  Client reader(cluster_.ClientOptionsFor());
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<Result<std::vector<std::byte>>> got = reader.GetMany(ids);
    ASSERT_EQ(got.size(), ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      ASSERT_TRUE(got[i].ok()) << ids[i].ToString() << ": " << got[i].status().ToString();
      EXPECT_TRUE(*got[i] == expected[i]) << ids[i].ToString() << " pass " << pass;
    }
  }
}

TEST_F(GetManyTest, ThousandsOfSmallBlocksSpanSeveralBatchesAndComeBackInOrder) {
  // 3000 blocks of 1 KiB: more than one getBlocks can name, so GetMany cuts several batches.
  std::vector<BlockId> ids;
  std::vector<std::vector<std::byte>> expected;
  PutOptions on_w1;
  on_w1.worker_id = "w1";
  for (size_t i = 0; i < 3000; ++i) {
    ids.push_back(BlockId::Rdd(12, i));
    expected.push_back(RandomByteVector(1024, 100 + i));
    ASSERT_TRUE(client_->Put(ids.back(), expected.back(), StorageLevel::kMemoryOnly, on_w1).ok());
  }
  Client reader(cluster_.ClientOptionsFor());
  std::vector<Result<std::vector<std::byte>>> got = reader.GetMany(ids);
  ASSERT_EQ(got.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_TRUE(got[i].ok()) << ids[i].ToString() << ": " << got[i].status().ToString();
    ASSERT_TRUE(*got[i] == expected[i]) << ids[i].ToString();
  }
}

TEST_F(GetManyTest, ChunksAreViewsOfTheSameBytesThatOutliveTheClient) {
  // Packed blocks, blocks sent as their own chunks, empty ones and a missing id in one call.
  const std::vector<size_t> sizes = {4096, 0, 1, 65536, 65537, (1 << 20) + 1, 3000, 200000};
  std::vector<BlockId> ids;
  std::vector<std::vector<std::byte>> expected;
  PutOptions on_w1;
  on_w1.worker_id = "w1";
  for (size_t i = 0; i < sizes.size(); ++i) {
    ids.push_back(BlockId::Rdd(13, i));
    expected.push_back(RandomByteVector(sizes[i], 500 + i));
    ASSERT_TRUE(client_->Put(ids.back(), expected.back(), StorageLevel::kMemoryOnly, on_w1).ok());
  }
  ids.push_back(BlockId::Rdd(13, 999));  // never stored
  std::vector<Result<BlockData>> got;
  {
    Client reader(cluster_.ClientOptionsFor());
    got = reader.GetManyChunks(ids);
    // The client and its sockets are gone before the bytes are looked at.
  }
  ASSERT_EQ(got.size(), ids.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_TRUE(got[i].ok()) << ids[i].ToString() << ": " << got[i].status().ToString();
    EXPECT_EQ(got[i]->size, sizes[i]) << ids[i].ToString();
    EXPECT_TRUE(got[i]->Flatten() == expected[i]) << ids[i].ToString();
  }
  EXPECT_EQ(got.back().status().code(), StatusCode::kNotFound);
  // A small block is one view of the frame it travelled in, not a copy per block: the blocks
  // packed together lie back to back in that frame.
  ASSERT_EQ(got[0]->chunks.size(), 1u);
  ASSERT_EQ(got[2]->chunks.size(), 1u);
  EXPECT_EQ(got[0]->chunks[0]->bytes().data() + 4096, got[2]->chunks[0]->bytes().data());
}

}  // namespace
}  // namespace bm::testing
