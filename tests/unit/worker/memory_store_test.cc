#include "worker/memory_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace bm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

MemoryBlock MakeBlock(const BlockId& id, uint64_t size, uint64_t generation = 1) {
  MemoryBlock block{id, StorageLevel::kMemoryOnly, {}, generation};
  if (size > 0) block.data.Append(MakeChunk(std::vector<std::byte>(size, std::byte{7})));
  return block;
}

// Reserves room for and inserts a block; the test fails if anything is evicted.
void Put(MemoryStore& store, const BlockId& id, uint64_t size) {
  Result<std::vector<MemoryBlock>> evicted = store.Reserve(id, size);
  ASSERT_TRUE(evicted.ok()) << evicted.status().ToString();
  ASSERT_TRUE(evicted->empty());
  store.Insert(MakeBlock(id, size));
}

std::vector<BlockId> Ids(const std::vector<MemoryBlock>& blocks) {
  std::vector<BlockId> ids;
  for (const MemoryBlock& block : blocks) ids.push_back(block.id);
  return ids;
}

TEST(MemoryStoreTest, InsertedBlockIsReadableAndCounted) {
  MemoryStore store(1000);
  Put(store, BlockId::Broadcast(1), 300);
  const MemoryBlock* block = store.Get(BlockId::Broadcast(1));
  ASSERT_NE(block, nullptr);
  EXPECT_EQ(block->data.size, 300u);
  EXPECT_EQ(store.used(), 300u);
  EXPECT_EQ(store.stored_bytes(), 300u);
  EXPECT_EQ(store.block_count(), 1u);
  EXPECT_TRUE(store.Contains(BlockId::Broadcast(1)));
  EXPECT_EQ(store.Get(BlockId::Broadcast(2)), nullptr);
}

TEST(MemoryStoreTest, EvictsLeastRecentlyUsedFirst) {
  MemoryStore store(300);
  Put(store, BlockId::Rdd(1, 0), 100);
  Put(store, BlockId::Rdd(2, 0), 100);
  Put(store, BlockId::Rdd(3, 0), 100);

  Result<std::vector<MemoryBlock>> evicted = store.Reserve(BlockId::Rdd(4, 0), 150);
  ASSERT_TRUE(evicted.ok()) << evicted.status().ToString();
  EXPECT_THAT(Ids(*evicted), ElementsAre(BlockId::Rdd(1, 0), BlockId::Rdd(2, 0)));
  EXPECT_FALSE(store.Contains(BlockId::Rdd(1, 0)));
  EXPECT_TRUE(store.Contains(BlockId::Rdd(3, 0)));
  EXPECT_EQ(store.used(), 250u);
}

TEST(MemoryStoreTest, GetMakesBlockMostRecentlyUsed) {
  MemoryStore store(300);
  Put(store, BlockId::Rdd(1, 0), 100);
  Put(store, BlockId::Rdd(2, 0), 100);
  Put(store, BlockId::Rdd(3, 0), 100);
  ASSERT_NE(store.Get(BlockId::Rdd(1, 0)), nullptr);

  Result<std::vector<MemoryBlock>> evicted = store.Reserve(BlockId::Rdd(4, 0), 100);
  ASSERT_TRUE(evicted.ok());
  EXPECT_THAT(Ids(*evicted), ElementsAre(BlockId::Rdd(2, 0)));
  EXPECT_TRUE(store.Contains(BlockId::Rdd(1, 0)));
}

TEST(MemoryStoreTest, PeekDoesNotRefreshRecency) {
  MemoryStore store(200);
  Put(store, BlockId::Rdd(1, 0), 100);
  Put(store, BlockId::Rdd(2, 0), 100);
  ASSERT_NE(store.Peek(BlockId::Rdd(1, 0)), nullptr);

  Result<std::vector<MemoryBlock>> evicted = store.Reserve(BlockId::Rdd(3, 0), 100);
  ASSERT_TRUE(evicted.ok());
  EXPECT_THAT(Ids(*evicted), ElementsAre(BlockId::Rdd(1, 0)));
}

