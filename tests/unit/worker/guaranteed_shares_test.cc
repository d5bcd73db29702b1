#include "worker/guaranteed_shares.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "worker/memory_store.h"

namespace bm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

MemoryBlock MakeBlock(const BlockId& id, uint64_t size) {
  MemoryBlock block{id, StorageLevel::kMemoryOnly, {}, id.partition() + 1000 * *id.rdd_id()};
  block.data.Append(MakeChunk(std::vector<std::byte>(size, std::byte{7})));
  return block;
}

std::vector<BlockId> Ids(const std::vector<MemoryBlock>& blocks) {
  std::vector<BlockId> ids;
  for (const MemoryBlock& block : blocks) ids.push_back(block.id);
  return ids;
}

TEST(GuaranteedSharesTest, QuotaTenantsBlocksAreKeptFromOtherTenantsOnly) {
  GuaranteedShares shares;
  shares.Learn("rdd_1", "bob", 1000);  // bob has a memory quota: a guaranteed share
  shares.Learn("rdd_2", "bob", 1000);
  shares.Learn("rdd_3", "alice", 0);  // alice has none
  shares.Learn("rdd_4", "alice", 0);
  EXPECT_FALSE(shares.MayEvict(BlockId::Rdd(1, 0), BlockId::Rdd(3, 0)));  // alice's put
  EXPECT_TRUE(shares.MayEvict(BlockId::Rdd(1, 0), BlockId::Rdd(2, 0)));   // bob's own put
  EXPECT_TRUE(shares.MayEvict(BlockId::Rdd(3, 0), BlockId::Rdd(1, 0)));   // bob evicts alice's
  EXPECT_TRUE(shares.MayEvict(BlockId::Rdd(4, 0), BlockId::Rdd(3, 0)));
  // A put nobody's the worker heard of (an admin's, a copy) evicts no guaranteed block.
  EXPECT_FALSE(shares.MayEvict(BlockId::Rdd(1, 0), BlockId::Rdd(9, 0)));
  // A block of a dataset it has not heard of has no guarantee.
  EXPECT_TRUE(shares.MayEvict(BlockId::Rdd(9, 0), BlockId::Rdd(3, 0)));
  // The quota lifted: no guarantee any more.
  shares.Learn("rdd_1", "bob", 0);
  EXPECT_TRUE(shares.MayEvict(BlockId::Rdd(1, 0), BlockId::Rdd(3, 0)));
}

TEST(GuaranteedSharesTest, QuotaEvictionForOneTenantLeavesAnothersGuaranteedBytesInPlace) {
  GuaranteedShares shares;
  shares.Learn("rdd_1", "bob", 500);
  shares.Learn("rdd_2", "alice", 0);
  shares.Learn("rdd_3", "alice", 0);
  MemoryStore store(600);
  store.set_eviction_guard(&shares);
  // Least recently used first: bob's two blocks, then alice's.
  for (const BlockId& id :
       {BlockId::Rdd(1, 0), BlockId::Rdd(1, 1), BlockId::Rdd(2, 0), BlockId::Rdd(2, 1)}) {
    ASSERT_TRUE(store.Reserve(id, 150).ok());
    store.Insert(MakeBlock(id, 150));
  }
  // Alice's put of 300 bytes into another of her RDDs evicts her own blocks, not bob's older ones.
  Result<std::vector<MemoryBlock>> evicted = store.Reserve(BlockId::Rdd(3, 0), 300);
  ASSERT_TRUE(evicted.ok()) << evicted.status().ToString();
  EXPECT_THAT(Ids(*evicted), ElementsAre(BlockId::Rdd(2, 0), BlockId::Rdd(2, 1)));
  store.Insert(MakeBlock(BlockId::Rdd(3, 0), 300));
  EXPECT_TRUE(store.Contains(BlockId::Rdd(1, 0)));
  EXPECT_TRUE(store.Contains(BlockId::Rdd(1, 1)));
  // With only bob's share and her own RDD left, alice's next put finds no room (and evicts
  // nothing), where without the guard bob's blocks would have gone.
  Result<std::vector<MemoryBlock>> refused = store.Reserve(BlockId::Rdd(3, 1), 200);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("guaranteed shares"));
  EXPECT_EQ(store.block_count(), 3u);
  // Bob's own put may evict his own blocks of another RDD.
  shares.Learn("rdd_5", "bob", 500);
  Result<std::vector<MemoryBlock>> own = store.Reserve(BlockId::Rdd(5, 0), 150);
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  EXPECT_THAT(Ids(*own), ElementsAre(BlockId::Rdd(1, 0)));
  store.Release(150);
}

}  // namespace
}  // namespace bm
