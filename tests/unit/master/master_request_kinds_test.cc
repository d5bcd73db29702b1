#include "master/master_request_kinds.h"

#include <gtest/gtest.h>

#include "common/security/access_policy.h"
#include "tests/support/request_kinds.h"

namespace bm {
namespace {

using testing::AllRequestKinds;
using testing::RequestKind;

const PeerIdentity kTenantKey{
    .role = KeyRole::kClient, .name = "bob", .public_key = "", .tenant = "bob"};

// A kind added to the schema fails here until the table (which the master's dispatcher uses)
// says how a tenant key's request of that kind is checked.
TEST(MasterRequestKindsTest, EveryKindOfTheSchemaIsClassified) {
  const std::vector<RequestKind> kinds = AllRequestKinds();
  ASSERT_GT(kinds.size(), 30u);
  for (const RequestKind& kind : kinds) {
    const MasterRequestKind* entry = FindMasterRequestKind(kind.which);
    ASSERT_NE(entry, nullptr) << kind.name << " is missing from master_request_kinds.cc";
    EXPECT_EQ(entry->name, kind.name);
  }
}

// A kind the master serves to client keys that names a block or an RDD is checked against the
// datasets it names (or, for a lease, refused by role).
TEST(MasterRequestKindsTest, EveryServedKindThatNamesABlockOrAnRddIsChecked) {
  for (const RequestKind& kind : AllRequestKinds()) {
    if (!testing::NamesABlockOrAnRdd(kind)) continue;
    const BlockId block = testing::SampleBlockFor(kind);
    const MasterRequestKind* entry = FindMasterRequestKind(kind.which);
    ASSERT_NE(entry, nullptr) << kind.name;
    if (entry->gating == MasterTenantGating::kNotServed ||
        entry->gating == MasterTenantGating::kRefused) {
      continue;
    }
    ASSERT_NE(entry->named_blocks, nullptr) << kind.name << " names blocks it is not checked for";
    capnp::MallocMessageBuilder message;
    proto::Request::Builder request = testing::BuildRequestNaming(message, kind, block);
    Result<std::vector<BlockId>> named = entry->named_blocks(request.asReader());
    ASSERT_TRUE(named.ok()) << kind.name << ": " << named.status().ToString();
    EXPECT_EQ(*named, std::vector<BlockId>{block}) << kind.name;
  }
}

// The table and the access policy agree: what the table refuses to a tenant key the policy
// refuses too, and what it checks by dataset the policy lets through to be checked.
TEST(MasterRequestKindsTest, RefusedKindsAreTheOnesTheAccessPolicyRefusesAClientKey) {
  for (const RequestKind& kind : AllRequestKinds()) {
    const MasterRequestKind* entry = FindMasterRequestKind(kind.which);
    ASSERT_NE(entry, nullptr) << kind.name;
    const Status allowed = AuthorizeMasterRequest(/*secure=*/true, kTenantKey, kind.which);
    if (entry->gating == MasterTenantGating::kRefused) {
      EXPECT_EQ(allowed.code(), StatusCode::kPermissionDenied) << kind.name;
    } else {
      EXPECT_TRUE(allowed.ok()) << kind.name << ": " << allowed.ToString();
    }
  }
}

}  // namespace
}  // namespace bm
