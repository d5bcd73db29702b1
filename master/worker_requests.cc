#include "master/worker_requests.h"

#include <algorithm>
#include <unordered_set>
#include <utility>

#include "master/request_decoding.h"

namespace bm {
namespace {

constexpr Duration kMinHeartbeatInterval = std::chrono::milliseconds(50);
// How much of a worker's message about a corrupt copy is logged.
constexpr size_t kMaxVerifyMessageBytes = 512;

}  // namespace

Result<WorkerRegistration> DecodeRegistration(proto::RegisterWorker::Reader request) {
  WorkerRegistration worker;
  BM_ASSIGN_OR_RETURN(worker.id, DecodeName(request.getWorkerId(), "worker id", kMaxWorkerIdBytes));
  BM_ASSIGN_OR_RETURN(worker.address,
                      DecodeName(request.getAddress(), "worker address", kMaxAddressBytes));
  if (!IsSupportedWorkerAddress(worker.address)) {
    return InvalidArgumentError("worker address '" + worker.address + "' is not tcp:// or ipc://");
  }
  BM_ASSIGN_OR_RETURN(worker.labels.host, DecodeLabel(request.getHost(), "host label"));
  BM_ASSIGN_OR_RETURN(worker.labels.rack, DecodeLabel(request.getRack(), "rack label"));
  worker.stats = FromProto(request.getStats());
  std::unordered_set<BlockId> fresh_ids;
  for (capnp::Text::Reader text : request.getFreshBlocks()) {
    BM_ASSIGN_OR_RETURN(BlockId fresh, ParseWireBlockId(text));
    fresh_ids.insert(fresh);
  }
  worker.blocks.reserve(request.getBlocks().size());
  for (proto::BlockStatus::Reader block : request.getBlocks()) {
    BM_ASSIGN_OR_RETURN(BlockChange change, DecodeBlockStatus(block, /*removed=*/false));
    change.fresh = fresh_ids.contains(change.id);
    worker.blocks.push_back(change);
  }
  BM_ASSIGN_OR_RETURN(worker.losses,
                      DecodeLosses(request.getLostBlocks(), request.getLostCopies()));
  worker.started_now = request.getStartedNow();
  worker.follow_ups = request.getFollowUpBlocks();
  for (uint64_t shuffle : request.getShuffles()) worker.shuffles.push_back(shuffle);
  return worker;
}

void EncodeRegistered(Duration heartbeat_timeout, uint64_t epoch,
                      proto::RegisterReply::Builder out) {
  const Duration interval = std::max(heartbeat_timeout / 4, kMinHeartbeatInterval);
  out.setHeartbeatIntervalMs(
      static_cast<uint32_t>(std::min<uint64_t>(ToMillis(interval), UINT32_MAX)));
  out.setEpoch(epoch);
}

Result<WorkerReply> DecodeWorkerReply(IncomingMessage& message) {
  WorkerReply decoded;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::Reply::Reader reply = message.reply();
    decoded.id = reply.getId();
    if (reply.isRemoved()) {
      decoded.removed = true;
    } else if (reply.isVerified()) {
      proto::VerifyReply::Reader answer = reply.getVerified();
      switch (answer.getState()) {
        case proto::VerifyReply::State::INTACT:
          decoded.verified =
              "its bytes match its own digests: its digest metadata differs from the "
              "version's";
          break;
        case proto::VerifyReply::State::CORRUPT: {
          capnp::Text::Reader what = answer.getMessage();
          decoded.verified =
              "corrupt, dropped: " +
              std::string(what.cStr(), std::min<size_t>(what.size(), kMaxVerifyMessageBytes));
          break;
        }
        default:
          decoded.verified = "not found";
          break;
      }
    } else if (reply.isError()) {
      decoded.failure = StatusFromError(reply.getError());
    } else {
      decoded.failure = InvalidArgumentError("unexpected reply to removeBlocks");
    }
    return Status::Ok();
  }));
  return decoded;
}

}  // namespace bm
