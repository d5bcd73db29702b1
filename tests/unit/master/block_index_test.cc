#include "master/block_index.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace bm {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

BlockId Id(const std::string& text) { return BlockId::Parse(text).value(); }

BlockChange Stored(const std::string& id, Tier tier, uint64_t size,
                   StorageLevel level = StorageLevel::kMemoryAndDisk) {
  BlockChange change{Id(id)};
  change.level = level;
  change.tier = tier;
  change.size = size;
  return change;
}

BlockChange Removed(const std::string& id) {
  BlockChange change{Id(id)};
  change.removed = true;
  return change;
}

std::vector<std::string> Names(const std::vector<BlockInfo>& blocks) {
  std::vector<std::string> out;
  for (const BlockInfo& block : blocks) out.push_back(block.id.ToString());
  return out;
}

TEST(BlockIndexTest, StoredBlockIsFoundWithLevelAndLocation) {
  BlockIndex index;
  index.Apply("w1", Stored("rdd_1_2", Tier::kDisk, 100, StorageLevel::kDiskOnly));
  std::optional<BlockInfo> info = index.Find(Id("rdd_1_2"));
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->level, StorageLevel::kDiskOnly);
  EXPECT_THAT(info->locations, ElementsAre(IndexedLocation{"w1", Tier::kDisk, 100}));
  EXPECT_EQ(index.block_count(), 1u);
  EXPECT_FALSE(index.Find(Id("rdd_1_3")).has_value());
}

TEST(BlockIndexTest, LocationsListMemoryBeforeDiskThenByWorker) {
  BlockIndex index;
  index.Apply("w3", Stored("broadcast_7", Tier::kDisk, 10));
  index.Apply("w2", Stored("broadcast_7", Tier::kMemory, 10));
  index.Apply("w1", Stored("broadcast_7", Tier::kDisk, 10));
  index.Apply("w4", Stored("broadcast_7", Tier::kMemory, 10));
  EXPECT_THAT(
      index.Find(Id("broadcast_7"))->locations,
      ElementsAre(IndexedLocation{"w2", Tier::kMemory, 10},
                  IndexedLocation{"w4", Tier::kMemory, 10}, IndexedLocation{"w1", Tier::kDisk, 10},
                  IndexedLocation{"w3", Tier::kDisk, 10}));
  EXPECT_EQ(index.block_count(), 1u);
}

TEST(BlockIndexTest, FindLocationsGivesFindsOrderWithoutCopies) {
  BlockIndex index;
  index.Apply("w3", Stored("broadcast_7", Tier::kDisk, 10));
  index.Apply("w2", Stored("broadcast_7", Tier::kMemory, 11, StorageLevel::kDiskOnly));
  index.Apply("w1", Stored("broadcast_7", Tier::kDisk, 12, StorageLevel::kDiskOnly));
  std::vector<LocationRef> refs(5, LocationRef{nullptr, Tier::kDisk, 0});
  ASSERT_EQ(index.FindLocations(Id("broadcast_7"), &refs), StorageLevel::kDiskOnly);
  ASSERT_EQ(refs.size(), 3u);
  EXPECT_EQ(*refs[0].worker_id, "w2");
  EXPECT_EQ(refs[0].tier, Tier::kMemory);
  EXPECT_EQ(refs[0].size, 11u);
  EXPECT_EQ(*refs[1].worker_id, "w1");
  EXPECT_EQ(*refs[2].worker_id, "w3");
  EXPECT_EQ(index.FindLocations(Id("broadcast_8"), &refs), std::nullopt);
  EXPECT_THAT(refs, IsEmpty());
}

TEST(BlockIndexTest, ReportFromSameWorkerReplacesItsLocation) {
  BlockIndex index;
  index.Apply("w1", Stored("rdd_1_0", Tier::kMemory, 100, StorageLevel::kMemoryAndDisk));
  index.Apply("w1", Stored("rdd_1_0", Tier::kDisk, 120, StorageLevel::kMemoryAndDisk));
  EXPECT_THAT(index.Find(Id("rdd_1_0"))->locations,
              ElementsAre(IndexedLocation{"w1", Tier::kDisk, 120}));
  EXPECT_EQ(index.LocationCount("w1"), 1u);
}

