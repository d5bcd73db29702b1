#include "worker/block_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "common/core/byte_size.h"
#include "common/core/digest.h"
#include "common/core/protocol.h"
#include "tests/support/files.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/worker/block_manager_sync.h"
#include "tests/unit/worker/fault_injecting_store.h"
#include "tests/unit/worker/in_memory_store.h"
#include "worker/disk/disk_store.h"

namespace bm {
namespace {

using ::testing::ElementsAre;

std::vector<BlockId> LostIds(const std::vector<LostBlock>& lost) {
  std::vector<BlockId> ids;
  for (const LostBlock& block : lost) ids.push_back(block.id);
  return ids;
}

using ::testing::HasSubstr;

std::vector<std::byte> RandomBytes(size_t size, uint64_t seed) {
  return testing::RandomByteVector(size, seed);
}

// The bytes as chunks of at most `piece` bytes, as they arrive from the network.
std::vector<ChunkPtr> Chunks(const std::vector<std::byte>& bytes, size_t piece = kChunkBytes) {
  std::vector<ChunkPtr> chunks;
  for (size_t pos = 0; pos < bytes.size(); pos += piece) {
    chunks.push_back(MakeChunk(std::span(bytes).subspan(pos, std::min(piece, bytes.size() - pos))));
  }
  return chunks;
}

using testing::Concat;

// A change as a compact string, so a test can state a whole sequence: "+rdd_1_0@memory",
// "-rdd_1_0@memory".
std::string Describe(const BlockStatusChange& change) {
  return (change.removed ? "-" : "+") + change.status.id.ToString() + "@" +
         std::string(TierName(change.status.tier));
}

std::vector<std::string> Describe(const std::vector<BlockStatusChange>& changes) {
  std::vector<std::string> out;
  for (const BlockStatusChange& change : changes) out.push_back(Describe(change));
  return out;
}

// The block digest a reader computes: BlockDigestOf the XXH3 of each 1 MiB unit.
uint64_t ExpectedDigest(const std::vector<std::byte>& bytes) {
  std::vector<uint64_t> units;
  for (size_t pos = 0; pos < bytes.size(); pos += kDigestUnitBytes) {
    units.push_back(
        DigestOf(std::span(bytes).subspan(pos, std::min(kDigestUnitBytes, bytes.size() - pos))));
  }
  return BlockDigestOf(units);
}

class BlockManagerTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kMemory = 3 * kKiB;

  void SetUp() override { Make(kMemory, 0); }

  // A block manager over a new memory store and the disk tier (the same DiskStore again, after
  // MakeOnDisk: a restart).
  void Make(uint64_t memory_capacity, uint64_t disk_limit) {
    manager_.reset();
    Result<std::unique_ptr<BlockStore>> disk = OpenDisk(disk_limit);
    ASSERT_TRUE(disk.ok()) << disk.status().ToString();
    manager_ = std::make_unique<BlockManager>(std::make_unique<MemoryStore>(memory_capacity),
                                              std::move(disk).value());
  }

  // As Make, with a DiskStore in dir_ as the disk tier from now on, for tests of what survives
  // a restart.
  void MakeOnDisk(uint64_t memory_capacity, uint64_t disk_limit) {
    on_disk_ = true;
    Make(memory_capacity, disk_limit);
  }

  // The disk tier: in memory, unless the test needs a restart (MakeOnDisk).
  Result<std::unique_ptr<BlockStore>> OpenDisk(uint64_t disk_limit) {
    if (!on_disk_) {
      return std::unique_ptr<BlockStore>(std::make_unique<testing::InMemoryStore>(disk_limit));
    }
    BM_ASSIGN_OR_RETURN(std::unique_ptr<DiskStore> disk,
                        DiskStore::Open(dir_.Sub("db"), disk_limit));
    return std::unique_ptr<BlockStore>(std::move(disk));
  }

  Result<Tier> Put(const BlockId& id, StorageLevel level, const std::vector<std::byte>& bytes) {
    BM_ASSIGN_OR_RETURN(BlockManager::UploadId upload, manager_->BeginPut(id, level, bytes.size()));
    BM_RETURN_IF_ERROR(testing::AppendPut(*manager_, upload, Chunks(bytes)));
    return testing::CommitPut(*manager_, upload);
  }

  std::vector<std::byte> ReadAll(const BlockId& id) {
    Result<BlockRead> read = testing::Read(*manager_, id, 0, UINT64_MAX);
    EXPECT_TRUE(read.ok()) << read.status().ToString();
    return read.ok() ? Concat(read->chunks) : std::vector<std::byte>{};
  }

  std::optional<Tier> TierOf(const BlockId& id) {
    std::optional<BlockStatus> status = manager_->Find(id);
    return status.has_value() ? std::optional<Tier>(status->tier) : std::nullopt;
  }

