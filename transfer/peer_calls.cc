#include "transfer/peer_calls.h"

#include <exception>
#include <utility>

namespace bm {

Status WithPeer(const Status& error, const std::string& peer) {
  const char* what = error.code() == StatusCode::kUnavailable ? " unreachable: " : ": ";
  return Status(error.code(), peer + what + error.message());
}

namespace {

Result<IncomingMessage> NamePeer(const std::string& peer, Result<IncomingMessage> reply) {
  if (!reply.ok()) return WithPeer(reply.status(), peer);
  return reply;
}

}  // namespace

Result<IncomingMessage> CallPeer(RpcChannel& channel, std::chrono::milliseconds base_timeout,
                                 const std::string& peer, capnp::MallocMessageBuilder& request,
                                 std::vector<zmq::message_t> payload,
                                 std::chrono::milliseconds extra) {
  channel.set_timeout(base_timeout + extra);
  Result<IncomingMessage> reply = channel.Call(request, std::move(payload));
  channel.set_timeout(base_timeout);
  return NamePeer(peer, std::move(reply));
}

Result<IncomingMessage> AwaitPeer(RpcChannel& channel, std::chrono::milliseconds base_timeout,
                                  const std::string& peer, uint64_t request,
                                  std::chrono::milliseconds extra) {
  channel.set_timeout(base_timeout + extra);
  Result<IncomingMessage> reply = channel.Await(request);
  channel.set_timeout(base_timeout);
  return NamePeer(peer, std::move(reply));
}

Status UnexpectedReply(const std::string& peer, const char* expected) {
  return InternalError(peer + " answered with something other than '" + expected + "'");
}

Result<std::unique_ptr<RpcChannel>> ConnectChannel(zmq::context_t& context,
                                                   const std::string& address,
                                                   std::chrono::milliseconds timeout,
                                                   const ChannelSecurity& security) {
  try {
    return std::make_unique<RpcChannel>(context, address, timeout, security);
  } catch (const std::exception& e) {
    return InvalidArgumentError("cannot connect to '" + address + "': " + e.what());
  }
}

}  // namespace bm
