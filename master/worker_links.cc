#include "master/worker_links.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "common/net/socket_drain.h"

namespace bm {

Result<zmq::socket_t> WorkerLinks::Connect(const std::string& address,
                                           const std::string& public_key) {
  try {
    zmq::socket_t socket(context_, zmq::socket_type::dealer);
    BM_RETURN_IF_ERROR(ConfigureClientSocket(socket, ChannelSecurity{keys_, public_key}, address));
    socket.set(zmq::sockopt::sndtimeo, 0);  // never block the loop on a slow worker
    socket.connect(address);
    return Result<zmq::socket_t>(std::move(socket));
  } catch (const zmq::error_t& e) {
    return InvalidArgumentError("cannot connect to worker address '" + address + "': " + e.what());
  }
}

void WorkerLinks::Add(const std::string& worker_id, zmq::socket_t link,
                      const std::string& public_key) {
  links_.insert_or_assign(worker_id, std::move(link));
  if (!public_key.empty()) keys_by_worker_.insert_or_assign(worker_id, public_key);
}

void WorkerLinks::Remove(std::string_view worker_id) {
  if (auto link = links_.find(worker_id); link != links_.end()) links_.erase(link);
  if (auto key = keys_by_worker_.find(worker_id); key != keys_by_worker_.end()) {
    keys_by_worker_.erase(key);
  }
  if (auto id = unsettled_.find(worker_id); id != unsettled_.end()) unsettled_.erase(id);
}

const std::string& WorkerLinks::Key(std::string_view worker_id) const {
  static const std::string kNone;
  auto found = keys_by_worker_.find(worker_id);
  return found == keys_by_worker_.end() ? kNone : found->second;
}

Status WorkerLinks::Send(std::string_view worker_id, capnp::MessageBuilder& message) {
  auto link = links_.find(worker_id);
  if (link == links_.end()) {
    return NotFoundError("no link to worker '" + std::string(worker_id.substr(0, 200)) + "'");
  }
  unsettled_.insert(link->first);
  if (epoch_ != 0) message.getRoot<proto::Request>().setEpoch(epoch_);
  return SendMessage(link->second, nullptr, message);
}

void WorkerLinks::AddPollFds(std::vector<pollfd>& fds) {
  polled_.clear();
  for (auto& [id, link] : links_) {
    fds.push_back({link.get(zmq::sockopt::fd), POLLIN, 0});
    polled_.emplace_back(&id, &link);
  }
}

void WorkerLinks::UnsettleAll() {
  for (const auto& [id, link] : links_) unsettled_.insert(id);
}

void WorkerLinks::DrainReady(std::span<const pollfd> fds, const ReplyHandler& handle) {
  BM_CHECK(fds.size() == polled_.size());
  for (size_t i = 0; i < polled_.size(); ++i) {
    if (fds[i].revents != 0 || unsettled_.contains(*polled_[i].first)) {
      Drain(*polled_[i].first, *polled_[i].second, handle);
    }
  }
}

void WorkerLinks::DrainUnsettled(const ReplyHandler& handle) {
  const std::vector<std::string> ids(unsettled_.begin(), unsettled_.end());
  for (const std::string& id : ids) {
    auto link = links_.find(id);
    if (link != links_.end()) Drain(link->first, link->second, handle);
  }
}

void WorkerLinks::Drain(const std::string& worker_id, zmq::socket_t& link,
                        const ReplyHandler& handle) {
  const Drained drained = DrainSocket(link, max_messages_per_wake_, [&] {
    Result<IncomingMessage> received = ReceiveMessage(link, /*has_routing_id=*/false);
    if (!received.ok()) {
      spdlog::warn("bad message from worker {}: {}", worker_id, received.status().ToString());
    } else {
      handle(worker_id, received.value());
    }
    return true;
  });
  if (drained == Drained::kSettled) {
    unsettled_.erase(worker_id);
  } else {
    unsettled_.insert(worker_id);
  }
}

}  // namespace bm
