#pragma once

// Which key role may make which request (docs/security.md "Security"), in one place for the master
// and the workers. With keys off (an --insecure cluster) every sender is anonymous and everything
// is allowed, as before keys existed.
//
//   worker  register, heartbeat and report, only as the worker id its certificate names;
//           serve replication (put and read blocks on other workers)
//   client  put, get, locations, get-or-compute, register an RDD, lists, share a dataset; with
//           a tenant (common/security/tenant.h) also remove blocks and RDDs, its own only
//   admin   what a client may, plus remove blocks, remove an RDD, decommission a worker, quotas
//   master  (workers only take these from the master's key) removeBlocks, replicateBlock,
//           decommission, shutdown, datasetAccess
// Which datasets a client key may touch is the tenant rule's (common/security/tenant.h), checked by
// the master and the workers once a request is allowed here.

#include <optional>
#include <string_view>

#include "blockmgr/status.h"
#include "common/security/curve_keys.h"
#include "schema/messages.capnp.h"

namespace bm {

// kPermissionDenied with a message naming the request and the role, or Ok. `secure` is whether
// the server runs with keys; then a message without an authenticated peer is refused too.
Status AuthorizeMasterRequest(bool secure, const std::optional<PeerIdentity>& peer,
                              proto::Request::Which which);
Status AuthorizeWorkerRequest(bool secure, const std::optional<PeerIdentity>& peer,
                              proto::Request::Which which);

// A worker key speaks only for the worker id in its certificate.
Status AuthorizeWorkerId(bool secure, const std::optional<PeerIdentity>& peer,
                         std::string_view claimed_id);

}  // namespace bm
