#include "worker/worker_request_kinds.h"

#include <algorithm>
#include <iterator>
#include <string>

#include "common/core/protocol.h"

namespace bm {
namespace {

using Which = proto::Request::Which;
using enum WorkerTenantGating;

Result<std::vector<BlockId>> OneBlock(capnp::Text::Reader text) {
  BM_ASSIGN_OR_RETURN(BlockId block, ParseWireBlockId(text));
  return std::vector<BlockId>{block};
}

Result<std::vector<BlockId>> GetBlockNames(proto::Request::Reader request) {
  return OneBlock(request.getGetBlock().getBlockId());
}

Result<std::vector<BlockId>> ContainsBlockNames(proto::Request::Reader request) {
  return OneBlock(request.getContainsBlock().getBlockId());
}

Result<std::vector<BlockId>> VerifyBlockNames(proto::Request::Reader request) {
  return OneBlock(request.getVerifyBlock().getBlockId());
}

Result<std::vector<BlockId>> GetBlocksNames(proto::Request::Reader request) {
  capnp::List<capnp::Text>::Reader ids = request.getGetBlocks().getBlockIds();
  if (ids.size() > kMaxGetBlocksIds) {
    return InvalidArgumentError("getBlocks asks for " + std::to_string(ids.size()) +
                                " blocks; at most " + std::to_string(kMaxGetBlocksIds));
  }
  std::vector<BlockId> blocks;
  blocks.reserve(ids.size());
  for (capnp::Text::Reader text : ids) {
    BM_ASSIGN_OR_RETURN(BlockId block, ParseWireBlockId(text));
    blocks.push_back(block);
  }
  return blocks;
}

Result<std::vector<BlockId>> ReadShuffleNames(proto::Request::Reader request) {
  return std::vector<BlockId>{BlockId::Shuffle(request.getReadShuffle().getShuffleId(), 0, 0)};
}

// Every kind of the Request union, in the schema's order.
constexpr WorkerRequestKind kKinds[] = {
    {Which::REGISTER_WORKER, "registerWorker", kNotServed},
    {Which::HEARTBEAT, "heartbeat", kNotServed},
    {Which::REPORT_BLOCKS, "reportBlocks", kNotServed},
    {Which::GET_LOCATIONS, "getLocations", kNotServed},
    {Which::LIST_WORKERS, "listWorkers", kNotServed},
    {Which::LIST_BLOCKS, "listBlocks", kNotServed},
    {Which::LIST_RDDS, "listRdds", kNotServed},
    {Which::REMOVE_BLOCKS, "removeBlocks", kMasterOnly},
    {Which::REMOVE_RDD, "removeRdd", kNotServed},
    {Which::PUT_BLOCK, "putBlock", kPut},
    {Which::GET_BLOCK, "getBlock", kRead, GetBlockNames},
    {Which::CONTAINS_BLOCK, "containsBlock", kRead, ContainsBlockNames},
    {Which::PING, "ping", kNeutral},
    {Which::REGISTER_RDD, "registerRdd", kNotServed},
    {Which::ACQUIRE_COMPUTE, "acquireCompute", kNotServed},
    {Which::RENEW_COMPUTE, "renewCompute", kNotServed},
    {Which::RELEASE_COMPUTE, "releaseCompute", kNotServed},
    {Which::DECOMMISSION_WORKER, "decommissionWorker", kNotServed},
    {Which::REPLICATE_BLOCK, "replicateBlock", kMasterOnly},
    {Which::DECOMMISSION, "decommission", kMasterOnly},
    {Which::SHUTDOWN, "shutdown", kMasterOnly},
    {Which::GET_BLOCKS, "getBlocks", kRead, GetBlocksNames},
    {Which::ABORT_PUT, "abortPut", kNeutral},
    {Which::LIST_RDD_PAGE, "listRddPage", kNotServed},
    // Its answer tells whether a block is here, on which tier, intact or not, and with
    // reportedBad set it is counted against the block: a read of it.
    {Which::VERIFY_BLOCK, "verifyBlock", kRead, VerifyBlockNames},
    {Which::CORRUPT_BLOCK, "corruptBlock", kAdminOnly},
    {Which::FETCH_JOURNAL, "fetchJournal", kNotServed},
    {Which::MASTER_INFO, "masterInfo", kNotServed},
    {Which::LEADER_ELECTED, "leaderElected", kMasterOnly},
    {Which::OPEN_LOCAL_READS, "openLocalReads", kNeutral},
    {Which::CHECK_ACCESS, "checkAccess", kNotServed},
    {Which::DATASET_ACCESS, "datasetAccess", kMasterOnly},
    {Which::SHARE_DATASET, "shareDataset", kNotServed},
    {Which::SET_QUOTA, "setQuota", kNotServed},
    {Which::LIST_TENANTS, "listTenants", kNotServed},
    {Which::REGISTER_SHUFFLE, "registerShuffle", kNotServed},
    {Which::GET_SHUFFLE, "getShuffle", kNotServed},
    {Which::COMMIT_SHUFFLE_MAP, "commitShuffleMap", kNotServed},
    {Which::UNREGISTER_SHUFFLE, "unregisterShuffle", kNotServed},
    {Which::LIST_SHUFFLES, "listShuffles", kNotServed},
    {Which::SHUFFLE_ASSIGNED, "shuffleAssigned", kMasterOnly},
    {Which::REMOVE_SHUFFLE, "removeShuffle", kMasterOnly},
    {Which::PUSH_SHUFFLE, "pushShuffle", kShuffleOwner},
    {Which::READ_SHUFFLE, "readShuffle", kRead, ReadShuffleNames},
    {Which::REPORT_SHUFFLE_LOSS, "reportShuffleLoss", kNotServed},
    {Which::SPLIT_SHUFFLE, "splitShuffle", kNotServed},
};

}  // namespace

const WorkerRequestKind* FindWorkerRequestKind(proto::Request::Which which) {
  const auto found =
      std::find_if(std::begin(kKinds), std::end(kKinds),
                   [which](const WorkerRequestKind& kind) { return kind.which == which; });
  return found == std::end(kKinds) ? nullptr : &*found;
}

}  // namespace bm
