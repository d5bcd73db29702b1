#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "blockmgr/storage_level.h"
#include "common/core/clock.h"
#include "common/core/metrics.h"

namespace bm {

class BlockIndex;
class LostBlocks;
class ShuffleService;
class WorkerRegistry;

// What a dataset registered about an RDD (registerRdd).
struct RddDescription {
  std::string name;
  StorageLevel level;
  uint64_t total_partitions;
};

// The master's request kinds as its metrics name them (label `op`).
enum class MasterOp : uint8_t {
  kRegisterWorker,
  kHeartbeat,
  kReportBlocks,
  kGetLocations,
  kListWorkers,
  kListBlocks,
  kListRdds,
  kRemoveBlocks,
  kRemoveRdd,
  kRegisterRdd,
  kAcquireCompute,
  kRenewCompute,
  kReleaseCompute,
  kDecommission,
  kPing,
  kOther,
};
inline constexpr size_t kMasterOpCount = static_cast<size_t>(MasterOp::kOther) + 1;
std::string_view MasterOpName(MasterOp op);

// A worker joining or leaving, for the health page.
struct WorkerEvent {
  int64_t unix_ms;
  std::string worker_id;
  std::string what;  // "registered", "re-registered", "dropped (no heartbeat)", "decommissioned"
};

// Counters of the master's event loop: plain integers owned by the loop thread, copied into
// status snapshots (never read from another thread in place).
struct MasterCounters {
  struct PerOp {
    uint64_t ok = 0;
    uint64_t errors = 0;
    // Time to handle the request on the loop (for deferred ones, up to the hand-off).
    LatencyHistogram latency;
  };
  std::array<PerOp, kMasterOpCount> ops{};
  uint64_t workers_registered = 0;
  uint64_t workers_dropped = 0;
  uint64_t blocks_lost = 0;     // blocks whose last copy went with a dropped worker
  uint64_t copies_started = 0;  // re-replication and decommission copies sent to workers
  // Copies reported with a block digest other than their version's (both known): not listed,
  // and their workers told to verify them (PROTOCOL.md, "Integrity").
  uint64_t digest_mismatch_reports = 0;
  uint64_t journal_writes = 0;
  uint64_t journal_failures = 0;
  uint64_t lease_grants = 0;
  uint64_t lease_waits = 0;  // acquireCompute requests parked behind another holder
  // Refusals (keys on): requests on a connection beyond its key's connection limit,
  // registrations beyond its key's rate, and handshakes the ZAP handler refused (all of them,
  // and those of keys at their connection limit; copied from it when a status is served).
  uint64_t connections_refused = 0;
  uint64_t registrations_refused = 0;
  uint64_t handshakes_refused = 0;
  uint64_t handshakes_refused_at_limit = 0;
  std::deque<WorkerEvent> recent_events;  // newest last, at most kMaxEvents

  static constexpr size_t kMaxEvents = 50;
  void RecordRequest(MasterOp op, bool ok, Duration elapsed);
  void RecordWorkerEvent(std::string worker_id, std::string what);
};

// Read-only access to the loop's state for status queries, valid during one
// MasterStatusHook::Serve call only.
// Where this master stands among several (standby masters; docs/standby-masters.md "Standby
// masters").
struct MasterRole {
  bool elected = false;  // it runs in an election (--zookeeper)
  bool leader = true;    // it leads (always, without an election)
  uint64_t epoch = 0;    // the leader's epoch (its own when it leads)
  uint64_t elections_won = 0;
  std::string leader_address;     // a standby: whom it takes for the leader
  uint64_t standbys_in_sync = 0;  // a leader: standbys holding all it acknowledged

  bool operator==(const MasterRole&) const = default;
};

// A tenant's bytes and quotas (TenantRegistry; 0 quota: none), for status pages and metrics.
struct TenantUsage {
  std::string tenant;
  uint64_t memory_bytes = 0;
  uint64_t disk_bytes = 0;
  uint64_t memory_quota = 0;
  uint64_t disk_quota = 0;
  uint64_t reserved_bytes = 0;
  uint64_t datasets = 0;
};

struct MasterView {
  const BlockIndex& index;
  const WorkerRegistry& registry;
  const std::map<uint64_t, RddDescription>& rdds;
  const MasterCounters& counters;
  size_t under_replicated;
  size_t copies_in_flight;
  size_t leases_held;
  bool journaled;
  TimePoint now;
  MasterRole role{};
  // Every tenant's usage, computed when called (a pass over the tenants' blocks).
  std::function<std::vector<TenantUsage>()> tenants{};
  const LostBlocks* lost = nullptr;          // null: none kept
  const ShuffleService* shuffles = nullptr;  // null: none
};

// How the master's event loop lets an observer (the HTTP status service) read its state
// without sharing it: the loop polls wake_fd() with its sockets and, when it fires, calls
// Serve() on its own thread, where the observer runs the queries waiting for it. Serve must
// do bounded work (a page, a summary) and never block.
class MasterStatusHook {
 public:
  virtual ~MasterStatusHook() = default;
  virtual int wake_fd() const = 0;
  virtual void Serve(const MasterView& view) = 0;
};

}  // namespace bm
