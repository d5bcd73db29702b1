#include "worker/eviction_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "worker/memory_store.h"

namespace bm {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr uint64_t kMiB = 1 << 20;

EvictionCost Computed(uint64_t size, double seconds) {
  return EvictionCost{.size = size, .compute_seconds = seconds};
}

// The policy's order, first to evict first.
std::vector<BlockId> Order(const EvictionPolicy& policy) {
  std::vector<BlockId> ids;
  policy.VisitInEvictionOrder([&](const BlockId& id) {
    ids.push_back(id);
    return true;
  });
  return ids;
}

BlockId Block(uint64_t n) { return BlockId::Rdd(1, n); }

TEST(EvictionPolicyTest, ParsesTheTwoModesAndRefusesOthers) {
  EXPECT_EQ(ParseEvictionMode("lru").value(), EvictionMode::kLru);
  EXPECT_EQ(ParseEvictionMode("cost").value(), EvictionMode::kCost);
  Result<EvictionMode> bad = ParseEvictionMode("lfu");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("lru or cost"));
}

TEST(LruEvictionPolicyTest, OrdersByLastUseAndForgetsRemovedBlocks) {
  LruEvictionPolicy lru;
  const auto a = lru.Add(Block(0), Computed(100, 50));
  const auto b = lru.Add(Block(1), Computed(100, 0.1));
  const auto c = lru.Add(Block(2), Computed(100, 0.1));
  EXPECT_THAT(Order(lru), ElementsAre(Block(0), Block(1), Block(2)));
  lru.Touch(a);
  EXPECT_THAT(Order(lru), ElementsAre(Block(1), Block(2), Block(0)));
  lru.Remove(c);
  lru.Evicted(b);
  EXPECT_THAT(Order(lru), ElementsAre(Block(0)));
  // A freed slot is reused without disturbing the order.
  lru.Add(Block(3), Computed(100, 0.1));
  EXPECT_THAT(Order(lru), ElementsAre(Block(0), Block(3)));
}

TEST(GdsfEvictionPolicyTest, AnExpensiveSmallBlockOutlivesCheapLargeOnes) {
  GdsfEvictionPolicy gdsf;
  gdsf.Add(Block(0), Computed(1 * kMiB, 5.0));  // expensive and small
  gdsf.Add(Block(1), Computed(8 * kMiB, 0.1));
  gdsf.Add(Block(2), Computed(8 * kMiB, 0.1));
  gdsf.Add(Block(3), Computed(8 * kMiB, 0.2));
  // The cheapest per byte first; the expensive block last although it is the oldest.
  EXPECT_THAT(Order(gdsf), ElementsAre(Block(1), Block(2), Block(3), Block(0)));
}

TEST(GdsfEvictionPolicyTest, FrequencyMatters) {
  GdsfEvictionPolicy gdsf;
  const auto read_often = gdsf.Add(Block(0), Computed(kMiB, 1.0));
  gdsf.Add(Block(1), Computed(kMiB, 2.5));
  EXPECT_THAT(Order(gdsf), ElementsAre(Block(0), Block(1)));
  // Three reads make its frequency 4: 4 x 1.0 s outweighs 1 x 2.5 s.
  for (int i = 0; i < 3; ++i) gdsf.Touch(read_often);
  EXPECT_THAT(Order(gdsf), ElementsAre(Block(1), Block(0)));
}

TEST(GdsfEvictionPolicyTest, AgingLetsAnOldExpensiveBlockGoEventually) {
  GdsfEvictionPolicy gdsf;
  // 20x the cost of each cheap block that comes after it.
  gdsf.Add(Block(0), Computed(kMiB, 2.0));
  auto first = [&] {
    BlockId id = BlockId::Broadcast(0);
    gdsf.VisitInEvictionOrder([&](const BlockId& candidate) {
      id = candidate;
      return false;
    });
    return id;
  };
  // Cheap blocks stream through (each evicted to make room for the next): every eviction
  // raises the clock by a cheap block's worth, so the expensive block, never read again,
  // becomes the first to go after about 20 of them.
  int streamed = 0;
  while (streamed < 100) {
    const BlockId cheap = Block(1000 + streamed++);
    const auto handle = gdsf.Add(cheap, Computed(kMiB, 0.1));
    if (first() == Block(0)) break;  // the expensive block is the next to go now
    ASSERT_EQ(first(), cheap);
    gdsf.Evicted(handle);
  }
  EXPECT_EQ(first(), Block(0));
  EXPECT_GE(streamed, 15);
  EXPECT_LE(streamed, 25);
  EXPECT_GT(gdsf.clock(), 0.0);
}

