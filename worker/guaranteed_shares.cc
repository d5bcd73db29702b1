#include "worker/guaranteed_shares.h"

namespace bm {

void GuaranteedShares::Learn(const std::string& dataset, const std::string& owner,
                             uint64_t memory_quota) {
  if (owner.empty()) return;
  owners_.insert_or_assign(dataset, Owner{owner, memory_quota});
}

const GuaranteedShares::Owner* GuaranteedShares::Find(const BlockId& id) const {
  auto found = owners_.find(DatasetOf(id));
  return found == owners_.end() ? nullptr : &found->second;
}

bool GuaranteedShares::MayEvict(const BlockId& victim, const BlockId& for_block) const {
  const Owner* victim_owner = Find(victim);
  if (victim_owner == nullptr || victim_owner->memory_quota == 0) return true;
  const Owner* for_owner = Find(for_block);
  return for_owner != nullptr && for_owner->tenant == victim_owner->tenant;
}

}  // namespace bm
