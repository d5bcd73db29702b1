#include "master/worker_commands.h"

#include <capnp/message.h>

#include "common/core/protocol.h"

namespace bm {

Status SendRemoveBlocks(WorkerSender& sender, const RemovalCoordinator::Command& command) {
  capnp::MallocMessageBuilder message;
  proto::Request::Builder request = message.initRoot<proto::Request>();
  request.setId(command.request_id);
  proto::RemoveBlocks::Builder remove = request.initRemoveBlocks();
  auto ids = remove.initBlockIds(command.blocks.size());
  for (size_t i = 0; i < command.blocks.size(); ++i) ids.set(i, command.blocks[i].ToString());
  if (!command.versions.empty()) {
    auto versions = remove.initVersions(command.versions.size());
    for (size_t i = 0; i < command.versions.size(); ++i) versions.set(i, command.versions[i]);
  }
  return sender.Send(command.worker_id, message);
}

Status SendReplicateBlock(WorkerSender& sender, uint64_t request_id,
                          const ReplicationPlanner::CopyCommand& command,
                          const std::vector<std::string>& target_keys) {
  BM_CHECK(target_keys.size() == command.targets.size());
  capnp::MallocMessageBuilder message;
  proto::Request::Builder request = message.initRoot<proto::Request>();
  request.setId(request_id);
  proto::ReplicateBlock::Builder copy = request.initReplicateBlock();
  copy.setBlockId(command.block.ToString());
  copy.setLevel(ToProto(command.level));
  auto targets = copy.initTargets(command.targets.size());
  for (size_t i = 0; i < command.targets.size(); ++i) {
    targets[i].setWorkerId(command.targets[i].id);
    targets[i].setAddress(command.targets[i].address);
    targets[i].setPublicKey(target_keys[i]);
  }
  return sender.Send(command.source, message);
}

Status SendVerifyBlock(WorkerSender& sender, std::string_view worker_id, uint64_t request_id,
                       const BlockId& block) {
  capnp::MallocMessageBuilder message;
  proto::Request::Builder request = message.initRoot<proto::Request>();
  request.setId(request_id);
  proto::VerifyBlock::Builder verify = request.initVerifyBlock();
  verify.setBlockId(block.ToString());
  verify.setReportedBad(true);
  return sender.Send(worker_id, message);
}

Status SendDecommission(WorkerSender& sender, std::string_view worker_id) {
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Request>().setDecommission();
  return sender.Send(worker_id, message);
}

Status SendShutdown(WorkerSender& sender, std::string_view worker_id) {
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Request>().setShutdown();
  return sender.Send(worker_id, message);
}

}  // namespace bm