TEST(GdsfEvictionPolicyTest, TheClockBecomesThePriorityOfTheEvictedBlock) {
  GdsfEvictionPolicy gdsf;
  const auto a = gdsf.Add(Block(0), Computed(1000, 1.0));
  const auto b = gdsf.Add(Block(1), Computed(1000, 3.0));
  EXPECT_DOUBLE_EQ(gdsf.priority(a), 1.0 / 1000);
  gdsf.Evicted(a);
  EXPECT_DOUBLE_EQ(gdsf.clock(), 1.0 / 1000);
  // Blocks stored or read from now on start from the clock.
  const auto c = gdsf.Add(Block(2), Computed(1000, 1.0));
  EXPECT_DOUBLE_EQ(gdsf.priority(c), 2.0 / 1000);
  gdsf.Touch(b);
  EXPECT_DOUBLE_EQ(gdsf.priority(b), 1.0 / 1000 + 2 * 3.0 / 1000);
}

TEST(GdsfEvictionPolicyTest, ASpilledBlockCostsItsDiskReadBackNotItsComputation) {
  GdsfEvictionPolicy gdsf(
      GdsfOptions{.disk_read_seconds = 0.001, .disk_read_bytes_per_second = 500e6});
  // Costly to compute but spilled on eviction: reading 1 MiB back costs about 3 ms.
  gdsf.Add(Block(0),
           EvictionCost{.size = kMiB, .compute_seconds = 10.0, .spilled_on_eviction = true});
  gdsf.Add(Block(1), Computed(kMiB, 0.5));  // dropped on eviction: recomputed
  EXPECT_THAT(Order(gdsf), ElementsAre(Block(0), Block(1)));
}

TEST(GdsfEvictionPolicyTest, ABlockWithoutAStatedCostIsWeighedAtTheMedian) {
  GdsfEvictionPolicy gdsf;
  gdsf.Add(Block(0), Computed(kMiB, 0.1));
  gdsf.Add(Block(1), Computed(kMiB, 1.0));
  gdsf.Add(Block(2), Computed(kMiB, 100.0));
  const auto unknown = gdsf.Add(Block(3), EvictionCost{.size = kMiB});
  // Median 1.0: ties with block 1, which is older and goes first.
  EXPECT_DOUBLE_EQ(gdsf.priority(unknown), 1.0 / kMiB);
  EXPECT_THAT(Order(gdsf), ElementsAre(Block(0), Block(1), Block(3), Block(2)));
}

TEST(GdsfEvictionPolicyTest, WithNoStatedCostsTheConfiguredDefaultApplies) {
  GdsfEvictionPolicy gdsf(GdsfOptions{.cost_when_none_stated = 2.0});
  const auto handle = gdsf.Add(Block(0), EvictionCost{.size = 4});
  EXPECT_DOUBLE_EQ(gdsf.priority(handle), 0.5);
}

TEST(GdsfEvictionPolicyTest, AnInvalidStatedCostCountsAsNotStated) {
  GdsfEvictionPolicy gdsf(GdsfOptions{.cost_when_none_stated = 2.0});
  const auto handle = gdsf.Add(Block(0), Computed(4, -3.0));
  EXPECT_DOUBLE_EQ(gdsf.priority(handle), 0.5);
}

TEST(GdsfEvictionPolicyTest, RemovedBlocksLeaveTheOrderAndTheMedian) {
  GdsfEvictionPolicy gdsf;
  const auto a = gdsf.Add(Block(0), Computed(kMiB, 50.0));
  gdsf.Add(Block(1), Computed(kMiB, 1.0));
  gdsf.Remove(a);
  EXPECT_THAT(Order(gdsf), ElementsAre(Block(1)));
  const auto unknown = gdsf.Add(Block(2), EvictionCost{.size = kMiB});
  EXPECT_DOUBLE_EQ(gdsf.priority(unknown), 1.0 / kMiB);  // the median of {1.0} alone
  EXPECT_DOUBLE_EQ(gdsf.clock(), 0.0);                   // a removal does not age
}

// ---- the policy inside the memory store

MemoryBlock CostedBlock(const BlockId& id, uint64_t size, double seconds,
                        StorageLevel level = StorageLevel::kMemoryOnly) {
  static uint64_t generation = 1;
  MemoryBlock block{id, level, {}, generation++};
  block.data.Append(MakeChunk(std::vector<std::byte>(size, std::byte{1})));
  block.compute_cost_us = static_cast<uint64_t>(seconds * 1e6);
  return block;
}

void Store(MemoryStore& store, MemoryBlock block) {
  Result<std::vector<MemoryBlock>> evicted = store.Reserve(block.id, block.data.size);
  ASSERT_TRUE(evicted.ok()) << evicted.status().ToString();
  ASSERT_THAT(*evicted, IsEmpty());
  store.Insert(std::move(block));
}

