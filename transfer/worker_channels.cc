#include "transfer/worker_channels.h"

#include <utility>

#include "common/net/transport.h"
#include "transfer/peer_calls.h"

namespace bm {

WorkerChannels::WorkerChannels(zmq::context_t& context, Result<CurveKeys> keys,
                               std::chrono::milliseconds timeout, LearnKeys learn_keys)
    : context_(context),
      keys_(keys.ok() ? *keys : CurveKeys{}),
      keys_status_(keys.status()),
      timeout_(timeout),
      learn_keys_(std::move(learn_keys)) {}

WorkerChannels::~WorkerChannels() = default;

void WorkerChannels::Trust(const std::string& address, const std::string& public_key) {
  if (public_key.empty()) return;
  std::string& known = keys_by_address_[address];
  if (known != public_key) {
    // A channel made for another key must not be reused for this one.
    channels_.erase(address);
    known = public_key;
  }
}

Result<std::string> WorkerChannels::Key(const std::string& address) {
  BM_RETURN_IF_ERROR(keys_status_);
  if (!keys_.enabled()) return std::string();
  auto known = keys_by_address_.find(address);
  if (known != keys_by_address_.end()) return known->second;
  if (learn_keys_) {
    BM_RETURN_IF_ERROR(learn_keys_());
    known = keys_by_address_.find(address);
    if (known != keys_by_address_.end()) return known->second;
  }
  return PermissionDeniedError("the master vouches for no worker at " + address +
                               ", so its key is unknown");
}

Result<RpcChannel*> WorkerChannels::Channel(const std::string& address) {
  BM_ASSIGN_OR_RETURN(std::string key, Key(address));
  std::unique_ptr<RpcChannel>& slot = channels_[address];
  if (!slot) {
    Result<std::unique_ptr<RpcChannel>> made =
        ConnectChannel(context_, address, timeout_, ChannelSecurity{keys_, key});
    if (!made.ok()) {
      channels_.erase(address);
      return made.status();
    }
    slot = std::move(made).value();
  }
  return slot.get();
}

}  // namespace bm
