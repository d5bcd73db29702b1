#include "master/tenant_service.h"

#include <capnp/message.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace bm {
namespace {

const BlockId kBlock = BlockId::Rdd(5, 0);
const std::string kDataset = "rdd_5";

PeerIdentity Peer(KeyRole role, const std::string& name, const std::string& tenant = "") {
  PeerIdentity peer;
  peer.role = role;
  peer.name = name;
  peer.tenant = tenant;
  return peer;
}

PeerIdentity ClientOf(const std::string& tenant) {
  return Peer(KeyRole::kClient, tenant + "-key", tenant);
}

class TenantServiceTest : public ::testing::Test {
 protected:
  // A restricted peer's registerRdd of RDD 5: a write.
  Status RegisterRdd(const PeerIdentity& peer) {
    capnp::MallocMessageBuilder message;
    message.initRoot<proto::Request>().initRegisterRdd().setRddId(5);
    return service_.Admit(message.getRoot<proto::Request>().asReader(), peer, effects_);
  }
  Status GetLocations(const PeerIdentity& peer) {
    capnp::MallocMessageBuilder message;
    message.initRoot<proto::Request>().initGetLocations().initBlockIds(1).set(0, kBlock.ToString());
    return service_.Admit(message.getRoot<proto::Request>().asReader(), peer, effects_);
  }
  Status Share(const std::optional<PeerIdentity>& peer, const std::string& reader) {
    capnp::MallocMessageBuilder request;
    proto::ShareDataset::Builder share = request.initRoot<proto::ShareDataset>();
    share.setDataset(kDataset);
    share.setTenant(reader);
    capnp::MallocMessageBuilder reply;
    return service_.ShareDataset(share.asReader(), peer, reply.initRoot<proto::Reply>(), effects_);
  }
  Status SetQuota(const std::string& tenant, uint64_t memory) {
    capnp::MallocMessageBuilder request;
    proto::SetQuota::Builder quota = request.initRoot<proto::SetQuota>();
    quota.setTenant(tenant);
    quota.setMemoryBytes(memory);
    capnp::MallocMessageBuilder reply;
    return service_.SetQuota(quota.asReader(), reply.initRoot<proto::Reply>(), effects_);
  }
  // A worker's checkAccess for a put of `bytes` into kDataset by `tenant`; the reservation.
  Result<uint64_t> CheckPut(const std::string& tenant, uint64_t bytes) {
    capnp::MallocMessageBuilder request;
    proto::CheckAccess::Builder check = request.initRoot<proto::CheckAccess>();
    check.setDataset(kDataset);
    check.setTenant(tenant);
    check.setClaim(true);
    check.setReserveBytes(bytes);
    check.setLevel(proto::StorageLevel::MEMORY_ONLY);
    check.setBlockId(BlockId::Rdd(5, 1).ToString());
    check.setVersion(bytes);  // a put of its own
    capnp::MallocMessageBuilder reply;
    proto::Reply::Builder answer = reply.initRoot<proto::Reply>();
    BM_RETURN_IF_ERROR(service_.CheckAccess(check.asReader(), answer, effects_));
    return answer.getAccess().getReservation();
  }