TEST(MemoryStoreTest, PrefetchChangesNeitherContentsNorRecency) {
  MemoryStore store(200);
  Put(store, BlockId::Rdd(1, 0), 100);
  Put(store, BlockId::Rdd(2, 0), 100);
  const std::vector<BlockId> ids = {BlockId::Rdd(1, 0), BlockId::Rdd(9, 9), BlockId::Rdd(2, 0)};
  store.Prefetch(ids);  // an absent id among them is passed over
  EXPECT_EQ(store.block_count(), 2u);
  EXPECT_FALSE(store.Contains(BlockId::Rdd(9, 9)));

  Result<std::vector<MemoryBlock>> evicted = store.Reserve(BlockId::Rdd(3, 0), 100);
  ASSERT_TRUE(evicted.ok());
  EXPECT_THAT(Ids(*evicted), ElementsAre(BlockId::Rdd(1, 0)));
}

TEST(MemoryStoreTest, NeverEvictsBlocksOfTheSameRdd) {
  MemoryStore store(300);
  Put(store, BlockId::Rdd(5, 0), 100);  // oldest, but same RDD as the newcomer
  Put(store, BlockId::Rdd(6, 0), 100);
  Put(store, BlockId::Rdd(5, 1), 100);

  Result<std::vector<MemoryBlock>> evicted = store.Reserve(BlockId::Rdd(5, 2), 100);
  ASSERT_TRUE(evicted.ok()) << evicted.status().ToString();
  EXPECT_THAT(Ids(*evicted), ElementsAre(BlockId::Rdd(6, 0)));
  EXPECT_TRUE(store.Contains(BlockId::Rdd(5, 0)));
  EXPECT_TRUE(store.Contains(BlockId::Rdd(5, 1)));
}

TEST(MemoryStoreTest, EvictsNothingWhenRoomCannotBeMade) {
  MemoryStore store(300);
  Put(store, BlockId::Rdd(5, 0), 100);
  Put(store, BlockId::Rdd(6, 0), 100);
  Put(store, BlockId::Rdd(5, 1), 100);

  // Only rdd 6's 100 bytes are eligible; 200 are needed.
  Result<std::vector<MemoryBlock>> evicted = store.Reserve(BlockId::Rdd(5, 2), 200);
  ASSERT_FALSE(evicted.ok());
  EXPECT_EQ(evicted.status().code(), StatusCode::kOutOfSpace);
  EXPECT_THAT(evicted.status().message(), HasSubstr("rdd_5_2"));
  EXPECT_THAT(evicted.status().message(), HasSubstr("200 B"));
  EXPECT_EQ(store.block_count(), 3u);
  EXPECT_TRUE(store.Contains(BlockId::Rdd(6, 0)));
  EXPECT_EQ(store.used(), 300u);
}

TEST(MemoryStoreTest, NonRddBlocksMayEvictAnything) {
  MemoryStore store(200);
  Put(store, BlockId::Broadcast(1), 100);
  Put(store, BlockId::Shuffle(1, 2, 3), 100);

  Result<std::vector<MemoryBlock>> evicted = store.Reserve(BlockId::Broadcast(2), 200);
  ASSERT_TRUE(evicted.ok()) << evicted.status().ToString();
  EXPECT_THAT(Ids(*evicted), ElementsAre(BlockId::Broadcast(1), BlockId::Shuffle(1, 2, 3)));
}

TEST(MemoryStoreTest, DoesNotEvictOlderVersionOfTheBlockBeingReplaced) {
  MemoryStore store(200);
  Put(store, BlockId::Broadcast(1), 100);
  Put(store, BlockId::Broadcast(2), 100);

  Result<std::vector<MemoryBlock>> evicted = store.Reserve(BlockId::Broadcast(1), 100);
  ASSERT_TRUE(evicted.ok());
  EXPECT_THAT(Ids(*evicted), ElementsAre(BlockId::Broadcast(2)));
  EXPECT_TRUE(store.Contains(BlockId::Broadcast(1)));
}

