#include "client/lease_renewer.h"

#include <capnp/message.h>
#include <spdlog/spdlog.h>

#include <utility>

#include "common/protocol.h"
#include "common/transport.h"

namespace bm {

LeaseRenewer::LeaseRenewer(zmq::context_t& context, std::string master_address, BlockId block,
                           uint64_t token, std::chrono::milliseconds interval,
                           std::chrono::milliseconds timeout, ChannelSecurity security)
    : block_(block), token_(token), interval_(interval) {
  thread_ = std::thread(
      [this, &context, master_address = std::move(master_address), timeout,
       security = std::move(security)] { Run(context, master_address, security, timeout); });
}

LeaseRenewer::~LeaseRenewer() { Stop(); }

void LeaseRenewer::Stop() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LeaseRenewer::Run(zmq::context_t& context, std::string master_address,
                       ChannelSecurity security, std::chrono::milliseconds timeout) {
  RpcChannel master(context, std::move(master_address), timeout, std::move(security));
  const std::string block = block_.ToString();
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, interval_, [this] { return stop_; })) {
    lock.unlock();
    capnp::MallocMessageBuilder message;
    proto::ComputeLease::Builder renew = message.initRoot<proto::Request>().initRenewCompute();
    renew.setBlockId(block);
    renew.setToken(token_);
    Result<IncomingMessage> reply = master.Call(message);
    lock.lock();
    if (reply.ok()) continue;
    if (reply.status().code() == StatusCode::kAborted) {
      spdlog::debug("lost the compute lease on {}: {}", block, reply.status().message());
      lost_.store(true);
      return;
    }
    spdlog::debug("renewing the compute lease on {} failed: {}", block, reply.status().ToString());
  }
}

}  // namespace bm
