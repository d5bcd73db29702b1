#pragma once

// A fake master for the worker's tests (its server and its MasterLink): answers the requests a
// worker sends its master the way PROTOCOL.md says, records them, and can be told to misbehave.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "common/core/protocol.h"
#include "common/net/transport.h"

namespace bm::testing {

constexpr auto kFakeMasterAwait = std::chrono::seconds(10);

// What the fake master saw of one request from the worker.
struct SeenRequest {
  enum Kind { kRegister, kHeartbeat, kReport, kOther } kind = kOther;
  std::string worker_id;
  std::string address;
  uint64_t memory_used = 0;
  std::chrono::steady_clock::time_point arrived{};  // when the fake master received it
  // register: every block held; report: every update in order (removed or not).
  std::vector<std::pair<std::string, bool>> blocks;

  bool Has(const std::string& block, bool removed = false) const {
    return std::find(blocks.begin(), blocks.end(), std::make_pair(block, removed)) != blocks.end();
  }
};

// A master that answers registerWorker / heartbeat / reportBlocks the way PROTOCOL.md says,
// records what it is sent, and can be told to misbehave. Its socket lives on its own thread;
// the test thread reads what it recorded and changes its behaviour under the mutex.
class FakeMaster {
 public:
  explicit FakeMaster(zmq::context_t& context) : socket_(context, zmq::socket_type::router) {
    ConfigureSocket(socket_);
    socket_.bind("tcp://127.0.0.1:*");
    endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
    thread_ = std::thread([this] { Loop(); });
  }
  ~FakeMaster() {
    stop_ = true;
    thread_.join();
  }

  const std::string& endpoint() const { return endpoint_; }

  // Reports are recorded but not answered until ReleaseHeldReports().
  void HoldReports(bool hold) {
    std::lock_guard lock(mu_);
    hold_reports_ = hold;
  }
  void ReleaseHeldReports() {
    std::lock_guard lock(mu_);
    release_held_ = true;
  }
  // Records requests but answers none (a hung master).
  void SetSilent(bool silent) {
    std::lock_guard lock(mu_);
    silent_ = silent;
  }
  // The heartbeat interval its registration replies ask for (from the next registration on).
  void SetHeartbeatInterval(std::chrono::milliseconds interval) {
    std::lock_guard lock(mu_);
    heartbeat_ms_ = static_cast<uint32_t>(interval.count());
  }
  // As after a master restart: heartbeats and reports get unknownWorker until re-registration.
  void ForgetWorkers() {
    std::lock_guard lock(mu_);
    registered_.clear();
  }
  // Registrations are answered with an error (a master that will not take this worker now).
  void RefuseRegistrations(bool refuse) {
    std::lock_guard lock(mu_);
    refuse_registrations_ = refuse;
  }
  // Answers every request with notLeader naming `leader` (a standby); empty: leads again.
  void ActAsStandbyOf(std::string leader) {
    std::lock_guard lock(mu_);
    standby_of_ = std::move(leader);
  }

