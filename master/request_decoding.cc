#include "master/request_decoding.h"

#include <algorithm>
#include <chrono>

namespace bm {

Result<std::string> DecodeName(capnp::Text::Reader text, const char* what, size_t max_bytes) {
  if (text.size() == 0) return InvalidArgumentError(std::string(what) + " is empty");
  if (text.size() > max_bytes) {
    return InvalidArgumentError(std::string(what) + " is longer than " + std::to_string(max_bytes) +
                                " bytes");
  }
  return std::string(text.cStr(), text.size());
}

Result<BlockChange> DecodeBlockStatus(proto::BlockStatus::Reader status, bool removed, bool fresh) {
  BM_ASSIGN_OR_RETURN(BlockId id, ParseWireBlockId(status.getBlockId()));
  BlockChange change{id};
  change.removed = removed;
  change.level = FromProto(status.getLevel());
  change.tier = FromProto(status.getTier());
  change.size = status.getSize();
  change.version = status.getVersion();
  change.digest = status.getDigest();
  change.fresh = fresh && !removed;
  return change;
}

Result<std::vector<BlockId>> DecodeBlockIds(capnp::List<capnp::Text>::Reader ids) {
  std::vector<BlockId> out;
  out.reserve(ids.size());
  for (capnp::Text::Reader text : ids) {
    BM_ASSIGN_OR_RETURN(BlockId id, ParseWireBlockId(text));
    out.push_back(id);
  }
  return out;
}

Result<std::string> DecodeLabel(capnp::Text::Reader text, const char* what) {
  if (text.size() > kMaxLabelBytes) {
    return InvalidArgumentError(std::string(what) + " is longer than " +
                                std::to_string(kMaxLabelBytes) + " bytes");
  }
  return std::string(text.cStr(), text.size());
}

proto::WorkerState ToProto(WorkerState state) {
  switch (state) {
    case WorkerState::kActive:
      return proto::WorkerState::ACTIVE;
    case WorkerState::kUnconfirmed:
      return proto::WorkerState::UNCONFIRMED;
    case WorkerState::kDecommissioning:
      return proto::WorkerState::DECOMMISSIONING;
  }
  return proto::WorkerState::ACTIVE;
}

bool IsSupportedWorkerAddress(std::string_view address) {
  return address.starts_with("tcp://") || address.starts_with("ipc://");
}

MasterOp OpOf(proto::Request::Which which) {
  switch (which) {
    case proto::Request::REGISTER_WORKER:
      return MasterOp::kRegisterWorker;
    case proto::Request::HEARTBEAT:
      return MasterOp::kHeartbeat;
    case proto::Request::REPORT_BLOCKS:
      return MasterOp::kReportBlocks;
    case proto::Request::GET_LOCATIONS:
      return MasterOp::kGetLocations;
    case proto::Request::LIST_WORKERS:
      return MasterOp::kListWorkers;
    case proto::Request::LIST_BLOCKS:
      return MasterOp::kListBlocks;
    case proto::Request::LIST_RDDS:
    case proto::Request::LIST_RDD_PAGE:
      return MasterOp::kListRdds;
    case proto::Request::REMOVE_BLOCKS:
      return MasterOp::kRemoveBlocks;
    case proto::Request::REMOVE_RDD:
      return MasterOp::kRemoveRdd;
    case proto::Request::REGISTER_RDD:
      return MasterOp::kRegisterRdd;
    case proto::Request::ACQUIRE_COMPUTE:
      return MasterOp::kAcquireCompute;
    case proto::Request::RENEW_COMPUTE:
      return MasterOp::kRenewCompute;
    case proto::Request::RELEASE_COMPUTE:
      return MasterOp::kReleaseCompute;
    case proto::Request::DECOMMISSION_WORKER:
      return MasterOp::kDecommission;
    case proto::Request::PING:
      return MasterOp::kPing;
    default:
      return MasterOp::kOther;
  }
}

uint64_t ToMillis(Duration d) {
  return static_cast<uint64_t>(
      std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(d).count()));
}

}  // namespace bm
