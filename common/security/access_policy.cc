#include "common/security/access_policy.h"

#include <string>

namespace bm {
namespace {

using Which = proto::Request::Which;

const char* RequestName(Which which) {
  switch (which) {
    case Which::REGISTER_WORKER:
      return "registerWorker";
    case Which::HEARTBEAT:
      return "heartbeat";
    case Which::REPORT_BLOCKS:
      return "reportBlocks";
    case Which::GET_LOCATIONS:
      return "getLocations";
    case Which::LIST_WORKERS:
      return "listWorkers";
    case Which::LIST_BLOCKS:
      return "listBlocks";
    case Which::LIST_RDD_PAGE:
      return "listRddPage";
    case Which::LIST_RDDS:
      return "listRdds";
    case Which::REMOVE_BLOCKS:
      return "removeBlocks";
    case Which::REMOVE_RDD:
      return "removeRdd";
    case Which::PUT_BLOCK:
      return "putBlock";
    case Which::GET_BLOCK:
      return "getBlock";
    case Which::OPEN_LOCAL_READS:
      return "openLocalReads";
    case Which::CONTAINS_BLOCK:
      return "containsBlock";
    case Which::PING:
      return "ping";
    case Which::REGISTER_RDD:
      return "registerRdd";
    case Which::ACQUIRE_COMPUTE:
      return "acquireCompute";
    case Which::RENEW_COMPUTE:
      return "renewCompute";
    case Which::RELEASE_COMPUTE:
      return "releaseCompute";
    case Which::DECOMMISSION_WORKER:
      return "decommissionWorker";
    case Which::REPLICATE_BLOCK:
      return "replicateBlock";
    case Which::DECOMMISSION:
      return "decommission";
    case Which::SHUTDOWN:
      return "shutdown";
    case Which::GET_BLOCKS:
      return "getBlocks";
    case Which::ABORT_PUT:
      return "abortPut";
    case Which::VERIFY_BLOCK:
      return "verifyBlock";
    case Which::CORRUPT_BLOCK:
      return "corruptBlock";
    case Which::FETCH_JOURNAL:
      return "fetchJournal";
    case Which::MASTER_INFO:
      return "masterInfo";
    case Which::LEADER_ELECTED:
      return "leaderElected";
    case Which::CHECK_ACCESS:
      return "checkAccess";
    case Which::DATASET_ACCESS:
      return "datasetAccess";
    case Which::SHARE_DATASET:
      return "shareDataset";
    case Which::SET_QUOTA:
      return "setQuota";
    case Which::LIST_TENANTS:
      return "listTenants";
    case Which::REGISTER_SHUFFLE:
      return "registerShuffle";
    case Which::GET_SHUFFLE:
      return "getShuffle";
    case Which::COMMIT_SHUFFLE_MAP:
      return "commitShuffleMap";
    case Which::UNREGISTER_SHUFFLE:
      return "unregisterShuffle";
    case Which::LIST_SHUFFLES:
      return "listShuffles";
    case Which::SHUFFLE_ASSIGNED:
      return "shuffleAssigned";
    case Which::REMOVE_SHUFFLE:
      return "removeShuffle";
    case Which::PUSH_SHUFFLE:
      return "pushShuffle";
    case Which::READ_SHUFFLE:
      return "readShuffle";
    case Which::REPORT_SHUFFLE_LOSS:
      return "reportShuffleLoss";
    case Which::SPLIT_SHUFFLE:
      return "splitShuffle";
  }
  return "this request";
}

bool IsClientOrAdmin(KeyRole role) { return role == KeyRole::kClient || role == KeyRole::kAdmin; }

Status Denied(const PeerIdentity& peer, Which which, const char* who_may) {
  return PermissionDeniedError(std::string(RequestName(which)) + " is not allowed for " +
                               KeyRoleName(peer.role) + " key '" + peer.name + "': only " +
                               who_may + " keys may send it");
}

// The peer, or kPermissionDenied when a secure server got a message without one (cannot
// happen with a ZAP handler bound; refusing keeps a mistake from opening the door).
Result<const PeerIdentity*> Authenticated(bool secure, const std::optional<PeerIdentity>& peer) {
  if (!peer) {
    if (secure) return PermissionDeniedError("the sender is not authenticated");
    return static_cast<const PeerIdentity*>(nullptr);
  }
  return &*peer;
}

}  // namespace

Status AuthorizeMasterRequest(bool secure, const std::optional<PeerIdentity>& maybe_peer,
                              Which which) {
  BM_ASSIGN_OR_RETURN(const PeerIdentity* peer, Authenticated(secure, maybe_peer));
  if (peer == nullptr) return Status::Ok();
  switch (which) {
    case Which::PING:
    case Which::MASTER_INFO:
      return Status::Ok();
    case Which::FETCH_JOURNAL:  // a standby master following the leader's journal
      if (peer->role == KeyRole::kMaster) return Status::Ok();
      return Denied(*peer, which, "master");
    case Which::REGISTER_WORKER:
    case Which::HEARTBEAT:
    case Which::REPORT_BLOCKS:
    case Which::CHECK_ACCESS:
      if (peer->role == KeyRole::kWorker) return Status::Ok();
      return Denied(*peer, which, "worker");
    case Which::GET_LOCATIONS:
    case Which::LIST_WORKERS:
    case Which::LIST_BLOCKS:
    case Which::LIST_RDDS:
    case Which::LIST_RDD_PAGE:
    case Which::REGISTER_RDD:
    case Which::ACQUIRE_COMPUTE:
    case Which::RENEW_COMPUTE:
    case Which::RELEASE_COMPUTE:
    case Which::SHARE_DATASET:  // its owner only: the master checks the dataset's owner
    case Which::LIST_TENANTS:   // a client key sees its own tenant only
    // Shuffles: a tenant's own (the master checks the dataset shuffle_<id>, as for RDDs).
    case Which::REGISTER_SHUFFLE:
    case Which::GET_SHUFFLE:
    case Which::COMMIT_SHUFFLE_MAP:
    case Which::UNREGISTER_SHUFFLE:
    case Which::LIST_SHUFFLES:
    case Which::REPORT_SHUFFLE_LOSS:
    case Which::SPLIT_SHUFFLE:
      if (IsClientOrAdmin(peer->role)) return Status::Ok();
      return Denied(*peer, which, "client or admin");
    case Which::REMOVE_BLOCKS:
    case Which::REMOVE_RDD:
      // A key with a tenant removes its tenant's datasets (the master checks the owner); a
      // client key without one may not, as before tenants existed.
      if (peer->role == KeyRole::kAdmin) return Status::Ok();
      if (peer->role == KeyRole::kClient && !peer->tenant.empty()) return Status::Ok();
      return Denied(*peer, which, "admin");
    case Which::SET_QUOTA:
    case Which::DECOMMISSION_WORKER:
      if (peer->role == KeyRole::kAdmin) return Status::Ok();
      return Denied(*peer, which, "admin");
    default:
      return Status::Ok();  // not a master request: the dispatcher answers "unsupported"
  }
}

Status AuthorizeWorkerRequest(bool secure, const std::optional<PeerIdentity>& maybe_peer,
                              Which which) {
  BM_ASSIGN_OR_RETURN(const PeerIdentity* peer, Authenticated(secure, maybe_peer));
  if (peer == nullptr) return Status::Ok();
  switch (which) {
    case Which::PING:
      return Status::Ok();
    case Which::PUT_BLOCK:
    case Which::ABORT_PUT:  // only the sender's own uploads: matched by sender and uploadId
    case Which::GET_BLOCK:
    case Which::GET_BLOCKS:
    case Which::OPEN_LOCAL_READS:  // reads through shared memory: who may read over TCP
    case Which::CONTAINS_BLOCK:
    case Which::PUSH_SHUFFLE:
    case Which::READ_SHUFFLE:
      // Workers put and read blocks on each other when they replicate.
      if (IsClientOrAdmin(peer->role) || peer->role == KeyRole::kWorker) return Status::Ok();
      return Denied(*peer, which, "client, admin or worker");
    case Which::VERIFY_BLOCK:
      // The master too: it asks for a copy reported with a mismatching digest to be verified.
      if (IsClientOrAdmin(peer->role) || peer->role == KeyRole::kWorker ||
          peer->role == KeyRole::kMaster) {
        return Status::Ok();
      }
      return Denied(*peer, which, "client, admin, worker or master");
    case Which::CORRUPT_BLOCK:
      // Test-only fault injection, which destroys a stored copy: an operator's key at least.
      if (peer->role == KeyRole::kAdmin) return Status::Ok();
      return Denied(*peer, which, "admin");
    case Which::REMOVE_BLOCKS:
    case Which::REPLICATE_BLOCK:
    case Which::DECOMMISSION:
    case Which::SHUTDOWN:
    case Which::LEADER_ELECTED:
    case Which::DATASET_ACCESS:
    case Which::SHUFFLE_ASSIGNED:
    case Which::REMOVE_SHUFFLE:
      if (peer->role == KeyRole::kMaster) return Status::Ok();
      return Denied(*peer, which, "the master's");
    default:
      return Status::Ok();  // not a worker request: the dispatcher answers "not served"
  }
}

Status AuthorizeWorkerId(bool secure, const std::optional<PeerIdentity>& peer,
                         std::string_view claimed_id) {
  if (!peer) {
    if (secure) return PermissionDeniedError("the sender is not authenticated");
    return Status::Ok();
  }
  if (peer->role == KeyRole::kWorker && peer->name == claimed_id) return Status::Ok();
  return PermissionDeniedError("key '" + peer->name + "' may not speak for worker '" +
                               std::string(claimed_id) + "'");
}

}  // namespace bm