  testing::TempDir dir_;
  bool on_disk_ = false;
  std::unique_ptr<BlockManager> manager_;
};

// Flips a bit of a stored memory chunk in place, as failing RAM would.
void Rot(const ChunkPtr& chunk) {
  auto* bytes = const_cast<std::byte*>(chunk->bytes().data());
  bytes[chunk->size() / 2] ^= std::byte{0x08};
}

TEST_F(BlockManagerTest, AMemoryCopyThatRotsFailsItsDigestsAndVerifyDropsIt) {
  const std::vector<std::byte> bytes = RandomBytes(1000, 21);
  std::vector<ChunkPtr> chunks = Chunks(bytes, 400);
  const ChunkPtr held = chunks[1];
  auto upload = manager_->BeginPut(BlockId::Rdd(6, 0), StorageLevel::kMemoryOnly, bytes.size());
  ASSERT_TRUE(upload.ok());
  ASSERT_TRUE(testing::AppendPut(*manager_, *upload, std::move(chunks)).ok());
  ASSERT_TRUE(testing::CommitPut(*manager_, *upload).ok());
  (void)manager_->TakeChanges();
  Result<BlockCheck> intact = testing::Verify(*manager_, BlockId::Rdd(6, 0));
  ASSERT_TRUE(intact.ok()) << intact.status().ToString();
  EXPECT_TRUE(intact->corrupt.ok());
  EXPECT_TRUE(intact->digested);

  Rot(held);
  Result<BlockRead> read = testing::Read(*manager_, BlockId::Rdd(6, 0), 0, UINT64_MAX);
  ASSERT_TRUE(read.ok());
  std::vector<std::span<const std::byte>> pieces;
  for (const ChunkPtr& chunk : read->chunks) pieces.push_back(chunk->bytes());
  EXPECT_EQ(FirstBadUnit(pieces, 0, 1000, 1000, read->unit_digests), 0u)
      << "a reader can tell from the digests it is handed";
  Result<BlockCheck> rotten = testing::Verify(*manager_, BlockId::Rdd(6, 0));
  ASSERT_TRUE(rotten.ok()) << rotten.status().ToString();
  EXPECT_EQ(rotten->corrupt.code(), StatusCode::kDataLoss);
  EXPECT_EQ(rotten->tier, Tier::kMemory);
  EXPECT_FALSE(manager_->Find(BlockId::Rdd(6, 0)).has_value());
  EXPECT_EQ(Describe(manager_->TakeChanges()), std::vector<std::string>{"-rdd_6_0@memory"});
  EXPECT_EQ(LostIds(manager_->TakeLost()), std::vector<BlockId>{BlockId::Rdd(6, 0)});
  EXPECT_EQ(testing::Verify(*manager_, BlockId::Rdd(6, 0)).status().code(), StatusCode::kNotFound);
}

Status CorruptStoredByte(BlockManager& manager, const BlockId& id, Tier tier, uint64_t offset) {
  std::optional<Status> result;
  manager.CorruptStoredByte(id, tier, offset, [&](Status s) { result = std::move(s); });
  testing::Settle(manager);
  BM_CHECK(result.has_value());
  return *result;
}

// Fault injection in memory: later reads get the flipped byte (and the digests that expose it),
// a read already handed out keeps the bytes it had, and verifyBlock drops the copy.
TEST_F(BlockManagerTest, AByteFlippedInMemoryIsSeenByLaterReadsAndVerifyDropsTheCopy) {
  const BlockId id = BlockId::Rdd(6, 5);
  const std::vector<std::byte> bytes = RandomBytes(1000, 25);
  ASSERT_TRUE(Put(id, StorageLevel::kMemoryOnly, bytes).ok());
  Result<BlockRead> before = testing::Read(*manager_, id, 0, UINT64_MAX);
  ASSERT_TRUE(before.ok());

  EXPECT_EQ(CorruptStoredByte(*manager_, id, Tier::kDisk, 3).code(), StatusCode::kNotFound)
      << "no disk copy to corrupt";
  EXPECT_EQ(CorruptStoredByte(*manager_, id, Tier::kMemory, 1000).code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(CorruptStoredByte(*manager_, id, Tier::kMemory, 3).ok());
  std::vector<std::byte> expected = bytes;
  expected[3] ^= std::byte{0xFF};
  EXPECT_TRUE(ReadAll(id) == expected);
  EXPECT_TRUE(Concat(before->chunks) == bytes) << "a chunk in flight changed under its reader";

  Result<BlockCheck> check = testing::Verify(*manager_, id);
  ASSERT_TRUE(check.ok()) << check.status().ToString();
  EXPECT_EQ(check->corrupt.code(), StatusCode::kDataLoss);
  EXPECT_EQ(check->tier, Tier::kMemory);
  EXPECT_FALSE(manager_->Find(id).has_value());
  const std::vector<LostBlock> lost = manager_->TakeLost();
  ASSERT_EQ(LostIds(lost), std::vector<BlockId>{id});
  EXPECT_EQ(lost[0].cause, LostCause::kCopyCorrupt);
}

TEST_F(BlockManagerTest, AByteFlippedOnDiskIsFoundByVerifyWhichDropsTheCopy) {
  const BlockId id = BlockId::Rdd(6, 6);
  const std::vector<std::byte> bytes = RandomBytes(kChunkBytes + 100, 26);
  ASSERT_TRUE(Put(id, StorageLevel::kDiskOnly, bytes).ok());
  EXPECT_EQ(CorruptStoredByte(*manager_, id, Tier::kMemory, 3).code(), StatusCode::kNotFound);
  ASSERT_TRUE(CorruptStoredByte(*manager_, id, Tier::kDisk, kChunkBytes + 1).ok());
  std::vector<std::byte> expected = bytes;
  expected[kChunkBytes + 1] ^= std::byte{0xFF};
  EXPECT_TRUE(ReadAll(id) == expected);

  (void)manager_->TakeChanges();
  Result<BlockCheck> check = testing::Verify(*manager_, id);
  ASSERT_TRUE(check.ok()) << check.status().ToString();
  EXPECT_EQ(check->corrupt.code(), StatusCode::kDataLoss);
  EXPECT_EQ(check->tier, Tier::kDisk);
  EXPECT_FALSE(manager_->Find(id).has_value());
  EXPECT_EQ(Describe(manager_->TakeChanges()), std::vector<std::string>{"-rdd_6_6@disk"});
  const std::vector<LostBlock> lost = manager_->TakeLost();
  ASSERT_EQ(LostIds(lost), std::vector<BlockId>{id});
  EXPECT_EQ(lost[0].cause, LostCause::kCopyCorrupt) << "the master shows why";
}

TEST_F(BlockManagerTest, AnEvictedMemoryCopyThatRottedIsNotSpilledToDisk) {
  const std::vector<std::byte> bytes = RandomBytes(1000, 22);
  std::vector<ChunkPtr> chunks = Chunks(bytes, 400);
  const ChunkPtr held = chunks[0];
  auto upload = manager_->BeginPut(BlockId::Rdd(6, 1), StorageLevel::kMemoryAndDisk, bytes.size());
  ASSERT_TRUE(upload.ok());
  ASSERT_TRUE(testing::AppendPut(*manager_, *upload, std::move(chunks)).ok());
  ASSERT_TRUE(testing::CommitPut(*manager_, *upload).ok());
  Rot(held);
  // Other RDDs' blocks fill the memory: rdd_6_1 is evicted.
  ASSERT_TRUE(Put(BlockId::Rdd(7, 0), StorageLevel::kMemoryOnly, RandomBytes(2500, 23)).ok());
  EXPECT_FALSE(manager_->Find(BlockId::Rdd(6, 1)).has_value()) << "dropped, not spilled";
  EXPECT_EQ(manager_->spills(), 0u);
  // Reported lost, so the master restores the copy now, and counted as rot found in memory.
  EXPECT_EQ(LostIds(manager_->TakeLost()), std::vector<BlockId>{BlockId::Rdd(6, 1)});
  EXPECT_EQ(manager_->corrupt_spills(), 1u);
}

TEST_F(BlockManagerTest, MemoryBlockIsServedFromTheReceivedChunksWithoutCopy) {
  const std::vector<std::byte> bytes = RandomBytes(1000, 1);
  std::vector<ChunkPtr> chunks = Chunks(bytes, 400);
  std::vector<const Chunk*> received;
  for (const ChunkPtr& chunk : chunks) received.push_back(chunk.get());

  auto upload = manager_->BeginPut(BlockId::Rdd(1, 0), StorageLevel::kMemoryOnly, bytes.size());
  ASSERT_TRUE(upload.ok());
  ASSERT_TRUE(testing::AppendPut(*manager_, *upload, std::move(chunks)).ok());
  Result<Tier> tier = testing::CommitPut(*manager_, *upload);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  EXPECT_EQ(*tier, Tier::kMemory);

  Result<BlockRead> read = testing::Read(*manager_, BlockId::Rdd(1, 0), 0, UINT64_MAX);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->tier, Tier::kMemory);
  EXPECT_EQ(read->total_size, 1000u);
  ASSERT_EQ(read->chunks.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(read->chunks[i].get(), received[i]);
  EXPECT_TRUE(Concat(read->chunks) == bytes);
}

TEST_F(BlockManagerTest, ReadInMemoryReturnsWholeMemoryBlocksMarkedRecentlyUsed) {
  const std::vector<std::byte> a = RandomBytes(1000, 31);
  ASSERT_TRUE(Put(BlockId::Rdd(1, 0), StorageLevel::kMemoryOnly, a).ok());
  ASSERT_TRUE(Put(BlockId::Rdd(2, 0), StorageLevel::kMemoryOnly, RandomBytes(1000, 32)).ok());
  ASSERT_TRUE(Put(BlockId::Rdd(3, 0), StorageLevel::kDiskOnly, RandomBytes(100, 33)).ok());

  std::optional<BlockRead> read = manager_->ReadInMemory(BlockId::Rdd(1, 0));
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->tier, Tier::kMemory);
  EXPECT_EQ(read->offset, 0u);
  EXPECT_EQ(read->total_size, 1000u);
  EXPECT_TRUE(Concat(read->chunks) == a);
  EXPECT_FALSE(read->unit_digests.empty());
  // Not in RAM: a disk block and a missing one are left to Find and Read.
  EXPECT_FALSE(manager_->ReadInMemory(BlockId::Rdd(3, 0)).has_value());
  EXPECT_FALSE(manager_->ReadInMemory(BlockId::Rdd(9, 0)).has_value());

  // rdd_1_0 was used last, so making room evicts rdd_2_0 (put after it), not rdd_1_0.
  ASSERT_TRUE(Put(BlockId::Rdd(4, 0), StorageLevel::kMemoryOnly, RandomBytes(1000, 34)).ok());
  ASSERT_TRUE(Put(BlockId::Rdd(5, 0), StorageLevel::kMemoryOnly, RandomBytes(1000, 35)).ok());
  EXPECT_EQ(TierOf(BlockId::Rdd(1, 0)), Tier::kMemory);
  EXPECT_EQ(TierOf(BlockId::Rdd(2, 0)), std::nullopt);
}

TEST_F(BlockManagerTest, ReadsRangesOfMemoryBlockAcrossChunkBoundaries) {
  const std::vector<std::byte> bytes = RandomBytes(1000, 2);
  auto upload = manager_->BeginPut(BlockId::Broadcast(1), StorageLevel::kMemoryOnly, 1000);
  ASSERT_TRUE(upload.ok());
  ASSERT_TRUE(testing::AppendPut(*manager_, *upload, Chunks(bytes, 333)).ok());
  ASSERT_TRUE(testing::CommitPut(*manager_, *upload).ok());

  Result<BlockRead> read = testing::Read(*manager_, BlockId::Broadcast(1), 330, 10);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->offset, 330u);
  EXPECT_EQ(read->chunks.size(), 2u);
  EXPECT_TRUE(Concat(read->chunks) ==
              std::vector<std::byte>(bytes.begin() + 330, bytes.begin() + 340));
  Result<BlockRead> tail = testing::Read(*manager_, BlockId::Broadcast(1), 990, 100);
  ASSERT_TRUE(tail.ok());
  EXPECT_TRUE(Concat(tail->chunks) == std::vector<std::byte>(bytes.begin() + 990, bytes.end()));
  EXPECT_TRUE(testing::Read(*manager_, BlockId::Broadcast(1), 1000, 5)->chunks.empty());
  EXPECT_EQ(testing::Read(*manager_, BlockId::Broadcast(1), 1001, 5).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(BlockManagerTest, DiskOnlyBlockIsStoredOnDisk) {
  const std::vector<std::byte> bytes = RandomBytes(2 * kChunkBytes + 3, 3);
  Result<Tier> tier = Put(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, bytes);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  EXPECT_EQ(*tier, Tier::kDisk);
  EXPECT_EQ(TierOf(BlockId::Rdd(1, 0)), Tier::kDisk);
  EXPECT_TRUE(ReadAll(BlockId::Rdd(1, 0)) == bytes);
  EXPECT_EQ(manager_->Stats().memory_used, 0u);
  EXPECT_EQ(manager_->Stats().disk_used, bytes.size());
  EXPECT_THAT(Describe(manager_->TakeChanges()), ElementsAre("+rdd_1_0@disk"));
}

TEST_F(BlockManagerTest, SpillsMemoryAndDiskBlockToDiskOnEviction) {
  const std::vector<std::byte> first = RandomBytes(2 * kKiB, 4);
  ASSERT_TRUE(Put(BlockId::Rdd(1, 0), StorageLevel::kMemoryAndDisk, first).ok());
  Result<Tier> second =
      Put(BlockId::Rdd(2, 0), StorageLevel::kMemoryAndDisk, RandomBytes(2 * kKiB, 5));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*second, Tier::kMemory);

  EXPECT_EQ(TierOf(BlockId::Rdd(1, 0)), Tier::kDisk);
  EXPECT_TRUE(ReadAll(BlockId::Rdd(1, 0)) == first);
  EXPECT_EQ(manager_->Find(BlockId::Rdd(1, 0))->level, StorageLevel::kMemoryAndDisk);
  EXPECT_THAT(Describe(manager_->TakeChanges()), ElementsAre("+rdd_1_0@memory", "-rdd_1_0@memory",
                                                             "+rdd_1_0@disk", "+rdd_2_0@memory"));
}

TEST_F(BlockManagerTest, DropsMemoryOnlyBlockOnEviction) {
  ASSERT_TRUE(Put(BlockId::Rdd(1, 0), StorageLevel::kMemoryOnly, RandomBytes(2 * kKiB, 4)).ok());
  ASSERT_TRUE(Put(BlockId::Rdd(2, 0), StorageLevel::kMemoryOnly, RandomBytes(2 * kKiB, 5)).ok());
  EXPECT_FALSE(manager_->Find(BlockId::Rdd(1, 0)).has_value());
  EXPECT_EQ(manager_->Stats().disk_used, 0u);
  EXPECT_THAT(Describe(manager_->TakeChanges()),
              ElementsAre("+rdd_1_0@memory", "-rdd_1_0@memory", "+rdd_2_0@memory"));
}

TEST_F(BlockManagerTest, DropsEvictedBlockThatCannotBeSpilled) {
  Make(kMemory, 1 * kKiB);
  ASSERT_TRUE(Put(BlockId::Rdd(1, 0), StorageLevel::kMemoryAndDisk, RandomBytes(2 * kKiB, 4)).ok());
  ASSERT_TRUE(Put(BlockId::Rdd(2, 0), StorageLevel::kMemoryAndDisk, RandomBytes(2 * kKiB, 5)).ok());
  EXPECT_FALSE(manager_->Find(BlockId::Rdd(1, 0)).has_value());
  EXPECT_THAT(Describe(manager_->TakeChanges()),
              ElementsAre("+rdd_1_0@memory", "-rdd_1_0@memory", "+rdd_2_0@memory"));
}

TEST_F(BlockManagerTest, MemoryOnlyFailsWhenOnlySameRddBlocksCouldBeEvicted) {
  ASSERT_TRUE(Put(BlockId::Rdd(1, 0), StorageLevel::kMemoryOnly, RandomBytes(2 * kKiB, 4)).ok());
  auto upload = manager_->BeginPut(BlockId::Rdd(1, 1), StorageLevel::kMemoryOnly, 2 * kKiB);
  ASSERT_FALSE(upload.ok());
  EXPECT_EQ(upload.status().code(), StatusCode::kOutOfSpace);
  EXPECT_EQ(TierOf(BlockId::Rdd(1, 0)), Tier::kMemory);
}

TEST_F(BlockManagerTest, MemoryAndDiskGoesToDiskWhenOnlySameRddBlocksCouldBeEvicted) {
  ASSERT_TRUE(Put(BlockId::Rdd(1, 0), StorageLevel::kMemoryAndDisk, RandomBytes(2 * kKiB, 4)).ok());
  Result<Tier> tier =
      Put(BlockId::Rdd(1, 1), StorageLevel::kMemoryAndDisk, RandomBytes(2 * kKiB, 5));
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  EXPECT_EQ(*tier, Tier::kDisk);
  EXPECT_EQ(TierOf(BlockId::Rdd(1, 0)), Tier::kMemory);
  EXPECT_EQ(TierOf(BlockId::Rdd(1, 1)), Tier::kDisk);
}

TEST_F(BlockManagerTest, TooBigMemoryAndDiskBlockGoesStraightToDisk) {
  ASSERT_TRUE(Put(BlockId::Rdd(2, 0), StorageLevel::kMemoryOnly, RandomBytes(1 * kKiB, 4)).ok());
  const std::vector<std::byte> bytes = RandomBytes(kMemory + 1, 6);
  Result<Tier> tier = Put(BlockId::Rdd(1, 0), StorageLevel::kMemoryAndDisk2, bytes);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  EXPECT_EQ(*tier, Tier::kDisk);
  EXPECT_TRUE(ReadAll(BlockId::Rdd(1, 0)) == bytes);
  // Nothing was evicted for it.
  EXPECT_EQ(TierOf(BlockId::Rdd(2, 0)), Tier::kMemory);
}

TEST_F(BlockManagerTest, TooBigMemoryOnlyBlockIsOutOfSpace) {
  auto upload = manager_->BeginPut(BlockId::Rdd(1, 0), StorageLevel::kMemoryOnly, kMemory + 1);
  ASSERT_FALSE(upload.ok());
  EXPECT_EQ(upload.status().code(), StatusCode::kOutOfSpace);
  EXPECT_EQ(manager_->Stats().disk_used, 0u);
  EXPECT_TRUE(manager_->TakeChanges().empty());
}

TEST_F(BlockManagerTest, MemoryAndDiskFailsWhenNeitherTierHasRoom) {
  Make(kMemory, 1 * kKiB);
  auto upload = manager_->BeginPut(BlockId::Rdd(1, 0), StorageLevel::kMemoryAndDisk, kMemory + 1);
  ASSERT_FALSE(upload.ok());
  EXPECT_EQ(upload.status().code(), StatusCode::kOutOfSpace);
  EXPECT_THAT(upload.status().message(), HasSubstr("memory:"));
  EXPECT_THAT(upload.status().message(), HasSubstr("disk:"));
}

TEST_F(BlockManagerTest, RemovesBlocksFromEitherTier) {
  ASSERT_TRUE(Put(BlockId::Rdd(1, 0), StorageLevel::kMemoryOnly, RandomBytes(100, 1)).ok());
  ASSERT_TRUE(Put(BlockId::Rdd(1, 1), StorageLevel::kDiskOnly, RandomBytes(100, 2)).ok());
  manager_->TakeChanges();

  ASSERT_TRUE(manager_->Remove(BlockId::Rdd(1, 0)).ok());
  ASSERT_TRUE(manager_->Remove(BlockId::Rdd(1, 1)).ok());
  EXPECT_FALSE(manager_->Find(BlockId::Rdd(1, 0)).has_value());
  EXPECT_FALSE(manager_->Find(BlockId::Rdd(1, 1)).has_value());
  EXPECT_EQ(manager_->Remove(BlockId::Rdd(1, 0)).code(), StatusCode::kNotFound);
  EXPECT_EQ(testing::Read(*manager_, BlockId::Rdd(1, 1), 0, 1).status().code(),
            StatusCode::kNotFound);
  WorkerStats stats = manager_->Stats();
  EXPECT_EQ(stats.memory_used, 0u);
  EXPECT_EQ(stats.disk_used, 0u);
  EXPECT_EQ(stats.block_count, 0u);
  EXPECT_THAT(Describe(manager_->TakeChanges()), ElementsAre("-rdd_1_0@memory", "-rdd_1_1@disk"));
}

TEST_F(BlockManagerTest, ReplacementBecomesVisibleOnlyAtCommit) {
  const std::vector<std::byte> v1 = RandomBytes(1000, 1);
  const std::vector<std::byte> v2 = RandomBytes(900, 2);
  ASSERT_TRUE(Put(BlockId::Broadcast(7), StorageLevel::kMemoryOnly, v1).ok());
  const uint64_t g1 = testing::Read(*manager_, BlockId::Broadcast(7), 0, 1)->generation;

  auto upload = manager_->BeginPut(BlockId::Broadcast(7), StorageLevel::kMemoryOnly, v2.size());
  ASSERT_TRUE(upload.ok()) << upload.status().ToString();
  ASSERT_TRUE(testing::AppendPut(*manager_, *upload, Chunks(v2)).ok());
  EXPECT_TRUE(ReadAll(BlockId::Broadcast(7)) == v1);

  ASSERT_TRUE(testing::CommitPut(*manager_, *upload).ok());
  Result<BlockRead> read = testing::Read(*manager_, BlockId::Broadcast(7), 0, UINT64_MAX);
  ASSERT_TRUE(read.ok());
  EXPECT_TRUE(Concat(read->chunks) == v2);
  EXPECT_NE(read->generation, g1);
  EXPECT_EQ(manager_->Stats().memory_used, v2.size());
  EXPECT_THAT(Describe(manager_->TakeChanges()),
              ElementsAre("+broadcast_7@memory", "+broadcast_7@memory"));
}

TEST_F(BlockManagerTest, ReplacingOnTheOtherTierLeavesOneLocation) {
  const BlockId id = BlockId::Rdd(3, 0);
  ASSERT_TRUE(Put(id, StorageLevel::kMemoryOnly, RandomBytes(100, 1)).ok());
  const std::vector<std::byte> on_disk = RandomBytes(200, 2);
  ASSERT_EQ(*Put(id, StorageLevel::kDiskOnly, on_disk), Tier::kDisk);
  EXPECT_EQ(TierOf(id), Tier::kDisk);
  EXPECT_TRUE(ReadAll(id) == on_disk);
  EXPECT_EQ(manager_->Stats().memory_used, 0u);

  const std::vector<std::byte> in_memory = RandomBytes(300, 3);
  ASSERT_EQ(*Put(id, StorageLevel::kMemoryOnly, in_memory), Tier::kMemory);
  EXPECT_EQ(TierOf(id), Tier::kMemory);
  EXPECT_TRUE(ReadAll(id) == in_memory);
  EXPECT_EQ(manager_->Stats().disk_used, 0u);
  EXPECT_EQ(manager_->List().size(), 1u);
  EXPECT_THAT(Describe(manager_->TakeChanges()),
              ElementsAre("+rdd_3_0@memory", "-rdd_3_0@memory", "+rdd_3_0@disk", "-rdd_3_0@disk",
                          "+rdd_3_0@memory"));
}

TEST_F(BlockManagerTest, AbortPutReleasesClaimedSpace) {
  auto memory = manager_->BeginPut(BlockId::Rdd(1, 0), StorageLevel::kMemoryOnly, 2 * kKiB);
  auto disk = manager_->BeginPut(BlockId::Rdd(1, 1), StorageLevel::kDiskOnly, 5 * kKiB);
  ASSERT_TRUE(memory.ok() && disk.ok());
  // Memory is claimed as bytes arrive; disk for the whole block when it begins.
  EXPECT_EQ(manager_->Stats().memory_used, 0u);
  ASSERT_TRUE(testing::AppendPut(*manager_, *memory, Chunks(RandomBytes(kKiB, 2))).ok());
  ASSERT_TRUE(testing::AppendPut(*manager_, *disk, Chunks(RandomBytes(3 * kKiB, 1))).ok());
  EXPECT_EQ(manager_->Stats().memory_used, kKiB);
  EXPECT_EQ(manager_->Stats().disk_used, 5 * kKiB);

  manager_->AbortPut(*memory);
  manager_->AbortPut(*disk);
  manager_->AbortPut(12345);  // unknown: ignored
  EXPECT_FALSE(manager_->HasUpload(*memory));
  testing::Settle(*manager_);  // the disk claim goes when the storage thread drops the writer
  EXPECT_EQ(manager_->Stats().memory_used, 0u);
  EXPECT_EQ(manager_->Stats().disk_used, 0u);
  EXPECT_TRUE(manager_->List().empty());
  EXPECT_TRUE(manager_->TakeChanges().empty());
}

TEST_F(BlockManagerTest, APutHeaderAloneEvictsNothing) {
  // The cache holds a block of another RDD; a put declares more than the room left.
  ASSERT_TRUE(Put(BlockId::Rdd(7, 0), StorageLevel::kMemoryOnly, RandomBytes(2 * kKiB, 3)).ok());
  Result<BlockManager::UploadId> big =
      manager_->BeginPut(BlockId::Rdd(8, 0), StorageLevel::kMemoryOnly, kMemory);
  ASSERT_TRUE(big.ok()) << big.status().ToString();             // room could be made
  EXPECT_TRUE(manager_->Find(BlockId::Rdd(7, 0)).has_value());  // and was not: no byte came
  EXPECT_EQ(manager_->Stats().memory_used, 2 * kKiB);
  // Bytes that come claim room, evicting what they need.
  ASSERT_TRUE(testing::AppendPut(*manager_, *big, Chunks(RandomBytes(2 * kKiB, 4))).ok());
  EXPECT_FALSE(manager_->Find(BlockId::Rdd(7, 0)).has_value());
  manager_->AbortPut(*big);
  EXPECT_EQ(manager_->Stats().memory_used, 0u);
}

TEST_F(BlockManagerTest, OfTwoMemoryOnlyUploadsThatDoNotFitTogetherTheOneOutOfRoomFails) {
  auto first = manager_->BeginPut(BlockId::Rdd(1, 0), StorageLevel::kMemoryOnly, 2 * kKiB);
  auto second = manager_->BeginPut(BlockId::Rdd(1, 1), StorageLevel::kMemoryOnly, 2 * kKiB);
  ASSERT_TRUE(first.ok() && second.ok());  // each could fit alone
  ASSERT_TRUE(testing::AppendPut(*manager_, *first, Chunks(RandomBytes(2 * kKiB, 5))).ok());
  Status out = testing::AppendPut(*manager_, *second, Chunks(RandomBytes(2 * kKiB, 6)));
  EXPECT_EQ(out.code(), StatusCode::kOutOfSpace) << out.ToString();
  EXPECT_FALSE(manager_->HasUpload(*second));  // aborted, its claim released
  ASSERT_TRUE(testing::CommitPut(*manager_, *first).ok());
  EXPECT_EQ(manager_->Stats().memory_used, 2 * kKiB);
}

TEST_F(BlockManagerTest, AMemoryAndDiskUploadThatRunsOutOfRoomMidwayMovesToDisk) {
  Make(3 * kMiB, 0);
  const std::vector<std::byte> bytes = RandomBytes(2 * kMiB + 5, 7);
  auto first = manager_->BeginPut(BlockId::Rdd(1, 0), StorageLevel::kMemoryOnly, 2 * kMiB);
  auto second = manager_->BeginPut(BlockId::Rdd(2, 0), StorageLevel::kMemoryAndDisk, bytes.size());
  ASSERT_TRUE(first.ok() && second.ok());  // each could fit alone
  const std::vector<std::byte> head(bytes.begin(), bytes.begin() + kMiB);
  const std::vector<std::byte> rest(bytes.begin() + kMiB, bytes.end());
  // Its first MiB fits beside the first upload's claim, which then takes the remaining room.
  ASSERT_TRUE(testing::AppendPut(*manager_, *second, Chunks(head)).ok());
  ASSERT_TRUE(testing::AppendPut(*manager_, *first, Chunks(RandomBytes(2 * kMiB, 8))).ok());
  EXPECT_EQ(manager_->Stats().memory_used, 3 * kMiB);

  // The rest does not fit beside the first's claim: the upload goes on on disk, with the bytes
  // that came before, its memory given back.
  // Its units' digests checked on arrival, as the put handler gives them, are stored as given:
  // after the bytes moved from memory, which the writer digests itself.
  const std::vector<uint64_t> checked = {DigestOf(std::span(rest).first(kMiB)),
                                         DigestOf(std::span(rest).subspan(kMiB))};
  ASSERT_TRUE(testing::AppendPut(*manager_, *second, Chunks(rest), checked).ok());
  EXPECT_EQ(manager_->Stats().memory_used, 2 * kMiB);
  Result<Tier> tier = testing::CommitPut(*manager_, *second);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  EXPECT_EQ(*tier, Tier::kDisk);
  EXPECT_TRUE(ReadAll(BlockId::Rdd(2, 0)) == bytes);
  EXPECT_EQ(manager_->Find(BlockId::Rdd(2, 0))->digest, ExpectedDigest(bytes));
  EXPECT_THAT(Describe(manager_->TakeChanges()), ElementsAre("+rdd_2_0@disk"));
  ASSERT_TRUE(testing::CommitPut(*manager_, *first).ok());
  EXPECT_EQ(manager_->Stats().memory_used, 2 * kMiB);
}

TEST_F(BlockManagerTest, AMemoryAndDiskUploadOutOfRoomMidwayFailsWhenTheDiskHasNoRoomEither) {
  Make(kMemory, kKiB);
  auto first = manager_->BeginPut(BlockId::Rdd(1, 0), StorageLevel::kMemoryOnly, 2 * kKiB);
  auto second = manager_->BeginPut(BlockId::Rdd(2, 0), StorageLevel::kMemoryAndDisk, 2 * kKiB);
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_TRUE(testing::AppendPut(*manager_, *second, Chunks(RandomBytes(kKiB, 9))).ok());
  ASSERT_TRUE(testing::AppendPut(*manager_, *first, Chunks(RandomBytes(2 * kKiB, 10))).ok());

  Status out = testing::AppendPut(*manager_, *second, Chunks(RandomBytes(kKiB, 11)));
  EXPECT_EQ(out.code(), StatusCode::kOutOfSpace) << out.ToString();
  EXPECT_THAT(out.message(), HasSubstr("memory:"));
  EXPECT_THAT(out.message(), HasSubstr("disk:"));
  EXPECT_FALSE(manager_->HasUpload(*second));  // aborted, its memory given back
  EXPECT_EQ(manager_->Stats().memory_used, 2 * kKiB);
  EXPECT_EQ(manager_->Stats().disk_used, 0u);
}

TEST_F(BlockManagerTest, AppendPastDeclaredSizeAbortsUpload) {
  auto upload = manager_->BeginPut(BlockId::Rdd(1, 0), StorageLevel::kMemoryOnly, 10);
  ASSERT_TRUE(upload.ok());
  EXPECT_TRUE(manager_->HasUpload(*upload));
  Status s = testing::AppendPut(*manager_, *upload, Chunks(RandomBytes(11, 1)));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(manager_->HasUpload(*upload));
  EXPECT_EQ(manager_->Stats().memory_used, 0u);
  EXPECT_EQ(testing::CommitPut(*manager_, *upload).status().code(), StatusCode::kNotFound);
}

TEST_F(BlockManagerTest, CommitWithMissingBytesFailsAndKeepsOldVersion) {
  const std::vector<std::byte> v1 = RandomBytes(100, 1);
  ASSERT_TRUE(Put(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, v1).ok());
  auto upload = manager_->BeginPut(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, 100);
  ASSERT_TRUE(upload.ok());
  ASSERT_TRUE(testing::AppendPut(*manager_, *upload, Chunks(RandomBytes(50, 2))).ok());
  Result<Tier> tier = testing::CommitPut(*manager_, *upload);
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(manager_->HasUpload(*upload));
  EXPECT_TRUE(ReadAll(BlockId::Rdd(1, 0)) == v1);
  EXPECT_EQ(manager_->Stats().disk_used, 100u);
}

TEST_F(BlockManagerTest, EmptyBlockIsStored) {
  Result<Tier> tier = Put(BlockId::Rdd(1, 0), StorageLevel::kMemoryOnly, {});
  ASSERT_TRUE(tier.ok());
  Result<BlockRead> read = testing::Read(*manager_, BlockId::Rdd(1, 0), 0, 100);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->total_size, 0u);
  EXPECT_TRUE(read->chunks.empty());
}

