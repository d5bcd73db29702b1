#include "client/copy_verification.h"

#include "common/core/protocol.h"
#include "common/net/transport.h"
#include "transfer/peer_calls.h"
#include "transfer/worker_channels.h"

namespace bm {

Result<CopyCheck> VerifyWorkerCopy(WorkerChannels& workers, const BlockLocation& location,
                                   const BlockId& id, bool reported_bad) {
  CopyCheck check{id, location.worker_id, CopyCheck::State::kUnreachable, location.tier};
  Result<RpcChannel*> channel = workers.Channel(location.address);
  if (!channel.ok()) {
    check.message = channel.status().message();
    return check;
  }
  const std::string peer = "worker " + location.worker_id;
  capnp::MallocMessageBuilder message;
  proto::VerifyBlock::Builder verify = message.initRoot<proto::Request>().initVerifyBlock();
  verify.setBlockId(id.ToString());
  verify.setReportedBad(reported_bad);
  Result<IncomingMessage> reply = CallPeer(**channel, workers.timeout(), peer, message);
  if (!reply.ok()) {
    if (reply.status().code() != StatusCode::kUnavailable) return reply.status();
    check.message = reply.status().message();
    return check;
  }
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::Reply::Reader r = reply->reply();
    if (!r.isVerified()) return UnexpectedReply(peer, "verified");
    proto::VerifyReply::Reader verified = r.getVerified();
    switch (verified.getState()) {
      case proto::VerifyReply::State::INTACT:
        check.state = CopyCheck::State::kIntact;
        break;
      case proto::VerifyReply::State::CORRUPT:
        check.state = CopyCheck::State::kCorrupt;
        break;
      default:
        check.state = CopyCheck::State::kGone;
        break;
    }
    check.tier = FromProto(verified.getTier());
    check.digested = verified.getDigested();
    check.message = verified.getMessage();
    return Status::Ok();
  }));
  return check;
}

}  // namespace bm