TEST(BlockIndexTest, LastRemovedLocationErasesTheBlock) {
  BlockIndex index;
  index.Apply("w1", Stored("shuffle_1_2_3", Tier::kMemory, 5));
  index.Apply("w2", Stored("shuffle_1_2_3", Tier::kMemory, 5));
  index.Apply("w1", Removed("shuffle_1_2_3"));
  EXPECT_THAT(index.Find(Id("shuffle_1_2_3"))->locations,
              ElementsAre(IndexedLocation{"w2", Tier::kMemory, 5}));
  index.Apply("w2", Removed("shuffle_1_2_3"));
  EXPECT_FALSE(index.Find(Id("shuffle_1_2_3")).has_value());
  EXPECT_EQ(index.block_count(), 0u);
  EXPECT_THAT(index.List(), IsEmpty());
}

TEST(BlockIndexTest, RemovalOfUnheldBlockIsIgnored) {
  BlockIndex index;
  index.Apply("w1", Stored("rdd_1_0", Tier::kMemory, 5));
  EXPECT_TRUE(index.Apply("w2", Removed("rdd_1_0")).removal_ignored);
  EXPECT_TRUE(index.Apply("w1", Removed("rdd_9_9")).removal_ignored);
  EXPECT_EQ(index.block_count(), 1u);
  EXPECT_EQ(index.Find(Id("rdd_1_0"))->locations.size(), 1u);
}

TEST(BlockIndexTest, RemoveWorkerDropsOnlyItsLocations) {
  BlockIndex index;
  index.Apply("w1", Stored("rdd_1_0", Tier::kMemory, 1));
  index.Apply("w1", Stored("rdd_1_1", Tier::kMemory, 1));
  index.Apply("w2", Stored("rdd_1_1", Tier::kDisk, 1));
  index.Apply("w1", Stored("broadcast_1", Tier::kMemory, 1));
  index.Apply("w2", Stored("broadcast_2", Tier::kMemory, 1));

  EXPECT_EQ(index.RemoveWorker("w1"), 3u);
  EXPECT_EQ(index.RemoveWorker("w1"), 0u);
  EXPECT_EQ(index.RemoveWorker("never-seen"), 0u);
  EXPECT_THAT(Names(index.List()), ElementsAre("rdd_1_1", "broadcast_2"));
  EXPECT_THAT(index.Find(Id("rdd_1_1"))->locations,
              ElementsAre(IndexedLocation{"w2", Tier::kDisk, 1}));
  EXPECT_EQ(index.LocationCount("w1"), 0u);
  EXPECT_EQ(index.LocationCount("w2"), 2u);
}

TEST(BlockIndexTest, WorkerSlotIsReusedAfterItsLastLocationGoes) {
  BlockIndex index;
  index.Apply("w1", Stored("rdd_1_0", Tier::kMemory, 1));
  index.Apply("w1", Removed("rdd_1_0"));
  index.Apply("w2", Stored("rdd_1_0", Tier::kMemory, 2));
  index.Apply("w1", Stored("rdd_1_1", Tier::kDisk, 3));
  EXPECT_THAT(index.Find(Id("rdd_1_0"))->locations,
              ElementsAre(IndexedLocation{"w2", Tier::kMemory, 2}));
  EXPECT_THAT(index.Find(Id("rdd_1_1"))->locations,
              ElementsAre(IndexedLocation{"w1", Tier::kDisk, 3}));
}

TEST(BlockIndexTest, ListsAreSortedByIdNumerically) {
  BlockIndex index;
  for (const char* id : {"rdd_1_10", "shuffle_0_1_2", "rdd_1_2", "broadcast_3", "rdd_2_0",
                         "rdd_10_0", "broadcast_20"}) {
    index.Apply("w1", Stored(id, Tier::kMemory, 1));
  }
  EXPECT_THAT(Names(index.List()), ElementsAre("rdd_1_2", "rdd_1_10", "rdd_2_0", "rdd_10_0",
                                               "broadcast_3", "broadcast_20", "shuffle_0_1_2"));
  EXPECT_THAT(Names(index.ListRdd(1)), ElementsAre("rdd_1_2", "rdd_1_10"));
  EXPECT_THAT(index.ListRdd(3), IsEmpty());
  EXPECT_THAT(index.RddBlockIds(1), ElementsAre(Id("rdd_1_2"), Id("rdd_1_10")));
}

