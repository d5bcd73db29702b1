#include "master/master_request_kinds.h"

#include <algorithm>
#include <iterator>

#include "common/core/protocol.h"
#include "master/request_decoding.h"

namespace bm {
namespace {

using Which = proto::Request::Which;
using enum MasterTenantGating;

Result<std::vector<BlockId>> OneBlock(capnp::Text::Reader text) {
  BM_ASSIGN_OR_RETURN(BlockId block, ParseWireBlockId(text));
  return std::vector<BlockId>{block};
}

std::vector<BlockId> OneRdd(uint64_t rdd_id) { return {BlockId::Rdd(rdd_id, 0)}; }

Result<std::vector<BlockId>> GetLocationsNames(proto::Request::Reader request) {
  return DecodeBlockIds(request.getGetLocations().getBlockIds());
}

Result<std::vector<BlockId>> ListBlocksNames(proto::Request::Reader request) {
  proto::ListBlocks::Reader list = request.getListBlocks();
  if (list.isRddId()) return OneRdd(list.getRddId());
  return std::vector<BlockId>{};  // all blocks, or the lost ones: filtered by the handler
}

Result<std::vector<BlockId>> RemoveBlocksNames(proto::Request::Reader request) {
  return DecodeBlockIds(request.getRemoveBlocks().getBlockIds());
}

Result<std::vector<BlockId>> RemoveRddNames(proto::Request::Reader request) {
  return OneRdd(request.getRemoveRdd().getRddId());
}

Result<std::vector<BlockId>> RegisterRddNames(proto::Request::Reader request) {
  return OneRdd(request.getRegisterRdd().getRddId());
}

Result<std::vector<BlockId>> AcquireComputeNames(proto::Request::Reader request) {
  return OneBlock(request.getAcquireCompute().getBlockId());
}

Result<std::vector<BlockId>> RenewComputeNames(proto::Request::Reader request) {
  return OneBlock(request.getRenewCompute().getBlockId());
}

Result<std::vector<BlockId>> ReleaseComputeNames(proto::Request::Reader request) {
  return OneBlock(request.getReleaseCompute().getBlockId());
}

std::vector<BlockId> OneShuffle(uint64_t shuffle_id) {
  return {BlockId::Shuffle(shuffle_id, 0, 0)};
}

Result<std::vector<BlockId>> RegisterShuffleNames(proto::Request::Reader request) {
  return OneShuffle(request.getRegisterShuffle().getShuffleId());
}

Result<std::vector<BlockId>> GetShuffleNames(proto::Request::Reader request) {
  return OneShuffle(request.getGetShuffle().getShuffleId());
}

Result<std::vector<BlockId>> CommitShuffleMapNames(proto::Request::Reader request) {
  return OneShuffle(request.getCommitShuffleMap().getShuffleId());
}

Result<std::vector<BlockId>> ReportShuffleLossNames(proto::Request::Reader request) {
  return OneShuffle(request.getReportShuffleLoss().getShuffleId());
}

Result<std::vector<BlockId>> SplitShuffleNames(proto::Request::Reader request) {
  return OneShuffle(request.getSplitShuffle().getShuffleId());
}

Result<std::vector<BlockId>> UnregisterShuffleNames(proto::Request::Reader request) {
  return OneShuffle(request.getUnregisterShuffle().getShuffleId());
}

// Every kind of the Request union, in the schema's order.
constexpr MasterRequestKind kKinds[] = {
    {Which::REGISTER_WORKER, "registerWorker", kRefused},
    {Which::HEARTBEAT, "heartbeat", kRefused},
    {Which::REPORT_BLOCKS, "reportBlocks", kRefused},
    {Which::GET_LOCATIONS, "getLocations", kRead, GetLocationsNames},
    {Which::LIST_WORKERS, "listWorkers", kNeutral},
    {Which::LIST_BLOCKS, "listBlocks", kRead, ListBlocksNames},
    {Which::LIST_RDDS, "listRdds", kFiltered},
    {Which::REMOVE_BLOCKS, "removeBlocks", kRemove, RemoveBlocksNames},
    {Which::REMOVE_RDD, "removeRdd", kRemove, RemoveRddNames},
    {Which::PUT_BLOCK, "putBlock", kNotServed},
    {Which::GET_BLOCK, "getBlock", kNotServed},
    {Which::CONTAINS_BLOCK, "containsBlock", kNotServed},
    {Which::PING, "ping", kNeutral},
    {Which::REGISTER_RDD, "registerRdd", kWrite, RegisterRddNames},
    {Which::ACQUIRE_COMPUTE, "acquireCompute", kCompute, AcquireComputeNames},
    {Which::RENEW_COMPUTE, "renewCompute", kLease, RenewComputeNames},
    {Which::RELEASE_COMPUTE, "releaseCompute", kLease, ReleaseComputeNames},
    {Which::DECOMMISSION_WORKER, "decommissionWorker", kRefused},
    {Which::REPLICATE_BLOCK, "replicateBlock", kNotServed},
    {Which::DECOMMISSION, "decommission", kNotServed},
    {Which::SHUTDOWN, "shutdown", kNotServed},
    {Which::GET_BLOCKS, "getBlocks", kNotServed},
    {Which::ABORT_PUT, "abortPut", kNotServed},
    {Which::LIST_RDD_PAGE, "listRddPage", kFiltered},
    {Which::VERIFY_BLOCK, "verifyBlock", kNotServed},
    {Which::CORRUPT_BLOCK, "corruptBlock", kNotServed},
    {Which::FETCH_JOURNAL, "fetchJournal", kRefused},
    {Which::MASTER_INFO, "masterInfo", kNeutral},
    {Which::LEADER_ELECTED, "leaderElected", kNotServed},
    {Which::OPEN_LOCAL_READS, "openLocalReads", kNotServed},
    {Which::CHECK_ACCESS, "checkAccess", kRefused},
    {Which::DATASET_ACCESS, "datasetAccess", kNotServed},
    {Which::SHARE_DATASET, "shareDataset", kOwner},
    {Which::SET_QUOTA, "setQuota", kRefused},
    {Which::LIST_TENANTS, "listTenants", kFiltered},
    {Which::REGISTER_SHUFFLE, "registerShuffle", kWrite, RegisterShuffleNames},
    {Which::GET_SHUFFLE, "getShuffle", kRead, GetShuffleNames},
    // A map's output into a shuffle the tenant may write; it never claims one.
    {Which::COMMIT_SHUFFLE_MAP, "commitShuffleMap", kLease, CommitShuffleMapNames},
    {Which::UNREGISTER_SHUFFLE, "unregisterShuffle", kRemove, UnregisterShuffleNames},
    {Which::LIST_SHUFFLES, "listShuffles", kFiltered},
    {Which::SHUFFLE_ASSIGNED, "shuffleAssigned", kNotServed},
    {Which::REMOVE_SHUFFLE, "removeShuffle", kNotServed},
    {Which::PUSH_SHUFFLE, "pushShuffle", kNotServed},
    {Which::READ_SHUFFLE, "readShuffle", kNotServed},
    // Drops commits of a shuffle the tenant may write; never claims one.
    {Which::REPORT_SHUFFLE_LOSS, "reportShuffleLoss", kLease, ReportShuffleLossNames},
    {Which::SPLIT_SHUFFLE, "splitShuffle", kLease, SplitShuffleNames},
};

}  // namespace

const MasterRequestKind* FindMasterRequestKind(proto::Request::Which which) {
  const auto found =
      std::find_if(std::begin(kKinds), std::end(kKinds),
                   [which](const MasterRequestKind& kind) { return kind.which == which; });
  return found == std::end(kKinds) ? nullptr : &*found;
}

}  // namespace bm
