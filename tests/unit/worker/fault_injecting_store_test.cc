#include "tests/unit/worker/fault_injecting_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "common/core/byte_size.h"
#include "tests/support/files.h"
#include "tests/unit/worker/in_memory_store.h"

namespace bm {
namespace {

BlockData DataOf(const std::vector<std::byte>& bytes) { return testing::BlockDataOf(bytes); }

std::vector<std::byte> BytesOf(const DiskRead& read) { return testing::Concat(read.chunks); }

class FaultInjectingStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ =
        std::make_unique<testing::FaultInjectingStore>(std::make_unique<testing::InMemoryStore>());
  }

  std::unique_ptr<testing::FaultInjectingStore> store_;
};

TEST_F(FaultInjectingStoreTest, ForwardsToTheRealStoreWhenHealthy) {
  const std::vector<std::byte> bytes = testing::RandomByteVector(3000, 1);
  ASSERT_TRUE(store_->Write(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, DataOf(bytes)).ok());
  Result<DiskRead> read = store_->Read(BlockId::Rdd(1, 0), 0, UINT64_MAX);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_TRUE(BytesOf(*read) == bytes);
  EXPECT_EQ(store_->used(), bytes.size());
  EXPECT_EQ(store_->block_count(), 1u);
}

TEST_F(FaultInjectingStoreTest, FailedWritesLeaveNothingBehind) {
  store_->FailWrites(InternalError("I/O error (injected)"));
  Status written = store_->Write(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly,
                                 DataOf(testing::RandomByteVector(10, 2)));
  EXPECT_EQ(written.code(), StatusCode::kInternal);
  EXPECT_EQ(store_->BeginWrite(BlockId::Rdd(1, 1), StorageLevel::kDiskOnly, 10).status().code(),
            StatusCode::kInternal);
  EXPECT_EQ(store_->injected_write_failures(), 2u);
  EXPECT_FALSE(store_->Find(BlockId::Rdd(1, 0)).has_value());
  EXPECT_EQ(store_->used(), 0u);
}

TEST_F(FaultInjectingStoreTest, DiskFillsUpPartWayThroughAWrite) {
  store_->FillDiskAfter(100);
  Result<std::unique_ptr<DiskWriter>> writer =
      store_->BeginWrite(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, 200);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  const std::vector<std::byte> bytes = testing::RandomByteVector(200, 3);
  EXPECT_TRUE((*writer)->Append(std::span(bytes).first(100)).ok());
  EXPECT_EQ((*writer)->Append(std::span(bytes).subspan(100)).code(), StatusCode::kOutOfSpace);
  writer->reset();
  EXPECT_EQ(store_->used(), 0u);
}

TEST_F(FaultInjectingStoreTest, CorruptsTheChosenBlocksReads) {
  const std::vector<std::byte> bytes = testing::RandomByteVector(100, 4);
  ASSERT_TRUE(store_->Write(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, DataOf(bytes)).ok());
  ASSERT_TRUE(store_->Write(BlockId::Rdd(1, 1), StorageLevel::kDiskOnly, DataOf(bytes)).ok());
  store_->CorruptReadsOf(BlockId::Rdd(1, 0));
  std::vector<std::byte> corrupted = BytesOf(*store_->Read(BlockId::Rdd(1, 0), 0, UINT64_MAX));
  ASSERT_EQ(corrupted.size(), bytes.size());
  EXPECT_NE(corrupted[0], bytes[0]);
  EXPECT_TRUE(std::equal(corrupted.begin() + 1, corrupted.end(), bytes.begin() + 1));
  EXPECT_TRUE(BytesOf(*store_->Read(BlockId::Rdd(1, 1), 0, UINT64_MAX)) == bytes);
}

TEST_F(FaultInjectingStoreTest, HeldReadWaitsUntilReleased) {
  const std::vector<std::byte> bytes = testing::RandomByteVector(100, 5);
  ASSERT_TRUE(store_->Write(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, DataOf(bytes)).ok());
  store_->HoldReads();
  std::atomic<bool> done{false};
  std::thread reader([&] {
    Result<DiskRead> read = store_->Read(BlockId::Rdd(1, 0), 0, UINT64_MAX);
    EXPECT_TRUE(read.ok());
    done = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (store_->reads_waiting() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_EQ(store_->reads_waiting(), 1);
  EXPECT_FALSE(done);
  store_->ReleaseReads();
  reader.join();
  EXPECT_TRUE(done);
  EXPECT_EQ(store_->reads_waiting(), 0);
}

}  // namespace
}  // namespace bm