TEST(BlockIndexTest, RddSummariesSumCopiesPerTierAndListWorkers) {
  BlockIndex index;
  index.Apply("w2", Stored("rdd_5_0", Tier::kMemory, 100));
  index.Apply("w1", Stored("rdd_5_0", Tier::kDisk, 100));
  index.Apply("w1", Stored("rdd_5_1", Tier::kMemory, 50));
  index.Apply("w3", Stored("rdd_3_0", Tier::kDisk, 7, StorageLevel::kDiskOnly));
  index.Apply("w3", Stored("broadcast_1", Tier::kMemory, 1000));

  std::vector<RddSummary> rdds = index.RddSummaries();
  ASSERT_EQ(rdds.size(), 2u);
  EXPECT_EQ(rdds[0], (RddSummary{3, 1, StorageLevel::kDiskOnly, 0, 7, {"w3"}}));
  EXPECT_EQ(rdds[1], (RddSummary{5, 2, StorageLevel::kMemoryAndDisk, 150, 100, {"w1", "w2"}}));
}

TEST(BlockIndexTest, HoldersGroupsRequestedBlocksByWorker) {
  BlockIndex index;
  index.Apply("w1", Stored("rdd_1_0", Tier::kMemory, 1));
  index.Apply("w1", Stored("rdd_1_1", Tier::kMemory, 1));
  index.Apply("w2", Stored("rdd_1_1", Tier::kMemory, 1));
  index.Apply("w3", Stored("rdd_2_0", Tier::kMemory, 1));
  std::vector<BlockId> ids = {Id("rdd_1_1"), Id("rdd_1_0"), Id("rdd_7_7")};
  std::map<std::string, std::vector<BlockId>> holders = index.Holders(ids);
  ASSERT_EQ(holders.size(), 2u);
  EXPECT_THAT(holders["w1"], ElementsAre(Id("rdd_1_1"), Id("rdd_1_0")));
  EXPECT_THAT(holders["w2"], ElementsAre(Id("rdd_1_1")));
}

// Random stores and removals across workers, checked against a plain map model: exercises the
// compact entry (inline first location, heap extras) through growth, removal from any position
// and worker drops.
TEST(BlockIndexTest, MatchesASimpleModelUnderRandomChanges) {
  using Model = std::map<BlockId, std::map<std::string, IndexedLocation>>;
  BlockIndex index;
  Model model;
  std::mt19937 rng(42);
  const std::vector<std::string> workers = {"w0", "w1", "w2", "w3", "w4", "w5"};
  auto pick_id = [&] {
    uint32_t n = rng() % 12;
    return n < 8 ? BlockId::Rdd(n % 3, n) : BlockId::Broadcast(n);
  };
  for (int step = 0; step < 20000; ++step) {
    const std::string& worker = workers[rng() % workers.size()];
    uint32_t action = rng() % 100;
    if (action < 55) {
      BlockChange change{pick_id()};
      change.tier = rng() % 2 ? Tier::kMemory : Tier::kDisk;
      change.size = rng() % 1000;
      index.Apply(worker, change);
      model[change.id][worker] = IndexedLocation{worker, change.tier, change.size};
    } else if (action < 98) {
      BlockChange change{pick_id()};
      change.removed = true;
      index.Apply(worker, change);
      auto it = model.find(change.id);
      if (it != model.end()) {
        it->second.erase(worker);
        if (it->second.empty()) model.erase(it);
      }
    } else {
      size_t expected = 0;
      for (auto it = model.begin(); it != model.end();) {
        expected += it->second.erase(worker);
        it = it->second.empty() ? model.erase(it) : std::next(it);
      }
      ASSERT_EQ(index.RemoveWorker(worker), expected);
    }
    if (step % 100 != 0) continue;
    ASSERT_EQ(index.block_count(), model.size());
    // The running per-RDD totals agree with the model's copies.
    for (uint64_t rdd = 0; rdd < 3; ++rdd) {
      TierBytes expected;
      for (const auto& [id, locations] : model) {
        if (id.rdd_id() != rdd) continue;
        for (const auto& [w, location] : locations) expected.on(location.tier) += location.size;
      }
      ASSERT_EQ(index.RddBytes(rdd), expected) << "rdd " << rdd << " at step " << step;
    }
    std::vector<BlockInfo> listed = index.List();
    ASSERT_EQ(listed.size(), model.size());
    auto expected = model.begin();
    for (const BlockInfo& info : listed) {
      ASSERT_EQ(info.id, expected->first);
      std::map<std::string, IndexedLocation> got;
      for (const IndexedLocation& location : info.locations) got[location.worker_id] = location;
      ASSERT_EQ(got.size(), info.locations.size()) << "a worker listed twice";
      ASSERT_EQ(got, expected->second) << info.id.ToString();
      // The lookups agree with the listing, location for location and in the same order.
      std::optional<BlockInfo> found = index.Find(info.id);
      ASSERT_TRUE(found.has_value());
      ASSERT_EQ(found->locations, info.locations);
      std::vector<LocationRef> refs;
      ASSERT_EQ(index.FindLocations(info.id, &refs), info.level);
      ASSERT_EQ(refs.size(), info.locations.size());
      for (size_t i = 0; i < refs.size(); ++i) {
        EXPECT_EQ((IndexedLocation{*refs[i].worker_id, refs[i].tier, refs[i].size}),
                  info.locations[i]);
      }
      ++expected;
    }
  }
}

