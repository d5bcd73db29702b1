#include "tests/unit/worker/in_memory_store.h"

#include <gtest/gtest.h>

#include "common/core/digest.h"
#include "tests/support/files.h"

namespace bm {
namespace {

using testing::InMemoryStore;

BlockData DataOf(const std::vector<std::byte>& bytes) { return testing::BlockDataOf(bytes); }

std::vector<std::byte> BytesOf(const DiskRead& read) { return testing::Concat(read.chunks); }

std::vector<std::byte> Slice(const std::vector<std::byte>& bytes, size_t offset, size_t length) {
  return {bytes.begin() + static_cast<ptrdiff_t>(offset),
          bytes.begin() + static_cast<ptrdiff_t>(offset + length)};
}

TEST(InMemoryStoreTest, ReadsBackRangesAcrossUnitsWithTheirDigests) {
  InMemoryStore store;
  const std::vector<std::byte> bytes = testing::RandomByteVector(2 * kDigestUnitBytes + 10, 1);
  ASSERT_TRUE(store.Write(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, DataOf(bytes), 7).ok());

  Result<DiskRead> read = store.Read(BlockId::Rdd(1, 0), kDigestUnitBytes - 5, 20);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->total_size, bytes.size());
  EXPECT_TRUE(BytesOf(*read) == Slice(bytes, kDigestUnitBytes - 5, 20));
  const std::vector<uint64_t> units = UnitDigestsOf({std::span<const std::byte>(bytes)});
  EXPECT_EQ(read->unit_digests, std::vector<uint64_t>(units.begin(), units.begin() + 2));

  std::optional<BlockStatus> status = store.Find(BlockId::Rdd(1, 0));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->tier, Tier::kDisk);
  EXPECT_EQ(status->size, bytes.size());
  EXPECT_EQ(status->version, 7u);
  EXPECT_EQ(status->digest, BlockDigestOf(units));
  EXPECT_EQ(store.Read(BlockId::Rdd(1, 0), bytes.size() + 1, 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Read(BlockId::Rdd(1, 1), 0, 1).status().code(), StatusCode::kNotFound);
}

TEST(InMemoryStoreTest, AStreamedBlockReplacesTheOldVersionOnlyAtCommit) {
  InMemoryStore store;
  const std::vector<std::byte> v1 = testing::RandomByteVector(100, 2);
  const std::vector<std::byte> v2 = testing::RandomByteVector(200, 3);
  ASSERT_TRUE(store.Write(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, DataOf(v1)).ok());
  const uint64_t g1 = store.Read(BlockId::Rdd(1, 0), 0, 1)->generation;

  auto writer = store.BeginWrite(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, v2.size());
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Append(std::span(v2).first(150)).ok());
  EXPECT_TRUE(BytesOf(*store.Read(BlockId::Rdd(1, 0), 0, UINT64_MAX)) == v1);
  EXPECT_EQ(store.used(), v1.size() + v2.size()) << "the write in progress claims its size";
  ASSERT_TRUE((*writer)->Append(std::span(v2).subspan(150)).ok());
  ASSERT_TRUE((*writer)->Commit().ok());

  EXPECT_TRUE(BytesOf(*store.Read(BlockId::Rdd(1, 0), 0, UINT64_MAX)) == v2);
  EXPECT_EQ(store.ReadGeneration(BlockId::Rdd(1, 0), g1, 0, 1).status().code(),
            StatusCode::kAborted);
  EXPECT_EQ(store.used(), v2.size());
  EXPECT_EQ(store.block_count(), 1u);
}

TEST(InMemoryStoreTest, AnUncommittedWriteLeavesNothingAndGivesItsSpaceBack) {
  InMemoryStore store(/*limit=*/1000);
  {
    auto writer = store.BeginWrite(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, 600);
    ASSERT_TRUE(writer.ok());
    EXPECT_EQ(store.BeginWrite(BlockId::Rdd(1, 1), StorageLevel::kDiskOnly, 600).status().code(),
              StatusCode::kOutOfSpace);
    ASSERT_TRUE((*writer)->Append(testing::RandomByteVector(500, 4)).ok());
    EXPECT_EQ((*writer)->Commit().code(), StatusCode::kInvalidArgument) << "100 bytes short";
  }
  EXPECT_FALSE(store.Find(BlockId::Rdd(1, 0)).has_value());
  EXPECT_EQ(store.used(), 0u);
  EXPECT_TRUE(store.BeginWrite(BlockId::Rdd(1, 1), StorageLevel::kDiskOnly, 600).ok());
}

TEST(InMemoryStoreTest, ACorruptByteIsServedUntilReportedThenTheBlockIsLost) {
  InMemoryStore store;
  const std::vector<std::byte> bytes = testing::RandomByteVector(300, 5);
  ASSERT_TRUE(store.Write(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, DataOf(bytes)).ok());
  ASSERT_TRUE(store.CorruptStoredByte(BlockId::Rdd(1, 0), 10).ok());
  Result<DiskRead> read = store.Read(BlockId::Rdd(1, 0), 0, UINT64_MAX);
  ASSERT_TRUE(read.ok());
  std::vector<std::byte> expected = bytes;
  expected[10] ^= std::byte{0xFF};
  EXPECT_TRUE(BytesOf(*read) == expected);
  const std::vector<std::byte> served = BytesOf(*read);
  EXPECT_TRUE(FirstBadUnit({std::span<const std::byte>(served)}, 0, bytes.size(), bytes.size(),
                           read->unit_digests)
                  .has_value())
      << "the digests are those of the bytes as written";

  EXPECT_EQ(store.ReportCorrupt(BlockId::Rdd(1, 0), read->generation, "test").code(),
            StatusCode::kDataLoss);
  EXPECT_FALSE(store.Find(BlockId::Rdd(1, 0)).has_value());
  EXPECT_EQ(store.corrupt_count(), 1u);
  std::vector<LostBlock> lost = store.TakeLost();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].id, BlockId::Rdd(1, 0));
  EXPECT_TRUE(store.TakeLost().empty());
}

TEST(InMemoryStoreTest, ACopyWhoseBytesMissTheirDigestsIsNotWritten) {
  InMemoryStore store;
  const std::vector<std::byte> bytes = testing::RandomByteVector(300, 6);
  std::vector<uint64_t> digests = UnitDigestsOf({std::span<const std::byte>(bytes)});
  digests[0] ^= 1;
  EXPECT_EQ(
      store.Write(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, DataOf(bytes), 0, digests).code(),
      StatusCode::kDataLoss);
  EXPECT_FALSE(store.Find(BlockId::Rdd(1, 0)).has_value());
  EXPECT_EQ(store.Remove(BlockId::Rdd(1, 0)).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace bm
