#include "master/tenant_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/core/clock.h"

namespace bm {
namespace {

using ::testing::HasSubstr;

TEST(TenantRegistryTest, FirstClaimOwnsAndLaterClaimsSeeTheOwner) {
  FakeClock clock;
  TenantRegistry tenants(clock, std::chrono::seconds(60));
  EXPECT_FALSE(tenants.Lookup("rdd_1", false).owned());
  TenantRegistry::Claimed first = tenants.Claim("rdd_1", "alice", false);
  EXPECT_TRUE(first.recorded);
  EXPECT_EQ(first.access.owner, "alice");
  TenantRegistry::Claimed second = tenants.Claim("rdd_1", "bob", true);
  EXPECT_FALSE(second.recorded);
  EXPECT_EQ(second.access.owner, "alice");
  // Blocks nobody claimed (stored before tenants) are the default tenant's.
  EXPECT_EQ(tenants.Lookup("rdd_2", true).owner, "default");
  EXPECT_EQ(tenants.Claim("rdd_2", "bob", true).access.owner, "default");
}

TEST(TenantRegistryTest, SharesAreSortedAndEachChangeHasANewerGeneration) {
  FakeClock clock;
  TenantRegistry tenants(clock, std::chrono::seconds(60));
  EXPECT_EQ(tenants.Share("rdd_1", "bob", false).status().code(), StatusCode::kNotFound);
  (void)tenants.Claim("rdd_1", "alice", false);
  const uint64_t claimed = tenants.Lookup("rdd_1", true).generation;
  Result<DatasetAccess> shared = tenants.Share("rdd_1", "carol", false);
  ASSERT_TRUE(shared.ok());
  shared = tenants.Share("rdd_1", "bob", false);
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ(shared->readers, (std::vector<std::string>{"bob", "carol"}));
  EXPECT_GT(shared->generation, claimed);
  Result<DatasetAccess> unshared = tenants.Share("rdd_1", "carol", true);
  ASSERT_TRUE(unshared.ok());
  EXPECT_EQ(unshared->readers, (std::vector<std::string>{"bob"}));
  EXPECT_GT(unshared->generation, shared->generation);
  EXPECT_EQ(tenants.Share("rdd_1", "alice", false).status().code(), StatusCode::kInvalidArgument);
  // Restored records keep generations growing past theirs.
  TenantRegistry restarted(clock, std::chrono::seconds(60));
  restarted.Restore("rdd_1", *unshared);
  Result<DatasetAccess> again = restarted.Share("rdd_1", "dave", false);
  ASSERT_TRUE(again.ok());
  EXPECT_GT(again->generation, unshared->generation);
}

TEST(TenantRegistryTest, QuotaAdmitsExactlyWhatFitsCountingReservations) {
  FakeClock clock;
  TenantRegistry tenants(clock, std::chrono::seconds(60));
  // No quota: admitted without a reservation.
  EXPECT_EQ(*tenants.Reserve("alice", {"rdd_1_0"}, 100, StorageLevel::kMemoryOnly, {}), 0u);
  tenants.SetQuota("alice", TenantQuota{.memory = 250, .disk = 0});
  Result<uint64_t> first =
      tenants.Reserve("alice", {"rdd_1_0"}, 100, StorageLevel::kMemoryOnly, {});
  ASSERT_TRUE(first.ok());
  EXPECT_NE(*first, 0u);
  // 100 reserved + 50 stored + 100 = 250: fits exactly; one byte more does not.
  ASSERT_TRUE(
      tenants.Reserve("alice", {"rdd_1_1"}, 100, StorageLevel::kMemoryOnly, TierBytes{.memory = 50})
          .ok());
  Result<uint64_t> over =
      tenants.Reserve("alice", {"rdd_1_2"}, 1, StorageLevel::kMemoryOnly, TierBytes{.memory = 50});
  ASSERT_FALSE(over.ok());
  EXPECT_TRUE(IsQuotaExceeded(over.status()));
  EXPECT_THAT(over.status().message(), HasSubstr("tenant 'alice'"));
  // A level that may spill goes to disk (no disk limit).
  EXPECT_TRUE(
      tenants
          .Reserve("alice", {"rdd_1_3"}, 100, StorageLevel::kMemoryAndDisk, TierBytes{.memory = 50})
          .ok());
  EXPECT_EQ(tenants.Reserved("alice"), (TierBytes{.memory = 200, .disk = 100}));
  // Reported: the bytes count as stored instead.
  tenants.EndReservation(*first, "w1");
  EXPECT_EQ(tenants.Reserved("alice").memory, 100u);
  // Unreported reservations lapse.
  clock.Advance(std::chrono::seconds(61));
  EXPECT_EQ(tenants.ExpireReservations(), 2u);
  EXPECT_EQ(tenants.Reserved("alice"), TierBytes{});
  // Another tenant is not limited by alice's quota.
  EXPECT_TRUE(tenants.Reserve("bob", {"rdd_2_0"}, 1000, StorageLevel::kMemoryOnly, {}).ok());
}

// A put of two copies with 16 of 20 used is refused whole at its first copy, so no copy is
// stored; one that fits is admitted at its first copy, the second takes its share.
TEST(TenantRegistryTest, APutOfSeveralCopiesIsAdmittedWholeAtItsFirstCopy) {
  FakeClock clock;
  TenantRegistry tenants(clock, std::chrono::seconds(60));
  tenants.SetQuota("alice", TenantQuota{.memory = 20, .disk = 0});
  const TenantRegistry::PutCopies put{.block = "rdd_1_0", .version = 7, .copies = 2};
  Result<uint64_t> refused =
      tenants.Reserve("alice", put, 4, StorageLevel::kMemoryOnly, TierBytes{.memory = 16});
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(IsQuotaExceeded(refused.status())) << refused.status().ToString();
  EXPECT_THAT(refused.status().message(), HasSubstr("2 copies"));
  // The second copy's question is refused as well: nothing was reserved for the put.
  EXPECT_FALSE(
      tenants.Reserve("alice", put, 4, StorageLevel::kMemoryOnly, TierBytes{.memory = 16}).ok());
  EXPECT_EQ(tenants.Reserved("alice"), TierBytes{});

  // 12 used: both copies fit, reserved at the first.
  Result<uint64_t> first =
      tenants.Reserve("alice", put, 4, StorageLevel::kMemoryOnly, TierBytes{.memory = 12});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(tenants.Reserved("alice").memory, 8u);
  // Another put of 1 byte no longer fits (12 + 8 = 20).
  EXPECT_FALSE(
      tenants.Reserve("alice", {"rdd_1_1"}, 1, StorageLevel::kMemoryOnly, TierBytes{.memory = 12})
          .ok());
  // The second copy (same block and version) takes its share, admitted already.
  Result<uint64_t> second =
      tenants.Reserve("alice", put, 4, StorageLevel::kMemoryOnly, TierBytes{.memory = 12});
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(*second, *first);
  EXPECT_EQ(tenants.Reserved("alice").memory, 8u);
  // A third copy of that put (one placed again) is admitted for its own bytes: no room.
  EXPECT_FALSE(
      tenants.Reserve("alice", put, 4, StorageLevel::kMemoryOnly, TierBytes{.memory = 12}).ok());
  // Each copy's report ends its share; a report heard twice ends nothing more.
  tenants.EndReservation(*first, "w1");
  EXPECT_EQ(tenants.Reserved("alice").memory, 4u);
  tenants.EndReservation(*first, "w1");
  EXPECT_EQ(tenants.Reserved("alice").memory, 4u);
  tenants.EndReservation(*second, "w2");
  EXPECT_EQ(tenants.Reserved("alice"), TierBytes{});
}

}  // namespace
}  // namespace bm