// The running totals of RddBytes against a sum over the index's own listing, under every path
// that sets or drops a location: fresh puts replacing other copies, stale copies, copies with
// another digest, removals of one version, retirements and whole workers dropped.
TEST(BlockIndexTest, RddBytesMatchTheListingUnderVersionsDigestsAndDrops) {
  BlockIndex index;
  std::mt19937 rng(7);
  const std::vector<std::string> workers = {"w0", "w1", "w2", "w3"};
  auto listed_bytes = [&](uint64_t rdd) {
    TierBytes sum;
    for (const BlockInfo& block : index.ListRdd(rdd)) {
      for (const IndexedLocation& location : block.locations) {
        sum.on(location.tier) += location.size;
      }
    }
    return sum;
  };
  for (int step = 0; step < 20000; ++step) {
    const std::string& worker = workers[rng() % workers.size()];
    const BlockId id = BlockId::Rdd(rng() % 3, rng() % 6);
    const uint32_t action = rng() % 100;
    if (action < 60) {
      BlockChange change{id};
      change.tier = rng() % 2 ? Tier::kMemory : Tier::kDisk;
      change.size = rng() % 1000;
      change.version = 1 + rng() % 3;
      change.fresh = rng() % 3 == 0;
      change.digest = rng() % 3 == 0 ? 0 : 100 + change.version * 10 + rng() % 2;
      index.Apply(worker, change);
    } else if (action < 94) {
      BlockChange change{id};
      change.removed = true;
      change.version = rng() % 4;  // 0: any version
      index.Apply(worker, change);
    } else if (action < 97) {
      const std::vector<BlockId> ids = {id};
      index.RetireVersions(ids);
    } else {
      std::vector<GoneBlock> gone;
      index.RemoveWorker(worker, &gone);
    }
    for (uint64_t rdd = 0; rdd < 3; ++rdd) {
      ASSERT_EQ(index.RddBytes(rdd), listed_bytes(rdd)) << "rdd " << rdd << " at step " << step;
    }
  }
  EXPECT_EQ(index.RddBytes(99), TierBytes{}) << "an RDD never seen";
}

// ---- one version per block id ----

BlockChange Version(const std::string& id, uint64_t version, bool fresh,
                    Tier tier = Tier::kMemory) {
  BlockChange change = Stored(id, tier, 10);
  change.version = version;
  change.fresh = fresh;
  return change;
}

