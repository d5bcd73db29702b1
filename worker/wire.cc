#include "worker/wire.h"

#include "common/protocol.h"

namespace bm {

void FillBlockStatus(const BlockStatus& status, proto::BlockStatus::Builder out) {
  out.setBlockId(status.id.ToString());
  out.setTier(ToProto(status.tier));
  out.setSize(status.size);
  out.setLevel(ToProto(status.level));
  out.setVersion(status.version);
  out.setDigest(status.digest);
}

}  // namespace bm
