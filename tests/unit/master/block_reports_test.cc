#include "master/block_reports.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace bm {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::IsEmpty;

const BlockId kA = BlockId::Rdd(1, 0);
const BlockId kB = BlockId::Rdd(1, 1);

BlockChange Copy(const BlockId& id, uint64_t version, bool fresh = false, uint64_t digest = 0) {
  BlockChange change{id, false, StorageLevel::kMemoryOnly, Tier::kMemory, 100};
  change.version = version;
  change.fresh = fresh;
  change.digest = digest;
  return change;
}

BlockChange Removal(const BlockId& id, uint64_t version) {
  BlockChange change = Copy(id, version);
  change.removed = true;
  return change;
}

// Matches a change or a copy of block `id`, or a copy on worker `worker_id`.
auto Of(const BlockId& id) { return Field(&BlockChange::id, id); }
auto On(const std::string& worker_id) { return Field(&RetiredCopy::worker_id, worker_id); }

const LeaseHeld kNoLeaseHeld = [](const BlockId&, uint64_t) { return false; };

TEST(BlockReportsTest, RegistrationRefusesVersionsReplacedWhileTheWorkerWasAway) {
  BlockIndex index;
  index.Apply("w1", Copy(kA, 8, /*fresh=*/true));
  AppliedBlocks applied = ApplyRegistration(index, "w2", {Copy(kA, 7), Copy(kB, 3)});
  EXPECT_THAT(applied.recorded, ElementsAre(Of(kB)));
  ASSERT_EQ(applied.stale.size(), 1u);
  EXPECT_EQ(applied.stale[0].worker_id, "w2");
  EXPECT_EQ(applied.stale[0].version, 7u);
  EXPECT_THAT(applied.replaced, IsEmpty());
}

TEST(BlockReportsTest, RegistrationsFreshPutReplacesOtherWorkersCopies) {
  BlockIndex index;
  index.Apply("w1", Copy(kA, 7, /*fresh=*/true));
  AppliedBlocks applied = ApplyRegistration(index, "w2", {Copy(kA, 8, /*fresh=*/true)});
  EXPECT_THAT(applied.recorded, ElementsAre(Of(kA)));
  EXPECT_THAT(applied.replaced, ElementsAre(On("w1")));
  EXPECT_THAT(applied.stale, IsEmpty());
}

TEST(BlockReportsTest, CopyWithAnotherDigestIsToBeVerifiedNotRemoved) {
  BlockIndex index;
  index.Apply("w1", Copy(kA, 7, /*fresh=*/true, /*digest=*/0xabc));
  AppliedBlocks applied = ApplyReport(index, "w2", {Copy(kA, 7, false, 0xbad)}, kNoLeaseHeld);
  ASSERT_EQ(applied.mismatched.size(), 1u);
  EXPECT_EQ(applied.mismatched[0].expected_digest, 0xabcu);
  EXPECT_EQ(applied.mismatched[0].change.digest, 0xbadu);
  EXPECT_THAT(applied.recorded, IsEmpty());
  EXPECT_THAT(applied.stale, IsEmpty());
}

TEST(BlockReportsTest, FreshPutUnderALeaseNoLongerHeldIsRefusedAndRemoved) {
  BlockIndex index;
  BlockChange put = Copy(kA, 7, /*fresh=*/true);
  put.lease = 99;
  AppliedBlocks applied = ApplyReport(index, "w1", {put}, kNoLeaseHeld);
  EXPECT_THAT(applied.refused, ElementsAre(Of(kA)));
  EXPECT_THAT(applied.stale, ElementsAre(On("w1")));
  EXPECT_THAT(applied.recorded, IsEmpty());
  EXPECT_FALSE(index.Find(kA).has_value());
}

TEST(BlockReportsTest, FreshPutUnderAHeldLeaseOrOfTheCurrentVersionIsRecorded) {
  BlockIndex index;
  BlockChange put = Copy(kA, 7, /*fresh=*/true);
  put.lease = 99;
  const LeaseHeld held = [](const BlockId& block, uint64_t lease) {
    return block == kA && lease == 99;
  };
  EXPECT_THAT(ApplyReport(index, "w1", {put}, held).recorded, ElementsAre(Of(kA)));
  // Another copy of the same put, after its lease ended with the first copy.
  EXPECT_THAT(ApplyReport(index, "w2", {put}, kNoLeaseHeld).recorded, ElementsAre(Of(kA)));
}

TEST(BlockReportsTest, RemovalOfAReplacedVersionIsRecordedButNotJournaled) {
  BlockIndex index;
  index.Apply("w1", Copy(kA, 8, /*fresh=*/true));
  AppliedBlocks applied =
      ApplyReport(index, "w1", {Removal(kA, 7), Copy(kB, 3, /*fresh=*/true)}, kNoLeaseHeld);
  EXPECT_THAT(applied.recorded, ElementsAre(Of(kA), Of(kB)));
  EXPECT_THAT(applied.journaled, ElementsAre(Of(kB)));
  EXPECT_TRUE(index.Find(kA).has_value());
}

TEST(BlockReportsTest, RemovalOfTheLastCopyNamesTheBlockGone) {
  BlockIndex index;
  index.Apply("w1", Copy(kA, 7, /*fresh=*/true));
  AppliedBlocks applied = ApplyReport(index, "w1", {Removal(kA, 7)}, kNoLeaseHeld);
  ASSERT_EQ(applied.gone.size(), 1u);
  EXPECT_EQ(applied.gone[0].id, kA);
  EXPECT_EQ(applied.gone[0].version, 7u);
}

}  // namespace
}  // namespace bm