std::vector<std::string> Holders(const BlockIndex& index, const std::string& id) {
  std::vector<std::string> out;
  if (std::optional<BlockInfo> info = index.Find(Id(id))) {
    for (const IndexedLocation& location : info->locations) out.push_back(location.worker_id);
  }
  return out;
}

TEST(BlockIndexVersionsTest, CopiesOfOnePutShareTheBlock) {
  BlockIndex index;
  EXPECT_TRUE(index.Apply("w1", Version("rdd_1_0", 7, true)).recorded);
  ApplyResult second = index.Apply("w2", Version("rdd_1_0", 7, true));
  EXPECT_TRUE(second.recorded);
  EXPECT_THAT(second.replaced, IsEmpty());
  EXPECT_THAT(Holders(index, "rdd_1_0"), ElementsAre("w1", "w2"));
  EXPECT_EQ(index.VersionOf(Id("rdd_1_0")), 7u);
}

TEST(BlockIndexVersionsTest, FreshPutElsewhereReplacesEveryCopyOfTheOldVersion) {
  BlockIndex index;
  index.Apply("w1", Version("rdd_1_0", 7, true));
  index.Apply("w2", Version("rdd_1_0", 7, true));
  ApplyResult put = index.Apply("w3", Version("rdd_1_0", 8, true));
  EXPECT_TRUE(put.recorded);
  ASSERT_EQ(put.replaced.size(), 2u);
  std::set<std::string> replaced;
  for (const RetiredCopy& copy : put.replaced) {
    EXPECT_EQ(copy.version, 7u);
    replaced.insert(copy.worker_id);
  }
  EXPECT_THAT(replaced, ElementsAre("w1", "w2"));
  EXPECT_THAT(Holders(index, "rdd_1_0"), ElementsAre("w3"));
  EXPECT_EQ(index.LocationCount("w1"), 0u);
}

TEST(BlockIndexVersionsTest, FreshPutOnTheSameWorkerReplacesInPlace) {
  BlockIndex index;
  index.Apply("w1", Version("rdd_1_0", 7, true));
  ApplyResult put = index.Apply("w1", Version("rdd_1_0", 8, true, Tier::kDisk));
  EXPECT_TRUE(put.recorded);
  EXPECT_THAT(put.replaced, IsEmpty());
  EXPECT_THAT(Holders(index, "rdd_1_0"), ElementsAre("w1"));
  EXPECT_EQ(index.VersionOf(Id("rdd_1_0")), 8u);
}

TEST(BlockIndexVersionsTest, LateCopyOfAReplacedPutIsStale) {
  BlockIndex index;
  index.Apply("w1", Version("rdd_1_0", 7, true));
  index.Apply("w3", Version("rdd_1_0", 8, true));
  // The second copy of put 7 reports after put 8 replaced it: refused, not a replacement.
  ApplyResult late = index.Apply("w2", Version("rdd_1_0", 7, true));
  EXPECT_FALSE(late.recorded);
  EXPECT_THAT(Holders(index, "rdd_1_0"), ElementsAre("w3"));
  EXPECT_EQ(index.VersionOf(Id("rdd_1_0")), 8u);
}

TEST(BlockIndexVersionsTest, CopyOfAnotherVersionThatIsNotAPutIsStale) {
  BlockIndex index;
  index.Apply("w1", Version("rdd_1_0", 8, true));
  EXPECT_FALSE(index.Apply("w2", Version("rdd_1_0", 5, false)).recorded);
  EXPECT_TRUE(index.Apply("w2", Version("rdd_1_0", 8, false)).recorded);
  EXPECT_THAT(Holders(index, "rdd_1_0"), ElementsAre("w1", "w2"));
}

TEST(BlockIndexVersionsTest, LostBlockComesBackOnlyInItsLastVersion) {
  BlockIndex index;
  index.Apply("w1", Version("rdd_1_0", 7, true));
  index.Apply("w2", Version("rdd_1_0", 8, true));  // replaces 7 on w1
  index.RemoveWorker("w2");                        // the last copy of 8 is lost
  EXPECT_FALSE(index.Find(Id("rdd_1_0")).has_value());
  EXPECT_FALSE(index.Apply("w1", Version("rdd_1_0", 7, false)).recorded);
  EXPECT_TRUE(index.Apply("w2", Version("rdd_1_0", 8, false)).recorded);
}

