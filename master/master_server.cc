#include "master/master_server.h"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdint>
#include <utility>

#include "common/net/transport.h"
#include "master/journal.h"
#include "master/master_loop.h"

namespace bm {

// ---- MasterServer ----

Result<std::unique_ptr<MasterServer>> MasterServer::Create(zmq::context_t& context,
                                                           MasterOptions options,
                                                           const Clock& clock) {
  if (options.heartbeat_timeout <= Duration::zero()) {
    return InvalidArgumentError("heartbeat timeout must be positive");
  }
  if (options.remove_timeout <= Duration::zero()) {
    return InvalidArgumentError("remove timeout must be positive");
  }
  if (options.leadership != nullptr && options.state_dir.empty()) {
    return InvalidArgumentError(
        "a master in an election needs a --state-dir: its journal is where it follows the "
        "leader's metadata as a standby");
  }
  std::unique_ptr<MasterJournal> journal;
  if (!options.state_dir.empty()) {
    BM_ASSIGN_OR_RETURN(journal, MasterJournal::Open(options.state_dir));
  }
  zmq::socket_t router(context, zmq::socket_type::router);
  ConfigureServerSocket(router, options.keys);
  try {
    router.bind(options.listen);
  } catch (const zmq::error_t& e) {
    std::string message = "cannot listen on '" + options.listen + "': " + e.what();
    if (e.num() == EADDRINUSE || e.num() == EADDRNOTAVAIL) return UnavailableError(message);
    return InvalidArgumentError(message);
  }
  std::string endpoint = router.get(zmq::sockopt::last_endpoint);
  // Unique within the context while the router lives: its handle's address.
  std::string control_address =
      "inproc://bm-master-control-" + std::to_string(reinterpret_cast<uintptr_t>(router.handle()));
  zmq::socket_t control(context, zmq::socket_type::pull);
  ConfigureSocket(control);
  control.bind(control_address);
  const bool standby_first = options.leadership != nullptr;
  auto loop = std::make_unique<Loop>(context, std::move(options), clock, std::move(router),
                                     std::move(control), std::move(journal));
  BM_RETURN_IF_ERROR(loop->StartKeyLimits(context));
  // A standby loads its journal when it is elected, not now: until then it follows the leader.
  if (!standby_first) BM_RETURN_IF_ERROR(loop->RestoreFromJournal());
  return std::unique_ptr<MasterServer>(
      new MasterServer(context, std::move(endpoint), std::move(control_address), std::move(loop)));
}

MasterServer::MasterServer(zmq::context_t& context, std::string endpoint,
                           std::string control_address, std::unique_ptr<Loop> loop)
    : context_(context),
      endpoint_(std::move(endpoint)),
      control_address_(std::move(control_address)),
      loop_(std::move(loop)) {}

MasterServer::~MasterServer() = default;

void MasterServer::Run() { loop_->Run(stop_requested_); }

void MasterServer::Stop() {
  stop_requested_.store(true);
  Wake();
}

bool MasterServer::demoted() const { return loop_->demoted(); }

void MasterServer::Wake() {
  // Wake the loop now rather than at its next timer. If this fails the loop still looks within
  // a second (a standby: within kLeadershipCheckInterval).
  try {
    zmq::socket_t poke(context_, zmq::socket_type::push);
    poke.set(zmq::sockopt::linger, 100);
    poke.connect(control_address_);
    (void)poke.send(zmq::message_t(), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    spdlog::debug("could not wake the master loop: {}", e.what());
  }
}

}  // namespace bm
