#include "master/tenant_registry.h"

#include <algorithm>

#include "common/byte_size.h"

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
    if (reservation.tenant == tenant) reserved.on(reservation.tier) += reservation.bytes;
  }
  return reserved;
}

Result<uint64_t> TenantRegistry::Reserve(const std::string& tenant, const std::string& block,
                                         uint64_t bytes, StorageLevel level,
                                         const TierBytes& stored) {
  std::optional<TenantQuota> quota = QuotaOf(tenant);
  if (!quota) return uint64_t{0};
  ExpireReservations();
  const TierBytes reserved = Reserved(tenant);
  auto fits = [&](Tier tier) {
    const uint64_t limit = quota->on(tier);
    if (limit == 0) return true;
    const uint64_t used = stored.on(tier) + reserved.on(tier);
    return used <= limit && bytes <= limit - used;
  };
  std::optional<Tier> tier;
  if (!UsesMemory(level)) {
    if (fits(Tier::kDisk)) tier = Tier::kDisk;
  } else if (fits(Tier::kMemory)) {
    tier = Tier::kMemory;
  } else if (UsesDisk(level) && fits(Tier::kDisk)) {
    tier = Tier::kDisk;  // it would be spilled: the tenant's disk quota holds it
  }
  if (!tier) {
    const Tier full = UsesMemory(level) ? Tier::kMemory : Tier::kDisk;
    return OutOfSpaceError("quota exceeded: tenant '" + tenant + "' may keep " +
                           FormatBytes(quota->on(full)) + " on " + std::string(TierName(full)) +
                           " and has " + FormatBytes(stored.on(full) + reserved.on(full)) +
                           " stored or being put; " + block + " (" + FormatBytes(bytes) +
                           ") does not fit");
  }
  const uint64_t id = next_reservation_++;
  reservations_.emplace(
      id, Reservation{tenant, block, *tier, bytes, clock_.Now() + reservation_lifetime_});
  return id;
}

size_t TenantRegistry::ExpireReservations() {
  const TimePoint now = clock_.Now();
  return std::erase_if(reservations_,
                       [now](const auto& entry) { return entry.second.expires <= now; });
}

}  // namespace bm
