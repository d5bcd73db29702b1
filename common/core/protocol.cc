#include "common/core/protocol.h"

#include <algorithm>
#include <string_view>

namespace bm {

proto::StorageLevel ToProto(StorageLevel level) {
  switch (level) {
    case StorageLevel::kMemoryOnly:
      return proto::StorageLevel::MEMORY_ONLY;
    case StorageLevel::kMemoryAndDisk:
      return proto::StorageLevel::MEMORY_AND_DISK;
    case StorageLevel::kDiskOnly:
      return proto::StorageLevel::DISK_ONLY;
    case StorageLevel::kMemoryOnly2:
      return proto::StorageLevel::MEMORY_ONLY2;
    case StorageLevel::kMemoryAndDisk2:
      return proto::StorageLevel::MEMORY_AND_DISK2;
    case StorageLevel::kDiskOnly2:
      return proto::StorageLevel::DISK_ONLY2;
  }
  BM_CHECK(false && "unknown storage level");
  return proto::StorageLevel::MEMORY_ONLY;
}

StorageLevel FromProto(proto::StorageLevel level) {
  switch (level) {
    case proto::StorageLevel::MEMORY_ONLY:
      return StorageLevel::kMemoryOnly;
    case proto::StorageLevel::MEMORY_AND_DISK:
      return StorageLevel::kMemoryAndDisk;
    case proto::StorageLevel::DISK_ONLY:
      return StorageLevel::kDiskOnly;
    case proto::StorageLevel::MEMORY_ONLY2:
      return StorageLevel::kMemoryOnly2;
    case proto::StorageLevel::MEMORY_AND_DISK2:
      return StorageLevel::kMemoryAndDisk2;
    case proto::StorageLevel::DISK_ONLY2:
      return StorageLevel::kDiskOnly2;
  }
  // An enum value from a newer or hostile peer: treat as the most conservative level.
  return StorageLevel::kMemoryAndDisk;
}

proto::Tier ToProto(Tier tier) {
  return tier == Tier::kMemory ? proto::Tier::MEMORY : proto::Tier::DISK;
}

Tier FromProto(proto::Tier tier) {
  return tier == proto::Tier::MEMORY ? Tier::kMemory : Tier::kDisk;
}

proto::LostCause ToProto(LostCause cause) { return static_cast<proto::LostCause>(cause); }

LostCause FromProto(proto::LostCause cause) {
  return LostCauseFromNumber(static_cast<uint64_t>(cause)).value_or(LostCause::kStorageError);
}

void ToProto(const WorkerStats& stats, proto::WorkerStats::Builder out) {
  out.setMemoryCapacity(stats.memory_capacity);
  out.setMemoryUsed(stats.memory_used);
  out.setDiskUsed(stats.disk_used);
  out.setDiskCapacity(stats.disk_capacity);
  out.setBlockCount(stats.block_count);
  out.setDiskReadOnly(stats.disk_read_only);
  out.setMemoryPinned(stats.memory_pinned);
  if (!stats.disks.empty()) {
    auto disks = out.initDisks(static_cast<unsigned>(stats.disks.size()));
    for (unsigned i = 0; i < stats.disks.size(); ++i) {
      const DiskStats& disk = stats.disks[i];
      auto d = disks[i];
      d.setPath(disk.path);
      d.setUsed(disk.used);
      d.setCapacity(disk.capacity);
      d.setLimit(disk.limit);
      d.setState(disk.state == DiskState::kFailed     ? proto::DiskState::FAILED
                 : disk.state == DiskState::kReadOnly ? proto::DiskState::READ_ONLY
                                                      : proto::DiskState::OK);
      d.setReason(disk.reason);
    }
  }
}

WorkerStats FromProto(proto::WorkerStats::Reader stats) {
  WorkerStats out{.memory_capacity = stats.getMemoryCapacity(),
                  .memory_used = stats.getMemoryUsed(),
                  .disk_used = stats.getDiskUsed(),
                  .disk_capacity = stats.getDiskCapacity(),
                  .block_count = stats.getBlockCount(),
                  .disk_read_only = stats.getDiskReadOnly(),
                  .memory_pinned = stats.getMemoryPinned()};
  // A hostile or broken sender's list is cut short, and so is its text.
  static constexpr size_t kMaxText = 1024;
  auto text = [](capnp::Text::Reader t) {
    return std::string(t.cStr(), std::min<size_t>(t.size(), kMaxText));
  };
  for (auto d : stats.getDisks()) {
    if (out.disks.size() >= kMaxDisksShown) break;
    DiskState state = DiskState::kOk;
    if (d.getState() == proto::DiskState::FAILED) state = DiskState::kFailed;
    if (d.getState() == proto::DiskState::READ_ONLY) state = DiskState::kReadOnly;
    out.disks.push_back({text(d.getPath()), d.getUsed(), d.getCapacity(), d.getLimit(), state,
                         text(d.getReason())});
  }
  return out;
}

void SetError(proto::Error::Builder error, const Status& status) {
  proto::ErrorCode code = proto::ErrorCode::INTERNAL;
  switch (status.code()) {
    case StatusCode::kOk:
    case StatusCode::kInternal:
      code = proto::ErrorCode::INTERNAL;
      break;
    case StatusCode::kNotFound:
      code = proto::ErrorCode::NOT_FOUND;
      break;
    case StatusCode::kInvalidArgument:
      code = proto::ErrorCode::INVALID_ARGUMENT;
      break;
    case StatusCode::kOutOfSpace:
      code = proto::ErrorCode::OUT_OF_SPACE;
      break;
    case StatusCode::kUnavailable:
      code = proto::ErrorCode::UNAVAILABLE;
      break;
    case StatusCode::kUnknownWorker:
      code = proto::ErrorCode::UNKNOWN_WORKER;
      break;
    case StatusCode::kAborted:
      code = proto::ErrorCode::ABORTED;
      break;
    case StatusCode::kTooLarge:
      code = proto::ErrorCode::TOO_LARGE;
      break;
    case StatusCode::kPermissionDenied:
      code = proto::ErrorCode::PERMISSION_DENIED;
      break;
    case StatusCode::kDataLoss:
      code = proto::ErrorCode::DATA_LOSS;
      break;
  }
  error.setCode(code);
  error.setMessage(status.message());
}

Status StatusFromError(proto::Error::Reader error) {
  std::string message = error.getMessage();
  switch (error.getCode()) {
    case proto::ErrorCode::INTERNAL:
      return {StatusCode::kInternal, message};
    case proto::ErrorCode::NOT_FOUND:
      return {StatusCode::kNotFound, message};
    case proto::ErrorCode::INVALID_ARGUMENT:
      return {StatusCode::kInvalidArgument, message};
    case proto::ErrorCode::OUT_OF_SPACE:
      return {StatusCode::kOutOfSpace, message};
    case proto::ErrorCode::UNAVAILABLE:
      return {StatusCode::kUnavailable, message};
    case proto::ErrorCode::UNKNOWN_WORKER:
      return {StatusCode::kUnknownWorker, message};
    case proto::ErrorCode::ABORTED:
      return {StatusCode::kAborted, message};
    case proto::ErrorCode::TOO_LARGE:
      return {StatusCode::kTooLarge, message};
    case proto::ErrorCode::PERMISSION_DENIED:
      return {StatusCode::kPermissionDenied, message};
    case proto::ErrorCode::DATA_LOSS:
      return {StatusCode::kDataLoss, message};
  }
  return {StatusCode::kInternal, "unknown error code from peer: " + message};
}

Result<BlockId> ParseWireBlockId(capnp::Text::Reader text) {
  return BlockId::Parse(std::string_view(text.cStr(), text.size()));
}

}  // namespace bm
