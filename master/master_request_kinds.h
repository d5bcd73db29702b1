#pragma once

// What the master does with each kind of request (schema/messages.capnp, the Request union)
// when a tenant-restricted key (a client key, common/security/tenant.h) sends it, in one table that
// MasterServer::Loop::Dispatch looks every such request up in before any handler runs
// (TenantService::Admit). A kind the table lacks is refused to those keys, so a
// kind added to the schema cannot reach a handler around the tenant rules
// (tests/unit/master/master_request_kinds_test.cc walks the union and fails for a kind missing
// here). Which key role may send a kind at all is common/security/access_policy.h's, checked before
// this.

#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/status.h"
#include "schema/messages.capnp.h"

namespace bm {

enum class MasterTenantGating {
  // Names no dataset: ping, masterInfo, listWorkers.
  kNeutral,
  // A listing: the handler shows a tenant only what it may read (listRdds, listRddPage,
  // listTenants).
  kFiltered,
  // Names blocks or an RDD the tenant must be allowed to read (getLocations; listBlocks of one
  // RDD, whose listing of all blocks is filtered).
  kRead,
  // Describes a dataset: the tenant must own it, or claims it when nobody does (registerRdd).
  kWrite,
  // Removes blocks or an RDD: the owner's only (removeBlocks, removeRdd).
  kRemove,
  // acquireCompute: a read of a cached block, else a write (the caller computes and puts it).
  kCompute,
  // renewCompute, releaseCompute: a lease on a block of a dataset the tenant may write (and
  // never claims one).
  kLease,
  // shareDataset: its owner's only, which the handler checks (the dataset is its argument).
  kOwner,
  // Not a client's: a worker's (registerWorker, checkAccess, ...), a standby master's
  // (fetchJournal) or an admin's (setQuota, decommissionWorker).
  kRefused,
  // A worker's request (putBlock, getBlock, ...): the master serves it to nobody.
  kNotServed,
};

struct MasterRequestKind {
  proto::Request::Which which;
  const char* name;  // as in the schema
  MasterTenantGating gating;
  // kRead, kWrite, kRemove, kCompute, kLease: the blocks the request names (an RDD as its
  // partition 0, whose dataset is the RDD's); kInvalidArgument for a malformed id or list.
  Result<std::vector<BlockId>> (*named_blocks)(proto::Request::Reader request) = nullptr;
};

// The table's entry for `which`; nullptr for a kind it lacks (refused to restricted keys).
const MasterRequestKind* FindMasterRequestKind(proto::Request::Which which);

}  // namespace bm
