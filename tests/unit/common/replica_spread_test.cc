#include "common/core/replica_spread.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bm {
namespace {

using ::testing::ElementsAre;

TEST(ReplicaSpreadTest, WithoutLabelsCopiesGoToDistinctWorkersInPreferenceOrder) {
  std::vector<ReplicaSite> candidates = {{"w3", "h", ""}, {"w1", "h", ""}, {"w2", "h", ""}};
  EXPECT_THAT(SpreadReplicas(candidates, {}, 2), ElementsAre(0, 1, 2));
  EXPECT_THAT(SpreadReplicas(candidates, {}, 0), ElementsAre(0, 1, 2));
}

TEST(ReplicaSpreadTest, DistinctRacksComeFirstThenDistinctHosts) {
  std::vector<ReplicaSite> candidates = {
      {"a1", "ha", "r1"}, {"a2", "ha", "r1"}, {"b1", "hb", "r1"}, {"c1", "hc", "r2"}};
  // Second copy: the other rack (c1), even though a1's neighbours are preferred.
  EXPECT_THAT(SpreadReplicas(candidates, {}, 2), ElementsAre(0, 3, 1, 2));
  // Third copy: both racks used, so a host not used yet (b1) before a2 on a1's host.
  EXPECT_THAT(SpreadReplicas(candidates, {}, 3), ElementsAre(0, 3, 2, 1));
}

TEST(ReplicaSpreadTest, ExistingCopiesCountAndTheirWorkersAreLeftOut) {
  std::vector<ReplicaSite> candidates = {
      {"a1", "ha", "r1"}, {"a2", "ha2", "r1"}, {"c1", "hc", "r2"}};
  std::vector<ReplicaSite> holders = {{"c1", "hc", "r2"}};
  // One more copy: rack r1 has none yet; c1 already holds one and is not a candidate.
  EXPECT_THAT(SpreadReplicas(candidates, holders, 1), ElementsAre(0, 1));
}

TEST(ReplicaSpreadTest, FewerCandidatesThanCopiesPicksThemAll) {
  std::vector<ReplicaSite> candidates = {{"w1", "h1", ""}};
  EXPECT_THAT(SpreadReplicas(candidates, {}, 3), ElementsAre(0));
  EXPECT_THAT(SpreadReplicas({}, {}, 2), ElementsAre());
}

}  // namespace
}  // namespace bm