TEST_F(BlockManagerTest, GenerationsAreUniqueAcrossTiersAndRestarts) {
  ASSERT_NO_FATAL_FAILURE(MakeOnDisk(kMemory, 0));
  const BlockId id = BlockId::Rdd(1, 0);
  std::vector<uint64_t> generations;
  for (StorageLevel level : {StorageLevel::kMemoryOnly, StorageLevel::kDiskOnly,
                             StorageLevel::kMemoryOnly, StorageLevel::kDiskOnly}) {
    ASSERT_TRUE(Put(id, level, RandomBytes(10, 1)).ok());
    generations.push_back(testing::Read(*manager_, id, 0, 1)->generation);
  }
  Make(kMemory, 0);
  ASSERT_TRUE(Put(BlockId::Rdd(1, 1), StorageLevel::kMemoryOnly, RandomBytes(10, 1)).ok());
  generations.push_back(testing::Read(*manager_, BlockId::Rdd(1, 1), 0, 1)->generation);
  // The memory tier's and the disk tier's sequences are kept by different threads: they never
  // meet, and a restarted worker's memory sequence starts past the last one's.
  EXPECT_EQ(std::set<uint64_t>(generations.begin(), generations.end()).size(), generations.size());
  EXPECT_GT(generations[4], generations[2]);
}