  FakeClock clock_;
  BlockIndex index_;
  TenantService service_{clock_, index_};
  TenantEffects effects_;
};

TEST_F(TenantServiceTest, AWriteClaimsAFreeDatasetForItsTenantAndJournalsTheClaim) {
  ASSERT_TRUE(RegisterRdd(ClientOf("alice")).ok());
  ASSERT_EQ(effects_.recorded.size(), 1u);
  EXPECT_EQ(effects_.recorded[0].dataset, kDataset);
  EXPECT_EQ(effects_.recorded[0].access.owner, "alice");
  EXPECT_TRUE(effects_.to_workers.empty()) << "workers ask for the records they need";

  effects_ = {};
  Status refused = RegisterRdd(ClientOf("bob"));
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused.ToString();
  EXPECT_TRUE(effects_.recorded.empty());
  EXPECT_EQ(GetLocations(ClientOf("bob")).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(GetLocations(ClientOf("alice")).ok());
}

TEST_F(TenantServiceTest, PeersOutsideTheTenantRulesAreAdmittedAndSeeEverything) {
  ASSERT_TRUE(RegisterRdd(ClientOf("alice")).ok());
  EXPECT_EQ(service_.VisibleTo(std::nullopt), nullptr);
  EXPECT_EQ(service_.VisibleTo(Peer(KeyRole::kAdmin, "admin")), nullptr);
  ClientQueries::Visible bob = service_.VisibleTo(ClientOf("bob"));
  ASSERT_NE(bob, nullptr);
  EXPECT_FALSE(bob(kDataset));
  EXPECT_TRUE(service_.VisibleTo(ClientOf("alice"))(kDataset));
}

TEST_F(TenantServiceTest, OwnersShareIsJournaledAndSentToTheWorkers) {
  ASSERT_TRUE(RegisterRdd(ClientOf("alice")).ok());
  effects_ = {};
  EXPECT_EQ(Share(ClientOf("bob"), "bob").code(), StatusCode::kPermissionDenied)
      << "only its owner or an admin shares a dataset";
  ASSERT_TRUE(Share(ClientOf("alice"), "bob").ok());
  ASSERT_EQ(effects_.recorded.size(), 1u);
  EXPECT_EQ(effects_.recorded[0].access.readers, std::vector<std::string>{"bob"});
  ASSERT_EQ(effects_.to_workers.size(), 1u);
  EXPECT_EQ(effects_.to_workers[0].access, effects_.recorded[0].access);
  EXPECT_TRUE(GetLocations(ClientOf("bob")).ok());
  EXPECT_TRUE(service_.VisibleTo(ClientOf("bob"))(kDataset));
}

TEST_F(TenantServiceTest, SharingBlocksNobodyRecordedClaimsThemForTheDefaultTenantFirst) {
  BlockChange stored{kBlock};
  stored.size = 10;
  index_.Apply("w1", stored);
  ASSERT_TRUE(Share(std::nullopt, "bob").ok());
  ASSERT_EQ(effects_.recorded.size(), 2u) << "the claim, then the share";
  EXPECT_EQ(effects_.recorded[0].access.owner, std::string(kDefaultTenant));
  EXPECT_EQ(effects_.recorded[1].access.readers, std::vector<std::string>{"bob"});
}

TEST_F(TenantServiceTest, QuotaIsJournaledAndItsOwnersDatasetsAreSentWithIt) {
  ASSERT_TRUE(RegisterRdd(ClientOf("alice")).ok());
  effects_ = {};
  ASSERT_TRUE(SetQuota("alice", 1000).ok());
  ASSERT_EQ(effects_.quotas.size(), 1u);
  EXPECT_EQ(effects_.quotas[0].first, "alice");
  ASSERT_TRUE(effects_.quotas[0].second.has_value());
  EXPECT_EQ(effects_.quotas[0].second->memory, 1000u);
  ASSERT_EQ(effects_.to_workers.size(), 1u);
  EXPECT_EQ(effects_.to_workers[0].dataset, kDataset);
  EXPECT_EQ(effects_.to_workers[0].access.owner_memory_quota, 1000u);

  capnp::MallocMessageBuilder reply;
  service_.ListTenants(ClientOf("alice"), reply.initRoot<proto::Reply>());
  auto tenants = reply.getRoot<proto::Reply>().asReader().getTenants();
  ASSERT_EQ(tenants.size(), 1u) << "a tenant sees itself only";
  EXPECT_EQ(std::string(tenants[0].getTenant().cStr()), "alice");
  EXPECT_EQ(tenants[0].getMemoryQuota(), 1000u);
  EXPECT_EQ(tenants[0].getDatasets(), 1u);
}

TEST_F(TenantServiceTest, PutsAreReservedAgainstTheOwnersQuotaUntilReported) {
  ASSERT_TRUE(SetQuota("alice", 1000).ok());
  Result<uint64_t> first = CheckPut("alice", 600);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_NE(*first, 0u);
  EXPECT_EQ(service_.Usages("alice")[0].reserved_bytes, 600u);
  Result<uint64_t> second = CheckPut("alice", 600);
  EXPECT_TRUE(IsQuotaExceeded(second.status())) << second.status().ToString();
  service_.EndReservation(*first, "w1");
  EXPECT_EQ(service_.Usages("alice")[0].reserved_bytes, 0u);
}

TEST_F(TenantServiceTest, AClaimMadeBeforeARefusedReservationStands) {
  ASSERT_TRUE(SetQuota("alice", 100).ok());
  effects_ = {};
  Result<uint64_t> refused = CheckPut("alice", 600);
  EXPECT_TRUE(IsQuotaExceeded(refused.status())) << refused.status().ToString();
  ASSERT_EQ(effects_.recorded.size(), 1u) << "to be journaled although the request failed";
  EXPECT_EQ(effects_.recorded[0].access.owner, "alice");
}

TEST_F(TenantServiceTest, RestoredRecordsDecideAccess) {
  const std::vector<std::pair<std::string, DatasetAccess>> datasets = {
      {kDataset, DatasetAccess{"alice", {}, 1, 0}}};
  const std::vector<std::pair<std::string, TenantQuota>> quotas = {{"alice", TenantQuota{5, 0}}};
  service_.Restore(datasets, quotas);
  EXPECT_EQ(GetLocations(ClientOf("bob")).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(service_.Usages("alice")[0].memory_quota, 5u);
}

}  // namespace
}  // namespace bm
