#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "blockmgr/status.h"

namespace bm {

// Client requests the master's loop answers later: an acquireCompute waiting behind a lease
// holder, a removal waiting for its workers, a block report waiting until the copies its put
// replaced are gone. Each is kept under a ticket, the opaque id ComputeLeases and
// RemovalCoordinator know it by, until it is taken to be answered.
//
// Not thread-safe: owned by the master's loop.
class ParkedRequests {
 public:
  // Whom to answer: the client's routing id on the master's socket, and the request's id.
  struct Parked {
    zmq::message_t client;
    uint64_t request_id = 0;
  };

  // Keeps a copy of the client's routing id; returns the request's ticket.
  uint64_t Park(const zmq::message_t& client, uint64_t request_id) {
    const uint64_t ticket = next_ticket_++;
    parked_.emplace(ticket, Parked{zmq::message_t(client.data(), client.size()), request_id});
    return ticket;
  }

  // The parked request, forgotten. The ticket must be parked (each is answered once).
  Parked Take(uint64_t ticket) {
    auto it = parked_.find(ticket);
    BM_CHECK(it != parked_.end());
    Parked parked = std::move(it->second);
    parked_.erase(it);
    return parked;
  }

  size_t size() const { return parked_.size(); }

 private:
  std::unordered_map<uint64_t, Parked> parked_;  // by ticket
  uint64_t next_ticket_ = 1;
};

}  // namespace bm
