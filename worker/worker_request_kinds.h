#pragma once

// What a worker does with each kind of request (schema/messages.capnp, the Request union) when
// a tenant-restricted key (a client key, common/security/tenant.h) sends it, in one table that
// WorkerServer::Dispatch looks every such request up in before any handler runs. A kind the
// table lacks is refused to those keys, so a kind added to the schema cannot reach a handler
// around the tenant gate (tests/unit/worker/worker_request_kinds_test.cc walks the union and
// fails for a kind missing here). Which key role may send a kind at all is
// common/security/access_policy.h's, checked before this.

#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/status.h"
#include "schema/messages.capnp.h"

namespace bm {

enum class WorkerTenantGating {
  // Names no block or dataset: ping; abortPut (matched to the sender's own upload);
  // openLocalReads (each read on the local socket is checked there, TenantGate::CheckKnown).
  kNeutral,
  // Names blocks: refused unless the key's tenant may read every one's dataset (TenantGate).
  kRead,
  // A put piece: the tenant must own (or claim) the dataset; the first piece is admitted against
  // its quota (TenantGate::AdmitPut).
  kPut,
  // A shuffle push: only the tenant that registered the shuffle may push to it, which the
  // shuffle store checks against the owner the master named (ShuffleAssigned.owner).
  kShuffleOwner,
  // The master's command (removeBlocks, replicateBlock, decommission, ...): never a client's.
  kMasterOnly,
  // An operator's (corruptBlock, test-only fault injection): never a client's.
  kAdminOnly,
  // A master's request (registerWorker, getLocations, ...): no worker serves it.
  kNotServed,
};

struct WorkerRequestKind {
  proto::Request::Which which;
  const char* name;  // as in the schema
  WorkerTenantGating gating;
  // kRead: the blocks the request names; kInvalidArgument for a malformed id or list.
  Result<std::vector<BlockId>> (*named_blocks)(proto::Request::Reader request) = nullptr;
};

// The table's entry for `which`; nullptr for a kind it lacks (refused to restricted keys).
const WorkerRequestKind* FindWorkerRequestKind(proto::Request::Which which);

}  // namespace bm