TEST_F(BlockManagerTest, ListAndStatsCoverBothTiers) {
  ASSERT_TRUE(Put(BlockId::Rdd(2, 0), StorageLevel::kMemoryOnly, RandomBytes(100, 1)).ok());
  ASSERT_TRUE(Put(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, RandomBytes(200, 2)).ok());
  std::vector<BlockStatus> list = manager_->List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].id, BlockId::Rdd(1, 0));
  EXPECT_EQ(list[0].tier, Tier::kDisk);
  EXPECT_EQ(list[1].id, BlockId::Rdd(2, 0));
  EXPECT_EQ(list[1].tier, Tier::kMemory);
  WorkerStats stats = manager_->Stats();
  EXPECT_EQ(stats.memory_capacity, kMemory);
  EXPECT_EQ(stats.memory_used, 100u);
  EXPECT_EQ(stats.disk_used, 200u);
  // Without a limit: what the filesystem has room for.
  EXPECT_GT(stats.disk_capacity, stats.disk_used);
  EXPECT_FALSE(stats.disk_read_only);
  EXPECT_EQ(stats.block_count, 2u);
}

// The database went (as RocksDB's recovery drops what a damaged log held); the journal beside
// it did not: the blocks are lost, named for the master's registration.
TEST_F(BlockManagerTest, DiskBlocksMissingAfterARestartAreTakenAsLost) {
  ASSERT_NO_FATAL_FAILURE(MakeOnDisk(kMemory, 0));
  ASSERT_TRUE(Put(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, RandomBytes(200, 1)).ok());
  ASSERT_TRUE(Put(BlockId::Rdd(1, 1), StorageLevel::kDiskOnly2, RandomBytes(300, 2)).ok());
  ASSERT_TRUE(Put(BlockId::Rdd(1, 2), StorageLevel::kMemoryOnly, RandomBytes(100, 3)).ok());
  manager_.reset();
  for (const auto& entry : std::filesystem::directory_iterator(dir_.Sub("db"))) {
    if (entry.path().filename() != "committed-blocks.journal") {
      std::filesystem::remove_all(entry.path());
    }
  }
  ASSERT_NO_FATAL_FAILURE(Make(kMemory, 0));
  EXPECT_THAT(LostIds(manager_->TakeLost()), ElementsAre(BlockId::Rdd(1, 0), BlockId::Rdd(1, 1)));
  EXPECT_TRUE(manager_->TakeLost().empty()) << "taken once";
  EXPECT_TRUE(manager_->List().empty());
  // The registration's full report leaves them out; no removal is queued for a block the
  // master will not hear of from this worker anyway.
  EXPECT_TRUE(manager_->TakeChanges().empty());
}

