#pragma once

// Calls on an RpcChannel whose failures say which peer they came from, shared by the client's
// components (the master's and the workers' channels alike). Internal to the client libraries.

#include <capnp/message.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "blockmgr/status.h"
#include "common/net/transport.h"
#include "common/security/curve_keys.h"

namespace bm {

// `error` with the peer named in front; its code is kept.
Status WithPeer(const Status& error, const std::string& peer);

// Calls `channel` with `extra` added to `base_timeout` for this call only.
Result<IncomingMessage> CallPeer(RpcChannel& channel, std::chrono::milliseconds base_timeout,
                                 const std::string& peer, capnp::MallocMessageBuilder& request,
                                 std::vector<zmq::message_t> payload = {},
                                 std::chrono::milliseconds extra = {});

// Awaits the reply to `request` (RpcChannel::Send) as CallPeer does.
Result<IncomingMessage> AwaitPeer(RpcChannel& channel, std::chrono::milliseconds base_timeout,
                                  const std::string& peer, uint64_t request,
                                  std::chrono::milliseconds extra = {});

// The error for a reply of the wrong kind.
Status UnexpectedReply(const std::string& peer, const char* expected);

// A channel to `address`; kInvalidArgument for an address ZeroMQ cannot connect to, so a bad
// address fails a call instead of throwing.
Result<std::unique_ptr<RpcChannel>> ConnectChannel(zmq::context_t& context,
                                                   const std::string& address,
                                                   std::chrono::milliseconds timeout,
                                                   const ChannelSecurity& security);

}  // namespace bm
