#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "blockmgr/status.h"
#include "common/core/loop_queries.h"
#include "common/core/metrics.h"
#include "common/core/worker_stats.h"

namespace bm {

class BlockManager;

// The worker's request kinds as its metrics name them (label `op`).
enum class WorkerOp : uint8_t {
  kPut,
  kGet,
  kGetMany,
  kContains,
  kRemove,
  kReplicate,
  kDecommission,
  kShutdown,
  kPing,
  kShufflePush,
  kShuffleRead,
  kOther,
};
inline constexpr size_t kWorkerOpCount = static_cast<size_t>(WorkerOp::kOther) + 1;
std::string_view WorkerOpName(WorkerOp op);

// Outcomes as the `result` label names them: ok, not_found, out_of_space, unavailable,
// invalid (the request was wrong) or error.
inline constexpr size_t kRequestResultCount = 6;
std::string_view RequestResultName(size_t result);
size_t RequestResultOf(const Status& status);

// Counters of the worker's event loop: plain integers owned by the loop thread, copied into a
// status snapshot for readers.
struct WorkerCounters {
  struct PerOp {
    std::array<uint64_t, kRequestResultCount> results{};
    LatencyHistogram latency;
  };
  std::array<PerOp, kWorkerOpCount> ops{};
  uint64_t bytes_read = 0;     // block bytes sent to clients and peers
  uint64_t bytes_written = 0;  // block bytes received in puts
  // Refusals by a limit per key (keys on): requests on connections beyond the key's connection
  // limit, and uploads beyond its upload limit.
  uint64_t connections_refused = 0;
  uint64_t uploads_refused_per_key = 0;
  // Put pieces whose bytes did not match their sender's digest (refused, resent).
  uint64_t checksum_failures_transit = 0;
  // Memory copies found corrupt on a verify (dropped), and copies a reader reported bad that
  // were intact here (the bytes went bad between this worker and the reader).
  uint64_t checksum_failures_memory = 0;
  uint64_t checksum_failures_read_transit = 0;
  // Whole-block reads by origin (docs/storage.md "Same-host reads"): by readers on this host (over
  // the local-read socket, or over TCP from one of this host's own addresses), and by others.
  uint64_t block_reads_local = 0;
  uint64_t block_reads_remote = 0;
  // Bytes handed to readers over the local-read socket (mapped or inline).
  uint64_t local_read_bytes = 0;
  // Local-read connections and requests refused (another uid, no valid ticket, a role that
  // may not read, a malformed request).
  uint64_t local_reads_refused = 0;
  // Gets readers on this host served themselves from a small-block arena, as they reported.
  uint64_t local_arena_reads = 0;
  // Shuffles (README "Shuffles"): pieces and bytes pushed and kept (repeats not counted), and
  // bytes sent to readers.
  uint64_t shuffle_pieces_pushed = 0;
  uint64_t shuffle_bytes_pushed = 0;
  uint64_t shuffle_bytes_read = 0;
  uint64_t shuffle_bytes_flushed = 0;    // written to partition files
  uint64_t shuffle_bytes_forwarded = 0;  // sent on to replicas, as the primary of _2 streams
  // Pages sent over the local-read socket (their bytes count in shuffle_bytes_read), by where
  // their bytes were: in the reply's trailer, a sealed region, the partition file.
  uint64_t shuffle_local_pages_trailer = 0;
  uint64_t shuffle_local_pages_region = 0;
  uint64_t shuffle_local_pages_file = 0;

  void RecordRequest(WorkerOp op, const Status& status, Duration elapsed);
};

// Read-only access to the worker loop's state for status queries, valid during one Serve call.
struct WorkerView {
  const std::string& worker_id;
  const BlockManager& blocks;
  const WorkerCounters& counters;
  bool registered;             // with the master
  std::string master_refusal;  // why the master refuses this worker's key; empty if it does not
  const LatencyHistogram& heartbeat_delays;  // how late heartbeats went out
  Duration worst_heartbeat_delay;
  bool decommissioning;
  size_t uploads_in_progress;
  // Same-host reads: connected readers, regions they hold pinned, pins dropped by age.
  size_t local_readers = 0;
  size_t local_pins = 0;
  uint64_t local_pins_expired = 0;
  size_t local_arena_blocks = 0;  // copies held in the small-block arenas
};

// The worker's state at one moment, for /metrics and /readyz. Small and immutable.
struct WorkerSnapshot {
  std::string worker_id;
  bool registered = false;
  std::string master_refusal;
  LatencyHistogram heartbeat_delays;
  Duration worst_heartbeat_delay{};
  bool decommissioning = false;
  uint64_t memory_capacity = 0;
  uint64_t memory_used = 0;
  uint64_t disk_capacity = 0;  // 0 = unlimited
  uint64_t disk_used = 0;
  std::vector<DiskStats> disks;  // each --disk-dir (WorkerStats::disks)
  uint64_t memory_blocks = 0;
  uint64_t disk_blocks = 0;
  uint64_t evictions = 0;
  uint64_t spills = 0;
  uint64_t spill_backlog_bytes = 0;  // evicted, waiting for their spill
  uint64_t corrupt_spills = 0;       // evicted copies that failed their digests on the way to disk
  uint64_t storage_jobs = 0;         // disk work queued or running on the storage thread
  uint64_t corrupt_disk_blocks = 0;  // BlockStore::corrupt_count
  uint64_t scrubbed_bytes = 0;       // disk block bytes the scrubber re-read and verified
  uint64_t uploads_in_progress = 0;
  uint64_t pinned_bytes = 0;  // BlockManager::pinned_bytes
  uint64_t local_readers = 0;
  uint64_t local_pins = 0;
  uint64_t local_pins_expired = 0;
  uint64_t local_arena_blocks = 0;
  WorkerCounters counters;
};

WorkerSnapshot BuildWorkerSnapshot(const WorkerView& view);
std::string WorkerMetricsText(const WorkerSnapshot& snapshot);

// How the worker's event loop lets the HTTP status service read its state (see
// MasterStatusHook): the loop polls wake_fd() and calls Serve() on its own thread.
class WorkerStatusHook {
 public:
  virtual ~WorkerStatusHook() = default;
  virtual int wake_fd() const = 0;
  virtual void Serve(const WorkerView& view) = 0;
};

// The worker's status service: answers /metrics, /healthz and /readyz from snapshots the loop
// builds on request (cheap: no per-block work).
class WorkerStatusService final : public WorkerStatusHook {
 public:
  static Result<std::unique_ptr<WorkerStatusService>> Create();

  int wake_fd() const override { return queries_->wake_fd(); }
  void Serve(const WorkerView& view) override { queries_->Serve(view); }

  // A snapshot built now by the loop; kUnavailable if it does not answer in time.
  Result<WorkerSnapshot> Snapshot();

 private:
  explicit WorkerStatusService(std::unique_ptr<LoopQueries<WorkerView>> queries)
      : queries_(std::move(queries)) {}

  const std::unique_ptr<LoopQueries<WorkerView>> queries_;
};

class HttpServer;
// /healthz, /readyz (registered with the master, its store open) and /metrics.
void AddWorkerStatusRoutes(HttpServer& server, WorkerStatusService& service);

}  // namespace bm
