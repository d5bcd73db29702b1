#include "worker/wire.h"

#include "common/core/protocol.h"

namespace bm {

void FillBlockStatus(const BlockStatus& status, proto::BlockStatus::Builder out) {
  out.setBlockId(status.id.ToString());
  out.setTier(ToProto(status.tier));
  out.setSize(status.size);
  out.setLevel(ToProto(status.level));
  out.setVersion(status.version);
  out.setDigest(status.digest);
}

bool IsKnownLevel(proto::StorageLevel level) {
  return static_cast<uint16_t>(level) <= static_cast<uint16_t>(proto::StorageLevel::DISK_ONLY2);
}

std::shared_ptr<const zmq::message_t> SharePeer(const zmq::message_t& frame) {
  return std::make_shared<const zmq::message_t>(frame.data(), frame.size());
}

}  // namespace bm