TEST(BlockIndexVersionsTest, TierMoveKeepsTheVersion) {
  BlockIndex index;
  index.Apply("w1", Version("rdd_1_0", 7, true));
  BlockChange evicted = Removed("rdd_1_0");
  evicted.version = 7;
  index.Apply("w1", evicted);
  EXPECT_TRUE(index.Apply("w1", Version("rdd_1_0", 7, false, Tier::kDisk)).recorded);
  EXPECT_THAT(index.Find(Id("rdd_1_0"))->locations,
              ElementsAre(IndexedLocation{"w1", Tier::kDisk, 10}));
}

TEST(BlockIndexVersionsTest, RemovedVersionIsNotTakenBackButANewPutIs) {
  BlockIndex index;
  index.Apply("w1", Version("rdd_1_0", 7, true));
  index.Apply("w2", Version("rdd_1_0", 7, true));
  const std::vector<BlockId> ids = {Id("rdd_1_0")};
  index.RetireVersions(ids);
  index.Apply("w1", Removed("rdd_1_0"));
  index.RemoveWorker("w2");  // away while the removal went out
  EXPECT_FALSE(index.Apply("w2", Version("rdd_1_0", 7, false)).recorded);
  EXPECT_TRUE(index.Apply("w2", Version("rdd_1_0", 9, true)).recorded);
}

TEST(BlockIndexVersionsTest, RemovalOfAnOlderVersionKeepsTheCurrentCopy) {
  BlockIndex index;
  index.Apply("w1", Version("rdd_1_0", 8, true));
  BlockChange old = Removed("rdd_1_0");
  old.version = 7;
  // Said, so the master journals nothing for it (a journaled removal deletes the location).
  EXPECT_TRUE(index.Apply("w1", old).removal_ignored);
  EXPECT_THAT(Holders(index, "rdd_1_0"), ElementsAre("w1"));
  BlockChange current = Removed("rdd_1_0");
  current.version = 8;
  EXPECT_FALSE(index.Apply("w1", current).removal_ignored);
  EXPECT_THAT(Holders(index, "rdd_1_0"), ElementsAre());
}

TEST(VersionHistoryTest, ForgetsTheLongestRememberedIdsPastItsCapacity) {
  VersionHistory history(2);
  history.Retire(Id("rdd_1_0"), 1);
  history.Retire(Id("rdd_1_1"), 2);
  history.Retire(Id("rdd_1_2"), 3);
  EXPECT_EQ(history.size(), 2u);
  EXPECT_FALSE(history.IsStale(Id("rdd_1_0"), 1, false, true));
  EXPECT_TRUE(history.IsStale(Id("rdd_1_1"), 2, true, true));
  EXPECT_TRUE(history.IsStale(Id("rdd_1_2"), 3, false, false));
}

}  // namespace
}  // namespace bm

