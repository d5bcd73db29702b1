#include "common/security/tenant.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "common/security/access_policy.h"
#include "tests/support/temp_dir.h"

namespace bm {
namespace {

using ::testing::HasSubstr;

TEST(TenantTest, DatasetsAreRddsOrNonRddBlocks) {
  EXPECT_EQ(DatasetOf(BlockId::Rdd(7, 3)), "rdd_7");
  EXPECT_EQ(DatasetOf(BlockId::Broadcast(3)), "broadcast_3");
  EXPECT_EQ(*ParseDataset("7"), "rdd_7");
  EXPECT_EQ(*ParseDataset("rdd_7"), "rdd_7");
  EXPECT_EQ(*ParseDataset("broadcast_3"), "broadcast_3");
  EXPECT_EQ(RddOfDataset("rdd_7"), 7u);
  EXPECT_EQ(RddOfDataset("rdd_07"), std::nullopt);
  EXPECT_FALSE(ParseDataset("rdd_7_1").ok());  // a block, not a dataset
  EXPECT_FALSE(ParseDataset("bogus").ok());
}

TEST(TenantTest, OwnerWritesReadersReadOthersAreRefusedByName) {
  const DatasetAccess access{.owner = "alice", .readers = {"bob"}, .generation = 1};
  EXPECT_TRUE(CheckDatasetAccess("alice", "rdd_7", access, DatasetOp::kWrite).ok());
  EXPECT_TRUE(CheckDatasetAccess("alice", "rdd_7", access, DatasetOp::kRemove).ok());
  EXPECT_TRUE(CheckDatasetAccess("bob", "rdd_7", access, DatasetOp::kRead).ok());
  Status write = CheckDatasetAccess("bob", "rdd_7", access, DatasetOp::kWrite);
  EXPECT_EQ(write.code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(write.message(), HasSubstr("tenant 'bob' may not write rdd_7"));
  EXPECT_THAT(write.message(), HasSubstr("read-only"));
  Status read = CheckDatasetAccess("carol", "rdd_7", access, DatasetOp::kRead);
  EXPECT_EQ(read.code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(read.message(), HasSubstr("tenant 'carol' may not read rdd_7"));
  // Nobody owns it yet: open (the writer claims it at the master).
  EXPECT_TRUE(CheckDatasetAccess("carol", "rdd_8", DatasetAccess{}, DatasetOp::kWrite).ok());
}

TEST(TenantTest, TenantTravelsInTheZapUserId) {
  PeerIdentity peer{KeyRole::kClient, "alice-laptop", "KEY", "analytics"};
  EXPECT_EQ(EncodeUserId(peer), "client:analytics alice-laptop KEY");
  std::optional<PeerIdentity> decoded = DecodeUserId(EncodeUserId(peer));
  ASSERT_TRUE(decoded);
  EXPECT_EQ(decoded->tenant, "analytics");
  EXPECT_EQ(decoded->name, "alice-laptop");
  EXPECT_EQ(decoded->role, KeyRole::kClient);
  std::optional<PeerIdentity> plain = DecodeUserId("admin ops KEY");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->tenant, "");
  EXPECT_EQ(TenantOf(*plain), "default");
  EXPECT_FALSE(DecodeUserId("client: name KEY"));
  EXPECT_TRUE(IsTenantRestricted(peer));
  EXPECT_FALSE(IsTenantRestricted(*plain));
  EXPECT_FALSE(IsTenantRestricted(std::nullopt));
}

TEST(TenantTest, TenantFileBesideTheKeyNamesTheTenant) {
  testing::TempDir dir;
  EXPECT_EQ(*ReadTenantFile(dir.Sub("alice.key")), "");
  std::ofstream(dir.Sub("alice.tenant")) << "analytics\n";
  EXPECT_EQ(*ReadTenantFile(dir.Sub("alice.key")), "analytics");
  std::ofstream(dir.Sub("bob.tenant")) << "no spaces allowed\n";
  EXPECT_EQ(ReadTenantFile(dir.Sub("bob.key")).status().code(), StatusCode::kInvalidArgument);
}

TEST(TenantTest, TenantClientKeysMayAskToRemoveOnlyKeysWithoutTenantMayNot) {
  const PeerIdentity tenant_key{KeyRole::kClient, "alice", "KEY", "analytics"};
  const PeerIdentity plain_key{KeyRole::kClient, "old", "KEY"};
  using Which = proto::Request::Which;
  for (Which which : {Which::REMOVE_BLOCKS, Which::REMOVE_RDD}) {
    EXPECT_TRUE(AuthorizeMasterRequest(true, tenant_key, which).ok());
    EXPECT_EQ(AuthorizeMasterRequest(true, plain_key, which).code(), StatusCode::kPermissionDenied);
  }
  EXPECT_EQ(AuthorizeMasterRequest(true, tenant_key, Which::SET_QUOTA).code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(AuthorizeMasterRequest(true, tenant_key, Which::CHECK_ACCESS).code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(AuthorizeWorkerRequest(true, tenant_key, Which::DATASET_ACCESS).code(),
            StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace bm