  // Waits until `pred(seen requests)` holds; false after kFakeMasterAwait.
  template <typename Pred>
  bool WaitFor(Pred pred) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, kFakeMasterAwait, [&] { return pred(seen_); });
  }
  std::vector<SeenRequest> Requests() {
    std::lock_guard lock(mu_);
    return seen_;
  }
  size_t CountOf(SeenRequest::Kind kind) {
    std::lock_guard lock(mu_);
    return std::count_if(seen_.begin(), seen_.end(),
                         [&](const SeenRequest& r) { return r.kind == kind; });
  }

 private:
  void Loop() {
    while (!stop_) {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(5));
      {
        std::lock_guard lock(mu_);
        if (release_held_) {
          for (auto& [peer, id] : held_)
            Reply(peer, id, [](proto::Reply::Builder r) { r.setOk(); });
          held_.clear();
          release_held_ = false;
        }
      }
      if (item.revents & ZMQ_POLLIN) HandleOne();
    }
  }

  template <typename Fill>
  void Reply(const zmq::message_t& peer, uint64_t id, Fill fill) {
    capnp::MallocMessageBuilder builder;
    proto::Reply::Builder reply = builder.initRoot<proto::Reply>();
    reply.setId(id);
    fill(reply);
    ASSERT_TRUE(SendMessage(socket_, &peer, builder).ok());
  }

  void HandleOne() {
    Result<IncomingMessage> received = ReceiveMessage(socket_, true);
    ASSERT_TRUE(received.ok()) << received.status().ToString();
    proto::Request::Reader request = received->request();
    SeenRequest seen;
    seen.arrived = std::chrono::steady_clock::now();
    switch (request.which()) {
      case proto::Request::REGISTER_WORKER: {
        auto reg = request.getRegisterWorker();
        seen.kind = SeenRequest::kRegister;
        seen.worker_id = reg.getWorkerId();
        seen.address = reg.getAddress();
        seen.memory_used = reg.getStats().getMemoryUsed();
        for (auto block : reg.getBlocks()) seen.blocks.emplace_back(block.getBlockId(), false);
        break;
      }
      case proto::Request::HEARTBEAT:
        seen.kind = SeenRequest::kHeartbeat;
        seen.worker_id = request.getHeartbeat().getWorkerId();
        seen.memory_used = request.getHeartbeat().getStats().getMemoryUsed();
        break;
      case proto::Request::REPORT_BLOCKS: {
        auto report = request.getReportBlocks();
        seen.kind = SeenRequest::kReport;
        seen.worker_id = report.getWorkerId();
        seen.memory_used = report.getStats().getMemoryUsed();
        for (auto update : report.getUpdates()) {
          seen.blocks.emplace_back(update.getStatus().getBlockId(), update.getRemoved());
        }
        break;
      }
      default:
        break;
    }
    const uint64_t id = request.getId();
    const zmq::message_t& peer = *received->routing_id();
    std::lock_guard lock(mu_);
    seen_.push_back(seen);
    changed_.notify_all();
    if (silent_) return;
    if (!standby_of_.empty()) {
      Reply(peer, id,
            [&](proto::Reply::Builder r) { r.initNotLeader().setLeaderAddress(standby_of_); });
      return;
    }
    switch (seen.kind) {
      case SeenRequest::kRegister:
        if (refuse_registrations_) {
          Reply(peer, id, [](proto::Reply::Builder r) {
            SetError(r.initError(), UnavailableError("not taking workers now"));
          });
          return;
        }
        registered_.insert(seen.worker_id);
        Reply(peer, id, [&](proto::Reply::Builder r) {
          r.initRegistered().setHeartbeatIntervalMs(heartbeat_ms_);
        });
        return;
      case SeenRequest::kHeartbeat:
      case SeenRequest::kReport:
        if (!registered_.contains(seen.worker_id)) {
          Reply(peer, id, [](proto::Reply::Builder r) {
            SetError(r.initError(), Status(StatusCode::kUnknownWorker, "who are you?"));
          });
        } else if (seen.kind == SeenRequest::kReport && hold_reports_) {
          held_.emplace_back(zmq::message_t(peer.data(), peer.size()), id);
        } else {
          Reply(peer, id, [](proto::Reply::Builder r) { r.setOk(); });
        }
        return;
      case SeenRequest::kOther:
        Reply(peer, id, [](proto::Reply::Builder r) {
          SetError(r.initError(), InvalidArgumentError("not a master request"));
        });
        return;
    }
  }

  zmq::socket_t socket_;  // used only by thread_ after construction
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<std::pair<zmq::message_t, uint64_t>> held_;  // used only by thread_

  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<SeenRequest> seen_;      // guarded by mu_
  std::set<std::string> registered_;   // guarded by mu_
  bool hold_reports_ = false;          // guarded by mu_
  bool release_held_ = false;          // guarded by mu_
  bool silent_ = false;                // guarded by mu_
  bool refuse_registrations_ = false;  // guarded by mu_
  std::string standby_of_;             // guarded by mu_
  uint32_t heartbeat_ms_ = 100;        // guarded by mu_
};

}  // namespace bm::testing
