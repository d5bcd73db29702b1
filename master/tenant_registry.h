#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "blockmgr/status.h"
#include "blockmgr/storage_level.h"
#include "blockmgr/tier.h"
#include "common/core/clock.h"
#include "common/security/tenant.h"

namespace bm {

// A tenant's byte quotas across the cluster, every copy counted; 0 on a tier: no limit there.
using TenantQuota = TierBytes;

// The master's tenant state (docs/security.md "Tenants, shares and quotas", PROTOCOL.md "Tenants"):
// who owns each dataset and with whom it is shared, each tenant's quotas, and the bytes admitted
// against them by puts still on their way (reservations).
//
// A dataset nobody recorded is free: the first put (a worker's claim) or description
// (registerRdd) records its tenant as the owner. A free dataset that has blocks anyway
// (stored before tenants existed, or by an admin key) belongs to the default tenant. Owners
// are kept when the dataset's blocks are removed, so a dataset id never changes hands unseen.
//
// Admission (Reserve) is exact: a put is admitted when the owner's stored bytes on the tier,
// plus the bytes of the reservations not reported yet, plus its own bytes fit the quota. A put
// of several copies is admitted whole, at its first copy: the reservation holds every copy's
// bytes, and the other copies (same block and version) take their share of it without being
// admitted again, so a put the quota refuses stores no copy. Each copy's share ends when its
// worker reports it (EndReservation), the rest after reservation_lifetime (a put that never
// finished).
//
// Knows no sockets or journal: the caller journals what the methods say changed. Not
// thread-safe: owned by the master's loop.
class TenantRegistry {
 public:
  TenantRegistry(const Clock& clock, Duration reservation_lifetime)
      : clock_(clock), reservation_lifetime_(reservation_lifetime) {}

  // ---- datasets ----

  // Who may use `dataset` now; `has_blocks`: whether the index holds blocks of it.
  DatasetAccess Lookup(const std::string& dataset, bool has_blocks) const;
  // Lookup, recording `tenant` as the owner of a free dataset first. `recorded`: the record
  // changed (journal it).
  struct Claimed {
    DatasetAccess access;
    bool recorded = false;
  };
  Claimed Claim(const std::string& dataset, const std::string& tenant, bool has_blocks);
  // Shares (or stops sharing) an owned dataset with `reader`; returns the changed record, or
  // kNotFound for a dataset nobody owns, kInvalidArgument for a bad name or the owner itself.
  Result<DatasetAccess> Share(const std::string& dataset, const std::string& reader, bool unshare);
  // A record read back from the journal.
  void Restore(const std::string& dataset, DatasetAccess access);
  const std::map<std::string, DatasetAccess>& datasets() const { return datasets_; }

  // ---- quotas ----

  void SetQuota(const std::string& tenant, TenantQuota quota) { quotas_[tenant] = quota; }
  bool RemoveQuota(const std::string& tenant) { return quotas_.erase(tenant) > 0; }
  std::optional<TenantQuota> QuotaOf(const std::string& tenant) const;
  const std::map<std::string, TenantQuota>& quotas() const { return quotas_; }

  // Which put a copy belongs to: its block, its version token (0: unknown, never shared) and
  // how many copies the put stores (0 counts as one).
  struct PutCopies {
    std::string block;
    uint64_t version = 0;
    uint32_t copies = 1;
  };
  // The most copies one put reserves for; a larger count is taken as this many.
  static constexpr uint32_t kMaxCopies = 16;
  // Admits one copy of a put of `bytes` a copy at `level` into a dataset of `tenant`, whose
  // stored bytes are `stored`: returns the reservation (0: the tenant has no quota, nothing
  // reserved), or kOutOfSpace "quota exceeded ..." naming the tenant, the tier, the quota and
  // what is in use. The first copy of a put reserves for all of `put.copies`; a later copy of the
  // same put takes a share of that reservation (or, when every share is taken, as for a copy
  // placed again after one failed, is admitted for its own bytes). A level that may spill
  // (MEMORY_AND_DISK) is admitted on disk when memory is full.
  Result<uint64_t> Reserve(const std::string& tenant, const PutCopies& put, uint64_t bytes,
                           StorageLevel level, const TierBytes& stored);
  // `worker`'s copy under the reservation was reported (or failed): its bytes stop counting as
  // reserved; the reservation ends with its last copy. A worker's report heard again (a report
  // sent twice) ends nothing more.
  void EndReservation(uint64_t reservation, const std::string& worker);
  // Drops reservations past their lifetime; returns how many.
  size_t ExpireReservations();
  // Bytes reserved and not reported yet.
  TierBytes Reserved(const std::string& tenant) const;

 private:
  struct Reservation {
    std::string tenant;
    std::string block;
    uint64_t version;  // 0: shared by no other copy
    Tier tier;
    uint64_t bytes;       // of one copy
    uint32_t unreported;  // copies whose bytes are reserved
    uint32_t unclaimed;   // copies no worker asked for yet
    TimePoint expires;
    std::vector<std::string> reported_by{};  // workers whose copies were reported
  };
  // Whether `copies` more copies of `bytes` fit `tenant`'s quota on `tier`.
  bool Fits(const std::string& tenant, const TenantQuota& quota, Tier tier, uint64_t bytes,
            uint32_t copies, const TierBytes& stored) const;

  const Clock& clock_;
  const Duration reservation_lifetime_;
  std::map<std::string, DatasetAccess> datasets_;  // recorded owners
  std::map<std::string, TenantQuota> quotas_;
  std::unordered_map<uint64_t, Reservation> reservations_;
  uint64_t next_reservation_ = 1;
  uint64_t next_generation_ = 1;
};

}  // namespace bm
