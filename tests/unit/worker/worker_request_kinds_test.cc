#include "worker/worker_request_kinds.h"

#include <gtest/gtest.h>

#include "common/security/access_policy.h"
#include "tests/support/request_kinds.h"

namespace bm {
namespace {

using testing::AllRequestKinds;
using testing::RequestKind;

// A kind added to the schema fails here until the table (which the worker's dispatcher uses)
// says how a tenant key's request of that kind is gated.
TEST(WorkerRequestKindsTest, EveryKindOfTheSchemaIsClassified) {
  const std::vector<RequestKind> kinds = AllRequestKinds();
  ASSERT_GT(kinds.size(), 30u);
  for (const RequestKind& kind : kinds) {
    const WorkerRequestKind* entry = FindWorkerRequestKind(kind.which);
    ASSERT_NE(entry, nullptr) << kind.name << " is missing from worker_request_kinds.cc";
    EXPECT_EQ(entry->name, kind.name);
  }
}

// A kind that names a block or an RDD is never open to every tenant key.
TEST(WorkerRequestKindsTest, NoKindThatNamesABlockOrAnRddIsTenantNeutral) {
  for (const RequestKind& kind : AllRequestKinds()) {
    if (!testing::NamesABlockOrAnRdd(kind)) continue;
    const WorkerRequestKind* entry = FindWorkerRequestKind(kind.which);
    ASSERT_NE(entry, nullptr) << kind.name;
    EXPECT_NE(entry->gating, WorkerTenantGating::kNeutral) << kind.name;
  }
}

// The gate checks the datasets of exactly the blocks a gated read names.
TEST(WorkerRequestKindsTest, EveryGatedReadNamesTheBlocksItsRequestCarries) {
  int gated = 0;
  for (const RequestKind& kind : AllRequestKinds()) {
    const WorkerRequestKind* entry = FindWorkerRequestKind(kind.which);
    ASSERT_NE(entry, nullptr) << kind.name;
    if (entry->gating != WorkerTenantGating::kRead) continue;
    const BlockId block = testing::SampleBlockFor(kind);
    ++gated;
    ASSERT_NE(entry->named_blocks, nullptr) << kind.name;
    capnp::MallocMessageBuilder message;
    proto::Request::Builder request = testing::BuildRequestNaming(message, kind, block);
    Result<std::vector<BlockId>> named = entry->named_blocks(request.asReader());
    ASSERT_TRUE(named.ok()) << kind.name << ": " << named.status().ToString();
    EXPECT_EQ(*named, std::vector<BlockId>{block}) << kind.name;
  }
  EXPECT_EQ(gated, 5);  // getBlock, getBlocks, containsBlock, verifyBlock, readShuffle
}

// The table and the access policy agree: what the table refuses to a tenant key the policy
// refuses too, and what it gates by dataset the policy lets through to be gated.
TEST(WorkerRequestKindsTest, RefusedKindsAreTheOnesTheAccessPolicyRefusesAClientKey) {
  const PeerIdentity tenant_key{
      .role = KeyRole::kClient, .name = "bob", .public_key = "", .tenant = "bob"};
  for (const RequestKind& kind : AllRequestKinds()) {
    const WorkerRequestKind* entry = FindWorkerRequestKind(kind.which);
    ASSERT_NE(entry, nullptr) << kind.name;
    const Status allowed = AuthorizeWorkerRequest(/*secure=*/true, tenant_key, kind.which);
    switch (entry->gating) {
      case WorkerTenantGating::kMasterOnly:
      case WorkerTenantGating::kAdminOnly:
        EXPECT_EQ(allowed.code(), StatusCode::kPermissionDenied) << kind.name;
        break;
      case WorkerTenantGating::kNeutral:
      case WorkerTenantGating::kRead:
      case WorkerTenantGating::kPut:
      case WorkerTenantGating::kShuffleOwner:
        EXPECT_TRUE(allowed.ok()) << kind.name << ": " << allowed.ToString();
        break;
      case WorkerTenantGating::kNotServed:
        break;
    }
  }
}

}  // namespace
}  // namespace bm