TEST_F(BlockManagerTest, TakeChangesReturnsEachChangeOnce) {
  ASSERT_TRUE(Put(BlockId::Rdd(1, 0), StorageLevel::kMemoryOnly, RandomBytes(10, 1)).ok());
  std::vector<BlockStatusChange> changes = manager_->TakeChanges();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].status.size, 10u);
  EXPECT_EQ(changes[0].status.level, StorageLevel::kMemoryOnly);
  EXPECT_TRUE(manager_->TakeChanges().empty());
}

TEST_F(BlockManagerTest, DiskBlocksSurviveRestart) {
  ASSERT_NO_FATAL_FAILURE(MakeOnDisk(kMemory, 0));
  const std::vector<std::byte> bytes = RandomBytes(kChunkBytes + 10, 9);
  ASSERT_TRUE(Put(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, bytes).ok());
  ASSERT_TRUE(Put(BlockId::Rdd(1, 1), StorageLevel::kMemoryOnly, RandomBytes(10, 1)).ok());
  Make(kMemory, 0);
  EXPECT_EQ(TierOf(BlockId::Rdd(1, 0)), Tier::kDisk);
  EXPECT_FALSE(manager_->Find(BlockId::Rdd(1, 1)).has_value());
  EXPECT_TRUE(ReadAll(BlockId::Rdd(1, 0)) == bytes);
}

