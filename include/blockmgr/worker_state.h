#pragma once

// A worker's state in the cluster: what the master's registry keeps, what it reports on the
// wire (WorkerState in schema/messages.capnp), and what clients, bmctl and the status pages
// show. A master's registry moves a worker through it as master/worker_registry.h describes.

namespace bm {

enum class WorkerState {
  kActive,
  kUnconfirmed,      // listed again after a master restart, not yet heard from since
  kDecommissioning,  // draining: takes no new blocks, its blocks are copied elsewhere, it exits
  kUnknown,          // a state this client does not know (a newer master's); masters never set it
};

// The state's name as bmctl, the status pages, JSON and metrics labels show it: "active",
// "unconfirmed", "decommissioning", "unknown".
inline const char* WorkerStateName(WorkerState state) {
  switch (state) {
    case WorkerState::kActive:
      return "active";
    case WorkerState::kUnconfirmed:
      return "unconfirmed";
    case WorkerState::kDecommissioning:
      return "decommissioning";
    case WorkerState::kUnknown:
      break;
  }
  return "unknown";
}

}  // namespace bm