TEST(MemoryStoreTest, CanMakeRoomAnswersAsReserveWouldWithoutEvicting) {
  MemoryStore store(400);
  Put(store, BlockId::Rdd(5, 0), 100);  // oldest, but same RDD as rdd_5_9
  Put(store, BlockId::Rdd(6, 0), 100);
  Put(store, BlockId::Broadcast(1), 100);
  ASSERT_TRUE(store.Reserve(BlockId::Rdd(7, 0), 50).ok());  // a claim is never evicted

  // 50 free; rdd_6_0 and broadcast_1 are eligible for rdd_5_9, rdd_5_0 is not.
  EXPECT_TRUE(store.CanMakeRoom(BlockId::Rdd(5, 9), 250).ok());
  Status too_big = store.CanMakeRoom(BlockId::Rdd(5, 9), 251);
  EXPECT_EQ(too_big.code(), StatusCode::kOutOfSpace);
  EXPECT_THAT(too_big.message(), HasSubstr("same RDD"));
  // An older version of the block itself is not evicted for it either.
  EXPECT_EQ(store.CanMakeRoom(BlockId::Broadcast(1), 251).code(), StatusCode::kOutOfSpace);
  EXPECT_TRUE(store.CanMakeRoom(BlockId::Broadcast(1), 250).ok());
  EXPECT_EQ(store.CanMakeRoom(BlockId::Broadcast(2), 401).code(), StatusCode::kOutOfSpace);
  // Nothing was evicted or claimed by asking.
  EXPECT_EQ(store.block_count(), 3u);
  EXPECT_EQ(store.used(), 350u);

  // Reserve agrees on both sides of the line.
  EXPECT_EQ(store.Reserve(BlockId::Rdd(5, 9), 251).status().code(), StatusCode::kOutOfSpace);
  Result<std::vector<MemoryBlock>> evicted = store.Reserve(BlockId::Rdd(5, 9), 250);
  ASSERT_TRUE(evicted.ok()) << evicted.status().ToString();
  EXPECT_THAT(Ids(*evicted), ElementsAre(BlockId::Rdd(6, 0), BlockId::Broadcast(1)));
}

TEST(MemoryStoreTest, RejectsBlockBiggerThanCapacity) {
  MemoryStore store(100);
  Put(store, BlockId::Rdd(1, 0), 50);
  Result<std::vector<MemoryBlock>> evicted = store.Reserve(BlockId::Rdd(2, 0), 101);
  ASSERT_FALSE(evicted.ok());
  EXPECT_EQ(evicted.status().code(), StatusCode::kOutOfSpace);
  EXPECT_THAT(evicted.status().message(), HasSubstr("101 B"));
  EXPECT_TRUE(store.Contains(BlockId::Rdd(1, 0)));
  EXPECT_EQ(store.used(), 50u);
}

TEST(MemoryStoreTest, BlockOfExactlyCapacityFits) {
  MemoryStore store(100);
  Put(store, BlockId::Rdd(1, 0), 100);
  EXPECT_EQ(store.used(), store.capacity());
}

TEST(MemoryStoreTest, ReservationsCountAsUsedUntilReleased) {
  MemoryStore store(100);
  ASSERT_TRUE(store.Reserve(BlockId::Rdd(1, 0), 80).ok());
  EXPECT_EQ(store.used(), 80u);
  EXPECT_EQ(store.stored_bytes(), 0u);

  // Reservations cannot be evicted, so nothing can make room.
  Result<std::vector<MemoryBlock>> second = store.Reserve(BlockId::Rdd(2, 0), 30);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kOutOfSpace);

  store.Release(80);
  EXPECT_EQ(store.used(), 0u);
  EXPECT_TRUE(store.Reserve(BlockId::Rdd(2, 0), 100).ok());
}

TEST(MemoryStoreTest, InsertTurnsReservationIntoStoredBytes) {
  MemoryStore store(100);
  ASSERT_TRUE(store.Reserve(BlockId::Rdd(1, 0), 60).ok());
  store.Insert(MakeBlock(BlockId::Rdd(1, 0), 60));
  EXPECT_EQ(store.used(), 60u);
  EXPECT_EQ(store.stored_bytes(), 60u);
}

TEST(MemoryStoreTest, RemoveReturnsBlockAndFreesItsBytes) {
  MemoryStore store(100);
  Put(store, BlockId::Rdd(1, 0), 60);
  std::optional<MemoryBlock> removed = store.Remove(BlockId::Rdd(1, 0));
  ASSERT_TRUE(removed.has_value());
  EXPECT_EQ(removed->data.size, 60u);
  EXPECT_EQ(store.used(), 0u);
  EXPECT_FALSE(store.Remove(BlockId::Rdd(1, 0)).has_value());
  EXPECT_EQ(store.Get(BlockId::Rdd(1, 0)), nullptr);
}

TEST(MemoryStoreTest, ListIsSortedById) {
  MemoryStore store(1000);
  Put(store, BlockId::Rdd(2, 0), 10);
  Put(store, BlockId::Rdd(1, 0), 20);
  std::vector<BlockStatus> list = store.List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].id, BlockId::Rdd(1, 0));
  EXPECT_EQ(list[0].size, 20u);
  EXPECT_EQ(list[0].tier, Tier::kMemory);
  EXPECT_EQ(list[1].id, BlockId::Rdd(2, 0));
}

