#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "blockmgr/status.h"
#include "blockmgr/worker_state.h"
#include "common/core/clock.h"
#include "common/core/worker_stats.h"

namespace bm {

// A worker's lifecycle as the master sees it:
//   (restored from the journal at start) -> unconfirmed --(registers)--> active
//   (registers)                          -> active
//   active / unconfirmed --(silent past the heartbeat timeout)--> removed
// An unconfirmed worker's locations are served, but its heartbeats and reports are refused as
// unknown, so that it registers again with a full report that replaces them. A drained worker is
// kDecommissioning (blockmgr/worker_state.h); a registry never holds kUnknown.
// How many WorkerState values there are (for tables indexed by state).
inline constexpr size_t kWorkerStateCount = static_cast<size_t>(WorkerState::kUnknown) + 1;

// Placement labels a worker declares (empty = none).
struct WorkerLabels {
  std::string host{};
  std::string rack{};
};

struct WorkerRecord {
  std::string id;
  std::string address;  // the worker's data port
  WorkerStats stats{};
  TimePoint last_seen{};  // last registration, heartbeat or block report; restore time if none
  WorkerLabels labels{};
  WorkerState state = WorkerState::kActive;
};

// The live workers. A worker is live from its registration until it is removed (dropped for
// silence, see Expired()); registering a known id replaces its record.
//
// Not thread-safe: owned by the master's event loop. The clock is borrowed and must outlive
// the registry.
class WorkerRegistry {
 public:
  explicit WorkerRegistry(const Clock& clock) : clock_(clock) {}

  // Adds the worker as active, or replaces the record of a known id. Returns true when it
  // replaced one.
  bool Register(std::string id, std::string address, const WorkerStats& stats,
                WorkerLabels labels = {});
  // Adds a worker known from the master's journal, unconfirmed, as last seen now (so it is
  // dropped after the heartbeat timeout unless it registers again).
  void Restore(std::string id, std::string address, WorkerLabels labels);
  // The worker is alive (a heartbeat or block report) with these stats. kUnknownWorker when
  // it is not registered, or unconfirmed (it must register again).
  Status Touch(std::string_view id, const WorkerStats& stats);
  // Any message from the worker (a reply to a command, a block report) shows it alive, as a
  // heartbeat does: a worker whose link keeps delivering is never dropped for a heartbeat
  // queued behind its own traffic. An unconfirmed (restored) worker is not confirmed by it: it
  // must register again.
  void HeardFrom(std::string_view id);
  // Returns false when the worker was not registered.
  bool Remove(std::string_view id);
  // Starts draining the worker. kNotFound when it is not registered; kUnavailable while it is
  // unconfirmed (it must register again first).
  Status Decommission(std::string_view id);

  const WorkerRecord* Find(std::string_view id) const;
  bool Contains(std::string_view id) const { return Find(id) != nullptr; }
  // Workers not seen for longer than `timeout`, sorted by id.
  std::vector<std::string> Expired(Duration timeout) const;
  // Every worker, sorted by id.
  std::vector<WorkerRecord> List() const;
  size_t size() const { return workers_.size(); }

 private:
  const Clock& clock_;
  std::map<std::string, WorkerRecord, std::less<>> workers_;
};

}  // namespace bm