// The block manager over a disk that fails on command.
// ---- read-ahead: a disk block's next range, read while the last one is sent ----

class BlockManagerReadAheadTest : public BlockManagerTest {
 protected:
  static constexpr uint64_t kRange = kChunkBytes;
  const BlockId kBlock = BlockId::Rdd(9, 0);

  void MakeWithReadAhead(uint64_t read_ahead_bytes) {
    manager_.reset();
    Result<std::unique_ptr<BlockStore>> disk = OpenDisk(0);
    ASSERT_TRUE(disk.ok()) << disk.status().ToString();
    BlockManagerOptions options;
    options.read_ahead_bytes = read_ahead_bytes;
    manager_ = std::make_unique<BlockManager>(std::make_unique<MemoryStore>(kMemory),
                                              std::move(disk).value(), options);
  }

  std::vector<std::byte> Range(const BlockId& id, uint64_t offset) {
    Result<BlockRead> read = testing::Read(*manager_, id, offset, kRange);
    EXPECT_TRUE(read.ok()) << read.status().ToString();
    return read.ok() ? Concat(read->chunks) : std::vector<std::byte>{};
  }

  static std::vector<std::byte> Slice(const std::vector<std::byte>& bytes, uint64_t offset) {
    const uint64_t end = std::min<uint64_t>(offset + kRange, bytes.size());
    return {bytes.begin() + static_cast<ptrdiff_t>(offset),
            bytes.begin() + static_cast<ptrdiff_t>(end)};
  }
};

TEST_F(BlockManagerReadAheadTest, TheNextRangeIsReadAheadAndServedFromThere) {
  const std::vector<std::byte> bytes = RandomBytes(3 * kRange + 100, 21);
  ASSERT_TRUE(Put(kBlock, StorageLevel::kDiskOnly, bytes).ok());
  EXPECT_TRUE(Range(kBlock, 0) == Slice(bytes, 0));
  EXPECT_EQ(manager_->read_ahead_hits(), 0u);
  EXPECT_EQ(manager_->read_ahead_bytes(), kRange);  // [kRange, 2 kRange) held
  EXPECT_TRUE(Range(kBlock, kRange) == Slice(bytes, kRange));
  EXPECT_EQ(manager_->read_ahead_hits(), 1u);
  EXPECT_TRUE(Range(kBlock, 2 * kRange) == Slice(bytes, 2 * kRange));
  // The last range has no next one; nothing is left held.
  EXPECT_TRUE(Range(kBlock, 3 * kRange) == Slice(bytes, 3 * kRange));
  EXPECT_EQ(manager_->read_ahead_hits(), 3u);
  EXPECT_EQ(manager_->read_ahead_bytes(), 0u);
}

TEST_F(BlockManagerReadAheadTest, ARequestForARangeStillBeingReadAheadWaitsForThatRead) {
  const std::vector<std::byte> bytes = RandomBytes(2 * kRange, 27);
  ASSERT_TRUE(Put(kBlock, StorageLevel::kDiskOnly, bytes).ok());
  std::optional<Result<BlockRead>> first, second;
  manager_->Read(kBlock, 0, kRange, [&](Result<BlockRead> r) { first = std::move(r); });
  manager_->Read(kBlock, kRange, kRange, [&](Result<BlockRead> r) { second = std::move(r); });
  EXPECT_EQ(manager_->read_ahead_hits(), 1u);
  EXPECT_EQ(manager_->storage_jobs_outstanding(), 2u);  // no second read of the range
  testing::Settle(*manager_);
  ASSERT_TRUE(first.has_value() && first->ok());
  ASSERT_TRUE(second.has_value() && second->ok());
  EXPECT_TRUE(Concat((*first)->chunks) == Slice(bytes, 0));
  EXPECT_TRUE(Concat((*second)->chunks) == Slice(bytes, kRange));
  EXPECT_EQ(manager_->read_ahead_bytes(), 0u);
}

