#include "common/security/access_policy.h"

#include <gtest/gtest.h>

namespace bm {
namespace {

using Which = proto::Request::Which;

std::optional<PeerIdentity> As(KeyRole role, std::string name = "n") {
  return PeerIdentity{role, std::move(name), "key"};
}

TEST(AccessPolicyTest, WithoutKeysEverythingIsAllowed) {
  EXPECT_TRUE(AuthorizeMasterRequest(false, std::nullopt, Which::REMOVE_RDD).ok());
  EXPECT_TRUE(AuthorizeWorkerRequest(false, std::nullopt, Which::SHUTDOWN).ok());
  EXPECT_TRUE(AuthorizeWorkerId(false, std::nullopt, "w1").ok());
}

TEST(AccessPolicyTest, WithKeysAnUnauthenticatedMessageIsRefused) {
  EXPECT_EQ(AuthorizeMasterRequest(true, std::nullopt, Which::PING).code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(AuthorizeWorkerRequest(true, std::nullopt, Which::GET_BLOCK).code(),
            StatusCode::kPermissionDenied);
}

TEST(AccessPolicyTest, MasterRequestsFollowTheRoles) {
  EXPECT_TRUE(AuthorizeMasterRequest(true, As(KeyRole::kWorker), Which::HEARTBEAT).ok());
  EXPECT_FALSE(AuthorizeMasterRequest(true, As(KeyRole::kClient), Which::REGISTER_WORKER).ok());
  EXPECT_FALSE(AuthorizeMasterRequest(true, As(KeyRole::kAdmin), Which::REPORT_BLOCKS).ok());
  EXPECT_TRUE(AuthorizeMasterRequest(true, As(KeyRole::kClient), Which::GET_LOCATIONS).ok());
  EXPECT_TRUE(AuthorizeMasterRequest(true, As(KeyRole::kClient), Which::ACQUIRE_COMPUTE).ok());
  EXPECT_FALSE(AuthorizeMasterRequest(true, As(KeyRole::kWorker), Which::GET_LOCATIONS).ok());
  Status denied = AuthorizeMasterRequest(true, As(KeyRole::kClient, "alice"), Which::REMOVE_RDD);
  EXPECT_EQ(denied.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(denied.message(),
            "removeRdd is not allowed for client key 'alice': only admin keys may send it");
  EXPECT_TRUE(AuthorizeMasterRequest(true, As(KeyRole::kAdmin), Which::REMOVE_RDD).ok());
  EXPECT_TRUE(AuthorizeMasterRequest(true, As(KeyRole::kAdmin), Which::DECOMMISSION_WORKER).ok());
  EXPECT_FALSE(AuthorizeMasterRequest(true, As(KeyRole::kClient), Which::REMOVE_BLOCKS).ok());
}

TEST(AccessPolicyTest, WorkersTakeCommandsOnlyFromTheMastersKey) {
  for (Which command :
       {Which::REMOVE_BLOCKS, Which::REPLICATE_BLOCK, Which::DECOMMISSION, Which::SHUTDOWN}) {
    EXPECT_TRUE(AuthorizeWorkerRequest(true, As(KeyRole::kMaster), command).ok());
    for (KeyRole other : {KeyRole::kAdmin, KeyRole::kClient, KeyRole::kWorker}) {
      EXPECT_EQ(AuthorizeWorkerRequest(true, As(other), command).code(),
                StatusCode::kPermissionDenied);
    }
  }
  EXPECT_TRUE(AuthorizeWorkerRequest(true, As(KeyRole::kWorker), Which::PUT_BLOCK).ok());
  EXPECT_TRUE(AuthorizeWorkerRequest(true, As(KeyRole::kClient), Which::GET_BLOCKS).ok());
  EXPECT_FALSE(AuthorizeWorkerRequest(true, As(KeyRole::kMaster), Which::PUT_BLOCK).ok());
  // The master asks a worker to verify a copy reported with a mismatching block digest.
  EXPECT_TRUE(AuthorizeWorkerRequest(true, As(KeyRole::kMaster), Which::VERIFY_BLOCK).ok());
  EXPECT_TRUE(AuthorizeWorkerRequest(true, As(KeyRole::kClient), Which::VERIFY_BLOCK).ok());
}

TEST(AccessPolicyTest, OnlyAdminKeysMayInjectFaults) {
  EXPECT_TRUE(AuthorizeWorkerRequest(true, As(KeyRole::kAdmin), Which::CORRUPT_BLOCK).ok());
  for (KeyRole other : {KeyRole::kMaster, KeyRole::kClient, KeyRole::kWorker}) {
    Status denied = AuthorizeWorkerRequest(true, As(other), Which::CORRUPT_BLOCK);
    EXPECT_EQ(denied.code(), StatusCode::kPermissionDenied);
    EXPECT_NE(denied.message().find("corruptBlock"), std::string::npos) << denied.message();
  }
}

TEST(AccessPolicyTest, AWorkerKeySpeaksOnlyForItsOwnId) {
  EXPECT_TRUE(AuthorizeWorkerId(true, As(KeyRole::kWorker, "w1"), "w1").ok());
  EXPECT_EQ(AuthorizeWorkerId(true, As(KeyRole::kWorker, "w1"), "w2").code(),
            StatusCode::kPermissionDenied);
  EXPECT_FALSE(AuthorizeWorkerId(true, As(KeyRole::kAdmin, "w2"), "w2").ok());
}

}  // namespace
}  // namespace bm
