#include "client/location_cache.h"

#include <gtest/gtest.h>

namespace bm {
namespace {

BlockLocation At(const std::string& worker, Tier tier = Tier::kMemory) {
  return BlockLocation{worker, "tcp://127.0.0.1:" + worker, tier, 100};
}

TEST(LocationCacheTest, RemembersAndForgetsLocations) {
  LocationCache cache(8);
  const BlockId id = BlockId::Rdd(1, 2);
  EXPECT_EQ(cache.Find(id), nullptr);
  cache.Remember(id, {At("w1"), At("w2", Tier::kDisk)});
  const std::vector<BlockLocation>* found = cache.Find(id);
  ASSERT_NE(found, nullptr);
  ASSERT_EQ(found->size(), 2u);
  EXPECT_EQ((*found)[1].worker_id, "w2");
  cache.Remember(id, {At("w3")});
  ASSERT_EQ(cache.Find(id)->size(), 1u);
  EXPECT_EQ(cache.Find(id)->front().worker_id, "w3");
  cache.Forget(id);
  EXPECT_EQ(cache.Find(id), nullptr);
  EXPECT_EQ(cache.size(), 0u);
}

TEST(LocationCacheTest, EmptyListForgets) {
  LocationCache cache(8);
  const BlockId id = BlockId::Broadcast(7);
  cache.Remember(id, {At("w1")});
  cache.Remember(id, {});
  EXPECT_EQ(cache.Find(id), nullptr);
}

TEST(LocationCacheTest, DropsLeastRecentlyUsedWhenFull) {
  LocationCache cache(3);
  cache.Remember(BlockId::Rdd(1, 0), {At("w1")});
  cache.Remember(BlockId::Rdd(1, 1), {At("w1")});
  cache.Remember(BlockId::Rdd(1, 2), {At("w1")});
  ASSERT_NE(cache.Find(BlockId::Rdd(1, 0)), nullptr);  // now the most recently used
  cache.Remember(BlockId::Rdd(1, 3), {At("w1")});
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_NE(cache.Find(BlockId::Rdd(1, 0)), nullptr);
  EXPECT_EQ(cache.Find(BlockId::Rdd(1, 1)), nullptr);  // the least recently used went
  EXPECT_NE(cache.Find(BlockId::Rdd(1, 2)), nullptr);
  EXPECT_NE(cache.Find(BlockId::Rdd(1, 3)), nullptr);
}

TEST(LocationCacheTest, DropsTheLeastRecentlyUsedEighthWhenFull) {
  LocationCache cache(16);
  for (uint64_t p = 0; p < 16; ++p) cache.Remember(BlockId::Rdd(1, p), {At("w1")});
  // Used again, in this order: 0 and 1 are no longer the oldest; 2 and 3 now are.
  ASSERT_NE(cache.Find(BlockId::Rdd(1, 0)), nullptr);
  cache.Remember(BlockId::Rdd(1, 1), {At("w2")});
  cache.Remember(BlockId::Rdd(1, 16), {At("w1")});
  EXPECT_EQ(cache.size(), 15u);  // 16 - 16/8 + 1
  EXPECT_EQ(cache.Find(BlockId::Rdd(1, 2)), nullptr);
  EXPECT_EQ(cache.Find(BlockId::Rdd(1, 3)), nullptr);
  for (uint64_t p : {0, 1, 4, 15, 16}) EXPECT_NE(cache.Find(BlockId::Rdd(1, p)), nullptr) << p;
  EXPECT_EQ(cache.Find(BlockId::Rdd(1, 1))->front().worker_id, "w2");
  // Below capacity again: the next block drops nothing.
  cache.Remember(BlockId::Rdd(1, 17), {At("w1")});
  EXPECT_EQ(cache.size(), 16u);
  EXPECT_NE(cache.Find(BlockId::Rdd(1, 5)), nullptr);
}

TEST(LocationCacheTest, ForgetsAnRddsBlocksOnly) {
  LocationCache cache(16);
  cache.Remember(BlockId::Rdd(4, 0), {At("w1")});
  cache.Remember(BlockId::Rdd(4, 1), {At("w1")});
  cache.Remember(BlockId::Rdd(5, 0), {At("w1")});
  cache.Remember(BlockId::Broadcast(4), {At("w1")});
  cache.ForgetRdd(4);
  EXPECT_EQ(cache.Find(BlockId::Rdd(4, 0)), nullptr);
  EXPECT_EQ(cache.Find(BlockId::Rdd(4, 1)), nullptr);
  EXPECT_NE(cache.Find(BlockId::Rdd(5, 0)), nullptr);
  EXPECT_NE(cache.Find(BlockId::Broadcast(4)), nullptr);
}

TEST(LocationCacheTest, ForgetsAWorkersCopiesKeepingTheOthers) {
  LocationCache cache(16);
  cache.Remember(BlockId::Rdd(1, 0), {At("w1"), At("w2")});
  cache.Remember(BlockId::Rdd(1, 1), {At("w1")});
  cache.ForgetWorker(At("w1").address);
  ASSERT_NE(cache.Find(BlockId::Rdd(1, 0)), nullptr);
  ASSERT_EQ(cache.Find(BlockId::Rdd(1, 0))->size(), 1u);
  EXPECT_EQ(cache.Find(BlockId::Rdd(1, 0))->front().worker_id, "w2");
  EXPECT_EQ(cache.Find(BlockId::Rdd(1, 1)), nullptr);
}

TEST(LocationCacheTest, ZeroCapacityKeepsNothing) {
  LocationCache cache(0);
  cache.Remember(BlockId::Rdd(1, 0), {At("w1")});
  EXPECT_EQ(cache.Find(BlockId::Rdd(1, 0)), nullptr);
  EXPECT_EQ(cache.size(), 0u);
}

}  // namespace
}  // namespace bm