TEST_F(BlockManagerReadAheadTest, ARangeReadAheadOfARemovedBlockIsNeverServed) {
  const std::vector<std::byte> bytes = RandomBytes(2 * kRange, 22);
  ASSERT_TRUE(Put(kBlock, StorageLevel::kDiskOnly, bytes).ok());
  EXPECT_TRUE(Range(kBlock, 0) == Slice(bytes, 0));
  ASSERT_TRUE(manager_->Remove(kBlock).ok());
  EXPECT_EQ(manager_->read_ahead_bytes(), 0u);
  Result<BlockRead> read = testing::Read(*manager_, kBlock, kRange, kRange);
  EXPECT_EQ(read.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(manager_->read_ahead_hits(), 0u);
}

TEST_F(BlockManagerReadAheadTest, ARangeReadAheadOfAReplacedVersionIsNeverServed) {
  ASSERT_NO_FATAL_FAILURE(MakeOnDisk(kMemory, 0));
  const std::vector<std::byte> v1 = RandomBytes(2 * kRange, 23);
  const std::vector<std::byte> v2 = RandomBytes(2 * kRange, 24);
  ASSERT_TRUE(Put(kBlock, StorageLevel::kDiskOnly, v1).ok());
  const uint64_t g1 = testing::Read(*manager_, kBlock, 0, kRange)->generation;
  ASSERT_TRUE(Put(kBlock, StorageLevel::kDiskOnly, v2).ok());
  Result<BlockRead> read = testing::Read(*manager_, kBlock, kRange, kRange);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_NE(read->generation, g1);
  EXPECT_TRUE(Concat(read->chunks) == Slice(v2, kRange));
  EXPECT_EQ(manager_->read_ahead_hits(), 0u);

  // Replaced by a memory version: the memory copy answers.
  ASSERT_TRUE(Range(kBlock, 0) == Slice(v2, 0));
  Make(4 * kRange, 0);  // room in memory; the disk copy of v2 survives the restart
  ASSERT_TRUE(Range(kBlock, 0) == Slice(v2, 0));
  const std::vector<std::byte> v3 = RandomBytes(2 * kRange, 25);
  ASSERT_TRUE(Put(kBlock, StorageLevel::kMemoryOnly, v3).ok());
  EXPECT_TRUE(Range(kBlock, kRange) == Slice(v3, kRange));
}

TEST_F(BlockManagerReadAheadTest, HeldRangesStayWithinTheirBudget) {
  ASSERT_NO_FATAL_FAILURE(MakeOnDisk(kMemory, 0));  // the blocks outlive the restart below
  MakeWithReadAhead(kRange);
  const BlockId a = BlockId::Rdd(9, 1), b = BlockId::Rdd(9, 2);
  const std::vector<std::byte> bytes = RandomBytes(3 * kRange, 26);
  ASSERT_TRUE(Put(a, StorageLevel::kDiskOnly, bytes).ok());
  ASSERT_TRUE(Put(b, StorageLevel::kDiskOnly, bytes).ok());
  EXPECT_TRUE(Range(a, 0) == Slice(bytes, 0));
  EXPECT_EQ(manager_->read_ahead_bytes(), kRange);
  EXPECT_TRUE(Range(b, 0) == Slice(bytes, 0));  // a's range makes room for b's
  EXPECT_EQ(manager_->read_ahead_bytes(), kRange);
  EXPECT_TRUE(Range(a, kRange) == Slice(bytes, kRange));  // read afresh
  EXPECT_EQ(manager_->read_ahead_hits(), 0u);
  EXPECT_LE(manager_->read_ahead_bytes(), kRange);
  // Unused ranges are given back after two maintenance passes.
  manager_->Maintain();
  manager_->Maintain();
  testing::Settle(*manager_);
  EXPECT_EQ(manager_->read_ahead_bytes(), 0u);

  // Off: nothing is read ahead.
  MakeWithReadAhead(0);
  EXPECT_TRUE(Range(a, 0) == Slice(bytes, 0));
  EXPECT_EQ(manager_->read_ahead_bytes(), 0u);
}

class BlockManagerFaultTest : public BlockManagerTest {
 protected:
  void SetUp() override {
    auto faults =
        std::make_unique<testing::FaultInjectingStore>(std::make_unique<testing::InMemoryStore>());
    faults_ = faults.get();
    manager_ =
        std::make_unique<BlockManager>(std::make_unique<MemoryStore>(kMemory), std::move(faults));
  }

  void TearDown() override {
    if (faults_ != nullptr) faults_->ClearFaults();  // a held write would hold the shutdown
    manager_.reset();
  }

  // Owned by manager_.
  testing::FaultInjectingStore* faults_ = nullptr;
};

TEST_F(BlockManagerFaultTest, FailedSpillReportsTheBlockRemovedAndNeverListsIt) {
  ASSERT_TRUE(Put(BlockId::Rdd(1, 0), StorageLevel::kMemoryAndDisk, RandomBytes(2 * kKiB, 4)).ok());
  faults_->FailWrites(InternalError("I/O error (injected)"));
  const std::vector<std::byte> second = RandomBytes(2 * kKiB, 5);
  ASSERT_TRUE(Put(BlockId::Rdd(2, 0), StorageLevel::kMemoryAndDisk, second).ok());

  EXPECT_EQ(faults_->injected_write_failures(), 1u);
  EXPECT_FALSE(manager_->Find(BlockId::Rdd(1, 0)).has_value());
  EXPECT_EQ(testing::Read(*manager_, BlockId::Rdd(1, 0), 0, UINT64_MAX).status().code(),
            StatusCode::kNotFound);
  std::vector<std::string> listed;
  for (const BlockStatus& status : manager_->List()) listed.push_back(status.id.ToString());
  EXPECT_THAT(listed, ElementsAre("rdd_2_0"));
  EXPECT_EQ(manager_->Stats().disk_used, 0u);
  // The master hears that the block left memory and never that it reached disk.
  EXPECT_THAT(Describe(manager_->TakeChanges()),
              ElementsAre("+rdd_1_0@memory", "-rdd_1_0@memory", "+rdd_2_0@memory"));
  EXPECT_TRUE(ReadAll(BlockId::Rdd(2, 0)) == second);
}

TEST_F(BlockManagerFaultTest, DiskFullMidUploadFailsThatUploadAndKeepsTheOldVersion) {
  const std::vector<std::byte> old = RandomBytes(kChunkBytes + 7, 6);
  ASSERT_TRUE(Put(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, old).ok());
  manager_->TakeChanges();
  faults_->FillDiskAfter(kChunkBytes + 100);

  const std::vector<std::byte> bytes = RandomBytes(3 * kChunkBytes, 7);
  auto upload = manager_->BeginPut(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, bytes.size());
  ASSERT_TRUE(upload.ok()) << upload.status().ToString();
  Status appended = testing::AppendPut(*manager_, *upload, Chunks(bytes));
  EXPECT_EQ(appended.code(), StatusCode::kOutOfSpace) << appended.ToString();

  // The upload is gone with its claim; the old version is still the one stored.
  EXPECT_FALSE(manager_->HasUpload(*upload));
  EXPECT_EQ(manager_->Stats().disk_used, old.size());
  EXPECT_TRUE(ReadAll(BlockId::Rdd(1, 0)) == old);
  EXPECT_TRUE(manager_->TakeChanges().empty());

  faults_->ClearFaults();
  ASSERT_TRUE(Put(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, bytes).ok());
  EXPECT_TRUE(ReadAll(BlockId::Rdd(1, 0)) == bytes);
  EXPECT_EQ(manager_->Stats().disk_used, bytes.size());
}

TEST_F(BlockManagerFaultTest, WriteErrorAtCommitKeepsTheOldVersion) {
  const std::vector<std::byte> old = RandomBytes(kChunkBytes / 2, 8);
  ASSERT_TRUE(Put(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, old).ok());
  const std::vector<std::byte> bytes = RandomBytes(kChunkBytes / 2, 9);
  auto upload = manager_->BeginPut(BlockId::Rdd(1, 0), StorageLevel::kDiskOnly, bytes.size());
  ASSERT_TRUE(upload.ok());
  ASSERT_TRUE(testing::AppendPut(*manager_, *upload, Chunks(bytes)).ok());
  faults_->FailWrites(InternalError("I/O error (injected)"));

  Result<Tier> committed = testing::CommitPut(*manager_, *upload);
  // The disk's own error: the client is told to put the block elsewhere, naming the disk.
  EXPECT_EQ(committed.status().code(), StatusCode::kUnavailable) << committed.status().ToString();
  EXPECT_NE(committed.status().message().find("could not take this upload: I/O error (injected)"),
            std::string::npos)
      << committed.status().ToString();
  EXPECT_FALSE(manager_->HasUpload(*upload));
  faults_->ClearFaults();
  EXPECT_TRUE(ReadAll(BlockId::Rdd(1, 0)) == old);
  EXPECT_EQ(manager_->Stats().disk_used, old.size());
}

// Waits (with a deadline) until the storage thread is stuck in `count` held writes.
bool WaitForHeldWrites(const testing::FaultInjectingStore& faults, int count) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (faults.writes_waiting() < count) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// Appends bytes to a memory upload, whose answer comes at once (no storage job to settle: the
// disk may be held).
Status AppendToMemory(BlockManager& manager, BlockManager::UploadId upload,
                      std::vector<ChunkPtr> chunks) {
  std::optional<Status> appended;
  manager.AppendPut(upload, std::move(chunks), {}, [&](Status s) { appended = s; });
  return appended.value_or(InternalError("a memory append did not answer at once"));
}

TEST_F(BlockManagerFaultTest, StalledDiskDelaysNeitherMemoryPutsNorMemoryReads) {
  const std::vector<std::byte> spilled = RandomBytes(2 * kKiB, 10);
  const std::vector<std::byte> on_disk = RandomBytes(kKiB, 11);
  ASSERT_TRUE(Put(BlockId::Rdd(9, 0), StorageLevel::kDiskOnly, on_disk).ok());
  ASSERT_TRUE(Put(BlockId::Rdd(1, 0), StorageLevel::kMemoryAndDisk, spilled).ok());
  manager_->TakeChanges();
  faults_->HoldWrites();

  // This put's bytes evict rdd_1_0, whose spill then hangs on the stalled disk.
  const std::vector<std::byte> fresh = RandomBytes(2 * kKiB, 12);
  auto upload = manager_->BeginPut(BlockId::Rdd(2, 0), StorageLevel::kMemoryOnly, fresh.size());
  ASSERT_TRUE(upload.ok()) << upload.status().ToString();
  // Everything in memory answers at once, the evicted block too (from its pending spill).
  std::optional<Status> appended;
  manager_->AppendPut(*upload, Chunks(fresh), {}, [&](Status s) { appended = s; });
  ASSERT_TRUE(appended.has_value() && appended->ok());
  ASSERT_TRUE(WaitForHeldWrites(*faults_, 1));
  EXPECT_EQ(manager_->spills_pending(), 1u);
  std::optional<Result<Tier>> committed;
  manager_->CommitPut(*upload, [&](Result<Tier> tier) { committed = tier; });
  ASSERT_TRUE(committed.has_value() && committed->ok());
  for (const auto& [id, bytes] :
       {std::pair{BlockId::Rdd(2, 0), fresh}, std::pair{BlockId::Rdd(1, 0), spilled}}) {
    std::optional<Result<BlockRead>> read;
    manager_->Read(id, 0, UINT64_MAX, [&](Result<BlockRead> r) { read = std::move(r); });
    ASSERT_TRUE(read.has_value() && read->ok()) << id.ToString();
    EXPECT_EQ((*read)->tier, Tier::kMemory);
    EXPECT_TRUE(Concat((*read)->chunks) == bytes) << id.ToString();
  }
  EXPECT_EQ(manager_->Find(BlockId::Rdd(1, 0))->tier, Tier::kMemory);

  // A disk read waits behind the stalled write, and is answered once the disk moves.
  std::optional<Result<BlockRead>> disk_read;
  manager_->Read(BlockId::Rdd(9, 0), 0, UINT64_MAX,
                 [&](Result<BlockRead> r) { disk_read = std::move(r); });
  manager_->RunCompletions();
  EXPECT_FALSE(disk_read.has_value());

  faults_->ReleaseWrites();
  testing::Settle(*manager_);
  ASSERT_TRUE(disk_read.has_value() && disk_read->ok());
  EXPECT_TRUE(Concat((*disk_read)->chunks) == on_disk);
  EXPECT_EQ(TierOf(BlockId::Rdd(1, 0)), Tier::kDisk);
  EXPECT_EQ(manager_->spills_pending(), 0u);
  EXPECT_TRUE(ReadAll(BlockId::Rdd(1, 0)) == spilled);
  // The master hears of the move only once the spill has committed.
  EXPECT_THAT(Describe(manager_->TakeChanges()),
              ElementsAre("+rdd_2_0@memory", "-rdd_1_0@memory", "+rdd_1_0@disk"));
}

TEST_F(BlockManagerFaultTest, BytesWaitOnlyWhileTheSpillBacklogIsOverItsAllowance) {
  auto faults =
      std::make_unique<testing::FaultInjectingStore>(std::make_unique<testing::InMemoryStore>());
  faults_ = faults.get();
  manager_ =
      std::make_unique<BlockManager>(std::make_unique<MemoryStore>(kMemory), std::move(faults),
                                     BlockManagerOptions{.spill_backlog_bytes = kKiB});
  ASSERT_TRUE(
      Put(BlockId::Rdd(1, 0), StorageLevel::kMemoryAndDisk, RandomBytes(2 * kKiB, 13)).ok());
  EXPECT_TRUE(manager_->TakesBytes(3 * kKiB));  // no spill pending: never held back

  faults_->HoldWrites();
  auto upload = manager_->BeginPut(BlockId::Rdd(2, 0), StorageLevel::kMemoryOnly, 3 * kKiB);
  ASSERT_TRUE(upload.ok());
  // Its first 2 KiB evict rdd_1_0, whose spill then waits for the disk.
  ASSERT_TRUE(AppendToMemory(*manager_, *upload, Chunks(RandomBytes(2 * kKiB, 14))).ok());
  EXPECT_EQ(manager_->spill_backlog_bytes(), 2 * kKiB);
  // Held: 2 KiB received + 2 KiB waiting for the disk; 1 KiB more is within 3 KiB + the
  // 1 KiB allowance, 2 KiB more is not.
  EXPECT_TRUE(manager_->TakesBytes(0));
  EXPECT_FALSE(manager_->TakesBytes(2 * kKiB));

  faults_->ReleaseWrites();
  testing::Settle(*manager_);
  EXPECT_EQ(manager_->spill_backlog_bytes(), 0u);
  EXPECT_TRUE(manager_->TakesBytes(3 * kKiB));
  ASSERT_TRUE(testing::AppendPut(*manager_, *upload, Chunks(RandomBytes(kKiB, 15))).ok());
  ASSERT_TRUE(testing::CommitPut(*manager_, *upload).ok());
}

TEST_F(BlockManagerFaultTest, BlockRemovedWhileItsSpillIsPendingLeavesNoDiskCopy) {
  ASSERT_TRUE(
      Put(BlockId::Rdd(1, 0), StorageLevel::kMemoryAndDisk, RandomBytes(2 * kKiB, 15)).ok());
  faults_->HoldWrites();
  auto evicting = manager_->BeginPut(BlockId::Rdd(2, 0), StorageLevel::kMemoryOnly, 2 * kKiB);
  ASSERT_TRUE(evicting.ok());
  ASSERT_TRUE(AppendToMemory(*manager_, *evicting, Chunks(RandomBytes(2 * kKiB, 18))).ok());
  ASSERT_TRUE(WaitForHeldWrites(*faults_, 1));

  ASSERT_TRUE(manager_->Remove(BlockId::Rdd(1, 0)).ok());
  EXPECT_FALSE(manager_->Find(BlockId::Rdd(1, 0)).has_value());
  EXPECT_EQ(manager_->spill_backlog_bytes(), 0u);

  faults_->ReleaseWrites();
  testing::Settle(*manager_);
  EXPECT_FALSE(manager_->Find(BlockId::Rdd(1, 0)).has_value());
  EXPECT_EQ(manager_->disk_block_count(), 0u);
  EXPECT_EQ(manager_->Stats().disk_used, 0u);
  EXPECT_THAT(Describe(manager_->TakeChanges()), ElementsAre("+rdd_1_0@memory", "-rdd_1_0@memory"));
}

TEST_F(BlockManagerFaultTest, MemoryPutReplacingABlockOnItsWayToDiskWins) {
  const std::vector<std::byte> v1 = RandomBytes(2 * kKiB, 16);
  const std::vector<std::byte> v2 = RandomBytes(kKiB, 17);
  ASSERT_TRUE(Put(BlockId::Rdd(1, 0), StorageLevel::kMemoryAndDisk, v1).ok());
  faults_->HoldWrites();
  auto evicting = manager_->BeginPut(BlockId::Rdd(2, 0), StorageLevel::kMemoryOnly, 2 * kKiB);
  ASSERT_TRUE(evicting.ok());
  ASSERT_TRUE(AppendToMemory(*manager_, *evicting, Chunks(RandomBytes(2 * kKiB, 19))).ok());
  ASSERT_TRUE(WaitForHeldWrites(*faults_, 1));

  auto upload = manager_->BeginPut(BlockId::Rdd(1, 0), StorageLevel::kMemoryOnly, v2.size());
  ASSERT_TRUE(upload.ok()) << upload.status().ToString();
  std::optional<Status> appended;
  manager_->AppendPut(*upload, Chunks(v2), {}, [&](Status s) { appended = s; });
  ASSERT_TRUE(appended.has_value() && appended->ok());
  std::optional<Result<Tier>> committed;
  manager_->CommitPut(*upload, [&](Result<Tier> tier) { committed = tier; });
  // The old version's disk copy goes first, behind its spill: until then readers see v1.
  EXPECT_FALSE(committed.has_value());
  std::optional<Result<BlockRead>> read;
  manager_->Read(BlockId::Rdd(1, 0), 0, UINT64_MAX, [&](Result<BlockRead> r) { read = r; });
  ASSERT_TRUE(read.has_value() && read->ok());
  EXPECT_TRUE(Concat((*read)->chunks) == v1);

  faults_->ReleaseWrites();
  testing::Settle(*manager_);
  ASSERT_TRUE(committed.has_value() && committed->ok());
  EXPECT_EQ(**committed, Tier::kMemory);
  EXPECT_TRUE(ReadAll(BlockId::Rdd(1, 0)) == v2);
  EXPECT_EQ(TierOf(BlockId::Rdd(1, 0)), Tier::kMemory);
  EXPECT_EQ(manager_->disk_block_count(), 0u);
  EXPECT_EQ(manager_->Stats().disk_used, 0u);
}

}  // namespace
}  // namespace bm

