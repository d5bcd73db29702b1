#include "master/cluster_snapshot.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/core/clock.h"
#include "master/block_index.h"
#include "master/worker_registry.h"

namespace bm {
namespace {

using ::testing::ElementsAre;

BlockChange Stored(const std::string& id, Tier tier, uint64_t size) {
  BlockChange change{BlockId::Parse(id).value()};
  change.level = StorageLevel::kMemoryAndDisk;
  change.tier = tier;
  change.size = size;
  return change;
}

std::vector<std::string> Names(const BlockPage& page) {
  std::vector<std::string> out;
  for (const BlockRow& row : page.rows) out.push_back(row.id.ToString());
  return out;
}

class ClusterSnapshotTest : public ::testing::Test {
 protected:
  ClusterSnapshotTest() : registry_(clock_) {
    registry_.Register("w1", "tcp://127.0.0.1:1", WorkerStats{.memory_capacity = 1000});
    registry_.Register("w2", "tcp://127.0.0.1:2", WorkerStats{.memory_capacity = 1000});
    for (int p = 0; p < 5; ++p) {
      index_.Apply("w1", Stored("rdd_3_" + std::to_string(p), Tier::kMemory, 10));
    }
    index_.Apply("w2", Stored("rdd_3_4", Tier::kDisk, 10));
    index_.Apply("w2", Stored("broadcast_1", Tier::kMemory, 7));
    rdds_[3] = RddDescription{"points", StorageLevel::kMemoryAndDisk, 8};
  }

  MasterView View() {
    return MasterView{.index = index_,
                      .registry = registry_,
                      .rdds = rdds_,
                      .counters = counters_,
                      .under_replicated = 0,
                      .copies_in_flight = 0,
                      .leases_held = 0,
                      .journaled = false,
                      .now = clock_.Now()};
  }

  FakeClock clock_;
  WorkerRegistry registry_;
  BlockIndex index_;
  std::map<uint64_t, RddDescription> rdds_;
  MasterCounters counters_;
};

TEST_F(ClusterSnapshotTest, SummarisesRddsWithTheirRegisteredNameAndTotals) {
  ClusterSnapshot snapshot = BuildClusterSnapshot(View());
  ASSERT_EQ(snapshot.rdds.size(), 1u);
  const RddStatus& rdd = snapshot.rdds[0];
  EXPECT_EQ(rdd.name, "points");
  EXPECT_EQ(rdd.total_partitions, 8u);
  EXPECT_EQ(rdd.cached_partitions, 5u);
  EXPECT_EQ(rdd.memory_bytes, 50u);
  EXPECT_EQ(rdd.disk_bytes, 10u);
  EXPECT_THAT(rdd.workers, ElementsAre("w1", "w2"));
  EXPECT_EQ(snapshot.block_count, 6u);
  ASSERT_EQ(snapshot.workers.size(), 2u);
  EXPECT_EQ(snapshot.workers[1].locations, 2u);
}

TEST_F(ClusterSnapshotTest, RddPagesFollowTheCursorInPartitionOrder) {
  BlockPage first = QueryBlockPage(View(), 3, std::nullopt, 2);
  EXPECT_THAT(Names(first), ElementsAre("rdd_3_0", "rdd_3_1"));
  ASSERT_TRUE(first.next_cursor);
  BlockPage second = QueryBlockPage(View(), 3, first.next_cursor, 2);
  EXPECT_THAT(Names(second), ElementsAre("rdd_3_2", "rdd_3_3"));
  BlockPage last = QueryBlockPage(View(), 3, second.next_cursor, 2);
  EXPECT_THAT(Names(last), ElementsAre("rdd_3_4"));
  EXPECT_FALSE(last.next_cursor);
  ASSERT_EQ(last.rows[0].copies.size(), 2u);
  EXPECT_EQ(last.rows[0].copies[0].address, "tcp://127.0.0.1:1");
}

TEST_F(ClusterSnapshotTest, WholeIndexPagesVisitEveryBlockOnce) {
  std::vector<std::string> seen;
  std::optional<BlockId> cursor;
  int pages = 0;
  do {
    BlockPage page = QueryBlockPage(View(), std::nullopt, cursor, 4);
    for (const std::string& name : Names(page)) seen.push_back(name);
    cursor = page.next_cursor;
    ASSERT_LT(++pages, 10);
  } while (cursor);
  EXPECT_THAT(seen,
              ElementsAre("rdd_3_0", "rdd_3_1", "rdd_3_2", "rdd_3_3", "rdd_3_4", "broadcast_1"));
}

TEST_F(ClusterSnapshotTest, UnregisteredRddsAndOtherBlocksPageInIdOrderToo) {
  index_.Apply("w1", Stored("rdd_1_10", Tier::kMemory, 1));
  index_.Apply("w1", Stored("rdd_1_2", Tier::kMemory, 1));
  index_.Apply("w1", Stored("shuffle_0_1_2", Tier::kDisk, 1));
  for (size_t limit : {1, 2, 3, 100}) {
    std::vector<std::string> seen;
    std::optional<BlockId> cursor;
    int pages = 0;
    do {
      BlockPage page = QueryBlockPage(View(), std::nullopt, cursor, limit);
      EXPECT_LE(page.rows.size(), limit);
      for (const std::string& name : Names(page)) seen.push_back(name);
      cursor = page.next_cursor;
      ASSERT_LT(++pages, 20);
    } while (cursor);
    EXPECT_THAT(seen, ElementsAre("rdd_1_2", "rdd_1_10", "rdd_3_0", "rdd_3_1", "rdd_3_2", "rdd_3_3",
                                  "rdd_3_4", "broadcast_1", "shuffle_0_1_2"))
        << "limit " << limit;
  }
  BlockPage unregistered = QueryBlockPage(View(), 1, BlockId::Rdd(1, 2), 10);
  EXPECT_THAT(Names(unregistered), ElementsAre("rdd_1_10"));
  EXPECT_FALSE(unregistered.next_cursor);
}

TEST_F(ClusterSnapshotTest, ASparseRegisteredRddPagesWithoutScanningEverything) {
  // 3 of a million partitions cached, far apart: a page looks up a bounded number of
  // partitions and says where to go on.
  rdds_[5] = RddDescription{"sparse", StorageLevel::kMemoryOnly, 1000000};
  for (uint64_t p : {0, 500000, 999999}) {
    index_.Apply("w1", Stored("rdd_5_" + std::to_string(p), Tier::kMemory, 1));
  }
  std::vector<std::string> seen;
  std::optional<BlockId> cursor;
  int pages = 0;
  do {
    BlockPage page = QueryBlockPage(View(), 5, cursor, 10);
    for (const std::string& name : Names(page)) seen.push_back(name);
    cursor = page.next_cursor;
    ASSERT_LT(++pages, 20);
  } while (cursor);
  EXPECT_THAT(seen, ElementsAre("rdd_5_0", "rdd_5_500000", "rdd_5_999999"));
  EXPECT_GT(pages, 1);
}

TEST_F(ClusterSnapshotTest, DistributionSumsAnRddsBytesPerWorker) {
  std::vector<RddDistribution> spread = QueryRddDistribution(View(), 3);
  ASSERT_EQ(spread.size(), 2u);
  EXPECT_EQ(spread[0].worker_id, "w1");
  EXPECT_EQ(spread[0].memory_bytes, 50u);
  EXPECT_EQ(spread[0].blocks, 5u);
  EXPECT_EQ(spread[0].memory_remaining, 1000u);
  EXPECT_EQ(spread[1].disk_bytes, 10u);
}

}  // namespace
}  // namespace bm
