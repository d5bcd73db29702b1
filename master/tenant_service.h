#pragma once

#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "blockmgr/status.h"
#include "common/core/clock.h"
#include "common/core/protocol.h"
#include "common/security/tenant.h"
#include "master/block_index.h"
#include "master/client_queries.h"
#include "master/master_status.h"
#include "master/tenant_registry.h"

namespace bm {

// How long a put admitted against its tenant's quota may take to be reported before its
// reservation lapses (a put abandoned midway).
inline constexpr Duration kQuotaReservationLifetime = std::chrono::seconds(60);

// A dataset's record: who owns it, whom it is shared with.
struct DatasetRecord {
  std::string dataset;
  DatasetAccess access;
};

// What a tenant event came to, for the master's loop to carry out in this order: journal the
// dataset records, then the quotas, then send each record of `to_workers` to every worker
// (workers keep the records they asked for, so each hears of a change: PROTOCOL.md,
// "Tenants"). Carried out also when the event's request failed: a claim made before the
// failure stands.
struct TenantEffects {
  std::vector<DatasetRecord> recorded;
  std::vector<std::pair<std::string, std::optional<TenantQuota>>> quotas;  // nullopt: removed
  std::vector<DatasetRecord> to_workers;  // with their owner's memory quota
};

// Writes a dataset's record as datasetAccess and checkAccess carry it.
void FillDatasetAccess(const std::string& dataset, const DatasetAccess& access,
                       proto::DatasetAccessRecord::Builder out);

// Tenants (dataset owners and shares) and their quotas, as the master serves them
// (docs/security.md "Tenants, shares and quotas"; PROTOCOL.md "Tenants"). The rules are
// common/security/tenant.h's and the records TenantRegistry's; this checks requests against them
// and answers the tenant requests. Workers check the requests that reach them directly.
//
// A component of the master's loop: it owns the registry, borrows the loop's BlockIndex (what a
// tenant stores, whether a dataset has blocks), answers each event with its reply and its
// TenantEffects, and touches no socket or journal itself. Not thread-safe: owned by the loop's
// thread.
class TenantService {
 public:
  TenantService(const Clock& clock, const BlockIndex& index)
      : index_(index), registry_(clock, kQuotaReservationLifetime) {}

  // A restricted peer's request, by its kind's entry in the table (master_request_kinds.h):
  // Ok, or kPermissionDenied when its tenant may not do what the request does to the datasets
  // it names (a kind the table lacks, or another role's, is refused). A write claims a
  // dataset nobody owns.
  Status Admit(proto::Request::Reader request, const PeerIdentity& peer, TenantEffects& effects);
  // Which datasets lists show the peer (null: all). Borrows this service.
  ClientQueries::Visible VisibleTo(const std::optional<PeerIdentity>& peer) const;

  // A worker asks on behalf of a put or a read (checkAccess): claims, admits against quotas.
  Status CheckAccess(proto::CheckAccess::Reader request, proto::Reply::Builder reply,
                     TenantEffects& effects);
  Status ShareDataset(proto::ShareDataset::Reader request, const std::optional<PeerIdentity>& peer,
                      proto::Reply::Builder reply, TenantEffects& effects);
  Status SetQuota(proto::SetQuota::Reader request, proto::Reply::Builder reply,
                  TenantEffects& effects);
  void ListTenants(const std::optional<PeerIdentity>& peer, proto::Reply::Builder reply);

  // A worker reported the put a checkAccess reserved bytes for: its bytes count as stored.
  void EndReservation(uint64_t reservation, const std::string& worker_id) {
    registry_.EndReservation(reservation, worker_id);
  }
  // Every tenant with datasets or a quota (or only `only`), by name.
  std::vector<TenantUsage> Usages(const std::optional<std::string>& only);

  // Loads the journal's records (before the loop runs).
  void Restore(std::span<const std::pair<std::string, DatasetAccess>> datasets,
               std::span<const std::pair<std::string, TenantQuota>> quotas);

 private:
  // Whether the index holds blocks of the dataset (common/security/tenant.h).
  bool HasBlocks(const std::string& dataset) const;
  // Ok for a peer the tenant rules do not restrict; else whether its tenant may do `op` on the
  // dataset, kPermissionDenied naming both if not. kWrite claims a dataset nobody owns.
  Status Check(const std::optional<PeerIdentity>& peer, const std::string& dataset, DatasetOp op,
               TenantEffects& effects);
  Status CheckBlocks(const std::optional<PeerIdentity>& peer, std::span<const BlockId> ids,
                     DatasetOp op, TenantEffects& effects);
  TenantRegistry::Claimed Claim(const std::string& dataset, const std::string& tenant,
                                bool has_blocks, TenantEffects& effects);
  // The record as workers get it, with its owner's memory quota.
  void TellWorkers(const std::string& dataset, DatasetAccess access, TenantEffects& effects) const;
  // Bytes of every copy of the tenant's datasets' blocks, by tier.
  TierBytes StoredBytes(const std::string& tenant) const;

  const BlockIndex& index_;
  TenantRegistry registry_;  // owners, shares, quotas
};

}  // namespace bm