namespace bm {
namespace {

TEST_F(BlockManagerTest, ReportsCarryTheBlockDigestOnEitherTierAndAfterARestart) {
  MakeOnDisk(3 * kMiB, 0);
  const std::vector<std::byte> in_memory = RandomBytes(kMiB + 5, 31);
  const std::vector<std::byte> on_disk = RandomBytes(2 * kMiB + 7, 32);
  ASSERT_TRUE(Put(BlockId::Rdd(1, 0), StorageLevel::kMemoryOnly, in_memory).ok());
  ASSERT_TRUE(Put(BlockId::Rdd(1, 1), StorageLevel::kDiskOnly, on_disk).ok());
  const uint64_t memory_digest = ExpectedDigest(in_memory);
  const uint64_t disk_digest = ExpectedDigest(on_disk);
  ASSERT_NE(memory_digest, 0u);

  std::vector<BlockStatusChange> changes = manager_->TakeChanges();
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].status.digest, memory_digest);
  EXPECT_EQ(changes[1].status.digest, disk_digest);
  std::vector<BlockStatus> all = manager_->List();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].digest, memory_digest);
  EXPECT_EQ(all[1].digest, disk_digest);
  EXPECT_EQ(manager_->Find(BlockId::Rdd(1, 1))->digest, disk_digest);

  // A spilled block keeps its digest on disk.
  ASSERT_TRUE(Put(BlockId::Rdd(2, 0), StorageLevel::kMemoryAndDisk, in_memory).ok());
  ASSERT_TRUE(
      Put(BlockId::Rdd(3, 0), StorageLevel::kMemoryAndDisk, RandomBytes(2 * kMiB, 33)).ok());
  ASSERT_EQ(TierOf(BlockId::Rdd(2, 0)), Tier::kDisk);
  EXPECT_EQ(manager_->Find(BlockId::Rdd(2, 0))->digest, memory_digest);

  // The disk index a restarted worker loads (its full report) has it too.
  Make(3 * kMiB, 0);
  EXPECT_EQ(manager_->Find(BlockId::Rdd(1, 1))->digest, disk_digest);
  EXPECT_EQ(manager_->Find(BlockId::Rdd(2, 0))->digest, memory_digest);
}

}  // namespace
}  // namespace bm