std::vector<BlockId> Ids(const std::vector<MemoryBlock>& blocks) {
  std::vector<BlockId> ids;
  for (const MemoryBlock& block : blocks) ids.push_back(block.id);
  return ids;
}

TEST(CostAwareMemoryStoreTest, EvictsCheapBlocksBeforeAnExpensiveOlderOne) {
  MemoryStore store(300, std::make_unique<GdsfEvictionPolicy>());
  Store(store, CostedBlock(BlockId::Rdd(1, 0), 100, 5.0));
  Store(store, CostedBlock(BlockId::Rdd(2, 0), 100, 0.1));
  Store(store, CostedBlock(BlockId::Rdd(3, 0), 100, 0.1));
  Result<std::vector<MemoryBlock>> evicted = store.Reserve(BlockId::Rdd(4, 0), 150);
  ASSERT_TRUE(evicted.ok()) << evicted.status().ToString();
  EXPECT_THAT(Ids(*evicted), ElementsAre(BlockId::Rdd(2, 0), BlockId::Rdd(3, 0)));
  EXPECT_TRUE(store.Contains(BlockId::Rdd(1, 0)));
  // The same blocks under LRU: the oldest (the expensive one) goes first.
  MemoryStore lru(300);
  Store(lru, CostedBlock(BlockId::Rdd(1, 0), 100, 5.0));
  Store(lru, CostedBlock(BlockId::Rdd(2, 0), 100, 0.1));
  Store(lru, CostedBlock(BlockId::Rdd(3, 0), 100, 0.1));
  Result<std::vector<MemoryBlock>> lru_evicted = lru.Reserve(BlockId::Rdd(4, 0), 150);
  ASSERT_TRUE(lru_evicted.ok());
  EXPECT_THAT(Ids(*lru_evicted), ElementsAre(BlockId::Rdd(1, 0), BlockId::Rdd(2, 0)));
}

TEST(CostAwareMemoryStoreTest, KeepsTheRuleAgainstEvictingTheInsertedRddAndPins) {
  MemoryStore store(300, std::make_unique<GdsfEvictionPolicy>());
  Store(store, CostedBlock(BlockId::Rdd(7, 0), 100, 0.01));  // cheapest, same RDD
  Store(store, CostedBlock(BlockId::Rdd(2, 0), 100, 0.02));  // next, pinned
  Store(store, CostedBlock(BlockId::Rdd(3, 0), 100, 9.0));   // expensive
  ASSERT_TRUE(store.Pin(BlockId::Rdd(2, 0)).ok());
  Result<std::vector<MemoryBlock>> evicted = store.Reserve(BlockId::Rdd(7, 1), 100);
  ASSERT_TRUE(evicted.ok()) << evicted.status().ToString();
  EXPECT_THAT(Ids(*evicted), ElementsAre(BlockId::Rdd(3, 0)));
  // Nothing left that may go: refused, nothing evicted.
  Result<std::vector<MemoryBlock>> refused = store.Reserve(BlockId::Rdd(7, 2), 100);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kOutOfSpace);
  EXPECT_EQ(store.block_count(), 2u);
}

TEST(CostAwareMemoryStoreTest, SpillsAMemoryAndDiskBlockBeforeDroppingAnExpensiveOne) {
  MemoryStore store(200, std::make_unique<GdsfEvictionPolicy>());
  Store(store, CostedBlock(BlockId::Rdd(1, 0), 100, 1.0));
  Store(store, CostedBlock(BlockId::Rdd(2, 0), 100, 1.0, StorageLevel::kMemoryAndDisk));
  Result<std::vector<MemoryBlock>> evicted = store.Reserve(BlockId::Rdd(3, 0), 100);
  ASSERT_TRUE(evicted.ok());
  EXPECT_THAT(Ids(*evicted), ElementsAre(BlockId::Rdd(2, 0)));
}

TEST(CostAwareMemoryStoreTest, ReadsRaiseABlocksChanceToStay) {
  MemoryStore store(200, std::make_unique<GdsfEvictionPolicy>());
  Store(store, CostedBlock(BlockId::Rdd(1, 0), 100, 1.0));
  Store(store, CostedBlock(BlockId::Rdd(2, 0), 100, 1.5));
  ASSERT_NE(store.Get(BlockId::Rdd(1, 0)), nullptr);  // frequency 2: 2.0 > 1.5
  Result<std::vector<MemoryBlock>> evicted = store.Reserve(BlockId::Rdd(3, 0), 100);
  ASSERT_TRUE(evicted.ok());
  EXPECT_THAT(Ids(*evicted), ElementsAre(BlockId::Rdd(2, 0)));
  EXPECT_THAT(Ids(*evicted), Not(Contains(BlockId::Rdd(1, 0))));
}

}  // namespace
}  // namespace bm