// Inserts a block with its own generation (pins are per generation).
void PutVersion(MemoryStore& store, const BlockId& id, uint64_t size, uint64_t generation) {
  Result<std::vector<MemoryBlock>> evicted = store.Reserve(id, size);
  ASSERT_TRUE(evicted.ok()) << evicted.status().ToString();
  store.Insert(MakeBlock(id, size, generation));
}

TEST(MemoryStoreTest, APinnedBlockIsNotEvictedAndItsUnpinningLetsItGo) {
  MemoryStore store(1000);
  PutVersion(store, BlockId::Broadcast(1), 400, 11);
  PutVersion(store, BlockId::Broadcast(2), 400, 12);
  Result<uint64_t> pinned = store.Pin(BlockId::Broadcast(1));  // the least recently used
  ASSERT_TRUE(pinned.ok());
  EXPECT_EQ(*pinned, 11u);
  EXPECT_EQ(store.pinned_bytes(), 400u);

  Result<std::vector<MemoryBlock>> evicted = store.Reserve(BlockId::Broadcast(3), 400);
  ASSERT_TRUE(evicted.ok());
  EXPECT_THAT(Ids(*evicted), ElementsAre(BlockId::Broadcast(2)));  // not the pinned one
  store.Insert(MakeBlock(BlockId::Broadcast(3), 400, 13));
  // 200 bytes free, and only the block just stored (400) may go: not enough for 700.
  Status room = store.CanMakeRoom(BlockId::Broadcast(4), 700);
  EXPECT_EQ(room.code(), StatusCode::kOutOfSpace);
  EXPECT_THAT(room.message(), HasSubstr("mapped by readers"));

  store.Unpin(11);
  EXPECT_EQ(store.pinned_bytes(), 0u);
  evicted = store.Reserve(BlockId::Broadcast(4), 400);
  ASSERT_TRUE(evicted.ok());
  EXPECT_THAT(Ids(*evicted), ElementsAre(BlockId::Broadcast(1)));
}

TEST(MemoryStoreTest, APinnedBlockRemovedStaysCountedUntilItsLastReaderLetsGo) {
  MemoryStore store(1000);
  PutVersion(store, BlockId::Broadcast(1), 600, 21);
  ASSERT_TRUE(store.Pin(BlockId::Broadcast(1)).ok());
  ASSERT_TRUE(store.Pin(BlockId::Broadcast(1)).ok());  // two readers
  ASSERT_TRUE(store.Remove(BlockId::Broadcast(1)).has_value());
  // Gone from the index at once, its pages still mapped: still counted.
  EXPECT_FALSE(store.Contains(BlockId::Broadcast(1)));
  EXPECT_EQ(store.used(), 600u);
  EXPECT_EQ(store.CanMakeRoom(BlockId::Broadcast(2), 600).code(), StatusCode::kOutOfSpace);
  store.Unpin(21);
  EXPECT_EQ(store.used(), 600u);
  store.Unpin(21);
  EXPECT_EQ(store.used(), 0u);
  EXPECT_EQ(store.pinned_bytes(), 0u);
  EXPECT_TRUE(store.CanMakeRoom(BlockId::Broadcast(2), 600).ok());
  store.Unpin(21);  // unknown now: ignored
  EXPECT_EQ(store.used(), 0u);
}

TEST(MemoryStoreTest, HeldBytesCountOnlyWhenTheyFitAndEvictNothing) {
  MemoryStore store(1000);
  PutVersion(store, BlockId::Broadcast(1), 700, 31);
  EXPECT_FALSE(store.Hold(400));  // would need an eviction: refused
  EXPECT_EQ(store.used(), 700u);
  EXPECT_TRUE(store.Hold(300));
  EXPECT_EQ(store.used(), 1000u);
  EXPECT_EQ(store.pinned_bytes(), 300u);
  store.ReleaseHeld(300);
  EXPECT_EQ(store.used(), 700u);
  EXPECT_TRUE(store.Contains(BlockId::Broadcast(1)));
}

TEST(MemoryStoreTest, PinningAnAbsentBlockFails) {
  MemoryStore store(1000);
  EXPECT_EQ(store.Pin(BlockId::Broadcast(9)).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace bm
