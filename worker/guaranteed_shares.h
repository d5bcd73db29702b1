#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "blockmgr/block_id.h"
#include "common/security/tenant.h"

namespace bm {

// Whether the memory tier may evict one block to make room for another: a rule MemoryStore
// asks on top of its own (pins, the block's own RDD) for every victim it considers.
class EvictionGuard {
 public:
  virtual ~EvictionGuard() = default;
  virtual bool MayEvict(const BlockId& victim, const BlockId& for_block) const = 0;
};

// Tenants' guaranteed shares of memory (docs/security.md "Tenants, shares and quotas"): a tenant
// with a memory quota is guaranteed what its quota admits, so another tenant's put never evicts (or
// spills) its blocks. The master admits a tenant's puts only within its quota, so such a tenant
// is always at or under its quota, and any eviction for someone else would take it further
// below. A tenant evicts its own blocks freely, and a tenant without a memory quota has no
// guarantee.
//
// Knows each dataset's owner and the owner's memory quota as the master said (checkAccess
// answers and datasetAccess updates, through TenantGate). A block of a dataset it has not heard
// of has no guarantee; a put into one (an admin key's, a copy) evicts no guaranteed block.
//
// Not thread-safe: owned by the worker's loop, whose MemoryStore asks it.
class GuaranteedShares : public EvictionGuard {
 public:
  // The master's word on a dataset's owner and that owner's memory quota (0: none).
  void Learn(const std::string& dataset, const std::string& owner, uint64_t memory_quota);

  bool MayEvict(const BlockId& victim, const BlockId& for_block) const override;

 private:
  struct Owner {
    std::string tenant;
    uint64_t memory_quota = 0;
  };
  const Owner* Find(const BlockId& id) const;

  std::unordered_map<std::string, Owner> owners_;  // by dataset
};

}  // namespace bm
