#include "worker/client_replies.h"

#include <spdlog/spdlog.h>

#include "common/core/protocol.h"
#include "common/net/transport.h"

namespace bm {

void ClientReplies::Send(const zmq::message_t& peer, capnp::MallocMessageBuilder& reply,
                         std::vector<zmq::message_t> payload) {
  unsettled_ = true;
  for (const zmq::message_t& frame : payload) counters_.bytes_read += frame.size();
  Status sent = SendMessage(router_, &peer, reply, std::move(payload));
  if (!sent.ok()) spdlog::debug("reply not sent: {}", sent.ToString());
}

void ClientReplies::SendError(const zmq::message_t& peer, uint64_t id, const Status& status) {
  capnp::MallocMessageBuilder reply;
  proto::Reply::Builder root = reply.initRoot<proto::Reply>();
  root.setId(id);
  SetError(root.initError(), status);
  Send(peer, reply);
}

void ClientReplies::SendOk(const zmq::message_t& peer, uint64_t id) {
  capnp::MallocMessageBuilder reply;
  proto::Reply::Builder root = reply.initRoot<proto::Reply>();
  root.setId(id);
  root.setOk();
  Send(peer, reply);
}

void ClientReplies::SendPutReply(const zmq::message_t& peer, uint64_t id, Tier tier,
                                 bool committed) {
  capnp::MallocMessageBuilder reply;
  proto::Reply::Builder root = reply.initRoot<proto::Reply>();
  root.setId(id);
  proto::PutReply::Builder put = root.initPut();
  put.setTier(ToProto(tier));
  put.setCommitted(committed);
  Send(peer, reply);
}

}  // namespace bm
