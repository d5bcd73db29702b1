#include "client/lease_renewer.h"

#include <capnp/message.h>
#include <spdlog/spdlog.h>

#include <utility>

#include "client/master_client.h"
#include "common/core/protocol.h"
#include "common/net/transport.h"

namespace bm {

LeaseRenewer::LeaseRenewer(std::unique_ptr<MasterClient> master, BlockId block, uint64_t token,
                           std::chrono::milliseconds interval)
    : block_(block), token_(token), interval_(interval), master_(std::move(master)) {
  thread_ = std::thread([this] { Run(); });
}

LeaseRenewer::~LeaseRenewer() { Stop(); }

void LeaseRenewer::Stop() {
  {
    MutexLock lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LeaseRenewer::Run() {
  const std::string block = block_.ToString();
  MutexLock lock(mutex_);
  while (true) {
    const auto renew_at = std::chrono::steady_clock::now() + interval_;
    while (!stop_ && lock.WaitUntil(wake_, renew_at)) {
    }
    if (stop_) return;
    lock.Unlock();
    capnp::MallocMessageBuilder message;
    proto::ComputeLease::Builder renew = message.initRoot<proto::Request>().initRenewCompute();
    renew.setBlockId(block);
    renew.setToken(token_);
    Result<IncomingMessage> reply = master_->Call(message);
    lock.Lock();
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
