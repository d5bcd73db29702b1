#include "master/tenant_registry.h"

#include <algorithm>

#include "common/core/byte_size.h"

namespace bm {

DatasetAccess TenantRegistry::Lookup(const std::string& dataset, bool has_blocks) const {
  if (auto found = datasets_.find(dataset); found != datasets_.end()) return found->second;
  DatasetAccess access;
  if (has_blocks) access.owner = std::string(kDefaultTenant);
  return access;
}

TenantRegistry::Claimed TenantRegistry::Claim(const std::string& dataset, const std::string& tenant,
                                              bool has_blocks) {
  if (auto found = datasets_.find(dataset); found != datasets_.end()) {
    return {found->second, false};
  }
  DatasetAccess access;
  access.owner = has_blocks ? std::string(kDefaultTenant) : tenant;
  access.generation = next_generation_++;
  datasets_.emplace(dataset, access);
  return {std::move(access), true};
}

Result<DatasetAccess> TenantRegistry::Share(const std::string& dataset, const std::string& reader,
                                            bool unshare) {
  if (!IsValidTenantName(reader)) {
    return InvalidArgumentError("'" + reader + "' is not a tenant name");
  }
  auto found = datasets_.find(dataset);
  if (found == datasets_.end()) {
    return NotFoundError("nobody owns " + dataset + " yet: put or describe it first");
  }
  DatasetAccess& access = found->second;
  if (access.owner == reader) {
    return InvalidArgumentError(dataset + " belongs to tenant '" + reader + "' already");
  }
  auto at = std::lower_bound(access.readers.begin(), access.readers.end(), reader);
  const bool present = at != access.readers.end() && *at == reader;
  if (unshare && present) access.readers.erase(at);
  if (!unshare && !present) access.readers.insert(at, reader);
  access.generation = std::max(access.generation, next_generation_ - 1) + 1;
  next_generation_ = access.generation + 1;
  return access;
}

void TenantRegistry::Restore(const std::string& dataset, DatasetAccess access) {
  next_generation_ = std::max(next_generation_, access.generation + 1);
  std::sort(access.readers.begin(), access.readers.end());
  datasets_.insert_or_assign(dataset, std::move(access));
}

std::optional<TenantQuota> TenantRegistry::QuotaOf(const std::string& tenant) const {
  auto found = quotas_.find(tenant);
  if (found == quotas_.end()) return std::nullopt;
  return found->second;
}

TierBytes TenantRegistry::Reserved(const std::string& tenant) const {
  TierBytes reserved;
  for (const auto& [id, reservation] : reservations_) {
    if (reservation.tenant == tenant) {
      reserved.on(reservation.tier) += reservation.bytes * reservation.unreported;
    }
  }
  return reserved;
}

bool TenantRegistry::Fits(const std::string& tenant, const TenantQuota& quota, Tier tier,
                          uint64_t bytes, uint32_t copies, const TierBytes& stored) const {
  const uint64_t limit = quota.on(tier);
  if (limit == 0) return true;
  const uint64_t used = stored.on(tier) + Reserved(tenant).on(tier);
  // bytes * copies <= limit - used, without overflowing.
  return used <= limit && (bytes == 0 || (limit - used) / bytes >= copies);
}

Result<uint64_t> TenantRegistry::Reserve(const std::string& tenant, const PutCopies& put,
                                         uint64_t bytes, StorageLevel level,
                                         const TierBytes& stored) {
  std::optional<TenantQuota> quota = QuotaOf(tenant);
  if (!quota) return uint64_t{0};
  ExpireReservations();
  // The reservation of the put this copy belongs to, when its first copy made one.
  std::optional<uint64_t> joined;
  if (put.version != 0) {
    for (auto& [id, reservation] : reservations_) {
      if (reservation.tenant != tenant || reservation.version != put.version ||
          reservation.block != put.block) {
        continue;
      }
      if (reservation.unclaimed > 0) {
        // Another copy of a put admitted whole at its first copy.
        --reservation.unclaimed;
        return id;
      }
      joined = id;  // every share taken (a copy placed again after one failed): its own bytes
      break;
    }
  }
  const uint32_t copies = joined ? 1 : std::clamp<uint32_t>(put.copies, 1, kMaxCopies);
  auto fits = [&](Tier tier) { return Fits(tenant, *quota, tier, bytes, copies, stored); };
  std::optional<Tier> tier;
  if (joined) {
    const Tier joined_tier = reservations_.at(*joined).tier;
    if (fits(joined_tier)) tier = joined_tier;
  } else if (!UsesMemory(level)) {
    if (fits(Tier::kDisk)) tier = Tier::kDisk;
  } else if (fits(Tier::kMemory)) {
    tier = Tier::kMemory;
  } else if (UsesDisk(level) && fits(Tier::kDisk)) {
    tier = Tier::kDisk;  // it would be spilled: the tenant's disk quota holds it
  }
  if (!tier) {
    const Tier full = UsesMemory(level) ? Tier::kMemory : Tier::kDisk;
    const TierBytes reserved = Reserved(tenant);
    return OutOfSpaceError("quota exceeded: tenant '" + tenant + "' may keep " +
                           FormatBytes(quota->on(full)) + " on " + std::string(TierName(full)) +
                           " and has " + FormatBytes(stored.on(full) + reserved.on(full)) +
                           " stored or being put; " + put.block + " (" + FormatBytes(bytes) +
                           (copies > 1 ? " x " + std::to_string(copies) + " copies" : "") +
                           ") does not fit");
  }
  if (joined) {
    Reservation& reservation = reservations_.at(*joined);
    ++reservation.unreported;
    reservation.expires = clock_.Now() + reservation_lifetime_;
    return *joined;
  }
  const uint64_t id = next_reservation_++;
  reservations_.emplace(id, Reservation{.tenant = tenant,
                                        .block = put.block,
                                        .version = put.version,
                                        .tier = *tier,
                                        .bytes = bytes,
                                        .unreported = copies,
                                        .unclaimed = copies - 1,
                                        .expires = clock_.Now() + reservation_lifetime_});
  return id;
}

void TenantRegistry::EndReservation(uint64_t reservation, const std::string& worker) {
  auto found = reservations_.find(reservation);
  if (found == reservations_.end()) return;
  std::vector<std::string>& reported = found->second.reported_by;
  if (std::find(reported.begin(), reported.end(), worker) != reported.end()) return;
  reported.push_back(worker);
  if (--found->second.unreported == 0) reservations_.erase(found);
}

size_t TenantRegistry::ExpireReservations() {
  const TimePoint now = clock_.Now();
  return std::erase_if(reservations_,
                       [now](const auto& entry) { return entry.second.expires <= now; });
}

}  // namespace bm
