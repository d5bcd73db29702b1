#pragma once

#include <zmq.hpp>

namespace bm {

// How an event loop that sleeps in ::poll on ZeroMQ sockets' ZMQ_FDs reads them (the master's
// and the worker's loops both do; zmq::poll would check every socket's ZMQ_EVENTS, a getpid and
// a mailbox poll each, before and after every sleep). A ZMQ_FD is edge-triggered and any
// operation on its socket, a send too, may consume its signal, so a socket is "settled" (safe
// to sleep on) only once ZMQ_EVENTS has shown no message waiting, with nothing sent on it
// since. A loop polls with a zero timeout while any of its sockets is unsettled.
enum class Drained {
  kSettled,      // no message waiting
  kMoreWaiting,  // stopped at the bound: read again before sleeping
  kStopped,      // the handler asked to stop (say, the socket is being replaced)
};

// Calls `handle_one()`, which receives exactly one message and returns false to stop, while
// `socket` has a message waiting, at most `max_messages` times so one busy peer cannot starve
// the rest of the loop.
template <typename HandleOne>
Drained DrainSocket(zmq::socket_t& socket, int max_messages, HandleOne&& handle_one) {
  for (int i = 0; i < max_messages; ++i) {
    if (!(socket.get(zmq::sockopt::events) & ZMQ_POLLIN)) return Drained::kSettled;
    if (!handle_one()) return Drained::kStopped;
  }
  return Drained::kMoreWaiting;
}

}  // namespace bm