namespace bm {
namespace {

BlockChange Digested(const std::string& id, uint64_t version, bool fresh, uint64_t digest,
                     Tier tier = Tier::kMemory) {
  BlockChange change = Stored(id, tier, 10);
  change.version = version;
  change.fresh = fresh;
  change.digest = digest;
  return change;
}

uint64_t DigestOfBlock(const BlockIndex& index, const std::string& id) {
  std::optional<BlockInfo> info = index.Find(Id(id));
  return info ? info->digest : 0;
}

TEST(BlockIndexDigestTest, ThePutsCommitSetsTheDigestAndCopiesKeepIt) {
  BlockIndex index;
  index.Apply("w1", Digested("rdd_1_0", 7, true, 0xabc));
  EXPECT_EQ(DigestOfBlock(index, "rdd_1_0"), 0xabcu);
  EXPECT_TRUE(index.Apply("w2", Digested("rdd_1_0", 7, false, 0xabc)).recorded);
  // A copy from a worker that knows no digest (stored before digests) is still listed.
  EXPECT_TRUE(index.Apply("w3", Digested("rdd_1_0", 7, false, 0)).recorded);
  EXPECT_EQ(DigestOfBlock(index, "rdd_1_0"), 0xabcu);
  EXPECT_THAT(Holders(index, "rdd_1_0"), ElementsAre("w1", "w2", "w3"));
  std::vector<LocationRef> refs;
  uint64_t digest = 0;
  ASSERT_TRUE(index.FindLocations(Id("rdd_1_0"), &refs, &digest).has_value());
  EXPECT_EQ(digest, 0xabcu);
  EXPECT_FALSE(index.FindLocations(Id("rdd_1_1"), &refs, &digest).has_value());
  EXPECT_EQ(digest, 0u);
}

TEST(BlockIndexDigestTest, AVersionFirstReportedWithoutOneLearnsItFromACopy) {
  BlockIndex index;
  index.Apply("w1", Digested("rdd_1_0", 7, true, 0));
  EXPECT_EQ(DigestOfBlock(index, "rdd_1_0"), 0u);
  EXPECT_TRUE(index.Apply("w2", Digested("rdd_1_0", 7, false, 0x55)).recorded);
  EXPECT_EQ(DigestOfBlock(index, "rdd_1_0"), 0x55u);
}

TEST(BlockIndexDigestTest, ANewVersionReplacesTheDigestAndTheLastRemovalClearsIt) {
  BlockIndex index;
  index.Apply("w1", Digested("rdd_1_0", 7, true, 0xabc));
  index.Apply("w2", Digested("rdd_1_0", 8, true, 0xdef));
  EXPECT_EQ(DigestOfBlock(index, "rdd_1_0"), 0xdefu);
  // A new version without a digest (an old worker) clears it rather than keeping the old one.
  index.Apply("w2", Digested("rdd_1_0", 9, true, 0));
  EXPECT_EQ(DigestOfBlock(index, "rdd_1_0"), 0u);
  index.Apply("w2", Removed("rdd_1_0"));
  EXPECT_FALSE(index.Find(Id("rdd_1_0")).has_value());
  index.Apply("w3", Digested("rdd_1_0", 10, true, 0x123));
  EXPECT_EQ(DigestOfBlock(index, "rdd_1_0"), 0x123u);
}

TEST(BlockIndexDigestTest, ACopyWithAnotherDigestIsNotListed) {
  BlockIndex index;
  index.Apply("w1", Digested("rdd_1_0", 7, true, 0xabc));
  ApplyResult bad = index.Apply("w2", Digested("rdd_1_0", 7, false, 0xbad));
  EXPECT_FALSE(bad.recorded);
  EXPECT_TRUE(bad.digest_mismatch);
  EXPECT_EQ(bad.expected_digest, 0xabcu);
  EXPECT_THAT(bad.replaced, IsEmpty());
  EXPECT_THAT(Holders(index, "rdd_1_0"), ElementsAre("w1"));
  EXPECT_EQ(index.LocationCount("w2"), 0u);
  EXPECT_EQ(DigestOfBlock(index, "rdd_1_0"), 0xabcu);
  // A stale copy (another version) is refused as stale, not as a mismatch.
  ApplyResult stale = index.Apply("w2", Digested("rdd_1_0", 6, false, 0xbad));
  EXPECT_FALSE(stale.recorded);
  EXPECT_FALSE(stale.digest_mismatch);
}

TEST(BlockIndexDigestTest, ACopyListedBeforeIsDroppedWhenReportedWithAnotherDigest) {
  BlockIndex index;
  index.Apply("w1", Digested("rdd_1_0", 7, true, 0xabc));
  index.Apply("w2", Digested("rdd_1_0", 7, false, 0xabc, Tier::kMemory));
  // w2 moved its copy to disk and its digest metadata went wrong meanwhile.
  ApplyResult bad = index.Apply("w2", Digested("rdd_1_0", 7, false, 0xbad, Tier::kDisk));
  EXPECT_TRUE(bad.digest_mismatch);
  EXPECT_THAT(Holders(index, "rdd_1_0"), ElementsAre("w1"));
  EXPECT_EQ(index.LocationCount("w2"), 0u);
}

}  // namespace
}  // namespace bm
